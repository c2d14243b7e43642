"""SHA-256 for kiln's cache keys, without loading OpenSSL.

`hashlib` loads OpenSSL's library on import (~3 ms, a large part of a first compile's imports
when nothing else in the process needs it); CPython's own SHA-256 module gives the same
digests. Falls back to hashlib where that module is absent.
"""

from __future__ import annotations

try:
    from _sha256 import sha256  # CPython 3.11
except ImportError:  # pragma: no cover (other interpreters and versions)
    try:
        from _sha2 import sha256  # CPython 3.12 and later
    except ImportError:
        from hashlib import sha256

__all__ = ["sha256", "hexdigest"]


def hexdigest(data: str | bytes) -> str:
    """The SHA-256 of `data` (str: its UTF-8 bytes) in hexadecimal."""
    return sha256(data.encode() if isinstance(data, str) else data).hexdigest()

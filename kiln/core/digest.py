"""SHA-256 for kiln's cache keys, without loading OpenSSL for small inputs.

`hashlib` loads OpenSSL's library on import (~3 ms, a large part of a first compile's imports
when nothing else in the process needs it); CPython's own SHA-256 module gives the same
digests. OpenSSL's is ~5x faster on large inputs (1.7 GB/s against 0.3 GB/s on this project's
machines), so inputs of LARGE_BYTES or more, such as a program's captured constants, go
through hashlib. Falls back to hashlib where CPython's module is absent.
"""

from __future__ import annotations

try:
    from _sha256 import sha256  # CPython 3.11
except ImportError:  # pragma: no cover (other interpreters and versions)
    try:
        from _sha2 import sha256  # CPython 3.12 and later
    except ImportError:
        from hashlib import sha256

__all__ = ["sha256", "hexdigest", "LARGE_BYTES"]

#: Inputs at least this long are hashed by hashlib (OpenSSL).
LARGE_BYTES = 1 << 20


def hexdigest(data: str | bytes) -> str:
    """The SHA-256 of `data` (str: its UTF-8 bytes) in hexadecimal."""
    if isinstance(data, str):
        data = data.encode()
    if len(data) >= LARGE_BYTES:
        import hashlib

        return hashlib.sha256(data).hexdigest()
    return sha256(data).hexdigest()

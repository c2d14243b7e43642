"""The persistent object cache ($KILN_CACHE_DIR): compiled programs that survive the process.

Machine code read from disk runs without further checks, so an entry is loaded only if it
verifies completely. Each entry is one file, `<key>.kiln`:

    magic (8 bytes) | header length (4 bytes, little-endian) | header (JSON) | payload

The header names the format version, kiln's, llvmlite's and LLVM's versions, the target
(triple, CPU, features), the entry's key, the sizes of the payload's two parts and the
payload's SHA-256. Compiled code stores its object file, then its optimized LLVM IR; a
program's build records (kiln.runtime.program_cache) store the records alone. Keys are
derived from content and kiln's source digest (`source_digest`), so that code derived by one
version of kiln's compiler is never found by another. An entry that is truncated, corrupted,
written by another version or for another CPU is ignored, counted and logged; the caller
compiles afresh and the new entry replaces it. Entries are written to a temporary file in the
same directory and renamed into place, so concurrent processes only ever see whole entries.
The directory is created user-only, and one that others may write to is not trusted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import struct
import tempfile
import threading
import warnings
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

from kiln.core import digest

logger = logging.getLogger("kiln")

MAGIC = b"KILNOBJ\x00"
#: 2: entries are keyed by what kiln derived from a program (the fingerprint of its kernel IR)
#: and by kiln's source digest.
FORMAT_VERSION = 2
_LENGTH = struct.Struct("<I")
#: Headers are small; anything claiming more is corrupt.
_MAX_HEADER = 1 << 16


def _kiln_version() -> str:
    from kiln import __version__  # the package is initialized by the time anything compiles

    return __version__


_source_files: list | None = None
_source_digests: dict = {}


def _sources() -> list[tuple[str, int, int]]:
    """(package-relative path, size, modification time in ns) of kiln's source files, read
    once per process."""
    global _source_files
    if _source_files is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        skip = len(root) + len(os.sep)  # (paths under root: the relative path by slicing)
        files = []
        pending = [root]
        while pending:
            directory = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        pending.append(entry.path)
                elif entry.name.endswith(".py"):
                    name = entry.path[skip:].replace(os.sep, "/")
                    try:
                        info = entry.stat()
                        files.append((name, info.st_size, info.st_mtime_ns))
                    except OSError:
                        files.append((name, -1, -1))
        _source_files = sorted(files)
    return _source_files


def source_digest(prefixes: tuple[str, ...] = ("",)) -> str:
    """A digest of kiln's source files whose paths (relative to the package, with "/")
    start with one of `prefixes` (default: all of them): their names, sizes and
    modification times, as they were when first read (what Python's own bytecode cache
    trusts to tell a changed source file).

    Entries are keyed by what kiln derived from a program (kernel IR, plans), not by the
    machine code's input alone, so an entry is only valid for the very code that wrote it:
    callers put this digest in their keys, and a changed compiler under the same version
    number never finds its predecessor's entries (which stay valid for that one)."""
    found = _source_digests.get(prefixes)
    if found is None:
        hasher = digest.sha256()
        for name, size, modified in _sources():
            if name.startswith(prefixes):
                hasher.update(f"{name}\0{size}\0{modified}\0".encode())
        found = _source_digests[prefixes] = hasher.hexdigest()
    return found


class CacheStats:
    """What the disk cache did in this process."""

    def __init__(self):
        self.hits = self.misses = self.rejected = self.writes = self.write_errors = 0
        self.reasons: dict = {}

    def as_dict(self) -> dict:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "rejected": self.rejected,
            "writes": self.writes,
            "write_errors": self.write_errors,
            "rejected_by_reason": dict(self.reasons),
        }


class CorruptEntry(Exception):
    """An entry that does not verify; the message says which check failed."""


class DiskCache:
    """Verified, atomically written cache entries in one user-only directory."""

    def __init__(self, directory: Path, identity: dict):
        self.directory = directory
        self.identity = dict(identity)
        self.stats = CacheStats()
        self._lock = threading.Lock()

    # --- reading ---------------------------------------------------------------------------
    def load(self, key: str) -> tuple[bytes, str | None] | None:
        """(object bytes, optimized IR) for key, or None if absent or not verifiable."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self._count("misses")
            return None
        except OSError as err:
            self._reject(path, f"unreadable: {err.strerror or err}")
            return None
        try:
            return self._verify(data, key)
        except CorruptEntry as err:
            self._reject(path, str(err))
            return None

    def _verify(self, data: bytes, key: str) -> tuple[bytes, str | None]:
        if len(data) < len(MAGIC) + _LENGTH.size or not data.startswith(MAGIC):
            raise CorruptEntry("bad magic")
        (header_length,) = _LENGTH.unpack_from(data, len(MAGIC))
        start = len(MAGIC) + _LENGTH.size
        if header_length > _MAX_HEADER or start + header_length > len(data):
            raise CorruptEntry("bad header length")
        import json  # (here: a process without a cache directory never loads it)

        try:
            header = json.loads(data[start : start + header_length].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise CorruptEntry("unreadable header") from None
        if not isinstance(header, dict):
            raise CorruptEntry("unreadable header")
        for name, expected in self.identity.items():
            if header.get(name) != expected:
                raise CorruptEntry(f"written for another {name}")
        if header.get("key") != key:
            raise CorruptEntry("key mismatch")
        sizes = header.get("sizes")
        payload = data[start + header_length :]
        if (
            not isinstance(sizes, list)
            or len(sizes) != 2
            or not all(isinstance(s, int) and s >= 0 for s in sizes)
            or sum(sizes) != len(payload)
        ):
            raise CorruptEntry("payload length mismatch")
        if digest.hexdigest(payload) != header.get("sha256"):
            raise CorruptEntry("checksum mismatch")
        object_bytes = payload[: sizes[0]]
        ir_text = payload[sizes[0] :].decode("utf-8", "replace") if sizes[1] else None
        self._count("hits")
        return object_bytes, ir_text

    # --- writing ---------------------------------------------------------------------------
    def store(self, key: str, object_bytes: bytes, llvm_ir: str | None) -> None:
        """Write an entry atomically (temporary file + rename); failures are only counted."""
        ir_bytes = (llvm_ir or "").encode("utf-8")
        payload = object_bytes + ir_bytes
        header = dict(
            self.identity,
            key=key,
            sizes=[len(object_bytes), len(ir_bytes)],
            sha256=digest.hexdigest(payload),
        )
        import json

        header_bytes = json.dumps(header, sort_keys=True).encode("utf-8")
        path = self._path(key)
        try:
            descriptor, temporary = tempfile.mkstemp(
                prefix=f".{key[:16]}.", suffix=".tmp", dir=self.directory
            )
            try:
                with os.fdopen(descriptor, "wb") as out:
                    out.write(MAGIC + _LENGTH.pack(len(header_bytes)) + header_bytes + payload)
                os.replace(temporary, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except OSError as err:
            self._count("write_errors")
            logger.warning("kiln: could not write the disk cache entry %s (%s)", path, err)
            return
        self._count("writes")

    # --- bookkeeping -----------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.kiln"

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def _reject(self, path: Path, reason: str) -> None:
        with self._lock:
            self.stats.rejected += 1
            self.stats.reasons[reason] = self.stats.reasons.get(reason, 0) + 1
        logger.warning(
            "kiln: ignoring the disk cache entry %s (%s); recompiling and rewriting it",
            path,
            reason,
        )


def identity(target) -> dict:
    """What an entry must have been written for: versions and the target."""
    return {
        "format": FORMAT_VERSION,
        "kiln": _kiln_version(),
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        "triple": target.triple,
        "cpu": target.cpu_name,
        "features": target.features,
    }


_warned_paths: set[str] = set()


def usable_directory(path: str | os.PathLike) -> Path | None:
    """The cache directory, created user-only if missing; None (after one warning per path)
    if it cannot serve as one: not a directory, not writable, or writable by other users."""
    directory = Path(path).expanduser()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.stat()
        if not stat.S_ISDIR(info.st_mode):
            raise NotADirectoryError("not a directory")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise PermissionError("owned by another user")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise PermissionError("writable by other users (chmod 700 it to use it)")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as err:
        reason = err.strerror or str(err)
        if str(directory) not in _warned_paths:
            _warned_paths.add(str(directory))
            warnings.warn(
                f"kiln: the disk cache directory {str(directory)!r} (KILN_CACHE_DIR) "
                f"cannot be used ({reason}); compiling without the disk cache.",
                RuntimeWarning,
                stacklevel=3,
            )
        return None
    return directory

"""Compiling and loading kiln's kernel library (kiln.codegen.llvm.gemm_library).

One library module per (target, kernel, dtype) is made at most once per process: read from
kiln/_prebuilt, where `make` builds the host's modules next to the package's bytecode (build),
else from the disk cache when KILN_CACHE_DIR has it, else compiled by LLVM. The compiler asks
for a module when it lowers a product that will call it (prefetch_one: a stored module is read
at once, a missing one compiles on the engine's helper thread while fusion and emission go
on); linking an object that calls one makes sure it is loaded (ensure), waiting for it or
making it then (a program decoded from the disk cache is not lowered again). Its symbol is
then registered with LLVM's symbol table for every later object. A loaded module lives as long
as the process: objects bind its addresses when they link.
"""

from __future__ import annotations

import concurrent.futures
import os
import stat
import threading
from pathlib import Path

import numpy as np
from llvmlite import binding as llvm

from kiln.core import digest
from kiln.codegen.llvm import gemm_library, llvm_pipeline, objects
from kiln.codegen.llvm import target as target_module
from kiln.runtime import disk_cache, llvm_threads

#: Where `python -m kiln.runtime.kernel_library` (run by make with the package's bytecode)
#: leaves the host's library modules, built before any program runs.
PREBUILT = Path(__file__).resolve().parents[1] / "_prebuilt"

_lock = threading.Lock()
#: (target cache tag, kernel, dtype) -> the loaded module (kept for the life of the process)
_loaded: dict = {}
#: (target cache tag, kernel, dtype) -> (future of its object bytes, the asking process's id)
_pending: dict = {}


def _key(target: target_module.Target, kernel: str, dtype) -> tuple[str, str, np.dtype]:
    return target.cache_tag, kernel, np.dtype(dtype)


def _compile(text: str, target: target_module.Target) -> bytes:
    machine = target.create_machine()
    # (The lean pipeline: the kernels are vectorized by hand, and O3's unrolling made them no
    # faster, bigger and 2.5 times slower to compile.)
    return llvm_pipeline.compile_private(text, machine, "lean")[1]


def _cache_key(target: target_module.Target, kernel: str, dtype) -> str:
    """A library module's key in a store: what it is and for which target, with the digest
    of the code generator's sources (which decide its IR), so no IR is made to look it up."""
    from kiln.runtime import engine

    what = f"library {kernel} {np.dtype(dtype).name} {target.cache_tag}"
    return engine.Engine._disk_key(digest.hexdigest(what))


def _prebuilt_cache(target: target_module.Target) -> disk_cache.DiskCache | None:
    """The store of library modules built ahead of time (see build), if there is one that
    only this user can write."""
    try:
        info = PREBUILT.stat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return None
    return disk_cache.DiskCache(PREBUILT, disk_cache.identity(target))


def _stored(target: target_module.Target, kernel: str, dtype):
    """(the module's object file or None, its key, the disk cache or None): the object from
    the store built ahead of time or the disk cache, where either has it."""
    from kiln.runtime import engine

    stores = [_prebuilt_cache(target), engine._disk_cache_for(target)]
    key = _cache_key(target, kernel, dtype) if any(stores) else None
    for store in stores:
        entry = store.load(key) if store is not None else None
        if entry is not None:
            return entry[0], key, stores[1]
    return None, key, stores[1]


def _object(target: target_module.Target, kernel: str, dtype) -> bytes:
    """A library module's object file: built ahead of time, else from the disk cache, else
    compiled now (and stored in the disk cache)."""
    object_bytes, key, cache = _stored(target, kernel, dtype)
    if object_bytes is None:
        object_bytes = _compile(str(gemm_library.module(target, kernel, dtype)), target)
        if cache is not None:
            cache.store(key, object_bytes, None)
    return object_bytes


def build(directory: Path = None, target: target_module.Target | None = None) -> int:
    """Build every library module for a target (default: the host) into a store (default:
    PREBUILT), ahead of any program, as an installed package ships its compiled parts; a
    module already there is kept. Returns how many were built."""
    directory = PREBUILT if directory is None else Path(directory)
    target = target or target_module.host_target()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    store = disk_cache.DiskCache(directory, disk_cache.identity(target))
    built = 0
    for kernel in gemm_library.KERNELS:
        for dtype in gemm_library.DTYPES:
            key = _cache_key(target, kernel, dtype)
            if store.load(key) is None:
                text = str(gemm_library.module(target, kernel, dtype))
                store.store(key, _compile(text, target), None)
                built += 1
    return built


def prefetch_one(target: target_module.Target, kernel: str, dtype) -> None:
    """Make a library module's object ready, unless it is loaded or on its way: read now when
    stored, else compiled on the engine's helper thread. The compiler calls this
    (gemm_library.expect) when it plans a product that will call the library, so that a
    compile overlaps the rest of fusion and emission."""
    key = _key(target, kernel, dtype)
    with _lock:
        pending = _pending.get(key)
        if key in _loaded or (pending is not None and pending[1] == os.getpid()):
            return
        # A stored module is read here, at once: the helper would wait for the GIL (held by
        # this thread's Python work) after each of the reads' system calls.
        object_bytes, _, _ = _stored(target, kernel, dtype)
        if object_bytes is not None:
            future = concurrent.futures.Future()
            future.set_result(object_bytes)
        else:
            future = llvm_threads.side_thread().submit(_object, target, kernel, dtype)
        _pending[key] = (future, os.getpid())


def ensure(names, target: target_module.Target | None = None) -> None:
    """Load the library modules that define any of these symbols, called by an object
    compiled for `target` (unknown names are left for the caller's unresolved-symbol
    check)."""
    for name in names:
        found = gemm_library.parse(name, target)
        if found is not None:
            _load(*found)


def _load(target: target_module.Target, kernel: str, dtype) -> None:
    from kiln.runtime import native_library

    key = _key(target, kernel, dtype)
    with _lock:
        if key in _loaded:
            return
        pending = _pending.pop(key, None)
        if pending is not None and pending[1] == os.getpid():
            object_bytes = pending[0].result()
        else:  # (never asked for, or asked for by the parent of this forked process)
            object_bytes = _object(target, kernel, dtype)
        needed = objects.undefined_symbols(object_bytes)
        missing = [name for name in needed if not llvm.address_of_symbol(name)]
        if missing:
            raise native_library.UnresolvedSymbolError(f"kiln's kernel library needs {missing}")
        library = native_library.Library(object_bytes, target)
        with native_library.SYMBOLS_LOCK:
            name = gemm_library.symbol(kernel, dtype, target)
            llvm.add_symbol(name, library.address(name))
        _loaded[key] = library


gemm_library.prefetcher = prefetch_one


if __name__ == "__main__":
    count = build()
    print(f"kiln: {count} kernel library module(s) built into {PREBUILT}" if count else "", end="")

"""Compiling and loading kiln's kernel library (kiln.codegen.llvm.gemm_library).

One library module per (target, kernel, dtype) is compiled at most once per process: from the disk
cache when KILN_CACHE_DIR has it, else by LLVM. The engine asks for it as soon as it has
emitted a program that calls it (prefetch: the compile runs on the engine's helper thread
while this thread goes on emitting), and at the latest when an object that calls it is linked
(ensure). Its symbols are then registered with LLVM's symbol table for every later object.
A loaded library lives as long as the process: objects bind its addresses when they link.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading

import numpy as np
from llvmlite import binding as llvm

from kiln.codegen.llvm import gemm_library, llvm_pipeline, objects
from kiln.codegen.llvm import target as target_module
from kiln.runtime import llvm_threads

_lock = threading.Lock()
#: (target cache tag, dtype) -> the loaded library (kept for the life of the process)
_loaded: dict = {}
#: (target cache tag, dtype) -> (future of its object bytes, id of the process that asked)
_pending: dict = {}
_SYMBOL = re.compile(re.escape(gemm_library.PREFIX) + r"\w+")


def _key(target: target_module.Target, kernel: str, dtype) -> tuple[str, str, np.dtype]:
    return target.cache_tag, kernel, np.dtype(dtype)


def _object(target: target_module.Target, kernel: str, dtype) -> bytes:
    """The library's object file: from the disk cache, else compiled (and stored there)."""
    from kiln.runtime import engine

    text = str(gemm_library.module(target, kernel, dtype))
    cache = engine._disk_cache_for(target)
    if cache is not None:
        key = engine.Engine._disk_key(
            "library " + hashlib.sha256((text + target.cache_tag).encode()).hexdigest()
        )
        entry = cache.load(key)
        if entry is not None:
            return entry[0]
    machine = llvm_pipeline.create_machine(target.triple, target.cpu_name, target.features)
    # (The lean pipeline: the kernels are vectorized by hand, and O3's unrolling made them no
    # faster, bigger and 2.5 times slower to compile.)
    _, object_bytes = llvm_pipeline.compile_private(text, machine, "lean")
    if cache is not None:
        cache.store(key, object_bytes, None)
    return object_bytes


def prefetch(ir_text: str | None) -> None:
    """Start compiling every library module that an emitted module's text calls and that is
    neither loaded nor on its way (see prefetch_one)."""
    if not ir_text or gemm_library.PREFIX not in ir_text:
        return
    for name in set(_SYMBOL.findall(ir_text)):
        found = gemm_library.parse(name)
        if found is not None:
            prefetch_one(*found)


def prefetch_one(target: target_module.Target, kernel: str, dtype) -> None:
    """Start compiling a library module on the engine's helper thread, unless it is loaded or
    on its way. The compiler calls this (gemm_library.expect) when it plans a product that
    will call the library, so the compile overlaps the rest of fusion and emission."""

    key = _key(target, kernel, dtype)
    with _lock:
        pending = _pending.get(key)
        if key in _loaded or (pending is not None and pending[1] == os.getpid()):
            return
        future = llvm_threads.side_thread().submit(_object, target, kernel, dtype)
        _pending[key] = (future, os.getpid())


def ensure(names) -> None:
    """Load the library modules that define any of these symbols (unknown names are left for
    the caller's unresolved-symbol check)."""
    for name in names:
        found = gemm_library.parse(name)
        if found is not None:
            _load(*found)


def _load(target: target_module.Target, kernel: str, dtype) -> None:
    from kiln.runtime import engine

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
            raise engine.UnresolvedSymbolError(f"kiln's kernel library needs {missing}")
        library = engine._Library(object_bytes, target)
        with engine._SYMBOLS_LOCK:
            name = gemm_library.symbol(kernel, dtype, target)
            llvm.add_symbol(name, library.address(name))
        _loaded[key] = library


gemm_library.prefetcher = prefetch_one

"""kiln's kernel library: product kernels compiled once per target, kernel and dtype (one LLVM
module each), called by name.

A kernel that takes its extents at run time serves every program, so it is compiled once per
process (and kept in the disk cache) rather than specialized and optimized again inside each
program's module: a transformer block's gradient has some twenty small products, and their
specialized kernels were a fifth of its LLVM time. Generated code declares the library's
functions and calls them like BLAS; the engine (kiln.runtime.engine) compiles the library of
a target the first time an object needs it, often on its helper thread while the program is
still being emitted (prefetch), and registers its symbols before linking.

A library's symbols carry a tag of the target it was compiled for (its cache tag), so
programs compiled for different targets in one process never share machine code.
"""

from __future__ import annotations

import threading

import numpy as np
from llvmlite import ir

from kiln.core import digest
from kiln.codegen.llvm import packed_gemm, small_gemm
from kiln.codegen.llvm import target as target_module
from kiln.codegen.llvm import types as T

#: Every library symbol starts so: f"{PREFIX}{kernel}_f{bits}_{tag}".
PREFIX = "kiln_lib_"
#: kernel name -> (argument types, definer(module, symbol, dtype))
KERNELS = {
    # (a, b, c, m, n, k, lda, ldb, ldc): b small, read in place
    "small_gemm": ([T.PTR] * 3 + [T.I64] * 6, small_gemm.define),
    # (m, n, k, a, lda, b, ldb, c, ldc), BLAS's order: any extents, b packed by panels
    "packed_gemm": (
        [T.I64] * 3 + [T.PTR, T.I64] * 3,
        lambda module, name, dtype: packed_gemm.define(module, dtype, name),
    ),
    # the same with a stored transposed (k x m, row stride lda)
    "packed_gemm_ta": (
        [T.I64] * 3 + [T.PTR, T.I64] * 3,
        lambda module, name, dtype: packed_gemm.define(module, dtype, name, trans_a=True),
    ),
}
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

#: Called with (target, kernel, dtype) when the compiler plans a product that will call the
#: library (kiln.runtime.kernel_library sets it: it starts compiling that module meanwhile).
prefetcher = None

_lock = threading.Lock()
#: target tag -> Target, for every target a symbol was made for in this process
_targets: dict[str, target_module.Target] = {}


def _tag(target: target_module.Target) -> str:
    return digest.hexdigest(target.cache_tag)[:12]


def symbol(kernel: str, dtype, target: target_module.Target | None = None) -> str:
    """The library symbol of a kernel for a dtype on a target (default: the current one)."""
    target = target or target_module.current_target()
    tag = _tag(target)
    with _lock:
        _targets.setdefault(tag, target)
    return f"{PREFIX}{kernel}_f{np.dtype(dtype).itemsize * 8}_{tag}"


def expect(kernel: str, dtype) -> None:
    """Say that a program being built for the current target will call this kernel for this
    dtype (so that its library module can be compiled meanwhile)."""
    if prefetcher is not None and np.dtype(dtype) in DTYPES:
        prefetcher(target_module.current_target(), kernel, np.dtype(dtype))


def call(builder: ir.IRBuilder, kernel: str, dtype, arguments: list) -> None:
    """Emit a call of a library kernel (declared in the builder's module on first use)."""
    name = symbol(kernel, dtype)
    function = builder.module.globals.get(name)
    if function is None:
        function = ir.Function(
            builder.module, ir.FunctionType(T.VOID, KERNELS[kernel][0]), name=name
        )
        function.attributes.add("nounwind")
    builder.call(function, arguments)


def parse(
    name: str, target: target_module.Target | None = None
) -> tuple[target_module.Target, str, np.dtype] | None:
    """(target, kernel, dtype) of a library symbol, None if it is not one (or names a target
    that is neither one a symbol was made for in this process nor `target`, the one the
    object calling it was compiled for: an object read from the disk cache calls the library
    in a process that never emitted a call to it)."""
    if not name.startswith(PREFIX):
        return None
    kernel, bits, tag = name[len(PREFIX) :].rsplit("_", 2)
    with _lock:
        if target is not None and tag not in _targets and _tag(target) == tag:
            _targets[tag] = target
        target = _targets.get(tag)
    dtype = {"f32": DTYPES[0], "f64": DTYPES[1]}.get(bits)
    if target is None or dtype is None or kernel not in KERNELS:
        return None
    return target, kernel, dtype


def module(target: target_module.Target, kernel: str, dtype) -> ir.Module:
    """The library module of one kernel and dtype for a target (external linkage)."""
    with target_module.compiling_for(target):
        library = ir.Module(name=f"kiln_library_{kernel}_f{np.dtype(dtype).itemsize * 8}")
        library.triple = target.triple
        library.data_layout = target.data_layout
        KERNELS[kernel][1](library, symbol(kernel, dtype, target), dtype)
        return library

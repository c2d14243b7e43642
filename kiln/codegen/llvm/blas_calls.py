"""Matrix products in generated code: calls into the OpenBLAS that scipy bundles.

A kir.MatMul statement becomes one call of `kiln_cblas_sgemm` / `kiln_cblas_dgemm`, which
take cblas's row-major arguments by value (order, transposes, m, n, k, alpha, a, lda, b, ldb,
beta, c, ldc; 32-bit integers). Those names are registered with LLVM's symbol table, bound to
scipy's `scipy_cblas_?gemm`, before an object calling them is linked (kiln.runtime.engine),
so objects from the disk cache link in a new process the same way. Products whose rhs is
small (at most 1 MiB, n and k static) skip BLAS for kiln's own loop, small_gemm, which kiln's
kernel library (gemm_library) holds.

Threads: kiln splits a large product into row (or column) blocks across its own thread pool,
each block one single-threaded BLAS call, as it does its other kernels. So kiln sets the
bundled OpenBLAS to one thread when it first links a product. That library is scipy's own
copy (NumPy's BLAS, which NumPy and kiln's eager products use, is a separate one and is left
alone); scipy.linalg calls made in the same process afterwards also run on one BLAS thread.
kiln's batched LAPACK impls (kiln/primitives/lapack_batched.py) pin it the same way and never
hand threads back, since kiln's threads may call it concurrently.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
from llvmlite import ir

from kiln.codegen.llvm import gemm_library, small_gemm
from kiln.codegen.llvm import types as T
from kiln.primitives import blas

__all__ = ["SYMBOLS", "available", "register", "emit_gemm", "packed_fits", "packed_kernel"]

#: kiln's symbol -> (scipy's symbol, scalar type)
SYMBOLS = {
    "kiln_cblas_sgemm": ("scipy_cblas_sgemm", np.dtype(np.float32)),
    "kiln_cblas_dgemm": ("scipy_cblas_dgemm", np.dtype(np.float64)),
    "kiln_cblas_sgemv": ("scipy_cblas_sgemv", np.dtype(np.float32)),
    "kiln_cblas_dgemv": ("scipy_cblas_dgemv", np.dtype(np.float64)),
}
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112

_lock = threading.Lock()
_library = None
_searched = False
_registered = False


def _find_library():
    """scipy's bundled OpenBLAS (ctypes handle) when it has the cblas calls, else None."""
    global _library, _searched
    with _lock:
        if not _searched:
            _searched = True
            lib = blas.scipy_openblas()
            if lib is not None and all(hasattr(lib, theirs) for theirs, _ in SYMBOLS.values()):
                _library = lib
        return _library


def available() -> bool:
    """Whether generated code can call BLAS in this process."""
    return _find_library() is not None


def register() -> None:
    """Bind kiln's gemm symbols for the linker and pin the library to one thread (once)."""
    global _registered
    from llvmlite import binding as llvm

    lib = _find_library()
    if lib is None:
        raise RuntimeError("kiln: scipy's bundled OpenBLAS was not found; no BLAS calls")
    with _lock:
        if _registered:
            return
        blas.pin_scipy_openblas()
        for ours, (theirs, _) in SYMBOLS.items():
            llvm.add_symbol(ours, ctypes.cast(getattr(lib, theirs), ctypes.c_void_p).value)
        _registered = True


def _declare(builder: ir.IRBuilder, name: str, arguments: list) -> ir.Function:
    function = builder.module.globals.get(name)
    if function is None:
        function = ir.Function(builder.module, ir.FunctionType(T.VOID, arguments), name=name)
        function.attributes.add("nounwind")
    return function


def packed_fits(dtype, trans_a: bool, trans_b: bool, m, n) -> bool:
    """Whether a product runs as kiln's packed gemm (packed_gemm, in the kernel library)
    rather than BLAS's: float32 (float64 was only level with OpenBLAS), b not transposed (a
    may be: a weight gradient's xᵀ @ g), and at least a register block of rows and a vector of
    columns (or extents known only at run time, the chunks of a split product); m and n are
    static ints or None."""
    if np.dtype(dtype) != np.float32 or trans_b:
        return False
    lanes, rows = small_gemm._layout(np.dtype(dtype))
    return (m is None or m >= rows) and (n is None or n >= lanes)


def packed_kernel(trans_a: bool) -> str:
    """The kernel library's packed gemm for a product whose lhs is (not) transposed."""
    return "packed_gemm_ta" if trans_a else "packed_gemm"


def emit_gemm(
    builder: ir.IRBuilder, dtype, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, shape=None
):
    """Emit the call c = op(a) @ op(b) (row-major; m, n, k as i64 values; a, b, c pointers).

    `shape`: the static (m, n) where known (None entries otherwise). A product with one row or
    one column is a matrix-vector product: gemv reads the matrix once, about three times
    faster than gemm with n = 1 here. A product with a small b of static extents
    (small_gemm.fits) runs as kiln's own register-blocked loop instead, which reads b in place
    rather than packing it on every call; other untransposed float32 products with enough rows
    and columns (packed_fits) run as kiln's packed gemm, which beat OpenBLAS's sgemm here."""
    dtype = np.dtype(dtype)
    scalar = T.FLOAT if dtype == np.float32 else T.DOUBLE
    prefix = "kiln_cblas_s" if dtype == np.float32 else "kiln_cblas_d"
    i32 = T.I32

    def small(value):
        return builder.trunc(value, i32) if value.type != i32 else value

    def constant(v):
        return ir.Constant(i32, v)

    static_m, static_n = shape or (None, None)
    static_k = k.constant if isinstance(k, ir.Constant) else None
    extents = [v if v.type == T.I64 else builder.sext(v, T.I64) for v in (m, n, k)]
    strides = [ir.Constant(T.I64, v) for v in (lda, ldb, ldc)]
    if small_gemm.fits(dtype, trans_a, trans_b, static_m, static_n, static_k, ldb):
        gemm_library.call(builder, "small_gemm", dtype, [a, b, c] + extents + strides)
        return
    if packed_fits(dtype, trans_a, trans_b, static_m, static_n):
        arguments = extents + [a, strides[0], b, strides[1], c, strides[2]]
        gemm_library.call(builder, packed_kernel(trans_a), dtype, arguments)
        return
    if static_n == 1 or static_m == 1:
        if static_n == 1:  # c[:, 0] = op(a) @ (column of op(b))
            matrix, ld, transposed, rows, cols = a, lda, trans_a, m, k
            vector, increment = b, (1 if trans_b else ldb)
            out_increment = ldc
        else:  # c[0, :] = (row of op(a)) @ op(b) = op(b)ᵀ @ row
            matrix, ld, transposed, rows, cols = b, ldb, not trans_b, n, k
            vector, increment = a, (lda if trans_a else 1)
            out_increment = 1
        # In memory the matrix is rows x cols when not transposed, cols x rows when it is.
        stored_rows, stored_cols = (cols, rows) if transposed else (rows, cols)
        gemv = _declare(
            builder,
            prefix + "gemv",
            [i32] * 4 + [scalar, T.PTR, i32, T.PTR, i32, scalar, T.PTR, i32],
        )
        builder.call(
            gemv,
            [
                constant(_ROW_MAJOR),
                constant(_TRANS if transposed else _NO_TRANS),
                small(stored_rows),
                small(stored_cols),
                ir.Constant(scalar, 1.0),
                matrix,
                constant(ld),
                vector,
                constant(increment),
                ir.Constant(scalar, 0.0),
                c,
                constant(out_increment),
            ],
        )
        return
    function = _declare(
        builder, prefix + "gemm", [i32] * 6 + [scalar, T.PTR, i32, T.PTR, i32, scalar, T.PTR, i32]
    )
    builder.call(
        function,
        [
            constant(_ROW_MAJOR),
            constant(_TRANS if trans_a else _NO_TRANS),
            constant(_TRANS if trans_b else _NO_TRANS),
            small(m),
            small(n),
            small(k),
            ir.Constant(scalar, 1.0),
            a,
            constant(lda),
            b,
            constant(ldb),
            ir.Constant(scalar, 0.0),
            c,
            constant(ldc),
        ],
    )

"""kiln's packed, cache-blocked gemm kernel (kiln/codegen/llvm/packed_gemm.py).

The function is compiled once per codegen target and dtype (conftest runs every test per
target) and checked against NumPy in float64: extents that leave tails in every dimension,
contractions over several panels, results wider than one panel, single rows, operands and
result inside larger matrices. b small enough for small_gemm is read in place, larger ones are
copied: both paths run. Then the order of the sums (one in-order fused chain per element,
across panels) and the module-level contract (one definition, no outside calls).
"""

from __future__ import annotations

import concurrent.futures
import ctypes

import numpy as np
import pytest
from llvmlite import ir

from kiln.codegen.llvm import objects, packed_gemm, target
from tests._testing import jit_module

_ARGUMENTS = [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.c_int64] * 3
_COMPILED: dict = {}


def _kernel(dtype, trans_a=False):
    """(the ctypes function for the current target, its object file), compiled once."""
    dtype = np.dtype(dtype)
    current = target.current_target()
    key = (current.cache_tag, dtype, trans_a)
    if key not in _COMPILED:
        module = ir.Module(name="packed_gemm_test")
        module.triple = current.triple
        module.data_layout = current.data_layout
        name = packed_gemm.define(module, dtype, trans_a=trans_a).name
        _COMPILED[key] = jit_module(module, name, ctypes.CFUNCTYPE(None, *_ARGUMENTS))
    return _COMPILED[key][1:]


def _run(dtype, m, n, k, padding=0, seed=0, trans_a=False):
    """c = a @ b through the kernel with row strides `padding` above the extents (and c one
    row taller): (a, b, c) with c's whole buffer, the product in c[:m, :n]. With trans_a, a
    is stored transposed (k x m, rows `padding` longer) and the a returned is its view."""
    rng = np.random.default_rng(seed)
    if trans_a:
        stored = rng.standard_normal((k, m + padding)).astype(dtype)
        a = stored[:, :m].T
    else:
        stored = rng.standard_normal((m, k + padding)).astype(dtype)
        a = stored[:, :k]
    b = rng.standard_normal((k, n + 2 * padding)).astype(dtype)
    # NaN where the product goes: it must be overwritten, never read.
    c = np.full((m + 1, n + 3 * padding), np.nan, dtype)
    c[:, n:] = 7.0
    c[m:] = 7.0
    function, _ = _kernel(dtype, trans_a)
    function(
        m, n, k, stored.ctypes.data, stored.shape[1], b.ctypes.data, b.shape[1],
        c.ctypes.data, c.shape[1],
    )  # fmt: skip
    return a, b[:, :n], c


def _check(dtype, m, n, k, padding=0, seed=0, trans_a=False):
    a, b, c = _run(dtype, m, n, k, padding, seed, trans_a)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    # Error bound of a length-k sum of products of standard normals, in units of the dtype.
    tol = (2e-6 if dtype == np.float32 else 4e-15) * np.sqrt(k)
    np.testing.assert_allclose(c[:m, :n], expected, rtol=tol, atol=tol)
    assert np.all(c[:m, n:] == 7.0), "written past the last column"
    assert np.all(c[m:] == 7.0), "written past the last row"


_SHAPES = [
    (1, 1, 1),
    (2, 7, 15),
    (7, 17, 31),
    (15, 33, 2),
    (17, 1, 100),
    (31, 15, 257),
    (33, 100, 17),
    (100, 31, 7),
    (1, 1000, 513),  # one row
    (257, 33, 1000),  # depth over several panels (2 or 4), the last one short
    (33, 1000, 257),  # wider than a panel (256 columns), the last one narrower
    (513, 257, 33),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, n, k", _SHAPES, ids=["x".join(map(str, s)) for s in _SHAPES])
def test_product_matches_numpy(dtype, m, n, k):
    _check(dtype, m, n, k, seed=m + n + k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, n, k", _SHAPES, ids=["x".join(map(str, s)) for s in _SHAPES])
def test_transposed_lhs_matches_numpy(dtype, m, n, k):
    # a stored k x m (a weight gradient's xᵀ), its rows padded: read in place all the same.
    _check(dtype, m, n, k, padding=3, seed=m * n + k, trans_a=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "m, n, k, padding",
    [
        (17, 100, 257, 3),  # b read in place, its last sliver copied
        (15, 513, 600, 5),  # b copied (over 1 MiB in float64, 1.2 MiB in float32)
        (9, 31, 1000, 1),
        (100, 1100, 31, 2),  # b's rows more than a page apart: copied
    ],
)
def test_operands_inside_larger_matrices(dtype, m, n, k, padding):
    _check(dtype, m, n, k, padding, seed=padding)


def test_large_product_over_many_panels():
    """Several panels in both the depth and the columns, tails in every dimension."""
    _check(np.float32, 200, 1100, 1000, padding=1)


def test_threads_multiply_halves_at_once():
    """Two threads each multiply half of a's rows (each call has its own panel buffer on its
    own stack), as kiln splits a product across its threads."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((300, 700)).astype(np.float32)
    b = rng.standard_normal((700, 600)).astype(np.float32)
    c = np.full((300, 600), np.nan, np.float32)
    function, _ = _kernel(np.float32)

    def half(rows):
        start = a.ctypes.data + rows.start * a.strides[0]
        out = c.ctypes.data + rows.start * c.strides[0]
        count = rows.stop - rows.start
        for _ in range(3):
            function(count, 600, 700, start, 700, b.ctypes.data, 600, out, 600)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(half, [range(0, 150), range(150, 300)]))
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)


def _fused_chain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """c[i, j] = fma(a[i, k-1], b[k-1, j], ... fma(a[i, 0], b[0, j], 0)) in float32, in order.
    Each product is exact in float64; the sum is rounded to float64 and then to float32, which
    is the fused multiply-add's single rounding but in rare near-ties (none for these fixed
    operands)."""
    total = np.zeros((a.shape[0], b.shape[1]), np.float64)
    for p in range(a.shape[1]):
        total = (total + a[:, p : p + 1].astype(np.float64) * b[p].astype(np.float64)).astype(
            np.float32
        )
        total = total.astype(np.float64)
    return total.astype(np.float32)


@pytest.mark.parametrize("n", [48, 600], ids=["b_in_place", "b_copied"])
def test_each_element_is_one_in_order_fused_chain(n):
    """Across the panels of the contraction too: the result is bit for bit the in-order chain
    of fused multiply-adds (BLAS orders the sums differently; NumPy's result differs)."""
    a, b, c = _run(np.float32, 11, n, 700, seed=3)
    np.testing.assert_array_equal(c[:11, :n], _fused_chain(a, b))


def test_defined_once_with_its_signature():
    module = ir.Module(name="packed_gemm_signature")
    first = packed_gemm.define(module, np.float32)
    assert packed_gemm.define(module, np.dtype(np.float32)) is first
    double = packed_gemm.define(module, np.float64)
    assert double is not first
    lanes = {np.float32: 16, np.float64: 8} if target.current_target().has_avx512 else None
    lanes = lanes or {np.float32: 8, np.float64: 4}
    assert first.name == f"kiln_packed_gemm_f32x{lanes[np.float32]}"
    assert double.name == f"kiln_packed_gemm_f64x{lanes[np.float64]}"
    assert first.linkage == ""  # external
    i64, pointer = ir.IntType(64), ir.PointerType()
    assert [argument.type for argument in first.args] == [i64] * 3 + [pointer, i64] * 3
    assert first.function_type.return_type == ir.VoidType()


def test_calls_nothing_outside():
    for dtype in (np.float32, np.float64):
        _, code = _kernel(dtype)
        assert objects.undefined_symbols(code) == []


def test_other_dtypes_are_refused():
    module = ir.Module(name="packed_gemm_refused")
    for dtype in (np.float16, np.int32, np.complex64):
        with pytest.raises(TypeError, match="float32 and float64"):
            packed_gemm.define(module, dtype)

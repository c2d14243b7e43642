"""Contractions in generated code: small ones inline as sum reductions, larger ones as BLAS
calls (kir.MatMul) from the native entry, split across kiln's threads when large.

Every product is checked against NumPy in float64 (einsum), across dimension numbers that
need no copy (operands used in place, transposed or not, batched), ones that need a
transpose first, vectors on either side, chunked (threaded) runs and KILN_NUM_THREADS=1.
"""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.runtime.native
from kiln import lax
from kiln.compiler.lowering_linalg import INLINE_MAX_WORK
from kiln.config import config
from tests._testing import x64_mode

CASES = [
    # (lhs shape, rhs shape, dimension numbers, einsum)
    ((96, 80), (80, 72), (((1,), (0,)), ((), ())), "mk,kn->mn"),  # plain
    ((80, 96), (80, 72), (((0,), (0,)), ((), ())), "km,kn->mn"),  # lhs transposed
    ((96, 80), (72, 80), (((1,), (1,)), ((), ())), "mk,nk->mn"),  # rhs transposed
    ((80, 96), (72, 80), (((0,), (1,)), ((), ())), "km,nk->mn"),  # both
    ((3, 40, 50), (3, 50, 60), (((2,), (1,)), ((0,), (0,))), "bmk,bkn->bmn"),  # batched
    ((3, 50, 40), (3, 60, 50), (((1,), (2,)), ((0,), (0,))), "bkm,bnk->bmn"),
    ((40, 3, 50), (3, 50, 60), (((2,), (1,)), ((1,), (0,))), "mbk,bkn->bmn"),  # batch moved
    ((6, 7, 60), (60, 5, 9), (((2,), (0,)), ((), ())), "abk,kcd->abcd"),  # several free dims
    ((6, 20, 30), (20, 30, 70), (((1, 2), (0, 1)), ((), ())), "mkl,kln->mn"),  # two contracted
    ((6, 30, 20), (20, 30, 70), (((2, 1), (0, 1)), ((), ())), "mlk,kln->mn"),  # out of order
    ((700,), (700, 90), (((0,), (0,)), ((), ())), "k,kn->n"),  # vector @ matrix
    ((90, 700), (700,), (((1,), (0,)), ((), ())), "mk,k->m"),  # matrix @ vector
    ((2, 3, 64, 48), (2, 3, 48, 32), (((3,), (2,)), ((0, 1), (0, 1))), "abmk,abkn->abmn"),
]


def _run(lhs, rhs, numbers):
    fn = kiln.jit(lambda a, b: lax.dot_general(a, b, numbers))
    return fn, np.asarray(fn(lhs, rhs))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=[c[3] for c in CASES])
def test_products_run_natively_and_match_numpy(case, dtype):
    lhs_shape, rhs_shape, numbers, spec = case
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal(lhs_shape).astype(dtype)
    rhs = rng.standard_normal(rhs_shape).astype(dtype)
    with x64_mode(dtype == np.float64):
        fn, result = _run(lhs, rhs, numbers)
        text = fn.lower(lhs, rhs).compile().as_text()
    assert "0 interpreted equations" in text
    assert "gemm(" in text
    expected = np.einsum(spec, lhs.astype(np.float64), rhs.astype(np.float64))
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(result, expected, rtol=tol, atol=tol)


def test_small_products_are_inline_reductions():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    fn = kiln.jit(lambda x, w, b: x @ w + b)
    text = fn.lower(x, w, b).compile().as_text()
    assert "gemm(" not in text and "sum(" in text and "1 kernel" in text
    np.testing.assert_allclose(np.asarray(fn(x, w, b)), x @ w + b, rtol=1e-6, atol=1e-6)
    assert 4 * 8 * 3 <= INLINE_MAX_WORK


@pytest.mark.parametrize("dtype", [np.float16, np.int32])
def test_inline_products_of_other_dtypes(dtype):
    rng = np.random.default_rng(2)
    x = rng.integers(-4, 4, (5, 16)).astype(dtype)
    w = rng.integers(-4, 4, (16, 6)).astype(dtype)
    fn = kiln.jit(lambda x, w: x @ w)
    assert "0 interpreted equations" in fn.lower(x, w).compile().as_text()
    np.testing.assert_array_equal(np.asarray(fn(x, w)), (x.astype(np.int64) @ w).astype(dtype))


def test_operands_and_result_fuse_with_neighbours():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    w = rng.standard_normal((128, 96)).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)

    def layer(x, w, b):  # the operands are made in the program, the result feeds a relu
        return jnp.maximum(jnp.tanh(x) @ (w * 2).T + b, 0)

    fn = kiln.jit(layer)
    text = fn.lower(x, w, b).compile().as_text()
    assert "0 interpreted equations" in text and "gemm(" in text
    expected = np.maximum(np.tanh(x.astype(np.float64)) @ (w * 2.0).T + b, 0)
    np.testing.assert_allclose(np.asarray(fn(x, w, b)), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "shape", [(512, 300, 384), (3, 384, 256, 256), (1, 2048, 4096), (4096, 2048, 1)]
)
def test_large_products_split_across_threads_agree_with_one_thread(shape, monkeypatch):
    rng = np.random.default_rng(4)
    *batch, m, k, n = shape
    lhs = rng.standard_normal((*batch, m, k)).astype(np.float32)
    rhs = rng.standard_normal((*batch, k, n)).astype(np.float32)

    def threaded(a, b):
        return jnp.matmul(a, b) * 1.0

    def single(a, b):
        return jnp.matmul(a, b) * 1.0

    fn = kiln.jit(threaded)
    text = fn.lower(lhs, rhs).compile().as_text()
    assert "gemm(" in text
    if kiln.runtime.native.num_threads() > 1:
        assert "product_0 in" in text  # split into chunks
    many = np.asarray(fn(lhs, rhs))
    monkeypatch.setattr(config, "num_threads", 1)
    one = np.asarray(kiln.jit(single)(lhs, rhs))
    expected = np.matmul(lhs.astype(np.float64), rhs)
    np.testing.assert_allclose(many, expected, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(many, one, rtol=1e-5, atol=1e-5)


def test_products_inside_grad_and_vmap():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((96, 64)).astype(np.float32)
    x = rng.standard_normal((32, 96)).astype(np.float32)

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    grad = kiln.jit(kiln.grad(loss))(w, x)
    h = np.tanh(x.astype(np.float64) @ w)
    expected = x.T.astype(np.float64) @ (2 * h * (1 - h**2))
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-4, atol=1e-4)

    per_row = kiln.jit(kiln.vmap(lambda xi: w.T @ xi, in_axes=0))(x)
    np.testing.assert_allclose(np.asarray(per_row), x @ w, rtol=1e-4, atol=1e-4)


def test_long_float32_contractions_keep_their_accurate_path():
    v = np.full(10_000, np.float32(0.1), np.float32)
    m = np.ones((10_000, 8), np.float32)
    fn = kiln.jit(lambda a, b: a @ b)
    text = fn.lower(v, m).compile().as_text()
    assert "gemm(" not in text  # contractions past 4096 sum in float64 blocks (the impl)
    np.testing.assert_allclose(np.asarray(fn(v, m)), np.full(8, 1000.0), rtol=1e-6)


def test_a_transposed_product_is_computed_transposed():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((128, 96)).astype(np.float32)
    b = rng.standard_normal((96, 80)).astype(np.float32)
    fn = kiln.jit(lambda a, b: (a @ b).T * 2.0)  # as a dense layer's weight gradient reads
    text = fn.lower(a, b).compile().as_text()
    kernels = text[text.index("native program") :]
    assert "gemm(80x128x96: b[0; ld 80]ᵀ @ a[0; ld 96]ᵀ)" in kernels
    assert "transpose" not in kernels
    np.testing.assert_allclose(
        np.asarray(fn(a, b)), (a.astype(np.float64) @ b).T * 2, rtol=1e-4, atol=1e-4
    )

    kept = kiln.jit(lambda a, b: ((a @ b).T, a @ b))  # the product itself is needed too
    first, second = kept(a, b)
    np.testing.assert_allclose(np.asarray(first), np.asarray(second).T, rtol=1e-6)

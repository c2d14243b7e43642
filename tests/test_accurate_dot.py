"""Long contractions of low-precision floats: dot_general splits a contraction longer than 4096
into blocks that BLAS contracts in float32, sums the block results in float64 and rounds once.

Checked here against float64 NumPy and math.fsum: vector dots of 10M and 50M float32 values
(jnp.dot, `@` and lax.dot_general, eagerly, natively and on the interpreter), matrix-vector and
vector-matrix products over 1M, matrix products, batch dimensions, half-precision and complex
operands, block tails, inf and NaN. A float32 dot carried in one accumulator per vector lane
loses about 1e-3 of its value over 10M elements; every check here allows 1e-6.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

RTOL = 1e-6
TENTH = float(np.float32(0.1))  # the float32 nearest 0.1, exactly
MODES = ["jit", "interpret", "eager"]
VECTOR_DOT = (((0,), (0,)), ((), ()))


def relative_error(values, reference) -> float:
    values = np.asarray(values, dtype=np.complex128).ravel()
    reference = np.asarray(reference, dtype=np.complex128).ravel()
    return float(np.max(np.abs(values - reference) / np.abs(reference)))


def in_mode(fn, mode: str):
    """fn compiled natively, run by the interpreter, or called eagerly."""
    if mode == "jit":
        return kiln.jit(fn)
    if mode == "interpret":
        return kiln.jit(fn, backend="interpret")
    return fn


SPELLINGS = {
    "jnp.dot": jnp.dot,
    "matmul operator": lambda a, b: a @ b,
    "lax.dot_general": lambda a, b: lax.dot_general(a, b, VECTOR_DOT),
}


# --- vector dots of 10M and 50M float32 values ---------------------------------------------------


@pytest.fixture(scope="module")
def tenths_and_ones():
    n = 50_000_000
    return jnp.asarray(np.full(n, 0.1, np.float32)), jnp.asarray(np.ones(n, np.float32))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("n", [10_000_000, 50_000_000])
def test_dot_of_many_tenths(n, spelling, mode, tenths_and_ones):
    tenths, ones = tenths_and_ones
    if n < tenths.shape[0]:
        tenths, ones = tenths[:n], ones[:n]
    total = in_mode(SPELLINGS[spelling], mode)(tenths, ones)
    assert total.dtype == np.float32
    # n * TENTH is exact in float64 (24 + 26 bits), so it is the exact dot.
    assert relative_error(total, n * TENTH) < RTOL


@pytest.fixture(scope="module")
def random_pair_10m():
    rng = np.random.default_rng(0)
    return rng.random(10_000_003, dtype=np.float32), rng.random(10_000_003, dtype=np.float32)


@pytest.mark.parametrize("mode", MODES)
def test_dot_of_random_values(mode, random_pair_10m):
    x, y = random_pair_10m
    exact = math.fsum((x.astype(np.float64) * y.astype(np.float64)).tolist())
    total = in_mode(jnp.dot, mode)(jnp.asarray(x), jnp.asarray(y))
    assert relative_error(total, exact) < RTOL
    # The same data through NumPy's float32 dot is far off, so the check above can fail.
    assert relative_error(np.dot(x, y), exact) > RTOL


# --- matrix-vector, vector-matrix and matrix products --------------------------------------------


@pytest.fixture(scope="module")
def tall_operands():
    """A (16, 1M) matrix of tenths and of random values, and a 1M vector of ones and of randoms."""
    rng = np.random.default_rng(1)
    k = 1_000_000
    return {
        "constant": (np.full((16, k), 0.1, np.float32), np.ones(k, np.float32)),
        "random": (rng.random((16, k), dtype=np.float32), rng.random(k, dtype=np.float32)),
    }


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("data", ["constant", "random"])
def test_matrix_vector_over_a_million(data, mode, tall_operands):
    matrix, vector = tall_operands[data]
    reference = matrix.astype(np.float64) @ vector.astype(np.float64)
    product = in_mode(jnp.matmul, mode)(jnp.asarray(matrix), jnp.asarray(vector))
    assert product.shape == (16,)
    assert relative_error(product, reference) < RTOL


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("data", ["constant", "random"])
def test_vector_matrix_over_a_million(data, mode, tall_operands):
    matrix, vector = tall_operands[data]
    columns = np.ascontiguousarray(matrix.T)
    reference = vector.astype(np.float64) @ columns.astype(np.float64)
    product = in_mode(jnp.matmul, mode)(jnp.asarray(vector), jnp.asarray(columns))
    assert product.shape == (16,)
    assert relative_error(product, reference) < RTOL


@pytest.mark.parametrize("shapes", [((40, 50_001), (50_001, 40)), ((3, 20_000), (20_000, 5))])
def test_matrix_product_with_long_contraction(shapes):
    rng = np.random.default_rng(2)
    a = rng.random(shapes[0], dtype=np.float32)
    b = rng.random(shapes[1], dtype=np.float32)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    product = jnp.matmul(jnp.asarray(a), jnp.asarray(b))
    assert product.shape == reference.shape and product.dtype == np.float32
    assert relative_error(product, reference) < RTOL
    assert relative_error(kiln.jit(jnp.matmul)(a, b), reference) < RTOL


def test_batched_and_transposed_contractions():
    rng = np.random.default_rng(3)
    lhs = np.full((3, 70_001, 2), 0.1, np.float32) + rng.random((3, 70_001, 2), np.float32)
    rhs = rng.random((70_001, 3), np.float32)
    # Batch dimension 0 against 1, contracting 1 against 0, with the free dims last on each side.
    dims = (((1,), (0,)), ((0,), (1,)))
    reference = np.einsum("bkm,kb->bm", lhs.astype(np.float64), rhs.astype(np.float64))
    for fn in (
        lambda a, b: lax.dot_general(a, b, dims),
        kiln.jit(lambda a, b: lax.dot_general(a, b, dims)),
    ):
        product = fn(jnp.asarray(lhs), jnp.asarray(rhs))
        assert product.shape == (3, 2)
        assert relative_error(product, reference) < RTOL


def test_einsum_and_tensordot_over_two_contracted_axes():
    # The contracted size is the product of the two axes (1000 * 9000), which is what is split.
    a = np.full((1000, 9000), 0.1, np.float32)
    b = np.ones((1000, 9000), np.float32)
    exact = 9_000_000 * TENTH
    assert relative_error(jnp.tensordot(a, b, axes=2), exact) < RTOL
    assert relative_error(jnp.einsum("ij,ij->", a, b), exact) < RTOL
    assert relative_error(kiln.jit(jnp.vdot)(a, b), exact) < RTOL


# --- other dtypes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_operands_with_float32_result(dtype):
    rng = np.random.default_rng(4)
    x = rng.random(2_000_000).astype(dtype)
    y = rng.random(2_000_000).astype(dtype)
    exact = math.fsum((x.astype(np.float64) * y.astype(np.float64)).tolist())

    def dot(a, b):
        return jnp.dot(a, b, preferred_element_type=jnp.float32)

    for fn in (dot, kiln.jit(dot)):
        total = fn(jnp.asarray(x), jnp.asarray(y))
        assert total.dtype == np.float32
        assert relative_error(total, exact) < RTOL


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_result_is_rounded_once(dtype):
    x = np.full(20_000, 0.1, dtype)
    y = np.ones(20_000, dtype)
    exact = 20_000 * float(x[0])
    total = jnp.dot(jnp.asarray(x), jnp.asarray(y))
    assert total.dtype == np.dtype(dtype)
    # Within half an ulp of the result type: the float64 sum is rounded to it once.
    assert float(total) == float(np.asarray(exact, np.float64).astype(dtype))


def test_complex64_dot():
    rng = np.random.default_rng(5)
    n = 3_000_001
    x = (rng.random(n) + 1j * rng.random(n)).astype(np.complex64)
    y = (rng.random(n) + 1j * rng.random(n)).astype(np.complex64)
    reference = x.astype(np.complex128) @ y.astype(np.complex128)
    for fn in (jnp.dot, kiln.jit(jnp.dot)):
        total = fn(jnp.asarray(x), jnp.asarray(y))
        assert total.dtype == np.complex64
        assert relative_error(total, reference) < RTOL


# --- semantics kept -------------------------------------------------------------------------------


def test_short_contractions_are_numpys_result():
    rng = np.random.default_rng(6)
    for shape_a, shape_b in (((4096,), (4096,)), ((64, 4096), (4096,)), ((256, 512), (512, 256))):
        a = rng.random(shape_a, dtype=np.float32)
        b = rng.random(shape_b, dtype=np.float32)
        np.testing.assert_array_equal(np.asarray(jnp.matmul(a, b)), np.matmul(a, b))


def test_tail_shorter_than_a_block():
    # 4097 elements: whole blocks and one trailing element, each sum exact in float32.
    x = np.ones(4097, np.float32)
    y = np.arange(4097, dtype=np.float32)
    assert float(jnp.dot(x, y)) == 4096 * 4097 / 2


def test_inf_nan_and_overflow():
    x = np.ones(100_000, np.float32)
    y = np.ones(100_000, np.float32)
    y[77_777] = np.inf
    assert float(jnp.dot(x, y)) == np.inf
    y[5] = -np.inf
    assert np.isnan(float(jnp.dot(x, y)))
    y = np.ones(100_000, np.float32)
    y[99_999] = np.nan
    assert np.isnan(float(kiln.jit(jnp.dot)(x, y)))
    # Each block stays finite, the float32 result does not: inf, with no warning.
    big = np.full(100_000, 1e34, np.float32)
    with np.errstate(all="raise"):
        assert float(jnp.dot(big, x)) == np.inf


def test_empty_free_dimensions():
    a = np.ones((0, 10_000), np.float32)
    b = np.ones((10_000, 3), np.float32)
    assert jnp.matmul(a, b).shape == (0, 3)
    assert jnp.matmul(b.T, np.ones((10_000, 0), np.float32)).shape == (3, 0)

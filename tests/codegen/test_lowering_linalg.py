"""dot_general without contracting dimensions (outer products, as per-example gradients make
them) compiles to one fused multiplication per element; small contractions are inline sums
and larger ones BLAS calls (tests/codegen/test_blas_products.py)."""

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln import lax


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16, ml_dtypes.bfloat16])
def test_batched_outer_product_is_native_and_exact(dtype):
    rng = np.random.default_rng(0)
    a = rng.uniform(-3, 3, (3, 4)).astype(dtype)
    b = rng.uniform(-3, 3, (5, 3)).astype(dtype)

    def outer(x, y):  # batch over a's axis 0 and b's axis 1, then a transpose that fuses in
        return lax.transpose(lax.dot_general(x, y, (((), ()), ((0,), (1,)))), (0, 2, 1))

    compiled = kiln.jit(outer)
    if dtype != ml_dtypes.bfloat16:  # (bfloat16 arithmetic has no native lowering yet)
        assert "0 interpreted equations" in compiled.lower(a, b).compile().as_text()
    # One rounded product per element: exactly NumPy's product in float64, rounded once.
    expected = np.einsum("bi,jb->bji", a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(np.asarray(compiled(a, b)), expected)

    with_neighbours = kiln.jit(lambda x, y: outer(x, y) * 2 + 1)
    if dtype != ml_dtypes.bfloat16:
        text = with_neighbours.lower(a, b).compile().as_text()
        assert "0 interpreted equations" in text and "1 kernel" in text
    np.testing.assert_allclose(
        np.asarray(with_neighbours(a, b)).astype(np.float64),
        expected.astype(np.float64) * 2 + 1,
        rtol=1e-2 if dtype in (np.float16, ml_dtypes.bfloat16) else 1e-6,
    )


def test_contractions_are_inline_sums_when_small_and_blas_calls_when_large():
    small = np.ones((4, 8), np.float32)
    text = kiln.jit(lambda x: x @ x.T).lower(small).compile().as_text()
    assert "0 interpreted equations" in text and "sum(" in text and "gemm(" not in text
    large = np.ones((64, 128), np.float32)
    text = kiln.jit(lambda x: x @ x.T).lower(large).compile().as_text()
    assert "0 interpreted equations" in text and "gemm(" in text

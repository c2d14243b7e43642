"""dot_general without contracting dimensions (outer products, as per-example gradients make
them) compiles to one fused multiplication per element; products that sum over an axis stay
with BLAS."""

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

    def f(x, y):  # batch over a's axis 0 and b's axis 1; then a transpose and an add fuse in
        return lax.transpose(lax.dot_general(x, y, (((), ()), ((0,), (1,)))), (0, 2, 1)) + 1

    compiled = kiln.jit(f)
    text = compiled.lower(a, b).compile().as_text()
    if dtype != ml_dtypes.bfloat16:  # (bfloat16 arithmetic has no native lowering yet)
        assert "0 interpreted equations" in text
    expected = np.einsum("bi,jb->bji", a.astype(np.float64), b.astype(np.float64))
    expected = expected.astype(dtype).astype(np.float64) + 1
    np.testing.assert_allclose(
        np.asarray(compiled(a, b)).astype(np.float64), expected.astype(dtype).astype(np.float64)
    )
    np.testing.assert_array_equal(np.asarray(compiled(a, b)), np.asarray(f(a, b)))


def test_a_contraction_still_runs_through_blas():
    a = np.ones((4, 8), np.float32)
    text = kiln.jit(lambda x: x @ x.T).lower(a).compile().as_text()
    assert "interpreted (reference impl)" in text and "dot_general" in text

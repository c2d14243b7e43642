"""kiln.scipy.linalg.expm and block_diag against SciPy."""

import numpy as np
import pytest
import scipy.linalg

import kiln
import kiln.numpy as jnp
from kiln.scipy import linalg as kl
from kiln.test_util import check_grads
from tests._testing import x64_mode


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("scale", [1e-4, 0.05, 0.7, 2.0, 8.0])
def test_expm_matches_scipy(dtype, scale):
    rng = np.random.default_rng(int(scale * 1000) % 97)
    a = rng.standard_normal((6, 6)) * scale
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((6, 6)) * scale
    expected = scipy.linalg.expm(a)
    with x64_mode(dtype == np.float64):
        got = np.asarray(kl.expm(a.astype(dtype)))
    assert got.dtype == dtype
    tol = 1e-12 if dtype == np.float64 else 2e-5
    # relative to the result's size: large scales lose digits in float32 as SciPy's would
    err = np.max(np.abs(got - expected)) / np.max(np.abs(expected))
    assert err < tol * max(1.0, scale), err


def test_expm_batched_triangular_and_jit():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4, 4)).astype(np.float32)
    got = np.asarray(kiln.jit(kl.expm)(a))
    for k in range(3):
        np.testing.assert_allclose(got[k], scipy.linalg.expm(a[k]), rtol=2e-5, atol=2e-6)
    upper = np.triu(a[0])
    np.testing.assert_allclose(
        np.asarray(kl.expm(upper, upper_triangular=True)),
        scipy.linalg.expm(upper),
        rtol=2e-5,
        atol=2e-6,
    )


def test_expm_properties_and_edges():
    np.testing.assert_allclose(np.asarray(kl.expm(jnp.zeros((3, 3)))), np.eye(3))
    # exp(A) exp(-A) = I, and diagonal matrices exponentiate entrywise
    a = np.random.default_rng(2).standard_normal((5, 5)).astype(np.float32)
    product = np.asarray(kl.expm(a)) @ np.asarray(kl.expm(-a))
    np.testing.assert_allclose(product, np.eye(5), atol=1e-4)
    d = np.diag(np.float32([0.5, -2.0, 3.0]))
    np.testing.assert_allclose(np.asarray(kl.expm(d)), np.diag(np.exp([0.5, -2.0, 3.0])), rtol=1e-6)
    # more squarings than allowed: NaN, as JAX
    assert np.isnan(np.asarray(kl.expm(np.full((2, 2), 1e30, np.float32)))).all()
    big = np.asarray(kl.expm(d * 10.0, max_squarings=16))  # needs squarings
    np.testing.assert_allclose(big, np.diag(np.exp([5.0, -20.0, 30.0])), rtol=2e-5)
    with pytest.raises(ValueError, match="square matrix"):
        kl.expm(jnp.ones((2, 3)))
    assert kl.expm(jnp.eye(2, dtype=jnp.int32)).dtype == jnp.float32


def test_expm_derivatives():
    a = np.random.default_rng(3).standard_normal((3, 3)) * 0.5
    with x64_mode(True):
        check_grads(kl.expm, (a,), order=2, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
    # the derivative of trace(expm(A)) is expm(A)ᵀ
    grad = kiln.grad(lambda m: jnp.trace(kl.expm(m)))(a.astype(np.float32))
    np.testing.assert_allclose(np.asarray(grad), scipy.linalg.expm(a).T, rtol=1e-4, atol=1e-5)


def test_block_diag_matches_scipy():
    parts = (np.float32(1.5), np.arange(3, dtype=np.int32), np.ones((2, 2), np.float32))
    got = kl.block_diag(*parts)
    np.testing.assert_array_equal(np.asarray(got), scipy.linalg.block_diag(*parts))
    assert got.dtype == jnp.float32
    assert kl.block_diag(jnp.arange(2), jnp.arange(3)).dtype == jnp.int32
    assert kl.block_diag().shape == (1, 0)
    empty = kl.block_diag(np.zeros((0, 2), np.float32), np.ones((1, 1), np.float32))
    np.testing.assert_array_equal(np.asarray(empty), [[0, 0, 1]])
    with pytest.raises(ValueError, match="at most 2 dimensions"):
        kl.block_diag(jnp.ones((2, 2, 2)))
    grad = kiln.grad(lambda x: jnp.sum(kl.block_diag(x, x) ** 2))(jnp.ones((2, 2)))
    np.testing.assert_allclose(np.asarray(grad), np.full((2, 2), 4.0))

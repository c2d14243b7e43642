"""kiln.nn.identity and kiln.nn.log1mexp (log(1 - exp(-x)), accurate at both ends)."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import nn


def test_identity_returns_its_argument():
    x = jnp.array([-2.0, 0.0, 3.5])
    np.testing.assert_array_equal(np.asarray(nn.identity(x)), [-2.0, 0.0, 3.5])
    assert nn.identity(jnp.arange(3)).dtype == jnp.int32
    with pytest.raises(TypeError, match="identity"):
        nn.identity("not an array")


def _reference(x):
    """log(1 - exp(-x)) at 50 digits (mpmath), rounded to float64."""
    import mpmath

    with mpmath.workdps(50):
        return np.array(
            [float(mpmath.log(1 - mpmath.exp(-mpmath.mpf(float(v))))) for v in np.ravel(x)]
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log1mexp_matches_float64_reference(dtype):
    x = np.concatenate([np.geomspace(1e-12, 1.0, 40), np.linspace(0.5, 40.0, 40)]).astype(dtype)
    with _x64(dtype):
        got = np.asarray(nn.log1mexp(jnp.asarray(x)))
    assert got.dtype == dtype
    np.testing.assert_allclose(got, _reference(x), rtol=4e-6 if dtype == np.float32 else 1e-13)


class _x64:
    def __init__(self, dtype):
        self.on = dtype == np.float64

    def __enter__(self):
        self.before = kiln.config.read("jax_enable_x64")
        kiln.config.update("jax_enable_x64", self.on)

    def __exit__(self, *exc):
        kiln.config.update("jax_enable_x64", self.before)


def test_log1mexp_edges_and_derivative():
    out = np.asarray(nn.log1mexp(jnp.array([0.0, -1.0, np.inf])))
    assert out[0] == -np.inf and np.isnan(out[1]) and out[2] == 0.0
    # the derivative is 1 / expm1(x)
    for x in (1e-3, 0.5, 2.0, 20.0):
        np.testing.assert_allclose(
            float(kiln.grad(nn.log1mexp)(np.float32(x))), 1 / np.expm1(x), rtol=1e-5
        )
    # integers promote to float32, as in JAX
    assert nn.log1mexp(jnp.array([1, 2])).dtype == jnp.float32
    jitted = kiln.jit(nn.log1mexp)(jnp.array([0.25, 3.0]))
    np.testing.assert_allclose(np.asarray(jitted), _reference([0.25, 3.0]), rtol=4e-6)

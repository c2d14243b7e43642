"""The derivative conventions of the Hurwitz zeta function: kiln.scipy.special.zeta has
derivatives in both arguments (those of the truncated Euler-Maclaurin expansion, as in JAX);
kiln.lax.zeta has none in its first argument."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import kiln
import kiln.numpy as jnp
import kiln.scipy.special as ks
from kiln import lax
from tests._testing import assert_close


def _dzeta_ds(s, q, h=1e-5):
    """A central difference in float64 of SciPy's zeta."""
    return (scipy.special.zeta(s + h, q) - scipy.special.zeta(s - h, q)) / (2 * h)


def test_derivative_in_s_matches_jax_and_finite_differences():
    grad = kiln.grad(lambda s: ks.zeta(s, 2.0))(3.0)
    # JAX 0.10.2 gives -0.19812626.
    assert_close(grad, np.float32(-0.19812626), 1e-6)
    assert_close(grad, np.float32(_dzeta_ds(3.0, 2.0)), 1e-5)
    s = jnp.array([3.0, 4.0, 6.5])
    q = jnp.array([2.0, 0.5, 3.0])
    grads = kiln.grad(lambda s: ks.zeta(s, q).sum())(s)
    expected = [_dzeta_ds(a, b) for a, b in zip([3.0, 4.0, 6.5], [2.0, 0.5, 3.0])]
    assert_close(grads, np.array(expected, np.float32), 1e-4)


def test_derivative_in_q_and_jvp_primal():
    grad = kiln.grad(lambda q: ks.zeta(3.0, q))(2.0)
    assert_close(grad, np.float32(-3 * scipy.special.zeta(4.0, 2.0)), 1e-6)
    value, tangent = kiln.jvp(lambda s: ks.zeta(s, 2.0), (3.0,), (1.0,))
    assert_close(value, np.float32(scipy.special.zeta(3.0, 2.0)), 1e-6)
    assert_close(tangent, np.float32(-0.19812624), 1e-6)


def test_derivative_under_jit_and_vmap():
    s = jnp.array([3.0, 4.0])
    f = kiln.grad(lambda s: ks.zeta(s, 2.0))
    assert_close(kiln.jit(kiln.vmap(f))(s), np.array([-0.19812626, -0.06891126], np.float32), 1e-5)


def test_lax_zeta_has_no_derivative_in_s():
    with pytest.raises(NotImplementedError, match="Differentiation rule for 'zeta'"):
        kiln.grad(lambda s: lax.zeta(s, 2.0))(3.0)

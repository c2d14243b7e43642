"""Special-function primitives behind kiln.scipy.special and the gamma sampler: the regularized
incomplete gamma functions (igamma, igammac) and their derivative in the shape parameter, the
derivative of a gamma sample in its shape (implicit reparameterization), the regularized
incomplete beta function, the Hurwitz zeta function, the exponentially scaled Bessel functions
i0e and i1e, and the inverse normal CDF.

The impls use scipy.special in double precision (rounded once), as elementwise_math does.
Derivatives that scipy has no function for (d/da of the incomplete gamma function) are
evaluated by Richardson-extrapolated central differences of scipy's double-precision values,
which keeps about ten correct digits: far more than the float32 results need.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.primitives.base import (
    FLOAT,
    def_non_differentiable,
    defjvp,
    elementwise_batching,
    lax_operands,
    scipy_special,
    standard_binop,
    standard_unop,
)
from kiln.primitives.elementwise import (
    add,
    div,
    eq,
    filled_like,
    mul,
    neg,
    select,
    sign,
    sub,
)
from kiln.primitives.elementwise_math import exp, lgamma, log, precise, square

__all__ = [
    "igamma",
    "igammac",
    "igamma_grad_a",
    "random_gamma_grad",
    "betainc",
    "zeta",
    "bessel_i0e",
    "bessel_i1e",
    "ndtri",
    "igamma_p",
    "igammac_p",
    "igamma_grad_a_p",
    "random_gamma_grad_p",
    "betainc_p",
    "zeta_p",
    "bessel_i0e_p",
    "bessel_i1e_p",
    "ndtri_p",
]


def _gammainc_grad_a(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d/da of the regularized lower incomplete gamma function P(a, x), in float64: central
    differences with steps h and 2h combined to cancel the h**2 error term."""
    import scipy.special

    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    h = 1e-3 * np.maximum(np.minimum(a, 1.0), 1e-30)
    near = scipy.special.gammainc(a + h, x) - scipy.special.gammainc(a - h, x)
    far = scipy.special.gammainc(a + 2 * h, x) - scipy.special.gammainc(a - 2 * h, x)
    out = (8 * near - far) / (12 * h)
    # Outside the domain (a <= 0, x < 0) P is NaN, and so is its derivative; at x = 0 it is 0.
    out = np.where((a > 0) & (x >= 0), out, np.nan)
    return np.where(x == 0, 0.0, out)


def _random_gamma_grad(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The derivative of a Gamma(a) sample x in a, holding the uniform behind it fixed:
    -(dP/da) / (dP/dx) at (a, x)."""
    import scipy.special

    a, x = np.asarray(a, np.float64), np.asarray(x, np.float64)
    log_density = (a - 1) * np.log(x) - x - scipy.special.gammaln(a)
    return -_gammainc_grad_a(a, x) / np.exp(log_density)


_ndtri = scipy_special("ndtri")


# --- igamma, igammac, igamma_grad_a, random_gamma_grad ------------------------------------------
igamma_p = standard_binop("igamma", precise(scipy_special("gammainc")), FLOAT)
igammac_p = standard_binop("igammac", precise(scipy_special("gammaincc")), FLOAT)
igamma_grad_a_p = standard_binop("igamma_grad_a", precise(_gammainc_grad_a), FLOAT)
random_gamma_grad_p = standard_binop("random_gamma_grad", precise(_random_gamma_grad), FLOAT)


def _igamma_grad_x(a, x):
    """dP/dx = x**(a-1) exp(-x) / Gamma(a), the gamma density."""
    return exp(sub(sub(mul(sub(a, filled_like(a, 1.0)), log(x)), x), lgamma(a)))


defjvp(
    igamma_p,
    lambda g, a, x: mul(g, igamma_grad_a(a, x)),
    lambda g, a, x: mul(g, _igamma_grad_x(a, x)),
)
defjvp(
    igammac_p,
    lambda g, a, x: neg(mul(g, igamma_grad_a(a, x))),
    lambda g, a, x: neg(mul(g, _igamma_grad_x(a, x))),
)
def_non_differentiable(
    igamma_grad_a_p,
    "the second derivative of igamma in its shape parameter is not implemented (as in JAX).",
)
def_non_differentiable(
    random_gamma_grad_p,
    "the derivative of random_gamma_grad is not implemented (as in JAX).",
)

# --- betainc ---------------------------------------------------------------------------------
betainc_p = standard_binop("betainc", precise(scipy_special("betainc")), FLOAT, nargs=3)


def _betainc_jvp_shape(g, a, b, x):
    raise TypeError(
        "Differentiation rule for 'betainc' not implemented with respect to a or b "
        "(as in JAX); only the derivative in x is defined."
    )


def _betainc_grad_x(a, b, x):
    """d/dx I_x(a, b) = x**(a-1) (1-x)**(b-1) / B(a, b), the beta density."""
    one = filled_like(a, 1.0)
    log_beta = sub(add(lgamma(a), lgamma(b)), lgamma(add(a, b)))
    log_density = add(mul(sub(a, one), log(x)), mul(sub(b, one), log(sub(one, x))))
    return exp(sub(log_density, log_beta))


defjvp(
    betainc_p,
    _betainc_jvp_shape,
    _betainc_jvp_shape,
    lambda g, a, b, x: mul(g, _betainc_grad_x(a, b, x)),
)

# --- zeta ------------------------------------------------------------------------------------
zeta_p = standard_binop("zeta", precise(scipy_special("zeta")), FLOAT)


def _zeta_jvp_s(g, s, q):
    raise NotImplementedError(
        "Differentiation rule for 'zeta' not implemented with respect to its first "
        "argument s (as in JAX); kiln.scipy.special.zeta has one."
    )


# d/dq zeta(s, q) = -s zeta(s + 1, q)
defjvp(
    zeta_p,
    _zeta_jvp_s,
    lambda g, s, q: mul(g, neg(mul(s, zeta(add(s, filled_like(s, 1.0)), q)))),
)

# --- bessel_i0e, bessel_i1e --------------------------------------------------------------------
bessel_i0e_p = standard_unop("bessel_i0e", precise(scipy_special("i0e")), FLOAT)
bessel_i1e_p = standard_unop("bessel_i1e", precise(scipy_special("i1e")), FLOAT)
# i0e(x) = exp(-|x|) I0(x): i0e' = i1e - sign(x) i0e.
defjvp(bessel_i0e_p, lambda g, x: mul(g, sub(bessel_i1e(x), mul(sign(x), bessel_i0e(x)))))


def _bessel_i1e_slope(x):
    """i1e'(x) = i0e(x) - i1e(x) / x - sign(x) i1e(x); its limit at 0 is 1/2."""
    zero = eq(x, filled_like(x, 0.0))
    safe_x = select(zero, filled_like(x, 1.0), x)
    i1e = bessel_i1e(x)
    slope = sub(sub(bessel_i0e(x), div(i1e, safe_x)), mul(sign(x), i1e))
    return select(zero, filled_like(x, 0.5), slope)


defjvp(bessel_i1e_p, lambda g, x: mul(g, _bessel_i1e_slope(x)))

# --- ndtri -----------------------------------------------------------------------------------
ndtri_p = standard_unop("ndtri", precise(_ndtri), FLOAT)
_SQRT_2PI = math.sqrt(2 * math.pi)


@ndtri_p.def_jvp
def _ndtri_jvp_rule(primals, tangents):
    # The inverse of the normal CDF: its slope is 1 / pdf(ndtri(p)).
    (p,), (g,) = primals, tangents
    out = ndtri_p.bind(p)
    return out, mul(g, mul(exp(mul(square(out), filled_like(out, 0.5))), _SQRT_2PI))


for _prim in (
    igamma_p,
    igammac_p,
    igamma_grad_a_p,
    random_gamma_grad_p,
    betainc_p,
    zeta_p,
    bessel_i0e_p,
    bessel_i1e_p,
    ndtri_p,
):
    elementwise_batching(_prim)


# --- wrappers (the lax API) ------------------------------------------------------------------


def igamma(a, x):
    """The regularized lower incomplete gamma function P(a, x)."""
    return igamma_p.bind(*lax_operands(a, x))


def igammac(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    return igammac_p.bind(*lax_operands(a, x))


def igamma_grad_a(a, x):
    """The derivative of igamma(a, x) in a."""
    return igamma_grad_a_p.bind(*lax_operands(a, x))


def random_gamma_grad(a, x):
    """The derivative of a Gamma(a) sample x in a (implicit reparameterization)."""
    return random_gamma_grad_p.bind(*lax_operands(a, x))


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    return betainc_p.bind(*lax_operands(a, b, x))


def zeta(s, q):
    """The Hurwitz zeta function: sum over k >= 0 of (k + q) ** -s."""
    return zeta_p.bind(*lax_operands(s, q))


def bessel_i0e(x):
    """exp(-|x|) I0(x), the exponentially scaled modified Bessel function of order 0."""
    return bessel_i0e_p.bind(x)


def bessel_i1e(x):
    """exp(-|x|) I1(x), the exponentially scaled modified Bessel function of order 1."""
    return bessel_i1e_p.bind(x)


def ndtri(p):
    """The inverse of the standard normal CDF."""
    return ndtri_p.bind(p)

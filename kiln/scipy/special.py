"""kiln.scipy.special: special functions with SciPy's names and JAX's conventions.

Arguments are promoted to a common inexact dtype (integers become the default float) and
broadcast together. Most functions are compositions of kiln.lax ops; the incomplete gamma and
beta functions, zeta, the Bessel functions and ndtri are primitives (kiln.primitives.special).
xlogy, xlog1py, logit and log_ndtr carry their own derivative rules, as in JAX.
"""

from __future__ import annotations

import math

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln.core import dtypes
from kiln.custom_derivatives import custom_jvp
from kiln.nn import logsumexp
from kiln.numpy.util import promote_and_broadcast
from kiln.primitives import special as special_lax

__all__ = [
    "logsumexp",
    "gammaln",
    "digamma",
    "betaln",
    "betainc",
    "erf",
    "erfc",
    "erfinv",
    "expit",
    "logit",
    "xlogy",
    "xlog1py",
    "entr",
    "i0e",
    "i1e",
    "ndtr",
    "ndtri",
    "log_ndtr",
    "gammainc",
    "gammaincc",
    "zeta",
    "polygamma",
]


def _promote(name: str, *args):
    """The arguments as arrays of one inexact dtype and one (broadcast) shape."""
    args = promote_and_broadcast(name, *args, inexact=True)
    shape = np.broadcast_shapes(*(tuple(a.shape) for a in args))
    return [a if tuple(a.shape) == shape else jnp.broadcast_to(a, shape) for a in args]


def _const(x, value):
    return lax.full_like(x, value)


def gammaln(x):
    """log |Gamma(x)|."""
    (x,) = _promote("gammaln", x)
    return lax.lgamma(x)


def digamma(x):
    """The logarithmic derivative of the gamma function (NaN at the poles 0, -1, -2, ...)."""
    (x,) = _promote("digamma", x)
    return lax.digamma(x)


def betaln(a, b):
    """log |B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)."""
    a, b = _promote("betaln", a, b)
    return lax.sub(lax.add(lax.lgamma(a), lax.lgamma(b)), lax.lgamma(lax.add(a, b)))


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b) (differentiable in x)."""
    a, b, x = _promote("betainc", a, b, x)
    return special_lax.betainc(a, b, x)


def erf(x):
    """The error function."""
    (x,) = _promote("erf", x)
    return lax.erf(x)


def erfc(x):
    """The complementary error function 1 - erf(x)."""
    (x,) = _promote("erfc", x)
    return lax.erfc(x)


def erfinv(x):
    """The inverse of the error function on (-1, 1)."""
    (x,) = _promote("erfinv", x)
    return lax.erf_inv(x)


def expit(x):
    """The logistic sigmoid 1 / (1 + exp(-x))."""
    (x,) = _promote("expit", x)
    return lax.logistic(x)


@custom_jvp
def logit(x):
    """log(x / (1 - x)), the inverse of expit."""
    (x,) = _promote("logit", x)
    return lax.log(lax.div(x, lax.sub(_const(x, 1), x)))


@logit.defjvp
def _logit_jvp(primals, tangents):
    (x,), (g,) = primals, tangents
    (x,) = _promote("logit", x)
    return logit(x), lax.div(g, lax.mul(x, lax.sub(_const(x, 1), x)))


@custom_jvp
def xlogy(x, y):
    """x * log(y), defined as 0 where x == 0 (NaN in y still propagates); its derivative at
    x == 0 is log(y) in x and x / y = 0 in y."""
    x, y = _promote("xlogy", x, y)
    keep = lax.bitwise_or(lax.ne(x, _const(x, 0)), lax.ne(y, y))
    return lax.select(keep, lax.mul(x, lax.log(y)), _const(x, 0))


@xlogy.defjvp
def _xlogy_jvp(primals, tangents):
    x, y = _promote("xlogy", *primals)
    x_dot, y_dot = tangents
    out = xlogy(x, y)
    return out, (x_dot * lax.log(y) + y_dot * x / y).astype(out.dtype)


@custom_jvp
def xlog1py(x, y):
    """x * log1p(y), defined as 0 where x == 0 (NaN in y still propagates)."""
    x, y = _promote("xlog1py", x, y)
    keep = lax.bitwise_or(lax.ne(x, _const(x, 0)), lax.ne(y, y))
    return lax.select(keep, lax.mul(x, lax.log1p(y)), _const(x, 0))


@xlog1py.defjvp
def _xlog1py_jvp(primals, tangents):
    x, y = _promote("xlog1py", *primals)
    x_dot, y_dot = tangents
    out = xlog1py(x, y)
    return out, (x_dot * lax.log1p(y) + y_dot * x / (1 + y)).astype(out.dtype)


@custom_jvp
def _xlogx(x):
    return xlogy(x, x)


@_xlogx.defjvp
def _xlogx_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return _xlogx(x), x_dot * (lax.log(x) + 1)


def entr(x):
    """The entropy term -x log(x) for x > 0, 0 at 0 and -inf for x < 0."""
    (x,) = _promote("entr", x)
    return lax.select(lax.lt(x, _const(x, 0)), _const(x, -np.inf), lax.neg(_xlogx(x)))


def i0e(x):
    """exp(-|x|) I0(x)."""
    (x,) = _promote("i0e", x)
    return special_lax.bessel_i0e(x)


def i1e(x):
    """exp(-|x|) I1(x)."""
    (x,) = _promote("i1e", x)
    return special_lax.bessel_i1e(x)


def _check_normal_dtype(x):
    x = jnp.asarray(x)
    if np.dtype(x.dtype) not in (dtypes.float32, np.dtype(np.float64)):
        raise TypeError(
            f"x.dtype={np.dtype(x.dtype)} is not supported, see docstring for supported types."
        )
    return x


def _ndtr(x):
    """The standard normal CDF from erf near 0 and erfc in the tails, which keeps the
    relative accuracy of small results."""
    half_sqrt2 = _const(x, 0.5 * math.sqrt(2))
    w = lax.mul(x, half_sqrt2)
    z = lax.abs(w)
    y = lax.select(
        lax.lt(z, half_sqrt2),
        lax.add(_const(x, 1), lax.erf(w)),
        lax.select(lax.gt(w, _const(x, 0)), lax.sub(_const(x, 2), lax.erfc(z)), lax.erfc(z)),
    )
    return lax.mul(_const(x, 0.5), y)


def ndtr(x):
    """The standard normal CDF (float32 or float64 input)."""
    return _ndtr(_check_normal_dtype(x))


def ndtri(p):
    """The inverse of the standard normal CDF (float32 or float64 input)."""
    return special_lax.ndtri(_check_normal_dtype(p))


# Where log_ndtr switches between -ndtr(-x), log(ndtr(x)) and the asymptotic series.
_LOG_NDTR_SEGMENTS = {np.dtype(np.float64): (-20.0, 8.0), dtypes.float32: (-10.0, 5.0)}


def _norm_logpdf(x):
    return lax.sub(
        lax.mul(_const(x, -0.5), lax.square(x)), _const(x, math.log(math.sqrt(2 * math.pi)))
    )


def _log_ndtr_series(x, series_order: int):
    """log ndtr(x) for x << -1: log(phi(x) / -x) + log(1 + sum_n (-1)^n (2n-1)!! / x^(2n))."""
    x2 = lax.square(x)
    log_scale = lax.sub(
        lax.sub(lax.mul(_const(x, -0.5), x2), lax.log(lax.neg(x))),
        _const(x, 0.5 * math.log(2 * math.pi)),
    )
    even, odd = lax.full_like(x, 0), lax.full_like(x, 0)
    power = x2
    for n in range(1, series_order + 1):
        term = lax.div(_const(x, float(math.prod(range(2 * n - 1, 0, -2)))), power)
        if n % 2:
            odd = lax.add(odd, term)
        else:
            even = lax.add(even, term)
        power = lax.mul(power, x2)
    return lax.add(log_scale, lax.log(lax.sub(lax.add(_const(x, 1), even), odd)))


def log_ndtr(x, series_order: int = 3):
    """log of the standard normal CDF, accurate in both tails: -ndtr(-x) above the upper
    segment, log(ndtr(x)) in the middle and an asymptotic series of `series_order` terms
    below the lower segment (-20/8 in float64, -10/5 in float32)."""
    if not isinstance(series_order, int):
        raise TypeError("series_order must be a Python integer.")
    if series_order < 0:
        raise ValueError("series_order must be non-negative.")
    if series_order > 30:
        raise ValueError("series_order must be <= 30.")
    x = _check_normal_dtype(x)
    return _log_ndtr(x, series_order)


def _log_ndtr_impl(x, series_order: int):
    lower, upper = _LOG_NDTR_SEGMENTS[np.dtype(x.dtype)]
    above = lax.gt(x, _const(x, upper))
    ndtr_arg = lax.select(above, lax.neg(x), lax.max(x, _const(x, lower)))
    ndtr_value = _ndtr(ndtr_arg)
    series = _log_ndtr_series(lax.min(x, _const(x, lower)), series_order)
    middle = lax.select(lax.gt(x, _const(x, lower)), lax.log(ndtr_value), series)
    return lax.select(above, lax.neg(ndtr_value), middle)


_log_ndtr = custom_jvp(_log_ndtr_impl, nondiff_argnums=(1,))


@_log_ndtr.defjvp
def _log_ndtr_jvp(series_order, primals, tangents):
    (x,), (g,) = primals, tangents
    out = _log_ndtr(x, series_order)
    # d/dx log ndtr(x) = pdf(x) / ndtr(x), in log space so that neither underflows.
    return out, lax.mul(g, lax.exp(lax.sub(_norm_logpdf(x), out)))


def gammainc(a, x):
    """The regularized lower incomplete gamma function P(a, x)."""
    a, x = _promote("gammainc", a, x)
    return special_lax.igamma(a, x)


def gammaincc(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    a, x = _promote("gammaincc", a, x)
    return special_lax.igammac(a, x)


def zeta(x, q=None):
    """The Hurwitz zeta function sum over n >= 0 of (n + q) ** -x (q is required).

    Derivatives in both arguments are those of the truncated Euler-Maclaurin expansion of
    Johansson (Numer. Algorithms 69, 2015, eq. 5), as JAX defines them; kiln.lax.zeta itself
    has no derivative in x."""
    if q is None:
        raise NotImplementedError(
            "Riemann zeta function not implemented; pass q != None to compute the "
            "Hurwitz Zeta function."
        )
    x, q = _promote("zeta", x, q)
    return _hurwitz_zeta(x, q)


@custom_jvp
def _hurwitz_zeta(x, q):
    return special_lax.zeta(x, q)


def _zeta_expansion_coefficients(terms: int) -> np.ndarray:
    """(2j + 2)! / B_(2j + 2) for j < terms, B the Bernoulli numbers."""
    import scipy.special

    bernoulli = scipy.special.bernoulli(2 * terms)
    return np.array(
        [math.factorial(2 * j + 2) / bernoulli[2 * j + 2] for j in range(terms)], np.float64
    )


def _zeta_expansion(s, a):
    """zeta(s, a) = sum_{k < N} (a + k)^-s + (a + N)^(1-s) / (s - 1)
    + (a + N)^-s (1/2 + sum_{j < M} (s)_(2j+1) / ((a + N)^(2j+1) (2j+2)! / B_(2j+2))),
    with N = M = 8 terms in float32 and 16 in float64 (truncated: accurate for the
    derivatives near the real line that the rule needs)."""
    dtype = np.dtype(a.dtype)
    terms = 8 if dtype.itemsize <= 4 else 16
    k = jnp.arange(terms, dtype=dtype)
    head = jnp.sum((a[..., None] + k) ** -s[..., None], axis=-1)
    shifted = a + terms
    integral = shifted ** (1 - s) / (s - 1)
    steps = jnp.arange(2 * terms, dtype=dtype)
    rising = jnp.cumprod((s[..., None] + steps) / shifted[..., None], axis=-1)[..., ::2]
    rising = jnp.minimum(rising, jnp.finfo(dtype).max)
    correction = jnp.sum(rising / _zeta_expansion_coefficients(terms).astype(dtype), axis=-1)
    return head + integral + shifted**-s * (0.5 + correction)


@_hurwitz_zeta.defjvp
def _hurwitz_zeta_jvp(primals, tangents):
    import kiln

    return kiln.jvp(_zeta_expansion, primals, tangents)


def polygamma(n, x):
    """The n-th derivative of digamma: digamma for n == 0, otherwise
    (-1)**(n+1) n! zeta(n + 1, x). n must have an integer dtype."""
    n_dtype = dtypes.dtype_and_weak_of(n)[0]
    if not dtypes.is_integer(n_dtype):
        raise ValueError(
            f"Argument `n` to polygamma must be of integer type. Got dtype {np.dtype(n_dtype)}."
        )
    n, x = _promote("polygamma", n, x)
    order_zero = lax.eq(n, _const(n, 0))
    safe_n = lax.select(order_zero, _const(n, 1), n)
    sign = lax.sub(_const(n, 1), lax.mul(_const(n, 2), lax.rem(safe_n + 1, _const(n, 2))))
    factorial = lax.exp(lax.lgamma(lax.add(safe_n, _const(n, 1))))
    series = lax.mul(lax.mul(sign, factorial), special_lax.zeta(lax.add(safe_n, _const(n, 1)), x))
    return lax.select(order_zero, lax.digamma(x), series)

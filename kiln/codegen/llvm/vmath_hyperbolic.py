"""Hyperbolic functions, their inverses and the logistic sigmoid for kiln's vector math.

They are built from the exp/expm1/log1p kernels of vmath_exp_log plus small odd polynomials
near zero (minimax fits), where the exp-based formulas would cancel.
"""

from __future__ import annotations

from .vmath_base import Emitter
from .vmath_exp_log import exp_bounded_kernel, exp_kernel, log1p_parts, log_core

# tanh(x) = x + x**3 * P(x**2) on |x| <= _TANH_POLY_LIMIT.
_TANH_P = {
    "float32": (
        -0.33333325386047363,
        0.133329838514328,
        -0.05392095446586609,
        0.02157106064260006,
        -0.007883311249315739,
        0.001895667752251029,
    ),
    "float64": (
        -0.333333333333333,
        0.13333333333326622,
        -0.053968253963760614,
        0.021869488385855843,
        -0.008863232601440639,
        0.003592092030423788,
        -0.0014555428456520711,
        0.0005884444857684344,
        -0.00023338156419814616,
        8.33164459887451e-05,
        -1.9494686736645316e-05,
    ),
}
# sinh(x) = x + x**3 * P(x**2) on |x| <= 1.
_SINH_P = {
    "float32": (
        0.1666666716337204,
        0.008333349600434303,
        0.0001983615948120132,
        2.8169511097075883e-06,
    ),
    "float64": (
        0.16666666666666669,
        0.008333333333333148,
        0.00019841269841431873,
        2.7557319157071903e-06,
        2.505212313671912e-08,
        1.605725976900731e-10,
        7.758748793256272e-13,
    ),
}

# Where tanh switches from the polynomial to the exp form. For float32 the exp form's error
# still reaches 1.46 ulp at 0.55 (where tanh is just above 1/2) and falls to 1.07 by 0.7.
_TANH_POLY_LIMIT = {"float32": 0.7, "float64": 0.55}
# tanh(x) rounds to +-1 beyond these, so exp is never asked for more.
_TANH_SATURATE = {"float32": 10.0, "float64": 20.0}
# Beyond these x*x overflows or 1 is negligible next to x: use log(x) + ln2 instead.
_BIG = {"float32": 2.0**12, "float64": 2.0**28}


def _odd_poly(em: Emitter, x, coefficients):
    z = em.mul(x, x)
    return em.fma(em.mul(x, z), em.poly(z, em.table(coefficients)), x)


def tanh(em: Emitter, x):
    ax = em.abs(x)
    # tanh|x| = 1 - 2/(exp(2|x|) + 1). Past the polynomial's range the result exceeds 1/2
    # and the subtracted term stays below it, so the error of exp enters scaled down (by at
    # most 3/8) and nothing cancels. The cap sits where the result has rounded to 1; NaN
    # lanes (sent to the cap) take the polynomial, which passes NaN on.
    cap = em.c(_TANH_SATURATE[em.dtype])
    capped = em.select(em.lt(ax, cap), ax, cap)
    e = exp_bounded_kernel(em, em.add(capped, capped))
    large = em.sub(em.c(1.0), em.div(em.c(2.0), em.add(e, em.c(1.0))))
    # Both forms are computed for |x| and signed once at the end, which also makes
    # tanh(-0) = -0; the polynomial gives subnormal inputs back exactly (|x| + tiny).
    limit = em.c(_TANH_POLY_LIMIT[em.dtype])
    magnitude = em.select(em.ge(ax, limit), large, _odd_poly(em, ax, _TANH_P))
    return em.copysign(magnitude, x)


def logistic(em: Emitter, x):
    """1 / (1 + exp(-x)), evaluated as e/(1+e) for x < 0 so small results keep full precision."""
    e = exp_kernel(em, em.neg(em.abs(x)))
    numerator = em.select(em.ge(x, em.c(0.0)), em.c(1.0), e)
    return em.where_nan(x, em.div(numerator, em.add(em.c(1.0), e)))


def _half_exp(em: Emitter, ax):
    """exp(|x|)/2, exact in scaling so it overflows only where sinh/cosh do."""
    return exp_kernel(em, ax, shift=-1)


def sinh(em: Emitter, x):
    ax = em.abs(x)
    h = _half_exp(em, ax)
    large = em.copysign(em.sub(h, em.div(em.c(0.25), h)), x)
    result = em.select(em.lt(ax, em.c(1.0)), _odd_poly(em, x, _SINH_P), large)
    return em.where_zero(x, em.where_nan(x, result))


def cosh(em: Emitter, x):
    h = _half_exp(em, em.abs(x))
    return em.where_nan(x, em.add(h, em.div(em.c(0.25), h)))


def _log_of(em: Emitter, big, big_value, argument):
    """log1p(argument), or log(big_value) + ln2 in the lanes where `big` holds."""
    u, c = log1p_parts(em, argument)
    u = em.select(big, big_value, u)
    c = em.select(big, em.c(0.0), c)
    return log_core(em, u, c, em.select(big, em.c(1.0), em.c(0.0)))


def asinh(em: Emitter, x):
    a = em.abs(x)
    big = em.gt(a, em.c(_BIG[em.dtype]))
    a2 = em.mul(a, a)
    # asinh(a) = log1p(a + a**2 / (1 + sqrt(1 + a**2))): no cancellation for small a.
    argument = em.add(a, em.div(a2, em.add(em.c(1.0), em.sqrt(em.add(em.c(1.0), a2)))))
    result = _log_of(em, big, a, argument)
    result = em.select(em.is_inf(x), em.c(float("inf")), result)
    return em.where_nan(x, em.copysign(result, x))


def acosh(em: Emitter, x):
    t = em.sub(x, em.c(1.0))
    big = em.gt(x, em.c(_BIG[em.dtype]))
    # acosh(1 + t) = log1p(t + sqrt(2t + t**2)), accurate as t -> 0.
    argument = em.add(t, em.sqrt(em.fma(t, t, em.mul(em.c(2.0), t))))
    result = _log_of(em, big, x, argument)
    result = em.select(em.lt(x, em.c(1.0)), em.c(float("nan")), result)
    result = em.select(em.eq(x, em.c(float("inf"))), x, result)
    return em.where_nan(x, result)


def atanh(em: Emitter, x):
    a = em.abs(x)
    one_minus = em.sub(em.c(1.0), a)
    small = em.add(em.mul(em.c(2.0), a), em.div(em.mul(em.mul(em.c(2.0), a), a), one_minus))
    # atanh(a) = log1p(2a/(1-a))/2; for a < 1/2 the same argument written as 2a + 2a**2/(1-a).
    argument = em.select(em.lt(a, em.c(0.5)), small, em.div(em.mul(em.c(2.0), a), one_minus))
    u, c = log1p_parts(em, argument)
    result = em.mul(em.c(0.5), log_core(em, u, c))
    result = em.select(em.eq(a, em.c(1.0)), em.c(float("inf")), result)
    result = em.select(em.gt(a, em.c(1.0)), em.c(float("nan")), result)
    return em.where_nan(x, em.copysign(result, x))

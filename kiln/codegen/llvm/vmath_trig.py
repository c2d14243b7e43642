"""Circular functions and their inverses for kiln's inline vector math.

sin/cos/tan reduce by pi/2 with a three-part Cody-Waite constant and pick the quadrant with
integer bit tricks; the inverse functions reduce to small arguments by identities. Polynomials
are minimax fits (relative error) computed for this module.
"""

from __future__ import annotations

from . import vmath_base as base
from .vmath_base import Emitter

# sin(r) = r + r**3 * S(r**2) and cos(r) = 1 - r**2/2 + r**4 * C(r**2) on |r| <= pi/4 plus a
# margin for the rounding of x * 2/pi (0.8 for float32, 0.7865 for float64).
_SIN_S = {
    "float32": (
        -0.16666653752326965, 0.008332070894539356, -0.00019503016665112227,
    ),
    "float64": (
        -0.16666666666666666, 0.008333333333333323, -0.00019841269841254597,
        2.7557319213958085e-06, -2.5052104853634462e-08, 1.605835951882119e-10,
        -7.578357050924222e-13,
    ),
}
_COS_C = {
    "float32": (
        0.04166664183139801, -0.0013887194218114018, 2.441913602524437e-05,
    ),
    "float64": (
        0.041666666666666595, -0.001388888888887284, 2.4801587288713204e-05,
        -2.755731413827165e-07, 2.0875695133644436e-09, -1.1358234411798378e-11,
    ),
}
# atan(t) = t + t**3 * A(t**2) on |t| <= tan(pi/8).
_ATAN_A = {
    "float32": (
        -0.33333316445350647, 0.19998471438884735, -0.142435222864151, 0.10593727231025696,
        -0.06077990680932999,
    ),
    "float64": (
        -0.333333333333332, 0.19999999999953205, -0.14285714280162118, 0.11111110781922653,
        -0.09090897718313283, 0.07692059589913261, -0.06663097711976596, 0.058478481357920414,
        -0.05039139059867343, 0.038060806770517076, -0.0179035506801635,
    ),
}
# asin(x) = x + x**3 * P(x**2) on |x| <= 1/2.
_ASIN_P = {
    "float32": (
        0.16666659712791443, 0.07500503957271576, 0.04451695457100868, 0.03180772066116333,
        0.014438589103519917, 0.03751647472381592,
    ),
    "float64": (
        0.1666666666666676, 0.07499999999970797, 0.04464285717461377, 0.030381942707712602,
        0.022372214989204543, 0.01735161199209075, 0.01398082074506074, 0.01139891097474367,
        0.010780258378630869, 0.0037063912372128525, 0.021707483510036426, -0.020999107677568293,
        0.032628648984731994,
    ),
}

# Largest |r| the reduction yields in the accurate range: x * 2/pi is rounded, so the
# quadrant can be off by half an ulp of it and r can pass pi/4 slightly (float32: up to 0.798
# for |x| < 4e5).
_REDUCED_LIMIT = {"float32": 0.8, "float64": 0.7865}
_TAN_PI_8 = 0.41421356237309503
_TAN_3PI_8 = 2.414213562373095


def _reduce(em: Emitter, x):
    """(r, q): x = q*pi/2 + r with |r| <= pi/4 (q as an integer mod 4)."""
    finite = em.select(em.is_finite(x), x, em.c(0.0))
    # x * 2/pi with the constant in two parts, so only the product's rounding remains.
    two_over_pi_hi, two_over_pi_lo = base.split(base.TWO_OVER_PI, em.is_f64)
    j = em.roundeven(em.fma(finite, em.c(two_over_pi_hi), em.mul(finite, em.c(two_over_pi_lo))))
    r = finite
    for part in base.split3(base.PI_2, em.is_f64):
        r = em.fma(em.neg(j), em.c(part), r)
    # Past the accurate range r can leave [-pi/4, pi/4]; clamping keeps results in [-1, 1].
    limit = _REDUCED_LIMIT[em.dtype]
    r = em.clamp(r, -limit, limit)
    quadrant = em.sub(j, em.mul(em.c(4.0), em.floor(em.mul(j, em.c(0.25)))))
    return r, em.to_int(quadrant)


def sin_cos_of_reduced(em: Emitter, r):
    """(sin r, cos r) for |r| <= pi/4 (plus the reduction margin)."""
    z = em.mul(r, r)
    sin_r = em.fma(em.mul(r, z), em.poly(z, em.table(_SIN_S)), r)
    half_z = em.mul(em.c(0.5), z)
    w = em.sub(em.c(1.0), half_z)
    # (1 - w) - z/2 recovers what rounding 1 - z/2 lost.
    tail = em.fma(em.mul(z, z), em.poly(z, em.table(_COS_C)), em.sub(em.sub(em.c(1.0), w), half_z))
    return sin_r, em.add(w, tail)


def _sin_or_cos(em: Emitter, x, quadrant_offset: int):
    r, q = _reduce(em, x)
    q = em.b.add(q, em.ic(quadrant_offset))
    sin_r, cos_r = sin_cos_of_reduced(em, r)
    odd = em.b.icmp_unsigned("!=", em.b.and_(q, em.ic(1)), em.ic(0))
    value = em.select(odd, cos_r, sin_r)
    # Quadrants 2 and 3 negate: move bit 1 of q into the sign bit.
    sign = em.b.shl(em.b.and_(q, em.ic(2)), em.ic(em.bits - 2))
    result = em.as_float(em.b.xor(em.as_int(value), sign))
    result = em.select(em.is_inf(x), em.c(float("nan")), result)
    return em.where_nan(x, result)


def sin(em: Emitter, x):
    return em.where_zero(x, _sin_or_cos(em, x, 0))


def cos(em: Emitter, x):
    return _sin_or_cos(em, x, 1)


def tan(em: Emitter, x):
    r, q = _reduce(em, x)
    sin_r, cos_r = sin_cos_of_reduced(em, r)
    odd = em.b.icmp_unsigned("!=", em.b.and_(q, em.ic(1)), em.ic(0))
    # tan(r + pi/2) = -cos(r)/sin(r).
    result = em.div(em.select(odd, em.neg(cos_r), sin_r), em.select(odd, sin_r, cos_r))
    result = em.select(em.is_inf(x), em.c(float("nan")), result)
    return em.where_zero(x, em.where_nan(x, result))


def _atan_nonnegative(em: Emitter, t):
    """atan(t) for t >= 0 (inf included): reduce by pi/4 or pi/2 to |u| <= tan(pi/8)."""
    big = em.gt(t, em.c(_TAN_3PI_8))
    mid = em.gt(t, em.c(_TAN_PI_8))
    u = em.select(mid, em.div(em.sub(t, em.c(1.0)), em.add(t, em.c(1.0))), t)
    u = em.select(big, em.div(em.c(-1.0), t), u)
    pi_2 = base.split(base.PI_2, em.is_f64)
    pi_4 = base.split(base.PI_4, em.is_f64)
    offset_hi = em.select(big, em.c(pi_2[0]), em.select(mid, em.c(pi_4[0]), em.c(0.0)))
    offset_lo = em.select(big, em.c(pi_2[1]), em.select(mid, em.c(pi_4[1]), em.c(0.0)))
    z = em.mul(u, u)
    p = em.fma(em.mul(u, z), em.poly(z, em.table(_ATAN_A)), u)
    return em.add(offset_hi, em.add(offset_lo, p))


def atan(em: Emitter, x):
    return em.where_nan(x, em.copysign(_atan_nonnegative(em, em.abs(x)), x))


def atan2(em: Emitter, y, x):
    ay, ax = em.abs(y), em.abs(x)
    swap = em.gt(ay, ax)
    numerator = em.select(swap, ax, ay)
    denominator = em.select(swap, ay, ax)
    # Both infinite: the angle is the one of (1, 1); both zero: the ratio counts as 0.
    both_inf = em.land(em.is_inf(ax), em.is_inf(ay))
    numerator = em.select(both_inf, em.c(1.0), numerator)
    denominator = em.select(both_inf, em.c(1.0), denominator)
    t = em.div(numerator, denominator)
    t = em.select(em.eq(denominator, em.c(0.0)), em.c(0.0), t)
    angle = _atan_nonnegative(em, t)
    pi_2 = base.split(base.PI_2, em.is_f64)
    pi = base.split(base.PI, em.is_f64)
    angle = em.select(swap, em.add(em.sub(em.c(pi_2[0]), angle), em.c(pi_2[1])), angle)
    angle = em.select(em.sign_bit(x), em.add(em.sub(em.c(pi[0]), angle), em.c(pi[1])), angle)
    result = em.copysign(angle, y)
    return em.select(em.lor(em.is_nan(x), em.is_nan(y)), em.add(x, y), result)


def _asin_near_one(em: Emitter, a):
    """(h, l) with h + l = asin(sqrt((1 - a)/2)) for a in [1/2, 1], sqrt kept in two parts."""
    z = em.mul(em.sub(em.c(1.0), a), em.c(0.5))
    s = em.sqrt(z)
    s_lo = em.div(em.fma(em.neg(s), s, z), em.add(s, s))
    s_lo = em.select(em.eq(s, em.c(0.0)), em.c(0.0), s_lo)
    return s, em.fma(em.mul(s, z), em.poly(z, em.table(_ASIN_P)), s_lo)


def _odd_asin_poly(em: Emitter, x):
    z = em.mul(x, x)
    return em.fma(em.mul(x, z), em.poly(z, em.table(_ASIN_P)), x)


def asin(em: Emitter, x):
    a = em.abs(x)
    h, l = _asin_near_one(em, a)
    pi_2 = base.split(base.PI_2, em.is_f64)
    # asin(a) = pi/2 - 2 asin(sqrt((1 - a)/2)).
    large = em.add(em.sub(em.c(pi_2[0]), em.add(h, h)), em.sub(em.c(pi_2[1]), em.add(l, l)))
    result = em.select(em.lt(a, em.c(0.5)), _odd_asin_poly(em, a), large)
    result = em.select(em.gt(a, em.c(1.0)), em.c(float("nan")), result)
    return em.where_nan(x, em.copysign(result, x))


def acos(em: Emitter, x):
    a = em.abs(x)
    h, l = _asin_near_one(em, a)
    pi_2 = base.split(base.PI_2, em.is_f64)
    pi = base.split(base.PI, em.is_f64)
    small = em.sub(em.c(pi_2[0]), em.sub(_odd_asin_poly(em, x), em.c(pi_2[1])))
    twice = em.add(em.add(h, h), em.add(l, l))
    # acos(x) = 2 asin(sqrt((1 - x)/2)) for x >= 1/2, and pi minus that mirrored for x <= -1/2.
    large = em.select(em.lt(x, em.c(0.0)), em.sub(em.c(pi[0]), em.sub(twice, em.c(pi[1]))), twice)
    result = em.select(em.lt(a, em.c(0.5)), small, large)
    result = em.select(em.gt(a, em.c(1.0)), em.c(float("nan")), result)
    return em.where_nan(x, result)

"""Exponentials, logarithms, pow and cbrt for kiln's inline vector math.

Each public function takes an `Emitter` and LLVM values and returns the result value; all code
is straight-line (selects, no branches or calls) so it vectorizes with the loop around it.
Polynomial coefficients are minimax fits (Remez, relative error) computed for this module.
"""

from __future__ import annotations

from . import vmath_base as base
from .vmath_base import Emitter

# exp(r) = 1 + r + r**2 * P(r) on |r| <= ln2/2.
_EXP_P = {
    "float32": (
        0.4999999403953552,
        0.1666652113199234,
        0.04166838899254799,
        0.008368715643882751,
        0.0013814603444188833,
    ),
    "float64": (
        0.5,
        0.16666666666666682,
        0.041666666666666095,
        0.008333333333317037,
        0.0013888888889115594,
        0.00019841269896375962,
        2.4801586926672718e-05,
        2.7557234869926676e-06,
        2.7557581834521527e-07,
        2.5112033997479347e-08,
        2.0826626101903878e-09,
    ),
}
# Same form, fitted for relative error of expm1(r) itself (stricter near r = 0).
_EXPM1_P = {
    "float32": (
        0.5,
        0.1666666567325592,
        0.041666362434625626,
        0.008333389647305012,
        0.0013940624194219708,
        0.00019845875794999301,
    ),
    "float64": (
        0.5,
        0.16666666666666677,
        0.04166666666666651,
        0.008333333333321693,
        0.0013888888888962353,
        0.0001984126988595973,
        2.480158717256404e-05,
        2.7557244381138705e-06,
        2.7557402628366934e-07,
        2.510897623351806e-08,
        2.0875332101851017e-09,
    ),
}
# 2**r = 1 + r * Q(r) on |r| <= 1/2.
_EXP2_Q = {
    "float32": (
        0.6931471824645996,
        0.24022647738456726,
        0.055503323674201965,
        0.00961843691766262,
        0.0013398875016719103,
        0.00015353360504377633,
    ),
    "float64": (
        0.6931471805599453,
        0.24022650695910072,
        0.05550410866482169,
        0.00961812910762833,
        0.001333355814639269,
        0.0001540353039364074,
        1.5252733854318527e-05,
        1.32154865948967e-06,
        1.017805194187563e-07,
        7.054974483478938e-09,
        4.4565705204528847e-10,
        2.562541422763288e-11,
    ),
}
# log(1+f) = 2 atanh(s) = 2s + s*z*R(z), s = f/(2+f), z = s**2 <= 0.02945.
_LOG_R = {
    "float32": (
        0.6666677594184875,
        0.3997752070426941,
        0.29872310161590576,
    ),
    "float64": (
        0.6666666666666666,
        0.40000000000006264,
        0.28571428569081125,
        0.22222222647515108,
        0.18181775607869127,
        0.15387093286009948,
        0.13250060917950426,
        0.13251851328936015,
    ),
}
# For pow's extra-precise log: 2 atanh(s) = 2s + (2/3)s**3 + s**5 * R5(z).
_POW_R5 = {
    "float64": (
        0.4000000000000226,
        0.2857142857009652,
        0.22222222520488247,
        0.18181784316033792,
        0.15386759755199048,
        0.13256759746974156,
        0.1319688071511236,
    ),
}

# float32 pow works in float64 but needs only ~2**-35 there: shorter float64 fits of the same forms.
_POW32_LOG_R = (0.6666666564365316, 0.40000335636297485, 0.28537278125019033, 0.23582765481294576)
_POW32_EXP2_Q = (
    0.6931471805482122,
    0.240226506981106,
    0.055504109352666815,
    0.009618128616125753,
    0.0013333454860219305,
    0.00015403825461140794,
    1.5309156252205973e-05,
    1.3178933723755213e-06,
)

# Clamp ranges: just beyond where the result overflows to inf or rounds to 0 (so that the
# overflow and the denormal rounding happen naturally in the final scaling).
_EXP_RANGE = {"float32": (-104.0, 90.0), "float64": (-746.0, 711.0)}
_EXP2_RANGE = {"float32": (-151.0, 130.0), "float64": (-1076.0, 1026.0)}
# expm1(x) rounds to -1 below these; 2**-n above the cap no longer changes 1 - 2**-n.
_EXPM1_LOW = {"float32": -18.0, "float64": -40.0}
_EXPM1_CAP = {"float32": 60, "float64": 120}


def _ln2_for_exp(em: Emitter):
    """ln 2 as head + tail; with fma, x - n*head is exact for every n the clamps allow."""
    return base.split(base.LN2, em.is_f64)


def exp_kernel(em: Emitter, x, lo=None, shift: int = 0, factor=None):
    """exp(x + lo) * 2**shift (* factor), lo a small correction; NaN in, NaN out.

    A factor is applied before the scaling by 2**n, in one fused step, so exp(x) * factor
    rounds once less and underflows only where the product does.
    """
    low, high = _EXP_RANGE[em.dtype]
    # Only the low end of x is clamped (NaN passes): below it the result rounds to 0. The high
    # end is capped on n instead, where NaN also becomes the cap so the integer conversion never
    # sees it. Above the cap r = x - n*ln2 grows, but every term of 1 + r + r**2 P(r) is then
    # positive, so the result still overflows to inf (r = inf gives inf), and a NaN x reaches
    # the result through r. So no selects for the special values are needed at all.
    xc = em.select(em.lt(x, em.c(low)), em.c(low), x)
    n = em.roundeven(em.mul(xc, em.c(float(base.LOG2_E))))
    n_cap = em.c(float(round(high * 1.4426950408889634)))
    n = em.select(em.lt(n, n_cap), n, n_cap)
    ln2_hi, ln2_lo = _ln2_for_exp(em)
    r = em.fma(em.neg(n), em.c(ln2_hi), xc)
    r = em.fma(em.neg(n), em.c(ln2_lo), r)
    if lo is not None:
        r = em.add(r, lo)
    q = em.fma(em.mul(r, r), em.poly(r, em.table(_EXP_P)), r)
    k = em.to_int(n)
    if shift:
        k = em.b.add(k, em.ic(shift))
    mantissa = em.add(em.c(1.0), q) if factor is None else em.fma(q, factor, factor)
    return em.scale(mantissa, k)


def exp_bounded_kernel(em: Emitter, x):
    """exp(x) for x that the caller keeps within [0, 64]: exp_kernel without its clamps.

    On that range nothing overflows or underflows, which allows the shifter trick: adding
    1.5 * 2**mantissa_bits (plus the exponent bias) rounds x * log2(e) to an integer n held in
    the low bits, so n comes back by one subtraction and 2**n by one shift, with no
    float-to-integer conversions. NaN lanes give garbage: callers mask them.
    """
    shifter = 1.5 * 2.0**em.mant_bits + em.exp_bias
    shifted = em.fma(x, em.c(float(base.LOG2_E)), em.c(shifter))
    n = em.sub(shifted, em.c(shifter))
    ln2_hi, ln2_lo = _ln2_for_exp(em)
    r = em.fma(em.neg(n), em.c(ln2_hi), x)
    r = em.fma(em.neg(n), em.c(ln2_lo), r)
    q = em.fma(em.mul(r, r), em.poly(r, em.table(_EXP_P)), r)
    # The low bits of `shifted` hold n + bias; shifted into the exponent field they are 2**n
    # (the bits above fall off the top).
    power = em.as_float(em.b.shl(em.as_int(shifted), em.ic(em.mant_bits)))
    return em.fma(q, power, power)


def exp2_kernel(em: Emitter, x, lo=None, coefficients=None):
    """2**(x + lo) with overflow to inf and gradual underflow; NaN gives garbage."""
    low, high = _EXP2_RANGE[em.dtype]
    xc = em.clamp_nan_high(x, low, high)  # callers mask NaN lanes
    n = em.roundeven(xc)
    r = em.sub(xc, n)
    if lo is not None:
        r = em.add(r, lo)
    p = em.fma(r, em.poly(r, coefficients or em.table(_EXP2_Q)), em.c(1.0))
    return em.scale(p, em.to_int(n))


def expm1_kernel(em: Emitter, x):
    """expm1(x) for non-NaN x (NaN gives garbage); -0 comes out as +0."""
    xc = em.clamp_nan_high(x, _EXPM1_LOW[em.dtype], _EXP_RANGE[em.dtype][1])
    n = em.roundeven(em.mul(xc, em.c(float(base.LOG2_E))))
    ln2_hi, ln2_lo = _ln2_for_exp(em)
    r = em.fma(em.neg(n), em.c(ln2_hi), xc)
    r = em.fma(em.neg(n), em.c(ln2_lo), r)
    expm1_r = em.fma(em.mul(r, r), em.poly(r, em.table(_EXPM1_P)), r)
    # expm1(x) = 2**n * (expm1(r) + 1 - 2**-n); 1 - 2**-n is exact while it matters, and the
    # final scaling by 2**n is exact, so the only rounding is in the sum.
    k = em.to_int(n)
    cap = em.ic(_EXPM1_CAP[em.dtype])
    k_capped = em.select(em.b.icmp_signed(">", k, cap), cap, k)
    offset = em.sub(em.c(1.0), em.pow2(em.b.neg(k_capped)))
    return em.scale(em.add(expm1_r, offset), k)


def exp(em: Emitter, x):
    return exp_kernel(em, x)


def exp2(em: Emitter, x):
    return em.where_nan(x, exp2_kernel(em, x))


def expm1(em: Emitter, x):
    return em.where_zero(x, em.where_nan(x, expm1_kernel(em, x)))


# ---- logarithms ----------------------------------------------------------------------------


def _reduce(em: Emitter, u):
    """For positive finite u: (k, f) with u = 2**k * (1 + f) and 1 + f in [sqrt(1/2), sqrt(2))."""
    tiny_scale = 54 if em.is_f64 else 25
    min_normal = 2.0 ** (1 - em.exp_bias)
    tiny = em.lt(u, em.c(min_normal))
    u = em.select(tiny, em.mul(u, em.c(2.0**tiny_scale)), u)
    k_adjust = em.select(tiny, em.c(-tiny_scale), em.c(0.0))
    one_bits = em.exp_bias << em.mant_bits
    sqrt_half_bits = 0x3FE6A09E667F3BCD if em.is_f64 else 0x3F3504F3
    # Offsetting the bits by (1 - sqrt(1/2)) makes the exponent field roll over exactly where
    # the mantissa reaches sqrt(2), which centres 1 + f around 1.
    bits = em.b.add(em.as_int(u), em.ic(one_bits - sqrt_half_bits))
    k = em.b.sub(em.b.ashr(bits, em.ic(em.mant_bits)), em.ic(em.exp_bias))
    mantissa = em.b.and_(bits, em.ic((1 << em.mant_bits) - 1))
    m = em.as_float(em.b.add(mantissa, em.ic(sqrt_half_bits)))
    return em.add(em.to_float(k), k_adjust), em.sub(m, em.c(1.0))


def _log1p_of_f(em: Emitter, f, coefficients=None):
    """The tail lo with log(1 + f) = f + lo, |lo| <= f**2/2 (so f itself stays exact)."""
    s = em.div(f, em.add(em.c(2.0), f))
    z = em.mul(s, s)
    t = em.mul(z, em.poly(z, coefficients or em.table(_LOG_R)))
    # 2s = f - s*f, hence log(1 + f) = 2s + s*t = f - s*(f - t).
    return em.neg(em.mul(s, em.sub(f, t)))


def log_core(em: Emitter, u, correction=None, k_extra=None):
    """log(u) + correction (+ k_extra * ln2) for positive finite u, with no special cases."""
    k, f = _reduce(em, u)
    if k_extra is not None:
        k = em.add(k, k_extra)
    lo = _log1p_of_f(em, f)
    if correction is not None:
        lo = em.add(lo, correction)
    ln2_hi, ln2_lo = base.split(base.LN2, em.is_f64, 42 if em.is_f64 else 16)
    # k * ln2_hi is exact (ln2_hi has trailing zeros), so the sum rounds only at the end.
    tail = em.add(f, em.fma(k, em.c(ln2_lo), lo))
    return em.fma(k, em.c(ln2_hi), tail)


def log_double_word(em: Emitter, u):
    """log(u) as hi + lo (a few units of 2**-60 relative), for positive finite u."""
    k, f = _reduce(em, u)
    lo = _log1p_of_f(em, f)
    ln2_hi, ln2_lo = base.split(base.LN2, em.is_f64, 42 if em.is_f64 else 16)
    hi, err = em.two_sum(em.mul(k, em.c(ln2_hi)), f)
    return hi, em.add(err, em.fma(k, em.c(ln2_lo), lo))


def _log_scaled(em: Emitter, u, k_scale: str, f_scale: str):
    """k*K + log(1 + f)*A for log2 / log10, with the products kept in two parts."""
    k, f = _reduce(em, u)
    lo = _log1p_of_f(em, f)
    a_hi, a_lo = base.split(f_scale, em.is_f64)
    y_hi, y_err = em.two_prod(f, em.c(a_hi))
    y_lo = em.add(y_err, em.fma(f, em.c(a_lo), em.mul(lo, em.c(a_hi))))
    if k_scale == "1":
        s, e = em.fast_two_sum(k, y_hi)
    else:
        kk_hi, kk_lo = base.split(k_scale, em.is_f64, 42 if em.is_f64 else 16)
        s, e = em.two_sum(em.mul(k, em.c(kk_hi)), y_hi)
        y_lo = em.fma(k, em.c(kk_lo), y_lo)
    return em.add(s, em.add(e, y_lo))


def _log_specials(em: Emitter, x, result, zero_at=0.0):
    """NumPy's log conventions around the pole at `zero_at`: -inf there, NaN below, inf at inf."""
    inf = float("inf")
    result = em.select(em.eq(x, em.c(zero_at)), em.c(-inf), result)
    result = em.select(em.lt(x, em.c(zero_at)), em.c(float("nan")), result)
    result = em.select(em.eq(x, em.c(inf)), em.c(inf), result)
    return em.where_nan(x, result)


def log(em: Emitter, x):
    return _log_specials(em, x, log_core(em, x))


def log2(em: Emitter, x):
    return _log_specials(em, x, _log_scaled(em, x, "1", base.LOG2_E))


def log10(em: Emitter, x):
    return _log_specials(em, x, _log_scaled(em, x, base.LOG10_2, base.LOG10_E))


def log1p_parts(em: Emitter, x):
    """(u, c) with u = fl(1 + x) and log1p(x) ~= log(u) + c (c undoes the rounding of 1 + x)."""
    u = em.add(em.c(1.0), x)
    c = em.div(em.sub(x, em.sub(u, em.c(1.0))), u)
    return u, c


def log1p(em: Emitter, x):
    u, c = log1p_parts(em, x)
    return em.where_zero(x, _log_specials(em, x, log_core(em, u, c), zero_at=-1.0))


# ---- pow -----------------------------------------------------------------------------------


def _log2_double_word(em: Emitter, a):
    """log2(a) as hi + lo with ~2**-100 relative error, for positive finite f64 a."""
    k, f = _reduce(em, a)
    two_hi, two_lo = em.fast_two_sum(em.c(2.0), f)
    s = em.div(f, two_hi)
    residual = em.fma(em.neg(s), two_hi, f)
    residual = em.fma(em.neg(s), two_lo, residual)
    s_lo = em.div(residual, two_hi)
    # s**3 and (2/3) s**3 in two parts; the s**5 tail is small enough for plain arithmetic.
    z, z_lo = em.two_prod(s, s)
    z_lo = em.fma(em.mul(em.c(2.0), s), s_lo, z_lo)
    cube, cube_lo = em.two_prod(z, s)
    cube_lo = em.add(cube_lo, em.fma(z_lo, s, em.mul(z, s_lo)))
    third_hi, third_lo = base.split("0.6666666666666666666666666666666666666667", True)
    t, t_lo = em.two_prod(cube, em.c(third_hi))
    t_lo = em.add(t_lo, em.fma(cube, em.c(third_lo), em.mul(cube_lo, em.c(third_hi))))
    tail = em.mul(em.mul(cube, z), em.poly(z, em.table(_POW_R5)))
    hi, e = em.fast_two_sum(em.mul(em.c(2.0), s), t)
    lo = em.add(e, em.add(em.fma(em.c(2.0), s_lo, t_lo), tail))
    inv_hi, inv_lo = base.split(base.LOG2_E, True)
    p, p_lo = em.two_prod(hi, em.c(inv_hi))
    p_lo = em.add(p_lo, em.fma(hi, em.c(inv_lo), em.mul(lo, em.c(inv_hi))))
    total, e = em.fast_two_sum(k, p)
    return total, em.add(e, p_lo)


def _pow_magnitude_f64(em: Emitter, a, y):
    """|x|**y for a = |x| (0 and inf included) with the log kept in two parts."""
    inf = float("inf")
    l_hi, l_lo = _log2_double_word(em, a)
    l_hi = em.select(em.eq(a, em.c(0.0)), em.c(-inf), l_hi)
    l_hi = em.where_nan(a, em.select(em.eq(a, em.c(inf)), em.c(inf), l_hi))
    p = em.mul(y, l_hi)
    p_lo = em.fma(y, l_hi, em.neg(p))
    p_lo = em.fma(y, l_lo, p_lo)
    # Outside exp2's range the result is 0 or inf anyway, and p_lo may be huge or NaN there.
    p_lo = em.select(em.lt(em.abs(p), em.c(2048.0)), p_lo, em.c(0.0))
    result = exp2_kernel(em, p, p_lo)
    return em.select(em.is_nan(p), p, result)


def _pow_magnitude_f32(em: Emitter, a, y):
    """|x|**y for float32, computed in float64 where plain log2/exp2 are ample."""
    wide = em.sibling(True)
    a64 = em.b.fpext(a, wide.ty)
    y64 = em.b.fpext(y, wide.ty)
    k, f = _reduce(wide, a64)
    lo = _log1p_of_f(wide, f, _POW32_LOG_R)
    log2_a = wide.fma(wide.add(f, lo), wide.c(float(base.LOG2_E)), k)
    inf = float("inf")
    log2_a = wide.select(wide.eq(a64, wide.c(0.0)), wide.c(-inf), log2_a)
    log2_a = wide.where_nan(a64, wide.select(wide.eq(a64, wide.c(inf)), wide.c(inf), log2_a))
    p = wide.mul(y64, log2_a)
    result = wide.select(wide.is_nan(p), p, exp2_kernel(wide, p, coefficients=_POW32_EXP2_Q))
    return em.b.fptrunc(result, em.ty)


def pow(em: Emitter, x, y):
    """x**y with C99 pow's special cases (pow(x, 0) = 1 and pow(1, y) = 1 even for NaN)."""
    a = em.abs(x)
    if em.is_f64:
        result = _pow_magnitude_f64(em, a, y)
    else:
        result = _pow_magnitude_f32(em, a, y)
    one = em.c(1.0)
    y_integer = em.eq(em.roundeven(y), y)
    half_y = em.mul(y, em.c(0.5))
    y_odd = em.land(y_integer, em.lnot(em.eq(em.roundeven(half_y), half_y)))
    result = em.select(em.land(em.sign_bit(x), y_odd), em.neg(result), result)
    negative_finite = em.land(em.lt(x, em.c(0.0)), em.is_finite(x))
    result = em.select(em.land(negative_finite, em.lnot(y_integer)), em.c(float("nan")), result)
    result = em.select(em.land(em.eq(a, one), em.is_inf(y)), one, result)
    result = em.select(em.eq(x, one), one, result)
    return em.select(em.eq(y, em.c(0.0)), one, result)


# ---- cbrt ----------------------------------------------------------------------------------


def cbrt(em: Emitter, x):
    """Cube root: a guess from the exponent bits, then Newton steps y <- (2y + a/y**2)/3."""
    a = em.abs(x)
    tiny_scale = 54 if em.is_f64 else 24
    tiny = em.lt(a, em.c(2.0 ** (1 - em.exp_bias)))
    a = em.select(tiny, em.mul(a, em.c(2.0**tiny_scale)), a)
    back = em.select(tiny, em.c(2.0 ** (-tiny_scale // 3)), em.c(1.0))
    # Dividing the bit pattern by 3 divides the exponent by 3 (a linear log2 estimate); doing
    # it in floating point avoids a vector integer division that would not vectorize.
    one_bits = float(em.exp_bias << em.mant_bits)
    guess_bits = em.fma(em.to_float(em.as_int(a)), em.c(1.0 / 3.0), em.c(one_bits * 2.0 / 3.0))
    y = em.as_float(em.to_int(guess_bits))
    third = em.c(1.0 / 3.0)
    for _ in range(4 if em.is_f64 else 3):
        y = em.mul(em.fma(em.c(2.0), y, em.div(a, em.mul(y, y))), third)
    # Last step in correction form: y + (a/y**2 - y)/3 rounds only in the small term.
    y = em.fma(em.sub(em.div(a, em.mul(y, y)), y), third, y)
    result = em.copysign(em.mul(y, back), x)
    result = em.select(em.is_inf(x), x, result)
    return em.where_zero(x, em.where_nan(x, result))

"""Elementwise transcendental and special functions: pow, exponentials and logarithms, roots,
trigonometric and hyperbolic functions, logistic, erf and friends, lgamma and digamma.

float16 and bfloat16 operands are computed in float32 and rounded once (what NumPy and ml_dtypes
do); float32 and complex64 ones in double precision and rounded once, because NumPy's own
single-precision loops are up to a few ulps off (np.cbrt(27) is 2.9999998) and this impl is the
reference compiled code is tested against. Special functions use scipy.special. Each block holds
all the rules of one primitive.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import (
    FLOAT,
    INEXACT,
    NUMBER,
    broadcast_scalar_shapes,
    check_dtype,
    defjvp,
    elementwise_batching,
    lax_operands,
    standard_binop,
    scipy_special,
    standard_unop,
)
from kiln.primitives.elementwise import (
    add,
    binary_wrapper,
    convert_element_type,
    defjvp_from_result,
    div,
    eq,
    filled_like,
    integer_pow,
    lt,
    mul,
    neg,
    select,
    sub,
    unary_wrapper,
    via_float32,
)

_DOUBLE = {dtypes.float32: dtypes.float64, dtypes.complex64: dtypes.complex128}


def precise(fn):
    """Evaluate `fn` in double precision for float32/complex64 operands and round once; small
    floats go through float32 (via_float32); float64 and complex128 are computed natively."""
    small = via_float32(fn)

    def impl(*args, **params):
        dtype = args[0].dtype
        wide = _DOUBLE.get(dtype)
        if wide is None:
            return small(*args, **params)
        with np.errstate(all="ignore"):
            out = np.asarray(
                fn(*(a.astype(wide) if a.dtype == dtype else a for a in args), **params)
            )
            return out.astype(dtypes.complex64 if out.dtype.kind == "c" else dtypes.float32)

    impl.__name__ = getattr(fn, "__name__", "impl")
    return impl


__all__ = [
    "pow",
    "exp",
    "exp2",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "cbrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "logistic",
    "erf",
    "erfc",
    "erf_inv",
    "lgamma",
    "digamma",
    "square",
    "reciprocal",
]

# --- pow -------------------------------------------------------------------------------------
pow_p = Primitive("pow")


def _pow_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if y.dtype != x.dtype:  # an integer exponent: computed as x ** float(y), as XLA does
        y = y.astype(x.dtype)
    return np.power(x, y)


pow_p.def_impl(precise(_pow_impl))


@pow_p.def_abstract_eval
def _pow_abstract_eval(x: ShapedArray, y: ShapedArray) -> ShapedArray:
    check_dtype("pow", x.dtype, INEXACT)
    if y.dtype != x.dtype and y.dtype.kind not in "iu":
        raise TypeError(
            f"pow requires the exponent to have the base's dtype or an integer "
            f"dtype, got base {x.dtype.name} and exponent {y.dtype.name}."
        )
    shape = broadcast_scalar_shapes("pow", x, y)
    return ShapedArray(shape, x.dtype, x.weak_type and y.weak_type)


def _replace_zero(x):
    """x with its zeros replaced by ones."""
    return select(eq(x, 0), filled_like(x, 1), x)


@pow_p.def_jvp
def _pow_jvp_rule(primals, tangents):
    x, y = primals
    x_tangent, y_tangent = tangents
    out = pow_p.bind(x, y)
    out_tangent = None
    if x_tangent is not None:
        if y.dtype == x.dtype:
            slope = mul(y, pow_p.bind(x, sub(y, 1)))
        else:
            # An integer exponent: y * x**(y - 1), and exactly 0 for y == 0 (also at x == 0).
            y_float = convert_element_type(y, x.dtype)
            slope = mul(y_float, pow_p.bind(x, sub(y_float, 1)))
            slope = select(eq(y, 0), filled_like(slope, 0), slope)
        out_tangent = mul(x_tangent, slope)
    if y_tangent is not None:
        # d/dy x**y = log(x) x**y, taken as 0 at x == 0 (log(1) stands in for log(0)) as in JAX.
        term = mul(y_tangent, mul(log(_replace_zero(x)), out))
        out_tangent = term if out_tangent is None else add(out_tangent, term)
    return out, out_tangent


elementwise_batching(pow_p)


def pow(x, y):  # noqa: A001 (lax's name)
    """x ** y elementwise; x is floating or complex, y has x's dtype or is an integer array."""
    x_is_scalar = isinstance(x, (bool, int, float, builtins.complex))
    if not x_is_scalar and isinstance(y, int) and not isinstance(y, bool):
        # An integer Python exponent stays an integer, as in JAX (it is not cast to x's dtype).
        from kiln.core import dtypes
        from kiln.primitives.elementwise import convert_element_type

        return pow_p.bind(x, convert_element_type(y, dtypes.default_int(), True))
    return pow_p.bind(*lax_operands(x, y))


# --- exponentials and logarithms -------------------------------------------------------------
exp_p = standard_unop("exp", precise(np.exp), INEXACT)
exp2_p = standard_unop("exp2", precise(np.exp2), INEXACT)
log_p = standard_unop("log", precise(np.log), INEXACT)
log1p_p = standard_unop("log1p", precise(np.log1p), INEXACT)
expm1_p = standard_unop("expm1", precise(np.expm1), INEXACT)
defjvp_from_result(exp_p, lambda g, out, x: mul(g, out))
defjvp_from_result(exp2_p, lambda g, out, x: mul(g, mul(out, math.log(2))))
defjvp(log_p, lambda g, x: div(g, x))
defjvp(log1p_p, lambda g, x: div(g, add(x, 1)))
defjvp_from_result(expm1_p, lambda g, out, x: mul(g, add(out, 1)))

# --- roots and powers ------------------------------------------------------------------------
sqrt_p = standard_unop("sqrt", via_float32(np.sqrt), INEXACT)
rsqrt_p = standard_unop("rsqrt", precise(lambda x: np.reciprocal(np.sqrt(x))), INEXACT)
cbrt_p = standard_unop("cbrt", precise(np.cbrt), FLOAT)
square_p = standard_unop("square", via_float32(np.square), NUMBER)
# The roots' derivatives read their results: d sqrt(x) = dx / (2 sqrt(x)), and so on.
defjvp_from_result(sqrt_p, lambda g, out, x: mul(g, div(0.5, out)))
defjvp_from_result(rsqrt_p, lambda g, out, x: mul(g, mul(div(out, x), -0.5)))
defjvp_from_result(cbrt_p, lambda g, out, x: mul(g, mul(integer_pow(out, -2), 1 / 3)))
defjvp(square_p, lambda g, x: mul(g, mul(x, 2)))

# --- trigonometric ---------------------------------------------------------------------------
sin_p = standard_unop("sin", precise(np.sin), INEXACT)
cos_p = standard_unop("cos", precise(np.cos), INEXACT)
tan_p = standard_unop("tan", precise(np.tan), INEXACT)
asin_p = standard_unop("asin", precise(np.arcsin), INEXACT)
acos_p = standard_unop("acos", precise(np.arccos), INEXACT)
atan_p = standard_unop("atan", precise(np.arctan), INEXACT)
atan2_p = standard_binop("atan2", precise(np.arctan2), FLOAT)
defjvp(sin_p, lambda g, x: mul(g, cos(x)))
defjvp(cos_p, lambda g, x: neg(mul(g, sin(x))))
defjvp_from_result(tan_p, lambda g, out, x: mul(g, add(square(out), 1)))
defjvp(asin_p, lambda g, x: mul(g, rsqrt(sub(1, square(x)))))
defjvp(acos_p, lambda g, x: neg(mul(g, rsqrt(sub(1, square(x))))))
defjvp(atan_p, lambda g, x: div(g, add(square(x), 1)))
# atan2(x, y) is the angle of the point (y, x).
defjvp(
    atan2_p,
    lambda g, x, y: mul(g, div(y, add(square(x), square(y)))),
    lambda g, x, y: mul(g, div(neg(x), add(square(x), square(y)))),
)

# --- hyperbolic ------------------------------------------------------------------------------
sinh_p = standard_unop("sinh", precise(np.sinh), INEXACT)
cosh_p = standard_unop("cosh", precise(np.cosh), INEXACT)
tanh_p = standard_unop("tanh", precise(np.tanh), INEXACT)
asinh_p = standard_unop("asinh", precise(np.arcsinh), INEXACT)
acosh_p = standard_unop("acosh", precise(np.arccosh), INEXACT)
atanh_p = standard_unop("atanh", precise(np.arctanh), INEXACT)
defjvp(sinh_p, lambda g, x: mul(g, cosh(x)))
defjvp(cosh_p, lambda g, x: mul(g, sinh(x)))
# 1 - tanh(x)**2 as (1 + t)(1 - t), which keeps its accuracy where t is near 1.
defjvp_from_result(tanh_p, lambda g, out, x: mul(g, mul(add(out, 1), sub(1, out))))
defjvp(asinh_p, lambda g, x: mul(g, rsqrt(add(square(x), 1))))
defjvp(acosh_p, lambda g, x: mul(g, rsqrt(sub(square(x), 1))))
defjvp(atanh_p, lambda g, x: div(g, mul(add(x, 1), sub(1, x))))

# --- logistic and special functions ----------------------------------------------------------


def _logistic(x: np.ndarray) -> np.ndarray:
    import scipy.special

    if x.dtype.kind == "c":
        return np.reciprocal(1 + np.exp(-x))
    return scipy.special.expit(x)  # stable for large |x|


def _digamma(x: np.ndarray) -> np.ndarray:
    import scipy.special

    # XLA gives NaN at the poles (0, -1, -2, ...), where scipy gives -inf or NaN.
    out = scipy.special.psi(x)
    return np.where((x <= 0) & (x == np.floor(x)), np.nan, out).astype(out.dtype)


logistic_p = standard_unop("logistic", precise(_logistic), INEXACT)
erf_p = standard_unop("erf", precise(scipy_special("erf")), FLOAT)
erfc_p = standard_unop("erfc", precise(scipy_special("erfc")), FLOAT)
erf_inv_p = standard_unop("erf_inv", precise(scipy_special("erfinv")), FLOAT)
lgamma_p = standard_unop("lgamma", precise(scipy_special("gammaln")), FLOAT)
digamma_p = standard_unop("digamma", precise(_digamma), FLOAT)
defjvp_from_result(logistic_p, lambda g, out, x: mul(g, mul(out, sub(1, out))))
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)  # erf'(x) = 2 / sqrt(pi) * exp(-x**2)
defjvp(erf_p, lambda g, x: mul(g, mul(exp(neg(square(x))), _TWO_OVER_SQRT_PI)))
defjvp(erfc_p, lambda g, x: mul(g, mul(exp(neg(square(x))), -_TWO_OVER_SQRT_PI)))
# erf_inv'(x) = 1 / erf'(erf_inv(x))
defjvp_from_result(erf_inv_p, lambda g, out, x: mul(g, div(exp(square(out)), _TWO_OVER_SQRT_PI)))
defjvp(lgamma_p, lambda g, x: mul(g, digamma(x)))


def trigamma(x):
    """The derivative of digamma, polygamma(1, x), from lax ops (so it differentiates too):
    the reflection psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x) below 1/2, six steps of the
    recurrence psi1(x) = 1/x^2 + psi1(x + 1), then the asymptotic series at z = x + 6 >= 6.5,
    whose first omitted term is below 1e-11."""

    def c(v):
        return filled_like(x, v)

    reflect = lt(x, c(0.5))
    y = select(reflect, sub(c(1.0), x), x)
    total = div(c(1.0), square(y))
    for k in range(1, 6):
        total = add(total, div(c(1.0), square(add(y, c(float(k))))))
    z = add(y, c(6.0))
    w = div(c(1.0), square(z))
    # 1/z + 1/(2 z^2) + (1/z^3) (1/6 - w/30 + w^2/42 - w^3/30 + 5 w^4/66)
    series = c(5.0 / 66.0)
    for coefficient in (-1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0, 1.0 / 6.0):
        series = add(mul(series, w), c(coefficient))
    tail = add(add(div(c(1.0), z), div(c(0.5), square(z))), mul(series, div(w, z)))
    positive = add(total, tail)
    pole = div(c(math.pi**2), square(sin(mul(x, c(math.pi)))))
    return select(reflect, sub(pole, positive), positive)


defjvp(digamma_p, lambda g, x: mul(g, trigamma(x)))

# --- batching: every op here is elementwise, params (none) pass through ----------------------
for _prim in (
    exp_p,
    exp2_p,
    log_p,
    log1p_p,
    expm1_p,
    sqrt_p,
    rsqrt_p,
    cbrt_p,
    square_p,
    sin_p,
    cos_p,
    tan_p,
    asin_p,
    acos_p,
    atan_p,
    atan2_p,
    sinh_p,
    cosh_p,
    tanh_p,
    asinh_p,
    acosh_p,
    atanh_p,
    logistic_p,
    erf_p,
    erfc_p,
    erf_inv_p,
    lgamma_p,
    digamma_p,
):
    elementwise_batching(_prim)

# --- wrappers (the lax API) ------------------------------------------------------------------
exp, exp2, log, log1p, expm1 = (unary_wrapper(p) for p in (exp_p, exp2_p, log_p, log1p_p, expm1_p))
sqrt, cbrt, square = unary_wrapper(sqrt_p), unary_wrapper(cbrt_p), unary_wrapper(square_p)
rsqrt = unary_wrapper(rsqrt_p, doc="1 / sqrt(x).")
sin, cos, tan = unary_wrapper(sin_p), unary_wrapper(cos_p), unary_wrapper(tan_p)
asin, acos, atan = unary_wrapper(asin_p), unary_wrapper(acos_p), unary_wrapper(atan_p)
atan2 = binary_wrapper(atan2_p, doc="atan(x / y) in the quadrant of the point (y, x).")
sinh, cosh, tanh = unary_wrapper(sinh_p), unary_wrapper(cosh_p), unary_wrapper(tanh_p)
asinh, acosh, atanh = unary_wrapper(asinh_p), unary_wrapper(acosh_p), unary_wrapper(atanh_p)
logistic = unary_wrapper(logistic_p, doc="1 / (1 + exp(-x)).")
erf = unary_wrapper(erf_p, doc="The error function.")
erfc = unary_wrapper(erfc_p, doc="The complementary error function 1 - erf(x).")
erf_inv = unary_wrapper(erf_inv_p, doc="The inverse of erf.")
lgamma = unary_wrapper(lgamma_p, doc="log |Gamma(x)|.")
digamma = unary_wrapper(digamma_p, doc="The derivative of lgamma.")


def reciprocal(x):
    """1 / x, as integer_pow(x, -1)."""
    return integer_pow(x, -1)

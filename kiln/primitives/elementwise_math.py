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

import numpy as np
import scipy.special

from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import (FLOAT, INEXACT, NUMBER, broadcast_scalar_shapes,
                                  check_dtype, lax_operands, standard_binop, standard_unop)
from kiln.core import dtypes
from kiln.primitives.elementwise import binary_wrapper, integer_pow, unary_wrapper, via_float32

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
            out = np.asarray(fn(*(a.astype(wide) if a.dtype == dtype else a for a in args),
                                **params))
            return out.astype(dtypes.complex64 if out.dtype.kind == "c" else dtypes.float32)
    impl.__name__ = getattr(fn, "__name__", "impl")
    return impl


__all__ = [
    "pow", "exp", "exp2", "log", "log1p", "expm1", "sqrt", "rsqrt", "cbrt",
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "logistic", "erf", "erfc", "erf_inv", "lgamma", "digamma", "square", "reciprocal",
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
        raise TypeError(f"pow requires the exponent to have the base's dtype or an integer "
                        f"dtype, got base {x.dtype.name} and exponent {y.dtype.name}.")
    shape = broadcast_scalar_shapes("pow", x, y)
    return ShapedArray(shape, x.dtype, x.weak_type and y.weak_type)


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

# --- roots and powers ------------------------------------------------------------------------
sqrt_p = standard_unop("sqrt", via_float32(np.sqrt), INEXACT)
rsqrt_p = standard_unop("rsqrt", precise(lambda x: np.reciprocal(np.sqrt(x))), INEXACT)
cbrt_p = standard_unop("cbrt", precise(np.cbrt), FLOAT)
square_p = standard_unop("square", via_float32(np.square), NUMBER)

# --- trigonometric ---------------------------------------------------------------------------
sin_p = standard_unop("sin", precise(np.sin), INEXACT)
cos_p = standard_unop("cos", precise(np.cos), INEXACT)
tan_p = standard_unop("tan", precise(np.tan), INEXACT)
asin_p = standard_unop("asin", precise(np.arcsin), INEXACT)
acos_p = standard_unop("acos", precise(np.arccos), INEXACT)
atan_p = standard_unop("atan", precise(np.arctan), INEXACT)
atan2_p = standard_binop("atan2", precise(np.arctan2), FLOAT)

# --- hyperbolic ------------------------------------------------------------------------------
sinh_p = standard_unop("sinh", precise(np.sinh), INEXACT)
cosh_p = standard_unop("cosh", precise(np.cosh), INEXACT)
tanh_p = standard_unop("tanh", precise(np.tanh), INEXACT)
asinh_p = standard_unop("asinh", precise(np.arcsinh), INEXACT)
acosh_p = standard_unop("acosh", precise(np.arccosh), INEXACT)
atanh_p = standard_unop("atanh", precise(np.arctanh), INEXACT)

# --- logistic and special functions ----------------------------------------------------------


def _logistic(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "c":
        return np.reciprocal(1 + np.exp(-x))
    return scipy.special.expit(x)  # stable for large |x|


def _digamma(x: np.ndarray) -> np.ndarray:
    # XLA gives NaN at the poles (0, -1, -2, ...), where scipy gives -inf or NaN.
    out = scipy.special.psi(x)
    return np.where((x <= 0) & (x == np.floor(x)), np.nan, out).astype(out.dtype)


logistic_p = standard_unop("logistic", precise(_logistic), INEXACT)
erf_p = standard_unop("erf", precise(scipy.special.erf), FLOAT)
erfc_p = standard_unop("erfc", precise(scipy.special.erfc), FLOAT)
erf_inv_p = standard_unop("erf_inv", precise(scipy.special.erfinv), FLOAT)
lgamma_p = standard_unop("lgamma", precise(scipy.special.gammaln), FLOAT)
digamma_p = standard_unop("digamma", precise(_digamma), FLOAT)

# --- wrappers (the lax API) ------------------------------------------------------------------
exp, exp2, log, log1p, expm1 = (unary_wrapper(p) for p in (exp_p, exp2_p, log_p, log1p_p,
                                                           expm1_p))
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


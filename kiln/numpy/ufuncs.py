"""Elementwise kiln.numpy functions (NumPy's ufuncs and their friends), built from lax with
NumPy broadcasting and JAX's type promotion.

Conventions (JAX's): unary float functions promote bools and integers to the default float type,
keeping weak types; integer division and remainder follow Python's floor semantics (with x // 0
and x % 0 defined, never trapping); comparisons and predicates return bool arrays. The logical,
predicate, complex, number-theory and selection functions live in ufuncs_logic.py and are
re-exported here.
"""

from __future__ import annotations

import builtins
import operator
from typing import Any, Callable

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.trace import Tracer
from kiln.custom_derivatives import custom_jvp
from kiln.numpy.util import (
    _broadcast_to,
    broadcast_arrays_for_lax,
    check_arraylike,
    promote_dtypes,
    promote_dtypes_inexact,
    promote_dtypes_numeric,
    shape as _shape,
    to_kiln,
)

__all__ = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "true_divide",
    "floor_divide",
    "remainder",
    "mod",
    "fmod",
    "divmod",
    "power",
    "float_power",
    "negative",
    "positive",
    "abs",
    "absolute",
    "fabs",
    "sign",
    "floor",
    "ceil",
    "trunc",
    "fix",
    "rint",
    "round",
    "around",
    "sqrt",
    "cbrt",
    "square",
    "reciprocal",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "logaddexp",
    "logaddexp2",
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "arctan2",
    "sinh",
    "cosh",
    "tanh",
    "arcsinh",
    "arccosh",
    "arctanh",
    "deg2rad",
    "rad2deg",
    "degrees",
    "radians",
    "hypot",
    "sinc",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "clip",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "invert",
    "left_shift",
    "right_shift",
    "isnan",
    "isinf",
    "isfinite",
    "isposinf",
    "isneginf",
    "signbit",
    "copysign",
    "nextafter",
    "heaviside",
    "real",
    "imag",
    "conj",
    "conjugate",
    "angle",
    "gcd",
    "lcm",
    "where",
    "select",
    "piecewise",
    "_astype",
]


# --- helpers ---------------------------------------------------------------------------------


def _args(name: str, *args: Any) -> list:
    """Promote to the common dtype (JAX's lattice) and broadcast (rank-0 operands stay)."""
    check_arraylike(name, *args)
    return broadcast_arrays_for_lax(*promote_dtypes(*args))


def _args_inexact(name: str, *args: Any) -> list:
    """Like _args, then bools and integers go to the default float type."""
    check_arraylike(name, *args)
    return broadcast_arrays_for_lax(*promote_dtypes_inexact(*args))


def _args_numeric(name: str, *args: Any) -> list:
    """Like _args, then bools go to the default integer type."""
    check_arraylike(name, *args)
    return broadcast_arrays_for_lax(*promote_dtypes_numeric(*args))


def _const(x, value, weak: bool | None = None):
    """A scalar of x's dtype. By default it is as weak as x, so it leaves the weak type of a
    result alone; weak=False gives the strongly typed constants some JAX functions use (their
    results are then never weak)."""
    return lax.convert_element_type(value, x.dtype, x.weak_type if weak is None else weak)


def _kind(x) -> str:
    dtype = x.dtype
    if dtype == np.bool_:
        return "b"
    return "f" if dtypes.is_floating(dtype) else dtype.kind


def _full_bool(x, value: bool, weak: bool = False):
    return _broadcast_scalar(lax.convert_element_type(value, dtypes.bool_, weak), _shape(x))


def _broadcast_scalar(value, shape: tuple):
    return value if shape == () else _broadcast_to(value, shape)


def _where(condition, x, y):
    """select between same-dtype x and y, broadcasting all three to their common shape."""
    shapes = [_shape(condition), _shape(x), _shape(y)]
    target = np.broadcast_shapes(*shapes)
    x = x if shapes[1] == target else _broadcast_to(x, target)
    y = y if shapes[2] == target else _broadcast_to(y, target)
    if shapes[0] not in ((), target):
        condition = _broadcast_to(condition, target)
    return lax.select_n(condition, y, x)


def _to_bool(x):
    """x != 0 for non-bool x (the truth value logical_* functions use)."""
    if x.dtype == np.bool_:
        return x
    return lax.ne(x, _const(x, 0, weak=True))


# The dtype kinds each promotion leaves unchanged, so a kiln Array of such a kind goes
# straight to lax (the common eager case, which then skips promotion entirely).
_UNCHANGED_KINDS = {_args: "biufc", _args_inexact: "fc", _args_numeric: "iufc"}


def _unary(name: str, lax_fn: Callable, promote: Callable = _args_inexact, doc: str = ""):
    unchanged = _UNCHANGED_KINDS.get(promote, "")

    def ufunc(x, /):
        if type(x) is not Array or x._value.dtype.kind not in unchanged:
            (x,) = promote(name, x)
        return lax_fn(x)

    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = doc or f"Elementwise {name} (NumPy's `{name}`, JAX's dtype rules)."
    return ufunc


def _binary(name: str, lax_fn: Callable, promote: Callable = _args, doc: str = ""):
    def ufunc(x1, x2, /):
        x1, x2 = promote(name, x1, x2)
        return lax_fn(x1, x2)

    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = doc or (f"Elementwise {name} with NumPy broadcasting and JAX type promotion.")
    return ufunc


# --- arithmetic ------------------------------------------------------------------------------


def add(x1, x2, /):
    """x1 + x2 elementwise (logical OR for booleans)."""
    x1, x2 = _args("add", x1, x2)
    return lax.bitwise_or(x1, x2) if x1.dtype == np.bool_ else lax.add(x1, x2)


def multiply(x1, x2, /):
    """x1 * x2 elementwise (logical AND for booleans)."""
    x1, x2 = _args("multiply", x1, x2)
    return lax.bitwise_and(x1, x2) if x1.dtype == np.bool_ else lax.mul(x1, x2)


subtract = _binary("subtract", lax.sub)
true_divide = _binary(
    "true_divide",
    lax.div,
    _args_inexact,
    "x1 / x2 elementwise; integers divide as floats (default float type).",
)
divide = _binary("divide", lax.div, _args_inexact, true_divide.__doc__)
negative = _unary("negative", lax.neg, _args)


def positive(x, /):
    """+x: the array itself."""
    (x,) = _args("positive", x)
    return x


def _float_divmod(x1, x2):
    """Python's float divmod: the quotient is floored, the remainder takes x2's sign."""
    mod = lax.rem(x1, x2)
    numerator = _where(lax.eq(x2, _const(x2, 0)), x1, lax.sub(x1, mod))
    quotient = lax.div(numerator, x2)
    adjust = lax.bitwise_and(lax.ne(mod, _const(mod, 0)), lax.ne(lax.sign(x2), lax.sign(mod)))
    mod = _where(adjust, lax.add(mod, x2), mod)
    quotient = _where(adjust, lax.sub(quotient, _const(quotient, 1)), quotient)
    return lax.round(quotient), mod


def floor_divide(x1, x2, /):
    """x1 // x2 elementwise, rounding toward -inf. Integer division by zero does not trap:
    it builds on lax.div's x / 0 == -1."""
    x1, x2 = _args_numeric("floor_divide", x1, x2)
    kind = _kind(x1)
    if kind == "u":
        return lax.div(x1, x2)
    if kind == "i":
        quotient = lax.div(x1, x2)
        inexact = lax.ne(lax.rem(x1, x2), _const(x1, 0))
        fix = lax.bitwise_and(lax.ne(lax.sign(x1), lax.sign(x2)), inexact)
        return _where(fix, lax.sub(quotient, _const(quotient, 1)), quotient)
    if kind == "c":
        raise TypeError("floor_divide does not support complex-valued inputs")
    return _float_divmod(x1, x2)[0]


def remainder(x1, x2, /):
    """x1 % x2 elementwise with the divisor's sign (Python's %); integer x % 0 is 0."""
    x1, x2 = _args_numeric("remainder", x1, x2)
    if _kind(x2) in "iu":
        x2 = _where(lax.eq(x2, _const(x2, 0)), _const(x2, 1), x2)
    trunc_mod = lax.rem(x1, x2)
    zero = _const(trunc_mod, 0)
    fix = lax.bitwise_and(
        lax.ne(lax.lt(trunc_mod, zero), lax.lt(x2, _const(x2, 0))), lax.ne(trunc_mod, zero)
    )
    return _where(fix, lax.add(trunc_mod, x2), trunc_mod)


mod = remainder


def fmod(x1, x2, /):
    """The C remainder: the dividend's sign; integer x fmod 0 is 0."""
    x1, x2 = _args_numeric("fmod", x1, x2)
    if _kind(x2) in "iu":
        x2 = _where(lax.eq(x2, _const(x2, 0)), _const(x2, 1), x2)
    return lax.rem(x1, x2)


def divmod(x1, x2, /):  # noqa: A001 (NumPy's name)
    """(x1 // x2, x1 % x2)."""
    x1, x2 = _args_numeric("divmod", x1, x2)
    if _kind(x1) in "iu":
        return floor_divide(x1, x2), remainder(x1, x2)
    if _kind(x1) == "c":
        raise TypeError("divmod does not support complex-valued inputs")
    return _float_divmod(x1, x2)


def _concrete_int(x) -> int | None:
    """x as a Python int if it is a concrete integer scalar (so power can unroll), else None."""
    if isinstance(x, Tracer):
        return None
    if isinstance(x, (Array, np.ndarray, np.generic)) and (
        np.ndim(x) != 0 or np.asarray(x).dtype.kind not in "biu"
    ):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def _integer_power(x1, x2):
    """Integers to integer powers by binary exponentiation over the exponent's low 6 bits
    (any larger exponent overflows unless |x1| <= 1), as JAX computes it."""
    zero, one = _const(x2, 0), _const(x2, 1)
    zero_base = lax.bitwise_and(lax.eq(x1, _const(x1, 0)), lax.ne(x2, zero))
    acc = _where(zero_base, _const(x1, 0), _const(x1, 1))
    for _ in range(6):
        odd = lax.ne(lax.bitwise_and(x2, one), zero)
        acc = _where(odd, lax.mul(acc, x1), acc)
        x1 = lax.mul(x1, x1)
        x2 = lax.shift_right_logical(x2, one)
    return acc


def power(x1, x2, /):
    """x1 ** x2 elementwise. A concrete integer exponent unrolls into multiplications
    (lax.integer_pow); integer bases with integer exponents stay integers."""
    check_arraylike("power", x1, x2)
    exponent = _concrete_int(x2)
    if exponent is not None:
        (x1,) = promote_dtypes_numeric(x1)
        return lax.integer_pow(x1, exponent)
    base, expo = broadcast_arrays_for_lax(to_kiln(x1), to_kiln(x2))
    base_n, expo_n = promote_dtypes_numeric(base, expo)
    if _kind(base_n) in "iu":
        return _integer_power(*broadcast_arrays_for_lax(base_n, expo_n))
    if _kind(base) in "fc" and _kind(expo) in "iu":
        return lax.pow(base, expo)  # no promotion: an integer exponent stays exact
    return lax.pow(base_n, expo_n)


def float_power(x1, x2, /):
    """x1 ** x2 computed in the widest float type available (float64 only with x64)."""
    check_arraylike("float_power", x1, x2)
    promoted = promote_dtypes_numeric(x1, x2)
    wide = dtypes.complex128 if _kind(promoted[0]) == "c" else dtypes.float64
    dtype = dtypes.canonicalize(wide)
    # Convert the original operands: a Python int must not wrap to an integer dtype first.
    x1, x2 = (to_kiln(x, dtype, p.weak_type) for x, p in zip((x1, x2), promoted))
    return lax.pow(*broadcast_arrays_for_lax(x1, x2))


def abs(x, /):  # noqa: A001 (NumPy's name)
    """|x| elementwise; the real dtype for complex x; bools and unsigned ints unchanged."""
    (x,) = _args("abs", x)
    return x if _kind(x) in "bu" else lax.abs(x)


absolute = abs


def fabs(x, /):
    """|x| as a float (integers promote to the default float type)."""
    (x,) = _args_inexact("fabs", x)
    if _kind(x) == "c":
        raise TypeError("ufunc 'fabs' does not support complex dtypes")
    return lax.abs(x)


sign = _unary(
    "sign", lax.sign, _args, "-1, 0 or 1 by the sign of x (x / |x| for complex); NaN stays NaN."
)
sqrt = _unary("sqrt", lax.sqrt)
cbrt = _unary("cbrt", lax.cbrt)
square = _unary("square", lax.square, _args_numeric, "x * x (bools become integers).")
reciprocal = _unary("reciprocal", lambda x: lax.integer_pow(x, -1), doc="1 / x as a float.")

# --- rounding --------------------------------------------------------------------------------


def _keep_integers(name: str, lax_fn: Callable, doc: str):
    def ufunc(x, /):
        (x,) = _args(name, x)
        return x if _kind(x) in "biu" else lax_fn(x)

    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = doc
    return ufunc


def _trunc(x):
    return _where(lax.lt(x, _const(x, 0)), lax.ceil(x), lax.floor(x))


floor = _keep_integers("floor", lax.floor, "The largest integer <= x (integers unchanged).")
ceil = _keep_integers("ceil", lax.ceil, "The smallest integer >= x (integers unchanged).")
trunc = _keep_integers("trunc", _trunc, "x rounded toward zero (integers unchanged).")
fix = _keep_integers("fix", _trunc, "x rounded toward zero; the same as trunc.")


def rint(x, /):
    """x rounded to the nearest integer, ties to even, as a float."""
    check_arraylike("rint", x)
    x = to_kiln(x)
    if _kind(x) in "biu":  # integers need no rounding, only a (strongly typed) float
        return lax.convert_element_type(x, dtypes.default_float(), False)
    if _kind(x) == "c":
        return lax.complex(lax.round(lax.real(x), 1), lax.round(lax.imag(x), 1))
    return lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)


def round(a, decimals: int = 0, out=None):  # noqa: A001 (NumPy's name)
    """a rounded to `decimals` decimal places, ties to even (integers: decimals >= 0 only)."""
    check_arraylike("round", a)
    (a,) = promote_dtypes(a)
    decimals = operator.index(decimals)
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.round is not supported.")
    kind = _kind(a)
    if kind in "iu":
        if decimals < 0:
            raise NotImplementedError("integer np.round not implemented for decimals < 0")
        return a
    if kind == "b":
        raise ValueError("jnp.round does not accept bool arrays; convert with astype first.")
    dtype = a.dtype
    if decimals > np.log10(float(dtypes.finfo(dtype).max)):
        return a  # rounding beyond the type's precision changes nothing

    def round_real(x):
        if decimals == 0:
            return lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
        # Scale, round, unscale; small floats scale in float32 so 10**decimals stays exact.
        wide = (
            lax.convert_element_type(x, dtypes.float32, x.weak_type)
            if x.dtype in (dtypes.float16, dtypes.bfloat16)
            else x
        )
        factor = _const(wide, 10.0**decimals)
        scaled = lax.round(lax.mul(wide, factor), lax.RoundingMethod.TO_NEAREST_EVEN)
        return lax.convert_element_type(lax.div(scaled, factor), x.dtype, x.weak_type)

    if kind == "c":
        return lax.complex(round_real(lax.real(a)), round_real(lax.imag(a)))
    return round_real(a)


around = round

# --- exponentials, logarithms, trigonometry --------------------------------------------------
exp = _unary("exp", lax.exp)
exp2 = _unary("exp2", lax.exp2)
expm1 = _unary("expm1", lax.expm1, doc="exp(x) - 1, accurate for small x.")
log = _unary("log", lax.log)
log1p = _unary("log1p", lax.log1p, doc="log(1 + x), accurate for small x.")
log2 = _unary("log2", lambda x: lax.div(lax.log(x), _const(x, np.log(2), weak=False)))
log10 = _unary("log10", lambda x: lax.div(lax.log(x), _const(x, np.log(10), weak=False)))
sin, cos, tan = _unary("sin", lax.sin), _unary("cos", lax.cos), _unary("tan", lax.tan)
arcsin, arccos = _unary("arcsin", lax.asin), _unary("arccos", lax.acos)
arctan = _unary("arctan", lax.atan)
sinh, cosh, tanh = _unary("sinh", lax.sinh), _unary("cosh", lax.cosh), _unary("tanh", lax.tanh)
arcsinh, arccosh = _unary("arcsinh", lax.asinh), _unary("arccosh", lax.acosh)
arctanh = _unary("arctanh", lax.atanh)
arctan2 = _binary(
    "arctan2", lax.atan2, _args_inexact, "The angle of the point (x2, x1) in (-pi, pi]."
)
deg2rad = _unary("deg2rad", lambda x: lax.mul(x, _const(x, np.pi / 180)), doc="Degrees to radians.")
radians = _unary("radians", deg2rad, doc="Degrees to radians.")
rad2deg = _unary("rad2deg", lambda x: lax.mul(x, _const(x, 180 / np.pi)), doc="Radians to degrees.")
degrees = _unary("degrees", rad2deg, doc="Radians to degrees.")


def _logaddexp(x1, x2, log1p_of_exp: Callable):
    if _kind(x1) == "c":
        raise TypeError("logaddexp of complex inputs is not supported")
    larger = lax.max(x1, x2)
    delta = lax.sub(x1, x2)
    # Equal infinities make delta NaN; then x1 + x2 gives the right +-inf (or NaN).
    return _where(
        lax.ne(delta, delta),
        lax.add(x1, x2),
        lax.add(larger, log1p_of_exp(lax.neg(lax.abs(delta)))),
    )


def _logaddexp_e(x1, x2):
    return _logaddexp(x1, x2, lambda d: lax.log1p(lax.exp(d)))


def _logaddexp_2(x1, x2):
    return _logaddexp(x1, x2, lambda d: lax.div(lax.log1p(lax.exp2(d)), _const(d, np.log(2))))


def _finite_or_zero(x):
    """x with +inf replaced by 0 (the derivative of logaddexp at infinite arguments)."""
    return _where(lax.eq(x, _const(x, np.inf)), _const(x, 0), x)


def _logaddexp_jvp(exp_fn, log_fn):
    """d out = t1 * b^(x1 - out) + t2 * b^(x2 - out): each argument's share of the sum, with
    +inf arguments and results counted as 0 so that the shares stay finite, as JAX does."""

    def jvp(primals, tangents):
        x1, x2 = primals
        t1, t2 = tangents
        out = log_fn(x1, x2)
        share1 = exp_fn(lax.sub(_finite_or_zero(x1), _finite_or_zero(out)))
        share2 = exp_fn(lax.sub(_finite_or_zero(x2), _finite_or_zero(out)))
        return out, lax.add(lax.mul(t1, share1), lax.mul(t2, share2))

    return jvp


_logaddexp_e = custom_jvp(_logaddexp_e)
_logaddexp_e.defjvp(_logaddexp_jvp(lax.exp, _logaddexp_e))
_logaddexp_2 = custom_jvp(_logaddexp_2)
_logaddexp_2.defjvp(_logaddexp_jvp(lax.exp2, _logaddexp_2))


def logaddexp(x1, x2, /):
    """log(exp(x1) + exp(x2)) without overflow."""
    x1, x2 = _args_inexact("logaddexp", x1, x2)
    return _logaddexp_e(x1, x2)


def logaddexp2(x1, x2, /):
    """log2(2**x1 + 2**x2) without overflow."""
    x1, x2 = _args_inexact("logaddexp2", x1, x2)
    return _logaddexp_2(x1, x2)


def hypot(x1, x2, /):
    """sqrt(x1**2 + x2**2) without intermediate overflow."""
    x1, x2 = _args_inexact("hypot", x1, x2)
    if _kind(x1) == "c":
        raise TypeError("hypot does not support complex-valued inputs")
    x1, x2 = lax.abs(x1), lax.abs(x2)
    either_inf = lax.bitwise_or(isinf(x1), isinf(x2))
    big, small = lax.max(x1, x2), lax.min(x1, x2)
    big_is_zero = lax.eq(big, _const(big, 0))
    ratio = lax.div(small, _where(big_is_zero, _const(big, 1), big))
    out = _where(
        big_is_zero, big, lax.mul(big, lax.sqrt(lax.add(_const(ratio, 1), lax.square(ratio))))
    )
    return _where(either_inf, _const(out, np.inf), out)


def sinc(x, /):
    """sin(pi x) / (pi x), with sinc(0) = 1."""
    (x,) = _args_inexact("sinc", x)
    is_zero = lax.eq(x, _const(x, 0))
    pi_x = lax.mul(_const(x, np.pi), x)
    safe = _where(is_zero, _const(x, 1), pi_x)
    return _where(is_zero, _const(x, 1), lax.div(lax.sin(safe), safe))


# --- comparisons, extrema, clip --------------------------------------------------------------
maximum = _binary("maximum", lax.max, doc="The elementwise maximum; NaN propagates.")
minimum = _binary("minimum", lax.min, doc="The elementwise minimum; NaN propagates.")


def fmax(x1, x2, /):
    """The elementwise maximum, ignoring NaN where the other argument is a number."""
    x1, x2 = _args("fmax", x1, x2)
    return _where(lax.bitwise_or(lax.gt(x1, x2), isnan(x2)), x1, x2)


def fmin(x1, x2, /):
    """The elementwise minimum, ignoring NaN where the other argument is a number."""
    x1, x2 = _args("fmin", x1, x2)
    return _where(lax.bitwise_or(lax.lt(x1, x2), isnan(x2)), x1, x2)


def clip(arr=None, /, min=None, max=None, *, a=None, a_min=None, a_max=None):  # noqa: A002
    """arr limited to [min, max] (either may be None). Also accepts NumPy 1's a/a_min/a_max."""
    if a is not None:
        if arr is not None:
            raise TypeError("clip got the array twice (positionally and as a=)")
        arr = a
    if a_min is not None:
        if min is not None:
            raise TypeError("clip got both min and a_min; pass only min")
        min = a_min
    if a_max is not None:
        if max is not None:
            raise TypeError("clip got both max and a_max; pass only max")
        max = a_max
    if arr is None:
        raise TypeError("clip() missing the array argument")
    check_arraylike("clip", arr, *(v for v in (min, max) if v is not None))
    if builtins.any(
        v is not None and dtypes.is_complex(dtypes.dtype_and_weak_of(v)[0]) for v in (arr, min, max)
    ):
        raise ValueError(
            "Clip received a complex value either through the input or the "
            "min/max keywords. Complex values have no ordering and cannot be "
            "clipped. Use the real or imaginary parts with jnp.real / jnp.imag."
        )
    out = arr
    if min is not None:
        out = maximum(min, out)
    if max is not None:
        out = minimum(max, out)
    return out if min is not None or max is not None else to_kiln(arr)


equal = _binary("equal", lax.eq, doc="x1 == x2 elementwise.")
not_equal = _binary("not_equal", lax.ne, doc="x1 != x2 elementwise.")
less = _binary("less", lax.lt, doc="x1 < x2 elementwise.")
less_equal = _binary("less_equal", lax.le, doc="x1 <= x2 elementwise.")
greater = _binary("greater", lax.gt, doc="x1 > x2 elementwise.")
greater_equal = _binary("greater_equal", lax.ge, doc="x1 >= x2 elementwise.")


# --- dtype conversion (the .astype method) ---------------------------------------------------


def _astype(x, dtype, copy: bool = False, device=None):
    """x converted to `dtype` (strongly typed): the .astype method of kiln arrays."""
    del copy, device  # arrays are immutable and there is one device
    check_arraylike("astype", x)
    if dtype is None:
        dtype = dtypes.default_float()
    return lax.convert_element_type(to_kiln(x), dtypes.canonicalize(dtype), False)


# The logical, predicate, complex, number-theory and selection functions live in ufuncs_logic.py,
# which builds on the helpers above; it is imported last so that they exist when it loads.
from kiln.numpy.ufuncs_logic import (  # noqa: E402,F401
    _logical,
    logical_and,
    logical_or,
    logical_xor,
    logical_not,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    bitwise_not,
    invert,
    left_shift,
    right_shift,
    isnan,
    isinf,
    isfinite,
    _isinf_with_sign,
    isposinf,
    isneginf,
    signbit,
    copysign,
    nextafter,
    heaviside,
    real,
    imag,
    conjugate,
    conj,
    angle,
    _gcd_values,
    _integer_args,
    gcd,
    lcm,
    where,
    select,
    piecewise,
)

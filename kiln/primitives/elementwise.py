"""Elementwise primitives: arithmetic, rounding, comparisons, bitwise ops and shifts, complex
parts. select/clamp and dtype conversion live in elementwise_select_convert.py (re-exported
here), transcendental and special functions in elementwise_math.py. Each block holds all the
rules of one primitive.

Weak types follow JAX: a result is weakly typed exactly when every operand is (this holds for
comparisons too, whose boolean result is then weak), which is also the default eager rule.
Integer arithmetic follows XLA: division truncates toward zero, x / 0 == -1, x % 0 == x,
INT_MIN / -1 == INT_MIN, and shifts by at least the bit width give 0 (or the sign fill).
"""

from __future__ import annotations

import builtins
import enum
from typing import Callable

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.ad_util import is_undefined_primal
from kiln.core.primitive import Primitive
from kiln.primitives.base import (
    ANY,
    BOOL,
    COMPLEX,
    FLOAT,
    INT,
    INTEGRAL,
    NUMBER,
    SINT,
    bdim_at_front,
    broadcast_to_shape,
    check_dtype,
    def_non_differentiable,
    defjvp,
    defjvp_zero,
    deflinear,
    elementwise_batching,
    ignore_fp_errors,
    lax_operands,
    real_dtype,
    scalar_to_array,
    standard_binop,
    standard_unop,
    to_bool,
    unbroadcast,
    zeros_like,
)
from kiln.primitives.shape import broadcast_in_dim

__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "neg",
    "max",
    "min",
    "integer_pow",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "RoundingMethod",
    "is_finite",
    "nextafter",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "bitwise_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "population_count",
    "clz",
    "shift_left",
    "shift_right_logical",
    "shift_right_arithmetic",
    "real",
    "imag",
    "conj",
    "complex",
    "select_n",
    "select",
    "clamp",
    "convert_element_type",
    "bitcast_convert_type",
]

_SMALL_FLOATS = dtypes.NARROW_FLOATS  # float16, bfloat16 and the float8 types
ORDERED = (BOOL, INT, FLOAT)  # dtypes with a total order (lt, max, clamp)


# --- constructors ----------------------------------------------------------------------------


def via_float32(fn: Callable) -> Callable:
    """Evaluate `fn` on float16/bfloat16/float8 operands in float32 and round once, as NumPy
    and ml_dtypes do (most float8 types through float16, as XLA); wider dtypes natively. The
    result keeps the operand dtype family (a complex result of a real op keeps `fn`'s own
    dtype)."""

    def impl(*args, **params):
        dtype = args[0].dtype
        with np.errstate(all="ignore"):
            if dtype in _SMALL_FLOATS:
                wide = [a.astype(np.float32) if a.dtype == dtype else a for a in args]
                return dtypes.round_to_narrow(np.asarray(fn(*wide, **params)), dtype)
            out = np.asarray(fn(*args, **params))
            return out if out.dtype == dtype or out.dtype.kind != dtype.kind else out.astype(dtype)

    impl.__name__ = getattr(fn, "__name__", "impl")
    return impl


def binary_wrapper(prim: Primitive, name: str | None = None, doc: str = "") -> Callable:
    def wrapper(x, y):
        return prim.bind(*lax_operands(x, y))

    wrapper.__name__ = name or prim.name
    wrapper.__doc__ = doc or f"Elementwise {prim.name} (lax-level: same dtypes, equal shapes)."
    return wrapper


def unary_wrapper(prim: Primitive, name: str | None = None, doc: str = "") -> Callable:
    def wrapper(x):
        return prim.bind(x)

    wrapper.__name__ = name or prim.name
    wrapper.__doc__ = doc or f"Elementwise {prim.name}."
    return wrapper


# --- pieces shared by derivative and batching rules ------------------------------------------


def filled_like(x, value):
    """An array of x's shape and dtype (weakly typed) holding `value` everywhere."""
    return broadcast_in_dim(scalar_to_array(value, x.dtype), tuple(x.shape), ())


def defjvp_from_result(prim: Primitive, *jvp_fns: Callable) -> Callable:
    """Declare the jvp of an elementwise op whose derivative is best written with its result
    (exp, sqrt, max), as base.defjvp does otherwise: `jvp_fns[i](g, out, *primals)` is the
    output tangent that operand i's tangent g contributes."""

    def jvp_rule(primals, tangents):
        out = prim.bind(*primals)
        out_tangent = None
        for jvp_fn, tangent in zip(jvp_fns, tangents):
            if tangent is not None:
                term = broadcast_to_shape(jvp_fn(tangent, out, *primals), out.shape)
                out_tangent = term if out_tangent is None else add(out_tangent, term)
        return out, out_tangent

    return prim.def_jvp(jvp_rule)


def batched_operand(x, dim: int | None, size: int, shape: tuple, keep_scalar: bool):
    """x as an operand of a batched op whose full-size operands have `shape` (batch first). An
    unbatched rank-0 x stays rank-0 where the op broadcasts it (keep_scalar); a batched
    per-example scalar is broadcast along the batch; anything else moves its batch first."""
    if dim is None and not x.shape and keep_scalar:
        return x
    x = bdim_at_front(x, dim, size)
    return x if tuple(x.shape) == shape else broadcast_in_dim(x, shape, (0,))


def _linear_cotangents(args, make_cotangent: Callable) -> list:
    """The cotangent `make_cotangent(i, arg)` of each linear (undefined) argument, None for the
    known ones."""
    return [make_cotangent(i, a) if is_undefined_primal(a) else None for i, a in enumerate(args)]


# --- arithmetic ------------------------------------------------------------------------------
add_p = standard_binop("add", via_float32(np.add), NUMBER)
sub_p = standard_binop("sub", via_float32(np.subtract), NUMBER)
mul_p = standard_binop("mul", via_float32(np.multiply), NUMBER)
# The sum of two tangents or cotangents, as differentiation emits it (JAX's `add_any`): an add
# that passes may treat as adding possibly-zero contributions.
add_any_p = standard_binop("add_any", via_float32(np.add), NUMBER)

# A rank-0 operand that the op broadcast receives its cotangent summed (unbroadcast).
for _prim in (add_p, add_any_p):
    defjvp(_prim, lambda g, x, y: g, lambda g, x, y: g)
    _prim.def_transpose(
        lambda ct, x, y: _linear_cotangents((x, y), lambda i, a: unbroadcast(ct, a.shape))
    )
defjvp(sub_p, lambda g, x, y: g, lambda g, x, y: neg(g))
sub_p.def_transpose(
    lambda ct, x, y: _linear_cotangents(
        (x, y), lambda i, a: unbroadcast(ct if i == 0 else neg(ct), a.shape)
    )
)
defjvp(mul_p, lambda g, x, y: mul(g, y), lambda g, x, y: mul(x, g))


@mul_p.def_transpose
def _mul_transpose_rule(ct, x, y):
    # mul is bilinear: it transposes in the one operand that is linear, the other is known.
    if is_undefined_primal(x) and is_undefined_primal(y):
        raise TypeError("mul of two linear values is not linear and cannot be transposed")
    if is_undefined_primal(x):
        return [unbroadcast(mul(ct, y), x.shape), None]
    return [None, unbroadcast(mul(x, ct), y.shape)]


for _prim in (add_p, add_any_p, sub_p, mul_p):
    elementwise_batching(_prim)


def _div_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "iu":
        return np.asarray(np.true_divide(x, y)).astype(x.dtype, copy=False)
    # C semantics, as XLA defines them: truncate toward zero; x / 0 == -1; INT_MIN / -1 wraps.
    x, y = np.broadcast_arrays(x, y)
    zero = y == 0
    safe_y = np.where(zero, np.ones((), y.dtype), y)
    if x.dtype.kind == "i":
        overflow = (y == -1) & (x == np.iinfo(x.dtype).min)
        safe_y = np.where(overflow, np.ones((), y.dtype), safe_y)
        magnitude = (
            np.abs(x.astype(np.int64)) // np.abs(safe_y.astype(np.int64))
            if x.dtype.itemsize < 8
            else _abs_uint64(x) // _abs_uint64(safe_y)
        )
        negative = (x < 0) != (safe_y < 0)
        quotient = np.where(negative, -magnitude.astype(np.int64), magnitude.astype(np.int64))
        quotient = np.where(overflow, x, quotient.astype(x.dtype))
    else:
        quotient = x // safe_y
    return np.where(zero, np.array(-1).astype(x.dtype), quotient).astype(x.dtype)


def _abs_uint64(x: np.ndarray) -> np.ndarray:
    """|x| of int64 values as uint64, exact even for INT64_MIN."""
    u = x.astype(np.uint64)
    return np.where(x < 0, ~u + np.uint64(1), u)


div_p = standard_binop("div", ignore_fp_errors(via_float32(_div_impl)), NUMBER)
defjvp(div_p, lambda g, x, y: div(g, y), lambda g, x, y: mul(mul(neg(g), x), integer_pow(y, -2)))


@div_p.def_transpose
def _div_transpose_rule(ct, x, y):
    if is_undefined_primal(y):
        raise TypeError(
            "div is linear only in its numerator; a linear denominator cannot be transposed"
        )
    return [unbroadcast(div(ct, y), x.shape), None]


elementwise_batching(div_p)


def _rem_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "iu":
        return np.fmod(x, y)
    # The remainder has the dividend's sign; x % 0 == x; x % -1 == 0 (no INT_MIN / -1 trap).
    x, y = np.broadcast_arrays(x, y)
    safe_y = np.where(y == 0, np.ones((), y.dtype), y)
    if x.dtype.kind == "i":
        safe_y = np.where(safe_y == -1, np.ones((), y.dtype), safe_y)
    out = np.fmod(x, safe_y)
    return np.where(y == 0, x, out).astype(x.dtype)


rem_p = standard_binop("rem", ignore_fp_errors(via_float32(_rem_impl)), (INT, FLOAT))
# rem(x, y) = x - y * trunc(x / y), and trunc(x / y) is piecewise constant.
defjvp(
    rem_p,
    lambda g, x, y: g,
    lambda g, x, y: mul(neg(g), mul(sign(div(x, y)), floor(abs(div(x, y))))),
)
elementwise_batching(rem_p)

neg_p = standard_unop("neg", ignore_fp_errors(np.negative), NUMBER)
deflinear(neg_p, lambda ct, x: [neg(ct)])
elementwise_batching(neg_p)


def _max_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "c":  # lexicographic order on (real, imag), NaN-propagating
        return np.where(_complex_lt(y, x) | np.isnan(x), x, y)
    out = np.maximum(x, y)
    if _is_real_float(x.dtype):
        out = _order_signed_zeros(out, x, y, prefer_negative=False)
    return out


def _min_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "c":
        return np.where(_complex_lt(x, y) | np.isnan(x), x, y)
    out = np.minimum(x, y)
    if _is_real_float(x.dtype):
        out = _order_signed_zeros(out, x, y, prefer_negative=True)
    return out


def _is_real_float(dtype: np.dtype) -> bool:
    return dtypes.is_floating(dtype)


def _order_signed_zeros(
    out: np.ndarray, x: np.ndarray, y: np.ndarray, prefer_negative: bool
) -> np.ndarray:
    """Fix the zeros of NumPy's maximum/minimum to IEEE 754's maximum/minimum, which XLA
    implements: -0.0 orders below +0.0, while NumPy returns either zero of a tie. Only a zero
    result can be affected, so arrays without one cost a comparison."""
    if np.count_nonzero(out) == out.size:  # (cheaper than (out == 0).any() on small arrays)
        return out
    tie = (out == 0) & (x == y)
    # On a tie of zeros, take the operand that has the wanted sign, if either has it.
    pick_x = np.signbit(x) if prefer_negative else ~np.signbit(x)
    return np.where(tie, np.where(pick_x, x, y), out)


def _complex_lt(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.real < b.real) | ((a.real == b.real) & (a.imag < b.imag))


max_p = standard_binop("max", ignore_fp_errors(_max_impl), ANY)
min_p = standard_binop("min", ignore_fp_errors(_min_impl), ANY)


def _balanced_choice(operand, out, other):
    """1 where `operand` is the result of max/min, 0.5 where `other` ties with it, else 0: the
    derivative at a tie is split evenly between the operands, as in JAX."""
    chosen = convert_element_type(eq(operand, out), out.dtype)
    tied = convert_element_type(eq(other, out), out.dtype)
    return div(chosen, add(tied, 1))


for _prim in (max_p, min_p):
    defjvp_from_result(
        _prim,
        lambda g, out, x, y: mul(g, _balanced_choice(x, out, y)),
        lambda g, out, x, y: mul(g, _balanced_choice(y, out, x)),
    )
    elementwise_batching(_prim)

# --- integer_pow -----------------------------------------------------------------------------
integer_pow_p = Primitive("integer_pow")


@integer_pow_p.def_impl
def _integer_pow_impl(x: np.ndarray, *, y: int) -> np.ndarray:
    # Binary exponentiation with one rounding per multiply, as XLA lowers integer_pow.
    with np.errstate(all="ignore"):
        if y == 0:
            return np.ones_like(x)
        base = x.astype(np.float32) if x.dtype in _SMALL_FLOATS else x
        acc, n = None, builtins.abs(y)
        while n:
            if n & 1:
                acc = base if acc is None else np.multiply(acc, base)
            n >>= 1
            if n:
                base = np.multiply(base, base)
        if y < 0:
            acc = np.reciprocal(acc)
        return np.asarray(acc).astype(x.dtype)


@integer_pow_p.def_abstract_eval
def _integer_pow_abstract_eval(x: ShapedArray, *, y: int) -> ShapedArray:
    check_dtype("integer_pow", x.dtype, NUMBER)
    if y < 0 and x.dtype.kind in "iu":
        raise TypeError(
            f"integer_pow of an integer array ({x.dtype.name}) needs a "
            f"non-negative exponent y, got y={y}; convert x to a float dtype first."
        )
    return ShapedArray(x.shape, x.dtype, x.weak_type)


@integer_pow_p.def_jvp
def _integer_pow_jvp_rule(primals, tangents, *, y: int):
    (x,) = primals
    (g,) = tangents
    out = integer_pow_p.bind(x, y=y)
    if y == 0:  # a constant
        return out, None
    if y == 1:
        return out, g
    power = x if y == 2 else integer_pow(x, y - 1)
    return out, mul(g, mul(power, y))


elementwise_batching(integer_pow_p)


def integer_pow(x, y: int):
    """x ** y for a static Python int exponent y (as a chain of multiplications)."""
    if isinstance(y, bool) or not isinstance(y, (int, np.integer)):
        raise TypeError(
            f"integer_pow exponent y must be a Python int, got {y!r}; use lax.pow "
            "for array exponents."
        )
    return integer_pow_p.bind(x, y=int(y))


# --- abs, sign -------------------------------------------------------------------------------
abs_p = standard_unop(
    "abs", ignore_fp_errors(np.abs), (SINT, FLOAT, COMPLEX), result_dtype=real_dtype
)


def _abs_jvp_rule(g, out, x):
    if x.dtype.kind != "c":
        return select(ge(x, 0), g, neg(g))  # JAX's choice: slope 1 at 0
    # d|x| = Re(conj(x) / |x| * dx), and 0 at x == 0 (where any unit vector would do).
    safe_out = select(eq(out, 0), filled_like(out, 1), out)
    return real(mul(g, div(conj(x), convert_element_type(safe_out, x.dtype))))


defjvp_from_result(abs_p, _abs_jvp_rule)
elementwise_batching(abs_p)


def _sign_impl(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "u":
        return (x > 0).astype(x.dtype)
    if x.dtype.kind == "c":
        magnitude = np.abs(x)
        out = x / np.where(magnitude == 0, 1, magnitude).astype(x.dtype)
        return np.where(magnitude == 0, np.zeros((), x.dtype), out).astype(x.dtype)
    one = np.ones((), x.dtype)
    # Unlike np.sign, keep -0.0 (and NaN) as they are, as XLA does.
    return np.where(x > 0, one, np.where(x < 0, -one, x)).astype(x.dtype)


sign_p = standard_unop("sign", ignore_fp_errors(_sign_impl), NUMBER)
defjvp_zero(sign_p)
elementwise_batching(sign_p)

# --- rounding --------------------------------------------------------------------------------


class RoundingMethod(enum.IntEnum):
    """How lax.round breaks ties: away from zero (lax's default) or to the nearest even."""

    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


floor_p = standard_unop("floor", np.floor, FLOAT)
ceil_p = standard_unop("ceil", np.ceil, FLOAT)
round_p = Primitive("round")


@round_p.def_impl
def _round_impl(x: np.ndarray, *, rounding_method: RoundingMethod) -> np.ndarray:
    with np.errstate(all="ignore"):
        if rounding_method == RoundingMethod.TO_NEAREST_EVEN:
            return np.rint(x)
        # x - trunc(x) is exact, so ties are detected without the double rounding of
        # trunc(x + 0.5); trunc keeps -0.0 (also for -0.5 < x < 0), inf and nan, and only the
        # elements that move get a step added (adding +0.0 would turn -0.0 into +0.0).
        whole = np.trunc(x)
        return np.where(np.abs(x - whole) >= 0.5, whole + np.sign(x), whole).astype(x.dtype)


@round_p.def_abstract_eval
def _round_abstract_eval(x: ShapedArray, *, rounding_method) -> ShapedArray:
    check_dtype("round", x.dtype, FLOAT)
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def round(x, rounding_method=RoundingMethod.AWAY_FROM_ZERO):  # noqa: A001 (lax's name)
    """Round to the nearest integer; ties away from zero unless rounding_method says
    RoundingMethod.TO_NEAREST_EVEN (1)."""
    try:
        method = RoundingMethod(int(rounding_method))
    except (TypeError, ValueError):
        raise ValueError(
            f"round: rounding_method must be 0 (AWAY_FROM_ZERO) or 1 "
            f"(TO_NEAREST_EVEN), got {rounding_method!r}"
        ) from None
    return round_p.bind(x, rounding_method=method)


is_finite_p = standard_unop("is_finite", np.isfinite, FLOAT, result_dtype=to_bool)
# np.nextafter has native float16 and bfloat16 (ml_dtypes) loops, which must not go via f32.
nextafter_p = standard_binop("nextafter", ignore_fp_errors(np.nextafter), FLOAT)

# Rounding is piecewise constant and is_finite boolean: zero tangents.
for _prim in (floor_p, ceil_p, round_p, is_finite_p):
    defjvp_zero(_prim)
    elementwise_batching(_prim)

def_non_differentiable(
    nextafter_p, "nextafter steps to an adjacent float; like JAX, kiln defines no derivative for it"
)
elementwise_batching(nextafter_p)

# --- comparisons -----------------------------------------------------------------------------


def _compare(np_fn: Callable) -> Callable:
    def impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # bfloat16 comparisons with NaN warn
            return np.asarray(np_fn(x, y), dtype=np.bool_)

    impl.__name__ = np_fn.__name__
    return impl


eq_p = standard_binop("eq", _compare(np.equal), ANY, result_dtype=to_bool)
ne_p = standard_binop("ne", _compare(np.not_equal), ANY, result_dtype=to_bool)
lt_p = standard_binop("lt", _compare(np.less), ORDERED, result_dtype=to_bool)
le_p = standard_binop("le", _compare(np.less_equal), ORDERED, result_dtype=to_bool)
gt_p = standard_binop("gt", _compare(np.greater), ORDERED, result_dtype=to_bool)
ge_p = standard_binop("ge", _compare(np.greater_equal), ORDERED, result_dtype=to_bool)

# --- logical / bitwise -----------------------------------------------------------------------
not_p = standard_unop("not", np.invert, INTEGRAL)
and_p = standard_binop("and", np.bitwise_and, INTEGRAL)
or_p = standard_binop("or", np.bitwise_or, INTEGRAL)
xor_p = standard_binop("xor", np.bitwise_xor, INTEGRAL)


def _unsigned_view(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _population_count_impl(x: np.ndarray) -> np.ndarray:
    return np.bitwise_count(_unsigned_view(x)).astype(x.dtype)


def _clz_impl(x: np.ndarray) -> np.ndarray:
    u = _unsigned_view(x)
    bits = 8 * x.dtype.itemsize
    length = np.zeros(u.shape, np.int64)  # bit length, found by halving the search range
    step = bits // 2
    while step:
        high = u >= (np.uint64(1) << np.uint64(step)).astype(u.dtype)
        length += np.where(high, step, 0)
        u = np.where(high, u >> np.asarray(step, u.dtype), u)
        step //= 2
    length += u > 0
    return (bits - length).astype(x.dtype)


population_count_p = standard_unop("population_count", _population_count_impl, INT)
clz_p = standard_unop("clz", _clz_impl, INT)


def _shift_amount(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shift as an unsigned amount (negative shifts are huge), and where it is too large."""
    amount = _unsigned_view(y)
    too_large = amount >= 8 * x.dtype.itemsize
    return np.where(too_large, np.zeros((), amount.dtype), amount), too_large


def _shift_left_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    amount, too_large = _shift_amount(x, y)
    shifted = np.asarray(np.left_shift(_unsigned_view(x), amount))
    return np.where(too_large, np.zeros((), x.dtype), shifted.view(x.dtype)).astype(x.dtype)


def _shift_right_logical_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    amount, too_large = _shift_amount(x, y)
    shifted = np.asarray(np.right_shift(_unsigned_view(x), amount))
    return np.where(too_large, np.zeros((), x.dtype), shifted.view(x.dtype)).astype(x.dtype)


def _shift_right_arithmetic_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    amount, too_large = _shift_amount(x, y)
    signed = x.view(np.dtype(f"i{x.dtype.itemsize}"))
    shifted = np.right_shift(signed, amount.astype(signed.dtype))
    fill = np.where(signed < 0, np.array(-1, signed.dtype), np.zeros((), signed.dtype))
    out = np.asarray(np.where(too_large, fill, shifted), dtype=signed.dtype)
    return out.view(x.dtype)


shift_left_p = standard_binop("shift_left", _shift_left_impl, INT)
shift_right_logical_p = standard_binop("shift_right_logical", _shift_right_logical_impl, INT)
shift_right_arithmetic_p = standard_binop(
    "shift_right_arithmetic", _shift_right_arithmetic_impl, INT
)

# Comparisons, bitwise ops and shifts have boolean or integer results: zero tangents.
for _prim in (
    eq_p,
    ne_p,
    lt_p,
    le_p,
    gt_p,
    ge_p,
    not_p,
    and_p,
    or_p,
    xor_p,
    population_count_p,
    clz_p,
    shift_left_p,
    shift_right_logical_p,
    shift_right_arithmetic_p,
):
    defjvp_zero(_prim)
    elementwise_batching(_prim)

# --- complex parts ---------------------------------------------------------------------------
real_p = standard_unop("real", lambda x: np.real(x).copy(), COMPLEX, result_dtype=real_dtype)
imag_p = standard_unop("imag", lambda x: np.imag(x).copy(), COMPLEX, result_dtype=real_dtype)


def _complex_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "c":
        return dtype
    return dtypes.complex128 if dtype == dtypes.float64 else dtypes.complex64


# lax.conj of a real operand gives the complex type, as JAX's does.
conj_p = standard_unop(
    "conj",
    lambda x: np.conj(x).astype(_complex_dtype(x.dtype)),
    (FLOAT, COMPLEX),
    result_dtype=_complex_dtype,
)


def _complex_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = np.broadcast_arrays(x, y)
    out = np.empty(x.shape, _complex_dtype(x.dtype))
    out.real, out.imag = x, y  # no x + 1j*y: inf * 1j would make NaNs
    return out


def _complex_abstract_check(dtype: np.dtype) -> np.dtype:
    if dtype not in (dtypes.float32, dtypes.float64):
        raise TypeError(
            f"complex requires float32 or float64 operands, got {dtype.name}; "
            "convert with lax.convert_element_type first."
        )
    return _complex_dtype(dtype)


complex_p = standard_binop("complex", _complex_impl, FLOAT, result_dtype=_complex_abstract_check)

# The complex parts are linear over the reals. Their transposes pair a complex cotangent c with
# a complex value z by Re(c * z) (no conjugation), as JAX does: Re(c * real(z)) for real c is
# Re(c * z), Re(c * imag(z)) is Re(-i c * z), Re(c * conj(z)) is Re(conj(c) * z).
deflinear(real_p, lambda ct, x: [complex(ct, zeros_like(ct))])
deflinear(imag_p, lambda ct, x: [complex(zeros_like(ct), neg(ct))])
deflinear(conj_p, lambda ct, x: [conj(ct) if x.dtype.kind == "c" else real(ct)])
deflinear(
    complex_p,
    lambda ct, x, y: _linear_cotangents(
        (x, y), lambda i, a: unbroadcast(real(ct) if i == 0 else neg(imag(ct)), a.shape)
    ),
)
for _prim in (real_p, imag_p, conj_p, complex_p):
    elementwise_batching(_prim)


# --- wrappers (the lax API) ------------------------------------------------------------------
add, sub, mul, div, rem = (binary_wrapper(p) for p in (add_p, sub_p, mul_p, div_p, rem_p))
add_any = binary_wrapper(add_any_p, doc="The sum of two tangents (differentiation's add).")
max, min = binary_wrapper(max_p), binary_wrapper(min_p)  # noqa: A001 (lax's names)
nextafter = binary_wrapper(nextafter_p, doc="The next float after x in the direction of y.")
eq, ne, lt, le, gt, ge = (binary_wrapper(p) for p in (eq_p, ne_p, lt_p, le_p, gt_p, ge_p))
bitwise_and = binary_wrapper(and_p, "bitwise_and", "Elementwise AND (logical for bools).")
bitwise_or = binary_wrapper(or_p, "bitwise_or", "Elementwise OR (logical for bools).")
bitwise_xor = binary_wrapper(xor_p, "bitwise_xor", "Elementwise XOR (logical for bools).")
bitwise_not = unary_wrapper(not_p, "bitwise_not", "Elementwise NOT (logical for bools).")
shift_left = binary_wrapper(shift_left_p, doc="x << y; shifts of the bit width or more give 0.")
shift_right_logical = binary_wrapper(
    shift_right_logical_p, doc="x >> y filling with zeros; shifts of the bit width or more give 0."
)
shift_right_arithmetic = binary_wrapper(
    shift_right_arithmetic_p,
    doc="x >> y filling with the sign bit; shifts of the bit width or more give 0 or -1.",
)
neg = unary_wrapper(neg_p)
abs = unary_wrapper(abs_p, doc="|x|; the real dtype for complex x.")  # noqa: A001
sign = unary_wrapper(sign_p, doc="-1, 0 or 1 (x / |x| for complex x); NaN and -0.0 kept.")
floor, ceil = unary_wrapper(floor_p), unary_wrapper(ceil_p)
is_finite = unary_wrapper(is_finite_p, doc="True where x is neither infinite nor NaN.")
population_count = unary_wrapper(population_count_p, doc="The number of set bits.")
clz = unary_wrapper(clz_p, doc="The number of leading zero bits.")
real = unary_wrapper(real_p, doc="The real part of a complex array.")
imag = unary_wrapper(imag_p, doc="The imaginary part of a complex array.")
conj = unary_wrapper(conj_p, doc="The complex conjugate (a complex array even for real x).")
complex = binary_wrapper(complex_p, "complex", "x + i*y from float32/float64 parts.")  # noqa

# select_n, clamp and the dtype conversions live in elementwise_select_convert.py, which uses the
# wrappers above; it is imported last so that they exist when it loads.
from kiln.primitives.elementwise_select_convert import (  # noqa: E402,F401
    select_n_p,
    _select_n_impl,
    _select_n_abstract_eval,
    _select_n_jvp_rule,
    _select_n_transpose_rule,
    _select_n_batching_rule,
    select_n,
    select,
    clamp_p,
    _clamp_impl,
    _clamp_abstract_eval,
    _clamp_contribution,
    _clamp_batching_rule,
    clamp,
    convert_element_type_p,
    _float_to_int,
    _convert_element_type_impl,
    _convert_element_type_abstract_eval,
    _convert_element_type_jvp_rule,
    _convert_element_type_transpose_rule,
    convert_element_type,
    bitcast_convert_type_p,
    _bitcast_convert_type_impl,
    _bitcast_convert_type_abstract_eval,
    bitcast_convert_type,
)

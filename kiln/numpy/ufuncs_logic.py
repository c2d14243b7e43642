"""Logical, bitwise and float-predicate kiln.numpy functions, complex parts, gcd/lcm and the
selection functions (where, select, piecewise), built on the helpers of ufuncs.py, which
re-exports them."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.trace import Tracer, current_trace_state
from kiln.numpy.ufuncs import (
    _args,
    _args_inexact,
    _args_numeric,
    _binary,
    _broadcast_scalar,
    _const,
    _full_bool,
    _kind,
    _to_bool,
    _unary,
    _where,
    floor_divide,
    multiply,
    rad2deg,
)
from kiln.numpy.util import (
    _broadcast_to,
    broadcast_arrays_for_lax,
    check_arraylike,
    promote_dtypes,
    shape as _shape,
    to_kiln,
)


# --- logical and bitwise ---------------------------------------------------------------------


def _logical(name: str, lax_fn: Callable):
    def ufunc(x1, x2, /):
        check_arraylike(name, x1, x2)
        x1, x2 = broadcast_arrays_for_lax(_to_bool(to_kiln(x1)), _to_bool(to_kiln(x2)))
        return lax_fn(x1, x2)

    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = f"The truth value of x1 {name[8:].upper()} x2 elementwise (as bools)."
    return ufunc


logical_and = _logical("logical_and", lax.bitwise_and)
logical_or = _logical("logical_or", lax.bitwise_or)
logical_xor = _logical("logical_xor", lax.bitwise_xor)


def logical_not(x, /):
    """The truth value of NOT x elementwise."""
    check_arraylike("logical_not", x)
    return lax.bitwise_not(_to_bool(to_kiln(x)))


bitwise_and = _binary("bitwise_and", lax.bitwise_and)
bitwise_or = _binary("bitwise_or", lax.bitwise_or)
bitwise_xor = _binary("bitwise_xor", lax.bitwise_xor)
bitwise_not = _unary("bitwise_not", lax.bitwise_not, _args, "~x (logical NOT for bools).")
invert = _unary("invert", lax.bitwise_not, _args, "~x (logical NOT for bools).")
left_shift = _binary(
    "left_shift",
    lax.shift_left,
    _args_numeric,
    "x1 << x2; shifting by the bit width or more gives 0.",
)


def right_shift(x1, x2, /):
    """x1 >> x2: arithmetic for signed integers, logical for unsigned ones."""
    x1, x2 = _args_numeric("right_shift", x1, x2)
    if _kind(x1) == "u":
        return lax.shift_right_logical(x1, x2)
    return lax.shift_right_arithmetic(x1, x2)


# --- predicates on floats --------------------------------------------------------------------


def isnan(x, /):
    """True where x is NaN (either part, for complex x)."""
    (x,) = _args("isnan", x)
    kind = _kind(x)
    if kind == "c":
        return lax.bitwise_or(isnan(lax.real(x)), isnan(lax.imag(x)))
    return lax.ne(x, x) if kind == "f" else _full_bool(x, False, x.weak_type)


def isinf(x, /):
    """True where x is +inf or -inf (either part, for complex x)."""
    (x,) = _args("isinf", x)
    kind = _kind(x)
    if kind == "c":
        return lax.bitwise_or(isinf(lax.real(x)), isinf(lax.imag(x)))
    return (
        lax.eq(lax.abs(x), _const(x, np.inf, weak=False)) if kind == "f" else _full_bool(x, False)
    )


def isfinite(x, /):
    """True where x is neither infinite nor NaN."""
    (x,) = _args("isfinite", x)
    kind = _kind(x)
    if kind == "c":
        return lax.bitwise_and(lax.is_finite(lax.real(x)), lax.is_finite(lax.imag(x)))
    return lax.is_finite(x) if kind == "f" else _full_bool(x, True)


def _isinf_with_sign(name: str, value: float):
    def ufunc(x, /):
        (x,) = _args(name, x)
        kind = _kind(x)
        if kind == "c":
            raise ValueError("isposinf/isneginf are not well defined for complex types")
        return lax.eq(x, _const(x, value, weak=False)) if kind == "f" else _full_bool(x, False)

    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = f"True where x is {'+' if value > 0 else '-'}inf."
    return ufunc


isposinf = _isinf_with_sign("isposinf", np.inf)
isneginf = _isinf_with_sign("isneginf", -np.inf)


def signbit(x, /):
    """True where the sign bit is set (so also for -0.0 and negative NaNs)."""
    (x,) = _args("signbit", x)
    kind = _kind(x)
    if kind == "i":
        return lax.lt(x, _const(x, 0, weak=False))
    if kind in "bu":
        return _full_bool(x, False)
    if kind == "c":
        raise ValueError("signbit is not well defined for complex types")
    bits = lax.bitcast_convert_type(x, np.dtype(f"u{x.dtype.itemsize}"))
    top = lax.shift_right_logical(bits, _const(bits, 8 * x.dtype.itemsize - 1))
    return lax.ne(top, _const(top, 0))


def copysign(x1, x2, /):
    """|x1| with the sign (bit) of x2."""
    x1, x2 = _args_inexact("copysign", x1, x2)
    if _kind(x1) == "c":
        raise TypeError("copysign does not support complex-valued inputs")
    magnitude = lax.abs(x1)
    return _where(signbit(x2), lax.neg(magnitude), magnitude)


nextafter = _binary(
    "nextafter",
    lax.nextafter,
    _args_inexact,
    "The next representable float after x1 in the direction of x2.",
)


def heaviside(x1, x2, /):
    """0 where x1 < 0, 1 where x1 > 0, x2 where x1 == 0 (or NaN)."""
    x1, x2 = _args_inexact("heaviside", x1, x2)
    zero = _const(x1, 0)
    positive_part = _where(lax.gt(x1, zero), _const(x1, 1), x2)
    return _where(lax.lt(x1, zero), zero, positive_part)


# --- complex parts ---------------------------------------------------------------------------


def real(val, /):
    """The real part (the array itself for real dtypes)."""
    (val,) = _args("real", val)
    return lax.real(val) if _kind(val) == "c" else val


def imag(val, /):
    """The imaginary part (zeros of the same dtype for real dtypes)."""
    (val,) = _args("imag", val)
    if _kind(val) == "c":
        return lax.imag(val)
    return _broadcast_scalar(_const(val, 0), _shape(val))


def conjugate(x, /):
    """The complex conjugate (the array itself for real dtypes)."""
    (x,) = _args("conjugate", x)
    return lax.conj(x) if _kind(x) == "c" else x


conj = conjugate


def angle(z, deg: bool = False):
    """The angle of complex z in radians (degrees if deg=True); 0 or pi for real z."""
    (z,) = _args("angle", z)
    re, im = real(z), imag(z)
    if _kind(re) != "f" or (_kind(z) == "f" and not _shape(z)):
        # As in JAX, a real scalar's angle comes out strongly typed.
        dtype = re.dtype if _kind(re) == "f" else dtypes.default_float()
        re, im = (lax.convert_element_type(v, dtype, False) for v in (re, im))
    out = lax.atan2(im, re)
    return rad2deg(out) if deg else out


# --- integer number theory -------------------------------------------------------------------


def _gcd_values(x1, x2):
    """Euclid's algorithm on |x1|, |x2|, elementwise. Eagerly it stops when every pair is done;
    under tracing it unrolls the worst-case step count for the dtype (Fibonacci bound)."""
    a, b = abs(x1), abs(x2)
    zero, one = _const(b, 0), _const(b, 1)

    def step(a, b):
        nonzero = lax.ne(b, zero)
        remainder_ = lax.rem(a, _where(nonzero, b, one))
        return _where(nonzero, b, a), _where(nonzero, remainder_, zero)

    if current_trace_state.trace is None:
        while np.any(np.asarray(b) != 0):
            a, b = step(a, b)
        return a
    for _ in range(int(1.45 * 8 * a.dtype.itemsize) + 2):
        a, b = step(a, b)
    return a


def _integer_args(name: str, x1, x2) -> list:
    x1, x2 = _args(name, x1, x2)
    if _kind(x1) not in "iu":
        raise ValueError(f"Arguments to kiln.numpy.{name} must be integers.")
    return [x1, x2]


def gcd(x1, x2, /):
    """The greatest common divisor of |x1| and |x2| (0 when both are 0)."""
    x1, x2 = _integer_args("gcd", x1, x2)
    target = np.broadcast_shapes(_shape(x1), _shape(x2))
    x1, x2 = (x if _shape(x) == target else _broadcast_to(x, target) for x in (x1, x2))
    return _gcd_values(x1, x2)


def lcm(x1, x2, /):
    """The least common multiple of |x1| and |x2| (0 when either is 0)."""
    x1, x2 = _integer_args("lcm", x1, x2)
    divisor = gcd(x1, x2)
    safe = _where(lax.eq(divisor, _const(divisor, 0)), _const(divisor, 1), divisor)
    multiple = abs(multiply(x1, floor_divide(x2, safe)))
    return _where(lax.eq(divisor, _const(divisor, 0)), _const(divisor, 0), multiple)


# --- selection -------------------------------------------------------------------------------


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """x where condition else y, broadcasting all three. With only a condition this is
    nonzero(condition, size=..., fill_value=...)."""
    if x is None and y is None:
        from kiln import numpy as jnp

        if not hasattr(jnp, "nonzero"):
            raise NotImplementedError(
                "jnp.where(condition) with one argument is "
                "jnp.nonzero(condition); call that instead."
            )
        return jnp.nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError(
            "Either both or neither of the x and y arguments should be provided "
            f"to kiln.numpy.where, got {x} and {y}."
        )
    if size is not None or fill_value is not None:
        raise ValueError("size and fill_value only apply to the one-argument form of where.")
    check_arraylike("where", condition, x, y)
    x, y = promote_dtypes(x, y)
    return _where(_to_bool(to_kiln(condition)), x, y)


def select(condlist: Sequence, choicelist: Sequence, default=0):
    """choicelist[i] where condlist[i] is the first true condition, else default."""
    if len(condlist) != len(choicelist):
        raise ValueError(
            f"condlist must have length equal to choicelist ({len(condlist)} vs {len(choicelist)})"
        )
    if not condlist:
        raise ValueError("condlist must be non-empty")
    check_arraylike("select", *condlist, *choicelist, default)
    default, *choices = promote_dtypes(default, *choicelist)
    out = default
    # Walk backwards so the first true condition wins.
    for cond, choice in zip(reversed(condlist), reversed(choices)):
        cond = to_kiln(cond)
        if cond.dtype != np.bool_:
            raise TypeError(
                f"select condlist entries must be boolean arrays, got {cond.dtype.name}"
            )
        out = _where(cond, choice, out)
    return out


def piecewise(x, condlist, funclist, *args, **kw):
    """funclist[i](x) where condlist[i] holds (later conditions win, as in NumPy); a trailing
    extra function or value is the default. Functions must be elementwise: each is evaluated
    on the whole array, then the results are selected."""
    check_arraylike("piecewise", x)
    x = to_kiln(x)
    if isinstance(condlist, (Array, Tracer, np.ndarray)) and condlist.ndim == x.ndim:
        condlist = [condlist]
    conds = [to_kiln(c) for c in condlist]
    if len(funclist) == len(conds) + 1:
        default_fn, funclist = funclist[-1], funclist[:-1]
    elif len(funclist) == len(conds):
        default_fn = 0
    else:
        raise ValueError(
            f"with {len(conds)} condition(s), either {len(conds)} or "
            f"{len(conds) + 1} functions are expected, got {len(funclist)}"
        )

    def value(f):
        out = f(x, *args, **kw) if callable(f) else f
        return (
            lax.convert_element_type(out, x.dtype)
            if not isinstance(out, (Array, Tracer)) or out.dtype != x.dtype
            else out
        )

    out = value(default_fn)
    out = out if _shape(out) == x.shape else _broadcast_to(out, x.shape)
    for cond, f in zip(conds, funclist):
        out = _where(cond, value(f), out)
    return out

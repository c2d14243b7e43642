"""Floating-point predicates that compare or decompose values: NaN replacement, closeness
tests, array equality, and frexp/ldexp/modf (split from ufuncs.py, whose helpers they use)."""

from __future__ import annotations

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.trace import Tracer
from kiln.numpy.util import (
    broadcast_arrays_for_lax,
    check_arraylike,
    check_int_scalars,
    promote_dtypes,
    promote_dtypes_inexact,
    to_kiln,
)
from kiln.numpy.ufuncs import (
    _args,
    _args_inexact,
    _const,
    _kind,
    _shape,
    _where,
    isnan,
    isfinite,
    equal,
)

__all__ = [
    "nan_to_num",
    "isclose",
    "allclose",
    "array_equal",
    "array_equiv",
    "frexp",
    "ldexp",
    "modf",
]


# --- NaN handling and closeness --------------------------------------------------------------


def nan_to_num(x, copy: bool = True, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf (default: the dtype's max), -inf -> neginf (default: min)."""
    del copy  # kiln arrays are immutable: there is nothing to copy
    check_int_scalars(nan, posinf, neginf)
    (x,) = _args("nan_to_num", x)
    kind = _kind(x)
    if kind == "c":
        parts = (
            nan_to_num(part, nan=nan, posinf=posinf, neginf=neginf)
            for part in (lax.real(x), lax.imag(x))
        )
        return lax.complex(*parts)
    if kind != "f":
        return x
    info = dtypes.finfo(x.dtype)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    out = _where(isnan(x), _const(x, nan, weak=False), x)
    out = _where(lax.eq(out, _const(out, np.inf)), _const(out, posinf, weak=False), out)
    return _where(lax.eq(out, _const(out, -np.inf)), _const(out, neginf, weak=False), out)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan: bool = False):
    """|a - b| <= atol + rtol * |b| elementwise; infinities are close only to themselves."""
    a, b = _args_inexact("isclose", a, b)
    real_dtype = np.dtype(np.zeros((), a.dtype).real.dtype) if _kind(a) == "c" else a.dtype
    rtol = lax.convert_element_type(rtol, real_dtype)
    atol = lax.convert_element_type(atol, real_dtype)
    in_range = lax.le(lax.abs(lax.sub(a, b)), lax.add(atol, lax.mul(rtol, lax.abs(b))))
    out = lax.bitwise_or(lax.eq(a, b), lax.bitwise_and(isfinite(b), in_range))
    if equal_nan:
        out = lax.bitwise_or(out, lax.bitwise_and(isnan(a), isnan(b)))
    return out


def _all(x):
    from kiln.numpy import all as all_

    return all_(x)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan: bool = False):
    """Whether every element of a is close to b (see isclose); a 0-d bool array."""
    return _all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def _as_array(x):
    from kiln.numpy import asarray

    return x if isinstance(x, (Array, Tracer)) else asarray(x)


def array_equal(a1, a2, equal_nan: bool = False):
    """Whether a1 and a2 have the same shape and elements (a 0-d bool array). Lists are
    accepted, as in NumPy."""
    a1, a2 = _as_array(a1), _as_array(a2)
    if _shape(a1) != _shape(a2):
        return lax.full((), False, dtypes.bool_)
    a1, a2 = promote_dtypes(a1, a2)
    same = lax.eq(a1, a2)
    if equal_nan:
        same = lax.bitwise_or(same, lax.bitwise_and(isnan(a1), isnan(a2)))
    return _all(same)


def array_equiv(a1, a2):
    """Whether a1 and a2 are equal after broadcasting (False if they cannot broadcast)."""
    a1, a2 = _as_array(a1), _as_array(a2)
    try:
        np.broadcast_shapes(_shape(a1), _shape(a2))
    except ValueError:
        return lax.full((), False, dtypes.bool_)
    return _all(equal(a1, a2))


# --- float decomposition ---------------------------------------------------------------------
# (mantissa bits, exponent bias) of each float dtype's bit layout
_LAYOUT = {
    dtypes.float16: (10, 15),
    dtypes.bfloat16: (7, 127),
    dtypes.float32: (23, 127),
    dtypes.float64: (52, 1023),
}


def frexp(x, /):
    """(mantissa, exponent) with x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1 (int32
    exponents; 0, inf and NaN give themselves and 0)."""
    (x,) = _args_inexact("frexp", x)
    if _kind(x) == "c":
        raise TypeError("frexp does not support complex-valued inputs")
    mant_bits, bias = _LAYOUT[x.dtype]
    uint = np.dtype(f"u{x.dtype.itemsize}")
    exponent_mask = (1 << (8 * x.dtype.itemsize - 1 - mant_bits)) - 1
    # Scale subnormals into the normal range first so their exponent field is meaningful.
    subnormal = lax.bitwise_and(
        lax.lt(lax.abs(x), _const(x, dtypes.finfo(x.dtype).tiny)), lax.ne(x, _const(x, 0))
    )
    scale = mant_bits + 2
    scaled = _where(subnormal, lax.mul(x, _const(x, 2.0**scale)), x)
    bits = lax.bitcast_convert_type(scaled, uint)
    field = lax.bitwise_and(
        lax.shift_right_logical(bits, _const(bits, mant_bits)), _const(bits, exponent_mask)
    )
    exponent = lax.convert_element_type(field, dtypes.int32)
    exponent = lax.sub(exponent, _const(exponent, bias - 1))
    exponent = _where(subnormal, lax.sub(exponent, _const(exponent, scale)), exponent)
    keep = _const(bits, ~(exponent_mask << mant_bits) & ((1 << 8 * x.dtype.itemsize) - 1))
    half = _const(bits, (bias - 1) << mant_bits)
    mantissa = lax.bitcast_convert_type(lax.bitwise_or(lax.bitwise_and(bits, keep), half), x.dtype)
    special = lax.bitwise_or(lax.eq(x, _const(x, 0)), lax.bitwise_not(lax.is_finite(x)))
    return (_where(special, x, mantissa), _where(special, _const(exponent, 0), exponent))


def _exp2_int(n, dtype: np.dtype):
    """2.0**n for integer n in the normal exponent range of dtype (float32/float64), exactly."""
    mant_bits, bias = _LAYOUT[dtype]
    int_type = np.dtype(f"i{dtype.itemsize}")
    field = lax.add(lax.convert_element_type(n, int_type), lax.convert_element_type(bias, int_type))
    return lax.bitcast_convert_type(lax.shift_left(field, _const(field, mant_bits)), dtype)


def ldexp(x1, x2, /):
    """x1 * 2**x2 for integer x2, exact (rounded once) over the whole float range."""
    check_arraylike("ldexp", x1, x2)
    if _kind(to_kiln(x2)) not in "biu":
        raise ValueError(
            f"ldexp: x2 must be an integer array, got dtype {dtypes.dtype_and_weak_of(x2)[0].name}"
        )
    (x1,) = promote_dtypes_inexact(x1)
    if _kind(x1) == "c":
        raise TypeError("ldexp does not support complex-valued inputs")
    x1, x2 = broadcast_arrays_for_lax(x1, to_kiln(x2))
    dtype = x1.dtype
    # float16/bfloat16 compute in float32 (whose range covers every result) and round once.
    work = dtypes.float32 if dtype.itemsize < 4 else dtype
    mant_bits, bias = _LAYOUT[work]
    limit = 3 * (bias - 1)  # beyond this every finite x1 over- or underflows anyway
    # Clamp in x2's own dtype before narrowing it, so that a wide exponent cannot wrap.
    n = lax.convert_element_type(x2, dtypes.int32) if _kind(x2) == "b" else x2
    info = dtypes.iinfo(n.dtype)
    if info.max > limit:
        n = lax.min(n, _const(n, limit))
    if info.min < -limit:
        n = lax.max(n, _const(n, -limit))
    n = lax.convert_element_type(n, dtypes.int32 if work.itemsize == 4 else dtypes.int64)
    # Three factors, each a normal power of two, so no factor over- or underflows by itself.
    third = lax.div(n, _const(n, 3))
    rest = lax.sub(n, lax.mul(third, _const(n, 2)))
    out = lax.convert_element_type(x1, work, False)
    for k in (third, third, rest):
        out = lax.mul(out, _exp2_int(k, work))
    return lax.convert_element_type(out, dtype, False)


def modf(x, /):
    """(fractional part, integral part), both with x's sign."""
    (x,) = _args_inexact("modf", x)
    whole = _where(lax.ge(x, _const(x, 0)), lax.floor(x), lax.ceil(x))
    return lax.sub(x, whole), whole

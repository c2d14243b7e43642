"""Quantiles of kiln.numpy: quantile, percentile, median and their NaN-ignoring variants.

The reduced axes are moved last and sorted; values at the fractional positions are picked
with a one-hot select and sum, so everything is lax ops and traces (q may be a traced array).
"""

from __future__ import annotations

import builtins

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.numpy.reductions import (
    _axis_size,
    _no_out,
    _to_inexact,
    _upcast_low_precision,
    any,
    isnan_,
    reduction_axes,
    sum,
    where_,
)
from kiln.numpy.util import check_arraylike, to_kiln

__all__ = ["quantile", "percentile", "median", "nanquantile", "nanpercentile", "nanmedian"]

# --- quantiles -------------------------------------------------------------------------------
_QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _gather_last(values, index):
    """values[..., index] along the last axis, one index per (q, slice): `values` has shape
    rest + (n,), `index` (int32) has shape (k,) + rest; the result has index's shape.

    A one-hot select and sum built from lax ops, so that it traces; O(k * size) work, which
    is fine next to the sort that precedes it."""
    full_shape = index.shape + values.shape[-1:]
    spread = lax.broadcast_in_dim(values, full_shape, tuple(range(1, len(full_shape))))
    positions = lax.broadcasted_iota(dtypes.int32, full_shape, len(full_shape) - 1)
    wanted = lax.broadcast_in_dim(index, full_shape, tuple(range(index.ndim)))
    picked = lax.select(lax.eq(positions, wanted), spread, lax.full(full_shape, 0, values.dtype))
    return lax.reduce_sum(picked, (len(full_shape) - 1,))


def _interpolate(a_sorted, position, method: str):
    """Quantile values of `a_sorted` (rest + (n,), sorted along the last axis) at fractional
    `position`s of shape (k,) + rest, with NumPy's interpolation methods."""
    n = a_sorted.shape[-1]
    compute = a_sorted.dtype
    if n == 0:
        return lax.full(position.shape, np.nan, compute)

    def const(value, dtype=compute):
        return lax.full(position.shape, value, dtype)

    position = lax.min(lax.max(position, const(0)), const(n - 1))
    low = lax.convert_element_type(position, dtypes.int32)  # truncation is floor here
    high = lax.min(lax.add(low, const(1, dtypes.int32)), const(n - 1, dtypes.int32))
    frac = lax.sub(position, lax.convert_element_type(low, compute))
    exact = lax.eq(frac, const(0))
    if method == "nearest":
        # Round the virtual index half to even, as NumPy does.
        odd = lax.ne(lax.rem(low, const(2, dtypes.int32)), const(0, dtypes.int32))
        half = const(0.5)
        up = lax.bitwise_or(lax.gt(frac, half), lax.bitwise_and(lax.eq(frac, half), odd))
        return _gather_last(a_sorted, lax.select(up, high, low))
    low_value = _gather_last(a_sorted, low)
    if method == "lower":
        return low_value
    high_value = _gather_last(a_sorted, high)
    if method == "higher":
        return lax.select(exact, low_value, high_value)
    if method == "midpoint":
        frac = const(0.5)
    # An exact position must not touch high_value: inf * 0 would make a NaN.
    lerp = lax.add(low_value, lax.mul(lax.sub(high_value, low_value), frac))
    return lax.select(exact, low_value, lerp)


def _quantile(name: str, a, q, axis, method: str, keepdims: bool, ignore_nan: bool):
    check_arraylike(name, a, q)
    if method not in _QUANTILE_METHODS:
        raise ValueError(
            f"{name}: method={method!r} is not supported; use one of "
            f"{', '.join(_QUANTILE_METHODS)}."
        )
    a, q = to_kiln(a), to_kiln(q)
    if dtypes.is_complex(a.dtype) or dtypes.is_complex(q.dtype):
        raise ValueError(f"{name} does not support complex input")
    if q.ndim > 1:
        raise ValueError(f"{name}: q must be zero- or one-dimensional, got shape {q.shape}")
    dtype = _to_inexact(
        dtypes.result_type_with_weak((a.dtype, a.aval.weak_type), (q.dtype, q.aval.weak_type))[0]
    )
    compute = _upcast_low_precision(dtype)
    axes = reduction_axes(axis, a.ndim)
    kept = tuple(d for d in range(a.ndim) if d not in axes)
    keep_shape = tuple(1 if d in axes else s for d, s in enumerate(a.shape))
    # Move the reduced axes last and merge them: a becomes rest + (n,).
    rest = tuple(a.shape[d] for d in kept)
    n = _axis_size(a.shape, axes)
    a = lax.convert_element_type(a, compute)
    a = lax.reshape(lax.transpose(a, kept + axes), rest + (n,))
    a_sorted = lax.sort(a, dimension=len(rest))
    q_shape, k = q.shape, q.size
    q = lax.reshape(lax.convert_element_type(q, compute), (k,))
    out_shape = (k,) + rest
    q = lax.broadcast_in_dim(q, out_shape, (0,))
    nan = isnan_(a)
    if ignore_nan:
        # NaNs sort last, so each slice interpolates over its own count of numbers.
        count = sum(lax.bitwise_not(nan), axis=-1, dtype=compute)
        last = lax.broadcast_in_dim(
            lax.sub(count, lax.full(rest, 1, compute)), out_shape, tuple(range(1, len(out_shape)))
        )
        result = _interpolate(a_sorted, lax.mul(q, last), method)
        poisoned = lax.eq(count, lax.full(rest, 0, compute))
    else:
        result = _interpolate(
            a_sorted, lax.mul(q, lax.full(out_shape, builtins.max(n - 1, 0), compute)), method
        )
        poisoned = any(nan, axis=-1)  # a NaN anywhere makes the quantile NaN, as in NumPy
    poisoned = lax.broadcast_in_dim(poisoned, out_shape, tuple(range(1, len(out_shape))))
    result = where_(poisoned, np.nan, result)
    final_rest = keep_shape if keepdims else rest
    result = lax.reshape(result, q_shape + final_rest)
    return lax.convert_element_type(result, dtype)


def quantile(
    a,
    q,
    axis=None,
    out=None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    interpolation=None,
):
    """The q-th quantiles (q in [0, 1]) over `axis`; methods linear (default), lower, higher,
    midpoint and nearest. A slice containing NaN gives NaN. Result shape: q.shape + reduced."""
    _no_out("quantile", out)
    return _quantile("quantile", a, q, axis, interpolation or method, keepdims, False)


def percentile(
    a,
    q,
    axis=None,
    out=None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    interpolation=None,
):
    """quantile with q in percent (0 to 100)."""
    _no_out("percentile", out)
    check_arraylike("percentile", a, q)
    q = _percent_to_fraction(q)
    return _quantile("percentile", a, q, axis, interpolation or method, keepdims, False)


def _percent_to_fraction(q):
    q = to_kiln(q)
    q = lax.convert_element_type(q, _to_inexact(q.dtype), q.aval.weak_type)
    return lax.div(q, 100.0)


def median(a, axis=None, out=None, overwrite_input: bool = False, keepdims: bool = False):
    """The middle value over `axis` (the mean of the two middle values for even counts)."""
    _no_out("median", out)
    return _quantile("median", a, 0.5, axis, "midpoint", keepdims, False)


def nanquantile(
    a,
    q,
    axis=None,
    out=None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    interpolation=None,
):
    """quantile of the non-NaN elements (NaN where a slice is all NaN)."""
    _no_out("nanquantile", out)
    return _quantile("nanquantile", a, q, axis, interpolation or method, keepdims, True)


def nanpercentile(
    a,
    q,
    axis=None,
    out=None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    interpolation=None,
):
    """percentile of the non-NaN elements."""
    _no_out("nanpercentile", out)
    check_arraylike("nanpercentile", a, q)
    q = _percent_to_fraction(q)
    return _quantile("nanpercentile", a, q, axis, interpolation or method, keepdims, True)


def nanmedian(a, axis=None, out=None, overwrite_input: bool = False, keepdims: bool = False):
    """median of the non-NaN elements."""
    _no_out("nanmedian", out)
    return _quantile("nanmedian", a, 0.5, axis, "midpoint", keepdims, True)

"""Cumulative reductions and differences of kiln.numpy: cumsum, cumprod, their NaN-ignoring
and array-API variants, diff, ediff1d, and the counting functions bincount and histogram.

Like JAX, cumsum/cumprod keep the input's dtype (only bools become the default int), while the
array-API cumulative_sum/cumulative_prod promote small integers as sum does.
"""

from __future__ import annotations

import builtins
import operator

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.trace import Tracer
from kiln.core.errors import ConcretizationTypeError
from kiln.numpy.reductions import _no_out, _user_dtype, isnan_, reduction_axes, where_
from kiln.numpy.reductions import max as _max, min as _min
from kiln.numpy.util import check_arraylike, to_kiln

__all__ = [
    "cumsum",
    "cumprod",
    "cumulative_sum",
    "cumulative_prod",
    "nancumsum",
    "nancumprod",
    "diff",
    "ediff1d",
    "bincount",
    "histogram",
    "histogram_bin_edges",
]


# --- cumulative reductions -------------------------------------------------------------------


def _cumulative(name: str, lax_fn, a, axis, dtype, fill=None, promote_integers=False):
    check_arraylike(name, a)
    a = to_kiln(a)
    if axis is None or a.ndim == 0:
        a = lax.reshape(a, (a.size,))
    (axis,) = reduction_axes(0 if axis is None else axis, a.ndim)
    if fill is not None and dtypes.is_inexact(a.dtype):
        a = where_(isnan_(a), fill, a)
    dtype = _user_dtype(dtype)
    if dtype is None:
        if a.dtype == np.bool_:
            dtype = dtypes.default_int()
        elif (
            promote_integers
            and a.dtype.kind == "i"
            and a.dtype.itemsize < dtypes.default_int().itemsize
        ):
            dtype = dtypes.default_int()
        elif (
            promote_integers
            and a.dtype.kind == "u"
            and a.dtype.itemsize < dtypes.default_uint().itemsize
        ):
            dtype = dtypes.default_uint()
    if dtype is not None and dtype != a.dtype:
        a = lax.convert_element_type(a, dtype)
    elif a.aval.weak_type:
        a = lax.convert_element_type(a, a.dtype)  # results are strongly typed, as in JAX
    return lax_fn(a, axis)


def cumsum(a, axis=None, dtype=None, out=None):
    """Running sum along `axis` (of the flattened array when None). Keeps the input's dtype,
    except that bools sum as the default integer."""
    _no_out("cumsum", out)
    return _cumulative("cumsum", lax.cumsum, a, axis, dtype)


def cumprod(a, axis=None, dtype=None, out=None):
    """Running product along `axis` (of the flattened array when None)."""
    _no_out("cumprod", out)
    return _cumulative("cumprod", lax.cumprod, a, axis, dtype)


def nancumsum(a, axis=None, dtype=None, out=None):
    """cumsum with NaNs counted as zero."""
    _no_out("nancumsum", out)
    return _cumulative("nancumsum", lax.cumsum, a, axis, dtype, fill=0)


def nancumprod(a, axis=None, dtype=None, out=None):
    """cumprod with NaNs counted as one."""
    _no_out("nancumprod", out)
    return _cumulative("nancumprod", lax.cumprod, a, axis, dtype, fill=1)


def _array_api_cumulative(name: str, lax_fn, identity, x, axis, dtype, include_initial):
    check_arraylike(name, x)
    x = to_kiln(x)
    if x.ndim == 0:
        raise ValueError(
            f"The input must be non-scalar to take a {name}, however a scalar "
            "value or scalar array was given."
        )
    if axis is None:
        if x.ndim > 1:
            raise ValueError(
                f"The input array has rank {x.ndim}, however axis was not set to "
                "an explicit value. The axis argument is only optional for "
                "one-dimensional arrays."
            )
        axis = 0
    (axis,) = reduction_axes(axis, x.ndim)
    out = _cumulative(name, lax_fn, x, axis, dtype, promote_integers=True)
    if include_initial:
        shape = list(out.shape)
        shape[axis] = 1
        out = lax.concatenate([lax.full(tuple(shape), identity, out.dtype), out], axis)
    return out


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial: bool = False):
    """The array-API running sum: small integers promote as in sum; `include_initial`
    prepends a zero."""
    return _array_api_cumulative("cumulative_sum", lax.cumsum, 0, x, axis, dtype, include_initial)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial: bool = False):
    """The array-API running product; `include_initial` prepends a one."""
    return _array_api_cumulative("cumulative_prod", lax.cumprod, 1, x, axis, dtype, include_initial)


# --- differences -----------------------------------------------------------------------------


def _static_int(value, what: str) -> int:
    if isinstance(value, Tracer):
        concrete = value.to_concrete_value()
        if concrete is None:
            raise ConcretizationTypeError(value, f"The problem arose with the {what}. ")
        value = concrete
    return operator.index(value)


def _pad_operand(value, like, axis: int):
    """`value` (scalar or array) as a piece to concatenate to `like` along `axis`."""
    value = to_kiln(value)
    value = lax.convert_element_type(value, like.dtype)
    if value.ndim == 0:
        shape = list(like.shape)
        shape[axis] = 1
        return lax.broadcast_in_dim(value, tuple(shape), ())
    return value


def diff(a, n: int = 1, axis: int = -1, prepend=None, append=None):
    """The n-th discrete difference along `axis` (for bools: elementwise not-equal)."""
    check_arraylike("diff", a)
    n = _static_int(n, "'n' argument of jnp.diff")
    axis = _static_int(axis, "'axis' argument of jnp.diff")
    a = to_kiln(a)
    if n == 0:
        return a
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    if a.ndim == 0:
        raise ValueError(
            "diff requires input that is at least one dimensional; got a "
            f"0-d array of dtype {a.dtype}"
        )
    (axis,) = reduction_axes(axis, a.ndim)
    pieces = []
    if prepend is not None:
        check_arraylike("diff", prepend)
        pieces.append(_pad_operand(prepend, a, axis))
    pieces.append(a)
    if append is not None:
        check_arraylike("diff", append)
        pieces.append(_pad_operand(append, a, axis))
    if len(pieces) > 1:
        a = lax.concatenate(pieces, axis)
    op = lax.ne if a.dtype == np.bool_ else lax.sub
    for _ in range(n):
        size = a.shape[axis]
        if size == 0:
            break
        a = op(lax.slice_in_dim(a, 1, size, axis=axis), lax.slice_in_dim(a, 0, size - 1, axis=axis))
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences between consecutive elements of the flattened array, with optional values
    prepended (`to_begin`) and appended (`to_end`)."""
    check_arraylike("ediff1d", ary)
    ary = to_kiln(ary)
    if ary.dtype == np.bool_:
        raise TypeError(
            "ediff1d does not support boolean arrays: subtracting booleans is not "
            "defined. Convert with .astype(int) first."
        )
    flat = lax.reshape(ary, (ary.size,))
    pieces = []
    for extra in (to_begin, to_end):
        if extra is not None:
            check_arraylike("ediff1d", extra)
    if to_begin is not None:
        pieces.append(_flat_as(to_begin, flat.dtype))
    pieces.append(diff(flat))
    if to_end is not None:
        pieces.append(_flat_as(to_end, flat.dtype))
    return lax.concatenate(pieces, 0) if len(pieces) > 1 else pieces[0]


def _flat_as(value, dtype):
    value = lax.convert_element_type(to_kiln(value), dtype)
    return lax.reshape(value, (value.size,))


# --- counting --------------------------------------------------------------------------------


def bincount(x, weights=None, minlength: int = 0, *, length=None):
    """Count occurrences of each non-negative integer in `x` (summing `weights` instead of
    ones when given). Negative values count into bin 0 and values >= length are dropped, as
    in JAX. Under tracing the output size must be static: pass `length`."""
    check_arraylike("bincount", x)
    x = to_kiln(x)
    if not (dtypes.is_integer(x.dtype) or x.dtype == np.bool_):
        raise TypeError(f"x argument to bincount must have an integer type; got {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"bincount only supports 1-dimensional input, got shape {x.shape}")
    minlength = _static_int(minlength, "'minlength' argument of jnp.bincount")
    if minlength < 0:
        raise ValueError(f"minlength must be non-negative, got {minlength}")
    if length is None:
        if isinstance(x, Tracer) and x.to_concrete_value() is None:
            raise ConcretizationTypeError(
                x,
                "The error occurred because of argument 'x' of jnp.bincount. To avoid this "
                "error, pass a static `length` argument. ",
            )
        values = np.asarray(x if not isinstance(x, Tracer) else x.to_concrete_value())
        length = builtins.max(minlength, int(values.max()) + 1 if values.size else 0)
    else:
        length = _static_int(length, "'length' argument of jnp.bincount")
    if weights is None:
        weights = lax.full(x.shape, 1, dtypes.default_int())
    else:
        check_arraylike("bincount", weights)
        weights = to_kiln(weights)
        if weights.shape != x.shape:
            raise ValueError("shape of weights must match shape of x.")
    index_dtype = dtypes.int32 if x.dtype.itemsize <= 4 else x.dtype
    indices = lax.convert_element_type(x, index_dtype) if x.dtype != index_dtype else x
    indices = lax.max(indices, lax.convert_element_type(0, index_dtype))
    indices = lax.reshape(indices, x.shape + (1,))
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    zeros = lax.full((length,), 0, weights.dtype)
    return lax.scatter_add(zeros, indices, weights, dnums, mode="drop")


def histogram_bin_edges(a, bins=10, range=None, weights=None):  # noqa: A002 (NumPy's name)
    """The edges `histogram` would use: `bins` + 1 evenly spaced values over `range` (default:
    the data's min and max), or `bins` itself when it is an array of edges."""
    del weights
    if isinstance(bins, str):
        raise NotImplementedError("string values for `bins` are not implemented.")
    check_arraylike("histogram_bin_edges", a, bins)
    a = to_kiln(a)
    dtype = a.dtype if dtypes.is_inexact(a.dtype) else dtypes.default_float()
    if np.ndim(bins) == 1 or getattr(bins, "ndim", 0) == 1:
        return lax.convert_element_type(to_kiln(bins), dtype)
    count = _static_int(bins, "bins argument of histogram_bin_edges")
    if count < 1:
        raise ValueError(f"`bins` must be positive, when an integer, got {count}")
    if range is None:
        low, high = _min(a), _max(a)
    else:
        if np.shape(range) != (2,):
            raise ValueError(
                f"`range` must be either None or a sequence of two scalars, got {range}"
            )
        low, high = range
    low = lax.convert_element_type(to_kiln(low), dtype)
    high = lax.convert_element_type(to_kiln(high), dtype)
    # An empty range widens to half a unit either side, as NumPy does.
    same = lax.eq(low, high)
    half = lax.convert_element_type(0.5, dtype)
    low = lax.select(same, lax.sub(low, half), low)
    high = lax.select(same, lax.add(high, half), high)
    # Interpolate as low * (1 - t) + high * t with t = i / bins, so both ends are exact.
    t = lax.div(lax.iota(dtype, count + 1), lax.full((count + 1,), count, dtype))
    low = lax.broadcast_in_dim(low, (count + 1,), ())
    high = lax.broadcast_in_dim(high, (count + 1,), ())
    one = lax.full((count + 1,), 1, dtype)
    return lax.add(lax.mul(low, lax.sub(one, t)), lax.mul(high, t))


def histogram(a, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """Counts of `a` in `bins` (an int or the edges), with NumPy's rule that the last bin is
    closed; returns (counts, edges). `weights` sum instead of ones; `density` normalizes."""
    from kiln.numpy.sorting import searchsorted

    check_arraylike("histogram", a)
    a = to_kiln(a)
    if weights is not None:
        check_arraylike("histogram", weights)
        weights = to_kiln(weights)
        if weights.shape != a.shape:
            raise ValueError("weights should have the same shape as a.")
    dtype = a.dtype if dtypes.is_inexact(a.dtype) else dtypes.default_float()
    if weights is not None:
        dtype = dtypes.promote_types(dtype, weights.dtype)
        dtype = dtype if dtypes.is_inexact(dtype) else dtypes.default_float()
        weights = lax.convert_element_type(lax.reshape(weights, (weights.size,)), dtype)
    a = lax.convert_element_type(lax.reshape(a, (a.size,)), dtype)
    edges = histogram_bin_edges(a, bins, range)
    edges = lax.convert_element_type(edges, dtype)
    n_edges = edges.shape[0]
    index = searchsorted(edges, a, side="right")
    # The last bin includes its right edge.
    on_last = lax.eq(
        a, lax.broadcast_in_dim(lax.slice_in_dim(edges, n_edges - 1, n_edges), a.shape, (0,))
    )
    index = lax.select(on_last, lax.full(a.shape, n_edges - 1, index.dtype), index)
    counts = bincount(
        index, weights if weights is not None else lax.full(a.shape, 1, dtype), length=n_edges
    )
    counts = lax.slice_in_dim(counts, 1, n_edges)
    if density:
        widths = diff(edges)
        total = lax.reduce_sum(counts, (0,))
        counts = lax.div(lax.div(counts, widths), lax.broadcast_in_dim(total, counts.shape, ()))
    return counts, edges

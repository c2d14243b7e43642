"""Sorting and searching in kiln.numpy: sort, argsort, lexsort, partition, searchsorted and
unique, built on the lax sort and top_k primitives (NaNs sort last, as in NumPy).
"""

from __future__ import annotations

import operator

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.errors import ConcretizationTypeError
from kiln.core.trace import Tracer
from kiln.numpy.reductions import isnan_, reduction_axes
from kiln.numpy.util import check_arraylike, promote_dtypes, to_kiln

__all__ = [
    "sort",
    "argsort",
    "lexsort",
    "msort",
    "sort_complex",
    "partition",
    "argpartition",
    "searchsorted",
    "unique",
]


def _sort_axis(a, axis, name: str):
    """(array, dimension) with axis=None meaning the flattened array."""
    if axis is None:
        return lax.reshape(a, (a.size,)), 0
    if a.ndim == 0:
        raise np.exceptions.AxisError(operator.index(axis), 0)
    (dimension,) = reduction_axes(axis, a.ndim)
    return a, dimension


def _no_order(name: str, order) -> None:
    if order is not None:
        raise ValueError(
            f"'order' argument to {name} is not supported (kiln arrays have no structured dtypes)."
        )


def sort(a, axis=-1, *, kind=None, order=None, stable: bool = True, descending: bool = False):
    """A sorted copy of `a` along `axis` (flattened when None). NaNs go last (first when
    `descending`); `kind` is accepted for NumPy compatibility and ignored."""
    check_arraylike("sort", a)
    _no_order("sort", order)
    a, dimension = _sort_axis(to_kiln(a), axis, "sort")
    result = lax.sort(a, dimension=dimension, is_stable=stable)
    return lax.rev(result, (dimension,)) if descending else result


def argsort(
    a, axis=-1, *, kind=None, order=None, stable: bool = True, descending: bool = False, dtype=None
):
    """Indices that sort `a` along `axis` (flattened when None), in the default integer type.
    Ties keep their input order, also when `descending`."""
    check_arraylike("argsort", a)
    _no_order("argsort", order)
    a, dimension = _sort_axis(to_kiln(a), axis, "argsort")
    index_dtype = dtypes.canonicalize(dtype) if dtype is not None else dtypes.default_int()
    iota = lax.broadcasted_iota(index_dtype, a.shape, dimension)
    if descending and stable:
        # Reversing first and last keeps equal elements in their original order.
        a, iota = lax.rev(a, (dimension,)), lax.rev(iota, (dimension,))
    _, indices = lax.sort((a, iota), dimension=dimension, is_stable=stable, num_keys=1)
    return lax.rev(indices, (dimension,)) if descending else indices


def lexsort(keys, axis: int = -1):
    """Indices that sort by the last key, then the one before, ... (NumPy's convention).
    `keys` is a sequence of same-shape arrays or a 2-D array (one key per row)."""
    key_tuple = tuple(keys)
    if not key_tuple:
        raise TypeError("need sequence of keys with len > 0 in lexsort")
    check_arraylike("lexsort", *key_tuple)
    key_arrays = [to_kiln(k) for k in key_tuple]
    if len({k.shape for k in key_arrays}) > 1:
        raise ValueError("all keys need to be the same shape")
    if key_arrays[0].ndim == 0:
        return lax.full((), 0, dtypes.default_int())
    (dimension,) = reduction_axes(axis, key_arrays[0].ndim)
    iota = lax.broadcasted_iota(dtypes.default_int(), key_arrays[0].shape, dimension)
    sorted_ = lax.sort((*key_arrays[::-1], iota), dimension=dimension, num_keys=len(key_arrays))
    return sorted_[-1]


def msort(a):
    """`a` sorted along its first axis."""
    return sort(a, axis=0)


def sort_complex(a):
    """`a` sorted (real part first, then imaginary) along the last axis, as a complex array."""
    check_arraylike("sort_complex", a)
    a = to_kiln(a)
    result = sort(a, axis=-1) if a.ndim else a
    complex_dtype = (
        dtypes.promote_types(result.dtype, dtypes.complex64)
        if result.dtype != dtypes.float64
        else dtypes.canonicalize(dtypes.complex128)
    )
    return lax.convert_element_type(result, complex_dtype)


def _partition_prepare(name: str, a, kth, axis):
    check_arraylike(name, a)
    a = to_kiln(a)
    if a.ndim == 0:
        raise np.exceptions.AxisError(operator.index(axis), 0)
    (dimension,) = reduction_axes(axis, a.ndim)
    size = a.shape[dimension]
    if isinstance(kth, Tracer):
        raise ConcretizationTypeError(
            kth, f"The problem arose with the kth argument of {name}, which must be a static int. "
        )
    kth = operator.index(kth)
    if not -size <= kth < size:
        raise ValueError(f"kth(={kth}) out of bounds ({size})")
    return a, kth % size, dimension, size


def partition(a, kth: int, axis: int = -1):
    """A copy of `a` with the element that would be at position `kth` in sorted order moved
    there, smaller-or-equal elements before it (ascending) and the rest after it."""
    a, kth, dimension, size = _partition_prepare("partition", a, kth, axis)
    ordered = lax.sort(a, dimension=dimension)
    bottom = lax.slice_in_dim(ordered, 0, kth + 1, axis=dimension)
    top = lax.rev(lax.slice_in_dim(ordered, kth + 1, size, axis=dimension), (dimension,))
    return lax.concatenate([bottom, top], dimension)


def argpartition(a, kth: int, axis: int = -1):
    """Indices that partition `a` around position `kth` (see `partition`)."""
    a, kth, dimension, size = _partition_prepare("argpartition", a, kth, axis)
    order = argsort(a, axis=dimension)
    bottom = lax.slice_in_dim(order, 0, kth + 1, axis=dimension)
    top = lax.sort(lax.slice_in_dim(order, kth + 1, size, axis=dimension), dimension=dimension)
    return lax.concatenate([bottom, top], dimension)


# --- searchsorted ----------------------------------------------------------------------------


def _less_total(x, y):
    """x < y in NumPy's sort order, where NaN is larger than every number."""
    if not dtypes.is_floating(x.dtype):
        return lax.lt(x, y)
    return lax.bitwise_or(lax.lt(x, y), lax.bitwise_and(isnan_(y), lax.bitwise_not(isnan_(x))))


def _searchsorted_compare_all(a, v, side: str, index_dtype):
    # Count the elements of `a` that come before each v: a (n,) against v's every element.
    n = a.shape[0]
    shape = v.shape + (n,)
    a_b = lax.broadcast_in_dim(a, shape, (v.ndim,))
    v_b = lax.broadcast_in_dim(v, shape, tuple(range(v.ndim)))
    before = _less_total(a_b, v_b) if side == "left" else lax.bitwise_not(_less_total(v_b, a_b))
    return lax.reduce_sum(lax.convert_element_type(before, index_dtype), (v.ndim,))


def _searchsorted_binary(a, v, side: str, index_dtype):
    # A branch-free binary search with a fixed number of halving steps, so that it traces.
    n = a.shape[0]
    low = lax.full(v.shape, 0, index_dtype)
    high = lax.full(v.shape, n, index_dtype)
    one = lax.full(v.shape, 1, index_dtype)
    two = lax.full(v.shape, 2, index_dtype)
    last = lax.full(v.shape, max(n - 1, 0), index_dtype)
    dnums = lax.GatherDimensionNumbers(
        offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,)
    )
    for _ in range(n.bit_length()):
        active = lax.lt(low, high)
        mid = lax.div(lax.add(low, high), two)
        probe_index = lax.reshape(lax.min(mid, last), v.shape + (1,))
        probe = lax.gather(a, probe_index, dnums, (1,), mode="clip")
        go_right = (
            _less_total(probe, v) if side == "left" else lax.bitwise_not(_less_total(v, probe))
        )
        move_low = lax.bitwise_and(active, go_right)
        move_high = lax.bitwise_and(active, lax.bitwise_not(go_right))
        low = lax.select(move_low, lax.add(mid, one), low)
        high = lax.select(move_high, mid, high)
    return low


def searchsorted(a, v, side: str = "left", sorter=None, *, method: str = "scan"):
    """Indices where the elements of `v` would be inserted into the sorted 1-D array `a` to
    keep it sorted (`side` 'left': before equal elements, 'right': after them). NaNs count as
    the largest values. method 'scan' is a binary search, 'compare_all' compares every pair
    (faster for small `a`); both trace."""
    check_arraylike("searchsorted", a, v)
    if side not in ("left", "right"):
        raise ValueError(f"side={side!r} is not supported; use 'left' or 'right'.")
    if method not in ("scan", "scan_unrolled", "sort", "compare_all"):
        raise ValueError(f"method={method!r} is not supported; use 'scan' or 'compare_all'.")
    a, v = to_kiln(a), to_kiln(v)
    if a.ndim != 1:
        raise ValueError(f"a should be 1-dimensional, got shape {a.shape}")
    if sorter is not None:
        check_arraylike("searchsorted", sorter)
        from kiln.numpy import take

        a = take(a, sorter)
    a, v = promote_dtypes(a, v)
    if dtypes.is_complex(a.dtype):
        raise TypeError("searchsorted does not support complex arrays.")
    index_dtype = dtypes.int32 if a.shape[0] < 2**31 - 1 else dtypes.int64
    if a.shape[0] == 0:
        return lax.full(v.shape, 0, index_dtype)
    if method == "compare_all":
        return _searchsorted_compare_all(a, v, side, index_dtype)
    return _searchsorted_binary(a, v, side, index_dtype)


# --- unique ----------------------------------------------------------------------------------


def _concrete_value(x):
    """The NumPy value behind `x`, or None when it is only known abstractly (traced)."""
    if isinstance(x, Array):
        return np.asarray(x)
    if isinstance(x, Tracer):
        value = x.to_concrete_value()
        return None if value is None else np.asarray(value)
    return np.asarray(x)


def unique(
    ar,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis=None,
    *,
    equal_nan: bool = True,
    size=None,
    fill_value=None,
    sorted: bool = True,
):  # noqa: A002 (NumPy's name)
    """The sorted unique elements of `ar` (flattened unless `axis`), optionally with the index
    of each one's first occurrence, the inverse mapping and the counts (int32).

    The result's size depends on the data, so a traced `ar` needs a static `size`: the output
    is then padded with `fill_value` (default: the smallest element) or truncated."""
    check_arraylike("unique", ar)
    if size is not None:
        size = operator.index(size)
        if axis is not None:
            raise NotImplementedError("unique with both size and axis is not supported.")
        return _unique_sized(
            to_kiln(ar), size, fill_value, return_index, return_inverse, return_counts, equal_nan
        )
    value = _concrete_value(ar)
    if value is None:
        raise ConcretizationTypeError(
            ar,
            "The error occurred in jnp.unique(). The size of the result depends on the "
            "values, so under tracing pass a static `size` argument (and optionally "
            "`fill_value`). ",
        )
    original_dtype = to_kiln(ar).dtype
    work = value.astype(np.float32) if value.dtype == dtypes.bfloat16 else value
    outs = np.unique(
        work,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        axis=axis,
        equal_nan=equal_nan,
    )
    values, index, inverse, counts = outs
    if axis is None:
        inverse = inverse.reshape(value.shape if value.ndim else (1,))
    int_dtype = dtypes.default_int()
    result = [Array(values.astype(original_dtype))]
    if return_index:
        result.append(Array(index.astype(int_dtype)))
    if return_inverse:
        result.append(Array(inverse.astype(int_dtype)))
    if return_counts:
        result.append(Array(counts.astype(int_dtype)))
    return result[0] if len(result) == 1 else tuple(result)


def _unique_sized(
    ar, size: int, fill_value, return_index, return_inverse, return_counts, equal_nan
):
    """unique with a static output size, from sorts only: it traces."""
    original_shape = ar.shape
    x = lax.reshape(ar, (ar.size,))
    n = x.shape[0]
    int_dtype = dtypes.default_int()
    positions = lax.iota(int_dtype, n)
    sorted_x, perm = lax.sort((x, positions), dimension=0, num_keys=1)
    if n:
        later = lax.slice_in_dim(sorted_x, 1, n)
        earlier = lax.slice_in_dim(sorted_x, 0, n - 1)
        differs = lax.ne(later, earlier)
        if equal_nan and dtypes.is_inexact(x.dtype):
            both_nan = lax.bitwise_and(isnan_(later), isnan_(earlier))
            differs = lax.bitwise_and(differs, lax.bitwise_not(both_nan))
        is_new = lax.concatenate([lax.full((1,), True, dtypes.bool_), differs], 0)
    else:
        is_new = lax.full((0,), True, dtypes.bool_)
    group = lax.sub(
        lax.cumsum(lax.convert_element_type(is_new, int_dtype)), lax.full((n,), 1, int_dtype)
    )
    num_unique = lax.reduce_sum(lax.convert_element_type(is_new, int_dtype), (0,))
    # A stable sort on "not new" moves each group's first element to the front, in order.
    not_new = lax.convert_element_type(lax.bitwise_not(is_new), dtypes.int32)
    _, firsts, first_index = lax.sort((not_new, sorted_x, perm), dimension=0, num_keys=1)

    keep = lax.lt(lax.iota(int_dtype, size), lax.broadcast_in_dim(num_unique, (size,), ()))

    def fit(values, fill):
        """Truncate or pad `values` (length n) to `size`; `fill` past the unique count."""
        if size <= n:
            values = lax.slice_in_dim(values, 0, size)
        else:
            pad = lax.full((size - n,), 0, values.dtype)
            values = lax.concatenate([values, pad], 0) if n else pad
        fill = lax.convert_element_type(fill, values.dtype)
        return lax.select(keep, values, lax.broadcast_in_dim(fill, (size,), ()))

    if fill_value is None:
        fill_value = lax.reduce_min(x, (0,)) if n else 0
    outs = [fit(firsts, fill_value)]
    if return_index:
        outs.append(fit(first_index, 0))
    if return_inverse:
        _, inverse = lax.sort((perm, group), dimension=0, num_keys=1)
        outs.append(lax.reshape(inverse, original_shape if len(original_shape) else (1,)))
    if return_counts:
        from kiln.numpy.reductions_cumulative import bincount

        # Groups past `size` are dropped by bincount; the counts are already `size` long.
        outs.append(bincount(group, length=size) if n else lax.full((size,), 0, int_dtype))
    return outs[0] if len(outs) == 1 else tuple(outs)

"""Set operations on arrays (isin, union1d, intersect1d, setdiff1d, setxor1d) and the Array
API's unique_* functions.

A set's size depends on the values, so each function takes a static `size` (and `fill_value`
for the padding) to trace; without one, its arguments must be concrete, and the size is read
from them before the same traceable computation runs.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.errors import ConcretizationTypeError
from kiln.core.trace import Tracer
from kiln.numpy.creation import arange, full
from kiln.numpy.indexing_functions import nonzero
from kiln.numpy.manipulation_join import concatenate
from kiln.numpy.manipulation_shape import ravel, reshape
from kiln.numpy.reductions import any as _any
from kiln.numpy.reductions import sum as _sum
from kiln.numpy.sorting import unique
from kiln.numpy.ufuncs import equal, logical_and, logical_not, where
from kiln.numpy.util import check_arraylike, promote_dtypes, to_kiln

__all__ = [
    "isin",
    "union1d",
    "intersect1d",
    "setdiff1d",
    "setxor1d",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
]


def _concrete(x: Any, fun_name: str) -> np.ndarray:
    """The value of `x`, or the error JAX gives when a traced value needs a `size`."""
    if isinstance(x, Tracer):
        value = x.to_concrete_value()
        if value is None:
            raise ConcretizationTypeError(
                x,
                f"The error arose in {fun_name}(). The size of the result depends on the "
                "values, so under jit and other transformations pass a static `size` "
                "argument (and optionally `fill_value`).\n",
            )
        return np.asarray(value)
    return np.asarray(x)


def _static_size(size: Any, fun_name: str) -> int:
    if isinstance(size, Tracer):
        raise ConcretizationTypeError(
            size, f"The `size` argument of {fun_name}() must be static.\n"
        )
    return operator.index(size)


def _host(x: np.ndarray) -> np.ndarray:
    """A NumPy value that NumPy's set functions can order (bfloat16 through float32)."""
    return x.astype(np.float32) if x.dtype == dtypes.bfloat16 else x


def _in1d(element, test, invert: bool):
    """Whether each element of the flat `element` occurs in `test` (all pairs compared)."""
    element, test = ravel(element), ravel(test)
    if test.shape[0] == 0:
        found = full(element.shape, False, dtypes.bool_)
    else:
        pairs = equal(lax.expand_dims(element, (1,)), lax.expand_dims(test, (0,)))
        found = _any(pairs, axis=1)
    return logical_not(found) if invert else found


def isin(
    element, test_elements, assume_unique: bool = False, invert: bool = False, *, method="auto"
):
    """Elementwise: whether each value of `element` occurs in `test_elements` (negated with
    `invert`); shaped like `element`."""
    check_arraylike("isin", element, test_elements)
    element, test_elements = promote_dtypes(element, test_elements)
    return reshape(_in1d(element, test_elements, invert), element.shape)


def _unique_with_valid(arr, size: int):
    """The sorted unique values of the flat `arr` padded to `size`, their first indices, and a
    mask of the entries that are values rather than padding."""
    values, index, counts = unique(arr, return_index=True, return_counts=True, size=size)
    return values, index, lax.gt(counts, lax.full((), 0, counts.dtype))


def _pick(values, mask, size: int, fill):
    """The entries of `values` where `mask` holds, in order, padded with `fill` to `size`;
    and the mask of the real entries among them."""
    index = nonzero(mask, size=size, fill_value=0)[0]
    count = _sum(lax.convert_element_type(mask, dtypes.default_int()))
    keep = lax.lt(arange(size, dtype=dtypes.default_int()), count)
    picked = values[index] if values.shape[0] else full((size,), 0, values.dtype)
    if fill is None:
        fill = picked[0] if size else 0
    fill = lax.convert_element_type(to_kiln(fill), values.dtype)
    return where(keep, picked, fill), keep, index


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """The sorted unique values of both arrays together."""
    check_arraylike("union1d", ar1, ar2)
    if size is None:
        _concrete(ar1, "union1d")
        _concrete(ar2, "union1d")
    else:
        size = _static_size(size, "union1d")
    ar1, ar2 = promote_dtypes(ar1, ar2)
    joined = concatenate((ravel(ar1), ravel(ar2)))
    return unique(joined, size=size, fill_value=fill_value)


def setdiff1d(ar1, ar2, assume_unique: bool = False, *, size=None, fill_value=None):
    """The sorted unique values of `ar1` that are not in `ar2` (padding: `fill_value`, 0 by
    default)."""
    check_arraylike("setdiff1d", ar1, ar2)
    ar1, ar2 = promote_dtypes(ar1, ar2)
    ar1, ar2 = ravel(ar1), ravel(ar2)
    if size is None:
        a, b = _host(_concrete(ar1, "setdiff1d")), _host(_concrete(ar2, "setdiff1d"))
        size = len(np.setdiff1d(a, b))
    else:
        size = _static_size(size, "setdiff1d")
    fill = 0 if fill_value is None else fill_value
    if ar1.shape[0] == 0:
        return full((size,), fill, ar1.dtype)
    values, _, valid = _unique_with_valid(ar1, ar1.shape[0])
    mask = logical_and(valid, _in1d(values, ar2, invert=True))
    return _pick(values, mask, size, fill)[0]


def setxor1d(ar1, ar2, assume_unique: bool = False, *, size=None, fill_value=None):
    """The sorted values in exactly one of the two arrays."""
    check_arraylike("setxor1d", ar1, ar2)
    ar1, ar2 = promote_dtypes(ar1, ar2)
    ar1, ar2 = ravel(ar1), ravel(ar2)
    if size is None:
        a, b = _host(_concrete(ar1, "setxor1d")), _host(_concrete(ar2, "setxor1d"))
        size = len(np.setxor1d(a, b))
    else:
        size = _static_size(size, "setxor1d")
    candidates, masks = [], []
    for mine, other in ((ar1, ar2), (ar2, ar1)):
        if mine.shape[0]:
            values, _, valid = _unique_with_valid(mine, mine.shape[0])
            candidates.append(values)
            masks.append(logical_and(valid, _in1d(values, other, invert=True)))
    if not candidates:
        return full((size,), 0 if fill_value is None else fill_value, ar1.dtype)
    values, mask = concatenate(candidates), concatenate(masks)
    # Sort the kept values to the front, in order; the rest follow.
    dropped = lax.convert_element_type(logical_not(mask), dtypes.int32)
    dropped, values = lax.sort((dropped, values), num_keys=2)
    return _pick(values, lax.eq(dropped, lax.full((), 0, dtypes.int32)), size, fill_value)[0]


def intersect1d(
    ar1,
    ar2,
    assume_unique: bool = False,
    return_indices: bool = False,
    *,
    size=None,
    fill_value=None,
):
    """The sorted unique values in both arrays; with `return_indices`, also the index of each
    one's first occurrence in either array (padded with the arrays' lengths)."""
    check_arraylike("intersect1d", ar1, ar2)
    ar1, ar2 = promote_dtypes(ar1, ar2)
    ar1, ar2 = ravel(ar1), ravel(ar2)
    if size is None:
        a, b = _host(_concrete(ar1, "intersect1d")), _host(_concrete(ar2, "intersect1d"))
        size = len(np.intersect1d(a, b))
    else:
        size = _static_size(size, "intersect1d")
    n1, n2 = ar1.shape[0], ar2.shape[0]
    int_dtype = dtypes.default_int()
    if n1 == 0 or n2 == 0:
        values = full((size,), 0 if fill_value is None else fill_value, ar1.dtype)
        if not return_indices:
            return values
        return values, full((size,), n1, int_dtype), full((size,), n2, int_dtype)
    values, first1, valid = _unique_with_valid(ar1, n1)
    mask = logical_and(valid, _in1d(values, ar2, invert=False))
    out, keep, picked = _pick(values, mask, size, fill_value)
    if not return_indices:
        return out
    index1 = where(keep, first1[picked], n1)
    # The first position of each value in ar2: the first True of its row of matches.
    matches = equal(lax.expand_dims(out, (1,)), lax.expand_dims(ar2, (0,)))
    from kiln.numpy.reductions import argmax

    index2 = where(keep, lax.convert_element_type(argmax(matches, axis=1), int_dtype), n2)
    return out, lax.convert_element_type(index1, int_dtype), index2


# --- the Array API's unique functions -----------------------------------------------------------
class UniqueAllResult(NamedTuple):
    values: Array
    indices: Array
    inverse_indices: Array
    counts: Array


class UniqueCountsResult(NamedTuple):
    values: Array
    counts: Array


class UniqueInverseResult(NamedTuple):
    values: Array
    inverse_indices: Array


def unique_all(x, /, *, size=None, fill_value=None) -> UniqueAllResult:
    """The unique values of x with their first indices, the inverse map (shaped like x) and
    their counts; NaNs are all distinct."""
    check_arraylike("unique_all", x)
    values, indices, inverse, counts = unique(
        x,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        equal_nan=False,
        size=size,
        fill_value=fill_value,
    )
    return UniqueAllResult(values, indices, _inverse_shaped(inverse, x), counts)


def unique_counts(x, /, *, size=None, fill_value=None) -> UniqueCountsResult:
    """The unique values of x and how often each occurs."""
    check_arraylike("unique_counts", x)
    values, counts = unique(
        x, return_counts=True, equal_nan=False, size=size, fill_value=fill_value
    )
    return UniqueCountsResult(values, counts)


def unique_inverse(x, /, *, size=None, fill_value=None) -> UniqueInverseResult:
    """The unique values of x and, shaped like x, the index of each element among them."""
    check_arraylike("unique_inverse", x)
    values, inverse = unique(
        x, return_inverse=True, equal_nan=False, size=size, fill_value=fill_value
    )
    return UniqueInverseResult(values, _inverse_shaped(inverse, x))


def unique_values(x, /, *, size=None, fill_value=None):
    """The sorted unique values of x (NaNs all distinct)."""
    check_arraylike("unique_values", x)
    return unique(x, equal_nan=False, size=size, fill_value=fill_value)


def _inverse_shaped(inverse, x):
    shape = tuple(np.shape(x)) if not hasattr(x, "shape") else tuple(x.shape)
    return reshape(inverse, shape)

"""More of NumPy's functions in kiln.numpy: multi-dimensional histograms, the Bessel-function
window (i0, kaiser), spacing, functional place, mask_indices and einsum_path."""

from __future__ import annotations

import builtins
import math
import operator
from typing import Callable

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.trace import Tracer
from kiln.numpy.creation import arange, asarray, ones
from kiln.numpy.indexing_functions import nonzero
from kiln.numpy.manipulation_shape import ravel, reshape
from kiln.numpy.reductions import sum as _sum
from kiln.numpy.reductions_cumulative import bincount, histogram_bin_edges
from kiln.numpy.sorting import searchsorted
from kiln.numpy.ufuncs import abs as _abs, exp, sqrt, where
from kiln.numpy.util import check_arraylike, promote_dtypes_inexact, to_kiln

__all__ = [
    "histogramdd",
    "histogram2d",
    "i0",
    "kaiser",
    "spacing",
    "place",
    "mask_indices",
    "einsum_path",
]


def histogramdd(sample, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """The histogram of N points in D dimensions (sample of shape (N, D)): the counts (or
    summed weights, or a density) per cell, and the D arrays of bin edges."""
    check_arraylike("histogramdd", sample)
    (sample,) = promote_dtypes_inexact(sample)
    if sample.ndim == 1:
        sample = reshape(sample, (sample.shape[0], 1))
    if sample.ndim != 2:
        raise ValueError(f"histogramdd: sample must have shape (N, D), got {sample.shape}")
    count, dims = sample.shape
    if isinstance(bins, int) or np.ndim(bins) == 0 and not isinstance(bins, (list, tuple)):
        bins = [bins] * dims
    if len(bins) != dims:
        raise ValueError("should be a bin for each dimension.")
    ranges = [None] * dims if range is None else list(range)
    if len(ranges) != dims:
        raise ValueError("should be a range for each dimension.")
    edges, indices, sizes = [], [], []
    for d in builtins.range(dims):
        column = sample[:, d]
        edge = histogram_bin_edges(column, bins[d], ranges[d], weights)
        # 0: below the first edge, n + 1: above the last; the last edge closes the last bin.
        index = searchsorted(edge, column, side="right")
        index = where(column == edge[-1], index - 1, index)
        edges.append(edge)
        indices.append(index)
        sizes.append(edge.shape[0] + 1)
    flat = indices[0]
    for index, size in zip(indices[1:], sizes[1:]):
        flat = flat * size + index
    total = math.prod(sizes)
    counts = bincount(flat, weights, length=total)
    hist = reshape(counts, tuple(sizes))
    hist = hist[tuple(slice(1, -1) for _ in builtins.range(dims))]
    if density:
        hist = hist / _sum(hist)
        for d, edge in enumerate(edges):
            shape = [1] * dims
            shape[d] = edge.shape[0] - 1
            hist = hist / reshape(edge[1:] - edge[:-1], tuple(shape))
    return hist, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):  # noqa: A002
    """The 2-D histogram of the points (x, y): counts per cell and the edges along x and y."""
    check_arraylike("histogram2d", x, y)
    x, y = promote_dtypes_inexact(x, y)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("histogram2d: x and y must be 1-D arrays of the same length")
    if not isinstance(bins, int) and np.ndim(bins) == 1 and len(bins) != 2:
        bins = [bins, bins]  # one array of edges for both axes
    sample = lax.concatenate([reshape(x, (-1, 1)), reshape(y, (-1, 1))], 1)
    hist, (x_edges, y_edges) = histogramdd(sample, bins, range, weights, density)
    return hist, x_edges, y_edges


def i0(x):
    """The modified Bessel function of the first kind, order 0."""
    from kiln.scipy.special import i0e

    check_arraylike("i0", x)
    (x,) = promote_dtypes_inexact(x)
    if dtypes.is_complex(x.dtype):
        raise ValueError("i0 does not support complex-valued inputs.")
    return exp(_abs(x)) * i0e(x)


def kaiser(M: int, beta):
    """The Kaiser window of M points with shape parameter beta."""
    if isinstance(M, Tracer):
        raise TypeError("The M argument of kaiser must be static")
    M = operator.index(M)
    dtype = dtypes.default_float()
    if M <= 0:
        return asarray(np.zeros(0, dtype))
    if M == 1:
        return ones((1,), dtype)
    beta = to_kiln(beta, dtype)
    n = arange(M, dtype=dtype)
    alpha = (M - 1) / 2.0
    return i0(beta * sqrt(1 - ((n - alpha) / alpha) ** 2)) / i0(beta)


def spacing(x, /):
    """The distance from x to the next representable number away from zero (negative for
    negative x)."""
    check_arraylike("spacing", x)
    (x,) = promote_dtypes_inexact(x)
    towards = where(x < 0, -np.inf, np.inf).astype(x.dtype)
    return lax.sub(lax.nextafter(x, towards), x)


def place(arr, mask, vals, *, inplace: bool = True):
    """arr with the entries where `mask` holds replaced by `vals`, repeated in order; returns
    a new array, so `inplace=False` is required (and the mask must be concrete)."""
    if inplace:
        raise ValueError(
            "kiln.numpy.place cannot modify arrays in-place, because kiln arrays are "
            "immutable. Pass inplace=False to instead return an updated array."
        )
    check_arraylike("place", arr, mask, vals)
    arr = to_kiln(arr)
    flat, mask_flat, vals = ravel(arr), ravel(to_kiln(mask)), ravel(to_kiln(vals))
    (positions,) = nonzero(mask_flat)
    count = positions.shape[0]
    if count == 0 or vals.shape[0] == 0:
        return arr
    repeated = vals[asarray(np.arange(count) % vals.shape[0])]
    return reshape(flat.at[positions].set(repeated.astype(arr.dtype)), arr.shape)


def mask_indices(n: int, mask_func: Callable, k: int = 0, *, size=None) -> tuple:
    """The indices of the non-zero entries of mask_func(ones((n, n)), k), e.g. triu."""
    n = operator.index(n)
    return nonzero(mask_func(ones((n, n), dtypes.int32), k), size=size)


def einsum_path(subscripts, /, *operands, optimize="greedy"):
    """The contraction order einsum would use (NumPy's einsum_path, from the operands' shapes
    alone)."""
    stand_ins = [
        np.zeros(np.shape(x) if not hasattr(x, "shape") else tuple(x.shape), np.float32)
        for x in operands
    ]
    return np.einsum_path(subscripts, *stand_ins, optimize=optimize)

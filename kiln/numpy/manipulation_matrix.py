"""kiln.numpy functions about the diagonals and triangles of matrices: tril, triu, diag,
diagonal, diagflat and trace. Masks come from iota comparisons and diagonals from strided
slices of the flattened matrix, so everything stages as plain shape and elementwise
primitives. Re-exported by kiln.numpy.manipulation."""

from __future__ import annotations

import operator

import numpy as np

from kiln import lax
from kiln.numpy.manipulation_shape import broadcast_to, moveaxis, ravel
from kiln.numpy.util import check_arraylike, to_kiln
from kiln.primitives.elementwise import convert_element_type
from kiln.primitives.shape import canonicalize_axis

__all__ = ["tril", "triu", "diag", "diagonal", "diagflat", "trace"]


def tri_mask(rows: int, cols: int, k: int, lower: bool = True):
    """A boolean (rows, cols) mask: True on and below diagonal k (lower) or on and above it."""
    i = lax.broadcasted_iota(np.int32, (rows, cols), 0)
    j = lax.broadcasted_iota(np.int32, (rows, cols), 1)
    shifted = lax.add(i, np.int32(k))
    return lax.ge(shifted, j) if lower else lax.le(shifted, j)


def _triangle(name: str, m, k: int, lower: bool):
    check_arraylike(name, m)
    m = to_kiln(m)
    if m.ndim < 2:
        raise ValueError(f"Argument to jax.numpy.{name} must be at least 2D")
    k = operator.index(k)
    rows, cols = m.shape[-2:]
    mask = broadcast_to(tri_mask(rows, cols, k, lower=lower), m.shape)
    return lax.select(mask, m, lax.full_like(m, 0))


def tril(m, k: int = 0):
    """The lower triangle of the last two axes of `m`: entries above diagonal k are zeroed."""
    return _triangle("tril", m, k, lower=True)


def triu(m, k: int = 0):
    """The upper triangle of the last two axes of `m`: entries below diagonal k are zeroed."""
    return _triangle("triu", m, k, lower=False)


def diagonal(a, offset: int = 0, axis1: int = 0, axis2: int = 1):
    """The diagonal `offset` of the matrices spanned by axis1 and axis2, as the last axis."""
    check_arraylike("diagonal", a)
    a = to_kiln(a)
    if a.ndim < 2:
        raise ValueError("diagonal requires an array of at least two dimensions.")
    ax1, ax2 = canonicalize_axis(axis1, a.ndim), canonicalize_axis(axis2, a.ndim)
    if ax1 == ax2:
        raise ValueError("axis1 and axis2 cannot be the same")
    offset = operator.index(offset)
    a = moveaxis(a, (ax1, ax2), (-2, -1))
    *batch, rows, cols = a.shape
    count = max(0, min(rows + min(offset, 0), cols - max(offset, 0)))
    # Element (i, i + offset) sits at flat position start + i * (cols + 1).
    flat = lax.reshape(a, (*batch, rows * cols))
    if count == 0:
        return lax.slice_in_dim(flat, 0, 0, 1, -1)
    start = offset if offset >= 0 else -offset * cols
    return lax.slice_in_dim(flat, start, start + (count - 1) * (cols + 1) + 1, cols + 1, -1)


def diag(v, k: int = 0):
    """For a vector: the square matrix with `v` on diagonal k. For a matrix: its diagonal k."""
    check_arraylike("diag", v)
    v = to_kiln(v)
    k = operator.index(k)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError("diag input must be 1d or 2d")
    n = v.shape[0]
    size = n + abs(k)
    # Spread v through the flattened matrix with `size` zeros between neighbours (interior
    # padding), shifted to the diagonal's first position, then fold it into a matrix.
    start = k if k >= 0 else -k * size
    spread = n + max(n - 1, 0) * size
    zero = convert_element_type(0, v.dtype, v.weak_type)
    flat = lax.pad(v, zero, [(start, size * size - start - spread, size)])
    return lax.reshape(flat, (size, size))


def diagflat(v, k: int = 0):
    """The square matrix with the flattened `v` on diagonal k."""
    check_arraylike("diagflat", v)
    return diag(ravel(v), k)


def trace(a, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype=None, out=None):
    """The sum along diagonal `offset` of the matrices spanned by axis1 and axis2 (summed with
    jnp.sum's dtype rules: small integers accumulate in the default integer type)."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.trace is not supported.")
    check_arraylike("trace", a)
    import kiln.numpy as jnp  # sum lives with the reductions, which import this package

    return jnp.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)

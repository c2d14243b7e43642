"""kiln.numpy functions that change an array's shape or axis order without changing its
elements: reshape, ravel, transpose, moveaxis, squeeze, expand_dims, atleast_*d and the
broadcasting functions. Re-exported by kiln.numpy.manipulation."""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np

from kiln import lax
from kiln.core.shapes import canonicalize_shape
from kiln.numpy.util import check_arraylike, to_kiln
from kiln.primitives.shape import canonicalize_axis, operand_shape

__all__ = [
    "reshape",
    "ravel",
    "transpose",
    "permute_dims",
    "moveaxis",
    "swapaxes",
    "rollaxis",
    "squeeze",
    "expand_dims",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_to",
    "broadcast_arrays",
    "broadcast_shapes",
    "shape",
    "ndim",
    "size",
]


def canonicalize_axes(axes: Any, ndim: int, what: str = "axis") -> tuple[int, ...]:
    """Normalize an int or a sequence of ints to non-negative, distinct axes."""
    if isinstance(axes, (int, np.integer)) or (
        hasattr(axes, "__index__") and not hasattr(axes, "__len__")
    ):
        axes = (axes,)
    out = tuple(canonicalize_axis(a, ndim, what) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated {what} in {tuple(axes)}")
    return out


# --- reshape ---------------------------------------------------------------------------------


def _static_dim(d: Any) -> int:
    try:
        return operator.index(d)
    except TypeError:
        canonicalize_shape((d,))  # raises the error that explains tracers
        raise


def _resolve_newshape(old_shape: tuple, newshape: Any) -> tuple[int, ...]:
    """The target shape with a single -1 replaced by the size that keeps the total equal."""
    given = newshape
    if isinstance(newshape, (int, np.integer)) or (
        hasattr(newshape, "__index__") and not hasattr(newshape, "__len__")
    ):
        newshape = (newshape,)
    dims = [_static_dim(d) for d in newshape]
    size = math.prod(old_shape)
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1:
        raise TypeError(f"can only specify one unknown axis size with a `-1` value, got {given}")
    if any(d < -1 for d in dims):
        raise TypeError(
            f"reshape shape must contain only non-negative sizes and at most one -1, got {given}"
        )
    known = math.prod(d for d in dims if d != -1)
    if unknown:
        if known == 0 or size % known:
            raise TypeError(
                f"cannot reshape array of shape {old_shape} (size {size}) into "
                f"shape {given} because the product of specified axis sizes "
                f"({known}) does not evenly divide {size}"
            )
        dims[unknown[0]] = size // known
    elif known != size:
        raise TypeError(
            f"cannot reshape array of shape {old_shape} (size {size}) into shape "
            f"{given} (size {known})"
        )
    return tuple(dims)


def reshape(a, shape=None, order: str = "C", *, newshape=None, copy=None):
    """Give `a` a new shape with the same number of elements; one dimension may be -1.

    order='C' reads and writes elements in row-major order, order='F' in column-major
    order."""
    check_arraylike("reshape", a)
    if newshape is not None:
        if shape is not None:
            raise TypeError("reshape got both `shape` and `newshape`; pass only `shape`.")
        shape = newshape
    if shape is None:
        raise TypeError("reshape() missing the required argument `shape`.")
    a = to_kiln(a)
    new_sizes = _resolve_newshape(a.shape, shape)
    if order == "C":
        return lax.reshape(a, new_sizes)
    if order == "F":
        # Column-major: reverse the axes, reshape row-major to the reversed shape, reverse back.
        reversed_axes = tuple(range(a.ndim - 1, -1, -1))
        out = lax.reshape(a, new_sizes[::-1], dimensions=reversed_axes)
        return lax.transpose(out, tuple(range(len(new_sizes) - 1, -1, -1)))
    if order == "A":
        raise NotImplementedError("jnp.reshape does not support order='A'; use 'C' or 'F'.")
    raise ValueError(f"Unexpected value for 'order' argument: {order!r}; use 'C' or 'F'.")


def ravel(a, order: str = "C"):
    """The elements of `a` as a 1-D array (row-major unless order='F')."""
    check_arraylike("ravel", a)
    a = to_kiln(a)
    return reshape(a, (a.size,), order=order)


# --- axis permutations -----------------------------------------------------------------------


def transpose(a, axes: Sequence[int] | None = None):
    """Permute the axes of `a` (reverse them when `axes` is None)."""
    check_arraylike("transpose", a)
    a = to_kiln(a)
    if axes is None:
        perm = tuple(range(a.ndim - 1, -1, -1))
    else:
        if isinstance(axes, (int, np.integer)):
            axes = (axes,)
        perm = tuple(canonicalize_axis(ax, a.ndim) for ax in axes)
    return lax.transpose(a, perm)


def permute_dims(a, /, axes: Sequence[int]):
    """Array-API spelling of transpose with explicit axes."""
    check_arraylike("permute_dims", a)
    return transpose(a, axes)


def moveaxis(a, source, destination):
    """Move axes `source` to positions `destination`; the others keep their order."""
    check_arraylike("moveaxis", a)
    a = to_kiln(a)
    src = canonicalize_axes(source, a.ndim, "source axis")
    dst = canonicalize_axes(destination, a.ndim, "destination axis")
    if len(src) != len(dst):
        raise ValueError(f"Inconsistent number of elements: {len(src)} vs {len(dst)}")
    perm = [i for i in range(a.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return lax.transpose(a, tuple(perm))


def swapaxes(a, axis1: int, axis2: int):
    """Exchange two axes."""
    check_arraylike("swapaxes", a)
    a = to_kiln(a)
    i, j = canonicalize_axis(axis1, a.ndim), canonicalize_axis(axis2, a.ndim)
    perm = list(range(a.ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return lax.transpose(a, tuple(perm))


def rollaxis(a, axis: int, start: int = 0):
    """Move `axis` so that it lies before position `start` (NumPy's older moveaxis)."""
    check_arraylike("rollaxis", a)
    a = to_kiln(a)
    axis = canonicalize_axis(axis, a.ndim)
    start = operator.index(start)
    if not -a.ndim <= start <= a.ndim:
        raise ValueError(
            f"start {start} is out of bounds for rollaxis on an array of dimension {a.ndim}"
        )
    if start < 0:
        start += a.ndim
    if axis < start:
        start -= 1
    if axis == start:
        return a
    return moveaxis(a, axis, start)


# --- adding and removing unit axes -----------------------------------------------------------


def squeeze(a, axis: int | Sequence[int] | None = None):
    """Remove size-1 axes (all of them when `axis` is None)."""
    check_arraylike("squeeze", a)
    a = to_kiln(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(a.shape) if d == 1)
    else:
        axes = canonicalize_axes(axis, a.ndim)
    return lax.squeeze(a, axes)


def expand_dims(a, axis: int | Sequence[int]):
    """Insert size-1 axes at positions `axis` of the result."""
    check_arraylike("expand_dims", a)
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    return lax.expand_dims(to_kiln(a), tuple(axis))


def _atleast(name: str, rank_axes: dict, arys: tuple):
    check_arraylike(name, *arys)
    out = []
    for x in arys:
        x = to_kiln(x)
        if x.ndim in rank_axes:
            x = lax.expand_dims(x, rank_axes[x.ndim])
        out.append(x)
    return out[0] if len(out) == 1 else out


def atleast_1d(*arys):
    """Scalars become 1-element vectors; higher-rank arrays pass through."""
    return _atleast("atleast_1d", {0: (0,)}, arys)


def atleast_2d(*arys):
    """Arrays of rank < 2 get leading unit axes: (N,) -> (1, N)."""
    return _atleast("atleast_2d", {0: (0, 1), 1: (0,)}, arys)


def atleast_3d(*arys):
    """Arrays of rank < 3 get unit axes as NumPy adds them: (N,) -> (1, N, 1),
    (M, N) -> (M, N, 1)."""
    return _atleast("atleast_3d", {0: (0, 1, 2), 1: (0, 2), 2: (2,)}, arys)


# --- broadcasting ----------------------------------------------------------------------------


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """The shape NumPy broadcasting gives arrays of these shapes."""
    canon = [canonicalize_shape(s) for s in shapes]
    if not canon:
        return ()
    ndim_ = max(len(s) for s in canon)
    result = []
    for dims in zip(*[(1,) * (ndim_ - len(s)) + s for s in canon]):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ValueError(f"Incompatible shapes for broadcasting: shapes={canon}")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def _broadcast_to(x, shape: tuple):
    """Broadcast a kiln value (already checked) to `shape` by NumPy's rules, as JAX stages it:
    squeeze the size-1 axes that get stretched, then one broadcast_in_dim."""
    x_shape = operand_shape(x)
    if x_shape == shape:
        return x
    lead = len(shape) - len(x_shape)
    if lead < 0 or any(d not in (1, t) for d, t in zip(x_shape, shape[lead:])):
        aval = getattr(x, "aval", None)
        desc = aval.str_short() if aval is not None else str(x_shape)
        target = aval.update(shape=shape).str_short() if aval is not None else str(shape)
        raise ValueError(
            f"Incompatible types for broadcasting: input type={desc} and requested type={target}"
        )
    stretched = tuple(i for i, (d, t) in enumerate(zip(x_shape, shape[lead:])) if d != t)
    if stretched:
        x = lax.squeeze(x, stretched)
    kept = tuple(lead + i for i in range(len(x_shape)) if i not in stretched)
    return lax.broadcast_in_dim(x, shape, kept)


def broadcast_to(array, shape):
    """`array` broadcast to `shape` (NumPy rules: align trailing axes, stretch size-1 axes)."""
    check_arraylike("broadcast_to", array)
    shape = canonicalize_shape(shape)
    return _broadcast_to(to_kiln(array), shape)


def broadcast_arrays(*args) -> list:
    """The arguments broadcast against each other."""
    check_arraylike("broadcast_arrays", *args)
    arrays = [to_kiln(a) for a in args]
    result = broadcast_shapes(*(a.shape for a in arrays))
    return [_broadcast_to(a, result) for a in arrays]


# --- shape queries ---------------------------------------------------------------------------


def shape(a) -> tuple[int, ...]:
    """The shape of an array or anything NumPy can convert (lists included)."""
    s = getattr(a, "shape", None)
    return tuple(s) if s is not None else np.shape(a)


def ndim(a) -> int:
    """The number of dimensions of `a`."""
    return len(shape(a))


def size(a, axis: int | None = None) -> int:
    """The number of elements of `a`, or the length of one axis."""
    s = shape(a)
    if axis is None:
        return math.prod(s)
    return s[canonicalize_axis(axis, len(s))]

"""Shape primitives that rearrange an operand without looking at its values: broadcasting,
reshaping, squeezing, transposing, reversing and copying (slicing, padding, concatenation and
iota live in shape_slice.py). Each block holds all the rules of one primitive.

Impls may hand back a view of their input instead of a copy, but only when the input is a
buffer nothing can write to (a kiln array's) and the view is C-contiguous, because compiled code
reads kiln buffers as dense row-major memory.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np

from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.core.shapes import canonicalize_shape
from kiln.core.trace import Tracer
from kiln.primitives.base import deflinear

__all__ = [
    "broadcast_in_dim",
    "broadcast",
    "broadcast_to_rank",
    "full",
    "full_like",
    "zeros_like_array",
    "reshape",
    "squeeze",
    "expand_dims",
    "transpose",
    "rev",
    "collapse",
    "copy",
    "broadcast_in_dim_p",
    "reshape_p",
    "squeeze_p",
    "transpose_p",
    "rev_p",
    "copy_p",
]


# --- helpers shared by the shape primitives ---------------------------------------------------


def operand_shape(x: Any) -> tuple:
    """The shape of an array, tracer, NumPy value or Python scalar."""
    shape = getattr(x, "shape", None)
    return tuple(shape) if shape is not None else np.shape(x)


def operand_ndim(x: Any) -> int:
    return len(operand_shape(x))


def is_kiln_value(x: Any) -> bool:
    """A kiln.Array or a tracer: something a shape op may return unchanged for a no-op."""
    return isinstance(x, (Array, Tracer))


def _never_written(a: np.ndarray) -> bool:
    # A view is safe to share only if no array along its base chain can be written through.
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        a = a.base
    return True


def result_from_view(view: np.ndarray, source: np.ndarray) -> np.ndarray:
    """`view` if it may be shared with `source` (immutable, dense), otherwise a fresh copy."""
    if view.flags.c_contiguous and _never_written(source):
        return view
    return np.array(view, order="C", copy=True)


def index_tuple(values: Any, what: str) -> tuple[int, ...]:
    """A tuple of Python ints from an int or a sequence of ints (for static params)."""
    if isinstance(values, (int, np.integer)) or (
        hasattr(values, "__index__") and not hasattr(values, "__len__")
    ):
        values = (values,)
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(
            f"{what} must be a sequence of static Python integers, got {values!r}."
        ) from None


def canonicalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """A non-negative axis for an array of rank `ndim`; ValueError when out of bounds."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{what} {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


# --- broadcast_in_dim ------------------------------------------------------------------------
broadcast_in_dim_p = Primitive("broadcast_in_dim")


@broadcast_in_dim_p.def_impl
def _broadcast_in_dim_impl(x: np.ndarray, *, shape, broadcast_dimensions) -> np.ndarray:
    expanded = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        expanded[dst] = x.shape[src]
    return np.array(np.broadcast_to(x.reshape(expanded), shape))


@broadcast_in_dim_p.def_abstract_eval
def _broadcast_in_dim_abstract_eval(x: ShapedArray, *, shape, broadcast_dimensions):
    if len(broadcast_dimensions) != x.ndim:
        raise TypeError(
            f"broadcast_in_dim broadcast_dimensions {broadcast_dimensions} must "
            f"have one entry per operand dimension ({x.ndim})"
        )
    if list(broadcast_dimensions) != sorted(set(broadcast_dimensions)):
        raise TypeError(
            "broadcast_in_dim broadcast_dimensions must be strictly increasing, "
            f"got {broadcast_dimensions}"
        )
    for src, dst in enumerate(broadcast_dimensions):
        if not 0 <= dst < len(shape) or x.shape[src] not in (1, shape[dst]):
            raise TypeError(
                f"broadcast_in_dim cannot broadcast operand shape {x.shape} to "
                f"{shape} along dimensions {broadcast_dimensions}"
            )
    return ShapedArray(shape, x.dtype, x.weak_type)


def broadcast_in_dim(operand, shape, broadcast_dimensions):
    """Broadcast `operand` to `shape`; operand dim i becomes result dim broadcast_dimensions[i]."""
    shape = canonicalize_shape(shape)
    broadcast_dimensions = tuple(int(d) for d in broadcast_dimensions)
    if (
        operand_shape(operand) == shape
        and broadcast_dimensions == tuple(range(len(shape)))
        and is_kiln_value(operand)
    ):
        return operand
    return broadcast_in_dim_p.bind(operand, shape=shape, broadcast_dimensions=broadcast_dimensions)


def _broadcast_in_dim_transpose_rule(ct, operand, *, shape, broadcast_dimensions):
    from kiln.primitives.reductions import reduce_sum

    # Every result dim the operand lacks, and every size-1 operand dim that was stretched,
    # holds copies of one operand element: their cotangents add up.
    summed = [d for d in range(len(shape)) if d not in broadcast_dimensions]
    summed += [
        dst
        for src, dst in enumerate(broadcast_dimensions)
        if operand.shape[src] == 1 and shape[dst] != 1
    ]
    if summed:
        ct = reduce_sum(ct, tuple(sorted(summed)))
    return [reshape(ct, operand.shape)]


deflinear(broadcast_in_dim_p, _broadcast_in_dim_transpose_rule)


@broadcast_in_dim_p.def_batching
def _broadcast_in_dim_batching_rule(args, dims, *, shape, broadcast_dimensions):
    (x,), (bdim,) = args, dims
    # Place the batch dim right after the result dim of the operand dim before it, so the
    # broadcast dimensions stay increasing and the operand needs no transpose.
    out_dim = broadcast_dimensions[bdim - 1] + 1 if bdim else 0
    moved = tuple(d + (d >= out_dim) for d in broadcast_dimensions)
    new_dims = moved[:bdim] + (out_dim,) + moved[bdim:]
    out_shape = shape[:out_dim] + (x.shape[bdim],) + shape[out_dim:]
    return broadcast_in_dim(x, out_shape, new_dims), out_dim


def broadcast(operand, sizes):
    """Add leading dimensions of `sizes` to `operand`."""
    ndim = operand_ndim(operand)
    sizes = canonicalize_shape(sizes)
    shape = sizes + operand_shape(operand)
    return broadcast_in_dim(operand, shape, tuple(range(len(sizes), len(sizes) + ndim)))


def broadcast_to_rank(x, rank: int):
    """Add leading size-1 dimensions until `x` has rank `rank`."""
    ndim = operand_ndim(x)
    if ndim >= rank:
        return x
    return broadcast(x, (1,) * (rank - ndim))


def full(shape, fill_value, dtype=None):
    """An array of `shape` filled with `fill_value` (lax.full)."""
    from kiln.primitives.elementwise import convert_element_type

    shape = canonicalize_shape(shape)
    if operand_ndim(fill_value):
        raise TypeError(
            f"full must be called with scalar fill_value, got shape {operand_shape(fill_value)}"
        )
    weak = dtype is None and dtypes.dtype_and_weak_of(fill_value)[1]
    dtype = (
        dtypes.canonicalize(dtype) if dtype is not None else dtypes.dtype_and_weak_of(fill_value)[0]
    )
    value = convert_element_type(fill_value, dtype, weak)
    return broadcast(value, shape)


def full_like(x, fill_value, dtype=None, shape=None):
    """An array like `x` (its shape and dtype unless given) filled with `fill_value`.

    The result is weakly typed exactly when `x` is and no dtype was requested."""
    from kiln.primitives.elementwise import convert_element_type

    x_dtype, x_weak = _dtype_and_weak_like(x)
    weak = dtype is None and x_weak
    dtype = dtypes.canonicalize(dtype if dtype is not None else x_dtype)
    shape = operand_shape(x) if shape is None else canonicalize_shape(shape)
    if operand_ndim(fill_value):
        raise TypeError(
            f"full_like must be called with scalar fill_value, got shape "
            f"{operand_shape(fill_value)}"
        )
    return broadcast(convert_element_type(fill_value, dtype, weak), shape)


def _dtype_and_weak_like(x) -> tuple[np.dtype, bool]:
    # Arrays, tracers and scalars know their (dtype, weak); so do ShapeDtypeStruct-like objects.
    if hasattr(x, "aval") or not hasattr(x, "dtype"):
        return dtypes.dtype_and_weak_of(x)
    return dtypes.canonicalize(x.dtype), bool(getattr(x, "weak_type", False))


def zeros_like_array(x):
    """Zeros of the shape and dtype of `x`."""
    return full_like(x, 0)


# --- reshape ---------------------------------------------------------------------------------

reshape_p = Primitive("reshape")


@reshape_p.def_impl
def _reshape_impl(x: np.ndarray, *, new_sizes, dimensions) -> np.ndarray:
    view = np.transpose(x, dimensions) if dimensions is not None else x
    return result_from_view(view.reshape(new_sizes), x)


@reshape_p.def_abstract_eval
def _reshape_abstract_eval(x: ShapedArray, *, new_sizes, dimensions) -> ShapedArray:
    if any(d < 0 for d in new_sizes):
        raise TypeError(f"reshape new_sizes must all be non-negative, got {new_sizes}.")
    new_size, old_size = math.prod(new_sizes), math.prod(x.shape)
    if new_size != old_size:
        raise TypeError(
            f"reshape total size must be unchanged, got new_sizes {new_sizes} "
            f"(of total size {new_size}) for shape {x.shape} (of total size "
            f"{old_size})."
        )
    if dimensions is not None and sorted(dimensions) != list(range(x.ndim)):
        raise TypeError(
            f"reshape dimensions must be a permutation of operand dimensions, got "
            f"dimensions {dimensions} for shape {x.shape}."
        )
    return ShapedArray(new_sizes, x.dtype, x.weak_type)


def reshape(operand, new_sizes, dimensions=None):
    """Reshape `operand` to `new_sizes` (row-major), after transposing by `dimensions` if
    given. Sizes must be static and their product must equal the operand's size."""
    new_sizes = canonicalize_shape(new_sizes)
    shape = operand_shape(operand)
    if dimensions is not None:
        dimensions = index_tuple(dimensions, "reshape dimensions")
        if dimensions == tuple(range(len(shape))):
            dimensions = None
    if dimensions is None and shape == new_sizes and is_kiln_value(operand):
        return operand
    return reshape_p.bind(operand, new_sizes=new_sizes, dimensions=dimensions)


def _reshape_transpose_rule(ct, operand, *, new_sizes, dimensions):
    if dimensions is None:
        return [reshape(ct, operand.shape)]
    # Undo the reshape into the transposed operand's shape, then the transpose.
    transposed = reshape(ct, tuple(operand.shape[d] for d in dimensions))
    return [transpose(transposed, tuple(np.argsort(dimensions)))]


deflinear(reshape_p, _reshape_transpose_rule)


@reshape_p.def_batching
def _reshape_batching_rule(args, dims, *, new_sizes, dimensions):
    (x,), (bdim,) = args, dims
    # Row-major reshapes need the batch dim first; the reshape's own transpose puts it there.
    order = range(len(x.shape) - 1) if dimensions is None else dimensions
    permutation = (bdim,) + tuple(d + (d >= bdim) for d in order)
    return reshape(x, (x.shape[bdim],) + tuple(new_sizes), permutation), 0


def collapse(operand, start_dimension: int, stop_dimension: int | None = None):
    """Merge dimensions [start_dimension, stop_dimension) into one (lax.collapse)."""
    shape = operand_shape(operand)
    ndim = len(shape)
    start = canonicalize_axis(start_dimension, ndim, "collapse start_dimension") if ndim else 0
    stop = ndim if stop_dimension is None else operator.index(stop_dimension)
    if stop < 0:
        stop += ndim
    if not start <= stop <= ndim:
        raise ValueError(
            f"collapse dimensions [{start_dimension}, {stop_dimension}) are not a "
            f"valid range for an array of shape {shape}"
        )
    size = math.prod(shape[start:stop])
    return reshape(operand, shape[:start] + (size,) + shape[stop:])


# --- squeeze ---------------------------------------------------------------------------------
squeeze_p = Primitive("squeeze")


@squeeze_p.def_impl
def _squeeze_impl(x: np.ndarray, *, dimensions) -> np.ndarray:
    return result_from_view(np.squeeze(x, axis=dimensions), x)


@squeeze_p.def_abstract_eval
def _squeeze_abstract_eval(x: ShapedArray, *, dimensions) -> ShapedArray:
    if any(not 0 <= d < x.ndim for d in dimensions) or len(set(dimensions)) != len(dimensions):
        raise ValueError(
            f"squeeze dimensions must be distinct and in [0, {x.ndim}), got "
            f"dimensions={dimensions} for shape={x.shape}"
        )
    if any(x.shape[d] != 1 for d in dimensions):
        raise ValueError(
            "cannot select an axis to squeeze out which has size not equal to "
            f"one, got shape={x.shape} and dimensions={dimensions}"
        )
    shape = tuple(s for i, s in enumerate(x.shape) if i not in dimensions)
    return ShapedArray(shape, x.dtype, x.weak_type)


def squeeze(array, dimensions: Sequence[int]):
    """Remove the size-1 `dimensions` (negative values count from the end)."""
    ndim = operand_ndim(array)
    dims = [
        canonicalize_axis(d, ndim, "squeeze dimension")
        for d in index_tuple(dimensions, "squeeze dimensions")
    ]
    if len(set(dims)) != len(dims):
        raise ValueError(f"repeated dimension in squeeze: {tuple(dimensions)}")
    dims = tuple(sorted(dims))
    if not dims and is_kiln_value(array):
        return array
    return squeeze_p.bind(array, dimensions=dims)


def _squeeze_transpose_rule(ct, operand, *, dimensions):
    return [reshape(ct, operand.shape)]


deflinear(squeeze_p, _squeeze_transpose_rule)


@squeeze_p.def_batching
def _squeeze_batching_rule(args, dims, *, dimensions):
    (x,), (bdim,) = args, dims
    moved = tuple(d + (d >= bdim) for d in dimensions)
    return squeeze(x, moved), bdim - sum(d < bdim for d in dimensions)


def expand_dims(array, dimensions: Sequence[int]):
    """Insert size-1 dimensions at `dimensions` (positions in the result). Like JAX, this is
    a broadcast_in_dim, not a primitive of its own."""
    dimensions = index_tuple(dimensions, "expand_dims dimensions")
    if len(set(dimensions)) != len(dimensions):
        raise ValueError(f"repeated axis in lax.expand_dims: {dimensions}")
    shape = list(operand_shape(array))
    ndim_out = len(shape) + len(dimensions)
    dims = [canonicalize_axis(d, ndim_out) for d in dimensions]
    if len(set(dims)) != len(dims):
        raise ValueError(f"repeated axis in lax.expand_dims: {dimensions}")
    for d in sorted(dims):
        shape.insert(d, 1)
    kept = tuple(i for i in range(ndim_out) if i not in set(dims))
    return broadcast_in_dim(array, tuple(shape), kept)


# --- transpose -------------------------------------------------------------------------------
transpose_p = Primitive("transpose")


@transpose_p.def_impl
def _transpose_impl(x: np.ndarray, *, permutation) -> np.ndarray:
    return result_from_view(np.transpose(x, permutation), x)


@transpose_p.def_abstract_eval
def _transpose_abstract_eval(x: ShapedArray, *, permutation) -> ShapedArray:
    if tuple(sorted(permutation)) != tuple(range(x.ndim)):
        raise TypeError(
            "transpose permutation isn't a permutation of operand dimensions, "
            f"got permutation {permutation} for operand shape {x.shape}."
        )
    return ShapedArray(tuple(x.shape[p] for p in permutation), x.dtype, x.weak_type)


def transpose(operand, permutation: Sequence[int]):
    """Permute the dimensions: result dimension i is operand dimension permutation[i]."""
    permutation = index_tuple(permutation, "transpose permutation")
    if permutation == tuple(range(operand_ndim(operand))) and is_kiln_value(operand):
        return operand
    return transpose_p.bind(operand, permutation=permutation)


def _transpose_transpose_rule(ct, operand, *, permutation):
    return [transpose(ct, tuple(np.argsort(permutation)))]


deflinear(transpose_p, _transpose_transpose_rule)


@transpose_p.def_batching
def _transpose_batching_rule(args, dims, *, permutation):
    (x,), (bdim,) = args, dims
    # The batch dim stays where it is; the other dims move as in the unbatched transpose.
    moved = [p + (p >= bdim) for p in permutation]
    moved.insert(bdim, bdim)
    return transpose(x, tuple(moved)), bdim


# --- rev -------------------------------------------------------------------------------------
rev_p = Primitive("rev")


@rev_p.def_impl
def _rev_impl(x: np.ndarray, *, dimensions) -> np.ndarray:
    return result_from_view(np.flip(x, dimensions) if dimensions else x, x)


@rev_p.def_abstract_eval
def _rev_abstract_eval(x: ShapedArray, *, dimensions) -> ShapedArray:
    if len(set(dimensions)) != len(dimensions):
        raise TypeError(f"rev dimensions must be unique, got {dimensions}.")
    if any(not 0 <= d < x.ndim for d in dimensions):
        raise TypeError(
            "rev dimensions must all be less than operand ndim, got dimensions "
            f"{dimensions} for operand ndim {x.ndim}."
        )
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def rev(operand, dimensions: Sequence[int]):
    """Reverse the order of elements along each of `dimensions`."""
    return rev_p.bind(operand, dimensions=index_tuple(dimensions, "rev dimensions"))


def _rev_transpose_rule(ct, operand, *, dimensions):
    return [rev(ct, dimensions)]


deflinear(rev_p, _rev_transpose_rule)


@rev_p.def_batching
def _rev_batching_rule(args, dims, *, dimensions):
    (x,), (bdim,) = args, dims
    return rev(x, tuple(d + (d >= bdim) for d in dimensions)), bdim


# --- copy ------------------------------------------------------------------------------------
copy_p = Primitive("copy")


@copy_p.def_impl
def _copy_impl(x: np.ndarray) -> np.ndarray:
    return np.array(x, order="C", copy=True)


@copy_p.def_abstract_eval
def _copy_abstract_eval(x: ShapedArray) -> ShapedArray:
    return x


def copy(operand):
    """A copy of `operand` (staged as the `copy` primitive, which jnp.copy uses)."""
    return copy_p.bind(operand)


def _copy_transpose_rule(ct, operand):
    return [copy(ct)]


deflinear(copy_p, _copy_transpose_rule)


@copy_p.def_batching
def _copy_batching_rule(args, dims):
    return copy(args[0]), dims[0]

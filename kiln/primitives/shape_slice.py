"""Shape primitives that select, extend or generate elements: slice, pad, concatenate and iota,
with the lax helpers built on them (slice_in_dim, index_in_dim, broadcasted_iota). Each block
holds all the rules of one primitive."""

from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from kiln.core import dtypes
from kiln.core.ad_util import is_undefined_primal
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.core.shapes import canonicalize_shape
from kiln.primitives.base import (
    check_dtype,
    FLOAT,
    INT,
    COMPLEX,
    bdim_at_front,
    batch_size,
    deflinear,
    defjvp_zero,
    lax_operands,
)
from kiln.primitives.shape import (
    broadcast_in_dim,
    canonicalize_axis,
    full,
    index_tuple,
    is_kiln_value,
    operand_shape,
    result_from_view,
    squeeze,
)

__all__ = [
    "slice",
    "slice_in_dim",
    "index_in_dim",
    "pad",
    "concatenate",
    "iota",
    "broadcasted_iota",
    "slice_p",
    "pad_p",
    "concatenate_p",
    "iota_p",
]

_builtin_slice = slice


# --- slice -----------------------------------------------------------------------------------
slice_p = Primitive("slice")


@slice_p.def_impl
def _slice_impl(x: np.ndarray, *, start_indices, limit_indices, strides) -> np.ndarray:
    steps = strides if strides is not None else (1,) * x.ndim
    index = tuple(_builtin_slice(s, l, st) for s, l, st in zip(start_indices, limit_indices, steps))
    # x[()] of a 0-d array would be a NumPy scalar, not an array.
    return result_from_view(x[index] if x.ndim else x, x)


@slice_p.def_abstract_eval
def _slice_abstract_eval(x: ShapedArray, *, start_indices, limit_indices, strides) -> ShapedArray:
    if not len(start_indices) == len(limit_indices) == x.ndim:
        raise TypeError(
            f"slice start_indices {start_indices} and limit_indices "
            f"{limit_indices} must each have one entry per operand dimension "
            f"(operand shape {x.shape})."
        )
    if strides is not None and len(strides) != x.ndim:
        raise TypeError(
            f"slice strides {strides} must have one entry per operand dimension "
            f"(operand shape {x.shape})."
        )
    if any(s < 0 for s in start_indices):
        raise TypeError(
            f"slice start_indices must be greater than or equal to zero, got "
            f"start_indices of {start_indices}."
        )
    if any(l > d for l, d in zip(limit_indices, x.shape)):
        raise TypeError(
            f"slice limit_indices must be less than or equal to operand shape, got "
            f"limit_indices {limit_indices} for operand shape {x.shape}."
        )
    if any(l < s for s, l in zip(start_indices, limit_indices)):
        raise TypeError(
            f"slice limit_indices must be greater than or equal to start_indices, "
            f"got start_indices {start_indices} and limit_indices {limit_indices}."
        )
    steps = strides if strides is not None else (1,) * x.ndim
    if any(st <= 0 for st in steps):
        raise TypeError(f"slice strides must be positive, got {strides}.")
    shape = tuple(-(-(l - s) // st) for s, l, st in zip(start_indices, limit_indices, steps))
    return ShapedArray(shape, x.dtype, x.weak_type)


def slice(
    operand,
    start_indices: Sequence[int],
    limit_indices: Sequence[int],  # noqa: A001
    strides: Sequence[int] | None = None,
):
    """The elements from `start_indices` up to (excluding) `limit_indices`, every `strides`-th
    along each dimension (static bounds; lax.dynamic_slice takes traced starts)."""
    start = index_tuple(start_indices, "slice start_indices")
    limit = index_tuple(limit_indices, "slice limit_indices")
    steps = None if strides is None else index_tuple(strides, "slice strides")
    if steps is not None and all(s == 1 for s in steps):
        steps = None  # the common case prints as JAX's does: strides=None
    shape = operand_shape(operand)
    if steps is None and all(s == 0 for s in start) and limit == shape and is_kiln_value(operand):
        return operand
    return slice_p.bind(operand, start_indices=start, limit_indices=limit, strides=steps)


def _slice_transpose_rule(ct, operand, *, start_indices, limit_indices, strides):
    # The cotangent goes back where the slice read it, zeros elsewhere: edge padding up to the
    # start and from the last element read, interior padding between strided elements.
    steps = strides if strides is not None else (1,) * len(operand.shape)
    config = []
    for dim, start, size, step in zip(operand.shape, start_indices, ct.shape, steps):
        end = start + (size - 1) * step + 1 if size else start
        config.append((start, dim - end, step - 1))
    return [pad(ct, 0, config)]


deflinear(slice_p, _slice_transpose_rule)


@slice_p.def_batching
def _slice_batching_rule(args, dims, *, start_indices, limit_indices, strides):
    (x,), (bdim,) = args, dims
    start, limit = list(start_indices), list(limit_indices)
    start.insert(bdim, 0)
    limit.insert(bdim, x.shape[bdim])
    steps = None
    if strides is not None:
        steps = list(strides)
        steps.insert(bdim, 1)
    return slice(x, start, limit, steps), bdim


def slice_in_dim(
    operand, start_index: int | None, limit_index: int | None, stride: int = 1, axis: int = 0
):
    """lax.slice along one axis; None bounds mean the ends and negative ones count from it."""
    shape = operand_shape(operand)
    axis = canonicalize_axis(axis, len(shape))
    size = shape[axis]
    start = 0 if start_index is None else operator.index(start_index)
    limit = size if limit_index is None else operator.index(limit_index)
    start = start + size if start < 0 else start
    limit = limit + size if limit < 0 else limit
    starts = [0] * len(shape)
    limits = list(shape)
    strides = [1] * len(shape)
    starts[axis], limits[axis], strides[axis] = start, limit, operator.index(stride)
    return slice(operand, starts, limits, strides)


def index_in_dim(operand, index: int, axis: int = 0, keepdims: bool = True):
    """The `index`-th slab along `axis` (negative counts from the end); with keepdims=False
    the axis is removed."""
    shape = operand_shape(operand)
    axis = canonicalize_axis(axis, len(shape))
    index = operator.index(index)
    wrapped = index + shape[axis] if index < 0 else index
    if not 0 <= wrapped < shape[axis]:
        raise IndexError(f"index {index} is out of bounds for axis {axis} with size {shape[axis]}")
    out = slice_in_dim(operand, wrapped, wrapped + 1, 1, axis)
    return out if keepdims else squeeze(out, (axis,))


# --- pad -------------------------------------------------------------------------------------
pad_p = Primitive("pad")


@pad_p.def_impl
def _pad_impl(x: np.ndarray, padding_value: np.ndarray, *, padding_config) -> np.ndarray:
    # Grow every dimension to its interior-dilated size plus the non-negative edge padding,
    # write the operand at its strided positions, then crop where lo/hi are negative.
    grown, index, crop = [], [], []
    for d, (lo, hi, interior) in zip(x.shape, padding_config):
        dilated = d + max(d - 1, 0) * interior
        size = max(lo, 0) + dilated + max(hi, 0)
        grown.append(size)
        index.append(_builtin_slice(max(lo, 0), max(lo, 0) + dilated, interior + 1))
        crop.append(_builtin_slice(-min(lo, 0), size + min(hi, 0)))
    out = np.full(grown, padding_value, dtype=x.dtype)
    out[tuple(index)] = x
    return np.array(out[tuple(crop)], order="C")


@pad_p.def_abstract_eval
def _pad_abstract_eval(
    x: ShapedArray, padding_value: ShapedArray, *, padding_config
) -> ShapedArray:
    if x.dtype != padding_value.dtype:
        raise TypeError(
            f"pad operand and padding_value must be same dtype: got "
            f"{x.dtype.name} and {padding_value.dtype.name}."
        )
    if padding_value.shape != ():
        raise TypeError(f"pad padding_value must be a scalar, got shape {padding_value.shape}.")
    if len(padding_config) != x.ndim:
        raise TypeError(
            f"pad padding_config {padding_config} must have one (lo, hi, interior) "
            f"triple per operand dimension (operand shape {x.shape})."
        )
    if any(interior < 0 for _, _, interior in padding_config):
        raise ValueError(
            "interior padding in padding_config must be nonnegative, got "
            f"padding_config {padding_config}"
        )
    shape = tuple(
        lo + hi + d + max(d - 1, 0) * interior
        for d, (lo, hi, interior) in zip(x.shape, padding_config)
    )
    if any(s < 0 for s in shape):
        raise ValueError(
            f"Dimension size after padding is not at least 0, got result shape "
            f"{shape}, for padding_config {padding_config} and operand shape "
            f"{x.shape}"
        )
    return ShapedArray(shape, x.dtype, x.weak_type and padding_value.weak_type)


def pad(operand, padding_value, padding_config: Sequence[tuple[int, int, int]]):
    """Pad with `padding_value`: per dimension a (lo, hi, interior) triple adds lo elements
    before, hi after and `interior` between neighbours; negative lo/hi crop instead."""
    config = []
    for triple in padding_config:
        lo, hi, interior = index_tuple(triple, "pad padding_config entry")
        config.append((lo, hi, interior))
    operand, padding_value = lax_operands(operand, padding_value)
    return pad_p.bind(operand, padding_value, padding_config=tuple(config))


def _pad_transpose_rule(ct, operand, padding_value, *, padding_config):
    from kiln.primitives.elementwise import sub
    from kiln.primitives.reductions import reduce_sum

    # Negated edge padding undoes the edges (crops what was added and restores what was
    # cropped, as zeros); the operand's elements then sit every interior + 1 positions.
    unpadded = pad(ct, 0, [(-lo, -hi, 0) for lo, hi, _ in padding_config])
    operand_ct = slice(
        unpadded,
        (0,) * len(unpadded.shape),
        unpadded.shape,
        [interior + 1 for _, _, interior in padding_config],
    )
    padding_ct = None
    if is_undefined_primal(padding_value):
        # The padding value fills every result position the operand does not.
        every_axis = tuple(range(len(ct.shape)))
        padding_ct = sub(reduce_sum(ct, every_axis), reduce_sum(operand_ct, every_axis))
    return [operand_ct if is_undefined_primal(operand) else None, padding_ct]


deflinear(pad_p, _pad_transpose_rule)


@pad_p.def_batching
def _pad_batching_rule(args, dims, *, padding_config):
    (operand, padding_value), (operand_bdim, padding_bdim) = args, dims
    if padding_bdim is None:
        config = list(padding_config)
        config.insert(operand_bdim, (0, 0, 0))
        return pad(operand, padding_value, config), operand_bdim
    from kiln.primitives.elementwise import select

    # One padding value per batch element: pad with anything, then select each element's
    # value wherever a mask, padded the same way, says the operand is absent.
    size = batch_size(args, dims)
    operand = bdim_at_front(operand, operand_bdim, size)
    padded = pad(operand, 0, ((0, 0, 0),) + tuple(padding_config))
    present = pad(full(operand.shape[1:], True, dtypes.bool_), False, padding_config)
    present = broadcast_in_dim(present, padded.shape, tuple(range(1, len(padded.shape))))
    fill = broadcast_in_dim(padding_value, padded.shape, (0,))
    return select(present, padded, fill), 0


# --- concatenate -----------------------------------------------------------------------------
concatenate_p = Primitive("concatenate")


@concatenate_p.def_impl
def _concatenate_impl(*operands: np.ndarray, dimension) -> np.ndarray:
    return np.concatenate(operands, axis=dimension)


@concatenate_p.def_abstract_eval
def _concatenate_abstract_eval(*operands: ShapedArray, dimension) -> ShapedArray:
    if not operands:
        raise TypeError("concatenate requires a non-empty sequence of operands.")
    first = operands[0]
    if any(o.dtype != first.dtype for o in operands[1:]):
        raise TypeError(
            "lax.concatenate requires arguments to have the same dtypes, got "
            f"{', '.join(o.dtype.name for o in operands)}. (Tip: jnp.concatenate "
            "is a similar function that does automatic type promotion on inputs)."
        )
    shapes = ", ".join(str(o.shape) for o in operands)
    if any(o.ndim != first.ndim for o in operands[1:]):
        raise TypeError(
            f"Cannot concatenate arrays with different numbers of dimensions: got {shapes}."
        )
    if not 0 <= dimension < first.ndim:
        raise TypeError(
            f"concatenate dimension out of bounds: dimension {dimension} for shapes {shapes}."
        )
    for o in operands[1:]:
        if any(a != b for i, (a, b) in enumerate(zip(o.shape, first.shape)) if i != dimension):
            raise TypeError(
                "Cannot concatenate arrays with shapes that differ in dimensions "
                "other than the one being concatenated: concatenating along "
                f"dimension {dimension} for shapes {shapes}."
            )
    shape = list(first.shape)
    shape[dimension] = sum(o.shape[dimension] for o in operands)
    return ShapedArray(tuple(shape), first.dtype, all(o.weak_type for o in operands))


def concatenate(operands: Sequence[Any], dimension: int):
    """Join same-dtype, same-rank operands along `dimension` (no promotion, no broadcasting)."""
    operands = list(operands)
    if not operands:
        raise ValueError("concatenate requires a non-empty sequence of arrays")
    dimension = operator.index(dimension)
    if len(operands) == 1 and is_kiln_value(operands[0]):
        return operands[0]
    return concatenate_p.bind(*operands, dimension=dimension)


def _concatenate_transpose_rule(ct, *operands, dimension):
    cts, offset = [], 0
    for operand in operands:
        size = operand.shape[dimension]
        if is_undefined_primal(operand):
            cts.append(slice_in_dim(ct, offset, offset + size, 1, dimension))
        else:
            cts.append(None)
        offset += size
    return cts


deflinear(concatenate_p, _concatenate_transpose_rule)


@concatenate_p.def_batching
def _concatenate_batching_rule(args, dims, *, dimension):
    size = batch_size(args, dims)
    operands = [bdim_at_front(x, d, size) for x, d in zip(args, dims)]
    return concatenate(operands, dimension + 1), 0


# --- iota ------------------------------------------------------------------------------------
iota_p = Primitive("iota")


@iota_p.def_impl
def _iota_impl(*, dtype, shape, dimension) -> np.ndarray:
    length = shape[dimension]
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" and length - 1 <= np.iinfo(dtype).max:
        # Every count fits: one pass in the dtype itself (the counters of a random draw are
        # millions of uint32s).
        counts = np.arange(length, dtype=dtype)
    else:
        # Count in int64 and convert once: counting in float16/bfloat16 would accumulate error.
        counts = np.arange(length, dtype=np.int64).astype(dtype)
    if len(shape) == 1:
        return counts
    expanded = [1] * len(shape)
    expanded[dimension] = length
    return np.array(np.broadcast_to(counts.reshape(expanded), shape))


@iota_p.def_abstract_eval
def _iota_abstract_eval(*, dtype, shape, dimension) -> ShapedArray:
    check_dtype("iota", dtype, (INT, FLOAT, COMPLEX))
    if not 0 <= dimension < len(shape):
        raise ValueError(
            "iota dimension must be between 0 and len(shape), got "
            f"dimension={dimension} for shape={shape}"
        )
    return ShapedArray(shape, dtype, False)


defjvp_zero(iota_p)


@iota_p.def_batching
def _iota_batching_rule(args, dims, **params):
    # iota has no operands, so nothing of it can be batched: the one result serves all.
    return iota_p.bind(**params), None


def broadcasted_iota(dtype, shape, dimension: int):
    """An array of `shape` whose elements count 0, 1, ... along `dimension`."""
    dtype = dtypes.canonicalize(dtype)
    shape = canonicalize_shape(shape)
    dimension = operator.index(dimension)
    return iota_p.bind(dtype=dtype, shape=shape, dimension=dimension)


def iota(dtype, size: int):
    """0, 1, ..., size - 1 as a vector of `dtype`."""
    return broadcasted_iota(dtype, (size,), 0)

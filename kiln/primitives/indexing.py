"""Dynamic slicing primitives: dynamic_slice and dynamic_update_slice, whose start positions
are runtime values, plus the lax helpers built on them. Gather and scatter live in
indexing_gather.py and indexing_scatter.py.

As in XLA, start indices are clamped so that the slice (or the update) lies inside the operand;
nothing is ever read or written out of bounds.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from kiln.core import dtypes
from kiln.core.ad_util import is_undefined_primal
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.core.shapes import canonicalize_shape
from kiln.core.trace import Tracer
from kiln.primitives.base import batch_size, instantiate, move_bdim
from kiln.primitives.shape import (
    broadcast_in_dim,
    canonicalize_axis,
    full_like,
    operand_shape,
    result_from_view,
)
from kiln.primitives.shape_slice import concatenate

__all__ = [
    "dynamic_slice",
    "dynamic_update_slice",
    "dynamic_slice_in_dim",
    "dynamic_index_in_dim",
    "dynamic_update_slice_in_dim",
    "dynamic_update_index_in_dim",
    "dynamic_slice_p",
    "dynamic_update_slice_p",
]


def _clamped_starts(
    starts: Sequence[np.ndarray], operand_shape_: tuple, window: tuple
) -> list[int]:
    """XLA's rule: each start is clamped to [0, dim - window] so the window fits."""
    out = []
    for s, dim, size in zip(starts, operand_shape_, window):
        out.append(min(max(int(s), 0), dim - size))
    return out


def _check_start_avals(name: str, operand: ShapedArray, starts: Sequence[ShapedArray]) -> None:
    if len(starts) != operand.ndim:
        raise TypeError(
            f"{name} takes one start index per operand dimension: got "
            f"{len(starts)} start indices for operand shape {operand.shape}."
        )
    for i, s in enumerate(starts):
        if s.shape != () or not dtypes.is_integer(s.dtype):
            raise TypeError(
                f"{name} start indices must be integer scalars, got "
                f"{s.str_short()} at position {i}."
            )
    if len({s.dtype for s in starts}) > 1:
        raise TypeError(
            f"index arguments to {name} must be integers of the same type, got: "
            f"{', '.join(s.dtype.name for s in starts)}"
        )


def _start_index_dtype(starts: Sequence[Any]) -> np.dtype:
    return dtypes.dtype_and_weak_of(starts[0])[0] if starts else dtypes.default_int()


def _batched_start_matrix(starts: Sequence[Any], start_dims: Sequence[int | None], size: int):
    """The start indices of every batch element as a (size, len(starts)) matrix: row b holds
    element b's starts (an unbatched start repeats down its column)."""
    columns = [
        broadcast_in_dim(s, (size, 1), () if d is None else (0,))
        for s, d in zip(starts, start_dims)
    ]
    return concatenate(columns, 1)


def _with_bdim_at(x, bdim: int | None, size: int, dst: int):
    """x with its batch dim at `dst`; an unbatched x is broadcast there to `size` copies."""
    if bdim is not None:
        return move_bdim(x, bdim, dst)
    shape = list(x.shape)
    kept = tuple(d + (d >= dst) for d in range(len(shape)))
    shape.insert(dst, size)
    return broadcast_in_dim(x, tuple(shape), kept)


# --- dynamic_slice ---------------------------------------------------------------------------
dynamic_slice_p = Primitive("dynamic_slice")


@dynamic_slice_p.def_impl
def _dynamic_slice_impl(operand: np.ndarray, *starts: np.ndarray, slice_sizes) -> np.ndarray:
    begin = _clamped_starts(starts, operand.shape, slice_sizes)
    view = operand[tuple(slice(b, b + n) for b, n in zip(begin, slice_sizes))]
    return result_from_view(view, operand)


@dynamic_slice_p.def_abstract_eval
def _dynamic_slice_abstract_eval(
    operand: ShapedArray, *starts: ShapedArray, slice_sizes
) -> ShapedArray:
    _check_start_avals("dynamic_slice", operand, starts)
    if len(slice_sizes) != operand.ndim:
        raise TypeError(
            f"dynamic_slice slice_sizes must have one entry per operand "
            f"dimension, got slice_sizes {slice_sizes} for operand shape "
            f"{operand.shape}."
        )
    if any(not 0 <= n <= d for n, d in zip(slice_sizes, operand.shape)):
        raise TypeError(
            f"dynamic_slice slice_sizes must be non-negative and no larger than "
            f"the operand shape, got slice_sizes {slice_sizes} for operand shape "
            f"{operand.shape}."
        )
    return ShapedArray(tuple(slice_sizes), operand.dtype, operand.weak_type)


@dynamic_slice_p.def_jvp
def _dynamic_slice_jvp_rule(primals, tangents, *, slice_sizes):
    operand, *starts = primals
    out = dynamic_slice_p.bind(operand, *starts, slice_sizes=slice_sizes)
    if tangents[0] is None:  # start indices are integers: only the operand has a tangent
        return out, None
    return out, dynamic_slice_p.bind(tangents[0], *starts, slice_sizes=slice_sizes)


@dynamic_slice_p.def_transpose
def _dynamic_slice_transpose_rule(ct, operand, *starts, slice_sizes):
    # Writing the cotangent into zeros at the same starts clamps them as the slice did.
    zeros = full_like(ct, 0, shape=operand.shape)
    return [dynamic_update_slice_p.bind(zeros, ct, *starts)] + [None] * len(starts)


@dynamic_slice_p.def_batching
def _dynamic_slice_batching_rule(args, dims, *, slice_sizes):
    (operand, *starts), (operand_bdim, *start_dims) = args, dims
    if all(d is None for d in start_dims):
        # One window for all: the batch dim is sliced whole, from 0.
        starts.insert(operand_bdim, np.zeros((), _start_index_dtype(starts)))
        sizes = list(slice_sizes)
        sizes.insert(operand_bdim, operand.shape[operand_bdim])
        return dynamic_slice_p.bind(operand, *starts, slice_sizes=tuple(sizes)), operand_bdim
    from kiln.primitives.indexing_gather import GatherDimensionNumbers, gather

    # A window per batch element: a gather with one start row per element, clamped as
    # dynamic_slice clamps. A batched operand is paired with the rows by a batching dim.
    size = batch_size(args, dims)
    indices = _batched_start_matrix(starts, start_dims, size)
    window_dims = tuple(range(1, len(starts) + 1))
    if operand_bdim is None:
        dnums = GatherDimensionNumbers(
            offset_dims=window_dims,
            collapsed_slice_dims=(),
            start_index_map=tuple(range(len(starts))),
        )
        sizes = tuple(slice_sizes)
    else:
        operand_dims = tuple(d for d in range(len(operand.shape)) if d != operand_bdim)
        dnums = GatherDimensionNumbers(
            offset_dims=window_dims,
            collapsed_slice_dims=(),
            start_index_map=operand_dims,
            operand_batching_dims=(operand_bdim,),
            start_indices_batching_dims=(0,),
        )
        sizes = list(slice_sizes)
        sizes.insert(operand_bdim, 1)
    out = gather(
        operand, indices, dnums, sizes, unique_indices=True, indices_are_sorted=True, mode="clip"
    )
    return out, 0


# --- dynamic_update_slice --------------------------------------------------------------------
dynamic_update_slice_p = Primitive("dynamic_update_slice")


@dynamic_update_slice_p.def_impl
def _dynamic_update_slice_impl(
    operand: np.ndarray, update: np.ndarray, *starts: np.ndarray
) -> np.ndarray:
    begin = _clamped_starts(starts, operand.shape, update.shape)
    out = operand.copy()
    out[tuple(slice(b, b + n) for b, n in zip(begin, update.shape))] = update
    return out


@dynamic_update_slice_p.def_abstract_eval
def _dynamic_update_slice_abstract_eval(
    operand: ShapedArray, update: ShapedArray, *starts: ShapedArray
) -> ShapedArray:
    if update.ndim != operand.ndim:
        raise TypeError(
            f"dynamic_update_slice update must have the same rank as operand, got "
            f"update shape {update.shape} for operand shape {operand.shape}."
        )
    if update.dtype != operand.dtype:
        raise TypeError(
            f"dynamic_update_slice update dtype {update.dtype.name} must match the "
            f"operand dtype {operand.dtype.name}; convert it with "
            "lax.convert_element_type first."
        )
    if any(u > d for u, d in zip(update.shape, operand.shape)):
        raise TypeError(
            f"dynamic_update_slice update shape {update.shape} must be no larger "
            f"than the operand shape {operand.shape} in every dimension."
        )
    _check_start_avals("dynamic_update_slice", operand, starts)
    return ShapedArray(operand.shape, operand.dtype, operand.weak_type)


@dynamic_update_slice_p.def_jvp
def _dynamic_update_slice_jvp_rule(primals, tangents):
    operand, update, *starts = primals
    out = dynamic_update_slice_p.bind(operand, update, *starts)
    operand_tangent, update_tangent = tangents[:2]
    if operand_tangent is None and update_tangent is None:
        return out, None
    # Linear in (operand, update) together; the integer starts carry no tangent.
    return out, dynamic_update_slice_p.bind(
        instantiate(operand_tangent, operand), instantiate(update_tangent, update), *starts
    )


@dynamic_update_slice_p.def_transpose
def _dynamic_update_slice_transpose_rule(ct, operand, update, *starts):
    operand_ct = update_ct = None
    if is_undefined_primal(operand):
        # The operand's values under the update never reach the result.
        zeros = full_like(ct, 0, shape=update.shape)
        operand_ct = dynamic_update_slice_p.bind(ct, zeros, *starts)
    if is_undefined_primal(update):
        update_ct = dynamic_slice_p.bind(ct, *starts, slice_sizes=tuple(update.shape))
    return [operand_ct, update_ct] + [None] * len(starts)


@dynamic_update_slice_p.def_batching
def _dynamic_update_slice_batching_rule(args, dims):
    (operand, update, *starts), (operand_bdim, update_bdim, *start_dims) = args, dims
    size = batch_size(args, dims)
    out_dim = operand_bdim if operand_bdim is not None else 0
    operand = _with_bdim_at(operand, operand_bdim, size, out_dim)
    if all(d is None for d in start_dims):
        # One window for all: the update covers the whole batch dim, from 0.
        update = _with_bdim_at(update, update_bdim, size, out_dim)
        starts.insert(out_dim, np.zeros((), _start_index_dtype(starts)))
        return dynamic_update_slice_p.bind(operand, update, *starts), out_dim
    from kiln.primitives.indexing_gather import ScatterDimensionNumbers
    from kiln.primitives.indexing_scatter import scatter

    # A window per batch element: a scatter with one start row per element, clamped as
    # dynamic_update_slice clamps, each row writing into its own batch slab.
    update_dim = update_bdim if update_bdim is not None else 0
    update = _with_bdim_at(update, update_bdim, size, update_dim)
    indices = _batched_start_matrix(starts, start_dims, size)
    rank = len(operand.shape)
    dnums = ScatterDimensionNumbers(
        update_window_dims=tuple(d for d in range(rank) if d != update_dim),
        inserted_window_dims=(),
        scatter_dims_to_operand_dims=tuple(d for d in range(rank) if d != out_dim),
        operand_batching_dims=(out_dim,),
        scatter_indices_batching_dims=(0,),
    )
    out = scatter(
        operand, indices, update, dnums, indices_are_sorted=True, unique_indices=True, mode="clip"
    )
    return out, out_dim


# --- wrappers (the lax API) ------------------------------------------------------------------


def _is_static_index(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _split_start_indices(start_indices: Any, name: str) -> list:
    """A list of scalar start indices from a sequence or a 1-D array of them."""
    if isinstance(start_indices, (list, tuple)):
        return list(start_indices)
    shape = operand_shape(start_indices)
    if len(shape) != 1:
        raise TypeError(
            f"{name} start_indices must be a sequence of scalars or a 1-D array, got shape {shape}."
        )
    if not isinstance(start_indices, Tracer):
        return list(np.asarray(start_indices))
    from kiln.primitives.shape import squeeze
    from kiln.primitives.shape_slice import slice_in_dim

    return [squeeze(slice_in_dim(start_indices, i, i + 1), (0,)) for i in range(shape[0])]


def dynamic_slice_indices(
    operand_shape_: tuple,
    start_indices: Any,
    allow_negative_indices: bool | Sequence[bool],
    name: str,
) -> list:
    """Start indices ready for binding: one integer scalar per dimension, all of one dtype.

    Negative indices count from the end of their dimension when allowed (as in JAX). Static
    values are normalized and clamped on the host; traced ones get a select."""
    from kiln.primitives.elementwise import add, lt, select_n

    starts = _split_start_indices(start_indices, name)
    if len(starts) != len(operand_shape_):
        raise TypeError(
            f"{name} start_indices must have length equal to the number of "
            f"dimensions of the operand, got indices {tuple(starts)} for operand "
            f"shape {operand_shape_}."
        )
    if isinstance(allow_negative_indices, (bool, np.bool_)):
        allow = [bool(allow_negative_indices)] * len(starts)
    else:
        allow = [bool(a) for a in allow_negative_indices]
    index_dtypes = set()
    for i, s in enumerate(starts):
        if _is_static_index(s):
            continue
        dtype = dtypes.dtype_and_weak_of(s)[0] if not isinstance(s, bool) else dtypes.bool_
        if not dtypes.is_integer(dtype) or operand_shape(s) != ():
            raise TypeError(
                f"{name} start indices must be integer scalars, got "
                f"{dtype.name}{list(operand_shape(s))} at position {i}."
            )
        index_dtypes.add(dtype)
    if len(index_dtypes) > 1:
        raise TypeError(
            f"index arguments to {name} must be integers of the same type, got: "
            f"{', '.join(sorted(d.name for d in index_dtypes))}"
        )
    index_dtype = index_dtypes.pop() if index_dtypes else dtypes.default_int()
    if np.iinfo(index_dtype).max < max(operand_shape_, default=0):
        # Narrow indices (int8 into an axis of 200) could not hold `i + dim`: widen them all.
        from kiln.primitives.elementwise import convert_element_type

        index_dtype = dtypes.default_int()
        starts = [
            convert_element_type(s, index_dtype) if isinstance(s, Tracer) else s for s in starts
        ]
    out = []
    for s, dim, neg in zip(starts, operand_shape_, allow):
        if not isinstance(s, Tracer):
            value = int(s)
            if neg and value < 0:
                value += dim
            # Clamping here gives the result the primitive's clamp would give, and keeps the
            # literal representable in the index dtype.
            out.append(np.asarray(min(max(value, 0), dim), dtype=index_dtype))
        elif neg and not dtypes.is_unsigned(index_dtype):
            out.append(select_n(lt(s, 0), s, add(s, dim)))
        else:
            out.append(s)
    return out


def dynamic_slice(
    operand, start_indices, slice_sizes, *, allow_negative_indices: bool | Sequence[bool] = True
):
    """The `slice_sizes` window of `operand` starting at (traced) `start_indices`.

    Starts are clamped so the window stays inside the operand, as XLA does; negative starts
    count from the end when `allow_negative_indices` (the default)."""
    shape = operand_shape(operand)
    slice_sizes = canonicalize_shape(slice_sizes, context="dynamic_slice slice_sizes: ")
    starts = dynamic_slice_indices(shape, start_indices, allow_negative_indices, "dynamic_slice")
    return dynamic_slice_p.bind(operand, *starts, slice_sizes=slice_sizes)


def dynamic_update_slice(
    operand, update, start_indices, *, allow_negative_indices: bool | Sequence[bool] = True
):
    """`operand` with the window at (traced) `start_indices` replaced by `update`.

    Starts are clamped so the whole update lands inside the operand."""
    shape = operand_shape(operand)
    starts = dynamic_slice_indices(
        shape, start_indices, allow_negative_indices, "dynamic_update_slice"
    )
    return dynamic_update_slice_p.bind(operand, update, *starts)


def dynamic_slice_in_dim(
    operand, start_index, slice_size: int, axis: int = 0, *, allow_negative_indices: bool = True
):
    """dynamic_slice along one axis: `slice_size` elements from `start_index`."""
    shape = operand_shape(operand)
    axis = canonicalize_axis(axis, len(shape))
    starts = [0] * len(shape)
    sizes = list(shape)
    starts[axis] = start_index
    sizes[axis] = operator.index(slice_size)
    allow = [False] * len(shape)
    allow[axis] = allow_negative_indices
    return dynamic_slice(operand, starts, sizes, allow_negative_indices=allow)


def dynamic_index_in_dim(
    operand, index, axis: int = 0, keepdims: bool = True, *, allow_negative_indices: bool = True
):
    """The slab at (traced) `index` along `axis`; keepdims=False removes the axis."""
    from kiln.primitives.shape import squeeze

    out = dynamic_slice_in_dim(
        operand, index, 1, axis, allow_negative_indices=allow_negative_indices
    )
    if keepdims:
        return out
    return squeeze(out, (canonicalize_axis(axis, len(operand_shape(operand))),))


def dynamic_update_slice_in_dim(
    operand, update, start_index, axis: int, *, allow_negative_indices: bool = True
):
    """dynamic_update_slice along one axis, at `start_index`."""
    shape = operand_shape(operand)
    axis = canonicalize_axis(axis, len(shape))
    starts = [0] * len(shape)
    starts[axis] = start_index
    allow = [False] * len(shape)
    allow[axis] = allow_negative_indices
    return dynamic_update_slice(operand, update, starts, allow_negative_indices=allow)


def dynamic_update_index_in_dim(
    operand, update, index, axis: int, *, allow_negative_indices: bool = True
):
    """Replace the slab at `index` along `axis`; `update` may omit that axis."""
    from kiln.primitives.shape import expand_dims

    shape = operand_shape(operand)
    axis = canonicalize_axis(axis, len(shape))
    if len(operand_shape(update)) == len(shape) - 1:
        update = expand_dims(update, (axis,))
    return dynamic_update_slice_in_dim(
        operand, update, index, axis, allow_negative_indices=allow_negative_indices
    )

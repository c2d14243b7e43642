"""Gather: XLA's general indexed read, with the dimension numbers and out-of-bounds modes it
shares with the scatter family (indexing_scatter.py).

Gather and scatter take an `indices` array whose last dimension holds one start vector per
"batch" position. A gather reads a window of `slice_sizes` at every start; a scatter writes (or
combines) a window of updates at every start. The NumPy impls are vectorized: they build
broadcastable index grids for all windows at once and use fancy indexing / `ufunc.at`, never a
Python loop over windows.
"""

from __future__ import annotations

import enum
import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from kiln.core import dtypes
from kiln.core.ad_util import is_undefined_primal
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.core.shapes import canonicalize_shape
from kiln.primitives.base import batch_size, move_bdim, scalar_to_array
from kiln.primitives.shape import broadcast_in_dim

__all__ = [
    "GatherScatterMode",
    "GatherDimensionNumbers",
    "ScatterDimensionNumbers",
    "gather",
    "gather_p",
]


class GatherScatterMode(enum.Enum):
    """What gather and scatter do with indices whose window does not fit in the operand.

    CLIP: clamp the start so the window fits. FILL_OR_DROP: a gather returns `fill_value` for
    the whole window, a scatter drops the whole update. PROMISE_IN_BOUNDS: the caller promises
    the indices are in bounds; kiln then behaves as XLA on CPU does (gathers clamp, scatters
    drop)."""

    CLIP = enum.auto()
    FILL_OR_DROP = enum.auto()
    PROMISE_IN_BOUNDS = enum.auto()

    @staticmethod
    def from_any(mode: "str | GatherScatterMode | None") -> "GatherScatterMode":
        """Parse a mode: an enum member, 'clip', 'fill'/'drop', 'promise_in_bounds' or None
        (FILL_OR_DROP)."""
        if isinstance(mode, GatherScatterMode):
            return mode
        if mode == "clip":
            return GatherScatterMode.CLIP
        if mode is None or mode in ("fill", "drop"):
            return GatherScatterMode.FILL_OR_DROP
        if mode == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        raise ValueError(
            f"Unknown gather/scatter mode {mode!r}; use 'clip', 'fill', 'drop' or "
            "'promise_in_bounds'."
        )


def _repr_dimension_numbers(dn: NamedTuple, batching_fields: tuple[str, str]) -> str:
    # Without batching dims, print the fields the seed's (older) jaxpr format shows.
    fields = [
        f
        for f in dn._fields
        if f not in batching_fields or any(getattr(dn, b) for b in batching_fields)
    ]
    return f"{type(dn).__name__}({', '.join(f'{f}={getattr(dn, f)}' for f in fields)})"


class GatherDimensionNumbers(NamedTuple):
    """How a gather maps index vectors and windows to operand and output dimensions.

    offset_dims: output dims that hold the (non-collapsed) window dims, in order.
    collapsed_slice_dims: operand dims whose size-1 window dim is dropped from the output.
    start_index_map: for each entry of an index vector, the operand dim it starts.
    operand_batching_dims / start_indices_batching_dims: paired operand and indices dims that
    are batch dims of both (the window at batch position b reads operand slab b)."""

    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()

    def __repr__(self) -> str:
        return _repr_dimension_numbers(
            self, ("operand_batching_dims", "start_indices_batching_dims")
        )

    __str__ = __repr__


class ScatterDimensionNumbers(NamedTuple):
    """How a scatter maps updates dims and index vectors to operand dimensions.

    update_window_dims: dims of `updates` that are window dims (the others are scatter dims,
    matching the indices' batch dims). inserted_window_dims: operand dims with a size-1 window
    that has no updates dim. scatter_dims_to_operand_dims: for each entry of an index vector,
    the operand dim it starts. operand_batching_dims / scatter_indices_batching_dims: paired
    batch dims of the operand and the indices."""

    update_window_dims: tuple
    inserted_window_dims: tuple
    scatter_dims_to_operand_dims: tuple
    operand_batching_dims: tuple = ()
    scatter_indices_batching_dims: tuple = ()

    def __repr__(self) -> str:
        return _repr_dimension_numbers(
            self, ("operand_batching_dims", "scatter_indices_batching_dims")
        )

    __str__ = __repr__


def _as_int_tuple(values: Sequence[int]) -> tuple:
    return tuple(int(v) for v in values)


def _canonical_gather_dnums(dn: Any) -> GatherDimensionNumbers:
    if not isinstance(dn, GatherDimensionNumbers):
        raise TypeError(
            f"gather dimension_numbers must be a GatherDimensionNumbers, got {type(dn).__name__}."
        )
    return GatherDimensionNumbers(*(_as_int_tuple(f) for f in dn))


def _canonical_scatter_dnums(dn: Any) -> ScatterDimensionNumbers:
    if not isinstance(dn, ScatterDimensionNumbers):
        raise TypeError(
            f"scatter dimension_numbers must be a ScatterDimensionNumbers, got {type(dn).__name__}."
        )
    return ScatterDimensionNumbers(*(_as_int_tuple(f) for f in dn))


def default_fill_value(dtype: np.dtype) -> Any:
    """What FILL_OR_DROP gathers return out of bounds when no fill_value is given: NaN for
    inexact types, the most negative value for signed ints, the largest for unsigned ones and
    True for bools (as in JAX)."""
    if dtypes.is_inexact(dtype):
        return np.nan
    if dtype == dtypes.bool_:
        return True
    if dtypes.is_unsigned(dtype):
        return int(np.iinfo(dtype).max)
    return int(np.iinfo(dtype).min)


# --- shared validation ----------------------------------------------------------------------


def _check_sorted_unique(name: str, field: str, dims: tuple, bound: int, what: str) -> None:
    if list(dims) != sorted(set(dims)):
        raise TypeError(
            f"{name} {field} must be sorted and have no repeated entries, got {field}={dims}."
        )
    for d in dims:
        if not 0 <= d < bound:
            raise TypeError(
                f"{name} {field} entries must be in [0, {bound}) ({what}), got {field}={dims}."
            )


def _check_indices(name: str, indices: ShapedArray, index_map: tuple, field: str) -> None:
    if not dtypes.is_integer(indices.dtype):
        raise TypeError(f"{name} indices must have an integer dtype, got {indices.dtype.name}.")
    if indices.ndim == 0 or indices.shape[-1] != len(index_map):
        raise TypeError(
            f"{name} indices must have a last dimension holding one entry per "
            f"{field} entry: {field}={index_map} needs indices shape (..., "
            f"{len(index_map)}), got {indices.shape}."
        )


def _check_batching(
    name: str,
    operand: ShapedArray,
    indices: ShapedArray,
    operand_batching: tuple,
    indices_batching: tuple,
    field: str,
) -> None:
    if len(operand_batching) != len(indices_batching):
        raise TypeError(
            f"{name} operand_batching_dims {operand_batching} and {field} "
            f"{indices_batching} must have the same length."
        )
    if len(set(indices_batching)) != len(indices_batching):
        raise TypeError(f"{name} {field} must have no repeated entries, got {indices_batching}.")
    for od, idim in zip(operand_batching, indices_batching):
        if not 0 <= idim < indices.ndim - 1:
            raise TypeError(
                f"{name} {field} entries must be batch dims of the indices (in "
                f"[0, {indices.ndim - 1})), got {indices_batching}."
            )
        if operand.shape[od] != indices.shape[idim]:
            raise TypeError(
                f"{name} operand batching dim {od} (size {operand.shape[od]}) and "
                f"indices batching dim {idim} (size {indices.shape[idim]}) must "
                "have the same size."
            )


# --- shared NumPy machinery -----------------------------------------------------------------


def _window_starts(
    indices: np.ndarray,
    operand_ndim: int,
    index_map: tuple,
    operand_batching: tuple,
    indices_batching: tuple,
) -> np.ndarray:
    """An (N, operand_ndim) int64 matrix: the full start position of every window, where N is
    the number of index vectors. Dims not started by the index vector start at 0, except
    batching dims, which start at the window's own batch coordinate."""
    batch_shape = indices.shape[:-1]
    count = math.prod(batch_shape)
    vectors = indices.reshape(count, indices.shape[-1])
    if vectors.dtype == np.uint64:  # keep huge unsigned values huge (out of bounds), not < 0
        vectors = np.minimum(vectors, np.uint64(2**62))
    starts = np.zeros((count, operand_ndim), dtype=np.int64)
    if index_map:
        starts[:, list(index_map)] = vectors.astype(np.int64)
    for od, idim in zip(operand_batching, indices_batching):
        coord = np.arange(batch_shape[idim], dtype=np.int64).reshape(
            [-1 if j == idim else 1 for j in range(len(batch_shape))]
        )
        starts[:, od] = np.broadcast_to(coord, batch_shape).reshape(count)
    return starts


def _window_grid(starts: np.ndarray, window: Sequence[int]) -> tuple:
    """Broadcastable index arrays selecting, for each start row, the whole window: indexing
    with them gives an array of shape (N, *window)."""
    ndim = len(window)
    grid = []
    for d, size in enumerate(window):
        head = starts[:, d].reshape((-1,) + (1,) * ndim)
        offsets = np.arange(size, dtype=np.int64).reshape(
            (1,) + tuple(size if j == d else 1 for j in range(ndim))
        )
        grid.append(head + offsets)
    return tuple(grid)


# --- gather ----------------------------------------------------------------------------------
gather_p = Primitive("gather")


def _gather_output_shape(operand: ShapedArray, indices: ShapedArray, dn, slice_sizes) -> tuple:
    dropped = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    window = [s for d, s in enumerate(slice_sizes) if d not in dropped]
    batch = list(indices.shape[:-1])
    rank = len(window) + len(batch)
    out, window_iter, batch_iter = [], iter(window), iter(batch)
    for i in range(rank):
        out.append(next(window_iter) if i in dn.offset_dims else next(batch_iter))
    return tuple(out)


@gather_p.def_abstract_eval
def _gather_abstract_eval(
    operand: ShapedArray,
    indices: ShapedArray,
    *,
    dimension_numbers,
    slice_sizes,
    indices_are_sorted,
    unique_indices,
    mode,
    fill_value,
) -> ShapedArray:
    dn = dimension_numbers
    _check_indices("gather", indices, dn.start_index_map, "start_index_map")
    if len(slice_sizes) != operand.ndim:
        raise TypeError(
            f"gather slice_sizes must have one entry per operand dimension, got "
            f"slice_sizes={slice_sizes} for operand shape {operand.shape}."
        )
    for d, (size, dim) in enumerate(zip(slice_sizes, operand.shape)):
        if not 0 <= size <= dim:
            raise TypeError(
                f"gather slice size at index {d} must be within [0, {dim}] (the "
                f"operand dimension), got slice_sizes={slice_sizes}."
            )
    _check_sorted_unique(
        "gather", "collapsed_slice_dims", dn.collapsed_slice_dims, operand.ndim, "operand dims"
    )
    _check_sorted_unique(
        "gather", "operand_batching_dims", dn.operand_batching_dims, operand.ndim, "operand dims"
    )
    if len(set(dn.start_index_map)) != len(dn.start_index_map) or any(
        not 0 <= d < operand.ndim for d in dn.start_index_map
    ):
        raise TypeError(
            f"gather start_index_map must hold distinct operand dims, got "
            f"{dn.start_index_map} for operand rank {operand.ndim}."
        )
    for d in dn.collapsed_slice_dims + dn.operand_batching_dims:
        if slice_sizes[d] != 1:
            raise TypeError(
                f"gather can only collapse (or batch) operand dims with slice size "
                f"1, but slice_sizes[{d}] = {slice_sizes[d]}."
            )
    if set(dn.collapsed_slice_dims) & set(dn.operand_batching_dims):
        raise TypeError(
            "gather collapsed_slice_dims and operand_batching_dims must be "
            f"disjoint, got {dn.collapsed_slice_dims} and "
            f"{dn.operand_batching_dims}."
        )
    if set(dn.start_index_map) & set(dn.operand_batching_dims):
        raise TypeError(
            "gather start_index_map and operand_batching_dims must be disjoint, "
            f"got {dn.start_index_map} and {dn.operand_batching_dims}."
        )
    _check_batching(
        "gather",
        operand,
        indices,
        dn.operand_batching_dims,
        dn.start_indices_batching_dims,
        "start_indices_batching_dims",
    )
    n_window = operand.ndim - len(dn.collapsed_slice_dims) - len(dn.operand_batching_dims)
    if len(dn.offset_dims) != n_window:
        raise TypeError(
            f"gather offset_dims must have one entry per window dim that is not "
            f"collapsed or batched ({n_window}), got offset_dims={dn.offset_dims}."
        )
    _check_sorted_unique(
        "gather", "offset_dims", dn.offset_dims, n_window + indices.ndim - 1, "output dims"
    )
    shape = _gather_output_shape(operand, indices, dn, slice_sizes)
    return ShapedArray(shape, operand.dtype, operand.weak_type)


@gather_p.def_impl
def _gather_impl(
    operand: np.ndarray,
    indices: np.ndarray,
    *,
    dimension_numbers,
    slice_sizes,
    indices_are_sorted,
    unique_indices,
    mode,
    fill_value,
) -> np.ndarray:
    dn = dimension_numbers
    out_shape = _gather_output_shape(operand, indices, dn, slice_sizes)
    if math.prod(out_shape) == 0:
        return np.zeros(out_shape, dtype=operand.dtype)
    starts = _window_starts(
        indices,
        operand.ndim,
        dn.start_index_map,
        dn.operand_batching_dims,
        dn.start_indices_batching_dims,
    )
    upper = np.asarray(operand.shape, dtype=np.int64) - np.asarray(slice_sizes, dtype=np.int64)
    in_bounds = None
    if mode == GatherScatterMode.FILL_OR_DROP and dn.start_index_map:
        cols = list(dn.start_index_map)
        in_bounds = np.all((starts[:, cols] >= 0) & (starts[:, cols] <= upper[cols]), axis=1)
    starts = np.clip(starts, 0, upper)
    if operand.ndim == 0:  # every window is the whole scalar
        windows = np.full(len(starts), operand, dtype=operand.dtype)
    else:
        windows = operand[_window_grid(starts, slice_sizes)]  # (N, *slice_sizes), fresh
    if in_bounds is not None and not in_bounds.all():
        fill = default_fill_value(operand.dtype) if fill_value is None else fill_value
        with np.errstate(all="ignore"):
            windows[~in_bounds] = np.asarray(fill).astype(operand.dtype)
    dropped = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    offset_sizes = tuple(s for d, s in enumerate(slice_sizes) if d not in dropped)
    batch_shape = indices.shape[:-1]
    windows = windows.reshape(batch_shape + offset_sizes)
    nb = len(batch_shape)
    out = np.moveaxis(windows, list(range(nb, nb + len(offset_sizes))), list(dn.offset_dims))
    return out if out.flags.c_contiguous else out.copy(order="C")


def gather(
    operand,
    start_indices,
    dimension_numbers: GatherDimensionNumbers,
    slice_sizes,
    *,
    unique_indices: bool = False,
    indices_are_sorted: bool = False,
    mode: "str | GatherScatterMode | None" = None,
    fill_value=None,
):
    """XLA's gather: for each index vector in `start_indices` (its last dimension), read the
    window of `slice_sizes` starting there (see GatherDimensionNumbers for the layout).

    mode None means PROMISE_IN_BOUNDS (windows are clamped to fit); 'fill' returns
    `fill_value` (default NaN / INT_MIN / UINT_MAX / True) for windows that do not fit."""
    dn = _canonical_gather_dnums(dimension_numbers)
    parsed = (
        GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else GatherScatterMode.from_any(mode)
    )
    slice_sizes = canonicalize_shape(slice_sizes, context="gather slice_sizes: ")
    if fill_value is not None:
        if parsed != GatherScatterMode.FILL_OR_DROP:
            fill_value = None  # only meaningful when filling; keeps params canonical
        else:
            fill_value = np.asarray(fill_value).item()  # hashable Python scalar
    params = dict(
        dimension_numbers=dn,
        slice_sizes=slice_sizes,
        indices_are_sorted=bool(indices_are_sorted),
        unique_indices=bool(unique_indices),
        mode=parsed,
        fill_value=fill_value,
    )
    return gather_p.bind(operand, start_indices, **params)


# --- gather: derivatives and batching --------------------------------------------------------
# A gather is linear in its operand. Its transpose scatters the cotangent back with the inverse
# dimension numbers (a window dim of the output is a window dim of the updates, a collapsed dim
# an inserted one), and its batching rule adds the batch as an operand window dim, an indices
# batch dim, or a pair of batching dims, so the batched gather is again a single gather.


def zeros(shape: tuple, dtype: np.dtype, weak: bool = False):
    """Zeros of `shape` and `dtype` (for a cotangent, or the base of a scatter)."""
    return broadcast_in_dim(scalar_to_array(0, dtype, weak), tuple(shape), ())


def scatter_dnums_for_gather(dn: GatherDimensionNumbers) -> ScatterDimensionNumbers:
    """The dimension numbers of the scatter that writes back what a gather read."""
    return ScatterDimensionNumbers(
        update_window_dims=dn.offset_dims,
        inserted_window_dims=dn.collapsed_slice_dims,
        scatter_dims_to_operand_dims=dn.start_index_map,
        operand_batching_dims=dn.operand_batching_dims,
        scatter_indices_batching_dims=dn.start_indices_batching_dims,
    )


def gather_for_scatter(
    dn: ScatterDimensionNumbers, operand_shape: tuple, updates_shape: tuple
) -> tuple[GatherDimensionNumbers, tuple]:
    """The dimension numbers and slice sizes of the gather that reads, from an array shaped
    like a scatter's operand, one value per element of its updates (at the same positions)."""
    gather_dn = GatherDimensionNumbers(
        offset_dims=dn.update_window_dims,
        collapsed_slice_dims=dn.inserted_window_dims,
        start_index_map=dn.scatter_dims_to_operand_dims,
        operand_batching_dims=dn.operand_batching_dims,
        start_indices_batching_dims=dn.scatter_indices_batching_dims,
    )
    sizes, window_sizes = [], iter(updates_shape[d] for d in dn.update_window_dims)
    for d in range(len(operand_shape)):
        pointwise = d in dn.inserted_window_dims or d in dn.operand_batching_dims
        sizes.append(1 if pointwise else next(window_sizes))
    return gather_dn, tuple(sizes)


def _gather_jvp_rule(primals, tangents, **params):
    operand, indices = primals
    out = gather_p.bind(operand, indices, **params)
    if tangents[0] is None:
        return out, None
    # The fill value is a constant: windows that are filled have a zero tangent.
    fill = 0 if params["mode"] == GatherScatterMode.FILL_OR_DROP else None
    return out, gather_p.bind(tangents[0], indices, **{**params, "fill_value": fill})


def _gather_transpose_rule(
    ct,
    operand,
    indices,
    *,
    dimension_numbers,
    slice_sizes,
    indices_are_sorted,
    unique_indices,
    mode,
    fill_value,
):
    from kiln.primitives.indexing_scatter import scatter_add_p

    if not is_undefined_primal(operand):
        return [None, None]
    base = zeros(operand.shape, operand.dtype, operand.aval.weak_type)
    # The same mode: windows a fill-mode gather filled are dropped, clamped ones clamp again.
    operand_ct = scatter_add_p.bind(
        base,
        indices,
        ct,
        dimension_numbers=scatter_dnums_for_gather(dimension_numbers),
        indices_are_sorted=indices_are_sorted,
        unique_indices=unique_indices,
        mode=mode,
    )
    return [operand_ct, None]


def _shifted(dims: tuple) -> tuple:
    return tuple(d + 1 for d in dims)


def _gather_batching_rule(
    args,
    dims,
    *,
    dimension_numbers,
    slice_sizes,
    indices_are_sorted,
    unique_indices,
    mode,
    fill_value,
):
    (operand, indices), (operand_bdim, indices_bdim) = args, dims
    dn = dimension_numbers
    params = dict(
        indices_are_sorted=indices_are_sorted,
        unique_indices=unique_indices,
        mode=mode,
        fill_value=fill_value,
    )
    if indices_bdim is None:
        # The batch is one more window dim, read whole: it leads the output.
        operand = move_bdim(operand, operand_bdim, 0)
        batched_dn = GatherDimensionNumbers(
            offset_dims=(0,) + _shifted(dn.offset_dims),
            collapsed_slice_dims=_shifted(dn.collapsed_slice_dims),
            start_index_map=_shifted(dn.start_index_map),
            operand_batching_dims=_shifted(dn.operand_batching_dims),
            start_indices_batching_dims=dn.start_indices_batching_dims,
        )
        out = gather_p.bind(
            operand,
            indices,
            dimension_numbers=batched_dn,
            slice_sizes=(operand.shape[0],) + tuple(slice_sizes),
            **params,
        )
        return out, 0
    indices = move_bdim(indices, indices_bdim, 0)
    if operand_bdim is None:
        # The batch is one more index batch dim; indices from different examples may now
        # repeat or be out of order.
        batched_dn = dn._replace(
            offset_dims=_shifted(dn.offset_dims),
            start_indices_batching_dims=_shifted(dn.start_indices_batching_dims),
        )
        params.update(indices_are_sorted=False, unique_indices=False)
        return gather_p.bind(
            operand, indices, dimension_numbers=batched_dn, slice_sizes=slice_sizes, **params
        ), 0
    # Both batched: example b reads only its own operand slab, through a pair of batching dims.
    operand = move_bdim(operand, operand_bdim, 0)
    batched_dn = GatherDimensionNumbers(
        offset_dims=_shifted(dn.offset_dims),
        collapsed_slice_dims=_shifted(dn.collapsed_slice_dims),
        start_index_map=_shifted(dn.start_index_map),
        operand_batching_dims=(0,) + _shifted(dn.operand_batching_dims),
        start_indices_batching_dims=(0,) + _shifted(dn.start_indices_batching_dims),
    )
    if batch_size(args, dims) == 0:  # a batching dim needs a slice of size 1: nothing to read
        shape = _gather_output_shape(operand, indices, batched_dn, (1,) + tuple(slice_sizes))
        return zeros(shape, *dtypes.dtype_and_weak_of(operand)), 0
    return gather_p.bind(
        operand,
        indices,
        dimension_numbers=batched_dn,
        slice_sizes=(1,) + tuple(slice_sizes),
        **params,
    ), 0


gather_p.def_jvp(_gather_jvp_rule)
gather_p.def_transpose(_gather_transpose_rule)
gather_p.def_batching(_gather_batching_rule)

"""Parsing of NumPy indices for kiln.numpy's indexing: one entry per index position (_Entry,
_ParsedIndex, _parse_index) and the integer index arrays that advanced indices gather and
scatter with. Used by indexing.py, which re-exports these names."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln import lax
from kiln.core import dtypes, errors
from kiln.core.array import Array
from kiln.core.trace import Tracer, current_trace_state
from kiln.numpy.indexing_functions import (
    concrete_value,
    normalize_index_host,
    normalize_index_traced,
)


_ADVANCED = ("int", "dynint", "array")


@dataclass
class _Entry:
    """One position of a parsed index.

    kind: 'newaxis', 'ellipsis' (a marker only: the dims it spans become full slices),
    'slice' (static start/step/length), 'int' (static), 'dynint' (a scalar tracer) or 'array'
    (an integer index array, a NumPy array on the host or a kiln value)."""

    kind: str
    dim: int = -1
    value: Any = None
    start: int = 0
    step: int = 1
    length: int = 0


@dataclass
class _ParsedIndex:
    entries: list
    shape: tuple  # the operand shape the entries refer to
    bool_scalar_dims: tuple  # operand dims inserted for scalar-boolean indices

    @property
    def has_arrays(self) -> bool:
        return any(e.kind == "array" for e in self.entries)


# --- parsing ---------------------------------------------------------------------------------


def _index_error_type(item: Any, pos: int) -> TypeError:
    if isinstance(item, str):
        return TypeError(f"kiln does not support string indexing; got idx={item!r}")
    dtype = getattr(item, "dtype", None)
    type_name = np.dtype(dtype).name if dtype is not None else type(item).__name__
    if isinstance(item, float):
        type_name = "float64"
    return TypeError(
        f"Indexer must have integer or boolean type, got indexer with type "
        f"{type_name} at position {pos}, indexer value {item!r}"
    )


def _static_bound(value: Any, item: slice, pos: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, Tracer):
        concrete = value.to_concrete_value()
        if concrete is None:
            raise IndexError(
                f"Slice entries must be static integers. Got {item} at position {pos}. To "
                "index a statically sized window at a traced position use "
                "lax.dynamic_slice / lax.dynamic_update_slice."
            )
        value = concrete
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"slice indices must be integers or None, got {item} at position {pos}"
        ) from None


def _as_index_item(item: Any, pos: int) -> Any:
    """Lists become NumPy index arrays (kiln accepts them here, as NumPy does)."""
    if isinstance(item, list):
        try:
            arr = np.asarray(item)
        except ValueError:
            raise TypeError(f"index list at position {pos} must be rectangular, got {item!r}")
        if arr.size == 0:
            arr = arr.astype(np.int64)
        if arr.dtype.kind not in "iub":
            raise TypeError(
                f"Indexer lists must hold integers or booleans, got {item!r} at position {pos}."
            )
        return arr
    return item


def _dims_consumed(item: Any) -> int:
    """How many operand dims an index item uses up (a boolean mask: one per mask dim)."""
    if item is None or item is Ellipsis or isinstance(item, (bool, np.bool_)):
        return 0
    dtype = getattr(item, "dtype", None)
    if dtype is not None and np.dtype(dtype) == np.bool_:
        return len(item.shape)
    return 1


def _parse_index(shape: tuple, index: Any) -> _ParsedIndex:
    """Normalize `index` against an operand of `shape` into one entry per position."""
    items = list(index) if isinstance(index, tuple) else [index]
    items = [_as_index_item(item, pos) for pos, item in enumerate(items)]
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    # Scalar booleans add a size-1 axis that a [0] (True) or [] (False) index then selects,
    # which is NumPy's meaning; give the operand that axis up front.
    shape = list(shape)
    bool_dims = []
    dim = 0
    for pos, item in enumerate(items):
        if _is_bool_scalar(item):
            value = concrete_value(item)
            if value is None:
                raise errors.NonConcreteBooleanIndexError(item.aval)
            shape.insert(dim, 1)
            bool_dims.append(dim)
            items[pos] = np.arange(1 if bool(value) else 0, dtype=np.int64)
            dim += 1
        elif item is Ellipsis:
            dim += len(shape) - dim - sum(_dims_consumed(i) for i in items[pos + 1 :])
        else:
            dim += _dims_consumed(item)
    ndim = len(shape)
    consumed = sum(_dims_consumed(item) for item in items)
    if consumed > ndim:
        raise IndexError(
            f"Too many indices: array is {ndim - len(bool_dims)}-dimensional, "
            f"but {consumed - len(bool_dims)} were indexed"
        )

    entries: list[_Entry] = []
    dim = 0
    for pos, item in enumerate(items):
        if item is None:
            entries.append(_Entry("newaxis"))
        elif item is Ellipsis:
            entries.append(_Entry("ellipsis"))
            for _ in range(ndim - consumed):
                entries.append(_full_slice(dim, shape[dim]))
                dim += 1
        elif isinstance(item, slice):
            entries.append(_slice_entry(item, dim, shape[dim], pos))
            dim += 1
        else:
            new = _array_like_entries(item, dim, shape, pos)
            entries.extend(new)
            dim += len(new)
    while dim < ndim:
        entries.append(_full_slice(dim, shape[dim]))
        dim += 1
    return _ParsedIndex(entries, tuple(shape), tuple(bool_dims))


def _is_bool_scalar(item: Any) -> bool:
    if isinstance(item, (bool, np.bool_)):
        return True
    dtype = getattr(item, "dtype", None)
    return (
        dtype is not None
        and np.dtype(dtype) == np.bool_
        and tuple(getattr(item, "shape", ())) == ()
    )


def _full_slice(dim: int, size: int) -> _Entry:
    return _Entry("slice", dim, start=0, step=1, length=size)


def _slice_entry(item: slice, dim: int, size: int, pos: int) -> _Entry:
    start = _static_bound(item.start, item, pos)
    stop = _static_bound(item.stop, item, pos)
    step = _static_bound(item.step, item, pos)
    if step == 0:
        raise ValueError("slice step cannot be zero")
    start, stop, step = slice(start, stop, step).indices(size)
    return _Entry("slice", dim, start=start, step=step, length=len(range(start, stop, step)))


def _array_like_entries(item: Any, dim: int, shape: list, pos: int) -> list[_Entry]:
    if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
        return [_Entry("int", dim, int(item))]
    if not isinstance(item, (Array, Tracer, np.ndarray, np.generic)):
        if hasattr(item, "__index__") and not isinstance(item, (float, complex)):
            return [_Entry("int", dim, operator.index(item))]
        raise _index_error_type(item, pos)
    dtype = item.dtype
    if dtype == np.bool_:
        return _mask_entries(item, dim, shape, pos)
    if not dtypes.is_integer(np.dtype(dtype)):
        raise _index_error_type(item, pos)
    if tuple(item.shape) == ():
        value = concrete_value(item)
        if value is None:
            return [_Entry("dynint", dim, item)]
        return [_Entry("int", dim, int(value))]
    if isinstance(item, Tracer):
        value = item.to_concrete_value()
        return [_Entry("array", dim, item if value is None else np.asarray(value))]
    return [_Entry("array", dim, concrete_value(item))]


def _mask_entries(item: Any, dim: int, shape: list, pos: int) -> list[_Entry]:
    value = concrete_value(item)
    if value is None:
        raise errors.NonConcreteBooleanIndexError(item.aval)
    expected = tuple(shape[dim : dim + value.ndim])
    if value.shape != expected:
        raise IndexError(
            f"boolean index did not match shape of indexed array in index {pos}: "
            f"got {value.shape}, expected {expected}"
        )
    return [_Entry("array", dim + k, coords) for k, coords in enumerate(np.nonzero(value))]


# --- index arrays ----------------------------------------------------------------------------


def _normalized_column(entry: _Entry, size: int, dtype: np.dtype) -> Any:
    if entry.kind == "int":
        return normalize_index_host(entry.value, size, dtype)
    if isinstance(entry.value, np.ndarray):
        return normalize_index_host(entry.value, size, dtype)
    return normalize_index_traced(entry.value, size, dtype)


def _stack_columns(columns: list, batch_shape: tuple, dtype: np.dtype) -> Any:
    """Stack index columns into an array of shape batch_shape + (len(columns),).

    Each column is (value, dims): `value`'s dimensions sit at batch positions `dims` (size-1
    dimensions broadcast). Host columns stay on the host, so a fully static index becomes a
    single constant."""
    k = len(columns)
    columns = [(np.asarray(v) if isinstance(v, np.generic) else v, dims) for v, dims in columns]
    # When tracing, a lone scalar index stays a literal (broadcast_in_dim of it), as JAX
    # writes it; everything else static is stacked on the host.
    if all(isinstance(v, np.ndarray) for v, _ in columns) and (
        batch_shape or k > 1 or current_trace_state.trace is None
    ):
        out = np.empty(batch_shape + (k,), dtype=dtype)
        for j, (value, dims) in enumerate(columns):
            expanded = [1] * len(batch_shape)
            for src, dst in enumerate(dims):
                expanded[dst] = value.shape[src]
            out[..., j] = np.broadcast_to(value.reshape(expanded), batch_shape)
        return out
    parts = [
        lax.broadcast_in_dim(value, batch_shape + (1,), tuple(dims)) for value, dims in columns
    ]
    return parts[0] if k == 1 else lax.concatenate(parts, len(batch_shape))


def _broadcast_shapes(shapes: list) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes)) if shapes else ()
    except ValueError:
        raise ValueError(
            "Incompatible shapes for broadcasting: index arrays could not be "
            f"broadcast together with shapes {', '.join(map(str, shapes))}"
        ) from None


def _advanced_group(entries: list, kinds: tuple) -> tuple[list[int], bool]:
    """Positions of the advanced entries, and whether they are adjacent (NumPy then keeps
    their broadcast dims in place; otherwise they go first). Slices, newaxis and Ellipsis
    between advanced indices all break adjacency."""
    positions = [i for i, e in enumerate(entries) if e.kind in kinds]
    adjacent = bool(positions) and positions == list(range(positions[0], positions[-1] + 1))
    return positions, adjacent


def _right_aligned(ndim: int, group_start: int, group_ndim: int) -> tuple:
    return tuple(range(group_start + group_ndim - ndim, group_start + group_ndim))

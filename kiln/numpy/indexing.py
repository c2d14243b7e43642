"""NumPy-style indexing for kiln arrays: `x[index]` (attached as `__getitem__`) and the `.at`
property's functional updates. The index functions (take, nonzero, where, ...) live in
indexing_functions.py and are re-exported here.

An index is parsed once into one entry per position; reads then take the cheapest route that
is exact: static ints and slices become slice/rev/squeeze, scalar tracers a dynamic_slice, and
only integer-array (advanced) indices need a gather. Updates always lower to a scatter, which
drops out-of-bounds writes. Reads clamp out-of-bounds indices, as JAX does.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln import lax
from kiln.core import dtypes, errors
from kiln.core.array import Array
from kiln.core.trace import Tracer, current_trace_state
from kiln.numpy.indexing_functions import *  # noqa: F401,F403
from kiln.numpy.indexing_functions import __all__ as _functions_all
from kiln.numpy.indexing_functions import (
    concrete_value,
    index_dtype_for,
    normalize_index_host,
    normalize_index_traced,
)
from kiln.primitives.indexing_gather import GatherScatterMode
from kiln.primitives.shape import result_from_view

__all__ = ["_getitem", "_rewriting_take", "_IndexUpdateHelper", "_IndexUpdateRef", *_functions_all]

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


# --- reads -----------------------------------------------------------------------------------


def _getitem(x: Any, index: Any) -> Any:
    """`x[index]` with NumPy semantics; out-of-bounds indices clamp (reads never fail)."""
    if type(x) is Array and current_trace_state.trace is None:
        out = _eager_getitem(x, index)
        if out is not None:
            return out
    return _rewriting_take(x, index)


def _eager_getitem(x: Array, index: Any) -> Array | None:
    """The eager fast path: index the NumPy buffer directly when every item is a Python int,
    a slice of Python ints, None, Ellipsis or a concrete integer array. Clamping the integers
    first gives exactly what the primitives compute (tests check both against NumPy). Returns
    None for anything else (masks, tracers, errors), which the general path handles."""
    items = index if type(index) is tuple else (index,)
    value = x._value
    shape = value.shape
    consumed = 0
    for item in items:
        if item is not None and item is not Ellipsis:
            consumed += 1
    if consumed > len(shape):
        return None
    out, dim, seen_ellipsis, advanced = [], 0, False, False
    for pos, item in enumerate(items):
        kind = type(item)
        if kind is np.ndarray or kind is Array:
            array = item if kind is np.ndarray else item._value
            if array.dtype.kind not in "iu" or array.dtype == np.uint64:
                return None
            if array.ndim == 0:  # a scalar index: basic indexing, like an int
                item, kind = int(array), int
        elif isinstance(item, np.integer):
            item, kind = int(item), int
        if kind is int:
            size = shape[dim]
            if size == 0:
                return None
            item = item + size if item < 0 else item
            out.append(0 if item < 0 else size - 1 if item >= size else item)
        elif kind is slice:
            if (
                not all(type(b) is int or b is None for b in (item.start, item.stop, item.step))
                or item.step == 0
            ):
                return None
            out.append(item)
        elif item is None:
            out.append(None)
            continue
        elif item is Ellipsis:
            if seen_ellipsis:
                return None
            seen_ellipsis = True
            out.append(Ellipsis)
            dim = len(shape) - sum(
                1 for i in items[pos + 1 :] if i is not None and i is not Ellipsis
            )
            continue
        elif kind is np.ndarray or kind is Array:
            size = shape[dim]
            if size == 0:
                return None
            array = array.astype(np.int64)
            out.append(np.clip(np.where(array < 0, array + size, array), 0, size - 1))
            advanced = True
        else:
            return None
        dim += 1
    try:
        view = value[tuple(out)]
    except (IndexError, ValueError):
        return None
    if not isinstance(view, np.ndarray):  # a NumPy scalar: make it a fresh 0-d array
        view = np.asarray(view)
    elif advanced:  # fancy indexing already copied; compiled code wants row-major buffers
        view = view if view.flags.c_contiguous else np.array(view, order="C")
    else:
        view = result_from_view(view, value)
    return Array._wrap(view, x.weak_type)


def _check_nonempty_axis(entry: _Entry, size: int) -> None:
    if size == 0:
        raise IndexError(
            f"index {entry.value if entry.kind == 'int' else '(traced)'} is out "
            f"of bounds for axis {entry.dim} with size 0"
        )


def _static_slice(x: Any, entries: list, shape: tuple, ints_too: bool) -> Any:
    """Apply every slice entry (and, when `ints_too`, every static int as a clamped size-1
    slice) with one lax.slice and one lax.rev."""
    starts, limits, strides, reversed_dims = [], [], [], []
    for e in entries:
        if e.kind == "slice":
            if e.length == 0:
                start, limit, stride = 0, 0, 1
            elif e.step > 0:
                start, stride = e.start, e.step
                limit = start + (e.length - 1) * stride + 1
            else:  # slice the same elements in ascending order, then reverse them
                stride = -e.step
                start = e.start + (e.length - 1) * e.step
                limit = e.start + 1
                if e.length > 1:
                    reversed_dims.append(e.dim)
        elif e.kind == "int" and ints_too:
            _check_nonempty_axis(e, shape[e.dim])
            value = e.value + shape[e.dim] if e.value < 0 else e.value
            start = min(max(value, 0), shape[e.dim] - 1)
            limit, stride = start + 1, 1
        elif e.kind in _ADVANCED:
            start, limit, stride = 0, shape[e.dim], 1
        else:
            continue
        starts.append(start)
        limits.append(limit)
        strides.append(stride)
    x = lax.slice(x, starts, limits, strides)
    if reversed_dims:
        x = lax.rev(x, reversed_dims)
    return x


def _insert_newaxes(x: Any, layout: list) -> Any:
    positions = [i for i, item in enumerate(layout) if item == "newaxis"]
    return lax.expand_dims(x, positions) if positions else x


def _output_layout(entries: list, kinds: tuple, group_ndim: int) -> list:
    """The result's dimensions in order: 'newaxis', ('entry', e) for a slice, or ('group', j)
    for the j-th broadcast dim of the advanced group."""
    positions, adjacent = _advanced_group(entries, kinds)
    group = [("group", j) for j in range(group_ndim)]
    layout = [] if adjacent or not positions else list(group)
    for i, e in enumerate(entries):
        if e.kind in kinds:
            if adjacent and i == positions[0]:
                layout.extend(group)
        elif e.kind == "slice":
            layout.append(("entry", e))
        elif e.kind == "newaxis":
            layout.append("newaxis")
    return layout


def _rewriting_take(
    x: Any,
    index: Any,
    *,
    mode=None,
    fill_value=None,
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
) -> Any:
    """Read `x[index]`. With mode None (or 'promise_in_bounds') static parts lower to
    slice/rev/squeeze and scalar tracers to dynamic_slice; otherwise, and for index arrays, a
    gather with that mode."""
    parsed = _parse_index(tuple(x.shape), index)
    if parsed.bool_scalar_dims:
        x = lax.reshape(x, parsed.shape)
    entries, shape = parsed.entries, parsed.shape
    parsed_mode = None if mode is None else GatherScatterMode.from_any(mode)
    cheap = parsed_mode in (None, GatherScatterMode.PROMISE_IN_BOUNDS) and not parsed.has_arrays

    if cheap:
        x = _static_slice(x, entries, shape, ints_too=True)
        dynamic = [e for e in entries if e.kind == "dynint"]
        if dynamic:
            for e in dynamic:
                _check_nonempty_axis(e, shape[e.dim])
            current = _shape_of(x)
            starts = [0] * len(current)
            sizes = list(current)
            allow = [False] * len(current)
            for e in dynamic:
                starts[e.dim], sizes[e.dim], allow[e.dim] = e.value, 1, True
            x = lax.dynamic_slice(x, starts, sizes, allow_negative_indices=allow)
        squeezed = [e.dim for e in entries if e.kind in ("int", "dynint")]
        if squeezed:
            x = lax.squeeze(x, squeezed)
        return _insert_newaxes(x, _output_layout(entries, (), 0))

    # Gather route: slices first (cheap, always in bounds), then one gather for the rest.
    x = _static_slice(x, entries, shape, ints_too=False)
    sliced_shape = _shape_of(x)
    advanced = [e for e in entries if e.kind in _ADVANCED]
    arrays = [e for e in advanced if e.kind == "array"]
    group_shape = _broadcast_shapes([tuple(e.value.shape) for e in arrays])
    layout = _output_layout(entries, _ADVANCED, len(group_shape))
    out_shape = tuple(
        1
        if item == "newaxis"
        else group_shape[item[1]]
        if item[0] == "group"
        else sliced_shape[item[1].dim]
        for item in layout
    )
    collapsed = tuple(e.dim for e in advanced)
    for e in advanced:
        if sliced_shape[e.dim] == 0:
            if e.kind == "array" and 0 in group_shape:
                return lax.full(out_shape, 0, x.dtype)  # empty result: nothing to read
            raise IndexError(f"index is out of bounds for axis {e.dim} with size 0")
    dtype = index_dtype_for(shape)
    columns = [
        (
            _normalized_column(e, sliced_shape[e.dim], dtype),
            _right_aligned(np.ndim(e.value) if e.kind == "array" else 0, 0, len(group_shape)),
        )
        for e in advanced
    ]
    indices = _stack_columns(columns, group_shape, dtype)
    kept = [item for item in layout if item != "newaxis"]
    offset_dims = tuple(i for i, item in enumerate(kept) if item[0] == "entry")
    slice_sizes = tuple(1 if d in collapsed else n for d, n in enumerate(sliced_shape))
    static_only = not arrays
    dnums = lax.GatherDimensionNumbers(
        offset_dims=offset_dims, collapsed_slice_dims=collapsed, start_index_map=collapsed
    )
    out = lax.gather(
        x,
        indices,
        dnums,
        slice_sizes,
        indices_are_sorted=indices_are_sorted or static_only,
        unique_indices=unique_indices or static_only,
        mode=parsed_mode or GatherScatterMode.PROMISE_IN_BOUNDS,
        fill_value=fill_value,
    )
    return _insert_newaxes(out, layout)


def _shape_of(x: Any) -> tuple:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


# --- updates ---------------------------------------------------------------------------------

_SCATTERS = {
    "set": lax.scatter,
    "add": lax.scatter_add,
    "mul": lax.scatter_mul,
    "min": lax.scatter_min,
    "max": lax.scatter_max,
}


def _values_like(values: Any, x: Any) -> Any:
    """Update values as x's dtype and weak type (Python and NumPy values convert on the host,
    so they enter a jaxpr as constants of the right type)."""
    dtype, weak = x.dtype, x.aval.weak_type
    if isinstance(values, (list, tuple)):
        from kiln.numpy.creation import asarray

        values = asarray(values)
    elif type(values) is int:
        dtypes.python_int_dtype(values)  # a weak int: it must fit the default integer type
    if isinstance(values, (Array, Tracer)) and (values.dtype, values.aval.weak_type) == (
        dtype,
        weak,
    ):
        return values
    return lax.convert_element_type(values, dtype, weak)


def _broadcast_values(values: Any, target: tuple) -> Any:
    shape = _shape_of(values)
    if shape == target:
        return values
    if len(shape) > len(target) or any(s not in (1, t) for s, t in zip(shape[::-1], target[::-1])):
        raise ValueError(
            f"Incompatible shapes for broadcasting: cannot broadcast update values "
            f"of shape {shape} to the indexed shape {target}."
        )
    lead = len(target) - len(shape)
    return lax.broadcast_in_dim(values, target, tuple(range(lead, len(target))))


def _scatter_update(
    x: Any,
    index: Any,
    values: Any,
    kind: str,
    *,
    mode=None,
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
) -> Any:
    """The functional form of `x[index] (op)= values`: a single scatter."""
    original_shape = tuple(x.shape)
    parsed = _parse_index(original_shape, index)
    if parsed.bool_scalar_dims:
        x = lax.reshape(x, parsed.shape)
    entries, shape = parsed.entries, parsed.shape
    has_arrays = parsed.has_arrays
    kinds = _ADVANCED if has_arrays else ()
    for e in entries:
        if e.kind == "int" and shape[e.dim] == 0:
            _check_nonempty_axis(e, 0)
    arrays = [e for e in entries if e.kind == "array"]
    group_shape = _broadcast_shapes([tuple(e.value.shape) for e in arrays])
    layout = _output_layout(entries, kinds, len(group_shape))
    dtype = index_dtype_for(shape)

    # Each slice is either a window (step 1) or, when strided, a batch dim of its own.
    def is_window(e: _Entry) -> bool:
        return e.kind == "slice" and (e.step == 1 or e.length <= 1)

    kept = [item for item in layout if item != "newaxis"]
    batch_items = [item for item in kept if item[0] == "group" or not is_window(item[1])]
    batch_shape = tuple(
        group_shape[item[1]] if item[0] == "group" else item[1].length for item in batch_items
    )
    group_start = next((i for i, item in enumerate(batch_items) if item[0] == "group"), 0)
    update_window_dims = tuple(
        i for i, item in enumerate(kept) if item[0] == "entry" and is_window(item[1])
    )

    columns, index_map, inserted = [], [], []
    sorted_ok = True
    for e in entries:
        if e.kind == "slice":
            if is_window(e):
                if e.start == 0 and e.length == shape[e.dim]:
                    continue  # the whole axis: a window starting at 0 needs no index
                start = e.start if e.length else 0
                columns.append((np.asarray(start, dtype=dtype), ()))
            else:
                position = next(
                    i for i, item in enumerate(batch_items) if item[0] == "entry" and item[1] is e
                )
                coords = e.start + e.step * np.arange(e.length, dtype=np.int64)
                columns.append((coords.astype(dtype), (position,)))
                inserted.append(e.dim)
                sorted_ok = sorted_ok and e.step > 0
        elif e.kind in _ADVANCED:
            value_ndim = np.ndim(e.value) if e.kind == "array" else 0
            dims = _right_aligned(value_ndim, group_start, len(group_shape)) if has_arrays else ()
            columns.append((_normalized_column(e, shape[e.dim], dtype), dims))
            inserted.append(e.dim)
        else:
            continue
        index_map.append(e.dim)
    indices = (
        _stack_columns(columns, batch_shape, dtype)
        if columns
        else np.zeros(batch_shape + (0,), dtype=dtype)
    )

    values = _values_like(values, x)
    indexed_shape = tuple(
        1 if item == "newaxis" else group_shape[item[1]] if item[0] == "group" else item[1].length
        for item in layout
    )
    values = _broadcast_values(values, indexed_shape)
    update_shape = tuple(n for n, item in zip(indexed_shape, layout) if item != "newaxis")
    if update_shape != indexed_shape:
        values = lax.reshape(values, update_shape)
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=update_window_dims,
        inserted_window_dims=tuple(sorted(inserted)),
        scatter_dims_to_operand_dims=tuple(index_map),
    )
    out = _SCATTERS[kind](
        x,
        indices,
        values,
        dnums,
        indices_are_sorted=indices_are_sorted or (not has_arrays and sorted_ok),
        unique_indices=unique_indices or not has_arrays,
        mode=mode,
    )
    if parsed.bool_scalar_dims:
        out = lax.reshape(out, original_shape)
    return out


class _IndexUpdateHelper:
    """The `.at` property: `x.at[index]` names the elements a functional update changes."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = array

    def __getitem__(self, index: Any) -> "_IndexUpdateRef":
        return _IndexUpdateRef(self.array, index)

    def __repr__(self) -> str:
        return f"_IndexUpdateHelper({self.array!r})"


class _IndexUpdateRef:
    """`x.at[index]`: each method returns a new array; `x` itself never changes.

    Out-of-bounds updates are dropped (mode None/'drop'/'fill') or clamped (mode 'clip');
    negative indices count from the end. Values broadcast to the indexed shape and are cast
    to x's dtype."""

    __slots__ = ("array", "index")

    def __init__(self, array: Any, index: Any):
        self.array = array
        self.index = index

    def __repr__(self) -> str:
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(
        self,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode=None,
        fill_value=None,
    ) -> Any:
        """`x[index]`, with a choice of out-of-bounds `mode` ('clip', 'fill' with
        `fill_value`, or None to clamp as plain indexing does)."""
        return _rewriting_take(
            self.array,
            self.index,
            mode=mode,
            fill_value=fill_value,
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices,
        )

    def _update(
        self, kind: str, values: Any, indices_are_sorted: bool, unique_indices: bool, mode
    ) -> Any:
        return _scatter_update(
            self.array,
            self.index,
            values,
            kind,
            mode=mode,
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices,
        )

    def set(
        self,
        values: Any,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode=None,
    ) -> Any:
        """`x[index] = values` (for repeated indices one of the values wins)."""
        return self._update("set", values, indices_are_sorted, unique_indices, mode)

    def add(
        self,
        values: Any,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode=None,
    ) -> Any:
        """`x[index] += values`; repeated indices accumulate."""
        return self._update("add", values, indices_are_sorted, unique_indices, mode)

    def multiply(
        self,
        values: Any,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode=None,
    ) -> Any:
        """`x[index] *= values`; repeated indices accumulate."""
        return self._update("mul", values, indices_are_sorted, unique_indices, mode)

    mul = multiply

    def min(
        self,
        values: Any,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode=None,
    ) -> Any:
        """`x[index] = minimum(x[index], values)`."""
        return self._update("min", values, indices_are_sorted, unique_indices, mode)

    def max(
        self,
        values: Any,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode=None,
    ) -> Any:
        """`x[index] = maximum(x[index], values)`."""
        return self._update("max", values, indices_are_sorted, unique_indices, mode)

    def _ones_times(self, values: Any, indices_are_sorted: bool, unique_indices: bool, mode) -> Any:
        ones = lax.full_like(self.array, 1)
        return _scatter_update(
            ones,
            self.index,
            values,
            "mul",
            mode=mode,
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices,
        )

    def divide(
        self,
        values: Any,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode=None,
    ) -> Any:
        """`x[index] /= values` (true division, as kiln.numpy.divide: integer x gives a
        float result)."""
        import kiln.numpy as jnp

        return jnp.divide(
            self.array, self._ones_times(values, indices_are_sorted, unique_indices, mode)
        )

    def power(
        self,
        values: Any,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode=None,
    ) -> Any:
        """`x[index] **= values`."""
        import kiln.numpy as jnp

        return jnp.power(
            self.array, self._ones_times(values, indices_are_sorted, unique_indices, mode)
        )

    def apply(
        self, func, *, indices_are_sorted: bool = False, unique_indices: bool = False, mode=None
    ) -> Any:
        """`x[index] = func(x[index])`. `func` is applied once per selected element, also
        where an index repeats."""
        current = _rewriting_take(
            self.array,
            self.index,
            mode="clip",
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices,
        )
        return self._update("set", func(current), indices_are_sorted, unique_indices, mode)

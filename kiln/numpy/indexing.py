"""NumPy-style indexing for kiln arrays: `x[index]` (attached as `__getitem__`) and the `.at`
property's functional updates. The index functions (take, nonzero, where, ...) live in
indexing_functions.py and are re-exported here, as are the parsing helpers of indexing_parse.py.

An index is parsed once into one entry per position; reads then take the cheapest route that
is exact: static ints and slices become slice/rev/squeeze, scalar tracers a dynamic_slice, and
only integer-array (advanced) indices need a gather. Updates always lower to a scatter, which
drops out-of-bounds writes. Reads clamp out-of-bounds indices, as JAX does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.trace import Tracer, current_trace_state
from kiln.numpy.indexing_functions import *  # noqa: F401,F403
from kiln.numpy.indexing_functions import __all__ as _functions_all
from kiln.numpy.indexing_functions import index_dtype_for
from kiln.numpy.indexing_parse import (  # noqa: F401  (re-exported: moved to indexing_parse.py)
    _ADVANCED,
    _Entry,
    _ParsedIndex,
    _index_error_type,
    _static_bound,
    _as_index_item,
    _dims_consumed,
    _parse_index,
    _is_bool_scalar,
    _full_slice,
    _slice_entry,
    _array_like_entries,
    _mask_entries,
    _normalized_column,
    _stack_columns,
    _broadcast_shapes,
    _advanced_group,
    _right_aligned,
)
from kiln.primitives.indexing_gather import GatherScatterMode
from kiln.primitives.shape import result_from_view

__all__ = ["_getitem", "_rewriting_take", "_IndexUpdateHelper", "_IndexUpdateRef", *_functions_all]


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

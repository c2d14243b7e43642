"""kiln.numpy's index functions: take / take_along_axis / put, nonzero and its relatives
(argwhere, flatnonzero, compress, extract, one-argument where), where, choose,
unravel_index / ravel_multi_index and the index constructors (diag, tril, triu, ix_).

Functions whose result shape depends on values (nonzero & co) need concrete inputs, unless a
static `size=` is given: then they are built from cumsum and scatter and trace fine.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np

from kiln import lax
from kiln.core import dtypes, errors
from kiln.core.array import Array
from kiln.core.shapes import canonicalize_shape
from kiln.core.trace import Tracer
from kiln.numpy.util import check_arraylike, normalize_axis, promote_dtypes, to_kiln
from kiln.primitives.indexing_gather import GatherScatterMode

__all__ = [
    "take",
    "take_along_axis",
    "put",
    "nonzero",
    "argwhere",
    "flatnonzero",
    "compress",
    "extract",
    "choose",
    "where",
    "unravel_index",
    "ravel_multi_index",
    "diag_indices",
    "diag_indices_from",
    "tril_indices",
    "triu_indices",
    "tril_indices_from",
    "triu_indices_from",
    "ix_",
]


# --- helpers shared with indexing.py -----------------------------------------------------------


def concrete_value(x: Any) -> np.ndarray | None:
    """The NumPy value of `x` if it is known now (not a traced value), else None."""
    if isinstance(x, Array):
        return x._value
    if isinstance(x, Tracer):
        value = x.to_concrete_value()
        return None if value is None else np.asarray(value)
    return np.asarray(x)


def index_dtype_for(shape: Sequence[int]) -> np.dtype:
    """int32 unless a dimension needs 64-bit indices (and x64 is on)."""
    big = any(d >= 2**31 - 1 for d in shape)
    return dtypes.int64 if big and dtypes.default_int() == dtypes.int64 else dtypes.int32


def normalize_index_host(value: Any, size: int, dtype: np.dtype, wrap: bool = True) -> np.ndarray:
    """Negative indices count from the end (when `wrap`); the result is clipped to [-1, size],
    which keeps every out-of-bounds index out of bounds (scatters still drop it, fills still
    fill) while making it representable in `dtype`."""
    value = np.asarray(value)
    if value.dtype == np.uint64:
        value = np.minimum(value, np.uint64(2**62))
    value = value.astype(np.int64)
    if wrap:
        value = np.where(value < 0, value + size, value)
    return np.clip(value, -1, size).astype(dtype)


def normalize_index_traced(value: Any, size: int, dtype: np.dtype, wrap: bool = True) -> Any:
    """The traced counterpart of normalize_index_host, with lax ops."""
    source = value.dtype
    if source != dtype:
        value = lax.convert_element_type(value, dtype)
    if wrap and not dtypes.is_unsigned(source):
        value = lax.select_n(lax.lt(value, 0), value, lax.add(value, size))
    return value


def normalize_index(value: Any, size: int, dtype: np.dtype, wrap: bool = True) -> Any:
    host = None if isinstance(value, Tracer) else concrete_value(value)
    if host is not None:
        return normalize_index_host(host, size, dtype, wrap)
    return normalize_index_traced(value, size, dtype, wrap)


def _int_array(values: Any) -> Array:
    return Array._wrap(np.asarray(values, dtype=dtypes.default_int()))


def _ravel(x: Any) -> Any:
    return lax.reshape(x, (math.prod(x.shape),))


def _check_integer(name: str, x: Any, what: str = "indices") -> None:
    dtype = dtypes.dtype_and_weak_of(x)[0]
    if not dtypes.is_integer(dtype):
        raise TypeError(f"{name} {what} must be of integer type, got {dtype.name}.")


def _floor_mod(value: Any, size: int) -> Any:
    """value mod size with a non-negative result (NumPy's %), for the 'wrap' modes."""
    host = None if isinstance(value, Tracer) else concrete_value(value)
    if host is not None:
        return np.mod(host.astype(np.int64), size)
    rem = lax.rem(value, size)
    if dtypes.is_unsigned(value.dtype):
        return rem
    return lax.select_n(lax.lt(rem, 0), rem, lax.add(rem, size))


def _size_argument(size: Any, name: str) -> int:
    return canonicalize_shape((size,), context=f"{name} size: ")[0]


def _concretization_error(x: Any, message: str) -> Exception:
    if isinstance(x, Tracer):
        return errors.ConcretizationTypeError(x, message + " ")
    return ValueError(message)


def _gather_along_axis(
    a: Any,
    indices: Any,
    axis: int,
    mode: GatherScatterMode,
    fill_value: Any,
    unique_indices: bool,
    indices_are_sorted: bool,
) -> Any:
    """a[..., indices, ...] along `axis` with a gather; indices already normalized."""
    index_shape = (
        tuple(np.shape(indices)) if isinstance(indices, np.ndarray) else tuple(indices.shape)
    )
    if isinstance(indices, np.ndarray):
        indices = indices.reshape(index_shape + (1,))
    else:
        indices = lax.expand_dims(indices, (len(index_shape),))
    n_index = len(index_shape)
    offset_dims = tuple(range(axis)) + tuple(range(axis + n_index, a.ndim - 1 + n_index))
    dnums = lax.GatherDimensionNumbers(
        offset_dims=offset_dims, collapsed_slice_dims=(axis,), start_index_map=(axis,)
    )
    slice_sizes = tuple(1 if d == axis else n for d, n in enumerate(a.shape))
    return lax.gather(
        a,
        indices,
        dnums,
        slice_sizes,
        mode=mode,
        fill_value=fill_value,
        unique_indices=unique_indices,
        indices_are_sorted=indices_are_sorted,
    )


def _empty_axis_result(name: str, out_shape: tuple, dtype: np.dtype, index_shape: tuple) -> Any:
    """The result of taking from an empty axis: empty when there are no indices; any index at
    all is out of bounds (whatever the other axes), which JAX reports even in 'fill' mode."""
    if math.prod(index_shape) == 0:
        return lax.full(out_shape, 0, dtype)
    raise IndexError(f"Cannot do a non-empty jnp.{name}() from an empty axis.")


# --- take / take_along_axis / put ---------------------------------------------------------------


def take(
    a: Any,
    indices: Any,
    axis: int | None = None,
    out: None = None,
    mode: str | None = None,
    unique_indices: bool = False,
    indices_are_sorted: bool = False,
    fill_value: Any = None,
) -> Any:
    """Elements of `a` at `indices` along `axis` (of the flattened array when axis is None).

    mode None/'fill': negative indices count from the end and out-of-bounds ones give
    `fill_value` (NaN for inexact types, the extreme value for integers); 'clip' clamps
    (negative indices clamp to 0); 'wrap' takes indices modulo the axis length."""
    check_arraylike("take", a, indices)
    if out is not None:
        raise NotImplementedError("The 'out' argument to take is not supported.")
    _check_integer("take", indices)
    a = to_kiln(a)
    if axis is None:
        a, axis = _ravel(a), 0
    else:
        axis = normalize_axis(axis, a.ndim)
    size = a.shape[axis]
    index_shape = (
        tuple(np.shape(indices)) if not hasattr(indices, "shape") else tuple(indices.shape)
    )
    dtype = index_dtype_for(a.shape)
    if mode is None or mode == "fill":
        gather_mode = GatherScatterMode.FILL_OR_DROP
        indices = normalize_index(indices, size, dtype)
    elif mode == "clip":
        gather_mode = GatherScatterMode.CLIP
        indices = normalize_index(indices, size, dtype, wrap=False)
    elif mode == "wrap":
        gather_mode = GatherScatterMode.CLIP
        indices = normalize_index(_floor_mod(indices, max(size, 1)), size, dtype, wrap=False)
    elif mode == "raise":
        raise NotImplementedError(
            "The 'raise' mode to take is not supported; use 'fill', 'clip' or 'wrap'."
        )
    else:
        raise ValueError(f"Invalid mode {mode!r} for take; use 'fill', 'clip' or 'wrap'.")
    if size == 0:
        out_shape = a.shape[:axis] + index_shape + a.shape[axis + 1 :]
        return _empty_axis_result("take", out_shape, a.dtype, index_shape)
    return _gather_along_axis(
        a, indices, axis, gather_mode, fill_value, unique_indices, indices_are_sorted
    )


def _broadcast_full(x: Any, shape: tuple) -> Any:
    """Broadcast `x` (of the same rank, size-1 dims stretching) to `shape`."""
    if isinstance(x, np.ndarray):
        return np.broadcast_to(x, shape)
    if tuple(x.shape) == shape:
        return x
    return lax.broadcast_in_dim(x, shape, tuple(range(len(shape))))


def take_along_axis(
    arr: Any,
    indices: Any,
    axis: int | None = -1,
    mode: "str | GatherScatterMode | None" = None,
    fill_value: Any = None,
) -> Any:
    """`arr` indexed by `indices` along `axis`, matching the other dims position by position
    (NumPy's take_along_axis, with broadcasting of the other dims). Out-of-bounds indices
    give `fill_value` unless mode='clip'; negative indices count from the end."""
    check_arraylike("take_along_axis", arr, indices)
    _check_integer("take_along_axis", indices)
    arr = to_kiln(arr)
    host = None if isinstance(indices, Tracer) else concrete_value(indices)
    index_shape = tuple(indices.shape) if hasattr(indices, "shape") else np.shape(indices)
    if axis is None:
        if len(index_shape) != 1:
            raise ValueError(
                f"take_along_axis indices must be 1D if axis=None, got shape {index_shape}"
            )
        arr, axis = _ravel(arr), 0
    if len(index_shape) != arr.ndim:
        raise ValueError(
            f"indices and arr must have the same number of dimensions; "
            f"{len(index_shape)} vs. {arr.ndim}"
        )
    axis = normalize_axis(axis, arr.ndim)
    out_shape = []
    for d in range(arr.ndim):
        if d == axis:
            out_shape.append(index_shape[d])
            continue
        try:
            out_shape.append(np.broadcast_shapes((arr.shape[d],), (index_shape[d],))[0])
        except ValueError:
            raise ValueError(
                f"take_along_axis: arr shape {arr.shape} and indices shape "
                f"{index_shape} do not broadcast outside axis {axis}."
            ) from None
    out_shape = tuple(out_shape)
    parsed = (
        GatherScatterMode.FILL_OR_DROP
        if mode is None or mode == "fill"
        else GatherScatterMode.from_any(mode)
    )
    size = arr.shape[axis]
    if math.prod(out_shape) == 0:
        return lax.full(out_shape, 0, arr.dtype)
    if size == 0:
        return _empty_axis_result("take_along_axis", out_shape, arr.dtype, index_shape)
    dtype = index_dtype_for(arr.shape)
    indices = normalize_index(host if host is not None else indices, size, dtype)
    indices = _broadcast_full(indices, out_shape)
    arr = _broadcast_full(arr, out_shape[:axis] + (size,) + out_shape[axis + 1 :])
    indices = (
        indices.reshape(out_shape + (1,))
        if isinstance(indices, np.ndarray)
        else lax.expand_dims(indices, (len(out_shape),))
    )
    # The other dims are batch dims of both operand and indices: window b reads slab b.
    batch = tuple(d for d in range(arr.ndim) if d != axis)
    dnums = lax.GatherDimensionNumbers(
        offset_dims=(),
        collapsed_slice_dims=(axis,),
        start_index_map=(axis,),
        operand_batching_dims=batch,
        start_indices_batching_dims=batch,
    )
    return lax.gather(arr, indices, dnums, (1,) * arr.ndim, mode=parsed, fill_value=fill_value)


def put(a: Any, ind: Any, v: Any, mode: str | None = None, *, inplace: bool = True) -> Any:
    """A copy of `a` with the flat positions `ind` set to `v` (repeated cyclically).

    kiln arrays are immutable, so `inplace=False` is required. mode None/'clip' clamps
    out-of-bounds indices, 'wrap' wraps them, 'fill'/'drop' drops them."""
    if inplace:
        raise ValueError(
            "kiln.numpy.put cannot modify arrays in-place, because kiln arrays "
            "are immutable. Pass inplace=False to instead return an updated "
            "array."
        )
    check_arraylike("put", a, ind, v)
    _check_integer("put", ind)
    a = to_kiln(a)
    flat = _ravel(a)
    ind = to_kiln(ind)
    ind = _ravel(ind) if ind.ndim != 1 else ind
    values = _ravel(to_kiln(v))
    count = ind.shape[0]
    if values.shape[0] == 0 or count == 0:
        return a
    if values.shape[0] != count:
        values = take(values, np.arange(count) % values.shape[0])
    if mode is None or mode == "clip":
        scatter_mode = "clip"
    elif mode == "wrap":
        ind, scatter_mode = _floor_mod(ind, max(flat.shape[0], 1)), "clip"
        ind = to_kiln(ind)
    elif mode in ("fill", "drop"):
        scatter_mode = "drop"
    elif mode == "raise":
        raise NotImplementedError(
            "The 'raise' mode to put is not supported; use 'clip', 'wrap' or 'fill'."
        )
    else:
        raise ValueError(f"Invalid mode {mode!r} for put; use 'clip', 'wrap' or 'fill'.")
    if scatter_mode == "clip":
        # Clamp negatives too (NumPy's 'clip' does), rather than counting from the end.
        ind = lax.max(lax.min(ind, flat.shape[0] - 1), 0)
    out = flat.at[ind].set(values, mode=scatter_mode)
    return lax.reshape(out, a.shape)


# --- nonzero and relatives -----------------------------------------------------------------


def _fill_values(fill_value: Any, ndim: int, name: str) -> list:
    if fill_value is None:
        return [0] * ndim
    if isinstance(fill_value, (tuple, list)):
        if len(fill_value) != ndim:
            raise ValueError(
                f"{name} fill_value must be a scalar or a tuple of length "
                f"{ndim}; got {fill_value!r}"
            )
        return list(fill_value)
    return [fill_value] * ndim


def nonzero(a: Any, *, size: int | None = None, fill_value: Any = None) -> tuple:
    """The indices of the nonzero elements of `a`, one int array per dimension.

    Needs a concrete `a` unless `size` is given; with `size` the result is truncated or
    padded with `fill_value` (default 0; a tuple gives one per dimension)."""
    check_arraylike("nonzero", a)
    shape = tuple(np.shape(a)) if not hasattr(a, "shape") else tuple(a.shape)
    if not shape:
        raise ValueError(
            "Calling nonzero on 0d arrays is not allowed. Use "
            "kiln.numpy.atleast_1d(scalar).nonzero() instead."
        )
    host = None if isinstance(a, Tracer) else concrete_value(a)
    fills = _fill_values(fill_value, len(shape), "nonzero")
    if size is not None:
        size = _size_argument(size, "nonzero")
    host_fills = [None if isinstance(f, Tracer) else concrete_value(f) for f in fills]
    if host is not None and all(f is not None for f in host_fills):
        coords = np.nonzero(host)
        if size is not None:
            coords = [
                np.concatenate([c[:size], np.full(max(size - len(c), 0), np.asarray(f).item())])
                for c, f in zip(coords, host_fills)
            ]
        return tuple(_int_array(c) for c in coords)
    if size is None:
        raise _concretization_error(
            a,
            "The size argument of kiln.numpy.nonzero must be statically specified to use "
            "it within transformations.",
        )
    return _nonzero_with_size(to_kiln(a), shape, size, fills)


def _nonzero_with_size(a: Any, shape: tuple, size: int, fills: list) -> tuple:
    """Traceable nonzero: element i goes to output slot (count of nonzeros before it); slots
    past `size`, and zero elements (sent to slot `size`), fall outside and are dropped."""
    dtype = dtypes.default_int()
    total = math.prod(shape)
    mask = lax.ne(_ravel(a), lax.full((), 0, a.dtype))
    counts = (
        lax.cumsum(lax.convert_element_type(mask, dtype), axis=0)
        if total
        else lax.full((0,), 0, dtype)
    )
    slots = lax.select_n(mask, lax.full((total,), size, dtype), lax.sub(counts, 1))
    slots = lax.expand_dims(slots, (1,))
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    coords = np.unravel_index(np.arange(total), shape)
    out = []
    for coord, fill in zip(coords, fills):
        base = lax.full(
            (size,),
            lax.convert_element_type(fill, dtype) if isinstance(fill, (Array, Tracer)) else fill,
            dtype,
        )
        out.append(lax.scatter(base, slots, np.asarray(coord, dtype=dtype), dnums, mode="drop"))
    return tuple(out)


def flatnonzero(a: Any, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The indices of the nonzero elements of the flattened `a`."""
    check_arraylike("flatnonzero", a)
    return nonzero(_ravel(to_kiln(a)), size=size, fill_value=fill_value)[0]


def argwhere(a: Any, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The indices of the nonzero elements, as an array of shape (count, a.ndim)."""
    check_arraylike("argwhere", a)
    a = to_kiln(a)
    if a.ndim == 0:
        (column,) = nonzero(lax.reshape(a, (1,)), size=size, fill_value=fill_value)
        return lax.full((column.shape[0], 0), 0, column.dtype)
    columns = nonzero(a, size=size, fill_value=fill_value)
    columns = [lax.expand_dims(c, (1,)) for c in columns]
    return columns[0] if len(columns) == 1 else lax.concatenate(columns, 1)


def compress(
    condition: Any,
    a: Any,
    axis: int | None = None,
    *,
    size: int | None = None,
    fill_value: Any = 0,
    out: None = None,
) -> Any:
    """The slices of `a` along `axis` where `condition` (1-D) is true; with `size` the result
    is truncated or padded with `fill_value`."""
    check_arraylike("compress", condition, a)
    if out is not None:
        raise NotImplementedError("The 'out' argument to compress is not supported.")
    cond_shape = (
        tuple(np.shape(condition)) if not hasattr(condition, "shape") else tuple(condition.shape)
    )
    if len(cond_shape) != 1:
        raise ValueError(f"condition must be a 1D array, got shape {cond_shape}")
    a = to_kiln(a)
    if axis is None:
        a, axis = _ravel(a), 0
    else:
        axis = normalize_axis(axis, a.ndim)
    length = a.shape[axis]
    host = None if isinstance(condition, Tracer) else concrete_value(condition)
    if host is not None:
        mask = host.astype(bool)
        if mask.shape[0] > length:
            if mask[length:].any():
                raise ValueError("condition contains entries that are out of bounds")
            mask = mask[:length]
        positions = np.nonzero(mask)[0]
        if size is not None:
            size = _size_argument(size, "compress")
            positions = np.concatenate(
                [positions[:size], np.full(max(size - len(positions), 0), length)]
            )
    else:
        if size is None:
            raise _concretization_error(
                condition,
                "The size argument of kiln.numpy.compress must be statically "
                "specified to use it within transformations.",
            )
        if cond_shape[0] > length:
            condition = lax.slice(condition, (0,), (length,))
        (positions,) = nonzero(condition, size=size, fill_value=length)
    return take(a, positions, axis=axis, mode="fill", fill_value=fill_value)


def extract(condition: Any, arr: Any, *, size: int | None = None, fill_value: Any = 0) -> Any:
    """The elements of the flattened `arr` where the flattened `condition` is true."""
    check_arraylike("extract", condition, arr)
    return compress(
        _ravel(to_kiln(condition)), _ravel(to_kiln(arr)), size=size, fill_value=fill_value
    )


# --- where / choose ----------------------------------------------------------------------------


def _broadcast_all(*args: Any) -> list:
    shapes = [tuple(a.shape) for a in args]
    try:
        target = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(
            f"Incompatible shapes for broadcasting: {', '.join(map(str, shapes))}"
        ) from None
    out = []
    for a, s in zip(args, shapes):
        if s == target:
            out.append(a)
        else:
            lead = len(target) - len(s)
            out.append(lax.broadcast_in_dim(a, target, tuple(range(lead, len(target)))))
    return out


def where(
    condition: Any,
    x: Any = None,
    y: Any = None,
    /,
    *,
    size: int | None = None,
    fill_value: Any = None,
) -> Any:
    """`x` where `condition` else `y` (broadcast, promoted); with one argument, the same as
    nonzero(condition, size=size, fill_value=fill_value)."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError(
            "Either both or neither of the x and y arguments should be provided "
            "to kiln.numpy.where."
        )
    if size is not None or fill_value is not None:
        raise ValueError("size and fill_value are only valid for the one-argument where.")
    check_arraylike("where", condition, x, y)
    condition = to_kiln(condition)
    if condition.dtype != dtypes.bool_:
        condition = lax.ne(condition, lax.full((), 0, condition.dtype))
    x, y = promote_dtypes(x, y)
    condition, x, y = _broadcast_all(condition, x, y)
    return lax.select_n(condition, y, x)


def choose(a: Any, choices: Any, out: None = None, mode: str = "raise") -> Any:
    """choices[a] elementwise (all broadcast together). mode 'raise' needs a concrete `a`;
    'wrap' wraps and 'clip' clamps out-of-range choices."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to choose is not supported.")
    if isinstance(choices, (Array, Tracer, np.ndarray)):
        choices = [choices[i] for i in range(len(choices))]
    choices = list(choices)
    check_arraylike("choose", a, *choices)
    _check_integer("choose", a, "selector")
    if not choices:
        raise ValueError("choose requires at least one choice")
    n = len(choices)
    a = to_kiln(a)
    if mode == "raise":
        host = None if isinstance(a, Tracer) else concrete_value(a)
        if host is None:
            raise _concretization_error(
                a, "choose was traced with mode='raise'; use mode='wrap' or mode='clip'."
            )
        if np.any((host < 0) | (host >= n)):
            raise ValueError("invalid entry in choice array")
    elif mode == "wrap":
        a = to_kiln(_floor_mod(a, n))
    elif mode == "clip":
        a = lax.max(lax.min(a, n - 1), 0)
    else:
        raise ValueError(f"mode must be one of 'raise', 'wrap', or 'clip', got {mode!r}")
    choices = promote_dtypes(*choices)
    a, *choices = _broadcast_all(a, *choices)
    return lax.select_n(a, *choices)


# --- flat and multi-dimensional indices ----------------------------------------------------------


def unravel_index(indices: Any, shape: Any) -> tuple:
    """The coordinates in an array of `shape` of each flat index (row-major). Negative
    indices count from the end; out-of-range ones are clamped."""
    check_arraylike("unravel_index", indices)
    _check_integer("unravel_index", indices)
    shape = canonicalize_shape(shape, context="unravel_index shape: ")
    if not shape:
        return ()
    total = math.prod(shape)
    if total == 0:
        raise ValueError(f"cannot unravel an index into the empty shape {shape}")
    flat = to_kiln(indices)
    dtype, weak = flat.dtype, flat.aval.weak_type
    if np.iinfo(dtype).max < total:  # compute in a type that can hold the array size
        flat = lax.convert_element_type(flat, dtypes.default_int(), weak)
    if not dtypes.is_unsigned(dtype):
        flat = lax.select_n(lax.lt(flat, 0), flat, lax.add(flat, total))
    flat = lax.max(lax.min(flat, total - 1), 0)
    coords = []
    for dim in reversed(shape):
        coords.append(lax.rem(flat, dim))
        flat = lax.div(flat, dim)
    return tuple(
        c if c.dtype == dtype else lax.convert_element_type(c, dtype, weak)
        for c in reversed(coords)
    )


def ravel_multi_index(
    multi_index: Sequence[Any], dims: Sequence[int], mode: str = "raise", order: str = "C"
) -> Any:
    """The flat (row-major for order='C', column-major for 'F') index of each coordinate
    tuple. mode 'raise' needs concrete indices; 'wrap' wraps, 'clip' clamps."""
    dims = canonicalize_shape(dims, context="ravel_multi_index dims: ")
    multi_index = list(multi_index)
    if len(multi_index) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    check_arraylike("ravel_multi_index", *multi_index)
    for i in multi_index:
        _check_integer("ravel_multi_index", i, "multi_index entries")
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    if mode == "raise":
        for i, dim in zip(multi_index, dims):
            host = None if isinstance(i, Tracer) else concrete_value(i)
            if host is None:
                raise _concretization_error(
                    i,
                    "ravel_multi_index was traced with mode='raise'; use mode='wrap' or "
                    "mode='clip'.",
                )
            if np.any((host < 0) | (host >= dim)):
                raise ValueError("invalid entry in coordinates array")
    elif mode == "wrap":
        multi_index = [_floor_mod(to_kiln(i), dim) for i, dim in zip(multi_index, dims)]
    elif mode == "clip":
        multi_index = [
            lax.max(lax.min(to_kiln(i), dim - 1), 0) for i, dim in zip(multi_index, dims)
        ]
    else:
        raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', or 'clip'")
    strides = [
        math.prod(dims[k + 1 :]) if order == "C" else math.prod(dims[:k]) for k in range(len(dims))
    ]
    multi_index = _broadcast_all(*promote_dtypes(*multi_index))
    total = None
    for i, stride in zip(multi_index, strides):
        term = lax.mul(i, stride) if stride != 1 else i
        total = term if total is None else lax.add(total, term)
    return total


# --- index constructors ----------------------------------------------------------------------


def _nonnegative(name: str, what: str, value: Any) -> int:
    value = operator.index(value)
    if value < 0:
        raise ValueError(f"{what} argument to {name} must be nonnegative, got {value}")
    return value


def diag_indices(n: int, ndim: int = 2) -> tuple:
    """Indices of the main diagonal of an n x n x ... (ndim times) array."""
    n = _nonnegative("diag_indices", "n", n)
    ndim = _nonnegative("diag_indices", "ndim", ndim)
    return (_int_array(np.arange(n)),) * ndim


def diag_indices_from(arr: Any) -> tuple:
    """Indices of the main diagonal of `arr` (at least 2-D, all dims equal)."""
    shape = tuple(np.shape(arr)) if not hasattr(arr, "shape") else tuple(arr.shape)
    if len(shape) < 2:
        raise ValueError("input array must be at least 2-d")
    if len(set(shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return diag_indices(shape[0], len(shape))


def tril_indices(n: int, k: int = 0, m: int | None = None) -> tuple:
    """Row and column indices of the lower triangle (diagonal offset k) of an n x m array."""
    n = _nonnegative("tril_indices", "n", n)
    m = n if m is None else _nonnegative("tril_indices", "m", m)
    rows, cols = np.tril_indices(n, operator.index(k), m)
    return _int_array(rows), _int_array(cols)


def triu_indices(n: int, k: int = 0, m: int | None = None) -> tuple:
    """Row and column indices of the upper triangle (diagonal offset k) of an n x m array."""
    n = _nonnegative("triu_indices", "n", n)
    m = n if m is None else _nonnegative("triu_indices", "m", m)
    rows, cols = np.triu_indices(n, operator.index(k), m)
    return _int_array(rows), _int_array(cols)


def _matrix_shape(name: str, arr: Any) -> tuple:
    shape = tuple(np.shape(arr)) if not hasattr(arr, "shape") else tuple(arr.shape)
    if len(shape) != 2:
        raise ValueError(f"{name}: input array must be 2-d, got shape {shape}")
    return shape


def tril_indices_from(arr: Any, k: int = 0) -> tuple:
    """tril_indices for the shape of the 2-D `arr`."""
    rows, cols = _matrix_shape("tril_indices_from", arr)
    return tril_indices(rows, k, cols)


def triu_indices_from(arr: Any, k: int = 0) -> tuple:
    """triu_indices for the shape of the 2-D `arr`."""
    rows, cols = _matrix_shape("triu_indices_from", arr)
    return triu_indices(rows, k, cols)


def ix_(*args: Any) -> tuple:
    """Open-mesh index arrays: the k-th 1-D argument reshaped to lie along axis k (boolean
    arguments, which must be concrete, stand for their nonzero positions)."""
    check_arraylike("ix_", *args)
    n = len(args)
    out = []
    for k, a in enumerate(args):
        shape = tuple(np.shape(a)) if not hasattr(a, "shape") else tuple(a.shape)
        if len(shape) != 1:
            raise ValueError(
                f"Arguments to kiln.numpy.ix_ must be 1-dimensional, got shape {shape}"
            )
        dtype = dtypes.dtype_and_weak_of(a)[0]
        if dtype == dtypes.bool_:
            host = None if isinstance(a, Tracer) else concrete_value(a)
            if host is None:
                raise errors.NonConcreteBooleanIndexError(a.aval)
            a = _int_array(np.nonzero(host)[0])
        elif not dtypes.is_integer(dtype):
            raise TypeError(
                f"ix_ arguments must be integer or boolean arrays, got {dtype.name} at position {k}"
            )
        a = to_kiln(a)
        target = [1] * n
        target[k] = a.shape[0]
        out.append(lax.reshape(a, tuple(target)))
    return tuple(out)

"""kiln.numpy functions that join arrays or split them apart: concatenate, stack and its
variants, block, split and its variants, append, insert and delete. Indices and section
counts must be static (Python values), since they decide the output shapes. Re-exported by
kiln.numpy.manipulation."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from kiln import lax
from kiln.core.array import Array
from kiln.core.trace import Tracer
from kiln.numpy.manipulation_shape import (
    atleast_1d,
    atleast_2d,
    atleast_3d,
    broadcast_to,
    moveaxis,
    ravel,
)
from kiln.numpy.util import check_arraylike, promote_dtypes, to_kiln
from kiln.primitives.shape import canonicalize_axis, operand_shape

__all__ = [
    "concatenate",
    "concat",
    "stack",
    "hstack",
    "vstack",
    "dstack",
    "column_stack",
    "block",
    "split",
    "array_split",
    "hsplit",
    "vsplit",
    "dsplit",
    "unstack",
    "append",
    "insert",
    "delete",
]

_ARRAY_TYPES = (Array, Tracer, np.ndarray)


def _unstack_rows(x) -> list:
    """The slices of an array along axis 0, so an array can stand in for a sequence."""
    x = to_kiln(x)
    return [lax.index_in_dim(x, i, 0, keepdims=False) for i in range(x.shape[0])]


def _as_sequence(name: str, arrays: Any) -> list:
    if isinstance(arrays, _ARRAY_TYPES):
        if len(operand_shape(arrays)) == 0:
            raise ValueError(f"{name} requires a sequence of arrays, got a 0-d array.")
        return _unstack_rows(arrays)
    arrays = list(arrays)
    check_arraylike(name, *arrays)
    return arrays


def _with_dtype(arrays: list, dtype) -> list:
    if dtype is None:
        return promote_dtypes(*arrays)
    return [to_kiln(a, dtype, False) for a in arrays]


# --- joining ---------------------------------------------------------------------------------


def concatenate(arrays, axis: int | None = 0, dtype=None):
    """Join arrays along an existing axis, promoting them to a common dtype. With axis=None
    the arrays are flattened first."""
    if isinstance(arrays, _ARRAY_TYPES):
        # An array is a sequence of its rows: merge axis 0 into `axis` with one reshape.
        check_arraylike("concatenate", arrays)
        a = to_kiln(arrays, dtype, False) if dtype is not None else to_kiln(arrays)
        if a.ndim == 0:
            raise ValueError("Zero-dimensional arrays cannot be concatenated.")
        if axis is None:
            return ravel(a)
        if a.ndim == 1:
            raise ValueError("Zero-dimensional arrays cannot be concatenated.")
        axis = canonicalize_axis(axis, a.ndim - 1)
        moved = moveaxis(a, 0, axis)
        shape = list(a.shape[1:])
        shape[axis] *= a.shape[0]
        return lax.reshape(moved, tuple(shape))
    arrays = _as_sequence("concatenate", arrays)
    if not arrays:
        raise ValueError("Need at least one array to concatenate.")
    if axis is None:
        return concatenate([ravel(a) for a in arrays], 0, dtype)
    if len(operand_shape(arrays[0])) == 0:
        raise ValueError("Zero-dimensional arrays cannot be concatenated.")
    axis = canonicalize_axis(axis, len(operand_shape(arrays[0])))
    return lax.concatenate(_with_dtype(arrays, dtype), axis)


def concat(arrays, /, *, axis: int | None = 0):
    """Array-API spelling of concatenate."""
    return concatenate(arrays, axis)


def stack(arrays, axis: int = 0, out=None, dtype=None):
    """Join same-shape arrays along a new axis."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.stack is not supported.")
    if isinstance(arrays, _ARRAY_TYPES):
        check_arraylike("stack", arrays)
        a = to_kiln(arrays, dtype, False) if dtype is not None else to_kiln(arrays)
        if a.ndim == 0:
            raise ValueError("stack requires a sequence of arrays, got a 0-d array.")
        return moveaxis(a, 0, canonicalize_axis(axis, a.ndim))
    arrays = _as_sequence("stack", arrays)
    if not arrays:
        raise ValueError("Need at least one array to stack.")
    shapes = [operand_shape(a) for a in arrays]
    if any(s != shapes[0] for s in shapes[1:]):
        raise ValueError(
            f"All input arrays must have the same shape. Got {', '.join(map(str, shapes))}."
        )
    axis = canonicalize_axis(axis, len(shapes[0]) + 1)
    expanded = [lax.expand_dims(a, (axis,)) for a in _with_dtype(arrays, dtype)]
    return lax.concatenate(expanded, axis)


def hstack(tup, dtype=None):
    """Concatenate along axis 1 (axis 0 for 1-D arrays)."""
    arrays = _as_sequence("hstack", tup)
    arrays = [atleast_1d(a) for a in arrays]
    axis = 0 if arrays and arrays[0].ndim == 1 else 1
    return concatenate(arrays, axis, dtype)


def vstack(tup, dtype=None):
    """Concatenate along axis 0 after making every array at least 2-D."""
    arrays = [atleast_2d(a) for a in _as_sequence("vstack", tup)]
    return concatenate(arrays, 0, dtype)


def dstack(tup, dtype=None):
    """Concatenate along axis 2 after making every array at least 3-D."""
    arrays = [atleast_3d(a) for a in _as_sequence("dstack", tup)]
    return concatenate(arrays, 2, dtype)


def column_stack(tup):
    """Stack 1-D arrays as columns of a 2-D array (2-D arrays are joined as they are)."""
    arrays = []
    for a in _as_sequence("column_stack", tup):
        a = to_kiln(a)
        if a.ndim < 2:
            a = lax.transpose(atleast_2d(a), (1, 0))
        arrays.append(a)
    return concatenate(arrays, 1)


def block(arrays):
    """Assemble an array from nested lists of blocks: the innermost lists are joined along
    the last axis, the next level along the one before, and so on."""

    def depth_of(x, path) -> int:
        if isinstance(x, tuple):
            raise TypeError(
                f"{path} is a tuple. Only lists can be used to arrange blocks, "
                "and np.block does not allow implicit conversion from tuple to "
                "ndarray."
            )
        if isinstance(x, list):
            if not x:
                raise ValueError(f"List at {path} cannot be empty")
            depths = {depth_of(item, f"{path}[{i}]") for i, item in enumerate(x)}
            if len(depths) != 1:
                raise ValueError(
                    f"List depths are mismatched at {path}: found depths {sorted(depths)}"
                )
            return depths.pop() + 1
        check_arraylike("block", x)
        return 0

    list_depth = depth_of(arrays, "arrays")

    def max_ndim(x) -> int:
        return max(max_ndim(i) for i in x) if isinstance(x, list) else len(operand_shape(x))

    result_ndim = max(list_depth, max_ndim(arrays))

    def assemble(x, depth: int):
        if not isinstance(x, list):
            x = to_kiln(x)
            return (
                lax.expand_dims(x, tuple(range(result_ndim - x.ndim)))
                if x.ndim < result_ndim
                else x
            )
        parts = [assemble(item, depth + 1) for item in x]
        return concatenate(parts, axis=-(list_depth - depth))

    return assemble(arrays, 0)


# --- splitting -------------------------------------------------------------------------------


def _split_bounds(name: str, size: int, indices_or_sections) -> list[tuple[int, int]]:
    if isinstance(indices_or_sections, (list, tuple)) or (
        isinstance(indices_or_sections, _ARRAY_TYPES)
        and len(operand_shape(indices_or_sections)) > 0
    ):
        points = (
            [operator.index(i) for i in _static_index_array(name, indices_or_sections).tolist()]
            if isinstance(indices_or_sections, _ARRAY_TYPES)
            else [operator.index(i) for i in indices_or_sections]
        )
        edges = [0] + points + [size]
        bounds = []
        for start, stop in zip(edges[:-1], edges[1:]):
            s, e, _ = slice(start, stop).indices(size)
            bounds.append((s, max(s, e)))
        return bounds
    sections = operator.index(indices_or_sections)
    if sections <= 0:
        raise ValueError("number sections must be larger than 0.")
    part, rest = divmod(size, sections)
    if rest and name != "array_split":
        raise ValueError(f"array split does not result in an equal division: rest is {rest}")
    sizes = [part + 1] * rest + [part] * (sections - rest)
    starts = np.cumsum([0] + sizes[:-1]).tolist()
    return [(s, s + n) for s, n in zip(starts, sizes)]


def _split(name: str, ary, indices_or_sections, axis: int) -> list:
    check_arraylike(name, ary)
    ary = to_kiln(ary)
    axis = canonicalize_axis(axis, ary.ndim)
    bounds = _split_bounds(name, ary.shape[axis], indices_or_sections)
    return [lax.slice_in_dim(ary, s, e, 1, axis) for s, e in bounds]


def split(ary, indices_or_sections, axis: int = 0) -> list:
    """Split into equal sections, or at the given indices, along `axis`."""
    return _split("split", ary, indices_or_sections, axis)


def array_split(ary, indices_or_sections, axis: int = 0) -> list:
    """Like split, but the sections may differ in size by one (the first ones are longer)."""
    return _split("array_split", ary, indices_or_sections, axis)


def hsplit(ary, indices_or_sections) -> list:
    """Split along axis 1 (axis 0 for 1-D arrays)."""
    check_arraylike("hsplit", ary)
    nd = len(operand_shape(ary))
    if nd == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return _split("hsplit", ary, indices_or_sections, 0 if nd == 1 else 1)


def vsplit(ary, indices_or_sections) -> list:
    """Split along axis 0 (arrays of at least 2 dimensions)."""
    check_arraylike("vsplit", ary)
    if len(operand_shape(ary)) < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return _split("vsplit", ary, indices_or_sections, 0)


def dsplit(ary, indices_or_sections) -> list:
    """Split along axis 2 (arrays of at least 3 dimensions)."""
    check_arraylike("dsplit", ary)
    if len(operand_shape(ary)) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return _split("dsplit", ary, indices_or_sections, 2)


def unstack(x, /, *, axis: int = 0) -> tuple:
    """The slices of `x` along `axis`, as a tuple."""
    check_arraylike("unstack", x)
    x = to_kiln(x)
    if x.ndim == 0:
        raise ValueError(
            "Unstack requires arrays with rank > 0, however a scalar array was passed."
        )
    axis = canonicalize_axis(axis, x.ndim)
    return tuple(lax.index_in_dim(x, i, axis, keepdims=False) for i in range(x.shape[axis]))


# --- append, insert, delete ------------------------------------------------------------------


def append(arr, values, axis: int | None = None):
    """`values` appended to `arr` (both flattened when axis is None)."""
    check_arraylike("append", arr, values)
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], 0)
    return concatenate([arr, values], axis)


def _static_index_array(name: str, obj: Any) -> np.ndarray:
    check_arraylike(name, obj)
    if isinstance(obj, Tracer):
        value = obj.to_concrete_value()
        if value is None:
            raise TypeError(
                f"jnp.{name} needs static indices (Python ints, slices or NumPy "
                "arrays): a traced index would make the output shape depend on "
                "runtime values."
            )
        obj = value
    if isinstance(obj, Array):
        obj = np.asarray(obj)
    return np.asarray(obj)


def _gather_runs(sources: list, pieces_of: list, axis: int) -> Any:
    """Concatenate along `axis` the elements named by `pieces_of`, a list of (source number,
    index) pairs, taking each run of consecutive indices of one source as one slice."""
    parts, start = [], 0
    while start < len(pieces_of):
        src, first = pieces_of[start]
        stop = start + 1
        while (
            stop < len(pieces_of)
            and pieces_of[stop][0] == src
            and pieces_of[stop][1] == first + (stop - start)
        ):
            stop += 1
        parts.append(lax.slice_in_dim(sources[src], first, first + (stop - start), 1, axis))
        start = stop
    return parts


def delete(arr, obj, axis: int | None = None, *, assume_unique_indices: bool = False):
    """`arr` without the entries `obj` (static int, slice, index array or boolean mask)
    along `axis` (flattened when axis is None)."""
    check_arraylike("delete", arr)
    arr = to_kiln(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = canonicalize_axis(axis, arr.ndim)
    n = arr.shape[axis]
    if isinstance(obj, slice):
        keep = np.delete(np.arange(n), obj)
    else:
        index = _static_index_array("delete", obj)
        if index.dtype != np.bool_ and index.dtype.kind not in "iu" and index.size:
            raise ValueError(
                "jnp.delete(arr, obj): obj must be an integer array, a boolean mask or a slice."
            )
        if index.dtype == np.bool_ and index.shape != (n,):
            raise ValueError(
                f"boolean array argument obj to delete must be one dimensional "
                f"and match the axis length of {n}"
            )
        if index.dtype != np.bool_:
            index = index.astype(np.int64)
            if np.any((index < -n) | (index >= n)):
                raise IndexError(f"index out of bounds for axis {axis} with size {n}")
        keep = np.delete(np.arange(n), index)
    if len(keep) == n:
        return arr
    if len(keep) == 0:
        return lax.slice_in_dim(arr, 0, 0, 1, axis)
    parts = _gather_runs([arr], [(0, int(i)) for i in keep], axis)
    return lax.concatenate(parts, axis)


def insert(arr, obj, values, axis: int | None = None):
    """`values` inserted into `arr` before the static index or indices `obj` along `axis`
    (flattened when axis is None); values take `arr`'s dtype."""
    check_arraylike("insert", arr, values)
    arr = to_kiln(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = canonicalize_axis(axis, arr.ndim)
    n = arr.shape[axis]
    values = to_kiln(values, arr.dtype, arr.weak_type)
    if isinstance(obj, slice):
        index = np.arange(*obj.indices(n))
    else:
        index = _static_index_array("insert", obj)
        if index.ndim > 1:
            raise ValueError(
                "jnp.insert(): obj must be a slice, a one-dimensional array, or a scalar"
            )
        if index.dtype.kind not in "iu":
            if index.size:
                raise ValueError("jnp.insert(): index array must be integer typed")
            index = index.astype(np.int64)
    if np.any((index < -n) | (index > n)):
        raise IndexError(f"index out of bounds for axis {axis} with size {n}")
    index = np.where(index < 0, index + n, index)
    if index.ndim == 0:
        # A scalar position inserts `values` as one block (NumPy moves its first axis to
        # `axis`, so a[:, 1] = v style values line up as columns).
        values = (
            lax.expand_dims(values, tuple(range(arr.ndim - values.ndim)))
            if values.ndim < arr.ndim
            else values
        )
        values = moveaxis(values, 0, axis)
        count = values.shape[axis]
        positions = np.full(count, int(index))
    else:
        count = len(index)
        positions = index
    target = list(arr.shape)
    target[axis] = count
    values = broadcast_to(values, tuple(target))
    # Stable order: new entries go before the old entry at their position, in given order.
    order = np.argsort(positions, kind="stable")
    pieces, old = [], 0
    for j in order:
        while old < positions[j]:
            pieces.append((0, old))
            old += 1
        pieces.append((1, int(j)))
    pieces.extend((0, i) for i in range(old, n))
    if not pieces:
        return lax.slice_in_dim(arr, 0, 0, 1, axis)
    return lax.concatenate(_gather_runs([arr, values], pieces, axis), axis)

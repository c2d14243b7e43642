"""kiln.numpy functions that rearrange or replicate elements: flip, roll, rot90, tile,
repeat, pad and resize. Repeat counts, shifts and pad widths must be static (Python values),
since they decide the output shapes. Re-exported by kiln.numpy.manipulation."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from kiln import lax
from kiln.core import errors
from kiln.core.array import Array
from kiln.core.trace import Tracer
from kiln.numpy.manipulation_shape import broadcast_to, canonicalize_axes, ravel, reshape
from kiln.numpy.util import check_arraylike, to_kiln
from kiln.primitives.elementwise import convert_element_type
from kiln.primitives.shape import canonicalize_axis

__all__ = ["flip", "fliplr", "flipud", "roll", "rot90", "tile", "repeat", "pad", "resize"]


def _static_value(name: str, arg: str, value: Any) -> Any:
    """The concrete value of an argument that decides shapes; a ConcretizationTypeError
    naming the argument when it is traced."""
    if isinstance(value, Tracer):
        concrete = value.to_concrete_value()
        if concrete is None:
            raise errors.ConcretizationTypeError(
                value,
                f"It arose in the jnp.{name} argument '{arg}', which must be static "
                "(a Python value or NumPy array) because it decides the output shape.\n",
            )
        return np.asarray(concrete)
    if isinstance(value, Array):
        return np.asarray(value)
    return value


# --- flips and rotations ---------------------------------------------------------------------


def flip(m, axis: int | tuple[int, ...] | None = None):
    """Reverse the order of elements along `axis` (all axes when None)."""
    check_arraylike("flip", m)
    m = to_kiln(m)
    axes = tuple(range(m.ndim)) if axis is None else canonicalize_axes(axis, m.ndim)
    return lax.rev(m, axes)


def fliplr(m):
    """Reverse the order of columns (axis 1)."""
    check_arraylike("fliplr", m)
    return flip(m, 1)


def flipud(m):
    """Reverse the order of rows (axis 0)."""
    check_arraylike("flipud", m)
    return flip(m, 0)


def rot90(m, k: int = 1, axes: tuple[int, int] = (0, 1)):
    """Rotate by 90 degrees `k` times in the plane of `axes` (from the first axis towards the
    second)."""
    check_arraylike("rot90", m)
    m = to_kiln(m)
    if m.ndim < 2:
        raise ValueError(
            "rot90 requires its first argument to have ndim at least two, but got "
            f"first argument of shape {m.shape}, which has ndim {m.ndim}"
        )
    ax1, ax2 = (canonicalize_axis(a, m.ndim) for a in axes)
    if ax1 == ax2:
        raise ValueError("Axes must be different")
    k = operator.index(k) % 4
    if k == 0:
        return m
    if k == 2:
        return lax.rev(m, tuple(sorted((ax1, ax2))))
    perm = list(range(m.ndim))
    perm[ax1], perm[ax2] = perm[ax2], perm[ax1]
    if k == 1:
        return lax.transpose(lax.rev(m, (ax2,)), tuple(perm))
    return lax.rev(lax.transpose(m, tuple(perm)), (ax2,))


def roll(a, shift, axis: int | tuple[int, ...] | None = None):
    """Shift elements cyclically by `shift` along `axis` (over the flattened array when
    None). Shifts must be static."""
    check_arraylike("roll", a)
    a = to_kiln(a)
    shift = _static_value("roll", "shift", shift)
    if axis is None:
        flat = roll(ravel(a), int(np.sum(np.asarray(shift, dtype=np.int64))), 0)
        return reshape(flat, a.shape)
    shifts, axes = np.broadcast_arrays(
        np.asarray(shift, dtype=np.int64), np.asarray(axis, dtype=np.int64)
    )
    if shifts.ndim > 1:
        raise ValueError("'shift' and 'axis' arguments to roll must be scalars or 1D arrays")
    for s, ax in zip(shifts.reshape(-1).tolist(), axes.reshape(-1).tolist()):
        ax = canonicalize_axis(ax, a.ndim)
        n = a.shape[ax]
        if n == 0 or s % n == 0:
            continue
        s %= n
        a = lax.concatenate(
            [lax.slice_in_dim(a, n - s, n, 1, ax), lax.slice_in_dim(a, 0, n - s, 1, ax)], ax
        )
    return a


# --- replication -----------------------------------------------------------------------------


def tile(A, reps):
    """Repeat the whole array `reps` times along each axis."""
    check_arraylike("tile", A)
    A = to_kiln(A)
    reps = _static_value("tile", "reps", reps)
    reps = (reps,) if np.ndim(reps) == 0 else tuple(np.asarray(reps).tolist())
    reps = tuple(operator.index(r) for r in reps)
    if any(r < 0 for r in reps):
        raise ValueError(f"tile reps must be non-negative, got {reps}")
    shape = (1,) * (len(reps) - A.ndim) + A.shape
    reps = (1,) * (len(shape) - len(reps)) + reps
    # Interleave a unit axis before each axis, broadcast it to the rep count, merge pairs.
    paired = lax.reshape(A, tuple(d for s in shape for d in (1, s)))
    stretched = broadcast_to(paired, tuple(d for pair in zip(reps, shape) for d in pair))
    return lax.reshape(stretched, tuple(r * s for r, s in zip(reps, shape)))


def _repeat_each(a, count: int, axis: int):
    """Every slab of `a` along `axis` repeated `count` times in place: broadcast into a new
    axis right after `axis`, then merge the two."""
    if count == 1:
        return a
    shape = a.shape[: axis + 1] + (count,) + a.shape[axis + 1 :]
    kept = tuple(i for i in range(a.ndim + 1) if i != axis + 1)
    out_shape = a.shape[:axis] + (a.shape[axis] * count,) + a.shape[axis + 1 :]
    return lax.reshape(lax.broadcast_in_dim(a, shape, kept), out_shape)


def repeat(a, repeats, axis: int | None = None, *, total_repeat_length: int | None = None):
    """Repeat each element `repeats` times (an int, or one count per element along `axis`).
    With total_repeat_length the result is cut to, or padded with its last element to, that
    length. Counts must be static."""
    if isinstance(repeats, (int, np.integer)):
        check_arraylike("repeat", a)
    else:
        check_arraylike("repeat", a, repeats)
    a = to_kiln(a)
    if isinstance(repeats, Tracer) and repeats.to_concrete_value() is None:
        raise errors.ConcretizationTypeError(
            repeats,
            "When jit-compiling jnp.repeat, the repeat counts must be static: pass "
            "them as a Python int or NumPy array (static_argnums).\n",
        )
    counts = np.asarray(_static_value("repeat", "repeats", repeats))
    if counts.dtype.kind not in "iub":
        raise TypeError(f"jnp.repeat repeats must be integers, got dtype {counts.dtype}")
    counts = counts.astype(np.int64)
    if np.any(counts < 0):
        raise ValueError("jnp.repeat repeats may not contain negative values")
    if axis is None:
        a, axis = ravel(a), 0
    axis = canonicalize_axis(axis, a.ndim)
    n = a.shape[axis]
    if counts.ndim > 1 or (counts.ndim == 1 and counts.size not in (1, n)):
        raise ValueError(
            f"jnp.repeat repeats of shape {counts.shape} do not match axis {axis} of length {n}"
        )
    if counts.size == 1:
        out = _repeat_each(a, int(counts.reshape(())), axis)
    else:
        # One slice per run of elements that share a count: few ops for typical inputs.
        parts, start = [], 0
        while start < n:
            stop = start + 1
            while stop < n and counts[stop] == counts[start]:
                stop += 1
            if counts[start]:
                piece = lax.slice_in_dim(a, start, stop, 1, axis)
                parts.append(_repeat_each(piece, int(counts[start]), axis))
            start = stop
        out = lax.concatenate(parts, axis) if parts else lax.slice_in_dim(a, 0, 0, 1, axis)
    if total_repeat_length is None:
        return out
    total = operator.index(total_repeat_length)
    have = out.shape[axis]
    if total <= have:
        return lax.slice_in_dim(out, 0, total, 1, axis)
    if n == 0:
        raise ValueError("jnp.repeat cannot fill total_repeat_length from an empty axis")
    last = lax.slice_in_dim(a, n - 1, n, 1, axis)
    return lax.concatenate([out, _repeat_each(last, total - have, axis)], axis)


def resize(a, new_shape):
    """An array of `new_shape` filled by cycling through the flattened elements of `a`."""
    check_arraylike("resize", a)
    a = to_kiln(a)
    new_shape = (new_shape,) if isinstance(new_shape, (int, np.integer)) else tuple(new_shape)
    new_shape = tuple(operator.index(d) for d in new_shape)
    if any(d < 0 for d in new_shape):
        raise ValueError("all elements of `new_shape` must be non-negative")
    flat = ravel(a)
    new_size = math.prod(new_shape)
    if flat.size == 0 or new_size == 0:
        return lax.full_like(flat, 0, shape=new_shape)
    cycled = tile(flat, -(-new_size // flat.size))
    return lax.reshape(lax.slice_in_dim(cycled, 0, new_size, 1, 0), new_shape)


# --- pad -------------------------------------------------------------------------------------


def _pad_widths(pad_width: Any, ndim: int) -> np.ndarray:
    widths = _static_value("pad", "pad_width", pad_width)
    widths = np.asarray(widths)
    if widths.size and widths.dtype.kind not in "iu":
        raise TypeError(f"`pad_width` must be of integral type, got {widths.dtype}")
    try:
        widths = np.broadcast_to(widths.astype(np.int64), (ndim, 2))
    except ValueError:
        raise ValueError(
            f"jnp.pad: pad_width with shape {widths.shape} cannot be broadcast "
            f"to ({ndim}, 2), one (before, after) pair per axis."
        ) from None
    if np.any(widths < 0):
        raise ValueError("index can't contain negative values")
    return widths


def _pad_constant(array, widths: np.ndarray, constant_values):
    if isinstance(constant_values, (list, tuple)):
        # NumPy's API spells per-axis values as nested tuples, so they are accepted here.
        from kiln.numpy.creation import asarray

        values = asarray(constant_values)
    else:
        check_arraylike("pad", constant_values)
        values = to_kiln(constant_values)
    weak = array.weak_type
    if values.ndim == 0:
        # A host scalar converts on the host, so the jaxpr shows it as a literal.
        raw = (
            constant_values
            if isinstance(constant_values, (bool, int, float, complex, np.generic))
            else values
        )
        value = convert_element_type(raw, array.dtype, weak)
        return lax.pad(array, value, [(int(lo), int(hi), 0) for lo, hi in widths])
    values = broadcast_to(values, (array.ndim, 2))
    values = convert_element_type(values, array.dtype, weak)
    for axis in range(array.ndim):
        for side in (0, 1):
            if widths[axis, side] == 0:
                continue
            config = [(0, 0, 0)] * array.ndim
            config[axis] = (
                (int(widths[axis, 0]), 0, 0) if side == 0 else (0, int(widths[axis, 1]), 0)
            )
            value = lax.reshape(lax.slice(values, (axis, side), (axis + 1, side + 1)), ())
            array = lax.pad(array, value, config)
    return array


def _check_nonempty(mode: str, size: int, lo: int, hi: int) -> None:
    if size == 0 and (lo or hi):
        raise ValueError(f"Cannot apply '{mode}' padding to empty axis")


def _pad_edge(array, widths: np.ndarray):
    for axis in range(array.ndim):
        lo, hi = (int(w) for w in widths[axis])
        n = array.shape[axis]
        _check_nonempty("edge", n, lo, hi)
        parts = []
        if lo:
            first = lax.slice_in_dim(array, 0, 1, 1, axis)
            parts.append(_repeat_slab(first, lo, axis))
        parts.append(array)
        if hi:
            last = lax.slice_in_dim(array, n - 1, n, 1, axis)
            parts.append(_repeat_slab(last, hi, axis))
        array = lax.concatenate(parts, axis) if len(parts) > 1 else array
    return array


def _repeat_slab(slab, count: int, axis: int):
    shape = list(slab.shape)
    shape[axis] = count
    return broadcast_to(slab, tuple(shape))


def _pad_wrap(array, widths: np.ndarray):
    for axis in range(array.ndim):
        lo, hi = (int(w) for w in widths[axis])
        n = array.shape[axis]
        _check_nonempty("wrap", n, lo, hi)
        if not (lo or hi):
            continue
        lo_reps, lo_rest = divmod(lo, n)
        hi_reps, hi_rest = divmod(hi, n)
        parts = []
        if lo_rest:
            parts.append(lax.slice_in_dim(array, n - lo_rest, n, 1, axis))
        parts.extend([array] * (lo_reps + hi_reps + 1))
        if hi_rest:
            parts.append(lax.slice_in_dim(array, 0, hi_rest, 1, axis))
        array = lax.concatenate(parts, axis)
    return array


def _pad_reflect(array, widths: np.ndarray, mode: str, reflect_type: str):
    # Mirror images are taken from the growing array's current ends, a chunk at a time, so
    # pads wider than the axis keep reflecting exactly as NumPy does.
    for axis in range(array.ndim):
        n = array.shape[axis]
        _check_nonempty(mode, n, *(int(w) for w in widths[axis]))
        offset = 1 if mode == "reflect" and n > 1 else 0
        for before, width in ((True, int(widths[axis, 0])), (False, int(widths[axis, 1]))):
            if width == 0:
                continue
            size = array.shape[axis]
            edge = lax.slice_in_dim(
                array, 0 if before else size - 1, 1 if before else size, 1, axis
            )
            while width > 0:
                chunk = min(width, n - offset)
                width -= chunk
                size = array.shape[axis]
                if before:
                    start, stop = offset, offset + chunk
                else:
                    stop = size - (offset if mode == "reflect" and n > 1 else 0)
                    start = stop - chunk
                piece = lax.rev(lax.slice_in_dim(array, start, stop, 1, axis), (axis,))
                if reflect_type == "odd":
                    doubled = broadcast_to(lax.add(edge, edge), piece.shape)
                    piece = lax.sub(doubled, piece)
                    if n > 1:
                        k = piece.shape[axis]
                        edge = lax.slice_in_dim(
                            piece, 0 if before else k - 1, 1 if before else k, 1, axis
                        )
                array = lax.concatenate([piece, array] if before else [array, piece], axis)
    return array


_PAD_KWARGS = {
    "constant": {"constant_values"},
    "edge": set(),
    "wrap": set(),
    "reflect": {"reflect_type"},
    "symmetric": {"reflect_type"},
    "empty": set(),
}


def pad(array, pad_width, mode: str = "constant", **kwargs):
    """Pad an array. pad_width: an int, a (before, after) pair, or one pair per axis.

    Modes: 'constant' (constant_values, default 0), 'edge', 'reflect' and 'symmetric'
    (reflect_type 'even' or 'odd'), 'wrap', 'empty' (zeros, since kiln arrays are never
    uninitialized)."""
    check_arraylike("pad", array)
    array = to_kiln(array)
    if not isinstance(mode, str) or mode not in _PAD_KWARGS:
        if mode in ("linear_ramp", "maximum", "mean", "median", "minimum") or callable(mode):
            raise NotImplementedError(
                f"jnp.pad mode {mode!r} is not implemented in kiln yet; "
                f"supported modes: {', '.join(_PAD_KWARGS)}."
            )
        raise NotImplementedError(f"Unimplemented padding mode '{mode}' for np.pad.")
    unexpected = set(kwargs) - _PAD_KWARGS[mode]
    if unexpected:
        raise ValueError(f"Unsupported keyword arguments for mode '{mode}': {sorted(unexpected)}")
    widths = _pad_widths(pad_width, array.ndim)
    if mode == "constant":
        return _pad_constant(array, widths, kwargs.get("constant_values", 0))
    if mode == "empty":
        return _pad_constant(array, widths, 0)
    if mode == "edge":
        return _pad_edge(array, widths)
    if mode == "wrap":
        return _pad_wrap(array, widths)
    reflect_type = kwargs.get("reflect_type", "even")
    if reflect_type not in ("even", "odd"):
        raise ValueError(f"reflect_type must be 'even' or 'odd', got {reflect_type!r}")
    return _pad_reflect(array, widths, mode, reflect_type)

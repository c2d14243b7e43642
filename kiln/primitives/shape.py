"""Shape primitives: broadcasting, reshaping, transposing, slicing, padding, concatenation,
iota. Each block holds all the rules of one primitive."""
from __future__ import annotations

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.core.shapes import canonicalize_shape

__all__ = ["broadcast_in_dim", "broadcast", "full"]

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
        raise TypeError(f"broadcast_in_dim broadcast_dimensions {broadcast_dimensions} must "
                        f"have one entry per operand dimension ({x.ndim})")
    if list(broadcast_dimensions) != sorted(set(broadcast_dimensions)):
        raise TypeError("broadcast_in_dim broadcast_dimensions must be strictly increasing, "
                        f"got {broadcast_dimensions}")
    for src, dst in enumerate(broadcast_dimensions):
        if not 0 <= dst < len(shape) or x.shape[src] not in (1, shape[dst]):
            raise TypeError(f"broadcast_in_dim cannot broadcast operand shape {x.shape} to "
                            f"{shape} along dimensions {broadcast_dimensions}")
    return ShapedArray(shape, x.dtype, x.weak_type)


def broadcast_in_dim(operand, shape, broadcast_dimensions):
    """Broadcast `operand` to `shape`; operand dim i becomes result dim broadcast_dimensions[i]."""
    shape = canonicalize_shape(shape)
    broadcast_dimensions = tuple(int(d) for d in broadcast_dimensions)
    if np.shape(operand) == shape and broadcast_dimensions == tuple(range(len(shape))):
        return operand
    return broadcast_in_dim_p.bind(operand, shape=shape,
                                   broadcast_dimensions=broadcast_dimensions)


def broadcast(operand, sizes):
    """Add leading dimensions of `sizes` to `operand`."""
    ndim = np.ndim(operand) if not hasattr(operand, "ndim") else operand.ndim
    sizes = canonicalize_shape(sizes)
    shape = sizes + tuple(np.shape(operand) if not hasattr(operand, "shape") else operand.shape)
    return broadcast_in_dim(operand, shape, tuple(range(len(sizes), len(sizes) + ndim)))


def full(shape, fill_value, dtype=None):
    """An array of `shape` filled with `fill_value` (lax.full)."""
    from kiln.primitives.elementwise import convert_element_type
    shape = canonicalize_shape(shape)
    if np.ndim(fill_value) if not hasattr(fill_value, "ndim") else fill_value.ndim:
        raise TypeError(f"full must be called with scalar fill_value, got shape "
                        f"{np.shape(fill_value)}")
    weak = dtype is None and dtypes.dtype_and_weak_of(fill_value)[1]
    dtype = dtypes.canonicalize(dtype) if dtype is not None else \
        dtypes.dtype_and_weak_of(fill_value)[0]
    value = convert_element_type(fill_value, dtype, weak)
    return broadcast(value, shape)

"""Array creation: array, asarray, zeros, ones, full, arange, ... ."""
from __future__ import annotations

from typing import Any

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.trace import Tracer
from kiln.runtime.array import Array

__all__ = ["array", "asarray", "zeros", "ones", "full", "empty"]


def _host_value(obj: Any, dtype) -> tuple[np.ndarray, bool]:
    """Convert a scalar, nested list/tuple or NumPy value on the host. Only a bare Python
    scalar with no requested dtype is weakly typed."""
    weak = dtype is None and type(obj) in (int, float, complex)
    if dtype is None:
        if type(obj) in (int, float, complex):
            dtype = dtypes.dtype_and_weak_of(obj)[0]
        else:
            value = np.asarray(obj)
            if value.dtype.kind not in "biufc" and value.dtype != dtypes.bfloat16:
                raise TypeError(f"Cannot make a kiln array from {type(obj).__name__} holding "
                                f"{value.dtype} data; kiln arrays hold numbers and booleans.")
            dtype = value.dtype
    dtype = dtypes.canonicalize(dtype)
    with np.errstate(all="ignore"):
        return np.array(obj, dtype=dtype), weak


def array(object: Any, dtype=None, copy: bool = True, ndmin: int = 0) -> Any:
    """Create an array from a scalar, NumPy array, nested list/tuple or another array."""
    if isinstance(object, (Array, Tracer)):
        out = object if dtype is None else lax.convert_element_type(object, dtype)
        if isinstance(out, Array) and copy and out is object:
            out = Array._wrap(out._value.copy(), out.weak_type)
    elif isinstance(object, (list, tuple)) and any(isinstance(x, Tracer) or (
            isinstance(x, (list, tuple)) and _contains_tracer(x)) for x in object):
        from kiln.numpy.manipulation import stack
        out = stack([array(x, dtype=dtype) for x in object])
    else:
        if isinstance(object, (list, tuple)) and object and all(isinstance(x, Array)
                                                                for x in object):
            object = [np.asarray(x) for x in object]
        value, weak = _host_value(object, dtype)
        out = Array._wrap(value, weak)
    if ndmin > out.ndim:
        out = lax.broadcast_in_dim(out, (1,) * (ndmin - out.ndim) + out.shape,
                                   tuple(range(ndmin - out.ndim, ndmin)))
    return out


def _contains_tracer(xs) -> bool:
    return any(isinstance(x, Tracer) or (isinstance(x, (list, tuple)) and _contains_tracer(x))
               for x in xs)


def asarray(a: Any, dtype=None, copy: bool | None = None) -> Any:
    """Like `array`, without copying when `a` already is a kiln array of that dtype."""
    return array(a, dtype=dtype, copy=bool(copy))


def full(shape, fill_value, dtype=None) -> Any:
    """An array of `shape` filled with `fill_value`."""
    if hasattr(fill_value, "ndim") and fill_value.ndim:
        from kiln.numpy.manipulation import broadcast_to
        fill = fill_value if dtype is None else lax.convert_element_type(fill_value, dtype)
        return broadcast_to(fill, shape)
    return lax.full(shape, fill_value, dtype)


def zeros(shape, dtype=None) -> Any:
    """An array of zeros (float32 unless `dtype` says otherwise)."""
    return lax.full(shape, 0, dtype if dtype is not None else dtypes.default_float())


def ones(shape, dtype=None) -> Any:
    """An array of ones (float32 unless `dtype` says otherwise)."""
    return lax.full(shape, 1, dtype if dtype is not None else dtypes.default_float())


def empty(shape, dtype=None) -> Any:
    """Like zeros: kiln arrays are immutable, so uninitialized memory is never exposed."""
    return zeros(shape, dtype)

"""Helpers shared by kiln.numpy: argument checking, dtype promotion and broadcasting."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.trace import Tracer

_SCALARS = (bool, int, float, complex)


def is_arraylike(x: Any) -> bool:
    return isinstance(x, (Array, Tracer, np.ndarray, np.generic) + _SCALARS)


def check_arraylike(fun_name: str, *args: Any) -> None:
    """kiln.numpy functions take arrays and scalars, not lists: converting a list silently
    would hide a slow per-element transfer, so it is an error (as in JAX)."""
    for pos, arg in enumerate(args):
        if not is_arraylike(arg):
            hint = (
                " Use kiln.numpy.array(...) to convert a list or tuple first."
                if isinstance(arg, (list, tuple))
                else ""
            )
            raise TypeError(
                f"{fun_name} requires ndarray or scalar arguments, got "
                f"{type(arg)} at position {pos}.{hint}"
            )


def dtype_and_weak(x: Any) -> tuple[np.dtype, bool]:
    return dtypes.dtype_and_weak_of(x)


def ndim(x: Any) -> int:
    return x.ndim if hasattr(x, "ndim") else np.ndim(x)


def shape(x: Any) -> tuple:
    return x.shape if hasattr(x, "shape") else np.shape(x)


def to_kiln(x: Any, dtype=None, weak: bool | None = None):
    """Arrays and tracers pass through; scalars and NumPy values become kiln constants."""
    from kiln.primitives.elementwise import convert_element_type

    kind = type(x)
    if kind is Array:
        if dtype is None or (x._value.dtype == dtype and (weak is None or x.weak_type == weak)):
            return x
    elif kind in (int, float, complex) and dtype is not None and np.dtype(dtype).kind in "fc":
        # The common `x * 2.0` case: convert the Python scalar on the host, no dispatch.
        if kind is int:
            dtypes.python_int_dtype(x)  # out of the default integer range: OverflowError
        return Array._wrap(np.asarray(x, dtype=dtype), True if weak is None else weak)
    if isinstance(x, (Array, Tracer)):
        if dtype is None:
            return x
        return convert_element_type(x, dtype, x.aval.weak_type if weak is None else weak)
    d, w = dtypes.dtype_and_weak_of(x)
    return convert_element_type(x, d if dtype is None else dtype, w if weak is None else weak)


def check_int_scalars(*values: Any) -> None:
    """OverflowError for any Python int among `values` that does not fit the default integer
    type, as every kiln.numpy function treats its Python int arguments (like JAX's jitted
    functions, which check their arguments)."""
    for value in values:
        if type(value) is int:
            dtypes.python_int_dtype(value)


def promote_dtypes(*args: Any) -> list:
    """Convert arguments to their common dtype (JAX's promotion lattice, weak types kept)."""
    if len(args) == 1:
        return [to_kiln(args[0])]
    dtype, weak = dtypes.result_type_with_weak(*(dtypes.dtype_and_weak_of(a) for a in args))
    return [to_kiln(a, dtype, weak) for a in args]


def promote_dtypes_inexact(*args: Any) -> list:
    """Like promote_dtypes, then integers and bools go to the default float type."""
    dtype, weak = dtypes.result_type_with_weak(*(dtypes.dtype_and_weak_of(a) for a in args))
    if not dtypes.is_inexact(dtype):
        dtype = dtypes.default_float() if weak else dtypes.to_inexact(dtype)
    return [to_kiln(a, dtype, weak) for a in args]


def promote_dtypes_numeric(*args: Any) -> list:
    """Like promote_dtypes, but bools become the default integer type."""
    dtype, weak = dtypes.result_type_with_weak(*(dtypes.dtype_and_weak_of(a) for a in args))
    if dtype == np.bool_:
        dtype = dtypes.default_int()
    return [to_kiln(a, dtype, weak) for a in args]


def broadcast_arrays_for_lax(*args: Any) -> list:
    """NumPy broadcasting, leaving rank-0 operands as they are (lax broadcasts those)."""
    shapes = [shape(a) for a in args]
    nonscalar = [s for s in shapes if s != ()]
    if len(set(nonscalar)) <= 1:
        return list(args)
    try:
        result = np.broadcast_shapes(*nonscalar)
    except ValueError:
        raise ValueError(
            f"Incompatible shapes for broadcasting: {', '.join(str(s) for s in shapes)}"
        ) from None
    out = []
    for a, s in zip(args, shapes):
        if s == () or s == result:
            out.append(a)
        else:
            out.append(_broadcast_to(a, result))
    return out


def _broadcast_to(x: Any, target: tuple):
    """Broadcast by NumPy rules: squeeze size-1 dims that get stretched, then broadcast_in_dim."""
    from kiln.primitives.shape import broadcast_in_dim
    from kiln.lax import reshape

    xs = shape(x)
    lead = len(target) - len(xs)
    keep = [i for i, d in enumerate(xs) if d == target[lead + i]]
    if len(keep) != len(xs):
        x = reshape(x, tuple(xs[i] for i in keep))
    return broadcast_in_dim(x, target, tuple(lead + i for i in keep))


def promote_and_broadcast(fun_name: str, *args: Any, inexact: bool = False) -> list:
    check_arraylike(fun_name, *args)
    args = promote_dtypes_inexact(*args) if inexact else promote_dtypes(*args)
    return broadcast_arrays_for_lax(*args)


def normalize_axis(axis: int, ndim_: int, name: str = "axis") -> int:
    import operator

    axis = operator.index(axis)
    if not -ndim_ <= axis < max(ndim_, 1) or (ndim_ == 0 and axis not in (0, -1)):
        raise ValueError(f"{name} {axis} is out of bounds for array of dimension {ndim_}")
    return axis % ndim_ if ndim_ else 0

"""Constructors for the routine parts of primitives: elementwise unary/binary ops and the
shape/dtype checks they share, so that a primitive definition reads as a declaration."""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive

# dtype families a primitive may accept
BOOL = "bool"
INT = "int"       # signed and unsigned integers
UINT = "uint"
SINT = "sint"
FLOAT = "float"   # bfloat16, float16, float32, float64
COMPLEX = "complex"
INEXACT = (FLOAT, COMPLEX)
NUMBER = (INT, FLOAT, COMPLEX)
ANY = (BOOL, INT, FLOAT, COMPLEX)
INTEGRAL = (BOOL, INT)  # bitwise ops


def dtype_family(dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return BOOL
    if dtype.kind in "iu":
        return INT
    if dtype.kind == "c":
        return COMPLEX
    return FLOAT


def check_dtype(name: str, dtype: np.dtype, allowed: Iterable[str]) -> None:
    allowed = (allowed,) if isinstance(allowed, str) else tuple(allowed)
    family = dtype_family(dtype)
    if family in allowed:
        return
    if UINT in allowed and dtype.kind == "u" or SINT in allowed and dtype.kind == "i":
        return
    raise TypeError(f"{name} does not accept dtype {dtype.name}; it accepts "
                    f"{', '.join(allowed)} arrays.")


def broadcast_scalar_shapes(name: str, *avals: ShapedArray) -> tuple:
    """lax elementwise ops need equal shapes; rank-0 operands broadcast against the rest."""
    shapes = {a.shape for a in avals if a.shape != ()}
    if len(shapes) > 1:
        raise TypeError(f"{name} got incompatible shapes for broadcasting: "
                        f"{', '.join(str(a.shape) for a in avals)}. lax-level ops need equal "
                        "shapes; use kiln.numpy functions for NumPy broadcasting.")
    return shapes.pop() if shapes else ()


def check_same_dtypes(name: str, *avals: ShapedArray) -> None:
    first = avals[0].dtype
    if any(a.dtype != first for a in avals[1:]):
        raise TypeError(f"{name} requires arguments to have the same dtypes, got "
                        f"{', '.join(a.dtype.name for a in avals)}. (Convert with "
                        "lax.convert_element_type, or use kiln.numpy, which promotes.)")


def standard_unop(name: str, impl: Callable, allowed=ANY, result_dtype=None,
                  weak: bool = True) -> Primitive:
    """An elementwise op of one operand; `result_dtype(dtype)` for ops that change dtype."""
    prim = Primitive(name)

    def abstract_eval(x: ShapedArray, **params) -> ShapedArray:
        check_dtype(name, x.dtype, allowed)
        dtype = result_dtype(x.dtype) if result_dtype else x.dtype
        return ShapedArray(x.shape, dtype, x.weak_type and weak and result_dtype is None)

    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval)
    return prim


def standard_binop(name: str, impl: Callable, allowed=ANY, result_dtype=None,
                   nargs: int = 2) -> Primitive:
    """An elementwise op of `nargs` same-dtype operands (rank-0 operands broadcast)."""
    prim = Primitive(name)

    def abstract_eval(*avals: ShapedArray, **params) -> ShapedArray:
        if len(avals) != nargs:
            raise TypeError(f"{name} takes {nargs} operands, got {len(avals)}")
        check_same_dtypes(name, *avals)
        check_dtype(name, avals[0].dtype, allowed)
        shape = broadcast_scalar_shapes(name, *avals)
        dtype = result_dtype(avals[0].dtype) if result_dtype else avals[0].dtype
        weak = result_dtype is None and all(a.weak_type for a in avals)
        return ShapedArray(shape, dtype, weak)

    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval)
    return prim


def to_bool(dtype: np.dtype) -> np.dtype:
    return dtypes.bool_


def real_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.complex128 else (
        np.dtype(np.float32) if dtype == np.complex64 else dtype)


def ignore_fp_errors(fn: Callable) -> Callable:
    """Run a NumPy impl without floating-point warnings: kiln, like XLA, returns inf/nan
    silently."""
    def wrapped(*args, **params):
        with np.errstate(all="ignore"):
            return fn(*args, **params)
    wrapped.__name__ = getattr(fn, "__name__", "impl")
    return wrapped


def scalar_to_array(value, dtype: np.dtype, weak: bool = True):
    """A Python scalar as a (weakly typed) kiln constant of `dtype`, converted on the host."""
    from kiln.runtime.array import Array
    return Array._wrap(np.asarray(value, dtype=dtype), weak)


def lax_operands(*args):
    """lax ops accept Python scalars next to arrays: give them the arrays' dtype, weakly typed."""
    if all(not isinstance(a, (bool, int, float, complex)) for a in args):
        return args
    ref = next((a for a in args if not isinstance(a, (bool, int, float, complex))), None)
    if ref is None:
        dtype, _ = dtypes.result_type_with_weak(*(dtypes.dtype_and_weak_of(a) for a in args))
    else:
        dtype = ref.dtype if hasattr(ref, "dtype") else dtypes.canonicalize(np.asarray(ref).dtype)
    return tuple(scalar_to_array(a, dtype) if isinstance(a, (bool, int, float, complex)) else a
                 for a in args)

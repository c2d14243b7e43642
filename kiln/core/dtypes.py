"""dtypes: the set kiln supports, JAX's type-promotion lattice with weak types, and
canonicalization (64-bit types become 32-bit unless x64 is enabled).

A dtype is a `numpy.dtype`; bfloat16 comes from ml_dtypes. A value is *weakly typed* when it came
from a Python scalar: it adopts the dtype of whatever strongly typed value it meets.
"""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np

from kiln.config import config

bool_ = np.dtype(np.bool_)
int8, int16, int32, int64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
uint8, uint16, uint32, uint64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16, float32, float64 = (np.dtype(t) for t in (np.float16, np.float32, np.float64))
complex64, complex128 = np.dtype(np.complex64), np.dtype(np.complex128)

# The 8-bit floats of ml_dtypes. Arrays of them are stored as they are and computed in a wider
# type (see round_to_narrow); they never promote implicitly, as in JAX.
float8_e3m4 = np.dtype(ml_dtypes.float8_e3m4)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3b11fnuz = np.dtype(ml_dtypes.float8_e4m3b11fnuz)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e4m3fnuz = np.dtype(ml_dtypes.float8_e4m3fnuz)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
float8_e5m2fnuz = np.dtype(ml_dtypes.float8_e5m2fnuz)
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)
FLOAT8 = (
    float8_e3m4,
    float8_e4m3,
    float8_e4m3b11fnuz,
    float8_e4m3fn,
    float8_e4m3fnuz,
    float8_e5m2,
    float8_e5m2fnuz,
    float8_e8m0fnu,
)
_FLOAT8_SET = frozenset(FLOAT8)
#: The floats narrower than float32: impls compute them in float32 and round the result.
NARROW_FLOATS = (float16, bfloat16, *FLOAT8)
_NARROW_FLOAT_SET = frozenset(NARROW_FLOATS)
_FLOATING_SET = frozenset((*NARROW_FLOATS, float32, float64))
# XLA:CPU computes the 8-bit floats in float16 (float8_e8m0fnu, whose range float16 lacks, in
# float32), so an operation's result rounds to float16 before it rounds to its own type.
_FLOAT8_VIA_FLOAT16 = frozenset(d for d in FLOAT8 if d != float8_e8m0fnu)

SUPPORTED = (
    bool_,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
    bfloat16,
    float16,
    float32,
    float64,
    complex64,
    complex128,
    *FLOAT8,
)
_SUPPORTED_SET = frozenset(SUPPORTED)

_SHORT_NAMES = {
    bool_: "bool",
    int8: "i8",
    int16: "i16",
    int32: "i32",
    int64: "i64",
    uint8: "u8",
    uint16: "u16",
    uint32: "u32",
    uint64: "u64",
    bfloat16: "bf16",
    float16: "f16",
    float32: "f32",
    float64: "f64",
    complex64: "c64",
    complex128: "c128",
    # JAX's spelling: float8_e4m3fn prints as f8_e4m3fn.
    **{d: "f" + d.name[len("float") :] for d in FLOAT8},
}

_TO_32 = {int64: int32, uint64: uint32, float64: float32, complex128: complex64}


def short_name(dtype: np.dtype) -> str:
    """The jaxpr spelling of a dtype: f32, i32, bool, ..."""
    return _SHORT_NAMES[dtype]


def dtype_family(dtype: np.dtype) -> str:
    """One of 'bool', 'sint', 'uint', 'float', 'complex' (bfloat16 counts as float)."""
    if dtype == np.bool_:
        return "bool"
    if dtype.kind == "i":
        return "sint"
    if dtype.kind == "u":
        return "uint"
    if dtype.kind == "c":
        return "complex"
    return "float"


def is_floating(dtype) -> bool:
    return dtype in _FLOATING_SET


def is_float8(dtype) -> bool:
    """Whether dtype is one of the 8-bit floats."""
    return dtype in _FLOAT8_SET


def is_narrow_float(dtype) -> bool:
    """Whether dtype is a float narrower than float32 (float16, bfloat16, the float8 types),
    which impls compute in float32 before rounding (round_to_narrow)."""
    return dtype in _NARROW_FLOAT_SET


def round_to_narrow(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`value`, an operation's float32 result on operands of the narrow float `dtype`,
    rounded to `dtype` as XLA:CPU rounds it (through float16 for most 8-bit floats)."""
    if dtype in _FLOAT8_VIA_FLOAT16:
        value = value.astype(float16)
    return value.astype(dtype)


def is_complex(dtype) -> bool:
    return dtype.kind == "c"


def is_inexact(dtype) -> bool:
    return is_floating(dtype) or is_complex(dtype)


def is_integer(dtype) -> bool:
    return dtype.kind in "iu"


def is_unsigned(dtype) -> bool:
    return dtype.kind == "u"


def is_bool(dtype) -> bool:
    return dtype == bool_


def default_int() -> np.dtype:
    return int64 if config.enable_x64 else int32


def default_uint() -> np.dtype:
    return uint64 if config.enable_x64 else uint32


def default_float() -> np.dtype:
    return float64 if config.enable_x64 else float32


def to_inexact(dtype: np.dtype) -> np.dtype:
    """The floating type an integer or bool computation moves to (jnp.sin of an int array):
    float32 for types of up to 32 bits, float64 (canonicalized) for 64-bit integers."""
    if is_inexact(dtype):
        return dtype
    return canonicalize(float64 if dtype.itemsize == 8 else float32)


def default_complex() -> np.dtype:
    return complex128 if config.enable_x64 else complex64


def canonicalize(dtype: Any) -> np.dtype:
    """The dtype kiln actually uses for a request: 64-bit types narrow unless x64 is on."""
    dtype = to_dtype(dtype)
    if not config.enable_x64:
        return _TO_32.get(dtype, dtype)
    return dtype


@functools.lru_cache(maxsize=None)
def _to_dtype_cached(spec) -> np.dtype:
    if spec is bool:
        return bool_
    if spec is int:
        return int64
    if spec is float:
        return float64
    if spec is complex:
        return complex128
    dt = np.dtype(spec)
    if dt not in _SUPPORTED_SET:
        raise TypeError(
            f"kiln does not support the dtype {dt}; supported dtypes are "
            f"{', '.join(str(d) for d in SUPPORTED)}."
        )
    return dt


def to_dtype(spec: Any) -> np.dtype:
    """Turn a dtype-like (np.float32, 'float32', jnp.int8, Python int, ...) into a numpy dtype."""
    if isinstance(spec, np.dtype) and spec in _SUPPORTED_SET:
        return spec
    if hasattr(spec, "dtype") and not isinstance(spec, type):
        spec = spec.dtype
    try:
        return _to_dtype_cached(spec)
    except TypeError as err:
        if "kiln does not support" in str(err):
            raise
        raise TypeError(f"Cannot interpret {spec!r} as a dtype.") from None


# --- the promotion lattice -------------------------------------------------------------------
# Nodes are dtypes plus the three weak kinds "i*", "f*", "c*" (Python int, float, complex).
# Each edge a -> b means "a promotes to b"; the result of promoting two types is their least
# upper bound. This is the lattice JAX documents: it never silently widens to 64 bits, and mixing
# signed and unsigned or integers and floats goes to the smallest type that is safe enough.
_WEAK_INT, _WEAK_FLOAT, _WEAK_COMPLEX = "i*", "f*", "c*"

_EDGES = {
    bool_: [_WEAK_INT],
    _WEAK_INT: [uint8, int8],
    uint8: [int16, uint16],
    uint16: [int32, uint32],
    uint32: [int64, uint64],
    uint64: [_WEAK_FLOAT],
    int8: [int16],
    int16: [int32],
    int32: [int64],
    int64: [_WEAK_FLOAT],
    _WEAK_FLOAT: [*FLOAT8, bfloat16, float16, _WEAK_COMPLEX],
    bfloat16: [float32],
    float16: [float32],
    float32: [float64, complex64],
    float64: [complex128],
    _WEAK_COMPLEX: [complex64],
    complex64: [complex128],
    complex128: [],
    # The 8-bit floats sit above the weak float and below nothing: they meet only themselves,
    # integers, bools and Python ints and floats.
    **{d: [] for d in FLOAT8},
}


def _compute_upper_bounds() -> dict:
    bounds = {}
    for node in _EDGES:
        seen, stack = {node}, [node]
        while stack:
            for nxt in _EDGES[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        bounds[node] = seen
    return bounds


_UPPER_BOUNDS = _compute_upper_bounds()


def _lattice_node(dtype: np.dtype, weak: bool):
    if not weak:
        return dtype
    if dtype.kind in "iu":
        return _WEAK_INT
    if is_floating(dtype):
        return _WEAK_FLOAT
    if dtype.kind == "c":
        return _WEAK_COMPLEX
    return dtype


class TypePromotionError(ValueError):
    """Raised when values have no common type on the promotion lattice (the 8-bit floats
    promote with no other float)."""


_WEAK_NODE_NAMES = {_WEAK_INT: str(int), _WEAK_FLOAT: str(float), _WEAK_COMPLEX: str(complex)}


@functools.lru_cache(maxsize=4096)
def _join(nodes: tuple):
    common = set.intersection(*(_UPPER_BOUNDS[n] for n in nodes))
    # The least upper bound is the common bound that every other common bound is above.
    for candidate in common:
        if all(other in _UPPER_BOUNDS[candidate] for other in common):
            return candidate
    raise _promotion_error(nodes)


def _promotion_error(nodes: tuple) -> TypePromotionError:
    names = tuple(
        _WEAK_NODE_NAMES[n] if isinstance(n, str) else str(n) for n in dict.fromkeys(nodes)
    )
    message = f"Input dtypes {names} have no available implicit dtype promotion path."
    if any(n in _FLOAT8_SET for n in nodes):
        message += (
            " To avoid unintended promotion, 8-bit floats do not support implicit promotion. "
            "If you'd like your inputs to be promoted to another type, you can do so "
            "explicitly using e.g. x.astype('float32')"
        )
    else:
        message += " Try explicitly casting inputs to the desired output type."
    return TypePromotionError(message)


def _node_to_dtype(node) -> tuple[np.dtype, bool]:
    if node == _WEAK_INT:
        return default_int(), True
    if node == _WEAK_FLOAT:
        return default_float(), True
    if node == _WEAK_COMPLEX:
        return default_complex(), True
    return node, False


_PYTHON_TYPE_NODES = ((int, _WEAK_INT), (float, _WEAK_FLOAT), (complex, _WEAK_COMPLEX))


def _promotion_node(spec):
    """A dtype-like as a lattice node: the Python types int, float and complex are weak, as
    in JAX (promote_types('float16', float) is float16)."""
    for python_type, node in _PYTHON_TYPE_NODES:
        if spec is python_type:
            return node
    return to_dtype(spec)


def promote_types(a, b) -> np.dtype:
    """The dtype two dtypes promote to (jnp.promote_types)."""
    dtype, _ = _node_to_dtype(_join((_promotion_node(a), _promotion_node(b))))
    return canonicalize(dtype)


def result_type_with_weak(*items: tuple[np.dtype, bool]) -> tuple[np.dtype, bool]:
    """Promote (dtype, weak_type) pairs; the result is weak only if every input is weak."""
    if len(items) == 1:
        dtype, weak = items[0]
        return canonicalize(dtype), weak
    return _result_type_cached(items, config.enable_x64)


@functools.lru_cache(maxsize=4096)
def _result_type_cached(items: tuple, x64: bool) -> tuple[np.dtype, bool]:
    if all(w for _, w in items):
        # All weak: values of a non-default type (a weak int8 array) promote as their strong
        # type, so two of them stay int8 instead of widening to the default integer; values of
        # the default type (Python scalars) stay the weak kinds, so a weak float16 array times
        # 2.5 stays float16. The result is weak either way.
        defaults = (default_int(), default_float(), default_complex())
        node = _join(tuple(_lattice_node(d, d in defaults) for d, _ in items))
        return canonicalize(_node_to_dtype(node)[0]), True
    node = _join(tuple(_lattice_node(d, w) for d, w in items))
    dtype, weak = _node_to_dtype(node)
    return canonicalize(dtype), weak


# --- Python ints ------------------------------------------------------------------------------
# A Python int is typed as the default integer (int32, or int64 with x64) before it meets any
# other operand, as in JAX: a value outside that type's range raises OverflowError instead of
# wrapping. Inside the range it then converts to whatever dtype promotion picks, wrapping like
# convert_element_type (an int8 array + 200 gives int8 values, as JAX does).
_INT32_BOUND, _INT64_BOUND = 1 << 31, 1 << 63


def python_int_dtype(value: int) -> np.dtype:
    """The dtype a Python int takes, int32 (int64 with x64); OverflowError if it does not fit."""
    if config.enable_x64:
        if -_INT64_BOUND <= value < _INT64_BOUND:
            return int64
    elif -_INT32_BOUND <= value < _INT32_BOUND:
        return int32
    raise _int_overflow_error(value)


def _int_overflow_error(value: int) -> OverflowError:
    if config.enable_x64:
        rule, fix = "int64", "a float or an array of an explicit dtype (np.uint64)"
    else:
        rule, fix = "int32 while jax_enable_x64 is off", "a float, or enable jax_enable_x64,"
    return OverflowError(
        f"Python int {value} too large to convert to {default_int().name}. Python ints take "
        f"the default integer type, {rule}; use {fix} for larger values."
    )


def check_argument(x: Any, path: str) -> None:
    """Raise OverflowError naming the argument when `x`, an argument of a jitted function,
    is a Python int outside the default integer type."""
    if isinstance(x, int) and not isinstance(x, bool):
        try:
            python_int_dtype(x)
        except OverflowError as err:
            raise OverflowError(
                f"An overflow was encountered while parsing an argument to a jitted "
                f"computation, whose argument path is {path}. Got {type(x)} with value {x}: "
                f"{err}"
            ) from None


def dtype_and_weak_of(x: Any) -> tuple[np.dtype, bool]:
    """The (dtype, weak_type) kiln assigns to a value: arrays, tracers, scalars, NumPy values.
    A Python int out of the default integer type's range raises OverflowError."""
    value = getattr(x, "_value", None)  # kiln.Array, without building its aval
    if value is not None and hasattr(x, "weak_type"):
        return value.dtype, x.weak_type
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval.dtype, aval.weak_type
    if isinstance(x, (np.ndarray, np.generic)):  # before the Python types: np.float64 is a float
        return canonicalize(x.dtype), False
    if isinstance(x, bool):
        return bool_, False
    if isinstance(x, int):
        return python_int_dtype(x), True
    if isinstance(x, float):
        return default_float(), True
    if isinstance(x, complex):
        return default_complex(), True
    raise TypeError(f"{type(x).__name__} is not a valid kiln type.")


def result_type(*args: Any) -> np.dtype:
    """jnp.result_type: the dtype a computation mixing these values produces."""
    items = []
    for a in args:
        if isinstance(a, (np.dtype, type, str)) or a is None:
            items.append((to_dtype(a if a is not None else float), False))
        elif type(a) is int:  # only the type is asked for: no range check (JAX's behaviour)
            items.append((default_int(), True))
        else:
            items.append(dtype_and_weak_of(a))
    return result_type_with_weak(*items)[0]


def finfo(dtype):
    return ml_dtypes.finfo(to_dtype(dtype))


def iinfo(dtype):
    return ml_dtypes.iinfo(to_dtype(dtype))


def _is_narrow_float_spec(spec) -> bool:
    try:
        return is_narrow_float(to_dtype(spec))
    except TypeError:  # an abstract class such as np.floating
        return False


def issubdtype(a, b) -> bool:
    if b in (np.floating, np.inexact, np.number, np.generic) and _is_narrow_float_spec(a):
        return True  # bfloat16 and the float8 types are NumPy void types, but floats to kiln
    return np.issubdtype(
        to_dtype(a) if not isinstance(a, type) or a in (bool, int, float) else a, b
    )

"""JAX's scalar types (`kiln.numpy.float32`, ...) and dtype queries (dtype, issubdtype, isdtype,
can_cast).

A scalar type is two things at once: calling it makes a kiln array (`jnp.float32(2)` is
`Array(2., dtype=float32)`, not a NumPy scalar), and it stands for its dtype everywhere a dtype
is accepted (`np.dtype(jnp.float32)`, `x.astype(jnp.int8)`, `jnp.zeros(3, jnp.bfloat16)`),
because NumPy reads the class's `dtype` attribute and the class compares equal to NumPy's type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core import dtypes as _dtypes

__all__ = [
    "bool_",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "int_",
    "uint",
    "float_",
    "complex_",
    "single",
    "double",
    "half",
    "csingle",
    "cdouble",
    "generic",
    "number",
    "integer",
    "signedinteger",
    "unsignedinteger",
    "inexact",
    "floating",
    "complexfloating",
    "dtype",
    "issubdtype",
    "isdtype",
    "can_cast",
]

# NumPy's abstract scalar hierarchy, for issubdtype(x.dtype, jnp.floating) and friends.
generic, number, integer = np.generic, np.number, np.integer
signedinteger, unsignedinteger = np.signedinteger, np.unsignedinteger
inexact, floating, complexfloating = np.inexact, np.floating, np.complexfloating
dtype = np.dtype  # noqa: A001 (as in JAX; NumPy knows "bfloat16" once ml_dtypes is imported)


class _ScalarMeta(type):
    """The metaclass of kiln's scalar types: calling the type converts to a kiln array."""

    dtype: np.dtype

    def __call__(cls, x: Any):
        from kiln.numpy.creation import asarray

        return asarray(x, dtype=cls.dtype)

    def __eq__(cls, other) -> bool:
        return cls is other or cls.dtype.type == other

    def __ne__(cls, other) -> bool:
        return not cls.__eq__(other)

    def __hash__(cls) -> int:
        return hash(cls.dtype.type)

    def __instancecheck__(cls, instance) -> bool:
        # As in JAX: kiln arrays are not instances of a scalar type (jnp.float32(2) is an
        # Array), but NumPy scalars of the same type are.
        return isinstance(instance, cls.dtype.type)

    def __repr__(cls) -> str:
        return f"<class 'kiln.numpy.{cls.__name__}'>"

    __str__ = __repr__


def _make_scalar_type(name: str, np_dtype: np.dtype) -> _ScalarMeta:
    doc = (
        f"The {np_dtype.name} scalar type: `{name}(x)` converts x to a kiln array of dtype "
        f"{np_dtype.name}; `{name}` itself can be used wherever a dtype is expected."
    )
    return _ScalarMeta(
        name, (object,), {"dtype": np_dtype, "__doc__": doc, "__module__": "kiln.numpy"}
    )


bool_ = _make_scalar_type("bool_", _dtypes.bool_)
int8 = _make_scalar_type("int8", _dtypes.int8)
int16 = _make_scalar_type("int16", _dtypes.int16)
int32 = _make_scalar_type("int32", _dtypes.int32)
int64 = _make_scalar_type("int64", _dtypes.int64)
uint8 = _make_scalar_type("uint8", _dtypes.uint8)
uint16 = _make_scalar_type("uint16", _dtypes.uint16)
uint32 = _make_scalar_type("uint32", _dtypes.uint32)
uint64 = _make_scalar_type("uint64", _dtypes.uint64)
float16 = _make_scalar_type("float16", _dtypes.float16)
bfloat16 = _make_scalar_type("bfloat16", _dtypes.bfloat16)
float32 = _make_scalar_type("float32", _dtypes.float32)
float64 = _make_scalar_type("float64", _dtypes.float64)
complex64 = _make_scalar_type("complex64", _dtypes.complex64)
complex128 = _make_scalar_type("complex128", _dtypes.complex128)

# NumPy's aliases; the 64-bit ones narrow to 32 bits unless x64 is enabled.
int_, uint, float_, complex_ = int64, uint64, float64, complex128
single, double, half, csingle, cdouble = float32, float64, float16, complex64, complex128

_ABSTRACT = (
    np.generic,
    np.number,
    np.integer,
    np.signedinteger,
    np.unsignedinteger,
    np.inexact,
    np.floating,
    np.complexfloating,
    np.bool_,
)


def _as_dtype_or_abstract(x: Any):
    """A concrete np.dtype, or one of NumPy's abstract scalar classes left as it is."""
    if isinstance(x, type) and x in _ABSTRACT[:-1]:
        return x
    if isinstance(x, np.dtype):
        return x
    return _dtypes.to_dtype(x)


def issubdtype(arg1: Any, arg2: Any) -> bool:
    """Whether dtype arg1 is arg2 or below it in NumPy's type hierarchy (bfloat16 counts as a
    floating type, unlike in NumPy)."""
    a = _as_dtype_or_abstract(arg1)
    b = _as_dtype_or_abstract(arg2)
    if isinstance(b, np.dtype):
        return isinstance(a, np.dtype) and a == b
    if isinstance(a, np.dtype) and _dtypes.is_narrow_float(a) and a != _dtypes.float16:
        return b in (np.floating, np.inexact, np.number, np.generic)
    return bool(np.issubdtype(a, b))


_KINDS = {
    "bool": lambda d: d == _dtypes.bool_,
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.kind in "iu",
    "real floating": _dtypes.is_floating,
    "complex floating": lambda d: d.kind == "c",
    "numeric": lambda d: d != _dtypes.bool_,
}


def isdtype(dtype: Any, kind: Any) -> bool:  # noqa: A002 (the Array API's name)
    """The Array API's dtype test: kind is a dtype, one of 'bool', 'signed integer',
    'unsigned integer', 'integral', 'real floating', 'complex floating', 'numeric', or a
    tuple of those."""
    d = _dtypes.to_dtype(dtype)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if isinstance(k, str):
            if k not in _KINDS:
                raise ValueError(
                    f"Unrecognized kind: {k!r}; expected a dtype or one of "
                    f"{', '.join(map(repr, _KINDS))}"
                )
            if _KINDS[k](d):
                return True
        elif _dtypes.to_dtype(k) == d:
            return True
    return False


def can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    """Whether values of dtype from_ (a dtype or an array) can be cast to dtype `to` under the
    given casting rule ('no', 'equiv', 'safe', 'same_kind', 'unsafe'), as NumPy decides."""
    if isinstance(from_, (bool, int, float, complex)):
        raise TypeError(
            "can_cast() does not support Python ints, floats, and complex because "
            "the result used to depend on the value; pass a dtype or an array."
        )
    source = _dtypes.to_dtype(from_)
    return bool(np.can_cast(source, _dtypes.to_dtype(to), casting))

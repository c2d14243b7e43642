"""kiln.dtypes: dtype utilities as JAX's jax.dtypes offers them: float0 (the tangent type of
integer values), canonicalization (64-bit types narrow unless x64 is on), the promotion
lattice's result_type, and NumPy-style queries that know bfloat16."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core import dtypes as _dtypes
from kiln.core.ad_util import float0
from kiln.numpy.scalar_types import issubdtype

__all__ = [
    "TypePromotionError",
    "bfloat16",
    "canonicalize_dtype",
    "finfo",
    "float0",
    "iinfo",
    "issubdtype",
    "itemsize_bits",
    "result_type",
    "scalar_type_of",
]

TypePromotionError = _dtypes.TypePromotionError
bfloat16 = _dtypes.bfloat16
finfo = _dtypes.finfo
iinfo = _dtypes.iinfo


def canonicalize_dtype(dtype: Any, allow_extended_dtype: bool = False) -> np.dtype:
    """The dtype kiln uses for a request: float64/int64/uint64/complex128 become their
    32-bit forms unless x64 is enabled."""
    return _dtypes.canonicalize(dtype)


def result_type(*args: Any, return_weak_type_flag: bool = False):
    """The dtype of an operation on `args` under kiln's (JAX's) promotion lattice, where
    Python scalars are weakly typed; with `return_weak_type_flag`, also whether the result
    is weak."""
    dtype, weak = _dtypes.result_type_with_weak(*(_dtypes.dtype_and_weak_of(a) for a in args))
    dtype = _dtypes.canonicalize(dtype)
    return (dtype, weak) if return_weak_type_flag else dtype


def scalar_type_of(x: Any) -> type:
    """The Python scalar type (bool, int, float or complex) of the values of x."""
    dtype = np.dtype(x.dtype) if hasattr(x, "dtype") else _dtypes.dtype_and_weak_of(x)[0]
    if dtype == np.bool_:
        return bool
    if _dtypes.is_integer(dtype):
        return int
    if _dtypes.is_floating(dtype):
        return float
    if _dtypes.is_complex(dtype):
        return complex
    raise TypeError(f"Invalid scalar value {x!r}")


def itemsize_bits(dtype: Any) -> int:
    """The number of bits one element of `dtype` occupies."""
    dtype = np.dtype(dtype)
    if dtype == float0:
        return 0
    return dtype.itemsize * 8

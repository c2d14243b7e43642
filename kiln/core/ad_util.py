"""The vocabulary shared by the derivative rules and the interpreters that read them.

* A tangent or cotangent of `None` is a symbolic zero: rules skip the work it would cost.
* `UndefinedPrimal(aval)` stands, in a transpose rule's arguments, for an input the rule is
  linear in: the value is not known, only its shape and dtype, and the rule returns that
  argument's cotangent. Every other argument is an ordinary (known) value.
* `float0` is the dtype of the tangent of an integer or boolean value (it has no bits).
"""

from __future__ import annotations

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray

#: The tangent dtype of integer and boolean values, as in JAX (a zero-width void).
float0 = np.dtype([("float0", np.void, 0)])


class UndefinedPrimal:
    """A linear input of a transpose rule: its aval only."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    @property
    def shape(self) -> tuple:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return len(self.aval.shape)

    def __repr__(self) -> str:
        return f"UndefinedPrimal({self.aval.str_short()})"


def is_undefined_primal(x) -> bool:
    return type(x) is UndefinedPrimal


def has_tangent_space(dtype: np.dtype) -> bool:
    """Whether values of `dtype` carry tangents (float and complex do; integers, bools don't)."""
    return dtypes.is_inexact(dtype)


def tangent_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(dtype) if has_tangent_space(dtype) else float0


def float0_zeros(shape) -> np.ndarray:
    """The (only) tangent of an integer value of `shape`: a float0 array."""
    return np.zeros(tuple(shape), dtype=float0)

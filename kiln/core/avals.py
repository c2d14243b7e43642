"""Abstract values: what tracing knows about an array (shape, dtype, weak type), not its data."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.core import dtypes


class ShapedArray:
    """The abstract value of an array: shape, dtype and whether the dtype is weak."""

    __slots__ = ("shape", "dtype", "weak_type")
    array_abstraction_level = 1

    def __init__(self, shape: tuple, dtype: Any, weak_type: bool = False):
        self.shape = tuple(shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else dtypes.to_dtype(dtype)
        self.weak_type = bool(weak_type)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))

    def update(self, shape=None, dtype=None, weak_type=None) -> "ShapedArray":
        return ShapedArray(
            self.shape if shape is None else shape,
            self.dtype if dtype is None else dtype,
            self.weak_type if weak_type is None else weak_type,
        )

    def strip_weak_type(self) -> "ShapedArray":
        return self if not self.weak_type else ShapedArray(self.shape, self.dtype, False)

    def __eq__(self, other) -> bool:
        return (
            type(other) is ShapedArray
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.weak_type == other.weak_type
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.weak_type))

    def str_short(self) -> str:
        """The jaxpr spelling: f32[3,4]."""
        return f"{dtypes.short_name(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __repr__(self) -> str:
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({self.dtype.name}[{','.join(map(str, self.shape))}]{weak})"

    __str__ = __repr__


def raise_to_shaped(aval: ShapedArray, weak_type: bool | None = None) -> ShapedArray:
    return aval if weak_type is None else aval.update(weak_type=weak_type)


def get_aval(x: Any) -> ShapedArray:
    """The abstract value of anything kiln accepts as an array argument."""
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval
    dtype, weak = dtypes.dtype_and_weak_of(x)
    return ShapedArray(np.shape(x), dtype, weak)

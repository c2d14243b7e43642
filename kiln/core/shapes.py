"""Shape validation shared by primitives and kiln.numpy: shapes must be concrete integers."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np


def _concrete_dim(d: Any) -> int:
    from kiln.core.trace import Tracer

    if isinstance(d, Tracer):
        value = d.to_concrete_value()
        if value is None:
            raise TypeError
        d = value
    if isinstance(d, (bool, np.bool_)):
        raise TypeError
    return operator.index(d)


def canonicalize_shape(shape: Any, context: str = "") -> tuple[int, ...]:
    """A tuple of non-negative ints, or a TypeError that says why and suggests static_argnums."""
    if isinstance(shape, (int, np.integer)) or (
        hasattr(shape, "shape") and getattr(shape, "ndim", 1) == 0
    ):
        shape = (shape,)
    try:
        dims = tuple(_concrete_dim(d) for d in shape)
    except TypeError:
        from kiln.core.trace import Tracer

        msg = (
            "Shapes must be 1D sequences of concrete values of integer type, "
            f"got {tuple(shape) if not isinstance(shape, tuple) else shape}."
        )
        if any(isinstance(d, Tracer) for d in shape):
            msg += (
                "\nIf using `jit`, try using `static_argnums` or applying `jit` to smaller "
                "subfunctions."
            )
            for d in shape:
                if isinstance(d, Tracer) and d._origin_msg():
                    msg += "\n" + d._origin_msg()
                    break
        raise TypeError(context + msg) from None
    for d in dims:
        if d < 0:
            raise TypeError(f"{context}Shape dimensions must be non-negative, got {dims}.")
    return dims

"""lax.Precision: the precision argument of dot_general, conv and friends.

On accelerators it trades speed for precision (bfloat16 passes vs float32). kiln computes
float32 products in float32 on the CPU whatever is asked, as XLA's CPU backend does, so the
value is accepted (as an enum member or any of JAX's strings) and does not change results.
"""

from __future__ import annotations

import enum

__all__ = ["Precision"]

_NAMES = {
    "default": "DEFAULT",
    "fastest": "DEFAULT",
    "bfloat16": "DEFAULT",
    "high": "HIGH",
    "bfloat16_3x": "HIGH",
    "tensorfloat32": "HIGH",
    "highest": "HIGHEST",
    "float32": "HIGHEST",
}


class Precision(enum.Enum):
    """DEFAULT, HIGH or HIGHEST; `Precision("highest")` and the other strings JAX accepts
    name the same members."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, str) and value.lower() in _NAMES:
            return cls[_NAMES[value.lower()]]
        return None

    def __str__(self) -> str:
        return self.name

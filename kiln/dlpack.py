"""kiln.dlpack: exchange arrays with other libraries (NumPy, PyTorch, CuPy on the host) through
the DLPack protocol, without copying where the dtype allows.

kiln.Array gets `__dlpack__` and `__dlpack_device__` here; the exported buffer is the array's
own, which kiln never writes again (consumers must not write it either).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core import dtypes
from kiln.core.array import Array

__all__ = ["from_dlpack", "is_supported_dtype"]

_KDLCPU = 1  # DLPack's device type for host memory


def is_supported_dtype(dtype: Any) -> bool:
    """Whether arrays of `dtype` can cross the DLPack boundary into or out of kiln."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return False
    return dtype.kind in "biufc" or dtype == dtypes.bfloat16


def from_dlpack(external_array: Any, device: Any = None, copy: bool | None = None) -> Array:
    """A kiln array holding the data of any object with `__dlpack__` (zero-copy when the
    dtype is one kiln uses as it is; a copy when x64 is off and the dtype is 64-bit, or when
    `copy=True`)."""
    if device is not None and getattr(device, "platform", device) != "cpu":
        raise ValueError(f"kiln arrays live on the host CPU; got device {device!r}")
    if hasattr(external_array, "__dlpack__"):
        value = np.from_dlpack(external_array, copy=copy)
    else:
        raise TypeError(
            f"from_dlpack needs an object with a __dlpack__ method, got {type(external_array)}"
        )
    if not is_supported_dtype(value.dtype):
        raise TypeError(f"kiln does not support arrays of dtype {value.dtype} from DLPack")
    target = dtypes.canonicalize(value.dtype)
    if value.dtype != target:
        value = value.astype(target)
    return Array._wrap(value)


def _array_dlpack(self: Array, *, stream=None, max_version=None, dl_device=None, copy=None):
    if stream is not None:
        raise BufferError("kiln arrays live on the host CPU; a stream cannot be used")
    kwargs = {} if max_version is None else {"max_version": max_version}
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    if copy is not None:
        kwargs["copy"] = copy
    return self._value.__dlpack__(**kwargs)


def _array_dlpack_device(self: Array) -> tuple[int, int]:
    return (_KDLCPU, 0)


Array.__dlpack__ = _array_dlpack
Array.__dlpack_device__ = _array_dlpack_device

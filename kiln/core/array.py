"""kiln.Array: an immutable array backed by a read-only NumPy buffer.

The buffer is never written after creation, so `np.asarray(x)` can hand out a read-only view
without copying. Array is the value every layer handles, so it lives in core/ and depends on
core/ only; its operators and methods are attached from above by `kiln.numpy.array_methods`.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray

_IMMUTABLE_MSG = (
    "'{}' object does not support item assignment. JAX arrays are immutable. Instead of "
    "x[idx] = y, use x = x.at[idx].set(y) or another .at[] method: "
    "https://jax.readthedocs.io/en/latest/_autosummary/jax.numpy.ndarray.at.html"
)


class Device:
    """The one device kiln computes on for now: the host CPU."""

    platform = "cpu"
    device_kind = "cpu"
    id = 0

    def __repr__(self) -> str:
        return "CpuDevice(id=0)"


CPU = Device()


class _DeletedBuffer:
    """What a deleted Array holds in place of its buffer (after donating it to a jitted call):
    its shape and dtype stay readable, as in JAX; reading the data raises RuntimeError."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: np.dtype):
        self.shape, self.dtype = shape, dtype

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(math.prod(self.shape)))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def _error(self) -> RuntimeError:
        dims = ",".join(str(d) for d in self.shape)
        return RuntimeError(f"Array has been deleted with shape={self.dtype.name}[{dims}].")

    def __getattr__(self, name):
        raise self._error()

    def __array__(self, *args, **kwargs):
        raise self._error()

    def __getitem__(self, index):
        raise self._error()


class Array:
    """An immutable n-dimensional array (what kiln functions take and return)."""

    # _sig: (shape, dtype, weak_type), made on first use by jit's call path and kept (the
    # Array never changes, so neither does its signature).
    __slots__ = ("_value", "weak_type", "_aval", "_address", "_readonly", "_sig", "__weakref__")
    __array_priority__ = 100

    def __init__(self, value, dtype=None, weak_type: bool = False):
        value = np.array(value, dtype=dtype)
        dtype = dtypes.canonicalize(value.dtype)
        if value.dtype != dtype:
            value = value.astype(dtype)
        self._value = value
        self.weak_type = weak_type
        self._aval = None
        self._address = None
        self._readonly = None
        self._sig = None

    @staticmethod
    def _wrap(
        value: np.ndarray, weak_type: bool = False, signature: tuple | None = None
    ) -> "Array":
        """Wrap a NumPy buffer that kiln owns (no copy). kiln never writes it again; the
        read-only flag is set on the views handed out by `__array__` rather than here, because
        setting it costs as much as a small multiply. `signature`: the buffer's (shape, dtype,
        weak_type) as an interned tuple (runtime.cache.intern_signature), when the caller
        knows it: a jitted call's outputs carry it, so passing them to the next call needs no
        signature work."""
        out = object.__new__(Array)
        out._value = value
        out.weak_type = weak_type
        out._aval = None
        out._address = None
        out._readonly = None
        out._sig = signature
        return out

    @property
    def aval(self) -> ShapedArray:
        aval = self._aval
        if aval is None:
            aval = self._aval = ShapedArray(self._value.shape, self._value.dtype, self.weak_type)
        return aval

    @property
    def shape(self) -> tuple:
        return self._value.shape

    @property
    def dtype(self) -> np.dtype:
        return self._value.dtype

    @property
    def ndim(self) -> int:
        return self._value.ndim

    @property
    def size(self) -> int:
        return self._value.size

    @property
    def nbytes(self) -> int:
        return self._value.nbytes

    @property
    def itemsize(self) -> int:
        return self._value.itemsize

    def buffer_address(self) -> int:
        """The address of the data, cached: the native call path passes it to compiled code."""
        address = self._address
        if address is None:
            address = self._address = self._value.__array_interface__["data"][0]
        return address

    # --- host interop -------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        value = self._value
        if dtype is not None and np.dtype(dtype) != value.dtype:
            if copy is False:
                raise ValueError("converting the dtype of a kiln.Array requires a copy")
            return value.astype(dtype)
        if copy:
            return value.copy()
        view = self._readonly
        if view is None:
            view = value.view()
            view.flags.writeable = False
            self._readonly = view
        return view

    def is_deleted(self) -> bool:
        """Whether the buffer is gone (donated to a jitted call, or `delete()`d)."""
        return type(self._value) is _DeletedBuffer

    def delete(self) -> None:
        """Release the buffer; any later use of the data raises RuntimeError."""
        self._value = _DeletedBuffer(self._value.shape, self._value.dtype)
        self._address = self._readonly = None

    def block_until_ready(self) -> "Array":
        """Computation is synchronous on the CPU, so the array is always ready."""
        return self

    def copy_to_host_async(self) -> None:
        return None

    def is_ready(self) -> bool:
        return True

    @property
    def device(self) -> Device:
        return CPU

    def devices(self) -> set:
        return {CPU}

    def item(self, *args):
        return self._value.item(*args)

    def tolist(self):
        return self._value.tolist()

    def _numpy(self) -> np.ndarray:
        """The read-only NumPy view of the data (what np.asarray returns)."""
        return self.__array__()

    def __reduce__(self):
        return (_rebuild, (np.array(self._value), self.weak_type))

    # --- Python protocol ----------------------------------------------------------------
    def __setitem__(self, index, value):
        raise TypeError(_IMMUTABLE_MSG.format(type(self)))

    __hash__ = None  # arrays compare elementwise, so they cannot be hashed

    def __len__(self) -> int:
        if not self._value.ndim:
            raise TypeError("len() of unsized object")
        return self._value.shape[0]

    def __iter__(self):
        if not self._value.ndim:
            raise TypeError("iteration over a 0-d array")
        weak = self.weak_type
        return (Array._wrap(np.asarray(row), weak) for row in self._value)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __int__(self) -> int:
        return int(self._value)

    def __float__(self) -> float:
        return float(self._value)

    def __complex__(self) -> complex:
        return complex(self._value)

    def __index__(self) -> int:
        if not dtypes.is_integer(self._value.dtype):
            raise TypeError(f"only integer arrays can be used as an index, not {self._value.dtype}")
        return int(self._value)

    def __format__(self, spec: str) -> str:
        if self._value.ndim == 0:
            return format(self._value[()], spec)
        if spec:
            raise TypeError(
                f"unsupported format string {spec!r} passed to Array.__format__ "
                f"for an array of shape {self._value.shape}"
            )
        return str(self)

    def __str__(self) -> str:
        return str(self._value)

    def __repr__(self) -> str:
        prefix = "Array("
        dtype_str = f"dtype={self._value.dtype.name}"
        dtype_str += ", weak_type=True)" if self.weak_type else ")"
        width = np.get_printoptions()["linewidth"]
        if self._value.size == 0:
            body = f"[], shape={self._value.shape}"
        else:
            body = np.array2string(
                self._value, prefix=prefix, suffix=",", separator=", ", max_line_width=width
            )
        last_line = len(body) - body.rfind("\n") + 1
        sep = " " * len(prefix) if last_line + len(dtype_str) + 1 > width else " "
        return f"{prefix}{body},{sep}{dtype_str}"


def _rebuild(value: np.ndarray, weak_type: bool) -> Array:
    return Array._wrap(value, weak_type)

"""Names of JAX's numpy namespace that are other names, small queries or host utilities: the
Array API's spellings (acos, pow, bitwise_invert, ...), more scalar types (bool, the narrow
float and int types of ml_dtypes), type and value queries (isscalar, iscomplexobj, ...),
printing options, file and buffer input/output, and the index helpers r_, c_, s_, index_exp.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.trace import Tracer
from kiln.numpy import ufuncs as _ufuncs
from kiln.numpy.creation import array, asarray
from kiln.numpy.scalar_types import _make_scalar_type
from kiln.numpy.util import check_arraylike, to_kiln

__all__ = [
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "pow",
    "bitwise_count",
    "astype",
    "bool",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "int1",
    "int2",
    "int4",
    "uint1",
    "uint2",
    "uint4",
    "euler_gamma",
    "character",
    "flexible",
    "object_",
    "ComplexWarning",
    "isscalar",
    "iterable",
    "iscomplexobj",
    "isrealobj",
    "iscomplex",
    "isreal",
    "array_str",
    "array_repr",
    "printoptions",
    "set_printoptions",
    "get_printoptions",
    "save",
    "savez",
    "load",
    "frombuffer",
    "fromstring",
    "fromiter",
    "fromfile",
    "frompyfunc",
    "from_dlpack",
    "r_",
    "c_",
    "s_",
    "index_exp",
]

# --- the Array API's names --------------------------------------------------------------------
acos = _ufuncs.arccos
acosh = _ufuncs.arccosh
asin = _ufuncs.arcsin
asinh = _ufuncs.arcsinh
atan = _ufuncs.arctan
atan2 = _ufuncs.arctan2
atanh = _ufuncs.arctanh
bitwise_invert = _ufuncs.invert
bitwise_left_shift = _ufuncs.left_shift
bitwise_right_shift = _ufuncs.right_shift
pow = _ufuncs.power  # noqa: A001 (the Array API's name)


def bitwise_count(x, /):
    """The number of 1 bits in the absolute value of each integer (uint8, as NumPy)."""
    check_arraylike("bitwise_count", x)
    x = to_kiln(x)
    if not (dtypes.is_integer(x.dtype) or x.dtype == dtypes.bool_):
        raise TypeError(f"bitwise_count requires integer or bool inputs, got {x.dtype}")
    if x.dtype == dtypes.bool_:
        return lax.convert_element_type(x, dtypes.uint8)
    if not dtypes.is_unsigned(x.dtype):
        x = lax.abs(x)  # the most negative value stays negative; its bits count as its magnitude
    return lax.convert_element_type(lax.population_count(x), dtypes.uint8)


def astype(x, dtype, /, *, copy: bool = False, device=None):
    """x converted to `dtype` (the Array API's function form of x.astype)."""
    check_arraylike("astype", x)
    x = to_kiln(x)
    return lax.convert_element_type(x, dtypes.to_dtype(dtype))


# --- scalar types -------------------------------------------------------------------------------
# The narrow types come from ml_dtypes. They name dtypes anywhere one is accepted; kiln arrays
# of them need the core to list them among its supported dtypes.
bool = _make_scalar_type("bool", dtypes.bool_)  # noqa: A001 (NumPy 2's name)
float8_e3m4 = _make_scalar_type("float8_e3m4", np.dtype(ml_dtypes.float8_e3m4))
float8_e4m3 = _make_scalar_type("float8_e4m3", np.dtype(ml_dtypes.float8_e4m3))
float8_e4m3b11fnuz = _make_scalar_type("float8_e4m3b11fnuz", np.dtype(ml_dtypes.float8_e4m3b11fnuz))
float8_e4m3fn = _make_scalar_type("float8_e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn))
float8_e4m3fnuz = _make_scalar_type("float8_e4m3fnuz", np.dtype(ml_dtypes.float8_e4m3fnuz))
float8_e5m2 = _make_scalar_type("float8_e5m2", np.dtype(ml_dtypes.float8_e5m2))
float8_e5m2fnuz = _make_scalar_type("float8_e5m2fnuz", np.dtype(ml_dtypes.float8_e5m2fnuz))
float8_e8m0fnu = _make_scalar_type("float8_e8m0fnu", np.dtype(ml_dtypes.float8_e8m0fnu))
float4_e2m1fn = _make_scalar_type("float4_e2m1fn", np.dtype(ml_dtypes.float4_e2m1fn))
float6_e2m3fn = _make_scalar_type("float6_e2m3fn", np.dtype(ml_dtypes.float6_e2m3fn))
float6_e3m2fn = _make_scalar_type("float6_e3m2fn", np.dtype(ml_dtypes.float6_e3m2fn))
int1 = _make_scalar_type("int1", np.dtype(ml_dtypes.int1))
int2 = _make_scalar_type("int2", np.dtype(ml_dtypes.int2))
int4 = _make_scalar_type("int4", np.dtype(ml_dtypes.int4))
uint1 = _make_scalar_type("uint1", np.dtype(ml_dtypes.uint1))
uint2 = _make_scalar_type("uint2", np.dtype(ml_dtypes.uint2))
uint4 = _make_scalar_type("uint4", np.dtype(ml_dtypes.uint4))

euler_gamma = 0.5772156649015329
# NumPy's abstract scalar classes that kiln arrays never have, for issubdtype checks
character, flexible, object_ = np.character, np.flexible, np.object_
ComplexWarning = np.exceptions.ComplexWarning


# --- queries ------------------------------------------------------------------------------------
def isscalar(element: Any) -> bool:
    """Whether `element` is a scalar: a Python or NumPy scalar, or a rank-0 array (as JAX)."""
    if isinstance(element, (Array, Tracer)):
        return element.ndim == 0
    if isinstance(element, np.ndarray):
        return element.ndim == 0
    return np.isscalar(element)


def iterable(y: Any) -> bool:
    """Whether iter(y) works."""
    return np.iterable(y)


def _dtype_of(x: Any) -> np.dtype:
    return x.dtype if hasattr(x, "dtype") else dtypes.dtype_and_weak_of(x)[0]


def iscomplexobj(x: Any) -> bool:
    """Whether x has a complex dtype (whatever its values)."""
    if x is None:
        return False
    try:
        return dtypes.is_complex(np.dtype(_dtype_of(x)))
    except TypeError:
        return np.iscomplexobj(x)


def isrealobj(x: Any) -> bool:
    """Whether x does not have a complex dtype."""
    return not iscomplexobj(x)


def iscomplex(x, /):
    """Elementwise: whether the imaginary part is non-zero."""
    check_arraylike("iscomplex", x)
    x = to_kiln(x)
    return (
        _ufuncs.not_equal(_ufuncs.imag(x), 0)
        if dtypes.is_complex(x.dtype)
        else (lax.full(x.shape, False, dtypes.bool_))
    )


def isreal(x, /):
    """Elementwise: whether the imaginary part is zero."""
    check_arraylike("isreal", x)
    x = to_kiln(x)
    return (
        _ufuncs.equal(_ufuncs.imag(x), 0)
        if dtypes.is_complex(x.dtype)
        else (lax.full(x.shape, True, dtypes.bool_))
    )


# --- printing -----------------------------------------------------------------------------------
# Arrays print through NumPy, so NumPy's print options are kiln's.
printoptions = np.printoptions
set_printoptions = np.set_printoptions
get_printoptions = np.get_printoptions


def array_str(a, max_line_width=None, precision=None, suppress_small=None) -> str:
    """The data of `a` as a string, without the type (NumPy's array_str)."""
    return np.array_str(np.asarray(a), max_line_width, precision, suppress_small)


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None) -> str:
    """NumPy's array_repr of the data, spelled as a kiln Array."""
    text = np.array_repr(np.asarray(arr), max_line_width, precision, suppress_small)
    return "Array" + text[len("array") :] if text.startswith("array") else text


# --- input and output ---------------------------------------------------------------------------
save = np.save
savez = np.savez


def load(file, *args, **kwargs):
    """NumPy's load; an array read from an .npy file comes back as a kiln array (.npz archives
    come back as NumPy's lazy mapping)."""
    out = np.load(file, *args, **kwargs)
    if isinstance(out, np.ndarray):
        if out.dtype == np.dtype("V2") and out.dtype.names is None:
            # bfloat16 is saved as raw two-byte records; NumPy cannot name it back.
            out = out.view(dtypes.bfloat16)
        return asarray(out)
    return out


def frombuffer(buffer, dtype=float, count: int = -1, offset: int = 0):
    """A kiln array from the bytes of a buffer (copied: kiln arrays own their data)."""
    return asarray(np.frombuffer(buffer, dtype=dtype, count=count, offset=offset))


def fromstring(string, dtype=float, count: int = -1, *, sep: str):
    """A kiln array from the numbers in a text string separated by `sep`."""
    return asarray(np.fromstring(string, dtype=dtype, count=count, sep=sep))


def _impure(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(
            f"kiln.numpy.{name}() is not implemented because it may be non-pure and thus "
            "unsafe for use with jit and other kiln transformations. Consider using "
            f"kiln.numpy.asarray(np.{name}(...)) instead, outside any transformation (reading "
            "a file or consuming an iterator is a side effect that a trace would run once)."
        )

    refuse.__name__ = name
    refuse.__doc__ = f"Not available: np.{name} is not a pure function."
    return refuse


fromiter = _impure("fromiter")
fromfile = _impure("fromfile")
frompyfunc = _impure("frompyfunc")


# --- index helpers ------------------------------------------------------------------------------
s_ = np.s_
index_exp = np.index_exp


class _Concatenator:
    """r_ and c_: concatenation along an axis written as indexing, with slices standing for
    ranges (`start:stop:step`, or `start:stop:nj` for n evenly spaced points) and an optional
    leading string 'axis[,ndmin[,trans1d]]'."""

    def __init__(self, axis: int, ndmin: int, trans1d: int):
        self.axis, self.ndmin, self.trans1d = axis, ndmin, trans1d

    def __getitem__(self, key):
        from kiln.numpy.creation import arange, linspace
        from kiln.numpy.manipulation import concatenate, expand_dims, transpose
        from kiln.numpy.manipulation_shape import reshape

        items = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d = self.axis, self.ndmin, self.trans1d
        matrix = None
        if items and isinstance(items[0], str):
            directive, items = items[0], items[1:]
            if directive in ("r", "c"):
                matrix = directive
            else:
                parts = [int(p) for p in directive.split(",")]
                axis = parts[0]
                ndmin = parts[1] if len(parts) > 1 else ndmin
                trans1d = parts[2] if len(parts) > 2 else trans1d
        pieces = []
        for item in items:
            if isinstance(item, slice):
                start = 0 if item.start is None else item.start
                step = 1 if item.step is None else item.step
                if isinstance(step, complex):
                    piece = linspace(start, item.stop, int(abs(step)))
                else:
                    piece = arange(start, item.stop, step)
            elif isinstance(item, str):
                raise ValueError("string directive must be placed at the beginning")
            else:
                piece = asarray(item) if not isinstance(item, (Array, Tracer)) else item
            if piece.ndim < ndmin:
                added = ndmin - piece.ndim
                piece = reshape(piece, (1,) * added + tuple(piece.shape))
                if trans1d != -1 and added:
                    # NumPy's placement: the original axes start at position trans1d.
                    first = trans1d + added + 1 if trans1d < 0 else trans1d
                    axes = list(range(ndmin))
                    order = axes[:first] + axes[added:] + axes[first:added]
                    piece = transpose(piece, tuple(order))
            pieces.append(piece)
        if not pieces:
            return array([], dtype=dtypes.default_float())
        out = concatenate(pieces, axis=axis)
        if matrix == "c":
            out = expand_dims(out, 1) if out.ndim == 1 else out
        elif matrix == "r":
            out = expand_dims(out, 0) if out.ndim == 1 else out
        return out

    def __len__(self) -> int:
        return 0


r_ = _Concatenator(axis=0, ndmin=1, trans1d=-1)
c_ = _Concatenator(axis=-1, ndmin=2, trans1d=0)


def from_dlpack(x: Any, /, *, device=None, copy: bool | None = None):
    """A kiln array sharing the data of an object with `__dlpack__` (see kiln.dlpack)."""
    from kiln.dlpack import from_dlpack as _from_dlpack

    return _from_dlpack(x, device=device, copy=copy)

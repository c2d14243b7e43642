"""Array creation for kiln.numpy: arrays from host data (array, asarray), filled arrays
(zeros, ones, full and their *_like forms), ranges and grids (arange, linspace, logspace,
geomspace, meshgrid, indices, mgrid, ogrid, fromfunction) and special matrices (eye,
identity, tri).

Under tracing, filled arrays stage as a `broadcast_in_dim` of a literal and ranges as an `iota`,
as in JAX; sizes must be static (Python values), so traced sizes raise an error that says so.
"""

from __future__ import annotations

from typing import Any

import math
import operator
from typing import Callable

import numpy as np

from kiln import lax
from kiln.core import dtypes, errors
from kiln.core.array import Array
from kiln.core.shapes import canonicalize_shape
from kiln.core.trace import Tracer
from kiln.numpy.util import check_arraylike, to_kiln

__all__ = [
    "array",
    "asarray",
    "copy",
    "zeros",
    "ones",
    "full",
    "empty",
    "zeros_like",
    "ones_like",
    "full_like",
    "empty_like",
    "arange",
    "linspace",
    "logspace",
    "geomspace",
    "eye",
    "identity",
    "tri",
    "meshgrid",
    "indices",
    "mgrid",
    "ogrid",
    "fromfunction",
]


def _host_value(obj: Any, dtype) -> tuple[np.ndarray, bool]:
    """Convert a scalar, nested list/tuple or NumPy value on the host. Only a bare Python
    scalar with no requested dtype is weakly typed."""
    weak = dtype is None and type(obj) in (int, float, complex)
    if dtype is None:
        if type(obj) in (int, float, complex):
            dtype = dtypes.dtype_and_weak_of(obj)[0]
        else:
            value = np.asarray(obj)
            if value.dtype.kind not in "biufc" and not dtypes.is_floating(value.dtype):
                raise TypeError(
                    f"Cannot make a kiln array from {type(obj).__name__} holding "
                    f"{value.dtype} data; kiln arrays hold numbers and booleans."
                )
            dtype = value.dtype
    dtype = dtypes.canonicalize(dtype)
    with np.errstate(all="ignore"):
        return np.array(obj, dtype=dtype), weak


def array(object: Any, dtype=None, copy: bool = True, ndmin: int = 0) -> Any:
    """Create an array from a scalar, NumPy array, nested list/tuple or another array."""
    if isinstance(object, Array):
        out = object if dtype is None else lax.convert_element_type(object, dtype)
        if copy and out is object:
            out = Array._wrap(out._value.copy(), out.weak_type)
    elif isinstance(object, Tracer):
        # JAX stages the copy first (jnp.array(x) and jnp.copy(x) show `copy a`), then any
        # conversion.
        out = lax.copy(object) if copy else object
        if dtype is not None:
            out = lax.convert_element_type(out, dtype)
    elif isinstance(object, (list, tuple)) and any(
        isinstance(x, Tracer) or (isinstance(x, (list, tuple)) and _contains_tracer(x))
        for x in object
    ):
        from kiln.numpy.manipulation import stack

        out = stack([array(x, dtype=dtype, copy=False) for x in object])
        if out.weak_type:  # an array built from a list is strongly typed
            out = lax.convert_element_type(out, out.dtype, False)
    else:
        if (
            isinstance(object, (list, tuple))
            and object
            and all(isinstance(x, Array) for x in object)
        ):
            object = [np.asarray(x) for x in object]
        value, weak = _host_value(object, dtype)
        out = Array._wrap(value, weak)
    if ndmin > out.ndim:
        out = lax.broadcast_in_dim(
            out, (1,) * (ndmin - out.ndim) + out.shape, tuple(range(ndmin - out.ndim, ndmin))
        )
    return out


def _contains_tracer(xs) -> bool:
    return any(
        isinstance(x, Tracer) or (isinstance(x, (list, tuple)) and _contains_tracer(x)) for x in xs
    )


def asarray(
    a: Any, dtype=None, order: str | None = None, *, copy: bool | None = None, device=None
) -> Any:
    """Like `array`, without copying when `a` already is a kiln array of that dtype."""
    return array(a, dtype=dtype, copy=bool(copy))


def copy(a: Any, order: str | None = None) -> Any:
    """A copy of `a` (staged as the `copy` primitive under tracing)."""
    check_arraylike("copy", a)
    return array(a, copy=True)


# --- filled arrays ---------------------------------------------------------------------------


def _creation_shape(shape: Any, name: str) -> tuple[int, ...]:
    if isinstance(shape, (list, tuple)) or hasattr(shape, "__index__") or hasattr(shape, "ndim"):
        return canonicalize_shape(shape)
    raise TypeError(
        f"jnp.{name}: expected a sequence of integers or a single integer as the "
        f"shape, got {type(shape).__name__}."
    )


def _float_or(dtype) -> np.dtype:
    return dtypes.default_float() if dtype is None else dtypes.canonicalize(dtype)


def zeros(shape, dtype=None, *, device=None) -> Any:
    """An array of zeros (the default float type unless `dtype` says otherwise)."""
    return lax.full(_creation_shape(shape, "zeros"), 0, _float_or(dtype))


def ones(shape, dtype=None, *, device=None) -> Any:
    """An array of ones (the default float type unless `dtype` says otherwise)."""
    return lax.full(_creation_shape(shape, "ones"), 1, _float_or(dtype))


def empty(shape, dtype=None, *, device=None) -> Any:
    """Like zeros: kiln arrays are immutable, so uninitialized memory is never exposed."""
    return zeros(shape, dtype)


def full(shape, fill_value, dtype=None, *, device=None) -> Any:
    """An array of `shape` filled with `fill_value`, which may itself be an array that
    broadcasts to `shape`. With no dtype the fill value's dtype (and weak type) is kept."""
    check_arraylike("full", fill_value)
    shape = _creation_shape(shape, "full")
    if np.ndim(fill_value) if not hasattr(fill_value, "ndim") else fill_value.ndim:
        from kiln.numpy.manipulation import broadcast_to

        return broadcast_to(asarray(fill_value, dtype=dtype), shape)
    return lax.full(shape, fill_value, dtype)


def _check_like(name: str, a: Any, *others: Any) -> None:
    # Objects with a shape and dtype (arrays, ShapeDtypeStruct) describe the result; anything
    # else must be array-like.
    if hasattr(a, "dtype") and hasattr(a, "shape"):
        check_arraylike(name, *others)
    else:
        check_arraylike(name, a, *others)


def zeros_like(a, dtype=None, shape=None, *, device=None) -> Any:
    """Zeros with the shape and dtype of `a` (weakly typed if `a` is and no dtype is given)."""
    _check_like("zeros_like", a)
    shape = None if shape is None else _creation_shape(shape, "zeros_like")
    return lax.full_like(a, 0, dtype, shape)


def ones_like(a, dtype=None, shape=None, *, device=None) -> Any:
    """Ones with the shape and dtype of `a`."""
    _check_like("ones_like", a)
    shape = None if shape is None else _creation_shape(shape, "ones_like")
    return lax.full_like(a, 1, dtype, shape)


def empty_like(prototype, dtype=None, shape=None, *, device=None) -> Any:
    """Like zeros_like (kiln never exposes uninitialized memory)."""
    _check_like("empty_like", prototype)
    return zeros_like(prototype, dtype, shape)


def full_like(a, fill_value, dtype=None, shape=None, *, device=None) -> Any:
    """`fill_value` (a scalar, or an array broadcast to the shape) in the shape and dtype of
    `a`."""
    _check_like("full_like", a, fill_value)
    shape = None if shape is None else _creation_shape(shape, "full_like")
    if not (np.ndim(fill_value) if not hasattr(fill_value, "ndim") else fill_value.ndim):
        return lax.full_like(a, fill_value, dtype, shape)
    from kiln.numpy.manipulation import broadcast_to

    shape = tuple(np.shape(a) if not hasattr(a, "shape") else a.shape) if shape is None else shape
    dtype = dtypes.result_type(a) if dtype is None else dtype
    return broadcast_to(asarray(fill_value, dtype=dtype), shape)


# --- ranges ----------------------------------------------------------------------------------


def _static_scalar(fun: str, arg: str, value: Any) -> Any:
    """The concrete Python number behind a range argument; traced values are an error."""
    if isinstance(value, Tracer):
        concrete = value.to_concrete_value()
        if concrete is None:
            raise errors.ConcretizationTypeError(
                value,
                f"It arose in the jnp.{fun} argument '{arg}'. jnp.{fun} needs static "
                f"(concrete) values here because they decide the output shape: pass "
                f"Python numbers, or mark the argument static with static_argnums.\n",
            )
        value = concrete
    check_arraylike(fun, value)
    if np.ndim(value) if not hasattr(value, "ndim") else value.ndim:
        raise ValueError(
            f"jnp.{fun} argument '{arg}' must be a scalar, got shape {np.shape(value)}."
        )
    return np.asarray(value).item() if not isinstance(value, (bool, int, float, complex)) else value


def arange(start, stop=None, step=None, dtype=None, *, device=None) -> Any:
    """Evenly spaced values in [start, stop) with spacing `step`, staged as an `iota`.

    The dtype follows JAX: the promoted type of the arguments (int32 for Python ints, float32
    for Python floats when 64-bit mode is off), never weakly typed."""
    if start is None:
        raise TypeError("jnp.arange requires a start or stop value.")
    args = [("start", start), ("stop", stop), ("step", step)]
    for name, value in args:
        if value is not None and isinstance(value, Tracer) and value.to_concrete_value() is None:
            _static_scalar("arange", name, value)
    given = [v for _, v in args if v is not None]
    check_arraylike("arange", *given)
    if dtype is None:
        dtype = dtypes.result_type(*given)
    dtype = dtypes.canonicalize(dtype)
    start = _static_scalar("arange", "start", start)
    if stop is None and step is None:
        return lax.iota(dtype, max(0, math.ceil(start)))
    if stop is None:  # arange(stop, step=...) is NumPy's arange(0, stop, step)
        start, stop = 0, start
    else:
        stop = _static_scalar("arange", "stop", stop)
    step = 1 if step is None else _static_scalar("arange", "step", step)
    if step == 0:
        raise ValueError("jnp.arange: step must not be zero.")
    if all(isinstance(v, (bool, int)) for v in (start, stop, step)):
        size = max(0, -((start - stop) // step))  # exact ceiling division for integers
    else:
        size = max(0, math.ceil((stop - start) / step))
    out = lax.iota(dtype, size)
    if step != 1:
        out = lax.mul(lax.convert_element_type(step, dtype), out)
    if start != 0:
        out = lax.add(lax.convert_element_type(start, dtype), out)
    return out


def _to_inexact(dtype: np.dtype) -> np.dtype:
    """JAX's rule for computing on integers in floating point: booleans and integers of up to
    32 bits become float32, 64-bit integers float64 (canonicalized)."""
    if dtypes.is_inexact(dtype):
        return dtype
    return dtypes.canonicalize(np.float64 if dtype.itemsize == 8 else np.float32)


def _static_num(fun: str, num: Any) -> int:
    value = _static_scalar(fun, "num", num) if isinstance(num, Tracer) else num
    num = operator.index(value)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    return num


def _bcast(x, shape: tuple):
    from kiln.numpy.manipulation import broadcast_to

    return broadcast_to(x, shape)


def _floor(x):
    """Elementwise floor of a real float array, from ops every dtype has: x - fmod(x, 1),
    less one where the remainder is negative."""
    floor_fn = getattr(lax, "floor", None)
    if floor_fn is not None:
        return floor_fn(x)
    rem = lax.rem(x, lax.convert_element_type(1, x.dtype))
    trunc = lax.sub(x, rem)
    zero = lax.full_like(rem, 0)
    return lax.select(lax.lt(rem, zero), lax.sub(trunc, lax.full_like(trunc, 1)), trunc)


def linspace(
    start,
    stop,
    num: int = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype=None,
    axis: int = 0,
    *,
    device=None,
):
    """`num` evenly spaced samples from start to stop (stop included unless endpoint=False).
    start and stop may be arrays: the samples run along `axis` of the result.

    Computed as start * (1 - t) + stop * t with t = i / div, as JAX does, so both ends are
    exact in float32. Integer dtypes round down."""
    from kiln.numpy.manipulation import broadcast_shapes, expand_dims

    num = _static_num("linspace", num)
    check_arraylike("linspace", start, stop)
    if dtype is None:
        dtype = _to_inexact(dtypes.result_type(start, stop))
    dtype = dtypes.canonicalize(dtype)
    comp = _to_inexact(dtype)
    start = to_kiln(start, comp, False)
    stop = to_kiln(stop, comp, False)
    bounds = broadcast_shapes(start.shape, stop.shape)
    start, stop = _bcast(start, bounds), _bcast(stop, bounds)
    axis = operator.index(axis)
    axis = axis + len(bounds) + 1 if axis < 0 else axis
    if not 0 <= axis <= len(bounds):
        raise ValueError(
            f"axis {axis} is out of bounds for the result of dimension {len(bounds) + 1}"
        )
    div = num - 1 if endpoint else num
    if num > 1:
        out_shape = bounds[:axis] + (div,) + bounds[axis:]
        around = tuple(i for i in range(len(out_shape)) if i != axis)
        real = (
            np.dtype(np.float64)
            if comp == np.complex128
            else (np.dtype(np.float32) if comp == np.complex64 else comp)
        )
        t = lax.div(lax.iota(real, div), lax.convert_element_type(div, real))
        t = lax.broadcast_in_dim(lax.convert_element_type(t, comp), out_shape, (axis,))
        lo = lax.broadcast_in_dim(start, out_shape, around)
        hi = lax.broadcast_in_dim(stop, out_shape, around)
        out = lax.add(lax.mul(lo, lax.sub(1, t)), lax.mul(hi, t))
        if endpoint:
            out = lax.concatenate([out, expand_dims(stop, axis)], axis)
    elif num == 1:
        out = expand_dims(start, axis)
    else:
        out = lax.full(bounds[:axis] + (0,) + bounds[axis:], 0, comp)
    if retstep:
        if num > 1:
            delta = lax.div(lax.sub(stop, start), lax.convert_element_type(div, comp))
        elif num == 1 and not endpoint:
            delta = lax.sub(stop, start)
        else:
            delta = lax.full_like(start, np.nan)
    if dtypes.is_integer(dtype) and not dtypes.is_integer(out.dtype):
        out = _floor(out)
    out = lax.convert_element_type(out, dtype)
    return (out, delta) if retstep else out


def logspace(
    start, stop, num: int = 50, endpoint: bool = True, base=10.0, dtype=None, axis: int = 0
):
    """`num` samples base ** t for t evenly spaced from start to stop."""
    check_arraylike("logspace", start, stop, base)
    if dtype is None:
        dtype = _to_inexact(dtypes.result_type(start, stop))
    dtype = dtypes.canonicalize(dtype)
    comp = _to_inexact(dtype)
    exponents = linspace(
        to_kiln(start, comp, False),
        to_kiln(stop, comp, False),
        num,
        endpoint=endpoint,
        dtype=comp,
        axis=axis,
    )
    base = to_kiln(base, comp, False)
    powers = (
        lax.pow(_bcast(base, exponents.shape), exponents)
        if base.ndim == 0
        else _pow_broadcast(base, exponents, axis)
    )
    return lax.convert_element_type(powers, dtype)


def _pow_broadcast(base, exponents, axis: int):
    from kiln.numpy.manipulation import broadcast_shapes, expand_dims

    base = expand_dims(base, axis if axis >= 0 else axis + exponents.ndim)
    shape = broadcast_shapes(base.shape, exponents.shape)
    return lax.pow(_bcast(base, shape), _bcast(exponents, shape))


def geomspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None, axis: int = 0):
    """`num` samples spaced evenly on a log scale from start to stop (same sign, not zero)."""
    check_arraylike("geomspace", start, stop)
    if dtype is None:
        dtype = _to_inexact(dtypes.result_type(start, stop))
    dtype = dtypes.canonicalize(dtype)
    comp = _to_inexact(dtype)
    if dtypes.is_complex(comp):
        raise NotImplementedError("jnp.geomspace does not support complex values in kiln yet.")
    start, stop = to_kiln(start, comp, False), to_kiln(stop, comp, False)
    for value in (start, stop):
        if isinstance(value, Array) and np.any(np.asarray(value) == 0):
            raise ValueError("Geometric sequence cannot include zero")
    from kiln.numpy.manipulation import broadcast_shapes

    bounds = broadcast_shapes(start.shape, stop.shape)
    start, stop = _bcast(start, bounds), _bcast(stop, bounds)
    # sign(start) * exp(linspace(log|start|, log|stop|)); the sign comes from a select so that
    # only ops every float dtype has are needed.
    sign = lax.select(
        lax.lt(start, lax.full_like(start, 0)), lax.full_like(start, -1), lax.full_like(start, 1)
    )
    exponents = linspace(
        lax.log(lax.mul(start, sign)),
        lax.log(lax.mul(stop, sign)),
        num,
        endpoint=endpoint,
        dtype=comp,
        axis=axis,
    )
    axis = operator.index(axis)
    axis = axis + exponents.ndim if axis < 0 else axis
    sign = lax.broadcast_in_dim(
        sign, exponents.shape, tuple(i for i in range(exponents.ndim) if i != axis)
    )
    return lax.convert_element_type(lax.mul(sign, lax.exp(exponents)), dtype)


# --- special matrices ------------------------------------------------------------------------


def _static_dim(fun: str, arg: str, value: Any) -> int:
    if isinstance(value, Tracer):
        value = _static_scalar(fun, arg, value)
    return operator.index(value)


def eye(N: int, M: int | None = None, k: int = 0, dtype=None, *, device=None) -> Any:
    """An N x M matrix with ones on diagonal k and zeros elsewhere."""
    n = _static_dim("eye", "N", N)
    m = n if M is None else _static_dim("eye", "M", M)
    if n < 0 or m < 0:
        raise ValueError(f"negative dimensions are not allowed, got {N} and {M}")
    k = _static_dim("eye", "k", k)
    rows = lax.broadcasted_iota(np.int32, (n, m), 0)
    cols = lax.broadcasted_iota(np.int32, (n, m), 1)
    on_diagonal = lax.eq(lax.add(rows, np.int32(k)), cols)
    return lax.convert_element_type(on_diagonal, _float_or(dtype))


def identity(n: int, dtype=None) -> Any:
    """The n x n identity matrix."""
    return eye(n, dtype=dtype)


def tri(N: int, M: int | None = None, k: int = 0, dtype=None) -> Any:
    """An N x M matrix with ones on and below diagonal k (float32 unless `dtype` is given)."""
    from kiln.numpy.manipulation_matrix import tri_mask

    n = _static_dim("tri", "N", N)
    m = n if M is None else _static_dim("tri", "M", M)
    if n < 0 or m < 0:
        raise ValueError(f"negative dimensions are not allowed, got {N} and {M}")
    # JAX defaults tri to float32 even in 64-bit mode (unlike eye, zeros, ...).
    dtype = np.float32 if dtype is None else dtype
    return lax.convert_element_type(tri_mask(n, m, _static_dim("tri", "k", k)), dtype)


# --- grids -----------------------------------------------------------------------------------


def meshgrid(*xi, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> list:
    """Coordinate matrices from 1-D coordinate vectors ('xy': Cartesian, the first two
    outputs vary along columns then rows; 'ij': matrix indexing)."""
    check_arraylike("meshgrid", *xi)
    if not copy:
        raise ValueError("jax.numpy.meshgrid only supports copy=True")
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Valid values for indexing are 'xy' and 'ij', got {indexing}")
    args = [to_kiln(x) for x in xi]
    if any(a.ndim != 1 for a in args):
        raise ValueError(
            f"Arguments to jax.numpy.meshgrid must be 1D, got shapes {[a.shape for a in args]}"
        )
    if indexing == "xy" and len(args) >= 2:
        args[0], args[1] = args[1], args[0]
    full_shape = tuple(a.shape[0] for a in args)
    out = []
    for i, a in enumerate(args):
        shape = (
            tuple(a.shape[0] if j == i else 1 for j in range(len(args))) if sparse else full_shape
        )
        out.append(lax.broadcast_in_dim(a, shape, (i,)))
    if indexing == "xy" and len(args) >= 2:
        out[0], out[1] = out[1], out[0]
    return out


def indices(dimensions, dtype=None, sparse: bool = False):
    """An array (or, with sparse=True, a tuple of arrays) of index grids for `dimensions`."""
    from kiln.numpy.manipulation import stack

    dims = canonicalize_shape(dimensions)
    dtype = dtypes.default_int() if dtype is None else dtypes.canonicalize(dtype)
    out = []
    for i, d in enumerate(dims):
        shape = tuple(d if j == i else 1 for j in range(len(dims))) if sparse else dims
        out.append(lax.broadcast_in_dim(lax.iota(dtype, d), shape, (i,)))
    if sparse:
        return tuple(out)
    return stack(out, 0) if out else array(np.zeros((0,), dtype=dtype))


def fromfunction(function: Callable, shape, *, dtype=float, **kwargs):
    """function(*index_grids, **kwargs), where the k-th grid holds each element's index along
    axis k (in `dtype`)."""
    shape = canonicalize_shape(shape)
    grids = indices(shape, dtype=dtype, sparse=True)
    from kiln.numpy.manipulation import broadcast_to

    return function(*(broadcast_to(g, shape) for g in grids), **kwargs)


class _IndexGrid:
    """mgrid / ogrid: `jnp.mgrid[0:3, 0:1:5j]`. A real step works like arange, an imaginary
    step n*1j like linspace with n points (stop included)."""

    def __init__(self, sparse: bool, name: str):
        self.sparse = sparse
        self.name = name

    def _axis(self, s: slice):
        start = 0 if s.start is None else _static_scalar(self.name, "start", s.start)
        stop = _static_scalar(self.name, "stop", s.stop)
        step = 1 if s.step is None else _static_scalar(self.name, "step", s.step)
        if isinstance(step, complex) or np.iscomplexobj(step):
            return linspace(start, stop, int(abs(step)))
        return arange(start, stop, step)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self._axis(key)
        if not isinstance(key, tuple) or not all(isinstance(k, slice) for k in key):
            raise TypeError(
                f"jnp.{self.name} takes slices, e.g. jnp.{self.name}[0:3, 0:4], got {key!r}"
            )
        from kiln.numpy.util import promote_dtypes
        from kiln.numpy.manipulation import stack

        axes = promote_dtypes(*(self._axis(k) for k in key)) if key else []
        grids = meshgrid(*axes, indexing="ij", sparse=self.sparse)
        if self.sparse:
            return grids
        return stack(grids, 0) if grids else array(np.zeros((0,), dtypes.default_int()))


mgrid = _IndexGrid(sparse=False, name="mgrid")
ogrid = _IndexGrid(sparse=True, name="ogrid")

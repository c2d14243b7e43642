"""Reductions of kiln.numpy: sum, prod, max, min, any, all, mean, var, std, the NaN-ignoring
variants, argmax/argmin, quantiles and counts, with JAX's dtype rules (sums of small ints give
the default int, means of ints give the default float, float16 sums accumulate in float32).

Quantiles (reductions_quantile.py) and cumulative ops, diff, bincount and histogram
(reductions_cumulative.py) live next door and are exported from here.
"""

from __future__ import annotations

import builtins
import math
import operator
from typing import Any, Callable

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.numpy.util import check_arraylike, check_int_scalars, to_kiln

__all__ = [
    "sum",
    "prod",
    "max",
    "min",
    "amax",
    "amin",
    "any",
    "all",
    "mean",
    "average",
    "var",
    "std",
    "ptp",
    "nansum",
    "nanprod",
    "nanmax",
    "nanmin",
    "nanmean",
    "nanvar",
    "nanstd",
    "nanargmax",
    "nanargmin",
    "argmax",
    "argmin",
    "count_nonzero",
]

_LOW_PRECISION = (dtypes.float16, dtypes.bfloat16)


# --- helpers shared by the reductions --------------------------------------------------------


def reduction_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """The axes a reduction removes: all for None, else validated non-negative ints (sorted).
    Raises NumPy's AxisError (a ValueError) for an out-of-bounds axis."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out = []
    for a in axes:
        try:
            a = operator.index(a)
        except TypeError:
            raise TypeError(
                f"axis must be None, an int or a tuple of ints, got {axis!r}. "
                "Axes are static: they cannot be traced values."
            ) from None
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"duplicate value in 'axis': {axis}")
    return tuple(sorted(out))


def _axis_size(shape: tuple, axes: tuple) -> int:
    return math.prod(shape[d] for d in axes)


def _no_out(name: str, out) -> None:
    if out is not None:
        raise NotImplementedError(
            f"The 'out' argument to kiln.numpy.{name} is not supported: "
            "kiln arrays are immutable; use the return value instead."
        )


def _upcast_low_precision(dtype: np.dtype) -> np.dtype:
    return dtypes.float32 if dtype in _LOW_PRECISION else dtype


def _to_inexact(dtype: np.dtype) -> np.dtype:
    return dtype if dtypes.is_inexact(dtype) else dtypes.default_float()


def _user_dtype(dtype) -> np.dtype | None:
    return None if dtype is None else dtypes.canonicalize(dtype)


def _convert(x, dtype: np.dtype):
    """Convert to `dtype`, keeping the value as it is when it already has that dtype."""
    if x.dtype == dtype:
        return x
    return lax.convert_element_type(x, dtype)


def _lowest(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _highest(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    return np.iinfo(dtype).max if dtype.kind in "iu" else np.inf


def broadcast_to_shape(x, shape: tuple):
    """NumPy-broadcast `x` (array, tracer or scalar) to exactly `shape`."""
    x_shape = tuple(np.shape(x)) if not hasattr(x, "shape") else tuple(x.shape)
    if x_shape == shape:
        return x
    try:
        if np.broadcast_shapes(x_shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"cannot broadcast an array of shape {x_shape} to shape {shape}") from None
    # broadcast_in_dim stretches size-1 dimensions itself: no reshape needed.
    lead = len(shape) - len(x_shape)
    return lax.broadcast_in_dim(x, shape, tuple(range(lead, len(shape))))


def where_(condition, x, y):
    """Elementwise select with NumPy broadcasting. x and y share a dtype, except that a Python
    scalar takes the dtype of the other operand."""
    if isinstance(x, (bool, int, float, complex)):
        x = lax.convert_element_type(x, y.dtype, y.aval.weak_type)
    if isinstance(y, (bool, int, float, complex)):
        y = lax.convert_element_type(y, x.dtype, x.aval.weak_type)
    shape = np.broadcast_shapes(
        np.shape(condition) if not hasattr(condition, "shape") else condition.shape,
        x.shape,
        y.shape,
    )
    condition = to_kiln(condition)
    if condition.dtype != np.bool_:
        condition = lax.ne(condition, lax.convert_element_type(0, condition.dtype))
    return lax.select(
        broadcast_to_shape(condition, shape),
        broadcast_to_shape(x, shape),
        broadcast_to_shape(y, shape),
    )


def isnan_(x):
    """NaN test built from lax.ne (NaN is the only value unequal to itself)."""
    if not dtypes.is_inexact(x.dtype):
        return lax.full(x.shape, False, dtypes.bool_)
    return lax.ne(x, x)


def _where_mask(name: str, where, shape: tuple):
    check_arraylike(name, where)
    mask = to_kiln(where)
    if mask.dtype != np.bool_:
        mask = lax.convert_element_type(mask, dtypes.bool_)
    return broadcast_to_shape(mask, shape)


def _reduction(
    a,
    name: str,
    *,
    axis,
    dtype,
    keepdims: bool,
    initial,
    where,
    lax_reduce: Callable,
    combine: Callable,
    identity: Callable,
    bool_reduce: Callable | None = None,
    bool_combine: Callable | None = None,
    has_identity: bool = True,
    promote_integers: bool = False,
    upcast_low_precision: bool = False,
    preprocess: Callable | None = None,
):
    """The shared body of the monoid reductions, as JAX defines them.

    The reduction runs in a computation dtype (float16/bfloat16 sums go through float32); a
    `where` mask replaces excluded elements with the identity; `initial` is combined with the
    result afterwards, because a lax reduction's init value must be the monoid's identity."""
    check_arraylike(name, a)
    a = to_kiln(a)
    if preprocess is not None:
        a = preprocess(a)
    axes = reduction_axes(axis, a.ndim)
    if initial is None and not has_identity:
        if where is not None:
            raise ValueError(
                f"reduction operation {name} does not have an identity, so to use "
                "a where mask one has to specify 'initial'"
            )
        if builtins.any(a.shape[d] == 0 for d in axes):
            raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
    result_dtype = _user_dtype(dtype) or a.dtype
    if dtype is None and promote_integers:
        if result_dtype == np.bool_:
            result_dtype = dtypes.default_int()
        elif result_dtype.kind == "u" and result_dtype.itemsize < dtypes.default_uint().itemsize:
            result_dtype = dtypes.default_uint()
        elif result_dtype.kind == "i" and result_dtype.itemsize < dtypes.default_int().itemsize:
            result_dtype = dtypes.default_int()
    computation_dtype = (
        _upcast_low_precision(result_dtype) if upcast_low_precision else result_dtype
    )
    a = _convert(a, computation_dtype)
    if computation_dtype == np.bool_ and bool_reduce is not None:
        lax_reduce, combine = bool_reduce, bool_combine
    if where is not None:
        a = where_(_where_mask(name, where, a.shape), a, identity(computation_dtype))
    result = lax_reduce(a, axes)
    if initial is not None:
        check_arraylike(name, initial)
        initial_shape = tuple(initial.shape) if hasattr(initial, "shape") else np.shape(initial)
        if initial_shape:
            raise ValueError(f"initial value must be a scalar. Got array of shape {initial_shape}")
        check_int_scalars(initial)
        result = combine(lax.convert_element_type(initial, computation_dtype), result)
    if keepdims:
        result = lax.expand_dims(result, axes)
    return lax.convert_element_type(result, result_dtype)


def _zero(dtype):
    return False if dtype == np.bool_ else 0


def _one(dtype):
    return True if dtype == np.bool_ else 1


def _cast_bool_to_int(a):
    return a if a.dtype != np.bool_ else lax.convert_element_type(a, dtypes.default_int())


def _to_bool(a):
    return a if a.dtype == np.bool_ else lax.convert_element_type(a, dtypes.bool_)


# --- sum, prod, max, min, any, all -----------------------------------------------------------


def sum(
    a,
    axis=None,
    dtype=None,
    out=None,
    keepdims: bool = False,
    initial=None,  # noqa: A001
    where=None,
    promote_integers: bool = True,
):
    """Sum of elements over `axis` (None: all). Booleans and small integers sum in the default
    integer type unless `promote_integers=False`; float16/bfloat16 accumulate in float32."""
    _no_out("sum", out)
    return _reduction(
        a,
        "sum",
        axis=axis,
        dtype=dtype,
        keepdims=keepdims,
        initial=initial,
        where=where,
        lax_reduce=lax.reduce_sum,
        combine=lax.add,
        identity=_zero,
        bool_reduce=lax.reduce_or,
        bool_combine=lax.bitwise_or,
        promote_integers=promote_integers,
        upcast_low_precision=True,
        preprocess=None if promote_integers else _cast_bool_to_int,
    )


def prod(
    a,
    axis=None,
    dtype=None,
    out=None,
    keepdims: bool = False,
    initial=None,
    where=None,
    promote_integers: bool = True,
):
    """Product of elements over `axis`, with sum's dtype rules."""
    _no_out("prod", out)
    return _reduction(
        a,
        "prod",
        axis=axis,
        dtype=dtype,
        keepdims=keepdims,
        initial=initial,
        where=where,
        lax_reduce=lax.reduce_prod,
        combine=lax.mul,
        identity=_one,
        bool_reduce=lax.reduce_and,
        bool_combine=lax.bitwise_and,
        promote_integers=promote_integers,
        upcast_low_precision=True,
        preprocess=None if promote_integers else _cast_bool_to_int,
    )


def max(
    a,
    axis=None,
    out=None,
    keepdims: bool = False,
    initial=None,  # noqa: A001
    where=None,
):
    """Largest element over `axis` (NaN propagates). An empty reduction needs `initial`, and so
    does a `where` mask."""
    _no_out("max", out)
    return _reduction(
        a,
        "max",
        axis=axis,
        dtype=None,
        keepdims=keepdims,
        initial=initial,
        where=where,
        lax_reduce=lax.reduce_max,
        combine=lax.max,
        identity=_lowest,
        has_identity=False,
    )


def min(
    a,
    axis=None,
    out=None,
    keepdims: bool = False,
    initial=None,  # noqa: A001
    where=None,
):
    """Smallest element over `axis` (NaN propagates). An empty reduction needs `initial`, and
    so does a `where` mask."""
    _no_out("min", out)
    return _reduction(
        a,
        "min",
        axis=axis,
        dtype=None,
        keepdims=keepdims,
        initial=initial,
        where=where,
        lax_reduce=lax.reduce_min,
        combine=lax.min,
        identity=_highest,
        has_identity=False,
    )


amax = max
amin = min


def any(a, axis=None, out=None, keepdims: bool = False, *, where=None):  # noqa: A001
    """Whether any element over `axis` is nonzero (NaN counts as nonzero)."""
    _no_out("any", out)
    return _reduction(
        a,
        "any",
        axis=axis,
        dtype=None,
        keepdims=keepdims,
        initial=None,
        where=where,
        lax_reduce=lax.reduce_or,
        combine=lax.bitwise_or,
        identity=lambda d: False,
        preprocess=_to_bool,
    )


def all(a, axis=None, out=None, keepdims: bool = False, *, where=None):  # noqa: A001
    """Whether every element over `axis` is nonzero."""
    _no_out("all", out)
    return _reduction(
        a,
        "all",
        axis=axis,
        dtype=None,
        keepdims=keepdims,
        initial=None,
        where=where,
        lax_reduce=lax.reduce_and,
        combine=lax.bitwise_and,
        identity=lambda d: True,
        preprocess=_to_bool,
    )


def count_nonzero(a, axis=None, keepdims: bool = False):
    """The number of nonzero elements over `axis`, in the default integer type."""
    check_arraylike("count_nonzero", a)
    a = to_kiln(a)
    nonzero = lax.ne(a, lax.convert_element_type(0, a.dtype, a.aval.weak_type))
    return sum(nonzero, axis=axis, keepdims=keepdims, dtype=dtypes.default_int())


def ptp(a, axis=None, out=None, keepdims: bool = False):
    """Peak to peak: max - min over `axis`."""
    _no_out("ptp", out)
    check_arraylike("ptp", a)
    a = to_kiln(a)
    if a.dtype == np.bool_:
        raise TypeError(
            "ptp does not support boolean arrays: subtracting booleans is not "
            "defined. Convert with .astype(int) first."
        )
    return lax.sub(max(a, axis, keepdims=keepdims), min(a, axis, keepdims=keepdims))


# --- mean, average, var, std -----------------------------------------------------------------


def mean(a, axis=None, dtype=None, out=None, keepdims: bool = False, *, where=None):
    """Arithmetic mean over `axis`; integers and bools average in the default float type.
    The mean of an empty selection is NaN."""
    _no_out("mean", out)
    check_arraylike("mean", a)
    a = to_kiln(a)
    axes = reduction_axes(axis, a.ndim)
    result_dtype = _user_dtype(dtype) or _to_inexact(a.dtype)
    computation_dtype = _upcast_low_precision(result_dtype)
    total = sum(a, axis, dtype=computation_dtype, keepdims=keepdims, where=where)
    if where is None:
        normalizer = lax.convert_element_type(_axis_size(a.shape, axes), computation_dtype)
    else:
        normalizer = sum(
            _where_mask("mean", where, a.shape), axis, dtype=computation_dtype, keepdims=keepdims
        )
    return lax.convert_element_type(lax.div(total, normalizer), result_dtype)


def average(a, axis=None, weights=None, returned: bool = False, keepdims: bool = False):
    """Weighted mean over `axis`. 1-D `weights` apply along a single `axis`; with
    `returned=True` the sum of the weights comes back too."""
    if weights is None:
        check_arraylike("average", a)
        a = to_kiln(a)
        a = _convert(a, _to_inexact(a.dtype))
        avg = mean(a, axis=axis, keepdims=keepdims)
        count = _axis_size(a.shape, reduction_axes(axis, a.ndim))
        weights_sum = lax.full(avg.shape, count, avg.dtype)
    else:
        check_arraylike("average", a, weights)
        a, weights = to_kiln(a), to_kiln(weights)
        dtype, weak = dtypes.result_type_with_weak(
            (a.dtype, a.aval.weak_type), (weights.dtype, weights.aval.weak_type)
        )
        dtype = _to_inexact(dtype)
        a = lax.convert_element_type(a, dtype, a.aval.weak_type and weak)
        weights = lax.convert_element_type(weights, dtype, weights.aval.weak_type and weak)
        if a.shape != weights.shape:
            if weights.ndim != 1:
                raise ValueError("1D weights expected when shapes of a and weights differ.")
            if axis is None:
                raise ValueError("Axis must be specified when shapes of a and weights differ.")
            if isinstance(axis, (tuple, list)):
                raise ValueError("Single axis expected when shapes of a and weights differ")
            (axis_,) = reduction_axes(axis, a.ndim)
            if weights.shape[0] != a.shape[axis_]:
                raise ValueError("Length of weights not compatible with specified axis.")
            weights = lax.broadcast_in_dim(weights, a.shape, (axis_,))
        weights_sum = sum(weights, axis=axis, keepdims=keepdims)
        avg = lax.div(sum(lax.mul(a, weights), axis=axis, keepdims=keepdims), weights_sum)
    if returned:
        if weights_sum.shape != avg.shape:
            weights_sum = broadcast_to_shape(weights_sum, avg.shape)
        return avg, weights_sum
    return avg


def _var_dtypes(a_dtype: np.dtype, dtype) -> tuple[np.dtype, np.dtype]:
    """(computation dtype, result dtype) of var/std, as JAX picks them."""
    if dtype is not None:
        dtype = dtypes.canonicalize(dtype)
        if dtypes.is_complex(a_dtype) and not dtypes.is_complex(dtype):
            raise ValueError(
                "var does not support a real dtype for the variance of complex "
                "values; pass a complex dtype or none."
            )
        return _upcast_low_precision(dtype), dtype
    if not dtypes.is_inexact(a_dtype):
        return dtypes.default_float(), dtypes.default_float()
    real = (
        (dtypes.float64 if a_dtype == dtypes.complex128 else dtypes.float32)
        if dtypes.is_complex(a_dtype)
        else a_dtype
    )
    return _upcast_low_precision(a_dtype), real


def _squared_magnitude(centered):
    if dtypes.is_complex(centered.dtype):
        return lax.real(lax.mul(centered, lax.conj(centered)))
    return lax.mul(centered, centered)


def _correction(ddof, correction):
    if correction is None:
        return ddof
    if not isinstance(ddof, int) or ddof != 0:
        raise ValueError("ddof and correction can't be provided simultaneously.")
    return correction


def var(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims: bool = False,
    *,
    where=None,
    correction=None,
):
    """Variance over `axis` with `ddof` delta degrees of freedom (NaN when the count does not
    exceed ddof). Complex input gives a real variance."""
    _no_out("var", out)
    check_arraylike("var", a)
    correction = _correction(ddof, correction)
    a = to_kiln(a)
    computation_dtype, result_dtype = _var_dtypes(a.dtype, dtype)
    a = _convert(a, computation_dtype)
    a_mean = mean(a, axis, dtype=computation_dtype, keepdims=True, where=where)
    squared = _squared_magnitude(lax.sub(a, broadcast_to_shape(a_mean, a.shape)))
    real_dtype = squared.dtype
    total = sum(squared, axis, dtype=real_dtype, keepdims=keepdims, where=where)
    if where is None and isinstance(correction, (int, float)):
        # A static count: the normalizer and its sign are known while tracing.
        normalizer = _axis_size(a.shape, reduction_axes(axis, a.ndim)) - correction
        if normalizer > 0:
            result = lax.div(total, lax.convert_element_type(normalizer, real_dtype))
        else:
            result = lax.full(total.shape, np.nan, real_dtype)
        return lax.convert_element_type(result, result_dtype)
    if where is None:
        count = lax.full(total.shape, _axis_size(a.shape, reduction_axes(axis, a.ndim)), real_dtype)
    else:
        count = sum(_where_mask("var", where, a.shape), axis, dtype=real_dtype, keepdims=keepdims)
    normalizer = lax.sub(
        count,
        lax.full(count.shape, correction, real_dtype)
        if not hasattr(correction, "shape")
        else broadcast_to_shape(lax.convert_element_type(correction, real_dtype), count.shape),
    )
    positive = lax.gt(normalizer, lax.full(normalizer.shape, 0, real_dtype))
    result = where_(positive, lax.div(total, normalizer), np.nan)
    return lax.convert_element_type(result, result_dtype)


def _standard_deviation(variance_fn, name: str, doc: str):
    """std-like reductions: the square root of a variance, computed in the variance's dtype."""

    def std_fn(
        a,
        axis=None,
        dtype=None,
        out=None,
        ddof=0,
        keepdims: bool = False,
        *,
        where=None,
        correction=None,
    ):
        _no_out(name, out)
        check_arraylike(name, a)
        correction = _correction(ddof, correction)
        a = to_kiln(a)
        computation_dtype, result_dtype = _var_dtypes(a.dtype, dtype)
        variance = variance_fn(
            a, axis, dtype=computation_dtype, keepdims=keepdims, where=where, correction=correction
        )
        return lax.convert_element_type(lax.sqrt(variance), result_dtype)

    std_fn.__name__ = std_fn.__qualname__ = name
    std_fn.__doc__ = doc
    return std_fn


std = _standard_deviation(var, "std", "Standard deviation: the square root of `var`.")


# --- argmax / argmin -------------------------------------------------------------------------


def _arg_reduction(name: str, lax_fn, a, axis, keepdims):
    check_arraylike(name, a)
    a = to_kiln(a)
    ndim = a.ndim
    if axis is None:
        a = lax.reshape(a, (a.size,))
        axis_ = 0
        dims = tuple(range(ndim))
    else:
        (axis_,) = (
            reduction_axes(operator.index(axis), ndim)
            if ndim
            else reduction_axes(operator.index(axis), 1)
        )
        dims = (axis_,)
        if ndim == 0:
            a = lax.reshape(a, (1,))
    if a.shape[axis_] == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence")
    if dtypes.is_complex(a.dtype):
        raise TypeError(f"{name} does not support complex arrays (they have no order).")
    result = lax_fn(a, axis_, dtypes.default_int())
    if keepdims:
        result = lax.expand_dims(result, dims)
    return result


def argmax(a, axis=None, out=None, keepdims=None):
    """Index of the largest element along `axis` (of the flattened array when None). The first
    occurrence wins; a NaN counts as the largest."""
    _no_out("argmax", out)
    return _arg_reduction("argmax", lax.argmax, a, axis, bool(keepdims))


def argmin(a, axis=None, out=None, keepdims=None):
    """Index of the smallest element along `axis` (of the flattened array when None). The first
    occurrence wins; a NaN counts as the smallest."""
    _no_out("argmin", out)
    return _arg_reduction("argmin", lax.argmin, a, axis, bool(keepdims))


# --- NaN-ignoring reductions -----------------------------------------------------------------


def _nan_reduction(
    a, name: str, reduction: Callable, fill, nan_if_all_nan: bool, axis, keepdims, where, **kwargs
):
    check_arraylike(name, a)
    a = to_kiln(a)
    if not dtypes.is_inexact(a.dtype):
        return reduction(a, axis=axis, keepdims=keepdims, where=where, **kwargs)
    out = reduction(where_(isnan_(a), fill, a), axis=axis, keepdims=keepdims, where=where, **kwargs)
    if nan_if_all_nan:
        all_nan = all(isnan_(a), axis=axis, keepdims=keepdims)
        out = where_(all_nan, np.nan, out)
    return out


def nansum(a, axis=None, dtype=None, out=None, keepdims: bool = False, initial=None, where=None):
    """sum, treating NaNs as zero."""
    _no_out("nansum", out)
    return _nan_reduction(
        a, "nansum", sum, 0, False, axis, keepdims, where, dtype=dtype, initial=initial
    )


def nanprod(a, axis=None, dtype=None, out=None, keepdims: bool = False, initial=None, where=None):
    """prod, treating NaNs as one."""
    _no_out("nanprod", out)
    return _nan_reduction(
        a, "nanprod", prod, 1, False, axis, keepdims, where, dtype=dtype, initial=initial
    )


def nanmax(a, axis=None, out=None, keepdims: bool = False, initial=None, where=None):
    """max, ignoring NaNs (NaN where every element is NaN)."""
    _no_out("nanmax", out)
    return _nan_reduction(a, "nanmax", max, -np.inf, True, axis, keepdims, where, initial=initial)


def nanmin(a, axis=None, out=None, keepdims: bool = False, initial=None, where=None):
    """min, ignoring NaNs (NaN where every element is NaN)."""
    _no_out("nanmin", out)
    return _nan_reduction(a, "nanmin", min, np.inf, True, axis, keepdims, where, initial=initial)


def nanmean(a, axis=None, dtype=None, out=None, keepdims: bool = False, *, where=None):
    """mean of the non-NaN elements (NaN where there are none)."""
    _no_out("nanmean", out)
    check_arraylike("nanmean", a)
    a = to_kiln(a)
    if not dtypes.is_inexact(a.dtype):
        return mean(a, axis, dtype=dtype, keepdims=keepdims, where=where)
    result_dtype = _user_dtype(dtype) or a.dtype
    not_nan = lax.bitwise_not(isnan_(a))
    count = sum(not_nan, axis, dtype=result_dtype, keepdims=keepdims, where=where)
    total = nansum(a, axis, dtype=result_dtype, keepdims=keepdims, where=where)
    return lax.div(total, count)


def nanvar(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims: bool = False,
    *,
    where=None,
    correction=None,
):
    """var of the non-NaN elements."""
    _no_out("nanvar", out)
    check_arraylike("nanvar", a)
    correction = _correction(ddof, correction)
    a = to_kiln(a)
    computation_dtype, result_dtype = _var_dtypes(a.dtype, dtype)
    a = _convert(a, computation_dtype)
    a_mean = nanmean(a, axis, dtype=computation_dtype, keepdims=True, where=where)
    nan = isnan_(a)
    centered = lax.sub(a, broadcast_to_shape(a_mean, a.shape))
    squared = _squared_magnitude(where_(nan, 0, centered))
    real_dtype = squared.dtype
    count = sum(lax.bitwise_not(nan), axis, dtype=real_dtype, keepdims=keepdims, where=where)
    normalizer = lax.sub(count, lax.convert_element_type(correction, real_dtype))
    total = sum(squared, axis, dtype=real_dtype, keepdims=keepdims, where=where)
    positive = lax.gt(normalizer, lax.convert_element_type(0, real_dtype))
    result = where_(positive, lax.div(total, where_(positive, normalizer, 1)), np.nan)
    return lax.convert_element_type(result, result_dtype)


nanstd = _standard_deviation(nanvar, "nanstd", "std of the non-NaN elements.")


def _nan_arg_reduction(name: str, arg_fn, fill, a, axis, keepdims):
    check_arraylike(name, a)
    a = to_kiln(a)
    if not dtypes.is_inexact(a.dtype):
        return arg_fn(a, axis=axis, keepdims=keepdims)
    nan = isnan_(a)
    result = arg_fn(where_(nan, fill, a), axis=axis, keepdims=keepdims)
    return where_(all(nan, axis=axis, keepdims=bool(keepdims)), -1, result)


def nanargmax(a, axis=None, out=None, keepdims=None):
    """argmax ignoring NaNs; -1 where every element is NaN."""
    _no_out("nanargmax", out)
    return _nan_arg_reduction("nanargmax", argmax, -np.inf, a, axis, keepdims)


def nanargmin(a, axis=None, out=None, keepdims=None):
    """argmin ignoring NaNs; -1 where every element is NaN."""
    _no_out("nanargmin", out)
    return _nan_arg_reduction("nanargmin", argmin, np.inf, a, axis, keepdims)


from kiln.numpy.reductions_quantile import *  # noqa: E402,F401,F403
from kiln.numpy.reductions_quantile import __all__ as _quantile_all  # noqa: E402
from kiln.numpy.reductions_cumulative import *  # noqa: E402,F401,F403
from kiln.numpy.reductions_cumulative import __all__ as _cumulative_all  # noqa: E402

__all__ += _quantile_all + _cumulative_all

"""Reduction primitives: the monoid reductions (reduce_sum, reduce_prod, reduce_max, reduce_min,
reduce_and, reduce_or, reduce_xor), argmax/argmin and the cumulative scans (cumsum, cumprod,
cummax, cummin, cumlogsumexp). Each block holds all the rules of one primitive.

The NumPy impls are the reference semantics and keep exact dtypes: integer sums wrap in the
operand's type, and float16/bfloat16 accumulate in float32 and round once at the end, as XLA
does on the CPU.
"""

from __future__ import annotations

import operator

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import (
    ANY,
    BOOL,
    FLOAT,
    INT,
    INTEGRAL,
    NUMBER,
    check_dtype,
    deflinear,
    defjvp_zero,
    elementwise_batching,
)
from kiln.primitives import elementwise
from kiln.primitives.elementwise import abs as absolute
from kiln.primitives.elementwise import max as maximum
from kiln.primitives.elementwise import (
    add,
    convert_element_type,
    div,
    eq,
    is_finite,
    mul,
    neg,
    select,
    sub,
)
from kiln.primitives.elementwise_math import exp, log1p
from kiln.primitives.shape import (
    broadcast_in_dim,
    expand_dims,
    full,
    reshape,
    rev,
    transpose,
    zeros_like_array,
)
from kiln.primitives.shape_slice import concatenate, slice_in_dim

__all__ = [
    "reduce_sum",
    "reduce_prod",
    "reduce_max",
    "reduce_min",
    "reduce_and",
    "reduce_or",
    "reduce_xor",
    "argmax",
    "argmin",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
    "reduce_precision",
    "reduce_sum_p",
    "reduce_prod_p",
    "reduce_max_p",
    "reduce_min_p",
    "reduce_and_p",
    "reduce_or_p",
    "reduce_xor_p",
    "argmax_p",
    "argmin_p",
    "cumsum_p",
    "cumprod_p",
    "cummax_p",
    "cummin_p",
    "cumlogsumexp_p",
    "reduce_precision_p",
]

_LOW_PRECISION = (dtypes.float16, dtypes.bfloat16)


def _accumulation_dtype(dtype: np.dtype) -> np.dtype:
    """The type an impl computes in: float16/bfloat16 accumulate in float32 (like XLA)."""
    return dtypes.float32 if dtype in _LOW_PRECISION else dtype


def _shape_of(operand) -> tuple:
    return tuple(operand.shape) if hasattr(operand, "shape") else np.shape(operand)


def canonicalize_axes(axes, ndim: int, name: str = "axes") -> tuple[int, ...]:
    """Concrete, non-negative, duplicate-free axes, or a ValueError that names them."""
    if isinstance(axes, (int, np.integer)) or hasattr(axes, "__index__"):
        axes = (axes,)
    try:
        axes = tuple(operator.index(a) for a in axes)
    except TypeError:
        raise TypeError(
            f"{name} must be a sequence of concrete Python ints, got {axes!r}. "
            "Axes are static; they cannot be traced values."
        ) from None
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(
                f"{name} {axes} contains out-of-bounds index {a} for an array of rank {ndim}."
            )
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"duplicate value in {name}: {axes}")
    return tuple(out)


def _check_axes(prim_name: str, operand: ShapedArray, axes: tuple) -> None:
    if not isinstance(axes, tuple):
        raise TypeError(f"{prim_name} param axes must be a tuple of ints, got {axes!r}")
    if len(set(axes)) != len(axes):
        raise ValueError(f"duplicate value in 'axes' of {prim_name}: {axes}")
    for a in axes:
        if not 0 <= a < operand.ndim:
            raise ValueError(
                f"{prim_name} axes {axes} contains out-of-bounds indices for {operand.str_short()}"
            )


def _reduced_shape(shape: tuple, axes: tuple) -> tuple:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# --- the monoid reductions -------------------------------------------------------------------


def _lowest(dtype: np.dtype):
    """The identity of max: the smallest value of the dtype (-inf for floats)."""
    if dtype == np.bool_:
        return False
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    if dtype.kind == "c":
        return complex(-np.inf, -np.inf)
    return -np.inf


def _highest(dtype: np.dtype):
    """The identity of min: the largest value of the dtype (+inf for floats)."""
    if dtype == np.bool_:
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    if dtype.kind == "c":
        return complex(np.inf, np.inf)
    return np.inf


def _all_bits(dtype: np.dtype):
    """The identity of bitwise and: every bit set."""
    if dtype == np.bool_:
        return True
    return np.iinfo(dtype).max if dtype.kind == "u" else -1


#: Rows added in order before a strided float32 sum moves on to a wider accumulator.
_SUM_BLOCK = 16


def _sum_impl(x: np.ndarray, *, axes) -> np.ndarray:
    acc = _accumulation_dtype(x.dtype)
    with np.errstate(all="ignore"):
        if acc == dtypes.float32:
            out = _float32_sum(x.astype(acc, copy=False), tuple(axes))
        else:
            out = np.sum(x.astype(acc, copy=False), axis=axes, dtype=acc)
        return np.asarray(out).astype(x.dtype)


def _float32_sum(x: np.ndarray, axes: tuple) -> np.ndarray:
    """A float32 sum whose error grows like log(n), not n, whichever axes it runs over.

    NumPy sums pairwise only along the axis its inner loop runs over: the trailing reduced
    axes of a C-contiguous array, summed in one call. Every other reduced axis is summed row
    by row, so it goes block by block instead (_strided_float32_sum)."""
    if not x.flags.c_contiguous:
        x = np.array(x, order="C")
    trailing = 0
    while trailing < len(axes) and x.ndim - 1 - trailing in axes:
        trailing += 1
    if trailing:
        x = np.sum(x, axis=tuple(range(x.ndim - trailing, x.ndim)), dtype=x.dtype)
    for axis in sorted(axes, reverse=True)[trailing:]:
        x = _strided_float32_sum(x, axis)
    return x


def _strided_float32_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """The sum over a non-trailing axis of a float32 array: blocks of _SUM_BLOCK rows add in
    float32 (one pass, at NumPy's speed), and the block sums, 16 times fewer, in float64."""
    length = x.shape[axis]
    if length <= _SUM_BLOCK:
        return np.sum(x, axis=axis, dtype=x.dtype)
    whole = length // _SUM_BLOCK * _SUM_BLOCK
    before, after = x.shape[:axis], x.shape[axis + 1 :]
    head = x[(slice(None),) * axis + (slice(0, whole),)]
    blocks = head.reshape(before + (whole // _SUM_BLOCK, _SUM_BLOCK) + after)
    partial = np.sum(blocks, axis=axis + 1, dtype=x.dtype)
    total = np.sum(partial, axis=axis, dtype=np.float64)
    if whole < length:
        total += np.sum(
            x[(slice(None),) * axis + (slice(whole, None),)], axis=axis, dtype=np.float64
        )
    return total.astype(x.dtype)


def _prod_impl(x: np.ndarray, *, axes) -> np.ndarray:
    acc = _accumulation_dtype(x.dtype)
    with np.errstate(all="ignore"):
        out = np.prod(x.astype(acc, copy=False), axis=axes, dtype=acc)
        return np.asarray(out).astype(x.dtype)


def _extremum_impl(ufunc, identity):
    prefer_negative = ufunc is np.minimum

    def impl(x: np.ndarray, *, axes) -> np.ndarray:
        # bfloat16 goes through float32 (exact for max/min); the identity makes empty
        # reductions well defined, as XLA's init value does.
        work = x.astype(dtypes.float32) if dtypes.is_narrow_float(x.dtype) else x
        with np.errstate(all="ignore"):
            out = np.asarray(ufunc.reduce(work, axis=axes, initial=identity(work.dtype)))
        if work.dtype.kind == "f" and np.count_nonzero(out) != out.size:
            out = _signed_zero_extremum(out, work, axes, prefer_negative)
        return out.astype(x.dtype)

    return impl


def _signed_zero_extremum(
    out: np.ndarray, x: np.ndarray, axes: tuple, prefer_negative: bool
) -> np.ndarray:
    """XLA's max and min order -0.0 below +0.0 (IEEE 754's maximum/minimum), which NumPy's
    reductions ignore: a zero maximum is +0.0 if any reduced element is +0.0, a zero minimum
    -0.0 if any is -0.0."""
    wanted = (x == 0) & (np.signbit(x) if prefer_negative else ~np.signbit(x))
    has_wanted = np.any(wanted, axis=axes)
    zero = np.asarray(-0.0 if prefer_negative else 0.0, dtype=out.dtype)
    return np.where(out == 0, np.where(has_wanted, zero, -zero), out)


def _bitwise_impl(ufunc, identity):
    def impl(x: np.ndarray, *, axes) -> np.ndarray:
        initial = np.array(identity(x.dtype)).astype(x.dtype)[()]
        return np.asarray(ufunc.reduce(x, axis=axes, initial=initial)).astype(x.dtype)

    return impl


def _make_reduction(name: str, impl, allowed) -> Primitive:
    """A reduction over `axes` that keeps the operand's dtype and weak type."""
    prim = Primitive(name)

    def abstract_eval(operand: ShapedArray, *, axes) -> ShapedArray:
        check_dtype(name, operand.dtype, allowed)
        _check_axes(name, operand, axes)
        return ShapedArray(_reduced_shape(operand.shape, axes), operand.dtype, operand.weak_type)

    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval)
    return prim


reduce_sum_p = _make_reduction("reduce_sum", _sum_impl, NUMBER)
reduce_prod_p = _make_reduction("reduce_prod", _prod_impl, NUMBER)
reduce_max_p = _make_reduction("reduce_max", _extremum_impl(np.maximum, _lowest), ANY)
reduce_min_p = _make_reduction("reduce_min", _extremum_impl(np.minimum, _highest), ANY)
reduce_and_p = _make_reduction("reduce_and", _bitwise_impl(np.bitwise_and, _all_bits), INTEGRAL)
reduce_or_p = _make_reduction("reduce_or", _bitwise_impl(np.bitwise_or, lambda d: 0), INTEGRAL)
reduce_xor_p = _make_reduction("reduce_xor", _bitwise_impl(np.bitwise_xor, lambda d: 0), INTEGRAL)


def _reduction_wrapper(prim: Primitive):
    def wrapper(operand, axes):
        axes = canonicalize_axes(axes, len(_shape_of(operand)))
        return prim.bind(operand, axes=axes)

    wrapper.__name__ = prim.name
    wrapper.__qualname__ = prim.name
    wrapper.__doc__ = (
        f"{prim.name} of `operand` over `axes` (a sequence of ints; negative "
        "axes count from the end). The result keeps the operand's dtype."
    )
    return wrapper


reduce_sum = _reduction_wrapper(reduce_sum_p)
reduce_prod = _reduction_wrapper(reduce_prod_p)
reduce_max = _reduction_wrapper(reduce_max_p)
reduce_min = _reduction_wrapper(reduce_min_p)
reduce_and = _reduction_wrapper(reduce_and_p)
reduce_or = _reduction_wrapper(reduce_or_p)
reduce_xor = _reduction_wrapper(reduce_xor_p)


# The derivative rules of the monoid reductions. reduce_sum is linear; reduce_prod's tangent
# is the sum of each tangent times the product of the other elements, formed from exclusive
# running products so that zeros in the operand need no division; reduce_max/min pass on the
# tangent at the maximal (minimal) elements, averaged over ties, as JAX does.


def _kept_dims(ndim: int, axes: tuple) -> tuple:
    return tuple(d for d in range(ndim) if d not in axes)


def _reduce_sum_transpose_rule(cotangent, operand, *, axes):
    shape = operand.aval.shape
    return [broadcast_in_dim(cotangent, shape, _kept_dims(len(shape), axes))]


deflinear(reduce_sum_p, _reduce_sum_transpose_rule)


def _product_of_others(x):
    """For each position along axis 0 of x, the product of all the other entries along it:
    the running product before it times the running product after it."""
    length = x.shape[0]
    ones = full((1,) + tuple(x.shape[1:]), 1, x.dtype)
    if length == 1:
        return ones
    before = concatenate([ones, cumprod(slice_in_dim(x, 0, length - 1), 0)], 0)
    after = concatenate([cumprod(slice_in_dim(x, 1, None), 0, reverse=True), ones], 0)
    return mul(before, after)


@reduce_prod_p.def_jvp
def _reduce_prod_jvp_rule(primals, tangents, *, axes):
    (operand,), (tangent,) = primals, tangents
    out = reduce_prod_p.bind(operand, axes=axes)
    shape = tuple(operand.shape)
    if not axes:
        return out, tangent
    length = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    if length == 0:
        return out, None
    # The reduced axes, flattened into one leading axis.
    kept = _kept_dims(len(shape), axes)
    flat_shape = (length,) + tuple(shape[d] for d in kept)
    order = tuple(axes) + kept
    flat_operand = reshape(transpose(operand, order), flat_shape)
    flat_tangent = reshape(transpose(tangent, order), flat_shape)
    return out, reduce_sum(mul(flat_tangent, _product_of_others(flat_operand)), (0,))


def _reduce_chooser_jvp_rule(prim: Primitive):
    def jvp_rule(primals, tangents, *, axes):
        (operand,), (tangent,) = primals, tangents
        out = prim.bind(operand, axes=axes)
        kept = _kept_dims(len(operand.shape), axes)
        chosen = eq(operand, broadcast_in_dim(out, tuple(operand.shape), kept))
        indicators = convert_element_type(chosen, tangent.dtype)
        counts = reduce_sum(indicators, axes)
        return out, div(reduce_sum(mul(tangent, indicators), axes), counts)

    return jvp_rule


reduce_max_p.def_jvp(_reduce_chooser_jvp_rule(reduce_max_p))
reduce_min_p.def_jvp(_reduce_chooser_jvp_rule(reduce_min_p))
for _prim in (reduce_and_p, reduce_or_p, reduce_xor_p):
    defjvp_zero(_prim)


def _reduction_batching_rule(prim: Primitive):
    """The reduction over the same axes, renumbered around the batch dimension (which stays
    where it is, less the reduced axes before it)."""

    def batching_rule(args, dims, *, axes, **params):
        (operand,), (bdim,) = args, dims
        moved_axes = tuple(a + (a >= bdim) for a in axes)
        out = prim.bind(operand, axes=moved_axes, **params)
        return out, bdim - sum(a < bdim for a in axes)

    return prim.def_batching(batching_rule)


for _prim in (
    reduce_sum_p,
    reduce_prod_p,
    reduce_max_p,
    reduce_min_p,
    reduce_and_p,
    reduce_or_p,
    reduce_xor_p,
):
    _reduction_batching_rule(_prim)


# --- argmax / argmin -------------------------------------------------------------------------


def _arg_extremum_impl(np_fn):
    def impl(x: np.ndarray, *, axes, index_dtype) -> np.ndarray:
        (axis,) = axes
        work = x.astype(dtypes.float32) if x.dtype in _LOW_PRECISION else x
        # NumPy's argmax/argmin return the first NaN, which is what JAX and XLA do too.
        return np.asarray(np_fn(work, axis=axis)).astype(index_dtype)

    return impl


def _make_arg_reduction(name: str, np_fn) -> Primitive:
    prim = Primitive(name)

    def abstract_eval(operand: ShapedArray, *, axes, index_dtype) -> ShapedArray:
        check_dtype(name, operand.dtype, (BOOL, INT, FLOAT))
        if len(axes) != 1:
            raise ValueError(f"{name} takes exactly one axis, got axes={axes}")
        _check_axes(name, operand, axes)
        if operand.shape[axes[0]] == 0:
            raise ValueError(
                f"{name} requires a non-empty reduced dimension, got operand "
                f"shape {operand.shape} and axis {axes[0]}."
            )
        if not isinstance(index_dtype, np.dtype) or index_dtype.kind not in "iu":
            raise TypeError(f"{name} index_dtype must be an integer dtype, got {index_dtype}")
        return ShapedArray(_reduced_shape(operand.shape, axes), index_dtype, False)

    prim.def_impl(_arg_extremum_impl(np_fn))
    prim.def_abstract_eval(abstract_eval)
    return prim


argmax_p = _make_arg_reduction("argmax", np.argmax)
argmin_p = _make_arg_reduction("argmin", np.argmin)


def _arg_wrapper(prim: Primitive, word: str):
    def wrapper(operand, axis: int, index_dtype):
        (axis,) = canonicalize_axes(axis, len(_shape_of(operand)), "axis")
        return prim.bind(operand, axes=(axis,), index_dtype=dtypes.canonicalize(index_dtype))

    wrapper.__name__ = prim.name
    wrapper.__qualname__ = prim.name
    wrapper.__doc__ = (
        f"Index of the {word} element along `axis`, as `index_dtype`. Ties and "
        "NaNs resolve to the first occurrence (a NaN beats every number)."
    )
    return wrapper


argmax = _arg_wrapper(argmax_p, "largest")
argmin = _arg_wrapper(argmin_p, "smallest")


for _prim in (argmax_p, argmin_p):
    defjvp_zero(_prim)
    _reduction_batching_rule(_prim)


# --- cumulative reductions -------------------------------------------------------------------


def _cumulative_impl(accumulate):
    def impl(x: np.ndarray, *, axis, reverse) -> np.ndarray:
        acc = _accumulation_dtype(x.dtype)
        work = x.astype(acc, copy=False)
        if reverse:
            work = np.flip(work, axis)
        with np.errstate(all="ignore"):
            out = accumulate(work, axis, acc)
        if reverse:
            out = np.flip(out, axis)
        return np.ascontiguousarray(out).astype(x.dtype)

    return impl


def _make_cumulative(name: str, accumulate, allowed) -> Primitive:
    prim = Primitive(name)

    def abstract_eval(operand: ShapedArray, *, axis, reverse) -> ShapedArray:
        check_dtype(name, operand.dtype, allowed)
        if not isinstance(axis, int) or not 0 <= axis < operand.ndim:
            raise ValueError(
                f"{name} axis {axis} is out of bounds for an array of rank {operand.ndim}"
            )
        if not isinstance(reverse, bool):
            raise TypeError(f"{name} param reverse must be a bool, got {reverse!r}")
        return ShapedArray(operand.shape, operand.dtype, operand.weak_type)

    prim.def_impl(_cumulative_impl(accumulate))
    prim.def_abstract_eval(abstract_eval)
    return prim


def _cumsum(x: np.ndarray, axis: int, acc: np.dtype) -> np.ndarray:
    # A float32 running sum carried in float32 drifts like n (0.1 summed 10M times ends 9%
    # low); carried in float64, every prefix is the exact one rounded once.
    if acc == dtypes.float32:
        return np.cumsum(x, axis, dtype=np.float64)
    return np.cumsum(x, axis, dtype=acc)


cumsum_p = _make_cumulative("cumsum", _cumsum, NUMBER)
cumprod_p = _make_cumulative("cumprod", lambda x, axis, acc: np.cumprod(x, axis, dtype=acc), NUMBER)


def _running_extremum(ufunc):
    """ufunc.accumulate with XLA's ordering of -0.0 below +0.0 (see _signed_zero_extremum):
    a zero running maximum is +0.0 once a +0.0 has been seen, a zero running minimum -0.0
    once a -0.0 has."""
    prefer_negative = ufunc is np.minimum

    def accumulate(x: np.ndarray, axis: int, acc) -> np.ndarray:
        out = ufunc.accumulate(x, axis)
        if x.dtype.kind != "f" or np.count_nonzero(out) == out.size:
            return out
        wanted = (x == 0) & (np.signbit(x) if prefer_negative else ~np.signbit(x))
        seen = np.logical_or.accumulate(wanted, axis)
        zero = np.asarray(-0.0 if prefer_negative else 0.0, dtype=out.dtype)
        return np.where(out == 0, np.where(seen, zero, -zero), out)

    return accumulate


cummax_p = _make_cumulative("cummax", _running_extremum(np.maximum), (INT, FLOAT))
cummin_p = _make_cumulative("cummin", _running_extremum(np.minimum), (INT, FLOAT))
cumlogsumexp_p = _make_cumulative(
    "cumlogsumexp", lambda x, axis, acc: np.logaddexp.accumulate(x, axis), FLOAT
)


def _cumulative_wrapper(prim: Primitive, what: str):
    def wrapper(operand, axis: int = 0, reverse: bool = False):
        (axis,) = canonicalize_axes(axis, len(_shape_of(operand)), "axis")
        return prim.bind(operand, axis=axis, reverse=bool(reverse))

    wrapper.__name__ = prim.name
    wrapper.__qualname__ = prim.name
    wrapper.__doc__ = (
        f"Running {what} along `axis` (from the end when `reverse`); the result "
        "has the operand's shape and dtype."
    )
    return wrapper


cumsum = _cumulative_wrapper(cumsum_p, "sum")
cumprod = _cumulative_wrapper(cumprod_p, "product")
cummax = _cumulative_wrapper(cummax_p, "maximum")
cummin = _cumulative_wrapper(cummin_p, "minimum")
cumlogsumexp = _cumulative_wrapper(cumlogsumexp_p, "log-sum-exp")


# The derivative rules of the cumulative reductions. cumsum is linear (its transpose runs the
# other way). The others differentiate a parallel prefix scan of (value, tangent) pairs, as
# JAX does: the tangent combination of two partial results is the jvp of the combining op, so
# ties of cummax/cummin split the tangent the way the scan's tree of max/min ops does in JAX.


def _interleave(evens, odds, axis: int):
    """evens[0], odds[0], evens[1], odds[1], ... along `axis` (evens has as many elements as
    odds, or one more)."""
    n_odd = odds.shape[axis]
    last = None
    if evens.shape[axis] > n_odd:
        last = slice_in_dim(evens, n_odd, None, axis=axis)
        evens = slice_in_dim(evens, 0, n_odd, axis=axis)
    pairs = concatenate([expand_dims(evens, (axis + 1,)), expand_dims(odds, (axis + 1,))], axis + 1)
    shape = list(evens.shape)
    shape[axis] = 2 * n_odd
    out = reshape(pairs, tuple(shape))
    return out if last is None else concatenate([out, last], axis)


def _prefix_scan(combine, elems: list, axis: int) -> list:
    """The inclusive scan of `combine` (associative, on lists of arrays) along `axis`: pairs of
    neighbours are combined, the half-length sequence is scanned, and the scan at the
    remaining positions is one more combine."""
    length = elems[0].shape[axis]
    if length < 2:
        return elems
    pair_results = combine(
        [slice_in_dim(e, 0, length - 1, 2, axis) for e in elems],
        [slice_in_dim(e, 1, None, 2, axis) for e in elems],
    )
    odd_scans = _prefix_scan(combine, pair_results, axis)  # at positions 1, 3, 5, ...
    before_evens = (
        odd_scans if length % 2 else [slice_in_dim(s, 0, -1, axis=axis) for s in odd_scans]
    )
    even_scans = combine(before_evens, [slice_in_dim(e, 2, None, 2, axis) for e in elems])
    even_scans = [
        concatenate([slice_in_dim(e, 0, 1, axis=axis), s], axis) for e, s in zip(elems, even_scans)
    ]
    return [_interleave(e, o, axis) for e, o in zip(even_scans, odd_scans)]


def _combine_with_jvp(prim: Primitive):
    """Combine (value, tangent) pairs with `prim` and its jvp rule."""
    jvp_rule = prim.rule("jvp")

    def combine(first, second):
        out, out_tangent = jvp_rule((first[0], second[0]), (first[1], second[1]))
        return [out, out_tangent]

    return combine


def _without_infinities(x):
    return select(is_finite(x), x, zeros_like_array(x))


def _logaddexp(x, y):
    """log(exp(x) + exp(y)) without overflow; x + y where x - y is NaN (NaNs, or infinities
    of the same sign)."""
    largest = maximum(x, y)
    delta = sub(x, y)
    stable = add(largest, log1p(exp(neg(absolute(delta)))))
    return select(eq(delta, delta), stable, add(x, y))


def _logaddexp_combine(first, second):
    (x, x_tangent), (y, y_tangent) = first, second
    out = _logaddexp(x, y)
    out_finite = _without_infinities(out)
    x_weight = exp(sub(_without_infinities(x), out_finite))
    y_weight = exp(sub(_without_infinities(y), out_finite))
    return [out, add(mul(x_tangent, x_weight), mul(y_tangent, y_weight))]


def _cumulative_jvp_rule(prim: Primitive, combine):
    def jvp_rule(primals, tangents, *, axis, reverse):
        (operand,), (tangent,) = primals, tangents
        out = prim.bind(operand, axis=axis, reverse=reverse)
        if reverse:
            operand, tangent = rev(operand, (axis,)), rev(tangent, (axis,))
        _, out_tangent = _prefix_scan(combine, [operand, tangent], axis)
        if reverse:
            out_tangent = rev(out_tangent, (axis,))
        return out, out_tangent

    return prim.def_jvp(jvp_rule)


deflinear(
    cumsum_p,
    lambda cotangent, operand, *, axis, reverse: [
        cumsum_p.bind(cotangent, axis=axis, reverse=not reverse)
    ],
)
_cumulative_jvp_rule(cumprod_p, _combine_with_jvp(elementwise.mul_p))
_cumulative_jvp_rule(cummax_p, _combine_with_jvp(elementwise.max_p))
_cumulative_jvp_rule(cummin_p, _combine_with_jvp(elementwise.min_p))
_cumulative_jvp_rule(cumlogsumexp_p, _logaddexp_combine)


def _cumulative_batching_rule(prim: Primitive):
    def batching_rule(args, dims, *, axis, reverse):
        (operand,), (bdim,) = args, dims
        return prim.bind(operand, axis=axis + (axis >= bdim), reverse=reverse), bdim

    return prim.def_batching(batching_rule)


for _prim in (cumsum_p, cumprod_p, cummax_p, cummin_p, cumlogsumexp_p):
    _cumulative_batching_rule(_prim)


# --- reduce_precision ------------------------------------------------------------------------
reduce_precision_p = Primitive("reduce_precision")


def _round_to_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """Round float64 values to a float with the given exponent and mantissa widths: mantissa
    rounding to nearest even, overflow to inf, results below the normal range flushed through
    the subnormal grid. NaN stays NaN."""
    max_exp = 2 ** (exponent_bits - 1) - 1  # the largest unbiased exponent
    min_exp = 1 - max_exp  # the smallest normal exponent
    finite = np.isfinite(x)
    safe = np.where(finite, x, 0.0)
    _, exp = np.frexp(safe)  # safe = m * 2**exp with 0.5 <= |m| < 1
    exp = np.maximum(exp - 1, min_exp)  # subnormals share the smallest exponent
    quantum = np.ldexp(1.0, exp - mantissa_bits)
    rounded = np.round(safe / quantum) * quantum  # np.round rounds half to even
    largest = (2.0 - 2.0**-mantissa_bits) * 2.0**max_exp
    rounded = np.where(np.abs(rounded) > largest, np.copysign(np.inf, rounded), rounded)
    return np.where(finite, rounded, x)


@reduce_precision_p.def_impl
def _reduce_precision_impl(x: np.ndarray, *, exponent_bits, mantissa_bits) -> np.ndarray:
    with np.errstate(all="ignore"):
        out = _round_to_precision(x.astype(np.float64), exponent_bits, mantissa_bits)
        return out.astype(x.dtype)


@reduce_precision_p.def_abstract_eval
def _reduce_precision_abstract_eval(operand: ShapedArray, *, exponent_bits, mantissa_bits):
    check_dtype("reduce_precision", operand.dtype, FLOAT)
    if exponent_bits < 1 or mantissa_bits < 0:
        raise ValueError(
            "reduce_precision needs exponent_bits >= 1 and mantissa_bits >= 0, "
            f"got {exponent_bits} and {mantissa_bits}"
        )
    return ShapedArray(operand.shape, operand.dtype, operand.weak_type)


def reduce_precision(operand, exponent_bits: int, mantissa_bits: int):
    """Round `operand` as if stored in a float with the given exponent and mantissa widths
    (e.g. 5 and 10 for float16), keeping its dtype."""
    return reduce_precision_p.bind(
        operand,
        exponent_bits=operator.index(exponent_bits),
        mantissa_bits=operator.index(mantissa_bits),
    )


# Rounding is treated as linear, as in JAX: the tangent and the cotangent are rounded too.
deflinear(
    reduce_precision_p,
    lambda cotangent, operand, **params: [reduce_precision_p.bind(cotangent, **params)],
)
elementwise_batching(reduce_precision_p)

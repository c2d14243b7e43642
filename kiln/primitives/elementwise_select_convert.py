"""Elementwise selection and dtype conversion primitives: select_n (and select), clamp,
convert_element_type and bitcast_convert_type. Each block holds all the rules of one
primitive; kiln.primitives.elementwise re-exports them."""

from __future__ import annotations

import builtins
from typing import Callable

import numpy as np

from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.ad_util import is_undefined_primal
from kiln.core.primitive import Primitive
from kiln.primitives.base import (
    batch_size,
    broadcast_to_shape,
    check_dtype,
    check_same_dtypes,
    defjvp,
    defjvp_zero,
    elementwise_batching,
    lax_operands,
    zeros_like,
)
from kiln.primitives.elementwise import (
    ORDERED,
    _max_impl,
    _min_impl,
    batched_operand,
    bitwise_and,
    gt,
    lt,
)


# --- select_n --------------------------------------------------------------------------------
select_n_p = Primitive("select_n")


@select_n_p.def_impl
def _select_n_impl(which: np.ndarray, *cases: np.ndarray) -> np.ndarray:
    if which.dtype == np.bool_:
        out = np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    else:
        out = np.choose(np.clip(which, 0, len(cases) - 1), cases)
    return np.asarray(out, dtype=cases[0].dtype)


@select_n_p.def_abstract_eval
def _select_n_abstract_eval(which: ShapedArray, *cases: ShapedArray) -> ShapedArray:
    if not cases:
        raise TypeError("select_n requires at least one case")
    if which.dtype != np.bool_ and which.dtype.kind not in "iu":
        raise TypeError(f"select_n selector must be bool or integer, got {which.dtype.name}")
    if which.dtype == np.bool_ and len(cases) > 2:
        raise TypeError("select_n with a boolean selector takes at most two cases")
    first = cases[0]
    for c in cases[1:]:
        if c.shape != first.shape or c.dtype != first.dtype:
            raise TypeError(
                "select_n cases must all have the same shape and dtype, got "
                f"{', '.join(c.str_short() for c in cases)}"
            )
    if which.shape not in ((), first.shape):
        raise TypeError(
            f"select_n selector shape {which.shape} must be scalar or equal to "
            f"the case shape {first.shape}"
        )
    return ShapedArray(first.shape, first.dtype, builtins.all(c.weak_type for c in cases))


@select_n_p.def_jvp
def _select_n_jvp_rule(primals, tangents):
    which, *cases = primals
    out = select_n_p.bind(which, *cases)
    if builtins.all(t is None for t in tangents[1:]):
        return out, None
    case_tangents = [zeros_like(c) if t is None else t for c, t in zip(cases, tangents[1:])]
    return out, select_n_p.bind(which, *case_tangents)


@select_n_p.def_transpose
def _select_n_transpose_rule(ct, which, *cases):
    # Case i receives the cotangent where it was selected: select_n with ct in its place and
    # zeros elsewhere, so out-of-range selectors clip exactly as the forward op does.
    zeros = zeros_like(ct)
    return [None] + [
        select_n_p.bind(which, *(ct if j == i else zeros for j in range(len(cases))))
        if is_undefined_primal(case)
        else None
        for i, case in enumerate(cases)
    ]


@select_n_p.def_batching
def _select_n_batching_rule(args, dims):
    which, *cases = args
    which_dim, *case_dims = dims
    size = batch_size(args, dims)
    case_shape = next(
        tuple(c.shape[:d]) + tuple(c.shape[d + 1 :]) if d is not None else tuple(c.shape)
        for c, d in zip(cases, case_dims)
    )
    shape = (size,) + case_shape
    # The selector may stay an unbatched scalar; the cases all take the batched shape.
    operands = [batched_operand(which, which_dim, size, shape, keep_scalar=True)]
    operands += [
        batched_operand(c, d, size, shape, keep_scalar=False) for c, d in zip(cases, case_dims)
    ]
    return select_n_p.bind(*operands), 0


def select_n(which, *cases):
    """cases[which] elementwise; a boolean `which` picks cases[1] where True."""
    return select_n_p.bind(which, *lax_operands(*cases))


def select(pred, on_true, on_false):
    """on_true where pred else on_false (lax.select)."""
    return select_n(pred, on_false, on_true)


# --- clamp -----------------------------------------------------------------------------------
clamp_p = Primitive("clamp")


@clamp_p.def_impl
def _clamp_impl(lo: np.ndarray, x: np.ndarray, hi: np.ndarray) -> np.ndarray:
    # max then min, so NaN operands propagate as XLA's clamp does (and -0.0 < +0.0).
    with np.errstate(invalid="ignore"):
        return np.asarray(_min_impl(_max_impl(x, lo), hi)).astype(x.dtype, copy=False)


@clamp_p.def_abstract_eval
def _clamp_abstract_eval(lo: ShapedArray, x: ShapedArray, hi: ShapedArray) -> ShapedArray:
    check_same_dtypes("clamp", lo, x, hi)
    check_dtype("clamp", x.dtype, ORDERED)
    for bound, aval in (("min", lo), ("max", hi)):
        if aval.shape not in ((), x.shape):
            raise TypeError(
                f"clamp {bound} must be a scalar or have the operand's shape "
                f"{x.shape}, got shape {aval.shape}"
            )
    return ShapedArray(x.shape, x.dtype, lo.weak_type and x.weak_type and hi.weak_type)


def _clamp_contribution(predicate: Callable) -> Callable:
    """The tangent an operand of clamp passes on where `predicate(lo, x, hi)` holds (a rank-0
    bound's tangent is broadcast to x's shape)."""

    def jvp_fn(g, lo, x, hi):
        g = broadcast_to_shape(g, x.shape)
        return select(predicate(lo, x, hi), g, zeros_like(g))

    return jvp_fn


# As in JAX, a tie passes no tangent: the operand only strictly inside (lo, hi), the bound
# only when strictly active.
defjvp(
    clamp_p,
    _clamp_contribution(lambda lo, x, hi: bitwise_and(gt(lo, x), lt(lo, hi))),
    _clamp_contribution(lambda lo, x, hi: bitwise_and(gt(x, lo), lt(x, hi))),
    _clamp_contribution(lambda lo, x, hi: lt(hi, x)),
)


@clamp_p.def_batching
def _clamp_batching_rule(args, dims):
    size = batch_size(args, dims)
    x, x_dim = args[1], dims[1]
    shape = (size,) + (
        tuple(x.shape) if x_dim is None else tuple(x.shape[:x_dim]) + tuple(x.shape[x_dim + 1 :])
    )
    # x takes the batched shape; an unbatched scalar bound stays a scalar.
    lo, x, hi = (
        batched_operand(a, d, size, shape, keep_scalar=i != 1)
        for i, (a, d) in enumerate(zip(args, dims))
    )
    return clamp_p.bind(lo, x, hi), 0


def clamp(min, x, max):  # noqa: A002 (lax's argument names)
    """x clipped to [min, max] elementwise; min and max are scalars or have x's shape."""
    return clamp_p.bind(*lax_operands(min, x, max))


# --- convert_element_type --------------------------------------------------------------------
convert_element_type_p = Primitive("convert_element_type")


def _float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Saturating conversion with NaN -> 0, as XLA converts."""
    info = np.iinfo(dtype)
    x = np.asarray(x, dtype=np.float64) if x.dtype != np.float64 else x
    clipped = np.clip(np.nan_to_num(np.trunc(x), nan=0.0), info.min, info.max)
    out = clipped.astype(dtype)
    # float64 cannot represent int64/uint64 extremes exactly: fix the saturated ends.
    out = np.where(x >= float(info.max), info.max, out)
    out = np.where(x <= float(info.min), info.min, out)
    return out.astype(dtype)


@convert_element_type_p.def_impl
def _convert_element_type_impl(x: np.ndarray, *, new_dtype, weak_type) -> np.ndarray:
    if x.dtype == new_dtype:
        return x
    if new_dtype.kind in "iu" and x.dtype.kind in "fV" and x.dtype != np.bool_:
        with np.errstate(all="ignore"):
            return _float_to_int(x.astype(np.float64), new_dtype)
    if new_dtype.kind in "iu" and x.dtype.kind == "c":
        with np.errstate(all="ignore"):
            return _float_to_int(x.real.astype(np.float64), new_dtype)
    if new_dtype == np.bool_:
        return x != 0
    with np.errstate(all="ignore"):
        if x.dtype.kind == "c" and new_dtype.kind != "c":
            return x.real.astype(new_dtype)
        if dtypes.is_float8(x.dtype) and dtypes.is_narrow_float(new_dtype):
            x = x.astype(np.float32)  # exact; ml_dtypes lacks some direct 8-bit casts
        return x.astype(new_dtype)


@convert_element_type_p.def_abstract_eval
def _convert_element_type_abstract_eval(x: ShapedArray, *, new_dtype, weak_type) -> ShapedArray:
    return ShapedArray(x.shape, new_dtype, weak_type)


@convert_element_type_p.def_jvp
def _convert_element_type_jvp_rule(primals, tangents, *, new_dtype, weak_type):
    out = convert_element_type_p.bind(*primals, new_dtype=new_dtype, weak_type=weak_type)
    if not dtypes.is_inexact(new_dtype):  # an integer or bool result has no tangent
        return out, None
    return out, convert_element_type_p.bind(tangents[0], new_dtype=new_dtype, weak_type=weak_type)


@convert_element_type_p.def_transpose
def _convert_element_type_transpose_rule(ct, operand, *, new_dtype, weak_type):
    # Converting back is the transpose for every inexact pair: complex -> real keeps the real
    # part and real -> complex adds a zero imaginary one, which are each other's transposes.
    old = operand.aval
    if not dtypes.is_inexact(old.dtype):
        return [None]
    return [convert_element_type_p.bind(ct, new_dtype=old.dtype, weak_type=old.weak_type)]


elementwise_batching(convert_element_type_p)


def convert_element_type(operand, new_dtype, weak_type: bool = False):
    """Convert to `new_dtype` (canonicalized). Python scalars convert on the host."""
    new_dtype = dtypes.canonicalize(new_dtype)
    if isinstance(operand, (bool, int, float, builtins.complex, np.generic)) or (
        isinstance(operand, np.ndarray)
    ):
        with np.errstate(all="ignore"):
            value = np.asarray(operand)
            value = _convert_element_type_impl(value, new_dtype=new_dtype, weak_type=weak_type)
        return Array._wrap(np.array(value, dtype=new_dtype), weak_type)
    aval = operand.aval
    if aval.dtype == new_dtype and aval.weak_type == weak_type:
        return operand
    return convert_element_type_p.bind(operand, new_dtype=new_dtype, weak_type=weak_type)


# --- bitcast_convert_type --------------------------------------------------------------------
bitcast_convert_type_p = Primitive("bitcast_convert_type")


@bitcast_convert_type_p.def_impl
def _bitcast_convert_type_impl(x: np.ndarray, *, new_dtype) -> np.ndarray:
    return x.view(new_dtype).copy()


@bitcast_convert_type_p.def_abstract_eval
def _bitcast_convert_type_abstract_eval(x: ShapedArray, *, new_dtype) -> ShapedArray:
    if x.dtype.itemsize != new_dtype.itemsize:
        raise TypeError(
            f"bitcast_convert_type needs dtypes of equal width here: "
            f"{x.dtype.name} is {x.dtype.itemsize} bytes, {new_dtype.name} is "
            f"{new_dtype.itemsize}."
        )
    if x.dtype == np.bool_ or new_dtype == np.bool_:
        raise TypeError(
            "bitcast_convert_type does not convert to or from bool; use convert_element_type."
        )
    return ShapedArray(x.shape, new_dtype, False)


# As in JAX, the bits of a float reinterpreted are a piecewise-constant function of it.
defjvp_zero(bitcast_convert_type_p)
elementwise_batching(bitcast_convert_type_p)


def bitcast_convert_type(operand, new_dtype):
    """Reinterpret the bits of each element as `new_dtype` (which must have the same width)."""
    return bitcast_convert_type_p.bind(operand, new_dtype=dtypes.canonicalize(new_dtype))

"""Elementwise primitives: arithmetic, comparisons, transcendental functions, select and
dtype conversion. Each block holds all the rules of one primitive."""
from __future__ import annotations

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import (ANY, BOOL, COMPLEX, FLOAT, INEXACT, INT, INTEGRAL, NUMBER,
                                  broadcast_scalar_shapes, check_dtype, ignore_fp_errors,
                                  lax_operands, standard_binop, standard_unop, to_bool)

__all__ = [
    "add", "sub", "mul", "div", "rem", "neg", "max", "min", "pow", "exp", "log", "tanh",
    "eq", "ne", "lt", "le", "gt", "ge", "bitwise_not", "bitwise_and", "bitwise_or",
    "bitwise_xor", "select_n", "select", "convert_element_type",
]

# --- arithmetic ------------------------------------------------------------------------------
add_p = standard_binop("add", ignore_fp_errors(np.add), NUMBER)
sub_p = standard_binop("sub", ignore_fp_errors(np.subtract), NUMBER)
mul_p = standard_binop("mul", ignore_fp_errors(np.multiply), NUMBER)


def _div_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "iu":
        return np.true_divide(x, y).astype(x.dtype, copy=False)
    # C semantics, as XLA defines them: truncate toward zero; x / 0 == -1; INT_MIN / -1 wraps.
    x, y = np.broadcast_arrays(x, y)
    safe_y = np.where(y == 0, 1, y)
    if x.dtype.kind == "i":
        safe_y = np.where((safe_y == -1) & (x == np.iinfo(x.dtype).min), 1, safe_y)
        quotient = np.trunc(x.astype(np.float64) / safe_y).astype(x.dtype) \
            if x.dtype.itemsize < 8 else _trunc_div_int64(x, safe_y)
        quotient = np.where((y == -1) & (x == np.iinfo(x.dtype).min), x, quotient)
    else:
        quotient = x // safe_y
    return np.where(y == 0, np.array(-1).astype(x.dtype), quotient).astype(x.dtype)


def _trunc_div_int64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    q = np.abs(x) // np.abs(y)
    return np.where((x < 0) != (y < 0), -q, q)


div_p = standard_binop("div", ignore_fp_errors(_div_impl), NUMBER)


def _rem_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "iu":
        return np.fmod(x, y)
    x, y = np.broadcast_arrays(x, y)
    safe_y = np.where(y == 0, 1, y)
    if x.dtype.kind == "i":
        safe_y = np.where(safe_y == -1, 1, safe_y)  # x % -1 == 0, and INT_MIN % -1 must not trap
    out = np.fmod(x, safe_y)
    return np.where(y == 0, x, out).astype(x.dtype)


rem_p = standard_binop("rem", ignore_fp_errors(_rem_impl), (INT, FLOAT))
neg_p = standard_unop("neg", ignore_fp_errors(np.negative), NUMBER)
max_p = standard_binop("max", ignore_fp_errors(np.maximum), ANY)
min_p = standard_binop("min", ignore_fp_errors(np.minimum), ANY)
pow_p = standard_binop("pow", ignore_fp_errors(np.power), INEXACT)

# --- transcendental --------------------------------------------------------------------------
exp_p = standard_unop("exp", ignore_fp_errors(np.exp), INEXACT)
log_p = standard_unop("log", ignore_fp_errors(np.log), INEXACT)
tanh_p = standard_unop("tanh", ignore_fp_errors(np.tanh), INEXACT)

# --- comparisons -----------------------------------------------------------------------------
eq_p = standard_binop("eq", np.equal, ANY, result_dtype=to_bool)
ne_p = standard_binop("ne", np.not_equal, ANY, result_dtype=to_bool)
lt_p = standard_binop("lt", np.less, (BOOL, INT, FLOAT), result_dtype=to_bool)
le_p = standard_binop("le", np.less_equal, (BOOL, INT, FLOAT), result_dtype=to_bool)
gt_p = standard_binop("gt", np.greater, (BOOL, INT, FLOAT), result_dtype=to_bool)
ge_p = standard_binop("ge", np.greater_equal, (BOOL, INT, FLOAT), result_dtype=to_bool)

# --- logical / bitwise -----------------------------------------------------------------------
not_p = standard_unop("not", np.invert, INTEGRAL)
and_p = standard_binop("and", np.bitwise_and, INTEGRAL)
or_p = standard_binop("or", np.bitwise_or, INTEGRAL)
xor_p = standard_binop("xor", np.bitwise_xor, INTEGRAL)

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
            raise TypeError("select_n cases must all have the same shape and dtype, got "
                            f"{', '.join(c.str_short() for c in cases)}")
    if which.shape not in ((), first.shape):
        raise TypeError(f"select_n selector shape {which.shape} must be scalar or equal to "
                        f"the case shape {first.shape}")
    return ShapedArray(first.shape, first.dtype, all(c.weak_type for c in cases))


@select_n_p.def_weak_type
def _select_n_weak_type(in_weak, **params) -> bool:
    return all(in_weak[1:])


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
        return x.astype(new_dtype)


@convert_element_type_p.def_abstract_eval
def _convert_element_type_abstract_eval(x: ShapedArray, *, new_dtype, weak_type) -> ShapedArray:
    return ShapedArray(x.shape, new_dtype, weak_type)


@convert_element_type_p.def_weak_type
def _convert_element_type_weak_type(in_weak, *, new_dtype, weak_type) -> bool:
    return weak_type


# --- wrappers (the lax API) ------------------------------------------------------------------

def _binary(prim):
    def wrapper(x, y):
        return prim.bind(*lax_operands(x, y))
    wrapper.__name__ = prim.name
    wrapper.__doc__ = f"Elementwise {prim.name} (lax-level: same dtypes, equal shapes)."
    return wrapper


def _unary(prim):
    def wrapper(x):
        return prim.bind(x)
    wrapper.__name__ = prim.name
    wrapper.__doc__ = f"Elementwise {prim.name}."
    return wrapper


add, sub, mul, div, rem = (_binary(p) for p in (add_p, sub_p, mul_p, div_p, rem_p))
max, min, pow = (_binary(p) for p in (max_p, min_p, pow_p))  # noqa: A001 (lax's names)
eq, ne, lt, le, gt, ge = (_binary(p) for p in (eq_p, ne_p, lt_p, le_p, gt_p, ge_p))
bitwise_and, bitwise_or, bitwise_xor = (_binary(p) for p in (and_p, or_p, xor_p))
neg, exp, log, tanh, bitwise_not = (_unary(p) for p in (neg_p, exp_p, log_p, tanh_p, not_p))


def select_n(which, *cases):
    """cases[which] elementwise; a boolean `which` picks cases[1] where True."""
    return select_n_p.bind(which, *lax_operands(*cases))


def select(pred, on_true, on_false):
    """on_true where pred else on_false (lax.select)."""
    return select_n(pred, on_false, on_true)


def convert_element_type(operand, new_dtype, weak_type: bool = False):
    """Convert to `new_dtype` (canonicalized). Python scalars convert on the host."""
    new_dtype = dtypes.canonicalize(new_dtype)
    if isinstance(operand, (bool, int, float, complex, np.generic)) or (
            isinstance(operand, np.ndarray)):
        from kiln.runtime.array import Array
        with np.errstate(all="ignore"):
            value = np.asarray(operand)
            value = _convert_element_type_impl(value, new_dtype=new_dtype, weak_type=weak_type)
        return Array._wrap(np.array(value, dtype=new_dtype), weak_type)
    aval = operand.aval
    if aval.dtype == new_dtype and aval.weak_type == weak_type:
        return operand
    return convert_element_type_p.bind(operand, new_dtype=new_dtype, weak_type=weak_type)

"""Lowering rules for the elementwise primitives: one scalar op (or a few) per output element.

Rank-0 operands broadcast (lax lets them), so every operand is read at the output index or at
(). Semantics follow the NumPy impls, which the scalar-op table in codegen/llvm/scalar_ops.py
already matches (XLA integer division, saturating float->int casts, NaN-propagating max/min);
float16/bfloat16 ops compute in float32 and round once, as the impls' via_float32 does.
"""

from __future__ import annotations

import numpy as np

from kiln.compiler import kir
from kiln.compiler.kir import Const, Expr, ScalarOp
from kiln.compiler.lower import NotLowerable, register_lowering
from kiln.primitives import elementwise as ew
from kiln.primitives import elementwise_math as em

O = ScalarOp
_F32 = np.dtype(np.float32)
_NARROW = frozenset({np.dtype(np.float16), kir.BFLOAT16})


def _read(index, operands) -> list[Expr]:
    return [x.read(index if x.ndim else ()) for x in operands]


def _elementwise(scalar_op: ScalarOp):
    def rule(ctx, index, *operands, **params):
        return kir.op(scalar_op, *_read(index, operands))

    rule.__name__ = f"_{scalar_op.value}_lowering_rule"
    rule.scalar_op = scalar_op  # (what the rule computes: lower.one_op)
    return rule


_ONE_OP = {
    ew.add_p: O.ADD,
    ew.add_any_p: O.ADD,
    ew.sub_p: O.SUB,
    ew.mul_p: O.MUL,
    ew.div_p: O.DIV,
    ew.rem_p: O.REM,
    ew.neg_p: O.NEG,
    ew.max_p: O.MAX,
    ew.min_p: O.MIN,
    ew.abs_p: O.ABS,
    ew.sign_p: O.SIGN,
    ew.floor_p: O.FLOOR,
    ew.ceil_p: O.CEIL,
    ew.is_finite_p: O.IS_FINITE,
    ew.nextafter_p: O.NEXTAFTER,
    ew.eq_p: O.EQ,
    ew.ne_p: O.NE,
    ew.lt_p: O.LT,
    ew.le_p: O.LE,
    ew.gt_p: O.GT,
    ew.ge_p: O.GE,
    ew.population_count_p: O.POPULATION_COUNT,
    ew.clz_p: O.CLZ,
    ew.shift_left_p: O.SHIFT_LEFT,
    ew.shift_right_logical_p: O.SHIFT_RIGHT_LOGICAL,
    ew.shift_right_arithmetic_p: O.SHIFT_RIGHT_ARITHMETIC,
    em.exp_p: O.EXP,
    em.exp2_p: O.EXP2,
    em.log_p: O.LOG,
    em.log1p_p: O.LOG1P,
    em.expm1_p: O.EXPM1,
    em.sqrt_p: O.SQRT,
    em.rsqrt_p: O.RSQRT,
    em.cbrt_p: O.CBRT,
    em.sin_p: O.SIN,
    em.cos_p: O.COS,
    em.tan_p: O.TAN,
    em.asin_p: O.ASIN,
    em.acos_p: O.ACOS,
    em.atan_p: O.ATAN,
    em.atan2_p: O.ATAN2,
    em.sinh_p: O.SINH,
    em.cosh_p: O.COSH,
    em.tanh_p: O.TANH,
    em.asinh_p: O.ASINH,
    em.acosh_p: O.ACOSH,
    em.atanh_p: O.ATANH,
    em.logistic_p: O.LOGISTIC,
    em.erf_p: O.ERF,
    em.erfc_p: O.ERFC,
    em.erf_inv_p: O.ERF_INV,
    em.lgamma_p: O.LGAMMA,
    em.digamma_p: O.DIGAMMA,
}
for _prim, _op in _ONE_OP.items():
    register_lowering(_prim)(_elementwise(_op))


def _logical_or_bitwise(name: str):
    def rule(ctx, index, *operands, **params):
        args = _read(index, operands)
        prefix = "LOGICAL_" if args[0].dtype == kir.BOOL else "BITWISE_"
        return kir.op(ScalarOp[prefix + name], *args)

    return rule


for _prim, _name in ((ew.not_p, "NOT"), (ew.and_p, "AND"), (ew.or_p, "OR"), (ew.xor_p, "XOR")):
    register_lowering(_prim)(_logical_or_bitwise(_name))


@register_lowering(em.square_p)
def _square_lowering_rule(ctx, index, x):
    value = x.read(index)
    return kir.op(O.MUL, value, value)


@register_lowering(ew.round_p)
def _round_lowering_rule(ctx, index, x, *, rounding_method):
    method = (
        O.ROUND_HALF_EVEN
        if rounding_method == ew.RoundingMethod.TO_NEAREST_EVEN
        else O.ROUND_HALF_AWAY
    )
    return kir.op(method, x.read(index))


@register_lowering(ew.integer_pow_p)
def _integer_pow_lowering_rule(ctx, index, x, *, y):
    """Binary exponentiation, one rounding per multiply, as the impl (and XLA) computes it;
    float16/bfloat16 multiply in float32 and round once at the end."""
    value = x.read(index)
    dtype = value.dtype
    if y == 0:
        return Const(1, dtype)
    base = kir.cast(value, _F32) if dtype in _NARROW else value
    acc, n = None, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else kir.op(O.MUL, acc, base)
        n >>= 1
        if n:
            base = kir.op(O.MUL, base, base)
    if y < 0:
        if kir.dtype_family(acc.dtype) != "float":
            raise NotLowerable("integer_pow with a negative exponent needs a float operand")
        acc = kir.op(O.DIV, Const(1.0, acc.dtype), acc)
    return kir.cast(acc, dtype)


@register_lowering(em.pow_p)
def _pow_lowering_rule(ctx, index, x, y):
    base, exponent = _read(index, (x, y))
    if exponent.dtype == base.dtype:
        return kir.op(O.POW, base, exponent)
    # An integer exponent: converted to the base's float type (float32 for narrow bases, which
    # compute in float32 anyway), as the impl does.
    compute = _F32 if base.dtype in _NARROW else base.dtype
    result = kir.op(O.POW, kir.cast(base, compute), kir.cast(exponent, compute))
    return kir.cast(result, base.dtype)


@register_lowering(ew.select_n_p)
def _select_n_lowering_rule(ctx, index, which, *cases):
    selector = which.read(index if which.ndim else ())
    values = [c.read(index) for c in cases]
    if len(values) == 1:
        return values[0]
    if selector.dtype == kir.BOOL:
        return kir.select(selector, values[1], values[0])
    # An integer selector is clipped to [0, n - 1]: case k wins where selector <= k.
    result = values[-1]
    for k in range(len(values) - 2, -1, -1):
        result = kir.select(kir.op(O.LE, selector, Const(k, selector.dtype)), values[k], result)
    return result


@register_lowering(ew.clamp_p)
def _clamp_lowering_rule(ctx, index, lo, x, hi):
    low, value, high = _read(index, (lo, x, hi))
    # max first, then min: NaN bounds and operands propagate, as the impl's do.
    return kir.op(O.MIN, kir.op(O.MAX, value, low), high)


@register_lowering(ew.convert_element_type_p)
def _convert_element_type_lowering_rule(ctx, index, x, *, new_dtype, weak_type):
    return kir.cast(x.read(index), new_dtype)

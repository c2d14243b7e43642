"""Lowering rules for the reductions: an output element is a Reduce expression over the reduced
axes (nested, the last axis innermost so it streams contiguous memory), whose body is the
operand's element, itself fused. The emitter computes a reduction once per output element
and hoists it out of loops it does not depend on, so a consumer such as `x - max(x, axis=-1)`
reads the same Reduce node and the whole computation stays one loop nest.

float16/bfloat16 sums and products accumulate in float32 and round once (as the impls do).
"""

from __future__ import annotations

import numpy as np

from kiln.compiler import kir
from kiln.compiler.kir import Expr, Reduce, ReduceKind
from kiln.compiler.lower import register_lowering
from kiln.primitives import reductions as red

_F32 = np.dtype(np.float32)
_NARROW = frozenset({np.dtype(np.float16), kir.BFLOAT16})

_KINDS = {
    red.reduce_sum_p: ReduceKind.SUM,
    red.reduce_prod_p: ReduceKind.PROD,
    red.reduce_max_p: ReduceKind.MAX,
    red.reduce_min_p: ReduceKind.MIN,
    red.reduce_and_p: ReduceKind.AND,
    red.reduce_or_p: ReduceKind.OR,
    red.reduce_xor_p: ReduceKind.XOR,
}


def _operand_index(out_index, ndim: int, axes, reduce_vars: dict) -> list:
    rest = iter(out_index)
    return [reduce_vars[d] if d in reduce_vars else next(rest) for d in range(ndim)]


def _reduction(kind: ReduceKind):
    def rule(ctx, index, x, *, axes):
        axes = sorted(axes)
        reduce_vars = {d: ctx.fresh("k") for d in axes}
        value: Expr = x.read(_operand_index(index, x.ndim, axes, reduce_vars))
        # Narrow sums and products accumulate in float32 across every axis, rounding once.
        widen = value.dtype in _NARROW and kind in (ReduceKind.SUM, ReduceKind.PROD)
        if widen:
            value = kir.cast(value, _F32)
        for d in reversed(axes):
            value = Reduce(kind, reduce_vars[d], 0, x.shape[d], value)
        return kir.cast(value, x.dtype)

    rule.__name__ = f"_{kind.value}_lowering_rule"
    return rule


for _prim, _kind in _KINDS.items():
    register_lowering(_prim)(_reduction(_kind))


def _arg_reduction(kind: ReduceKind):
    def rule(ctx, index, x, *, axes, index_dtype):
        (axis,) = axes
        var = ctx.fresh("k")
        value = x.read(_operand_index(index, x.ndim, axes, {axis: var}))
        return Reduce(kind, var, 0, x.shape[axis], value, index_dtype=index_dtype)

    rule.__name__ = f"_{kind.value}_lowering_rule"
    return rule


register_lowering(red.argmax_p)(_arg_reduction(ReduceKind.ARGMAX))
register_lowering(red.argmin_p)(_arg_reduction(ReduceKind.ARGMIN))

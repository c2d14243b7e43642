"""Lowering rules of the contraction primitive: a dot_general that contracts nothing (the outer
products of per-example gradients, `x[:, None] * y[None, :]` written as a product) is one
multiplication per output element, so it fuses into its neighbours' loop nests like any other
elementwise op. Products that sum over an axis go to BLAS through the reference impl."""

from __future__ import annotations

from kiln.compiler import kir
from kiln.compiler.kir import ScalarOp
from kiln.compiler.lower import NotLowerable, register_lowering
from kiln.primitives.linalg import dot_general_p


@register_lowering(dot_general_p)
def _dot_general_lowering_rule(
    ctx, index, lhs, rhs, *, dimension_numbers, precision=None, preferred_element_type=None
):
    (lc, rc), (lb, rb) = dimension_numbers
    if lc or rc:
        raise NotLowerable("a dot_general that contracts axes runs through BLAS")
    out_dtype = ctx.eqn.outvars[0].aval.dtype
    if lhs.dtype != out_dtype or rhs.dtype != out_dtype or out_dtype.kind not in "fiu":
        raise NotLowerable("mixed or complex dtypes: the reference impl converts them")
    # Output dims: batch dims, then lhs's free dims in order, then rhs's free dims in order.
    lhs_free = [d for d in range(lhs.ndim) if d not in lb]
    rhs_free = [d for d in range(rhs.ndim) if d not in rb]
    nb = len(lb)
    lhs_index: list = [None] * lhs.ndim
    rhs_index: list = [None] * rhs.ndim
    for position, (dl, dr) in enumerate(zip(lb, rb)):
        lhs_index[dl] = index[position]
        rhs_index[dr] = index[position]
    for offset, d in enumerate(lhs_free):
        lhs_index[d] = index[nb + offset]
    for offset, d in enumerate(rhs_free):
        rhs_index[d] = index[nb + len(lhs_free) + offset]
    return kir.op(ScalarOp.MUL, lhs.read(lhs_index), rhs.read(rhs_index))

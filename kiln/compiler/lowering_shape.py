"""Lowering rules for the shape primitives: each maps an output index to the operand index it
reads, so broadcasts, reshapes, transposes, slices, pads and concatenations fuse into their
consumers' loop nests as index arithmetic and never copy memory.

Selects evaluate both sides, so reads on the side not taken (pad, concatenate) are clamped
into their operand: nothing ever loads out of bounds.
"""

from __future__ import annotations

import math
from typing import Sequence

from kiln.compiler import kir
from kiln.compiler.kir import Expr, ScalarOp
from kiln.compiler.lower import NotLowerable, register_lowering
from kiln.primitives import shape as shape_prims
from kiln.primitives.custom_derivatives import stop_gradient_p
from kiln.primitives.remat import optimization_barrier_p
from kiln.primitives import shape_slice

O = ScalarOp


def _all(conditions: Sequence[Expr]) -> Expr | None:
    result = None
    for cond in conditions:
        result = cond if result is None else kir.op(O.LOGICAL_AND, result, cond)
    return result


@register_lowering(shape_prims.broadcast_in_dim_p)
def _broadcast_in_dim_lowering_rule(ctx, index, x, *, shape, broadcast_dimensions):
    source = [
        0 if x.shape[src] == 1 and shape[dst] != 1 else index[dst]
        for src, dst in enumerate(broadcast_dimensions)
    ]
    return x.read(source)


def reshape_index(
    index: Sequence[Expr], out_shape: Sequence[int], in_shape: Sequence[int]
) -> list[Expr]:
    """The operand index a row-major reshape reads. Dimensions are matched in groups of equal
    product, so a reshape that splits or merges a few axes only divides within those groups,
    and size-1 axes cost nothing."""
    if math.prod(in_shape) == 0:
        return [kir.as_index(0)] * len(in_shape)
    out_dims = [d for d, n in enumerate(out_shape) if n != 1]
    in_dims = [d for d, n in enumerate(in_shape) if n != 1]
    source: list[Expr] = [kir.as_index(0)] * len(in_shape)
    o = i = 0
    while o < len(out_dims) or i < len(in_dims):
        group_out, group_in = [out_dims[o]], [in_dims[i]]
        o, i = o + 1, i + 1
        out_size, in_size = out_shape[group_out[0]], in_shape[group_in[0]]
        while out_size != in_size:
            if out_size < in_size:
                group_out.append(out_dims[o])
                out_size *= out_shape[out_dims[o]]
                o += 1
            else:
                group_in.append(in_dims[i])
                in_size *= in_shape[in_dims[i]]
                i += 1
        if len(group_out) == 1 and len(group_in) == 1:
            source[group_in[0]] = index[group_out[0]]
            continue
        flat = kir.flat_index([out_shape[d] for d in group_out], [index[d] for d in group_out])
        for d, value in zip(group_in, kir.unravel(flat, [in_shape[d] for d in group_in])):
            source[d] = value
    return source


@register_lowering(shape_prims.reshape_p)
def _reshape_lowering_rule(ctx, index, x, *, new_sizes, dimensions):
    if dimensions is None:
        return x.read(reshape_index(index, new_sizes, x.shape))
    # Transpose by `dimensions`, then reshape: read the transposed operand's index back
    # through the permutation.
    transposed_shape = [x.shape[d] for d in dimensions]
    transposed = reshape_index(index, new_sizes, transposed_shape)
    source: list = [None] * x.ndim
    for position, d in enumerate(dimensions):
        source[d] = transposed[position]
    return x.read(source)


@register_lowering(shape_prims.squeeze_p)
def _squeeze_lowering_rule(ctx, index, x, *, dimensions):
    rest = iter(index)
    return x.read([0 if d in dimensions else next(rest) for d in range(x.ndim)])


@register_lowering(shape_prims.transpose_p)
def _transpose_lowering_rule(ctx, index, x, *, permutation):
    source: list = [None] * x.ndim
    for position, d in enumerate(permutation):
        source[d] = index[position]
    return x.read(source)


@register_lowering(shape_prims.rev_p)
def _rev_lowering_rule(ctx, index, x, *, dimensions):
    return x.read(
        [kir.index_sub(x.shape[d] - 1, i) if d in dimensions else i for d, i in enumerate(index)]
    )


@register_lowering(shape_prims.copy_p)
@register_lowering(stop_gradient_p)
@register_lowering(optimization_barrier_p)
def _copy_lowering_rule(ctx, index, x):
    return x.read(index)


@register_lowering(shape_slice.slice_p)
def _slice_lowering_rule(ctx, index, x, *, start_indices, limit_indices, strides):
    steps = strides or (1,) * x.ndim
    return x.read(
        [kir.affine([(i, step)], start) for i, start, step in zip(index, start_indices, steps)]
    )


@register_lowering(shape_slice.pad_p)
def _pad_lowering_rule(ctx, index, x, padding_value, *, padding_config):
    source, inside = [], []
    for i, n, (lo, hi, interior) in zip(index, x.shape, padding_config):
        position = kir.index_sub(i, lo)  # where i falls on the interior-dilated operand
        step = interior + 1
        if interior:
            operand_index = kir.index_div(position, step)
            on_grid = kir.op(O.EQ, kir.index_rem(position, step), kir.as_index(0))
            inside += [
                kir.op(O.GE, position, kir.as_index(0)),
                on_grid,
                kir.op(O.LE, position, kir.as_index(step * (n - 1))),
            ]
        else:
            operand_index = position
            if lo > 0:
                inside.append(kir.op(O.GE, position, kir.as_index(0)))
            if hi > 0:
                inside.append(kir.op(O.LT, position, kir.as_index(n)))
        source.append(kir.clamp(operand_index, 0, max(n - 1, 0)))
    value = x.read(source)
    condition = _all(inside)
    if condition is None:
        return value
    return kir.select(condition, value, padding_value.read(()))


#: A concatenation of more operands than this runs through its impl: the select chain reads
#: every operand at every output element, so its cost grows with the square of the count.
MAX_CONCATENATE_OPERANDS = 16


@register_lowering(shape_slice.concatenate_p)
def _concatenate_lowering_rule(ctx, index, *operands, dimension):
    if len(operands) > MAX_CONCATENATE_OPERANDS:
        raise NotLowerable(f"concatenate of {len(operands)} operands")
    offsets, start = [], 0
    for x in operands:
        offsets.append(start)
        start += x.shape[dimension]

    def read(k: int) -> Expr:
        x = operands[k]
        source = list(index)
        local = kir.index_sub(index[dimension], offsets[k])
        source[dimension] = kir.clamp(local, 0, max(x.shape[dimension] - 1, 0))
        return x.read(source)

    nonempty = [k for k, x in enumerate(operands) if x.shape[dimension]]
    result = read(nonempty[-1]) if nonempty else read(len(operands) - 1)
    for k in reversed(nonempty[:-1]):
        end = offsets[k] + operands[k].shape[dimension]
        result = kir.select(kir.op(O.LT, index[dimension], kir.as_index(end)), read(k), result)
    return result


@register_lowering(shape_slice.iota_p)
def _iota_lowering_rule(ctx, index, *, dtype, shape, dimension):
    return kir.cast(index[dimension], dtype)

"""Lowering rules for dynamic_slice, dynamic_update_slice and gather: runtime start positions
become clamped index arithmetic, so every load stays in bounds whatever the indices hold
(XLA's clamping rules, as the impls apply them), and the indices themselves may be fused
expressions (an iota, a `where` that wraps negative indices).
"""

from __future__ import annotations

from kiln.compiler import kir
from kiln.compiler.kir import Expr, ScalarOp
from kiln.compiler.lower import NotLowerable, register_lowering, to_index
from kiln.primitives import indexing, indexing_gather

O = ScalarOp


def _clamped_start(start: Expr, dim: int, size: int) -> Expr:
    return kir.clamp(to_index(start), 0, dim - size)


@register_lowering(indexing.dynamic_slice_p)
def _dynamic_slice_lowering_rule(ctx, index, x, *starts, slice_sizes):
    begins = [
        _clamped_start(s.read(()), dim, size) for s, dim, size in zip(starts, x.shape, slice_sizes)
    ]
    return x.read([kir.index_add(i, b) for i, b in zip(index, begins)])


@register_lowering(indexing.dynamic_update_slice_p)
def _dynamic_update_slice_lowering_rule(ctx, index, x, update, *starts):
    """A select over the update's index range: inside it the update, elsewhere the operand."""
    inside, source = None, []
    for i, s, dim, size in zip(index, starts, x.shape, update.shape):
        begin = _clamped_start(s.read(()), dim, size)
        offset = kir.index_sub(i, begin)
        source.append(kir.clamp(offset, 0, max(size - 1, 0)))
        within = kir.op(
            O.LOGICAL_AND,
            kir.op(O.GE, offset, kir.as_index(0)),
            kir.op(O.LT, offset, kir.as_index(size)),
        )
        inside = within if inside is None else kir.op(O.LOGICAL_AND, inside, within)
    original = x.read(index)
    if update.size == 0:
        return original
    if inside is None:  # rank 0: the update replaces the whole operand
        return update.read(())
    return kir.select(inside, update.read(source), original)


@register_lowering(indexing_gather.gather_p)
def _gather_lowering_rule(
    ctx,
    index,
    operand,
    indices,
    *,
    dimension_numbers,
    slice_sizes,
    indices_are_sorted,
    unique_indices,
    mode,
    fill_value,
):
    dn = dimension_numbers
    batch_index = [i for d, i in enumerate(index) if d not in dn.offset_dims]
    window_index = iter([i for d, i in enumerate(index) if d in dn.offset_dims])
    dropped = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    starts: dict[int, Expr] = {}
    for k, operand_dim in enumerate(dn.start_index_map):
        starts[operand_dim] = to_index(indices.read(batch_index + [k]))
    in_bounds = None
    if mode == indexing_gather.GatherScatterMode.FILL_OR_DROP:
        for operand_dim, start in starts.items():
            upper = operand.shape[operand_dim] - slice_sizes[operand_dim]
            ok = kir.op(
                O.LOGICAL_AND,
                kir.op(O.GE, start, kir.as_index(0)),
                kir.op(O.LE, start, kir.as_index(upper)),
            )
            in_bounds = ok if in_bounds is None else kir.op(O.LOGICAL_AND, in_bounds, ok)
    for operand_dim, indices_dim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
        starts[operand_dim] = batch_index[indices_dim]
    source = []
    for d, (dim, size) in enumerate(zip(operand.shape, slice_sizes)):
        start = starts.get(d)
        start = kir.as_index(0) if start is None else kir.clamp(start, 0, dim - size)
        offset = kir.as_index(0) if d in dropped else next(window_index)
        source.append(kir.index_add(start, offset))
    value = operand.read(source)
    if in_bounds is None:
        return value
    fill = indexing_gather.default_fill_value(operand.dtype) if fill_value is None else fill_value
    try:
        fill_const = kir.Const(fill, operand.dtype)
    except (kir.KirError, TypeError, ValueError, OverflowError):
        raise NotLowerable(f"gather fill_value {fill!r} does not fit {operand.dtype}") from None
    return kir.select(in_bounds, value, fill_const)

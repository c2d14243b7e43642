"""A segment plan's kernels as kernel IR: the loop nest of each group of fused values
(kernel_body), and the same kernel restricted to a range of its outer loops for a parallel
chunk (chunked_kernel). fusion.py decides what each kernel computes; this module writes the
statements."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.compiler import kir, kir_rewrite
from kiln.compiler.kir import Buffer, Kernel, Loop, Reduce, Store, Var

if TYPE_CHECKING:
    from kiln.compiler.fusion import KernelPlan, SegmentPlan


def _nest(shape, index: list, body: list, bounds: dict | None = None, first: int = 0) -> list:
    """Loops over dimensions first.. of shape (index vars given), innermost last."""
    stmts = body
    for d in range(len(shape) - 1, first - 1, -1):
        start, stop = (bounds or {}).get(d, (0, shape[d]))
        stmts = [Loop(index[d], start, stop, stmts)]
    return stmts


def kernel_body(plan: SegmentPlan, group: KernelPlan, bounds: dict | None = None) -> list:
    """The statements of a group's kernel; `bounds` ({dim: (start, stop)}) restricts outer
    loops (the parallel chunks). In a merged kernel, reductions over row buffers are computed
    into scalar temps before the loops that use them: the emitter recomputes a value that
    reads a buffer its kernel writes at every use, so left inside the loop a row sum would run
    once per element."""
    builder, buffers, local = plan.builder, plan.buffers, plan.row_local
    if group.product is not None:
        from kiln.compiler import lowering_linalg

        (var,) = group.parts[0]
        lhs, rhs = group.product.eqn.invars
        return lowering_linalg.product_body(
            group.product, buffers[var], buffers[lhs], buffers[rhs], bounds
        )
    if len(group.parts) == 1 and not any(v in local for v in group.parts[0]):
        shape = group.shape
        index = [Var(f"i{d}") for d in range(len(shape))]
        body = [
            Store(buffers[v], kir.flat_index(shape, index), builder.expression(v, index))
            for v in group.parts[0]
        ]
        return _nest(shape, index, body, bounds)
    outer = Var("i0")
    inner_body: list = []
    written: set = set()
    extracted: dict = {}
    scalars: list = []
    for part in group.parts:
        shape = part[0].aval.shape
        index = [outer] + [Var(f"i{d}") for d in range(1, len(shape))]
        part_stores = []
        for var in part:
            value = builder.expression(var, index)
            if var in local:
                row = local[var]
                part_stores.append(Store(row, kir.flat_index(row.shape, index[1:]), value))
            else:
                part_stores.append(Store(buffers[var], kir.flat_index(shape, index), value))
        loops = _nest(shape, index, part_stores, first=1)
        if len(shape) > 1:
            roots = [e for s in kir.walk_stmts(loops) for e in kir.stmt_exprs(s)]
            for node in kir.toposort(roots):
                if (
                    isinstance(node, Reduce)
                    and node not in extracted
                    and kir_rewrite.free_vars(node) <= {outer}
                    and _reads_any(node, written)
                ):
                    scalar = Buffer(f"{group.kernel_name}_r{len(scalars)}", node.dtype, (), "temp")
                    scalars.append(scalar)
                    inner_body.append(
                        Store(scalar, kir.as_index(0), kir_rewrite.substitute(node, extracted))
                    )
                    extracted[node] = kir.Load(scalar, kir.as_index(0))
            if extracted:
                loops = [kir_rewrite.substitute_stmt(s, extracted) for s in loops]
        inner_body += loops
        written |= {s.buffer for s in part_stores}
    group.local_buffers = [local[v] for v in group.values if v in local] + scalars
    start, stop = (bounds or {}).get(0, (0, group.shape[0]))
    return [Loop(outer, start, stop, inner_body)]


def _reads_any(node, buffers: set) -> bool:
    return bool(buffers) and any(
        isinstance(n, kir.Load) and n.buffer in buffers for n in kir.toposort([node])
    )


def chunked_kernel(plan: SegmentPlan, group: KernelPlan, bounds: dict) -> Kernel:
    """The group's kernel restricted to `bounds` ({dim: (start, stop)}) of its outer loops:
    its own statements with those loops' ranges replaced, where the kernel is the loop nest
    kernel_body builds (dims 0.. over i0..), else built again with the bounds."""
    kernel = group.kernel
    nest = len(group.parts) == 1 and not any(v in plan.row_local for v in group.parts[0])
    if group.product is None and (nest or set(bounds) == {0}):  # (a merged kernel: dim 0)
        body = _bounded(kernel.body, bounds, 0)
        if body is not None:  # (its parameters found again: the bounds may read a buffer)
            return Kernel(kernel.name, body)
    if group.row_block is not None or group.whole:  # (folded: not what kernel_body builds)
        raise kir.KirError(f"{kernel.name} cannot be chunked along {sorted(bounds)}")
    return Kernel(kernel.name, kernel_body(plan, group, bounds))


def _bounded(stmts: tuple, bounds: dict, dim: int) -> list | None:
    """stmts, a loop nest whose loop over dim d binds i{d}, with the loops over the dims in
    bounds (all at or below `dim`) ranging over bounds[d]; None if stmts is not such a nest."""
    if all(d < dim for d in bounds):
        return list(stmts)
    if len(stmts) != 1 or not isinstance(stmts[0], Loop) or stmts[0].var.name != f"i{dim}":
        return None
    loop = stmts[0]
    inner = _bounded(loop.body, bounds, dim + 1)
    if inner is None:
        return None
    start, stop = bounds.get(dim, (loop.start, loop.stop))
    return [Loop(loop.var, start, stop, inner)]

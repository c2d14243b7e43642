"""Fusion's cost rule: how often each node of a kernel runs, and a kernel's work.

A node runs once per iteration of every loop down to the deepest loop (or reduction)
variable it depends on: the emitter hoists reductions, LLVM hoists the rest. fusion.py stores
an expensive value that, fused, would run more often than it has elements; the runtime splits
kernels whose work makes threads pay (kiln.runtime.native_segment).
"""

from __future__ import annotations

import weakref

from kiln.compiler import kir, kir_rewrite
from kiln.compiler.kir import Const, Kernel, Loop, Reduce, Var

_counts_of: "weakref.WeakKeyDictionary[Kernel, dict]" = weakref.WeakKeyDictionary()


def evaluation_counts(kernel: Kernel) -> dict:
    """How many times each node of a kernel runs: once per iteration of every loop down to the
    deepest loop (or reduction) variable it depends on (kept per kernel: the planner's budget
    check and the runtime's work estimate both ask)."""
    counts = _counts_of.get(kernel)
    if counts is None:
        counts = _counts_of[kernel] = _evaluation_counts(kernel)
    return counts


def _evaluation_counts(kernel: Kernel) -> dict:
    chain: dict[Var, int] = {}

    def walk(stmts, outer: int):
        for stmt in stmts:
            if isinstance(stmt, Loop):
                count = outer * _static_extent(stmt.start, stmt.stop)
                chain[stmt.var] = count
                walk(stmt.body, count)

    walk(kernel.body, 1)
    roots = [e for s in kir.walk_stmts(kernel.body) for e in kir.stmt_exprs(s)]
    nodes = kir.toposort(roots)
    free: dict = {}
    kir_rewrite.free_vars_in_order(nodes, free)

    def depth_count(variables) -> int:
        return max((chain.get(v, 1) for v in variables), default=1)

    for node in reversed(nodes):  # parents first: an outer reduction's variable is known
        if isinstance(node, Reduce):
            chain[node.var] = depth_count(free[node]) * _static_extent(node.start, node.stop)
    return {node: depth_count(free[node]) for node in nodes}


def _static_extent(start, stop) -> int:
    if isinstance(start, Const) and isinstance(stop, Const):
        return max(stop.value - start.value, 0)
    return 1


def kernel_work(kernel: Kernel) -> int:
    """A kernel's work: the trip count of its innermost iterations, plus four for each
    transcendental op evaluation (an exp costs about as much as a few loads and stores)."""
    counts = evaluation_counts(kernel)
    iterations = max(counts.values(), default=1) + _product_work(kernel.body, 1)
    heavy = sum(
        count
        for node, count in counts.items()
        if isinstance(node, kir.Op) and node.op in kir.OpGroup.TRANSCENDENTAL
    )
    return iterations + 4 * heavy


#: A BLAS multiply-add costs about this fraction of a fused loop iteration (it runs near the
#: core's peak from cache): the weight of a product's work next to the other kernels'.
MULTIPLY_ADDS_PER_ITERATION = 8


def _product_work(body, outer: int) -> int:
    total = 0
    for stmt in body:
        if isinstance(stmt, Loop):
            total += _product_work(stmt.body, outer * _static_extent(stmt.start, stmt.stop))
        elif isinstance(stmt, kir.MatMul):
            extents = [e.value if isinstance(e, Const) else 1 for e in (stmt.m, stmt.n, stmt.k)]
            total += outer * extents[0] * extents[1] * extents[2] // MULTIPLY_ADDS_PER_ITERATION
    return total

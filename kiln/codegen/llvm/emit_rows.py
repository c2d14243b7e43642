"""Row parts: one large kernel compiled on two threads.

LLVM optimizes and generates code for one function on one thread, so a program whose work is
one large kernel (a layernorm and a softmax fused row by row, their gradient) kept the second
compile thread idle. Such a kernel's row loop body is cut in two functions of the row index,
each in a module of its own: the first (the "row part", exported from its module) computes
the row's reductions and runs the body's first statements; the second, inlined into the
kernel (now a driver that calls both for each row of its chunk, in the other module with the
entry), runs the other statements with the reductions the first passed it in stack slots.
The two modules compile at once (kiln.runtime.llvm_threads): the heavier one, module 0, is
emitted first and starts on the helper thread while the calling thread emits the other.

The results are the same bits: each row runs the same statements in the same order, and each
value is computed by the same code; the reductions the emitter computes once per row at the
start of the row loop body (those that read no buffer the kernel writes) are computed there
still, in the first part, grouped into loops as before.
"""

from __future__ import annotations

from typing import NamedTuple

from kiln.codegen.llvm import types as T
from kiln.compiler import kir, kir_rewrite
from kiln.compiler.kir import Kernel, Loop, Op, Reduce

#: Weights of compile cost: each loop LLVM vectorizes (a Loop or a Reduce) costs about as much
#: as this many scalar ops, and a transcendental op (inlined vmath) as this many.
LOOP_WEIGHT = 40
TRANSCENDENTAL_WEIGHT = 40
#: A kernel is cut only when each module would weigh at least this much (about three
#: vectorized loops): below it LLVM's fixed cost per module outweighs the second thread.
MIN_PART_WEIGHT = 120
#: How much heavier module 0 is made than module 1: module 0 starts compiling on the helper
#: thread while module 1 is still being emitted, so an even cut left the helper busy long
#: after the calling thread had compiled module 1. On the layernorm+softmax gradient, 1.6
#: (cut after 11 of the row body's 19 statements rather than 9) ended both modules together
#: and the first call 4.0 ms sooner (paired median of 14); 2.0 was no better.
FIRST_PART_LEAD = 1.6


class RowCut(NamedTuple):
    """Where a kernel's row loop body is cut: the first part runs statements [:statements]
    after the row's reductions; `passed` are the reductions the second part uses, in the
    order of their stack slots. `rest_first`: the rest of the program (the second part, the
    driver, the entry) is the heavier module, emitted first as module 0, and the row part
    module 1; else the row part is module 0."""

    statements: int
    passed: tuple[Reduce, ...]
    rest_first: bool = False


def _stable_reductions(kernel: Kernel, loop: Loop):
    """(reduction, its free variables) for each reduction in the row loop body that reads no
    buffer the kernel writes: those the emitter computes at the start of the scope that
    binds their variables."""
    written = frozenset(kir.stored_buffers(kernel.body))
    free: dict = {}
    stable: dict = {}
    for node in kir.toposort([e for s in kir.walk_stmts(loop.body) for e in kir.stmt_exprs(s)]):
        if isinstance(node, Reduce) and kir_rewrite.is_stable(node, written, stable):
            yield node, kir_rewrite.free_vars(node, free)


def row_reductions(kernel: Kernel, loop: Loop) -> list[Reduce]:
    """The reductions the emitter computes once per row at the start of the row loop body:
    those that depend on the row and no inner variable and read no buffer the kernel writes."""
    return _row_reductions(loop, list(_stable_reductions(kernel, loop)))


def _row_reductions(loop: Loop, stable: list) -> list[Reduce]:
    row = frozenset({loop.var})
    return [node for node, free in stable if free <= row]


def row_loop(kernel: Kernel) -> Loop | None:
    """The kernel's row loop when it can be cut: its whole body is one loop over rows, every
    buffer it uses is a parameter (no scratch of its own to share), and none of its row
    reductions is computed once per kernel instead (it would then run once per row) or has a
    narrow float type (passed values keep their compute type); else None. `kernel` is
    scheduled (kir_schedule.schedule_kernel)."""
    found = _cuttable(kernel)
    return None if found is None else found[0]


def _cuttable(kernel: Kernel) -> tuple[Loop, list] | None:
    """(row loop, its stable reductions with their free variables) for row_loop's kernels."""
    if len(kernel.body) != 1 or not isinstance(kernel.body[0], Loop):
        return None
    loop = kernel.body[0]
    if set(kir.buffers_of(kernel.body)) - set(kernel.params):
        return None
    stable = list(_stable_reductions(kernel, loop))
    for node, free in stable:
        if loop.var not in free or T.is_narrow_float(node.dtype):
            return None
    return loop, stable


def _weigh(statements, skipped=frozenset(), extra=()) -> int:
    """The compile weight of statements and everything nested in them (reduction bodies
    included), plus the expressions `extra`; the nodes in `skipped` (and what only they
    use) left out of the statements'."""
    nested = list(kir.walk_stmts(statements))
    weight = LOOP_WEIGHT * sum(isinstance(s, Loop) for s in nested)
    roots = [e for s in nested for e in kir.stmt_exprs(s)]
    for node in kir.toposort(roots, skip=skipped) + kir.toposort(extra):
        if isinstance(node, Reduce):
            weight += LOOP_WEIGHT
        elif isinstance(node, Op):
            weight += 1 + TRANSCENDENTAL_WEIGHT * (node.op in kir.OpGroup.TRANSCENDENTAL)
    return weight


def kernel_weight(kernel: Kernel) -> int:
    """The compile weight of a scheduled kernel (see LOOP_WEIGHT)."""
    return _weigh(kernel.body)


def split_point(kernel: Kernel, elsewhere: int = 0) -> RowCut | None:
    """Where to cut a scheduled kernel's row loop body, making the weight of module 0
    FIRST_PART_LEAD times that of module 1 as nearly as the statements allow, module 0 being
    either part: the row part (the row reductions and the first statements) or the rest
    (the other statements, and what else the compile holds: `elsewhere`, its weight), the
    row part on a tie. None when the kernel cannot be cut or a module would weigh less than
    MIN_PART_WEIGHT. (A layernorm+softmax forward can only be cut right after its three row
    reductions, and the rest, with the exp loop, is then the heavier part.)"""
    found = _cuttable(kernel)
    if found is None:
        return None
    loop, stable = found
    reductions = _row_reductions(loop, stable)
    skipped = frozenset(reductions)
    first = _weigh([], extra=reductions)  # (the reductions' loops, each counted once)
    weights = [_weigh([stmt], skipped) for stmt in loop.body]
    total = first + sum(weights) + elsewhere
    candidates = []  # (gap, rest first, cut)
    before = first
    for cut in range(len(weights)):
        after = total - before
        if min(before, after) >= MIN_PART_WEIGHT:
            candidates.append((abs(before - FIRST_PART_LEAD * after), False, cut))
            candidates.append((abs(after - FIRST_PART_LEAD * before), True, cut))
        before += weights[cut]
    if not candidates:
        return None
    _, rest_first, best = min(candidates)
    used = frozenset(
        node
        for node in kir.toposort(
            [e for s in kir.walk_stmts(loop.body[best:]) for e in kir.stmt_exprs(s)]
        )
        if node in skipped
    )
    return RowCut(best, tuple(r for r in reductions if r in used), rest_first)

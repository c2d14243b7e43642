"""Loop-order rewrites applied just before code generation: kernel IR in, kernel IR out.

A column reduction, `for j: out[j] = g(sum(x[k, j] for k))`, reads memory with a stride in its
inner loop, which LLVM can neither vectorize nor interchange. Two rewrites fix that, both
keeping every column's accumulation in k order (a long float sum in k-ordered blocks, as the
emitter computes it), so results do not change:

* accumulate in place: when the output can hold the accumulator (same dtype, one reduction per
  store), `out[j] = init; for k: for j: out[j] = out[j] + x[k, j]; for j: out[j] = g(out[j])`,
  streaming x row by row while the output row stays in cache (a long float sum goes through a
  scratch row in blocks of rows, with compensated totals: see compensated_in_place_loops);
* otherwise strip-mine: compute LANES consecutive j per iteration; their reductions share one
  k loop (the emitter fuses reductions over one range) and the SLP vectorizer packs the LANES
  independent accumulators, whose loads are contiguous, into vectors.
"""

from __future__ import annotations

import weakref

from typing import Sequence

import numpy as np

from kiln.compiler import kir, kir_rewrite
from kiln.compiler.kir import (
    Const,
    Expr,
    Kernel,
    Load,
    Loop,
    Op,
    Program,
    Reduce,
    ScalarOp,
    Stmt,
    Store,
    Var,
)

#: Bytes of accumulators a strip-mined loop computes side by side (four AVX-512 registers:
#: whole cache lines per row visit, and enough independent adds to hide their latency).
STRIP_BYTES = 256
#: A strip-mined body is copied LANES times; past this many nodes in all, fewer lanes are used.
MAX_STRIP_NODES = 8000
#: Accumulating in place pays while the output row stays in the L2 cache.
MAX_IN_PLACE_BYTES = 1 << 20
#: A long float column sum accumulated in place adds this many rows into a scratch row before
#: adding that row, compensated, into the totals: an in-order sum of a few dozen elements keeps
#: its relative error below 1e-6.
IN_PLACE_BLOCK = 32
NARROW_FLOATS = frozenset({np.dtype(np.float16), kir.BFLOAT16})


def schedule_program(program: Program) -> Program:
    """The program with every kernel scheduled (same buffers, same results)."""
    return Program(
        program.name, program.buffers, [schedule_kernel(kernel) for kernel in program.kernels]
    )


def schedule_kernel(kernel: Kernel) -> Kernel:
    """The kernel with argmax/argmin split into two vectorizable passes, nested reductions over
    adjacent axes merged and its column reductions rewritten (see the module docstring); the
    kernel itself if nothing changed. Remembered while the kernel lives (the engine asks for
    it before emission too, to weigh the kernel)."""
    scheduled = _SCHEDULED.get(kernel)
    if scheduled is None:
        scheduled = _SCHEDULED[kernel] = _schedule(kernel)
    return scheduled


_SCHEDULED: "weakref.WeakKeyDictionary[Kernel, Kernel]" = weakref.WeakKeyDictionary()


def _schedule(kernel: Kernel) -> Kernel:
    body = merge_nested_loops(merge_nested_reductions(split_arg_reductions(kernel.body)))
    names = {node.name for node in kir.toposort(body_exprs(body)) if isinstance(node, Var)}
    names |= {stmt.var.name for stmt in kir.walk_stmts(body) if isinstance(stmt, Loop)}
    scheduler = _Scheduler(frozenset(kir.stored_buffers(body)), names)
    body = scheduler.body(body)
    if _same(body, kernel.body):
        return kernel
    return Kernel(kernel.name, body, kernel.params)


def split_arg_reductions(body: Sequence[Stmt]) -> list[Stmt]:
    """Each argmax (argmin) as two reductions that vectorize, where the (value, index) pair
    carried through one loop does not: the extreme m = max(x[k]) (NaN if any is NaN), then the
    first position holding it, min(k where x[k] == m or both are NaN, else stop). The result is
    the same first index np.argmax gives; ArgValue becomes the value at that index."""
    if not any(
        isinstance(n, Reduce) and n.kind in kir.ARG_REDUCTIONS
        for n in kir.toposort(body_exprs(body))
    ):
        return list(body)
    memo: dict = {}

    def replace(original: Expr, children: list[Expr]) -> Expr | None:
        arg = original.reduce if isinstance(original, kir.ArgValue) else original
        if not (isinstance(arg, Reduce) and arg.kind in kir.ARG_REDUCTIONS):
            return None
        start, stop, value, index = (memo[child] for child in arg.children())
        position = _first_extreme_position(arg.kind, arg.var, start, stop, value)
        chosen = value if isinstance(original, kir.ArgValue) else index
        return kir_rewrite.substitute(chosen, {arg.var: position})

    return [
        kir_rewrite.rewrite_stmt(stmt, lambda node: kir_rewrite.rewrite(node, replace, memo))
        for stmt in body
    ]


def merge_nested_reductions(body: Sequence[Stmt]) -> list[Stmt]:
    """Each reduction of a reduction over adjacent axes of its operands as one reduction.

    A reduction over several axes lowers to nested loops, `sum(sum(x[k0*S*B + k1*S + j] for
    k1 in 0..B) for k0 in 0..A)`; when every load addresses the two variables as one (k0's
    stride is B times k1's) it is `sum(x[k*S + j] for k in 0..A*B)`: one long loop that the
    column-reduction rewrites and the vectorizer handle as they handle a single axis, where the
    nested form is left for the strip-miner to copy, inner loop and all, once per lane."""
    nodes = kir.toposort(body_exprs(body))
    if not any(isinstance(n, Reduce) and isinstance(n.value, Reduce) for n in nodes):
        return list(body)
    memo: dict = {}
    free: dict = {}

    def replace(original: Expr, children: list[Expr]) -> Expr | None:
        if not (
            isinstance(original, Reduce)
            and isinstance(original.value, Reduce)
            and original.kind not in kir.ARG_REDUCTIONS
        ):
            return None
        start, stop, value, init = children
        rebuilt = Reduce(original.kind, original.var, start, stop, value, init=init)
        return _merged_reduction(rebuilt, free) or rebuilt

    return [
        kir_rewrite.rewrite_stmt(stmt, lambda node: kir_rewrite.rewrite(node, replace, memo))
        for stmt in body
    ]


def merge_nested_loops(body: Sequence[Stmt]) -> list[Stmt]:
    """Each loop whose body is one loop as one loop, where that is the same iteration: both
    start at 0 with constant bounds and every address sees the two variables as one axis
    (the outer stride is the inner extent times the inner stride), as in
    `for i0 in 0..8: for i1 in 0..64: out[i0*64 + i1] = ...`, which is `for i in 0..512:
    out[i] = ...`. LLVM unrolls and vectorizes each level of a nest of short constant loops,
    so a three-deep elementwise kernel compiled to ten times the code of a two-deep one."""
    out: list[Stmt] = []
    changed = False
    for stmt in body:
        new = stmt
        if isinstance(stmt, (Loop, kir.If)):
            inner = merge_nested_loops(stmt.body)
            if not _same(inner, stmt.body):
                new = (
                    Loop(stmt.var, stmt.start, stmt.stop, inner)
                    if isinstance(stmt, Loop)
                    else kir.If(stmt.cond, inner)
                )
        while isinstance(new, Loop):
            merged = _merged_loop(new)
            if merged is None:
                break
            new = merged
        changed |= new is not stmt
        out.append(new)
    return out if changed else list(body)


def _merged_loop(outer: Loop) -> Loop | None:
    """outer and the one loop that is its body as one loop, or None (see merge_nested_loops)."""
    if len(outer.body) != 1 or not isinstance(outer.body[0], Loop):
        return None
    inner = outer.body[0]
    bounds = (outer.start, outer.stop, inner.start, inner.stop)
    if not all(isinstance(b, Const) for b in bounds) or outer.start.value or inner.start.value:
        return None
    extent = inner.stop.value
    pair = frozenset({outer.var, inner.var})
    free: dict = {}
    indices: dict[Expr, Expr | None] = {}

    def merged_index(index: Expr) -> Expr | None:
        if index not in indices:
            indices[index] = _merged_address(index, outer.var, inner.var, extent, free)
        return indices[index]

    exprs = [e for stmt in kir.walk_stmts(inner.body) for e in kir.stmt_exprs(stmt)]
    # Only addresses may see the two variables: anything else (an iota, a mask, a bound)
    # tells them apart. exposed[node]: the variables node sees other than through an address.
    exposed: dict[Expr, frozenset] = {}
    loads: dict[Expr, Expr] = {}
    for node in kir.toposort(exprs):
        if isinstance(node, Load):
            index = merged_index(node.index)
            if index is None:
                return None
            loads[node] = Load(node.buffer, index)
            exposed[node] = frozenset()
        elif isinstance(node, Var):
            exposed[node] = pair & {node}
        else:
            exposed[node] = frozenset().union(*(exposed[c] for c in node.children()))
    stores: dict[int, Expr] = {}
    for stmt in kir.walk_stmts(inner.body):
        if isinstance(stmt, Store):
            index = merged_index(stmt.index)
            if index is None or exposed[stmt.value]:
                return None
            stores[id(stmt)] = index
        elif any(exposed[e] for e in kir.stmt_exprs(stmt)):
            return None

    def rebuild(stmt: Stmt) -> Stmt:
        if isinstance(stmt, Store):
            value = kir_rewrite.substitute(stmt.value, loads)
            return Store(stmt.buffer, kir_rewrite.substitute(stores[id(stmt)], loads), value)
        if isinstance(stmt, Loop):
            start = kir_rewrite.substitute(stmt.start, loads)
            stop = kir_rewrite.substitute(stmt.stop, loads)
            return Loop(stmt.var, start, stop, [rebuild(s) for s in stmt.body])
        cond = kir_rewrite.substitute(stmt.cond, loads)
        return kir.If(cond, [rebuild(s) for s in stmt.body])

    body = [rebuild(stmt) for stmt in inner.body]
    return Loop(inner.var, 0, outer.stop.value * extent, body)


def _merged_address(index: Expr, outer: Var, inner: Var, extent: int, free: dict) -> Expr | None:
    """An address with outer's loop merged into inner's (inner running over both), or None
    if the address does not see them as one axis of `extent` inner steps per outer step."""
    if not {outer, inner} & kir_rewrite.free_vars(index, free):
        return index
    outer_step = affine_coefficient(index, outer)
    inner_step = affine_coefficient(index, inner)
    if outer_step is None or inner_step is None or outer_step != extent * inner_step:
        return None
    return folded_index(kir_rewrite.substitute(index, {outer: kir.as_index(0)}))


def folded_index(index: Expr) -> Expr:
    """An index with its constant terms folded (0 * n + i is i)."""
    builders = {
        ScalarOp.ADD: kir.index_add,
        ScalarOp.SUB: kir.index_sub,
        ScalarOp.MUL: kir.index_mul,
    }

    def fold(node: Expr, children: list[Expr]) -> Expr | None:
        if isinstance(node, Op) and node.dtype == kir.INDEX and node.op in builders:
            return builders[node.op](*children)
        return None

    return kir_rewrite.rewrite(index, fold)


def _merged_reduction(outer: Reduce, free: dict) -> Reduce | None:
    """outer and the reduction that is its value as one reduction, or None if they differ in
    kind, bounds or identity or some load does not see the two variables as one axis."""
    inner = outer.value
    if not isinstance(inner, Reduce):
        return None
    kind = outer.kind
    if (
        inner.kind is not kind
        or kind in kir.ARG_REDUCTIONS
        or inner.dtype in NARROW_FLOATS
        or not all(isinstance(b, Const) for b in (outer.start, outer.stop, inner.start, inner.stop))
        or outer.start.value != 0
        or inner.start.value != 0
        or not _is_identity(outer.init, kind)
        or not _is_identity(inner.init, kind)
    ):
        return None
    extent = inner.stop.value
    pair = (outer.var, inner.var)
    replaced: dict[Expr, Expr] = {}
    for node in kir.toposort([inner.value]):
        if not isinstance(node, Load) or not set(pair) & kir_rewrite.free_vars(node.index, free):
            continue
        index = _merged_address(node.index, outer.var, inner.var, extent, free)
        if index is None:
            return None
        replaced[node] = Load(node.buffer, index)
    # Only the loads may see the two variables: anything else (an iota, a mask) tells them apart.
    probe = kir_rewrite.substitute(inner.value, {n: Const(0, n.dtype) for n in replaced})
    if set(pair) & kir_rewrite.free_vars(probe, free):
        return None
    value = kir_rewrite.substitute(inner.value, replaced)
    return Reduce(kind, inner.var, 0, outer.stop.value * extent, value)


def _is_identity(init: Expr, kind) -> bool:
    return isinstance(init, Const) and init is Const(
        kir.reduce_identity(kind, init.dtype), init.dtype
    )


def _first_extreme_position(kind, var: Var, start: Expr, stop: Expr, value: Expr) -> Expr:
    plain = kir.ReduceKind.MAX if kind is kir.ReduceKind.ARGMAX else kir.ReduceKind.MIN
    # The extreme sits inside the position search, so it needs a variable of its own.
    own = Var(f"{var.name}__extreme")
    extreme = Reduce(plain, own, start, stop, kir_rewrite.substitute(value, {var: own}))
    matches = kir.op(ScalarOp.EQ, value, extreme)
    if kir.dtype_family(value.dtype) == "float":
        both_nan = kir.op(ScalarOp.LOGICAL_AND, _is_nan(value), _is_nan(extreme))
        matches = kir.op(ScalarOp.LOGICAL_OR, matches, both_nan)
    return Reduce(kir.ReduceKind.MIN, var, start, stop, kir.select(matches, var, stop))


def _is_nan(value: Expr) -> Expr:
    return kir.op(ScalarOp.NE, value, value)


def compensated_add(total: Expr, part: Expr, lost: Expr) -> tuple[Expr, Expr]:
    """(total + part, lost plus what that addition's rounding lost): TwoSum, exact whichever
    operand is larger. The compensated column sums add each block's partial this way."""
    new_total = total + part
    part_taken = new_total - total
    lost_now = (total - (new_total - part_taken)) + (part - part_taken)
    return new_total, lost + lost_now


def compensated_total(total: Expr, lost: Expr) -> Expr:
    """A compensated sum's result: the total corrected by what its additions lost, unless it
    is inf or NaN, where the compensation means nothing (inf - inf)."""
    return kir.select(kir.op(ScalarOp.IS_FINITE, total), total + lost, total)


def affine_coefficient(index: Expr, var: Var) -> int | None:
    """The constant c with index = c * var + (terms free of var), or None if index is not of
    that form (then var's effect on the address is unknown)."""
    coefficients: dict[Expr, int | None] = {}
    for node in kir.toposort([index]):
        coefficients[node] = _coefficient(node, var, coefficients)
    return coefficients[index]


def _coefficient(node: Expr, var: Var, known: dict) -> int | None:
    if node is var:
        return 1
    if isinstance(node, (Const, Var)):
        return 0
    if not isinstance(node, Op) or node.dtype != kir.INDEX:
        return 0 if var not in kir_rewrite.free_vars(node) else None
    parts = [known[a] for a in node.args]
    if node.op in (ScalarOp.ADD, ScalarOp.SUB) and None not in parts:
        return parts[0] + parts[1] if node.op is ScalarOp.ADD else parts[0] - parts[1]
    if node.op is ScalarOp.MUL and None not in parts:
        a, b = node.args
        if parts[0] == 0 and isinstance(a, Const):
            return a.value * parts[1]
        if parts[1] == 0 and isinstance(b, Const):
            return b.value * parts[0]
        return 0 if parts == [0, 0] else None
    return 0 if var not in kir_rewrite.free_vars(node) else None


def _extent_bound(loop: Loop) -> int | None:
    """The most iterations the loop can run: its extent when its bounds are constants or
    start .. start + n, else what bounds like those of a chunk, clamp(bounds[0], 0, n) ..
    clamp(bounds[1], 0, n), allow (the rewrites size scratch rows by it)."""
    stop = loop.stop
    if (
        isinstance(stop, Op)
        and stop.op is ScalarOp.ADD
        and stop.args[0] is loop.start
        and isinstance(stop.args[1], Const)
    ):
        return max(stop.args[1].value, 0)
    highest, lowest = _index_bound(loop.stop, True), _index_bound(loop.start, False)
    if highest is None or lowest is None:
        return None
    return max(highest - lowest, 0)


def _index_bound(node: Expr, upper: bool) -> int | None:
    """A constant upper (lower) bound of an index expression built from constants, min and
    max; None if it has none that simple."""
    if isinstance(node, Const):
        return node.value
    if not (isinstance(node, Op) and node.op in (ScalarOp.MIN, ScalarOp.MAX)):
        return None
    bounds = [_index_bound(arg, upper) for arg in node.args]
    known = [b for b in bounds if b is not None]
    # min(a, b) <= either bound; max(a, b) >= either; the other direction needs both.
    if not known:
        return None
    if (node.op is ScalarOp.MIN) == upper:
        return min(known) if upper else max(known)
    return None if None in bounds else (max(bounds) if upper else min(bounds))


def _same(new: Sequence[Stmt], old: Sequence[Stmt]) -> bool:
    return len(new) == len(old) and all(a is b for a, b in zip(new, old))


def body_exprs(body: Sequence[Stmt]) -> list[Expr]:
    return [e for s in kir.walk_stmts(body) for e in kir.stmt_exprs(s)]


class _Scheduler:
    def __init__(self, written: frozenset, taken_names: set[str]):
        self.written = written
        self.taken = set(taken_names)
        self.free: dict = {}

    def body(self, stmts: Sequence[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for stmt in stmts:
            if isinstance(stmt, Loop):
                inner = self.body(stmt.body)
                if not _same(inner, stmt.body):
                    stmt = Loop(stmt.var, stmt.start, stmt.stop, inner)
                rewritten = self.rewrite_column_loop(stmt)
                if rewritten is not None:
                    out.extend(rewritten)
                    continue
            elif isinstance(stmt, kir.If):
                inner = self.body(stmt.body)
                if not _same(inner, stmt.body):
                    stmt = kir.If(stmt.cond, inner)
            out.append(stmt)
        return out

    def rewrite_column_loop(self, loop: Loop) -> list[Stmt] | None:
        """The loop rewritten for its column reductions, or None to keep it."""
        if _extent_bound(loop) is None:
            return None
        if not all(isinstance(s, Store) for s in loop.body):
            return None  # innermost loops only
        nodes = kir.toposort(body_exprs(loop.body))
        columns = [
            n for n in nodes if isinstance(n, Reduce) and self.is_column_reduction(n, loop.var)
        ]
        if not columns:
            return None
        return self.accumulate_in_place(loop) or self.strip_mine(loop, columns[0], len(nodes))

    def is_column_reduction(self, node: Reduce, var: Var) -> bool:
        """Whether node depends on var, reads only unwritten buffers, and reads some buffer
        contiguously along var but not along its own reduction variable."""
        if var not in kir_rewrite.free_vars(node, self.free):
            return False
        if var in kir_rewrite.free_vars(node.start, self.free) | kir_rewrite.free_vars(
            node.stop, self.free
        ):
            return False
        loads = [n for n in kir.toposort([node.value]) if isinstance(n, Load)]
        if any(load.buffer in self.written for load in loads):
            return False
        return any(
            affine_coefficient(load.index, var) == 1
            and affine_coefficient(load.index, node.var) not in (1, -1)
            for load in loads
        )

    def accumulate_in_place(self, loop: Loop) -> list[Stmt] | None:
        """init / accumulate / finish loops per store, or None if some store does not allow it:
        it must hold exactly one column reduction of its own dtype, write distinct elements for
        distinct j, and its buffer must not be read in the loop."""
        extent = _extent_bound(loop)
        read = {n.buffer for n in kir.toposort(body_exprs(loop.body)) if isinstance(n, Load)}
        targets = [s.buffer for s in loop.body]
        if len(set(targets)) != len(targets) or read & set(targets):
            return None
        out: list[Stmt] = []
        for store in loop.body:
            found = [n for n in kir.toposort_region([store.value]) if isinstance(n, Reduce)]
            if len(found) != 1:
                return None
            node = found[0]
            # A reduction nested in the summand (var's mean) would run once per row inside
            # the row loop; left whole, the emitter computes it once per column instead.
            nested = any(isinstance(n, Reduce) for n in kir.toposort([node.value]))
            if (
                nested
                or node.kind in kir.ARG_REDUCTIONS
                or node.dtype != store.buffer.dtype
                or node.dtype in NARROW_FLOATS
                or extent * node.dtype.itemsize * (3 if self.compensates(node) else 1)
                > MAX_IN_PLACE_BYTES
                or not self.is_column_reduction(node, loop.var)
                or affine_coefficient(store.index, loop.var) in (None, 0)
            ):
                return None
            out += self.in_place_loops(loop, store, node)
        return out

    def in_place_loops(self, loop: Loop, store: Store, node: Reduce) -> list[Stmt]:
        def over_j(*statements: Stmt) -> Loop:
            return Loop(loop.var, loop.start, loop.stop, statements)

        target = store.buffer
        accumulator = Load(target, store.index)
        if self.compensates(node):
            loops = self.compensated_in_place_loops(loop, store, node)
        else:
            loops = [
                over_j(Store(target, store.index, node.init)),
                Loop(
                    node.var,
                    node.start,
                    node.stop,
                    [over_j(kir.accumulate(target, store.index, node.value, node.kind))],
                ),
            ]
        if store.value is not node:
            finish = kir_rewrite.substitute(store.value, {node: accumulator})
            loops.append(over_j(Store(target, store.index, finish)))
        return loops

    @staticmethod
    def compensates(node: Reduce) -> bool:
        """Whether a float sum is long enough to accumulate in compensated blocks."""
        return (
            node.kind is kir.ReduceKind.SUM
            and kir.dtype_family(node.dtype) == "float"
            and isinstance(node.start, Const)
            and isinstance(node.stop, Const)
            and node.stop.value - node.start.value > IN_PLACE_BLOCK
        )

    def compensated_in_place_loops(self, loop: Loop, store: Store, node: Reduce) -> list[Stmt]:
        """The accumulate-in-place loops for a long float sum, as blocks of IN_PLACE_BLOCK rows:
        each block sums into a scratch row `partial`, which is then added into the output row
        (the running totals), what each addition lost going to a scratch row of compensations.
        The in-order error of each column then stays that of one block, however many rows
        there are."""

        def over_j(*statements: Stmt) -> Loop:
            return Loop(loop.var, loop.start, loop.stop, statements)

        extent = _extent_bound(loop)
        offset = kir.index_sub(loop.var, loop.start)
        target, dtype = store.buffer, node.dtype
        partial = self.scratch(f"{target.name}_partial", dtype, extent)
        compensation = self.scratch(f"{target.name}_compensation", dtype, extent)
        total = Load(target, store.index)
        part, lost = Load(partial, offset), Load(compensation, offset)
        zero = Const(0, dtype)
        new_total, new_lost = compensated_add(total, part, lost)
        combine = over_j(
            Store(compensation, offset, new_lost), Store(target, store.index, new_total)
        )

        def block(start: Expr, stop: Expr) -> list[Stmt]:
            return [
                over_j(Store(partial, offset, zero)),
                Loop(
                    node.var,
                    start,
                    stop,
                    [over_j(kir.accumulate(partial, offset, node.value, node.kind))],
                ),
                combine,
            ]

        first, last = node.start.value, node.stop.value
        blocks = (last - first) // IN_PLACE_BLOCK
        number = self.fresh_name(f"{node.var.name}_block")
        begin = kir.index_add(kir.index_mul(number, IN_PLACE_BLOCK), first)
        loops: list[Stmt] = [
            over_j(Store(target, store.index, node.init), Store(compensation, offset, zero)),
            Loop(number, 0, blocks, block(begin, kir.index_add(begin, IN_PLACE_BLOCK))),
        ]
        if first + blocks * IN_PLACE_BLOCK < last:
            loops += block(kir.as_index(first + blocks * IN_PLACE_BLOCK), kir.as_index(last))
        loops.append(over_j(Store(target, store.index, compensated_total(total, lost))))
        return loops

    def scratch(self, base: str, dtype: np.dtype, size: int) -> kir.Buffer:
        """A kernel-local scratch buffer (role temp, not a parameter: the emitter allocates
        it in the kernel function)."""
        return kir.Buffer(self.fresh_name(base).name, dtype, (size,), "temp")

    def fresh_name(self, base: str) -> Var:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return Var(name)

    def strip_mine(self, loop: Loop, column: Reduce, body_nodes: int) -> list[Stmt] | None:
        lanes = STRIP_BYTES // max(column.value.dtype.itemsize, 4)
        while lanes > 8 and lanes * body_nodes > MAX_STRIP_NODES:
            lanes //= 2
        start, stop = loop.start, loop.stop
        blocks = kir.index_div(kir.index_sub(stop, start), lanes)
        if _extent_bound(loop) < lanes or lanes * body_nodes > MAX_STRIP_NODES:
            return None
        block = self.fresh_name(f"{loop.var.name}_block")
        first = kir.index_add(kir.index_mul(block, lanes), start)
        copies = [
            kir_rewrite.substitute_stmt(stmt, {loop.var: kir.index_add(first, lane)})
            for lane in range(lanes)
            for stmt in loop.body
        ]
        main = Loop(block, 0, blocks, copies)
        rest = kir.index_add(kir.index_mul(blocks, lanes), start)
        if rest is stop:
            return [main]
        return [main, Loop(loop.var, rest, stop, loop.body)]

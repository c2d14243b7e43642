"""Fusion: which jaxpr values become buffers, and which loop nests (kernels) compute them.

The plan for a program, in three steps:

1. **Stages.** Equations with a lowering rule run natively; the others (dot_general, sort,
   cumulative ops, callbacks, complex arithmetic, ...) run through their reference impls.
   `partition` orders the program into alternating native and interpreted stages: an
   interpreted equation waits for its inputs and keeps its program order relative to the
   other interpreted ones; a native equation runs in the latest native stage before its first
   consumer, so it fuses with that consumer instead of crossing a stage boundary.

2. **Materialization.** Within a native stage (a *segment*), a value is stored to memory only
   when it must be: it leaves the segment (a program output, or the input of an interpreted
   equation), fusing it would copy its expression too many times, or fusing it would compute
   an expensive node more often than the value has elements. Every other value is inlined
   into its consumers' expressions (lower.py).

   Copies first: a value read at r distinct indices (a roll reads its operand at two) is
   built r times, and its producers at up to r times as many indices each, so a chain of
   such reads grows exponentially. A pass from the outputs back (`ReadAnalysis`)
   collects the indices each value is read at before its producers are looked at, and stores
   a value once r exceeds MAX_READS or (r - 1) copies of its fused expression exceed
   DUPLICATION_BUDGET equations. Every fused value is then built at most MAX_READS times,
   so lowering is linear in the program's size.

   Then expensive nodes, measured on the built kernels: each node runs once per iteration of
   the loops down to the deepest loop variable it depends on (the emitter hoists reductions,
   LLVM hoists the rest), so `exp(x - max(x))` read by both a row sum and the final division
   counts twice the elements of the value, and the exp is materialized in a temp; `max(x)`
   read inside the row loop counts once per row, and stays fused.

3. **Kernels.** Stored values of equal shape share one loop nest (multi-output fusion: one
   pass over the inputs feeds several outputs, and shared subexpressions are computed once);
   a value that loads another stored value's buffer goes in a later kernel. Then kernels
   that share an outermost (row) loop merge: a temp read by one later kernel along its rows
   becomes a one-row buffer inside that loop (row-local), and a stored value that a later
   kernel reads only at the row being computed pulls that kernel into its own, keeping its
   full buffer for the others (a layernorm's statistics, stored for its gradient, no longer
   cost a kernel each).

The read analysis of step 2 is in fusion_reads.py, the cost rule (how often a kernel's nodes
run, a kernel's work) in fusion_cost.py, the kernels' statements (a group's loop nest, a
parallel chunk of it) in fusion_kernels.py, and the folding of column sums into the row
kernel that computes their summands, run last, in fusion_columns.py.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Callable, Sequence

from kiln.compiler import kir, lower
from kiln.compiler.fusion_cost import evaluation_counts, kernel_work  # noqa: F401 (re-exported)
from kiln.compiler.fusion_kernels import chunked_kernel, kernel_body  # noqa: F401 (re-exported)
from kiln.compiler.fusion_reads import (  # noqa: F401 (re-exported)
    DUPLICATION_BUDGET,
    MAX_READS,
    ReadAnalysis,
    reads_of,
)
from kiln.compiler.kir import Buffer, Kernel, Program, Var
from kiln.compiler.lower import ExprBuilder, is_expensive
from kiln.core.jaxpr import DropVar, JaxprEqn, Literal

#: The most work one native segment may hold, in equations (one with a transcendental op
#: counts TRANSCENDENTAL_WEIGHT: LLVM spends about that much longer on its inline
#: polynomial). LLVM's time grows faster than linearly with the size of a function, so a
#: heavier native stage is cut into several segments, each compiled in about the same time.
MAX_SEGMENT_WEIGHT = 500
TRANSCENDENTAL_WEIGHT = 10
#: A cut is only made where at most this many values cross it: each one is a store stream
#: before the cut and a load stream after it, and LLVM's dependence checks grow with the
#: product of a loop's stores and accesses (a kernel storing 250 values and loading 500 takes
#: seconds). A stage with no such cut (a DAG whose values are read all over) stays whole.
MAX_CROSSING = 32


# ---------------------------------------------------------------------------------------------
# 1. stages


class Stage:
    """A run of equations: native ones are lowered together, interpreted ones run in order."""

    __slots__ = ("native", "eqns")

    def __init__(self, native: bool, eqns: list | None = None):
        self.native, self.eqns = native, [] if eqns is None else eqns

    def __repr__(self) -> str:
        return f"Stage(native={self.native}, eqns={self.eqns!r})"


def partition(
    eqns: Sequence[JaxprEqn],
    outvars: Sequence,
    is_native: Callable[[JaxprEqn], bool],
    weight: Callable[[JaxprEqn], int] | None = None,
) -> list[Stage]:
    """Split a jaxpr's equations into native and interpreted stages: they alternate, except
    that a native stage heavier than MAX_SEGMENT_WEIGHT (by `weight`, default
    equation_weight) becomes several native stages in a row."""
    weight = weight or equation_weight
    native = [is_native(e) for e in eqns]
    producer: dict = {}
    for position, eqn in enumerate(eqns):
        for var in eqn.outvars:
            producer[var] = position
    stage = [0] * len(eqns)
    last_interpreted = -1
    for position, eqn in enumerate(eqns):
        earliest = 0
        for atom in eqn.invars:
            p = producer.get(atom) if type(atom) is not Literal else None
            if p is None:
                continue
            s = stage[p]
            if native[position]:
                earliest = max(earliest, s if native[p] else s + 1)
            else:
                earliest = max(earliest, s + 1 if native[p] else s)
        if native[position]:
            stage[position] = earliest + (earliest % 2)
        else:
            earliest = max(earliest, last_interpreted)
            stage[position] = earliest if earliest % 2 else earliest + 1
            last_interpreted = stage[position]
    # As late as possible: a native equation whose consumers are all native and later moves
    # to the first of them, so it fuses there rather than being stored at a boundary.
    consumers: dict[int, list[int]] = {}
    for position, eqn in enumerate(eqns):
        for atom in eqn.invars:
            p = producer.get(atom) if type(atom) is not Literal else None
            if p is not None:
                consumers.setdefault(p, []).append(position)
    outputs = {id(v) for v in outvars}
    for position in range(len(eqns) - 1, -1, -1):
        if not native[position] or any(id(v) in outputs for v in eqns[position].outvars):
            continue
        users = consumers.get(position, [])
        if users and all(native[u] for u in users):
            stage[position] = max(stage[position], min(stage[u] for u in users))
    stages: dict[int, Stage] = {}
    for position, eqn in enumerate(eqns):
        stages.setdefault(stage[position], Stage(native[position])).eqns.append(eqn)
    return [run for s in sorted(stages) for run in _split_heavy(stages[s], weight, outvars)]


def equation_weight(eqn: JaxprEqn) -> int:
    """A native equation's share of a segment's work (see MAX_SEGMENT_WEIGHT)."""
    return 1 + (TRANSCENDENTAL_WEIGHT - 1) * lower.transcendental_count(eqn)


def _split_heavy(
    stage: Stage, weight: Callable[[JaxprEqn], int], outvars: Sequence = ()
) -> list[Stage]:
    """A native stage as consecutive runs (in program order, so values only flow from a run to
    later ones, which read them from memory) of about MAX_SEGMENT_WEIGHT each.

    A cut lies where at most MAX_CROSSING values cross it (a value made before the cut and
    read after it is stored, and loaded again after it): the latest such place within the
    weight, or failing that the first one past it."""
    eqns = stage.eqns
    if not stage.native or len(eqns) <= 1:
        return [stage]
    costs = [weight(eqn) for eqn in eqns]
    if sum(costs) <= MAX_SEGMENT_WEIGHT:
        return [stage]
    position_of = {v: p for p, eqn in enumerate(eqns) for v in eqn.outvars}
    last_use = {}
    for p, eqn in enumerate(eqns):
        for atom in eqn.invars:
            if type(atom) is not Literal and atom in position_of:
                last_use[atom] = p
    # crossing[p]: values made before equation p and read at or after it (values the stage
    # exports are stored anyway and do not count).
    exported = {id(v) for v in outvars}
    delta = [0] * (len(eqns) + 1)
    for var, last in last_use.items():
        if id(var) not in exported:
            delta[position_of[var] + 1] += 1
            delta[last + 1] -= 1
    crossing, running = [], 0
    for change in delta:
        running += change
        crossing.append(running)
    cuts, start = [], 0
    while sum(costs[start:]) > MAX_SEGMENT_WEIGHT:
        best, total = None, 0
        for p in range(start, len(eqns) - 1):
            total += costs[p]
            if total < MAX_SEGMENT_WEIGHT // 2 or crossing[p + 1] > MAX_CROSSING:
                continue
            if total > MAX_SEGMENT_WEIGHT and best is not None:
                break
            if best is None or total <= MAX_SEGMENT_WEIGHT:
                best = p + 1
            if total > MAX_SEGMENT_WEIGHT:
                break
        if best is None:
            break
        cuts.append(best)
        start = best
    bounds = [0] + cuts + [len(eqns)]
    return [Stage(True, list(eqns[a:b])) for a, b in zip(bounds, bounds[1:])]


# ---------------------------------------------------------------------------------------------
# 2 and 3. a native segment's kernels


class KernelPlan:
    """One kernel: its stored values, as parts that run in order inside one outer loop.

    A plain kernel has one part: a loop nest over `shape` storing its values. A merged kernel
    (row-local fusion) runs several parts per iteration of the shared outermost loop; a
    row-local value is stored to a one-row buffer by one part and read back by a later one.
    `local_buffers` are those row buffers and the scalar temps of reductions over them.
    """

    def __init__(self, shape: tuple, parts: list, product: object = None):
        self.shape, self.parts = shape, parts
        self.kernel: Kernel | None = None
        self.local_buffers: list = []
        self.kernel_name = "fusion"
        #: a BLAS product's plan (lowering_linalg.Product) when the kernel is that call
        self.product = product
        #: rows per block of the column sums folded into it (fusion_columns): its parallel
        #: chunks start at multiples of this; whole: a kernel never split (a folded column
        #: kernel, whose loops are not one nest)
        self.row_block: int | None = None
        self.whole = False

    @property
    def values(self) -> list:
        return [v for part in self.parts for v in part]


class SegmentPlan:
    """A native segment lowered to a kernel IR program.

    inputs/outputs: the jaxpr values behind program.inputs/program.outputs, in order;
    temps: values stored to full-size temps for the segment's own use.
    """

    def __init__(
        self,
        program: Program | None,
        inputs: list,
        outputs: list,
        temps: list,
        kernels: list[KernelPlan],
        buffers: dict,
        builder: ExprBuilder,
        row_local: dict,
    ):
        self.program, self.inputs, self.outputs, self.temps = program, inputs, outputs, temps
        self.kernels, self.buffers, self.builder, self.row_local = (
            kernels, buffers, builder, row_local
        )  # fmt: skip
        #: block partials of folded column sums (fusion_columns): temps that no value names
        self.partials: list[Buffer] = []

    @property
    def temp_buffers(self) -> list[Buffer]:
        """The buffers of the full-size temps, block partials included."""
        return [self.buffers[v] for v in self.temps] + list(self.partials)


class _NotRowLocal(Exception):
    """A row-local value is read outside its own row: keep it as a full temp."""

    def __init__(self, var):
        super().__init__()
        self.var = var


def plan_segment(
    eqns: Sequence[JaxprEqn],
    outputs: Sequence,
    name: str,
    scalars: dict | None = None,
    names: Callable | None = None,
) -> SegmentPlan:
    """Lower a native segment: `eqns` in program order, `outputs` the values it must store
    (produced by eqns; each once). `scalars` maps rank-0 constants to inlined values; `names`
    gives jaxpr-style names for buffers (so printed kernels read like the jaxpr). Column sums
    of what a row kernel computes are folded into it last (fusion_columns)."""
    from kiln.compiler.fusion_columns import fold_column_sums

    return fold_column_sums(_plan_segment(eqns, outputs, name, scalars, names))


def _plan_segment(eqns, outputs, name, scalars, names) -> SegmentPlan:
    eqns, products = _plan_products(eqns, outputs)
    producers = {v: e for e in eqns for v in e.outvars if not isinstance(v, DropVar)}
    # Program order, and an equation's results in their own order (stored in that order).
    order = {v: (n, k) for n, e in enumerate(eqns) for k, v in enumerate(e.outvars)}
    outputs = list(dict.fromkeys(outputs))
    names = names or _default_namer()
    scalars = scalars or {}
    reads = ReadAnalysis(eqns, producers, outputs, scalars, products)
    # A product's result and its operands are buffers: BLAS reads and writes memory.
    called = set(products) | {a for v in products for a in producers[v].invars if a in producers}
    materialized = set(reads.materialized) | called
    build = dict(name=name, scalars=scalars, names=names, products=products)
    previous = None
    while True:
        plan = _build(
            eqns, producers, order, outputs, materialized, set(), previous, False, **build
        )
        extra = _over_budget(plan, eqns, producers, materialized)
        if not extra:
            break
        materialized |= extra
        previous = (plan, extra)
    # Row-local fusion: a temp read only by one later kernel, and there only along the row
    # that kernel's outermost loop is on, moves into that loop as a one-row buffer.
    row_local = {
        v
        for v in plan.temps
        if len(v.aval.shape) >= 2 and v not in called and reads.read_along_rows(v)
    }
    # Then row merges: a stored value pulls the kernels that read it row by row into its own
    # (_merge_row_reader), planned once the values to store are known.
    while row_local:
        try:
            return _build(
                eqns, producers, order, outputs, materialized, row_local, None, True,
                inherit=plan.builder, **build
            )  # fmt: skip
        except _NotRowLocal as failed:
            row_local.discard(failed.var)
    # (The kernels that no merge changes are reused.)
    return _build(
        eqns, producers, order, outputs, materialized, set(), (plan, set()), True, **build
    )


def _plan_products(eqns, outputs) -> tuple[list, dict]:
    """The segment's equations with each BLAS product's misplaced operands stored through a
    transpose first (lowering_linalg.canonical_product), and {product result: its plan}.

    A product read only by a transpose that swaps its row and column dims (the weight
    gradients of a dense layer) is computed transposed instead, operands swapped: the
    consumers then read it in memory order."""
    from kiln.compiler import lowering_linalg
    from kiln.core.jaxpr import Var as JaxprVar

    eqns = lowering_linalg.fold_transposed_products(eqns, outputs, lower.is_kernel_call)
    products: dict = {}
    rewritten: list = []
    for eqn in eqns:
        if not lower.is_kernel_call(eqn):
            rewritten.append(eqn)
            continue
        product = lowering_linalg.blas_product(eqn)
        if any(permutation is not None for _, permutation in product.operands):
            transposes, eqn = lowering_linalg.canonical_product(product, JaxprVar)
            rewritten.extend(transposes)
            product = lowering_linalg.blas_product(eqn)
        rewritten.append(eqn)
        products[eqn.outvars[0]] = product
    return rewritten, products


def _default_namer():
    counter = {}

    def name(var) -> str:
        if id(var) not in counter:
            counter[id(var)] = f"v{len(counter)}"
        return counter[id(var)]

    return name


def _segment_inputs(eqns, producers, scalars) -> list:
    found: dict = {}
    for eqn in eqns:
        for atom in eqn.invars:
            if type(atom) is not Literal and atom not in producers and atom not in scalars:
                found.setdefault(atom)
    return list(found)


class _BufferNames:
    """Unique buffer names, after the jaxpr's variable names where there are some."""

    def __init__(self, names: Callable):
        self.names = names
        self.taken: set = set()

    def __call__(self, var=None, base: str | None = None) -> str:
        name = base if var is None else self.names(var)
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name


class _RowLocalBuilder(ExprBuilder):
    """An ExprBuilder whose row-local values are read from their one-row buffers, which is
    only valid at the row the kernel's outermost loop is on."""

    OUTER = Var("i0")

    def __init__(self, producers, loaded, scalars, row_local: dict):
        super().__init__(producers, loaded, scalars)
        self.row_local = row_local

    def is_loaded(self, var) -> bool:
        return var in self.loaded or var in self.row_local

    def read(self, atom, index):
        buffer = self.row_local.get(atom) if type(atom) is not Literal else None
        if buffer is None or 0 in atom.aval.shape:
            return super().read(atom, index)
        index = tuple(kir.as_index(i) for i in index)
        if index[0] is not self.OUTER:
            raise _NotRowLocal(atom)
        key = (atom, index)
        node = self.memo.get(key)
        if node is None:
            node = self.memo[key] = kir.Load(buffer, kir.flat_index(buffer.shape, index[1:]))
        return node


def _build(
    eqns,
    producers,
    order,
    outputs,
    materialized,
    row_local,
    previous,
    merge_rows,
    name,
    scalars,
    names,
    products,
    inherit=None,
) -> SegmentPlan:
    """The segment's plan with these values stored. `previous`: (the plan built before, the
    values stored now that it computed fused), whose kernels are reused where they are the
    same (see _Reuse); `merge_rows`: merge kernels that read stored values row by row into
    the kernels that store them (_merge_row_reader); `inherit`: the builder of a plan that
    stored the same values, all of them full (the row-local ones too), whose nodes this
    build takes where they read no row-local value (ExprBuilder.inherit): the last build
    lowers only what its row buffers change."""
    naming = _BufferNames(names)
    inputs = _segment_inputs(eqns, producers, scalars)
    buffers: dict = {v: Buffer(naming(v), v.aval.dtype, v.aval.shape) for v in inputs}
    output_set = set(outputs)
    stored = list(outputs) + sorted(
        (v for v in materialized if v not in output_set), key=order.__getitem__
    )
    temps = []
    for var in stored:
        if var in row_local:
            buffers[var] = Buffer(naming(var), var.aval.dtype, var.aval.shape[1:], "temp")
            continue
        role = "output" if var in output_set else "temp"
        if role == "temp":
            temps.append(var)
        buffers[var] = Buffer(naming(var), var.aval.dtype, var.aval.shape, role)
    loaded = {v: buffers[v] for v in inputs}
    loaded.update({v: buffers[v] for v in materialized if v not in row_local})
    local = {v: buffers[v] for v in row_local}
    builder = (
        _RowLocalBuilder(producers, loaded, scalars, local)
        if local
        else ExprBuilder(producers, loaded, scalars)
    )
    if inherit is not None:
        builder.inherit(inherit, row_local)
    loaded_values = set(materialized) | set(inputs)
    groups = _group(
        stored,
        producers,
        order,
        materialized,
        row_local,
        products,
        (lambda values: reads_of(values, producers, loaded_values, scalars))
        if merge_rows
        else None,
    )
    plan = SegmentPlan(None, [], list(outputs), temps, groups, buffers, builder, local)
    # (Row-local values are read only by the kernel they merge into, never a reused one.)
    reuse = _Reuse(previous, producers, materialized) if previous else None
    for group in groups:
        kernel = reuse.kernel(group, builder) if reuse else None
        if kernel is None or not kernel.body:
            kernel = Kernel(group.kernel_name, kernel_body(plan, group))
        elif kernel.name != group.kernel_name:
            kernel = Kernel(group.kernel_name, kernel.body, kernel.params)
        group.kernel = kernel  # (a kernel kept whole keeps what was computed for it)
    assemble_program(plan, inputs, name)
    return plan


def assemble_program(plan: SegmentPlan, inputs: list, name: str) -> None:
    """Set plan.program from the plan's kernels and buffers: the inputs (of `inputs`) its
    kernels read, its outputs, full temps, kernel-local buffers and block partials, in that
    order; and plan.inputs to those inputs."""
    kernels = [g.kernel for g in plan.kernels]
    used = {b for k in kernels for b in k.params}
    buffers = plan.buffers
    plan.inputs = [v for v in inputs if buffers[v] in used]
    program_buffers = (
        [buffers[v] for v in plan.inputs]
        + [buffers[v] for v in plan.outputs]
        + [buffers[v] for v in plan.temps]
        + [b for g in plan.kernels for b in g.local_buffers]
        + list(plan.partials)
    )
    plan.program = Program(name, program_buffers, kernels)


class _Reuse:
    """Kernels of the plan built before, for a rebuild that stores a few more values
    (plan_segment's budget loop) or merges kernels (its last build): a kernel that stores the
    same values, none of whose fused values is stored now, is the same kernel (a product: the
    same call). It is kept (renamed if its position changed; what was computed for it, such
    as its evaluation counts, comes along), and the nodes that stood for its fused values in
    it go to the new builder's nodes_of, which the budget check reads (so it counts what it
    would count had the kernel been built again)."""

    def __init__(self, previous, producers, materialized):
        plan, self.stored_now = previous
        self.before = {
            tuple(group.parts[0]): group for group in plan.kernels if len(group.parts) == 1
        }
        self.nodes_before = plan.builder.nodes_of
        self.producers = producers
        self.materialized = materialized

    def fused(self, values) -> set | None:
        """The values a kernel storing `values` computes: theirs and, through their
        operands, every value not stored; None if it reads a value stored now (which the
        kernel built before computed)."""
        found, stack = set(values), list(values)
        while stack:
            for atom in self.producers[stack.pop()].invars:
                if type(atom) is Literal or atom in found or atom not in self.producers:
                    continue
                if atom in self.stored_now:
                    return None
                if atom not in self.materialized:
                    found.add(atom)
                    stack.append(atom)
        return found

    def kernel(self, group, builder) -> Kernel | None:
        if len(group.parts) != 1:
            return None
        before = self.before.get(tuple(group.parts[0]))
        if before is None or before.product is not group.product:
            return None
        if group.product is not None:  # (a call on the same buffers)
            return before.kernel
        fused = self.fused(group.parts[0])
        if fused is None:
            return None
        in_kernel = evaluation_counts(before.kernel)  # (its nodes; computed for the budget)
        for value in fused:
            nodes = [n for n in self.nodes_before.get(value, ()) if n in in_kernel]
            if nodes:
                builder.nodes_of.setdefault(value, set()).update(nodes)
        return before.kernel


def _group(
    stored,
    producers,
    order,
    materialized,
    row_local=frozenset(),
    products=None,
    reads_of: Callable | None = None,
) -> list[KernelPlan]:
    """Assign stored values to kernels: equal shapes share a nest unless one needs the other's
    buffer (then it goes in a later kernel); a BLAS product is a kernel of its own; then
    row-local values pull their one consumer kernel into their own (see plan_segment), and
    stored values the kernels that read them row by row (see _merge_row_reader;
    `reads_of(values)` gives the indices the expressions of values read stored values at)."""
    products = products or {}
    deps = _buffer_dependencies(stored, producers, materialized)
    groups: list[KernelPlan] = []
    group_of: dict = {}
    of_shape: dict = {}  # shape -> the positions of the groups of that shape, ascending
    for var in sorted(stored, key=order.__getitem__):
        earliest = max((group_of[d] + 1 for d in deps[var] if d in group_of), default=0)
        if var in products:
            groups.append(KernelPlan(var.aval.shape, [[var]], product=products[var]))
            group_of[var] = len(groups) - 1
            continue
        positions = of_shape.setdefault(var.aval.shape, [])
        first = bisect.bisect_left(positions, earliest)
        if first < len(positions):
            chosen = positions[first]
        else:
            groups.append(KernelPlan(var.aval.shape, [[]]))
            chosen = len(groups) - 1
            positions.append(chosen)
        groups[chosen].parts[0].append(var)
        group_of[var] = chosen
    for var in sorted(row_local, key=order.__getitem__):
        groups = _merge_row_local(var, groups, deps, row_local)
    if reads_of is not None:
        for var in sorted(stored, key=order.__getitem__):
            if var not in row_local and len(var.aval.shape) >= 2 and 0 not in var.aval.shape:
                skipped: set = set()
                while True:  # (each reader that qualifies, in order)
                    count = len(groups)
                    groups = _merge_row_reader(var, groups, deps, reads_of, skipped)
                    if len(groups) == count:
                        break
    for number, group in enumerate(groups):
        group.kernel_name = f"{'product' if group.product else 'fusion'}_{number}"
    return groups


def _merge_row_local(var, groups: list, deps: dict, row_local) -> list:
    """Move the kernels that load `var` into var's kernel, after var's part, one after the
    other (a row's sum and the values scaled by it are two kernels reading the same row);
    raise _NotRowLocal when that is not possible."""
    rows = var.aval.shape[0]
    while True:
        home = next(g for g, group in enumerate(groups) if var in group.values)
        readers = sorted(
            {g for g, group in enumerate(groups) for v in group.values if var in deps[v]} - {home}
        )
        if not readers:
            return groups
        reader = readers[0]
        if reader < home:
            raise _NotRowLocal(var)
        consumer = groups[reader]
        if any(not v.aval.shape or v.aval.shape[0] != rows for v in consumer.values):
            raise _NotRowLocal(var)
        home_values = set(groups[home].values)
        own = set(consumer.values)  # (computed by the consumer itself, in order)
        for v in consumer.values:
            for d in deps[v]:
                if d is var or d in own or (d in row_local and d in home_values):
                    continue
                position = next(g for g, group in enumerate(groups) if d in group.values)
                if position >= home:
                    raise _NotRowLocal(var)
        merged = KernelPlan(groups[home].shape, groups[home].parts + consumer.parts)
        groups = [merged if g == home else group for g, group in enumerate(groups) if g != reader]


def _merge_row_reader(var, groups: list, deps: dict, reads_of: Callable, skipped: set) -> list:
    """Move the first kernel that loads the stored value `var` (and is not in `skipped`, the
    first values of kernels found not to qualify) into var's kernel, after its parts, where
    that kernel reads every value of var's kernel at the row the outer loop is on only (so
    each row it reads was stored earlier in the same iteration), all it depends on is computed
    before or by itself, and its values have var's rows; else the groups unchanged. Unlike a
    row-local value, var keeps its full buffer, for the kernels that read it later: a
    layernorm's mean, which its gradient needs again, is computed in the kernel that
    normalizes with it.
    """
    home = next(g for g, group in enumerate(groups) if var in group.values)
    if groups[home].product is not None:
        return groups
    home_values = set(groups[home].values)
    rows = groups[home].shape[0]
    outer = _RowLocalBuilder.OUTER
    for reader, consumer in enumerate(groups):
        if reader <= home or consumer.values[0] in skipped:
            continue
        if not any(var in deps[v] for v in consumer.values):
            continue
        if (
            consumer.product is None
            and all(v.aval.shape and v.aval.shape[0] == rows for v in consumer.values)
            and all(
                d in home_values
                or d in consumer.values
                or next(g for g, group in enumerate(groups) if d in group.values) < home
                for v in consumer.values
                for d in deps[v]
            )
            and all(
                index[0] is outer
                for atom, indices in reads_of(consumer.values).items()
                if atom in home_values
                for index in indices
            )
        ):
            merged = KernelPlan(groups[home].shape, groups[home].parts + consumer.parts)
            return [merged if g == home else group for g, group in enumerate(groups) if g != reader]
        skipped.add(consumer.values[0])
    return groups


def _buffer_dependencies(stored, producers, materialized) -> dict:
    """For each stored value, the materialized values whose buffers its expression loads."""
    deps = {}
    for var in stored:
        found, stack, seen = set(), [producers[var]], set()
        while stack:
            eqn = stack.pop()
            for atom in eqn.invars:
                if type(atom) is Literal or id(atom) in seen or atom not in producers:
                    continue
                seen.add(id(atom))
                if atom in materialized:
                    found.add(atom)
                else:
                    stack.append(producers[atom])
        found.discard(var)
        deps[var] = found
    return deps


# ---------------------------------------------------------------------------------------------
# The budget (the cost rule is in fusion_cost)


def _over_budget(plan: SegmentPlan, eqns, producers, materialized) -> set:
    """Expensive values that, fused, run more times than they have elements, and that no
    other such value reads fused (storing that one first may be enough: its reads were what
    multiplied theirs); empty when every fused value is within budget."""
    runs: Counter = Counter()
    for group in plan.kernels:
        runs.update(evaluation_counts(group.kernel))
    over = set()
    for var, nodes in plan.builder.nodes_of.items():
        if var in materialized or not any(is_expensive(n) for n in nodes):
            continue
        if sum(runs.get(n, 0) for n in nodes) > var.aval.size:
            over.add(var)
    if not over:
        return over
    below: set = set()
    for eqn in reversed(eqns):
        if any(var in over or var in below for var in eqn.outvars):
            below.update(
                a
                for a in eqn.invars
                if type(a) is not Literal and a in producers and a not in materialized
            )
    return over - below

"""Column sums folded into the row kernel that computes what they sum.

A column sum of a value that a row kernel computes, `out[j] = g(sum(E(k, j) for k in rows))`,
otherwise makes that kernel store E's operands as full (rows, columns) temps, which a column
kernel then reads back a second time: the gradient of a layernorm's scale and bias (the sums
over the batch of `dy * xhat` and `dy`) cost two temps of the input's size, written once and
read once, and a first call faults them in.

Folded, the row kernel adds each row's summand into a small buffer of block partials as it
goes: `P[b, j]` is the in-order sum of E over the rows of block b (BLOCK rows). The column
kernel then adds the blocks' partials into its totals with compensation. That is the
arithmetic kir_schedule's accumulate-in-place loops do for a long float column sum (blocks of
IN_PLACE_BLOCK rows, each summed in order into a scratch row, then added into the totals with
TwoSum), so the results are those of the unfolded program; and since a block never spans two
parallel chunks (a folded kernel's chunks start at multiples of BLOCK), they do not depend on
the thread count. The operands the row kernel stored only for the column sum become one-row
buffers: the temps are gone.

`fold_column_sums(plan)` applies this to a planned segment (fusion.plan_segment calls it last).
"""

from __future__ import annotations

import math

from kiln.compiler import kir, kir_rewrite
from kiln.compiler.kir import Buffer, Const, Kernel, Load, Loop, Reduce, Store, Var
from kiln.compiler.kir_schedule import (
    IN_PLACE_BLOCK,
    MAX_IN_PLACE_BYTES,
    NARROW_FLOATS,
    affine_coefficient,
    body_exprs,
    compensated_add,
    compensated_total,
    folded_index,
)

#: Rows per block partial (kir_schedule's block, so that results match the unfolded sum).
BLOCK = IN_PLACE_BLOCK


def fold_column_sums(plan):
    """The plan (a fusion.SegmentPlan, changed in place) with each foldable column kernel
    folded into its row kernel (see the module docstring)."""
    changed = False
    for position in range(len(plan.kernels)):
        changed |= _fold(plan, position)
    if changed:  # (row buffers and block partials in, localized temps out)
        from kiln.compiler.fusion import assemble_program

        assemble_program(plan, plan.inputs, plan.program.name)
    return plan


def _fold(plan, position: int) -> bool:
    """Fold the column kernel at `position` into the row kernel its sums read, if it is one
    and the row kernel can take it."""
    column = plan.kernels[position]
    found = _column_sums(column)
    if found is None:
        return False
    loop, sums = found
    rows = sums[0][1].stop.value
    stored_by = _stored_by(plan.kernels)
    home = _row_kernel(plan, position, loop.var, sums, rows, stored_by)
    if home is None:
        return False
    row_plan = plan.kernels[home]
    (outer_loop,) = row_plan.kernel.body
    outer = outer_loop.var
    inner = _inner(outer)
    columns = column.shape[0]
    blocks = -(-rows // BLOCK)
    taken = {b.name for b in plan.program.buffers} | {b.name for b in plan.partials}
    block_row = kir.index_div(outer, BLOCK)
    first_row = kir.op(kir.ScalarOp.EQ, kir.index_rem(outer, BLOCK), kir.as_index(0))
    accumulate, finish, locals_ = [], [], []
    for store, node in sums:
        target = store.buffer
        name = _fresh(f"{target.name}_blocks", taken)
        partial = Buffer(name, target.dtype, (blocks, columns), "temp")
        plan.partials.append(partial)
        at = kir.flat_index(partial.shape, [block_row, inner])
        summand = kir_rewrite.substitute(node.value, {node.var: outer, loop.var: inner})
        running = kir.select(first_row, Const(0, target.dtype), Load(partial, at))
        accumulate.append(
            Store(partial, at, kir.op(kir.REDUCE_COMBINER[node.kind], running, summand))
        )
        compensation = Buffer(
            _fresh(f"{target.name}_compensation", taken), target.dtype, (columns,), "temp"
        )
        locals_.append(compensation)
        finish += _combine_blocks(loop, store, node, partial, compensation, blocks)
    body = list(outer_loop.body) + [Loop(inner, 0, columns, accumulate)]
    row_plan.kernel = Kernel(
        row_plan.kernel.name, [Loop(outer, outer_loop.start, outer_loop.stop, body)]
    )
    row_plan.row_block = BLOCK
    column.kernel = Kernel(column.kernel.name, finish)
    column.local_buffers = locals_
    column.whole = True  # (its loops are not one nest: never split, never rebuilt)
    _localize_rows(plan, home)
    return True


def _column_sums(column) -> tuple | None:
    """(the column loop, [(store, its sum)]) of a kernel `for j: out[j] = g(sum(E(k, j)))`
    whose sums kir_schedule would accumulate in place in compensated blocks; else None."""
    if column.product is not None or len(column.shape) != 1 or len(column.parts) != 1:
        return None
    if column.local_buffers or column.whole:
        return None
    body = column.kernel.body
    if len(body) != 1 or not isinstance(body[0], Loop):
        return None
    loop = body[0]
    columns = column.shape[0]
    if not (_is_const(loop.start, 0) and _is_const(loop.stop, columns)):
        return None
    targets = [s.buffer for s in loop.body if isinstance(s, Store)]
    if len(targets) != len(loop.body) or len(set(targets)) != len(targets):
        return None
    sums, rows = [], None
    for store in loop.body:
        if store.index is not loop.var:
            return None
        found = [n for n in kir.toposort_region([store.value]) if isinstance(n, Reduce)]
        if len(found) != 1:
            return None
        node = found[0]
        if (
            node.kind is not kir.ReduceKind.SUM
            or kir.dtype_family(node.dtype) != "float"
            or node.dtype in NARROW_FLOATS
            or node.dtype != store.buffer.dtype
            or not _is_const(node.start, 0)
            or not isinstance(node.stop, Const)
            or node.stop.value <= IN_PLACE_BLOCK
            or columns * node.dtype.itemsize * 3 > MAX_IN_PLACE_BYTES
            or any(isinstance(n, Reduce) for n in kir.toposort([node.value]))
            or not kir_rewrite.free_vars(node.value) <= {node.var, loop.var}
            or kir_rewrite.free_vars(node.init)
            or (rows is not None and node.stop.value != rows)
        ):
            return None
        rows = node.stop.value
        loads = [n for n in kir.toposort([store.value]) if isinstance(n, Load)]
        if any(load.buffer in targets for load in loads):
            return None
        sums.append((store, node))
    return loop, sums


def _row_kernel(plan, position: int, j: Var, sums, rows: int, stored_by: dict) -> int | None:
    """The kernel before `position` that the sums fold into: the last one storing a buffer
    they load, a loop `for i0 in 0..rows` around its body, with every buffer the sums load
    that it stores read at the row i0 is on (stored whole before the folded statements run,
    at i0), and every other buffer they load complete before it runs. None if there is none."""
    loads = {n for _, node in sums for n in kir.toposort([node.value]) if isinstance(n, Load)}
    writers = {stored_by[load.buffer] for load in loads if load.buffer in stored_by}
    if not writers or max(writers) >= position:
        return None
    home = max(writers)
    group = plan.kernels[home]
    if group.product is not None or len(group.shape) < 2 or group.shape[0] != rows:
        return None
    body = group.kernel.body
    if len(body) != 1 or not isinstance(body[0], Loop):
        return None
    outer = body[0].var
    if not (_is_const(body[0].start, 0) and _is_const(body[0].stop, rows)):
        return None
    inner = _inner(outer)
    ranges = {inner: (0, plan.kernels[position].shape[0])}  # (the column loop's range)
    row_stores = _row_stores(body[0])
    for _, node in sums:
        for load in (n for n in kir.toposort([node.value]) if isinstance(n, Load)):
            if stored_by.get(load.buffer) != home:
                continue
            if load.buffer not in row_stores:
                return None
            index = kir_rewrite.substitute(load.index, {node.var: outer, j: inner})
            width = math.prod(load.buffer.shape[1:])
            if not _within(_row_offset(index, outer, load.buffer), width, ranges):
                return None
    return home


def _inner(outer: Var) -> Var:
    """The column variable of the folded statements (the row kernels' own inner name)."""
    return Var("i1") if outer.name != "i1" else Var("i2")


def _row_stores(loop: Loop) -> set:
    """Buffers a row loop stores only at the row it is on, outside conditionals."""
    good, bad = set(), set()

    def visit(stmts, conditional: bool):
        for stmt in stmts:
            if isinstance(stmt, Store):
                row = _row_offset(stmt.index, loop.var, stmt.buffer)
                (bad if conditional or row is None else good).add(stmt.buffer)
            elif isinstance(stmt, Loop):
                visit(stmt.body, conditional)
            elif isinstance(stmt, kir.If):
                visit(stmt.body, True)
            else:
                for buffer in kir.stored_buffers([stmt]):
                    bad.add(buffer)

    visit(loop.body, False)
    return good - bad


def _row_offset(index, outer: Var, buffer: Buffer):
    """The offset within row `outer` of buffer that index addresses, when it is outer's row
    (outer times the row's length plus an offset free of outer); else None."""
    if not buffer.shape:
        return None
    stride = math.prod(buffer.shape[1:])
    if affine_coefficient(index, outer) != stride:
        return None
    offset = folded_index(kir_rewrite.substitute(index, {outer: kir.as_index(0)}))
    if outer in kir_rewrite.free_vars(offset):
        return None
    return offset


def _localize_rows(plan, home: int) -> None:
    """Make the full temps that only kernel `home` uses, each element at the row its loop is
    on, one-row buffers of that kernel (the folded column sums read them there now)."""
    group = plan.kernels[home]
    (loop,) = group.kernel.body
    outer = loop.var
    users: dict = {}
    for number, other in enumerate(plan.kernels):
        for buffer in other.kernel.params:
            users.setdefault(buffer, set()).add(number)
    candidates = {
        plan.buffers[var]: var
        for var in plan.temps
        if users.get(plan.buffers[var]) == {home} and len(plan.buffers[var].shape) >= 2
    }
    if not candidates:
        return
    nodes = kir.toposort(body_exprs(loop.body))
    accesses: dict = {buffer: set() for buffer in candidates}
    for node in nodes:
        if isinstance(node, Load) and node.buffer in accesses:
            accesses[node.buffer].add(node.index)
    for stmt in kir.walk_stmts(loop.body):
        if isinstance(stmt, Store) and stmt.buffer in accesses:
            accesses[stmt.buffer].add(stmt.index)
    ranges = _ranges(loop, nodes)
    offsets: dict = {}  # (buffer, index) -> offset in the row
    swap: dict = {}  # full temp -> its row buffer
    for buffer, indices in accesses.items():
        width = math.prod(buffer.shape[1:])
        found = {i: _row_offset(i, outer, buffer) for i in indices}
        if all(_within(offset, width, ranges) for offset in found.values()):
            swap[buffer] = Buffer(buffer.name, buffer.dtype, buffer.shape[1:], "temp")
            offsets.update(((buffer, i), offset) for i, offset in found.items())
    if not swap:
        return
    rows = {candidates[buffer]: row for buffer, row in swap.items()}

    def offset_of(buffer, index):
        found = offsets.get((buffer, index))
        return found if found is not None else _row_offset(index, outer, buffer)

    def replace(node, children):
        if isinstance(node, Load) and node.buffer in swap:
            return Load(swap[node.buffer], offset_of(node.buffer, children[0]))
        return None

    memo: dict = {}

    def rewrite_expr(node):
        return kir_rewrite.rewrite(node, replace, memo)

    def rewrite(stmt):
        if isinstance(stmt, Store) and stmt.buffer in swap:
            offset = offset_of(stmt.buffer, rewrite_expr(stmt.index))
            return Store(swap[stmt.buffer], offset, rewrite_expr(stmt.value))
        if isinstance(stmt, Loop):
            start, stop = rewrite_expr(stmt.start), rewrite_expr(stmt.stop)
            return Loop(stmt.var, start, stop, [rewrite(s) for s in stmt.body])
        if isinstance(stmt, kir.If):
            return kir.If(rewrite_expr(stmt.cond), [rewrite(s) for s in stmt.body])
        return kir_rewrite.rewrite_stmt(stmt, rewrite_expr)

    group.kernel = Kernel(group.kernel.name, [rewrite(loop)])
    group.local_buffers = list(group.local_buffers) + list(rows.values())
    for var, row in rows.items():
        plan.temps.remove(var)
        plan.buffers[var] = row
        plan.row_local[var] = row


def _ranges(loop: Loop, nodes: list) -> dict:
    """{loop or reduction variable inside loop: (lowest, highest + 1)} over every loop and
    reduction with constant bounds (a name bound twice gets the union)."""
    found: dict = {}

    def note(var, start, stop):
        if isinstance(start, Const) and isinstance(stop, Const):
            low, high = found.get(var, (start.value, stop.value))
            found[var] = (min(low, start.value), max(high, stop.value))
        else:
            found[var] = None

    for stmt in kir.walk_stmts(loop.body):
        if isinstance(stmt, Loop) and found.get(stmt.var, ()) is not None:
            note(stmt.var, stmt.start, stmt.stop)
    for node in nodes:  # (every expression of the loop's body, toposorted)
        if isinstance(node, Reduce) and found.get(node.var, ()) is not None:
            note(node.var, node.start, node.stop)
    return found


def _within(offset, width: int, ranges: dict) -> bool:
    """Whether an offset (a constant, or a loop variable) stays within [0, width)."""
    if offset is None:
        return False
    if isinstance(offset, Const):
        return 0 <= offset.value < width
    if isinstance(offset, Var):
        bounds = ranges.get(offset)
        return bounds is not None and bounds[0] >= 0 and bounds[1] <= width
    return False


def _combine_blocks(loop: Loop, store: Store, node: Reduce, partial, compensation, blocks):
    """The column kernel's loops for one sum: the totals start at the sum's init, each block's
    partial row is added with TwoSum (what the addition lost going to `compensation`), the
    compensation is added at the end where the total is finite, and g applied last."""
    j, columns = loop.var, store.buffer.shape[0]
    target, dtype = store.buffer, node.dtype
    number = Var(f"{node.var.name}_block")
    total = Load(target, j)
    part = Load(partial, kir.flat_index(partial.shape, [number, j]))
    lost = Load(compensation, j)
    new_total, new_lost = compensated_add(total, part, lost)

    def over_j(*statements):
        return Loop(j, 0, columns, statements)

    loops = [
        over_j(Store(target, j, node.init), Store(compensation, j, Const(0, dtype))),
        Loop(
            number,
            0,
            blocks,
            [over_j(Store(compensation, j, new_lost), Store(target, j, new_total))],
        ),
        over_j(Store(target, j, compensated_total(total, lost))),
    ]
    if store.value is not node:
        loops.append(over_j(Store(target, j, kir_rewrite.substitute(store.value, {node: total}))))
    return loops


def _stored_by(kernels) -> dict:
    """{buffer: the last kernel that stores it}."""
    found = {}
    for number, group in enumerate(kernels):
        for buffer in kir.stored_buffers(group.kernel.body):
            found[buffer] = number
    return found


def _is_const(node, value: int) -> bool:
    return isinstance(node, Const) and node.value == value


def _fresh(base: str, taken: set) -> str:
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name

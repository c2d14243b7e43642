"""A whole scan as one kernel: for a scan whose body is one small native segment, the body's
kernels are written out inside a loop over the rows, in one kernel of one program, instead of
being called once per row.

In one function LLVM sees the whole loop: a small carry stays in registers from one row to the
next (a call per row had to store it and load it back), and the body's index arithmetic and
constants are set up once. The carry alternates between two temps, `a` and `b`: the loop runs
the body twice per trip (a -> b, then b -> a), plus once more when the length is odd, so every
access has a fixed buffer and LLVM can keep both in registers. The rows of xs and ys are the
body's buffers moved by row * row size.

The kernel rounds every floating-point operation on its own (kiln/codegen/llvm/emit.py,
ROUNDED_SUFFIX): with the rows in one function, a multiply at the end of one row and an add at
the start of the next could otherwise fuse, and which of two products fuses with an add would
depend on the code around it. Its results are those of the reference interpreter, operation by
operation, for every body of arithmetic (transcendentals use kiln's own approximations).

Only small bodies qualify (see scan_kernel): the body is emitted up to three times, a large
carry gains little, and a body with a BLAS call or a float sum keeps its own kernels; every
other scan keeps the per-row call of kiln/runtime/native_loop_driver.py.
"""

from __future__ import annotations

from typing import Sequence

from kiln.codegen.llvm.emit import ROUNDED_SUFFIX
from kiln.compiler import kir, kir_rewrite
from kiln.compiler.kir import Buffer, Load, Loop, Store, Var
from kiln.compiler.kir_ops import INT_OR_BOOL_FAMILIES
from kiln.core.dtypes import dtype_family

__all__ = ["scan_kernel", "MAX_CARRY_BYTES", "MAX_BODY_STATEMENTS"]

#: The most bytes of changing carry a scan kernel takes (its two copies live on the stack).
#: A carry of a few vectors stays in registers from row to row; larger ones gained less and
#: less (5-15% at 1-16 KiB), as the rows' own work grows.
MAX_CARRY_BYTES = 4096
#: The most statements (loops and stores, counted through nesting) a body may have.
MAX_BODY_STATEMENTS = 64


class ScanKernel:
    """The program of a scan as one kernel, and where each of its arguments comes from.

    `sources[n]` names what the program's n-th argument is: ("hidden", n) for the body's
    n-th fixed input, ("const", i), ("initial", j), ("xs", k), ("final", j) for carry j's
    final value, or ("ys", k)."""

    def __init__(self, program: kir.Program, sources: list[tuple[str, int]]):
        self.program, self.sources = program, sources


def _statements(body) -> int:
    return sum(1 for _ in kir.walk_stmts(body))


def scan_kernel(
    name: str,
    body: kir.Program,
    hidden: Sequence[Buffer],
    consts: Sequence[Buffer | None],
    carry_in: Sequence[Buffer | None],
    carry_out: Sequence[Buffer | None],
    xs: Sequence[Buffer | None],
    ys: Sequence[Buffer],
    length: int,
    reverse: bool,
) -> ScanKernel | None:
    """The scan as one kernel, or None when it does not qualify.

    The lists give the body program's buffers: its fixed inputs (constants it holds), and
    for each const, carry (read, stored: None when the body does not read it, or passes it
    through unchanged), xs row and ys row."""
    statements = [s for kernel in body.kernels for s in kernel.body]
    if any(isinstance(s, kir.MatMul) for s in kir.walk_stmts(statements)):
        return None
    if _statements(statements) > MAX_BODY_STATEMENTS or _reorders(statements):
        return None
    if sum(b.nbytes for b in carry_out if b is not None) > MAX_CARRY_BYTES:
        return None

    def renamed(buffer: Buffer, suffix: str, role: str, shape=None) -> Buffer:
        shape = buffer.shape if shape is None else shape
        return Buffer(f"{buffer.name}__{suffix}", buffer.dtype, shape, role)

    inputs, outputs, sources = list(hidden), [], [("hidden", n) for n in range(len(hidden))]
    for i, buffer in enumerate(consts):
        if buffer is not None:
            inputs.append(buffer)
            sources.append(("const", i))
    initial, finals, first, second = {}, {}, {}, {}
    for j, (read, out) in enumerate(zip(carry_in, carry_out)):
        like = out if out is not None else read
        if like is None:
            continue
        if out is None:  # passed through: every row reads the operand itself
            inputs.append(read)
            sources.append(("initial", j))
            continue
        initial[j] = renamed(like, "initial", "input")
        inputs.append(initial[j])
        sources.append(("initial", j))
        finals[j] = renamed(like, "final", "output")
        first[j] = renamed(like, "a", "temp")
        second[j] = renamed(like, "b", "temp")
    rows: dict[Buffer, Buffer] = {}  # body row buffer -> the whole stacked buffer
    for k, buffer in enumerate(xs):
        if buffer is not None:
            rows[buffer] = renamed(buffer, "rows", "input", (length,) + buffer.shape)
            inputs.append(rows[buffer])
            sources.append(("xs", k))
    for j in finals:
        outputs.append(finals[j])
        sources.append(("final", j))
    for k, buffer in enumerate(ys):
        rows[buffer] = renamed(buffer, "rows", "output", (length,) + buffer.shape)
        outputs.append(rows[buffer])
        sources.append(("ys", k))

    temps = {b: renamed(b, "temp", "temp") for b in body.temps}

    def step(row: kir.Expr, reads: dict, writes: dict) -> list[kir.Stmt]:
        """The body's statements for one row, carry read from `reads`, stored to `writes`."""
        moved: dict[Buffer, tuple[Buffer, kir.Expr | None]] = {
            b: (renamed, None) for b, renamed in temps.items()
        }
        for j, read in enumerate(carry_in):
            if read is not None and j in reads:
                moved[read] = (reads[j], None)
        for j, out in enumerate(carry_out):
            if out is not None:
                moved[out] = (writes[j], None)
        for buffer, whole in rows.items():
            moved[buffer] = (whole, kir.index_mul(row, buffer.size))
        return [_moved(s, moved, {}) for s in statements]

    def copy(source: Buffer, target: Buffer) -> kir.Stmt:
        index = Var("scan_element")
        return Loop(index, 0, source.size, [Store(target, index, Load(source, index))])

    trip = Var("scan_trip")

    def row_of(position: kir.Expr) -> kir.Expr:
        return kir.index_sub(length - 1, position) if reverse else position

    pair = kir.index_mul(trip, 2)
    loop_body = step(row_of(pair), first, second) + step(
        row_of(kir.index_add(pair, 1)), second, first
    )
    kernel_body: list[kir.Stmt] = [copy(initial[j], first[j]) for j in initial]
    if length >= 2:
        kernel_body.append(Loop(trip, 0, length // 2, loop_body))
    last = first
    if length % 2:
        kernel_body += step(row_of(kir.as_index(length - 1)), first, second)
        last = second
    kernel_body += [copy(last[j], finals[j]) for j in finals]
    # The temps: the carry's two copies, the body's own temps, and any scratch a body kernel
    # allocated for itself (now the one kernel's).
    params = inputs + outputs
    params += [b for b in kir.buffers_of(kernel_body) if b not in params and b.role == "temp"]
    kernel = kir.Kernel("scan" + ROUNDED_SUFFIX, kernel_body, params)
    program = kir.Program(name, params, [kernel])
    kir.verify_program(program)
    return ScanKernel(program, sources)


def _reorders(statements) -> bool:
    """Whether the body sums or multiplies floats in a reduction: its own kernels let LLVM
    reorder those (and vectorize them); rounded one operation at a time they would run in
    order, slowly, so such a body stays one call per row."""
    roots = [e for s in kir.walk_stmts(statements) for e in kir.stmt_exprs(s)]
    return any(
        isinstance(node, kir.Reduce)
        and node.kind in (kir.ReduceKind.SUM, kir.ReduceKind.PROD)
        and dtype_family(node.dtype) not in INT_OR_BOOL_FAMILIES
        for node in kir.toposort(roots)
    )


def _moved(stmt: kir.Stmt, moved: dict, memo: dict) -> kir.Stmt:
    """stmt with each buffer in `moved` replaced by (buffer, offset): its loads and stores go
    to the new buffer, at their index plus the offset (when not None)."""

    def replace(node, children):
        if isinstance(node, Load) and node.buffer in moved:
            buffer, offset = moved[node.buffer]
            index = children[0] if offset is None else kir.index_add(children[0], offset)
            return Load(buffer, index)
        return None

    def expr(node):
        return kir_rewrite.rewrite(node, replace, memo)

    if isinstance(stmt, Store):
        buffer, offset = moved.get(stmt.buffer, (stmt.buffer, None))
        index = expr(stmt.index)
        if offset is not None:
            index = kir.index_add(index, offset)
        return Store(buffer, index, expr(stmt.value))
    if isinstance(stmt, Loop):
        return Loop(
            stmt.var, expr(stmt.start), expr(stmt.stop), [_moved(s, moved, memo) for s in stmt.body]
        )
    return kir.If(expr(stmt.cond), [_moved(s, moved, memo) for s in stmt.body])

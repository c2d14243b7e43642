"""The kernel IR pretty printer: the text users read from `compile().as_text()`.

Loop nests print as indented `for` blocks, fused element math inline with infix operators,
shared subexpressions and every reduction as a named, typed line (`t0: f32 = ...`).
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from kiln.compiler import kir, kir_rewrite
from kiln.compiler.kir import (
    ArgValue,
    Const,
    Expr,
    If,
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

_O = ScalarOp
# Infix spelling and binding strength (higher binds tighter), as in Python/C.
_INFIX = {
    _O.MUL: ("*", 6),
    _O.DIV: ("/", 6),
    _O.REM: ("%", 6),
    _O.ADD: ("+", 5),
    _O.SUB: ("-", 5),
    _O.SHIFT_LEFT: ("<<", 4),
    _O.SHIFT_RIGHT_ARITHMETIC: (">>", 4),
    _O.SHIFT_RIGHT_LOGICAL: (">>>", 4),
    _O.BITWISE_AND: ("&", 3),
    _O.BITWISE_XOR: ("^", 2),
    _O.BITWISE_OR: ("|", 1),
    _O.EQ: ("==", 0),
    _O.NE: ("!=", 0),
    _O.LT: ("<", 0),
    _O.LE: ("<=", 0),
    _O.GT: (">", 0),
    _O.GE: (">=", 0),
    _O.LOGICAL_AND: ("and", -1),
    _O.LOGICAL_XOR: ("xor", -2),
    _O.LOGICAL_OR: ("or", -2),
}
_PREFIX = {_O.NEG: "-", _O.BITWISE_NOT: "~", _O.LOGICAL_NOT: "!"}
_ATOM = 9  # names, calls, loads, constants never need parentheses
_MAX_DEPTH = 8  # deeper expressions are split into named steps
_UNARY = 7


def format_const(node: Const) -> str:
    """A literal as it reads best: true/false, integers, shortest round-tripping floats."""
    if isinstance(node.value, bool):
        return "true" if node.value else "false"
    if isinstance(node.value, int):
        return str(node.value)
    return str(np.asarray(node.value, dtype=node.dtype)[()])


class _Namer:
    """Names for let-bound nodes, visible in the scope that bound them and the scopes within."""

    def __init__(self, reserved: frozenset[str] = frozenset()):
        self.scopes: list[dict[Expr, str]] = [{}]
        self.counts = Counter()
        self.reserved = reserved  # loop variable names, which must not be reused
        self.inline_named: set[Expr] = set()  # named where they first appear (`(t3 := ...)`)

    def lookup(self, node: Expr) -> str | None:
        for scope in reversed(self.scopes):
            if node in scope:
                return scope[node]
        return None

    def bind(self, node: Expr) -> str:
        prefix = "r" if isinstance(node, Reduce) else "t"
        while True:
            name = f"{prefix}{self.counts[prefix]}"
            self.counts[prefix] += 1
            if name not in self.reserved:
                break
        self.scopes[-1][node] = name
        return name


def format_expr(node: Expr, namer: _Namer | None = None) -> str:
    """One expression on one line (reductions inline as generator expressions)."""
    return _format(node, namer or _Namer())[0]


def _format(node: Expr, namer: _Namer) -> tuple[str, int]:
    """Text and binding strength of a node, using names already bound in namer."""
    name = namer.lookup(node)
    if name is not None:
        return name, _ATOM
    if node in namer.inline_named:
        text = _format_op(node, namer)[0]
        return f"({namer.bind(node)} := {text})", _ATOM
    if isinstance(node, Const):
        text = format_const(node)
        return text, (_UNARY if text.startswith("-") else _ATOM)
    if isinstance(node, Var):
        return node.name, _ATOM
    if isinstance(node, Load):
        return f"{node.buffer.name}[{format_expr(node.index, namer)}]", _ATOM
    if isinstance(node, ArgValue):
        return f"value_of({format_expr(node.reduce, namer)})", _ATOM
    if isinstance(node, Reduce):
        return _format_reduce(node, namer), _ATOM
    if isinstance(node, Op):
        return _format_op(node, namer)
    return f"<{type(node).__name__}>", _ATOM


def _format_op(node: Op, namer: _Namer) -> tuple[str, int]:
    if node.op in _INFIX:
        symbol, strength = _INFIX[node.op]
        left, left_strength = _format(node.args[0], namer)
        right, right_strength = _format(node.args[1], namer)
        if left_strength < strength:
            left = f"({left})"
        if right_strength <= strength:
            right = f"({right})"
        return f"{left} {symbol} {right}", strength
    if node.op in _PREFIX:
        operand, strength = _format(node.args[0], namer)
        if strength < _UNARY:
            operand = f"({operand})"
        return f"{_PREFIX[node.op]}{operand}", _UNARY
    args = ", ".join(format_expr(a, namer) for a in node.args)
    if node.op is _O.CAST:
        return f"{kir.short_name(node.dtype)}({args})", _ATOM
    if node.op is _O.BITCAST:
        return f"bitcast_{kir.short_name(node.dtype)}({args})", _ATOM
    return f"{node.op.value}({args})", _ATOM


def _format_reduce(node: Reduce, namer: _Namer) -> str:
    # A node the body uses more than once is named where it first appears: printed as a
    # tree, a body with much sharing (a hash's rounds) would grow exponentially.
    body = [node.value] + ([node.index] if node.index is not None else [])
    uses = Counter(c for n in kir.toposort(body) for c in n.children())
    namer.inline_named |= {n for n, count in uses.items() if count > 1 and isinstance(n, Op)}
    namer.scopes.append({})
    value = format_expr(node.value, namer)
    index = None
    if node.index is not None and not _is_plain_index(node):
        index = f", index={format_expr(node.index, namer)}"
    namer.scopes.pop()
    bounds = f"{format_expr(node.start, namer)}..{format_expr(node.stop, namer)}"
    extra = ""
    if node.init is not None and not _is_identity(node):
        extra = f", init={format_expr(node.init, namer)}"
    if index is not None:
        extra = index
    return f"{node.kind.value}({value} for {node.var.name} in {bounds}{extra})"


def _is_identity(node: Reduce) -> bool:
    return node.init is kir.Const(kir.reduce_identity(node.kind, node.dtype), node.dtype)


def _is_plain_index(node: Reduce) -> bool:
    return node.index is kir.cast(node.var, node.dtype)


# ---------------------------------------------------------------------------------------------
# Statements


class _StmtPrinter:
    def __init__(self, uses: Counter, reserved: frozenset[str], written: frozenset = frozenset()):
        self.uses = uses
        self.namer = _Namer(reserved)
        self.lines: list[str] = []
        self.bound: set[Var] = set()
        self.free: dict[Expr, frozenset] = {}
        self.written = written  # buffers the statements store to (e.g. a row buffer)
        self.stable: dict[Expr, bool] = {}

    def free_vars(self, node: Expr) -> frozenset:
        return kir_rewrite.free_vars(node, self.free)

    def bind_invariant_reductions(self, stmts: Sequence[Stmt], indent: str):
        """Name, before a loop, the reductions inside it that do not depend on its variable:
        the emitter computes them there, once, and the text should say so.

        A reduction that reads a buffer the kernel writes (a row buffer filled inside the outer
        loop) is not hoisted by the emitter: it is computed where a statement uses it, after the
        stores before that statement, so it is printed there (by bind_shared) as well."""
        roots = [e for s in kir.walk_stmts(stmts) for e in kir.stmt_exprs(s)]
        for node in kir.toposort(roots):
            if (
                isinstance(node, Reduce)
                and self.namer.lookup(node) is None
                and self.free_vars(node) <= self.bound
                and kir_rewrite.is_stable(node, self.written, self.stable)
            ):
                self.bind_shared([node], indent)

    def bind_shared(self, roots: Sequence[Expr], indent: str):
        """Print `name: dtype = expr` lines for the nodes roots need that deserve a name:
        reductions, shared nodes, and nodes that would nest too deeply to read inline."""
        depth: dict[Expr, int] = {}
        # Named nodes print as their names: what lies only below them needs no walk (the
        # statements of one loop share a DAG, which is then walked once, not per statement).
        named = _Named(self.namer)
        for node in kir.toposort(
            [r for r in roots if r not in named], kir.region_children, skip=named
        ):
            depth[node] = 1 + max((depth.get(c, 0) for c in kir.region_children(node)), default=0)
            if isinstance(node, Reduce) or (
                isinstance(node, (Op, Load)) and (self.uses[node] > 1 or depth[node] > _MAX_DEPTH)
            ):
                text = format_expr(node, self.namer)
                name = self.namer.bind(node)
                self.lines.append(f"{indent}{name}: {kir.short_name(node.dtype)} = {text}")
                depth[node] = 0

    def body(self, stmts: Sequence[Stmt], indent: str):
        for stmt in stmts:
            before = dict(self.namer.scopes[-1])
            self.bind_shared(kir.stmt_exprs(stmt), indent)
            # The emitter keeps only stable values from one statement to the next; a value
            # that reads a written buffer is recomputed by each statement using it, so its
            # name is good for this statement only.
            transient = [
                node
                for node in self.namer.scopes[-1]
                if node not in before and not kir_rewrite.is_stable(node, self.written, self.stable)
            ]
            if isinstance(stmt, Store):
                index = format_expr(stmt.index, self.namer)
                value = format_expr(stmt.value, self.namer)
                self.lines.append(f"{indent}{stmt.buffer.name}[{index}] = {value}")
            elif isinstance(stmt, Loop):
                start = format_expr(stmt.start, self.namer)
                stop = format_expr(stmt.stop, self.namer)
                self.bind_invariant_reductions(stmt.body, indent)
                self.lines.append(f"{indent}for {stmt.var.name} in {start}..{stop}:")
                self.bound.add(stmt.var)
                self.nested(stmt.body, indent)
                self.bound.discard(stmt.var)
            elif isinstance(stmt, kir.MatMul):
                self.lines.append(f"{indent}{format_matmul(stmt, self.namer)}")
            elif isinstance(stmt, If):
                self.lines.append(f"{indent}if {format_expr(stmt.cond, self.namer)}:")
                self.nested(stmt.body, indent)
            for node in transient:
                del self.namer.scopes[-1][node]

    def nested(self, stmts: Sequence[Stmt], indent: str):
        self.namer.scopes.append({})
        self.body(stmts, indent + "  ")
        self.namer.scopes.pop()


class _Named:
    """The nodes a namer has a name for, as a container (a toposort `skip`)."""

    __slots__ = ("namer",)

    def __init__(self, namer: _Namer):
        self.namer = namer

    def __contains__(self, node) -> bool:
        return self.namer.lookup(node) is not None


def _use_counts(stmts: Sequence[Stmt]) -> Counter:
    """How many parents (or statements) refer to each node, outside reduction bodies."""
    uses: Counter = Counter()
    roots = [e for s in kir.walk_stmts(stmts) for e in kir.stmt_exprs(s)]
    uses.update(roots)
    for node in kir.toposort_region(roots):
        uses.update(kir.region_children(node))
    return uses


def format_stmts(stmts: Sequence[Stmt], indent: str = "") -> list[str]:
    """Lines of a statement list."""
    roots = [e for s in kir.walk_stmts(stmts) for e in kir.stmt_exprs(s)]
    reserved = frozenset(n.name for n in kir.toposort(roots) if isinstance(n, Var)) | {
        s.var.name for s in kir.walk_stmts(stmts) if isinstance(s, Loop)
    }
    written = frozenset(kir.stored_buffers(stmts))
    printer = _StmtPrinter(_use_counts(stmts), reserved, written)
    printer.body(stmts, indent)
    return printer.lines


def _signature(reads: Sequence, writes: Sequence) -> str:
    return f"({', '.join(map(str, reads))}) -> ({', '.join(map(str, writes))})"


def format_kernel(kernel: Kernel, indent: str = "") -> str:
    """`kernel name(inputs) -> (outputs):` and its indented body."""
    written = kir.stored_buffers(kernel.body)
    reads = [b for b in kernel.params if b not in written]
    writes = [b for b in kernel.params if b in written]
    head = f"{indent}kernel {kernel.name}{_signature(reads, writes)}:"
    return "\n".join([head] + format_stmts(kernel.body, indent + "  "))


def format_program(program: Program) -> str:
    """The program's signature, its temps, then each kernel in order."""
    lines = [f"program {program.name}{_signature(program.inputs, program.outputs)}:"]
    lines += [f"  temp {b}" for b in program.temps]
    lines += [format_kernel(k, "  ") for k in program.kernels]
    return "\n".join(lines)


def format_matmul(call, namer) -> str:
    """`c[off; m x n, ld] = gemm(a[off; ld]ᵀ, b[off; ld])`: one BLAS product."""

    def view(buffer, offset, stride, transposed) -> str:
        where = format_expr(offset, namer)
        return f"{buffer.name}[{where}; ld {stride}]" + ("ᵀ" if transposed else "")

    m, n, k = (format_expr(e, namer) for e in (call.m, call.n, call.k))
    return (
        f"{view(call.c, call.c_offset, call.ldc, False)} = gemm({m}x{n}x{k}: "
        f"{view(call.a, call.a_offset, call.lda, call.trans_a)} @ "
        f"{view(call.b, call.b_offset, call.ldb, call.trans_b)})"
    )

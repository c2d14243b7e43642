"""Kernel IR statements (stores, loops, conditions, BLAS products), kernels and programs.

Split from kir.py, which defines the buffers and expressions these statements hold and
re-exports every name here: build kernels through `kiln.compiler.kir`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from kiln.compiler.kir import (
    Buffer,
    Const,
    Expr,
    KirError,
    Load,
    Var,
    as_index,
    toposort,
)

# ---------------------------------------------------------------------------------------------
# Statements


class Stmt:
    """Base of statements."""

    __slots__ = ()

    def __repr__(self):
        from kiln.compiler.kir_print import format_stmts

        return "\n".join(format_stmts([self]))


class Store(Stmt):
    """buffer[index] = value. index is a flat int64 Expr, or a tuple multi-index."""

    __slots__ = ("buffer", "index", "value")

    def __init__(self, buffer: Buffer, index, value):
        if not isinstance(buffer, Buffer):
            raise KirError(f"Store needs a Buffer, got {type(buffer).__name__}")
        if isinstance(index, tuple):
            index = buffer.index(*index)
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "index", as_index(index))
        if not isinstance(value, Expr):
            value = Const(value, buffer.dtype)
        object.__setattr__(self, "value", value)

    def __setattr__(self, name, value):
        raise AttributeError("kernel IR statements are immutable")


class Loop(Stmt):
    """for var in [start, stop): body (step 1; start/stop are ints or int64 Exprs)."""

    __slots__ = ("var", "start", "stop", "body")

    def __init__(self, var: Var, start, stop, body: Sequence[Stmt]):
        if not isinstance(var, Var):
            raise KirError(f"loop variable must be a Var, got {var!r}")
        object.__setattr__(self, "var", var)
        object.__setattr__(self, "start", as_index(start))
        object.__setattr__(self, "stop", as_index(stop))
        object.__setattr__(self, "body", _statements(body))

    def __setattr__(self, name, value):
        raise AttributeError("kernel IR statements are immutable")


class If(Stmt):
    """if cond: body (cond is a bool Expr)."""

    __slots__ = ("cond", "body")

    def __init__(self, cond: Expr, body: Sequence[Stmt]):
        object.__setattr__(self, "cond", cond)
        object.__setattr__(self, "body", _statements(body))

    def __setattr__(self, name, value):
        raise AttributeError("kernel IR statements are immutable")


class MatMul(Stmt):
    """c = op(a) @ op(b) through BLAS: an m x n block of row-major c (rows ldc apart, starting
    at element c_offset) from op(a), m x k, and op(b), k x n. a holds op(a) row-major (rows lda
    apart, from a_offset) or, with trans_a, its transpose (k x m); likewise b. m, n, k and the
    offsets are int64 Exprs (a chunk of a split product has computed bounds); the strides are
    ints. float32 and float64 only: the call goes to the process's BLAS (sgemm, dgemm)."""

    __slots__ = (
        "c", "a", "b", "m", "n", "k", "trans_a", "trans_b", "lda", "ldb", "ldc",
        "a_offset", "b_offset", "c_offset",
    )  # fmt: skip

    def __init__(
        self, c, a, b, m, n, k, *, trans_a=False, trans_b=False, lda, ldb, ldc,
        a_offset=0, b_offset=0, c_offset=0,
    ):  # fmt: skip
        for buffer in (c, a, b):
            if not isinstance(buffer, Buffer):
                raise KirError(f"MatMul needs Buffers, got {type(buffer).__name__}")
        fields = dict(
            c=c, a=a, b=b, m=as_index(m), n=as_index(n), k=as_index(k),
            trans_a=bool(trans_a), trans_b=bool(trans_b),
            lda=int(lda), ldb=int(ldb), ldc=int(ldc),
            a_offset=as_index(a_offset), b_offset=as_index(b_offset),
            c_offset=as_index(c_offset),
        )  # fmt: skip
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError("kernel IR statements are immutable")

    @property
    def exprs(self) -> tuple[Expr, ...]:
        return (self.m, self.n, self.k, self.a_offset, self.b_offset, self.c_offset)

    def rebuilt(self, rewrite_expr: Callable[[Expr], Expr], buffers: dict | None = None):
        """This call with rewrite_expr applied to its expressions and buffers renamed."""
        buffers = buffers or {}
        m, n, k, a_offset, b_offset, c_offset = (rewrite_expr(e) for e in self.exprs)
        return MatMul(
            buffers.get(self.c, self.c), buffers.get(self.a, self.a), buffers.get(self.b, self.b),
            m, n, k, trans_a=self.trans_a, trans_b=self.trans_b,
            lda=self.lda, ldb=self.ldb, ldc=self.ldc,
            a_offset=a_offset, b_offset=b_offset, c_offset=c_offset,
        )  # fmt: skip


def _statements(body) -> tuple[Stmt, ...]:
    body = (body,) if isinstance(body, Stmt) else tuple(body)
    for stmt in body:
        if not isinstance(stmt, Stmt):
            raise KirError(f"expected a statement, got {stmt!r}")
    return body


def loop_nest(
    shape: Sequence[int], body: Callable[..., Sequence[Stmt] | Stmt], prefix: str = "i"
) -> list[Stmt]:
    """Loops over every index of `shape` (vars prefix0, prefix1, ...), innermost last.

    `body(*index_vars)` returns the innermost statements. A rank-0 shape gives the body alone.
    """
    index_vars = [Var(f"{prefix}{axis}") for axis in range(len(shape))]
    stmts = list(_statements(body(*index_vars)))
    for var, extent in reversed(list(zip(index_vars, shape))):
        stmts = [Loop(var, 0, extent, stmts)]
    return stmts


def walk_stmts(body: Sequence[Stmt]):
    """Every statement of a body, depth first, in program order."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (Loop, If)):
            yield from walk_stmts(stmt.body)


def stmt_exprs(stmt: Stmt) -> tuple[Expr, ...]:
    """The expressions a statement evaluates itself (not those of nested statements)."""
    if isinstance(stmt, Store):
        return (stmt.index, stmt.value)
    if isinstance(stmt, Loop):
        return (stmt.start, stmt.stop)
    if isinstance(stmt, If):
        return (stmt.cond,)
    if isinstance(stmt, MatMul):
        return stmt.exprs
    raise KirError(f"unknown statement {stmt!r}")


def buffers_of(body: Sequence[Stmt]) -> list[Buffer]:
    """Buffers a body loads or stores, in order of first appearance."""
    found: dict[Buffer, None] = {}
    roots = []
    for stmt in walk_stmts(body):
        if isinstance(stmt, Store):
            found.setdefault(stmt.buffer)
        elif isinstance(stmt, MatMul):
            for buffer in (stmt.c, stmt.a, stmt.b):
                found.setdefault(buffer)
        roots.extend(stmt_exprs(stmt))
    for node in toposort(roots):
        if isinstance(node, Load):
            found.setdefault(node.buffer)
    return list(found)


def stored_buffers(body: Sequence[Stmt]) -> list[Buffer]:
    """Buffers a body writes, in order of first store."""
    return list(
        dict.fromkeys(
            s.buffer if isinstance(s, Store) else s.c
            for s in walk_stmts(body)
            if isinstance(s, (Store, MatMul))
        )
    )


# ---------------------------------------------------------------------------------------------
# Kernels and programs


class Kernel:
    """A named loop-nest body over its parameter buffers (inferred from the body if omitted)."""

    def __init__(self, name: str, body: Sequence[Stmt], params: Sequence[Buffer] | None = None):
        if not name.isidentifier():
            raise KirError(f"kernel name {name!r} is not an identifier")
        self.name = name
        self.body = _statements(body)
        self.params = tuple(buffers_of(self.body) if params is None else params)

    def __str__(self) -> str:
        from kiln.compiler.kir_print import format_kernel

        return format_kernel(self)

    __repr__ = __str__


class Program:
    """Ordered buffers (inputs, outputs, temps) and kernels run in order: one native entry.

    The native entry takes one pointer per input and output buffer, in `arguments` order;
    temps are allocated inside it.
    """

    def __init__(self, name: str, buffers: Sequence[Buffer], kernels: Sequence[Kernel]):
        if not name.isidentifier():
            raise KirError(f"program name {name!r} is not an identifier")
        self.name = name
        self.buffers = tuple(buffers)
        self.kernels = tuple(kernels)

    def _with_role(self, role: str) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role == role)

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return self._with_role("input")

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return self._with_role("output")

    @property
    def temps(self) -> tuple[Buffer, ...]:
        return self._with_role("temp")

    @property
    def arguments(self) -> tuple[Buffer, ...]:
        """Buffers whose addresses the caller passes: inputs, then outputs."""
        return self.inputs + self.outputs

    def __str__(self) -> str:
        from kiln.compiler.kir_print import format_program

        return format_program(self)

    __repr__ = __str__


def verify_kernel(kernel: Kernel) -> None:
    """Check a kernel (dtypes, scoping, parameters, static index ranges); raise KirError."""
    from kiln.compiler.kir_verify import verify_kernel as _verify

    _verify(kernel)


def verify_program(program: Program) -> None:
    """Check a program: every kernel, buffer roles, names, and that temps are written first."""
    from kiln.compiler.kir_verify import verify_program as _verify

    _verify(program)

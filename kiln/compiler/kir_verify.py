"""The kernel IR checker: dtypes, variable scoping, parameter use, and static index ranges.

A kernel that passes never names a buffer it was not given, never writes an input, and never
indexes outside a buffer wherever interval arithmetic over loop bounds and clamps can tell.
"""

from __future__ import annotations

import contextlib
import math
from typing import Sequence

import numpy as np

from kiln.compiler import kir
from kiln.compiler.kir import (
    ArgValue,
    Buffer,
    Const,
    Expr,
    If,
    Kernel,
    KirError,
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

Interval = tuple[float, float]  # inclusive bounds; +-inf where nothing is known
_UNKNOWN: Interval = (-math.inf, math.inf)


def verify_kernel(kernel: Kernel) -> None:
    """Raise KirError naming the kernel and statement if the kernel is malformed."""
    _KernelChecker(kernel).run()


def verify_program(program: Program) -> None:
    """Check buffer names and roles, every kernel, and the order temps are written and read."""
    names = [b.name for b in program.buffers]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise KirError(f"program {program.name!r}: duplicate buffer names {duplicates}")
    kernel_names = [k.name for k in program.kernels]
    if len(set(kernel_names)) != len(kernel_names):
        raise KirError(f"program {program.name!r}: duplicate kernel names {kernel_names}")
    known = set(program.buffers)
    written: set[Buffer] = set()
    for kernel in program.kernels:
        verify_kernel(kernel)
        for param in kernel.params:
            if param not in known:
                raise KirError(
                    f"program {program.name!r}: kernel {kernel.name!r} uses buffer "
                    f"{param} which is not among the program's buffers"
                )
        stores = set(kir.stored_buffers(kernel.body))
        for param in kernel.params:
            if param.role == "temp" and param not in written and param not in stores:
                raise KirError(
                    f"program {program.name!r}: kernel {kernel.name!r} reads temp "
                    f"{param.name!r} before any kernel writes it"
                )
        written |= stores
    unwritten = [b.name for b in program.outputs if b not in written]
    if unwritten:
        raise KirError(f"program {program.name!r}: outputs {unwritten} are never written")


class _KernelChecker:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.params = set(kernel.params)
        self.checked_ops: set[int] = set()
        self.statement: Stmt | None = None  # the one being checked, described on failure
        self.live = True  # False inside loops that statically run zero times

    def fail(self, message: str):
        where = f" in `{_describe(self.statement)}`" if self.statement is not None else ""
        raise KirError(f"kernel {self.kernel.name!r}{where}: {message}")

    def run(self):
        names = [b.name for b in self.kernel.params]
        for param in self.kernel.params:
            if not isinstance(param, Buffer):
                self.fail(f"parameter {param!r} is not a Buffer")
            if names.count(param.name) > 1:
                self.fail(f"two parameters are named {param.name!r}")
        self.check_body(self.kernel.body, {})

    def check_body(self, body: Sequence[Stmt], env: dict[Var, Interval]):
        # Statements of one body share their expressions (one loop nest stores several
        # outputs of one fused DAG): each node is checked once per body, not per statement.
        known: dict[Expr, Interval] = {}
        for stmt in body:
            self.statement = stmt
            if isinstance(stmt, Store):
                self.check_store(stmt, env, known)
            elif isinstance(stmt, Loop):
                self.check_loop(stmt, env, known)
            elif isinstance(stmt, If):
                self.check_region([stmt.cond], env, known)
                if stmt.cond.dtype != kir.BOOL:
                    self.fail(f"if condition is {kir.short_name(stmt.cond.dtype)}, not bool")
                self.check_body(stmt.body, env)
            elif isinstance(stmt, kir.MatMul):
                self.check_matmul(stmt, env, known)
            else:
                self.fail(f"unknown statement {type(stmt).__name__}")

    def check_loop(self, loop: Loop, env: dict[Var, Interval], known: dict[Expr, Interval]):
        if loop.var in env:
            self.fail(f"loop variable {loop.var.name} shadows an enclosing loop's variable")
        bounds = self.check_region([loop.start, loop.stop], env, known)
        low, high = bounds[loop.start][0], bounds[loop.stop][1] - 1
        with self.liveness(low <= high):
            self.check_body(loop.body, {**env, loop.var: (low, high)})

    @contextlib.contextmanager
    def liveness(self, runs: bool):
        """Index ranges are only checked where code can run: an empty loop's body never does."""
        saved = self.live
        self.live = saved and runs
        yield
        self.live = saved

    def check_store(self, store: Store, env: dict[Var, Interval], known: dict[Expr, Interval]):
        buffer = store.buffer
        if buffer not in self.params:
            self.fail(f"stores to {buffer.name!r}, which is not a parameter of the kernel")
        if buffer.role == "input":
            self.fail(f"stores to input buffer {buffer.name!r}; inputs are read-only")
        if store.value.dtype != buffer.dtype:
            self.fail(
                f"stores a {kir.short_name(store.value.dtype)} value into "
                f"{kir.short_name(buffer.dtype)} buffer {buffer.name!r}; insert a cast"
            )
        intervals = self.check_region([store.index, store.value], env, known)
        self.check_range(buffer, intervals[store.index], "store to")

    def check_matmul(self, call, env: dict[Var, Interval], known: dict[Expr, Interval]):
        """A BLAS product: parameters, one float dtype, a written c, and (where the extents are
        known statically) every element it touches inside its buffer."""
        for buffer in (call.c, call.a, call.b):
            if buffer not in self.params:
                self.fail(f"a product uses {buffer.name!r}, which is not a parameter")
        if call.c.role == "input":
            self.fail(f"a product stores to input buffer {call.c.name!r}")
        dtype = call.c.dtype
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            self.fail(f"a BLAS product computes float32 or float64, not {kir.short_name(dtype)}")
        if call.a.dtype != dtype or call.b.dtype != dtype:
            self.fail("a BLAS product's operands and result must share one dtype")
        spans = self.check_region(list(call.exprs), env, known)
        m, n, k = (spans[e] for e in (call.m, call.n, call.k))
        if min(m[1], n[1], k[1]) < 0:  # (a chunk's extent stop - start is only known >= 0)
            self.fail("a product's extents must not be negative")
        a_rows, a_cols = (k, m) if call.trans_a else (m, k)
        b_rows, b_cols = (n, k) if call.trans_b else (k, n)
        for buffer, offset, rows, cols, stride in (
            (call.a, call.a_offset, a_rows, a_cols, call.lda),
            (call.b, call.b_offset, b_rows, b_cols, call.ldb),
            (call.c, call.c_offset, m, n, call.ldc),
        ):
            if stride < 1:
                self.fail(f"the row stride of {buffer.name!r} in a product must be positive")
            if spans[offset][0] < 0:
                self.fail(f"a product's offset into {buffer.name!r} may be negative")
            static = all(isinstance(e, kir.Const) for e in call.exprs)
            if static and rows[1] >= 1 and cols[1] >= 1:  # (chunk bounds are only known >= 0)
                high = spans[offset][1] + (rows[1] - 1) * stride + cols[1] - 1
                self.check_range(buffer, (spans[offset][0], high), "a product reaches")

    def check_range(self, buffer: Buffer, interval: Interval, verb: str):
        low, high = interval
        if not self.live or math.isinf(low) or math.isinf(high):
            return  # never runs, or not known statically
        if low < 0 or high > buffer.size - 1:
            self.fail(
                f"{verb} {buffer.name!r} may index outside it: the index ranges over "
                f"[{int(low)}, {int(high)}] but the buffer has {buffer.size} elements "
                f"(clamp data-dependent indices with kir.clamp)"
            )

    def check_region(
        self,
        roots: list[Expr],
        env: dict[Var, Interval],
        intervals: dict[Expr, Interval] | None = None,
    ) -> dict[Expr, Interval]:
        """Check every node reachable from roots without entering reduction bodies (each body is
        its own region, with the reduction variable bound); return the nodes' intervals.

        Nodes already in `intervals` (checked under the same env) are not checked again."""
        intervals = {} if intervals is None else intervals
        for node in kir.toposort(roots, kir.region_children, skip=intervals):
            if isinstance(node, Var):
                if node not in env:
                    self.fail(f"uses loop variable {node.name} outside any loop that binds it")
            elif isinstance(node, Load):
                if node.buffer not in self.params:
                    self.fail(f"loads {node.buffer.name!r}, which is not a parameter")
                self.check_range(node.buffer, intervals[node.index], "load from")
            elif isinstance(node, Op):
                self.check_op(node)
            elif isinstance(node, Reduce):
                self.check_reduce(node, env, intervals)
            elif not isinstance(node, (Const, ArgValue)):
                self.fail(f"unknown expression node {type(node).__name__}")
            intervals[node] = _interval(node, intervals, env)
        return intervals

    def check_op(self, node: Op):
        if id(node) in self.checked_ops:
            return
        try:
            kir.check_op(node.op, [a.dtype for a in node.args], node.dtype)
        except TypeError as error:
            self.fail(str(error))
        self.checked_ops.add(id(node))

    def check_reduce(self, node: Reduce, env: dict[Var, Interval], intervals: dict[Expr, Interval]):
        if node.var in env:
            self.fail(f"reduction variable {node.var.name} shadows an enclosing loop's variable")
        for bound in (node.start, node.stop):
            if bound.dtype != kir.INDEX:
                self.fail("reduction bounds must be int64")
        low, high = intervals[node.start][0], intervals[node.stop][1] - 1
        body = [node.value] + ([node.index] if node.index is not None else [])
        with self.liveness(low <= high):
            self.check_region(body, {**env, node.var: (low, high)})


def _describe(stmt: Stmt) -> str:
    from kiln.compiler.kir_print import format_stmts

    line = format_stmts([stmt])[0].strip()
    return line if len(line) <= 100 else line[:97] + "..."


# ---------------------------------------------------------------------------------------------
# Interval arithmetic over index expressions


def _dtype_range(dtype: np.dtype) -> Interval:
    family = kir.dtype_family(dtype)
    if family == "bool":
        return (0, 1)
    if family == "float":
        return _UNKNOWN
    info = np.iinfo(dtype)
    return (int(info.min), int(info.max))


def _mul(a: Interval, b: Interval) -> Interval:
    if a == (0, 0) or b == (0, 0):
        return (0, 0)
    if any(math.isinf(x) for x in a + b):
        return _UNKNOWN
    products = [x * y for x in a for y in b]
    return (min(products), max(products))


def _div_by_positive(a: Interval, c: int) -> Interval:
    def trunc(x):
        return x if math.isinf(x) else int(x / c) if abs(x) < 2**52 else x // c

    return (trunc(a[0]), trunc(a[1]))


def _rem_by_positive(a: Interval, c: int) -> Interval:
    if a[0] >= 0:
        return (0, min(a[1], c - 1)) if a[1] >= c else a
    return (-(c - 1), c - 1)


def _op_interval(node: Op, args: list[Interval]) -> Interval:
    O = ScalarOp
    rule = {
        O.ADD: lambda: (args[0][0] + args[1][0], args[0][1] + args[1][1]),
        O.SUB: lambda: (args[0][0] - args[1][1], args[0][1] - args[1][0]),
        O.NEG: lambda: (-args[0][1], -args[0][0]),
        O.MUL: lambda: _mul(args[0], args[1]),
        O.MIN: lambda: (min(args[0][0], args[1][0]), min(args[0][1], args[1][1])),
        O.MAX: lambda: (max(args[0][0], args[1][0]), max(args[0][1], args[1][1])),
        O.SELECT: lambda: (min(args[1][0], args[2][0]), max(args[1][1], args[2][1])),
    }.get(node.op)
    if rule is not None:
        return rule()
    divisor = node.args[1] if len(node.args) == 2 else None
    if isinstance(divisor, Const) and isinstance(divisor.value, int) and divisor.value > 0:
        if node.op is O.DIV:
            return _div_by_positive(args[0], divisor.value)
        if node.op is O.REM:
            return _rem_by_positive(args[0], divisor.value)
        if node.op is O.BITWISE_AND and divisor.value >= 0:
            return (0, divisor.value)
    if node.op is O.CAST:
        source = args[0]
        target = _dtype_range(node.dtype)
        if (
            kir.dtype_family(node.args[0].dtype) != "float"
            and target[0] <= source[0]
            and source[1] <= target[1]
        ):
            return source
        return target
    return _dtype_range(node.dtype)


def _interval(node: Expr, known: dict[Expr, Interval], env: dict[Var, Interval]) -> Interval:
    if isinstance(node, Const):
        if isinstance(node.value, float):
            return _UNKNOWN
        return (int(node.value), int(node.value))
    if isinstance(node, Var):
        return env.get(node, _UNKNOWN)
    if isinstance(node, Op):
        if kir.dtype_family(node.dtype) == "float":
            return _UNKNOWN
        return _op_interval(node, [known.get(a, _UNKNOWN) for a in node.args])
    return _dtype_range(node.dtype)

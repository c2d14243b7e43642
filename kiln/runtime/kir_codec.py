"""Kernel IR as bytes (a compact serialization of kir programs, for plans kept on disk) and
the fingerprint that keys compiled code by what a program computes.

Expressions are hash-consed (kir.py), so they cannot be rebuilt field by field: each node is
written as the constructor call that makes it, and reading the bytes back interns every node
again. The fingerprint is a digest of a canonical text of the program (nodes numbered in the
order first met, buffers by value): two programs with one fingerprint compute the same thing,
which is what lets the engine find a program's machine code (in memory or in the disk cache)
without emitting LLVM IR first. A node type this module does not know makes the fingerprint
None: callers then key by the emitted IR, which is slower but always correct.
"""

from __future__ import annotations

import copyreg
import io
import pickle

import numpy as np

from kiln.core import digest
from kiln.compiler import kir

__all__ = ["UnknownNode", "dtype_text", "dumps", "fingerprint", "fingerprints", "loads"]


class UnknownNode(pickle.PicklingError):
    """A kernel IR object of a type this codec does not serialize."""


def _make_reduce(kind, var, start, stop, value, init, index):
    if kind in kir.ARG_REDUCTIONS:
        return kir.Reduce(kind, var, start, stop, value, index=index, index_dtype=index.dtype)
    return kir.Reduce(kind, var, start, stop, value, init=init)


def _make_matmul(c, a, b, m, n, k, flags, strides, offsets):
    trans_a, trans_b = flags
    lda, ldb, ldc = strides
    a_offset, b_offset, c_offset = offsets
    return kir.MatMul(
        c, a, b, m, n, k, trans_a=trans_a, trans_b=trans_b, lda=lda, ldb=ldb, ldc=ldc,
        a_offset=a_offset, b_offset=b_offset, c_offset=c_offset,
    )  # fmt: skip


def _make_kernel(name, body, params):
    return kir.Kernel(name, body, params)


def _make_program(name, buffers, kernels):
    return kir.Program(name, buffers, kernels)


#: How each node type is written: the callable that rebuilds it and its arguments.
_REDUCERS = {
    kir.Const: lambda n: (kir.Const, (n.value, n.dtype)),
    kir.Var: lambda n: (kir.Var, (n.name,)),
    kir.Load: lambda n: (kir.Load, (n.buffer, n.index)),
    kir.Op: lambda n: (kir.Op, (n.op, n.args, n.dtype, n.nsw)),
    kir.Reduce: lambda n: (
        _make_reduce,
        (n.kind, n.var, n.start, n.stop, n.value, n.init, n.index),
    ),
    kir.ArgValue: lambda n: (kir.ArgValue, (n.reduce,)),
    kir.Store: lambda s: (kir.Store, (s.buffer, s.index, s.value)),
    kir.Loop: lambda s: (kir.Loop, (s.var, s.start, s.stop, s.body)),
    kir.If: lambda s: (kir.If, (s.cond, s.body)),
    kir.MatMul: lambda s: (
        _make_matmul,
        (
            s.c,
            s.a,
            s.b,
            s.m,
            s.n,
            s.k,
            (s.trans_a, s.trans_b),
            (s.lda, s.ldb, s.ldc),
            (s.a_offset, s.b_offset, s.c_offset),
        ),
    ),  # fmt: skip
    kir.Kernel: lambda k: (_make_kernel, (k.name, k.body, k.params)),
    kir.Program: lambda p: (_make_program, (p.name, p.buffers, p.kernels)),
}


class KirPickler(pickle.Pickler):
    """A Pickler that writes kernel IR nodes as constructor calls (see the module docstring)
    and refuses kir node types it does not know.

    Buffers and dtypes go to side tables keyed by value, so that the bytes do not depend on
    which of several equal objects a node happens to hold (nodes are interned by value, and
    may hold a buffer object of an earlier, equal program). `tables()` returns them."""

    dispatch_table = copyreg.dispatch_table.copy()
    dispatch_table.update(_REDUCERS)

    def __init__(self, file, protocol=pickle.HIGHEST_PROTOCOL):
        super().__init__(file, protocol=protocol)
        self._dtypes: dict = {}
        self._buffers: dict = {}

    def persistent_id(self, obj):
        kind = type(obj)
        if kind is kir.Buffer:
            found = self._buffers.get(obj)
            if found is None:
                dtype = self.persistent_id(obj.dtype)[1]
                found = self._buffers[obj] = (len(self._buffers), obj.name, dtype, obj.shape)
            return ("b", found[0])
        if isinstance(obj, np.dtype):
            found = self._dtypes.get(obj)
            if found is None:
                if np.dtype(obj.type) != obj:  # (not rebuilt from its type alone: by value)
                    return None
                found = self._dtypes[obj] = len(self._dtypes)
            return ("d", found)
        return None

    def reducer_override(self, obj):
        if isinstance(obj, (kir.Expr, kir.Stmt)) and type(obj) not in _REDUCERS:
            raise UnknownNode(f"kiln: no serialization for kernel IR {type(obj).__name__}")
        return NotImplemented

    def tables(self) -> tuple[list, list]:
        """(dtype type objects, buffers as (name, dtype number, shape, role)) in id order."""
        dtypes = [d.type for d in self._dtypes]
        buffers = [
            (name, dtype, shape, b.role) for b, (_, name, dtype, shape) in self._buffers.items()
        ]
        return dtypes, buffers


class KirUnpickler(pickle.Unpickler):
    """Reads what KirPickler wrote, given its tables."""

    def __init__(self, file, dtypes: list, buffers: list):
        super().__init__(file)
        self._dtypes = [np.dtype(t) for t in dtypes]
        self._buffers = [
            kir.Buffer(name, self._dtypes[dtype], shape, role)
            for name, dtype, shape, role in buffers
        ]

    def persistent_load(self, pid):
        kind, number = pid
        return self._buffers[number] if kind == "b" else self._dtypes[number]


def dumps(value) -> bytes:
    """Serialize kernel IR (or a structure holding it)."""
    out = io.BytesIO()
    pickler = KirPickler(out)
    pickler.dump(value)
    return pickle.dumps((pickler.tables(), out.getvalue()), protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes):
    """Rebuild what dumps serialized (nodes are interned again)."""
    (dtypes, buffers), payload = pickle.loads(data)
    return KirUnpickler(io.BytesIO(payload), dtypes, buffers).load()


def fingerprint(program: kir.Program) -> str | None:
    """A SHA-256 hex digest of what the program computes, None if it holds a node type this
    module does not know.

    Written from the structure alone (unlike the serialization, whose bytes follow which
    equal objects happen to be shared): expression nodes are numbered in the order first
    met (nodes are interned, so equal subexpressions are one node), buffers by value."""
    found = fingerprints(program)
    return None if found is None else found[0]


def fingerprints(program: kir.Program) -> tuple[str, str] | None:
    """(fingerprint, content fingerprint): the second leaves out the program's name, which
    only names its entry symbol, so that two programs that differ in nothing else (the same
    computation jitted under two function names) can share one machine code. None as for
    fingerprint."""
    try:
        text = _Describer().program(program)
    except UnknownNode:
        return None
    return digest.hexdigest(text), digest.hexdigest(text.partition("\n")[2])


class _Describer:
    """The canonical text of a program: one line per buffer, node and statement."""

    def __init__(self):
        self.lines: list[str] = []
        self.nodes: dict[int, int] = {}
        self.buffers: dict = {}  # by value: equal buffers are one
        self.buffer_ids: dict[int, int] = {}  # the same, by identity (hashing a buffer is slow)

    def buffer(self, buffer: kir.Buffer) -> int:
        number = self.buffer_ids.get(id(buffer))
        if number is not None:
            return number
        number = self.buffers.get(buffer)
        if number is None:
            number = self.buffers[buffer] = len(self.buffers)
            text = f"{buffer.name!r} {dtype_text(buffer.dtype)} {buffer.shape} {buffer.role}"
            self.lines.append(f"B{number} {text}")
        self.buffer_ids[id(buffer)] = number
        return number

    def expr(self, root: kir.Expr) -> int:
        nodes = self.nodes
        found = nodes.get(id(root))
        if found is not None:
            return found
        # Post-order without recursion: expression DAGs can be thousands of nodes deep.
        stack = [root]
        while stack:
            node = stack[-1]
            if id(node) in nodes:
                stack.pop()
                continue
            children = _children(node)
            pending = [c for c in children if id(c) not in nodes]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            nodes[id(node)] = number = len(nodes)
            self.lines.append(f"N{number} {self._node_text(node)}")
        return nodes[id(root)]

    def _node_text(self, node) -> str:
        kind = type(node)
        dtype = dtype_text(node.dtype)
        n = self.nodes
        if kind is kir.Const:
            return f"const {dtype} {node.value!r}"
        if kind is kir.Var:
            return f"var {node.name}"
        if kind is kir.Load:
            return f"load B{self.buffer(node.buffer)} {n[id(node.index)]}"
        if kind is kir.Op:
            args = " ".join(str(n[id(a)]) for a in node.args)
            return f"op {node.op.name} {dtype} {node.nsw} {args}"
        if kind is kir.Reduce:
            extra = [node.init, node.index]
            parts = [str(n[id(e)]) if e is not None else "-" for e in extra]
            bounds = f"{n[id(node.var)]} {n[id(node.start)]} {n[id(node.stop)]}"
            return f"reduce {node.kind.name} {dtype} {bounds} {n[id(node.value)]} {' '.join(parts)}"
        if kind is kir.ArgValue:
            return f"argvalue {n[id(node.reduce)]}"
        raise UnknownNode(f"kiln: no description for kernel IR {kind.__name__}")

    def stmts(self, body, depth: int) -> None:
        pad = " " * depth
        for stmt in body:
            kind = type(stmt)
            if kind is kir.Store:
                index, value = self.expr(stmt.index), self.expr(stmt.value)
                self.lines.append(f"{pad}store B{self.buffer(stmt.buffer)} {index} {value}")
            elif kind is kir.Loop:
                var, start, stop = self.expr(stmt.var), self.expr(stmt.start), self.expr(stmt.stop)
                self.lines.append(f"{pad}loop {var} {start} {stop}")
                self.stmts(stmt.body, depth + 1)
            elif kind is kir.If:
                self.lines.append(f"{pad}if {self.expr(stmt.cond)}")
                self.stmts(stmt.body, depth + 1)
            elif kind is kir.MatMul:
                buffers = " ".join(f"B{self.buffer(b)}" for b in (stmt.c, stmt.a, stmt.b))
                exprs = " ".join(str(self.expr(e)) for e in stmt.exprs)
                flags = f"{stmt.trans_a} {stmt.trans_b} {stmt.lda} {stmt.ldb} {stmt.ldc}"
                self.lines.append(f"{pad}matmul {buffers} {exprs} {flags}")
            else:
                raise UnknownNode(f"kiln: no description for kernel IR {kind.__name__}")
            self.lines.append(f"{pad}end")

    def program(self, program: kir.Program) -> str:
        self.lines.append(f"program {program.name}")
        for buffer in program.buffers:
            self.lines.append(f"arg B{self.buffer(buffer)}")
        for kernel in program.kernels:
            params = " ".join(f"B{self.buffer(b)}" for b in kernel.params)
            self.lines.append(f"kernel {kernel.name} {params}")
            self.stmts(kernel.body, 1)
        return "\n".join(self.lines)


#: id(dtype) -> (dtype, its text): NumPy computes a dtype's name in Python, each time.
_DTYPE_TEXTS: dict = {}


def dtype_text(dtype: np.dtype) -> str:
    """A dtype's name and its array-interface string (computed once per dtype object)."""
    found = _DTYPE_TEXTS.get(id(dtype))
    if found is None:
        # (the dtype is kept in the table, so that its id is never reused for another)
        found = _DTYPE_TEXTS[id(dtype)] = (dtype, f"{dtype.name}/{dtype.str}")
    return found[1]


def _children(node) -> tuple:
    kind = type(node)
    if kind is kir.Const or kind is kir.Var:
        return ()
    if kind is kir.Load:
        return (node.index,)
    if kind is kir.Op:
        return node.args
    if kind is kir.Reduce:
        extra = tuple(e for e in (node.init, node.index) if e is not None)
        return (node.var, node.start, node.stop, node.value) + extra
    if kind is kir.ArgValue:
        return (node.reduce,)
    raise UnknownNode(f"kiln: no description for kernel IR {kind.__name__}")

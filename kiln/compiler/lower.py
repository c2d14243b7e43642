"""jaxpr -> kernel IR expressions: the lowering rules' interface and the expression builder.

A lowering rule says what one element of its equation's output is, given the output's
multi-index: `rule(ctx, index, *operands, **params) -> kir.Expr`, where `index` is a tuple of
int64 index expressions and each operand is an `Operand` the rule reads elements of at index
expressions it computes. Reshape, transpose, slice, pad, broadcast and gather are therefore
nothing but index arithmetic, and reading a fused producer inlines the producer's own
expression at that index: a chain of such equations becomes one scalar expression inside one
loop nest (see fusion.py for which values get stored to memory instead).

The rules live in compiler/lowering_*.py and register themselves in
`kiln.core.rules.lowering_rules`; keeping them in the compiler means kiln/primitives never
imports the compiler. Importing this module registers them all.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import numpy as np

from kiln.codegen.llvm import scalar_ops
from kiln.compiler import kir
from kiln.compiler.kir import Buffer, Const, Expr, KirError, Load, Op, Reduce, Var
from kiln.core import rules
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import DropVar, JaxprEqn, Literal

__all__ = ["NotLowerable", "Operand", "RuleContext", "ExprBuilder", "register_lowering",
           "lowerable", "zero", "to_index"]


class NotLowerable(NotImplementedError):
    """A rule cannot lower this equation (dtype, params, missing scalar op): the equation runs
    through its reference impl instead."""


Rule = Callable[..., Expr]


def register_lowering(*prims) -> Callable[[Rule], Rule]:
    """Decorator: `@register_lowering(exp_p)` stores the function as exp_p's lowering rule."""
    def decorate(rule: Rule) -> Rule:
        for prim in prims:
            rules.lowering_rules[prim] = rule
        return rule
    return decorate


def zero(dtype) -> Const:
    """The zero (False) of a dtype."""
    dtype = np.dtype(dtype)
    return Const(False if dtype == kir.BOOL else 0, dtype)


_UINT64 = np.dtype(np.uint64)


def to_index(value: Expr) -> Expr:
    """An integer element (a start index, a gather index) as an int64 index expression.

    uint64 values past 2**62 saturate there rather than wrapping negative, so an index that
    huge still counts as too large (clamped to the top, or out of bounds)."""
    if value.dtype == _UINT64:
        limit = Const(1 << 62, _UINT64)
        value = kir.select(kir.op(kir.ScalarOp.GT, value, limit), limit, value)
    return kir.as_index(value)


class RuleContext:
    """What a rule knows besides its operands: the equation and fresh variable names."""

    __slots__ = ("eqn", "builder")

    def __init__(self, eqn: JaxprEqn, builder: "ExprBuilder"):
        self.eqn = eqn
        self.builder = builder

    @property
    def out_aval(self) -> ShapedArray:
        return self.eqn.outvars[0].aval

    def fresh(self, prefix: str = "k") -> Var:
        """A loop variable no other reduction of this build uses."""
        return self.builder.fresh_var(prefix)


class Operand:
    """An equation input as a rule sees it: its type, and its elements at any index."""

    __slots__ = ("builder", "atom", "aval")

    def __init__(self, builder: "ExprBuilder", atom):
        self.builder = builder
        self.atom = atom
        self.aval = atom.aval

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return len(self.aval.shape)

    @property
    def size(self) -> int:
        return math.prod(self.aval.shape)

    def read(self, index: Sequence = ()) -> Expr:
        """The element at a multi-index (ints or int64 expressions, one per dimension).

        Rules must keep indices in bounds (clamp data-dependent ones); reading a rank-0
        operand takes the empty index."""
        return self.builder.read(self.atom, index)


class ExprBuilder:
    """Builds the expression of any value of a segment at any index, memoized.

    Values in `loaded` are read from their buffers; rank-0 `scalars` (small constants) are
    inlined as literals; every other value is computed by its producer's rule (fused). The
    memo is keyed by (value, index): indices are hash-consed, so a value read at the same
    index twice is one node, which the emitter computes once.

    `nodes_of[v]` collects every node that stands for v (one per distinct index it was read
    at): fusion.py counts how often those nodes run to decide what to materialize.
    """

    def __init__(self, producers: dict, loaded: dict, scalars: dict | None = None):
        self.producers = producers
        self.loaded = loaded
        self.scalars = scalars or {}
        self.memo: dict[tuple, Expr] = {}
        self.nodes_of: dict = {}
        self._fresh = 0

    def fresh_var(self, prefix: str) -> Var:
        var = Var(f"{prefix}{self._fresh}")
        self._fresh += 1
        return var

    def read(self, atom, index: Sequence) -> Expr:
        aval = atom.aval
        if len(index) != len(aval.shape):
            raise KirError(f"read of a rank-{len(aval.shape)} value with {len(index)} indices")
        if type(atom) is Literal:
            return Const(np.asarray(atom.val).item(), aval.dtype)
        if 0 in aval.shape:
            # Nothing is ever read from an empty array, but selects evaluate both sides, so a
            # read must still be something that cannot touch memory.
            return zero(aval.dtype)
        if atom in self.scalars:
            return Const(self.scalars[atom], aval.dtype)
        index = tuple(kir.as_index(i) for i in index)
        key = (atom, index)
        node = self.memo.get(key)
        if node is None:
            buffer = self.loaded.get(atom)
            if buffer is not None:
                node = Load(buffer, flat_index(aval.shape, index))
            else:
                node = self.lower(atom, index)
            self.memo[key] = node
        return node

    def expression(self, var, index: Sequence) -> Expr:
        """var's own expression at index, even when var is loaded elsewhere (the store that
        writes var's buffer needs what is stored, not a load of it)."""
        if not self.is_loaded(var):
            return self.read(var, index)
        index = tuple(kir.as_index(i) for i in index)
        key = ("own", var, index)
        node = self.memo.get(key)
        if node is None:
            node = self.memo[key] = self.lower(var, index)
        return node

    def is_loaded(self, var) -> bool:
        """Whether reads of var load a buffer (rather than inline its expression)."""
        return var in self.loaded

    def lower(self, var, index: tuple) -> Expr:
        eqn = self.producers.get(var)
        if eqn is None:
            raise KirError(f"no producer or buffer for a value of type {var.aval}")
        rule = rules.lowering_rules.get(eqn.primitive)
        if rule is None:
            raise NotLowerable(f"{eqn.primitive} has no lowering rule")
        node = rule(RuleContext(eqn, self), index,
                    *[Operand(self, a) for a in eqn.invars], **eqn.params)
        if node.dtype != var.aval.dtype:
            raise KirError(f"lowering of {eqn.primitive} produced a {kir.short_name(node.dtype)} "
                           f"value for a {var.aval.dtype} result")
        self.nodes_of.setdefault(var, set()).add(node)
        return node


def flat_index(shape: Sequence[int], index: Sequence[Expr]) -> Expr:
    """kir.flat_index, except that runs of components that are exactly the unravelling of one
    flat index over those dimensions (what a reshape reads) fold back into it: a flatten
    followed by a load reads x[f], not x[f / 4 * 4 + f % 4]."""
    index = list(index)
    terms, d = [], 0
    strides = kir.row_major_strides(shape)
    while d < len(shape):
        folded = _unravelled_run(shape, index, d)
        if folded is None:
            terms.append((index[d], strides[d]))
            d += 1
        else:
            flat, end = folded
            terms.append((flat, strides[end - 1]))
            d = end
    return kir.affine(terms)


def _unravelled_run(shape, index, start):
    """(f, end) when index[start:end] (end - start >= 2) is kir.unravel(f, shape[start:end])."""
    head = index[start]
    if not (isinstance(head, Op) and head.op is kir.ScalarOp.DIV and head.dtype == kir.INDEX):
        return None
    flat = head.args[0]
    for end in range(len(shape), start + 1, -1):
        expected = kir.unravel(flat, shape[start:end])
        if all(e is c for e, c in zip(expected, index[start:end])):
            return flat, end
    return None


# ---------------------------------------------------------------------------------------------
# Which equations can be lowered

_lowerable_cache: dict = {}


def _supported_aval(aval) -> bool:
    return isinstance(aval, ShapedArray) and aval.dtype in kir.SUPPORTED_DTYPES


def lowerable(eqn: JaxprEqn) -> bool:
    """Whether eqn can run natively: a lowering rule exists, every type is one the backend
    compiles, and lowering it at a symbolic index succeeds using only scalar ops the LLVM
    backend supports for those dtypes (a trial build, cached per primitive/params/types)."""
    rule = rules.lowering_rules.get(eqn.primitive)
    if rule is None or eqn.primitive.multiple_results or len(eqn.outvars) != 1:
        return False
    if eqn.effects:
        return False
    if not all(_supported_aval(a.aval) for a in list(eqn.invars) + list(eqn.outvars)):
        return False
    try:
        key = (eqn.primitive, tuple(sorted(eqn.params.items())),
               tuple((type(a) is Literal, a.aval.shape, a.aval.dtype,
                      np.asarray(a.val).item() if type(a) is Literal else None)
                      for a in eqn.invars),
               eqn.outvars[0].aval.shape, eqn.outvars[0].aval.dtype)
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _lowerable_cache:
        return _lowerable_cache[key]
    result = _trial_lowering(eqn)
    if key is not None:
        if len(_lowerable_cache) > 4096:
            _lowerable_cache.clear()
        _lowerable_cache[key] = result
    return result


def _trial_lowering(eqn: JaxprEqn) -> bool:
    loaded = {}
    for n, atom in enumerate(eqn.invars):
        if type(atom) is not Literal:
            loaded[atom] = Buffer(f"x{n}", atom.aval.dtype, atom.aval.shape)
    out = eqn.outvars[0]
    if isinstance(out, DropVar):
        out = _Placeholder(out.aval)
    builder = ExprBuilder({out: eqn}, loaded)
    index = tuple(Var(f"i{d}") for d in range(len(out.aval.shape)))
    try:
        node = builder.lower(out, index)
        return all(_op_supported(n) for n in kir.toposort([node]))
    except (NotLowerable, KirError, TypeError, ValueError, NotImplementedError):
        return False


class _Placeholder:
    """Stands in for a dropped output during a trial lowering."""
    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval


def _op_supported(node: Expr) -> bool:
    if isinstance(node, Op):
        return scalar_ops.op_supported(node.op, node.args[-1].dtype)
    return True


def all_nodes(roots: Iterable[Expr]) -> list[Expr]:
    """Every node below roots, reduction bodies included, children first."""
    return kir.toposort(list(roots))


def is_expensive(node: Expr) -> bool:
    """Nodes worth computing only once per element: reductions and transcendental math."""
    if isinstance(node, (Reduce, kir.ArgValue)):
        return True
    return isinstance(node, Op) and node.op in kir.OpGroup.TRANSCENDENTAL


# Importing the rule modules registers them (they import this module for the interface).
from kiln.compiler import (lowering_elementwise, lowering_indexing,  # noqa: E402,F401
                           lowering_reductions, lowering_shape)

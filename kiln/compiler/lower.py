"""jaxpr -> kernel IR expressions: the lowering rules' interface and the expression builder.

A lowering rule says what one element of its equation's output is, given the output's
multi-index: `rule(ctx, index, *operands, **params) -> kir.Expr`, where `index` is a tuple of
int64 index expressions and each operand is an `Operand` the rule reads elements of at index
expressions it computes. Reshape, transpose, slice, pad, broadcast and gather are therefore
nothing but index arithmetic, and reading a fused producer inlines the producer's own
expression at that index: a chain of such equations becomes one scalar expression inside one
loop nest (see fusion.py for which values get stored to memory instead).

An equation with several results (threefry2x32's two hashed words) has a rule that returns a
tuple of expressions, one per output, built at the same index: kernel-IR nodes are
hash-consed, so the work the outputs share (the whole hash) is one set of nodes, and a loop
nest storing several of them, or a consumer reading several of them at one index, computes
it once. Every output of such an equation has the same shape.

The rules live in compiler/lowering_*.py and register themselves with `register_lowering`
in `lowering_rules`, keyed by primitive; keeping them in the compiler means kiln/primitives
never imports the compiler. Importing this module registers them all.
"""

from __future__ import annotations

import math
import sys
from typing import Callable, Iterable, Sequence

import numpy as np

from kiln.codegen.llvm import scalar_ops
from kiln.compiler import kir
from kiln.compiler.kir import Buffer, Const, Expr, KirError, Load, Op, Reduce, ScalarOp, Var
from kiln.core import rules
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import DropVar, JaxprEqn, Literal

__all__ = [
    "NotLowerable",
    "Operand",
    "RuleContext",
    "ExprBuilder",
    "register_lowering",
    "lowerable",
    "zero",
    "to_index",
]


class NotLowerable(NotImplementedError):
    """A rule cannot lower this equation (dtype, params, missing scalar op): the equation runs
    through its reference impl instead."""


Rule = Callable[..., "Expr | tuple[Expr, ...]"]


#: prim -> f(ctx, index, *operands) -> Expr (a tuple of Exprs, one per output, for a primitive
#: with multiple results), the kernel-IR lowering of one element.
lowering_rules = rules.RuleTable("lowering")


def register_lowering(*prims) -> Callable[[Rule], Rule]:
    """Decorator: `@register_lowering(exp_p)` stores the function as exp_p's lowering rule."""
    return lowering_rules.register(*prims)


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


#: How many ExprBuilder._resolve calls may be open at once before a rule's reads of operands
#: not built yet get stand-ins instead of nested builds; fewer where the caller's Python stack
#: leaves less room (_direct_depth).
DIRECT_DEPTH = 24
#: Python frames one nested build takes (read, _resolve, the rule and its helpers; ~8 seen),
#: and the frames kept free below the recursion limit for everything else.
_FRAMES_PER_LEVEL = 12
_SPARE_FRAMES = 120


def _direct_depth() -> int:
    """DIRECT_DEPTH, or less where the stack so far leaves too little room below the
    recursion limit for it (a caller that is deep in recursion still compiles)."""
    frames, frame = 0, sys._getframe()
    while frame is not None:
        frames += 1
        frame = frame.f_back
    room = sys.getrecursionlimit() - frames - _SPARE_FRAMES
    return max(0, min(DIRECT_DEPTH, room // _FRAMES_PER_LEVEL))


class ExprBuilder:
    """Builds the expression of any value of a segment at any index, memoized.

    Values in `loaded` are read from their buffers; rank-0 `scalars` (small constants) are
    inlined as literals; every other value is computed by its producer's rule (fused). The
    memo is keyed by (value, index): indices are hash-consed, so a value read at the same
    index twice is one node, which the emitter computes once.

    Building recurses through the program only DIRECT_DEPTH levels deep: there, a rule that
    reads an operand not built yet gets a stand-in node, the missing (operand, index) pairs go
    on an explicit stack, and the rule runs again once they are built (once to learn what it
    reads, once to build). A chain thousands of equations deep therefore needs no deeper
    Python stack than DIRECT_DEPTH equations, while in the common shallow case each rule runs
    once: operands are built by nested calls as the rule reads them.

    `nodes_of[v]` collects every node that stands for v (one per distinct index it was read
    at): fusion.py counts how often those nodes run to decide what to materialize.

    `inherit(other, changed)` lets a builder take nodes another one built for the same
    segment (fusion.py's last build, after the one that settled what to store): a node is
    taken when no value its expression reads differs in how it is read (`changed`: the
    values now read from row buffers), so it is the very node this builder would build.
    """

    def __init__(self, producers: dict, loaded: dict, scalars: dict | None = None):
        self.producers = producers
        self.loaded = loaded
        self.scalars = scalars or {}
        self.memo: dict[tuple, Expr] = {}
        self.nodes_of: dict = {}
        self._fresh = 0
        # While a rule runs: the reads it could not satisfy, and the stand-ins it was given.
        self._attempt: _Attempt | None = None
        self._stand_ins: dict[tuple, Load] = {}
        self._tainted: dict[Expr, bool] = {}
        # Loop variables a rule asked for at a given (value, index), so a rerun of the rule
        # builds the same reduction (and so reads its operands at the indices just built).
        self._fresh_of: dict[tuple, list[Var]] = {}
        self._supported: dict[int, object] = {}  # equations whose types were checked
        self._depth = 0  # _resolve calls in progress (nested: a rule reading its operands)
        self._max_depth: int | None = None  # (_direct_depth, once a nested build is asked)
        # Another builder's memo (see inherit), the values read differently here, and
        # whether each value's expression reads none of them.
        self._inherited: dict | None = None
        self._inherited_loaded: dict = {}
        self._changed: frozenset = frozenset()
        self._unchanged: dict = {}

    def inherit(self, other: "ExprBuilder", changed) -> None:
        """Take, on a miss, the node `other` built for the same (value, index) when none of
        the values that node's expression reads is in `changed` (and so is read here as
        there: the same buffer, the same producer); other's builds must have loaded every
        value this one loads, except those in changed. Fresh variables continue from
        other's, so that a reduction built here never reuses the variable of one taken
        from it. nodes_of records the nodes taken for the values read, not for what they
        read in turn (the budget check, which reads it, runs before such a build)."""
        self._inherited = other.memo
        self._inherited_loaded = other.loaded
        self._changed = frozenset(changed)
        self._fresh = max(self._fresh, other._fresh)

    def _taken(self, key: tuple, start) -> Expr | None:
        """The inherited node of key, if it may be taken (see inherit): `start` holds the
        values whose expressions key's node reads."""
        node = self._inherited.get(key)
        if node is None or not all(self._reads_unchanged(v) for v in start):
            return None
        self.memo[key] = node
        self.nodes_of.setdefault(key[-2], set()).add(node)
        return node

    def _reads_unchanged(self, atom) -> bool:
        """Whether atom, and every value its expression reads through fused producers, is
        outside `changed` and read as in the builder inherited from: loaded from the same
        buffer there and here, or fused in both."""
        found = self._unchanged.get(atom)
        if found is not None:
            return found
        changed, loaded, there = self._changed, self.loaded, self._inherited_loaded
        found, stack, seen = True, [atom], {id(atom)}
        while stack:
            value = stack.pop()
            buffer = loaded.get(value)
            if value in changed or buffer != there.get(value):
                found = False  # (read otherwise here: from a row, another buffer, fused)
                break
            if buffer is not None or value in self.scalars:
                continue
            eqn = self.producers.get(value)
            for operand in eqn.invars if eqn is not None else ():
                if type(operand) is not Literal and id(operand) not in seen:
                    seen.add(id(operand))
                    stack.append(operand)
        self._unchanged[atom] = found
        return found

    def fresh_var(self, prefix: str) -> Var:
        attempt = self._attempt
        if attempt is None:
            return self._new_var(prefix)
        made = self._fresh_of.setdefault((attempt.key, prefix), [])
        count = attempt.fresh.get(prefix, 0)
        attempt.fresh[prefix] = count + 1
        if count == len(made):
            made.append(self._new_var(prefix))
        return made[count]

    def _new_var(self, prefix: str) -> Var:
        var = Var(f"{prefix}{self._fresh}")
        self._fresh += 1
        return var

    def read(self, atom, index: Sequence) -> Expr:
        aval = atom.aval
        constant = self.constant_read(atom, index)
        if constant is not None:
            return constant
        index = tuple(map(kir.as_index, index))
        key = (atom, index)
        node = self.memo.get(key)
        if node is not None:
            return node
        buffer = self.loaded.get(atom)
        if buffer is not None:
            node = self.memo[key] = Load(buffer, flat_index(aval.shape, index))
            return node
        if self._inherited is not None:
            node = self._taken(key, (atom,))
            if node is not None:
                return node
        if self._attempt is not None:
            if self._max_depth is None:
                self._max_depth = _direct_depth()
            if self._depth >= self._max_depth or (
                self._tainted and any(self._is_tainted(i) for i in index)
            ):
                return self._stand_in(key)
        return self._resolve(key)

    def constant_read(self, atom, index: Sequence) -> Const | None:
        """The value of a read that needs no memory and no rule (a literal, a rank-0 constant,
        an element of an empty array); None for every other read."""
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
        return None

    def expression(self, var, index: Sequence) -> Expr:
        """var's own expression at index, even when var is loaded elsewhere (the store that
        writes var's buffer needs what is stored, not a load of it)."""
        if not self.is_loaded(var):
            return self.read(var, index)
        index = tuple(kir.as_index(i) for i in index)
        key = ("own", var, index)
        node = self.memo.get(key)
        if node is None and self._inherited is not None and var not in self._changed:
            eqn = self.producers.get(var)
            operands = [a for a in eqn.invars if type(a) is not Literal] if eqn else None
            if operands is not None:
                node = self._taken(key, operands)
        if node is None:
            node = self._resolve(key)
        return node

    def is_loaded(self, var) -> bool:
        """Whether reads of var load a buffer (rather than inline its expression)."""
        return var in self.loaded

    def _resolve(self, key: tuple) -> Expr:
        """Build the node of key ((value, index), or ("own", value, index)) and everything it
        needs, depth first, with an explicit stack.

        A rule that reads an operand not built yet builds it then and there, through a
        nested call, while fewer than DIRECT_DEPTH calls are open (_direct_depth); deeper,
        the read gets a stand-in and the rule runs again once its operands are built (see
        the class docstring). Most rules therefore run once."""
        self._depth += 1
        try:
            return self._resolve_with_stack(key)
        finally:
            self._depth -= 1

    def _resolve_with_stack(self, key: tuple) -> Expr:
        stack = [key]
        while stack:
            top = stack[-1]
            if top in self.memo:
                stack.pop()
                continue
            var, index = top[-2:]
            attempt = _Attempt(top)
            outer, self._attempt = self._attempt, attempt
            try:
                node = self.lower(var, index)
            finally:
                self._attempt = outer
            if attempt.stand_ins:
                if not attempt.missing:
                    raise KirError(f"lowering {var.aval} waits on reads it cannot name")
                stack.extend(attempt.missing)
                continue
            self.memo[top] = node
            self.nodes_of.setdefault(var, set()).add(node)
            stack.pop()
        return self.memo[key]

    def _stand_in(self, key: tuple) -> Expr:
        """A placeholder for a read the running rule must wait for. The read is queued unless
        its index itself comes from a placeholder (a gather's index read from a value not
        built yet): that read is only known once the rule reruns."""
        atom, index = key
        attempt = self._attempt
        attempt.stand_ins = True
        if not any(self._is_tainted(i) for i in index):
            attempt.missing.append(key)
        node = self._stand_ins.get(key)
        if node is None:
            placeholder = Buffer("pending", atom.aval.dtype, (1 << 62,))
            node = Load(placeholder, Const(len(self._stand_ins), kir.INDEX))
            self._stand_ins[key] = node
            self._tainted[node] = True
        return node

    def _is_tainted(self, node: Expr) -> bool:
        tainted = self._tainted
        if node in tainted:
            return tainted[node]
        for item in kir.toposort([node], skip=tainted):
            tainted[item] = any(tainted[child] for child in item.children())
        return tainted[node]

    def lower(self, var, index: tuple) -> Expr:
        """var's producer's rule at index (operands read through this builder); for an
        equation with several results, var's own entry of the rule's tuple."""
        eqn = self.producers.get(var)
        if eqn is None:
            raise KirError(f"no producer or buffer for a value of type {var.aval}")
        rule = lowering_rules.get(eqn.primitive)
        if rule is None:
            raise NotLowerable(f"{eqn.primitive} has no lowering rule")
        if id(eqn) not in self._supported:
            if not all(_supported_aval(a.aval) for a in (*eqn.invars, *eqn.outvars)):
                raise NotLowerable(f"{eqn.primitive} has an operand of a dtype the backend lacks")
            self._supported[id(eqn)] = eqn  # (kept: an id is only unique while it lives)
        node = rule(
            RuleContext(eqn, self), index, *[Operand(self, a) for a in eqn.invars], **eqn.params
        )
        if eqn.primitive.multiple_results:
            node = _result_of(eqn, var, node)
        if node.dtype != var.aval.dtype:
            raise KirError(
                f"lowering of {eqn.primitive} produced a {kir.short_name(node.dtype)} "
                f"value for a {var.aval.dtype} result"
            )
        return node


def _result_of(eqn: JaxprEqn, var, nodes: tuple) -> Expr:
    """var's expression among the ones a multiple-result rule returned (one per output)."""
    if not isinstance(nodes, tuple) or len(nodes) != len(eqn.outvars):
        count = len(nodes) if isinstance(nodes, tuple) else "not a tuple of"
        raise KirError(
            f"lowering of {eqn.primitive} produced {count} values for {len(eqn.outvars)} results"
        )
    position = next(n for n, out in enumerate(eqn.outvars) if out is var)
    return nodes[position]


class _Attempt:
    """One run of a rule inside ExprBuilder._resolve."""

    __slots__ = ("key", "missing", "stand_ins", "fresh")

    def __init__(self, key: tuple):
        self.key = key
        self.missing: list[tuple] = []
        self.stand_ins = False
        self.fresh: dict[str, int] = {}


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

#: prim -> f(eqn) -> bool: equations that run natively as calls out of generated code (BLAS
#: products, compiler/lowering_linalg.py) rather than as element expressions; fusion.py
#: stores their results and gives each call a kernel of its own.
kernel_calls: dict = {}


def is_kernel_call(eqn: JaxprEqn) -> bool:
    call = kernel_calls.get(eqn.primitive)
    return call is not None and call(eqn)


def _supported_aval(aval) -> bool:
    return isinstance(aval, ShapedArray) and aval.dtype in kir.SUPPORTED_DTYPES


def lowerable(eqn: JaxprEqn) -> bool:
    """Whether eqn can run natively: a lowering rule exists, every type is one the backend
    compiles, and lowering it at a symbolic index succeeds using only scalar ops the LLVM
    backend supports for those dtypes (a trial build, cached per primitive/params/types).
    An equation with several results qualifies when they all have one shape (they are
    computed in one loop nest)."""
    rule = lowering_rules.get(eqn.primitive)
    if rule is None or not eqn.outvars:
        return False
    if len({out.aval.shape for out in eqn.outvars}) != 1:
        return False
    if len(eqn.outvars) != 1 and not eqn.primitive.multiple_results:
        return False
    if eqn.effects:
        return False
    if not all(_supported_aval(a.aval) for a in list(eqn.invars) + list(eqn.outvars)):
        return False
    if is_kernel_call(eqn):
        return True
    return _trial(eqn, _trial_key(eqn))[0]


def transcendental_count(eqn: JaxprEqn) -> int:
    """How many transcendental ops one output element of a lowerable equation computes
    (its operands' own work aside): what makes one equation cost more than another."""
    return _trial(eqn, _trial_key(eqn))[1]


def _trial_key(eqn: JaxprEqn):
    try:
        key = (
            eqn.primitive,
            tuple(sorted(eqn.params.items())),
            tuple(
                (
                    type(a) is Literal,
                    a.aval.shape,
                    a.aval.dtype,
                    np.asarray(a.val).item() if type(a) is Literal else None,
                )
                for a in eqn.invars
            ),
            tuple((out.aval.shape, out.aval.dtype) for out in eqn.outvars),
        )
        hash(key)
    except TypeError:
        return None
    return key


def _trial(eqn: JaxprEqn, key) -> tuple[bool, int]:
    """(lowerable, transcendental count) of eqn, cached by key (None: not cacheable)."""
    if key is not None and key in _lowerable_cache:
        return _lowerable_cache[key]
    result = _trial_lowering(eqn)
    if key is not None:
        if len(_lowerable_cache) > 4096:
            _lowerable_cache.clear()
        _lowerable_cache[key] = result
    return result


def one_op(prim) -> ScalarOp | None:
    """The ScalarOp of prim's lowering rule when the rule is that op applied to its operands,
    each read at the output index (rank-0 ones at ()): the rule says so in its `scalar_op`
    attribute (lowering_elementwise's one-op rules). lowerable's trial of such an equation
    is answered from the op's tables (_one_op_trial)."""
    return getattr(lowering_rules.get(prim), "scalar_op", None)


def _trial_lowering(eqn: JaxprEqn) -> tuple[bool, int]:
    scalar_op = one_op(eqn.primitive)
    if scalar_op is not None and len(eqn.outvars) == 1:
        shape = eqn.outvars[0].aval.shape
        if all(a.aval.shape in ((), shape) for a in eqn.invars):
            dtypes = [a.aval.dtype for a in eqn.invars]
            return _one_op_trial(scalar_op, dtypes, eqn.outvars[0].aval.dtype)
    return _lowered_trial(eqn)


def _one_op_trial(scalar_op: ScalarOp, dtypes: list, result) -> tuple[bool, int]:
    """What the trial lowering of a one-op rule (one_op) on operands of these dtypes
    finds, from the op's tables alone: the op accepts the dtypes (kir's check, as building
    the Op does) and yields the equation's result dtype (as ExprBuilder.lower checks), and
    the LLVM backend has it for the last operand's dtype. In a new process the trials ran
    every rule once for the first time (~75 us an equation, 1.1-1.7 ms of the
    layernorm+softmax forward's partition)."""
    try:
        produced = kir.check_op(scalar_op, [kir.as_dtype(d) for d in dtypes], None)
        if produced != kir.as_dtype(result):
            return False, 0
    except (KirError, TypeError, ValueError):
        return False, 0
    if not scalar_ops.op_supported(scalar_op, kir.as_dtype(dtypes[-1])):
        return False, 0
    return True, int(scalar_op in kir.OpGroup.TRANSCENDENTAL)


def _lowered_trial(eqn: JaxprEqn) -> tuple[bool, int]:
    """The trial by lowering the equation at a symbolic index (any rule)."""
    loaded = {}
    for n, atom in enumerate(eqn.invars):
        if type(atom) is not Literal:
            loaded[atom] = Buffer(f"x{n}", atom.aval.dtype, atom.aval.shape)
    # Every output is lowered (a multiple-result rule builds all of them anyway); dropped
    # ones get stand-ins, which the rule's tuple is indexed by.
    outs = [_Placeholder(v.aval) if isinstance(v, DropVar) else v for v in eqn.outvars]
    if any(isinstance(v, DropVar) for v in eqn.outvars):
        eqn = eqn.replace(outvars=outs)
    builder = ExprBuilder({out: eqn for out in outs}, loaded)
    index = tuple(Var(f"i{d}") for d in range(len(outs[0].aval.shape)))
    try:
        nodes = kir.toposort([builder.lower(out, index) for out in outs])
    except (NotLowerable, KirError, TypeError, ValueError, NotImplementedError):
        return False, 0
    if not all(_op_supported(n) for n in nodes):
        return False, 0
    return True, sum(isinstance(n, Op) and n.op in kir.OpGroup.TRANSCENDENTAL for n in nodes)


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
from kiln.compiler import lowering_elementwise  # noqa: E402,F401
from kiln.compiler import lowering_indexing  # noqa: E402,F401
from kiln.compiler import lowering_linalg  # noqa: E402,F401
from kiln.compiler import lowering_random  # noqa: E402,F401
from kiln.compiler import lowering_reductions  # noqa: E402,F401
from kiln.compiler import lowering_shape  # noqa: E402,F401

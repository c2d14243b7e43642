"""Fusion's read analysis: at which indices each value of a segment is read, before any kernel
is built (fusion.py, step 2), and what the expressions of a kernel's values read.

Rules are expanded through a builder whose reads hand out placeholder nodes (_ReadRecorder),
so nothing is built and nothing recurses.
"""

from __future__ import annotations

from typing import Container, Sequence

from kiln.compiler import kir
from kiln.compiler.kir import Buffer, Const, Var
from kiln.compiler.lower import ExprBuilder
from kiln.core.jaxpr import JaxprEqn, Literal

#: A value read at more distinct indices than this is stored, however cheap: it bounds how
#: many copies of any fused expression a segment's kernels hold.
MAX_READS = 8
#: Below that, a value read at r distinct indices is recomputed at each of them while the
#: r - 1 extra copies of its fused expression come to at most this many equations.
DUPLICATION_BUDGET = 64


class ReadAnalysis:
    """Which values fusing would copy too often (see the module docstring, step 2).

    One pass over the equations from last to first. When a value is reached, every consumer
    has already been expanded, so the distinct indices it is read at are all known; it is
    either stored (its consumers then load it, and its own expression is needed once, at the
    index of its own loop nest) or fused (its rule is expanded at each of those indices,
    which names the indices its operands are read at). Rules are expanded through a builder
    whose reads hand out placeholder nodes, so nothing is built and nothing recurses.

    An equation with several results is expanded once per distinct index any of its outputs
    is read at, and each expansion computes its whole body (the shared part of the outputs):
    so it stays fused only when every read of every output is at one index; otherwise all
    its read outputs are stored, by one loop nest that computes the body once per element.

    materialized: the values to store; reads[v]: the distinct indices v is read at.
    """

    def __init__(
        self,
        eqns: Sequence[JaxprEqn],
        producers: dict,
        outputs: Sequence,
        scalars: dict,
        calls: Container = (),
    ):
        self.materialized: set = set()
        self.reads: dict = {}
        recorder = _ReadRecorder(producers, scalars, self.reads)
        sizes = _fused_sizes(eqns, producers, scalars)
        output_set = set(outputs)
        for eqn in reversed(eqns):
            if len(eqn.outvars) > 1:
                self._multiple_results(eqn, producers, output_set, recorder)
                continue
            var = eqn.outvars[0]
            if var not in producers or 0 in var.aval.shape:
                continue
            if var in calls:  # stored by a call that reads its operands from memory
                self.materialized.add(var)
                continue
            indices = self.reads.setdefault(var, {})
            own = tuple(Var(f"i{d}") for d in range(len(var.aval.shape)))
            if var in output_set:
                indices.setdefault(own)
            count = len(indices)
            if count > 1 and (count > MAX_READS or (count - 1) * sizes[var] > DUPLICATION_BUDGET):
                self.materialized.add(var)
                expand = [own]
            else:
                expand = list(indices)
            for index in expand:
                recorder.lower(var, index)

    def _multiple_results(self, eqn, producers, output_set, recorder) -> None:
        """Store or fuse the outputs of an equation with several results together."""
        outs = [v for v in eqn.outvars if v in producers and 0 not in v.aval.shape]
        if not outs:
            return
        own = tuple(Var(f"i{d}") for d in range(len(outs[0].aval.shape)))
        read: dict = {}
        for var in outs:
            indices = self.reads.setdefault(var, {})
            if var in output_set:
                indices.setdefault(own)
            if indices:
                read[var] = indices
        distinct = {index for indices in read.values() for index in indices}
        if len(distinct) > 1:
            self.materialized.update(read)
            distinct = {own}
        for var in read:
            for index in distinct:
                recorder.lower(var, index)

    def read_along_rows(self, var) -> bool:
        """Whether every read of var is at the row of the outermost loop (i0, ...)."""
        outer = Var("i0")
        return all(index[0] is outer for index in self.reads.get(var, ()))


class _ReadRecorder(ExprBuilder):
    """An ExprBuilder that builds nothing: a read notes the index and returns a placeholder."""

    def __init__(self, producers: dict, scalars: dict, reads: dict):
        super().__init__(producers, {}, scalars)
        self.reads = reads
        self.placeholders: dict = {}

    def read(self, atom, index):
        constant = self.constant_read(atom, index)
        if constant is not None:
            return constant
        index = tuple(kir.as_index(i) for i in index)
        node = self.placeholders.get((atom, index))
        if node is None:
            if atom in self.producers:
                self.reads.setdefault(atom, {})[index] = None
            stand_in = Buffer("pending", atom.aval.dtype, (1 << 62,))
            node = kir.Load(stand_in, Const(len(self.placeholders), kir.INDEX))
            self.placeholders[(atom, index)] = node
        return node


#: Sizes are capped: a fused tree's size can grow exponentially with depth.
_SIZE_CAP = 1 << 30


def _fused_sizes(eqns, producers, scalars) -> dict:
    """For each value, the equations in its expression with every producer fused (a tree
    count, so an upper bound where the expression shares subexpressions), loads counting one."""
    sizes: dict = {}
    for eqn in eqns:
        total = 1
        for atom in eqn.invars:
            if type(atom) is not Literal and atom not in scalars:
                total += sizes.get(atom, 1)
        for var in eqn.outvars:
            sizes[var] = min(total, _SIZE_CAP)
    return sizes


def reads_of(values, producers: dict, loaded: set, scalars: dict) -> dict:
    """{stored value: the indices it is read at} over the expressions of `values`, each at its
    own index (i0, i1, ...), with every value not in `loaded` fused (expanded at each index it
    is read at)."""
    found: dict = {}
    recorder = _ReadRecorder(producers, scalars, {})
    pending = [(v, tuple(Var(f"i{d}") for d in range(len(v.aval.shape)))) for v in values]
    seen: set = set()
    while pending:
        var, index = pending.pop()
        if (var, index) in seen:
            continue
        seen.add((var, index))
        recorder.reads, recorder.placeholders = {}, {}
        recorder.lower(var, index)
        for atom, indices in recorder.reads.items():
            if atom in loaded:
                found.setdefault(atom, set()).update(indices)
            else:
                pending.extend((atom, i) for i in indices)
    return found

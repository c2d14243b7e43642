"""Explicit vector loops: a kernel's innermost loops and contiguous reduction loops emitted as
SIMD code over `lanes` consecutive iterations, then the remaining iterations as the scalar loop.

A module whose loops all came out this way needs no loop vectorizer: it is optimized with the
short "vector" pipeline (llvm_pipeline.PIPELINES), a few cleanup passes where the vectorizing
O2 pipeline ran ~40 (LLVM spent ~3-5 ms per loop there; see COMPILER_NOTES). The emitter also
does what that pipeline's loop passes did: values that do not change along the loop are
computed (and broadcast) before it.

What is vectorized: a loop whose body is stores only, or a reduction loop, when every value that
changes along the loop is an element-wise op that scalar_ops emits on vectors
(`op_vectorizes`), a load (contiguous: a vector load; else a gather of a vector of indices),
a store whose index moves by one element per iteration, or the loop variable itself; a
buffer the loop stores may be read only at the element being stored. Anything else (a
scatter, a narrow float) leaves the loop to the scalar emitter, and its module to the
vectorizing pipeline (`scalar_loops` counts those loops per module); a loop around a
reduction is not an innermost loop (its reduction loop is the one vectorized).

Semantics: element-wise results are those of the scalar code (the same instructions and
fast-math flags per lane). A vectorized reduction accumulates lane by lane (lane l takes
iterations l, l + lanes, ...), then folds the lanes pairwise (halves, then quarters, ...), then
adds the remainder in order: a fixed order, so every compile of the program, whatever the
pipeline or code generator level, gives the same bits. A `contract` multiply feeding an add
becomes one fused multiply-add at every level, in scalar and vector code alike (LLVM's fast
instruction selection, which never fuses, is off: llvm_pipeline.CODEGEN_OPTIONS).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
from llvmlite import ir

from kiln.codegen.llvm import scalar_ops, target
from kiln.codegen.llvm import types as T
from kiln.codegen.llvm.loops import entry_alloca, for_range
from kiln.compiler import kir
from kiln.compiler.kir import Const, Expr, Load, Loop, Op, ReduceKind, Store, Var
from kiln.compiler.kir_schedule import affine_coefficient

#: Element types a vector load or store may have (narrow floats widen one at a time).
MEMORY_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.bool_, np.int8, np.int16, np.int32, np.int64,
        np.uint8, np.uint16, np.uint32, np.uint64, np.float32, np.float64,
    )
)  # fmt: skip
#: The reductions a vector accumulator computes, with each one's identity (what the lanes
#: start from): by dtype family, a function of the dtype.
_IDENTITIES = {
    ReduceKind.SUM: {"float": lambda d: -0.0, "int": lambda d: 0},
    ReduceKind.PROD: {"float": lambda d: 1.0, "int": lambda d: 1},
    ReduceKind.MAX: {"float": lambda d: -np.inf, "int": lambda d: np.iinfo(d).min},
    ReduceKind.MIN: {"float": lambda d: np.inf, "int": lambda d: np.iinfo(d).max},
    ReduceKind.AND: {"int": lambda d: -1},
    ReduceKind.OR: {"int": lambda d: 0},
    ReduceKind.XOR: {"int": lambda d: 0},
}
#: A vector loop of constant length up to this many vector iterations is unrolled.
UNROLL_LANES = 8
_BOOL_IDENTITIES = {
    ReduceKind.MAX: 0,
    ReduceKind.MIN: 1,
    ReduceKind.AND: 1,
    ReduceKind.OR: 0,
    ReduceKind.XOR: 0,
}


def _identity(kind: ReduceKind, dtype: np.dtype):
    """The value a lane of `kind` starts from, or None if it has none here."""
    family = kir.dtype_family(dtype)
    if family == "bool":
        return _BOOL_IDENTITIES.get(kind)
    rule = _IDENTITIES.get(kind, {}).get("float" if family == "float" else "int")
    return None if rule is None else rule(dtype)


class VectorLoops:
    """The vector loops of one kernel (owned by its _KernelEmitter, `kernel`)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.bytes = target.current_target().vector_bytes
        #: loops left to LLVM's loop vectorizer (see the module docstring)
        self.scalar_loops = 0

    # --- planning

    def _plan(
        self, var: Var, roots: Sequence[Expr], stores: Sequence[Store] = ()
    ) -> tuple["_Plan | None", bool]:
        """(the plan of a vector loop over var computing roots and storing `stores`, or None
        when it cannot be vectorized; whether a reduction along var is why: an inner loop,
        which no vectorizer would widen). Lanes fill a vector register with the widest
        element the loop loads or stores; a load whose index does not move by one element
        per iteration becomes a gather. (A plan is a value, not state of this object:
        emitting a loop's invariant operands may emit another loop.)"""
        gathers: set = set()
        invariants: dict = {}  # (in the order found)
        free_vars = self.kernel.free_vars
        written = {store.buffer: store.index for store in stores}
        if len(written) < len(stores) and len({(s.buffer, s.index) for s in stores}) > len(written):
            return None, False  # (one buffer stored at two places: the lanes could overlap)
        widest = 0
        for store in stores:
            if store.buffer.dtype not in MEMORY_DTYPES or affine_coefficient(store.index, var) != 1:
                return None, False
            widest = max(widest, store.buffer.dtype.itemsize)
        seen: set = set()
        stack = list(roots)
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if var not in free_vars(node):
                if written and _reads(node, written):
                    return None, False  # (the loop changes what it reads)
                invariants[node] = None
                continue
            if isinstance(node, Var):
                continue
            if isinstance(node, Load):
                dtype = node.buffer.dtype
                if dtype not in MEMORY_DTYPES:
                    return None, False
                if node.buffer in written and written[node.buffer] is not node.index:
                    return None, False
                widest = max(widest, dtype.itemsize)
                if affine_coefficient(node.index, var) != 1:
                    gathers.add(node)  # (kir indices are always in bounds)
                    stack.append(node.index)
                continue  # (a contiguous load's index is computed for the first lane)
            if isinstance(node, Op):
                operand = node.args[-1].dtype
                if node.dtype in T.NARROW_FLOATS or not scalar_ops.op_vectorizes(node.op, operand):
                    return None, False
                stack.extend(node.args)
                continue
            return None, isinstance(node, kir.Reduce)  # (a reduction along var)
        lanes = self.bytes // max(widest, 4)
        if lanes < 2:
            return None, False
        return _Plan(lanes, frozenset(gathers), tuple(invariants)), False

    # --- emission

    def loop(self, stmt: Loop) -> bool:
        """Emit a loop as vector code plus its scalar remainder; False (nothing emitted) if
        it is not an innermost loop of stores that vectorizes."""
        body = stmt.body
        if not body or not all(isinstance(s, Store) for s in body):
            if not any(isinstance(s, (Loop, kir.MatMul)) for s in kir.walk_stmts(body)):
                self._scalar(stmt.start, stmt.stop)  # (an innermost loop with branches)
            return False
        plan, nested = self._plan(stmt.var, [s.value for s in body], body)
        if plan is None:
            if not nested:
                self._scalar(stmt.start, stmt.stop)
            return False
        lanes = plan.lanes
        kernel = self.kernel
        builder = kernel.builder
        start, stop = kernel.value(stmt.start), kernel.value(stmt.stop)
        vector_end, whole, rest = self._vector_end(start, stop, lanes)
        if whole:
            splats = self._prepare(plan, start, stop)
            constant = isinstance(start, ir.Constant) and isinstance(vector_end, ir.Constant)
            unroll = getattr(kernel.function.module, "unroll_strips", True)
            if unroll and constant and vector_end.constant - start.constant <= UNROLL_LANES * lanes:
                # A short loop of constant length (a column strip) runs unrolled: its
                # iterations are independent, and no loop control comes between them. Only
                # in a module of the "full" pipeline's programs (see Engine._compile_fresh):
                # the O3 pipeline unrolled such loops, the O2 one kept them.
                for first in range(start.constant, vector_end.constant, lanes):
                    self._stores(stmt, ir.Constant(T.I64, first), plan, splats)
            else:
                name = f"{stmt.var.name}.vec"
                with for_range(builder, start, vector_end, name, lanes, unroll=False) as base:
                    self._stores(stmt, base, plan, splats)
        if rest:
            vector_end = self._narrow_strips(stmt, plan, vector_end, stop)
            for index in self._remainder(vector_end, stop, stmt.var.name):
                with kernel.scope({stmt.var: index}):
                    for store in body:
                        kernel.emit_store(store)
        return True

    def _narrow_strips(self, stmt: Loop, plan: "_Plan", start: ir.Value, stop: ir.Value):
        """A constant tail (or a whole loop shorter than a vector) as vector code of fewer
        lanes, halving down to two: 4 float32 iterations on AVX-512 are one 4-lane strip,
        not 4 copies of the scalar body (which LLVM then compiled 4 times: the seed's chain
        of 1,000 multiplies on a float32[4] was 4,000 scalar instructions). Each lane
        computes what the scalar code would (see the module docstring, and its one exception
        at code generator level 0). Returns where the iterations left to the scalar code
        start."""
        if not (isinstance(start, ir.Constant) and isinstance(stop, ir.Constant)):
            return start
        first, end = start.constant, stop.constant
        lanes = plan.lanes // 2
        while lanes >= 2 and end - first >= 2:
            if end - first >= lanes:
                strip = plan._replace(lanes=lanes)
                base = ir.Constant(T.I64, first)
                self._stores(stmt, base, strip, self._prepare(strip, base, stop))
                first += lanes
            lanes //= 2
        return ir.Constant(T.I64, first)

    def _stores(self, stmt: Loop, base: ir.Value, plan: "_Plan", splats: dict) -> None:
        """The loop body's stores for the plan's lanes of iterations from `base` on."""
        kernel = self.kernel
        builder = kernel.builder
        with kernel.scope({stmt.var: base}):
            lanes_of = _LaneValues(kernel, stmt.var, base, plan.lanes, splats, plan.gathers)
            for store in stmt.body:
                value = scalar_ops.narrow_to_memory(
                    builder, lanes_of.value(store.value), store.buffer.dtype
                )
                pointer = kernel.element_pointer(store.buffer, kernel.value(store.index))
                builder.store(
                    value,
                    _as_pointer_to(builder, pointer, value.type),
                    align=store.buffer.dtype.itemsize,
                )

    def reduction(self, var: Var, start: ir.Value, stop: ir.Value, accumulators) -> bool:
        """Emit a reduction loop's iterations from start to stop as vector accumulators (one
        per reduction, folded into its scalar accumulator after the vector loop) plus the
        scalar remainder; False (nothing emitted) if it does not vectorize."""
        kinds_ok = all(
            _identity(a.node.kind, a.dtype) is not None
            and (a.reorderable or a.node.kind not in (ReduceKind.SUM, ReduceKind.PROD)
                 or kir.dtype_family(a.dtype) != "float")
            for a in accumulators
        )  # fmt: skip
        roots = [a.node.value for a in accumulators]
        plan = self._plan(var, roots)[0] if kinds_ok else None
        if plan is None:
            if any(a.reorderable or kir.dtype_family(a.dtype) != "float" for a in accumulators):
                self.scalar_loops += 1
            return False
        kernel = self.kernel
        builder = kernel.builder
        lanes = plan.lanes
        vector_end, whole, rest = self._vector_end(start, stop, lanes)
        if whole:
            splats = self._prepare(plan, start, stop)
            slots = []
            for a in accumulators:
                ty = T.vector(T.compute_type(a.dtype), lanes)
                slot = entry_alloca(builder, ty, f"{var.name}.lanes")
                builder.store(ir.Constant(ty, _identity(a.node.kind, a.dtype)), slot)
                slots.append(slot)
            name = f"{var.name}.vec"
            with for_range(builder, start, vector_end, name, lanes, unroll=False) as base:
                with kernel.scope({var: base}):
                    lanes_of = _LaneValues(kernel, var, base, lanes, splats, plan.gathers)
                    for a, slot in zip(accumulators, slots):
                        combined = scalar_ops.emit_op(
                            builder,
                            kir.REDUCE_COMBINER[a.node.kind],
                            [builder.load(slot), lanes_of.value(a.node.value)],
                            [a.dtype] * 2,
                            a.dtype,
                        )
                        builder.store(combined, slot)
            for a, slot in zip(accumulators, slots):
                combiner = kir.REDUCE_COMBINER[a.node.kind]
                folded = _fold(builder, builder.load(slot), combiner, a.dtype)
                total = scalar_ops.emit_op(
                    builder, combiner, [builder.load(a.target), folded], [a.dtype] * 2, a.dtype
                )
                builder.store(total, a.target)
        if rest:
            for index in self._remainder(vector_end, stop, var.name):
                with kernel.scope({var: index}):
                    for a in accumulators:
                        a.step()
        return True

    def _remainder(self, start: ir.Value, stop: ir.Value, name: str):
        """The scalar iterations after the vector ones: yields each iteration's index, with
        the builder in its body. A few of constant count (a loop shorter than a vector, a
        short tail) are emitted one after the other, as LLVM's pipelines fully unrolled
        them; others as a loop."""
        constant = isinstance(start, ir.Constant) and isinstance(stop, ir.Constant)
        if constant and stop.constant - start.constant <= UNROLL_LANES:
            for index in range(start.constant, stop.constant):
                yield ir.Constant(T.I64, index)
            return
        with for_range(self.kernel.builder, start, stop, name) as index:
            yield index

    def _scalar(self, start: Expr, stop: Expr) -> None:
        """Count a loop left scalar, unless it is known to run fewer than two iterations."""
        if isinstance(start, Const) and isinstance(stop, Const) and stop.value - start.value < 2:
            return
        self.scalar_loops += 1

    def _vector_end(self, start: ir.Value, stop: ir.Value, lanes: int) -> tuple:
        """(where the vector iterations end, whether there are any, whether any remain)."""
        builder = self.kernel.builder
        if isinstance(start, ir.Constant) and isinstance(stop, ir.Constant):
            length = max(stop.constant - start.constant, 0)
            whole = length - length % lanes
            return ir.Constant(T.I64, start.constant + whole), whole > 0, whole < length
        zero = ir.Constant(T.I64, 0)
        length = builder.sub(stop, start)
        length = builder.select(builder.icmp_signed("<", length, zero), zero, length)
        whole = builder.and_(length, ir.Constant(T.I64, -lanes))
        return builder.add(start, whole, flags=("nsw",)), True, True

    def _prepare(self, plan: "_Plan", start: ir.Value, stop: ir.Value) -> dict:
        """Compute and broadcast the loop-invariant operands of the vector code (the values
        it reads that do not change along the loop) before the loop. One that loads
        memory waits for the loop body unless the loop surely runs (a load before a loop of
        no iterations might read past an empty buffer)."""
        kernel = self.kernel
        runs = (
            isinstance(start, ir.Constant)
            and isinstance(stop, ir.Constant)
            and stop.constant > start.constant
        )
        splats = {}
        lanes = plan.lanes
        for node in plan.invariants:
            if isinstance(node, Const):
                splats[node] = ir.Constant(
                    T.vector(T.compute_type(node.dtype), lanes),
                    T.constant(node.value, node.dtype).constant,
                )
            elif runs or not any(isinstance(n, Load) for n in kir.toposort([node])):
                splats[node] = T.splat(kernel.builder, kernel.value(node), lanes)
        return splats


class _Plan(NamedTuple):
    """How a loop is vectorized (VectorLoops._plan): its lane count, its loads that gather,
    and its vector code's loop-invariant operands."""

    lanes: int
    gathers: frozenset
    invariants: tuple


class _LaneValues:
    """The vector values of one vector iteration (the loop variable bound to its first lane's
    index, `base`), memoized; loop-invariant operands come broadcast (`splats`)."""

    def __init__(self, kernel, var: Var, base: ir.Value, lanes: int, splats: dict, gathers: set):
        self.kernel, self.var, self.base, self.lanes = kernel, var, base, lanes
        self.memo = dict(splats)
        self.gathers = gathers

    def value(self, root: Expr) -> ir.Value:
        kernel, memo = self.kernel, self.memo
        builder = kernel.builder
        stack = [(root, False)]
        while stack:
            node, children_done = stack.pop()
            if node in memo:
                continue
            if self.var not in kernel.free_vars(node):
                memo[node] = T.splat(builder, kernel.value(node), self.lanes)
                continue
            if not children_done and (isinstance(node, Op) or node in self.gathers):
                stack.append((node, True))
                children = node.args if isinstance(node, Op) else (node.index,)
                stack.extend((a, False) for a in children if a not in memo)
                continue
            if isinstance(node, Var):
                steps = T.int_vector(64, tuple(range(self.lanes)))
                memo[node] = builder.add(T.splat(builder, self.base, self.lanes), steps)
            elif node in self.gathers:
                loaded = _gather(builder, kernel.pointers[node.buffer], memo[node.index], node)
                memo[node] = scalar_ops.widen_from_memory(builder, loaded, node.dtype)
            elif isinstance(node, Load):
                dtype = node.buffer.dtype
                pointer = kernel.element_pointer(node.buffer, kernel.value(node.index))
                vector_type = T.vector(T.memory_type(dtype), self.lanes)
                loaded = builder.load(
                    _as_pointer_to(builder, pointer, vector_type),
                    typ=vector_type,
                    align=dtype.itemsize,
                )
                memo[node] = scalar_ops.widen_from_memory(builder, loaded, node.dtype)
            else:
                memo[node] = kernel.emit_op(node, [memo[a] for a in node.args])
        return memo[root]


def _fold(builder: ir.IRBuilder, vector: ir.Value, combiner, dtype: np.dtype) -> ir.Value:
    """Combine a vector's lanes pairwise, halves first, into one scalar."""
    lanes = vector.type.count
    while lanes > 1:
        half = lanes // 2
        undefined = ir.Constant(T.vector(vector.type.element, lanes), ir.Undefined)
        low, high = (
            builder.shuffle_vector(vector, undefined, T.int_vector(32, tuple(range(a, a + half))))
            for a in (0, half)
        )
        vector = scalar_ops.emit_op(builder, combiner, [low, high], [dtype] * 2, dtype)
        lanes = half
    return builder.extract_element(vector, ir.Constant(T.I32, 0))


def _gather(builder: ir.IRBuilder, base: ir.Value, indices: ir.Value, load: Load) -> ir.Value:
    """The elements of load's buffer at a vector of indices (llvm.masked.gather, every lane
    on: kir's indices are always in bounds)."""
    lanes = indices.type.count
    element = T.memory_type(load.buffer.dtype)
    if not getattr(base.type, "is_opaque", False):
        base = builder.bitcast(base, ir.PointerType())
    pointers = builder.gep(base, [indices], inbounds=True, source_etype=element)
    pointers.type = T.vector(ir.PointerType(), lanes)  # (llvmlite types it as one)
    vector_type = T.vector(element, lanes)
    mask_type = T.vector(T.I1, lanes)
    gather = scalar_ops.declare_function(
        builder,
        f"llvm.masked.gather.{T.type_suffix(vector_type)}.v{lanes}p0",
        vector_type,
        [pointers.type, T.I32, mask_type, vector_type],
    )
    arguments = [
        pointers,
        ir.Constant(T.I32, load.buffer.dtype.itemsize),
        ir.Constant(mask_type, [1] * lanes),
        ir.Constant(vector_type, ir.Undefined),
    ]
    return builder.call(gather, arguments)


def _as_pointer_to(builder: ir.IRBuilder, pointer: ir.Value, ty: ir.Type) -> ir.Value:
    """The pointer as a pointer to `ty` (a typed element pointer, such as a stack scratch
    row's, would not take a vector store)."""
    if getattr(pointer.type, "is_opaque", False):
        return pointer
    return builder.bitcast(pointer, ir.PointerType(ty))


def _reads(node: Expr, buffers: dict) -> bool:
    return any(isinstance(n, Load) and n.buffer in buffers for n in kir.toposort([node]))

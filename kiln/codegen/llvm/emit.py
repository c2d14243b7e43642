"""Program -> llvmlite ir.Module: one internal function per kernel, one exported entry.

Each kernel function takes its buffers as `noalias`, aligned, dereferenceable pointers, which
is what lets LLVM vectorize the loop nests without runtime alias checks. The entry
`void entry(ptr buffers)` reads one address per input/output, allocates the temps, calls the
kernels in order and frees the temps: one native call per program run.
"""

from __future__ import annotations

import contextlib
from typing import Container, Sequence

import numpy as np
from llvmlite import ir

from kiln.codegen.llvm import emit_vector, scalar_ops, target
from kiln.codegen.llvm import types as T
from kiln.codegen.llvm.loops import entry_alloca, for_range, if_then
from kiln.compiler import kir, kir_rewrite
from kiln.compiler.kir import (
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
    ReduceKind,
    ScalarOp,
    Stmt,
    Store,
    Var,
)
from kiln.compiler.kir_schedule import affine_coefficient, schedule_kernel

#: The entry's symbol in an emitted module; the engine renames it to a content-derived name.
ENTRY_NAME = "kiln_entry"
#: Temps up to this size live on the stack; larger ones come from aligned_alloc.
STACK_TEMP_LIMIT = 4096
TEMP_ALIGNMENT = 64
#: Float sums longer than a block run block by block with a compensated total (see
#: _Accumulator): elements per block when the sum vectorizes along its variable with 512-bit
#: vectors, so that each vector lane adds a few dozen of them (narrower vectors take
#: proportionally shorter blocks: _blocking), and when it runs in order.
VECTOR_BLOCK = 1024
SERIAL_BLOCK = 32

_INDEX_INSTRUCTIONS = {ScalarOp.ADD: "add", ScalarOp.SUB: "sub", ScalarOp.MUL: "mul"}
#: A kernel whose name ends with this rounds every floating-point operation on its own: its
#: instructions carry no fast-math flags (no multiply-add contraction, no reassociation), so
#: that it computes what NumPy computes one operation at a time, whatever code surrounds each
#: operation. (kiln/runtime/native_loop_kernel.py names so a loop compiled as one kernel.)
ROUNDED_SUFFIX = "_rounded"
_FAST_MATH_FLAGS = frozenset({"fast", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc"})


def vector_loops() -> bool:
    """Whether kernels' loops are emitted as explicit vector code (emit_vector), as they are
    unless config.vector_loops is off (KILN_VECTOR_LOOPS=0: LLVM's loop vectorizer then
    widens the scalar loops, as it did before)."""
    from kiln.config import config

    return config.vector_loops


def _new_function(
    module: ir.Module,
    name: str,
    arg_count: int,
    internal: bool,
    kernel: bool = True,
    indices: int = 0,
) -> ir.Function:
    """A function of arg_count pointers (and `indices` int64 values after them)."""
    function_type = ir.FunctionType(T.VOID, [T.PTR] * arg_count + [T.I64] * indices)
    function = ir.Function(module, function_type, name=name)
    function.attributes = target.kernel_attributes()
    function.attributes.add("nounwind")
    if kernel:
        # A kernel is called once, from its program's entry, which inlines it where both are
        # in one module (its noalias parameters become alias scopes). LLVM's fixed cost per
        # function (~0.5 ms of optimization and code generation) is then paid once per
        # program, and always-inlining, before the inliner's simplification passes, does not
        # optimize the kernel's body twice (once alone, once in the entry).
        function.attributes.add("alwaysinline")
    if internal:
        function.linkage = "internal"
    return function


def new_module(name: str) -> ir.Module:
    """An empty module for the current target (emit_kernels and emit_program can share one)."""
    current = target.current_target()
    module = ir.Module(name=name)
    module.triple = current.triple
    module.data_layout = current.data_layout
    return module


def emit_program(
    program: Program,
    entry_name: str = ENTRY_NAME,
    elsewhere: dict[int, str] | None = None,
    module: ir.Module | None = None,
    rows: dict | None = None,
) -> ir.Module:
    """Emit a verified program as an LLVM module for the current target (column reductions are
    strip-mined first, see kir_schedule). `elsewhere` maps kernel positions to the names
    under which emit_kernels defines them, in another module or (defined already) in
    `module`: those are declared here if need be, and the entry calls them by that name.
    `module`: emit into this module (which other programs' functions share) rather than a
    new one. `rows` maps kernel positions to (name, cut: an emit_rows.RowCut) of their
    row part, which emit_row_part defines elsewhere: such a kernel is emitted as a driver
    calling it and the rest of its row loop body for each row (see emit_rows)."""
    elsewhere = elsewhere or {}
    rows = rows or {}
    module = module or new_module(program.name)
    functions = []
    for position, kernel in enumerate(program.kernels):
        if position in rows:
            functions.append(_emit_row_driver(module, program, position, *rows[position]))
            continue
        if position in elsewhere:
            name = elsewhere[position]
            function = module.globals.get(name)
            if function is None:
                kernel_type = ir.FunctionType(T.VOID, [T.PTR] * len(kernel.params))
                function = ir.Function(module, kernel_type, name=name)
            functions.append(function)
            continue
        name = f"{program.name}.{kernel.name}"
        functions.append(_KernelEmitter(module, schedule_kernel(kernel), name).emit())
    _emit_entry(module, program, functions, entry_name)
    return module


def emit_kernels(
    program: Program,
    names: dict[int, str],
    module: ir.Module | None = None,
    exported: Container[str] | None = None,
) -> ir.Module:
    """A module that defines only the kernels at the given positions, each a function of the
    given name (the other half of emit_program's `elsewhere`): external, or where `exported`
    is given, internal unless named there. `module`: emit into this module rather than a new
    one."""
    module = module or new_module(f"{program.name}.kernels")
    for position, name in sorted(names.items()):
        kernel = program.kernels[position]
        internal = exported is not None and name not in exported
        _KernelEmitter(module, schedule_kernel(kernel), name, internal=internal).emit()
    return module


def emit_row_part(
    program: Program, position: int, name: str, cut, module: ir.Module | None = None
) -> ir.Module:
    """A module defining the row part of the kernel at `position` (see emit_rows): its row's
    reductions and the first statements of its row loop body (`cut`, an emit_rows.RowCut),
    as the external function `name`(its parameters, a slot per passed reduction, the row).
    `module`: emit into this module rather than a new one."""
    module = module or new_module(f"{program.name}.rows")
    kernel = schedule_kernel(program.kernels[position])
    _RowPartEmitter(module, kernel, name, cut, first=True, internal=False).emit()
    return module


def _emit_row_driver(
    module: ir.Module, program: Program, position: int, part_name: str, cut
) -> ir.Function:
    """The kernel at `position` as a driver of its two row parts: the first declared (defined
    by emit_row_part under part_name), the second defined here; both are called for each
    row of the kernel's row loop, with a stack slot for each reduction the first passes."""
    kernel = schedule_kernel(program.kernels[position])
    loop = kernel.body[0]
    name = f"{program.name}.{kernel.name}"
    first = module.globals.get(part_name)
    if first is None:
        arguments = [T.PTR] * (len(kernel.params) + len(cut.passed)) + [T.I64]
        first = ir.Function(module, ir.FunctionType(T.VOID, arguments), name=part_name)
    second = _RowPartEmitter(module, kernel, f"{name}.rows", cut, first=False).emit()
    driver = _KernelEmitter(module, kernel, name)
    builder = driver.builder
    slots = [entry_alloca(builder, T.I64, f"row.{n}") for n in range(len(cut.passed))]
    start, stop = driver.value(loop.start), driver.value(loop.stop)
    pointers = [driver.pointers[b] for b in kernel.params]
    with for_range(builder, start, stop, loop.var.name) as index:
        for part in (first, second):
            builder.call(part, [*pointers, *slots, index])
    builder.ret_void()
    return driver.function


def _emit_entry(
    module: ir.Module, program: Program, functions: Sequence[ir.Function], entry_name: str
) -> None:
    entry = _new_function(module, entry_name, 1, internal=False, kernel=False)
    builder = ir.IRBuilder(entry.append_basic_block("entry"))
    table = entry.args[0]
    table.name = "buffers"
    pointers: dict[Buffer, ir.Value] = {}
    for position, buffer in enumerate(program.arguments):
        slot = builder.gep(table, [ir.Constant(T.I64, position)], inbounds=True, source_etype=T.PTR)
        pointers[buffer] = builder.load(slot, name=buffer.name, align=8, typ=T.PTR)
    heap_temps = []
    for buffer in program.temps:
        size = max(TEMP_ALIGNMENT, -(-buffer.nbytes // TEMP_ALIGNMENT) * TEMP_ALIGNMENT)
        if size <= STACK_TEMP_LIMIT:
            pointers[buffer] = entry_alloca(
                builder, ir.ArrayType(T.I8, size), buffer.name, align=TEMP_ALIGNMENT
            )
        else:
            allocate = scalar_ops.declare_function(builder, "aligned_alloc", T.PTR, [T.I64, T.I64])
            pointers[buffer] = builder.call(
                allocate,
                [ir.Constant(T.I64, TEMP_ALIGNMENT), ir.Constant(T.I64, size)],
                name=buffer.name,
            )
            heap_temps.append(pointers[buffer])
    for kernel, function in zip(program.kernels, functions):
        builder.call(function, [pointers[b] for b in kernel.params])
    free = scalar_ops.declare_function(builder, "free", T.VOID, [T.PTR]) if heap_temps else None
    for pointer in heap_temps:
        builder.call(free, [pointer])
    builder.ret_void()


class _KernelEmitter:
    """Emits one kernel. Values are memoized per loop scope by node identity (the IR is
    hash-consed, so this is CSE), except values that read a buffer this kernel writes: those
    are recomputed at each use, as a store in between may have changed them."""

    def __init__(
        self,
        module: ir.Module,
        kernel: Kernel,
        name: str,
        internal: bool = True,
        slots: int = 0,
        indices: int = 0,
    ):
        """`slots`, `indices`: pointers and int64 values the function takes after the
        kernel's buffers (see _RowPartEmitter)."""
        self.kernel = kernel
        self.function = _new_function(
            module, name, len(kernel.params) + slots, internal=internal, indices=indices
        )
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))
        self.pointers: dict[Buffer, ir.Value] = {}
        for argument, buffer in zip(self.function.args, kernel.params):
            argument.name = buffer.name
            argument.add_attribute("noalias")
            argument.attributes.align = buffer.dtype.itemsize
            if buffer.nbytes:
                argument.attributes.dereferenceable = buffer.nbytes
            self.pointers[buffer] = argument
        self.scratch_to_free = [
            self.allocate_scratch(buffer)
            for buffer in kir.buffers_of(kernel.body)
            if buffer not in self.pointers
        ]
        self.written = frozenset(kir.stored_buffers(kernel.body))
        self.stable: dict[Expr, bool] = {}
        self.free: dict[Expr, frozenset[Var]] = {}
        self.vars: dict[Var, ir.Value] = {}
        self.scopes: list[dict] = [{}]
        self.vectors = emit_vector.VectorLoops(self) if vector_loops() else None

    def emit(self) -> ir.Function:
        self.emit_body(self.kernel.body)
        return self.finish()

    def finish(self) -> ir.Function:
        """Free the scratch, return, and strip fast-math flags from a rounded kernel. The
        module counts the loops left to LLVM's vectorizer (`scalar_loops`, see emit_vector;
        all of them when vector loops are off)."""
        module = self.function.module
        left = self.vectors.scalar_loops if self.vectors is not None else 1
        module.scalar_loops = getattr(module, "scalar_loops", 0) + left
        if any(self.scratch_to_free):
            free = scalar_ops.declare_function(self.builder, "free", T.VOID, [T.PTR])
            for pointer in filter(None, self.scratch_to_free):
                self.builder.call(free, [pointer])
        self.builder.ret_void()
        if self.kernel.name.endswith(ROUNDED_SUFFIX):
            for block in self.function.blocks:
                for instruction in block.instructions:
                    flags = getattr(instruction, "flags", None)
                    if flags:
                        flags[:] = [f for f in flags if f not in _FAST_MATH_FLAGS]
        return self.function

    def allocate_scratch(self, buffer: Buffer) -> ir.Value | None:
        """Room for a kernel-local temp that no parameter provides (a scratch row the
        scheduler made): on the stack when small, else from aligned_alloc; returns the
        pointer to free at the end, or None."""
        if buffer.role != "temp":
            raise KirError(
                f"kernel {self.kernel.name!r} uses {buffer.name}, which is neither "
                f"a parameter nor a temp"
            )
        size = max(TEMP_ALIGNMENT, -(-buffer.nbytes // TEMP_ALIGNMENT) * TEMP_ALIGNMENT)
        if size <= STACK_TEMP_LIMIT:
            element = T.memory_type(buffer.dtype)
            slot = entry_alloca(
                self.builder,
                ir.ArrayType(element, size // buffer.dtype.itemsize),
                buffer.name,
                align=TEMP_ALIGNMENT,
            )
            zero = ir.Constant(T.I64, 0)
            self.pointers[buffer] = self.builder.gep(slot, [zero, zero], inbounds=True)
            return None
        allocate = scalar_ops.declare_function(self.builder, "aligned_alloc", T.PTR, [T.I64, T.I64])
        self.pointers[buffer] = self.builder.call(
            allocate,
            [ir.Constant(T.I64, TEMP_ALIGNMENT), ir.Constant(T.I64, size)],
            name=buffer.name,
        )
        return self.pointers[buffer]

    # --- statements

    def emit_body(self, body: Sequence[Stmt]) -> None:
        self.hoist_invariant_reductions(
            [e for s in kir.walk_stmts(body) for e in kir.stmt_exprs(s)]
        )
        for stmt in body:
            if isinstance(stmt, Store):
                self.emit_store(stmt)
            elif isinstance(stmt, Loop):
                if self.vectors is not None and self.vectors.loop(stmt):
                    continue
                start, stop = self.value(stmt.start), self.value(stmt.stop)
                with for_range(self.builder, start, stop, stmt.var.name) as index:
                    with self.scope({stmt.var: index}):
                        self.emit_body(stmt.body)
            elif isinstance(stmt, If):
                with if_then(self.builder, self.value(stmt.cond)), self.scope({}):
                    self.emit_body(stmt.body)
            elif isinstance(stmt, kir.MatMul):
                self.emit_matmul(stmt)
            else:
                raise KirError(f"cannot emit statement {stmt!r}")

    @contextlib.contextmanager
    def scope(self, bindings: dict[Var, ir.Value]):
        """A nested memo scope with loop variables bound (values made inside stay inside)."""
        self.vars.update(bindings)
        self.scopes.append({})
        yield
        self.scopes.pop()
        for var in bindings:
            del self.vars[var]

    def emit_store(self, store: Store) -> None:
        index = self.value(store.index)
        value = scalar_ops.narrow_to_memory(
            self.builder, self.value(store.value), store.buffer.dtype
        )
        self.builder.store(
            value, self.element_pointer(store.buffer, index), align=store.buffer.dtype.itemsize
        )

    def emit_matmul(self, call: kir.MatMul) -> None:
        m, n, k = (self.value(e) for e in (call.m, call.n, call.k))
        a, b, c = (
            self.element_pointer(buffer, self.value(offset))
            for buffer, offset in (
                (call.a, call.a_offset),
                (call.b, call.b_offset),
                (call.c, call.c_offset),
            )
        )
        shape = tuple(e.value if isinstance(e, kir.Const) else None for e in (call.m, call.n))
        from kiln.codegen.llvm import blas_calls  # (with the gemm kernels: only for products)

        blas_calls.emit_gemm(
            self.builder, call.c.dtype, call.trans_a, call.trans_b, m, n, k,
            a, call.lda, b, call.ldb, c, call.ldc, shape,
        )  # fmt: skip

    def element_pointer(self, buffer: Buffer, index: ir.Value) -> ir.Value:
        return self.builder.gep(
            self.pointers[buffer], [index], inbounds=True, source_etype=T.memory_type(buffer.dtype)
        )

    # --- expressions

    def lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def free_vars(self, node: Expr) -> frozenset[Var]:
        return kir_rewrite.free_vars(node, self.free)

    def hoist_invariant_reductions(self, roots: Sequence[Expr]) -> None:
        """Emit now every reduction under roots that depends only on variables already bound.

        Called as each body begins, before its loops: a row's max or sum used by every element
        of the row then runs once per row rather than once per element (LLVM will not hoist a
        whole loop), and reductions over the same range share one loop."""
        bound = set(self.vars)
        ready = [
            node
            for node in kir.toposort(roots)
            if isinstance(node, Reduce)
            and self.lookup(node) is None
            and kir_rewrite.is_stable(node, self.written, self.stable)
            and self.free_vars(node) <= bound
        ]
        for group in _fusable_groups(ready):
            self.emit_reductions(group, {})

    def remember(self, key, node: Expr, value, local: dict) -> None:
        local[key] = value
        if kir_rewrite.is_stable(node, self.written, self.stable):
            self.scopes[-1][key] = value

    def value(self, root: Expr) -> ir.Value:
        """The LLVM value of an expression at the current insertion point."""
        local: dict = {}
        stack = [(root, False)]
        while stack:
            node, children_done = stack.pop()
            if node in local:
                continue
            known = self.lookup(node)
            if known is not None:
                local[node] = known
                continue
            if not children_done:
                stack.append((node, True))
                stack.extend(
                    (child, False) for child in kir.region_children(node) if child not in local
                )
                continue
            self.emit_node(node, local)
        return local[root]

    def emit_node(self, node: Expr, local: dict) -> None:
        builder = self.builder
        if isinstance(node, Const):
            result = T.constant(node.value, node.dtype)
        elif isinstance(node, Var):
            if node not in self.vars:
                raise KirError(
                    f"kernel {self.kernel.name!r}: loop variable {node.name} is used "
                    f"outside the loops that bind it (run verify_kernel)"
                )
            result = self.vars[node]
        elif isinstance(node, Load):
            pointer = self.element_pointer(node.buffer, local[node.index])
            loaded = builder.load(
                pointer, align=node.buffer.dtype.itemsize, typ=T.memory_type(node.buffer.dtype)
            )
            result = scalar_ops.widen_from_memory(builder, loaded, node.dtype)
        elif isinstance(node, Op):
            result = self.emit_op(node, [local[arg] for arg in node.args])
        elif isinstance(node, Reduce):
            self.emit_reductions([node], local)
            return
        else:
            raise KirError(f"cannot emit expression node {type(node).__name__}")
        self.remember(node, node, result, local)

    def emit_op(self, node: Op, args: list) -> ir.Value:
        if node.nsw and node.op in _INDEX_INSTRUCTIONS:
            # Index arithmetic never wraps; saying so helps LLVM reason about addresses.
            return getattr(self.builder, _INDEX_INSTRUCTIONS[node.op])(*args, flags=("nsw",))
        return scalar_ops.emit_op(
            self.builder, node.op, args, [a.dtype for a in node.args], node.dtype
        )

    # --- reductions

    def emit_reductions(self, group: Sequence[Reduce], local: dict) -> None:
        """One loop computing every reduction of the group (they share var, start and stop),
        so the sum and the max of the same row read it once."""
        for node in group:
            if node.kind in kir.ARG_REDUCTIONS:
                raise KirError(
                    "argmax/argmin reach the emitter only as the two reductions "
                    "kir_schedule.split_arg_reductions makes of them"
                )
        first = group[0]
        start, stop = self.value(first.start), self.value(first.stop)
        accumulators = [_Accumulator(self, node) for node in group]
        self.hoist_invariant_reductions([node.value for node in group])
        blocking = _blocking(first, accumulators)
        if blocking is None:
            self.emit_reduction_loop(first.var, start, stop, accumulators)
        else:
            self.emit_blocked_reduction(first, start, stop, *blocking, accumulators)
        for accumulator in accumulators:
            accumulator.finish(local)

    def emit_reduction_loop(
        self,
        var: Var,
        start: ir.Value,
        stop: ir.Value,
        accumulators: Sequence["_Accumulator"],
        block: bool = False,
    ) -> None:
        for accumulator in accumulators if block else ():
            accumulator.begin_block()
        if self.vectors is None or not self.vectors.reduction(var, start, stop, accumulators):
            with for_range(self.builder, start, stop, var.name) as index, self.scope({var: index}):
                for accumulator in accumulators:
                    accumulator.step()
        for accumulator in accumulators if block else ():
            accumulator.end_block()

    def emit_blocked_reduction(
        self,
        first: Reduce,
        start: ir.Value,
        stop: ir.Value,
        block: int,
        vectorized: bool,
        accumulators: Sequence["_Accumulator"],
    ) -> None:
        """The reduction loop as blocks. A vectorized one runs whole blocks of a constant length
        (so the vector body needs no remainder handling), then the remaining elements as one
        shorter block; one that keeps its order (often a wide strip-mined body) is emitted once,
        its last block cut short at stop."""
        builder = self.builder
        size = ir.Constant(T.I64, block)
        if not vectorized:
            with for_range(
                builder, start, stop, f"{first.var.name}.block", block, unroll=False
            ) as begin:
                end = builder.add(begin, size, flags=("nsw",))
                end = builder.select(builder.icmp_signed("<", end, stop), end, stop)
                self.emit_reduction_loop(first.var, begin, end, accumulators, block=True)
            return
        if isinstance(first.start, Const) and isinstance(first.stop, Const):
            length = max(first.stop.value - first.start.value, 0)
            whole_end = ir.Constant(T.I64, first.start.value + length // block * block)
            has_tail = length % block != 0
        else:
            length = builder.sub(stop, start)
            length = builder.select(
                builder.icmp_signed("<", length, ir.Constant(T.I64, 0)),
                ir.Constant(T.I64, 0),
                length,
            )
            whole = builder.mul(builder.sdiv(length, size), size, flags=("nsw",))
            whole_end = builder.add(start, whole, flags=("nsw",))
            has_tail = True
        # Kept rolled: a short row's few blocks, unrolled and interleaved, read several
        # streams at once and run at half the memory bandwidth.
        with for_range(
            builder, start, whole_end, f"{first.var.name}.block", block, unroll=False
        ) as begin:
            end = builder.add(begin, size, flags=("nsw",))
            self.emit_reduction_loop(first.var, begin, end, accumulators, block=True)
        if has_tail:
            self.emit_reduction_loop(first.var, whole_end, stop, accumulators, block=True)


class _RowPartEmitter(_KernelEmitter):
    """One of the two parts of a kernel's row loop body (see emit_rows) as a function of the
    kernel's parameters, a slot per passed reduction and the row index. The first computes
    the row's reductions, as the loop body would at its start, runs the statements before
    the cut and stores the passed reductions in their slots; the second loads them from
    there and runs the other statements."""

    def __init__(self, module, kernel: Kernel, name: str, cut, first: bool, internal=True):
        super().__init__(module, kernel, name, internal, slots=len(cut.passed), indices=1)
        self.loop, self.cut, self.first = kernel.body[0], cut, first
        self.function.args[-1].name = self.loop.var.name

    def emit(self) -> ir.Function:
        loop, cut, builder = self.loop, self.cut, self.builder
        slots = self.function.args[len(self.kernel.params) : -1]
        with self.scope({loop.var: self.function.args[-1]}):
            if self.first:
                self.hoist_invariant_reductions(
                    [e for s in kir.walk_stmts(loop.body) for e in kir.stmt_exprs(s)]
                )
                self.emit_body(loop.body[: cut.statements])
                for node, slot in zip(cut.passed, slots):
                    builder.store(self.lookup(node), slot)
            else:
                for node, slot in zip(cut.passed, slots):
                    self.scopes[-1][node] = builder.load(slot, typ=T.compute_type(node.dtype))
                self.emit_body(loop.body[cut.statements :])
        return self.finish()


class _Accumulator:
    """A reduction's accumulator: a stack slot (promoted to a register by SROA).

    A float sum may be compensated: its loop then runs in blocks, each summed into a fresh
    block slot, and the block totals are added into the running total with their rounding
    errors collected in a compensation (TwoSum, as in Neumaier's summation). The rounding
    error then stays near that of one block plus two ulps instead of growing with the length,
    at the cost of a few instructions per block."""

    def __init__(self, emitter: _KernelEmitter, node: Reduce):
        self.emitter, self.node = emitter, node
        # Narrow floats accumulate in float32 and round once at the end.
        self.dtype = np.dtype(np.float32) if node.dtype in T.NARROW_FLOATS else node.dtype
        # reassoc on this add/multiply alone lets the loop vectorizer split the accumulation
        # into lanes. Only worth it (and only allowed) when the reduction reads memory
        # contiguously along its own variable; a strided one (a strip-mined column reduction)
        # keeps its order and is vectorized across columns instead.
        self.reorderable = node.kind in (ReduceKind.SUM, ReduceKind.PROD) and any(
            affine_coefficient(load.index, node.var) == 1
            for load in kir.toposort([node.value])
            if isinstance(load, Load)
        )
        self.compensated = node.kind is ReduceKind.SUM and kir.dtype_family(node.dtype) == "float"
        builder = emitter.builder
        ty = T.compute_type(node.dtype)
        self.slot = entry_alloca(builder, ty, f"{node.var.name}.acc")
        builder.store(emitter.value(node.init), self.slot)
        self.target = self.slot
        if self.compensated:
            self.compensation = entry_alloca(builder, ty, f"{node.var.name}.comp")
            self.block = entry_alloca(builder, ty, f"{node.var.name}.part")
            builder.store(ir.Constant(ty, 0.0), self.compensation)

    def begin_block(self) -> None:
        if self.compensated:
            self.target = self.block
            self.emitter.builder.store(ir.Constant(self.block.allocated_type, 0.0), self.block)

    def step(self) -> None:
        emitter, node = self.emitter, self.node
        element = emitter.value(node.value)
        builder = emitter.builder
        flags = scalar_ops.REDUCTION_FLAGS if self.reorderable else scalar_ops.FLOAT_FLAGS
        combined = scalar_ops.emit_op(
            builder,
            kir.REDUCE_COMBINER[node.kind],
            [builder.load(self.target), element],
            [self.dtype] * 2,
            self.dtype,
            flags,
        )
        builder.store(combined, self.target)

    def end_block(self) -> None:
        """total += the block's sum, and what that rounding lost, found exactly by Knuth's
        TwoSum (whichever operand is larger), += the compensation."""
        if not self.compensated:
            return
        builder, dtype = self.emitter.builder, self.dtype

        def emit(scalar_op, a, b):
            # No fast-math flags: reassociating these operations would cancel the compensation.
            return scalar_ops.emit_op(builder, scalar_op, [a, b], [dtype] * 2, dtype, ())

        total, part = builder.load(self.slot), builder.load(self.block)
        new_total = emit(ScalarOp.ADD, total, part)
        part_taken = emit(ScalarOp.SUB, new_total, total)
        lost = emit(
            ScalarOp.ADD,
            emit(ScalarOp.SUB, total, emit(ScalarOp.SUB, new_total, part_taken)),
            emit(ScalarOp.SUB, part, part_taken),
        )
        builder.store(emit(ScalarOp.ADD, builder.load(self.compensation), lost), self.compensation)
        builder.store(new_total, self.slot)
        self.target = self.slot

    def finish(self, local: dict) -> None:
        builder = self.emitter.builder
        total = builder.load(self.slot)
        if self.compensated:
            # Once the total is inf or NaN the compensation is meaningless (inf - inf).
            finite = scalar_ops.emit_op(
                builder, ScalarOp.IS_FINITE, [total], [self.dtype], kir.BOOL, ()
            )
            corrected = scalar_ops.emit_op(
                builder,
                ScalarOp.ADD,
                [total, builder.load(self.compensation)],
                [self.dtype] * 2,
                self.dtype,
                (),
            )
            total = builder.select(finite, corrected, total)
        total = scalar_ops.round_to_dtype(builder, total, self.node.dtype)
        self.emitter.remember(self.node, self.node, total, local)


def _blocking(first: Reduce, accumulators: Sequence[_Accumulator]) -> tuple[int, bool] | None:
    """(elements per block, whether the loop vectorizes) for a group of reductions sharing one
    loop, or None to run the loop whole: when no float sum is among them, or the range is
    known to fit in one block."""
    compensated = [a for a in accumulators if a.compensated]
    if not compensated:
        return None
    # Vectorized sums spread a block over many lanes, so each lane adds only a few dozen
    # elements; a sum that keeps its order adds every element of the block to one register.
    # The block scales with the target's vectors, so that a lane adds as many elements on
    # every target: with AVX2's 8 float lanes a 1024-element block made each add 128, and
    # float32 tenths summed 9.7e-7 off (6.0e-7 with AVX-512's 16 lanes).
    vectorized = all(a.reorderable for a in compensated)
    if vectorized:
        block = VECTOR_BLOCK * target.current_target().vector_bytes // 64
    else:
        block = SERIAL_BLOCK
    if (
        isinstance(first.start, Const)
        and isinstance(first.stop, Const)
        and first.stop.value - first.start.value <= block
    ):
        return None
    return block, vectorized


def _loop_of(node: Reduce) -> tuple:
    return (node.var, node.start, node.stop)


def _fusable_groups(reductions: Sequence[Reduce]) -> list[list[Reduce]]:
    """Partition reductions (children before parents) into groups that can share one loop:
    same variable and bounds, and no member needing another's result. Groups are listed in an
    order that computes every dependency first."""
    groups: list[list[Reduce]] = []
    group_of: dict[Reduce, int] = {}
    for node in reductions:
        below = [group_of[d] for d in kir.toposort([node]) if d is not node and d in group_of]
        earliest = max(below, default=-1) + 1
        chosen = next(
            (g for g in range(earliest, len(groups)) if _loop_of(groups[g][0]) == _loop_of(node)),
            None,
        )
        if chosen is None:
            groups.append([])
            chosen = len(groups) - 1
        groups[chosen].append(node)
        group_of[node] = chosen
    return groups

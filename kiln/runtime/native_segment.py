"""Native segments: a fused stage of a program (compiler/fusion.py) lowered to kernel IR and
compiled to machine code, either as one entry for the whole stage or, for large kernels, as
one entry per kernel with the large ones cut into chunks that run on the thread pool.

This is the build side of the native backend, plus the run of a parallel segment, whose steps
its build lays out; kiln/runtime/native.py strings the segments of a program together into one
generated call, and kiln/runtime/native_call.py holds what that call needs per run.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import sys
import threading
import weakref
from typing import Sequence

import numpy as np

from kiln.codegen.llvm.emit import STACK_TEMP_LIMIT as STACK_LIMIT
from kiln.compiler import fusion, kir, kir_rewrite, kir_schedule
from kiln.config import config
from kiln.runtime import engine, memory_plan
from kiln.runtime.native_call import data_address, thread_pool

__all__ = ["NativeSegment", "PARALLEL_MIN_WORK"]

#: Kernels with at least this much work (fusion.kernel_work: iterations, with transcendental
#: ops weighted) run on several threads; below it the thread handoff is not worth it.
PARALLEL_MIN_WORK = 1_000_000
#: A rank-1 chunk boundary falls on a multiple of this many elements (whole cache lines).
CHUNK_ALIGN = 64
#: A large kernel is cut into up to this many chunks per thread, each of at least
#: MIN_CHUNK_WORK, so that a thread slowed by other work leaves its share to the others.
CHUNKS_PER_THREAD = 4
MIN_CHUNK_WORK = 1 << 17
#: Kernels with less work than this (a few microseconds) compile with LLVM's quick pipeline
#: (no vectorization, the level-0 code generator: a fifth of the compile time); the others
#: with the lean one (vectorized, not unrolled or interleaved: two thirds of the full O3
#: pipeline's time, and kernels ran as fast with it, memory-bound or not), except large
#: column reductions (see _plan_parallel).
QUICK_MAX_WORK = 1 << 14


# --- native segments -------------------------------------------------------------------------


_local = threading.local()


def _pending() -> list:
    """This thread's segments built but not compiled yet (weak references)."""
    pending = getattr(_local, "segments", None)
    if pending is None:
        pending = _local.segments = []
    return pending


def _compile_pending(needed: "NativeSegment") -> None:
    """Compile every segment this thread has pending, `needed` among them, as one module.

    If that fails, each compiles alone, so that an error stays with the segment it concerns
    (and surfaces when that segment's entry is asked for)."""
    pending = _pending()
    segments = [s for s in (ref() for ref in pending) if s is not None and s._compiled is None]
    pending.clear()
    if needed not in segments:
        segments.append(needed)
    try:
        natives = _compile_many(
            [p for s in segments for p in s._programs], [q for s in segments for q in s._pipelines]
        )
    except Exception:  # noqa: BLE001 - retried one segment at a time, which raises its own
        for segment in segments:
            try:
                segment._compiled = _compile_many(segment._programs, segment._pipelines)
            except Exception as err:  # noqa: BLE001 - kept for whoever needs this entry
                segment._error = err
        return
    for segment in segments:
        count = len(segment._programs)
        segment._compiled, natives = natives[:count], natives[count:]


def _pipeline(work: int, products: bool = False) -> str:
    """The LLVM pipeline for a kernel (or a whole segment) of this much work; `products`: it
    only calls the kernel library or BLAS, which do the work whatever the pipeline, so it
    gets the quick one (a tenth of the lean one's time for a product's few instructions).
    A loop body's kernels run once per iteration, so they never get the quick one (a
    fori_loop of 1000 steps on 256 floats ran 3x slower with it)."""
    if getattr(_local, "loop_body", False):
        return "lean"
    return "quick" if products or work < QUICK_MAX_WORK else "lean"


@contextlib.contextmanager
def loop_body():
    """Within the block, segments being built are loop bodies (see _pipeline)."""
    previous = getattr(_local, "loop_body", False)
    _local.loop_body = True
    try:
        yield
    finally:
        _local.loop_body = previous


def _compile_many(programs: list[kir.Program], pipelines: list[str]) -> list:
    """Compile programs together (one LLVM module per pipeline); dump them if asked."""
    natives = engine.compile_programs(programs, pipelines=pipelines)
    if config.dump & {"kir", "llvm", "asm"}:
        out = sys.stderr
        for program, native in zip(programs, natives):
            if "kir" in config.dump:
                print(f"--- kiln: kernel IR of {program.name} ---\n{program}", file=out)
            if "llvm" in config.dump:
                print(
                    f"--- kiln: LLVM IR of {program.name} ---\n"
                    f"{native.llvm_ir or native.unoptimized_ir}",
                    file=out,
                )
            if "asm" in config.dump:
                print(f"--- kiln: assembly of {program.name} ---\n{native.asm}", file=out)
    return natives


class _Step:
    """One kernel of a parallel segment: its entries and the buffers its table holds.

    A split kernel's entry reads its chunk's loop bounds from a small int64 buffer (the first
    table slot): bounds holds one (start, stop) row per chunk, and chunk_entries which entry
    runs each chunk (None: the first)."""

    def __init__(
        self,
        entries: list,
        buffers: list,
        bounds: np.ndarray | None = None,
        chunk_entries: list[int] | None = None,
    ):
        self.entries = entries
        self.buffers = buffers
        self.bounds = bounds
        self.chunk_entries = chunk_entries
        if bounds is not None:
            self.bound_addresses = data_address(bounds) + np.arange(len(bounds)) * 16

    @property
    def chunks(self) -> int:
        return len(self.bounds) if self.bounds is not None else 1

    def tasks(self, addresses: dict, keep: list) -> list:
        values = [addresses[b] for b in self.buffers]
        if self.bounds is None:
            table = np.array(values or [0], dtype=np.int64)
            keep.append(table)
            return [(self.entries[0], data_address(table))]
        table = np.empty((len(self.bounds), 1 + len(values)), dtype=np.int64)
        table[:, 0] = self.bound_addresses
        table[:, 1:] = values
        keep.append(table)
        base, stride = data_address(table), table.strides[0]
        which = self.chunk_entries or [0] * len(self.bounds)
        return [(self.entries[which[c]], base + c * stride) for c in range(len(self.bounds))]


class NativeSegment:
    """A lowered native stage: one entry for the whole program, or (for large kernels) one
    entry per kernel, the large ones split into chunks run on the thread pool, with the temps
    passed in from here."""

    def __init__(self, plan: fusion.SegmentPlan, threads: int, pass_temps: bool = False):
        self.plan = plan
        self.program = plan.program
        self.inputs = plan.inputs
        self.outputs = plan.outputs
        self.work = [fusion.kernel_work(group.kernel) for group in plan.kernels]
        self.parallel = threads > 1 and any(w >= PARALLEL_MIN_WORK for w in self.work)
        self.threads = threads
        self._compiled: list | None = None
        self._error: BaseException | None = None
        full = plan.temp_buffers
        # pass_temps: the caller provides the full-size temps (kiln/runtime/memory_plan.py
        # places them among the program's other intermediates). Else a one-entry segment's
        # temps are allocated by its entry, and a parallel segment keeps its own.
        #: The temps the caller passes in (parallel: every full-size temp; one entry: those
        #: too large for the stack), and for each the first and last kernel that uses it.
        self.scratch: list[kir.Buffer] = []
        if pass_temps:
            self.scratch = full if self.parallel else [b for b in full if b.nbytes > STACK_LIMIT]
        users: dict = {}  # buffer -> the kernels that take it, in order
        for k, kernel in enumerate(self.program.kernels):
            for b in kernel.params:
                users.setdefault(b, []).append(k)
        self.scratch_kernels = {b: (users[b][0], users[b][-1]) for b in self.scratch}
        if not self.parallel:
            program = self.program
            if self.scratch:
                # Passed-in temps become arguments of the entry, after its outputs.
                renamed = {b: kir.Buffer(b.name, b.dtype, b.shape, "output") for b in self.scratch}
                program = kir.Program(
                    program.name,
                    [renamed.get(b, b) for b in program.buffers],
                    [_with_buffers(kernel, renamed) for kernel in program.kernels],
                )
                original = {v: k for k, v in renamed.items()}
            self._programs = [program]
            products = all(group.product is not None for group in plan.kernels)
            self._pipelines = [_pipeline(max(self.work, default=0), products)]
            # A ctypes array: the call path writes a slot in half the time a NumPy one takes.
            self.table = (ctypes.c_int64 * max(len(program.arguments), 1))()
            self.table_address = ctypes.addressof(self.table)
            # slot of each input/output (and passed-in temp) buffer in the entry's table
            self.slots = {
                (original.get(b, b) if self.scratch else b): n
                for n, b in enumerate(program.arguments)
            }
        else:
            self._plan_parallel()
        _pending().append(weakref.ref(self))

    # Compilation waits until something needs an entry, so that every segment of a program
    # (all built before the program's call path is generated) compiles as one LLVM module.
    def _natives(self) -> list:
        if self._compiled is None and self._error is None:
            _compile_pending(self)
        if self._error is not None:
            raise self._error
        return self._compiled

    @property
    def native(self):
        """The compiled program of a segment that runs as one entry."""
        return self._natives()[0]

    @property
    def entry(self):
        """The native entry of a segment that runs as one entry: entry(address table)."""
        return self._natives()[0].entry

    @property
    def steps(self) -> list["_Step"]:
        """The kernels of a parallel segment in order, each with its compiled entry."""
        if self._steps is None:
            natives = iter(self._natives())
            self._steps = []
            for originals, table, chunk_entries, count in self._layouts:
                entries = [next(natives).entry for _ in range(count)]
                self._steps.append(_Step(entries, originals, table, chunk_entries))
        return self._steps

    @property
    def run_parallel(self):
        """run(input_addresses, outputs) of a parallel segment (compiled by now)."""
        self.steps  # noqa: B018 - compiles, so that errors surface while the program is built
        return self._run_parallel

    # The parallel form: every kernel is its own program (the temps become its arguments), and
    # all of them compile together, as one LLVM module with one entry per kernel.
    def _plan_parallel(self) -> None:
        plan = self.plan
        self.temp_buffers = plan.temp_buffers
        self._temp_cache: list | None = None
        self._temp_lock = threading.Lock()
        self._steps: list[_Step] | None = None
        self._programs: list[kir.Program] = []
        self._pipelines: list[str] = []
        #: per kernel: buffers, chunk bounds, entry of each chunk, number of programs
        self._layouts: list[tuple] = []
        for group, work in zip(plan.kernels, self.work):
            stored = set(kir.stored_buffers(group.kernel.body))
            local = set(group.local_buffers)
            params = [b for b in group.kernel.params if b not in local]
            # Kernel-local buffers (row buffers) stay temps: each call of an entry allocates
            # its own, so threads never share one.
            renamed = {
                b: kir.Buffer(b.name, b.dtype, b.shape, "output" if b in stored else "input")
                for b in params
            }
            arguments = [renamed[b] for b in params if b not in stored] + [
                renamed[b] for b in params if b in stored
            ]
            originals = [{v: k for k, v in renamed.items()}[b] for b in arguments]
            temps = list(group.local_buffers)
            name = f"{self.program.name}_{group.kernel.name}"
            split = self._split(group, work)
            if split is None:
                kernel = _with_buffers(group.kernel, renamed)
                self._programs.append(kir.Program(name, arguments + temps, [kernel]))
                self._pipelines.append(_pipeline(work, group.product is not None))
                self._layouts.append((originals, None, None, 1))
                continue
            # A split kernel reads its chunk's loop bounds from a small int64 buffer (the
            # first table slot), so it compiles once however it is split. A rank-1 kernel (a
            # column reduction, which kir_schedule rewrites) compiles once per chunk width
            # instead (one or two), its chunk [start, start + width): a constant trip count
            # keeps the rewritten loops as fast as whole ones.
            dim, edges = split
            extent = group.shape[dim]
            bounds = kir.Buffer(f"{group.kernel.name}_bounds", np.int64, (2,))
            table = np.array(list(zip(edges, edges[1:])), dtype=np.int64)
            first = kir.Load(bounds, kir.as_index(0))
            if len(group.shape) == 1:
                widths = sorted({hi - lo for lo, hi in zip(edges, edges[1:])})
                ranges = [(kir.clamp(first, 0, extent - w), w, f"{name}_width{w}") for w in widths]
                chunk_entries = [widths.index(hi - lo) for lo, hi in zip(edges, edges[1:])]
            else:
                last = kir.clamp(kir.Load(bounds, kir.as_index(1)), 0, extent)
                ranges = [(kir.clamp(first, 0, extent), last, name)]
                chunk_entries = None
            # (The column loops kir_schedule writes run 15-20% faster unrolled: those get
            # the full pipeline.)
            pipeline = (
                "full" if chunk_entries is not None else _pipeline(work, group.product is not None)
            )
            for start, stop, program_name in ranges:
                stop = kir.index_add(start, stop) if isinstance(stop, int) else stop
                chunk = fusion.chunked_kernel(plan, group, {dim: (start, stop)})
                kernel = _with_buffers(chunk, renamed)
                self._programs.append(
                    kir.Program(program_name, [bounds] + arguments + temps, [kernel])
                )
                self._pipelines.append(pipeline)
            self._layouts.append((originals, table, chunk_entries, len(ranges)))

    def _split(self, group: fusion.KernelPlan, work: int):
        """(dimension, chunk edges) for a large kernel, None for one that runs whole."""
        if work < PARALLEL_MIN_WORK or group.whole:
            return None
        shape = group.shape
        if group.product is not None:  # a BLAS call: its own rule (lowering_linalg)
            from kiln.compiler import lowering_linalg

            split = lowering_linalg.product_split(group.product, self.threads)
            if split is None:
                return None
            dim, count, align = split
        else:
            if len(group.parts) > 1 or group.local_buffers:
                dim = 0 if shape and shape[0] > 1 else None  # merged kernels split their rows
            else:
                dim = next((d for d, n in enumerate(shape) if n > 1), None)
            if dim is None:
                return None
            count = min(
                self.threads * CHUNKS_PER_THREAD,
                shape[dim],
                max(work // MIN_CHUNK_WORK, self.threads),
            )
            align = CHUNK_ALIGN if dim == len(shape) - 1 else 1
            if dim == 0 and group.row_block:  # (blocks of folded column sums never span two)
                align = math.lcm(align, group.row_block)
        extent = shape[dim]
        edges = [0]
        for c in range(1, count):
            edge = -(-extent * c // count // align) * align
            edges.append(min(max(edge, edges[-1]), extent))
        edges.append(extent)
        edges = sorted(set(edges))
        return (dim, edges) if len(edges) > 2 else None

    def _run_parallel(
        self,
        input_addresses: Sequence[int],
        outputs: Sequence[np.ndarray],
        temps: Sequence[np.ndarray] | None = None,
    ) -> None:
        """Run every kernel in order; each large one on the pool, chunk by chunk. `temps`:
        the caller's buffers for `scratch` (given when the segment was built to take them)."""
        addresses = dict(zip([self.plan.buffers[v] for v in self.inputs], input_addresses))
        for var, array in zip(self.outputs, outputs):
            addresses[self.plan.buffers[var]] = data_address(array)
        reuse = temps is None and self._temp_lock.acquire(False)
        keep: list = []
        try:
            if temps is None and reuse:
                temps = self._temp_cache
                if temps is None:
                    temps = self._temp_cache = _prefaulted(self.temp_buffers)
            elif temps is None:
                temps = [np.empty(b.shape, b.dtype) for b in self.temp_buffers]
            for buffer, array in zip(self.temp_buffers, temps):
                addresses[buffer] = data_address(array)
            for step in self.steps:
                tasks = step.tasks(addresses, keep)
                if len(tasks) == 1:
                    entry, table = tasks[0]
                    entry(table)
                else:
                    thread_pool(self.threads).run(tasks)
        finally:
            if reuse:
                self._temp_lock.release()

    def writes_in_place(self, source: kir.Buffer, target: kir.Buffer) -> bool:
        """Whether output `target` may be given input `source`'s memory (a donated argument).

        Kernels run one after another, so earlier kernels may read `source` freely. The first
        kernel that uses `target` must store each of its elements exactly once (a loop nest
        of target.size iterations around its only store to it) and read `source` only in the
        value it stores, at the index it stores to; no later kernel may read `source`. Then
        every element of `source` is read before the element of `target` at its place is
        written, and never after."""
        if source.shape != target.shape or source.dtype != target.dtype:
            return False
        kernels = self.program.kernels
        first = next((n for n, k in enumerate(kernels) if target in k.params), None)
        if first is None or any(source in k.params for k in kernels[first + 1 :]):
            return False
        pair = (source, target)
        stores: list = []

        def loads(exprs) -> list:
            return [n for n in kir.toposort(exprs) if isinstance(n, kir.Load) and n.buffer in pair]

        def visit(body, trips: int) -> bool:
            for stmt in body:
                if isinstance(stmt, kir.Loop):
                    start, stop = stmt.start, stmt.stop
                    if not (isinstance(start, kir.Const) and isinstance(stop, kir.Const)):
                        return False
                    if not visit(stmt.body, trips * max(stop.value - start.value, 0)):
                        return False
                elif isinstance(stmt, kir.Store) and stmt.buffer == target:
                    stores.append((stmt, trips))
                elif not isinstance(stmt, kir.Store) or loads(kir.stmt_exprs(stmt)):
                    return False  # a store reading either buffer, a branch, a BLAS call
            return True

        # The kernel as it is emitted: a column reduction is rescheduled to accumulate in the
        # output (kir_schedule), which would overwrite `source` before reading it. Reductions
        # in the stored value are refused outright (a chunk is scheduled on its own).
        if not visit(kir_schedule.schedule_kernel(kernels[first]).body, 1) or len(stores) != 1:
            return False
        store, trips = stores[0]
        nodes = kir.toposort([store.index, store.value])
        found = [n for n in nodes if isinstance(n, kir.Load) and n.buffer in pair]
        return (
            trips == target.size
            and not any(isinstance(n, kir.Reduce) for n in nodes)
            and all(n.buffer == source and n.index == store.index for n in found)
        )

    def describe(self) -> str:
        program = self.program
        kernels = len(program.kernels)
        parts = [
            f"{kernels} kernel{'s' * (kernels != 1)}",
            f"{len(program.temps)} temp{'s' * (len(program.temps) != 1)}",
        ]
        if self.parallel:
            split = [
                f"{group.kernel.name} in {step.chunks} chunks"
                for group, step in zip(self.plan.kernels, self.steps)
                if step.chunks > 1
            ]
            parts.append(f"{self.threads} threads: " + ", ".join(split))
        return ", ".join(parts)


def _prefaulted(buffers: list) -> list[np.ndarray]:
    """Arrays for the temps a segment keeps, from one large region when they are large
    (memory_plan.large_region: huge pages, else pages mapped in advance)."""
    sizes = [-(-b.nbytes // CHUNK_ALIGN) * CHUNK_ALIGN for b in buffers]
    region = memory_plan.large_region(sum(sizes))
    if region is None:
        return [np.empty(b.shape, b.dtype) for b in buffers]
    arrays, offset = [], 0
    for buffer, size in zip(buffers, sizes):
        array = np.frombuffer(region, buffer.dtype, buffer.size, offset).reshape(buffer.shape)
        arrays.append(array)
        offset += size
    return arrays


def _with_buffers(kernel: kir.Kernel, mapping: dict) -> kir.Kernel:
    """The kernel with its buffers replaced (same names and types, other roles)."""
    memo: dict = {}

    def replace(node, children):
        if isinstance(node, kir.Load) and node.buffer in mapping:
            return kir.Load(mapping[node.buffer], children[0])
        return None

    def rewrite_expr(node):
        return kir_rewrite.rewrite(node, replace, memo)

    def rewrite_stmt(stmt):
        if isinstance(stmt, kir.Store):
            return kir.Store(
                mapping.get(stmt.buffer, stmt.buffer),
                rewrite_expr(stmt.index),
                rewrite_expr(stmt.value),
            )
        if isinstance(stmt, kir.Loop):
            return kir.Loop(
                stmt.var,
                rewrite_expr(stmt.start),
                rewrite_expr(stmt.stop),
                [rewrite_stmt(s) for s in stmt.body],
            )
        if isinstance(stmt, kir.MatMul):
            return stmt.rebuilt(rewrite_expr, mapping)
        return kir.If(rewrite_expr(stmt.cond), [rewrite_stmt(s) for s in stmt.body])

    return kir.Kernel(kernel.name, [rewrite_stmt(s) for s in kernel.body])

"""Native segments: a fused stage of a program (compiler/fusion.py) lowered to kernel IR and
compiled to machine code, either as one entry for the whole stage or, for large kernels, as
one entry per kernel with the large ones cut into chunks that run on the thread pool.

This is the build side of the native backend, plus the run of a parallel segment, whose steps
its build lays out; kiln/runtime/native.py strings the segments of a program together into one
generated call, and kiln/runtime/native_call.py holds what that call needs per run.
"""

from __future__ import annotations

import sys
import threading
from typing import Sequence

import numpy as np

from kiln.compiler import fusion, kir, kir_rewrite, kir_schedule
from kiln.config import config
from kiln.runtime import engine
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


# --- native segments -------------------------------------------------------------------------


def _compile(program: kir.Program):
    native = engine.compile_program(program)
    if config.dump & {"kir", "llvm", "asm"}:
        out = sys.stderr
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
    return native


class _Step:
    """One kernel of a parallel segment: its entries and the buffers its table holds.

    Split kernels come in two forms. Usually one entry reads its chunk's loop bounds from a
    small int64 buffer (the first table slot), so a kernel compiles once however it is split.
    A kernel whose split loop kir_schedule rewrites (a column reduction, which needs constant
    bounds) compiles one entry per chunk instead."""

    def __init__(self, entries: list, buffers: list, bounds: np.ndarray | None = None):
        self.entries = entries
        self.buffers = buffers
        self.bounds = bounds
        if bounds is not None:
            self.bound_addresses = data_address(bounds) + np.arange(len(bounds)) * 16

    @property
    def chunks(self) -> int:
        return len(self.bounds) if self.bounds is not None else len(self.entries)

    def tasks(self, addresses: dict, keep: list) -> list:
        values = [addresses[b] for b in self.buffers]
        if self.bounds is None:
            table = np.array(values or [0], dtype=np.int64)
            keep.append(table)
            return [(entry, data_address(table)) for entry in self.entries]
        table = np.empty((len(self.bounds), 1 + len(values)), dtype=np.int64)
        table[:, 0] = self.bound_addresses
        table[:, 1:] = values
        keep.append(table)
        base, stride = data_address(table), table.strides[0]
        return [(self.entries[0], base + c * stride) for c in range(len(self.bounds))]


class NativeSegment:
    """A lowered native stage: one entry for the whole program, or (for large kernels) one
    entry per kernel, the large ones split into chunks run on the thread pool, with the temps
    passed in from here."""

    def __init__(self, plan: fusion.SegmentPlan, threads: int):
        self.plan = plan
        self.program = plan.program
        self.inputs = plan.inputs
        self.outputs = plan.outputs
        self.work = [fusion.kernel_work(group.kernel) for group in plan.kernels]
        self.parallel = threads > 1 and any(w >= PARALLEL_MIN_WORK for w in self.work)
        self.threads = threads
        if not self.parallel:
            self.native = _compile(self.program)
            self.table = np.zeros(max(len(self.program.arguments), 1), dtype=np.int64)
            self.table_address = data_address(self.table)
            self.entry = self.native.entry
            # slot of each input/output buffer in the entry's address table
            self.slots = {b: n for n, b in enumerate(self.program.arguments)}
        else:
            self._build_parallel()

    # The parallel form: every kernel is its own program (the temps become its arguments).
    def _build_parallel(self) -> None:
        plan = self.plan
        self.steps: list[_Step] = []
        self.temp_buffers = [plan.buffers[v] for v in plan.temps]
        self._temp_cache: list | None = None
        self._temp_lock = threading.Lock()
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
                entry = _compile(kir.Program(name, arguments + temps, [kernel])).entry
                self.steps.append(_Step([entry], originals))
                continue
            dim, edges = split
            extent = group.shape[dim]
            bounds = kir.Buffer(f"{group.kernel.name}_bounds", np.int64, (2,))
            runtime = {
                dim: (
                    kir.clamp(kir.Load(bounds, kir.as_index(0)), 0, extent),
                    kir.clamp(kir.Load(bounds, kir.as_index(1)), 0, extent),
                )
            }
            kernel = _with_buffers(fusion.chunked_kernel(plan, group, runtime), renamed)
            whole = _with_buffers(group.kernel, renamed)
            if len(group.shape) > 1 or kir_schedule.schedule_kernel(whole) is whole:
                program = kir.Program(name, [bounds] + arguments + temps, [kernel])
                table = np.array(list(zip(edges, edges[1:])), dtype=np.int64)
                self.steps.append(_Step([_compile(program).entry], originals, table))
                continue
            # a column reduction: its rewrite needs constant bounds, so one entry per chunk
            entries = []
            for c, (lo, hi) in enumerate(zip(edges, edges[1:])):
                chunk = _with_buffers(fusion.chunked_kernel(plan, group, {dim: (lo, hi)}), renamed)
                program = kir.Program(f"{name}_part{c}", arguments + temps, [chunk])
                entries.append(_compile(program).entry)
            self.steps.append(_Step(entries, originals))

    def _split(self, group: fusion.KernelPlan, work: int):
        """(dimension, chunk edges) for a large kernel, None for one that runs whole."""
        if work < PARALLEL_MIN_WORK:
            return None
        shape = group.shape
        if len(group.parts) > 1 or group.local_buffers:
            dim = 0 if shape and shape[0] > 1 else None  # merged kernels split their rows
        else:
            dim = next((d for d, n in enumerate(shape) if n > 1), None)
        if dim is None:
            return None
        extent = shape[dim]
        count = min(
            self.threads * CHUNKS_PER_THREAD, extent, max(work // MIN_CHUNK_WORK, self.threads)
        )
        align = CHUNK_ALIGN if dim == len(shape) - 1 else 1
        edges = [0]
        for c in range(1, count):
            edge = -(-extent * c // count // align) * align
            edges.append(min(max(edge, edges[-1]), extent))
        edges.append(extent)
        edges = sorted(set(edges))
        return (dim, edges) if len(edges) > 2 else None

    def run_parallel(self, input_addresses: Sequence[int], outputs: Sequence[np.ndarray]) -> None:
        """Run every kernel in order; each large one on the pool, chunk by chunk."""
        addresses = dict(zip([self.plan.buffers[v] for v in self.inputs], input_addresses))
        for var, array in zip(self.outputs, outputs):
            addresses[self.plan.buffers[var]] = data_address(array)
        reuse = self._temp_lock.acquire(False)
        keep: list = []
        try:
            temps = self._temp_cache if reuse else None
            if temps is None:
                temps = [np.empty(b.shape, b.dtype) for b in self.temp_buffers]
                if reuse:
                    self._temp_cache = temps
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
        return kir.If(rewrite_expr(stmt.cond), [rewrite_stmt(s) for s in stmt.body])

    return kir.Kernel(kernel.name, [rewrite_stmt(s) for s in kernel.body])

"""The native backend: an Executable that runs a program's fused kernels as machine code and
the equations it cannot lower through their reference impls, in one straight-line call.

At build time the optimized jaxpr is split into stages (compiler/fusion.py); each native stage
is lowered to a kernel IR Program and compiled to one native entry (kiln/runtime/engine.py).
The call path is Python source generated once per executable, like the interpreter's: per
call it only writes buffer addresses into a preallocated int64 table, allocates the outputs
with np.empty, calls the entry through ctypes (which releases the GIL) and wraps the results.

Large kernels (at least PARALLEL_MIN_WORK iterations) split their outermost loop into chunks,
one per core, compiled as separate entries and run on a small persistent thread pool.
"""
from __future__ import annotations

import ctypes
import itertools
import logging
import os
import queue
import re
import sys
import threading
from typing import Any, Sequence

import numpy as np

from kiln.compiler import fusion, kir, kir_rewrite, kir_schedule, lower
from kiln.config import config
from kiln.core.array import Array
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Literal, _Names, pp_eqn, pp_jaxpr
from kiln.runtime import engine
from kiln.runtime.executable import Executable, impl_call_lines

__all__ = ["NativeExecutable", "PARALLEL_MIN_WORK", "num_threads"]

logger = logging.getLogger("kiln")

#: Raise backend errors instead of falling back to the interpreter (tests set it;
#: $KILN_NATIVE_STRICT=1 too).
STRICT = os.environ.get("KILN_NATIVE_STRICT", "") == "1"

#: Kernels with at least this much work (fusion.kernel_work: iterations, with transcendental
#: ops weighted) run on several threads; below it the thread handoff is not worth it.
PARALLEL_MIN_WORK = 1_000_000
#: A rank-1 chunk boundary falls on a multiple of this many elements (whole cache lines).
CHUNK_ALIGN = 64
#: A large kernel is cut into up to this many chunks per thread, each of at least
#: MIN_CHUNK_WORK, so that a thread slowed by other work leaves its share to the others.
CHUNKS_PER_THREAD = 4
MIN_CHUNK_WORK = 1 << 17


def num_threads() -> int:
    """Threads a large kernel is split across: $KILN_NUM_THREADS, else the core count."""
    value = os.environ.get("KILN_NUM_THREADS")
    if value:
        return max(1, int(value))
    return max(1, os.cpu_count() or 1)


# --- buffer addresses ------------------------------------------------------------------------

_from_address = ctypes.c_void_p.from_address
#: Offset of the data pointer in NumPy's array object (right after the object header);
#: verified below, else addresses come from __array_interface__.
_DATA_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)


def _interface_address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _probe_data_offset() -> bool:
    try:
        probes = [np.empty(n, dtype) for n, dtype in ((4, np.float32), (0, np.int8),
                                                      (1000, np.float64))]
        return all(_from_address(id(a) + _DATA_OFFSET).value == _interface_address(a)
                   or (a.size == 0) for a in probes)
    except Exception:  # noqa: BLE001 - any surprise means: use the documented interface
        return False


_FAST_ADDRESS = _probe_data_offset()


def data_address(array: np.ndarray) -> int:
    """The data address of a NumPy array (a field read, ~10x cheaper than .ctypes.data)."""
    if _FAST_ADDRESS:
        return _from_address(id(array) + _DATA_OFFSET).value or 0
    return _interface_address(array)


def _usable(array: np.ndarray, dtype: np.dtype) -> bool:
    return (type(array) is np.ndarray and array.flags.c_contiguous and array.dtype == dtype
            and data_address(array) % max(dtype.itemsize, 1) == 0)


def array_address(arr: Array, keep: list) -> int:
    """A kiln Array's buffer address for compiled code, cached on the Array; a buffer compiled
    code cannot read as is (a strided view) is copied, and the copy kept alive in `keep`."""
    value = arr._value
    if _usable(value, value.dtype):
        return arr.buffer_address()
    copy = np.array(value, order="C")  # (also turns a NumPy scalar into an array)
    keep.append(copy)
    return data_address(copy)


def host_buffer(value: Any, dtype: np.dtype) -> np.ndarray:
    """A value an impl returned, as a dense array of `dtype` native code can read."""
    array = np.asarray(value)
    if not _usable(array, dtype):
        array = np.ascontiguousarray(array, dtype=dtype)
        if array.ndim == 0 and np.asarray(value).ndim == 0:
            array = array.reshape(())
    return array


# --- a small persistent thread pool --------------------------------------------------------------

class _Pool:
    """Worker threads that help run a kernel's chunks (ctypes calls release the GIL, so native
    chunks run in parallel with the calling thread).

    Chunks are claimed from a shared counter by whoever is free, the calling thread included:
    when the other cores are busy, the caller simply runs every chunk itself and pays no more
    than the handoff; when they are free, the work spreads evenly."""

    def __init__(self, workers: int):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"kiln-native-{n}",
                                         daemon=True) for n in range(workers)]
        for thread in self.threads:
            thread.start()

    def _work(self) -> None:
        while True:
            tasks, counter, done = self.jobs.get()
            while True:
                claimed = next(counter)  # itertools.count: atomic under the GIL
                if claimed >= len(tasks):
                    break
                entry, table = tasks[claimed]
                try:
                    entry(table)
                finally:
                    done.put(None)

    def run(self, tasks: Sequence) -> None:
        """Run every (entry, table address) task; returns when all have finished."""
        counter = itertools.count()
        done: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(min(len(self.threads), len(tasks) - 1)):
            self.jobs.put((tasks, counter, done))
        mine = 0
        while True:
            claimed = next(counter)
            if claimed >= len(tasks):
                break
            entry, table = tasks[claimed]
            entry(table)
            mine += 1
        for _ in range(len(tasks) - mine):
            done.get()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool(threads: int) -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or len(_POOL.threads) < threads - 1:
            _POOL = _Pool(threads - 1)
        return _POOL


# --- native segments -------------------------------------------------------------------------

def _compile(program: kir.Program):
    native = engine.compile_program(program)
    if config.dump & {"kir", "llvm", "asm"}:
        out = sys.stderr
        if "kir" in config.dump:
            print(f"--- kiln: kernel IR of {program.name} ---\n{program}", file=out)
        if "llvm" in config.dump:
            print(f"--- kiln: LLVM IR of {program.name} ---\n"
                  f"{native.llvm_ir or native.unoptimized_ir}", file=out)
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
            renamed = {b: kir.Buffer(b.name, b.dtype, b.shape,
                                     "output" if b in stored else "input") for b in params}
            arguments = [renamed[b] for b in params if b not in stored] + \
                        [renamed[b] for b in params if b in stored]
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
            runtime = {dim: (kir.clamp(kir.Load(bounds, kir.as_index(0)), 0, extent),
                             kir.clamp(kir.Load(bounds, kir.as_index(1)), 0, extent))}
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
                chunk = _with_buffers(fusion.chunked_kernel(plan, group, {dim: (lo, hi)}),
                                      renamed)
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
        count = min(self.threads * CHUNKS_PER_THREAD, extent,
                    max(work // MIN_CHUNK_WORK, self.threads))
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
                    _pool(self.threads).run(tasks)
        finally:
            if reuse:
                self._temp_lock.release()

    def describe(self) -> str:
        program = self.program
        kernels = len(program.kernels)
        parts = [f"{kernels} kernel{'s' * (kernels != 1)}",
                 f"{len(program.temps)} temp{'s' * (len(program.temps) != 1)}"]
        if self.parallel:
            split = [f"{group.kernel.name} in {step.chunks} chunks"
                     for group, step in zip(self.plan.kernels, self.steps) if step.chunks > 1]
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
            return kir.Store(mapping.get(stmt.buffer, stmt.buffer), rewrite_expr(stmt.index),
                             rewrite_expr(stmt.value))
        if isinstance(stmt, kir.Loop):
            return kir.Loop(stmt.var, rewrite_expr(stmt.start), rewrite_expr(stmt.stop),
                            [rewrite_stmt(s) for s in stmt.body])
        return kir.If(rewrite_expr(stmt.cond), [rewrite_stmt(s) for s in stmt.body])

    return kir.Kernel(kernel.name, [rewrite_stmt(s) for s in kernel.body])


# --- the executable --------------------------------------------------------------------------

def _identifier(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name).strip("_") or "fn"
    return cleaned if not cleaned[0].isdigit() else f"fn_{cleaned}"


class NativeExecutable(Executable):
    """Runs a program natively where it can, through reference impls where it cannot (see the
    module docstring). Raises NotImplementedError when nothing in the program can be lowered,
    and the pipeline falls back to the interpreter."""

    backend = "native"

    def __init__(self, program: ClosedJaxpr, hidden_args: Sequence[Array], name: str):
        super().__init__(program, hidden_args, name)
        try:
            self._build(program, name)
        except NotImplementedError:
            raise
        except Exception as err:  # noqa: BLE001 - a backend bug must not break kiln.jit
            if STRICT:
                raise
            logger.warning("kiln: the native backend failed on %s (%s: %s); running it "
                           "through the interpreter", name, type(err).__name__, err)
            raise NotImplementedError(str(err)) from err

    def _build(self, program: ClosedJaxpr, name: str) -> None:
        jaxpr = program.jaxpr
        self._names = _Names()
        pp_jaxpr(jaxpr, self._names)  # name variables as the printed jaxpr does
        scalars = {}
        for var, value in zip(jaxpr.constvars, program.consts):
            host = np.asarray(value._value if isinstance(value, Array) else value)
            if host.ndim == 0 and host.dtype in kir.SUPPORTED_DTYPES:
                scalars[var] = host.item()
        self.stages = fusion.partition(jaxpr.eqns, jaxpr.outvars, lower.lowerable)
        if not any(stage.native and stage.eqns for stage in self.stages):
            raise NotImplementedError(f"nothing in {name} can be compiled natively")
        threads = num_threads()
        needed = self._needed_outside(jaxpr)
        self.segments: list = []
        base = _identifier(name)
        for number, stage in enumerate(self.stages):
            if not stage.native:
                self.segments.append(None)
                continue
            produced = [v for e in stage.eqns for v in e.outvars
                        if not isinstance(v, DropVar) and needed.get(id(v), set()) - {number}]
            if not produced:  # nothing leaves the stage: dead code the passes left
                stage.native, stage.eqns = False, []
                self.segments.append(None)
                continue
            plan = fusion.plan_segment(stage.eqns, produced, f"{base}_{number}", scalars,
                                       self._names)
            self.segments.append(NativeSegment(plan, threads))
        self.source, namespace = self._python_source(jaxpr, program.consts)
        code = compile(self.source, f"<kiln native: {name}>", "exec")
        exec(code, namespace)
        self.execute = namespace["entry"]

    def _needed_outside(self, jaxpr) -> dict:
        """For each value, the stages that read it (the jaxpr's outputs count as stage -1)."""
        stage_of_eqn = {}
        for number, stage in enumerate(self.stages):
            for eqn in stage.eqns:
                stage_of_eqn[id(eqn)] = number
        needed: dict = {}
        for eqn in jaxpr.eqns:
            for atom in eqn.invars:
                if type(atom) is not Literal:
                    needed.setdefault(id(atom), set()).add(stage_of_eqn[id(eqn)])
        for atom in jaxpr.outvars:
            if type(atom) is not Literal:
                needed.setdefault(id(atom), set()).add(-1)
        return needed

    # --- the generated call path -------------------------------------------------------------
    def _python_source(self, jaxpr, consts) -> tuple[str, dict]:
        namespace: dict[str, Any] = {
            "wrap": Array._wrap, "asarray": np.asarray, "empty": np.empty,
            "array_address": array_address, "host_buffer": host_buffer,
            "data_address": data_address, "from_address": _from_address,
            "OFFSET": _DATA_OFFSET, "lock": threading.Lock(),
        }
        fast = _FAST_ADDRESS
        names: dict = {}          # jaxpr var -> Python expression of its NumPy value
        addresses: dict = {}      # jaxpr var -> Python expression of its address (fixed ones)
        dense: set = set()        # vars whose local value is known to be a usable buffer

        def bind_global(prefix: str, value: Any) -> str:
            name = f"{prefix}{len(namespace)}"
            namespace[name] = value
            return name

        for var, const in zip(jaxpr.constvars, consts):
            host = np.asarray(const._value if isinstance(const, Array) else const)
            if host.dtype in kir.SUPPORTED_DTYPES:
                host = np.ascontiguousarray(host)
                dense.add(var)
            names[var] = bind_global("c", host)
        num_hidden = len(self.hidden_args)
        for var, value in zip(jaxpr.invars[:num_hidden], self.hidden_args):
            host = value._value if isinstance(value, Array) else np.asarray(value)
            host = np.ascontiguousarray(host)
            names[var] = bind_global("h", host)
            dense.add(var)
        user_vars = jaxpr.invars[num_hidden:]
        for var in list(names):
            if var in dense:
                addresses[var] = str(data_address(namespace[names[var]]))

        body: list[str] = []
        arg_names = {}
        if user_vars:
            body.append(f"{', '.join(f'a{i}' for i in range(len(user_vars)))}, = args")
            body.append("keep = []")
            for i, var in enumerate(user_vars):
                arg_names[var] = f"a{i}"
                names[var] = f"a{i}._value"

        def atom(a) -> str:
            if type(a) is Literal:
                return bind_global("l", np.asarray(a.val, dtype=a.aval.dtype))
            return names[a]

        def address_of(var) -> list[str]:
            """Lines computing var's address into `x`, and then nothing: returns the lines."""
            if var in addresses:
                return [f"x = {addresses[var]}"]
            if var in arg_names:
                arg = arg_names[var]
                return [f"x = {arg}._address",
                        f"if x is None: x = array_address({arg}, keep)"]
            value = names[var]
            if var not in dense:
                body.append(f"{value} = host_buffer({value}, {bind_global('d', var.aval.dtype)})")
                dense.add(var)
            if fast:
                return [f"x = from_address(id({value}) + OFFSET).value or 0"]
            return [f"x = data_address({value})"]

        local_count = [0]

        def new_local() -> str:
            local_count[0] += 1
            return f"v{local_count[0]}"

        for number, (stage, segment) in enumerate(zip(self.stages, self.segments)):
            if segment is None:
                for eqn in stage.eqns:
                    body.extend(impl_call_lines(eqn, atom, bind_global, new_local, names))
                continue
            outs = []
            for var in segment.outputs:
                local = new_local()
                shape = bind_global("s", var.aval.shape)
                dtype = bind_global("d", var.aval.dtype)
                body.append(f"{local} = empty({shape}, {dtype})")
                names[var] = local
                dense.add(var)
                outs.append(local)
            if segment.parallel:
                ins = []
                for var in segment.inputs:
                    for line in address_of(var):
                        body.append(line)
                    local = new_local()
                    body.append(f"{local} = x")
                    ins.append(local)
                runner = bind_global("run", segment.run_parallel)
                body.append(f"{runner}([{', '.join(ins)}], [{', '.join(outs)}])")
                continue
            table = bind_global("T", segment.table)
            table_address = bind_global("A", segment.table_address)
            entry = bind_global("E", segment.entry)
            for var in segment.inputs:
                slot = segment.slots[segment.plan.buffers[var]]
                fixed = addresses.get(var)
                if fixed is not None:
                    segment.table[slot] = int(fixed)  # written once, here
                    continue
                body.extend(address_of(var))
                body.append(f"{table}[{slot}] = x")
            for var, local in zip(segment.outputs, outs):
                slot = segment.slots[segment.plan.buffers[var]]
                if fast:
                    body.append(f"{table}[{slot}] = from_address(id({local}) + OFFSET).value"
                                + (" or 0" if 0 in var.aval.shape else ""))
                else:
                    body.append(f"{table}[{slot}] = data_address({local})")
            body.append(f"{entry}({table_address})")

        results = []
        for out in jaxpr.outvars:
            weak = out.aval.weak_type
            if type(out) is Literal:
                results.append(f"wrap({atom(out)}, {weak})")
            else:
                results.append(f"wrap({names[out]}, {weak})")
        body.append(f"return [{', '.join(results)}]")

        # Tables are shared by every call; a second thread calling at the same time takes the
        # slow path with private copies of them (the native code reads its table while the
        # GIL is released).
        tables = [n for n in namespace if n.startswith(("T", "A")) and n[1:].isdigit()]
        inner = "\n".join("    " + line for line in body)
        lines = [f"def run(args, {', '.join(tables)}):" if tables else "def run(args):",
                 inner or "    pass", "",
                 "def entry(args):"]
        call_args = ", ".join(["args"] + tables)
        if tables:
            lines += ["    if lock.acquire(False):",
                      "        try:",
                      f"            return run({call_args})",
                      "        finally:",
                      "            lock.release()",
                      "    return contended(args)"]
        else:
            lines += ["    return run(args)"]
        namespace["contended"] = self._contended_runner(namespace, tables)
        return "\n".join(lines) + "\n", namespace

    @staticmethod
    def _contended_runner(namespace: dict, tables: list[str]):
        def contended(args):
            fresh = []
            for name in tables:
                if name.startswith("T"):
                    fresh.append(namespace[name].copy())
                else:
                    fresh.append(data_address(fresh[-1]))
            return namespace["run"](args, *fresh)
        return contended

    # --- text --------------------------------------------------------------------------------
    def as_text(self) -> str:
        """The optimized jaxpr, then the native program: each native segment's kernels (the
        fusions) and, between them, the equations that run through reference impls."""
        lines = [self.program.pretty_print(), ""]
        native = sum(1 for s in self.segments if s is not None)
        interpreted = sum(len(st.eqns) for st, s in zip(self.stages, self.segments) if s is None)
        lines.append(f"native program: {native} native segment{'s' * (native != 1)}, "
                     f"{interpreted} interpreted equation{'s' * (interpreted != 1)}")
        for number, (stage, segment) in enumerate(zip(self.stages, self.segments)):
            if segment is None:
                for eqn in stage.eqns:
                    text = pp_eqn(eqn, self._names).format(100)
                    lines.append(f"interpreted (reference impl): {text}")
            else:
                lines.append(f"native segment {number} ({segment.describe()}):")
                lines.append(str(segment.program))
        return "\n".join(lines)


def _register() -> None:
    from kiln.compiler import pipeline
    pipeline.register_backend("native", NativeExecutable)


_register()

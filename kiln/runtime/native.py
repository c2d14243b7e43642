"""The native backend: an Executable that runs a program's fused kernels as machine code and
the equations it cannot lower through their reference impls, in one straight-line call.

At build time the optimized jaxpr is split into stages (compiler/fusion.py); each native stage
becomes a NativeSegment (kiln/runtime/native_segment.py: lowered to kernel IR, compiled to
native entries, its large kernels cut into chunks for the thread pool). The call path is Python
source generated once per executable, like the interpreter's: per call it only writes buffer
addresses into a preallocated int64 table (kiln/runtime/native_call.py), allocates the outputs
with np.empty, calls the entry through ctypes (which releases the GIL) and wraps the results.

Intermediates and segment temps live in scratch planned by liveness (kiln/runtime/memory_plan.py):
values that are never live together share memory, and the executable keeps the scratch between
calls (up to memory_plan.ARENA_MAX_BYTES); an output may take a donated argument's buffer.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import threading
from typing import Any, Sequence

import numpy as np

from kiln.compiler import kir, lower
from kiln.config import config
from kiln.core.array import Array
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Literal, _Names, name_variables, pp_eqn
from kiln.runtime.executable import Executable, impl_call_lines
from kiln.runtime.native_call import (
    DATA_OFFSET,
    FAST_ADDRESS,
    FirstCallOutputs,
    SmallOutputs,
    held_address,
    data_address,
    donated_buffer,
    from_address,
    host_buffer,
    touch_soon,
)
from kiln.primitives.control_flow import CONTROL_FLOW_PRIMITIVES
from kiln.runtime import llvm_prepare, memory_plan, program_cache
from kiln.runtime.cache import intern_signature
from kiln.runtime.native_segment import NativeSegment

__all__ = ["NativeExecutable", "num_threads"]

logger = logging.getLogger("kiln")


_CORES = max(1, os.cpu_count() or 1)  # (os.cpu_count costs microseconds: read it once)


_frozen_in: set[int] = set()  # the processes that froze their heap


def freeze_heap_once() -> None:
    """Once per process, before its first native compile (and after the compiler's modules
    are imported): move every object the cycle collector tracks to its permanent generation
    (gc.freeze), unless config.freeze_heap is off (KILN_FREEZE_HEAP=0).

    A full collection walks every tracked object: 45 to 65 thousand once kiln, NumPy and the
    compiler are imported, ~18 ms, and compiling a program allocates enough objects to start
    one (it took a tenth of the first call of a layernorm's gradient or an MLP step). Frozen
    objects are still freed when their last reference goes; only reference cycles among them
    (made before the freeze) are never collected."""
    pid = os.getpid()
    if pid in _frozen_in or not config.freeze_heap:
        return
    _frozen_in.add(pid)
    import gc

    gc.freeze()


def num_threads() -> int:
    """Threads a large kernel is split across: config.num_threads, else the core count."""
    if config.num_threads is not None:
        return max(1, config.num_threads)
    return _CORES


# --- the executable --------------------------------------------------------------------------


def _identifier(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name).strip("_") or "fn"
    return cleaned if not cleaned[0].isdigit() else f"fn_{cleaned}"


def _allocated_outputs(jaxpr) -> list:
    """The avals of the outputs a call of this jaxpr may allocate: each output variable once,
    inputs passed through and literals left out."""
    inputs = {id(v) for v in jaxpr.invars}
    seen: set[int] = set()
    avals = []
    for var in jaxpr.outvars:
        if isinstance(var, Literal) or id(var) in inputs or id(var) in seen:
            continue
        seen.add(id(var))
        avals.append(var.aval)
    return avals


def _is_control_flow(eqn) -> bool:
    """native_loops.is_control_flow, importing the loop machinery only for a loop or branch."""
    if eqn.primitive not in CONTROL_FLOW_PRIMITIVES:
        return False
    from kiln.runtime import native_loops

    return native_loops.is_control_flow(eqn)


class NativeExecutable(Executable):
    """Runs a program natively where it can, through reference impls where it cannot (see the
    module docstring). Raises NotImplementedError when nothing in the program can be lowered,
    and the pipeline falls back to the interpreter."""

    backend = "native"

    def __init__(
        self, program: ClosedJaxpr, hidden_args: Sequence[Array], name: str, raw: bool = False
    ):
        super().__init__(program, hidden_args, name)
        # raw: a loop body or branch (kiln/runtime/native_loops.py). Its `execute(values,
        # outs)` takes dense NumPy arrays and returns dense NumPy arrays, storing the outputs
        # that native code computes into the caller's `outs` buffers (one per output).
        self.raw = raw
        self._prepared = None  # (the first call's FirstCallOutputs, till the call path's)
        try:
            try:
                self._build(program, name)
            finally:
                if self._prepared is not None:  # (a failed build's: dropped)
                    self._prepared.release()
                    self._prepared = None
        except NotImplementedError:
            raise
        except Exception as err:  # noqa: BLE001 - a backend bug must not break kiln.jit
            if config.native_strict:
                raise
            logger.warning(
                "kiln: the native backend failed on %s (%s: %s); running it "
                "through the interpreter",
                name,
                type(err).__name__,
                err,
            )
            raise NotImplementedError(str(err)) from err

    def _build(self, program: ClosedJaxpr, name: str) -> None:
        from kiln.runtime import engine  # noqa: F401  (the compiler, imported before the freeze)

        freeze_heap_once()
        llvm_prepare.compile_begins()
        jaxpr = program.jaxpr
        if not self.raw:
            # The first call's large outputs, faulted in while the rest of the build runs.
            self._prepared = FirstCallOutputs.prepare(_allocated_outputs(jaxpr))
        self._names = _Names()
        name_variables(jaxpr, self._names)  # as the printed jaxpr names them
        scalars = {}
        for var, value in zip(jaxpr.constvars, program.consts):
            host = np.asarray(value._value if isinstance(value, Array) else value)
            if host.ndim == 0 and host.dtype in kir.SUPPORTED_DTYPES:
                scalars[var] = host.item()
        self.stages = program_cache.partition(jaxpr, lower.lowerable)
        has_loops = any(_is_control_flow(e) for e in jaxpr.eqns)
        if (
            not self.raw
            and not has_loops
            and not any(stage.native and stage.eqns for stage in self.stages)
        ):
            raise NotImplementedError(f"nothing in {name} can be compiled natively")
        threads = num_threads()
        needed = self._needed_outside(jaxpr)
        self.segments: list = []
        base = _identifier(name)
        for number, stage in enumerate(self.stages):
            if not stage.native:
                self.segments.append(None)
                continue
            produced = [
                v
                for e in stage.eqns
                for v in e.outvars
                if not isinstance(v, DropVar) and needed.get(id(v), set()) - {number}
            ]
            if not produced:  # nothing leaves the stage: dead code the passes left
                stage.native, stage.eqns = False, []
                self.segments.append(None)
                continue
            plan = program_cache.plan_segment(
                jaxpr, stage.eqns, produced, f"{base}_{number}", scalars, self._names
            )
            self.segments.append(NativeSegment(plan, threads, pass_temps=not self.raw))
        # Control flow (while, scan, cond) runs through compiled bodies, built here once.
        self.loops = {}
        if has_loops:
            from kiln.runtime import native_loops

            self.loops = {
                id(eqn): native_loops.build_runner(eqn, f"{base}_{n}")
                for n, eqn in enumerate(jaxpr.eqns)
                if native_loops.is_control_flow(eqn)
            }
        #: user argument positions whose buffers outputs may take (see `donate`)
        self.donated: tuple[int, ...] = ()
        self._generate()

    def _generate(self) -> None:
        """Plan the call's memory and generate its Python call path."""
        self.memory, self.donation = self._plan_memory()
        self.source, namespace = self._python_source(self.program.jaxpr, self.program.consts)
        code = compile(self.source, f"<kiln native: {self.name}>", "exec")
        exec(code, namespace)
        self.execute = namespace["entry"]

    def donate(self, positions: Sequence[int]) -> list[int]:
        """Let outputs take the buffers of the user arguments at `positions` (donated: the
        caller's Arrays are deleted when a call takes their buffer). Returns the positions no
        output can use."""
        self.donated = tuple(sorted(set(positions)))
        self._generate()
        used = set(self.donation.values())
        return [p for p in self.donated if p not in used]

    def memory_stats(self) -> memory_plan.MemoryStats:
        """What `compiled.memory_analysis()` reports (see memory_plan.MemoryStats)."""
        jaxpr = self.program.jaxpr
        plan = self.memory
        arguments = sum(memory_plan.nbytes_of(a) for a in self.in_avals)
        outputs = alias = 0
        for var in memory_plan.distinct_outputs(jaxpr.outvars):
            outputs += memory_plan.nbytes_of(var.aval)
            if type(var) is not Literal and var in self.donation:
                alias += memory_plan.nbytes_of(var.aval)
        internal = 0  # temps the entries allocate themselves (those not passed in)
        for segment in self.segments:
            if segment is not None:
                passed = set(segment.scratch)
                internal += sum(b.nbytes for b in segment.plan.temp_buffers if b not in passed)
        temps = plan.scratch_bytes + plan.unplanned_bytes + internal
        return memory_plan.make_stats(arguments, outputs, alias, temps)

    # --- memory ----------------------------------------------------------------------------
    def _plan_memory(self) -> tuple[memory_plan.MemoryPlan, dict]:
        """Liveness of the call's values, step by step (each kernel of a native segment, each
        equation run through an impl or a compiled loop is a step), then the plan: which
        intermediates share memory (memory_plan.Liveness), and which outputs take a donated
        argument's buffer ({output var: argument position})."""
        jaxpr = self.program.jaxpr
        live = memory_plan.Liveness()
        user_vars = jaxpr.invars[len(self.hidden_args) :]
        for position in self.donated:
            var = user_vars[position]
            live.define(var, memory_plan.nbytes_of(var.aval), -1, planned=False, temp=False)
        raw_outs = {v for v in jaxpr.outvars if type(v) is not Literal} if self.raw else set()
        self._stage_steps: dict[int, tuple[int, int]] = {}
        step = 0
        for number, (stage, segment) in enumerate(zip(self.stages, self.segments)):
            if segment is None:
                for eqn in stage.eqns:
                    operands = [a for a in eqn.invars if type(a) is not Literal]
                    for atom in operands:
                        live.read(atom, step)
                    fresh = (
                        id(eqn) not in self.loops
                        and eqn.primitive.name in memory_plan.FRESH_RESULT_PRIMITIVES
                    )
                    for var in eqn.outvars:
                        if isinstance(var, DropVar):
                            continue
                        live.define(var, memory_plan.nbytes_of(var.aval), step, planned=False)
                        if not fresh:
                            for atom in operands:
                                live.alias(var, atom)
                    if memory_plan.keeps_operands(eqn):
                        for atom in operands:
                            live.escape(atom)
                    step += 1
                continue
            count = max(1, len(segment.program.kernels))
            self._stage_steps[number] = (step, count)
            for var in segment.inputs:
                live.read(var, step + count - 1)
            for var in segment.outputs:
                nbytes = memory_plan.nbytes_of(var.aval)
                live.define(var, nbytes, step, planned=var not in raw_outs)
            for buffer in segment.scratch:
                first, last = segment.scratch_kernels[buffer]
                live.define((number, buffer), buffer.nbytes, step + first, planned=True)
                live.read((number, buffer), step + last)
            step += count
        for var in jaxpr.outvars:
            if type(var) is not Literal:
                live.read(var, step)
                live.escape(var)
        return live.plan(), self._plan_donation(live, user_vars)

    def _plan_donation(self, live: memory_plan.Liveness, user_vars) -> dict:
        """Outputs that can be written into a donated argument's buffer: one a native segment
        produces, of the argument's shape and dtype, where nothing reads the argument (or a
        view of it) after that segment starts, or only that segment reads it and writes the
        output in place (NativeSegment.writes_in_place)."""
        if self.raw or not self.donated:
            return {}
        producer = {
            var: number
            for number, segment in enumerate(self.segments)
            if segment is not None
            for var in segment.outputs
        }
        donation: dict = {}
        for out in self.program.jaxpr.outvars:
            if type(out) is Literal or out in donation or out not in producer:
                continue
            number = producer[out]
            segment = self.segments[number]
            first, count = self._stage_steps[number]
            for position in self.donated:
                var = user_vars[position]
                if position in donation.values() or var.aval.shape != out.aval.shape:
                    continue
                if var.aval.dtype != out.aval.dtype or 0 in var.aval.shape:
                    continue
                last, escapes = live.last_use(var)
                if escapes:
                    continue
                if last < first or (
                    last < first + count
                    and live.alone(var)
                    and var in segment.inputs
                    and segment.writes_in_place(
                        segment.plan.buffers[var], segment.plan.buffers[out]
                    )
                ):
                    donation[out] = position
                    break
        return donation

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
            "wrap": Array._wrap,
            "asarray": np.asarray,
            "empty": np.empty,
            "held_address": held_address,
            "host_buffer": host_buffer,
            "data_address": data_address,
            "from_address": from_address,
            "OFFSET": DATA_OFFSET,
            "lock": threading.Lock(),
        }
        fast = FAST_ADDRESS
        names: dict = {}  # jaxpr var -> Python expression of its NumPy value
        addresses: dict = {}  # jaxpr var -> Python expression of its address (fixed ones)
        dense: set = set()  # vars whose local value is known to be a usable buffer

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
        # Planned intermediates and temps: views of the scratch slots. Those of kept slots
        # come in as `scratch` (the executable's arena; a private set for a concurrent call),
        # the others are allocated here, per call.
        plan = self.memory
        entries = []
        for segment_number, segment in enumerate(self.segments):
            if segment is None:
                continue
            for var in segment.outputs:
                if var in plan.slot_of:
                    entries.append((var, var.aval.shape, var.aval.dtype))
            for buffer in segment.scratch:
                if (segment_number, buffer) in plan.slot_of:  # (all but empty ones)
                    entries.append(((segment_number, buffer), buffer.shape, buffer.dtype))
        if not self.raw:
            # The native outputs each call allocates, faulted in while the program compiles
            # (the segments compile below, as their entries are asked for).
            fresh = [
                var.aval
                for segment in self.segments
                if segment is not None
                for var in segment.outputs
                if var not in plan.slot_of and var not in self.donation
            ]
            FirstCallOutputs.install(namespace, fresh, self._prepared)
            self._prepared = None
        scratch_local: dict = {}
        kept_make = memory_plan.scratch_maker(plan, entries, kept=True)
        per_call_make = memory_plan.scratch_maker(plan, entries, kept=False)
        kept_keys = [e[0] for e in entries if plan.kept[plan.slot_of[e[0]]]]
        kept_bytes = sum(size for size, kept in zip(plan.sizes, plan.kept) if kept)
        prefilled = None  # (views, the job faulting them in)
        if kept_keys and not self.raw and kept_bytes >= FirstCallOutputs.MIN_BYTES:
            # The arena the first call would allocate, made now and faulted in while the
            # segments compile (below), like the first call's outputs: the layernorm+softmax
            # gradient's first run faulted its 1.9 MB of scratch in on both its threads.
            views = kept_make()
            prefilled = (views, touch_soon(views))
        per_call_keys = [e[0] for e in entries if not plan.kept[plan.slot_of[e[0]]]]
        for key in kept_keys + per_call_keys:
            scratch_local[key] = f"k{len(scratch_local)}"
        if kept_keys:
            body.append(f"{', '.join(scratch_local[k] for k in kept_keys)}, = scratch")
        if per_call_keys:
            maker = bind_global("scratch", per_call_make)
            body.append(f"{', '.join(scratch_local[k] for k in per_call_keys)}, = {maker}()")
        donated_into: dict = {}  # output local -> argument local, for outputs that take one
        arg_names = {}
        if user_vars:
            body.append(f"{', '.join(f'a{i}' for i in range(len(user_vars)))}, = args")
            for i, var in enumerate(user_vars):
                if self.raw:  # dense NumPy arrays already
                    names[var] = f"a{i}"
                    dense.add(var)
                    continue
                arg_names[var] = f"a{i}"
                names[var] = f"a{i}._value"
        out_position = {}
        if self.raw:
            for position, var in enumerate(jaxpr.outvars):
                if type(var) is not Literal:
                    out_position.setdefault(var, position)

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
                # (a copy made for a strided argument lives in a local until the call returns)
                return [f"x = {arg}._address", f"if x is None: x, k{arg} = held_address({arg})"]
            value = names[var]
            if var not in dense:
                body.append(f"{value} = host_buffer({value}, {bind_global('d', var.aval.dtype)})")
                dense.add(var)
            if fast:
                return [f"x = from_address(id({value}) + OFFSET).value or 0"]
            return [f"x = data_address({value})"]

        local_count = [0]
        known_address: dict[str, str] = {}  # output locals taken from a SmallOutputs pool

        def new_local() -> str:
            local_count[0] += 1
            return f"v{local_count[0]}"

        for number, (stage, segment) in enumerate(zip(self.stages, self.segments)):
            if segment is None:
                for eqn in stage.eqns:
                    runner = self.loops.get(id(eqn))
                    if runner is None:
                        body.extend(impl_call_lines(eqn, atom, bind_global, new_local, names))
                        continue
                    results = []
                    for var in eqn.outvars:
                        if isinstance(var, DropVar):
                            results.append("_")
                            continue
                        names[var] = new_local()
                        dense.add(var)  # runners return dense arrays
                        results.append(names[var])
                    operands = ", ".join(atom(a) for a in eqn.invars)
                    call = f"{bind_global('loop', runner)}({operands})"
                    body.append(f"{', '.join(results)}, = {call}" if results else call)
                continue
            outs = []
            for var in segment.outputs:
                if var in scratch_local:
                    names[var] = scratch_local[var]
                    dense.add(var)
                    outs.append(names[var])
                    continue
                local = new_local()
                if var in out_position:
                    body.append(f"{local} = outs[{out_position.pop(var)}]")
                    names[var] = local
                    dense.add(var)
                    outs.append(local)
                    continue
                shape = bind_global("s", var.aval.shape)
                dtype = bind_global("d", var.aval.dtype)
                allocate = f"{local} = empty({shape}, {dtype})"
                if (
                    fast
                    and var not in self.donation
                    and SmallOutputs.fits(var.aval.shape, var.aval.dtype)
                ):
                    pool = SmallOutputs(var.aval.shape, var.aval.dtype)
                    ready, refill = bind_global("P", pool.ready), bind_global("R", pool.refill)
                    address = known_address[local] = f"_p{local[1:]}"
                    body.append(f"try: {local}, {address} = {ready}.pop()")
                    body.append(f"except IndexError: {local}, {address} = {refill}()")
                elif var in self.donation:
                    # The donated argument's own buffer, when nothing else can see it.
                    arg = f"a{self.donation[var]}"
                    body.append(f"{local} = take({arg}, args)")
                    body.append(f"if {local} is None: {allocate}")
                    donated_into[local] = arg
                else:
                    body.append(allocate)
                names[var] = local
                dense.add(var)
                outs.append(local)
            temps = []
            for buffer in segment.scratch:
                local = scratch_local.get((number, buffer))
                if local is None:
                    local = new_local()
                    shape, dtype = bind_global("s", buffer.shape), bind_global("d", buffer.dtype)
                    body.append(f"{local} = empty({shape}, {dtype})")
                temps.append(local)
            if segment.parallel:
                ins = []
                for var in segment.inputs:
                    for line in address_of(var):
                        body.append(line)
                    local = new_local()
                    body.append(f"{local} = x")
                    ins.append(local)
                runner = bind_global("run", segment.run_parallel)
                extra = f", [{', '.join(temps)}]" if temps else ""
                body.append(f"{runner}([{', '.join(ins)}], [{', '.join(outs)}]{extra})")
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
            written = [(segment.plan.buffers[v], local) for v, local in zip(segment.outputs, outs)]
            written += list(zip(segment.scratch, temps))
            for buffer, local in written:
                slot = segment.slots[buffer]
                if local in known_address:
                    body.append(f"{table}[{slot}] = {known_address[local]}")
                elif fast:
                    body.append(
                        f"{table}[{slot}] = from_address(id({local}) + OFFSET).value"
                        + (" or 0" if 0 in buffer.shape else "")
                    )
                else:
                    body.append(f"{table}[{slot}] = data_address({local})")
            body.append(f"{entry}({table_address})")

        results = []
        for out in jaxpr.outvars:
            if self.raw:
                if type(out) is Literal:
                    results.append(atom(out))
                elif out in dense:
                    results.append(names[out])
                else:
                    results.append(f"host_buffer({names[out]}, {bind_global('d', out.aval.dtype)})")
                continue
            weak = out.aval.weak_type
            if type(out) is Literal:
                results.append(f"wrap({atom(out)}, {weak})")
            else:
                signature = intern_signature(
                    (tuple(out.aval.shape), np.dtype(out.aval.dtype), bool(weak))
                )
                results.append(f"wrap({names[out]}, {weak}, {bind_global('g', signature)})")
        for local, arg in donated_into.items():
            body.append(f"if {local} is {arg}._value: {arg}.delete()")
        body.append(f"return [{', '.join(results)}]")

        # Tables and the scratch arena are shared by every call; a second thread calling at
        # the same time takes the slow path with private copies of them (the native code
        # reads its table while the GIL is released).
        tables = [n for n in namespace if n.startswith(("T", "A")) and n[1:].isdigit()]
        inner = "\n".join("    " + line for line in body)
        params = ["args", "outs"] if self.raw else ["args"]
        shared = tables + (["scratch"] if kept_keys else [])
        lines = [
            f"def run({', '.join(params + shared)}):",
            inner or "    pass",
            "",
            f"def entry({', '.join(params)}):",
        ]
        call_args = ", ".join(params + tables + (["arena.views or fill()"] if kept_keys else []))
        if shared and body:
            # run's body inlined (the tables are the globals of the same names): one Python
            # frame less on the uncontended path.
            lines += ["    if lock.acquire(False):", "        try:"]
            if kept_keys:
                lines.append("            scratch = arena.views or fill()")
            lines += ["            " + line for line in body]
            lines += ["        finally:", "            lock.release()"]
            lines += [f"    return contended({', '.join(params)})"]
        elif shared:
            lines += [
                "    if lock.acquire(False):",
                "        try:",
                f"            return run({call_args})",
                "        finally:",
                "            lock.release()",
                f"    return contended({', '.join(params)})",
            ]
        else:
            lines += [f"    return run({call_args})"]
        arena = memory_plan.Arena()  # the kept slots' views, allocated by the first call
        if prefilled is not None:  # (or now, faulted in while the segments compiled)
            views, touched = prefilled
            touched.result()
            memory_plan.fill(arena, lambda: views, kept_bytes)

        def fill() -> tuple:
            return memory_plan.fill(arena, kept_make, kept_bytes)

        namespace.update(arena=arena, fill=fill, take=donated_buffer)
        namespace["contended"] = self._contended_runner(
            namespace, tables, kept_make if kept_keys else None
        )
        return "\n".join(lines) + "\n", namespace

    @staticmethod
    def _contended_runner(namespace: dict, tables: list[str], make_scratch):
        def contended(*args):
            fresh = []
            for name in tables:
                if name.startswith("T"):
                    table = namespace[name]
                    fresh.append(type(table).from_buffer_copy(table))
                else:
                    fresh.append(ctypes.addressof(fresh[-1]))
            if make_scratch is not None:
                fresh.append(make_scratch())
            return namespace["run"](*args, *fresh)

        return contended

    # --- text --------------------------------------------------------------------------------
    def as_text(self) -> str:
        """The optimized jaxpr, then the native program: each native segment's kernels (the
        fusions) and, between them, the equations that run through reference impls."""
        lines = [self.program.pretty_print(), ""]
        native = sum(1 for s in self.segments if s is not None)
        interpreted = sum(
            1
            for st, s in zip(self.stages, self.segments)
            if s is None
            for e in st.eqns
            if id(e) not in self.loops
        )
        lines.append(
            f"native program: {native} native segment{'s' * (native != 1)}, "
            f"{interpreted} interpreted equation{'s' * (interpreted != 1)}"
        )
        for number, (stage, segment) in enumerate(zip(self.stages, self.segments)):
            if segment is None:
                for eqn in stage.eqns:
                    text = pp_eqn(eqn, self._names).format(100)
                    runner = self.loops.get(id(eqn))
                    how = (
                        "interpreted (reference impl)"
                        if runner is None
                        else f"compiled {eqn.primitive} ({runner.describe()})"
                    )
                    lines.append(f"{how}: {text}")
            else:
                lines.append(f"native segment {number} ({segment.describe()}):")
                lines.append(str(segment.program))
        return "\n".join(lines)


def _register() -> None:
    from kiln.compiler import pipeline

    pipeline.register_backend("native", NativeExecutable)


_register()

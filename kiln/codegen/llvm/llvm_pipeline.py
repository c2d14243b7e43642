"""The LLVM optimization pipeline and object emission, with no dependency beyond llvmlite.

Kept free of kiln imports so that the optimizer worker process (llvm_worker.py) can load it by
path without importing the kiln package.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import byref, c_char_p, string_at

import llvmlite.binding as llvm
from llvmlite.binding import ffi


#: The pipelines by name: (speed level, vectorize, unroll and interleave). "full" is the O3
#: pipeline; "lean" vectorizes at O2 without unrolling or interleaving, in about two thirds of
#: the time (kiln's kernels, vectorized along their inner loop, ran as fast with it); "quick"
#: (with a code generator at level 0, see create_machine) is for kernels that run for
#: microseconds: a fifth of the time. "vector" is for a module whose loops kiln emitted as
#: vector code already (codegen/llvm/emit_vector.py): it inlines, promotes stack slots to
#: registers and cleans up (VECTOR_PASSES), a tenth of the O2 pipeline's time. "quick vector"
#: is "quick" for such a module: VECTOR_PASSES, then the level-0 code generator. On the
#: layernorm+softmax gradient's combining kernel, the O1 passes took 6.5 ms and these 2.5; on
#: the seed's chain of 500 multiplies, 30 and 10-17 ms, for the same object code size.
PIPELINES = {
    "full": (3, True, True),
    "lean": (2, True, False),
    "quick": (1, False, False),
    "vector": (2, False, False),
    "quick vector": (2, False, False),
}
#: The pipelines that run VECTOR_PASSES rather than LLVM's default pipeline at their level.
SHORT_PIPELINES = frozenset({"vector", "quick vector"})
#: The code generator level each pipeline's modules are emitted with (create_machine's opt).
CODEGEN_LEVELS = {"full": 3, "lean": 3, "quick": 0, "vector": 3, "quick vector": 0}
#: The "vector" pipeline's passes, in order (new pass manager methods of llvmlite's): inline
#: kernels into their entry, promote accumulators to registers, clean up, then rotate loops
#: (one branch per iteration) and number values (GVN: the address arithmetic and reloads the
#: loops of one kernel share). The last three made layernorm+softmax's kernels ~20% faster
#: and cost about what they save in code generation.
VECTOR_PASSES = (
    "add_always_inliner_pass",
    "add_sroa_pass",
    "add_instruction_combine_pass",
    "add_simplify_cfg_pass",
    "add_loop_rotate_pass",
    "add_new_gvn_pass",
    "add_instruction_combine_pass",
)


#: LLVM command-line options set once in every process that generates kiln's code (this one
#: and the optimizer worker: configure). First, three code generator passes that cost half
#: of the code generation of kiln's modules and gave nothing back on them. kiln's loops are
#: emitted as straight vector strips with one induction variable, so loop strength reduction
#: has little to rewrite, and on out-of-order x86 cores the two instruction schedulers
#: (before and after register allocation) did not change the speed of the kernels measured
#: (the layernorm+softmax forward and gradient, vmath, reductions, scans, integer maps:
#: within the noise, on one thread and two). Code generation of the layernorm+softmax forward's
#: two modules went from 7.2 and 5.0 ms to 4.6 and 3.5 ms (an empty module: 1.2 to 0.8 ms).
#: Those three change no value a kernel computes (no pass there reorders floating-point
#: arithmetic). The fourth does, on purpose: at level 0 (the "quick" pipelines, small
#: kernels) LLVM selected scalar code with fast instruction selection, which never fuses a
#: `contract` multiply and add into one FMA, where level 3, and vector code at level 0,
#: fuse them. So x * y + z rounded twice in a small program and once in a large one; XLA
#: fuses it at every size. With fast instruction selection off, level 0 uses the selector of
#: the other levels and fuses alike: the same program gives the same bits at every size
#: and pipeline, and JAX's. It costs ~0.9 ms of a small module's 3 ms of code generation
#: (the first calls of 12 small programs: 14-20 ms each with it, 18-21 without).
#: They are part of the cache tag through target.PIPELINE_VERSION.
CODEGEN_OPTIONS = (
    "-disable-lsr",
    "-enable-misched=false",
    "-post-RA-scheduler=false",
    "-fast-isel=false",
)

_configured: list = []
_configure_lock = threading.Lock()


def configure() -> None:
    """Set CODEGEN_OPTIONS in this process, once, before its first code generation (the
    options are process-wide, read as each compile builds its passes; the lock keeps it
    once when two threads start their first compiles together)."""
    with _configure_lock:
        if not _configured:
            for option in CODEGEN_OPTIONS:
                llvm.set_option("kiln", option)
            _configured.append(True)


def _unlocked(name: str):
    """llvmlite's C function `name` called without its process-wide lock (ctypes still
    releases the GIL), or the locked wrapper when this llvmlite does not expose the raw one."""
    wrapper = getattr(ffi.lib, name)
    return getattr(wrapper, "_cfn", wrapper)


_HELD: dict = {}


def _held(name: str):
    """llvmlite's C function `name` called without its lock and *holding* the GIL (a
    PYFUNCTYPE prototype of the same address), for calls of microseconds: a compile thread
    that releases the GIL for such a call must then wait for it, while the emitting thread
    holds it for Python work, up to a switch interval each time (the helper's verification,
    0.15 ms of work, took 0.9-1.9 ms so). Falls back to _unlocked where llvmlite does not
    expose the raw function."""
    function = _HELD.get(name)
    if function is None:
        raw = _unlocked(name)
        if isinstance(raw, ffi._lib_fn_wrapper) or not hasattr(raw, "argtypes"):
            function = raw
        else:
            prototype = ctypes.PYFUNCTYPE(raw.restype, *(raw.argtypes or ()))
            function = prototype(ctypes.cast(raw, ctypes.c_void_p).value)
        _HELD[name] = function
    return function


class Passes:
    """One of PIPELINES built for a machine, to run on any number of modules: its pass builder
    and, for the short pipelines (SHORT_PIPELINES), its pass manager, made once (LLVM makes
    the analysis managers afresh for each run). Building them is some twenty short llvmlite
    calls; a thread that compiles while another holds the GIL for Python work waits for the
    GIL after each of them, so the compile threads build their passes once
    (kiln.runtime.llvm_threads) and a module's optimization is then one call. Building a
    pipeline also leaks a little memory each time (a reused short pipeline ~0.1 KB per
    module, a new one per module ~7 KB). LLVM's default pipeline (the other pipelines) runs
    only once, a second run crashes, so it is built for each module. Like its machine, a
    Passes is used by one thread at a time."""

    __slots__ = ("pipeline", "builder", "_short", "_late", "_tuning")

    def __init__(self, machine: llvm.TargetMachine, pipeline: str = "full"):
        speed, vectorize, unroll = PIPELINES[pipeline]
        tuning = llvm.create_pipeline_tuning_options(speed_level=speed)
        tuning.loop_vectorization = vectorize
        tuning.slp_vectorization = vectorize
        tuning.loop_unrolling = unroll
        tuning.loop_interleaving = unroll
        self.pipeline = pipeline
        self._tuning = tuning  # (the builder refers to it)
        self.builder = llvm.create_pass_builder(machine, tuning)
        self._short = self._late = None
        if pipeline in SHORT_PIPELINES:
            self._short = llvm.create_new_module_pass_manager()
            for name in VECTOR_PASSES:
                getattr(self._short, name)()
        else:
            # vmath's vector variants (alwaysinline) stay out of line until the loop
            # vectorizer calls them; inlining them afterwards puts their rarely taken branch
            # in the loop, not a call.
            self._late = llvm.create_new_module_pass_manager()
            self._late.add_always_inliner_pass()

    def managers(self) -> tuple:
        """The pass managers to run on one module, in order."""
        if self._short is not None:
            return (self._short,)
        return (self.builder.getModulePassManager(), self._late)

    def run(self, module: llvm.ModuleRef, concurrent: bool = False) -> None:
        """Run the pipeline on a module in place; `concurrent`: without llvmlite's lock (see
        optimize)."""
        for manager in self.managers():
            if concurrent:
                _unlocked("LLVMPY_RunNewModulePassManager")(manager, module, self.builder)
            else:
                manager.run(module, self.builder)


def optimize(
    module: llvm.ModuleRef,
    machine: llvm.TargetMachine,
    pipeline: str = "full",
    concurrent: bool = False,
    passes: Passes | None = None,
) -> None:
    """Run one of PIPELINES on a module in place (default: the O3 pipeline with loop and SLP
    vectorization, unrolling and interleaving).

    Callers serialize calls that share a machine. `concurrent`: run the pipeline without
    llvmlite's lock, so that other threads' LLVM calls proceed meanwhile; only for a module in
    a private context with a machine no other thread uses (see compile_private). `passes`:
    the pipeline built already for this machine (else it is built for this call).
    """
    if passes is None or passes.pipeline != pipeline:
        passes = Passes(machine, pipeline)
    passes.run(module, concurrent)


def create_machine(triple: str, cpu: str, features: str, opt: int = 3) -> llvm.TargetMachine:
    """A TargetMachine (JIT code model) for a triple, CPU and feature string; `opt` is its
    code generator's level (0: fast instruction selection and register allocation)."""
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=opt, codemodel="jitdefault", jit=True
    )


def emit_object(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> bytes:
    """The object file of an optimized module (instruction selection, register allocation)."""
    return machine.emit_object(module)


def emit_object_unlocked(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> bytes:
    """emit_object without llvmlite's lock (same conditions as optimize(concurrent=True))."""
    with ffi.OutputString() as error:
        buffer = _unlocked("LLVMPY_TargetMachineEmitToMemory")(machine, module, 1, error)
        if not buffer:
            raise RuntimeError(str(error))
    try:
        return string_at(
            _held("LLVMPY_GetBufferStart")(buffer), _held("LLVMPY_GetBufferSize")(buffer)
        )
    finally:
        _held("LLVMPY_DisposeMemoryBuffer")(buffer)


def _string_out(name: str, module: llvm.ModuleRef) -> tuple[object, str]:
    """(result, text) of llvmlite's C function `name`(module, char **out), a short one,
    called without llvmlite's lock and holding the GIL (see _held), the string freed after
    it is copied."""
    out = c_char_p(None)
    result = _held(name)(module, byref(out))
    try:
        return result, (out.value or b"").decode("utf8")
    finally:
        if out.value is not None:
            _held("LLVMPY_DisposeString")(out)


def verify_unlocked(module: llvm.ModuleRef) -> None:
    """module.verify() without llvmlite's lock (same conditions as optimize(concurrent=True)):
    a compile thread would otherwise wait for the lock while another thread parses; and
    holding the GIL, as it takes a fraction of a millisecond (see _held). (Not so printing:
    llvmlite's PrintModuleToString switches the process's locale while it runs.)"""
    failed, message = _string_out("LLVMPY_VerifyModule", module)
    if failed:
        raise RuntimeError(message)


def compile_private(
    ir_text: str, machine: llvm.TargetMachine, pipeline: str = "full"
) -> tuple[str, bytes]:
    """optimize_to_object in a fresh LLVM context, with the two long steps (the pass pipeline
    and code generation) run without llvmlite's process-wide lock: threads that each call this
    with their own machine compile at the same time. The machine code is the same as
    optimize_to_object's for the same module, pipeline and machine settings."""
    context = llvm.create_context()
    module = llvm.parse_assembly(ir_text, context=context)
    result = compile_module_private(module, machine, pipeline)
    del module  # (before its context)
    return result


def compile_module_private(
    module: llvm.ModuleRef,
    machine: llvm.TargetMachine,
    pipeline: str = "full",
    passes: Passes | None = None,
    text: bool = True,
) -> tuple[str | None, bytes]:
    """compile_private of a module parsed into a context of its own (`passes`: see
    optimize); `text`: print the optimized module (else None in its place: see
    optimize_module)."""
    verify_unlocked(module)
    optimize(module, machine, pipeline, concurrent=True, passes=passes)
    # (The text under llvmlite's lock: printing a module sets the process's locale to "C"
    # and back, which two threads printing at once would leave at "C".)
    return (str(module) if text else None), emit_object_unlocked(module, machine)


def optimize_to_object(
    ir_text: str, machine: llvm.TargetMachine, pipeline: str = "full"
) -> tuple[str, bytes]:
    """Parse, verify and optimize a module's text; return (optimized IR, object file)."""
    return optimize_module(llvm.parse_assembly(ir_text), machine, pipeline)


def optimize_module(
    module: llvm.ModuleRef,
    machine: llvm.TargetMachine,
    pipeline: str = "full",
    passes: Passes | None = None,
    text: bool = True,
) -> tuple[str | None, bytes]:
    """Verify and optimize a parsed module in place; return (optimized IR, object file)
    (`passes`: see optimize). `text=False` skips printing the optimized module (None in
    its place): ~0.3 ms of a layernorm+softmax module, longer when another thread holds
    llvmlite's lock to parse, for a text that only dumps, tests and assembly read (the
    engine makes it again from the same IR when asked: the passes are deterministic)."""
    module.verify()
    optimize(module, machine, pipeline, passes=passes)
    return (str(module) if text else None), emit_object(module, machine)

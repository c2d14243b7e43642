"""The LLVM optimization pipeline and object emission, with no dependency beyond llvmlite.

Kept free of kiln imports so that the optimizer worker process (llvm_worker.py) can load it by
path without importing the kiln package.
"""

from __future__ import annotations

from ctypes import string_at

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


def _unlocked(name: str):
    """llvmlite's C function `name` called without its process-wide lock (ctypes still
    releases the GIL), or the locked wrapper when this llvmlite does not expose the raw one."""
    wrapper = getattr(ffi.lib, name)
    return getattr(wrapper, "_cfn", wrapper)


def optimize(
    module: llvm.ModuleRef,
    machine: llvm.TargetMachine,
    pipeline: str = "full",
    concurrent: bool = False,
) -> None:
    """Run one of PIPELINES on a module in place (default: the O3 pipeline with loop and SLP
    vectorization, unrolling and interleaving).

    Callers serialize calls that share a machine. `concurrent`: run the pipeline without
    llvmlite's lock, so that other threads' LLVM calls proceed meanwhile; only for a module in
    a private context with a machine no other thread uses (see compile_private).
    """
    speed, vectorize, unroll = PIPELINES[pipeline]
    tuning = llvm.create_pipeline_tuning_options(speed_level=speed)
    tuning.loop_vectorization = vectorize
    tuning.slp_vectorization = vectorize
    tuning.loop_unrolling = unroll
    tuning.loop_interleaving = unroll
    pass_builder = llvm.create_pass_builder(machine, tuning)
    if pipeline in SHORT_PIPELINES:
        short = llvm.create_new_module_pass_manager()
        for name in VECTOR_PASSES:
            getattr(short, name)()
        managers = (short,)
    else:
        # vmath's vector variants (alwaysinline) stay out of line until the loop vectorizer
        # calls them; inlining them afterwards puts their rarely taken branch in the loop,
        # not a call.
        late = llvm.create_new_module_pass_manager()
        late.add_always_inliner_pass()
        managers = (pass_builder.getModulePassManager(), late)
    for manager in managers:
        if concurrent:
            _unlocked("LLVMPY_RunNewModulePassManager")(manager, module, pass_builder)
        else:
            manager.run(module, pass_builder)


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
            ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer)
        )
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


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
    module: llvm.ModuleRef, machine: llvm.TargetMachine, pipeline: str = "full"
) -> tuple[str, bytes]:
    """compile_private of a module parsed into a context of its own."""
    module.verify()
    optimize(module, machine, pipeline, concurrent=True)
    return str(module), emit_object_unlocked(module, machine)


def optimize_to_object(
    ir_text: str, machine: llvm.TargetMachine, pipeline: str = "full"
) -> tuple[str, bytes]:
    """Parse, verify and optimize a module's text; return (optimized IR, object file)."""
    return optimize_module(llvm.parse_assembly(ir_text), machine, pipeline)


def optimize_module(
    module: llvm.ModuleRef, machine: llvm.TargetMachine, pipeline: str = "full"
) -> tuple[str, bytes]:
    """Verify and optimize a parsed module in place; return (optimized IR, object file)."""
    module.verify()
    optimize(module, machine, pipeline)
    return str(module), emit_object(module, machine)

"""The LLVM optimization pipeline and object emission, with no dependency beyond llvmlite.

Kept free of kiln imports so that the optimizer worker process (llvm_worker.py) can load it by
path without importing the kiln package.
"""

from __future__ import annotations

import llvmlite.binding as llvm


#: The pipelines by name: (speed level, vectorize, unroll and interleave). "full" is the O3
#: pipeline; "lean" vectorizes at O2 without unrolling or interleaving, in about two thirds of
#: the time (kiln's kernels, vectorized along their inner loop, ran as fast with it); "quick"
#: (with a code generator at level 0, see create_machine) is for kernels that run for
#: microseconds: a fifth of the time.
PIPELINES = {"full": (3, True, True), "lean": (2, True, False), "quick": (1, False, False)}
#: The code generator level each pipeline's modules are emitted with (create_machine's opt).
CODEGEN_LEVELS = {"full": 3, "lean": 3, "quick": 0}


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine, pipeline: str = "full") -> None:
    """Run one of PIPELINES on a module in place (default: the O3 pipeline with loop and SLP
    vectorization, unrolling and interleaving).

    Callers serialize calls that share a machine.
    """
    speed, vectorize, unroll = PIPELINES[pipeline]
    tuning = llvm.create_pipeline_tuning_options(speed_level=speed)
    tuning.loop_vectorization = vectorize
    tuning.slp_vectorization = vectorize
    tuning.loop_unrolling = unroll
    tuning.loop_interleaving = unroll
    pass_builder = llvm.create_pass_builder(machine, tuning)
    pass_builder.getModulePassManager().run(module, pass_builder)
    # vmath's vector variants (alwaysinline) stay out of line until the loop vectorizer calls
    # them; inlining them now puts their rarely taken branch in the loop instead of a call.
    late = llvm.create_new_module_pass_manager()
    late.add_always_inliner_pass()
    late.run(module, pass_builder)


def create_machine(triple: str, cpu: str, features: str, opt: int = 3) -> llvm.TargetMachine:
    """A TargetMachine (JIT code model) for a triple, CPU and feature string; `opt` is its
    code generator's level (0: fast instruction selection and register allocation)."""
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=opt, codemodel="jitdefault", jit=True
    )


def emit_object(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> bytes:
    """The object file of an optimized module (instruction selection, register allocation)."""
    return machine.emit_object(module)


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

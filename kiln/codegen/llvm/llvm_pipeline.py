"""The LLVM optimization pipeline and object emission, with no dependency beyond llvmlite.

Kept free of kiln imports so that the optimizer worker process (llvm_worker.py) can load it by
path without importing the kiln package.
"""

from __future__ import annotations

import llvmlite.binding as llvm


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    """Run the new pass manager's O3 pipeline (loop and SLP vectorization, unrolling) in place.

    Callers serialize calls that share a machine.
    """
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    tuning.loop_interleaving = True
    pass_builder = llvm.create_pass_builder(machine, tuning)
    pass_builder.getModulePassManager().run(module, pass_builder)
    # vmath's vector variants (alwaysinline) stay out of line until the loop vectorizer calls
    # them; inlining them now puts their rarely taken branch in the loop instead of a call.
    late = llvm.create_new_module_pass_manager()
    late.add_always_inliner_pass()
    late.run(module, pass_builder)


def create_machine(triple: str, cpu: str, features: str) -> llvm.TargetMachine:
    """A TargetMachine (opt level 3, JIT code model) for a triple, CPU and feature string."""
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, codemodel="jitdefault", jit=True
    )


def optimize_to_object(ir_text: str, machine: llvm.TargetMachine) -> tuple[str, bytes]:
    """Parse, verify and optimize a module's text; return (optimized IR, object file)."""
    module = llvm.parse_assembly(ir_text)
    module.verify()
    optimize(module, machine)
    return str(module), machine.emit_object(module)

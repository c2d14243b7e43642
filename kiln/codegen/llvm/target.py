"""The host target: this CPU's triple, name and features, the TargetMachine for it, and the O3
pass pipeline.

A JIT engine takes ownership of the TargetMachine it is given and frees it when the engine is
freed, so every engine gets a machine of its own from create_machine(), and optimizing or
printing assembly goes through the owning engine's machine.
"""
import functools
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm

#: Bump when emission or the pipeline changes in a way that changes generated code for the same
#: kernel IR text; it is part of every persistent cache key.
PIPELINE_VERSION = "kiln-llvm-1"


@dataclass(frozen=True)
class HostTarget:
    """What kiln compiles for: the process triple, the host CPU and its feature string."""
    triple: str
    cpu_name: str
    features: str
    data_layout: str

    @property
    def has_avx512(self) -> bool:
        return "+avx512f" in self.features.split(",")

    @property
    def cache_tag(self) -> str:
        """Everything besides the IR that decides the machine code (for cache keys)."""
        return "|".join([PIPELINE_VERSION, llvmlite.__version__, self.triple, self.cpu_name,
                         self.features])

    def create_machine(self) -> llvm.TargetMachine:
        """A new TargetMachine for the host (opt level 3, JIT code model)."""
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu_name, features=self.features, opt=3,
                                            codemodel="jitdefault", jit=True)


@functools.cache
def host_target() -> HostTarget:
    """The host description, computed once per process."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    cpu_name = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    probe = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu_name,
                                                                  features=features)
    return HostTarget(triple, cpu_name, features, str(probe.target_data))


def function_attributes() -> dict[str, str]:
    """String attributes every kernel function carries.

    LLVM keeps to 256-bit vectors on AVX-512 parts unless told otherwise; kernels are long
    streaming loops where the wider vectors pay off.
    """
    if host_target().has_avx512:
        return {"prefer-vector-width": "512"}
    return {}


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    """Run the new pass manager's O3 pipeline (loop and SLP vectorization, unrolling) in place.

    Callers serialize calls that share a machine (the engine's lock).
    """
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    tuning.loop_interleaving = True
    pass_builder = llvm.create_pass_builder(machine, tuning)
    pass_builder.getModulePassManager().run(module, pass_builder)

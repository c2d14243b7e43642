"""What kiln compiles for: the target CPU (the host, or an override), its TargetMachine, and the
O3 pass pipeline.

By default kiln compiles for the host CPU with every feature it has. `KILN_CPU` and
`KILN_CPU_FEATURES` (or `config.update("kiln_cpu", ...)`, `"kiln_cpu_features"`) name another
target, for instance a baseline that every machine of a fleet can run (`x86-64-v3`), so that
code generated on one machine behaves as it would on another. Features are LLVM's `+name`/
`-name` list, applied after the CPU's own (the host's when the CPU is `host`).

Emission asks `current_target()`; the engine compiling a program pins its target for the
duration with `compiling_for`, so emission, optimization and the disk cache agree.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

from kiln.codegen.llvm import llvm_pipeline
from kiln.config import config

#: Bump when emission or the pipeline changes in a way that changes generated code for the same
#: kernel IR text; it is part of every persistent cache key.
PIPELINE_VERSION = "kiln-llvm-6"

#: CPU names (LLVM's) whose definition includes AVX-512F. Only consulted for a named CPU given
#: without an explicit +avx512f/-avx512f.
_AVX512_CPUS = frozenset(
    {
        "x86-64-v4",
        "knl",
        "knm",
        "skylake-avx512",
        "skx",
        "cascadelake",
        "cooperlake",
        "cannonlake",
        "icelake-client",
        "icelake-server",
        "tigerlake",
        "rocketlake",
        "sapphirerapids",
        "emeraldrapids",
        "graniterapids",
        "graniterapids-d",
        "diamondrapids",
        "znver4",
        "znver5",
    }
)

#: Baseline targets that the codegen tests also compile for, with the host features each needs
#: to run. x86-64-v3 (AVX2, FMA, F16C, no AVX-512) runs on every x86-64 CPU of the last decade;
#: x86-64-v4 is AVX-512 F/BW/CD/DQ/VL without the FP16 and BF16 extensions (as on AMD Zen 4).
BASELINES = {
    "x86-64-v3": (
        "x86-64-v3",
        "-avx512f",
        frozenset({"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe"}),
    ),
    "x86-64-v4": (
        "x86-64-v4",
        "-avx512fp16,-avx512bf16",
        frozenset(
            {
                "avx",
                "avx2",
                "bmi",
                "bmi2",
                "f16c",
                "fma",
                "lzcnt",
                "movbe",
                "avx512f",
                "avx512bw",
                "avx512cd",
                "avx512dq",
                "avx512vl",
            }
        ),
    ),
}


@dataclass(frozen=True)
class Target:
    """A triple, a CPU name and the feature string LLVM is given for it."""

    triple: str
    cpu_name: str
    features: str
    data_layout: str
    is_host: bool = False

    def _feature_flag(self, name: str) -> bool | None:
        """The last explicit +name/-name in the feature string, None if absent."""
        return self._flags.get(name)

    @functools.cached_property
    def _flags(self) -> dict[str, bool]:
        """{feature: whether its last explicit +/- entry in the feature string adds it},
        parsed once (a host's string has a few hundred entries; emission asks per kernel)."""
        flags: dict[str, bool] = {}
        for item in self.features.split(","):
            if item[:1] in ("+", "-") and len(item) > 1:
                flags[item[1:]] = item[0] == "+"
        return flags

    @property
    def has_avx512(self) -> bool:
        flag = self._feature_flag("avx512f")
        return flag if flag is not None else self.cpu_name in _AVX512_CPUS

    @property
    def vector_bytes(self) -> int:
        """The width of the vectors kernels compute in: the 512-bit registers where the
        target has AVX-512 (see function_attributes), 256 bits with AVX2, else 128."""
        if self.has_avx512:
            return 64
        flag = self._feature_flag("avx2")
        if flag if flag is not None else self.cpu_name in BASELINES:
            return 32
        return 16

    @property
    def has_f16c(self) -> bool:
        """float32 <-> float16 conversions in hardware (every x86-64-v3 CPU)."""
        flag = self._feature_flag("f16c")
        if flag is not None:
            return flag
        return self.cpu_name in BASELINES or self.cpu_name in _AVX512_CPUS

    @property
    def has_avx512fp16(self) -> bool:
        """float64 -> float16 in hardware (only known from an explicit feature)."""
        return bool(self._feature_flag("avx512fp16"))

    @property
    def cache_tag(self) -> str:
        """Everything besides the IR that decides the machine code (for cache keys)."""
        return "|".join(
            [PIPELINE_VERSION, llvmlite.__version__, self.triple, self.cpu_name, self.features]
        )

    def create_machine(self, opt: int = 3) -> llvm.TargetMachine:
        """A new TargetMachine for this target (JIT code model; `opt`: its code generator's
        level, llvm_pipeline.create_machine): at level 3 first the one that found the data
        layout, unused so far."""
        if opt == 3:
            spare = _spare_machines.pop(self, None)
            if spare is not None:
                return spare
        return llvm_pipeline.create_machine(self.triple, self.cpu_name, self.features, opt)

    def describe(self) -> str:
        return f"{self.cpu_name}" + (f" ({self.features})" if not self.is_host else " (host)")


def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm_pipeline.configure()


_host: list = []  # [the host's Target], once made
_host_lock = threading.Lock()


def host_target() -> Target:
    """The host CPU with all its features, computed once per process (a thread that asks
    while another computes it waits for that one: runtime/llvm_prepare.py makes it on LLVM's
    helper thread after import)."""
    if _host:
        return _host[0]
    with _host_lock:
        if not _host:
            _initialize()
            triple = llvm.get_process_triple()
            cpu_name = llvm.get_host_cpu_name()
            features = llvm.get_host_cpu_features().flatten()
            _host.append(_make_target(triple, cpu_name, features, is_host=True))
    return _host[0]


def _make_target(triple: str, cpu_name: str, features: str, is_host: bool = False) -> Target:
    # The machine that tells the data layout is made as a compile's would be and kept as the
    # target's first create_machine(3) (~0.2 ms of a process's first compile).
    probe = llvm_pipeline.create_machine(triple, cpu_name, features, 3)
    target = Target(triple, cpu_name, features, str(probe.target_data), is_host)
    _spare_machines[target] = probe
    return target


#: {Target: an unused level-3 machine for it}: the one _make_target made (see create_machine).
_spare_machines: dict = {}


def host_features() -> frozenset[str]:
    """The names of the features the host CPU has."""
    return frozenset(item[1:] for item in host_target().features.split(",") if item.startswith("+"))


@functools.lru_cache(maxsize=32)
def make_target(cpu: str = "host", features: str = "", runnable: bool = True) -> Target:
    """The target for a CPU name ("host" or an LLVM CPU name such as "x86-64-v3") with extra
    +/- features applied after the CPU's own. runnable=False allows a target this machine
    cannot run (to inspect the code generated for it)."""
    host = host_target()
    cpu = (cpu or "host").strip()
    features = ",".join(f.strip() for f in (features or "").split(",") if f.strip())
    if cpu == "host" and not features:
        return host
    if cpu == "host":
        target = _make_target(host.triple, host.cpu_name, f"{host.features},{features}")
    else:
        target = _make_target(host.triple, cpu, features)
    if runnable:
        _check_runnable(target)
    return target


def _check_runnable(target: Target) -> None:
    """Refuse a target whose code would use instructions the host lacks (that would crash
    with an illegal instruction instead of an error)."""
    needed = {item[1:] for item in target.features.split(",") if item.startswith("+")}
    if target.cpu_name in BASELINES:
        needed |= BASELINES[target.cpu_name][2]
    if target.cpu_name in _AVX512_CPUS and target.has_avx512:
        needed.add("avx512f")
    missing = sorted(needed - host_features())
    if missing:
        raise ValueError(
            f"kiln: the target CPU {target.cpu_name!r} (features {target.features!r}) needs "
            f"{', '.join(missing)}, which this machine's CPU ({host_target().cpu_name}) lacks; "
            "code compiled for it could not run here. Set KILN_CPU to 'host' or to a baseline "
            "this machine supports, such as 'x86-64-v3'."
        )


def baseline_target(name: str) -> Target:
    """One of BASELINES as a Target (cross-checked against the host by host_can_run)."""
    cpu, features, _ = BASELINES[name]
    return make_target(cpu, features)


def host_can_run(name: str) -> bool:
    """Whether the host has every feature the named baseline's code may use."""
    return BASELINES[name][2] <= host_features()


_pinned = threading.local()


def current_target() -> Target:
    """The target code is generated for now: the one being compiled for, else the configured
    one (config.cpu / config.cpu_features, from KILN_CPU / KILN_CPU_FEATURES)."""
    pinned = getattr(_pinned, "target", None)
    if pinned is not None:
        return pinned
    return make_target(config.cpu, config.cpu_features)


@contextlib.contextmanager
def compiling_for(target: Target):
    """Emit for `target` inside the block (this thread only)."""
    previous = getattr(_pinned, "target", None)
    _pinned.target = target
    try:
        yield target
    finally:
        _pinned.target = previous


class StringAttributes(ir.FunctionAttributes):
    """llvmlite's function attributes plus "key"="value" string attributes, which it cannot
    spell (the target's, a vector variant's name, stack probing)."""

    def __init__(self, strings: dict[str, str]):
        super().__init__()
        self.strings = dict(strings)

    def _to_list(self, ret_type):
        return super()._to_list(ret_type) + [f'"{k}"="{v}"' for k, v in self.strings.items()]


def kernel_attributes() -> StringAttributes:
    """A fresh attribute set for a generated function: the target's strings (see
    function_attributes); callers add their own flags."""
    return StringAttributes(function_attributes())


def function_attributes() -> dict[str, str]:
    """String attributes every kernel function carries.

    LLVM keeps to 256-bit vectors on AVX-512 parts unless told otherwise; kernels are long
    streaming loops where the wider vectors pay off.
    """
    if current_target().has_avx512:
        return {"prefer-vector-width": "512"}
    return {}


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    """Run kiln's O3 pipeline on a module in place (see llvm_pipeline)."""
    llvm_pipeline.optimize(module, machine)

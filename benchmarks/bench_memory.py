"""Memory planning of native programs: step time and memory of training-step workloads with
buffer reuse and the scratch arena on and off, next to JAX.

Rows (kiln configurations; the program is compiled afresh for each):
  fresh      no reuse, no arena: every intermediate and segment temp allocated per call
             (what the native backend did before it planned memory)
  reuse      intermediates share memory by liveness; scratch allocated per call
  reuse+arena  the default: shared scratch kept by the executable between calls

Prints the median step time and its ratio to JAX (measured in the same run), and from
memory_analysis() the temp size and peak (JAX's temp size too), plus the scratch the
executable keeps while idle (its arena). Figures from shared machines are noisy: compare
ratios measured in the same run.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench_autodiff as bench  # noqa: E402
from _harness import jax_available, result_row  # noqa: E402

import kiln  # noqa: E402
from kiln.runtime import memory_plan  # noqa: E402

CONFIGS = {
    "fresh": (False, 0),
    "reuse": (True, 0),
    "reuse+arena": (True, memory_plan.ARENA_MAX_BYTES),
}


def kiln_row(workload, config: str, numpy_inputs) -> dict:
    reuse, arena = CONFIGS[config]
    saved = memory_plan.REUSE_BUFFERS, memory_plan.ARENA_MAX_BYTES
    memory_plan.REUSE_BUFFERS, memory_plan.ARENA_MAX_BYTES = reuse, arena
    try:
        system = bench.kiln_system()
        args = system.tree_map(system.to_device, numpy_inputs)
        jitted = kiln.jit(workload.build(system))
        jitted.clear_cache()  # (equal functions share cache entries: compile afresh)
        compiled = jitted.lower(*args).compile()
        stats = compiled.memory_analysis()
        plan = compiled._entry.executable.memory
        kept = sum(size for size, k in zip(plan.sizes, plan.kept) if k)
        step, _ = bench.median_time(lambda: system.block(compiled(*args)), budget=3.0)
        return {
            "step": step,
            "temp": stats.temp_size_in_bytes,
            "peak": stats.peak_memory_in_bytes,
            "kept": kept,
        }
    finally:
        memory_plan.REUSE_BUFFERS, memory_plan.ARENA_MAX_BYTES = saved


def jax_row(workload, numpy_inputs) -> dict:
    system = bench.jax_system()
    args = system.tree_map(system.to_device, numpy_inputs)
    compiled = system.jit(workload.build(system)).lower(*args).compile()
    stats = compiled.memory_analysis()
    step, _ = bench.median_time(lambda: system.block(compiled(*args)), budget=3.0)
    return {"step": step, "temp": stats.temp_size_in_bytes}


def main(quick: bool = False) -> list:
    workloads = [bench.layernorm_softmax(4096, 1024), bench.mlp_sgd((784, 512, 512, 10), 128)]
    if quick:
        workloads = [bench.layernorm_softmax(1024, 256), bench.mlp_sgd((784, 128, 10), 64)]
    mib = 1 << 20
    rows = []
    for workload in workloads:
        numpy_inputs = workload.inputs()
        jax = jax_row(workload, numpy_inputs) if jax_available() else None
        print(f"\n{workload.name}")
        print(f"  {'':12} {'step':>10} {'/JAX':>6} {'temp MiB':>9} {'peak MiB':>9} {'kept MiB':>9}")
        for config in CONFIGS:
            row = kiln_row(workload, config, numpy_inputs)
            rows.append((workload.name, config, row, jax))
            ratio = f"{row['step'] / jax['step']:6.2f}" if jax else "     -"
            print(
                f"  {config:12} {row['step'] * 1e3:8.2f}ms {ratio} {row['temp'] / mib:9.2f} "
                f"{row['peak'] / mib:9.2f} {row['kept'] / mib:9.2f}"
            )
        if jax:
            print(f"  {'jax':12} {jax['step'] * 1e3:8.2f}ms {1:6.2f} {jax['temp'] / mib:9.2f}")
    return rows


def report_rows(quick: bool = False) -> list[dict]:
    """The step times in the combined report's format, the memory figures as the note."""
    mib = 1 << 20
    return [
        result_row(
            f"memory: {name} step, {config}",
            row["step"],
            None,
            jax["step"] if jax else None,
            note=f"temp {row['temp'] / mib:.2f} MiB, peak {row['peak'] / mib:.2f} MiB, "
            f"kept {row['kept'] / mib:.2f} MiB"
            + (f" (JAX temp {jax['temp'] / mib:.2f} MiB)" if jax else ""),
        )
        for name, config, row, jax in main(quick)
    ]


if __name__ == "__main__":
    main("--quick" in sys.argv)

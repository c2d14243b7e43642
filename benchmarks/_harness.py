"""Timing helpers for the benchmarks: best-of-N timing and side-by-side tables with ratios.
Benchmarks print figures; they never assert on time (these machines are shared and noisy)."""

from __future__ import annotations

import importlib.util
import timeit
from typing import Callable


def best_time(fn: Callable[[], object], repeat: int = 7, min_total: float = 0.2) -> float:
    """Seconds per call: the best of `repeat` runs of an auto-sized loop."""
    fn()
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    number = max(1, int(number * min_total / 0.2))
    return min(timer.repeat(repeat=repeat, number=number)) / number


def jax_available() -> bool:
    return importlib.util.find_spec("jax") is not None


def format_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:8.2f} {unit}"
    return f"{seconds * 1e9:8.1f} ns"


def print_table(
    title: str, rows: list[tuple[str, dict[str, float | None]]], baseline: str = "kiln"
) -> None:
    """rows: (workload, {system: seconds or None}); prints times and system/baseline ratios."""
    systems = []
    for _, times in rows:
        for name in times:
            if name not in systems:
                systems.append(name)
    print(f"\n{title}")
    header = f"{'workload':44s}" + "".join(f"{s:>14s}" for s in systems)
    header += "".join(f"{baseline + '/' + s:>14s}" for s in systems if s != baseline)
    print(header)
    print("-" * len(header))
    for name, times in rows:
        line = f"{name:44s}"
        for s in systems:
            t = times.get(s)
            line += f"{format_time(t) if t is not None else 'n/a':>14s}"
        base = times.get(baseline)
        for s in systems:
            if s == baseline:
                continue
            t = times.get(s)
            line += f"{(base / t) if base and t else float('nan'):>13.2f}x"
        print(line)


def result_row(
    name: str,
    kiln: float | None,
    numpy: float | None = None,
    jax: float | None = None,
    note: str = "",
) -> dict:
    """One row of the combined report (benchmarks/run_all.py): seconds per call of each system,
    None where a system does not run the workload."""
    return {"name": name, "kiln": kiln, "numpy": numpy, "jax": jax, "note": note}


def rows_of(results) -> list[dict]:
    """Combined-report rows from (name, {system: seconds}) pairs, as print_table takes them."""
    return [
        result_row(name, times["kiln"], times.get("numpy"), times.get("jax"))
        for name, times in results
    ]

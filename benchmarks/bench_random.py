"""Random numbers: 4M uniforms, normals, Bernoulli draws, bounded integers and raw bits, under
jit and eagerly, kiln vs JAX (if present). kiln draws the same numbers as JAX bit for bit in
the same counter layout; both layouts are timed (`jax_threefry_partitionable` off, kiln's
default, and on, JAX 0.10's).
Run: .venv/bin/python benchmarks/bench_random.py
"""

from __future__ import annotations

from _harness import best_time, jax_available, print_table, result_row

import kiln
import kiln.random as kr
from kiln.config import config

N = 4 * 1024 * 1024


def _workloads(n: int) -> list[tuple]:
    count = f"{n // (1024 * 1024)}M"
    return [
        (f"uniform, {count} float32", lambda r: lambda k: r.uniform(k, (n,))),
        (f"normal, {count} float32", lambda r: lambda k: r.normal(k, (n,))),
        (f"bernoulli, {count} p=0.3", lambda r: lambda k: r.bernoulli(k, 0.3, (n,))),
        (f"randint, {count} int32", lambda r: lambda k: r.randint(k, (n,), 0, 100)),
        (f"bits, {count} uint32", lambda r: lambda k: r.bits(k, (n,))),
    ]


def _jax_time(make, partitionable: bool, jit: bool, repeat: int) -> float | None:
    if not jax_available():
        return None
    import jax

    previous = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", partitionable)
    try:
        fn = make(jax.random)
        fn = jax.jit(fn) if jit else fn
        key = jax.random.PRNGKey(0)
        return best_time(lambda: fn(key).block_until_ready(), repeat=repeat, min_total=0.05)
    finally:
        jax.config.update("jax_threefry_partitionable", previous)


def main(quick: bool = False) -> list:
    n = N // 4 if quick else N
    repeat = 3 if quick else 5
    rows = []
    previous = config.threefry_partitionable
    try:
        for partitionable in (False, True):
            config.update("jax_threefry_partitionable", partitionable)
            layout = "partitionable" if partitionable else "flat"
            key = kr.PRNGKey(0)
            for name, make in _workloads(n):
                fn = make(kr)
                jitted = kiln.jit(fn)
                for mode, call in (("jit", jitted), ("eager", fn)):
                    times = {
                        "kiln": best_time(lambda: call(key), repeat=repeat, min_total=0.05),
                        "jax": _jax_time(make, partitionable, mode == "jit", repeat),
                    }
                    rows.append((f"{mode} {name} ({layout})", times))
    finally:
        config.update("jax_threefry_partitionable", previous)
    print_table("Random numbers (ratio > 1 means kiln is slower)", rows)
    return rows


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format."""
    return [
        result_row(f"random {name}", times["kiln"], None, times.get("jax"))
        for name, times in main(quick)
    ]


if __name__ == "__main__":
    main()

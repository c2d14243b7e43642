"""How kiln.jit's compile time grows with the program, next to JAX's (figures, no asserts).

Run: .venv/bin/python benchmarks/bench_compile.py
JAX runs in a separate interpreter: this one if it imports jax, else $KILN_BENCH_JAX_PYTHON
(e.g. a scratch virtualenv's python), else it is left out.

Each figure is one first call of a freshly jitted function (trace, optimize, fuse, emit,
LLVM), measured in a fresh subprocess so nothing is cached and the peak memory is the
program's own:
  * scaling: a chain of n elementwise equations for n = 100 .. 10,000, and a random DAG
    (each op combines the previous value with a random earlier one, so every value stays
    live); the log-log slope of time against n is reported (1.0 is linear);
  * x = roll(x, 1) + x repeated 16 times: every value feeds two consumers at different
    indices, which fused without a limit copies the expression 2**16 times.
The machine is shared and noisy: compare figures from one run.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _harness import result_row  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAIN_SIZES = (100, 300, 1000, 3000, 10000)
DAG_SIZES = (100, 300, 1000, 3000, 5000)
QUICK_SIZES = (100, 300, 1000)
ROLL_DEPTH = 16

# The programs, written once against a numpy-like namespace `jnp`, and the timed first call.
_PROGRAMS = r"""
import json, resource, sys, time
import numpy as np

def chain(jnp, n):
    def f(x):
        for k in range(n):
            x = x * 1.0001 if k % 3 == 0 else x + 0.5 if k % 3 == 1 else jnp.maximum(x, -1.0)
        return x
    return f

def dag(jnp, n, seed=0):
    rng = np.random.default_rng(seed)
    picks = [(int(rng.integers(0, k + 1)), int(rng.integers(0, 3))) for k in range(n)]
    def f(x):
        values = [x]
        for other, op in picks:
            u, v = values[-1], values[other]
            values.append(u + v if op == 0 else u * v if op == 1 else u - v)
        return values[-1]
    return f

def roll(jnp, n):
    def f(x):
        for _ in range(n):
            x = jnp.roll(x, 1) + x
        return x
    return f

def measure(system, kind, n):
    x = np.linspace(-0.5, 0.5, 1024, dtype=np.float32)
    if system == "kiln":
        import kiln, kiln.numpy as jnp
        jitted = kiln.jit(globals()[kind](jnp, n))
        run = lambda: jitted(x)
    else:
        import jax, jax.numpy as jnp
        jax.config.update("jax_platforms", "cpu")
        jitted = jax.jit(globals()[kind](jnp, n))
        run = lambda: jitted(x).block_until_ready()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_mb": peak / 1024, "import_mb": before / 1024}

print(json.dumps(measure(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
"""


def jax_python() -> str | None:
    if importlib.util.find_spec("jax") is not None:
        return sys.executable
    candidate = os.environ.get("KILN_BENCH_JAX_PYTHON")
    return candidate if candidate and pathlib.Path(candidate).exists() else None


def run_one(python: str, system: str, kind: str, n: int, timeout: float = 600) -> dict | None:
    """One measurement in a fresh interpreter; None if it failed or ran out of time."""
    # kiln's dependencies may come through PYTHONPATH when this interpreter is JAX's.
    inherited = os.environ.get("PYTHONPATH", "")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), inherited]))
        if system == "kiln"
        else "",
    )
    try:
        done = subprocess.run(
            [python, "-c", _PROGRAMS, system, kind, str(n)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        print(f"  ({system} {kind} {n} failed: {done.stderr.strip().splitlines()[-1:]})")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def loglog_slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(seconds) against log(n)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def scaling(kind: str, sizes) -> list[tuple[int, float]]:
    print(f"\n{kind}: equations vs kiln compile time (first call, fresh process)")
    print(f"{'equations':>10s}{'seconds':>10s}{'peak MB':>10s}{'(after import)':>16s}  figure")
    points = []
    for n in sizes:
        result = run_one(sys.executable, "kiln", kind, n)
        if result is None:
            print(f"{n:>10d}{'failed':>10s}")
            continue
        points.append((n, result["seconds"]))
        bar = "#" * max(1, round(10 * math.log10(1 + 10 * result["seconds"])))
        print(
            f"{n:>10d}{result['seconds']:>10.2f}{result['peak_mb']:>10.0f}"
            f"{result['import_mb']:>16.0f}  {bar}"
        )
    if len(points) >= 2:
        # The smallest programs are dominated by fixed costs (imports of LLVM passes, the
        # first module); the slope over the larger half says how the work itself grows.
        tail = points[len(points) // 2 - 1 :] if len(points) > 3 else points
        print(
            f"log-log slope: {loglog_slope(points):.2f} over all sizes, "
            f"{loglog_slope(tail):.2f} from n={tail[0][0]} (1.0 is linear)"
        )
    return points


def main(quick: bool = False) -> list[dict]:
    print("kiln compile scaling (each figure: one first call in a fresh process)")
    report = []
    for kind, sizes in (
        ("chain", QUICK_SIZES if quick else CHAIN_SIZES),
        ("dag", QUICK_SIZES if quick else DAG_SIZES),
    ):
        points = scaling(kind, sizes)
        if len(points) >= 2:
            report.append(
                result_row(
                    f"compile: {kind} of {points[-1][0]} eqns, first call",
                    points[-1][1],
                    note=f"log-log slope {loglog_slope(points):.2f} from n={points[0][0]}",
                )
            )
    jax_py = jax_python()
    print(f"\nroll program, x = roll(x, 1) + x, {ROLL_DEPTH} times, first call")
    kiln_roll = run_one(sys.executable, "kiln", "roll", ROLL_DEPTH)
    jax_roll = run_one(jax_py, "jax", "roll", ROLL_DEPTH) if jax_py else None
    line = f"  kiln {kiln_roll['seconds']:.3f} s" if kiln_roll else "  kiln failed"
    if jax_roll:
        line += f"   jax {jax_roll['seconds']:.3f} s"
        if kiln_roll:
            line += f"   kiln/jax {kiln_roll['seconds'] / jax_roll['seconds']:.2f}x"
    else:
        line += "   jax not available (set KILN_BENCH_JAX_PYTHON)"
    print(line)
    report.append(
        result_row(
            f"compile: roll(x, 1) + x {ROLL_DEPTH} times, first call",
            kiln_roll and kiln_roll["seconds"],
            None,
            jax_roll and jax_roll["seconds"],
        )
    )
    if jax_py:
        print("\nthe same programs under jax.jit (first call, fresh process)")
        pairs = (("chain", 1000),) if quick else (("chain", 1000), ("chain", 10000), ("dag", 5000))
        for kind, n in pairs:
            result = run_one(jax_py, "jax", kind, n)
            kiln_result = run_one(sys.executable, "kiln", kind, n)
            if result and kiln_result:
                print(
                    f"  {kind} {n:>6d}: kiln {kiln_result['seconds']:7.2f} s"
                    f"   jax {result['seconds']:7.2f} s"
                )
                report.append(
                    result_row(
                        f"compile: {kind} of {n} eqns vs jax, first call",
                        kiln_result["seconds"],
                        None,
                        result["seconds"],
                    )
                )
    return report


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format; `quick` compiles smaller programs."""
    return main(quick)


if __name__ == "__main__":
    main()

"""Compiled loops: jitted fori_loop and scan, kiln next to JAX on CPU (when installed), with
kiln/JAX ratios.

Run: .venv/bin/python benchmarks/bench_loops.py (JAX columns need an interpreter that imports
both, e.g. PYTHONPATH=.:.venv/lib/python3.11/site-packages <jax venv>/bin/python ...)
Figures only; nothing here asserts on time. The workloads:
  1. fori_loop of 1000 steps on 2 floats (per-iteration overhead dominates);
  2. the same with the trip count an argument (a while loop: condition and body each step);
  3. the same as 1 on 256 floats;
  4. a scan RNN, T=100, B=32, H=256, h = tanh(h @ W + x_t @ U + b), forward (the final
     hidden state's sum);
  5. the same, forward and backward: value_and_grad w.r.t. W, U and b (a backward scan).
Every kiln row runs before the JAX rows, so the two systems' threads never compete.
"""

from __future__ import annotations

import math
import pathlib
import sys
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import kiln  # noqa: E402
import kiln.numpy as knp  # noqa: E402
from _harness import best_time, jax_available, print_table, result_row  # noqa: E402


def _fori(lax, size: int, steps: int) -> Callable:
    def f(x):
        def body(i, c):
            return c * 0.999 + 0.001 * c * c

        return lax.fori_loop(0, steps, body, x)

    return f


def _fori_traced(lax) -> Callable:
    def f(x, steps):
        def body(i, c):
            return c * 0.999 + 0.001 * c * c

        return lax.fori_loop(0, steps, body, x)

    return f


def _rnn_forward(jnp, lax) -> Callable:
    def loss(W, U, b, xs, h0):
        def cell(h, x_t):
            return jnp.tanh(h @ W + x_t @ U + b), None

        h, _ = lax.scan(cell, h0, xs)
        return jnp.sum(h)

    return loss


def _rnn_inputs(steps: int, batch: int, hidden: int) -> tuple:
    rng = np.random.default_rng(2)
    scale = 1.0 / math.sqrt(hidden)
    return (
        scale * rng.standard_normal((hidden, hidden), dtype=np.float32),
        scale * rng.standard_normal((hidden, hidden), dtype=np.float32),
        np.zeros(hidden, np.float32),
        rng.standard_normal((steps, batch, hidden), dtype=np.float32),
        np.zeros((batch, hidden), np.float32),
    )


def workloads(quick: bool = False) -> list[tuple[str, Callable[[Any], tuple]]]:
    """(name, build(system) -> (function, NumPy inputs)); system is (jnp, lax, value_and_grad)."""
    steps = 100 if quick else 1000
    t, b, h = (10, 4, 16) if quick else (100, 32, 256)

    def fori(size):
        def build(system):
            jnp, lax, _ = system
            return _fori(lax, size, steps), (np.linspace(0.1, 0.9, size).astype(np.float32),)

        return build

    def fori_traced(size):
        def build(system):
            _, lax, _ = system
            x = np.linspace(0.1, 0.9, size).astype(np.float32)
            return _fori_traced(lax), (x, np.int32(steps))

        return build

    def rnn(backward):
        def build(system):
            jnp, lax, value_and_grad = system
            f = _rnn_forward(jnp, lax)
            if backward:
                f = value_and_grad(f, argnums=(0, 1, 2))
            return f, _rnn_inputs(t, b, h)

        return build

    return [
        (f"fori_loop {steps} steps, 2 floats", fori(2)),
        (f"fori_loop to a traced {steps}, 2 floats", fori_traced(2)),
        (f"fori_loop {steps} steps, 256 floats", fori(256)),
        (f"scan RNN T={t} B={b} H={h} forward", rnn(False)),
        (f"scan RNN T={t} B={b} H={h} fwd+bwd", rnn(True)),
    ]


def _time(jit, block, to_device, system, build) -> float | None:
    try:
        fn, inputs = build(system)
        jitted = jit(fn)
        args = tuple(to_device(a) for a in inputs)
        return best_time(lambda: block(jitted(*args)), repeat=5)
    except Exception as err:  # a failing workload must not stop the others
        print(f"  failed: {type(err).__name__}: {err}".splitlines()[0][:200])
        return None


def run(quick: bool = False) -> list[tuple[str, dict]]:
    rows = []
    kiln_system = (knp, kiln.lax, kiln.value_and_grad)
    for name, build in workloads(quick):
        rows.append(
            (
                name,
                {"kiln": _time(kiln.jit, kiln.block_until_ready, knp.asarray, kiln_system, build)},
            )
        )
    if jax_available():
        import jax

        jax.config.update("jax_platforms", "cpu")
        jax_system = (jax.numpy, jax.lax, jax.value_and_grad)
        for (name, build), (_, times) in zip(workloads(quick), rows):
            times["jax"] = _time(jax.jit, jax.block_until_ready, jax.device_put, jax_system, build)
    else:
        print("jax not installed: JAX columns skipped")
    print_table("jitted loops (per call)", rows)
    return rows


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format (no NumPy column)."""
    return [
        result_row(f"loops: {name}", times.get("kiln"), None, times.get("jax"))
        for name, times in run(quick)
    ]


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)

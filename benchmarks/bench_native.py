"""The native backend next to NumPy and JAX (when importable): kiln.jit's fused kernels on the
workloads its fusion is built for.

Run: .venv/bin/python benchmarks/bench_native.py
With JAX: PYTHONPATH=/work/main /tmp/jaxenv/bin/python benchmarks/bench_native.py

Workloads (float32 throughout):
  * selu on x = arange(1_000_000) as float32 (the seed's definition; the seed's x is int32,
    whose selu is float32 too, but its exp overflows everywhere; float32 input is stated here);
  * a layernorm followed by a softmax over the rows of a 4096x1024 matrix;
  * logsumexp over the rows of a 2048x2048 matrix;
  * a chain of 10 elementwise ops on 10M elements.
The machine is shared and noisy: each figure is the best single call over many calls, and the
systems are measured in alternating rounds, so a busy spell hits them all alike. Figures only;
nothing here asserts on time. KILN_NUM_THREADS=1 measures kiln on one core.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
import time
from typing import Callable

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import kiln  # noqa: E402
import kiln.numpy as kjnp  # noqa: E402
from kiln import lax as klax  # noqa: E402
from kiln import nn as knn  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _harness import result_row  # noqa: E402

HAVE_JAX = importlib.util.find_spec("jax") is not None
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))


def best_call(fn: Callable[[], object], seconds: float = 0.4, max_calls: int = 400) -> float:
    """The fastest single call of fn within a time budget (after one warm-up call)."""
    fn()
    best = float("inf")
    start = time.perf_counter()
    calls = 0
    while calls < max_calls and time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        calls += 1
    return best


# --- the workloads, written once against a jnp/lax/nn namespace -------------------------------


def selu(jnp, x, alpha=1.67, lambda_=1.05):
    return lambda_ * jnp.where(x > 0, x, alpha * jnp.exp(x) - alpha)


def layernorm_softmax(jnp, lax, nn, x, g, b):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    y = (x - mean) * lax.rsqrt(var + 1e-5) * g + b
    return nn.softmax(y, axis=-1)


def logsumexp_rows(nn, x):
    return nn.logsumexp(x, axis=1)


def chain10(jnp, x):
    y = x * 1.001
    y = y + 0.5
    y = y * x
    y = y - 0.25
    y = jnp.abs(y)
    y = y * 0.5
    y = y + x
    y = jnp.maximum(y, 0.1)
    y = y * 2.0
    y = y - 1.0
    return y


# --- NumPy references (eager, float32) -----------------------------------------------------------


def np_selu(x, alpha=1.67, lambda_=1.05):
    with np.errstate(over="ignore"):
        return np.float32(lambda_) * np.where(
            x > 0, x, np.float32(alpha) * np.exp(x) - np.float32(alpha)
        )


def np_layernorm_softmax(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float32(1e-5)) * g + b
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_logsumexp(x):
    m = x.max(1, keepdims=True)
    return np.log(np.exp(x - m).sum(1)) + m[:, 0]


def np_chain10(x):
    y = x * np.float32(1.001)
    y += np.float32(0.5)
    y *= x
    y -= np.float32(0.25)
    np.abs(y, out=y)
    y *= np.float32(0.5)
    y += x
    np.maximum(y, np.float32(0.1), out=y)
    y *= np.float32(2.0)
    y -= np.float32(1.0)
    return y


def workloads(quick: bool = False):
    """(name, goal, inputs, builder, NumPy function) per workload; `quick` shrinks them."""
    rng = np.random.default_rng(0)
    n_selu, ln_rows, lse_side, n_chain = (
        (100_000, 512, 512, 1_000_000) if quick else (1_000_000, 4096, 2048, 10_000_000)
    )
    x_selu = np.arange(n_selu, dtype=np.float32)
    x_ln = rng.standard_normal((ln_rows, 1024)).astype(np.float32)
    g = rng.standard_normal(1024).astype(np.float32)
    b = rng.standard_normal(1024).astype(np.float32)
    x_lse = rng.standard_normal((lse_side, lse_side)).astype(np.float32)
    x_chain = rng.standard_normal(n_chain).astype(np.float32)
    return [
        (
            f"selu, {n_selu / 1e6:g}M f32 (arange)",
            0.8,
            (x_selu,),
            lambda ns: lambda x: selu(ns["jnp"], x),
            np_selu,
        ),
        (
            f"layernorm+softmax, {ln_rows}x1024",
            1.0,
            (x_ln, g, b),
            lambda ns: lambda x, g, b: layernorm_softmax(ns["jnp"], ns["lax"], ns["nn"], x, g, b),
            np_layernorm_softmax,
        ),
        (
            f"logsumexp over rows, {lse_side}x{lse_side}",
            1.0,
            (x_lse,),
            lambda ns: lambda x: logsumexp_rows(ns["nn"], x),
            np_logsumexp,
        ),
        (
            f"chain of 10 elementwise ops, {n_chain / 1e6:g}M f32",
            1.0,
            (x_chain,),
            lambda ns: lambda x: chain10(ns["jnp"], x),
            np_chain10,
        ),
    ]


def main(quick: bool = False) -> list[dict]:
    kiln_ns = {"jnp": kjnp, "lax": klax, "nn": knn}
    if HAVE_JAX:
        import jax
        import jax.numpy as jjnp
        from jax import lax as jlax
        from jax import nn as jnn

        jax_ns = {"jnp": jjnp, "lax": jlax, "nn": jnn}
    print(
        f"kiln native backend, threads={os.environ.get('KILN_NUM_THREADS') or os.cpu_count()}"
        f"; JAX {'available' if HAVE_JAX else 'not importable'}; best single call of "
        f"{ROUNDS} alternating rounds"
    )
    rows = []
    for name, goal, args, make, np_fn in workloads(quick):
        kiln_args = [kjnp.asarray(a) for a in args]
        kiln_fn = kiln.jit(make(kiln_ns))
        start = time.perf_counter()
        kiln_out = kiln_fn(*kiln_args)
        compile_s = time.perf_counter() - start
        calls = {"kiln": lambda f=kiln_fn, a=kiln_args: f(*a), "numpy": lambda a=args: np_fn(*a)}
        reference = np_fn(*args)
        error = float(
            np.nanmax(
                np.abs(np.asarray(kiln_out, np.float64) - reference) / (1 + np.abs(reference))
            )
        )
        if HAVE_JAX:
            jax_fn = jax.jit(make(jax_ns))
            jax_args = [jax.device_put(a) for a in args]
            calls["jax"] = lambda f=jax_fn, a=jax_args: f(*a).block_until_ready()
        best = {k: float("inf") for k in calls}
        for _ in range(ROUNDS):
            for key, call in calls.items():
                best[key] = min(best[key], best_call(call))
        rows.append((name, goal, best, compile_s, error))

    header = (
        f"{'workload':40s}{'kiln':>11s}{'numpy':>11s}{'jax':>11s}{'kiln/jax':>10s}"
        f"{'goal':>7s}{'kiln/numpy':>12s}{'compile':>10s}{'max err':>10s}"
    )
    print(header)
    print("-" * len(header))
    for name, goal, best, compile_s, error in rows:
        jax_t = best.get("jax")
        ratio = f"{best['kiln'] / jax_t:9.2f}x" if jax_t else f"{'n/a':>10s}"
        print(
            f"{name:40s}{_fmt(best['kiln'])}{_fmt(best['numpy'])}"
            f"{_fmt(jax_t) if jax_t else f'{chr(32) * 7}n/a':>11s}{ratio}{goal:6.1f}x"
            f"{best['kiln'] / best['numpy']:11.2f}x{compile_s * 1e3:8.0f}ms{error:10.1e}"
        )

    x = kjnp.asarray(np.arange(4, dtype=np.float32))
    small = kiln.jit(lambda x: x * 2 + 1)
    overhead = {"kiln jit": best_call(lambda: small(x), max_calls=20000)}
    if HAVE_JAX:
        jx = jax.device_put(np.arange(4, dtype=np.float32))
        jsmall = jax.jit(lambda x: x * 2 + 1)
        overhead["jax jit"] = best_call(lambda: jsmall(jx).block_until_ready(), max_calls=20000)
    print(
        "\ncall overhead, x * 2 + 1 on 4 floats: "
        + ", ".join(f"{k} {v * 1e6:.1f} µs" for k, v in overhead.items())
    )
    report = [
        result_row(f"jit {name}", best["kiln"], best["numpy"], best.get("jax"))
        for name, _, best, _, _ in rows
    ]
    report.append(
        result_row(
            "jit x * 2 + 1 on 4 f32 (call overhead)",
            overhead["kiln jit"],
            None,
            overhead.get("jax jit"),
        )
    )
    return report


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format; `quick` shrinks the arrays."""
    return main(quick)


def _fmt(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:8.2f} ms"
    return f"{seconds * 1e6:8.1f} µs"


if __name__ == "__main__":
    main()

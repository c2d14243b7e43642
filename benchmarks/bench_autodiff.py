"""Gradients under jit: first-call (trace + compile) time and steady-state step time of four
training-style workloads, kiln next to JAX on CPU (when installed), with kiln/JAX ratios, and
the size of each differentiated program (equations, counted through sub-jaxprs).

Run: .venv/bin/python benchmarks/bench_autodiff.py (JAX columns need an interpreter that
imports both, e.g. PYTHONPATH=.:.venv/lib/python3.11/site-packages <jax venv>/bin/python ...)
Figures only; nothing here asserts on time. Each workload is written once against a
numpy-like namespace, so kiln and JAX run the same program:
  1. layernorm + softmax on 4096x1024 float32: jit(grad(loss, argnums=(0, 1, 2))) for
     loss = sum(softmax(layernorm(x) * g + b) * t), gradients w.r.t. x, g and b;
  2. an MLP 784-512-512-10 on a batch of 128: value_and_grad of softmax cross-entropy and an
     SGD update in one jit (params pytree in, loss and new params out);
  3. a scan RNN, T=100, B=32, H=256, h = tanh(h @ W + x_t @ U + b): jit(value_and_grad) of
     the sum of the final hidden state, w.r.t. W, U and b;
  4. per-example gradients of a 256-256-10 MLP on a batch of 64:
     jit(vmap(grad(loss), in_axes=(None, 0, 0))).
"first call" is one call of a freshly made jitted function (trace, optimize, compile, run);
"step" is the median (and the best) of the calls in a ~2 s window after two warm-up calls.
Every kiln row runs before the first JAX row, so the two systems' worker threads never compete
for the cores. A workload that kiln cannot run prints FAILED with the error and the others
go on.
"""

from __future__ import annotations

import logging
import math
import pathlib
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

# Import kiln from this checkout even when the installed package is stale.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import kiln  # noqa: E402
import kiln.numpy as knp  # noqa: E402
from _harness import format_time, jax_available, result_row  # noqa: E402
from kiln.compiler import pipeline  # noqa: E402


# --- the two systems, behind one small interface ----------------------------------------------


@dataclass
class System:
    """What a workload needs from kiln or JAX: the numpy and lax namespaces and transforms."""

    name: str
    jnp: Any
    lax: Any
    jit: Callable
    grad: Callable
    value_and_grad: Callable
    vmap: Callable
    tree_map: Callable
    to_device: Callable
    block: Callable


def kiln_system(backend: str | None = None) -> System:
    """kiln; `backend` is passed to kiln.jit (None: the configured default, native)."""

    def jit(fun):
        return kiln.jit(fun) if backend is None else kiln.jit(fun, backend=backend)

    return System(
        "kiln",
        knp,
        kiln.lax,
        jit,
        kiln.grad,
        kiln.value_and_grad,
        kiln.vmap,
        kiln.tree_util.tree_map,
        knp.asarray,
        kiln.block_until_ready,
    )


def jax_system() -> System:
    import jax

    jax.config.update("jax_platforms", "cpu")
    return System(
        "jax",
        jax.numpy,
        jax.lax,
        jax.jit,
        jax.grad,
        jax.value_and_grad,
        jax.vmap,
        jax.tree_util.tree_map,
        jax.device_put,
        jax.block_until_ready,
    )


# --- the workloads, written once against System -------------------------------------------------


@dataclass
class Workload:
    """A differentiated function (to be jitted) and its NumPy inputs."""

    name: str
    build: Callable[[System], Callable]
    inputs: Callable[[], tuple]
    count_equations: bool = True


def _softmax(s: System, z, axis: int = -1):
    z = z - s.lax.stop_gradient(s.jnp.max(z, axis=axis, keepdims=True))
    e = s.jnp.exp(z)
    return e / s.jnp.sum(e, axis=axis, keepdims=True)


def _log_softmax(s: System, z, axis: int = -1):
    z = z - s.lax.stop_gradient(s.jnp.max(z, axis=axis, keepdims=True))
    return z - s.jnp.log(s.jnp.sum(s.jnp.exp(z), axis=axis, keepdims=True))


def _layernorm(s: System, x, eps: float = 1e-5):
    mean = s.jnp.mean(x, axis=-1, keepdims=True)
    centred = x - mean
    variance = s.jnp.mean(centred * centred, axis=-1, keepdims=True)
    return centred / s.jnp.sqrt(variance + eps)


def layernorm_softmax(rows: int, cols: int) -> Workload:
    def build(s: System):
        def loss(x, g, b, t):
            return s.jnp.sum(_softmax(s, _layernorm(s, x) * g + b) * t)

        return s.grad(loss, argnums=(0, 1, 2))

    def inputs():
        rng = np.random.default_rng(0)
        return (
            rng.standard_normal((rows, cols), dtype=np.float32),
            1.0 + 0.1 * rng.standard_normal(cols, dtype=np.float32),
            0.1 * rng.standard_normal(cols, dtype=np.float32),
            rng.standard_normal((rows, cols), dtype=np.float32),
        )

    return Workload(f"layernorm+softmax grad {rows}x{cols}", build, inputs)


def _mlp_params(rng, sizes: tuple[int, ...]) -> list:
    return [
        ((rng.standard_normal((m, n)) / math.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
        for m, n in zip(sizes[:-1], sizes[1:])
    ]


def _mlp_logits(s: System, params, x):
    for W, b in params[:-1]:
        x = s.jnp.maximum(x @ W + b, 0.0)
    W, b = params[-1]
    return x @ W + b


def _one_hot(rng, batch: int, classes: int):
    return np.eye(classes, dtype=np.float32)[rng.integers(0, classes, batch)]


def mlp_sgd(sizes: tuple[int, ...], batch: int) -> Workload:
    def build(s: System):
        def loss(params, x, y):
            return -s.jnp.mean(s.jnp.sum(_log_softmax(s, _mlp_logits(s, params, x)) * y, axis=-1))

        def step(params, x, y):
            value, grads = s.value_and_grad(loss)(params, x, y)
            return value, s.tree_map(lambda p, g: p - 0.01 * g, params, grads)

        return step

    def inputs():
        rng = np.random.default_rng(1)
        return (
            _mlp_params(rng, sizes),
            rng.standard_normal((batch, sizes[0]), dtype=np.float32),
            _one_hot(rng, batch, sizes[-1]),
        )

    name = "-".join(map(str, sizes))
    return Workload(f"MLP {name} b{batch} v&g+SGD", build, inputs)


def scan_rnn(steps: int, batch: int, hidden: int) -> Workload:
    def build(s: System):
        def loss(W, U, b, xs, h0):
            def cell(h, x_t):
                return s.jnp.tanh(h @ W + x_t @ U + b), None

            h, _ = s.lax.scan(cell, h0, xs)
            return s.jnp.sum(h)

        return s.value_and_grad(loss, argnums=(0, 1, 2))

    def inputs():
        rng = np.random.default_rng(2)
        scale = 1.0 / math.sqrt(hidden)
        return (
            scale * rng.standard_normal((hidden, hidden), dtype=np.float32),
            scale * rng.standard_normal((hidden, hidden), dtype=np.float32),
            np.zeros(hidden, np.float32),
            rng.standard_normal((steps, batch, hidden), dtype=np.float32),
            np.zeros((batch, hidden), np.float32),
        )

    return Workload(f"scan RNN T={steps} B={batch} H={hidden} v&g", build, inputs)


def per_example_grads(sizes: tuple[int, ...], batch: int) -> Workload:
    def build(s: System):
        def loss(params, x, y):
            return -s.jnp.sum(_log_softmax(s, _mlp_logits(s, params, x)) * y)

        return s.vmap(s.grad(loss), in_axes=(None, 0, 0))

    def inputs():
        rng = np.random.default_rng(3)
        return (
            _mlp_params(rng, sizes),
            rng.standard_normal((batch, sizes[0]), dtype=np.float32),
            _one_hot(rng, batch, sizes[-1]),
        )

    name = "-".join(map(str, sizes))
    return Workload(f"per-example grads {name} b{batch}", build, inputs, count_equations=False)


def workloads(small: bool = False) -> list[Workload]:
    """The benchmark's workloads; `small` shrinks every size (for the smoke test)."""
    if small:
        return [
            layernorm_softmax(8, 16),
            mlp_sgd((12, 8, 8, 3), 4),
            scan_rnn(3, 2, 4),
            per_example_grads((6, 5, 3), 4),
        ]
    return [
        layernorm_softmax(4096, 1024),
        mlp_sgd((784, 512, 512, 10), 128),
        scan_rnn(100, 32, 256),
        per_example_grads((256, 256, 10), 64),
    ]


# --- measuring -------------------------------------------------------------------------------


def median_time(
    fn: Callable[[], object],
    warmup: int = 2,
    min_runs: int = 7,
    max_runs: int = 100,
    budget: float = 2.0,
) -> tuple[float, float]:
    """Seconds per call: (median, best) of at least `min_runs` calls after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


class _FallbackLog(logging.Handler):
    """Collects the reasons kiln's native backend gave for handing a program to the
    interpreter (logged at debug level), so a slow row can say why."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "cannot compile" in message or "unavailable" in message:
            self.messages.append(message)


def _kiln_backend(jitted, args) -> str:
    """The backend kiln compiled this signature for (from the Compiled header)."""
    header = jitted.lower(*args).compile().as_text().splitlines()[0]
    return header.split("backend=")[1].split(",")[0] if "backend=" in header else "?"


def measure(
    system: System, workload: Workload, numpy_inputs: tuple, step_budget: float = 2.0
) -> dict:
    """First-call and step time of `workload` on `system`, or {"error": ...}."""
    args = system.tree_map(system.to_device, numpy_inputs)
    try:
        fun = workload.build(system)
        jitted = system.jit(fun)
        start = time.perf_counter()
        system.block(jitted(*args))
        first = time.perf_counter() - start
        step, best = median_time(lambda: system.block(jitted(*args)), budget=step_budget)
        result = {"first": first, "step": step, "best": best}
        if system.name == "kiln":
            result["backend"] = _kiln_backend(jitted, args)
        return result
    except Exception as err:  # a missing rule must not stop the other rows
        return {"error": f"{type(err).__name__}: {err}".splitlines()[0][:200]}


# --- program size ----------------------------------------------------------------------------


def count_equations(jaxpr: Any) -> int:
    """Equations of a (Closed)Jaxpr of kiln or JAX, each sub-jaxpr in a param (pjit, scan,
    cond, while, custom rules) counted too, on top of the equation that holds it."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for value in eqn.params.values():
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if hasattr(item, "eqns") or hasattr(getattr(item, "jaxpr", None), "eqns"):
                    total += count_equations(item)
    return total


def kiln_equation_counts(system: System, workload: Workload, numpy_inputs: tuple):
    """(staged, optimized) equation counts of kiln's jaxpr of the jitted workload."""
    args = system.tree_map(system.to_device, numpy_inputs)
    staged = kiln.jit(workload.build(system)).lower(*args).jaxpr
    return count_equations(staged), count_equations(pipeline.optimize(staged))


def jax_equation_count(system: System, workload: Workload, numpy_inputs: tuple) -> int:
    import jax

    return count_equations(jax.make_jaxpr(workload.build(system))(*numpy_inputs))


# --- the report ------------------------------------------------------------------------------


def _cell(result: dict | None, key: str) -> str:
    if result is None:
        return f"{'n/a':>12s}"
    if "error" in result:
        return f"{'FAILED':>12s}"
    return f"{format_time(result[key]):>12s}"


def _ratio(kiln_result: dict, jax_result: dict | None, key: str) -> str:
    if not jax_result or "error" in kiln_result or "error" in jax_result:
        return f"{'n/a':>11s}"
    return f"{kiln_result[key] / jax_result[key]:>10.2f}x"


def _warm_up(system: System) -> None:
    """Compile and run one trivial gradient, so one-time start-up costs (the compiler's own
    initialisation) are not charged to the first workload."""
    fun = system.jit(system.grad(lambda x: system.jnp.sum(system.jnp.tanh(x) * 2.0)))
    system.block(fun(system.to_device(np.ones(4, np.float32))))


def run(
    small: bool = False,
    with_jax: bool | None = None,
    kiln_backend: str | None = None,
    step_budget: float = 2.0,
) -> list[dict]:
    """Measure every workload, print the tables, and return one dict per workload."""
    with_jax = jax_available() if with_jax is None else with_jax
    kiln_sys = kiln_system(kiln_backend)
    cases = [(workload, workload.inputs()) for workload in workloads(small)]
    rows = [{"name": workload.name} for workload, _ in cases]
    fallback_log = _FallbackLog()
    kiln_logger = logging.getLogger("kiln")
    previous_level = kiln_logger.level
    kiln_logger.addHandler(fallback_log)
    kiln_logger.setLevel(logging.DEBUG)
    try:
        # Every kiln row first, then every JAX row: XLA's and kiln's worker threads would
        # otherwise compete for the cores of this small machine while the other one is timed.
        _warm_up(kiln_sys)
        for row, (workload, inputs) in zip(rows, cases):
            fallback_log.messages.clear()
            row["kiln"] = measure(kiln_sys, workload, inputs, step_budget)
            row["fallback"] = list(fallback_log.messages)
            if workload.count_equations:
                try:
                    row["kiln_eqns"] = kiln_equation_counts(kiln_sys, workload, inputs)
                except Exception as err:
                    row["kiln_eqns"] = f"FAILED: {type(err).__name__}: {err}".splitlines()[0]
    finally:
        kiln_logger.removeHandler(fallback_log)
        kiln_logger.setLevel(previous_level)
    if with_jax:
        jax_sys = jax_system()
        _warm_up(jax_sys)
        for row, (workload, inputs) in zip(rows, cases):
            row["jax"] = measure(jax_sys, workload, inputs, step_budget)
            if workload.count_equations:
                try:
                    row["jax_eqns"] = jax_equation_count(jax_sys, workload, inputs)
                except Exception:  # the JAX row already says FAILED
                    row["jax_eqns"] = None
    _print_times(rows, with_jax)
    _print_equations(rows, with_jax)
    return rows


def _print_times(rows: list[dict], with_jax: bool) -> None:
    print("\nfirst call of a fresh jit (trace + optimize + compile + run), kiln vs JAX CPU")
    header = f"{'workload':40s}{'kiln':>12s}{'jax':>12s}{'kiln/jax':>11s}  kiln backend"
    print(header)
    print("-" * len(header))
    for row in rows:
        k, j = row["kiln"], row.get("jax")
        print(
            f"{row['name']:40s}{_cell(k, 'first')}{_cell(j, 'first')}{_ratio(k, j, 'first')}"
            f"  {k.get('backend', '') or 'FAILED: ' + k['error']}"
        )
    print("\nstep time after warm-up: median (and best) of the calls in a ~2 s window")
    header = (
        f"{'workload':40s}{'kiln':>12s}{'jax':>12s}{'kiln/jax':>11s}"
        f"{'kiln best':>12s}{'jax best':>12s}{'kiln/jax':>11s}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        k, j = row["kiln"], row.get("jax")
        print(
            f"{row['name']:40s}{_cell(k, 'step')}{_cell(j, 'step')}{_ratio(k, j, 'step')}"
            f"{_cell(k, 'best')}{_cell(j, 'best')}{_ratio(k, j, 'best')}"
        )
    for row in rows:
        if "error" in row["kiln"]:
            print(f"  {row['name']}: kiln FAILED: {row['kiln']['error']}")
        if "error" in row.get("jax", {}):
            print(f"  {row['name']}: jax FAILED: {row['jax']['error']}")
        for message in dict.fromkeys(row.get("fallback", ())):
            print(f"  {row['name']}: {message}")
    if not with_jax:
        print("jax not installed: JAX columns skipped")


def _print_equations(rows: list[dict], with_jax: bool) -> None:
    print(
        "\nequations of the differentiated program (recursive through sub-jaxprs): kiln as "
        "staged and after its passes, JAX's make_jaxpr"
    )
    header = f"{'workload':40s}{'kiln staged':>13s}{'kiln passes':>13s}{'jax':>8s}{'kiln/jax':>10s}"
    print(header)
    print("-" * len(header))
    for row in rows:
        if "kiln_eqns" not in row:
            continue
        counts, jax_count = row["kiln_eqns"], row.get("jax_eqns")
        if isinstance(counts, str):
            print(f"{row['name']:40s}  {counts}")
            continue
        staged, optimized = counts
        jax_cell = f"{jax_count:>8d}" if jax_count is not None else f"{'n/a':>8s}"
        ratio = f"{optimized / jax_count:>9.2f}x" if jax_count else f"{'n/a':>10s}"
        print(f"{row['name']:40s}{staged:>13d}{optimized:>13d}{jax_cell}{ratio}")


def main() -> None:
    print(
        f"kiln.jit backend: {kiln.config.backend}; jax "
        f"{'available' if jax_available() else 'not installed'}"
    )
    run()


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format (first call and median step per
    workload; no NumPy column); `quick` runs the smoke-test sizes."""
    print(
        f"kiln.jit backend: {kiln.config.backend}; jax "
        f"{'available' if jax_available() else 'not installed'}"
    )
    report = []
    for row in run(small=quick, step_budget=0.5 if quick else 2.0):
        for key, label in (("first", "first call"), ("step", "step")):
            kiln_result, jax_result = row["kiln"], row.get("jax") or {}
            report.append(
                result_row(
                    f"grad: {row['name']}, {label}",
                    kiln_result.get(key),
                    None,
                    jax_result.get(key),
                    note=kiln_result.get("error", ""),
                )
            )
    return report


if __name__ == "__main__":
    main()

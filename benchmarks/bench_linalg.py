"""Batched linear algebra: kiln (jit), NumPy and JAX side by side.

A batched Cholesky solve (256 symmetric positive-definite systems of 64x64: cholesky and two
triangular solves), a batched general solve (LU), and the gradient of a Cholesky log-determinant
(kiln and JAX only). NumPy has no batched triangular solve, so its Cholesky column solves with
its batched LU-based `solve` on the factors. The systems of a row are timed in turns, round
after round, and each keeps its best round, so that a busy spell of a shared machine does not
fall on one of them only; the residual columns check that every system computed the same
answer.
Run: .venv/bin/python benchmarks/bench_linalg.py [--quick]
"""

from __future__ import annotations

import sys
import time

import numpy as np

import kiln
import kiln.numpy as knp
from kiln import lax
from _harness import jax_available, print_table, result_row

BATCH, SIDE = 256, 64
ROUNDS = 15


def _interleaved_best(functions: dict, rounds: int = ROUNDS) -> dict:
    """Seconds per call of each function: the best over `rounds` rounds, every round timing
    each function in turn over a loop of calls sized to about 20 ms."""
    loops = {}
    for name, fn in functions.items():
        fn()
        start = time.perf_counter()
        fn()
        loops[name] = max(1, int(0.02 / max(time.perf_counter() - start, 1e-6)))
    best = dict.fromkeys(functions, float("inf"))
    for _ in range(rounds):
        for name, fn in functions.items():
            start = time.perf_counter()
            for _ in range(loops[name]):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / loops[name])
    return best


def _problem(batch: int, side: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, side, side)).astype(np.float32)
    spd = (x @ np.swapaxes(x, -1, -2) / side + np.eye(side, dtype=np.float32)).astype(np.float32)
    rhs = rng.standard_normal((batch, side, 1)).astype(np.float32)
    return spd, rhs


def _cho_solve(linalg):
    """A Cholesky solve written against a lax.linalg-like namespace (kiln's or JAX's)."""

    def solve(a, b):
        factor = linalg.cholesky(a)
        y = linalg.triangular_solve(factor, b, left_side=True, lower=True)
        return linalg.triangular_solve(factor, y, left_side=True, lower=True, transpose_a=True)

    return solve


def _numpy_cho_solve(a, b):
    factor = np.linalg.cholesky(a)
    y = np.linalg.solve(factor, b)
    return np.linalg.solve(np.swapaxes(factor, -1, -2), y)


def _logdet_loss(numpy_like, linalg):
    def loss(a):
        factor = linalg.cholesky(a)
        diagonal = numpy_like.diagonal(factor, axis1=-2, axis2=-1)
        return 2 * numpy_like.sum(numpy_like.log(diagonal))

    return loss


def _residual(a, b, x) -> float:
    x = np.asarray(x, np.float64)
    return float(np.max(np.abs(a.astype(np.float64) @ x - b)))


def main(quick: bool = False) -> list[dict]:
    batch, side = (32, 32) if quick else (BATCH, SIDE)
    a, b = _problem(batch, side)
    ka, kb = knp.asarray(a), knp.asarray(b)
    label = f"{batch} x {side}x{side}"
    workloads = [
        (
            f"cholesky solve, {label}",
            kiln.jit(_cho_solve(lax.linalg)),
            _numpy_cho_solve,
            "cho_solve",
        ),
        (f"solve (LU), {label}", kiln.jit(knp.linalg.solve), np.linalg.solve, "solve"),
        (
            f"grad of cholesky logdet, {label}",
            kiln.jit(kiln.grad(_logdet_loss(knp, lax.linalg))),
            None,
            "grad_logdet",
        ),
    ]
    jax_functions = {}
    if jax_available():
        import jax
        import jax.numpy as jnp

        jax_functions = {
            "cho_solve": jax.jit(_cho_solve(jax.lax.linalg)),
            "solve": jax.jit(jnp.linalg.solve),
            "grad_logdet": jax.jit(jax.grad(_logdet_loss(jnp, jax.lax.linalg))),
        }
    times, residuals = [], []
    for name, kiln_fn, numpy_fn, kind in workloads:
        args = (ka,) if kind == "grad_logdet" else (ka, kb)
        timed = {"kiln": lambda f=kiln_fn, a_=args: kiln.block_until_ready(f(*a_))}
        errors = {}
        if kind != "grad_logdet":
            errors["kiln"] = _residual(a, b, kiln_fn(ka, kb))
        if numpy_fn is not None:
            timed["numpy"] = lambda f=numpy_fn: f(a, b)
            errors["numpy"] = _residual(a, b, numpy_fn(a, b))
        jax_fn = jax_functions.get(kind)
        if jax_fn is not None:
            jax_args = (a,) if kind == "grad_logdet" else (a, b)
            timed["jax"] = lambda f=jax_fn, a_=jax_args: f(*a_).block_until_ready()
            if kind != "grad_logdet":
                errors["jax"] = _residual(a, b, jax_fn(a, b))
            else:
                difference = np.abs(np.asarray(jax_fn(a)) - np.asarray(kiln_fn(ka)))
                errors["kiln vs jax"] = float(np.max(difference))
        row = _interleaved_best(timed, rounds=3 if quick else ROUNDS)
        times.append((name, row))
        residuals.append((name, errors))
    print_table("Batched linear algebra (time per call; kiln/x is the time ratio)", times)
    print("\nLargest residual |a x - b| (grad row: largest difference from JAX)")
    for name, errors in residuals:
        shown = "  ".join(f"{system}: {value:.1e}" for system, value in errors.items())
        print(f"{name:44s}{shown}")
    return [
        result_row(f"linalg {name}", row["kiln"], row.get("numpy"), row.get("jax"))
        for name, row in times
    ]


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format; `quick` shrinks the problem."""
    return main(quick)


if __name__ == "__main__":
    main("--quick" in sys.argv)

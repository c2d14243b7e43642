"""Batched linear algebra: kiln (jit), NumPy and JAX side by side.

A batched Cholesky solve (256 symmetric positive-definite systems of 64x64: cholesky and two
triangular solves), a batched general solve (LU), and the gradient of a Cholesky log-determinant
(kiln and JAX only). NumPy has no batched triangular solve, so its Cholesky column solves with
its batched LU-based `solve` on the factors. Times are the best of several runs; the residual
columns check that every system computed the same answer.
Run: .venv/bin/python benchmarks/bench_linalg.py [--quick]
"""

from __future__ import annotations

import sys

import numpy as np

import kiln
import kiln.numpy as knp
from kiln import lax
from _harness import best_time, jax_available, print_table, result_row

BATCH, SIDE = 256, 64


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
        row = {"kiln": best_time(lambda: kiln.block_until_ready(kiln_fn(*args)))}
        errors = {}
        if kind != "grad_logdet":
            errors["kiln"] = _residual(a, b, kiln_fn(ka, kb))
        if numpy_fn is not None:
            row["numpy"] = best_time(lambda: numpy_fn(a, b))
            errors["numpy"] = _residual(a, b, numpy_fn(a, b))
        jax_fn = jax_functions.get(kind)
        if jax_fn is not None:
            jax_args = (a,) if kind == "grad_logdet" else (a, b)
            row["jax"] = best_time(lambda: jax_fn(*jax_args).block_until_ready())
            if kind != "grad_logdet":
                errors["jax"] = _residual(a, b, jax_fn(a, b))
            else:
                difference = np.abs(np.asarray(jax_fn(a)) - np.asarray(kiln_fn(ka)))
                errors["kiln vs jax"] = float(np.max(difference))
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

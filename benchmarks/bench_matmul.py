"""Matrix products under jit: kiln's BLAS calls from generated code and its inline small
products, next to NumPy (OpenBLAS through np.matmul) and JAX on CPU (when installed).

Run: .venv/bin/python benchmarks/bench_matmul.py [--quick]
(JAX columns need an interpreter that imports both, e.g.
PYTHONPATH=.:.venv/lib/python3.11/site-packages <jax venv>/bin/python benchmarks/bench_matmul.py)

The workloads: a 1024x1024 float32 product; a dense layer with bias and relu on an MLP's
sizes (128x784 @ 784x512); a batch of 64 products of 128x128; a matrix-vector product
(4096x4096 @ 4096); a weight gradient as backpropagation writes it (x.T @ g then a
transpose); and the per-call time of `x @ W + b` on a 4x2 W, where kiln's whole program is one
inline kernel. Best of several calls each; the machine may be shared: read the ratios.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import kiln  # noqa: E402
import kiln.numpy as knp  # noqa: E402
from _harness import best_time, jax_available, print_table, rows_of  # noqa: E402


def _workloads(quick: bool):
    rng = np.random.default_rng(0)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    side = 512 if quick else 1024
    return [
        (
            f"matmul {side}x{side} f32",
            lambda np_, a, b: a @ b,
            (normal(side, side), normal(side, side)),
        ),
        (
            "dense+bias+relu 128x784 @ 784x512",
            lambda np_, x, w, b: np_.maximum(x @ w + b, 0.0),
            (normal(128, 784), normal(784, 512), normal(512)),
        ),
        (
            "batched matmul 64 x (128x128)",
            lambda np_, a, b: np_.matmul(a, b),
            (normal(64, 128, 128), normal(64, 128, 128)),
        ),
        ("matvec 4096x4096 @ 4096", lambda np_, a, v: a @ v, (normal(4096, 4096), normal(4096))),
        (
            "weight gradient (x.T @ g).T 128x784, 128x512",
            lambda np_, x, g: (x.T @ g).T * 0.01,
            (normal(128, 784), normal(128, 512)),
        ),
        (
            "x @ W + b call (W 4x2)",
            lambda np_, w, b, x: x @ w + b,
            (normal(4, 2), normal(2), normal(4)),
        ),
    ]


def main(quick: bool = False) -> list:
    rows = []
    jax = None
    if jax_available():
        import jax
        import jax.numpy as jnp
    for name, fn, args in _workloads(quick):
        times = {}
        kiln_fn = kiln.jit(lambda *a, fn=fn: fn(knp, *a))
        kiln_args = [knp.asarray(a) for a in args]
        kiln.block_until_ready(kiln_fn(*kiln_args))
        times["kiln"] = best_time(lambda: kiln.block_until_ready(kiln_fn(*kiln_args)))
        times["numpy"] = best_time(lambda: fn(np, *args))
        if jax is not None:
            jax_fn = jax.jit(lambda *a, fn=fn: fn(jnp, *a))
            jax_args = [jax.device_put(a) for a in args]
            jax_fn(*jax_args).block_until_ready()
            times["jax"] = best_time(lambda: jax_fn(*jax_args).block_until_ready())
        rows.append((name, times))
    print_table("Matrix products under jit (best of several calls)", rows)
    return rows


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format."""
    return rows_of(main(quick))


if __name__ == "__main__":
    main("--quick" in sys.argv)

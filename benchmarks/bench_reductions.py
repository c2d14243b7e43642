"""Long float32 reductions: time and accuracy of kiln (jit), NumPy and JAX side by side.

Sums and means of 16M floats, row and column sums of a 4096x4096 array, logsumexp over rows,
a cumulative sum and the dot product of two 16M vectors. Times are the best of several runs;
the error columns are relative to the same reduction in float64.
Run: .venv/bin/python benchmarks/bench_reductions.py
"""

from __future__ import annotations

import numpy as np

import kiln
import kiln.numpy as knp
from kiln import nn
from _harness import best_time, jax_available, print_table, result_row

N = 16 * 1024 * 1024
SIDE = 4096


def _jax_functions() -> dict:
    """The JAX counterparts of the workloads by name, empty when JAX is not installed."""
    if not jax_available():
        return {}
    import jax.nn as jnn
    import jax.numpy as jnp

    return {
        "sum": jnp.sum,
        "mean": jnp.mean,
        "rows": lambda a: jnp.sum(a, axis=1),
        "columns": lambda a: jnp.sum(a, axis=0),
        "logsumexp": lambda a: jnn.logsumexp(a, axis=1),
        "cumsum": jnp.cumsum,
        "dot": jnp.dot,
    }


def _logsumexp_rows(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=1, keepdims=True)
    return np.log(np.exp(a - top).sum(axis=1)) + top[:, 0]


def _workloads(n: int = N, side: int = SIDE) -> list[tuple]:
    """(name, kind, kiln function, NumPy function, inputs, float64 reference) per workload."""
    rng = np.random.default_rng(0)
    count, width = f"{n // (1024 * 1024)}M", f"{side}x{side}"
    flat = rng.random(n, dtype=np.float32)
    other = rng.random(n, dtype=np.float32)
    square = rng.random((side, side), dtype=np.float32)
    tenths = np.full(n, 0.1, np.float32)
    ones = np.ones(n, np.float32)
    wide_square = square.astype(np.float64)
    return [
        (f"sum, {count} float32", "sum", knp.sum, np.sum, (flat,), flat.astype(np.float64).sum()),
        (
            f"mean, {count} float32",
            "mean",
            knp.mean,
            np.mean,
            (flat,),
            flat.astype(np.float64).mean(),
        ),
        (
            f"sum of {count} copies of 0.1",
            "sum",
            knp.sum,
            np.sum,
            (tenths,),
            n * float(np.float32(0.1)),
        ),
        (
            f"row sums, {width}",
            "rows",
            lambda a: knp.sum(a, axis=1),
            lambda a: a.sum(axis=1),
            (square,),
            wide_square.sum(axis=1),
        ),
        (
            f"column sums, {width}",
            "columns",
            lambda a: knp.sum(a, axis=0),
            lambda a: a.sum(axis=0),
            (square,),
            wide_square.sum(axis=0),
        ),
        (
            f"logsumexp over rows, {width}",
            "logsumexp",
            lambda a: nn.logsumexp(a, axis=1),
            _logsumexp_rows,
            (square,),
            _logsumexp_rows(wide_square),
        ),
        (
            f"cumsum, {count} float32",
            "cumsum",
            knp.cumsum,
            np.cumsum,
            (flat,),
            np.cumsum(flat, dtype=np.float64),
        ),
        (
            f"dot {count}, float32",
            "dot",
            knp.dot,
            np.dot,
            (flat, other),
            np.dot(flat.astype(np.float64), other.astype(np.float64)),
        ),
        (
            f"dot {count}, copies of 0.1 with ones",
            "dot",
            knp.dot,
            np.dot,
            (tenths, ones),
            n * float(np.float32(0.1)),
        ),
    ]


def _error(result, reference) -> float:
    got = np.asarray(result, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    return float(np.max(np.abs(got - reference) / np.maximum(np.abs(reference), 1e-30)))


def main(quick: bool = False) -> list[dict]:
    times, errors = [], []
    jax_functions = _jax_functions()
    sizes = (1024 * 1024, 1024) if quick else (N, SIDE)
    for name, kind, kiln_fn, numpy_fn, data, reference in _workloads(*sizes):
        jax_fn = jax_functions.get(kind)
        kiln_jit = kiln.jit(kiln_fn)
        kiln_data = [knp.asarray(x) for x in data]
        row_times = {
            "kiln": best_time(lambda: kiln_jit(*kiln_data)),
            "numpy": best_time(lambda: numpy_fn(*data)),
        }
        row_errors = {
            "kiln": _error(kiln_jit(*kiln_data), reference),
            "numpy": _error(numpy_fn(*data), reference),
        }
        if jax_fn is not None:
            import jax

            jax_jit = jax.jit(jax_fn)
            jax_data = [jax.device_put(x) for x in data]
            row_times["jax"] = best_time(lambda: jax_jit(*jax_data).block_until_ready())
            row_errors["jax"] = _error(jax_jit(*jax_data), reference)
        times.append((name, row_times))
        errors.append((name, row_errors))
    print_table("Long float32 reductions (time per call; kiln/x is the time ratio)", times)
    print("\nLargest relative error against float64")
    systems = list(errors[0][1])
    print(f"{'workload':44s}" + "".join(f"{s:>14s}" for s in systems))
    for name, row in errors:
        print(f"{name:44s}" + "".join(f"{row.get(s, float('nan')):>14.1e}" for s in systems))
    return [
        result_row(f"jit {name}", row["kiln"], row["numpy"], row.get("jax")) for name, row in times
    ]


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format; `quick` shrinks the arrays."""
    return main(quick)


if __name__ == "__main__":
    main()

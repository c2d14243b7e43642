"""Eager ops, kiln vs NumPy (vs JAX if present): the dispatch cost of `x * y` on 4-element
float32 arrays, and ops on 1M floats, which run compiled kernels (kiln/runtime/eager_kernels.py)
above a size threshold. selu is jitted in both (kiln.nn compiles its activations as JAX does),
so its row compares one fused kernel with another; the impls column is the same program."""

from __future__ import annotations

import numpy as np

from _harness import best_time, jax_available, print_table, result_row

import kiln.numpy as jnp
from kiln import lax, nn
from kiln.runtime import eager_kernels

LARGE = 1 << 20
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def _numpy_selu(x: np.ndarray) -> np.ndarray:
    return np.float32(_SELU_SCALE) * np.where(x > 0, x, np.float32(_SELU_ALPHA) * np.expm1(x))


def _small_rows() -> list:
    xn = np.arange(4, dtype=np.float32)
    yn = np.ones(4, dtype=np.float32)
    xk, yk = jnp.asarray(xn), jnp.asarray(yn)
    rows = []
    times = {"kiln": best_time(lambda: xk * yk), "numpy": best_time(lambda: xn * yn)}
    if jax_available():
        import jax.numpy as jjnp

        xj, yj = jjnp.asarray(xn), jjnp.asarray(yn)
        times["jax"] = best_time(lambda: (xj * yj).block_until_ready())
    rows.append(("x * y, float32[4] (same dtype fast path)", times))
    times = {"kiln": best_time(lambda: xk * 2.0), "numpy": best_time(lambda: xn * 2.0)}
    rows.append(("x * 2.0, float32[4] (promotion path)", times))
    times = {"kiln": best_time(lambda: jnp.exp(xk)), "numpy": best_time(lambda: np.exp(xn))}
    rows.append(("exp(x), float32[4]", times))
    return rows


def _large_rows(repeat: int) -> list:
    xn = np.random.default_rng(0).standard_normal(LARGE).astype(np.float32)
    xk = jnp.asarray(xn)
    workloads = [
        ("selu(x), float32[1M]", nn.selu, _numpy_selu, "selu"),
        ("exp(x), float32[1M]", lax.exp, np.exp, "exp"),
        ("tanh(x), float32[1M]", lax.tanh, np.tanh, "tanh"),
        ("expm1(x), float32[1M]", lax.expm1, np.expm1, "expm1"),
    ]
    jax_fns = {}
    if jax_available():
        import jax
        import jax.numpy as jjnp

        xj = jjnp.asarray(xn)
        jax_fns = {"selu": jax.nn.selu, "exp": jjnp.exp, "tanh": jjnp.tanh, "expm1": jjnp.expm1}
    rows = []
    for name, kiln_fn, numpy_fn, jax_name in workloads:
        times = {
            "kiln": best_time(lambda: kiln_fn(xk), repeat=repeat),
            "numpy": best_time(lambda: numpy_fn(xn), repeat=repeat),
        }
        with eager_kernels.eager_kernel_threshold(1 << 62):
            times["impls"] = best_time(lambda: kiln_fn(xk), repeat=repeat)
        if jax_name in jax_fns:
            fn = jax_fns[jax_name]
            times["jax"] = best_time(lambda: fn(xj).block_until_ready(), repeat=repeat)
        rows.append((name, times))
    return rows


def main(quick: bool = False) -> list:
    rows = _small_rows() + _large_rows(repeat=3 if quick else 7)
    print_table("Eager ops (per op; ratio > 1 means kiln is slower)", rows)
    threshold, cheap = eager_kernels.threshold()
    print(
        f"(native eager kernels from {threshold} elements, {cheap} for single-pass ops; "
        "'impls': kiln on its NumPy impls only)"
    )
    return rows


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format."""
    return [
        result_row(f"eager {name}", times["kiln"], times.get("numpy"), times.get("jax"))
        for name, times in main(quick)
    ]


if __name__ == "__main__":
    main()

"""Eager dispatch cost: `x * y` on 4-element float32 arrays, kiln vs NumPy (vs JAX if present)."""

from __future__ import annotations

import numpy as np

from _harness import best_time, jax_available, print_table, result_row

import kiln.numpy as jnp


def main() -> list:
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
    print_table("Eager dispatch (per op; ratio > 1 means kiln is slower)", rows)
    return rows


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format (the sizes are already small)."""
    return [
        result_row(f"eager {name}", times["kiln"], times.get("numpy"), times.get("jax"))
        for name, times in main()
    ]


if __name__ == "__main__":
    main()

"""kiln.jit call overhead and caching, next to eager kiln, NumPy and JAX (when installed).

Run: .venv/bin/python benchmarks/bench_jit.py
Figures only; nothing here asserts on time.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import timeit

import numpy as np

# Import kiln from this checkout even when the installed package is stale.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import kiln  # noqa: E402
import kiln.numpy as jnp  # noqa: E402
from _harness import (
    best_time,
    format_time,
    jax_available,
    print_table,  # noqa: E402
    result_row,
)

HAVE_MATMUL = hasattr(jnp, "matmul")


def fn(W, b, x):
    return x @ W + b


def fn_elementwise(W, b, x):
    return x * W + b


def call_overhead_rows() -> list:
    rng = np.random.default_rng(0)
    W_np = rng.standard_normal((4, 2)).astype(np.float32)
    b_np = rng.standard_normal(2).astype(np.float32)
    x_np = rng.standard_normal(4).astype(np.float32)
    W, b, x = jnp.asarray(W_np), jnp.asarray(b_np), jnp.asarray(x_np)
    x_col_np = x_np[:, None]
    x_col = jnp.asarray(x_col_np)
    rows = []

    if HAVE_MATMUL:
        jitted = kiln.jit(fn)
        interpreted = kiln.jit(fn, backend="interpreter")
        times = {
            "kiln.jit": best_time(lambda: jitted(W, b, x)),
            "interpreter": best_time(lambda: interpreted(W, b, x)),
            "eager": best_time(lambda: fn(W, b, x)),
            "numpy": best_time(lambda: x_np @ W_np + b_np),
        }
        if jax_available():
            import jax

            jax_fn = jax.jit(fn)
            args = tuple(jax.device_put(a) for a in (W_np, b_np, x_np))
            times["jax.jit"] = best_time(lambda: jax_fn(*args).block_until_ready())
        rows.append(("x @ W + b  (W 4x2)", times))
    else:
        print("kiln.numpy.matmul does not exist yet: timing x * W + b (x 4x1) instead")

    jitted = kiln.jit(fn_elementwise)
    interpreted = kiln.jit(fn_elementwise, backend="interpreter")
    times = {
        "kiln.jit": best_time(lambda: jitted(W, b, x_col)),
        "interpreter": best_time(lambda: interpreted(W, b, x_col)),
        "eager": best_time(lambda: fn_elementwise(W, b, x_col)),
        "numpy": best_time(lambda: x_col_np * W_np + b_np),
    }
    if jax_available():
        import jax

        jax_fn = jax.jit(fn_elementwise)
        args = tuple(jax.device_put(a) for a in (W_np, b_np, x_col_np))
        times["jax.jit"] = best_time(lambda: jax_fn(*args).block_until_ready())
    rows.append(("x * W + b  (x 4x1, W 4x2)", times))

    identity = kiln.jit(lambda a: a)
    rows.append(("identity (pure call overhead)", {"kiln.jit": best_time(lambda: identity(x))}))
    scalar = kiln.jit(lambda p: p + 1)
    rows.append(("p + 1 on a Python int", {"kiln.jit": best_time(lambda: scalar(3))}))
    return rows


def stupid_fn(x):
    y = jnp.copy(x)
    for _ in range(1000):
        x = x * x
    return y


def stupid_rows() -> list:
    x = jnp.asarray(np.linspace(0.5, 1.0, 4, dtype=np.float32))  # no overflow
    jitted = kiln.jit(stupid_fn)
    jitted(x)
    copy_only = kiln.jit(jnp.copy)
    return [
        (
            "stupid_fn (copy + 1000 dead squarings)",
            {
                "kiln.jit": best_time(lambda: jitted(x)),
                "eager": best_time(lambda: stupid_fn(x), repeat=3),
                "copy": best_time(lambda: copy_only(x)),
            },
        )
    ]  # "copy": jit of jnp.copy alone


# --- the seed's jit-in-a-loop variants ------------------------------------------------------


def unjitted_loop_body(prev_i):
    return prev_i + 1


def make_loops(jit):
    def g_inner_jitted_partial(x, n):
        i = 0
        while i < n:
            i = jit(functools.partial(unjitted_loop_body))(i)
        return x + i

    def g_inner_jitted_lambda(x, n):
        i = 0
        while i < n:
            i = jit(lambda x: unjitted_loop_body(x))(i)
        return x + i

    def g_inner_jitted_normal(x, n):
        i = 0
        while i < n:
            i = jit(unjitted_loop_body)(i)
        return x + i

    return g_inner_jitted_partial, g_inner_jitted_lambda, g_inner_jitted_normal


def loop_times(jit, number: int) -> dict[str, float]:
    partial_loop, lambda_loop, named_loop = make_loops(jit)
    out = {}
    for name, loop in (("partial", partial_loop), ("lambda", lambda_loop), ("named", named_loop)):
        loop(10, 20)
        out[name] = (
            min(timeit.repeat(lambda: loop(10, 20).block_until_ready(), number=number, repeat=5))
            / number
        )
    return out


def main() -> list[dict]:
    print(
        f"kiln.jit runs on the default backend ({kiln.config.backend}); 'interpreter' is "
        "jit(..., backend='interpreter')"
    )
    overhead = call_overhead_rows()
    print_table("per-call time of a jitted function (best of 7)", overhead, baseline="kiln.jit")
    table = list(overhead)
    if hasattr(jnp, "copy"):
        dead_code = stupid_rows()
        print_table("dead code: the seed's stupid_fn", dead_code, baseline="kiln.jit")
        table += dead_code

    print("\njit(...) created inside a loop, n=20 calls per loop (the seed's three variants)")
    systems = {"kiln": loop_times(kiln.jit, 50)}
    if jax_available():
        import jax

        systems["jax"] = loop_times(jax.jit, 1)
    else:
        print("jax not installed")
    print(
        f"{'system':8s}{'partial':>14s}{'lambda':>14s}{'named':>14s}"
        f"{'lambda/named':>14s}{'partial/named':>15s}"
    )
    for system, t in systems.items():
        print(
            f"{system:8s}{format_time(t['partial']):>14s}{format_time(t['lambda']):>14s}"
            f"{format_time(t['named']):>14s}{t['lambda'] / t['named']:>13.2f}x"
            f"{t['partial'] / t['named']:>14.2f}x"
        )
    print("(goal for kiln: lambda/named and partial/named within 2x)")
    report = [
        result_row(
            f"jit call: {name}", times.get("kiln.jit"), times.get("numpy"), times.get("jax.jit")
        )
        for name, times in table
    ]
    for variant in ("partial", "lambda", "named"):
        report.append(
            result_row(
                f"jit made inside a loop ({variant}), 20 calls",
                systems["kiln"][variant],
                None,
                systems.get("jax", {}).get(variant),
            )
        )
    return report


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format (the sizes are already small)."""
    return main()


if __name__ == "__main__":
    main()

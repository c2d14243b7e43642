"""Convolutions and pooling: a two-layer conv net's forward and forward+backward, kiln (jit)
next to JAX on the CPU where it is installed.

The workload is a batch of 32 single-channel 28x28 images through a 3x3 convolution to 32
features, ReLU, and a 3x3 convolution to 64 features ('SAME' padding), in the channels-last
layout (NHWC images, HWIO kernels) and again channels-first (NCHW, OIHW); the backward pass is
the gradient of the mean squared output with respect to both kernels and the input. A 2x2
max-pool forward+backward on the 64-feature maps is timed on its own.
Run: .venv/bin/python benchmarks/bench_conv.py [--quick]
"""

from __future__ import annotations

import sys

import numpy as np

import kiln
import kiln.numpy as knp
from kiln import lax
from _harness import best_time, jax_available, print_table, result_row

BATCH, SIDE = 32, 28
DIMENSION_NUMBERS = ("NHWC", "HWIO", "NHWC")
CHANNELS_FIRST = ("NCHW", "OIHW", "NCHW")


def _net(lax_module, relu, dimension_numbers=DIMENSION_NUMBERS):
    def conv(x, w):
        return lax_module.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=dimension_numbers
        )

    def forward(w1, w2, x):
        return conv(relu(conv(x, w1)), w2)

    def loss(w1, w2, x):
        return (forward(w1, w2, x) ** 2).mean()

    def pool_loss(y):
        pooled = lax_module.reduce_window(
            y, -np.inf, lax_module.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"
        )
        return (pooled**2).sum()

    return forward, loss, pool_loss


def _data(batch: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, SIDE, SIDE, 1)).astype(np.float32)
    w1 = (rng.standard_normal((3, 3, 1, 32)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((3, 3, 32, 64)) / 17).astype(np.float32)
    y = rng.standard_normal((batch, SIDE, SIDE, 64)).astype(np.float32)
    return w1, w2, x, y


def _channels_first(w1, w2, x):
    """The same operands as OIHW kernels and NCHW images (contiguous in that layout)."""
    to_oihw, to_nchw = (3, 2, 0, 1), (0, 3, 1, 2)
    return [
        np.ascontiguousarray(a.transpose(p))
        for a, p in ((w1, to_oihw), (w2, to_oihw), (x, to_nchw))
    ]


def main(quick: bool = False) -> list[dict]:
    batch = 8 if quick else BATCH
    w1, w2, x, y = _data(batch)
    relu = lambda v: knp.maximum(v, 0)  # noqa: E731
    forward, loss, pool_loss = _net(lax, relu)
    forward_cf, loss_cf, _ = _net(lax, relu, CHANNELS_FIRST)
    kiln_args = [knp.asarray(a) for a in (w1, w2, x)]
    kiln_args_cf = [knp.asarray(a) for a in _channels_first(w1, w2, x)]
    kiln_y = knp.asarray(y)
    workloads = {
        "conv net forward": (kiln.jit(forward), kiln_args),
        "conv net forward+backward": (
            kiln.jit(kiln.value_and_grad(loss, argnums=(0, 1, 2))),
            kiln_args,
        ),
        "conv net forward (NCHW)": (kiln.jit(forward_cf), kiln_args_cf),
        "conv net forward+backward (NCHW)": (
            kiln.jit(kiln.value_and_grad(loss_cf, argnums=(0, 1, 2))),
            kiln_args_cf,
        ),
        "max-pool 2x2 forward+backward": (kiln.jit(kiln.value_and_grad(pool_loss)), [kiln_y]),
    }
    runners = {
        name: {"kiln": lambda fn=fn, args=args: kiln.block_until_ready(fn(*args))}
        for name, (fn, args) in workloads.items()
    }
    if jax_available():
        import jax
        import jax.numpy as jnp
        from jax import lax as jax_lax

        j_forward, j_loss, j_pool_loss = _net(jax_lax, jax.nn.relu)
        j_forward_cf, j_loss_cf, _ = _net(jax_lax, jax.nn.relu, CHANNELS_FIRST)
        jax_args = [jax.device_put(a) for a in (w1, w2, x)]
        jax_args_cf = [jax.device_put(a) for a in _channels_first(w1, w2, x)]
        jax_y = jax.device_put(y)
        jax_fns = {
            "conv net forward": (jax.jit(j_forward), jax_args),
            "conv net forward+backward": (
                jax.jit(jax.value_and_grad(j_loss, argnums=(0, 1, 2))),
                jax_args,
            ),
            "conv net forward (NCHW)": (jax.jit(j_forward_cf), jax_args_cf),
            "conv net forward+backward (NCHW)": (
                jax.jit(jax.value_and_grad(j_loss_cf, argnums=(0, 1, 2))),
                jax_args_cf,
            ),
            "max-pool 2x2 forward+backward": (jax.jit(jax.value_and_grad(j_pool_loss)), [jax_y]),
        }
        for name, (fn, args) in jax_fns.items():
            runners[name]["jax"] = lambda fn=fn, args=args: jax.block_until_ready(fn(*args))
        # The two agree on the gradients (a check of the figures, not a test).
        k_val, k_grads = workloads["conv net forward+backward"][0](*kiln_args)
        j_val, j_grads = jax_fns["conv net forward+backward"][0](*jax_args)
        error = max(
            float(
                np.max(np.abs(np.asarray(a) - np.asarray(b)))
                / (np.max(np.abs(np.asarray(b))) + 1e-30)
            )
            for a, b in zip(k_grads, j_grads)
        )
        print(f"largest relative gradient difference kiln vs JAX: {error:.1e}")
        del jnp
    times = {
        name: {system: float("inf") for system in systems} for name, systems in runners.items()
    }
    # Rounds alternate between the systems, so that a busy spell on a shared machine slows
    # both rather than one; each figure is the best seen.
    for _ in range(3):
        for name, systems in runners.items():
            for system, run in systems.items():
                times[name][system] = min(times[name][system], best_time(run, repeat=3))
    title = f"Conv net, batch {batch}, {SIDE}x{SIDE}: 3x3x32 then 3x3x64 (time per call)"
    print_table(title, list(times.items()))
    return [
        result_row(f"jit {name} (batch {batch})", t["kiln"], None, t.get("jax"))
        for name, t in times.items()
    ]


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format; `quick` uses a batch of 8."""
    return main(quick)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv[1:])

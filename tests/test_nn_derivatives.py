"""Derivatives of kiln.nn at the edges, against JAX's values: the points where JAX's custom
derivative rules and stop_gradient decide the answer (kinks, 0, +-inf, -inf inside softmax rows,
all -inf rows, logsumexp's b= weights, NaN propagation), plus finite-difference checks
(check_grads, orders 1 and 2, forward and reverse) at smooth random points.

The expected numbers were computed with JAX 0.10.2 in float32 from the same case table
(`derivative_cases`) and are written out below, so the test needs no JAX.
"""

import warnings
import zlib

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.numpy as jnp
from kiln.test_util import check_grads

INF, NAN = np.inf, np.nan

# --- cases begin (this block is also run by the JAX oracle that produced EXPECTED) ---

POINTS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    6.0,
    -3.0,
    3.0,
    0.5,
    -0.5,
    1e-30,
    20.0,
    -20.0,
    100.0,
    -100.0,
    1e20,
    -1e20,
    INF,
    -INF,
    NAN,
]
# Second derivatives are compared at finite points only (including the kinks).
POINTS2 = [0.0, 1.0, -1.0, 6.0, -3.0, 3.0, 0.5, -0.5, 20.0, -20.0, 100.0, -100.0]

ELEMENTWISE = {
    "relu": lambda nn, x: nn.relu(x),
    "relu6": lambda nn, x: nn.relu6(x),
    "silu": lambda nn, x: nn.silu(x),
    "swish": lambda nn, x: nn.swish(x),
    "gelu_tanh": lambda nn, x: nn.gelu(x, approximate=True),
    "gelu_erf": lambda nn, x: nn.gelu(x, approximate=False),
    "elu": lambda nn, x: nn.elu(x),
    "elu_alpha2": lambda nn, x: nn.elu(x, 2.0),
    "celu": lambda nn, x: nn.celu(x),
    "celu_alpha05": lambda nn, x: nn.celu(x, 0.5),
    "selu": lambda nn, x: nn.selu(x),
    "softplus": lambda nn, x: nn.softplus(x),
    "sigmoid": lambda nn, x: nn.sigmoid(x),
    "log_sigmoid": lambda nn, x: nn.log_sigmoid(x),
    "leaky_relu": lambda nn, x: nn.leaky_relu(x),
    "leaky_relu_02": lambda nn, x: nn.leaky_relu(x, 0.2),
    "hard_tanh": lambda nn, x: nn.hard_tanh(x),
    "squareplus": lambda nn, x: nn.squareplus(x),
    "squareplus_b0": lambda nn, x: nn.squareplus(x, 0.0),
    "mish": lambda nn, x: nn.mish(x),
    "soft_sign": lambda nn, x: nn.soft_sign(x),
    "hard_sigmoid": lambda nn, x: nn.hard_sigmoid(x),
    "hard_silu": lambda nn, x: nn.hard_silu(x),
    "tanh": lambda nn, x: nn.tanh(x),
}


def derivative_cases(jax, jnp, nn):
    """(name, kind, fn, args): kind 'grad' is jax.grad(fn, argnums=all)(*args), 'jacfwd' is
    jax.jacfwd(fn)(*args), 'jacrev' is jax.jacrev(fn)(*args)."""
    f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    cases = []
    w3 = f32([1.0, 2.0, 3.0])

    def row_loss(fn, weights):
        return lambda x: jnp.sum(fn(x) * weights)

    rows = f32(
        [
            [0.0, 1.0, 2.0],
            [-INF, 0.0, 1.0],
            [-INF, -INF, 0.0],
            [1000.0, 0.0, -1000.0],
            [INF, 0.0, 1.0],
            [NAN, 0.0, 1.0],
            [-INF, -INF, -INF],
        ]
    )
    masked_rows = f32([[0.0, 1.0, 2.0], [3.0, -INF, 1.0], [-INF, 5.0, 0.0]])
    mask = np.array([[True, False, True], [True, True, False], [False, True, True]])
    for name in ("softmax", "log_softmax"):
        fn = getattr(nn, name)
        cases.append((f"{name}_rows", "grad", row_loss(fn, w3), (rows,)))
        cases.append(
            (
                f"{name}_where",
                "grad",
                row_loss(lambda x, fn=fn: jnp.where(mask, fn(x, where=mask), 0.0), w3),
                (masked_rows,),
            )
        )
        cases.append(
            (
                f"{name}_axis0",
                "grad",
                row_loss(lambda x, fn=fn: fn(x, axis=0), f32([[1.0], [2.0], [3.0]])),
                (f32([[0.0, -INF], [1.0, 0.0], [2.0, 5.0]]),),
            )
        )
        for i, row in enumerate([[0.0, 1.0, 2.0], [-INF, 0.0, 1.0], [1000.0, 0.0, -1000.0]]):
            cases.append((f"{name}_jacfwd{i}", "jacfwd", fn, (f32(row),)))
            cases.append((f"{name}_jacrev{i}", "jacrev", fn, (f32(row),)))

    lse_rows = f32(
        [
            [-INF, 0.0, 1.0],
            [-INF, -INF, -INF],
            [INF, 0.0, 1.0],
            [1e4, 1e4, 0.0],
            [0.0, 0.0, 0.0],
            [NAN, 0.0, 1.0],
        ]
    )
    cases.append(
        (
            "logsumexp_rows",
            "grad",
            lambda a: jnp.sum(nn.logsumexp(a, axis=-1) * f32([1, 2, 3, 4, 5, 6])),
            (lse_rows,),
        )
    )
    cases.append(("logsumexp_all", "grad", lambda a: nn.logsumexp(a), (f32([-INF, 0.0, 2.0]),)))
    cases.append(
        (
            "logsumexp_keepdims",
            "grad",
            lambda a: jnp.sum(nn.logsumexp(a, axis=0, keepdims=True) * w3),
            (f32([[0.0, -INF, 1.0], [1.0, 0.0, -INF]]),),
        )
    )
    cases.append(
        (
            "logsumexp_b_zero",
            "grad",
            lambda a, b: nn.logsumexp(a, b=b),
            (f32([1.0, 2.0, 3.0]), f32([0.0, 1.0, 2.0])),
        )
    )
    cases.append(
        (
            "logsumexp_b_negative_sign",
            "grad",
            lambda a, b: nn.logsumexp(a, b=b, return_sign=True)[0],
            (f32([2.0, 1.0, 0.0]), f32([-1.0, 1.0, 0.5])),
        )
    )
    cases.append(
        (
            "logsumexp_b_negative_nan",
            "grad",
            lambda a, b: nn.logsumexp(a, b=b),
            (f32([2.0, 1.0, 0.0]), f32([-1.0, 1.0, 0.5])),
        )
    )
    cases.append(
        (
            "logsumexp_b_positive",
            "grad",
            lambda a, b: nn.logsumexp(a, b=b, return_sign=True)[0],
            (f32([0.0, 1.0, -INF]), f32([2.0, 0.5, 1.0])),
        )
    )
    cases.append(
        (
            "logsumexp_b_all_zero",
            "grad",
            lambda a, b: nn.logsumexp(a, b=b, return_sign=True)[0],
            (f32([0.0, 1.0]), f32([0.0, 0.0])),
        )
    )
    cases.append(
        (
            "logsumexp_where",
            "grad",
            lambda a: jnp.sum(nn.logsumexp(a, axis=-1, where=mask) * w3),
            (masked_rows,),
        )
    )
    cases.append(
        (
            "logsumexp_jacfwd",
            "jacfwd",
            lambda a: nn.logsumexp(a, axis=-1),
            (f32([[-INF, 0.0, 1.0], [1e4, 1e4, 0.0]]),),
        )
    )

    cases.append(
        (
            "standardize",
            "grad",
            lambda x: jnp.sum(nn.standardize(x) * f32([1, -2, 3, 0.5])),
            (f32([1.0, 2.0, 4.0, 8.0]),),
        )
    )
    cases.append(
        (
            "standardize_constant",
            "grad",
            lambda x: jnp.sum(nn.standardize(x) * f32([1, -2, 3, 0.5])),
            (f32([3.0, 3.0, 3.0, 3.0]),),
        )
    )
    cases.append(
        (
            "standardize_given_stats",
            "grad",
            lambda x, m, v: jnp.sum(nn.standardize(x, mean=m, variance=v) * f32([1, -2, 3, 0.5])),
            (f32([1.0, 2.0, 4.0, 8.0]), f32(2.0), f32(3.0)),
        )
    )
    cases.append(
        (
            "standardize_where",
            "grad",
            lambda x: jnp.sum(
                nn.standardize(x, where=np.array([True, False, True, True])) * f32([1, -2, 3, 0.5])
            ),
            (f32([1.0, 2.0, 4.0, 8.0]),),
        )
    )
    cases.append(
        (
            "glu",
            "grad",
            lambda x: jnp.sum(nn.glu(x) * w3),
            (f32([0.0, 1.0, INF, 0.0, -INF, 100.0]),),
        )
    )
    cases.append(
        (
            "glu_axis0",
            "grad",
            lambda x: jnp.sum(nn.glu(x, axis=0) * f32([[1.0, 2.0]])),
            (f32([[0.5, -1.0], [2.0, -INF]]),),
        )
    )
    cases.append(
        (
            "one_hot_float_labels",
            "grad",
            lambda x: jnp.sum(nn.one_hot(x, 3) * w3),
            (f32([0.0, 1.0, 2.0, 5.0]),),
        )
    )
    cases.append(
        (
            "one_hot_of_int_cast",
            "grad",
            lambda x: jnp.sum(nn.one_hot(x.astype(np.int32), 3) * w3) + jnp.sum(x),
            (f32([0.0, 1.0, 2.0]),),
        )
    )
    return cases


# --- cases end ---

# --- JAX 0.10.2 values (float32): for each elementwise function, the gradient of sum(f(x)) at
# POINTS (reverse mode), the forward-mode derivative at POINTS, and the second derivative at
# POINTS2; for each case of derivative_cases, the derivative it names.
EXPECTED_ELEMENTWISE = {
    "relu": (
        [
            0.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            1.0,
            0.0,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            0.0,
        ],
        [
            0.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            1.0,
            0.0,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            0.0,
        ],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ),
    "relu6": (
        [
            0.0,
            0.0,
            1.0,
            0.0,
            0.0,
            0.0,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
        ],
        [
            0.0,
            0.0,
            1.0,
            0.0,
            0.0,
            0.0,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
        ],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ),
    "silu": (
        [
            0.5,
            0.5,
            0.92767054,
            0.07232949,
            1.0123262,
            -0.08810411,
            1.0881041,
            0.7399612,
            0.26003882,
            0.5,
            1.0,
            -3.916192e-08,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.5,
            0.5,
            0.92767054,
            0.07232949,
            1.0123262,
            -0.08810411,
            1.0881041,
            0.7399612,
            0.26003882,
            0.5,
            1.0,
            -3.916192e-08,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.5,
            0.3023661,
            0.30236614,
            -0.009792682,
            -0.032321405,
            -0.0323214,
            0.441229,
            0.44122905,
            0.0,
            -3.710077e-08,
            0.0,
            0.0,
        ],
    ),
    "swish": (
        [
            0.5,
            0.5,
            0.92767054,
            0.07232949,
            1.0123262,
            -0.08810411,
            1.0881041,
            0.7399612,
            0.26003882,
            0.5,
            1.0,
            -3.916192e-08,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.5,
            0.5,
            0.92767054,
            0.07232949,
            1.0123262,
            -0.08810411,
            1.0881041,
            0.7399612,
            0.26003882,
            0.5,
            1.0,
            -3.916192e-08,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.5,
            0.3023661,
            0.30236614,
            -0.009792682,
            -0.032321405,
            -0.0323214,
            0.441229,
            0.44122905,
            0.0,
            -3.710077e-08,
            0.0,
            0.0,
        ],
    ),
    "gelu_tanh": (
        [
            0.5,
            0.5,
            1.082964,
            -0.08296407,
            1.0,
            -0.011583906,
            1.0115839,
            0.86736995,
            0.13263011,
            0.5,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.5,
            0.5,
            1.0829641,
            -0.08296406,
            1.0,
            -0.011584012,
            1.0115839,
            0.8673699,
            0.13263012,
            0.5,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.7978846,
            0.24214809,
            0.2421481,
            0.0,
            -0.031766526,
            -0.03176724,
            0.615507,
            0.6155069,
            0.0,
            0.0,
            0.0,
            0.0,
        ],
    ),
    "gelu_erf": (
        [
            0.5,
            0.5,
            1.0833155,
            -0.08331548,
            1.0,
            -0.011945652,
            1.0119456,
            0.8674951,
            0.13250488,
            0.5,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.5,
            0.5,
            1.0833155,
            -0.08331546,
            1.0,
            -0.011945653,
            1.0119456,
            0.8674951,
            0.13250488,
            0.5,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.7978846,
            0.24197075,
            0.24197075,
            -2.065804e-07,
            -0.031022947,
            -0.031022947,
            0.6161143,
            0.6161143,
            0.0,
            0.0,
            0.0,
            0.0,
        ],
    ),
    "elu": (
        [
            1.0,
            1.0,
            1.0,
            0.36787945,
            1.0,
            0.049787045,
            1.0,
            1.0,
            0.60653067,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [
            1.0,
            1.0,
            1.0,
            0.36787945,
            1.0,
            0.049787045,
            1.0,
            1.0,
            0.60653067,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [1.0, 0.0, 0.36787945, 0.0, 0.049787045, 0.0, 0.0, 0.60653067, 0.0, 0.0, 0.0, 0.0],
    ),
    "elu_alpha2": (
        [
            2.0,
            2.0,
            1.0,
            0.7357589,
            1.0,
            0.09957409,
            1.0,
            1.0,
            1.2130613,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [
            2.0,
            2.0,
            1.0,
            0.7357589,
            1.0,
            0.09957409,
            1.0,
            1.0,
            1.2130613,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [2.0, 0.0, 0.7357589, 0.0, 0.09957409, 0.0, 0.0, 1.2130613, 0.0, 0.0, 0.0, 0.0],
    ),
    "celu": (
        [
            1.0,
            1.0,
            1.0,
            0.36787945,
            1.0,
            0.049787045,
            1.0,
            1.0,
            0.60653067,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [
            1.0,
            1.0,
            1.0,
            0.36787945,
            1.0,
            0.049787045,
            1.0,
            1.0,
            0.60653067,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [0.25, 0.0, 0.36787945, 0.0, 0.049787045, 0.0, 0.0, 0.60653067, 0.0, 0.0, 0.0, 0.0],
    ),
    "celu_alpha05": (
        [
            1.0,
            1.0,
            1.0,
            0.13533527,
            1.0,
            0.0024787784,
            1.0,
            1.0,
            0.36787945,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [
            1.0,
            1.0,
            1.0,
            0.13533527,
            1.0,
            0.0024787784,
            1.0,
            1.0,
            0.36787945,
            1.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [0.5, 0.0, 0.27067053, 0.0, 0.0049575567, 0.0, 0.0, 0.7357589, 0.0, 0.0, 0.0, 0.0],
    ),
    "selu": (
        [
            1.7580993,
            1.7580993,
            1.050701,
            0.6467686,
            1.050701,
            0.08753057,
            1.050701,
            1.050701,
            1.0663412,
            1.050701,
            1.050701,
            0.0,
            1.050701,
            0.0,
            1.050701,
            0.0,
            1.050701,
            0.0,
            NAN,
        ],
        [
            1.7580993,
            1.7580993,
            1.050701,
            0.6467686,
            1.050701,
            0.08753057,
            1.050701,
            1.050701,
            1.0663412,
            1.050701,
            1.050701,
            0.0,
            1.050701,
            0.0,
            1.050701,
            0.0,
            1.050701,
            0.0,
            NAN,
        ],
        [1.7580993, 0.0, 0.6467686, 0.0, 0.08753057, 0.0, 0.0, 1.0663412, 0.0, 0.0, 0.0, 0.0],
    ),
    "softplus": (
        [
            0.5,
            0.5,
            0.73105854,
            0.2689414,
            0.9975273,
            0.047425874,
            0.95257413,
            0.62245935,
            0.37754068,
            0.5,
            1.0,
            2.0611537e-09,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [
            0.5,
            0.5,
            0.73105854,
            0.2689414,
            0.9975273,
            0.047425874,
            0.95257413,
            0.62245935,
            0.37754068,
            0.5,
            1.0,
            2.0611537e-09,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [
            0.25,
            0.19661196,
            0.19661193,
            0.0024665846,
            0.04517666,
            0.045176655,
            0.23500371,
            0.23500371,
            0.0,
            2.0611537e-09,
            0.0,
            0.0,
        ],
    ),
    "sigmoid": (
        [
            0.25,
            0.25,
            0.19661193,
            0.19661194,
            0.0024664658,
            0.04517666,
            0.045176655,
            0.23500371,
            0.23500371,
            0.25,
            0.0,
            2.0611537e-09,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            NAN,
        ],
        [
            0.25,
            0.25,
            0.19661193,
            0.19661194,
            0.0024664658,
            0.04517666,
            0.045176655,
            0.23500371,
            0.23500371,
            0.25,
            0.0,
            2.0611537e-09,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            NAN,
        ],
        [
            0.0,
            -0.09085775,
            0.09085775,
            -0.0024542687,
            0.040891573,
            -0.040891573,
            -0.057556804,
            0.057556782,
            -0.0,
            2.0611537e-09,
            -0.0,
            0.0,
        ],
    ),
    "log_sigmoid": (
        [
            0.5,
            0.5,
            0.2689414,
            0.73105854,
            0.002472623,
            0.95257413,
            0.047425874,
            0.37754068,
            0.62245935,
            0.5,
            2.0611537e-09,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            NAN,
        ],
        [
            0.5,
            0.5,
            0.2689414,
            0.73105854,
            0.002472623,
            0.95257413,
            0.047425874,
            0.37754068,
            0.62245935,
            0.5,
            2.0611537e-09,
            1.0,
            -0.0,
            1.0,
            -0.0,
            1.0,
            -0.0,
            1.0,
            NAN,
        ],
        [
            -0.25,
            -0.19661193,
            -0.19661196,
            -0.0024665091,
            -0.045176655,
            -0.04517666,
            -0.23500371,
            -0.23500371,
            -2.0611537e-09,
            -0.0,
            -0.0,
            -0.0,
        ],
    ),
    "leaky_relu": (
        [
            1.0,
            1.0,
            1.0,
            0.01,
            1.0,
            0.01,
            1.0,
            1.0,
            0.01,
            1.0,
            1.0,
            0.01,
            1.0,
            0.01,
            1.0,
            0.01,
            1.0,
            0.01,
            0.01,
        ],
        [
            1.0,
            1.0,
            1.0,
            0.01,
            1.0,
            0.01,
            1.0,
            1.0,
            0.01,
            1.0,
            1.0,
            0.01,
            1.0,
            0.01,
            1.0,
            0.01,
            1.0,
            0.01,
            0.01,
        ],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ),
    "leaky_relu_02": (
        [
            1.0,
            1.0,
            1.0,
            0.2,
            1.0,
            0.2,
            1.0,
            1.0,
            0.2,
            1.0,
            1.0,
            0.2,
            1.0,
            0.2,
            1.0,
            0.2,
            1.0,
            0.2,
            0.2,
        ],
        [
            1.0,
            1.0,
            1.0,
            0.2,
            1.0,
            0.2,
            1.0,
            1.0,
            0.2,
            1.0,
            1.0,
            0.2,
            1.0,
            0.2,
            1.0,
            0.2,
            1.0,
            0.2,
            0.2,
        ],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ),
    "hard_tanh": (
        [
            1.0,
            1.0,
            1.0,
            1.0,
            0.0,
            0.0,
            0.0,
            1.0,
            1.0,
            1.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            1.0,
        ],
        [
            1.0,
            1.0,
            1.0,
            1.0,
            0.0,
            0.0,
            0.0,
            1.0,
            1.0,
            1.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            1.0,
        ],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ),
    "squareplus": (
        [
            0.5,
            0.5,
            0.7236068,
            0.2763932,
            0.97434163,
            0.08397485,
            0.91602516,
            0.6212678,
            0.37873217,
            0.5,
            0.99751866,
            0.0024813712,
            0.99990004,
            9.994209e-05,
            0.5,
            0.5,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.5,
            0.5,
            0.7236068,
            0.2763932,
            0.97434163,
            0.08397485,
            0.91602516,
            0.6212678,
            0.37873217,
            0.5,
            0.99751866,
            0.0024813712,
            0.99990004,
            9.994209e-05,
            0.5,
            0.5,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.25,
            0.17888543,
            0.17888543,
            0.007905692,
            0.042669244,
            0.042669244,
            0.22826883,
            0.22826883,
            0.00024629384,
            0.00024629384,
            1.9986182e-06,
            1.9986182e-06,
        ],
    ),
    "squareplus_b0": (
        [
            NAN,
            NAN,
            1.0,
            0.0,
            1.0,
            -1.4901161e-08,
            1.0,
            1.0,
            0.0,
            INF,
            1.0,
            -7.450581e-09,
            1.0,
            1.1175871e-08,
            0.5,
            0.5,
            NAN,
            NAN,
            NAN,
        ],
        [
            NAN,
            NAN,
            1.0,
            0.0,
            1.0,
            -1.4901161e-08,
            1.0,
            1.0,
            0.0,
            INF,
            1.0,
            -7.450581e-09,
            1.0,
            1.1175871e-08,
            0.5,
            0.5,
            NAN,
            NAN,
            NAN,
        ],
        [
            NAN,
            0.0,
            0.0,
            -7.450581e-09,
            -1.4901161e-08,
            -1.4901161e-08,
            0.0,
            0.0,
            1.8626451e-09,
            1.8626451e-09,
            0.0,
            0.0,
        ],
    ),
    "mish": (
        [
            0.6,
            0.6,
            1.0490361,
            0.059216753,
            1.0001334,
            -0.09339312,
            1.0211061,
            0.8864244,
            0.28951067,
            0.6,
            1.0,
            -3.916192e-08,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.6,
            0.6,
            1.0490361,
            0.059216753,
            1.0001334,
            -0.09339312,
            1.0211061,
            0.8864244,
            0.28951067,
            0.6,
            1.0,
            -3.916192e-08,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.64,
            0.18468562,
            0.34970567,
            -0.00024150091,
            -0.03992871,
            -0.03026542,
            0.46805325,
            0.5639709,
            0.0,
            -3.710077e-08,
            0.0,
            0.0,
        ],
    ),
    "soft_sign": (
        [
            1.0,
            1.0,
            0.25,
            0.25,
            0.020408168,
            0.0625,
            0.0625,
            0.44444448,
            0.44444448,
            1.0,
            0.002267573,
            0.002267573,
            9.803008e-05,
            9.803008e-05,
            1e-20,
            1e-20,
            NAN,
            NAN,
            NAN,
        ],
        [
            1.0,
            1.0,
            0.25,
            0.25,
            0.020408172,
            0.0625,
            0.0625,
            0.44444448,
            0.44444448,
            1.0,
            0.002267574,
            0.002267574,
            9.8029675e-05,
            9.8029675e-05,
            1e-20,
            1e-20,
            NAN,
            NAN,
            NAN,
        ],
        [
            -2.0,
            -0.25,
            0.25,
            -0.0058309017,
            0.03125,
            -0.03125,
            -0.5925926,
            0.5925926,
            -0.0002159595,
            0.0002159595,
            -1.9411818e-06,
            1.9411818e-06,
        ],
    ),
    "hard_sigmoid": (
        [
            0.16666667,
            0.16666667,
            0.16666667,
            0.16666667,
            0.0,
            0.0,
            0.0,
            0.16666667,
            0.16666667,
            0.16666667,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
        ],
        [
            0.16666667,
            0.16666667,
            0.16666667,
            0.16666667,
            0.0,
            0.0,
            0.0,
            0.16666667,
            0.16666667,
            0.16666667,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
        ],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ),
    "hard_silu": (
        [
            0.5,
            0.5,
            0.8333334,
            0.16666667,
            1.0,
            0.0,
            1.0,
            0.6666667,
            0.33333334,
            0.5,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
        ],
        [
            0.5,
            0.5,
            0.8333334,
            0.16666667,
            1.0,
            0.0,
            1.0,
            0.6666667,
            0.33333334,
            0.5,
            1.0,
            0.0,
            1.0,
            0.0,
            1.0,
            0.0,
            NAN,
            NAN,
            NAN,
        ],
        [
            0.33333334,
            0.33333334,
            0.33333334,
            0.0,
            0.0,
            0.0,
            0.33333334,
            0.33333334,
            0.0,
            0.0,
            0.0,
            0.0,
        ],
    ),
    "tanh": (
        [
            1.0,
            1.0,
            0.41997433,
            0.41997433,
            2.479538e-05,
            0.009866118,
            0.009866101,
            0.7864477,
            0.78644776,
            1.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            NAN,
        ],
        [
            1.0,
            1.0,
            0.4199743,
            0.4199743,
            2.479538e-05,
            0.009866101,
            0.009866101,
            0.7864477,
            0.7864477,
            1.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            NAN,
        ],
        [
            0.0,
            -0.6397,
            0.63969994,
            -4.959014e-05,
            0.019634724,
            -0.01963462,
            -0.726862,
            0.726862,
            -0.0,
            0.0,
            -0.0,
            0.0,
        ],
    ),
}
EXPECTED = {
    "softmax_rows": (
        [
            [-0.1418171, -0.14077039, 0.2825873],
            [-0.0, -0.19661205, 0.19661164],
            [-0.0, -0.0, 0.0],
            [0.0, 0.0, 0.0],
            [NAN, NAN, NAN],
            [NAN, NAN, NAN],
            [NAN, NAN, NAN],
        ],
    ),
    "softmax_where": (
        [[-0.20998713, 0.0, 0.2099874], [0.0, 0.0, 0.0], [0.0, -0.0066479445, 0.006648058]],
    ),
    "softmax_axis0": (
        [[-0.1418171, -0.0], [-0.14077039, -0.0066480557], [0.2825873, 0.006648302]],
    ),
    "softmax_jacfwd0": (
        [
            [0.081925064, -0.022033045, -0.059892025],
            [-0.022033045, 0.18483645, -0.16280341],
            [-0.059892025, -0.16280341, 0.22269541],
        ],
    ),
    "softmax_jacrev0": (
        [
            [0.08192507, -0.022033045, -0.059892025],
            [-0.022033045, 0.18483645, -0.16280341],
            [-0.059892025, -0.16280341, 0.22269541],
        ],
    ),
    "softmax_jacfwd1": (
        [[0.0, 0.0, 0.0], [0.0, 0.19661193, -0.19661197], [0.0, -0.19661197, 0.19661188]],
    ),
    "softmax_jacrev1": (
        [[0.0, 0.0, 0.0], [-0.0, 0.19661193, -0.19661197], [-0.0, -0.19661197, 0.19661188]],
    ),
    "softmax_jacfwd2": ([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],),
    "softmax_jacrev2": ([[0.0, -0.0, -0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],),
    "log_softmax_rows": (
        [
            [0.45981658, 0.53162915, -0.9914458],
            [1.0, 0.38635138, -1.3863516],
            [1.0, 2.0, -3.0],
            [-5.0, 2.0, 3.0],
            [NAN, NAN, NAN],
            [NAN, NAN, NAN],
            [NAN, NAN, NAN],
        ],
    ),
    "log_softmax_where": (
        [[0.52318835, 0.0, -0.5231881], [-2.0, 2.0, 0.0], [0.0, -2.9665356, 2.9665358]],
    ),
    "log_softmax_axis0": ([[0.45981658, 1.0], [0.53162915, 1.9598429], [-0.9914458, -2.9598427]],),
    "log_softmax_jacfwd0": (
        [
            [0.90996945, -0.24472848, -0.66524094],
            [-0.09003057, 0.75527155, -0.66524094],
            [-0.09003057, -0.24472848, 0.33475906],
        ],
    ),
    "log_softmax_jacrev0": (
        [
            [0.90996945, -0.24472848, -0.66524094],
            [-0.09003057, 0.75527155, -0.66524094],
            [-0.09003057, -0.24472848, 0.33475906],
        ],
    ),
    "log_softmax_jacfwd1": (
        [
            [1.0, -0.26894143, -0.7310586],
            [0.0, 0.7310586, -0.7310586],
            [0.0, -0.26894143, 0.2689414],
        ],
    ),
    "log_softmax_jacrev1": (
        [
            [1.0, -0.26894143, -0.7310586],
            [0.0, 0.73105854, -0.7310586],
            [0.0, -0.26894143, 0.2689414],
        ],
    ),
    "log_softmax_jacfwd2": ([[0.0, 0.0, 0.0], [-1.0, 1.0, 0.0], [-1.0, 0.0, 1.0]],),
    "log_softmax_jacrev2": ([[0.0, 0.0, 0.0], [-1.0, 1.0, 0.0], [-1.0, 0.0, 1.0]],),
    "logsumexp_rows": (
        [
            [0.0, 0.26894143, 0.7310586],
            [NAN, NAN, NAN],
            [NAN, 0.0, 0.0],
            [2.0, 2.0, 0.0],
            [1.6666666, 1.6666666, 1.6666666],
            [NAN, NAN, NAN],
        ],
    ),
    "logsumexp_all": ([0.0, 0.11920291, 0.880797],),
    "logsumexp_keepdims": ([[0.26894143, 0.0, 3.0], [0.7310586, 2.0, 0.0]],),
    "logsumexp_b_zero": (
        [0.0, 0.15536241, 0.84463763],
        [0.0, 0.15536241, 0.42231882],
    ),
    "logsumexp_b_negative_sign": (
        [1.7716271, -0.6517452, -0.11988182],
        [-1.7716271, -0.6517452, -0.23976365],
    ),
    "logsumexp_b_negative_nan": (
        [-0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ),
    "logsumexp_b_positive": (
        [0.5953903, 0.40460968, 0.0],
        [0.29769516, 0.80921936, 0.0],
    ),
    "logsumexp_b_all_zero": (
        [0.0, 0.0],
        [NAN, NAN],
    ),
    "logsumexp_where": (
        [[0.11920291, 0.0, 0.880797], [2.0, 0.0, 0.0], [0.0, 2.9799213, 0.020078553]],
    ),
    "logsumexp_jacfwd": (
        [[[0.0, 0.26894143, 0.7310586], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [0.5, 0.5, 0.0]]],
    ),
    "standardize": ([0.2692097, -0.89682585, 0.8741213, -0.24650517],),
    "standardize_constant": ([118.5854, -830.09784, 751.0409, -39.528473],),
    "standardize_given_stats": (
        [0.5773493, -1.1546986, 1.7320479, 0.28867465],
        -1.4433732,
        -0.7697965,
    ),
    "standardize_where": ([0.16023307, -0.6974855, 0.76582026, -0.22856776],),
    "glu": ([0.5, 0.0, 3.0, 0.0, 0.0, NAN],),
    "glu_axis0": ([[0.880797, 0.0], [0.052496813, -0.0]],),
    "one_hot_float_labels": ([0.0, 0.0, 0.0, 0.0],),
    "one_hot_of_int_cast": ([1.0, 1.0, 1.0],),
}


def assert_jax_values(actual, expected, name, atol=2e-6):
    actual = np.asarray(actual)
    expected = np.asarray(expected, dtype=np.float32)
    assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
    # Same NaN pattern exactly (that is what the edge rules decide); finite values to float32
    # rounding: 1 - tanh(x)^2 and the like cancel, so one ulp of difference in a primitive's
    # value shows as ~1e-7 absolute in the derivative, far below the 0.5-sized differences
    # of a wrong kink rule.
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected), err_msg=name)
    np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=atol, err_msg=name)


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_first_derivative_reverse(name):
    fn = ELEMENTWISE[name]
    x = jnp.asarray(np.asarray(POINTS, np.float32))
    grad = kiln.grad(lambda x: jnp.sum(fn(nn, x)))(x)
    assert_jax_values(grad, EXPECTED_ELEMENTWISE[name][0], name)


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_first_derivative_forward(name):
    fn = ELEMENTWISE[name]
    x = jnp.asarray(np.asarray(POINTS, np.float32))
    _, tangent = kiln.jvp(lambda x: fn(nn, x), (x,), (jnp.ones_like(x),))
    assert_jax_values(tangent, EXPECTED_ELEMENTWISE[name][1], name)


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_second_derivative(name):
    fn = ELEMENTWISE[name]
    x = jnp.asarray(np.asarray(POINTS2, np.float32))
    first = kiln.grad(lambda x: jnp.sum(fn(nn, x)))
    second = kiln.grad(lambda x: jnp.sum(first(x)))(x)
    assert_jax_values(second, EXPECTED_ELEMENTWISE[name][2], name, atol=5e-6)


CASES = {case[0]: case for case in derivative_cases(kiln, jnp, nn)}


@pytest.mark.parametrize("name", list(CASES))
def test_case_matches_jax(name):
    _, kind, fn, args = CASES[name]
    args = tuple(jnp.asarray(a) for a in args)
    if kind == "grad":
        result = kiln.grad(fn, argnums=tuple(range(len(args))))(*args)
    elif kind == "jacfwd":
        result = (kiln.jacfwd(fn)(*args),)
    else:
        result = (kiln.jacrev(fn)(*args),)
    assert len(result) == len(EXPECTED[name])
    for i, (actual, expected) in enumerate(zip(result, EXPECTED[name])):
        assert_jax_values(actual, expected, f"{name} argument {i}")


def test_expected_table_covers_every_case():
    assert set(EXPECTED) == set(CASES)
    assert set(EXPECTED_ELEMENTWISE) == set(ELEMENTWISE)


def test_relu_kink_rules_by_hand():
    # The values the custom rules exist for, worked out by hand: relu'(0) = 0, relu6'(0) =
    # relu6'(6) = 0, and the rule also holds under jit and vmap.
    assert float(kiln.grad(nn.relu)(0.0)) == 0.0
    assert float(kiln.grad(nn.relu6)(0.0)) == 0.0
    assert float(kiln.grad(nn.relu6)(6.0)) == 0.0
    assert float(kiln.jit(kiln.grad(nn.relu))(0.0)) == 0.0
    np.testing.assert_array_equal(
        np.asarray(kiln.vmap(kiln.grad(nn.relu6))(jnp.asarray([-1.0, 0.0, 3.0, 6.0, 7.0]))),
        [0.0, 0.0, 1.0, 0.0, 0.0],
    )


def test_one_hot_integer_labels_have_no_gradient():
    labels = jnp.asarray([0, 2, 1], dtype=jnp.int32)
    with pytest.raises(TypeError, match="int32"):
        kiln.grad(lambda x: jnp.sum(nn.one_hot(x, 3)))(labels)
    # The integer path still runs under jvp: the output tangent is zero.
    primal, tangent = kiln.jvp(lambda w: nn.one_hot(labels, 3) * w, (jnp.ones(3),), (jnp.ones(3),))
    np.testing.assert_array_equal(np.asarray(primal), np.eye(3)[[0, 2, 1]])
    np.testing.assert_array_equal(np.asarray(tangent), np.eye(3)[[0, 2, 1]])


def test_logsumexp_gradient_is_softmax_by_hand():
    # Ties in the maximum included: a gradient through the max would split there.
    a = np.asarray([2.0, -1.0, 2.0], np.float32)
    grad = kiln.grad(nn.logsumexp)(jnp.asarray(a))
    expected = np.exp(a - a.max()) / np.exp(a - a.max()).sum()
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-6)


# --- check_grads at smooth points -----------------------------------------------------------

SMOOTH = {
    **{name: (fn, "any") for name, fn in ELEMENTWISE.items()},
    "softmax": (lambda nn, x: nn.softmax(x), "any"),
    "softmax_axis0": (lambda nn, x: nn.softmax(x, axis=0), "any"),
    "log_softmax": (lambda nn, x: nn.log_softmax(x), "any"),
    "logsumexp": (lambda nn, x: nn.logsumexp(x, axis=-1), "any"),
    "logsumexp_b": (
        lambda nn, x: nn.logsumexp(x, axis=-1, b=np.float32([[1.0], [0.5], [2.0]])),
        "any",
    ),
    "logsumexp_sign": (lambda nn, x: nn.logsumexp(x, axis=0, b=x, return_sign=True)[0], "positive"),
    "standardize": (lambda nn, x: nn.standardize(x), "any"),
    "glu": (lambda nn, x: nn.glu(x), "any"),
}


def smooth_points(name: str, kind: str) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.uniform(0.3, 2.5, size=(3, 4)) * rng.choice([-1.0, 1.0], size=(3, 4))
    if kind == "positive":
        x = np.abs(x)
    # Keep away from the kinks of the piecewise functions (+-1, +-3, 0, 6), where finite
    # differences straddle two pieces.
    x = np.where(np.abs(np.abs(x) - 1.0) < 0.1, x * 1.3, x)
    x = np.where(np.abs(np.abs(x) - 3.0) < 0.1, x * 0.8, x)
    return x.astype(np.float32)


@pytest.mark.parametrize("name", list(SMOOTH))
def test_check_grads_smooth(name):
    fn, kind = SMOOTH[name]
    x = jnp.asarray(smooth_points(name, kind))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_grads(lambda x: fn(nn, x), (x,), order=2, modes=("fwd", "rev"), atol=2e-2, rtol=2e-2)

"""compiler/passes/scan_accumulators.py: products accumulated over a scan's steps are computed
after the scan as one product over all steps, exactly where the rewrite applies."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.compiler import pipeline
from kiln.compiler.passes import hoist_scan_accumulators
from kiln.primitives.control_flow import scan_p
from kiln.primitives.linalg import dot_general_p


def _rnn_loss(W, U, b, xs, h0):
    def cell(h, x_t):
        return jnp.tanh(h @ W + x_t @ U + b), None

    h, _ = lax.scan(cell, h0, xs)
    return jnp.sum(h**2)


def _args(T=6, B=3, H=5, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((H, H)) * 0.4).astype(np.float32),
        (rng.standard_normal((H, H)) * 0.4).astype(np.float32),
        rng.standard_normal(H).astype(np.float32),
        rng.standard_normal((T, B, H)).astype(np.float32),
        rng.standard_normal((B, H)).astype(np.float32),
    ]


def _numpy_grads(W, U, b, xs, h0):
    """Backpropagation through the unrolled loop in float64."""
    W, U, b, xs, h = (np.asarray(a, np.float64) for a in (W, U, b, xs, h0))
    hs = [h]
    for x in xs:
        h = np.tanh(h @ W + x @ U + b)
        hs.append(h)
    dh = 2 * hs[-1]
    dW, dU, db = np.zeros_like(W), np.zeros_like(U), np.zeros_like(b)
    for t in range(len(xs) - 1, -1, -1):
        dz = dh * (1 - hs[t + 1] ** 2)
        dW += hs[t].T @ dz
        dU += xs[t].T @ dz
        db += dz.sum(0)
        dh = dz @ W.T
    return dW, dU, db


def _outer_products_and_scans(closed):
    eqns = closed.jaxpr.eqns
    return (
        sum(e.primitive is dot_general_p for e in eqns),
        [e for e in eqns if e.primitive is scan_p],
    )


def test_rnn_weight_gradients_leave_the_backward_scan():
    args = _args()
    grad = kiln.grad(_rnn_loss, argnums=(0, 1, 2))
    closed = kiln.make_jaxpr(grad)(*args)
    optimized = pipeline.optimize(closed)
    products, scans = _outer_products_and_scans(optimized)
    assert products == 2  # dW and dU, each one product over every step
    backward = scans[-1]
    assert backward.params["num_carry"] == 2  # dh and db stay carries; dW, dU left
    got = kiln.jit(grad)(*args)
    for g, e in zip(got, _numpy_grads(*args)):
        np.testing.assert_allclose(np.asarray(g), e, rtol=2e-5, atol=2e-5)
    interpreted = kiln.jit(grad, backend="interpret")(*args)
    for g, e in zip(got, interpreted):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [1, 7])
def test_a_plain_accumulating_scan(reverse, length):
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((length, 4, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3)).astype(np.float32)

    def f(w, xs):
        def body(carry, x):
            acc, h = carry
            u = jnp.tanh(h @ w + x)  # depends on the other carry
            return (acc + (u.T @ x).T, u), None  # transpose(dot(u, x)): an accumulator

        (acc, h), _ = lax.scan(body, (jnp.ones((3, 3)), jnp.zeros((4, 3))), xs, reverse=reverse)
        return acc, h

    optimized = pipeline.optimize(kiln.make_jaxpr(f)(w, xs))
    products, scans = _outer_products_and_scans(optimized)
    assert products == 1 and scans[0].params["num_carry"] == 1
    acc, h = kiln.jit(f)(w, xs)
    expected_acc, hh = np.ones((3, 3)), np.zeros((4, 3))
    order = range(length - 1, -1, -1) if reverse else range(length)
    for t in order:
        u = np.tanh(hh @ w + xs[t])
        expected_acc = expected_acc + (u.T @ xs[t]).T
        hh = u
    np.testing.assert_allclose(np.asarray(acc), expected_acc, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(h), hh, rtol=1e-5, atol=1e-6)


def _unchanged(f, *args):
    closed = kiln.make_jaxpr(f)(*args)
    return hoist_scan_accumulators(closed) is closed


def test_carries_that_are_not_pure_accumulators_stay():
    xs = np.ones((5, 2, 3), np.float32)

    def read_in_body(xs):  # the accumulator feeds the step's own work
        def body(acc, x):
            return acc + (x.T @ (x * acc[0, 0])), None

        return lax.scan(body, jnp.zeros((3, 3)), xs)[0]

    def integer(xs):
        def body(acc, x):
            return acc + x.T @ x, None

        return lax.scan(body, jnp.zeros((3, 3), jnp.int32), xs.astype(jnp.int32))[0]

    def batched(xs):  # a batch dimension in the product: left alone
        def body(acc, x):
            return acc + lax.dot_general(x, x, (((1,), (1,)), ((0,), (0,)))), None

        return lax.scan(body, jnp.zeros((2,)), xs)[0]

    def from_xs_alone(xs):  # x_tᵀ x_t: one product over every step after the scan
        def body(acc, x):
            return acc + x.T @ x, None

        return lax.scan(body, jnp.zeros((3, 3)), xs)[0]

    assert _unchanged(read_in_body, xs)
    assert _unchanged(integer, xs)
    assert _unchanged(batched, xs)
    assert not _unchanged(from_xs_alone, xs)
    for f in (read_in_body, integer, batched, from_xs_alone):
        expected = kiln.jit(f, backend="interpret")(xs)
        np.testing.assert_allclose(np.asarray(kiln.jit(f)(xs)), np.asarray(expected), rtol=1e-6)

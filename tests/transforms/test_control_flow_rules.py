"""The derivative and batching rules of cond, while and scan (and of fori_loop, built on them),
through kiln.jvp / grad / linearize / vmap / jit: jvps and gradients against central finite
differences in float64, a scan RNN's gradient against the same RNN unrolled in Python, reverse
mode of while loops refused with JAX's error, and vmap against a Python loop over the batch."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.ad_util import UndefinedPrimal
from kiln.experimental import io_callback
from kiln.primitives.control_flow import cond_p, scan_p
from kiln.test_util import check_grads
from tests._testing import x64_mode

WHILE_GRAD_ERROR = (
    "Reverse-mode differentiation does not work for lax.while_loop or "
    "lax.fori_loop with dynamic start/stop values. Try using lax.scan, or "
    "using fori_loop with static start/stop."
)


@pytest.fixture(autouse=True)
def float64():
    with x64_mode(True):
        yield


def _numerical_jvp(f, args, tangents, eps=1e-6):
    plus = f(*[a + eps * t for a, t in zip(args, tangents)])
    minus = f(*[a - eps * t for a, t in zip(args, tangents)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)


def _numerical_grad(f, args, argnum=0, eps=1e-6):
    x = np.asarray(args[argnum], dtype=np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = 1.0
        tangents = [
            e if k == argnum else np.zeros_like(np.asarray(a, dtype=np.float64))
            for k, a in enumerate(args)
        ]
        grad[i] = _numerical_jvp(f, args, tangents, eps)
    return grad


# --- the functions under test, each with arguments --------------------------------------------


def cond_fn(x, y):
    return lax.cond(jnp.sum(x) > 0, lambda a, b: jnp.sin(a) * b, lambda a, b: a * a - b, x, y)


def switch_fn(x, y):
    branches = [lambda a, b: a * b, lambda a, b: jnp.exp(a) + b, lambda a, b: jnp.cos(a * b)]
    index = jnp.asarray(jnp.sum(x) * 2, dtype=jnp.int32) % 3
    return lax.switch(index, branches, x, y)


def while_fn(x, y):
    def body(carry):
        i, a, b = carry
        return i + 1, a * jnp.cos(b) + 0.5, b + a * 0.1

    return lax.while_loop(lambda c: c[0] < 4, body, (0, x, y))[1]


def scan_fn(x, y, reverse=False):
    def step(carry, xi):
        a, b = carry
        new_a = jnp.tanh(a * xi + b)
        return (new_a, b * 0.9 + new_a * y[0]), new_a * xi

    (a, b), ys = lax.scan(step, (x[0], x[1]), y, reverse=reverse)
    return a + b * 2 + jnp.sum(ys**2)


def reverse_scan_fn(x, y):
    return scan_fn(x, y, reverse=True)


def fori_fn(x, y):
    return lax.fori_loop(0, 3, lambda i, v: v * jnp.sin(v + y) + i * 0.3, x)


def fori_traced_bounds_fn(x, y):
    upper = jnp.asarray(jnp.sum(y) * 0 + 3, dtype=jnp.int32)  # a traced bound under jvp
    return lax.fori_loop(0, upper, lambda i, v: v * jnp.sin(v + y) + i * 0.3, x)


RNG = np.random.default_rng(0)
CASES = {
    "cond_true": (cond_fn, (RNG.uniform(0.5, 1, 3), RNG.standard_normal(3))),
    "cond_false": (cond_fn, (-RNG.uniform(0.5, 1, 3), RNG.standard_normal(3))),
    "switch_0": (switch_fn, (np.array([0.1, 0.2]), RNG.standard_normal(2))),
    "switch_1": (switch_fn, (np.array([0.3, 0.3]), RNG.standard_normal(2))),
    "switch_2": (switch_fn, (np.array([0.5, 0.6]), RNG.standard_normal(2))),
    "while": (while_fn, (RNG.standard_normal(2), RNG.standard_normal(2))),
    "scan": (scan_fn, (RNG.standard_normal(2), RNG.standard_normal(5))),
    "scan_reverse": (reverse_scan_fn, (RNG.standard_normal(2), RNG.standard_normal(5))),
    "fori_static": (fori_fn, (RNG.standard_normal(3), RNG.standard_normal(3))),
    "fori_traced_bounds": (fori_traced_bounds_fn, (RNG.standard_normal(3), RNG.standard_normal(3))),
}
REVERSE_CASES = [name for name in CASES if name not in ("while", "fori_traced_bounds")]


def _tangents(name, args):
    # drawn from the case's name, not the shared RNG: the same whichever tests ran before
    rng = np.random.default_rng(sum(map(ord, name)))
    return [rng.standard_normal(np.shape(a)) for a in args]


def _scalar(f):
    return lambda *args: jnp.sum(f(*args))


@pytest.mark.parametrize("name", list(CASES))
def test_jvp_matches_finite_differences(name):
    f, args = CASES[name]
    tangents = _tangents(name, args)
    out, tangent = kiln.jvp(f, args, tangents)
    np.testing.assert_allclose(np.asarray(out), np.asarray(f(*args)), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(tangent), _numerical_jvp(f, args, tangents), rtol=1e-6, atol=1e-8
    )


@pytest.mark.parametrize("name", list(CASES))
def test_linearize_matches_jvp(name):
    f, args = CASES[name]
    tangents = _tangents(name, args)
    out, f_jvp = kiln.linearize(f, *args)
    _, expected = kiln.jvp(f, args, tangents)
    np.testing.assert_allclose(np.asarray(out), np.asarray(f(*args)), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(f_jvp(*tangents)), np.asarray(expected), rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize("name", REVERSE_CASES)
@pytest.mark.parametrize("argnum", [0, 1])
def test_grad_matches_finite_differences(name, argnum):
    f, args = CASES[name]
    g = kiln.grad(_scalar(f), argnums=argnum)(*args)
    np.testing.assert_allclose(
        np.asarray(g), _numerical_grad(_scalar(f), args, argnum), rtol=1e-6, atol=1e-8
    )


@pytest.mark.parametrize("name", ["cond_true", "switch_2", "scan", "fori_static"])
def test_grad_under_jit_and_jit_of_grad_agree(name):
    f, args = CASES[name]
    eager = kiln.grad(_scalar(f), argnums=(0, 1))(*args)
    inner_jit = kiln.grad(kiln.jit(_scalar(f)), argnums=(0, 1))(*args)
    outer_jit = kiln.jit(kiln.grad(_scalar(f), argnums=(0, 1)))(*args)
    for a, b, c in zip(eager, inner_jit, outer_jit):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(c), np.asarray(a), rtol=1e-12)


def test_second_derivative_of_scan_with_cond():
    def f(c):
        def step(carry, x):
            y = lax.cond(x > 0, lambda v: v * jnp.sin(carry), lambda v: v * carry**2, x)
            return carry + y * c, y

        carry, ys = lax.scan(step, c, np.array([0.5, -1.0, 2.0, -0.3]))
        return carry + jnp.sum(ys**2)

    second = kiln.grad(kiln.grad(f))(0.9)
    np.testing.assert_allclose(
        np.asarray(second), _numerical_jvp(kiln.grad(f), [0.9], [1.0]), rtol=1e-6
    )


@pytest.mark.parametrize("name", list(CASES))
def test_check_grads_second_order(name):
    f, args = CASES[name]
    modes = ("fwd", "rev") if name in REVERSE_CASES else ("fwd",)
    check_grads(f, args, order=2, modes=modes)


# --- scan RNN: gradients against the same loop unrolled in Python -----------------------------


def _rnn_params(seed=1, hidden=4, inputs=3, steps=6):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((hidden, hidden)) * 0.5,
        rng.standard_normal((hidden, inputs)),
        rng.standard_normal(hidden),
        rng.standard_normal((steps, inputs)),
    )


def rnn_scan(W, U, h0, xs):
    def step(h, x):
        h = jnp.tanh(W @ h + U @ x)
        return h, jnp.sum(h**2)

    h, losses = lax.scan(step, h0, xs)
    return jnp.sum(h) + jnp.sum(losses)


def rnn_unrolled(W, U, h0, xs):
    h, total = h0, 0.0
    for t in range(xs.shape[0]):
        h = jnp.tanh(W @ h + U @ xs[t])
        total = total + jnp.sum(h**2)
    return jnp.sum(h) + total


def test_rnn_grad_equals_unrolled_grad():
    params = _rnn_params()
    scanned = kiln.grad(rnn_scan, argnums=(0, 1, 2, 3))(*params)
    unrolled = kiln.grad(rnn_unrolled, argnums=(0, 1, 2, 3))(*params)
    for a, b in zip(scanned, unrolled):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        np.asarray(scanned[0]), _numerical_grad(rnn_scan, params, 0), rtol=1e-6, atol=1e-8
    )


def test_loop_invariant_residuals_are_not_stacked():
    # The residual cos(W) depends only on a const: it is computed once, not saved per step.
    W, _, h0, xs = _rnn_params()
    steps = xs.shape[0]

    def f(W, h0):
        return jnp.sum(lax.scan(lambda h, x: (jnp.cos(W) @ h * x[0], h), h0, xs)[0])

    closed = kiln.make_jaxpr(kiln.grad(f))(W, h0)
    shapes = [tuple(v.aval.shape) for e in closed.jaxpr.eqns for v in e.outvars]
    assert (steps,) + W.shape not in shapes
    np.testing.assert_allclose(
        np.asarray(kiln.grad(f)(W, h0)), _numerical_grad(f, (W, h0), 0), rtol=1e-6, atol=1e-8
    )


# --- while loops: forward mode only -------------------------------------------------------------


def test_grad_of_while_loop_raises():
    f, args = CASES["while"]
    with pytest.raises(ValueError) as info:
        kiln.grad(_scalar(f))(*args)
    assert str(info.value) == WHILE_GRAD_ERROR


def test_grad_of_fori_loop_with_traced_bounds_raises():
    def f(x, n):
        return lax.fori_loop(0, n, lambda i, v: v * jnp.sin(v), x)

    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        kiln.grad(kiln.jit(f))(0.5, 3)
    # Forward mode works with the same traced bound.
    forward = lambda x: kiln.jit(f)(x, 3)  # noqa: E731
    np.testing.assert_allclose(
        np.asarray(kiln.jvp(forward, (0.5,), (1.0,))[1]),
        _numerical_jvp(forward, [0.5], [1.0]),
        rtol=1e-6,
    )


def test_fori_loop_with_static_bounds_is_a_scan():
    closed = kiln.make_jaxpr(lambda x: lax.fori_loop(0, 3, lambda i, v: v * 2.0, x))(1.0)
    assert [e.primitive for e in closed.jaxpr.eqns] == [scan_p]


# --- direct rule checks: transposes by the dot-product test ---------------------------------


def test_cond_transpose_dot_product():
    rng = np.random.default_rng(3)
    x, ct, scale = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(4)
    for pred in (False, True):

        def linear(v, pred=pred):
            return lax.cond(pred, lambda a, s: a * s, lambda a, s: -2.0 * a, v, scale)

        eqn = kiln.make_jaxpr(linear)(x).jaxpr.eqns[-1]
        assert eqn.primitive is cond_p
        index = np.int32(pred)
        (ct_x,) = [
            c
            for c in cond_p.rule("transpose")(
                [jnp.asarray(ct)],
                jnp.asarray(index),
                *[
                    UndefinedPrimal(v.aval) if i == 0 else jnp.asarray(scale)
                    for i, v in enumerate(eqn.invars[1:])
                ],
                **eqn.params,
            )
            if c is not None
        ]
        np.testing.assert_allclose(
            np.dot(ct, np.asarray(linear(x))), np.dot(np.asarray(ct_x), x), rtol=1e-12
        )


def test_scan_transpose_dot_product():
    rng = np.random.default_rng(4)
    scale, init, xs = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal((5, 3))

    def linear(c, xs):
        return lax.scan(lambda h, x: (h * scale + x, h * 2.0 - x), c, xs)

    eqn = kiln.make_jaxpr(linear)(init, xs).jaxpr.eqns[-1]
    assert eqn.primitive is scan_p
    ct_carry, ct_ys = rng.standard_normal(3), rng.standard_normal((5, 3))
    consts = [jnp.asarray(scale)] * eqn.params["num_consts"]
    cts = scan_p.rule("transpose")(
        [jnp.asarray(ct_carry), jnp.asarray(ct_ys)],
        *consts,
        *[UndefinedPrimal(v.aval) for v in eqn.invars[len(consts) :]],
        **eqn.params,
    )
    ct_init, ct_xs = cts[len(consts) :]
    carry, ys = linear(init, xs)
    lhs = np.dot(ct_carry, np.asarray(carry)) + np.sum(ct_ys * np.asarray(ys))
    rhs = np.dot(np.asarray(ct_init), init) + np.sum(np.asarray(ct_xs) * xs)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12)


# --- vmap against a Python loop over the batch ----------------------------------------------


def _loop(f, in_axes, args):
    size = next(np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = [
        f(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, in_axes)])
        for i in range(size)
    ]
    return np.stack([np.asarray(o) for o in outs])


def _check_vmap(f, in_axes, args):
    np.testing.assert_allclose(
        np.asarray(kiln.vmap(f, in_axes)(*args)), _loop(f, in_axes, args), rtol=1e-12, atol=1e-14
    )


def cond_scalar_pred(p, x):
    return lax.cond(p > 0, lambda a: jnp.sin(a) * 2, lambda a: a * a, x)


@pytest.mark.parametrize("in_axes", [(0, 0), (None, 0), (0, None), (0, 1)])
def test_vmap_cond(in_axes):
    rng = np.random.default_rng(5)
    p = np.array([0.5, -1.0, 2.0, -0.1])
    x = rng.standard_normal((4, 3))
    args = (
        p if in_axes[0] == 0 else np.float64(-0.3),
        x.T if in_axes[1] == 1 else (x if in_axes[1] == 0 else x[0]),
    )
    _check_vmap(cond_scalar_pred, in_axes, args)


def test_grad_of_vmapped_cond_ignores_untaken_branch_derivatives():
    # sqrt's derivative at -1 is nan; the example that takes the other branch must not see it.
    def f(x):
        return jnp.sum(kiln.vmap(lambda y: lax.cond(y > 0, jnp.sqrt, lambda v: v * 2, y))(x))

    np.testing.assert_allclose(np.asarray(kiln.grad(f)(np.array([-1.0, 4.0]))), [2.0, 0.25])


def test_vmap_switch_batched_index():
    def f(i, x):
        return lax.switch(i, [lambda a: a + 1, lambda a: a * 3, lambda a: jnp.exp(a)], x)

    index = np.array([2, 0, 1, 1, 5, -1], dtype=np.int32)  # out of range: clamped
    _check_vmap(f, (0, 0), (index, np.linspace(-1, 1, 6)))
    _check_vmap(f, (0, None), (index, np.float64(0.7)))


def test_vmap_cond_with_io_effect_and_batched_predicate_raises():
    def f(p, x):
        def noisy(a):
            io_callback(lambda v: None, None, a)
            return a

        return lax.cond(p > 0, noisy, lambda a: a, x)

    with pytest.raises(NotImplementedError, match="IO effect not supported in vmap-of-cond"):
        kiln.vmap(f)(np.array([1.0, -1.0]), np.array([1.0, 2.0]))


def while_doubling(limit, x):
    return lax.while_loop(lambda c: c[1] < limit, lambda c: (c[0] + 1, c[1] * 2 + 0.5), (0, x))


@pytest.mark.parametrize("in_axes", [(None, 0), (0, None), (0, 0)])
def test_vmap_while_batched_predicate(in_axes):
    # Each example needs a different number of steps (x = 20 needs none).
    x = np.array([0.1, 1.0, 3.0, 20.0])
    limits = np.array([10.0, 50.0, 4.0, 7.0])
    args = (
        limits if in_axes[0] == 0 else np.float64(10.0),
        x if in_axes[1] == 0 else np.float64(0.3),
    )
    for part in (0, 1):
        _check_vmap(lambda *a, part=part: while_doubling(*a)[part], in_axes, args)


def test_vmap_while_unbatched_predicate():
    def f(x):
        return lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.sin(c[1]) + c[1]), (0, x)
        )[1]

    _check_vmap(f, (0,), (np.random.default_rng(6).standard_normal((4, 2)),))


def test_jvp_of_vmapped_while():
    x = np.array([0.1, 1.0, 3.0, 20.0])
    _, tangent = kiln.jvp(kiln.vmap(lambda v: while_doubling(10.0, v)[1]), (x,), (np.ones(4),))
    steps = np.asarray(kiln.vmap(lambda v: while_doubling(10.0, v)[0])(x))
    np.testing.assert_allclose(np.asarray(tangent), 2.0**steps)


def scan_with_consts(w, h, xs):
    def step(carry, x):
        new = jnp.tanh(carry * w + x)
        return new, new * w

    return lax.scan(step, h, xs)


@pytest.mark.parametrize(
    "in_axes",
    [(None, None, 0), (None, 0, None), (0, None, None), (0, 0, 0), (1, None, 2), (None, 0, 1)],
)
def test_vmap_scan(in_axes):
    rng = np.random.default_rng(7)
    batch, steps, n = 3, 5, 2
    shapes = [(n,), (n,), (steps, n)]
    args = []
    for shape, ax in zip(shapes, in_axes):
        if ax is None:
            args.append(rng.standard_normal(shape))
        else:
            full = list(shape)
            full.insert(ax, batch)
            args.append(rng.standard_normal(full))
    for part in (0, 1):
        _check_vmap(lambda *a, part=part: scan_with_consts(*a)[part], in_axes, tuple(args))


def test_vmap_of_grad_of_scan_equals_loop_of_grads():
    W, U, h0, xs = _rnn_params(seed=2)
    batch_xs = np.stack([xs, xs * 0.5, -xs])
    batch_h0 = np.stack([h0, -h0, h0 * 2])
    g = kiln.grad(rnn_scan, argnums=(0, 2))
    batched = kiln.vmap(g, (None, None, 0, 0))(W, U, batch_h0, batch_xs)
    for i in range(3):
        expected = g(W, U, batch_h0[i], batch_xs[i])
        for got, want in zip(batched, expected):
            np.testing.assert_allclose(np.asarray(got)[i], np.asarray(want), rtol=1e-12)

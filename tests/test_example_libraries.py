"""kiln.example_libraries against hand computations in NumPy: each optimizer's first steps on a
small pytree vs a float64 NumPy re-implementation of its formula (eager and jitted), schedules
vs closed forms, the state's pytree round trips, a short training run, and stax layers' shapes,
values, dropout statistics and initializer variances."""

import math

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import tree_util
from kiln.example_libraries import optimizers, stax

RTOL, ATOL = 2e-5, 1e-6


def make_params():
    rng = np.random.default_rng(0)
    return {
        "dense": {
            "w": rng.normal(size=(2, 3)).astype(np.float32),
            "b": rng.normal(size=(3,)).astype(np.float32),
        },
        "extra": (rng.normal(size=(4,)).astype(np.float32), np.float32(0.7)),
    }


def make_grads(step):
    rng = np.random.default_rng(100 + step)
    return tree_util.tree_map(
        lambda x: rng.normal(size=np.shape(x)).astype(np.float32), make_params()
    )


def to_kiln(tree):
    return tree_util.tree_map(jnp.asarray, tree)


# --- NumPy references: (init(x) -> state, update(i, g, state) -> state), state[0] is x ------


def np_sgd(lr):
    return (lambda x: [x], lambda i, g, s: [s[0] - lr(i) * g])


def np_momentum(lr, mass):
    def update(i, g, s):
        x, v = s
        v = mass * v + g
        return [x - lr(i) * v, v]

    return lambda x: [x, np.zeros_like(x)], update


def np_nesterov(lr, mass):
    def update(i, g, s):
        x, v = s
        v = mass * v + g
        return [x - lr(i) * (g + mass * v), v]

    return lambda x: [x, np.zeros_like(x)], update


def np_adagrad(lr, momentum):
    def update(i, g, s):
        x, acc, m = s
        acc = acc + g * g
        scaled = np.where(acc > 0, g / np.sqrt(np.where(acc > 0, acc, 1)), 0)
        m = momentum * m + (1 - momentum) * scaled
        return [x - lr(i) * m, acc, m]

    return lambda x: [x, np.zeros_like(x), np.zeros_like(x)], update


def np_rmsprop(lr, gamma, eps):
    def update(i, g, s):
        x, a = s
        a = gamma * a + (1 - gamma) * g * g
        return [x - lr(i) * g / np.sqrt(a + eps), a]

    return lambda x: [x, np.zeros_like(x)], update


def np_rmsprop_momentum(lr, gamma, eps, momentum):
    def update(i, g, s):
        x, a, mom = s
        a = gamma * a + (1 - gamma) * g * g
        mom = momentum * mom + lr(i) * g / np.sqrt(a + eps)
        return [x - mom, a, mom]

    return lambda x: [x, np.zeros_like(x), np.zeros_like(x)], update


def np_adam(lr, b1, b2, eps, weight_decay=0.0):
    def update(i, g, s):
        x, m, v = s
        t = i + 1
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        return [x - lr(i) * (m_hat / (np.sqrt(v_hat) + eps) + weight_decay * x), m, v]

    return lambda x: [x, np.zeros_like(x), np.zeros_like(x)], update


def np_adamax(lr, b1, b2, eps):
    def update(i, g, s):
        x, m, u = s
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u, np.abs(g))
        return [x - lr(i) / (1 - b1 ** (i + 1)) * m / (u + eps), m, u]

    return lambda x: [x, np.zeros_like(x), np.zeros_like(x)], update


def np_sm3(lr, momentum):
    # Written with explicit loops over the (at most 2-D) test arrays' axes.
    def init(x):
        x1 = np.atleast_1d(x)
        return [x, np.zeros_like(x), [np.zeros(n) for n in x1.shape]]

    def update(i, g, s):
        x, m, accs = s
        g1 = np.atleast_1d(g)
        if g1.ndim == 1:
            cover = accs[0]
        else:
            cover = np.minimum(accs[0][:, None], accs[1][None, :])
        accum = cover + g1 * g1
        scaled = (g1 / np.sqrt(accum)).reshape(np.shape(g))
        m = momentum * m + (1 - momentum) * scaled
        if g1.ndim == 1:
            accs = [accum]
        else:
            accs = [accum.max(axis=1), accum.max(axis=0)]
        return [x - lr(i) * m, m, accs]

    return init, update


def constant_lr(value):
    return lambda i: value


def decaying_lr(i):
    return 0.1 * 0.5 ** (i / 2)


OPTIMIZER_CASES = [
    ("sgd", optimizers.sgd(0.1), np_sgd(constant_lr(0.1))),
    (
        "sgd_schedule",
        optimizers.sgd(optimizers.exponential_decay(0.1, 2, 0.5)),
        np_sgd(decaying_lr),
    ),
    ("momentum", optimizers.momentum(0.1, mass=0.9), np_momentum(constant_lr(0.1), 0.9)),
    ("nesterov", optimizers.nesterov(0.1, mass=0.8), np_nesterov(constant_lr(0.1), 0.8)),
    ("adagrad", optimizers.adagrad(0.2), np_adagrad(constant_lr(0.2), 0.9)),
    (
        "adagrad_no_momentum",
        optimizers.adagrad(0.2, momentum=0.0),
        np_adagrad(constant_lr(0.2), 0.0),
    ),
    ("rmsprop", optimizers.rmsprop(0.05), np_rmsprop(constant_lr(0.05), 0.9, 1e-8)),
    (
        "rmsprop_momentum",
        optimizers.rmsprop_momentum(0.05, gamma=0.8, momentum=0.7),
        np_rmsprop_momentum(constant_lr(0.05), 0.8, 1e-8, 0.7),
    ),
    ("adam", optimizers.adam(0.01), np_adam(constant_lr(0.01), 0.9, 0.999, 1e-8)),
    (
        "adam_schedule",
        optimizers.adam(decaying_lr, b1=0.8, b2=0.99, eps=1e-6),
        np_adam(decaying_lr, 0.8, 0.99, 1e-6),
    ),
    (
        "adamw",
        optimizers.adamw(0.01, weight_decay=0.1),
        np_adam(constant_lr(0.01), 0.9, 0.999, 1e-8, weight_decay=0.1),
    ),
    ("adamax", optimizers.adamax(0.02), np_adamax(constant_lr(0.02), 0.9, 0.999, 1e-8)),
    ("sm3", optimizers.sm3(0.1), np_sm3(constant_lr(0.1), 0.9)),
]


def reference_trajectory(np_init, np_update, steps):
    """Parameters after each of `steps` updates, computed leaf by leaf in float64."""
    leaves, treedef = tree_util.tree_flatten(make_params())
    states = [np_init(np.asarray(x, np.float64)) for x in leaves]
    trajectory = []
    for i in range(steps):
        grads = [np.asarray(g, np.float64) for g in tree_util.tree_leaves(make_grads(i))]
        states = [np_update(i, g, s) for g, s in zip(grads, states)]
        trajectory.append(tree_util.tree_unflatten(treedef, [s[0] for s in states]))
    return trajectory


def assert_tree_close(actual, expected, rtol=RTOL, atol=ATOL):
    assert tree_util.tree_structure(actual) == tree_util.tree_structure(expected)
    for a, e in zip(tree_util.tree_leaves(actual), tree_util.tree_leaves(expected)):
        assert np.shape(a) == np.shape(e)
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=atol)


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "name,opt,reference", OPTIMIZER_CASES, ids=[case[0] for case in OPTIMIZER_CASES]
)
def test_optimizer_first_steps_match_numpy(name, opt, reference, use_jit):
    init_fun, update_fun, get_params = opt
    update = kiln.jit(update_fun) if use_jit else update_fun
    opt_state = init_fun(to_kiln(make_params()))
    assert_tree_close(get_params(opt_state), make_params(), rtol=0, atol=0)
    for i, expected in enumerate(reference_trajectory(*reference, steps=3)):
        opt_state = update(i, to_kiln(make_grads(i)), opt_state)
        params = get_params(opt_state)
        for leaf in tree_util.tree_leaves(params):
            assert leaf.dtype == np.float32
        assert_tree_close(params, expected)


def test_jitted_update_gives_the_eager_numbers():
    init_fun, update_fun, get_params = optimizers.adam(0.05)
    jitted = kiln.jit(update_fun)
    eager_state = jit_state = init_fun(to_kiln(make_params()))
    for i in range(3):
        grads = to_kiln(make_grads(i))
        eager_state = update_fun(i, grads, eager_state)
        jit_state = jitted(i, grads, jit_state)
    assert isinstance(jit_state, optimizers.OptimizerState)
    # Compiled code may contract a * b + c into one rounding, so allow a few float32 ulps of
    # the parameters' scale (about 1), not bit equality.
    assert_tree_close(jit_state, eager_state, rtol=1e-6, atol=1e-6)


def test_optimizer_state_is_a_pytree_of_arrays():
    init_fun, _, _ = optimizers.momentum(0.1, 0.9)
    opt_state = init_fun(to_kiln(make_params()))
    leaves, treedef = tree_util.tree_flatten(opt_state)
    assert len(leaves) == 2 * 4  # (x, velocity) for each of the four parameter arrays
    rebuilt = tree_util.tree_unflatten(treedef, leaves)
    assert isinstance(rebuilt, optimizers.OptimizerState)
    assert rebuilt.tree_def == opt_state.tree_def
    doubled = tree_util.tree_map(lambda x: 2 * x, opt_state)
    assert_tree_close(
        optimizers.momentum(0.1, 0.9)[2](doubled),
        tree_util.tree_map(lambda x: 2 * x, make_params()),
    )


def test_update_rejects_gradients_of_another_structure():
    init_fun, update_fun, _ = optimizers.sgd(0.1)
    opt_state = init_fun(to_kiln(make_params()))
    with pytest.raises(TypeError, match="tree structure"):
        update_fun(0, {"dense": make_grads(0)["dense"]}, opt_state)


def test_unpack_and_pack_optimizer_state_round_trip():
    init_fun, update_fun, get_params = optimizers.adam(0.1)
    opt_state = update_fun(0, to_kiln(make_grads(0)), init_fun(to_kiln(make_params())))
    marked = optimizers.unpack_optimizer_state(opt_state)
    join_point = marked["dense"]["w"]
    assert isinstance(join_point, optimizers.JoinPoint)
    x, m, v = join_point.subtree
    np.testing.assert_allclose(np.asarray(m), 0.1 * make_grads(0)["dense"]["w"], rtol=1e-6)
    restored = optimizers.pack_optimizer_state(marked)
    assert restored.tree_def == opt_state.tree_def
    assert restored.subtree_defs == opt_state.subtree_defs
    assert_tree_close(get_params(restored), get_params(opt_state), rtol=0, atol=0)
    with pytest.raises(TypeError, match="JoinPoint"):
        optimizers.pack_optimizer_state({"a": jnp.ones(2)})


def test_step_size_must_be_scalar_or_callable():
    with pytest.raises(TypeError, match="step_size"):
        optimizers.sgd(np.ones(3))


# --- schedules -------------------------------------------------------------------------------

STEPS = [0, 1, 3, 10, 25, 40]

SCHEDULE_CASES = [
    ("constant", optimizers.constant(0.3), lambda i: 0.3),
    (
        "exponential_decay",
        optimizers.exponential_decay(0.5, 10, 0.1),
        lambda i: 0.5 * 0.1 ** (i / 10),
    ),
    (
        "inverse_time_decay",
        optimizers.inverse_time_decay(1.0, 5, 0.5),
        lambda i: 1.0 / (1 + 0.5 * i / 5),
    ),
    (
        "inverse_time_decay_staircase",
        optimizers.inverse_time_decay(1.0, 5, 0.5, staircase=True),
        lambda i: 1.0 / (1 + 0.5 * (i // 5)),
    ),
    (
        "polynomial_decay",
        optimizers.polynomial_decay(1.0, 20, 0.1, power=2.0),
        lambda i: (1 - min(i, 20) / 20) ** 2 * 0.9 + 0.1,
    ),
    (
        "piecewise_constant",
        optimizers.piecewise_constant([3, 10], [1.0, 0.5, 0.1]),
        lambda i: 1.0 if i <= 3 else 0.5 if i <= 10 else 0.1,
    ),
    (
        "cosine_decay",
        optimizers.cosine_decay(2.0, 30, alpha=0.1),
        lambda i: 2.0 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(i, 30) / 30)) + 0.1),
    ),
    (
        "warmup_cosine_decay",
        optimizers.warmup_cosine_decay(0.0, 1.0, 10, 30, end_value=0.05),
        lambda i: (
            i / 10 if i < 10 else 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(i - 10, 20) / 20))
        ),
    ),
]


@pytest.mark.parametrize(
    "name,schedule,closed_form", SCHEDULE_CASES, ids=[case[0] for case in SCHEDULE_CASES]
)
def test_schedule_matches_closed_form(name, schedule, closed_form):
    for i in STEPS:
        np.testing.assert_allclose(
            float(schedule(i)), closed_form(i), rtol=1e-6, atol=1e-7, err_msg=f"step {i}"
        )


@pytest.mark.parametrize(
    "name,schedule,closed_form",
    [SCHEDULE_CASES[i] for i in (4, 5, 7)],
    ids=[SCHEDULE_CASES[i][0] for i in (4, 5, 7)],
)
def test_schedule_of_a_traced_step(name, schedule, closed_form):
    jitted = kiln.jit(schedule)
    for i in (0, 3, 11, 25):
        np.testing.assert_allclose(float(jitted(i)), closed_form(i), rtol=1e-6, atol=1e-7)


def test_piecewise_constant_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="one longer"):
        optimizers.piecewise_constant([1, 2], [1.0, 2.0])


# --- utilities -------------------------------------------------------------------------------


def test_l2_norm_and_clip_grads():
    grads = make_grads(0)
    flat = np.concatenate([np.ravel(g).astype(np.float64) for g in tree_util.tree_leaves(grads)])
    norm = np.linalg.norm(flat)
    np.testing.assert_allclose(float(optimizers.l2_norm(to_kiln(grads))), norm, rtol=1e-6)

    clipped = optimizers.clip_grads(to_kiln(grads), 0.5)
    np.testing.assert_allclose(float(optimizers.l2_norm(clipped)), 0.5, rtol=1e-6)
    assert_tree_close(clipped, tree_util.tree_map(lambda g: g * (0.5 / norm), grads))

    unclipped = optimizers.clip_grads(to_kiln(grads), 2 * norm)
    assert_tree_close(unclipped, grads, rtol=0, atol=0)
    zeros = optimizers.clip_grads({"a": jnp.zeros(3)}, 1.0)
    np.testing.assert_array_equal(np.asarray(zeros["a"]), np.zeros(3))


# --- training --------------------------------------------------------------------------------


def test_adam_fits_a_linear_regression_under_jit():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    true_w, true_b = np.array([1.5, -2.0, 0.5], np.float32), np.float32(0.3)
    y = x @ true_w + true_b + 0.01 * rng.normal(size=64).astype(np.float32)
    x, y = jnp.asarray(x), jnp.asarray(y)

    def loss(params):
        return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    init_fun, update_fun, get_params = optimizers.adam(0.05)

    @kiln.jit
    def step(i, opt_state):
        value, grads = kiln.value_and_grad(loss)(get_params(opt_state))
        return value, update_fun(i, grads, opt_state)

    opt_state = init_fun({"w": jnp.zeros(3), "b": jnp.asarray(0.0)})
    first_loss = None
    for i in range(200):
        value, opt_state = step(i, opt_state)
        first_loss = float(value) if first_loss is None else first_loss
    final_loss = float(loss(get_params(opt_state)))
    assert first_loss > 1.0
    assert final_loss < 1e-3
    np.testing.assert_allclose(np.asarray(get_params(opt_state)["w"]), true_w, atol=0.02)


# --- stax ------------------------------------------------------------------------------------

KEY = kiln.random.PRNGKey(0)


def test_dense_init_shapes_and_apply_matches_numpy():
    init_fun, apply_fun = stax.serial(stax.Dense(5), stax.Relu)
    out_shape, params = init_fun(KEY, (7, 3))
    assert out_shape == (7, 5)
    (w, b), relu_params = params
    assert w.shape == (3, 5) and b.shape == (5,) and relu_params == ()
    assert w.dtype == np.float32 and b.dtype == np.float32
    # b_init is normal() (standard deviation 1e-2), as in JAX's stax.
    assert 0 < float(jnp.max(jnp.abs(b))) < 0.1
    x = np.random.default_rng(2).normal(size=(7, 3)).astype(np.float32)
    expected = np.maximum(x.astype(np.float64) @ np.asarray(w, np.float64) + np.asarray(b), 0)
    np.testing.assert_allclose(
        np.asarray(apply_fun(params, jnp.asarray(x))), expected, rtol=1e-5, atol=1e-6
    )


def test_dense_gradient_under_jit_matches_hand_derivative():
    init_fun, apply_fun = stax.Dense(4)
    _, params = init_fun(KEY, (5, 3))
    x = np.random.default_rng(7).normal(size=(5, 3)).astype(np.float32)
    grad_w, grad_b = kiln.jit(kiln.grad(lambda p: jnp.sum(apply_fun(p, jnp.asarray(x)))))(params)
    # d/dW sum(x @ W + b) = column sums of x, repeated for each output; d/db = batch size.
    np.testing.assert_allclose(
        np.asarray(grad_w), np.repeat(x.sum(0)[:, None], 4, axis=1), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(np.asarray(grad_b), np.full(4, 5.0), rtol=1e-6)


def test_serial_and_parallel_output_shapes():
    init_fun, apply_fun = stax.serial(
        stax.Dense(8),
        stax.Tanh,
        stax.FanOut(3),
        stax.parallel(stax.Dense(4), stax.serial(stax.Dense(2), stax.Gelu), stax.Identity),
        stax.FanInConcat(axis=-1),
        stax.Dense(6),
        stax.LogSoftmax,
    )
    out_shape, params = init_fun(KEY, (-1, 5))
    assert out_shape == (-1, 6)
    assert len(params) == 7
    dense_branch, serial_branch, identity_branch = params[3]
    assert dense_branch[0].shape == (8, 4)
    assert serial_branch[0][0].shape == (8, 2) and serial_branch[1] == ()
    assert identity_branch == ()
    assert params[5][0].shape == (4 + 2 + 8, 6)
    outputs = apply_fun(params, jnp.ones((2, 5)))
    assert outputs.shape == (2, 6)

    init_fun, apply_fun = stax.serial(
        stax.FanOut(2), stax.parallel(stax.Dense(3), stax.Dense(3)), stax.FanInSum
    )
    out_shape, params = init_fun(KEY, (4, 2))
    assert out_shape == (4, 3)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    (w1, b1), (w2, b2) = params[1]
    expected = x @ (np.asarray(w1) + np.asarray(w2)) + np.asarray(b1) + np.asarray(b2)
    np.testing.assert_allclose(
        np.asarray(apply_fun(params, jnp.asarray(x))), expected, rtol=1e-5, atol=1e-6
    )


def test_parallel_returns_one_output_per_layer():
    init_fun, apply_fun = stax.parallel(stax.Dense(3), stax.Flatten)
    out_shapes, params = init_fun(KEY, [(2, 4), (2, 3, 5)])
    assert [tuple(s) for s in out_shapes] == [(2, 3), (2, 15)]
    a, b = apply_fun(params, [jnp.ones((2, 4)), jnp.ones((2, 3, 5))])
    assert a.shape == (2, 3) and b.shape == (2, 15)


ELEMENTWISE_CASES = [
    (stax.Relu, lambda x: np.maximum(x, 0)),
    (stax.Tanh, np.tanh),
    (stax.Sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    (stax.Softplus, lambda x: np.log1p(np.exp(x))),
    (stax.Elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    (stax.LeakyRelu, lambda x: np.where(x >= 0, x, 0.01 * x)),
    (stax.Gelu, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))),
    (stax.Exp, np.exp),
    (stax.Identity, lambda x: x),
    (stax.Softmax, lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
]


@pytest.mark.parametrize(
    "layer,reference",
    ELEMENTWISE_CASES,
    ids=[
        "relu",
        "tanh",
        "sigmoid",
        "softplus",
        "elu",
        "leaky_relu",
        "gelu",
        "exp",
        "identity",
        "softmax",
    ],
)
def test_elementwise_layers_match_numpy(layer, reference):
    init_fun, apply_fun = layer
    x = np.random.default_rng(3).normal(size=(4, 5)).astype(np.float32) * 2
    out_shape, params = init_fun(KEY, x.shape)
    assert out_shape == x.shape and params == ()
    np.testing.assert_allclose(
        np.asarray(apply_fun(params, jnp.asarray(x))),
        reference(x.astype(np.float64)),
        rtol=1e-5,
        atol=1e-6,
    )


def test_log_softmax_rows_are_distributions():
    x = np.random.default_rng(4).normal(size=(6, 10)).astype(np.float32) * 5
    _, apply_fun = stax.LogSoftmax
    log_probs = np.asarray(apply_fun((), jnp.asarray(x)), np.float64)
    np.testing.assert_allclose(np.exp(log_probs).sum(axis=1), np.ones(6), rtol=1e-6)
    shifted = x.astype(np.float64) - x.max(axis=1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(log_probs, expected, rtol=1e-5, atol=1e-5)


def test_flatten_shape_and_values():
    init_fun, apply_fun = stax.Flatten
    out_shape, params = init_fun(KEY, (3, 2, 4))
    assert out_shape == (3, 8)
    x = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    np.testing.assert_array_equal(np.asarray(apply_fun(params, jnp.asarray(x))), x.reshape(3, 8))


@pytest.mark.parametrize("rate", [0.25, 0.6])
def test_dropout_train_zeroes_rate_and_rescales(rate):
    # JAX's stax convention: Dropout's argument is the keep probability.
    init_fun, apply_fun = stax.Dropout(1 - rate)
    x = np.random.default_rng(5).uniform(1.0, 2.0, size=(100, 100)).astype(np.float32)
    out_shape, params = init_fun(KEY, x.shape)
    assert out_shape == x.shape
    out = np.asarray(apply_fun(params, jnp.asarray(x), rng=kiln.random.PRNGKey(7)))
    dropped = out == 0
    # 10,000 Bernoulli draws: the standard error of the dropped fraction is below 0.005.
    assert abs(dropped.mean() - rate) < 0.03
    np.testing.assert_allclose(out[~dropped], x[~dropped] / (1 - rate), rtol=1e-6)
    other_key = np.asarray(apply_fun(params, jnp.asarray(x), rng=kiln.random.PRNGKey(8)))
    assert not np.array_equal(other_key == 0, dropped)


def test_dropout_test_mode_is_identity_and_train_needs_a_key():
    x = jnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    _, apply_test = stax.Dropout(0.5, mode="test")
    np.testing.assert_array_equal(np.asarray(apply_test((), x)), np.asarray(x))
    _, apply_train = stax.Dropout(0.5)
    with pytest.raises(ValueError, match="rng=key"):
        apply_train((), x)
    with pytest.raises(ValueError, match="rate"):
        stax.Dropout(1.5)


def test_serial_splits_the_key_across_dropout_layers():
    init_fun, apply_fun = stax.serial(stax.Dropout(0.5), stax.Dropout(0.5))
    _, params = init_fun(KEY, (50, 50))
    out = np.asarray(apply_fun(params, jnp.ones((50, 50)), rng=kiln.random.PRNGKey(3)))
    # Two independent halvings keep a quarter of the entries, each scaled by 2 * 2.
    assert set(np.unique(out)) <= {0.0, 4.0}
    assert abs((out != 0).mean() - 0.25) < 0.04


def test_batch_norm_standardizes_over_the_batch_axis():
    init_fun, apply_fun = stax.BatchNorm(axis=0)
    out_shape, (beta, gamma) = init_fun(KEY, (8, 3))
    assert out_shape == (8, 3) and beta.shape == (3,) and gamma.shape == (3,)
    x = np.random.default_rng(6).normal(2.0, 3.0, size=(8, 3)).astype(np.float32)
    params = (jnp.asarray([0.0, 1.0, -1.0]), jnp.asarray([1.0, 2.0, 0.5]))
    x64 = x.astype(np.float64)
    z = (x64 - x64.mean(0)) / np.sqrt(x64.var(0) + 1e-5)
    expected = np.array([1.0, 2.0, 0.5]) * z + np.array([0.0, 1.0, -1.0])
    np.testing.assert_allclose(
        np.asarray(apply_fun(params, jnp.asarray(x))), expected, rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    "make_init,variance,bound",
    [
        (stax.glorot_normal, 2 / (200 + 300), 2 * math.sqrt(2 / 500) / 0.87962566103423978),
        (stax.glorot_uniform, 2 / (200 + 300), math.sqrt(3 * 2 / 500)),
        (stax.he_normal, 2 / 200, 2 * math.sqrt(2 / 200) / 0.87962566103423978),
    ],
    ids=["glorot_normal", "glorot_uniform", "he_normal"],
)
def test_initializer_variance_and_bounds(make_init, variance, bound):
    w = make_init()(KEY, (200, 300))
    assert w.shape == (200, 300) and w.dtype == np.float32
    w = np.asarray(w, np.float64)
    # 60,000 draws: the sample variance is within about 1% of the target.
    assert abs(w.var() / variance - 1) < 0.04
    assert abs(w.mean()) < 0.05 * math.sqrt(variance)
    assert np.abs(w).max() <= bound * (1 + 1e-6)


def test_constant_initializers():
    np.testing.assert_array_equal(np.asarray(stax.zeros(KEY, (2, 3))), np.zeros((2, 3)))
    np.testing.assert_array_equal(np.asarray(stax.ones(KEY, (4,))), np.ones(4))
    sample = np.asarray(stax.normal(0.5)(KEY, (10000,)))
    assert abs(sample.std() / 0.5 - 1) < 0.05

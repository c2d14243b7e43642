"""kiln.checkpoint (alias kiln.remat) and its policies: a checkpointed function computes the
same values and derivatives as the plain one (checked against the plain function, hand-derived
values and central finite differences in float64), while the staged reverse pass shows which
values were saved and which are recomputed (equations counted by primitive)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.ad_checkpoint import checkpoint_name
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal
from tests._testing import x64_mode

policies = kiln.checkpoint_policies


# --- functions under test ------------------------------------------------------------------------


def sin_cos_chain(x):
    return jnp.sum(jnp.cos(jnp.sin(jnp.sin(x)) * 1.5) + jnp.sin(x) * x)


def mlp(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return jnp.sum(x * x)


def _scan_body(carry, x):
    carry = jnp.sin(carry * x) + jnp.cos(x)
    return carry, carry * carry


def scan_loss(carry, xs, body=_scan_body):
    carry, ys = lax.scan(body, carry, xs)
    return jnp.sum(ys) + jnp.sum(carry)


def checkpointed_scan_loss(policy):
    body = kiln.checkpoint(_scan_body, policy=policy)
    return lambda carry, xs: scan_loss(carry, xs, body)


def _args(name, dtype=np.float32):
    rng = np.random.default_rng(0)
    if name == "chain":
        return (rng.normal(size=(5,)).astype(dtype),)
    if name == "mlp":
        params = [(rng.normal(size=(4, 4)) * 0.5).astype(dtype) for _ in range(3)]
        return params, rng.normal(size=(3, 4)).astype(dtype)
    return rng.normal(size=(4,)).astype(dtype), rng.normal(size=(6, 4)).astype(dtype)


FUNCTIONS = {"chain": sin_cos_chain, "mlp": mlp, "scan": scan_loss}
POLICIES = {
    "default": None,
    "nothing": policies.nothing_saveable,
    "everything": policies.everything_saveable,
    "dots": policies.dots_saveable,
    "dots_no_batch": policies.dots_with_no_batch_dims_saveable,
}


def _checkpointed(name, policy):
    if name == "scan":
        return checkpointed_scan_loss(policy)
    return kiln.checkpoint(FUNCTIONS[name], policy=policy)


def _argnums(args):
    return tuple(range(len(args)))


def _assert_trees_close(actual, expected, rtol=1e-5, atol=1e-6):
    actual_leaves = kiln.tree_util.tree_leaves(actual)
    expected_leaves = kiln.tree_util.tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves)
    for a, e in zip(actual_leaves, expected_leaves):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=atol)


def _finite_difference_grad(f, args, eps=1e-6):
    """Central differences of the scalar f, for every element of every (float64) argument."""
    leaves, tree = kiln.tree_util.tree_flatten(args)
    grads = []
    for i, leaf in enumerate(leaves):
        leaf = np.asarray(leaf, np.float64)
        g = np.zeros_like(leaf)
        for index in np.ndindex(leaf.shape):
            shifted = []
            for sign in (1, -1):
                moved = leaf.copy()
                moved[index] += sign * eps
                new = list(leaves)
                new[i] = moved
                shifted.append(float(f(*kiln.tree_util.tree_unflatten(tree, new))))
            g[index] = (shifted[0] - shifted[1]) / (2 * eps)
        grads.append(g)
    return kiln.tree_util.tree_unflatten(tree, grads)


# --- counting equations in a staged jaxpr --------------------------------------------------------


def _sub_jaxprs(eqn):
    for value in eqn.params.values():
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if isinstance(item, ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, Jaxpr):
                yield item


def count(jaxpr, name: str) -> int:
    """Equations of primitive `name` in `jaxpr` and, recursively, in its sub-jaxprs."""
    if isinstance(jaxpr, ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    total = 0
    for eqn in jaxpr.eqns:
        total += eqn.primitive.name == name
        total += sum(count(sub, name) for sub in _sub_jaxprs(eqn))
    return total


def backward_checkpoints(closed):
    """The checkpoint equations of a gradient's jaxpr (the staged backward calls)."""
    return [e for e in closed.jaxpr.eqns if e.primitive.name == "checkpoint"]


def _scalar_sin_sin(x):
    return jnp.sin(jnp.sin(x))


# --- values --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FUNCTIONS)
def test_values_match_the_plain_function(name):
    args = _args(name)
    expected = FUNCTIONS[name](*args)
    _assert_trees_close(_checkpointed(name, None)(*args), expected)
    _assert_trees_close(kiln.jit(_checkpointed(name, None))(*args), expected)


def test_eager_call_without_a_trace_just_runs_the_function():
    calls = []

    def f(x):
        calls.append(1)
        return x * 2

    assert float(kiln.checkpoint(f)(3.0)) == 6.0
    assert calls == [1]


def test_remat_is_checkpoint_and_policy_aliases():
    assert kiln.remat is kiln.checkpoint
    assert policies.checkpoint_dots is policies.dots_saveable


def test_pytrees_kwargs_and_static_argnums():
    def f(params, x, *, scale, mode):
        y = params["w"] * x + params["b"]
        return {"out": jnp.sin(y) * scale if mode == "sin" else jnp.cos(y) * scale}

    g = kiln.checkpoint(f, static_argnames="mode")
    params = {"w": np.float32(0.7), "b": np.float32(0.2)}
    grads = kiln.grad(lambda p: g(p, 1.5, scale=2.0, mode="sin")["out"])(params)
    y = 0.7 * 1.5 + 0.2
    np.testing.assert_allclose(float(grads["w"]), 2.0 * np.cos(y) * 1.5, rtol=1e-6)
    np.testing.assert_allclose(float(grads["b"]), 2.0 * np.cos(y), rtol=1e-6)

    def h(x, n):
        for _ in range(n):  # n must be a Python int to drive the loop
            x = jnp.sin(x)
        return x

    h3 = kiln.checkpoint(h, static_argnums=(1,))
    np.testing.assert_allclose(
        float(kiln.grad(h3)(0.5, 3)), float(kiln.grad(lambda x: h(x, 3))(0.5)), rtol=1e-6
    )


# --- gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_grad_matches_the_plain_function(name, policy):
    args = _args(name)
    argnums = _argnums(args)
    expected = kiln.grad(FUNCTIONS[name], argnums=argnums)(*args)
    actual = kiln.grad(_checkpointed(name, POLICIES[policy]), argnums=argnums)(*args)
    _assert_trees_close(actual, expected)


@pytest.mark.parametrize("policy", ["default", "dots"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_grad_matches_finite_differences(name, policy):
    with x64_mode(True):
        args = _args(name, np.float64)
        f = _checkpointed(name, POLICIES[policy])
        actual = kiln.grad(f, argnums=_argnums(args))(*args)
        expected = _finite_difference_grad(FUNCTIONS[name], args)
        _assert_trees_close(actual, expected, rtol=1e-6, atol=1e-7)


def test_grad_of_grad():
    # d2/dx2 sin(sin(x)) = -sin(sin x) cos(x)^2 - cos(sin x) sin(x)
    x = 0.8
    expected = -np.sin(np.sin(x)) * np.cos(x) ** 2 - np.cos(np.sin(x)) * np.sin(x)
    for policy in (None, policies.everything_saveable):
        f = kiln.checkpoint(_scalar_sin_sin, policy=policy)
        np.testing.assert_allclose(float(kiln.grad(kiln.grad(f))(x)), expected, rtol=1e-5)
    with x64_mode(True):
        args = _args("mlp", np.float64)
        f = kiln.checkpoint(mlp, policy=policies.dots_saveable)
        kiln.test_util.check_grads(f, args, order=2, modes=("rev",), atol=1e-5, rtol=1e-5)


def test_forward_mode_and_linearize():
    x = np.float32(0.3)
    f = kiln.checkpoint(_scalar_sin_sin)
    out, tangent = kiln.jvp(f, (x,), (np.float32(2.0),))
    np.testing.assert_allclose(float(out), np.sin(np.sin(0.3)), rtol=1e-6)
    np.testing.assert_allclose(float(tangent), 2 * np.cos(np.sin(0.3)) * np.cos(0.3), rtol=1e-6)
    _, f_jvp = kiln.linearize(f, x)
    np.testing.assert_allclose(
        float(f_jvp(np.float32(1.0))), np.cos(np.sin(0.3)) * np.cos(0.3), rtol=1e-6
    )


def test_vmap_of_grad_and_grad_of_vmap():
    xs = np.linspace(-1.0, 1.0, 5).astype(np.float32)
    f = kiln.checkpoint(_scalar_sin_sin)
    expected = np.cos(np.sin(xs)) * np.cos(xs)
    np.testing.assert_allclose(np.asarray(kiln.vmap(kiln.grad(f))(xs)), expected, rtol=1e-6)
    g = kiln.grad(lambda v: jnp.sum(kiln.vmap(f)(v)))
    np.testing.assert_allclose(np.asarray(g(xs)), expected, rtol=1e-6)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_jit_of_grad_matches_eager(name):
    args = _args(name)
    f = kiln.grad(_checkpointed(name, policies.dots_saveable), argnums=_argnums(args))
    _assert_trees_close(kiln.jit(f)(*args), f(*args))


def test_closed_over_traced_value_is_differentiated():
    def f(a):
        return kiln.checkpoint(lambda y: jnp.sin(a * y))(3.0)

    np.testing.assert_allclose(float(kiln.grad(f)(1.5)), 3.0 * np.cos(4.5), rtol=1e-6)


def test_nested_checkpoints_and_jit_inside():
    inner = kiln.jit(lambda y: jnp.cos(y) * 2.0)

    def f(x):
        return kiln.checkpoint(lambda y: jnp.sin(kiln.checkpoint(inner)(y)))(x)

    x = 0.7
    expected = -np.cos(2 * np.cos(x)) * 2 * np.sin(x)
    np.testing.assert_allclose(float(kiln.grad(f)(x)), expected, rtol=1e-5)
    np.testing.assert_allclose(float(kiln.jit(kiln.grad(f))(x)), expected, rtol=1e-5)


def test_integer_arguments_pass_through():
    f = kiln.checkpoint(lambda x, n: jnp.sin(x) * n)
    np.testing.assert_allclose(float(kiln.grad(f)(1.0, 3)), 3 * np.cos(1.0), rtol=1e-6)


# --- what is saved and what is recomputed --------------------------------------------------------


def test_nothing_saveable_recomputes_the_forward_in_the_backward_pass():
    x = np.float32(2.0)
    plain = kiln.make_jaxpr(kiln.grad(_scalar_sin_sin))(x)
    nothing = kiln.make_jaxpr(kiln.grad(kiln.checkpoint(_scalar_sin_sin)))(x)
    everything = kiln.make_jaxpr(
        kiln.grad(kiln.checkpoint(_scalar_sin_sin, policy=policies.everything_saveable))
    )(x)
    # The forward pass computes sin twice; without saving, the backward pass needs sin(x)
    # again (for cos(sin x)), and recomputes cos(x) and cos(sin x) itself.
    assert count(plain, "sin") == 2
    assert count(nothing, "sin") == 3
    assert count(everything, "sin") == 2
    (backward,) = backward_checkpoints(nothing)
    body = backward.params["jaxpr"]
    assert count(body, "sin") == 1 and count(body, "cos") == 2
    # Its only residual is the checkpoint's input.
    residuals = [a for a in backward.invars if type(a) is not Literal]
    assert residuals == list(nothing.jaxpr.invars)
    (backward,) = backward_checkpoints(everything)
    assert count(backward.params["jaxpr"], "sin") == 0
    assert count(backward.params["jaxpr"], "cos") == 0
    assert count(everything, "cos") == 2


def test_dots_saveable_saves_products_and_recomputes_elementwise():
    args = _args("mlp")
    layers = len(args[0])

    def staged(policy):
        closed = kiln.make_jaxpr(kiln.grad(kiln.checkpoint(mlp, policy=policy), argnums=(0, 1)))(
            *args
        )
        (backward,) = backward_checkpoints(closed)
        return backward.params["jaxpr"]

    everything, dots, nothing = (
        staged(p) for p in (policies.everything_saveable, policies.dots_saveable, None)
    )
    # The backward pass of every policy has the transposed products; only nothing_saveable
    # recomputes the forward ones. The tanh of each layer is recomputed unless saved.
    transposed = count(everything, "dot_general")
    assert transposed > 0
    assert count(dots, "dot_general") == transposed
    assert count(nothing, "dot_general") == transposed + layers
    assert count(everything, "tanh") == 0
    assert count(dots, "tanh") == layers
    assert count(nothing, "tanh") == layers


def test_dots_with_no_batch_dims_saveable():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(2, 3, 4)).astype(np.float32)
    b = rng.normal(size=(2, 4, 5)).astype(np.float32)
    c = rng.normal(size=(5, 6)).astype(np.float32)

    def f(a, b, c):
        batched = lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,))))
        plain = lax.dot_general(jnp.tanh(batched), c, (((2,), (0,)), ((), ())))
        return jnp.sum(jnp.sin(plain))

    def backward_dots(policy):
        closed = kiln.make_jaxpr(kiln.grad(kiln.checkpoint(f, policy=policy), argnums=(0, 1, 2)))(
            a, b, c
        )
        (backward,) = backward_checkpoints(closed)
        return count(backward.params["jaxpr"], "dot_general")

    # Relative to dots_saveable, the batched product is recomputed: one more product.
    assert (
        backward_dots(policies.dots_with_no_batch_dims_saveable)
        == backward_dots(policies.dots_saveable) + 1
    )
    assert backward_dots(None) == backward_dots(policies.dots_saveable) + 2
    expected = kiln.grad(f, argnums=(0, 1, 2))(a, b, c)
    actual = kiln.grad(
        kiln.checkpoint(f, policy=policies.dots_with_no_batch_dims_saveable), argnums=(0, 1, 2)
    )(a, b, c)
    _assert_trees_close(actual, expected)


def _named(x):
    a = checkpoint_name(jnp.sin(x), "a")
    b = checkpoint_name(jnp.sin(a), "b")
    return jnp.sin(b)


@pytest.mark.parametrize(
    "policy, sin_in_backward",
    [
        (None, 2),
        (policies.save_only_these_names("a"), 1),
        (policies.save_only_these_names("a", "b"), 0),
        (policies.save_any_names_but_these("b"), 1),
        (policies.save_any_names_but_these(), 0),
        (
            policies.save_from_both_policies(
                policies.save_only_these_names("a"), policies.save_only_these_names("b")
            ),
            0,
        ),
    ],
)
def test_name_policies(policy, sin_in_backward):
    x = np.float32(0.9)
    f = kiln.checkpoint(_named, policy=policy)
    closed = kiln.make_jaxpr(kiln.grad(f))(x)
    (backward,) = backward_checkpoints(closed)
    # The backward pass needs sin(x) and sin(sin x) (for the cosines of the last two sines).
    assert count(backward.params["jaxpr"], "sin") == sin_in_backward
    expected = np.cos(np.sin(np.sin(0.9))) * np.cos(np.sin(0.9)) * np.cos(0.9)
    np.testing.assert_allclose(float(kiln.grad(f)(x)), expected, rtol=1e-6)
    np.testing.assert_allclose(float(kiln.jit(kiln.grad(f))(x)), expected, rtol=1e-6)


def test_checkpoint_name_is_the_identity():
    tree = {"u": np.arange(3.0, dtype=np.float32), "v": np.float32(2.0)}
    out = kiln.jit(lambda t: checkpoint_name(t, "t"))(tree)
    _assert_trees_close(out, tree)


def test_scan_body_checkpoint_recomputes_inside_the_loop():
    args = _args("scan")
    plain = kiln.make_jaxpr(kiln.grad(scan_loss))(*args)
    remat = kiln.make_jaxpr(kiln.grad(checkpointed_scan_loss(None)))(*args)
    # The body's sin runs in the forward scan, and once more in the backward one.
    assert count(plain, "sin") == 1
    assert count(remat, "sin") == 2


@pytest.mark.parametrize("policy, num_res", [(None, 1), (policies.everything_saveable, 2)])
def test_policy_split_of_a_jaxpr_composes_to_the_original(policy, num_res):
    from kiln.core.interpreter import eval_jaxpr
    from kiln.core.jaxpr import typecheck_jaxpr
    from kiln.primitives.remat import partial_eval_jaxpr_with_policy
    from kiln.transforms.jvp import jvp_jaxpr

    closed = kiln.make_jaxpr(_scalar_sin_sin)(np.float32(0.0))
    jvp_closed, _ = jvp_jaxpr(closed, [True], instantiate=True)
    known, unknown, out_unknowns, n_res = partial_eval_jaxpr_with_policy(
        jvp_closed, [False, True], policy
    )
    typecheck_jaxpr(known.jaxpr)
    typecheck_jaxpr(unknown.jaxpr)
    # Primal output known, tangent output unknown. Saved: the input x alone, or else the two
    # cosines the tangent is multiplied by.
    assert out_unknowns == [False, True]
    assert n_res == num_res
    assert count(unknown, "sin") == (1 if policy is None else 0)
    x, t = np.float32(0.4), np.float32(3.0)
    primal, *residuals = eval_jaxpr(known.jaxpr, known.consts, x)
    (tangent,) = eval_jaxpr(unknown.jaxpr, unknown.consts, *residuals, t)
    np.testing.assert_allclose(float(primal), np.sin(np.sin(0.4)), rtol=1e-6)
    np.testing.assert_allclose(float(tangent), 3 * np.cos(np.sin(0.4)) * np.cos(0.4), rtol=1e-6)


def test_compiled_checkpoint_keeps_its_recomputation():
    """Under jit the backward pass recomputes sin from the checkpoint's input: the optimizer
    may not merge the recomputed sin with the forward one (prevent_cse)."""
    from kiln.compiler.pipeline import optimize

    def loss(v):
        y = kiln.checkpoint(lambda x: jnp.sin(jnp.sin(x)))(v)
        return jnp.sum(y * y)

    closed = optimize(kiln.make_jaxpr(kiln.value_and_grad(loss))(jnp.ones(3)))
    names = [e.primitive.name for e in closed.jaxpr.eqns]
    assert names.count("sin") == 3 and "optimization_barrier" in names
    value, grad = kiln.jit(kiln.value_and_grad(loss))(jnp.linspace(0.1, 1.0, 3))
    x = np.linspace(0.1, 1.0, 3)
    expected = 2 * np.sin(np.sin(x)) * np.cos(np.sin(x)) * np.cos(x)
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-5)

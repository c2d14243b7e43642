"""The differentiation API: the seed examples, pytrees, argnums, has_aux, integers (float0),
Jacobians and Hessians, composition with jit, and the errors JAX gives for misuse. References
are hand-computed values, NumPy backprop and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.ad_util import float0


def test_seed_examples():
    def fn(x):
        return 2 * x

    assert str(kiln.grad(fn)(5.0)) == "2.0"
    assert repr(kiln.value_and_grad(fn)(5.0)) == (
        "(Array(10., dtype=float32, weak_type=True), Array(2., dtype=float32, weak_type=True))"
    )

    def cube(x):
        return 2 * x**3

    grad_fn = kiln.grad(cube)
    assert (
        f"d0x: {cube(1.0)}, d1x: {grad_fn(1.0)}, d2x: {kiln.grad(grad_fn)(1.0)}"
        == "d0x: 2.0, d1x: 6.0, d2x: 12.0"
    )


def _mlp_params(dims, seed=0):
    rng = np.random.default_rng(seed)
    return [
        {
            "W": jnp.asarray(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m)),
            "b": jnp.asarray(rng.standard_normal(n).astype(np.float32) * 0.1),
        }
        for m, n in zip(dims[:-1], dims[1:])
    ]


def _mlp_loss(params, x, y):
    h = x
    for layer in params[:-1]:
        h = jnp.tanh(h @ layer["W"] + layer["b"])
    out = h @ params[-1]["W"] + params[-1]["b"]
    return jnp.mean((out - y) ** 2)


def _numpy_backprop(params, x, y):
    p = [{k: np.asarray(v, np.float64) for k, v in layer.items()} for layer in params]
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    acts, pre = [x], []
    for layer in p[:-1]:
        z = acts[-1] @ layer["W"] + layer["b"]
        pre.append(z)
        acts.append(np.tanh(z))
    out = acts[-1] @ p[-1]["W"] + p[-1]["b"]
    d = 2 * (out - y) / out.size
    grads = [None] * len(p)
    for i in reversed(range(len(p))):
        grads[i] = {"W": acts[i].T @ d, "b": d.sum(0)}
        if i:
            d = (d @ p[i]["W"].T) * (1 - np.tanh(pre[i - 1]) ** 2)
    return grads


def test_mlp_gradient_matches_numpy_backprop_and_keeps_the_pytree():
    params = _mlp_params([5, 8, 6, 3])
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((4, 5)).astype(np.float32))
    y = jnp.asarray(rng.standard_normal((4, 3)).astype(np.float32))
    grads = kiln.grad(_mlp_loss)(params, x, y)
    assert kiln.tree_util.tree_structure(grads) == kiln.tree_util.tree_structure(params)
    expected = _numpy_backprop(params, x, y)
    for g, e in zip(grads, expected):
        for k in ("W", "b"):
            np.testing.assert_allclose(np.asarray(g[k]), e[k], atol=1e-5, rtol=1e-5)
    jitted = kiln.jit(kiln.grad(_mlp_loss))(params, x, y)
    for g, e in zip(jitted, expected):
        np.testing.assert_allclose(np.asarray(g["W"]), e["W"], atol=1e-5, rtol=1e-5)


def test_has_aux_and_argnums():
    def loss(a, b):
        return jnp.sum(a * b), {"aux": a + 1}

    (value, aux), (ga, gb) = kiln.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        jnp.arange(3.0), jnp.ones(3)
    )
    assert float(value) == 3.0
    np.testing.assert_array_equal(aux["aux"], [1, 2, 3])
    np.testing.assert_array_equal(ga, [1, 1, 1])
    np.testing.assert_array_equal(gb, [0, 1, 2])
    g, aux = kiln.grad(loss, has_aux=True)(jnp.arange(3.0), jnp.ones(3))
    np.testing.assert_array_equal(g, [1, 1, 1])
    g = kiln.grad(lambda a, b: jnp.sum(a * b), argnums=-1)(jnp.arange(3.0), jnp.ones(3))
    np.testing.assert_array_equal(g, [0, 1, 2])


def test_integer_inputs_and_outputs():
    with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs"):
        kiln.grad(lambda x: x * 2.0)(1)
    g = kiln.grad(lambda x, n: x * n, argnums=(0, 1), allow_int=True)(2.0, 3)
    assert float(g[0]) == 3.0 and g[1].dtype == float0
    with pytest.raises(TypeError, match="grad requires real-valued outputs"):
        kiln.grad(lambda x: x.astype(jnp.int32))(1.0)
    out, pullback = kiln.vjp(lambda x: (x * 2, (x * 3).astype(jnp.int32)), 1.0)
    (ct,) = pullback((1.0, np.zeros((), float0)))
    assert float(ct) == 2.0
    _, pullback = kiln.vjp(lambda n: n * 2, 3)
    (ct,) = pullback(np.zeros((), float0))
    assert ct.dtype == float0


def test_misuse_errors():
    with pytest.raises(
        TypeError,
        match="Gradient only defined for scalar-output functions. "
        r"Output had shape: \(3,\)",
    ):
        kiln.grad(lambda x: x)(jnp.ones(3))
    with pytest.raises(TypeError, match="requires at least 3 positional arguments"):
        kiln.grad(lambda x, y: x, argnums=2)(1.0, 2.0)
    with pytest.raises(TypeError, match="holomorphic=True"):
        kiln.grad(lambda x: x * 1j)(1.0)
    with pytest.raises(ValueError, match="unexpected JAX type"):
        kiln.vjp(lambda x: x * 2, 1.0)[1](jnp.ones(3))
    with pytest.raises(ValueError, match="unexpected tree structure"):
        kiln.vjp(lambda x: x * 2, 1.0)[1]((1.0, 2.0))
    with pytest.raises(ValueError, match="different primal and tangent shapes"):
        kiln.jvp(lambda x: x * 2, (1.0,), (jnp.ones(3),))
    with pytest.raises(TypeError, match="must be tuples or lists"):
        kiln.jvp(lambda x: x * 2, 1.0, 1.0)
    with pytest.raises(TypeError, match="dtypes must be equal"):
        kiln.jvp(lambda x: x * 2, (1.0,), (1,))
    with pytest.raises(TypeError, match="not a valid JAX type"):
        kiln.grad(lambda x: x)("a")


def test_jvp_linearize_and_float0_tangents():
    y, t = kiln.jvp(lambda x: jnp.sin(x) * x, (0.5,), (2.0,))
    np.testing.assert_allclose(float(t), 2 * (np.cos(0.5) * 0.5 + np.sin(0.5)), rtol=1e-6)
    y, f_jvp = kiln.linearize(lambda x: jnp.exp(x) * 3, 0.25)
    np.testing.assert_allclose(float(f_jvp(2.0)), 6 * np.exp(0.25), rtol=1e-6)
    np.testing.assert_allclose(float(f_jvp(1.0)), 3 * np.exp(0.25), rtol=1e-6)
    _, t = kiln.jvp(lambda x, n: x * n, (2.0, 3), (1.0, np.zeros((), float0)))
    assert float(t) == 3.0


def test_hessian_of_quadratic_form_and_jacobians():
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((4, 4)).astype(np.float32))
    h = kiln.hessian(lambda x: x @ a @ x)(jnp.ones(4))
    np.testing.assert_allclose(np.asarray(h), np.asarray(a + a.T), rtol=1e-5, atol=1e-5)
    x = jnp.arange(1.0, 4.0)
    expected = np.diag(2 * np.arange(1.0, 4.0))
    np.testing.assert_allclose(kiln.jacfwd(lambda v: v**2)(x), expected)
    np.testing.assert_allclose(kiln.jacrev(lambda v: v**2)(x), expected)
    np.testing.assert_allclose(
        kiln.jacfwd(kiln.jacrev(lambda v: jnp.sum(v**3)))(x),
        np.diag(6 * np.arange(1.0, 4.0)),
        rtol=1e-6,
    )
    jac = kiln.jacrev(lambda d: {"y": d["a"] * d["b"]})({"a": x, "b": 2 * x})
    np.testing.assert_allclose(jac["y"]["a"], np.diag(2 * np.arange(1.0, 4.0)))
    np.testing.assert_allclose(jac["y"]["b"], np.diag(np.arange(1.0, 4.0)))


def test_composition_with_jit():
    def f(x):
        return jnp.sum(jnp.sin(x) * x)

    x = jnp.arange(4.0)
    expected = np.sin(np.arange(4.0)) + np.arange(4.0) * np.cos(np.arange(4.0))
    for g in (
        kiln.grad(f),
        kiln.jit(kiln.grad(f)),
        kiln.grad(kiln.jit(f)),
        kiln.jit(kiln.grad(kiln.jit(f))),
    ):
        np.testing.assert_allclose(np.asarray(g(x)), expected, rtol=1e-5, atol=1e-6)
    inner = kiln.jit(lambda v: jnp.tanh(v) * 2)
    _, pullback = kiln.vjp(lambda v: inner(v) + 1, x)
    np.testing.assert_allclose(
        np.asarray(pullback(jnp.ones(4))[0]), 2 * (1 - np.tanh(np.arange(4.0)) ** 2), rtol=1e-5
    )
    # grad of grad through jit
    gg = kiln.grad(kiln.grad(kiln.jit(lambda v: v**3)))(2.0)
    assert float(gg) == pytest.approx(12.0)


def test_jit_of_grad_is_one_program():
    jaxpr = kiln.make_jaxpr(kiln.jit(kiln.grad(lambda x: jnp.sum(jnp.sin(x)))))(jnp.ones(3))
    text = str(jaxpr)
    assert text.count("pjit") == 1 and "cos" in text


def test_stop_gradient_and_python_control_flow():
    assert float(kiln.grad(lambda x: x * lax.stop_gradient(x))(3.0)) == 3.0

    def f(x):
        if x > 0:  # concrete primal values under grad
            return x**2
        return -x

    assert float(kiln.grad(f)(3.0)) == 6.0 and float(kiln.grad(f)(-3.0)) == -1.0


def test_linear_transpose():
    f_t = kiln.linear_transpose(lambda x: (2 * x[:2], jnp.sum(x)), jnp.ones(3))
    (ct,) = f_t((jnp.array([1.0, 2.0]), jnp.asarray(10.0)))
    np.testing.assert_allclose(ct, [12.0, 14.0, 10.0])


def test_custom_jvp_and_custom_vjp():
    @kiln.custom_jvp
    def f(x):
        return jnp.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), 10.0 * t  # deliberately not cos, to see the rule is used

    assert float(kiln.grad(f)(1.0)) == 10.0
    assert float(kiln.jit(kiln.grad(f))(1.0)) == 10.0
    np.testing.assert_allclose(kiln.vmap(kiln.grad(f))(jnp.arange(3.0)), [10.0, 10.0, 10.0])

    @kiln.custom_vjp
    def g(x, y):
        return x * y

    g.defvjp(lambda x, y: (x * y, (x, y)), lambda res, ct: (res[1] * ct * 2, res[0] * ct))
    assert float(kiln.grad(g)(3.0, 4.0)) == 8.0
    with pytest.raises(TypeError, match="forward-mode autodiff"):
        kiln.jvp(lambda x: g(x, 2.0), (1.0,), (1.0,))

    @kiln.custom_jvp
    def h(x, y):
        return x * y

    h.defjvps(lambda g_, ans, x, y: g_ * y, lambda g_, ans, x, y: g_ * x * 100)
    assert float(kiln.grad(h, argnums=1)(2.0, 3.0)) == 200.0


def test_check_grads_catches_a_wrong_rule():
    @kiln.custom_jvp
    def f(x):
        return x**2

    f.defjvp(lambda p, t: (f(p[0]), 3 * p[0] * t[0]))  # wrong: should be 2x
    with pytest.raises(AssertionError):
        kiln.test_util.check_grads(f, (np.float32(1.5),), order=1)
    kiln.test_util.check_grads(lambda x: x**2, (np.float32(1.5),), order=2)


@pytest.mark.parametrize("fn", [jnp.logaddexp, jnp.logaddexp2])
def test_logaddexp_derivatives_at_the_edges_match_jax(fn):
    # Values from JAX 0.10.2 (both functions give the same shares at these points).
    inf = np.inf
    cases = [
        ((inf, 1.0), (1.0, None)),
        ((-inf, 1.0), (0.0, 1.0)),
        ((inf, inf), (1.0, 1.0)),
        ((3.0, 3.0), (0.5, 0.5)),
        ((-inf, -inf), (np.nan, np.nan)),
    ]
    for (a, b), expected in cases:
        got = kiln.grad(fn, argnums=(0, 1))(a, b)
        for g, e in zip(got, expected):
            if e is not None:
                np.testing.assert_allclose(float(g), e)
    np.testing.assert_allclose(float(kiln.grad(jnp.logaddexp, 1)(inf, 1.0)), np.e, rtol=1e-6)
    np.testing.assert_allclose(float(kiln.grad(jnp.logaddexp2, 1)(inf, 1.0)), 2.0, rtol=1e-6)

"""The vmap API: in_axes/out_axes forms, keyword arguments, nesting, named axes, composition with
jit and grad, the single dot_general of a batched matrix-vector product, and JAX's errors.
References are Python loops over slices."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def test_in_axes_forms():
    x = jnp.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(kiln.vmap(jnp.sum)(x), [3.0, 12.0])
    np.testing.assert_array_equal(kiln.vmap(jnp.sum, in_axes=1)(x), [3.0, 5.0, 7.0])
    np.testing.assert_array_equal(kiln.vmap(jnp.sum, in_axes=-1)(x), [3.0, 5.0, 7.0])
    out = kiln.vmap(lambda a, b: a * b, in_axes=(0, None))(x, jnp.arange(3.0))
    np.testing.assert_array_equal(out, np.arange(6.0).reshape(2, 3) * np.arange(3.0))
    out = kiln.vmap(lambda d: d["a"] + d["b"], in_axes=({"a": 0, "b": None},))(
        {"a": x, "b": jnp.ones(3)}
    )
    np.testing.assert_array_equal(out, np.arange(6.0).reshape(2, 3) + 1)
    out = kiln.vmap(lambda a, b: a + b, in_axes=[1, 0])(x.T, x)
    np.testing.assert_array_equal(out, 2 * np.arange(6.0).reshape(2, 3))
    out = kiln.vmap(lambda a, *, scale: a * scale)(x, scale=jnp.array([1.0, 2.0]))
    np.testing.assert_array_equal(out, np.arange(6.0).reshape(2, 3) * [[1.0], [2.0]])


def test_out_axes_and_unbatched_outputs():
    x = jnp.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(kiln.vmap(lambda r: r * 2, out_axes=1)(x), 2 * np.asarray(x).T)
    out = kiln.vmap(lambda r: (r, 1.0), out_axes=(0, None))(x)
    assert float(out[1]) == 1.0
    np.testing.assert_array_equal(kiln.vmap(lambda r: 1.0)(x), [1.0, 1.0])
    np.testing.assert_array_equal(kiln.vmap(lambda: jnp.ones(2), axis_size=3)(), np.ones((3, 2)))


def test_nested_vmap_matches_loops():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    f = kiln.vmap(kiln.vmap(lambda u, v: jnp.dot(u, v) + jnp.sin(u[0])), in_axes=(0, None))
    out = np.asarray(f(jnp.asarray(a), jnp.asarray(b)))
    expected = np.array([[a[i, j] @ b[j] + np.sin(a[i, j, 0]) for j in range(3)] for i in range(2)])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_matvec_is_one_dot_general():
    text = str(
        kiln.make_jaxpr(kiln.vmap(lambda m, v: m @ v, in_axes=(None, 0)))(
            jnp.ones((3, 4)), jnp.ones((5, 4))
        )
    )
    assert text.count("dot_general") == 1
    for word in ("while", "scan", "concatenate"):
        assert word not in text


def _mlp_loss(params, x, y):
    h = jnp.tanh(x @ params["W1"] + params["b1"])
    out = h @ params["W2"]
    return jnp.sum((out - y) ** 2)


def test_per_example_gradients_equal_a_loop():
    rng = np.random.default_rng(2)
    params = {
        "W1": jnp.asarray(rng.standard_normal((5, 7)).astype(np.float32)),
        "b1": jnp.asarray(rng.standard_normal(7).astype(np.float32)),
        "W2": jnp.asarray(rng.standard_normal((7, 2)).astype(np.float32)),
    }
    xs = jnp.asarray(rng.standard_normal((6, 5)).astype(np.float32))
    ys = jnp.asarray(rng.standard_normal((6, 2)).astype(np.float32))
    per_example = kiln.vmap(kiln.grad(_mlp_loss), in_axes=(None, 0, 0))
    batched = per_example(params, xs, ys)
    jitted = kiln.jit(per_example)(params, xs, ys)
    for i in range(6):
        single = kiln.grad(_mlp_loss)(params, xs[i], ys[i])
        for k in params:
            np.testing.assert_allclose(
                np.asarray(batched[k])[i], np.asarray(single[k]), rtol=1e-5, atol=1e-5
            )
            np.testing.assert_allclose(
                np.asarray(jitted[k])[i], np.asarray(single[k]), rtol=1e-5, atol=1e-5
            )


def test_transformations_agree():
    def f(x):
        return jnp.sum(jnp.sin(x) * x)

    x = jnp.asarray(np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32))
    loop = np.stack([np.asarray(kiln.grad(f)(x[i])) for i in range(4)])
    for g in (
        kiln.vmap(kiln.grad(f)),
        kiln.jit(kiln.vmap(kiln.grad(f))),
        kiln.vmap(kiln.jit(kiln.grad(f))),
        kiln.vmap(kiln.grad(kiln.jit(f))),
    ):
        np.testing.assert_allclose(np.asarray(g(x)), loop, rtol=1e-5, atol=1e-6)
    total = kiln.grad(lambda v: jnp.sum(kiln.vmap(f)(v)))(x)
    np.testing.assert_allclose(np.asarray(total), loop, rtol=1e-5, atol=1e-6)
    vals = kiln.vmap(kiln.jit(f))(x)
    np.testing.assert_allclose(np.asarray(vals), [float(f(x[i])) for i in range(4)], rtol=1e-5)


def test_named_axes():
    x = jnp.arange(4.0)
    np.testing.assert_allclose(
        kiln.vmap(lambda v: v / lax.psum(v, "i"), axis_name="i")(x), np.arange(4.0) / 6
    )
    np.testing.assert_allclose(kiln.vmap(lambda v: lax.pmean(v, "i"), axis_name="i")(x), 1.5)
    np.testing.assert_allclose(kiln.vmap(lambda v: lax.pmax(v, "i"), axis_name="i")(x), 3.0)
    np.testing.assert_allclose(kiln.vmap(lambda v: lax.pmin(v, "i"), axis_name="i")(x), 0.0)
    np.testing.assert_array_equal(
        kiln.vmap(lambda v: lax.axis_index("i"), axis_name="i")(x), [0, 1, 2, 3]
    )
    np.testing.assert_array_equal(
        kiln.vmap(lambda v: lax.all_gather(v, "i"), axis_name="i")(x),
        np.tile(np.arange(4.0), (4, 1)),
    )
    np.testing.assert_array_equal(
        kiln.vmap(lambda v: lax.ppermute(v, "i", [(0, 1), (1, 2), (2, 3)]), axis_name="i")(x),
        [0.0, 0.0, 1.0, 2.0],
    )
    nested = kiln.vmap(kiln.vmap(lambda v: lax.psum(v, ("i", "j")), axis_name="j"), axis_name="i")(
        jnp.ones((2, 3))
    )
    np.testing.assert_array_equal(nested, np.full((2, 3), 6.0))
    inside_jit = kiln.vmap(kiln.jit(lambda v: lax.psum(v, "i")), axis_name="i")(x)
    np.testing.assert_array_equal(inside_jit, np.full(4, 6.0))
    with pytest.raises(NameError, match="unbound axis name: j"):
        kiln.vmap(lambda v: lax.psum(v, "j"), axis_name="i")(x)
    with pytest.raises(NameError, match="unbound axis name"):
        lax.psum(x, "i")


def test_errors():
    with pytest.raises(
        ValueError,
        match="inconsistent sizes for array axes to be mapped:\n"
        r"  \* one axis had size 3: axis 0 of argument x of "
        r"type float32\[3\];\n  \* one axis had size 4: axis 0 "
        r"of argument y of type float32\[4\]",
    ):
        kiln.vmap(lambda x, y: x + y)(jnp.ones(3), jnp.ones(4))
    with pytest.raises(ValueError, match=r"len\(in_axes\)=1, len\(args\)=2"):
        kiln.vmap(lambda x, y: x + y, in_axes=(0,))(jnp.ones(3), jnp.ones(3))
    with pytest.raises(
        ValueError,
        match="map its argument along axis 2, which implies that its "
        "rank should be at least 3, but is only 1",
    ):
        kiln.vmap(lambda x: x, in_axes=2)(jnp.ones(3))
    with pytest.raises(ValueError, match="at least one non-None value in in_axes"):
        kiln.vmap(lambda x: x, in_axes=None)(jnp.ones(3))
    with pytest.raises(ValueError, match="tree prefix"):
        kiln.vmap(lambda d: d, in_axes=({"a": 0},))({"b": jnp.ones(3)})
    with pytest.raises(ValueError, match="at least one argument"):
        kiln.vmap(lambda *a: 1.0)()


def test_derivatives_through_collectives_match_hand_computation():
    x = jnp.array([1.0, 2.0, 3.0, 4.0])

    def normalized_first(v):  # v[0] / sum(v) via psum over the named axis
        return kiln.vmap(lambda e: e / lax.psum(e, "i"), axis_name="i")(v)[0]

    # d/dv_k (v_0 / S) = [k == 0] / S - v_0 / S**2, S = 10
    expected = -1.0 / 100 + np.array([0.1, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(kiln.grad(normalized_first)(x), expected, rtol=1e-6)
    kiln.test_util.check_grads(normalized_first, (x,), order=2, modes=("fwd", "rev"))
    # pmax's derivative goes to the maximum (ties split evenly); all_gather is linear
    top = kiln.grad(lambda v: kiln.vmap(lambda e: lax.pmax(e, "i"), axis_name="i")(v)[1])
    np.testing.assert_allclose(top(jnp.array([1.0, 5.0, 5.0, 2.0])), [0.0, 0.5, 0.5, 0.0])
    # f(v) = sum_{i,j} v_j * v_i (row i of the gather is the whole v): df/dv_k = 2 * sum(v)
    gathered = kiln.grad(
        lambda v: jnp.sum(
            kiln.vmap(lambda e: lax.all_gather(e, "i"), axis_name="i")(v) * v[:, None]
        )
    )
    np.testing.assert_allclose(gathered(x), np.full(4, 2 * 10.0), rtol=1e-6)

"""Convolutions and windowed reductions: the op-record rows eagerly and under jit, then edge
cases, errors and derivative conventions (transposes by the dot-product test, max-pool ties)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.ad_util import UndefinedPrimal
from kiln.core.avals import ShapedArray
from kiln.primitives.conv import conv_general_dilated_p
from kiln.primitives.windowed import (
    reduce_window_sum_p,
    select_and_gather_add_p,
    select_and_scatter_add_p,
)
from tests._testing import assert_close, check_record_eager, check_record_jit, x64_mode
from tests.op_records_conv import CONV_RECORDS, conv_reference, reduce_window_reference

CASES = [(r, s, d) for r in CONV_RECORDS for s, d in r.cases()]
IDS = [i for r in CONV_RECORDS for i in r.ids()]


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_record_matches_reference(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_record_under_jit(record, shapes, dtype):
    check_record_jit(record, shapes, dtype)


# --- transposes: <ct, f(x)> == <f^T(ct), x> ----------------------------------------------------

TRANSPOSE_CASES = [
    dict(window_strides=(1, 1), padding=((1, 1), (1, 1))),
    dict(window_strides=(2, 3), padding=((0, 1), (2, 0)), rhs_dilation=(2, 1)),
    dict(window_strides=(1, 2), padding=((1, 2), (0, -1)), lhs_dilation=(2, 1)),
    dict(window_strides=(1, 1), padding=((1, 1), (1, 1)), feature_group_count=2),
    dict(window_strides=(2, 1), padding=((0, 0), (1, 0)), batch_group_count=2),
]


def _conv_params(kwargs, ndim=4):
    nsp = ndim - 2
    return dict(
        window_strides=kwargs["window_strides"],
        padding=kwargs["padding"],
        lhs_dilation=kwargs.get("lhs_dilation", (1,) * nsp),
        rhs_dilation=kwargs.get("rhs_dilation", (1,) * nsp),
        dimension_numbers=lax.ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3)),
        feature_group_count=kwargs.get("feature_group_count", 1),
        batch_group_count=kwargs.get("batch_group_count", 1),
        precision=None,
        preferred_element_type=None,
    )


@pytest.mark.parametrize("kwargs", TRANSPOSE_CASES, ids=range(len(TRANSPOSE_CASES)))
def test_conv_transpose_rules_are_adjoint(kwargs):
    rng = np.random.default_rng(0)
    with x64_mode(True):
        x = rng.standard_normal((4, 4, 7, 6))
        w = rng.standard_normal((4, 4 // kwargs.get("feature_group_count", 1), 3, 2))
        params = _conv_params(kwargs)
        y = np.asarray(conv_general_dilated_p.bind(jnp.asarray(x), jnp.asarray(w), **params))
        ct = rng.standard_normal(y.shape)
        rule = conv_general_dilated_p.rule("transpose")
        x_ct, none = rule(
            jnp.asarray(ct),
            UndefinedPrimal(ShapedArray(x.shape, x.dtype)),
            jnp.asarray(w),
            **params,
        )
        assert none is None and x_ct.shape == x.shape
        np.testing.assert_allclose(np.vdot(ct, y), np.vdot(np.asarray(x_ct), x), rtol=1e-10)
        none, w_ct = rule(
            jnp.asarray(ct),
            jnp.asarray(x),
            UndefinedPrimal(ShapedArray(w.shape, w.dtype)),
            **params,
        )
        assert none is None and w_ct.shape == w.shape
        np.testing.assert_allclose(np.vdot(ct, y), np.vdot(np.asarray(w_ct), w), rtol=1e-10)


def test_reduce_window_sum_transpose_is_adjoint():
    rng = np.random.default_rng(1)
    params = dict(
        window_dimensions=(2, 3),
        window_strides=(2, 1),
        padding=((1, 0), (2, 1)),
        base_dilation=(1, 2),
        window_dilation=(2, 1),
    )
    with x64_mode(True):
        x = rng.standard_normal((7, 5))
        y = np.asarray(reduce_window_sum_p.bind(jnp.asarray(x), **params))
        ct = rng.standard_normal(y.shape)
        (x_ct,) = reduce_window_sum_p.rule("transpose")(
            jnp.asarray(ct), UndefinedPrimal(ShapedArray(x.shape, x.dtype)), **params
        )
        np.testing.assert_allclose(np.vdot(ct, y), np.vdot(np.asarray(x_ct), x), rtol=1e-10)


def test_select_and_scatter_add_is_the_transpose_of_select_and_gather_add():
    rng = np.random.default_rng(2)
    params = dict(
        select_prim="ge",
        window_dimensions=(3, 2),
        window_strides=(2, 1),
        padding=((1, 1), (0, 1)),
        base_dilation=(1, 1),
        window_dilation=(1, 1),
    )
    with x64_mode(True):
        operand = jnp.asarray(rng.standard_normal((6, 5)))
        t = rng.standard_normal((6, 5))
        gathered = np.asarray(select_and_gather_add_p.bind(jnp.asarray(t), operand, **params))
        s = rng.standard_normal(gathered.shape)
        scattered = np.asarray(select_and_scatter_add_p.bind(jnp.asarray(s), operand, **params))
        np.testing.assert_allclose(np.vdot(s, gathered), np.vdot(scattered, t), rtol=1e-10)


# --- derivative conventions --------------------------------------------------------------------


def test_max_pool_gradient_ties_go_to_the_first_element():
    # Values from JAX: every window of equal values passes its gradient to its first element.
    x = jnp.ones(5)

    def f(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), "VALID").sum()

    np.testing.assert_array_equal(np.asarray(kiln.grad(f)(x)), [1, 1, 1, 1, 0])

    def g(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (3,), (2,), "SAME").sum()

    np.testing.assert_array_equal(np.asarray(kiln.grad(g)(x)), [1, 1, 0, 1, 0])
    _, tangent = kiln.jvp(
        lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), "VALID"),
        (x,),
        (jnp.arange(5.0),),
    )
    np.testing.assert_array_equal(np.asarray(tangent), [0, 1, 2, 3])


def test_min_pool_gradient_picks_the_minimum():
    x = jnp.asarray(np.array([[3.0, 1.0, 2.0], [0.5, 4.0, 1.0]], np.float32))
    grad = kiln.grad(
        lambda x: lax.reduce_window(x, jnp.inf, lax.min, (2, 2), (1, 1), "VALID").sum()
    )(x)
    # the second window ties between 1.0 at (0, 1) and (1, 2): the first in window order wins
    np.testing.assert_array_equal(np.asarray(grad), [[0, 1, 0], [1, 0, 0]])


def test_generic_reduce_window_forward_derivative_matches_finite_differences():
    rng = np.random.default_rng(3)
    with x64_mode(True):
        x = rng.uniform(0.5, 2.0, (4, 5))
        t = rng.standard_normal((4, 5))

        def f(x):
            return lax.reduce_window(x, 1.0, lambda a, b: a * b + 0.5 * b, (2, 2), (1, 2), "SAME")

        _, tangent = kiln.jvp(f, (jnp.asarray(x),), (jnp.asarray(t),))
        eps = 1e-6
        numeric = (
            np.asarray(f(jnp.asarray(x + eps * t))) - np.asarray(f(jnp.asarray(x - eps * t)))
        ) / (2 * eps)
        np.testing.assert_allclose(np.asarray(tangent), numeric, rtol=1e-6, atol=1e-8)


def test_generic_reduce_window_has_no_reverse_derivative_as_in_jax():
    f = lambda x: lax.reduce_window(x, 1.0, lax.mul, (2,), (1,), "VALID").sum()  # noqa: E731
    with pytest.raises(Exception):
        kiln.grad(f)(jnp.arange(1.0, 6.0))


def test_generic_reduce_window_over_a_pytree():
    # (value, index) pairs: the index of each window's maximum, ties to the first.
    x = np.array([1.0, 3.0, 3.0, 2.0, 5.0, 0.0], np.float32)
    idx = np.arange(6, dtype=np.int32)

    def pick(a, b):
        take_a = a[0] >= b[0]
        return lax.select(take_a, a[0], b[0]), lax.select(take_a, a[1], b[1])

    values, where = lax.reduce_window(
        (jnp.asarray(x), jnp.asarray(idx)), (-np.inf, np.int32(-1)), pick, (3,), (1,), "VALID"
    )
    np.testing.assert_array_equal(np.asarray(values), [3, 3, 5, 5])
    np.testing.assert_array_equal(np.asarray(where), [1, 1, 4, 4])
    jitted = kiln.jit(
        lambda a, b: lax.reduce_window((a, b), (-np.inf, np.int32(-1)), pick, (3,), (1,), "VALID")
    )(jnp.asarray(x), jnp.asarray(idx))
    np.testing.assert_array_equal(np.asarray(jitted[1]), [1, 1, 4, 4])


def test_conv_transpose_with_transposed_kernel_is_the_gradient_of_conv():
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.standard_normal((2, 8, 8, 2)).astype(np.float32))
    w = jnp.asarray(rng.standard_normal((3, 3, 2, 4)).astype(np.float32))
    dn = ("NHWC", "HWIO", "NHWC")

    def f(x):
        return lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=dn)

    y, vjp = kiln.vjp(f, x)
    ct = jnp.asarray(rng.standard_normal(y.shape).astype(np.float32))
    (expected,) = vjp(ct)
    actual = lax.conv_transpose(ct, w, (2, 2), "SAME", dimension_numbers=dn, transpose_kernel=True)
    assert_close(actual, np.asarray(expected), 1e-4)


def test_max_pool_gradient_under_jit_and_vmap():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 6, 6)).astype(np.float32)

    def loss(x):
        return jnp.sum(lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID") ** 2)

    batched = kiln.jit(kiln.vmap(kiln.grad(loss)))(jnp.asarray(x))
    for b in range(3):
        expected = np.zeros((6, 6), np.float32)
        for i in range(3):
            for j in range(3):
                window = x[b, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2]
                r, c = np.unravel_index(np.argmax(window), (2, 2))
                expected[2 * i + r, 2 * j + c] = 2 * window.max()
        assert_close(np.asarray(batched)[b], expected)


# --- layouts, dtypes, edge cases -------------------------------------------------------------


def test_patches_in_channels_last_layout():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 4, 5, 3)).astype(np.float32)
    got = lax.conv_general_dilated_patches(
        jnp.asarray(x), (2, 2), (1, 1), "VALID", dimension_numbers=("NHWC", "OIHW", "NHWC")
    )
    assert got.shape == (2, 3, 4, 12)
    # feature c * 4 + tap holds channel c at that tap
    got = np.asarray(got)
    for c in range(3):
        for t, (a, b) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
            np.testing.assert_allclose(
                got[..., c * 4 + t], x[:, a : a + 3, b : b + 4, c], rtol=1e-6
            )


def test_preferred_element_type_and_half_precision():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float16)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float16)
    out = lax.conv(
        jnp.asarray(x), jnp.asarray(w), (1, 1), "SAME", preferred_element_type=np.float32
    )
    assert out.dtype == np.float32
    assert_close(out, conv_reference(x, w, (1, 1), "SAME").astype(np.float32), 1e-5)
    assert lax.conv(jnp.asarray(x), jnp.asarray(w), (1, 1), "SAME").dtype == np.float16


def test_empty_batch_and_empty_output():
    x = jnp.zeros((0, 2, 5, 5))
    w = jnp.ones((3, 2, 3, 3))
    assert lax.conv(x, w, (1, 1), "VALID").shape == (0, 3, 3, 3)
    small = jnp.ones((1, 2, 2, 2))
    assert lax.conv(small, w, (1, 1), "VALID").shape == (1, 3, 0, 0)
    pooled = lax.reduce_window(jnp.ones((2, 2)), 0.0, lax.add, (3, 3), (1, 1), "VALID")
    assert pooled.shape == (0, 0)


def test_conv_errors_match_jax():
    x, w = jnp.ones((1, 4, 5, 5)), jnp.ones((2, 3, 3, 3))
    with pytest.raises(ValueError, match="feature_group_count"):
        lax.conv(x, w, (1, 1), "SAME")
    with pytest.raises(TypeError, match="must contain the characters"):
        lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NXHW", "OIHW", "NCHW"))
    with pytest.raises(ValueError, match="transposed convolution"):
        lax.conv_general_dilated(x, jnp.ones((2, 4, 3, 3)), (1, 1), "SAME", lhs_dilation=(2, 2))
    with pytest.raises(RuntimeError, match="Unrecognized padding type"):
        lax.conv(x, jnp.ones((2, 4, 3, 3)), (1, 1), "FULL")
    with pytest.raises(TypeError, match="same dtypes"):
        lax.conv(x, jnp.ones((2, 4, 3, 3), np.float16), (1, 1), "SAME")
    with pytest.raises(TypeError, match="ndim to be equal"):
        lax.conv(x, jnp.ones((2, 4, 3)), (1,), "SAME")


def test_jnp_convolve_errors_and_dtypes():
    with pytest.raises(ValueError, match="1-dimensional"):
        jnp.convolve(jnp.ones((2, 2)), jnp.ones(2))
    with pytest.raises(ValueError, match="mode must be one of"):
        jnp.correlate(jnp.ones(3), jnp.ones(2), mode="wrap")
    assert jnp.convolve(jnp.arange(4), jnp.asarray([1, 2, 3])).dtype == np.float32
    c = np.array([1 + 2j, 0.5 - 1j, 2j], np.complex64)
    v = np.array([1 - 1j, 2 + 0.5j], np.complex64)
    assert_close(jnp.correlate(jnp.asarray(c), jnp.asarray(v), "full"), np.correlate(c, v, "full"))


def test_pooling_reference_agrees_for_integer_max():
    x = np.arange(20, dtype=np.int32).reshape(4, 5) % 7
    got = lax.reduce_window(jnp.asarray(x), np.iinfo(np.int32).min, lax.max, (2, 2), (1, 2), "SAME")
    expected = reduce_window_reference(
        x, np.iinfo(np.int32).min, np.maximum, (2, 2), (1, 2), "SAME"
    )
    np.testing.assert_array_equal(np.asarray(got), expected)


# --- stax layers -------------------------------------------------------------------------------


def test_stax_conv_and_pooling_layers():
    from kiln import random
    from kiln.example_libraries import stax

    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    for layer in (
        stax.Conv(4, (3, 2), strides=(2, 1), padding="SAME"),
        stax.GeneralConv(("NCHW", "OIHW", "NCHW"), 5, (2, 2)),
        stax.MaxPool((2, 2), strides=(2, 2)),
        stax.SumPool((3, 3), padding="SAME"),
        stax.AvgPool((2, 3), strides=(1, 2), padding="SAME"),
    ):
        init_fun, apply_fun = layer
        shape, params = init_fun(random.PRNGKey(0), x.shape)
        assert apply_fun(params, jnp.asarray(x)).shape == tuple(shape)
    # Conv: cross-correlation with an HWIO kernel plus a bias of shape (1, 1, 1, C).
    init_fun, apply_fun = stax.Conv(4, (3, 3), padding="SAME")
    _, (W, b) = init_fun(random.PRNGKey(1), x.shape)
    assert W.shape == (3, 3, 3, 4) and b.shape == (1, 1, 1, 4)
    expected = conv_reference(
        x, np.asarray(W), (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    ) + np.asarray(b)
    assert_close(apply_fun((W, b), jnp.asarray(x)), expected.astype(np.float32), 1e-4)
    # AvgPool divides by the number of real (not padding) inputs in each window.
    _, apply_fun = stax.AvgPool((2, 2), strides=(2, 2), padding="SAME")
    ones = jnp.ones((1, 3, 3, 1))
    np.testing.assert_allclose(np.asarray(apply_fun((), ones)), np.ones((1, 2, 2, 1)))
    _, apply_fun = stax.MaxPool((2, 2), spec="NCHW")
    y = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(
        np.asarray(apply_fun((), jnp.asarray(y)))[0, 0], [[5, 6, 7], [9, 10, 11], [13, 14, 15]]
    )


def test_conv_with_general_padding_matches_the_reference():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    w = rng.standard_normal((2, 3, 2, 3)).astype(np.float32)
    got = lax.conv_with_general_padding(
        jnp.asarray(x), jnp.asarray(w), (2, 1), ((1, 0), (2, 2)), (1, 2), (2, 1)
    )
    expected = conv_reference(x, w, (2, 1), ((1, 0), (2, 2)), (1, 2), (2, 1))
    assert_close(got, expected.astype(np.float32), 1e-5)

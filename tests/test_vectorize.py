"""kiln.numpy.vectorize against numpy.vectorize and hand-computed values: elementwise
broadcasting of loop dimensions, gufunc signatures, excluded arguments (by position and by
name), multiple outputs, composition with jit and grad, and the errors for wrong core
dimensions that JAX raises."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _fresh_rng(request):
    """Each test draws the same data whichever tests ran before it on its worker."""
    global RNG
    RNG = np.random.default_rng(sum(map(ord, request.node.nodeid)))


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def assert_close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=1e-5, atol=1e-6)


def scalar_poly(x, y):
    # Python control flow on the value would not trace, but arithmetic on one element does.
    return x * x + 2.0 * y - x * y


@pytest.mark.parametrize(
    "x_shape,y_shape",
    [
        ((), ()),
        ((5,), ()),
        ((), (4,)),
        ((3, 4), (4,)),
        ((3, 1), (1, 4)),
        ((2, 1, 4), (3, 1)),
        ((1,), (6,)),
        ((2, 3), (2, 3)),
        ((0,), ()),
        ((1, 1), ()),
    ],
)
def test_elementwise_broadcasting_matches_numpy(x_shape, y_shape):
    x, y = rand(*x_shape), rand(*y_shape)
    out = jnp.vectorize(scalar_poly)(x, y)
    expected = np.vectorize(scalar_poly, otypes=[np.float32])(x, y)
    assert out.shape == expected.shape
    assert_close(out, expected)


def test_the_function_sees_one_element():
    seen = []

    def f(x):
        seen.append(x.shape)
        return x + 1

    out = jnp.vectorize(f)(jnp.zeros((2, 3)))
    assert seen == [()]
    assert out.shape == (2, 3)


@pytest.mark.parametrize(
    "a_shape,b_shape,out_shape",
    [
        ((3,), (3,), ()),
        ((5, 3), (3,), (5,)),
        ((5, 3), (5, 3), (5,)),
        ((2, 1, 3), (4, 3), (2, 4)),
        ((1, 3), (4, 3), (4,)),
    ],
)
def test_inner_product_signature(a_shape, b_shape, out_shape):
    a, b = rand(*a_shape), rand(*b_shape)
    out = jnp.vectorize(jnp.dot, signature="(n),(n)->()")(a, b)
    expected = np.vectorize(np.dot, signature="(n),(n)->()")(a, b)
    assert out.shape == expected.shape == out_shape
    assert_close(out, expected)


def test_matvec_signature_against_einsum():
    m, v = rand(4, 2, 3), rand(3)
    out = jnp.vectorize(jnp.matmul, signature="(m,n),(n)->(m)")(m, v)
    assert out.shape == (4, 2)
    assert_close(out, np.einsum("bmn,n->bm", m, v))


def test_core_output_dimension_from_input():
    x = rand(3, 5)
    out = jnp.vectorize(lambda row: row - jnp.mean(row), signature="(n)->(n)")(x)
    assert_close(out, x - x.mean(axis=1, keepdims=True))


def test_multiple_outputs():
    def min_max(row):
        return jnp.min(row), jnp.max(row)

    x = rand(4, 6)
    lo, hi = jnp.vectorize(min_max, signature="(n)->(),()")(x)
    assert_close(lo, x.min(axis=1))
    assert_close(hi, x.max(axis=1))


def test_multiple_outputs_with_expanded_loop_dimension():
    # The leading loop dimension has size 1 in every argument: vmap never sees it, and both
    # outputs get it back.
    x = rand(1, 3)
    first, second = jnp.vectorize(lambda v: (v * 2, v + 1), signature="()->(),()")(x)
    assert first.shape == second.shape == (1, 3)
    assert_close(first, x * 2)
    assert_close(second, x + 1)


def test_excluded_by_position_and_name():
    def power_sum(x, p, offset=0.0):
        return jnp.sum(x**p) + offset

    x = rand(3, 4)
    by_position = jnp.vectorize(power_sum, excluded={1}, signature="(n)->()")
    assert_close(by_position(x, 2), (x**2).sum(axis=1))
    by_name = jnp.vectorize(power_sum, excluded={"offset"}, signature="(n),()->()")
    assert_close(by_name(x, 3, offset=1.5), (x**3).sum(axis=1) + 1.5)


def test_excluded_argument_may_be_a_python_object():
    def lookup(x, table):
        return x * table["scale"]

    out = jnp.vectorize(lookup, excluded={1})(jnp.arange(3.0), {"scale": 4.0})
    assert_close(out, [0.0, 4.0, 8.0])


def test_keyword_arguments_are_passed_whole():
    out = jnp.vectorize(lambda x, scale=1.0: x * scale)(jnp.arange(3.0), scale=2.0)
    assert_close(out, [0.0, 2.0, 4.0])


def test_none_argument_is_passed_through():
    def f(x, maybe):
        return x + (1.0 if maybe is None else maybe)

    assert_close(jnp.vectorize(f)(jnp.arange(3.0), None), [1.0, 2.0, 3.0])


def test_vectorize_under_jit_and_grad():
    f = jnp.vectorize(lambda a, b: jnp.dot(a, b), signature="(n),(n)->()")
    a, b = rand(4, 3), rand(3)
    assert_close(kiln.jit(f)(a, b), a @ b)
    grad_b = kiln.grad(lambda b: jnp.sum(f(a, b)))(jnp.asarray(b))
    assert_close(grad_b, a.sum(axis=0))


def test_wraps_the_function():
    def documented(x):
        """Doubles x."""
        return 2 * x

    v = jnp.vectorize(documented)
    assert v.__name__ == "documented" and v.__doc__ == "Doubles x."


# --- errors, with JAX's types and messages ---------------------------------------------------


def test_inconsistent_core_dimension():
    dot = jnp.vectorize(jnp.dot, signature="(n),(n)->()")
    with pytest.raises(ValueError, match=r"inconsistent size for core dimension 'n': 4 vs 3"):
        dot(jnp.ones(3), jnp.ones(4))


def test_too_few_dimensions_for_core():
    dot = jnp.vectorize(jnp.dot, signature="(n),(n)->()")
    with pytest.raises(
        ValueError,
        match=r"input with shape \(\) does not have enough "
        r"dimensions for all core dimensions \('n',\)",
    ):
        dot(jnp.ones(()), jnp.ones(3))


def test_output_core_dimensions_checked():
    bad = jnp.vectorize(lambda x: x.sum(), signature="(n)->(n)")
    with pytest.raises(
        ValueError,
        match=r"output shape \(\) does not match core dimensions "
        r"\('n',\)",
    ):
        bad(jnp.ones((2, 3)))


def test_wrong_number_of_outputs():
    bad = jnp.vectorize(lambda x: (x, x), signature="(n)->(n)")
    with pytest.raises(TypeError, match="wrong number of output arguments: expected 1, got 2"):
        bad(jnp.ones((2, 3)))
    not_tuple = jnp.vectorize(lambda x: x, signature="(n)->(n),(n)")
    with pytest.raises(TypeError, match="output must be a tuple when multiple outputs"):
        not_tuple(jnp.ones((2, 3)))


def test_wrong_number_of_arguments():
    dot = jnp.vectorize(jnp.dot, signature="(n),(n)->()")
    with pytest.raises(TypeError, match="wrong number of positional arguments: expected 2, got 1"):
        dot(jnp.ones(3))


def test_incompatible_loop_dimensions():
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
        jnp.vectorize(scalar_poly)(jnp.ones(3), jnp.ones(4))


def test_invalid_signature_and_excluded():
    with pytest.raises(ValueError, match="not a valid gufunc signature"):
        jnp.vectorize(jnp.dot, signature="(n),(n)->")(jnp.ones(3), jnp.ones(3))
    with pytest.raises(ValueError, match="contains negative numbers"):
        jnp.vectorize(jnp.dot, excluded={-1})
    with pytest.raises(TypeError, match="can only exclude integer or string arguments"):
        jnp.vectorize(jnp.dot, excluded={1.5})
    with pytest.raises(ValueError, match="Cannot pass None"):
        jnp.vectorize(jnp.dot, signature="(n),(n)->()")(jnp.ones(3), None)

"""kiln.nn against NumPy/SciPy references (computed in float64, rounded to the input's float
type): activations, softmax/log_softmax/logsumexp (stability with large values and infinities,
axes, keepdims, b=, return_sign, where=), one_hot, dtype rules, traced evaluation, bad input."""

import ml_dtypes
import numpy as np
import pytest
from scipy import special

import kiln
import kiln.nn as nn
import kiln.numpy as jnp
from kiln.core.interpreter import eval_closed_jaxpr
from kiln.core.jaxpr import typecheck_jaxpr
from tests._testing import assert_close, check_record_eager, rand
from tests.op_records import NN_ACTIVATION_RECORDS, NN_RECORDS

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, C64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.complex64)
I8, U8, I32 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)
BOOL = np.dtype(np.bool_)


@pytest.mark.parametrize(
    "record,shapes,dtype",
    [(r, s, d) for r in NN_RECORDS for s, d in r.cases()],
    ids=[i for r in NN_RECORDS for i in r.ids()],
)
def test_nn_matches_scipy(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)


def check_traced(fn, *args):
    args = [jnp.asarray(a) for a in args]
    eager = fn(*args)
    closed = kiln.make_jaxpr(fn)(*args)
    typecheck_jaxpr(closed.jaxpr)
    (traced,) = eval_closed_jaxpr(closed, *args)
    assert closed.out_avals[0].shape == eager.shape
    assert closed.out_avals[0].dtype == eager.dtype
    np.testing.assert_array_equal(np.asarray(traced), np.asarray(eager))


@pytest.mark.parametrize(
    "name,fn",
    [(r.name, r.fn) for r in NN_ACTIVATION_RECORDS]
    + [
        ("softmax", nn.softmax),
        ("log_softmax", nn.log_softmax),
        ("logsumexp", nn.logsumexp),
        ("standardize", nn.standardize),
    ],
)
def test_nn_traces_like_eager(name, fn):
    check_traced(fn, rand((3, 4), F32, np.random.default_rng(0)))


@pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit not available yet")
@pytest.mark.parametrize(
    "name,fn", [("gelu", nn.gelu), ("softmax", nn.softmax), ("logsumexp", nn.logsumexp)]
)
def test_nn_jit(name, fn):
    x = jnp.asarray(rand((3, 4), F32, np.random.default_rng(1)))
    assert_close(kiln.jit(fn)(x), np.asarray(fn(x)), tol=1e-5)


# --- dtype rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,fn,int_result",
    [
        ("relu", nn.relu, "same"),
        ("relu6", nn.relu6, F32),
        ("gelu", nn.gelu, F32),
        ("softplus", nn.softplus, F32),
        ("log_sigmoid", nn.log_sigmoid, F32),
        ("soft_sign", nn.soft_sign, F32),
        ("elu", nn.elu, F32),
        ("celu", nn.celu, F32),
        ("selu", nn.selu, F32),
        ("leaky_relu", nn.leaky_relu, F32),
        ("hard_sigmoid", nn.hard_sigmoid, F32),
        ("hard_silu", nn.hard_silu, F32),
        ("softmax", nn.softmax, F32),
        ("log_softmax", nn.log_softmax, F32),
        ("logsumexp", nn.logsumexp, F32),
        ("tanh", nn.tanh, F32),
    ],
)
@pytest.mark.parametrize("dtype", [I8, U8, I32], ids=lambda d: d.name)
def test_integer_inputs(name, fn, int_result, dtype):
    x = np.array([-2, 0, 3, 5], dtype) if dtype.kind == "i" else np.array([0, 1, 3, 5], dtype)
    out = fn(jnp.asarray(x))
    expected_dtype = dtype if int_result == "same" else int_result
    assert out.dtype == expected_dtype
    float_out = fn(jnp.asarray(x.astype(np.float32)))
    assert_close(out, np.asarray(float_out).astype(expected_dtype), tol=1e-6)


@pytest.mark.parametrize("fn", [nn.sigmoid, nn.silu, nn.swish, nn.glu])
def test_logistic_family_rejects_integers(fn):
    with pytest.raises(TypeError, match="int32"):
        fn(jnp.asarray(np.array([1, 2], np.int32)))


def test_hard_tanh_integers_follow_jax():
    x = jnp.asarray(np.array([-3, 0, 1, 5], np.int8))
    out = nn.hard_tanh(x)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(np.asarray(out), [-1, 0, 1, 1])
    # As in JAX, -1 becomes 255 in uint8 arithmetic, so small unsigned values clip to 255.
    u = nn.hard_tanh(jnp.asarray(np.array([0, 1, 3, 5], np.uint8)))
    np.testing.assert_array_equal(np.asarray(u), [255, 255, 1, 1])


def test_weak_types_and_bool():
    assert nn.relu(3.0).weak_type and nn.relu(3.0).dtype == np.float32
    assert not nn.gelu(3.0).weak_type
    out = nn.relu(jnp.asarray(np.array([True, False])))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), [1, 0])
    assert nn.relu(jnp.asarray(np.array([-1.0, 2.0], np.float16))).dtype == np.float16


def test_complex_logsumexp_and_softmax():
    z = (
        rand((5,), F32, np.random.default_rng(2)) + 1j * rand((5,), F32, np.random.default_rng(3))
    ).astype(np.complex64)
    assert_close(
        nn.logsumexp(jnp.asarray(z)),
        special.logsumexp(z.astype(np.complex128)).astype(np.complex64),
        tol=1e-5,
    )
    assert nn.softmax(jnp.asarray(z)).dtype == np.complex64


# --- stability -------------------------------------------------------------------------------


def test_softmax_and_logsumexp_of_large_values():
    big = np.array([1000.0, 1000.0, 990.0], np.float32)
    assert_close(
        nn.softmax(jnp.asarray(big)), special.softmax(big.astype(np.float64)).astype(np.float32)
    )
    assert_close(
        nn.log_softmax(jnp.asarray(big)),
        special.log_softmax(big.astype(np.float64)).astype(np.float32),
    )
    assert_close(
        nn.logsumexp(jnp.asarray(big)), np.float32(special.logsumexp(big.astype(np.float64)))
    )
    small = -big
    assert_close(
        nn.logsumexp(jnp.asarray(small)), np.float32(special.logsumexp(small.astype(np.float64)))
    )
    assert_close(
        nn.softmax(jnp.asarray(small)), special.softmax(small.astype(np.float64)).astype(np.float32)
    )
    h = np.array([60000.0, 60000.0], np.float16)
    assert_close(nn.softmax(jnp.asarray(h)), np.array([0.5, 0.5], np.float16))
    assert_close(nn.logsumexp(jnp.asarray(h)), np.float16(60000.0 + np.log(2)))


def test_logsumexp_infinities():
    def lse(values, **kwargs):
        return float(nn.logsumexp(jnp.asarray(np.array(values, np.float32)), **kwargs))

    assert lse([-np.inf, -np.inf]) == -np.inf
    assert lse([np.inf, 1.0]) == np.inf
    assert lse([np.inf, -np.inf]) == np.inf
    assert np.isnan(lse([np.nan, 1.0]))
    assert lse([-np.inf, 0.0]) == 0.0
    assert float(nn.logsumexp(jnp.asarray(np.zeros(0, np.float32)))) == -np.inf
    rows = nn.logsumexp(jnp.asarray(np.array([[-np.inf, -np.inf], [0.0, 0.0]], np.float32)), axis=1)
    assert_close(rows, np.array([-np.inf, np.log(2)], np.float32))


def test_stable_activations_at_extremes():
    x = jnp.asarray(np.array([-1000.0, -100.0, 0.0, 100.0, 1000.0], np.float32))
    assert_close(nn.softplus(x), np.array([0.0, 0.0, np.log(2), 100.0, 1000.0], np.float32))
    assert_close(nn.log_sigmoid(x), np.array([-1000.0, -100.0, -np.log(2), 0.0, 0.0], np.float32))
    assert_close(nn.sigmoid(x), np.array([0.0, 0.0, 0.5, 1.0, 1.0], np.float32))
    assert_close(nn.elu(x), np.array([-1.0, -1.0, 0.0, 100.0, 1000.0], np.float32))
    assert np.all(np.isfinite(np.asarray(nn.gelu(x))))
    assert_close(
        nn.gelu(x, approximate=False), np.array([0.0, 0.0, 0.0, 100.0, 1000.0], np.float32)
    )


# --- logsumexp / softmax options -------------------------------------------------------------


def test_logsumexp_b_and_return_sign():
    rng = np.random.default_rng(4)
    a = rand((3, 4), F32, rng)
    b = rand((3, 4), F32, rng)
    out, sign = nn.logsumexp(jnp.asarray(a), axis=1, b=jnp.asarray(b), return_sign=True)
    e_out, e_sign = special.logsumexp(a.astype(np.float64), axis=1, b=b, return_sign=True)
    assert_close(out, e_out.astype(np.float32))
    assert_close(sign, e_sign.astype(np.float32))
    # without return_sign, negative sums are NaN (as in JAX and SciPy)
    plain = np.asarray(nn.logsumexp(jnp.asarray(a), axis=1, b=jnp.asarray(b)))
    np.testing.assert_array_equal(np.isnan(plain), e_sign < 0)
    # b = 0 removes an element, even an infinite one
    masked = nn.logsumexp(
        jnp.asarray(np.array([np.inf, 1.0], np.float32)),
        b=jnp.asarray(np.array([0.0, 2.0], np.float32)),
    )
    assert_close(masked, np.float32(1.0 + np.log(2.0)))
    # b broadcasts
    assert_close(
        nn.logsumexp(jnp.asarray(a), b=2.0),
        np.float32(special.logsumexp(a.astype(np.float64), b=2.0)),
    )


def test_logsumexp_where_and_softmax_where():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    mask = np.array([[True, False, True], [False, False, True]])
    out = nn.logsumexp(jnp.asarray(x), axis=1, where=jnp.asarray(mask))
    expected = [np.logaddexp(1.0, 3.0), 6.0]
    assert_close(out, np.array(expected, np.float32))
    sm = nn.softmax(jnp.asarray(x), where=jnp.asarray(mask))
    e = np.exp(np.where(mask, x, -np.inf))
    assert_close(sm, (e / e.sum(axis=1, keepdims=True)).astype(np.float32))
    lsm = np.asarray(nn.log_softmax(jnp.asarray(x), where=jnp.asarray(mask)))
    assert np.all(lsm[~mask] == -np.inf)
    assert_close(lsm[mask], np.log(np.asarray(sm)[mask]))


def test_softmax_properties():
    x = rand((4, 5), F32, np.random.default_rng(5))
    for axis in (0, 1, -1):
        sm = np.asarray(nn.softmax(jnp.asarray(x), axis=axis))
        np.testing.assert_allclose(sm.sum(axis=axis), 1.0, rtol=1e-6)
        np.testing.assert_allclose(
            np.asarray(nn.log_softmax(jnp.asarray(x), axis=axis)), np.log(sm), rtol=1e-5, atol=1e-6
        )


def test_standardize():
    x = rand((3, 5), F32, np.random.default_rng(6))
    out = nn.standardize(jnp.asarray(x), axis=1)
    x64 = x.astype(np.float64)
    expected = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    assert_close(out, expected.astype(np.float32), tol=1e-4)
    given = nn.standardize(jnp.asarray(x), axis=0, mean=0.0, variance=1.0, epsilon=0.0)
    assert_close(given, x)
    assert nn.normalize is nn.standardize


# --- one_hot, glu ----------------------------------------------------------------------------


def test_one_hot():
    labels = np.array([[0, 2], [1, 5]], np.int32)
    out = nn.one_hot(jnp.asarray(labels), 3)
    expected = (labels[..., None] == np.arange(3)).astype(np.float32)
    assert out.dtype == np.float32 and out.shape == (2, 2, 3)
    np.testing.assert_array_equal(np.asarray(out), expected)
    out = nn.one_hot(jnp.asarray(labels), 4, axis=0, dtype=np.int8)
    assert out.dtype == np.int8 and out.shape == (4, 2, 2)
    np.testing.assert_array_equal(
        np.asarray(out), np.moveaxis((labels[..., None] == np.arange(4)), -1, 0)
    )
    neg = nn.one_hot(jnp.asarray(np.array([-1, 3], np.int32)), 3)
    np.testing.assert_array_equal(np.asarray(neg), np.zeros((2, 3)))
    floats = nn.one_hot(jnp.asarray(np.array([1.5, 2.0], np.float32)), 3)
    np.testing.assert_array_equal(np.asarray(floats), [[0, 0, 0], [0, 0, 1]])
    assert nn.one_hot(2, 4).shape == (4,)
    assert nn.one_hot(jnp.asarray(np.zeros((0,), np.int32)), 3).shape == (0, 3)
    text = str(kiln.make_jaxpr(lambda v: nn.one_hot(v, 3))(jnp.asarray(labels)))
    assert "iota" in text and "eq" in text
    with pytest.raises(TypeError, match="bool"):
        nn.one_hot(jnp.asarray(np.array([True])), 2)
    with pytest.raises(ValueError, match="out of bounds"):
        nn.one_hot(jnp.asarray(labels), 3, axis=3)
    with pytest.raises(kiln.core.errors.ConcretizationTypeError, match="num_classes"):
        kiln.make_jaxpr(lambda v, n: nn.one_hot(v, n))(jnp.asarray(labels), 3)


def test_glu():
    x = rand((2, 6), F32, np.random.default_rng(7))
    out = nn.glu(jnp.asarray(x))
    x64 = x.astype(np.float64)
    assert_close(out, (x64[:, :3] * special.expit(x64[:, 3:])).astype(np.float32))
    out = nn.glu(jnp.asarray(x.T), axis=0)
    assert_close(out, (x64.T[:3] * special.expit(x64.T[3:])).astype(np.float32))
    with pytest.raises(ValueError, match="even"):
        nn.glu(jnp.asarray(np.ones((2, 3), np.float32)))


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        nn.relu,
        nn.gelu,
        nn.sigmoid,
        nn.softmax,
        nn.log_softmax,
        nn.logsumexp,
        nn.softplus,
        nn.elu,
        nn.one_hot,
        nn.standardize,
    ],
)
def test_lists_are_rejected(fn):
    args = ([1.0, 2.0], 3) if fn is nn.one_hot else ([1.0, 2.0],)
    with pytest.raises(TypeError, match="list"):
        fn(*args)


def test_bad_axis():
    x = jnp.asarray(np.ones((2, 3), np.float32))
    for fn in (nn.softmax, nn.log_softmax, nn.logsumexp, nn.glu):
        with pytest.raises(ValueError, match="axis 2 is out of bounds"):
            fn(x, axis=2)


JITTED_ACTIVATIONS = [
    "elu",
    "celu",
    "selu",
    "silu",
    "softplus",
    "squareplus",
    "mish",
    "identity",
    "log_sigmoid",
    "soft_sign",
    "hard_tanh",
    "hard_sigmoid",
    "hard_silu",
    "leaky_relu",
]


@pytest.mark.parametrize("name", JITTED_ACTIVATIONS)
def test_activation_is_one_named_program(name):
    # As in JAX, the activation traces to one pjit equation named after it, so an eager call
    # on a large array runs one fused kernel.
    closed = kiln.make_jaxpr(getattr(nn, name))(jnp.ones((2, 3)))
    (eqn,) = closed.jaxpr.eqns
    assert eqn.primitive.name == "pjit"
    assert eqn.params["name"] == name


def test_selu_jaxpr_nests_elu_as_jax_does():
    text = str(kiln.make_jaxpr(nn.selu)(jnp.ones(3)))
    assert "name=selu" in text and "name=elu" in text
    assert text.index("name=elu") < text.index("name=selu")  # elu's equation inside selu's


def test_jitted_activation_on_many_shapes_does_not_warn():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in range(1, 14):
            x = np.linspace(-3, 3, n, dtype=np.float32)
            ref = 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))
            np.testing.assert_allclose(
                np.asarray(nn.selu(jnp.asarray(x))), ref, rtol=2e-6, atol=1e-7
            )


def test_jitted_activation_keeps_weak_type_and_checks_before_tracing():
    out = nn.elu(2.0, alpha=0.5)
    assert out.dtype == F32 and out.weak_type
    assert float(nn.leaky_relu(-2.0, negative_slope=0.25)) == -0.5
    with pytest.raises(TypeError, match="silu does not accept dtype int32"):
        nn.silu(jnp.arange(3))
    with pytest.raises(TypeError, match="elu"):
        nn.elu([1.0, 2.0])

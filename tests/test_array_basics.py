"""kiln.Array as a Python object: repr exactly as JAX prints it (strings taken from jax 0.10),
str and format, immutability and zero-copy NumPy views, iteration and len, scalar
conversions, block_until_ready, pickling, and the eager `x * y` fast path agreeing with
kiln.numpy's promotion for every dtype pair."""

import itertools
import operator
import pickle

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

BF16 = np.dtype(ml_dtypes.bfloat16)


def _weak(value, dtype):
    return lax.convert_element_type(np.asarray(value, dtype), dtype, weak_type=True)


# (kiln array maker, JAX's repr of the same array)
REPRS = [
    (lambda: jnp.array([0, 1, 2, 3]), "Array([0, 1, 2, 3], dtype=int32)"),
    (lambda: jnp.asarray(10.0), "Array(10., dtype=float32, weak_type=True)"),
    (lambda: jnp.asarray(30), "Array(30, dtype=int32, weak_type=True)"),
    (lambda: jnp.array([True, False, True]), "Array([ True, False,  True], dtype=bool)"),
    (lambda: jnp.array(True), "Array(True, dtype=bool)"),
    (lambda: jnp.zeros((0,)), "Array([], shape=(0,), dtype=float32)"),
    (lambda: jnp.zeros((2, 0), jnp.int32), "Array([], shape=(2, 0), dtype=int32)"),
    (lambda: jnp.array([1.5, 2.25, -3.0], jnp.bfloat16), "Array([1.5, 2.25, -3], dtype=bfloat16)"),
    (
        lambda: jnp.array([1.5, 2.25, -3.0, 65504], jnp.float16),
        "Array([ 1.50e+00,  2.25e+00, -3.00e+00,  6.55e+04], dtype=float16)",
    ),
    (lambda: jnp.array([1 + 2j, -0.5j]), "Array([ 1.+2.j , -0.-0.5j], dtype=complex64)"),
    (lambda: jnp.array([0, 255, 7], jnp.uint8), "Array([  0, 255,   7], dtype=uint8)"),
    (lambda: jnp.array(-5, jnp.int8), "Array(-5, dtype=int8)"),
    (
        lambda: jnp.array(np.arange(2000)),
        "Array([   0,    1,    2, ..., 1997, 1998, 1999], dtype=int32)",
    ),
    (
        lambda: jnp.array([np.nan, np.inf, -np.inf, 0.0, -0.0]),
        "Array([ nan,  inf, -inf,   0.,  -0.], dtype=float32)",
    ),
    (
        lambda: jnp.array(
            [
                -1.0,
                -0.93132854,
                -1.0,
                -0.99993926,
                0.9998755,
                -0.9970358,
                -0.8498685,
                1.0,
                -0.9999984,
                1.0,
            ],
            jnp.float32,
        ),
        "Array([-1.        , -0.93132854, -1.        , -0.99993926,  0.9998755 ,\n"
        "       -0.9970358 , -0.8498685 ,  1.        , -0.9999984 ,  1.        ],      "
        "dtype=float32)",
    ),
    (
        lambda: jnp.array(np.arange(30) * 1000),
        "Array([    0,  1000,  2000,  3000,  4000,  5000,  6000,  7000,  8000,\n"
        "        9000, 10000, 11000, 12000, 13000, 14000, 15000, 16000, 17000,\n"
        "       18000, 19000, 20000, 21000, 22000, 23000, 24000, 25000, 26000,\n"
        "       27000, 28000, 29000], dtype=int32)",
    ),
    (
        lambda: jnp.array(np.arange(24).reshape(2, 3, 4)),
        "Array([[[ 0,  1,  2,  3],\n        [ 4,  5,  6,  7],\n        [ 8,  9, 10, 11]],\n\n"
        "       [[12, 13, 14, 15],\n        [16, 17, 18, 19],\n        [20, 21, 22, 23]]], "
        "dtype=int32)",
    ),
    (
        lambda: jnp.array([[0.0, 1 / 3, 2 / 3], [1.0, 4 / 3, 1.6666667]], jnp.float32),
        "Array([[0.        , 0.33333334, 0.6666667 ],\n"
        "       [1.        , 1.3333334 , 1.6666667 ]], dtype=float32)",
    ),
    (lambda: jnp.array([1e-10, 1.0], jnp.float32), "Array([1.e-10, 1.e+00], dtype=float32)"),
    (lambda: jnp.float32(0.1), "Array(0.1, dtype=float32)"),
    (lambda: jnp.array(-0.0), "Array(-0., dtype=float32, weak_type=True)"),
    (lambda: jnp.complex64(1 - 1j), "Array(1.-1.j, dtype=complex64)"),
    (
        lambda: jnp.array(np.arange(1200, dtype=np.float32) / np.float32(7)),
        "Array([0.0000000e+00, 1.4285715e-01, 2.8571430e-01, ..., 1.7100000e+02,\n"
        "       1.7114285e+02, 1.7128572e+02], dtype=float32)",
    ),
]


@pytest.mark.parametrize("make,expected", REPRS, ids=[str(i) for i in range(len(REPRS))])
def test_repr_matches_jax(make, expected):
    assert repr(make()) == expected


def test_str_and_format():
    assert str(jnp.array([0, 1, 2, 3])) == "[0 1 2 3]"
    assert str(jnp.asarray(10.0)) == "10.0"
    assert str(jnp.array([True, False])) == "[ True False]"
    assert str(jnp.zeros((2, 0))) == "[]"
    assert str(jnp.complex64(1 - 1j)) == "(1-1j)"
    assert f"{jnp.float32(2.5):.2f}" == "2.50"
    assert f"{jnp.float32(2.5)}" == "2.5"
    assert f"{jnp.int32(7):>4}" == "   7"
    assert f"{jnp.array([0, 1, 2])}" == "[0 1 2]"
    with pytest.raises((TypeError, ValueError)):
        format(jnp.array([0, 1, 2]), ".2f")


# --- immutability and NumPy interop ------------------------------------------------------------


def test_item_assignment_raises_and_points_to_at():
    x = jnp.array([1, 2, 3])
    with pytest.raises(TypeError, match=r"\.at\["):
        x[0] = 5
    with pytest.raises(TypeError, match="immutable"):
        x[1:] = 0
    np.testing.assert_array_equal(x, [1, 2, 3])


def test_numpy_view_is_read_only_and_zero_copy():
    x = jnp.array(np.arange(6.0).reshape(2, 3))
    view = np.asarray(x)
    assert not view.flags.writeable
    assert np.shares_memory(view, np.asarray(x))
    with pytest.raises(ValueError):
        view[0, 0] = 9.0
    copy = np.array(x)
    assert copy.flags.writeable and not np.shares_memory(copy, view)
    copy[0, 0] = 9.0
    assert float(x[0, 0]) == 0.0
    assert np.asarray(x, dtype=np.float64).dtype == np.float64


def test_results_do_not_alias_their_inputs():
    x = jnp.array([1.0, 2.0, 3.0])
    source = np.array([1.0, 2.0])
    y = jnp.asarray(source)
    source[0] = 100.0  # kiln copied the data when the array was created
    assert float(y[0]) == 1.0
    for out in (x + 0, jnp.abs(x), jnp.where(True, x, x), jnp.clip(x, 0, 10)):
        np.asarray(out)  # fine to view; the input must stay unchanged
    np.testing.assert_array_equal(x, [1, 2, 3])


# --- Python protocol ---------------------------------------------------------------------------


def test_iteration_and_len():
    x = jnp.array([3, 4, 5])
    items = list(x)
    assert len(x) == 3 and len(items) == 3
    assert all(isinstance(i, kiln.Array) and i.shape == () and i.dtype == np.int32 for i in items)
    assert [int(i) for i in items] == [3, 4, 5]
    rows = list(jnp.zeros((2, 3)))
    assert [r.shape for r in rows] == [(3,), (3,)]
    assert list(jnp.zeros((0, 2))) == []
    with pytest.raises(TypeError, match="0-d"):
        iter(jnp.array(3))
    with pytest.raises(TypeError, match="unsized"):
        len(jnp.array(3))


def test_scalar_conversions():
    assert bool(jnp.array(1)) is True and bool(jnp.array([0.0])) is False
    assert int(jnp.array(3.7)) == 3 and int(jnp.array(-3.7)) == -3
    assert float(jnp.array(2.5)) == 2.5 and float(jnp.array(2, jnp.int8)) == 2.0
    assert complex(jnp.array(1 + 2j)) == 1 + 2j
    assert operator.index(jnp.array(3)) == 3
    assert [10, 20, 30][jnp.array(1)] == 20
    assert jnp.array(2.5, jnp.bfloat16).item() == 2.5
    assert jnp.array([1, 2]).tolist() == [1, 2]
    with pytest.raises(ValueError, match="ambiguous"):
        bool(jnp.array([1, 2]))
    with pytest.raises(TypeError):
        int(jnp.array([1, 2]))
    with pytest.raises(TypeError):
        float(jnp.array([1.0, 2.0]))
    with pytest.raises(TypeError):
        operator.index(jnp.array(3.0))
    with pytest.raises(TypeError):
        hash(jnp.array(3))


def test_properties():
    x = jnp.zeros((2, 3), jnp.float16)
    assert (x.shape, x.ndim, x.size, x.dtype) == ((2, 3), 2, 6, np.float16)
    assert (x.itemsize, x.nbytes) == (2, 12)
    assert x.aval.shape == (2, 3) and not x.aval.weak_type
    assert x.T.shape == (3, 2)
    assert jnp.array([1 + 2j]).real.tolist() == [1.0]
    assert jnp.array([1 + 2j]).imag.tolist() == [2.0]
    assert jnp.array([1.0]).imag.tolist() == [0.0]
    assert jnp.array([1 + 2j]).conj().tolist() == [1 - 2j]
    assert round(jnp.array(2.567), 2).dtype == np.float32


def test_block_until_ready_and_device():
    x = jnp.array([1.0, 2.0])
    assert x.block_until_ready() is x
    assert x.is_ready()
    if hasattr(kiln, "block_until_ready"):
        tree = {"a": x, "b": [jnp.ones(2)]}
        assert kiln.block_until_ready(tree)["a"] is x
    assert x.device.platform == "cpu"


@pytest.mark.parametrize(
    "make",
    [
        lambda: jnp.array([1.5, -2.0]),
        lambda: jnp.asarray(2.0),
        lambda: jnp.array([1, 2], jnp.bfloat16),
        lambda: jnp.zeros((0, 3), jnp.int8),
        lambda: jnp.array([1 + 1j]),
        lambda: jnp.array(True),
        lambda: jnp.array([7], jnp.uint16),
    ],
    ids=["f32", "weak", "bf16", "empty", "c64", "bool", "u16"],
)
def test_pickle_round_trip(make):
    x = make()
    y = pickle.loads(pickle.dumps(x))
    assert isinstance(y, kiln.Array)
    assert (y.dtype, y.shape, y.weak_type) == (x.dtype, x.shape, x.weak_type)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    assert repr(y) == repr(x)


def test_astype_method():
    x = jnp.array([1.7, -2.5, 300.0])
    assert x.astype(jnp.int8).tolist() == [1, -2, 127]
    assert x.astype("uint8").tolist() == [1, 0, 255]
    assert x.astype(bool).tolist() == [True, True, True]
    assert x.astype(jnp.bfloat16).dtype == BF16
    weak = jnp.asarray(2.0)
    assert weak.weak_type and not weak.astype(jnp.float32).weak_type


# --- the eager fast path -------------------------------------------------------------------------
DTYPES = [
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.uint8,
        np.uint32,
        np.float16,
        np.float32,
        np.complex64,
    )
] + [BF16]
OPERATORS = [(operator.mul, jnp.multiply), (operator.add, jnp.add), (operator.sub, jnp.subtract)]


def _value(dtype, shape, weak):
    data = (np.arange(int(np.prod(shape))) % 3 + 1).reshape(shape).astype(dtype)
    return _weak(data, dtype) if weak else jnp.asarray(data)


@pytest.mark.parametrize(
    "a,b",
    list(itertools.product(DTYPES, DTYPES)),
    ids=[f"{a.name}-{b.name}" for a, b in itertools.product(DTYPES, DTYPES)],
)
def test_operator_fast_path_matches_numpy_functions(a, b):
    """x * y (and +, -) give the dtype, weak type and values of jnp.multiply (add, subtract)
    for every dtype pair, weak or strong (not both: see the test below), same shape (the fast
    path) or 0-d."""
    weakness = [(False, False), (True, False), (False, True)]
    for (op, fn), shape, (weak_x, weak_y) in itertools.product(OPERATORS, [(3,), ()], weakness):
        x, y = _value(a, shape, weak_x), _value(b, shape, weak_y)
        try:
            expected = fn(x, y)
        except TypeError:  # e.g. subtracting booleans: the operator must fail the same way
            with pytest.raises(TypeError):
                op(x, y)
            continue
        out = op(x, y)
        assert isinstance(out, kiln.Array) and isinstance(np.asarray(out), np.ndarray)
        assert (out.dtype, out.weak_type, out.shape) == (
            expected.dtype,
            expected.weak_type,
            expected.shape,
        ), (op, a, b, weak_x, weak_y)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))


def test_reflected_operators_with_python_scalars():
    x = jnp.array([1, 2], jnp.int8)
    for out, expected in (
        (2 * x, [2, 4]),
        (1 - x, [0, -1]),
        (x**2, [1, 4]),
        (7 // x, [7, 3]),
        (7 % x, [0, 1]),
        (-x, [-1, -2]),
        (~x, [-2, -3]),
        (abs(-x), [1, 2]),
        (x << 1, [2, 4]),
        (x >> 1, [0, 1]),
    ):
        assert out.dtype == np.int8 and out.tolist() == expected
    assert (1.5 * x).dtype == np.float32 and (1.5 * x).weak_type
    assert (x / 2).dtype == np.float32
    assert (x == 1).tolist() == [True, False] and (x != 1).tolist() == [False, True]
    assert divmod(x, 2)[1].tolist() == [1, 0]


@pytest.mark.parametrize(
    "a,b", [(np.int8, np.int8), (np.int8, np.uint8), (np.float16, np.float16), (np.uint8, np.uint8)]
)
def test_all_weak_operands_promote_like_jax(a, b):
    x, y = _value(np.dtype(a), (3,), True), _value(np.dtype(b), (3,), True)
    expected = (jnp.promote_types(a, b), True)
    assert ((x * y).dtype, (x * y).weak_type) == expected
    assert (jnp.multiply(x, y).dtype, jnp.multiply(x, y).weak_type) == expected


@pytest.mark.parametrize("dtype", [np.float16, np.float32, jnp.bfloat16, np.int32, np.uint8])
@pytest.mark.parametrize("weak", [False, True])
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_python_float_fast_path_matches_general_path(dtype, weak, op):
    """`x * 2.5` (and 2.5 * x, x - 2.5, ...) on the eager fast path gives exactly what
    kiln.numpy gives: the weak Python float takes the array's dtype."""
    x = kiln.lax.convert_element_type(jnp.array([1, 2, 3]), dtype, weak_type=weak)
    fn = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply}[op]
    for left, right in ((x, 2.5), (2.5, x)):
        expected = fn(left, right)
        actual = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}[
            op
        ](left, right)
        assert actual.dtype == expected.dtype and actual.weak_type == expected.weak_type
        np.testing.assert_array_equal(np.asarray(actual), np.asarray(expected))

"""Edge semantics shared with JAX: Python ints outside the default integer type, the order of
signed zeros in max/min, and taking from an empty axis.

References are worked out by hand or with Python ints (wrapping is computed modulo 2**bits);
JAX itself is only an optional oracle at the end of the file.
"""

import operator
import warnings

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from tests._testing import x64_mode as switch_x64

BF16 = np.dtype(ml_dtypes.bfloat16)
INTEGER_DTYPES = [
    np.dtype(t)
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
]
BIG = 2**40
BIG_MESSAGE = f"Python int -?{BIG} too large to convert to int32"


@pytest.fixture(params=[False, True], ids=["x32", "x64"])
def x64_mode(request):
    """Runs the test with jax_enable_x64 off and on, restoring the flag afterwards."""
    with switch_x64(request.param):
        yield request.param


@pytest.fixture
def x32():
    with switch_x64(False):
        yield


def _eager_and_jit(fn, *args):
    """fn(*args) eagerly and under jit (Python ints in fn stay closure constants)."""
    return [fn(*args), kiln.jit(fn)(*args)]


def _default_int_bits(x64: bool) -> int:
    return 64 if x64 else 32


def _fits(value: int, bits: int) -> bool:
    return -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)


def _wrap(value: int, dtype: np.dtype) -> int:
    """value converted to an integer dtype the way a C cast does: modulo 2**bits."""
    bits = dtype.itemsize * 8
    low = 0 if dtype.kind == "u" else -(2 ** (bits - 1))
    return (value - low) % 2**bits + low


# --- Python ints outside the default integer type -------------------------------------------------


def _i32():
    return jnp.arange(3, dtype=jnp.int32)


def _f32():
    return jnp.arange(3, dtype=jnp.float32)


# Each case uses the Python int BIG where JAX converts it to the default integer type.
OVERFLOW_CASES = [
    ("add", lambda v: v + BIG),
    ("radd", lambda v: BIG + v),
    ("sub", lambda v: v - BIG),
    ("rsub", lambda v: BIG - v),
    ("mul", lambda v: v * BIG),
    ("floordiv", lambda v: v // BIG),
    ("mod", lambda v: v % BIG),
    ("and", lambda v: v & BIG),
    ("rshift", lambda v: v >> BIG),
    ("eq", lambda v: v == BIG),
    ("lt", lambda v: v < BIG),
    ("rge", lambda v: BIG >= v),
    ("maximum", lambda v: jnp.maximum(v, BIG)),
    ("where", lambda v: jnp.where(v > 0, v, BIG)),
    ("clip", lambda v: jnp.clip(v, -BIG, BIG)),
    ("at_set", lambda v: v.at[0].set(BIG)),
    ("at_add", lambda v: v.at[1].add(-BIG)),
    ("sum_initial", lambda v: jnp.sum(v, initial=BIG)),
    ("max_initial", lambda v: jnp.max(v, initial=-BIG)),
    ("two_scalars", lambda v: jnp.add(BIG, 1) + v),
    ("array", lambda v: jnp.array(BIG) + v),
    ("full", lambda v: jnp.full(v.shape, BIG) + v),
    ("lax_full", lambda v: lax.full(v.shape, BIG) + v),
]


@pytest.mark.parametrize("make", [_i32, _f32], ids=["int32", "float32"])
@pytest.mark.parametrize("name,fn", OVERFLOW_CASES, ids=[c[0] for c in OVERFLOW_CASES])
def test_python_int_beyond_int32_raises(x32, name, fn, make):
    v = make()
    if v.dtype.kind == "f" and name in ("floordiv", "mod", "and", "rshift"):
        pytest.skip("not a float operation")
    with pytest.raises(OverflowError, match=BIG_MESSAGE):
        fn(v)
    with pytest.raises(OverflowError, match=BIG_MESSAGE):
        kiln.jit(fn)(v)


def test_float_array_with_huge_python_int_raises(x32):
    # Even next to a float array the int is an int first (as in JAX): 2**40 does not fit
    # int32, so the sum is not silently 1.1e12 either.
    with pytest.raises(OverflowError, match="too large to convert to int32"):
        jnp.ones(2, jnp.float32) + BIG
    # lax functions give a Python scalar the other operand's dtype directly, and NumPy checks
    # that conversion's range: nothing wraps there either.
    with pytest.raises(OverflowError, match=f"{BIG} out of bounds for int32"):
        lax.add(jnp.ones(2, jnp.int32), BIG)


def test_python_int_beyond_int64_raises_with_x64(x64_mode):
    if not x64_mode:
        pytest.skip("x64 only")
    v = jnp.arange(3, dtype=jnp.int64)
    for value in (2**63, -(2**63) - 1, 2**64, 2**100):
        with pytest.raises(
            OverflowError, match=f"Python int {value} too large to convert to int64"
        ):
            v + value
        with pytest.raises(OverflowError, match="int64"):
            kiln.jit(lambda x: jnp.maximum(x, value))(v)
        with pytest.raises(OverflowError, match="int64"):
            jnp.array(value)
    # The extremes of int64 itself are fine and keep the weak type.
    for value in (2**63 - 1, -(2**63)):
        out = jnp.array(value)
        assert (int(out), out.dtype, out.weak_type) == (value, np.int64, True)


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64])
def test_jit_argument_out_of_range(x64_mode, value):
    bits = _default_int_bits(x64_mode)
    f = kiln.jit(lambda x, y: x + y)
    if _fits(value, bits):
        out = f(0, value)
        assert (int(out), out.dtype, out.weak_type) == (value, np.int64, True)
        return
    # The first call of a signature names the argument; a later call (a cache hit) still
    # names the value and the dtype.
    first = kiln.jit(lambda d: d["a"] - d["b"])
    with pytest.raises(
        OverflowError,
        match=r"argument path is d\['b'\]\. Got <class 'int'> "
        rf"with value {value}",
    ):
        first({"a": 0, "b": value})
    dtype = "int64" if x64_mode else "int32"
    f(0, 1)
    with pytest.raises(OverflowError, match=f"Python int {value} too large to convert to {dtype}"):
        f(0, value)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=str)
def test_integer_dtype_edges(x64_mode, dtype):
    """array + Python int at the edges of every integer dtype: the int must fit the default
    integer type; then it converts to the array's dtype, wrapping, and the result keeps the
    array's dtype (as JAX does: uint8 + 300 is uint8 + 44)."""
    if dtype.itemsize == 8 and not x64_mode:
        pytest.skip("64-bit dtypes need x64")
    bits = _default_int_bits(x64_mode)
    info = np.iinfo(dtype)
    base = np.array([0, 1, int(info.max)], dtype=dtype)
    x = jnp.asarray(base)
    for value in (int(info.min), int(info.max), int(info.max) + 1, int(info.min) - 1):
        for label, fn in (
            ("add", lambda a: a + value),
            ("radd", lambda a: value + a),
            ("eq", lambda a: a == value),
        ):
            if not _fits(value, bits):
                with pytest.raises(OverflowError, match=f"Python int {value} too large"):
                    fn(x)
                with pytest.raises(OverflowError, match=f"Python int {value} too large"):
                    kiln.jit(fn)(x)
                continue
            converted = _wrap(value, dtype)
            if label == "eq":
                expected = np.array([int(b) == converted for b in base])
            else:
                expected = np.array([_wrap(int(b) + converted, dtype) for b in base], dtype=dtype)
            for out in _eager_and_jit(fn, x):
                assert out.dtype == expected.dtype and not out.weak_type, (label, value)
                np.testing.assert_array_equal(np.asarray(out), expected, err_msg=f"{label} {value}")


def test_in_range_python_ints_keep_weak_typing(x32):
    u8 = jnp.asarray(np.array([0, 1, 200], np.uint8))
    out = u8 + 255
    assert (out.dtype, out.weak_type) == (np.uint8, False)
    np.testing.assert_array_equal(np.asarray(out), [255, 0, 199])
    out = u8 + 300  # 300 is an int32 first, then wraps to uint8's 44
    np.testing.assert_array_equal(np.asarray(out), [44, 45, 244])
    out = jnp.add(2**31 - 1, -(2**31))
    assert (int(out), out.dtype, out.weak_type) == (-1, np.int32, True)
    # Only the dtype is asked for: no conversion happens, so no error (as jnp.result_type).
    assert jnp.result_type(BIG) == np.int32
    # An explicit dtype decides the range of jnp.array's conversion.
    assert int(jnp.array(2**32 - 1, dtype=jnp.uint32)) == 2**32 - 1


def test_uint32_max_needs_x64(x64_mode):
    # JAX's rule: the Python int is an int32 first, so without x64 uint32's own maximum
    # cannot be written as a Python int next to a uint32 array.
    u32 = jnp.asarray(np.array([1], np.uint32))
    if x64_mode:
        assert int((u32 + (2**32 - 1))[0]) == 0
    else:
        with pytest.raises(OverflowError, match="4294967295 too large to convert to int32"):
            u32 + (2**32 - 1)


def test_python_int_does_not_wrap_before_float_conversion(x64_mode):
    # float_power moves integers to floats: 300 must become 300.0, not uint8's 44 first.
    out = jnp.float_power(jnp.asarray(np.array([0, 1, 2], np.uint8)), 300)
    big = 2.0**300 if out.dtype == np.float64 else np.inf  # float64 only with x64
    np.testing.assert_array_equal(np.asarray(out), [0.0, 1.0, big])
    # ldexp clamps the exponent before narrowing it to the float's exponent type.
    big = 2**31 if x64_mode else 2**31 - 1
    x = jnp.ones(2, jnp.float32)
    for out in _eager_and_jit(lambda a: jnp.ldexp(a, big), x):
        np.testing.assert_array_equal(np.asarray(out), [np.inf, np.inf])
    for out in _eager_and_jit(lambda a: jnp.ldexp(a, -big), x):
        np.testing.assert_array_equal(np.asarray(out), [0.0, 0.0])


# --- signed zeros in max and min ------------------------------------------------------------------
# XLA's max and min are IEEE 754's maximum and minimum: -0.0 orders below +0.0, NaN propagates.

N0, P0, NAN = -0.0, 0.0, np.nan
FLOATS = [np.dtype(np.float16), BF16, np.dtype(np.float32)]


def _signbits(x) -> list:
    return np.signbit(np.asarray(x).astype(np.float64)).tolist()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_maximum_minimum_order_signed_zeros(dtype):
    x = jnp.asarray(np.array([N0, P0, N0, P0, 1.0, N0], dtype))
    y = jnp.asarray(np.array([P0, N0, N0, P0, N0, -1.0], dtype))
    for out in _eager_and_jit(jnp.maximum, x, y) + _eager_and_jit(lax.max, x, y):
        np.testing.assert_array_equal(np.asarray(out, np.float64), [0, 0, 0, 0, 1, 0])
        assert _signbits(out) == [False, False, True, False, False, True]
    for out in _eager_and_jit(jnp.minimum, x, y) + _eager_and_jit(lax.min, x, y):
        np.testing.assert_array_equal(np.asarray(out, np.float64), [0, 0, 0, 0, 0, -1])
        assert _signbits(out) == [True, True, True, False, True, True]


def test_scalar_and_weak_operands_order_signed_zeros():
    negative_zero = jnp.asarray(np.float32(N0))
    for fn in (lambda a: jnp.maximum(a, 0.0), lambda a: jnp.maximum(0.0, a)):
        for out in _eager_and_jit(fn, negative_zero):
            assert _signbits(out) == False  # noqa: E712 (a 0-d result)
    for fn in (lambda a: jnp.minimum(a, 0.0), lambda a: jnp.minimum(0.0, a)):
        for out in _eager_and_jit(fn, negative_zero):
            assert _signbits(out) == True  # noqa: E712
    relu = kiln.nn.relu(jnp.asarray(np.array([N0], np.float32)))
    assert _signbits(relu) == [False]


def test_max_min_keep_nan_propagation():
    x = jnp.asarray(np.array([NAN, 1.0, N0, NAN], np.float32))
    y = jnp.asarray(np.array([1.0, NAN, NAN, P0], np.float32))
    for fn in (jnp.maximum, jnp.minimum):
        for out in _eager_and_jit(fn, x, y):
            assert np.isnan(np.asarray(out)).all()
    for fn in (jnp.max, jnp.min):
        for out in _eager_and_jit(fn, jnp.asarray(np.array([P0, NAN, N0], np.float32))):
            assert np.isnan(float(out))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_max_min_reductions_order_signed_zeros(dtype):
    def arr(values):
        return jnp.asarray(np.array(values, dtype))

    cases = [
        (jnp.max, [N0, P0], False),
        (jnp.max, [P0, N0], False),
        (jnp.max, [N0, N0], True),
        (jnp.max, [N0] * 17 + [P0] + [N0] * 20, False),
        (jnp.max, [N0, -1.0], True),
        (jnp.min, [P0, N0], True),
        (jnp.min, [N0, P0], True),
        (jnp.min, [P0, P0], False),
        (jnp.min, [P0] * 17 + [N0] + [P0] * 20, True),
        (jnp.min, [P0, 1.0], False),
        (lambda a: lax.reduce_max(a, (0,)), [P0, N0], False),
        (lambda a: jnp.max(a, initial=0.0), [N0], False),
        (lambda a: jnp.min(a, initial=0.0), [N0], True),
        (jnp.nanmax, [N0, P0, NAN], False),
        (jnp.nanmin, [P0, N0, NAN], True),
    ]
    for fn, values, negative in cases:
        for out in _eager_and_jit(fn, arr(values)):
            assert float(out) == 0.0 and _signbits(out) == negative, (values, negative)
    matrix = arr([[N0, P0], [P0, N0], [N0, N0]])
    for out in _eager_and_jit(lambda a: jnp.max(a, axis=1), matrix):
        assert _signbits(out) == [False, False, True]
    for out in _eager_and_jit(lambda a: jnp.min(a, axis=0), matrix):
        assert _signbits(out) == [True, True]


def test_clip_clamp_and_scans_order_signed_zeros():
    f32 = np.float32
    for out in _eager_and_jit(lambda a: jnp.clip(a, 0.0, 1.0), jnp.asarray(np.array([N0], f32))):
        assert _signbits(out) == [False]
    for out in _eager_and_jit(lambda a: jnp.clip(a, -1.0, -0.0), jnp.asarray(np.array([P0], f32))):
        assert _signbits(out) == [True]
    lo = jnp.asarray(np.array([P0, N0, -1, -1], f32))
    x = jnp.asarray(np.array([N0, P0, N0, P0], f32))
    hi = jnp.asarray(np.array([1, 1, P0, N0], f32))
    for out in _eager_and_jit(lax.clamp, lo, x, hi):
        assert _signbits(out) == [False, False, True, True]
    for out in _eager_and_jit(lax.cummax, jnp.asarray(np.array([N0, P0, N0], f32))):
        assert _signbits(out) == [True, False, False]
    for out in _eager_and_jit(
        lambda a: lax.cummin(a, reverse=True), jnp.asarray(np.array([P0, N0, P0], f32))
    ):
        assert _signbits(out) == [True, True, False]
    for out in _eager_and_jit(
        lambda a: lax.top_k(a, 2)[0], jnp.asarray(np.array([N0, P0, N0], f32))
    ):
        assert _signbits(out) == [False, True]
    # Sorting compares values, so zeros of both signs are equal and keep their order.
    for out in _eager_and_jit(jnp.sort, jnp.asarray(np.array([P0, N0, P0, N0, -1.0], f32))):
        assert _signbits(out) == [True, False, True, False, True]


# --- taking from an empty axis --------------------------------------------------------------------
EMPTY_AXIS_MESSAGE = r"Cannot do a non-empty jnp\.take\(\) from an empty axis\."


@pytest.mark.parametrize("mode", [None, "fill", "clip", "wrap"])
@pytest.mark.parametrize(
    "shape,axis",
    [((0, 0), 0), ((0, 3), 0), ((3, 0), 1), ((0,), None), ((2, 0, 4), 1), ((0, 0), None)],
)
def test_take_from_empty_axis_raises(shape, axis, mode):
    x = jnp.zeros(shape)
    indices = jnp.array([0, 1, 2])
    with pytest.raises(IndexError, match=EMPTY_AXIS_MESSAGE):
        jnp.take(x, indices, axis=axis, mode=mode)
    with pytest.raises(IndexError, match=EMPTY_AXIS_MESSAGE):
        kiln.jit(lambda a, i: jnp.take(a, i, axis=axis, mode=mode))(x, indices)
    with pytest.raises(IndexError, match=EMPTY_AXIS_MESSAGE):
        jnp.take(x, 0, axis=axis, mode=mode, fill_value=1.0)


def test_take_from_empty_axis_with_no_indices_is_empty():
    x = jnp.zeros((0, 3))
    for out in _eager_and_jit(lambda a, i: jnp.take(a, i, axis=0), x, jnp.zeros((0,), jnp.int32)):
        assert out.shape == (0, 3)
    out = jnp.take(jnp.zeros((3, 0)), jnp.zeros((2, 0), jnp.int32), axis=1)
    assert out.shape == (3, 2, 0)
    # An empty axis that is not the one taken from is no error: the result is just empty.
    out = jnp.take(jnp.zeros((3, 0)), jnp.array([0, 2]), axis=0)
    assert out.shape == (2, 0)


# --- JAX as an oracle (skipped when JAX is not installed) -----------------------------------------


def test_against_jax_when_available(x32):
    jax_numpy = pytest.importorskip("jax.numpy")
    cases = [
        lambda np_, v: np_.maximum(v, -v),
        lambda np_, v: np_.minimum(-v, v),
        lambda np_, v: np_.max(v),
        lambda np_, v: np_.min(-v),
        lambda np_, v: np_.clip(v, 0.0, 1.0),
    ]
    zeros = np.array([N0, P0, N0], np.float32)
    for case in cases:
        expected = np.asarray(case(jax_numpy, jax_numpy.asarray(zeros)))
        actual = np.asarray(case(jnp, jnp.asarray(zeros)))
        assert _signbits(actual) == _signbits(expected)
    for value in (2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 300):
        for dtype in (np.uint8, np.int8, np.uint32, np.int32, np.float32):
            base = np.arange(3, dtype=dtype)
            try:
                expected = np.asarray(jax_numpy.asarray(base) + value)
            except OverflowError:
                with pytest.raises(OverflowError):
                    jnp.asarray(base) + value
                continue
            np.testing.assert_array_equal(np.asarray(jnp.asarray(base) + value), expected)
    for module in (jax_numpy, jnp):
        with pytest.raises(IndexError, match=EMPTY_AXIS_MESSAGE):
            module.take(module.zeros((0, 0)), module.array([0, 1, 2]), axis=0)


# --- floating-point errors in eager arithmetic -------------------------------------------------


def _special_operands():
    return (
        np.array([np.inf, 1.0, 0.0, 1e30, -np.inf], np.float32),
        np.array([np.inf, 0.0, 0.0, 1e30, np.inf], np.float32),
    )


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "true_divide"])
def test_eager_arithmetic_on_inf_and_nan_never_warns_or_raises(name):
    """Like XLA, kiln makes inf and nan silently: NumPy's error state and the warnings filters
    (pytest's `filterwarnings = error` among them) do not turn them into warnings or errors,
    and the caller's NumPy error state is left as it was."""
    a, b = _special_operands()
    with np.errstate(all="ignore"):
        expected = getattr(np, name)(a, b), getattr(np, name)(b, 2.0)
    x, y = jnp.asarray(a), jnp.asarray(b)
    op = {"add": "add", "subtract": "sub", "multiply": "mul", "true_divide": "truediv"}[name]
    op = getattr(operator, op)
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        got = op(x, y), op(y, 2.0)
        assert np.geterr() == {
            "divide": "raise",
            "over": "raise",
            "under": "raise",
            "invalid": "raise",
        }
    for value, reference in zip(got, expected):
        np.testing.assert_array_equal(np.asarray(value), reference)


def test_eager_arithmetic_without_numpys_error_context_falls_back_to_errstate(monkeypatch):
    """Where NumPy does not expose its error-state context variable, the fast path enters
    np.errstate instead: the same silence."""
    from kiln.numpy import array_methods

    monkeypatch.setattr(array_methods, "_fp_errors", None)
    subtract = array_methods._fast_binop(np.subtract, "subtract")
    a, _ = _special_operands()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = subtract(jnp.asarray(a), jnp.asarray(a))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(np.asarray(got), a - a)

"""The 8-bit float types: creation, conversion, printing, JAX's promotion rules (no implicit
promotion with any other float), finfo and the dtype queries, and arithmetic eagerly, under
jit, grad and vmap. References are ml_dtypes' NumPy conversions (float32 computation rounded
once) and values JAX 0.10.2 computes for the same inputs, written out by hand."""

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.compiler import kir, lower
from kiln.core import dtypes

FLOAT8 = [
    np.dtype(ml_dtypes.float8_e3m4),
    np.dtype(ml_dtypes.float8_e4m3),
    np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    np.dtype(ml_dtypes.float8_e4m3fn),
    np.dtype(ml_dtypes.float8_e4m3fnuz),
    np.dtype(ml_dtypes.float8_e5m2),
    np.dtype(ml_dtypes.float8_e5m2fnuz),
    np.dtype(ml_dtypes.float8_e8m0fnu),
]
E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
F8_IDS = [d.name for d in FLOAT8]

# arange(1, 19) / 3 rounded to float8_e4m3fn.
BIG = [0.34375, 0.6875, 1, 1.375, 1.625, 2, 2.25, 2.75, 3, 3.25, 3.75, 4, 4.5, 4.5, 5, 5.5, 5.5, 6]


def _f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def _big():
    return jnp.array(np.arange(1, 19) / 3, jnp.float8_e4m3fn)


def _promotion_message(a: str, b: str) -> str:
    return (
        f"Input dtypes ({a!r}, {b!r}) have no available implicit dtype promotion path. "
        "To avoid unintended promotion, 8-bit floats do not support implicit promotion. "
        "If you'd like your inputs to be promoted to another type, you can do so explicitly "
        "using e.g. x.astype('float32')"
    )


# --- creation, conversion, printing -----------------------------------------------------------


def test_scalar_types_name_the_dtypes():
    names = [
        "float8_e3m4",
        "float8_e4m3",
        "float8_e4m3b11fnuz",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
    ]
    assert [np.dtype(getattr(jnp, n)) for n in names] == FLOAT8
    assert jnp.dtype("float8_e4m3fn") == E4M3FN
    assert dtypes.FLOAT8 == tuple(FLOAT8)


@pytest.mark.parametrize("dtype", FLOAT8, ids=F8_IDS)
def test_creation_rounds_like_ml_dtypes(dtype):
    values = [0.3, 1.0, 2.0, 3.3, 0.7]
    expected = np.array(values, np.float32).astype(dtype)
    for made in (
        jnp.array(values, dtype),
        jnp.asarray(np.array(values, np.float32), dtype),
        jnp.array(values).astype(dtype),
        jnp.astype(jnp.array(values), dtype),
    ):
        assert made.dtype == dtype
        np.testing.assert_array_equal(_f32(made), _f32(expected))
    assert jnp.zeros((2, 3), dtype).dtype == dtype
    np.testing.assert_array_equal(_f32(jnp.ones((2, 2), dtype)), np.ones((2, 2)))
    np.testing.assert_array_equal(_f32(jnp.full((3,), 2.0, dtype)), [2, 2, 2])
    # float8_e8m0fnu (powers of two only) has no zero: JAX's zeros are NaN there.
    zero = np.nan if dtype == np.dtype(ml_dtypes.float8_e8m0fnu) else 0
    np.testing.assert_array_equal(_f32(jnp.zeros_like(jnp.ones(2, dtype))), [zero, zero])


def test_creation_from_numpy_float8_values():
    host = np.array([1.5, -2.0], ml_dtypes.float8_e4m3fn)
    made = jnp.array(host)
    assert made.dtype == E4M3FN
    np.testing.assert_array_equal(_f32(made), [1.5, -2.0])
    assert jnp.asarray([ml_dtypes.float8_e4m3fn(1.5)]).dtype == E4M3FN
    np.testing.assert_array_equal(_f32(np.asarray(made)), [1.5, -2.0])


def test_ranges_and_special_values():
    # JAX: 3.3 -> 3.25; e4m3fn has no infinity (inf and overflow give NaN), e5m2 has one.
    assert float(jnp.array(3.3, jnp.float8_e4m3fn)) == 3.25
    assert np.isnan(_f32(jnp.full((2,), jnp.inf, jnp.float8_e4m3fn))).all()
    assert np.isinf(_f32(jnp.full((2,), jnp.inf, jnp.float8_e5m2))).all()
    np.testing.assert_array_equal(_f32(jnp.array([1e9], jnp.float8_e5m2)), [np.inf])
    np.testing.assert_array_equal(_f32(jnp.arange(5, dtype=jnp.float8_e4m3fn)), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(
        _f32(jnp.linspace(0, 1, 5, dtype=jnp.float8_e4m3fn)), [0, 0.25, 0.5, 0.75, 1]
    )


def test_convert_element_type_both_ways():
    source = jnp.array([0.3, 1e6, -1e6, np.nan, -0.0, 1e-4, 60000.0])
    to_fn = lax.convert_element_type(source, jnp.float8_e4m3fn)
    np.testing.assert_array_equal(_f32(to_fn), [0.3125, np.nan, np.nan, np.nan, -0.0, 0, np.nan])
    to_e5m2 = lax.convert_element_type(source, jnp.float8_e5m2)
    np.testing.assert_array_equal(
        _f32(to_e5m2), [0.3125, np.inf, -np.inf, np.nan, -0.0, 0.0001068115234375, 57344.0]
    )
    big = _big()
    np.testing.assert_array_equal(_f32(big), BIG)
    assert big.astype(jnp.float32).dtype == np.float32
    # Between the 8-bit types (JAX's values), float8_e8m0fnu included.
    np.testing.assert_array_equal(
        _f32(big.astype(jnp.float8_e8m0fnu)), [0.25, 0.5, 1, 1, 2, 2, 2, 2] + [4] * 9 + [8]
    )
    np.testing.assert_array_equal(
        _f32(big.astype(jnp.float8_e5m2)),
        [0.375, 0.75, 1, 1.5, 1.5, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 6, 6, 6],
    )
    back = big.astype(jnp.float8_e8m0fnu).astype(jnp.float8_e4m3fn)
    np.testing.assert_array_equal(_f32(back), [0.25, 0.5, 1, 1, 2, 2, 2, 2] + [4] * 9 + [8])
    for dtype in FLOAT8:
        np.testing.assert_array_equal(_f32(big.astype(dtype)), _f32(np.float32(BIG).astype(dtype)))
        np.testing.assert_array_equal(
            _f32(big.astype(jnp.bfloat16).astype(dtype)), _f32(big.astype(dtype))
        )
    # To integers: truncation and saturation, as JAX.
    ints = jnp.array([-2.5, 3.75, 200.0], jnp.float8_e4m3fn)
    assert ints.astype(jnp.int8).tolist() == [-2, 3, 127]
    assert ints.astype(jnp.uint8).tolist() == [0, 3, 192]


def test_printing():
    x = jnp.array([1, 2], jnp.float8_e4m3fn)
    assert repr(x) == "Array([1, 2], dtype=float8_e4m3fn)"
    assert str(x) == "[1 2]"
    y = jnp.array([0.1, 0.2, 0.3], jnp.float8_e4m3fn)
    assert repr(y) == "Array([0.101562, 0.203125, 0.3125], dtype=float8_e4m3fn)"
    assert str(x.dtype) == "float8_e4m3fn"
    assert str(x.astype(jnp.float8_e5m2)) == "[1 2]"
    text = str(kiln.make_jaxpr(lambda a: (a * 2.0).astype(jnp.float32))(x))
    assert "a:f8_e4m3fn[2]" in text and "f8_e4m3fn[2] = mul a" in text
    assert "f32[2] = convert_element_type[new_dtype=float32 weak_type=False]" in text


# --- promotion ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT8, ids=F8_IDS)
def test_promotion_with_integers_bools_and_python_scalars(dtype):
    for other in (jnp.int8, jnp.int32, jnp.uint8, jnp.uint32, jnp.bool_, dtype, int, float):
        assert jnp.promote_types(dtype, other) == dtype
        assert jnp.promote_types(other, dtype) == dtype
    x = jnp.ones(2, dtype)
    for other in (1.0, 1, True, jnp.array(1.0), jnp.int8(3), jnp.ones(2, jnp.int32)):
        out = x + other
        assert out.dtype == dtype and not out.weak_type
    assert jnp.result_type(x, 1.0) == dtype
    assert kiln.dtypes.result_type(x, 2, return_weak_type_flag=True) == (dtype, False)


@pytest.mark.parametrize("dtype", FLOAT8, ids=F8_IDS)
def test_no_implicit_promotion_with_other_floats(dtype):
    others = [d for d in FLOAT8 if d != dtype] + [
        np.dtype(ml_dtypes.bfloat16),
        np.dtype(np.float16),
        np.dtype(np.float32),
        np.dtype(np.float64),
        np.dtype(np.complex64),
    ]
    for other in others:
        with pytest.raises(kiln.dtypes.TypePromotionError) as info:
            jnp.promote_types(dtype, other)
        assert str(info.value) == _promotion_message(dtype.name, other.name)
    with pytest.raises(kiln.dtypes.TypePromotionError) as info:
        jnp.promote_types(dtype, complex)
    assert str(info.value) == _promotion_message(dtype.name, "<class 'complex'>")


def test_promotion_errors_in_operations():
    assert issubclass(kiln.dtypes.TypePromotionError, ValueError)
    x = jnp.array([1, 2], jnp.float8_e4m3fn)
    message = _promotion_message("float8_e4m3fn", "float32")
    cases = [
        lambda: x + jnp.ones(2, jnp.float32),
        lambda: x + np.float32(1),
        lambda: jnp.where(True, x, jnp.float32(1)),
        lambda: jnp.add(x, jnp.ones(2)),
    ]
    for case in cases:
        with pytest.raises(kiln.dtypes.TypePromotionError) as info:
            case()
        assert str(info.value) == message
    with pytest.raises(kiln.dtypes.TypePromotionError, match="8-bit floats do not support"):
        x + x.astype(jnp.float8_e5m2)
    with pytest.raises(kiln.dtypes.TypePromotionError, match="8-bit floats do not support"):
        jnp.concatenate([x, x.astype(jnp.float8_e5m2)])
    with pytest.raises(kiln.dtypes.TypePromotionError, match=r"<class 'complex'>"):
        x + 1j
    with pytest.raises(kiln.dtypes.TypePromotionError):
        kiln.jit(lambda a, b: a * b)(x, jnp.ones(2, jnp.bfloat16))
    # Explicit conversion is the way through.
    out = x.astype(jnp.float32) + jnp.ones(2, jnp.float32)
    np.testing.assert_array_equal(out, [2, 3])


def test_python_types_are_weak_in_promote_types():
    # JAX: promote_types('float16', float) is float16 and ('uint8', int) is uint8.
    assert jnp.promote_types(jnp.float16, float) == np.float16
    assert jnp.promote_types(jnp.uint8, int) == np.uint8
    assert jnp.promote_types(jnp.int8, float) == dtypes.default_float()


# --- finfo and the dtype queries ------------------------------------------------------------

# (eps, max, tiny, nexp, nmant), as jnp.finfo reports them.
FINFO = {
    "float8_e3m4": (0.0625, 15.5, 0.25, 3, 4),
    "float8_e4m3": (0.125, 240.0, 0.015625, 4, 3),
    "float8_e4m3b11fnuz": (0.125, 30.0, 0.0009765625, 4, 3),
    "float8_e4m3fn": (0.125, 448.0, 0.015625, 4, 3),
    "float8_e4m3fnuz": (0.125, 240.0, 0.0078125, 4, 3),
    "float8_e5m2": (0.25, 57344.0, 6.103515625e-05, 5, 2),
    "float8_e5m2fnuz": (0.25, 57344.0, 3.0517578125e-05, 5, 2),
    "float8_e8m0fnu": (1.0, 1.7014118346046923e38, 5.877471754111438e-39, 8, 0),
}


@pytest.mark.parametrize("dtype", FLOAT8, ids=F8_IDS)
def test_finfo(dtype):
    info = jnp.finfo(dtype)
    eps, largest, tiny, nexp, nmant = FINFO[dtype.name]
    assert (float(info.eps), float(info.max), float(info.tiny)) == (eps, largest, tiny)
    assert (info.bits, info.nexp, info.nmant) == (8, nexp, nmant)
    assert info.dtype == dtype
    assert kiln.dtypes.finfo(dtype).max == info.max
    with pytest.raises(ValueError):
        jnp.iinfo(dtype)


@pytest.mark.parametrize("dtype", FLOAT8, ids=F8_IDS)
def test_dtype_queries(dtype):
    for parent in (jnp.floating, jnp.inexact, jnp.number, jnp.generic):
        assert jnp.issubdtype(dtype, parent)
        assert dtypes.issubdtype(dtype, parent)
    for other in (jnp.integer, jnp.complexfloating, np.float16, jnp.float32, jnp.bool_):
        assert not jnp.issubdtype(dtype, other)
    assert jnp.issubdtype(dtype, dtype)
    assert jnp.isdtype(dtype, "real floating") and not jnp.isdtype(dtype, "integral")
    assert kiln.dtypes.canonicalize_dtype(dtype) == dtype
    assert kiln.dtypes.scalar_type_of(jnp.ones(2, dtype)) is float
    assert kiln.dtypes.itemsize_bits(dtype) == 8
    assert dtypes.is_floating(dtype) and dtypes.is_float8(dtype) and dtypes.is_narrow_float(dtype)
    assert not dtypes.is_float8(np.dtype(np.float16))


# --- arithmetic ------------------------------------------------------------------------------


def test_elementwise_values_match_jax():
    x = jnp.array([1, 2], jnp.float8_e4m3fn)
    assert (x / 3).tolist() == [0.34375, 0.6875]
    assert _f32(jnp.sqrt(x)).tolist() == [1.0, 1.375]
    assert _f32(jnp.exp(x)).tolist() == [2.75, 7.5]
    assert _f32(jnp.sin(x)).tolist() == [0.8125, 0.9375]
    assert _f32(x * 2.5).tolist() == [2.5, 5.0]
    assert np.isnan(_f32(x + 1000.0)).all()  # past 448: no infinity in e4m3fn
    assert (x > 1).tolist() == [False, True]
    assert jnp.isnan(jnp.full((2,), jnp.nan, jnp.float8_e4m3fn)).tolist() == [True, True]
    assert jnp.isinf(jnp.full((2,), jnp.inf, jnp.float8_e5m2)).tolist() == [True, True]
    assert _f32(jnp.maximum(x, 1.5)).tolist() == [1.5, 2.0]


def _xla_rounding(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A float32 result rounded as XLA:CPU rounds 8-bit float results: through float16 (for
    every type but float8_e8m0fnu, which it computes in float32)."""
    if dtype != np.dtype(ml_dtypes.float8_e8m0fnu):
        value = np.asarray(value).astype(np.float16)
    return np.asarray(value).astype(dtype)


E3M4 = np.dtype(ml_dtypes.float8_e3m4)


@pytest.mark.parametrize("dtype", [E4M3FN, E5M2, E3M4], ids=str)
@pytest.mark.parametrize(
    "op", [jnp.add, jnp.multiply, jnp.divide, jnp.subtract, jnp.arctan2], ids=lambda f: f.__name__
)
def test_binary_ops_compute_in_a_wider_type(dtype, op):
    rng = np.random.default_rng(0)
    a = rng.uniform(-3, 3, 64).astype(dtype)
    b = rng.uniform(0.5, 3, 64).astype(dtype)
    expected = _xla_rounding(np.asarray(op(a.astype(np.float32), b.astype(np.float32))), dtype)
    for fn in (op, kiln.jit(op)):
        out = fn(jnp.asarray(a), jnp.asarray(b))
        assert out.dtype == dtype
        np.testing.assert_array_equal(_f32(out), _f32(expected))


@pytest.mark.parametrize("dtype", [E4M3FN, E5M2, E3M4, np.dtype(ml_dtypes.float8_e8m0fnu)], ids=str)
@pytest.mark.parametrize(
    "op", [jnp.exp, jnp.log, jnp.tanh, jnp.sqrt, jnp.negative, jnp.abs], ids=lambda f: f.__name__
)
def test_unary_ops_compute_in_a_wider_type(dtype, op):
    a = np.linspace(0.1, 7, 200).astype(dtype)
    with np.errstate(all="ignore"):
        expected = _xla_rounding(np.asarray(op(a.astype(np.float32))), dtype)
    for fn in (op, kiln.jit(op)):
        np.testing.assert_array_equal(_f32(fn(jnp.asarray(a))), _f32(expected))


def test_results_round_through_float16_as_in_xla():
    # sqrt(0.96875) = 0.98425..., which float16 rounds to 0.984375, halfway between the
    # float8_e3m4 neighbours 0.96875 and 1; JAX gives 1 (rounding float32 directly to
    # float8_e3m4 would give 0.96875).
    x = jnp.array([0.96875, 3.875], jnp.float8_e3m4)
    assert _f32(jnp.sqrt(x)).tolist() == [1.0, 2.0]
    assert _f32(kiln.jit(jnp.sqrt)(x)).tolist() == [1.0, 2.0]
    # float8_e8m0fnu goes through float32: 2**100 survives a multiplication.
    scale = jnp.array([2.0**100], jnp.float8_e8m0fnu)
    assert float((scale * 2)[0]) == 2.0**101


def test_reductions_match_jax():
    big = _big()
    # Sums round to float8 after every addition, as XLA does for 8-bit floats.
    assert float(big.sum()) == 56
    assert float(kiln.jit(lambda a: (a * a).sum())(big)) == 224
    assert float(big.mean()) == 3
    assert float(big.max()) == 6 and float(big.min()) == 0.34375
    assert big.max().dtype == E4M3FN
    assert float(jnp.prod(jnp.array([1.0, 2.0, 3.0], jnp.float8_e4m3fn))) == 6
    assert _f32(jnp.cumsum(big)).tolist() == [
        0.34375, 1, 2, 3.5, 5, 7, 9, 12, 15, 18, 22, 26, 30, 36, 40, 44, 48, 56
    ]  # fmt: skip
    total = big.sum(dtype=jnp.float32)
    assert total.dtype == np.float32 and float(total) == pytest.approx(sum(BIG))
    assert float(jnp.std(big)) == 1.625
    assert int(jnp.argmax(big)) == 17
    assert _f32(jnp.sort(-big)[:4]).tolist() == [-6.0, -5.5, -5.5, -5.0]
    values, indices = lax.top_k(big, 3)
    assert _f32(values).tolist() == [6, 5.5, 5.5] and indices.tolist() == [17, 15, 16]


def test_dot_and_matmul():
    big = _big()
    assert float(jnp.dot(big, big)) == 240
    wide = jnp.dot(big, big, preferred_element_type=jnp.float32)
    assert wide.dtype == np.float32 and float(wide) == pytest.approx(234.37207, abs=1e-4)
    assert float(kiln.jit(lambda a: lax.dot(a, a, preferred_element_type=jnp.float32))(big)) == (
        pytest.approx(234.37207, abs=1e-4)
    )
    m = jnp.array(np.arange(1, 7).reshape(2, 3) / 3, jnp.float8_e4m3fn)
    np.testing.assert_allclose(
        jnp.matmul(m, m.T, preferred_element_type=jnp.float32),
        [[1.5908203125, 3.58984375], [3.58984375, 8.53125]],
        rtol=1e-6,
    )
    assert _f32(m @ m.T).tolist() == [[1.625, 3.5], [3.5, 9.0]]
    assert _f32(kiln.vmap(jnp.dot)(m, m)).tolist() == [1.625, 9.0]


def test_jit_matches_eager():
    big = _big()
    programs = [
        lambda a: a * a + a,
        lambda a: jnp.sin(a) * 3,
        lambda a: a.astype(jnp.float32) * 2,
        lambda a: jnp.exp(a.astype(jnp.float32)).astype(jnp.float8_e5m2),
        lambda a: (a[::2] - 1.0).reshape(3, 3).T,
        lambda a: lax.fori_loop(0, 3, lambda i, c: c * 2, a[:4]),
    ]
    for program in programs:
        eager = program(big)
        compiled = kiln.jit(program)(big)
        assert compiled.dtype == eager.dtype
        np.testing.assert_array_equal(_f32(compiled), _f32(eager))
    carry, ys = kiln.jit(lambda xs: lax.scan(lambda c, a: (c + a, c), xs[0] * 0, xs))(big)
    assert float(carry) == 56 and ys.dtype == E4M3FN


def test_large_eager_operations():
    # Sizes at which eager elementwise operations of native dtypes run compiled kernels.
    rng = np.random.default_rng(1)
    a = rng.uniform(-4, 4, 1 << 18).astype(E4M3FN)
    b = rng.uniform(0.5, 4, 1 << 18).astype(E4M3FN)
    product = (a.astype(np.float32) * b.astype(np.float32)).astype(E4M3FN)  # each op rounds
    expected = (product.astype(np.float32) + 1.0).astype(E4M3FN)
    out = jnp.asarray(a) * jnp.asarray(b) + 1.0
    assert out.dtype == E4M3FN
    np.testing.assert_array_equal(_f32(out), _f32(expected))


def test_jit_under_strict_native_mode(monkeypatch):
    # Equations on 8-bit floats run through their impls inside compiled programs.
    monkeypatch.setattr(kiln.config, "native_strict", True)
    big = _big()
    out = kiln.jit(lambda a: (a * a + a).astype(jnp.float32) * 2.0 + 1.0)(big)
    expected = (_f32((np.float32(BIG) ** 2).astype(E4M3FN)) + np.float32(BIG)).astype(E4M3FN)
    np.testing.assert_array_equal(out, _f32(expected) * 2 + 1)
    host = np.array([1, 2], ml_dtypes.float8_e4m3fn)  # NumPy float8 arguments are accepted
    assert _f32(kiln.jit(lambda a: a * 2)(host)).tolist() == [2, 4]


def test_float8_equations_are_not_lowerable():
    jaxpr = kiln.make_jaxpr(lambda a: (a * a).astype(jnp.float32))(_big()).jaxpr
    mul, convert = jaxpr.eqns
    assert not lower.lowerable(mul)
    assert not lower.lowerable(convert)
    f32_jaxpr = kiln.make_jaxpr(lambda a: a * a)(jnp.ones(3)).jaxpr
    assert lower.lowerable(f32_jaxpr.eqns[0])
    builder = lower.ExprBuilder({mul.outvars[0]: mul}, {})
    with pytest.raises(lower.NotLowerable):
        builder.lower(mul.outvars[0], (kir.Var("i0"),))


def test_grad_and_vmap():
    big = _big()
    twice = [0.6875, 1.375, 2, 2.75, 3.25, 4, 4.5, 5.5, 6, 6.5, 7.5, 8, 9, 9, 10, 11, 11, 12]
    square = kiln.grad(lambda a: (a * a).astype(jnp.float32).sum())
    assert square(big).dtype == E4M3FN
    assert _f32(square(big)).tolist() == twice
    assert _f32(kiln.jit(square)(big)).tolist() == twice
    dot = kiln.grad(lambda a: jnp.dot(a, a, preferred_element_type=jnp.float32))
    assert _f32(dot(big)).tolist() == twice
    sine = kiln.grad(lambda a: jnp.sin(a).astype(jnp.float32).sum())(big)
    assert _f32(sine).tolist() == [
        0.9375, 0.75, 0.5625, 0.1875, -0.0546875, -0.40625, -0.625, -0.9375, -1, -1,
        -0.8125, -0.625, -0.203125, -0.203125, 0.28125, 0.6875, 0.6875, 0.9375,
    ]  # fmt: skip
    x = jnp.array([1, 2], jnp.float8_e4m3fn)
    assert _f32(kiln.grad(lambda a: (a * a).sum())(x)).tolist() == [2, 4]
    assert _f32(kiln.vmap(lambda a: a * 2)(x)).tolist() == [2, 4]
    # Max pooling's derivative (kind 'f' in NumPy for float8_e5m2 but 'V' for float8_e4m3fn).
    for dtype in (E5M2, E4M3FN):

        def pool(a):
            return lax.reduce_window(a, -np.inf, lax.max, (2,), (1,), "VALID")

        x3 = jnp.array([1.0, 3.0, 2.0], dtype)
        pooled = kiln.grad(lambda a: pool(a).astype(jnp.float32).sum())(x3)
        assert pooled.dtype == dtype and _f32(pooled).tolist() == [0, 2, 0]
        _, tangent = kiln.jvp(pool, (x3,), (jnp.ones(3, dtype),))
        assert _f32(tangent).tolist() == [1, 1]

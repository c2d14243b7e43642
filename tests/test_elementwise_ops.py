"""Elementwise ops: every lax wrapper and every elementwise kiln.numpy function, as op-record
tables checked against NumPy/SciPy references (floats computed in float64 or complex128, then
rounded to the expected dtype; XLA's integer semantics written out with Python integers),
across dtype families and shapes (0-d and empty included) and broadcasting pairs; special
values (NaN, +-inf, -0.0); integer edge cases; weak types (eager equals abstract evaluation,
and JAX's rules for Python scalars); traced and jitted evaluation; bad input."""

import math
import warnings

import numpy as np
import pytest
from scipy import special

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.interpreter import eval_closed_jaxpr
from kiln.core.jaxpr import typecheck_jaxpr
from tests._testing import assert_close, make_args
from tests.op_records import (
    BF16,
    BOOL,
    C64,
    ELEMENTWISE_LAX_RECORDS,
    ELEMENTWISE_NUMPY_RECORDS,
    ELEMENTWISE_RECORDS,
    F16,
    F32,
    F64,
    FLOATS,
    I8,
    I16,
    I32,
    I64,
    TOL,
    U8,
    U32,
    c_div,
    c_rem,
    ref_digamma,
    ref_round_away,
    wide,
)

needs_jit = pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit not available yet")


# --- a row against its reference ------------------------------------------------------------


def evaluate_reference(record, args, dtype):
    call_args = args if record.native else [wide(a) for a in args]
    out = np.dtype(record.out_dtype(dtype))
    if not record.native and (out.kind in "fc" or out == BF16) and dtype.kind in "biu":
        # A float result of integer or bool inputs: the reference computes in float64 too.
        call_args = [a.astype(F64) if a.dtype == dtype else a for a in call_args]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return record.ref(*call_args, **record.static_kwargs)


def compare(record, actual, expected, dtype):
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), record.name
        for a, e in zip(actual, expected):
            compare_one(
                record,
                a,
                e,
                dtype,
                e.dtype
                if np.asarray(e).dtype.kind in "iu" and np.asarray(e).dtype != F64
                else None,
            )
        return
    compare_one(record, actual, expected, dtype)


def compare_one(record, actual, expected, dtype, forced=None):
    out_dtype = forced or record.out_dtype(dtype)
    expected = np.asarray(expected)
    with np.errstate(all="ignore"):
        expected = (
            expected.astype(out_dtype)
            if expected.dtype.kind != "c" or np.dtype(out_dtype).kind == "c"
            else expected.real.astype(out_dtype)
        )
    assert isinstance(actual, kiln.Array), f"{record.name}: got {type(actual)}"
    assert_close(actual, expected, record.tol, err_msg=f"{record.name}[{dtype.name}]")


def check_eager(record, dtype):
    for shapes in record.shapes:
        args = make_args(record, shapes, dtype)
        expected = evaluate_reference(record, args, dtype)
        actual = record.fn(*[jnp.asarray(a) for a in args], **record.static_kwargs)
        compare(record, actual, expected, dtype)


def _cases(records):
    return [
        pytest.param(r, np.dtype(d), id=f"{r.name}-{np.dtype(d).name}")
        for r in records
        for d in r.dtypes
    ]


@pytest.mark.parametrize("record,dtype", _cases(ELEMENTWISE_LAX_RECORDS))
def test_lax_op_against_reference(record, dtype):
    check_eager(record, dtype)


@pytest.mark.parametrize("record,dtype", _cases(ELEMENTWISE_NUMPY_RECORDS))
def test_numpy_function_against_reference(record, dtype):
    check_eager(record, dtype)


def test_every_public_name_has_a_record():
    from kiln.primitives import elementwise, elementwise_math
    from kiln.numpy import ufuncs

    covered = {r.name.split("_")[0] for r in ELEMENTWISE_RECORDS} | {
        r.name for r in ELEMENTWISE_RECORDS
    }
    extra = {
        "RoundingMethod",
        "select",
        "convert_element_type",
        "bitcast_convert_type",
        "integer_pow",
        "_astype",
        "true_divide",
        "around",
    }
    for name in elementwise.__all__ + elementwise_math.__all__ + ufuncs.__all__:
        assert name in covered or name in extra, f"{name} has no op record"


# --- weak types ------------------------------------------------------------------------------


def _weak(value: np.ndarray):
    return lax.convert_element_type(value, value.dtype, weak_type=True)


def _pick_dtype(record):
    for d in (F32, I32, BOOL):
        if d in [np.dtype(x) for x in record.dtypes]:
            return d
    return np.dtype(record.dtypes[0])


@pytest.mark.parametrize("record", ELEMENTWISE_RECORDS, ids=lambda r: r.label)
def test_weak_type_eager_matches_abstract_eval(record):
    """For all-weak and mixed weak/strong operands, the eager result's dtype and weak type are
    what make_jaxpr's abstract evaluation says."""
    dtype = _pick_dtype(record)
    # Not 0-d: a concrete 0-d exponent makes jnp.power unroll eagerly but not under tracing.
    shapes = record.shapes[min(3, len(record.shapes) - 1)]
    args = make_args(record, shapes, dtype)
    variants = [[_weak(a) for a in args], [_weak(args[0])] + [jnp.asarray(a) for a in args[1:]]]
    for call_args in variants:
        eager = record.fn(*call_args, **record.static_kwargs)
        closed = kiln.make_jaxpr(lambda *a: record.fn(*a, **record.static_kwargs))(*call_args)
        typecheck_jaxpr(closed.jaxpr)
        flat = list(eager) if isinstance(eager, tuple) else [eager]
        for e, aval in zip(flat, closed.out_avals):
            assert (e.dtype, e.shape, e.weak_type) == (aval.dtype, aval.shape, aval.weak_type), (
                record.name,
                e.aval,
                aval,
            )
        traced = eval_closed_jaxpr(closed, *call_args)
        for e, t in zip(flat, traced):
            np.testing.assert_array_equal(np.asarray(t), np.asarray(e))


# JAX's results for Python-scalar arguments: (function, args, dtype, weak_type), from jax 0.10.
PYTHON_SCALAR_RESULTS = [
    (jnp.add, (1.5, 2.5), F32, True),
    (jnp.add, (3, 2), I32, True),
    (jnp.add, (True, False), BOOL, False),
    (jnp.add, (3, 2.5), F32, True),
    (jnp.add, (True, 1), I32, True),
    (jnp.multiply, (True, 2.0), F32, True),
    (jnp.divide, (3, 2), F32, True),
    (jnp.divide, (True, False), F32, False),
    (jnp.floor_divide, (True, False), I32, False),
    (jnp.floor_divide, (3, 2.5), F32, True),
    (jnp.power, (3, 2), I32, True),
    (jnp.power, (1.5, 2.5), F32, True),
    (jnp.float_power, (3, 2), F32, True),
    (jnp.sqrt, (3,), F32, True),
    (jnp.sqrt, (True,), F32, False),
    (jnp.square, (True,), I32, False),
    (jnp.rint, (3,), F32, False),
    (jnp.rint, (1.5,), F32, True),
    (jnp.round, (1.5,), F32, True),
    (jnp.log2, (1.5,), F32, False),
    (jnp.deg2rad, (1.5,), F32, True),
    (jnp.sinc, (1.5,), F32, True),
    (jnp.isnan, (1.5,), BOOL, True),
    (jnp.isinf, (1.5,), BOOL, False),
    (jnp.isfinite, (1.5,), BOOL, True),
    (jnp.isfinite, (3,), BOOL, False),
    (jnp.signbit, (3,), BOOL, False),
    (jnp.equal, (1.5, 2.5), BOOL, True),
    (jnp.less, (3, 2), BOOL, True),
    (jnp.logical_and, (3, 2), BOOL, True),
    (jnp.logical_not, (1.5,), BOOL, True),
    (jnp.imag, (1.5,), F32, True),
    (jnp.angle, (1.5,), F32, False),
    (jnp.nan_to_num, (1.5,), F32, False),
    (jnp.nan_to_num, (3,), I32, True),
    (jnp.isclose, (1.5, 2.5), BOOL, False),
    (jnp.hypot, (3, 2), F32, True),
    (jnp.copysign, (3, 2.5), F32, True),
    (jnp.ldexp, (3, 2), F32, False),
    (jnp.fabs, (True,), F32, False),
    (jnp.abs, (True,), BOOL, False),
    (jnp.positive, (3,), I32, True),
    (jnp.left_shift, (True, False), I32, False),
    (jnp.invert, (3,), I32, True),
    (lambda a, b: jnp.clip(a, 0, b), (1.5, 2), F32, True),
    (lambda a: jnp.where(True, a, 2.0), (1,), F32, True),
    (lax.sin, (1.5,), F32, True),
    (lax.eq, (1.5, 2.5), BOOL, True),
    (lax.integer_pow, (1.5, 3), F32, True),
]


@pytest.mark.parametrize(
    "fn,args,dtype,weak",
    PYTHON_SCALAR_RESULTS,
    ids=[f"{getattr(c[0], '__name__', 'fn')}-{i}" for i, c in enumerate(PYTHON_SCALAR_RESULTS)],
)
def test_python_scalar_weak_types_match_jax(fn, args, dtype, weak):
    out = fn(*args)
    assert (out.dtype, out.weak_type) == (dtype, weak)


def test_multi_output_weak_types_match_jax():
    assert [(o.dtype, o.weak_type) for o in jnp.divmod(3, 2)] == [(I32, True)] * 2
    assert [(o.dtype, o.weak_type) for o in jnp.modf(1.5)] == [(F32, True)] * 2
    assert [(o.dtype, o.weak_type) for o in jnp.frexp(1.5)] == [(F32, False), (I32, False)]


# --- jit against eager -------------------------------------------------------------------------


def _jit_cases():
    cases = []
    for r in ELEMENTWISE_RECORDS:
        dtypes_ = [np.dtype(d) for d in r.dtypes]
        picks = [d for d in (F32, I8, U32, BOOL, C64, BF16) if d in dtypes_][:2] or dtypes_[:1]
        cases += [pytest.param(r, d, id=f"{r.label}-{d.name}") for d in picks]
    return cases


@needs_jit
@pytest.mark.parametrize("record,dtype", _jit_cases())
def test_jit_matches_eager(record, dtype):
    shapes = next(
        s
        for s in record.shapes
        if all(len(x) >= 1 and 0 not in x for x in s) or s == record.shapes[-1]
    )
    args = [jnp.asarray(a) for a in make_args(record, shapes, dtype, seed=1)]
    kwargs = record.static_kwargs
    eager = record.fn(*args, **kwargs)
    compiled = kiln.jit(lambda *a: record.fn(*a, **kwargs))(*args)
    flat_e = list(eager) if isinstance(eager, tuple) else [eager]
    flat_c = list(compiled) if isinstance(compiled, tuple) else [compiled]
    for e, c in zip(flat_e, flat_c):
        assert (c.dtype, c.shape, c.weak_type) == (e.dtype, e.shape, e.weak_type)
        assert_close(c, np.asarray(e), record.tol, err_msg=f"{record.name} (jit)")


# --- special values ----------------------------------------------------------------------------
SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-30, 3e38]

SPECIAL_FUNCTIONS = [
    ("neg", lax.neg, np.negative),
    ("abs", lax.abs, np.abs),
    ("sign", lax.sign, lambda x: np.where(x == 0, x, np.sign(x))),  # keeps -0.0, as XLA
    ("floor", lax.floor, np.floor),
    ("ceil", lax.ceil, np.ceil),
    ("round", lax.round, ref_round_away),
    ("is_finite", lax.is_finite, np.isfinite),
    ("exp", lax.exp, np.exp),
    ("exp2", lax.exp2, np.exp2),
    ("log", lax.log, np.log),
    ("log1p", lax.log1p, np.log1p),
    ("expm1", lax.expm1, np.expm1),
    ("sqrt", lax.sqrt, np.sqrt),
    ("rsqrt", lax.rsqrt, lambda x: 1 / np.sqrt(x)),
    ("cbrt", lax.cbrt, np.cbrt),
    ("sin", lax.sin, np.sin),
    ("cos", lax.cos, np.cos),
    ("tan", lax.tan, np.tan),
    ("asin", lax.asin, np.arcsin),
    ("acos", lax.acos, np.arccos),
    ("atan", lax.atan, np.arctan),
    ("sinh", lax.sinh, np.sinh),
    ("cosh", lax.cosh, np.cosh),
    ("tanh", lax.tanh, np.tanh),
    ("asinh", lax.asinh, np.arcsinh),
    ("acosh", lax.acosh, np.arccosh),
    ("atanh", lax.atanh, np.arctanh),
    ("logistic", lax.logistic, special.expit),
    ("erf", lax.erf, special.erf),
    ("erfc", lax.erfc, special.erfc),
    ("erf_inv", lax.erf_inv, special.erfinv),
    ("lgamma", lax.lgamma, special.gammaln),
    ("digamma", lax.digamma, ref_digamma),
    ("square", lax.square, np.square),
    ("reciprocal", lax.reciprocal, lambda x: 1 / x),
    ("jnp.trunc", jnp.trunc, np.trunc),
    ("jnp.rint", jnp.rint, np.rint),
    ("jnp.log2", jnp.log2, np.log2),
    ("jnp.log10", jnp.log10, np.log10),
    ("jnp.isnan", jnp.isnan, np.isnan),
    ("jnp.isinf", jnp.isinf, np.isinf),
    ("jnp.isposinf", jnp.isposinf, np.isposinf),
    ("jnp.isneginf", jnp.isneginf, np.isneginf),
    ("jnp.signbit", jnp.signbit, np.signbit),
    # pi * 3e38 overflows in single precision, so JAX's sinc gives NaN there
    ("jnp.sinc", jnp.sinc, lambda x: np.where(np.abs(x) > 1e38, np.nan, np.sinc(x))),
    ("jnp.fabs", jnp.fabs, np.fabs),
    ("jnp.deg2rad", jnp.deg2rad, np.deg2rad),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name,fn,ref", SPECIAL_FUNCTIONS, ids=[s[0] for s in SPECIAL_FUNCTIONS])
def test_special_values(name, fn, ref, dtype):
    with np.errstate(all="ignore"):
        x = np.array(SPECIALS, F32).astype(dtype)
        expected = np.asarray(ref(x.astype(F64)))
        expected = expected.astype(dtype if expected.dtype != BOOL else BOOL)
    actual = np.asarray(fn(jnp.asarray(x)))
    assert actual.dtype == expected.dtype
    assert_close(actual, expected, TOL, err_msg=name)
    if actual.dtype != BOOL:  # the sign of zero results matters too
        zeros = (expected == 0) & ~np.isnan(expected.astype(F64))
        np.testing.assert_array_equal(
            np.signbit(actual[zeros].astype(F64)),
            np.signbit(expected[zeros].astype(F64)),
            err_msg=name,
        )


def test_special_values_of_binary_functions():
    nan, inf = np.nan, np.inf
    x = jnp.array([nan, 1.0, inf, -inf, -0.0, 0.0, inf, 2.0])
    y = jnp.array([1.0, nan, inf, -inf, 0.0, -0.0, -inf, 0.0])
    np.testing.assert_array_equal(jnp.maximum(x, y), [nan, nan, inf, -inf, 0, 0, inf, 2])
    np.testing.assert_array_equal(jnp.fmax(x, y), [1, 1, inf, -inf, 0, 0, inf, 2])
    np.testing.assert_array_equal(jnp.fmin(x, y), [1, 1, inf, -inf, 0, 0, -inf, 0])
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(
            jnp.logaddexp(x, y), np.logaddexp(np.asarray(x), np.asarray(y))
        )
    np.testing.assert_array_equal(jnp.hypot(x, y), np.hypot(np.asarray(x), np.asarray(y)))
    np.testing.assert_array_equal(
        jnp.copysign(jnp.array([1.0, 1.0, nan]), jnp.array([-0.0, 0.0, -1.0])).tolist()[:2],
        [-1.0, 1.0],
    )
    assert np.signbit(np.asarray(jnp.copysign(nan, -1.0)))
    np.testing.assert_array_equal(
        jnp.remainder(
            jnp.array([-7.0, 7.0, 1.0, -0.0, 5.0, -5.0]), jnp.array([2.0, -2.0, 0.0, 3.0, inf, inf])
        ),
        [1.0, -1.0, nan, -0.0, 5.0, inf],
    )
    np.testing.assert_array_equal(
        jnp.floor_divide(
            jnp.array([-7.0, 7.0, 1.0, -1.0, 0.0]), jnp.array([2.0, -2.0, 0.0, 0.0, 0.0])
        ),
        [-4, -4, inf, -inf, nan],
    )
    np.testing.assert_array_equal(
        jnp.nextafter(jnp.array([1.0, 0.0, 0.0, 1.0]), jnp.array([2.0, 1.0, -1.0, 1.0])),
        np.nextafter(np.float32([1, 0, 0, 1]), np.float32([2, 1, -1, 1])),
    )
    np.testing.assert_array_equal(
        lax.clamp(0.0, jnp.array([-1.0, 0.5, 2.0, nan]), 1.0), [0.0, 0.5, 1.0, nan]
    )
    np.testing.assert_array_equal(
        jnp.heaviside(jnp.array([-1.0, 0.0, 2.0, nan]), 0.5), [0.0, 0.5, 1.0, 0.5]
    )  # JAX: NaN takes x2, unlike NumPy
    np.testing.assert_array_equal(jnp.modf(jnp.array([-1.5, inf]))[0], [-0.5, nan])
    np.testing.assert_array_equal(
        jnp.nan_to_num(jnp.array([nan, inf, -inf], jnp.float16)),
        np.array([0, 65504, -65504], np.float16),
    )
    np.testing.assert_array_equal(
        jnp.nan_to_num(jnp.array([nan, inf]), nan=1.0, posinf=2.0), [1.0, 2.0]
    )
    out = jnp.nan_to_num(jnp.array([complex(nan, inf)], jnp.complex64))
    assert out.dtype == C64 and out.tolist() == [complex(0, np.finfo(np.float32).max)]


def test_isclose_infinities_and_nans():
    nan, inf = np.nan, np.inf
    a = jnp.array([1.0, nan, inf, inf, 1e10])
    b = jnp.array([1.000001, nan, inf, -inf, 1.000001e10])
    np.testing.assert_array_equal(jnp.isclose(a, b), [True, False, True, False, True])
    np.testing.assert_array_equal(
        jnp.isclose(a, b, equal_nan=True), [True, True, True, False, True]
    )
    assert bool(jnp.allclose(a[:1], b[:1])) and not bool(jnp.allclose(a, b))


def test_round_ties_and_decimals():
    x = jnp.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997])
    np.testing.assert_array_equal(lax.round(x), [1, 2, 3, -1, -3, 0])
    np.testing.assert_array_equal(lax.round(x, 1), [0, 2, 2, -0.0, -2, 0])
    np.testing.assert_array_equal(jnp.round(x), [0, 2, 2, -0.0, -2, 0])
    assert np.signbit(np.asarray(jnp.round(x)))[3]
    np.testing.assert_allclose(
        jnp.round(jnp.array([1.25, 2.5, -0.5, 0.125]), 1), [1.2, 2.5, -0.5, 0.1], rtol=1e-6
    )
    np.testing.assert_array_equal(jnp.round(jnp.array([15, 25]), 2), [15, 25])
    assert jnp.round(jnp.array([1.0]), 50).dtype == F32  # beyond precision: unchanged
    with pytest.raises(NotImplementedError, match="decimals < 0"):
        jnp.round(jnp.array([15]), -1)
    with pytest.raises(ValueError):
        jnp.round(jnp.array([True]))
    assert str(kiln.make_jaxpr(lambda v: lax.round(v, 1))(1.0)).count("rounding_method=1") == 1
    with pytest.raises(ValueError, match="rounding_method"):
        lax.round(1.0, 2)


def test_frexp_ldexp_round_trip_including_subnormals():
    x = np.array([8.0, 0.0, -3.0, np.inf, np.nan, 1e-40, -1e-45, 3e38, 0.75], F32)
    mantissa, exponent = jnp.frexp(jnp.asarray(x))
    m_ref, e_ref = np.frexp(x)
    assert mantissa.dtype == F32 and exponent.dtype == I32
    np.testing.assert_array_equal(mantissa, m_ref)
    np.testing.assert_array_equal(exponent, e_ref)
    np.testing.assert_array_equal(jnp.ldexp(mantissa, exponent), x)
    big = jnp.ldexp(jnp.array([1.0, 3.0, 1.5, 1e-45, 2.0]), jnp.array([3, -200, -149, 276, 200]))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(
            big, np.ldexp(np.float32([1, 3, 1.5, 1e-45, 2]), [3, -200, -149, 276, 200])
        )
    for dtype in (F16, BF16):
        v = np.array([1.5, -0.25, 1000, 6e-8], dtype)
        m, e = jnp.frexp(jnp.asarray(v))
        np.testing.assert_array_equal(
            np.asarray(m).astype(F64) * 2.0 ** np.asarray(e), v.astype(F64)
        )
        np.testing.assert_array_equal(jnp.ldexp(m, e), v)
    with pytest.raises(ValueError, match="integer"):
        jnp.ldexp(jnp.array([1.0]), jnp.array([1.0]))
    with pytest.raises(TypeError, match="complex"):
        jnp.frexp(jnp.array([1j]))


# --- integer edge cases --------------------------------------------------------------------------


def test_integer_division_follows_xla():
    x = jnp.array([-7, 7, -128, 5, 0, -128], jnp.int8)
    y = jnp.array([2, -2, -1, 0, 0, 1], jnp.int8)
    np.testing.assert_array_equal(lax.div(x, y), [-3, -3, -128, -1, -1, -128])
    np.testing.assert_array_equal(lax.rem(x, y), [-1, 1, 0, 5, 0, 0])
    np.testing.assert_array_equal(jnp.floor_divide(x, y), [-4, -4, -128, -2, -1, -128])
    np.testing.assert_array_equal(jnp.remainder(x, y), [1, -1, 0, 0, 0, 0])
    np.testing.assert_array_equal(jnp.fmod(x, y), [-1, 1, 0, 0, 0, 0])
    q, r = jnp.divmod(x, y)
    np.testing.assert_array_equal(q, [-4, -4, -128, -2, -1, -128])
    np.testing.assert_array_equal(r, [1, -1, 0, 0, 0, 0])
    u = jnp.array([7, 1, 255], jnp.uint8)
    v = jnp.array([2, 0, 0], jnp.uint8)
    np.testing.assert_array_equal(lax.div(u, v), [3, 255, 255])
    np.testing.assert_array_equal(lax.rem(u, v), [1, 1, 255])
    np.testing.assert_array_equal(jnp.floor_divide(u, v), [3, 255, 255])
    big = jnp.array([np.iinfo(np.int32).min, 9], jnp.int32)
    np.testing.assert_array_equal(
        lax.div(big, jnp.array([-1, -4], jnp.int32)), [np.iinfo(np.int32).min, -2]
    )


def test_integer_div_and_rem_int64_with_x64():
    kiln.config.update("jax_enable_x64", True)
    try:
        lo = np.iinfo(np.int64).min
        x = jnp.array([lo, lo, -7, 7, 5], jnp.int64)
        y = jnp.array([-1, 3, 2, 0, -3], jnp.int64)
        assert x.dtype == I64
        np.testing.assert_array_equal(lax.div(x, y), [lo, c_div(lo, 3), -3, -1, -1])
        np.testing.assert_array_equal(lax.rem(x, y), [0, c_rem(lo, 3), -1, 7, 2])
    finally:
        kiln.config.update("jax_enable_x64", False)


def test_integer_overflow_wraps():
    i8 = jnp.array([127, -128, -128], jnp.int8)
    np.testing.assert_array_equal(lax.add(i8, jnp.array([1, -1, 0], jnp.int8)), [-128, 127, -128])
    np.testing.assert_array_equal(lax.neg(i8), [-127, -128, -128])
    np.testing.assert_array_equal(lax.abs(i8), [127, -128, -128])
    np.testing.assert_array_equal(jnp.abs(i8), [127, -128, -128])
    np.testing.assert_array_equal(lax.mul(i8, i8), [1, 0, 0])
    np.testing.assert_array_equal(jnp.negative(jnp.array([1], jnp.uint8)), [255])
    np.testing.assert_array_equal(jnp.square(jnp.array([16], jnp.int8)), [0])


def test_shifts_by_the_bit_width_or_more():
    x = jnp.array([1, 1, -1, -128, 64, -1], jnp.int8)
    s = jnp.array([7, 8, 9, 8, 9, -1], jnp.int8)
    np.testing.assert_array_equal(lax.shift_left(x, s), [-128, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(lax.shift_right_arithmetic(x, s), [0, 0, -1, -1, 0, -1])
    np.testing.assert_array_equal(lax.shift_right_logical(x, s), [0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(
        lax.shift_right_logical(jnp.array([-128], jnp.int8), jnp.array([7], jnp.int8)), [1]
    )
    np.testing.assert_array_equal(
        jnp.right_shift(jnp.array([128, 255], jnp.uint8), jnp.array([8, 1], jnp.uint8)), [0, 127]
    )
    out = jnp.left_shift(jnp.array([1], jnp.uint8), jnp.array([1], jnp.int8))
    assert out.dtype == I16 and out.tolist() == [2]


def test_bit_counting():
    x = jnp.array([0, 1, -1, 64, -128], jnp.int8)
    np.testing.assert_array_equal(lax.population_count(x), [0, 1, 8, 1, 1])
    np.testing.assert_array_equal(lax.clz(x), [8, 7, 0, 1, 0])
    u = jnp.array([0, 1, 2**31, 2**32 - 1], jnp.uint32)
    np.testing.assert_array_equal(lax.clz(u), [32, 31, 0, 0])
    np.testing.assert_array_equal(lax.population_count(u), [0, 1, 1, 32])


def test_power_of_integers_matches_jax():
    # JAX uses the exponent's low 6 bits for integer bases (negative exponents wrap).
    x = jnp.array([2, 3, -1, 1, 0, 2])
    y = jnp.array([-1, -2, -3, -1, -1, 10])
    np.testing.assert_array_equal(jnp.power(x, y), [0, 703701817, -1, 1, 0, 1024])
    np.testing.assert_array_equal(jnp.power(2, jnp.arange(4)), [1, 2, 4, 8])
    assert jnp.power(jnp.array([True, False]), jnp.array([True, True])).dtype == I32
    with pytest.raises(TypeError, match="negative"):
        jnp.power(jnp.arange(3), -1)
    jaxpr = str(kiln.make_jaxpr(lambda v: jnp.power(v, 3))(1.0))
    assert "integer_pow[y=3]" in jaxpr
    assert "pow a 3.0" in str(kiln.make_jaxpr(lambda v: jnp.power(v, 3.0))(1.0))


def test_gcd_lcm():
    np.testing.assert_array_equal(
        jnp.gcd(jnp.array([12, -12, 0, 7, -20], jnp.int8), jnp.array([18, 18, 0, 0, -8], jnp.int8)),
        [6, 6, 0, 7, 4],
    )
    np.testing.assert_array_equal(
        jnp.lcm(jnp.array([4, -4, 0, 7]), jnp.array([6, 6, 5, 0])), [12, 12, 0, 0]
    )
    traced = kiln.make_jaxpr(jnp.gcd)(jnp.array([12, 7]), jnp.array([18, 21]))
    np.testing.assert_array_equal(
        eval_closed_jaxpr(traced, jnp.array([12, 7]), jnp.array([18, 21]))[0], [6, 7]
    )
    for bad in ((jnp.array([1.0]), jnp.array([2.0])), (jnp.array([True]), jnp.array([True]))):
        with pytest.raises(ValueError, match="integers"):
            jnp.gcd(*bad)


def test_convert_element_type_saturates():
    x = jnp.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 3.9, -3.9, 255.5])
    np.testing.assert_array_equal(
        lax.convert_element_type(x, I8), [0, 127, -128, 127, -128, 3, -3, 127]
    )
    np.testing.assert_array_equal(lax.convert_element_type(x, U8), [0, 255, 0, 255, 0, 3, 0, 255])
    np.testing.assert_array_equal(
        lax.convert_element_type(x, I32), [0, 2**31 - 1, -(2**31), 2**31 - 1, -(2**31), 3, -3, 255]
    )
    np.testing.assert_array_equal(
        lax.convert_element_type(jnp.array([0.0, -0.0, np.nan]), BOOL), [False, False, True]
    )
    assert lax.convert_element_type(jnp.array([1 + 2j]), F32).tolist() == [1.0]


# --- bad input ---------------------------------------------------------------------------------


def test_lists_are_rejected():
    for fn in (jnp.add, jnp.maximum, jnp.arctan2, jnp.where):
        args = ([1, 2], jnp.array([1, 2]), jnp.array([1, 2]))[: 2 if fn is not jnp.where else 3]
        with pytest.raises(TypeError, match="list"):
            fn(*args)
    with pytest.raises(TypeError):
        jnp.sin([1.0])


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: lax.add(jnp.ones(3), jnp.ones(4)), TypeError, "shapes"),
        (lambda: lax.add(jnp.ones(3), jnp.ones(3, jnp.int32)), TypeError, "same dtypes"),
        (lambda: lax.sin(jnp.ones(3, jnp.int32)), TypeError, "sin does not accept dtype int32"),
        (lambda: lax.floor(jnp.ones(3, jnp.complex64)), TypeError, "floor"),
        (lambda: lax.abs(jnp.ones(3, jnp.uint8)), TypeError, "abs"),
        (lambda: lax.bitwise_and(jnp.ones(2), jnp.ones(2)), TypeError, "and"),
        (lambda: lax.shift_left(jnp.ones(2), jnp.ones(2)), TypeError, "shift_left"),
        (lambda: lax.lt(jnp.ones(2, jnp.complex64), jnp.ones(2, jnp.complex64)), TypeError, "lt"),
        (lambda: lax.integer_pow(jnp.ones(2), 1.5), TypeError, "exponent"),
        (lambda: lax.pow(jnp.ones(2), jnp.ones(2, jnp.float16)), TypeError, "pow"),
        (
            lambda: lax.complex(jnp.ones(2, jnp.float16), jnp.ones(2, jnp.float16)),
            TypeError,
            "float32",
        ),
        (lambda: lax.clamp(jnp.zeros(2), jnp.ones(3), 1.0), TypeError, "clamp"),
        (lambda: lax.bitcast_convert_type(jnp.ones(2), jnp.int8), TypeError, "width"),
        (lambda: jnp.negative(jnp.array([True])), TypeError, "neg"),
        (lambda: jnp.subtract(jnp.array([True]), jnp.array([True])), TypeError, "sub"),
        (lambda: jnp.sign(jnp.array([True])), TypeError, "sign"),
        (lambda: jnp.floor_divide(jnp.ones(2, jnp.complex64), 1), TypeError, "complex"),
        (lambda: jnp.remainder(jnp.ones(2, jnp.complex64), 1), TypeError, "rem"),
        (lambda: jnp.fabs(jnp.ones(2, jnp.complex64)), TypeError, "complex"),
        (lambda: jnp.clip(jnp.ones(2, jnp.complex64), 0, 1), ValueError, "Complex"),
        (lambda: jnp.isposinf(jnp.ones(2, jnp.complex64)), ValueError, "complex"),
        (lambda: jnp.bitwise_or(jnp.ones(2), 1), TypeError, "or"),
        (lambda: jnp.add(jnp.ones(3), jnp.ones(4)), ValueError, "broadcast"),
        (lambda: jnp.where(jnp.ones(2) > 0, 1), ValueError, "both or neither"),
        (lambda: jnp.select([jnp.array([True])], []), ValueError, "length"),
        (lambda: jnp.select([], []), ValueError, "non-empty"),
        (lambda: jnp.select([jnp.array([1])], [jnp.array([1])]), TypeError, "boolean"),
    ],
)
def test_bad_input_raises_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_where_one_argument_is_nonzero():
    if not hasattr(jnp, "nonzero"):
        pytest.skip("kiln.numpy.nonzero not written yet")
    (idx,) = jnp.where(jnp.array([0, 3, 0, 5]))
    np.testing.assert_array_equal(idx, [1, 3])
    (idx,) = jnp.where(jnp.array([0, 3, 0, 5]), size=3)
    np.testing.assert_array_equal(idx, [1, 3, 0])


def test_jaxprs_print_like_jax():
    f = lambda x: lax.clamp(0.0, lax.integer_pow(x, 3), 1.0)  # noqa: E731
    assert str(kiln.make_jaxpr(f)(1.0)) == (
        "{ lambda ; a:f32[]. let\n    b:f32[] = integer_pow[y=3] a\n"
        "    c:f32[] = clamp 0.0 b 1.0\n  in (c,) }"
    )
    assert str(kiln.make_jaxpr(lax.abs)(1j)) == "{ lambda ; a:c64[]. let b:f32[] = abs a in (b,) }"
    text = str(kiln.make_jaxpr(lambda x: jnp.floor_divide(x, 3))(jnp.arange(3)))
    for piece in ("div a 3", "sign a", "rem a 3", "select_n"):
        assert piece in text, text


def test_math_helpers_are_consistent():
    # sanity of the reference helpers themselves (so the table cannot pass vacuously)
    assert c_div(-7, 2) == -3 and c_rem(-7, 2) == -1 and c_div(5, 0) == -1
    assert ref_round_away(np.array([2.5, -2.5, 0.4])).tolist() == [3, -3, 0]
    assert math.isnan(ref_digamma(np.array([0.0]))[0])

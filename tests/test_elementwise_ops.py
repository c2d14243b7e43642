"""Elementwise ops: every lax wrapper and every elementwise kiln.numpy function, as op-record
tables checked against NumPy/SciPy references (floats computed in float64 or complex128, then
rounded to the expected dtype; XLA's integer semantics written out with Python integers),
across dtype families and shapes (0-d and empty included) and broadcasting pairs; special
values (NaN, +-inf, -0.0); integer edge cases; weak types (eager equals abstract evaluation,
and JAX's rules for Python scalars); traced and jitted evaluation; bad input."""
import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from scipy import special

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.interpreter import eval_closed_jaxpr
from kiln.core.jaxpr import typecheck_jaxpr
from tests._testing import OpRecord, assert_close, rand

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
I8, I16, I32, I64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
U8, U16, U32 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32))
BOOL = np.dtype(np.bool_)

SIGNED, UNSIGNED = [I8, I32], [U8, U32]
INTS = SIGNED + UNSIGNED
FLOATS = [F32, F16, BF16]
INTEGRAL = [BOOL] + INTS
REALS = INTS + FLOATS
ORDERED = [BOOL] + REALS
NUMBER = INTS + FLOATS + [C64]
EVERY = [BOOL] + NUMBER
INEXACT = FLOATS + [C64]
TOL = {F16: 4e-3, BF16: 2e-2, F32: 2e-5, C64: 2e-5, F64: 1e-12}

needs_jit = pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit not available yet")

SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4)]
UNARY_SHAPES = [(s,) for s in SHAPES]
LAX_BINARY_SHAPES = [(s, s) for s in SHAPES] + [((), (3, 4)), ((2, 3), ())]
NP_BINARY_SHAPES = [(s, s) for s in SHAPES] + [((3, 1), (1, 4)), ((), (2, 3))]


# --- data --------------------------------------------------------------------------------------

def _draw(kind, shape, dtype, rng):
    """Random data of one argument. Besides tests._testing.rand's kinds: 'nonzero' (no zeros),
    'ge1' (floats >= 1), 'shift' (shift amounts, including >= the bit width and negative),
    'exponent' (small non-negative integers), 'small' (magnitudes that do not overflow)."""
    dtype = np.dtype(dtype)
    if callable(kind):
        return kind(shape, dtype, rng)
    if kind in ("normal", "positive", "unit", "small_int"):
        return rand(shape, dtype, rng, kind)
    if kind == "nonzero":
        if dtype == BOOL:
            return np.ones(shape, bool)
        if dtype.kind in "iu":
            low = 1 if dtype.kind == "u" else -9
            values = rng.integers(low, 10, shape)
            return np.where(values == 0, 3, values).astype(dtype)
        base = rng.uniform(0.5, 4, shape) * rng.choice([-1, 1], shape)
        if dtype.kind == "c":
            base = base + 1j * rng.uniform(0.5, 2, shape)
        return np.asarray(base).astype(dtype)
    if kind == "ge1":
        return rng.uniform(1, 4, shape).astype(dtype)
    if kind == "shift":
        bits = 8 * dtype.itemsize
        values = rng.integers(-2, bits + 3, shape)
        return values.astype(dtype) if dtype.kind == "i" else \
            np.where(values < 0, bits + 5, values).astype(dtype)
    if kind == "exponent":
        return rng.integers(0, 5, shape).astype(dtype)
    if kind == "small":
        if dtype == BOOL:
            return rng.random(shape) < 0.5
        if dtype.kind in "iu":
            return rng.integers(0 if dtype.kind == "u" else -3, 4, shape).astype(dtype)
        return rng.uniform(-2, 2, shape).astype(dtype)
    raise ValueError(kind)


def make_args(record, shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    kinds = record.kind if isinstance(record.kind, tuple) else (record.kind,) * len(shapes)
    dtypes_ = getattr(record, "arg_dtypes", None)
    out = []
    for i, (kind, shape) in enumerate(zip(kinds, shapes)):
        arg_dtype = dtypes_(dtype)[i] if dtypes_ else dtype
        out.append(_draw(kind, shape, arg_dtype, rng))
    return out


def wide(x: np.ndarray) -> np.ndarray:
    """References compute floats in float64 and complex in complex128; integers stay exact."""
    if x.dtype.kind == "c":
        return x.astype(C128)
    if x.dtype in (F16, BF16, F32):
        return x.astype(F64)
    return x


# --- expected dtypes -----------------------------------------------------------------------------

def same(d):
    return d


def inexact(d):
    return d if d in (F16, BF16, F32, C64) else F32


def to_bool(d):
    return BOOL


def real_of(d):
    return F32 if d == C64 else d


def numeric(d):
    return I32 if d == BOOL else d


def complex_of(d):
    return C64


def rec(name, fn, ref, shapes, dtypes, kind="normal", out=same, tol=TOL, native=False,
        arg_dtypes=None, **kwargs):
    """An op record; `native` refs run on the arguments' own dtypes (not widened)."""
    record = OpRecord(name, fn, ref, shapes, dtypes, kind=kind, tol=tol, out_dtype=out,
                      static_kwargs=kwargs)
    record.native = native
    record.arg_dtypes = arg_dtypes
    return record


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
            compare_one(record, a, e, dtype, e.dtype if np.asarray(e).dtype.kind in "iu" and
                        np.asarray(e).dtype != F64 else None)
        return
    compare_one(record, actual, expected, dtype)


def compare_one(record, actual, expected, dtype, forced=None):
    out_dtype = forced or record.out_dtype(dtype)
    expected = np.asarray(expected)
    with np.errstate(all="ignore"):
        expected = expected.astype(out_dtype) if expected.dtype.kind != "c" or \
            np.dtype(out_dtype).kind == "c" else expected.real.astype(out_dtype)
    assert isinstance(actual, kiln.Array), f"{record.name}: got {type(actual)}"
    assert_close(actual, expected, record.tol, err_msg=f"{record.name}[{dtype.name}]")


def check_eager(record, dtype):
    for shapes in record.shapes:
        args = make_args(record, shapes, dtype)
        expected = evaluate_reference(record, args, dtype)
        actual = record.fn(*[jnp.asarray(a) for a in args], **record.static_kwargs)
        compare(record, actual, expected, dtype)


# --- XLA integer semantics, written out on Python ints ---------------------------------------

def _elementwise_int(fn, *args):
    """Apply a Python-int function elementwise and wrap the result to the first arg's dtype."""
    dtype = args[0].dtype
    bits = 8 * dtype.itemsize
    arrays = np.broadcast_arrays(*args)
    flat = [a.ravel().tolist() for a in arrays]
    out = []
    for values in zip(*flat):
        r = fn(*values) & ((1 << bits) - 1)
        if dtype.kind == "i" and r >= 1 << (bits - 1):
            r -= 1 << bits
        out.append(r)
    return np.array(out, dtype=np.int64 if dtype.kind == "i" else np.uint64).astype(
        dtype).reshape(arrays[0].shape)


def _c_div(a, b):
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _c_rem(a, b):
    if b == 0:
        return a
    return a - b * _c_div(a, b)


def ref_div(x, y):
    if x.dtype.kind in "iu":
        return _elementwise_int(_c_div, x, y)
    return x / y


def ref_rem(x, y):
    if x.dtype.kind in "iu":
        return _elementwise_int(_c_rem, x, y)
    return np.fmod(x, y)


def _as_unsigned(v, bits):
    return v & ((1 << bits) - 1)


def ref_shift(kind):
    def ref(x, y):
        bits = 8 * x.dtype.itemsize

        def one(a, s):
            s = _as_unsigned(s, bits)
            if kind == "left":
                return 0 if s >= bits else a << s
            if kind == "logical":
                return 0 if s >= bits else _as_unsigned(a, bits) >> s
            signed = a - (1 << bits) if a >= 1 << (bits - 1) else a
            return (-1 if signed < 0 else 0) if s >= bits else signed >> s
        return _elementwise_int(one, x, y)
    return ref


def ref_popcount(x):
    bits = 8 * x.dtype.itemsize
    return _elementwise_int(lambda a: bin(_as_unsigned(a, bits)).count("1"), x)


def ref_clz(x):
    bits = 8 * x.dtype.itemsize
    return _elementwise_int(lambda a: bits - _as_unsigned(a, bits).bit_length(), x)


def ref_round_away(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)  # C round: -0.4 and -0.0 give -0.0


def ref_sign(x):
    if x.dtype.kind == "c":
        mag = np.abs(x)
        return np.where(mag == 0, 0, x / np.where(mag == 0, 1, mag))
    return np.sign(x)


def ref_complex_order(pick_max):
    def ref(x, y):
        if x.dtype.kind != "c":
            return np.maximum(x, y) if pick_max else np.minimum(x, y)
        x_first = (x.real > y.real) | ((x.real == y.real) & (x.imag >= y.imag))
        return np.where(x_first == pick_max, x, y)
    return ref


def ref_nextafter(x, y):
    """Step one ulp through the bit pattern (independent of np.nextafter)."""
    x, y = np.broadcast_arrays(x, y)
    uint = np.dtype(f"u{x.dtype.itemsize}")
    bits = np.array(x).view(uint).astype(np.int64)
    toward_larger_magnitude = (y > x) == (x > 0)
    stepped = np.where(toward_larger_magnitude, bits + 1, bits - 1).astype(uint).view(x.dtype)
    smallest = np.array(1, uint).view(x.dtype)
    from_zero = np.where(y > 0, smallest, -smallest)
    out = np.where(x == 0, from_zero, stepped)
    out = np.where(x == y, y, out)
    return np.where(np.isnan(x) | np.isnan(y), np.nan, out).astype(x.dtype)


def ref_integer_pow(y):
    def ref(x):
        if x.dtype.kind in "iu":
            return _elementwise_int(lambda a: a ** y, x)
        return x ** float(y)
    return ref


def ref_digamma(x):
    return np.where((x <= 0) & (x == np.floor(x)), np.nan, special.psi(x))


# --- lax records -------------------------------------------------------------------------------
# (name, fn, ref, dtypes, kind, out) for unary ops on all SHAPES
LAX_UNARY = [
    ("neg", lax.neg, np.negative, NUMBER, "normal", same),
    ("abs", lax.abs, np.abs, SIGNED + INEXACT, "normal", real_of),
    ("sign", lax.sign, ref_sign, NUMBER, "normal", same),
    ("floor", lax.floor, np.floor, FLOATS, "normal", same),
    ("ceil", lax.ceil, np.ceil, FLOATS, "normal", same),
    ("round", lax.round, ref_round_away, FLOATS, "normal", same),
    ("round_even", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), np.round,
     FLOATS, "normal", same),
    ("is_finite", lax.is_finite, np.isfinite, FLOATS, "normal", to_bool),
    ("exp", lax.exp, np.exp, INEXACT, "normal", same),
    ("exp2", lax.exp2, np.exp2, INEXACT, "normal", same),
    ("log", lax.log, np.log, INEXACT, "positive", same),
    ("log1p", lax.log1p, np.log1p, INEXACT, "positive", same),
    ("expm1", lax.expm1, np.expm1, INEXACT, "unit", same),
    ("sqrt", lax.sqrt, np.sqrt, INEXACT, "positive", same),
    ("rsqrt", lax.rsqrt, lambda x: 1 / np.sqrt(x), INEXACT, "positive", same),
    ("cbrt", lax.cbrt, np.cbrt, FLOATS, "normal", same),
    ("square", lax.square, np.square, NUMBER, "small", same),
    ("reciprocal", lax.reciprocal, lambda x: 1 / x, INEXACT, "nonzero", same),
    ("sin", lax.sin, np.sin, INEXACT, "normal", same),
    ("cos", lax.cos, np.cos, INEXACT, "normal", same),
    ("tan", lax.tan, np.tan, INEXACT, "unit", same),
    ("asin", lax.asin, np.arcsin, INEXACT, "unit", same),
    ("acos", lax.acos, np.arccos, INEXACT, "unit", same),
    ("atan", lax.atan, np.arctan, INEXACT, "normal", same),
    ("sinh", lax.sinh, np.sinh, INEXACT, "unit", same),
    ("cosh", lax.cosh, np.cosh, INEXACT, "unit", same),
    ("tanh", lax.tanh, np.tanh, INEXACT, "normal", same),
    ("asinh", lax.asinh, np.arcsinh, INEXACT, "normal", same),
    ("acosh", lax.acosh, np.arccosh, FLOATS, "ge1", same),
    ("atanh", lax.atanh, np.arctanh, INEXACT, "unit", same),
    ("logistic", lax.logistic, lambda x: 1 / (1 + np.exp(-x)), INEXACT, "normal", same),
    ("erf", lax.erf, special.erf, FLOATS, "normal", same),
    ("erfc", lax.erfc, special.erfc, FLOATS, "unit", same),
    ("erf_inv", lax.erf_inv, special.erfinv, FLOATS, "unit", same),
    ("lgamma", lax.lgamma, special.gammaln, FLOATS, "positive", same),
    ("digamma", lax.digamma, ref_digamma, FLOATS, "positive", same),
    ("real", lax.real, np.real, [C64], "normal", real_of),
    ("imag", lax.imag, np.imag, [C64], "normal", real_of),
    ("conj", lax.conj, np.conj, [F32, C64], "normal", complex_of),
    ("bitwise_not", lax.bitwise_not, np.invert, INTEGRAL, "normal", same),
    ("population_count", lax.population_count, ref_popcount, INTS, "normal", same),
    ("clz", lax.clz, ref_clz, INTS, "normal", same),
]
for _y in (0, 1, 2, 3, 7):
    LAX_UNARY.append((f"integer_pow_{_y}", lambda x, y=_y: lax.integer_pow(x, y),
                      ref_integer_pow(_y), NUMBER, "small", same))
for _y in (-1, -3):
    LAX_UNARY.append((f"integer_pow_{_y}", lambda x, y=_y: lax.integer_pow(x, y),
                      ref_integer_pow(_y), INEXACT, "nonzero", same))

LAX_BINARY = [
    ("add", lax.add, np.add, NUMBER, "normal", same),
    ("sub", lax.sub, np.subtract, NUMBER, "normal", same),
    ("mul", lax.mul, np.multiply, NUMBER, "normal", same),
    ("div", lax.div, ref_div, NUMBER, ("normal", "small"), same),
    ("rem", lax.rem, ref_rem, REALS, ("normal", "small"), same),
    ("max", lax.max, ref_complex_order(True), EVERY, "normal", same),
    ("min", lax.min, ref_complex_order(False), EVERY, "normal", same),
    ("pow", lax.pow, np.power, INEXACT, ("positive", "normal"), same),
    ("atan2", lax.atan2, np.arctan2, FLOATS, "normal", same),
    ("nextafter", lax.nextafter, ref_nextafter, FLOATS, "normal", same),
    ("eq", lax.eq, np.equal, EVERY, "small", to_bool),
    ("ne", lax.ne, np.not_equal, EVERY, "small", to_bool),
    ("lt", lax.lt, np.less, ORDERED, "small", to_bool),
    ("le", lax.le, np.less_equal, ORDERED, "small", to_bool),
    ("gt", lax.gt, np.greater, ORDERED, "small", to_bool),
    ("ge", lax.ge, np.greater_equal, ORDERED, "small", to_bool),
    ("bitwise_and", lax.bitwise_and, np.bitwise_and, INTEGRAL, "normal", same),
    ("bitwise_or", lax.bitwise_or, np.bitwise_or, INTEGRAL, "normal", same),
    ("bitwise_xor", lax.bitwise_xor, np.bitwise_xor, INTEGRAL, "normal", same),
    ("shift_left", lax.shift_left, ref_shift("left"), INTS, ("normal", "shift"), same),
    ("shift_right_logical", lax.shift_right_logical, ref_shift("logical"), INTS,
     ("normal", "shift"), same),
    ("shift_right_arithmetic", lax.shift_right_arithmetic, ref_shift("arithmetic"), INTS,
     ("normal", "shift"), same),
    ("complex", lax.complex, lambda x, y: x + 1j * y, [F32], "normal", complex_of),
]

LAX_RECORDS = (
    [rec(n, f, r, UNARY_SHAPES, d, kind=k, out=o, native=n in ("nextafter",))
     for n, f, r, d, k, o in LAX_UNARY]
    + [rec(n, f, r, LAX_BINARY_SHAPES, d, kind=k, out=o, native=n in ("nextafter",))
       for n, f, r, d, k, o in LAX_BINARY]
    + [
        rec("pow_int_exponent", lax.pow, lambda x, y: x ** y.astype(x.dtype),
            LAX_BINARY_SHAPES, INEXACT, kind=("positive", "exponent"),
            arg_dtypes=lambda d: (d, I32)),
        rec("clamp", lax.clamp, lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi),
            [((), s, ()) for s in SHAPES] + [((3, 4), (3, 4), (3, 4))], REALS + [BOOL],
            kind=("small", "normal", "small")),
        rec("select_n", lax.select_n, lambda c, a, b: np.where(c, b, a),
            [(s, s, s) for s in SHAPES] + [((), (3, 4), (3, 4))], EVERY,
            arg_dtypes=lambda d: (BOOL, d, d)),
        rec("select_n_int", lax.select_n, lambda c, a, b, e: np.choose(c, [a, b, e]),
            [(s, s, s, s) for s in SHAPES], NUMBER,
            kind=(lambda shape, dtype, rng: rng.integers(0, 3, shape).astype(I32),
                  "normal", "normal", "normal"),
            arg_dtypes=lambda d: (I32, d, d, d)),
        rec("convert_to_f32", lambda x: lax.convert_element_type(x, F32),
            lambda x: x.astype(F32), UNARY_SHAPES, EVERY, out=lambda d: F32, native=True),
        rec("convert_to_i8", lambda x: lax.convert_element_type(x, I8),
            lambda x: np.clip(np.trunc(x.real if x.dtype.kind == "c" else x.astype(F64)),
                              -128, 127).astype(I8),
            UNARY_SHAPES, [BOOL, I32, U8, F32, BF16, C64], kind="small", out=lambda d: I8),
        rec("convert_to_bool", lambda x: lax.convert_element_type(x, BOOL),
            lambda x: x != 0, UNARY_SHAPES, EVERY, kind="small", out=to_bool),
        rec("bitcast_f32_u32", lambda x: lax.bitcast_convert_type(x, U32),
            lambda x: x.view(U32), UNARY_SHAPES, [F32, I32], out=lambda d: U32, native=True),
    ])

# --- kiln.numpy records ------------------------------------------------------------------------
NP_UNARY = [
    ("negative", jnp.negative, np.negative, NUMBER, "normal", same),
    ("positive", jnp.positive, lambda x: x, EVERY, "normal", same),
    ("abs", jnp.abs, np.abs, EVERY, "normal", real_of),
    ("absolute", jnp.absolute, np.abs, EVERY, "normal", real_of),
    ("fabs", jnp.fabs, np.fabs, REALS, "normal", inexact),
    ("sign", jnp.sign, ref_sign, NUMBER, "normal", same),
    ("floor", jnp.floor, np.floor, [BOOL] + REALS, "normal", same),
    ("ceil", jnp.ceil, np.ceil, [BOOL] + REALS, "normal", same),
    ("trunc", jnp.trunc, np.trunc, [BOOL] + REALS, "normal", same),
    ("fix", jnp.fix, np.trunc, REALS, "normal", same),
    ("rint", jnp.rint, np.rint, EVERY, "normal", inexact),
    ("round", jnp.round, np.round, REALS + [C64], "normal", same),
    ("around_2", lambda x: jnp.around(x, 2), lambda x: np.round(x, 2), [F32, C64], "normal",
     same),
    ("round_1_small", lambda x: jnp.round(x, 1), lambda x: np.round(x, 1), [F16, BF16],
     "normal", same),
    ("sqrt", jnp.sqrt, np.sqrt, [BOOL] + INTS + INEXACT, "positive", inexact),
    ("cbrt", jnp.cbrt, np.cbrt, REALS, "normal", inexact),
    ("square", jnp.square, np.square, EVERY, "small", numeric),
    ("reciprocal", jnp.reciprocal, lambda x: 1 / x, INTS + INEXACT, "nonzero", inexact),
    ("exp", jnp.exp, np.exp, EVERY, "small", inexact),
    ("exp2", jnp.exp2, np.exp2, REALS + [C64], "small", inexact),
    ("expm1", jnp.expm1, np.expm1, REALS + [C64], "small", inexact),
    ("log", jnp.log, np.log, INTS + INEXACT, "positive", inexact),
    ("log2", jnp.log2, np.log2, INTS + INEXACT, "positive", inexact),
    ("log10", jnp.log10, np.log10, INTS + INEXACT, "positive", inexact),
    ("log1p", jnp.log1p, np.log1p, INTS + INEXACT, "positive", inexact),
    ("sin", jnp.sin, np.sin, EVERY, "normal", inexact),
    ("cos", jnp.cos, np.cos, EVERY, "normal", inexact),
    ("tan", jnp.tan, np.tan, INEXACT, "unit", inexact),
    ("arcsin", jnp.arcsin, np.arcsin, INEXACT, "unit", inexact),
    ("arccos", jnp.arccos, np.arccos, INEXACT, "unit", inexact),
    ("arctan", jnp.arctan, np.arctan, EVERY, "normal", inexact),
    ("sinh", jnp.sinh, np.sinh, REALS + [C64], "small", inexact),
    ("cosh", jnp.cosh, np.cosh, REALS + [C64], "small", inexact),
    ("tanh", jnp.tanh, np.tanh, EVERY, "normal", inexact),
    ("arcsinh", jnp.arcsinh, np.arcsinh, REALS + [C64], "normal", inexact),
    ("arccosh", jnp.arccosh, np.arccosh, FLOATS, "ge1", inexact),
    ("arctanh", jnp.arctanh, np.arctanh, INEXACT, "unit", inexact),
    ("deg2rad", jnp.deg2rad, np.deg2rad, REALS, "normal", inexact),
    ("radians", jnp.radians, np.radians, REALS, "normal", inexact),
    ("rad2deg", jnp.rad2deg, np.rad2deg, REALS, "normal", inexact),
    ("degrees", jnp.degrees, np.degrees, REALS, "normal", inexact),
    ("sinc", jnp.sinc, np.sinc, REALS, "normal", inexact),
    ("isnan", jnp.isnan, np.isnan, EVERY, "normal", to_bool),
    ("isinf", jnp.isinf, np.isinf, EVERY, "normal", to_bool),
    ("isfinite", jnp.isfinite, np.isfinite, EVERY, "normal", to_bool),
    ("isposinf", jnp.isposinf, np.isposinf, [BOOL] + REALS, "normal", to_bool),
    ("isneginf", jnp.isneginf, np.isneginf, [BOOL] + REALS, "normal", to_bool),
    ("signbit", jnp.signbit, np.signbit, [BOOL] + REALS, "normal", to_bool),
    ("real", jnp.real, np.real, EVERY, "normal", real_of),
    ("imag", jnp.imag, np.imag, EVERY, "normal", real_of),
    ("conj", jnp.conj, np.conj, EVERY, "normal", same),
    ("conjugate", jnp.conjugate, np.conjugate, EVERY, "normal", same),
    ("angle", jnp.angle, np.angle, EVERY, "normal", lambda d: real_of(inexact(d))),
    ("angle_deg", lambda x: jnp.angle(x, deg=True), lambda x: np.angle(x, deg=True),
     [F32, C64, I32], "normal", lambda d: real_of(inexact(d))),
    ("logical_not", jnp.logical_not, np.logical_not, EVERY, "small", to_bool),
    ("bitwise_not", jnp.bitwise_not, np.invert, INTEGRAL, "normal", same),
    ("invert", jnp.invert, np.invert, INTEGRAL, "normal", same),
    ("nan_to_num", jnp.nan_to_num, np.nan_to_num, EVERY, "normal", same),
    ("frexp", jnp.frexp, np.frexp, FLOATS, "normal", same),
    ("modf", jnp.modf, np.modf, FLOATS, "normal", same),
    ("power_3", lambda x: jnp.power(x, 3), lambda x: x ** 3, NUMBER, "small", same),
    ("power_0", lambda x: jnp.power(x, 0), lambda x: x ** 0, NUMBER, "small", same),
    ("clip", lambda x: jnp.clip(x, 1, 3), lambda x: np.clip(x, 1, 3), REALS, "normal", same),
    ("clip_signed", lambda x: jnp.clip(x, -1, 2), lambda x: np.clip(x, -1, 2), SIGNED + FLOATS,
     "normal", same),
    ("clip_min", lambda x: jnp.clip(x, min=0.5), lambda x: np.maximum(x, 0.5), FLOATS,
     "normal", same),
    ("clip_a_max", lambda x: jnp.clip(x, a_max=1), lambda x: np.minimum(x, 1), REALS,
     "normal", same),
    ("astype_f32", lambda x: x.astype(jnp.float32), lambda x: x.astype(F32), EVERY, "small",
     lambda d: F32),
    ("astype_u8", lambda x: jnp._astype(x, "uint8"), lambda x: x.astype(U8), INTEGRAL,
     "small", lambda d: U8),
]

NP_BINARY = [
    ("add", jnp.add, np.add, EVERY, "normal", same),
    ("subtract", jnp.subtract, np.subtract, NUMBER, "normal", same),
    ("multiply", jnp.multiply, np.multiply, EVERY, "normal", same),
    ("divide", jnp.divide, np.true_divide, REALS + [C64], ("normal", "nonzero"), inexact),
    ("true_divide", jnp.true_divide, np.true_divide, REALS + [C64], ("normal", "nonzero"),
     inexact),
    ("floor_divide", jnp.floor_divide, np.floor_divide, [BOOL] + REALS,
     ("normal", "nonzero"), numeric),
    ("remainder", jnp.remainder, np.remainder, [BOOL] + REALS, ("normal", "nonzero"),
     numeric),
    ("mod", jnp.mod, np.mod, REALS, ("normal", "nonzero"), numeric),
    ("fmod", jnp.fmod, np.fmod, [BOOL] + REALS, ("normal", "nonzero"), numeric),
    ("divmod", jnp.divmod, np.divmod, REALS, ("normal", "nonzero"), numeric),
    ("power", jnp.power, np.power, [BOOL] + INTS, ("small", "exponent"), numeric),
    ("power_float", jnp.power, np.power, INEXACT, ("positive", "normal"), same),
    ("float_power", jnp.float_power, np.float_power, REALS, ("positive", "small"),
     lambda d: F32),
    ("arctan2", jnp.arctan2, np.arctan2, REALS, "normal", inexact),
    ("hypot", jnp.hypot, np.hypot, REALS, "normal", inexact),
    ("logaddexp", jnp.logaddexp, np.logaddexp, REALS, "normal", inexact),
    ("logaddexp2", jnp.logaddexp2, np.logaddexp2, REALS, "normal", inexact),
    ("maximum", jnp.maximum, ref_complex_order(True), EVERY, "small", same),
    ("minimum", jnp.minimum, ref_complex_order(False), EVERY, "small", same),
    ("fmax", jnp.fmax, np.fmax, ORDERED, "small", same),
    ("fmin", jnp.fmin, np.fmin, ORDERED, "small", same),
    ("equal", jnp.equal, np.equal, EVERY, "small", to_bool),
    ("not_equal", jnp.not_equal, np.not_equal, EVERY, "small", to_bool),
    ("less", jnp.less, np.less, ORDERED, "small", to_bool),
    ("less_equal", jnp.less_equal, np.less_equal, ORDERED, "small", to_bool),
    ("greater", jnp.greater, np.greater, ORDERED, "small", to_bool),
    ("greater_equal", jnp.greater_equal, np.greater_equal, ORDERED, "small", to_bool),
    ("logical_and", jnp.logical_and, np.logical_and, EVERY, "small", to_bool),
    ("logical_or", jnp.logical_or, np.logical_or, EVERY, "small", to_bool),
    ("logical_xor", jnp.logical_xor, np.logical_xor, EVERY, "small", to_bool),
    ("bitwise_and", jnp.bitwise_and, np.bitwise_and, INTEGRAL, "normal", same),
    ("bitwise_or", jnp.bitwise_or, np.bitwise_or, INTEGRAL, "normal", same),
    ("bitwise_xor", jnp.bitwise_xor, np.bitwise_xor, INTEGRAL, "normal", same),
    ("left_shift", jnp.left_shift, ref_shift("left"), INTS, ("normal", "shift"), same),
    ("right_shift", jnp.right_shift,
     lambda x, y: ref_shift("logical" if x.dtype.kind == "u" else "arithmetic")(x, y),
     INTS, ("normal", "shift"), same),
    ("copysign", jnp.copysign, np.copysign, REALS, "normal", inexact),
    ("nextafter", jnp.nextafter, ref_nextafter, FLOATS, "normal", same),
    ("heaviside", jnp.heaviside, np.heaviside, REALS, "small", inexact),
    ("gcd", jnp.gcd, np.gcd, INTS, "normal", same),
    ("lcm", jnp.lcm, np.lcm, INTS, "small", same),
    ("ldexp", jnp.ldexp, np.ldexp, FLOATS, ("normal", "small"), same),
    ("isclose", jnp.isclose, np.isclose, REALS + [C64], "small", to_bool),
    ("allclose", jnp.allclose, np.allclose, REALS + [C64], "small", to_bool),
    ("array_equal", jnp.array_equal, np.array_equal, EVERY, "small", to_bool),
    ("array_equiv", jnp.array_equiv, np.array_equiv, EVERY, "small", to_bool),
]

NP_RECORDS = (
    [rec(n, f, r, UNARY_SHAPES, d, kind=k, out=o, native=n in ("nan_to_num", "frexp"))
     for n, f, r, d, k, o in NP_UNARY]
    + [rec(n, f, r, NP_BINARY_SHAPES, d, kind=k, out=o,
           native=n in ("nextafter", "ldexp", "isclose", "allclose"),
           arg_dtypes=(lambda d: (d, I32)) if n == "ldexp" else None)
       for n, f, r, d, k, o in NP_BINARY]
    + [
        rec("where", jnp.where, np.where,
            [(s, s, s) for s in SHAPES] + [((3, 1), (1, 4), ()), ((), (2, 3), (3,))], EVERY,
            kind=("small", "normal", "normal")),
        rec("select", lambda c1, c2, a, b: jnp.select([c1, c2], [a, b], -1),
            lambda c1, c2, a, b: np.select([c1, c2], [a, b], -1),
            [(s, s, s, s) for s in SHAPES] + [((3, 1), (1, 4), (), (3, 4))], REALS,
            arg_dtypes=lambda d: (BOOL, BOOL, d, d)),
        rec("piecewise", lambda x: jnp.piecewise(x, [x < 0, x > 1], [lambda v: -v, 1.0, 0.5]),
            lambda x: np.piecewise(x, [x < 0, x > 1], [lambda v: -v, 1.0, 0.5]),
            UNARY_SHAPES, FLOATS, native=True),
    ])

ALL_RECORDS = LAX_RECORDS + NP_RECORDS
for _r in LAX_RECORDS:
    _r.label = f"lax.{_r.name}"
for _r in NP_RECORDS:
    _r.label = f"jnp.{_r.name}"


def _cases(records):
    return [pytest.param(r, np.dtype(d), id=f"{r.name}-{np.dtype(d).name}")
            for r in records for d in r.dtypes]


@pytest.mark.parametrize("record,dtype", _cases(LAX_RECORDS))
def test_lax_op_against_reference(record, dtype):
    check_eager(record, dtype)


@pytest.mark.parametrize("record,dtype", _cases(NP_RECORDS))
def test_numpy_function_against_reference(record, dtype):
    check_eager(record, dtype)


def test_every_public_name_has_a_record():
    from kiln.primitives import elementwise, elementwise_math
    from kiln.numpy import ufuncs
    covered = {r.name.split("_")[0] for r in ALL_RECORDS} | {r.name for r in ALL_RECORDS}
    extra = {"RoundingMethod", "select", "convert_element_type", "bitcast_convert_type",
             "integer_pow", "_astype", "true_divide", "around"}
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


@pytest.mark.parametrize("record", ALL_RECORDS, ids=lambda r: r.label)
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
            assert (e.dtype, e.shape, e.weak_type) == (aval.dtype, aval.shape, aval.weak_type), \
                (record.name, e.aval, aval)
        traced = eval_closed_jaxpr(closed, *call_args)
        for e, t in zip(flat, traced):
            np.testing.assert_array_equal(np.asarray(t), np.asarray(e))


# JAX's results for Python-scalar arguments: (function, args, dtype, weak_type), from jax 0.10.
PYTHON_SCALAR_RESULTS = [
    (jnp.add, (1.5, 2.5), F32, True), (jnp.add, (3, 2), I32, True),
    (jnp.add, (True, False), BOOL, False), (jnp.add, (3, 2.5), F32, True),
    (jnp.add, (True, 1), I32, True), (jnp.multiply, (True, 2.0), F32, True),
    (jnp.divide, (3, 2), F32, True), (jnp.divide, (True, False), F32, False),
    (jnp.floor_divide, (True, False), I32, False), (jnp.floor_divide, (3, 2.5), F32, True),
    (jnp.power, (3, 2), I32, True), (jnp.power, (1.5, 2.5), F32, True),
    (jnp.float_power, (3, 2), F32, True), (jnp.sqrt, (3,), F32, True),
    (jnp.sqrt, (True,), F32, False), (jnp.square, (True,), I32, False),
    (jnp.rint, (3,), F32, False), (jnp.rint, (1.5,), F32, True),
    (jnp.round, (1.5,), F32, True), (jnp.log2, (1.5,), F32, False),
    (jnp.deg2rad, (1.5,), F32, True), (jnp.sinc, (1.5,), F32, True),
    (jnp.isnan, (1.5,), BOOL, True), (jnp.isinf, (1.5,), BOOL, False),
    (jnp.isfinite, (1.5,), BOOL, True), (jnp.isfinite, (3,), BOOL, False),
    (jnp.signbit, (3,), BOOL, False), (jnp.equal, (1.5, 2.5), BOOL, True),
    (jnp.less, (3, 2), BOOL, True), (jnp.logical_and, (3, 2), BOOL, True),
    (jnp.logical_not, (1.5,), BOOL, True), (jnp.imag, (1.5,), F32, True),
    (jnp.angle, (1.5,), F32, False), (jnp.nan_to_num, (1.5,), F32, False),
    (jnp.nan_to_num, (3,), I32, True), (jnp.isclose, (1.5, 2.5), BOOL, False),
    (jnp.hypot, (3, 2), F32, True), (jnp.copysign, (3, 2.5), F32, True),
    (jnp.ldexp, (3, 2), F32, False), (jnp.fabs, (True,), F32, False),
    (jnp.abs, (True,), BOOL, False), (jnp.positive, (3,), I32, True),
    (jnp.left_shift, (True, False), I32, False), (jnp.invert, (3,), I32, True),
    (lambda a, b: jnp.clip(a, 0, b), (1.5, 2), F32, True),
    (lambda a: jnp.where(True, a, 2.0), (1,), F32, True),
    (lax.sin, (1.5,), F32, True), (lax.eq, (1.5, 2.5), BOOL, True),
    (lax.integer_pow, (1.5, 3), F32, True),
]


@pytest.mark.parametrize("fn,args,dtype,weak", PYTHON_SCALAR_RESULTS,
                         ids=[f"{getattr(c[0], '__name__', 'fn')}-{i}"
                              for i, c in enumerate(PYTHON_SCALAR_RESULTS)])
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
    for r in ALL_RECORDS:
        dtypes_ = [np.dtype(d) for d in r.dtypes]
        picks = [d for d in (F32, I8, U32, BOOL, C64, BF16) if d in dtypes_][:2] or dtypes_[:1]
        cases += [pytest.param(r, d, id=f"{r.label}-{d.name}") for d in picks]
    return cases


@needs_jit
@pytest.mark.parametrize("record,dtype", _jit_cases())
def test_jit_matches_eager(record, dtype):
    shapes = next(s for s in record.shapes if all(len(x) >= 1 and 0 not in x for x in s)
                  or s == record.shapes[-1])
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
    ("neg", lax.neg, np.negative), ("abs", lax.abs, np.abs),
    ("sign", lax.sign, lambda x: np.where(x == 0, x, np.sign(x))),  # keeps -0.0, as XLA
    ("floor", lax.floor, np.floor), ("ceil", lax.ceil, np.ceil),
    ("round", lax.round, ref_round_away), ("is_finite", lax.is_finite, np.isfinite),
    ("exp", lax.exp, np.exp), ("exp2", lax.exp2, np.exp2), ("log", lax.log, np.log),
    ("log1p", lax.log1p, np.log1p), ("expm1", lax.expm1, np.expm1),
    ("sqrt", lax.sqrt, np.sqrt), ("rsqrt", lax.rsqrt, lambda x: 1 / np.sqrt(x)),
    ("cbrt", lax.cbrt, np.cbrt), ("sin", lax.sin, np.sin), ("cos", lax.cos, np.cos),
    ("tan", lax.tan, np.tan), ("asin", lax.asin, np.arcsin), ("acos", lax.acos, np.arccos),
    ("atan", lax.atan, np.arctan), ("sinh", lax.sinh, np.sinh), ("cosh", lax.cosh, np.cosh),
    ("tanh", lax.tanh, np.tanh), ("asinh", lax.asinh, np.arcsinh),
    ("acosh", lax.acosh, np.arccosh), ("atanh", lax.atanh, np.arctanh),
    ("logistic", lax.logistic, special.expit), ("erf", lax.erf, special.erf),
    ("erfc", lax.erfc, special.erfc), ("erf_inv", lax.erf_inv, special.erfinv),
    ("lgamma", lax.lgamma, special.gammaln), ("digamma", lax.digamma, ref_digamma),
    ("square", lax.square, np.square), ("reciprocal", lax.reciprocal, lambda x: 1 / x),
    ("jnp.trunc", jnp.trunc, np.trunc), ("jnp.rint", jnp.rint, np.rint),
    ("jnp.log2", jnp.log2, np.log2), ("jnp.log10", jnp.log10, np.log10),
    ("jnp.isnan", jnp.isnan, np.isnan), ("jnp.isinf", jnp.isinf, np.isinf),
    ("jnp.isposinf", jnp.isposinf, np.isposinf), ("jnp.isneginf", jnp.isneginf, np.isneginf),
    ("jnp.signbit", jnp.signbit, np.signbit), 
    # pi * 3e38 overflows in single precision, so JAX's sinc gives NaN there
    ("jnp.sinc", jnp.sinc, lambda x: np.where(np.abs(x) > 1e38, np.nan, np.sinc(x))),
    ("jnp.fabs", jnp.fabs, np.fabs), ("jnp.deg2rad", jnp.deg2rad, np.deg2rad),
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
        np.testing.assert_array_equal(np.signbit(actual[zeros].astype(F64)),
                                      np.signbit(expected[zeros].astype(F64)), err_msg=name)


def test_special_values_of_binary_functions():
    nan, inf = np.nan, np.inf
    x = jnp.array([nan, 1.0, inf, -inf, -0.0, 0.0, inf, 2.0])
    y = jnp.array([1.0, nan, inf, -inf, 0.0, -0.0, -inf, 0.0])
    np.testing.assert_array_equal(jnp.maximum(x, y), [nan, nan, inf, -inf, 0, 0, inf, 2])
    np.testing.assert_array_equal(jnp.fmax(x, y), [1, 1, inf, -inf, 0, 0, inf, 2])
    np.testing.assert_array_equal(jnp.fmin(x, y), [1, 1, inf, -inf, 0, 0, -inf, 0])
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(jnp.logaddexp(x, y),
                                      np.logaddexp(np.asarray(x), np.asarray(y)))
    np.testing.assert_array_equal(jnp.hypot(x, y), np.hypot(np.asarray(x), np.asarray(y)))
    np.testing.assert_array_equal(jnp.copysign(jnp.array([1.0, 1.0, nan]),
                                               jnp.array([-0.0, 0.0, -1.0])).tolist()[:2],
                                  [-1.0, 1.0])
    assert np.signbit(np.asarray(jnp.copysign(nan, -1.0)))
    np.testing.assert_array_equal(jnp.remainder(jnp.array([-7.0, 7.0, 1.0, -0.0, 5.0, -5.0]),
                                                jnp.array([2.0, -2.0, 0.0, 3.0, inf, inf])),
                                  [1.0, -1.0, nan, -0.0, 5.0, inf])
    np.testing.assert_array_equal(
        jnp.floor_divide(jnp.array([-7.0, 7.0, 1.0, -1.0, 0.0]),
                         jnp.array([2.0, -2.0, 0.0, 0.0, 0.0])), [-4, -4, inf, -inf, nan])
    np.testing.assert_array_equal(jnp.nextafter(jnp.array([1.0, 0.0, 0.0, 1.0]),
                                                jnp.array([2.0, 1.0, -1.0, 1.0])),
                                  np.nextafter(np.float32([1, 0, 0, 1]),
                                               np.float32([2, 1, -1, 1])))
    np.testing.assert_array_equal(lax.clamp(0.0, jnp.array([-1.0, 0.5, 2.0, nan]), 1.0),
                                  [0.0, 0.5, 1.0, nan])
    np.testing.assert_array_equal(jnp.heaviside(jnp.array([-1.0, 0.0, 2.0, nan]), 0.5),
                                  [0.0, 0.5, 1.0, 0.5])  # JAX: NaN takes x2, unlike NumPy
    np.testing.assert_array_equal(jnp.modf(jnp.array([-1.5, inf]))[0], [-0.5, nan])
    np.testing.assert_array_equal(
        jnp.nan_to_num(jnp.array([nan, inf, -inf], jnp.float16)),
        np.array([0, 65504, -65504], np.float16))
    np.testing.assert_array_equal(jnp.nan_to_num(jnp.array([nan, inf]), nan=1.0, posinf=2.0),
                                  [1.0, 2.0])
    out = jnp.nan_to_num(jnp.array([complex(nan, inf)], jnp.complex64))
    assert out.dtype == C64 and out.tolist() == [complex(0, np.finfo(np.float32).max)]


def test_isclose_infinities_and_nans():
    nan, inf = np.nan, np.inf
    a = jnp.array([1.0, nan, inf, inf, 1e10])
    b = jnp.array([1.000001, nan, inf, -inf, 1.000001e10])
    np.testing.assert_array_equal(jnp.isclose(a, b), [True, False, True, False, True])
    np.testing.assert_array_equal(jnp.isclose(a, b, equal_nan=True),
                                  [True, True, True, False, True])
    assert bool(jnp.allclose(a[:1], b[:1])) and not bool(jnp.allclose(a, b))


def test_round_ties_and_decimals():
    x = jnp.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997])
    np.testing.assert_array_equal(lax.round(x), [1, 2, 3, -1, -3, 0])
    np.testing.assert_array_equal(lax.round(x, 1), [0, 2, 2, -0.0, -2, 0])
    np.testing.assert_array_equal(jnp.round(x), [0, 2, 2, -0.0, -2, 0])
    assert np.signbit(np.asarray(jnp.round(x)))[3]
    np.testing.assert_allclose(jnp.round(jnp.array([1.25, 2.5, -0.5, 0.125]), 1),
                               [1.2, 2.5, -0.5, 0.1], rtol=1e-6)
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
        np.testing.assert_array_equal(big, np.ldexp(np.float32([1, 3, 1.5, 1e-45, 2]),
                                                    [3, -200, -149, 276, 200]))
    for dtype in (F16, BF16):
        v = np.array([1.5, -0.25, 1000, 6e-8], dtype)
        m, e = jnp.frexp(jnp.asarray(v))
        np.testing.assert_array_equal(np.asarray(m).astype(F64) * 2.0 ** np.asarray(e),
                                      v.astype(F64))
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
    np.testing.assert_array_equal(lax.div(big, jnp.array([-1, -4], jnp.int32)),
                                  [np.iinfo(np.int32).min, -2])


def test_integer_div_and_rem_int64_with_x64():
    kiln.config.update("jax_enable_x64", True)
    try:
        lo = np.iinfo(np.int64).min
        x = jnp.array([lo, lo, -7, 7, 5], jnp.int64)
        y = jnp.array([-1, 3, 2, 0, -3], jnp.int64)
        assert x.dtype == I64
        np.testing.assert_array_equal(lax.div(x, y), [lo, _c_div(lo, 3), -3, -1, -1])
        np.testing.assert_array_equal(lax.rem(x, y), [0, _c_rem(lo, 3), -1, 7, 2])
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
    np.testing.assert_array_equal(lax.shift_right_logical(jnp.array([-128], jnp.int8),
                                                          jnp.array([7], jnp.int8)), [1])
    np.testing.assert_array_equal(jnp.right_shift(jnp.array([128, 255], jnp.uint8),
                                                  jnp.array([8, 1], jnp.uint8)), [0, 127])
    out = jnp.left_shift(jnp.array([1], jnp.uint8), jnp.array([1], jnp.int8))
    assert out.dtype == I16 and out.tolist() == [2]


def test_bit_counting():
    x = jnp.array([0, 1, -1, 64, -128], jnp.int8)
    np.testing.assert_array_equal(lax.population_count(x), [0, 1, 8, 1, 1])
    np.testing.assert_array_equal(lax.clz(x), [8, 7, 0, 1, 0])
    u = jnp.array([0, 1, 2 ** 31, 2 ** 32 - 1], jnp.uint32)
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
        jnp.gcd(jnp.array([12, -12, 0, 7, -20], jnp.int8), jnp.array([18, 18, 0, 0, -8],
                                                                      jnp.int8)),
        [6, 6, 0, 7, 4])
    np.testing.assert_array_equal(jnp.lcm(jnp.array([4, -4, 0, 7]), jnp.array([6, 6, 5, 0])),
                                  [12, 12, 0, 0])
    traced = kiln.make_jaxpr(jnp.gcd)(jnp.array([12, 7]), jnp.array([18, 21]))
    np.testing.assert_array_equal(eval_closed_jaxpr(traced, jnp.array([12, 7]),
                                                    jnp.array([18, 21]))[0], [6, 7])
    for bad in ((jnp.array([1.0]), jnp.array([2.0])), (jnp.array([True]), jnp.array([True]))):
        with pytest.raises(ValueError, match="integers"):
            jnp.gcd(*bad)


def test_convert_element_type_saturates():
    x = jnp.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 3.9, -3.9, 255.5])
    np.testing.assert_array_equal(lax.convert_element_type(x, I8), [0, 127, -128, 127, -128,
                                                                    3, -3, 127])
    np.testing.assert_array_equal(lax.convert_element_type(x, U8), [0, 255, 0, 255, 0, 3, 0,
                                                                    255])
    np.testing.assert_array_equal(lax.convert_element_type(x, I32),
                                  [0, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1, -2 ** 31, 3, -3, 255])
    np.testing.assert_array_equal(lax.convert_element_type(jnp.array([0.0, -0.0, np.nan]),
                                                           BOOL), [False, False, True])
    assert lax.convert_element_type(jnp.array([1 + 2j]), F32).tolist() == [1.0]


# --- bad input ---------------------------------------------------------------------------------

def test_lists_are_rejected():
    for fn in (jnp.add, jnp.maximum, jnp.arctan2, jnp.where):
        args = ([1, 2], jnp.array([1, 2]), jnp.array([1, 2]))[:2 if fn is not jnp.where else 3]
        with pytest.raises(TypeError, match="list"):
            fn(*args)
    with pytest.raises(TypeError):
        jnp.sin([1.0])


@pytest.mark.parametrize("call,error,match", [
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
    (lambda: lax.complex(jnp.ones(2, jnp.float16), jnp.ones(2, jnp.float16)), TypeError,
     "float32"),
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
])
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
        "    c:f32[] = clamp 0.0 b 1.0\n  in (c,) }")
    assert str(kiln.make_jaxpr(lax.abs)(1j)) == \
        "{ lambda ; a:c64[]. let b:f32[] = abs a in (b,) }"
    text = str(kiln.make_jaxpr(lambda x: jnp.floor_divide(x, 3))(jnp.arange(3)))
    for piece in ("div a 3", "sign a", "rem a 3", "select_n"):
        assert piece in text, text


def test_math_helpers_are_consistent():
    # sanity of the reference helpers themselves (so the table cannot pass vacuously)
    assert _c_div(-7, 2) == -3 and _c_rem(-7, 2) == -1 and _c_div(5, 0) == -1
    assert ref_round_away(np.array([2.5, -2.5, 0.4])).tolist() == [3, -3, 0]
    assert math.isnan(ref_digamma(np.array([0.0]))[0])

"""The op-record table: every op the tests check, as rows of one `OpRecord` type.

Each family (elementwise, shape, indexing, reductions, products, sorting, nn) builds its rows
here with the NumPy/SciPy references they are checked against; `ALL_RECORDS` is every row, so
a check that must hold for "every op" is one loop over it. The test modules take their rows
from the per-family views (`ELEMENTWISE_RECORDS`, `SHAPE_LAX_RECORDS`, ...). The harness that
draws arguments and compares results lives in tests/_testing.py.

Two flags say which later checks apply to a row. Both describe the row's function as written,
constants included, on real float inputs (a row that takes only complex numbers, such as
lax.real, as a map of pairs of reals); integer and bool dtypes are left to the value checks:

* `differentiable`: a finite-difference gradient check is meaningful. The function maps float
  arrays to float arrays and has a derivative almost everywhere that is not zero everywhere
  (relu, max, sort and abs qualify; floor, sign, comparisons, argsort, `full_like` and rows with
  an integer output such as frexp's exponent do not).
* `linear`: each output is linear in the float array arguments: jointly (add, concatenate,
  pad with a zero padding value, gather, scatter) or in each one while the others are held
  fixed (mul, dot, matmul, tensordot): the ops that reverse mode handles with transpose
  rules. Integer and bool arguments (indices, predicates, exponents) count as fixed. A function
  that adds a constant (padding with 1, `gather` with a fill value, `select` with a default)
  is affine, not linear. Every linear row is differentiable.

The flags are given per family by op name (`_mark`), so a new row states them where its
family's names are listed, and `_mark` rejects a name that no row has. Being a property of the
op, a flag holds for every row of it, degenerate ones included (an empty array, the variance of
a single number), where a derivative check has nothing to test.
"""

import warnings

import ml_dtypes
import numpy as np
from scipy import special

import kiln
import kiln.nn as nn
import kiln.numpy as jnp
from kiln import lax
from tests import _testing
from tests._testing import OpRecord

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
I8, I16, I32, I64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
U8, U16, U32 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32))
BOOL = np.dtype(np.bool_)

# dtype groups of the elementwise tables (the other families name theirs below)
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

SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4)]
UNARY_SHAPES = [(s,) for s in SHAPES]
LAX_BINARY_SHAPES = [(s, s) for s in SHAPES] + [((), (3, 4)), ((2, 3), ())]
NP_BINARY_SHAPES = [(s, s) for s in SHAPES] + [((3, 1), (1, 4)), ((), (2, 3))]


def _base_name(record: OpRecord) -> str:
    """The op a row checks, without the axis/keepdims variant its name may carry."""
    return record.name.split("-axis=")[0]


def _mark(records, family: str, *, differentiable=(), linear=()) -> list[OpRecord]:
    """Set the family and the flags of `records` by op name (see the module docstring); a
    linear op is differentiable too. Names that match no row are an error, so a renamed row
    cannot silently lose its flags."""
    names = {_base_name(r) for r in records}
    unknown = (set(differentiable) | set(linear)) - names
    assert not unknown, f"{family}: no rows named {sorted(unknown)}"
    for record in records:
        base = _base_name(record)
        record.family = family
        record.linear = base in linear
        record.differentiable = record.linear or base in differentiable
    return list(records)


def wide(x: np.ndarray) -> np.ndarray:
    """References compute floats in float64 and complex in complex128; integers stay exact."""
    if x.dtype.kind == "c":
        return x.astype(C128)
    if x.dtype in (F16, BF16, F32):
        return x.astype(F64)
    return x


def quiet(fn):
    """A NumPy reference without warnings (empty means, 0/0 in var, ...)."""

    def ref(*args, **kwargs):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)

    return ref


# =============================================================================================
# Elementwise: every lax wrapper and elementwise kiln.numpy function
# =============================================================================================

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


def rec(
    name,
    fn,
    ref,
    shapes,
    dtypes,
    kind="normal",
    out=same,
    tol=TOL,
    native=False,
    arg_dtypes=None,
    **kwargs,
):
    """An elementwise row; `native` references run on the arguments' own dtypes (not
    widened to float64)."""
    return OpRecord(
        name,
        fn,
        ref,
        shapes,
        dtypes,
        kind=kind,
        tol=tol,
        out_dtype=out,
        static_kwargs=kwargs,
        native=native,
        arg_dtypes=arg_dtypes,
    )


def _labelled(records, prefix: str) -> list[OpRecord]:
    """Prefix the labels of rows whose names the lax and kiln.numpy tables share."""
    for record in records:
        record.label = prefix + record.name
    return records


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
    return (
        np.array(out, dtype=np.int64 if dtype.kind == "i" else np.uint64)
        .astype(dtype)
        .reshape(arrays[0].shape)
    )


def c_div(a, b):
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_rem(a, b):
    if b == 0:
        return a
    return a - b * c_div(a, b)


def ref_div(x, y):
    if x.dtype.kind in "iu":
        return _elementwise_int(c_div, x, y)
    return x / y


def ref_rem(x, y):
    if x.dtype.kind in "iu":
        return _elementwise_int(c_rem, x, y)
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
            return _elementwise_int(lambda a: a**y, x)
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
    (
        "round_even",
        lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
        np.round,
        FLOATS,
        "normal",
        same,
    ),
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
    LAX_UNARY.append(
        (
            f"integer_pow_{_y}",
            lambda x, y=_y: lax.integer_pow(x, y),
            ref_integer_pow(_y),
            NUMBER,
            "small",
            same,
        )
    )
for _y in (-1, -3):
    LAX_UNARY.append(
        (
            f"integer_pow_{_y}",
            lambda x, y=_y: lax.integer_pow(x, y),
            ref_integer_pow(_y),
            INEXACT,
            "nonzero",
            same,
        )
    )

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
    (
        "shift_right_logical",
        lax.shift_right_logical,
        ref_shift("logical"),
        INTS,
        ("normal", "shift"),
        same,
    ),
    (
        "shift_right_arithmetic",
        lax.shift_right_arithmetic,
        ref_shift("arithmetic"),
        INTS,
        ("normal", "shift"),
        same,
    ),
    ("complex", lax.complex, lambda x, y: x + 1j * y, [F32], "normal", complex_of),
]

_ELEMENTWISE_LAX_ROWS = (
    [
        rec(n, f, r, UNARY_SHAPES, d, kind=k, out=o, native=n in ("nextafter",))
        for n, f, r, d, k, o in LAX_UNARY
    ]
    + [
        rec(n, f, r, LAX_BINARY_SHAPES, d, kind=k, out=o, native=n in ("nextafter",))
        for n, f, r, d, k, o in LAX_BINARY
    ]
    + [
        rec(
            "pow_int_exponent",
            lax.pow,
            lambda x, y: x ** y.astype(x.dtype),
            LAX_BINARY_SHAPES,
            INEXACT,
            kind=("positive", "exponent"),
            arg_dtypes=lambda d: (d, I32),
        ),
        rec(
            "clamp",
            lax.clamp,
            lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi),
            [((), s, ()) for s in SHAPES] + [((3, 4), (3, 4), (3, 4))],
            REALS + [BOOL],
            kind=("small", "normal", "small"),
        ),
        rec(
            "select_n",
            lax.select_n,
            lambda c, a, b: np.where(c, b, a),
            [(s, s, s) for s in SHAPES] + [((), (3, 4), (3, 4))],
            EVERY,
            arg_dtypes=lambda d: (BOOL, d, d),
        ),
        rec(
            "select_n_int",
            lax.select_n,
            lambda c, a, b, e: np.choose(c, [a, b, e]),
            [(s, s, s, s) for s in SHAPES],
            NUMBER,
            kind=(
                lambda shape, dtype, rng: rng.integers(0, 3, shape).astype(I32),
                "normal",
                "normal",
                "normal",
            ),
            arg_dtypes=lambda d: (I32, d, d, d),
        ),
        rec(
            "convert_to_f32",
            lambda x: lax.convert_element_type(x, F32),
            lambda x: x.astype(F32),
            UNARY_SHAPES,
            EVERY,
            out=lambda d: F32,
            native=True,
        ),
        rec(
            "convert_to_i8",
            lambda x: lax.convert_element_type(x, I8),
            lambda x: np.clip(
                np.trunc(x.real if x.dtype.kind == "c" else x.astype(F64)), -128, 127
            ).astype(I8),
            UNARY_SHAPES,
            [BOOL, I32, U8, F32, BF16, C64],
            kind="small",
            out=lambda d: I8,
        ),
        rec(
            "convert_to_bool",
            lambda x: lax.convert_element_type(x, BOOL),
            lambda x: x != 0,
            UNARY_SHAPES,
            EVERY,
            kind="small",
            out=to_bool,
        ),
        rec(
            "bitcast_f32_u32",
            lambda x: lax.bitcast_convert_type(x, U32),
            lambda x: x.view(U32),
            UNARY_SHAPES,
            [F32, I32],
            out=lambda d: U32,
            native=True,
        ),
    ]
)

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
    ("around_2", lambda x: jnp.around(x, 2), lambda x: np.round(x, 2), [F32, C64], "normal", same),
    (
        "round_1_small",
        lambda x: jnp.round(x, 1),
        lambda x: np.round(x, 1),
        [F16, BF16],
        "normal",
        same,
    ),
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
    (
        "angle_deg",
        lambda x: jnp.angle(x, deg=True),
        lambda x: np.angle(x, deg=True),
        [F32, C64, I32],
        "normal",
        lambda d: real_of(inexact(d)),
    ),
    ("logical_not", jnp.logical_not, np.logical_not, EVERY, "small", to_bool),
    ("bitwise_not", jnp.bitwise_not, np.invert, INTEGRAL, "normal", same),
    ("invert", jnp.invert, np.invert, INTEGRAL, "normal", same),
    ("nan_to_num", jnp.nan_to_num, np.nan_to_num, EVERY, "normal", same),
    ("frexp", jnp.frexp, np.frexp, FLOATS, "normal", same),
    ("modf", jnp.modf, np.modf, FLOATS, "normal", same),
    ("power_3", lambda x: jnp.power(x, 3), lambda x: x**3, NUMBER, "small", same),
    ("power_0", lambda x: jnp.power(x, 0), lambda x: x**0, NUMBER, "small", same),
    ("clip", lambda x: jnp.clip(x, 1, 3), lambda x: np.clip(x, 1, 3), REALS, "normal", same),
    (
        "clip_signed",
        lambda x: jnp.clip(x, -1, 2),
        lambda x: np.clip(x, -1, 2),
        SIGNED + FLOATS,
        "normal",
        same,
    ),
    (
        "clip_min",
        lambda x: jnp.clip(x, min=0.5),
        lambda x: np.maximum(x, 0.5),
        FLOATS,
        "normal",
        same,
    ),
    (
        "clip_a_max",
        lambda x: jnp.clip(x, a_max=1),
        lambda x: np.minimum(x, 1),
        REALS,
        "normal",
        same,
    ),
    (
        "astype_f32",
        lambda x: x.astype(jnp.float32),
        lambda x: x.astype(F32),
        EVERY,
        "small",
        lambda d: F32,
    ),
    (
        "astype_u8",
        lambda x: jnp._astype(x, "uint8"),
        lambda x: x.astype(U8),
        INTEGRAL,
        "small",
        lambda d: U8,
    ),
]

NP_BINARY = [
    ("add", jnp.add, np.add, EVERY, "normal", same),
    ("subtract", jnp.subtract, np.subtract, NUMBER, "normal", same),
    ("multiply", jnp.multiply, np.multiply, EVERY, "normal", same),
    ("divide", jnp.divide, np.true_divide, REALS + [C64], ("normal", "nonzero"), inexact),
    ("true_divide", jnp.true_divide, np.true_divide, REALS + [C64], ("normal", "nonzero"), inexact),
    (
        "floor_divide",
        jnp.floor_divide,
        np.floor_divide,
        [BOOL] + REALS,
        ("normal", "nonzero"),
        numeric,
    ),
    ("remainder", jnp.remainder, np.remainder, [BOOL] + REALS, ("normal", "nonzero"), numeric),
    ("mod", jnp.mod, np.mod, REALS, ("normal", "nonzero"), numeric),
    ("fmod", jnp.fmod, np.fmod, [BOOL] + REALS, ("normal", "nonzero"), numeric),
    ("divmod", jnp.divmod, np.divmod, REALS, ("normal", "nonzero"), numeric),
    ("power", jnp.power, np.power, [BOOL] + INTS, ("small", "exponent"), numeric),
    ("power_float", jnp.power, np.power, INEXACT, ("positive", "normal"), same),
    ("float_power", jnp.float_power, np.float_power, REALS, ("positive", "small"), lambda d: F32),
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
    (
        "right_shift",
        jnp.right_shift,
        lambda x, y: ref_shift("logical" if x.dtype.kind == "u" else "arithmetic")(x, y),
        INTS,
        ("normal", "shift"),
        same,
    ),
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

_ELEMENTWISE_NUMPY_ROWS = (
    [
        rec(n, f, r, UNARY_SHAPES, d, kind=k, out=o, native=n in ("nan_to_num", "frexp"))
        for n, f, r, d, k, o in NP_UNARY
    ]
    + [
        rec(
            n,
            f,
            r,
            NP_BINARY_SHAPES,
            d,
            kind=k,
            out=o,
            native=n in ("nextafter", "ldexp", "isclose", "allclose"),
            arg_dtypes=(lambda d: (d, I32)) if n == "ldexp" else None,
        )
        for n, f, r, d, k, o in NP_BINARY
    ]
    + [
        rec(
            "where",
            jnp.where,
            np.where,
            [(s, s, s) for s in SHAPES] + [((3, 1), (1, 4), ()), ((), (2, 3), (3,))],
            EVERY,
            kind=("small", "normal", "normal"),
        ),
        rec(
            "select",
            lambda c1, c2, a, b: jnp.select([c1, c2], [a, b], -1),
            lambda c1, c2, a, b: np.select([c1, c2], [a, b], -1),
            [(s, s, s, s) for s in SHAPES] + [((3, 1), (1, 4), (), (3, 4))],
            REALS,
            arg_dtypes=lambda d: (BOOL, BOOL, d, d),
        ),
        rec(
            "piecewise",
            lambda x: jnp.piecewise(x, [x < 0, x > 1], [lambda v: -v, 1.0, 0.5]),
            lambda x: np.piecewise(x, [x < 0, x > 1], [lambda v: -v, 1.0, 0.5]),
            UNARY_SHAPES,
            FLOATS,
            native=True,
        ),
    ]
)

# Left out of both sets: piecewise-constant rows (floor, ceil, round, sign, integer_pow_0),
# rows with integer or bool results (comparisons, is_finite, conversions to integers), and the
# bit operations. nextafter moves one ulp off its first argument, so its slope there is 1.
# (lax.real and lax.imag take only complex numbers: linear maps of the pairs of reals.)
_LAX_LINEAR = {
    "neg",
    "real",
    "imag",
    "conj",
    "integer_pow_1",
    "add",
    "sub",
    "mul",
    "complex",
    "select_n",
    "select_n_int",
    "convert_to_f32",
}
_LAX_DIFFERENTIABLE = {
    "abs",
    "exp",
    "exp2",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "cbrt",
    "square",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "logistic",
    "erf",
    "erfc",
    "erf_inv",
    "lgamma",
    "digamma",
    "integer_pow_2",
    "integer_pow_3",
    "integer_pow_7",
    "integer_pow_-1",
    "integer_pow_-3",
    "div",
    "rem",
    "max",
    "min",
    "pow",
    "atan2",
    "nextafter",
    "pow_int_exponent",
    "clamp",
}
ELEMENTWISE_LAX_RECORDS = _mark(
    _labelled(_ELEMENTWISE_LAX_ROWS, "lax."),
    "elementwise",
    linear=_LAX_LINEAR,
    differentiable=_LAX_DIFFERENTIABLE,
)

# As for lax; also left out: imag and angle (constant on real input), frexp (an integer
# exponent), heaviside, power_0, and rounding to decimals. where's condition is a float
# argument, so where is differentiable but not linear.
_NUMPY_LINEAR = {
    "negative",
    "positive",
    "real",
    "conj",
    "conjugate",
    "deg2rad",
    "radians",
    "rad2deg",
    "degrees",
    "nan_to_num",
    "astype_f32",
    "add",
    "subtract",
    "multiply",
    "ldexp",
}
_NUMPY_DIFFERENTIABLE = {
    "abs",
    "absolute",
    "fabs",
    "sqrt",
    "cbrt",
    "square",
    "reciprocal",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "sinh",
    "cosh",
    "tanh",
    "arcsinh",
    "arccosh",
    "arctanh",
    "sinc",
    "modf",
    "power_3",
    "clip",
    "clip_signed",
    "clip_min",
    "clip_a_max",
    "divide",
    "true_divide",
    "remainder",
    "mod",
    "fmod",
    "divmod",
    "power_float",
    "float_power",
    "arctan2",
    "hypot",
    "logaddexp",
    "logaddexp2",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "copysign",
    "nextafter",
    "where",
    "select",
    "piecewise",
}
ELEMENTWISE_NUMPY_RECORDS = _mark(
    _labelled(_ELEMENTWISE_NUMPY_ROWS, "jnp."),
    "elementwise",
    linear=_NUMPY_LINEAR,
    differentiable=_NUMPY_DIFFERENTIABLE,
)
ELEMENTWISE_RECORDS = ELEMENTWISE_LAX_RECORDS + ELEMENTWISE_NUMPY_RECORDS


# =============================================================================================
# Shapes: the shape primitives (every dtype) and kiln.numpy array manipulation
# =============================================================================================

# Shape ops do not look at values, so one dtype per family (plus the narrow floats) suffices
# for the kiln.numpy tables; the primitives get every dtype.
SAMPLE = [
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.uint16,
        np.int32,
        np.float16,
        ml_dtypes.bfloat16,
        np.float32,
        np.complex64,
    )
]


def one(*shapes):
    """Argument-shape tuples for single-argument records."""
    return [(s,) for s in shapes]


# --- NumPy references that NumPy does not have ---------------------------------------------------


def np_pad_reference(x, value, config):
    """lax.pad by index arithmetic: output position o along a dimension reads operand element
    (o - lo) / (interior + 1) when that is a whole in-range number, else the padding value."""
    out = np.asarray(value, dtype=x.dtype)[()]
    sources = []
    for d, (lo, hi, interior) in zip(x.shape, config):
        size = lo + hi + d + max(d - 1, 0) * interior
        src = []
        for o in range(size):
            s = o - lo
            src.append(
                s // (interior + 1)
                if s >= 0 and s % (interior + 1) == 0 and s // (interior + 1) < d
                else -1
            )
        sources.append(np.array(src, dtype=np.int64))
    result = np.full([len(s) for s in sources], out, dtype=x.dtype)
    for index in np.ndindex(*result.shape):
        src = tuple(sources[k][i] for k, i in enumerate(index))
        if all(s >= 0 for s in src):
            result[index] = x[src]
    return result


def np_repeat_total(x, repeats, total, axis):
    """JAX's total_repeat_length: cut the repeated array to `total`, or extend it with copies
    of the last element along `axis`."""
    out = np.repeat(x, repeats, axis)
    have = out.shape[axis]
    if total <= have:
        return np.take(out, np.arange(total), axis)
    last = np.take(x, [x.shape[axis] - 1], axis)
    return np.concatenate([out] + [last] * (total - have), axis)


def _pad_config(shape, lo, hi, interior):
    return [(lo if d > -lo else 0, hi if d > -hi else 0, interior) for d in shape]


# --- primitive records -------------------------------------------------------------------------

_SHAPE_LAX_ROWS = [
    OpRecord(
        "broadcast_in_dim",
        lambda x: lax.broadcast_in_dim(x, (2,) + x.shape, tuple(range(1, x.ndim + 1))),
        lambda x: np.broadcast_to(x, (2,) + x.shape),
        one((), (0,), (3,), (3, 4)),
        _testing.ALL,
    ),
    OpRecord(
        "broadcast_in_dim_stretch",
        lambda x: lax.broadcast_in_dim(x, (4, 3, 2), (0, 1)),
        lambda x: np.broadcast_to(x[:, :, None], (4, 3, 2)),
        one((1, 3), (4, 1)),
        _testing.ALL,
    ),
    OpRecord(
        "reshape",
        lambda x: lax.reshape(x, (x.size,)),
        lambda x: x.reshape(-1),
        one((), (0,), (3, 4), (2, 3, 4)),
        _testing.ALL,
    ),
    OpRecord(
        "reshape_dimensions",
        lambda x: lax.reshape(x, (x.size,), tuple(range(x.ndim - 1, -1, -1))),
        lambda x: np.transpose(x).reshape(-1),
        one((3, 4), (2, 3, 4), (2, 0)),
        _testing.ALL,
    ),
    OpRecord(
        "squeeze",
        lambda x: lax.squeeze(x, [i for i, d in enumerate(x.shape) if d == 1]),
        np.squeeze,
        one((1,), (1, 3, 1), (2, 1, 0), (3,)),
        _testing.ALL,
    ),
    OpRecord(
        "squeeze_negative",
        lambda x: lax.squeeze(x, (-1,)),
        lambda x: x[..., 0],
        one((3, 1), (1,)),
        _testing.ALL,
    ),
    OpRecord(
        "expand_dims",
        lambda x: lax.expand_dims(x, (0, -1)),
        lambda x: np.expand_dims(x, (0, -1)),
        one((), (0,), (3, 4)),
        _testing.ALL,
    ),
    OpRecord(
        "transpose",
        lambda x: lax.transpose(x, tuple(range(x.ndim - 1, -1, -1))),
        np.transpose,
        one((3, 4), (2, 3, 4), (0, 2)),
        _testing.ALL,
    ),
    OpRecord(
        "transpose_cycle",
        lambda x: lax.transpose(x, (1, 2, 0)),
        lambda x: np.transpose(x, (1, 2, 0)),
        one((2, 3, 4)),
        _testing.ALL,
    ),
    OpRecord(
        "rev",
        lambda x: lax.rev(x, tuple(range(x.ndim))),
        np.flip,
        one((), (0,), (5,), (3, 4)),
        _testing.ALL,
    ),
    OpRecord(
        "rev_one_axis",
        lambda x: lax.rev(x, (1,)),
        lambda x: np.flip(x, 1),
        one((3, 4), (2, 3, 4)),
        _testing.ALL,
    ),
    OpRecord(
        "concatenate",
        lambda x, y: lax.concatenate([x, y], 0),
        lambda x, y: np.concatenate([x, y], 0),
        [((3,), (3,)), ((2, 3), (4, 3)), ((0, 3), (2, 3)), ((0,), (0,))],
        _testing.ALL,
    ),
    OpRecord(
        "concatenate_last",
        lambda x, y, z: lax.concatenate([x, y, z], x.ndim - 1),
        lambda x, y, z: np.concatenate([x, y, z], -1),
        [((2, 3), (2, 1), (2, 0)), ((1, 2, 3), (1, 2, 3), (1, 2, 3))],
        _testing.ALL,
    ),
    OpRecord(
        "pad",
        lambda x: lax.pad(x, 0, _pad_config(x.shape, 1, 2, 0)),
        lambda x: np_pad_reference(x, 0, _pad_config(x.shape, 1, 2, 0)),
        one((), (0,), (3,), (2, 3)),
        _testing.ALL,
    ),
    OpRecord(
        "pad_interior_negative",
        lambda x: lax.pad(x, 1, _pad_config(x.shape, -1, 1, 2)),
        lambda x: np_pad_reference(x, 1, _pad_config(x.shape, -1, 1, 2)),
        one((3,), (2, 3), (0, 2)),
        _testing.ALL,
    ),
    OpRecord(
        "slice",
        lambda x: lax.slice(x, [min(1, d) for d in x.shape], x.shape, [2] * x.ndim),
        lambda x: x[tuple(slice(min(1, d), d, 2) for d in x.shape)],
        one((), (0,), (5,), (3, 4), (2, 3, 4)),
        _testing.ALL,
    ),
    OpRecord(
        "slice_unit_strides",
        lambda x: lax.slice(x, (0, 1), (2, 3)),
        lambda x: x[0:2, 1:3],
        one((3, 4), (2, 3)),
        _testing.ALL,
    ),
    OpRecord(
        "slice_in_dim",
        lambda x: lax.slice_in_dim(x, 1, -1, 1, axis=-1),
        lambda x: x[..., 1:-1],
        one((5,), (3, 4)),
        _testing.ALL,
    ),
    OpRecord(
        "index_in_dim",
        lambda x: lax.index_in_dim(x, -1, 0, keepdims=False),
        lambda x: x[-1],
        one((5,), (3, 4)),
        _testing.ALL,
    ),
    OpRecord(
        "index_in_dim_keepdims",
        lambda x: lax.index_in_dim(x, 1, 1),
        lambda x: x[:, 1:2],
        one(
            (3, 4),
        ),
        _testing.ALL,
    ),
    OpRecord(
        "collapse",
        lambda x: lax.collapse(x, 1),
        lambda x: x.reshape(x.shape[0], -1),
        one((2, 3, 4), (2, 0, 3)),
        _testing.ALL,
    ),
    OpRecord(
        "broadcast",
        lambda x: lax.broadcast(x, (2, 1)),
        lambda x: np.broadcast_to(x, (2, 1) + x.shape),
        one((), (3,)),
        _testing.ALL,
    ),
    OpRecord(
        "broadcast_to_rank",
        lambda x: lax.broadcast_to_rank(x, 3),
        lambda x: x.reshape((1,) * (3 - x.ndim) + x.shape),
        one((), (3,), (2, 3, 4)),
        _testing.ALL,
    ),
    OpRecord("copy", lax.copy, np.copy, one((), (0,), (3, 4)), _testing.ALL),
    OpRecord(
        "full_like",
        lambda x: lax.full_like(x, 1),
        np.ones_like,
        one((), (0,), (3, 4)),
        _testing.ALL,
    ),
]


# --- kiln.numpy records ----------------------------------------------------------------------


def _square(n):
    return ((n, n),)


_SHAPE_NUMPY_ROWS = [
    OpRecord(
        "reshape",
        lambda x: jnp.reshape(x, (-1, x.shape[-1]) if x.ndim else (1,)),
        lambda x: np.reshape(x, (-1, x.shape[-1]) if x.ndim else (1,)),
        one((), (0, 2), (3, 4), (2, 3, 4)),
        SAMPLE,
    ),
    OpRecord(
        "reshape_F",
        lambda x: jnp.reshape(x, (x.shape[-1], -1), order="F"),
        lambda x: np.reshape(x, (x.shape[-1], -1), order="F"),
        one((3, 4), (2, 3, 4)),
        SAMPLE,
    ),
    OpRecord(
        "reshape_method",
        lambda x: x.reshape(x.size),
        lambda x: x.reshape(x.size),
        one(
            (3, 4),
        ),
        SAMPLE,
    ),
    OpRecord("ravel", jnp.ravel, np.ravel, one((), (0,), (3, 4)), SAMPLE),
    OpRecord(
        "ravel_F",
        lambda x: jnp.ravel(x, order="F"),
        lambda x: np.ravel(x, order="F"),
        one(
            (3, 4),
        ),
        SAMPLE,
    ),
    OpRecord("transpose", jnp.transpose, np.transpose, one((), (3,), (3, 4), (2, 3, 4)), SAMPLE),
    OpRecord(
        "transpose_axes",
        lambda x: jnp.transpose(x, (1, -1, 0)),
        lambda x: np.transpose(x, (1, -1, 0)),
        one((2, 3, 4), (0, 2, 3)),
        SAMPLE,
    ),
    OpRecord(
        "T",
        lambda x: x.T,
        lambda x: x.T,
        one(
            (3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "permute_dims",
        lambda x: jnp.permute_dims(x, (1, 0)),
        lambda x: np.transpose(x, (1, 0)),
        one(
            (3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "moveaxis",
        lambda x: jnp.moveaxis(x, 0, -1),
        lambda x: np.moveaxis(x, 0, -1),
        one((3,), (3, 4), (2, 3, 4)),
        SAMPLE,
    ),
    OpRecord(
        "moveaxis_many",
        lambda x: jnp.moveaxis(x, (0, 1), (2, 0)),
        lambda x: np.moveaxis(x, (0, 1), (2, 0)),
        one(
            (2, 3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "swapaxes",
        lambda x: jnp.swapaxes(x, 0, -1),
        lambda x: np.swapaxes(x, 0, -1),
        one((3, 4), (2, 3, 4)),
        SAMPLE,
    ),
    OpRecord(
        "rollaxis",
        lambda x: jnp.rollaxis(x, 2, 1),
        lambda x: np.rollaxis(x, 2, 1),
        one(
            (2, 3, 4),
        ),
        SAMPLE,
    ),
    OpRecord("squeeze", jnp.squeeze, np.squeeze, one((), (1,), (1, 3, 1), (3, 4)), SAMPLE),
    OpRecord(
        "squeeze_axis",
        lambda x: jnp.squeeze(x, -1),
        lambda x: np.squeeze(x, -1),
        one((3, 1), (1, 1)),
        SAMPLE,
    ),
    OpRecord(
        "expand_dims",
        lambda x: jnp.expand_dims(x, 1),
        lambda x: np.expand_dims(x, 1),
        one((3,), (3, 4), (0,)),
        SAMPLE,
    ),
    OpRecord(
        "expand_dims_tuple",
        lambda x: jnp.expand_dims(x, (0, 2)),
        lambda x: np.expand_dims(x, (0, 2)),
        one((3,), (2, 3)),
        SAMPLE,
    ),
    OpRecord("atleast_1d", jnp.atleast_1d, np.atleast_1d, one((), (3,), (2, 3)), SAMPLE),
    OpRecord("atleast_2d", jnp.atleast_2d, np.atleast_2d, one((), (3,), (2, 3)), SAMPLE),
    OpRecord("atleast_3d", jnp.atleast_3d, np.atleast_3d, one((), (3,), (2, 3), (1, 2, 3)), SAMPLE),
    OpRecord(
        "atleast_1d_many",
        lambda x, y: jnp.atleast_1d(x, y),
        lambda x, y: np.atleast_1d(x, y),
        [((), (2,))],
        SAMPLE,
    ),
    OpRecord(
        "broadcast_to",
        lambda x: jnp.broadcast_to(x, (2, 3, 4)),
        lambda x: np.broadcast_to(x, (2, 3, 4)),
        one((), (4,), (3, 1), (1, 3, 4)),
        SAMPLE,
    ),
    OpRecord(
        "broadcast_arrays",
        jnp.broadcast_arrays,
        np.broadcast_arrays,
        [((3, 1), (4,)), ((), (2, 2)), ((0, 1), (1, 5))],
        SAMPLE,
    ),
    OpRecord(
        "concatenate",
        lambda x, y: jnp.concatenate([x, y]),
        lambda x, y: np.concatenate([x, y]),
        [((3,), (2,)), ((2, 3), (0, 3))],
        SAMPLE,
    ),
    OpRecord(
        "concatenate_axis",
        lambda x, y: jnp.concatenate((x, y), axis=-1),
        lambda x, y: np.concatenate((x, y), axis=-1),
        [((2, 3), (2, 2))],
        SAMPLE,
    ),
    OpRecord(
        "concatenate_none",
        lambda x, y: jnp.concatenate([x, y], axis=None),
        lambda x, y: np.concatenate([x, y], axis=None),
        [((2, 3), (4,)), ((), ())],
        SAMPLE,
    ),
    OpRecord(
        "concatenate_array",
        lambda x: jnp.concatenate(x, axis=1),
        lambda x: np.concatenate(x, axis=1),
        one(
            (2, 3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "concat",
        lambda x, y: jnp.concat([x, y], axis=1),
        lambda x, y: np.concatenate([x, y], axis=1),
        [((2, 3), (2, 1))],
        SAMPLE,
    ),
    OpRecord(
        "stack",
        lambda x, y: jnp.stack([x, y]),
        lambda x, y: np.stack([x, y]),
        [((), ()), ((3,), (3,)), ((0, 2), (0, 2))],
        SAMPLE,
    ),
    OpRecord(
        "stack_axis",
        lambda x, y: jnp.stack((x, y), axis=-1),
        lambda x, y: np.stack((x, y), axis=-1),
        [((2, 3), (2, 3))],
        SAMPLE,
    ),
    OpRecord(
        "stack_array",
        lambda x: jnp.stack(x, axis=1),
        lambda x: np.stack(x, axis=1),
        one(
            (2, 3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "hstack",
        lambda x, y: jnp.hstack([x, y]),
        lambda x, y: np.hstack([x, y]),
        [((), (2,)), ((3,), (2,)), ((2, 3), (2, 1))],
        SAMPLE,
    ),
    OpRecord(
        "vstack",
        lambda x, y: jnp.vstack([x, y]),
        lambda x, y: np.vstack([x, y]),
        [((3,), (3,)), ((2, 3), (3,)), ((), ())],
        SAMPLE,
    ),
    OpRecord(
        "dstack",
        lambda x, y: jnp.dstack([x, y]),
        lambda x, y: np.dstack([x, y]),
        [((3,), (3,)), ((2, 3), (2, 3)), ((), ())],
        SAMPLE,
    ),
    OpRecord(
        "column_stack",
        lambda x, y: jnp.column_stack([x, y]),
        lambda x, y: np.column_stack([x, y]),
        [((3,), (3,)), ((3, 2), (3,))],
        SAMPLE,
    ),
    OpRecord(
        "block",
        lambda a, b, c, d: jnp.block([[a, b], [c, d]]),
        lambda a, b, c, d: np.block([[a, b], [c, d]]),
        [((2, 2), (2, 3), (1, 2), (1, 3)), ((), (), (), ())],
        SAMPLE,
    ),
    OpRecord(
        "split",
        lambda x: jnp.split(x, 2),
        lambda x: np.split(x, 2),
        one((4,), (6, 2), (0,)),
        SAMPLE,
    ),
    OpRecord(
        "split_indices",
        lambda x: jnp.split(x, [1, 4, 3], axis=-1),
        lambda x: np.split(x, [1, 4, 3], axis=-1),
        one((5,), (2, 6)),
        SAMPLE,
    ),
    OpRecord(
        "array_split",
        lambda x: jnp.array_split(x, 3),
        lambda x: np.array_split(x, 3),
        one((7,), (4, 2), (2,)),
        SAMPLE,
    ),
    OpRecord(
        "hsplit", lambda x: jnp.hsplit(x, 2), lambda x: np.hsplit(x, 2), one((4,), (3, 4)), SAMPLE
    ),
    OpRecord(
        "vsplit",
        lambda x: jnp.vsplit(x, np.array([1])),
        lambda x: np.vsplit(x, [1]),
        one(
            (3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "dsplit",
        lambda x: jnp.dsplit(x, 2),
        lambda x: np.dsplit(x, 2),
        one(
            (2, 3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "unstack",
        lambda x: jnp.unstack(x, axis=1),
        lambda x: tuple(np.moveaxis(x, 1, 0)),
        one((2, 3), (2, 3, 4)),
        SAMPLE,
    ),
    OpRecord(
        "tile", lambda x: jnp.tile(x, 2), lambda x: np.tile(x, 2), one((), (3,), (2, 3)), SAMPLE
    ),
    OpRecord(
        "tile_tuple",
        lambda x: jnp.tile(x, (2, 1, 3)),
        lambda x: np.tile(x, (2, 1, 3)),
        one((3,), (2, 3), (0, 2)),
        SAMPLE,
    ),
    OpRecord(
        "repeat",
        lambda x: jnp.repeat(x, 3),
        lambda x: np.repeat(x, 3),
        one((), (3,), (2, 3)),
        SAMPLE,
    ),
    OpRecord(
        "repeat_axis",
        lambda x: jnp.repeat(x, 2, axis=-1),
        lambda x: np.repeat(x, 2, axis=-1),
        one((3,), (2, 3), (2, 0)),
        SAMPLE,
    ),
    OpRecord(
        "repeat_counts",
        lambda x: jnp.repeat(x, np.array([1, 0, 2, 2]), axis=0),
        lambda x: np.repeat(x, [1, 0, 2, 2], axis=0),
        one((4,), (4, 2)),
        SAMPLE,
    ),
    OpRecord(
        "repeat_total_short",
        lambda x: jnp.repeat(x, np.array([1, 2, 3]), total_repeat_length=4),
        lambda x: np_repeat_total(x, [1, 2, 3], 4, 0),
        one(
            (3,),
        ),
        SAMPLE,
    ),
    OpRecord(
        "repeat_total_long",
        lambda x: jnp.repeat(x, 2, axis=1, total_repeat_length=7),
        lambda x: np_repeat_total(x, 2, 7, 1),
        one(
            (2, 3),
        ),
        SAMPLE,
    ),
    OpRecord("flip", jnp.flip, np.flip, one((), (0,), (3,), (2, 3)), SAMPLE),
    OpRecord(
        "flip_axis",
        lambda x: jnp.flip(x, (0, -1)),
        lambda x: np.flip(x, (0, -1)),
        one(
            (2, 3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "fliplr",
        jnp.fliplr,
        np.fliplr,
        one(
            (2, 3),
        ),
        SAMPLE,
    ),
    OpRecord("flipud", jnp.flipud, np.flipud, one((3,), (2, 3)), SAMPLE),
    OpRecord(
        "roll",
        lambda x: jnp.roll(x, 2),
        lambda x: np.roll(x, 2),
        one((), (0,), (5,), (2, 3)),
        SAMPLE,
    ),
    OpRecord(
        "roll_axis",
        lambda x: jnp.roll(x, -4, axis=1),
        lambda x: np.roll(x, -4, axis=1),
        one((2, 3), (2, 0)),
        SAMPLE,
    ),
    OpRecord(
        "roll_tuple",
        lambda x: jnp.roll(x, (1, 5), axis=(0, 1)),
        lambda x: np.roll(x, (1, 5), axis=(0, 1)),
        one((2, 3), (3, 4, 2)),
        SAMPLE,
    ),
    OpRecord("rot90", jnp.rot90, np.rot90, one((2, 3), (2, 3, 4)), SAMPLE),
    OpRecord(
        "rot90_k2",
        lambda x: jnp.rot90(x, 2),
        lambda x: np.rot90(x, 2),
        one(
            (2, 3),
        ),
        SAMPLE,
    ),
    OpRecord(
        "rot90_k3_axes",
        lambda x: jnp.rot90(x, -1, axes=(2, 0)),
        lambda x: np.rot90(x, -1, axes=(2, 0)),
        one(
            (2, 3, 4),
        ),
        SAMPLE,
    ),
    OpRecord("tril", jnp.tril, np.tril, one((3, 3), (3, 4), (2, 3, 4), (0, 2)), SAMPLE),
    OpRecord(
        "tril_k",
        lambda x: jnp.tril(x, -1),
        lambda x: np.tril(x, -1),
        one(
            (4, 3),
        ),
        SAMPLE,
    ),
    OpRecord("triu", jnp.triu, np.triu, one((3, 3), (4, 3), (2, 3, 4)), SAMPLE),
    OpRecord(
        "triu_k",
        lambda x: jnp.triu(x, 2),
        lambda x: np.triu(x, 2),
        one(
            (3, 5),
        ),
        SAMPLE,
    ),
    OpRecord("diag_vector", jnp.diag, np.diag, one((0,), (1,), (4,)), SAMPLE),
    OpRecord(
        "diag_vector_k",
        lambda x: jnp.diag(x, -2),
        lambda x: np.diag(x, -2),
        one((0,), (3,)),
        SAMPLE,
    ),
    OpRecord(
        "diag_matrix",
        lambda x: jnp.diag(x, 1),
        lambda x: np.diag(x, 1),
        one((3, 3), (3, 5), (1, 1), (0, 3)),
        SAMPLE,
    ),
    OpRecord("diagonal", jnp.diagonal, np.diagonal, one((3, 4), (4, 3), (2, 3, 4)), SAMPLE),
    OpRecord(
        "diagonal_offset",
        lambda x: jnp.diagonal(x, -1, 2, 0),
        lambda x: np.diagonal(x, -1, 2, 0),
        one((2, 3, 4), (3, 3, 3)),
        SAMPLE,
    ),
    OpRecord(
        "diagonal_out_of_range",
        lambda x: jnp.diagonal(x, 7),
        lambda x: np.diagonal(x, 7),
        one(
            (3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "diagonal_method",
        lambda x: x.diagonal(),
        lambda x: x.diagonal(),
        one(
            (3, 4),
        ),
        SAMPLE,
    ),
    OpRecord(
        "diagflat",
        lambda x: jnp.diagflat(x, 1),
        lambda x: np.diagflat(x, 1),
        one((), (2, 2)),
        SAMPLE,
    ),
    OpRecord(
        "pad_constant",
        lambda x: jnp.pad(x, 2),
        lambda x: np.pad(x, 2),
        one((), (0,), (3,), (2, 3)),
        SAMPLE,
    ),
    OpRecord(
        "pad_constant_values",
        lambda x: jnp.pad(x, ((1, 2), (0, 1)), constant_values=((1, 2), (3, 4))),
        lambda x: np.pad(x, ((1, 2), (0, 1)), constant_values=((1, 2), (3, 4))),
        one(
            (2, 3),
        ),
        SAMPLE,
    ),
    OpRecord(
        "pad_edge",
        lambda x: jnp.pad(x, (1, 3), mode="edge"),
        lambda x: np.pad(x, (1, 3), mode="edge"),
        one((3,), (2, 3)),
        SAMPLE,
    ),
    OpRecord(
        "pad_reflect",
        lambda x: jnp.pad(x, (4, 6), mode="reflect"),
        lambda x: np.pad(x, (4, 6), mode="reflect"),
        one((1,), (3,), (2, 3)),
        SAMPLE,
    ),
    OpRecord(
        "pad_symmetric",
        lambda x: jnp.pad(x, ((5, 1), (0, 2)), mode="symmetric"),
        lambda x: np.pad(x, ((5, 1), (0, 2)), mode="symmetric"),
        one(
            (2, 3),
        ),
        SAMPLE,
    ),
    OpRecord(
        "pad_wrap",
        lambda x: jnp.pad(x, ((4, 2),), mode="wrap"),
        lambda x: np.pad(x, ((4, 2),), mode="wrap"),
        one((3,), (2, 3)),
        SAMPLE,
    ),
    OpRecord(
        "pad_empty_axis_zero_width",
        lambda x: jnp.pad(x, ((0, 0), (1, 1)), mode="edge"),
        lambda x: np.pad(x, ((0, 0), (1, 1)), mode="edge"),
        one(
            (0, 2),
        ),
        SAMPLE,
    ),
    OpRecord(
        "resize",
        lambda x: jnp.resize(x, (3, 5)),
        lambda x: np.resize(x, (3, 5)),
        one((), (4,), (2, 3)),
        SAMPLE,
    ),
    OpRecord("append", jnp.append, np.append, [((2, 3), (4,)), ((), ())], SAMPLE),
    OpRecord(
        "append_axis",
        lambda x, y: jnp.append(x, y, axis=0),
        lambda x, y: np.append(x, y, axis=0),
        [((2, 3), (1, 3))],
        SAMPLE,
    ),
    OpRecord(
        "insert_scalar",
        lambda x, v: jnp.insert(x, 1, v, axis=1),
        lambda x, v: np.insert(x, 1, v, axis=1),
        [((2, 3), ()), ((2, 3), (2,))],
        SAMPLE,
    ),
    OpRecord(
        "insert_indices",
        lambda x, v: jnp.insert(x, np.array([0, 2, 2, -1]), v),
        lambda x, v: np.insert(x, [0, 2, 2, -1], v),
        [((5,), (4,)), ((2, 2), ())],
        SAMPLE,
    ),
    OpRecord(
        "insert_slice",
        lambda x, v: jnp.insert(x, slice(0, 3, 2), v, axis=0),
        lambda x, v: np.insert(x, slice(0, 3, 2), v, axis=0),
        [((3, 2), (2,))],
        SAMPLE,
    ),
    OpRecord(
        "delete",
        lambda x: jnp.delete(x, np.array([0, -1])),
        lambda x: np.delete(x, [0, -1]),
        one((5,), (2, 3)),
        SAMPLE,
    ),
    OpRecord(
        "delete_axis",
        lambda x: jnp.delete(x, 1, axis=1),
        lambda x: np.delete(x, 1, 1),
        one(
            (2, 3),
        ),
        SAMPLE,
    ),
    OpRecord(
        "delete_slice_mask",
        lambda x: jnp.delete(x, slice(None, None, 2), axis=0),
        lambda x: np.delete(x, slice(None, None, 2), axis=0),
        one(
            (5, 2),
        ),
        SAMPLE,
    ),
    OpRecord("copy", jnp.copy, np.copy, one((), (0,), (3, 4)), SAMPLE),
    OpRecord(
        "copy_method",
        lambda x: x.copy(),
        np.copy,
        one(
            (3,),
        ),
        SAMPLE,
    ),
]


def _trace_reference(x):
    out = np.trace(x)
    return np.asarray(out).astype(kiln.numpy.sum(jnp.asarray(x)).dtype)


_SHAPE_TRACE_ROWS = [
    OpRecord("trace", jnp.trace, _trace_reference, one((3, 3), (3, 4), (2, 2, 3)), SAMPLE),
]

# Moving, copying and zero-padding elements is linear; padding with a nonzero value is affine,
# and full_like ignores its argument's values.
_AFFINE_SHAPE_OPS = {"pad_interior_negative", "pad_constant_values"}
SHAPE_LAX_RECORDS = _mark(
    _SHAPE_LAX_ROWS,
    "shape",
    differentiable={"pad_interior_negative"},
    linear={_base_name(r) for r in _SHAPE_LAX_ROWS} - _AFFINE_SHAPE_OPS - {"full_like"},
)
SHAPE_NUMPY_RECORDS = _mark(
    _SHAPE_NUMPY_ROWS,
    "shape",
    differentiable={"pad_constant_values"},
    linear={_base_name(r) for r in _SHAPE_NUMPY_ROWS} - _AFFINE_SHAPE_OPS,
)
SHAPE_TRACE_RECORDS = _mark(_SHAPE_TRACE_ROWS, "shape", linear={"trace"})
SHAPE_RECORDS = SHAPE_LAX_RECORDS + SHAPE_NUMPY_RECORDS + SHAPE_TRACE_RECORDS


# =============================================================================================
# Indexing: dynamic_slice, gather and scatter against NumPy reference loops
# =============================================================================================

MODES = lax.GatherScatterMode

# --- NumPy reference loops (independent of the vectorized impls) -----------------------------


def gather_reference(operand, indices, dn, slice_sizes, mode=MODES.CLIP, fill_value=None):
    ndim = operand.ndim
    batch_shape = indices.shape[:-1]
    dropped = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    window_shape = [n for d, n in enumerate(slice_sizes) if d not in dropped]
    rank = len(window_shape) + len(batch_shape)
    batch_iter, window_iter = iter(batch_shape), iter(window_shape)
    out_shape = tuple(
        next(window_iter) if i in dn.offset_dims else next(batch_iter) for i in range(rank)
    )
    out = np.zeros(out_shape, operand.dtype)
    windows = {}
    for b in np.ndindex(*batch_shape):
        start = [0] * ndim
        for k, d in enumerate(dn.start_index_map):
            start[d] = int(indices[b][k])
        for d, idim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            start[d] = b[idim]
        out_of_bounds = any(
            not 0 <= start[d] <= operand.shape[d] - slice_sizes[d] for d in dn.start_index_map
        )
        start = [min(max(s, 0), dim - n) for s, dim, n in zip(start, operand.shape, slice_sizes)]
        window = operand[tuple(slice(s, s + n) for s, n in zip(start, slice_sizes))]
        if mode == MODES.FILL_OR_DROP and out_of_bounds:
            window = np.full(window.shape, np.nan if fill_value is None else fill_value)
        windows[b] = window.reshape(window_shape)
    for o in np.ndindex(*out_shape):
        b = tuple(o[i] for i in range(rank) if i not in dn.offset_dims)
        w = tuple(o[i] for i in dn.offset_dims)
        out[o] = windows[b][w]
    return out


def scatter_reference(operand, indices, updates, dn, combine, mode=MODES.FILL_OR_DROP):
    """Apply every update element in batch-major order (the order the last write wins in)."""
    out = operand.copy()
    ndim = operand.ndim
    window_dims = [
        d
        for d in range(ndim)
        if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims
    ]
    window = [1] * ndim
    for d, u in zip(window_dims, dn.update_window_dims):
        window[d] = updates.shape[u]
    scatter_dims = [d for d in range(updates.ndim) if d not in dn.update_window_dims]
    batch_shape = tuple(updates.shape[d] for d in scatter_dims)
    window_shape = tuple(updates.shape[d] for d in dn.update_window_dims)
    for g in np.ndindex(*batch_shape):
        start = [0] * ndim
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            start[d] = int(indices[g][k])
        for d, idim in zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims):
            start[d] = g[idim]
        if mode == MODES.CLIP:
            start = [min(max(s, 0), dim - n) for s, dim, n in zip(start, operand.shape, window)]
        elif any(not 0 <= s <= dim - n for s, dim, n in zip(start, operand.shape, window)):
            continue
        for w in np.ndindex(*window_shape):
            u = [0] * updates.ndim
            for d, i in zip(scatter_dims, g):
                u[d] = i
            for d, i in zip(dn.update_window_dims, w):
                u[d] = i
            pos = list(start)
            for d, i in zip(window_dims, w):
                pos[d] += i
            with np.errstate(over="ignore"):  # integer products wrap, as in the impl
                out[tuple(pos)] = combine(out[tuple(pos)], updates[tuple(u)])
    return out


COMBINES = {
    "scatter": (lax.scatter, lambda old, new: new),
    "scatter_add": (lax.scatter_add, lambda old, new: old + new),
    "scatter_mul": (lax.scatter_mul, lambda old, new: old * new),
    "scatter_min": (lax.scatter_min, lambda old, new: min(old, new)),
    "scatter_max": (lax.scatter_max, lambda old, new: max(old, new)),
}


# --- op records for the primitives -----------------------------------------------------------


def np_dynamic_slice(x, starts, sizes):
    starts = [min(max(s + d if s < 0 else s, 0), d - n) for s, d, n in zip(starts, x.shape, sizes)]
    return x[tuple(slice(s, s + n) for s, n in zip(starts, sizes))]


def np_dynamic_update_slice(x, u, starts):
    starts = [
        min(max(s + d if s < 0 else s, 0), d - n) for s, d, n in zip(starts, x.shape, u.shape)
    ]
    out = x.copy()
    out[tuple(slice(s, s + n) for s, n in zip(starts, u.shape))] = u
    return out


ROWS = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
POINTS = lax.GatherDimensionNumbers(
    offset_dims=(), collapsed_slice_dims=(0, 1), start_index_map=(0, 1)
)
PATCHES = lax.GatherDimensionNumbers(
    offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(1, 0)
)
BATCHED = lax.GatherDimensionNumbers(
    offset_dims=(1,),
    collapsed_slice_dims=(1,),
    start_index_map=(1,),
    operand_batching_dims=(0,),
    start_indices_batching_dims=(0,),
)
ROW_IDX = np.array([[2], [0], [7], [-1], [2]])
POINT_IDX = np.array([[[0, 1], [2, 3]], [[5, 0], [1, -4]]])
PATCH_IDX = np.array([[0, 1], [2, 3], [-1, 9]])
BATCH_IDX = np.array([[[1], [0]], [[3], [2]], [[0], [0]]])

SCATTER_ROWS = lax.ScatterDimensionNumbers(
    update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
)
SCATTER_POINTS = lax.ScatterDimensionNumbers(
    update_window_dims=(), inserted_window_dims=(0, 1), scatter_dims_to_operand_dims=(1, 0)
)
SCATTER_IDX = np.array([[1], [3], [1], [9], [-1]])
SCATTER_POINT_IDX = np.array([[0, 1], [3, 2], [0, 1], [-1, 0]])

_INDEXING_ROWS = [
    OpRecord(
        "dynamic_slice",
        lambda x: lax.dynamic_slice(x, (1, -1), (2, 3)),
        lambda x: np_dynamic_slice(x, (1, -1), (2, 3)),
        [((3, 4),), ((4, 5),)],
        _testing.ALL,
    ),
    OpRecord(
        "dynamic_slice_clamped",
        lambda x: lax.dynamic_slice(x, (7,), (2,)),
        lambda x: np_dynamic_slice(x, (7,), (2,)),
        [((5,),), ((2,),)],
        _testing.ALL,
    ),
    OpRecord(
        "dynamic_slice_3d",
        lambda x: lax.dynamic_slice(x, (0, 2, -9), (2, 1, 3)),
        lambda x: np_dynamic_slice(x, (0, 2, -9), (2, 1, 3)),
        [((2, 3, 4),)],
        _testing.ALL,
    ),
    OpRecord(
        "dynamic_slice_scalar",
        lambda x: lax.dynamic_slice(x, (), ()),
        lambda x: x,
        [((),)],
        _testing.ALL,
    ),
    OpRecord(
        "dynamic_update_slice",
        lambda x, u: lax.dynamic_update_slice(x, u, (2, -2)),
        lambda x, u: np_dynamic_update_slice(x, u, (2, -2)),
        [((4, 5), (2, 3)), ((3, 3), (3, 3)), ((4, 5), (0, 2))],
        _testing.ALL,
    ),
    OpRecord(
        "gather_rows",
        lambda x: lax.gather(x, ROW_IDX, ROWS, (1, x.shape[1])),
        lambda x: gather_reference(x, ROW_IDX, ROWS, (1, x.shape[1])),
        [((4, 3),), ((8, 1),)],
        _testing.ALL,
    ),
    OpRecord(
        "gather_points",
        lambda x: lax.gather(x, POINT_IDX, POINTS, (1, 1), mode="clip"),
        lambda x: gather_reference(x, POINT_IDX, POINTS, (1, 1)),
        [((4, 5),)],
        _testing.ALL,
    ),
    OpRecord(
        "gather_patches",
        lambda x: lax.gather(x, PATCH_IDX, PATCHES, (2, 3)),
        lambda x: gather_reference(x, PATCH_IDX, PATCHES, (2, 3)),
        [((4, 5),)],
        _testing.ALL,
    ),
    OpRecord(
        "gather_batched",
        lambda x: lax.gather(x, BATCH_IDX, BATCHED, (1, 1, 2)),
        lambda x: gather_reference(x, BATCH_IDX, BATCHED, (1, 1, 2)),
        [((3, 4, 2),)],
        _testing.ALL,
    ),
    OpRecord(
        "gather_fill",
        lambda x: lax.gather(x, ROW_IDX, ROWS, (1, x.shape[1]), mode="fill", fill_value=7),
        lambda x: gather_reference(x, ROW_IDX, ROWS, (1, x.shape[1]), MODES.FILL_OR_DROP, 7),
        [((4, 3),)],
        _testing.NUMERIC,
    ),
]
for _name, (_fn, _combine) in COMBINES.items():
    _dtypes = (
        _testing.ALL
        if _name in ("scatter", "scatter_min", "scatter_max")
        else _testing.INTS + _testing.FLOATS + _testing.COMPLEX
    )
    _INDEXING_ROWS.append(
        OpRecord(
            f"{_name}_rows",
            lambda x, u, fn=_fn: fn(x, SCATTER_IDX, u, SCATTER_ROWS),
            lambda x, u, c=_combine: scatter_reference(x, SCATTER_IDX, u, SCATTER_ROWS, c),
            [((4, 3), (5, 3))],
            _dtypes,
            kind="positive",
        )
    )
    _INDEXING_ROWS.append(
        OpRecord(
            f"{_name}_points_clip",
            lambda x, u, fn=_fn: fn(x, SCATTER_POINT_IDX, u, SCATTER_POINTS, mode="clip"),
            lambda x, u, c=_combine: scatter_reference(
                x, SCATTER_POINT_IDX, u, SCATTER_POINTS, c, MODES.CLIP
            ),
            [((3, 4), (4,))],
            _dtypes,
            kind="positive",
        )
    )


# gather with a fill value is affine; scatter_mul multiplies repeated updates together, and
# scatter_min/max pick, so those are differentiable only.
_INDEXING_LINEAR = {
    "dynamic_slice",
    "dynamic_slice_clamped",
    "dynamic_slice_3d",
    "dynamic_slice_scalar",
    "dynamic_update_slice",
    "gather_rows",
    "gather_points",
    "gather_patches",
    "gather_batched",
    "scatter_rows",
    "scatter_points_clip",
    "scatter_add_rows",
    "scatter_add_points_clip",
}
_INDEXING_DIFFERENTIABLE = {
    "gather_fill",
    "scatter_mul_rows",
    "scatter_mul_points_clip",
    "scatter_min_rows",
    "scatter_min_points_clip",
    "scatter_max_rows",
    "scatter_max_points_clip",
}
INDEXING_RECORDS = _mark(
    _INDEXING_ROWS, "indexing", linear=_INDEXING_LINEAR, differentiable=_INDEXING_DIFFERENTIABLE
)


# =============================================================================================
# Reductions: kiln.numpy's reductions over every axis/keepdims variant
# =============================================================================================


def _default_int_like(d):
    """sum/prod's result dtype: small ints and bools promote to int32/uint32."""
    if d == BOOL or (d.kind == "i" and d.itemsize < 4):
        return I32
    if d.kind == "u" and d.itemsize < 4:
        return U32
    return d


def _inexact(d):
    return d if d.kind in "fc" or d == BF16 else F32


def _real_inexact(d):
    return F32 if d == C64 else _inexact(d)


def _same(d):
    return d


def _int32(d):
    return I32


def _bool(d):
    return BOOL


def _np(fn):
    """A NumPy reference with the JAX argument name: computed wide, quietly."""
    return quiet(lambda x, **kw: fn(wide(x), **kw))


def _has_empty_reduction(shape, axis):
    axes = range(len(shape)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    return any(shape[a] == 0 for a in axes)


def _axis_variants(shape):
    nd = len(shape)
    out = [None]
    if nd >= 1:
        out += [0, -1]
    if nd >= 2:
        out += [(0, nd - 1)]
    return out


REDUCTION_SHAPES = [(), (0,), (5,), (3, 4), (2, 0, 3), (2, 3, 4)]
REDUCTION_DTYPES = [BOOL, I8, U8, I32, F16, BF16, F32]

# (name, kiln fn, numpy fn, dtypes, out dtype, data kind, needs non-empty reduction)
JNP_REDUCTIONS = [
    ("sum", jnp.sum, np.sum, REDUCTION_DTYPES + [C64], _default_int_like, "normal", False),
    (
        "prod",
        jnp.prod,
        np.prod,
        [BOOL, I8, U8, I32, F16, F32, C64],
        _default_int_like,
        "unit",
        False,
    ),
    ("max", jnp.max, np.max, REDUCTION_DTYPES, _same, "normal", True),
    ("min", jnp.min, np.min, REDUCTION_DTYPES, _same, "normal", True),
    ("amax", jnp.amax, np.amax, [F32], _same, "normal", True),
    ("amin", jnp.amin, np.amin, [I8, F32], _same, "normal", True),
    ("nanmin", jnp.nanmin, np.nanmin, [U8, F16], _same, "normal", True),
    ("nanprod", jnp.nanprod, np.nanprod, [I8, F32], _default_int_like, "unit", False),
    ("any", jnp.any, np.any, [BOOL, I8, F32, C64], _bool, "normal", False),
    ("all", jnp.all, np.all, [BOOL, I8, F32, C64], _bool, "normal", False),
    ("mean", jnp.mean, np.mean, REDUCTION_DTYPES + [C64], _inexact, "normal", False),
    ("var", jnp.var, np.var, [BOOL, I8, I32, F16, BF16, F32, C64], _real_inexact, "normal", False),
    ("std", jnp.std, np.std, [I8, F16, F32, C64], _real_inexact, "normal", False),
    ("ptp", jnp.ptp, np.ptp, [I8, U8, I32, F16, F32], _same, "normal", True),
    (
        "count_nonzero",
        jnp.count_nonzero,
        np.count_nonzero,
        [BOOL, I8, F32, C64],
        _int32,
        "normal",
        False,
    ),
    ("median", jnp.median, np.median, [I8, I32, F16, F32], _inexact, "normal", True),
    ("nansum", jnp.nansum, np.nansum, [I8, F16, F32], _default_int_like, "normal", False),
    ("nanmax", jnp.nanmax, np.nanmax, [I8, F32], _same, "normal", True),
    ("nanmean", jnp.nanmean, np.nanmean, [I8, F32], _inexact, "normal", True),
    ("nanvar", jnp.nanvar, np.nanvar, [F32], _real_inexact, "normal", True),
    ("nanstd", jnp.nanstd, np.nanstd, [F32], _real_inexact, "normal", True),
]


def _reduction_rows():
    records = []
    for name, fn, np_fn, dts, out, kind, nonempty in JNP_REDUCTIONS:
        for shape in REDUCTION_SHAPES:
            for axis in _axis_variants(shape):
                if nonempty and _has_empty_reduction(shape, axis):
                    continue
                for keepdims in (False, True) if axis is not None else (False,):
                    kwargs = dict(axis=axis, keepdims=keepdims)
                    if (name == "count_nonzero" and shape == ()) or (
                        name == "median" and 0 in shape
                    ):  # NumPy fails on these
                        continue
                    records.append(
                        OpRecord(
                            f"{name}-axis={axis}-keepdims={keepdims}",
                            fn,
                            _np(np_fn),
                            [(shape,)],
                            dts,
                            kind=kind,
                            out_dtype=out,
                            static_kwargs=kwargs,
                            tol={F16: 4e-3, BF16: 2e-2, F32: 2e-5, C64: 2e-5},
                        )
                    )
    return records


_REDUCTION_ROWS = _reduction_rows()

# The nan* reductions act on random data without NaNs, so they are their plain versions; any,
# all and count_nonzero have bool or integer results.
REDUCTION_RECORDS = _mark(
    _REDUCTION_ROWS,
    "reductions",
    linear={"sum", "mean", "nansum", "nanmean"},
    differentiable={
        "prod",
        "max",
        "min",
        "amax",
        "amin",
        "nanmin",
        "nanprod",
        "var",
        "std",
        "ptp",
        "median",
        "nanmax",
        "nanvar",
        "nanstd",
    },
)


# =============================================================================================
# Products: dot_general through kiln.numpy's products
# =============================================================================================

PRODUCT_DTYPES = [
    np.dtype(np.float32),
    np.dtype(np.int32),
    np.dtype(np.int8),
    np.dtype(np.float16),
    np.dtype(np.complex64),
]
#: Products accumulate many terms, so their float tolerance is looser than one op's.
PRODUCT_TOL = {F16: 1e-2, F32: 1e-5, C64: 1e-5}


def _product(name, fn, ref, shapes):
    return OpRecord(name, fn, ref, shapes, PRODUCT_DTYPES, tol=PRODUCT_TOL)


_PRODUCT_ROWS = [
    _product(
        "matmul",
        jnp.matmul,
        np.matmul,
        [
            ((3, 4), (4, 5)),
            ((4,), (4, 2)),
            ((3, 4), (4,)),
            ((4,), (4,)),
            ((2, 3, 4), (4, 5)),
            ((2, 1, 3, 4), (5, 4, 2)),
            ((0, 3), (3, 2)),
            ((3, 0), (0, 2)),
        ],
    ),
    _product(
        "dot",
        jnp.dot,
        np.dot,
        [((3, 4), (4, 5)), ((4,), (4,)), ((), (3,)), ((2, 3, 4), (4,)), ((2, 3), (4, 3, 5))],
    ),
    _product("vdot", jnp.vdot, np.vdot, [((3, 4), (12,)), ((5,), (5,))]),
    _product("inner", jnp.inner, np.inner, [((3, 4), (5, 4)), ((4,), (4,)), ((), (2,))]),
    _product("outer", jnp.outer, np.outer, [((3,), (4,)), ((2, 2), (3,))]),
    _product("kron", jnp.kron, np.kron, [((2, 3), (3, 2)), ((2,), (3, 1))]),
    _product(
        "tensordot",
        lambda a, b: jnp.tensordot(a, b, axes=2),
        lambda a, b: np.tensordot(a, b, axes=2),
        [((2, 3, 4), (3, 4, 5))],
    ),
    _product(
        "tensordot_pairs",
        lambda a, b: jnp.tensordot(a, b, axes=([0, 2], [2, 0])),
        lambda a, b: np.tensordot(a, b, axes=([0, 2], [2, 0])),
        [((2, 3, 4), (4, 5, 2))],
    ),
]
# Bilinear: linear in each operand while the other is held fixed.
PRODUCT_RECORDS = _mark(_PRODUCT_ROWS, "products", linear={_base_name(r) for r in _PRODUCT_ROWS})


# =============================================================================================
# Sorting: kiln.numpy's sort and argsort along each axis
# =============================================================================================

SORT_DTYPES = [BOOL, I8, U8, I32, U32, F16, BF16, F32, C64]
SHAPES_AXES = [
    ((5,), -1),
    ((0,), 0),
    ((3, 4), 0),
    ((3, 4), 1),
    ((2, 3, 4), 1),
    ((2, 0, 3), 2),
    ((12,), 0),
]


def np_sortable(x):
    """NumPy cannot order bfloat16, so its references sort a float32 copy."""
    return x.astype(np.float32) if x.dtype == BF16 else x


def np_sort(x, axis=-1):
    return np.sort(np_sortable(x), axis=axis, kind="stable").astype(x.dtype)


def np_argsort(x, axis=-1):
    return np.argsort(np_sortable(x), axis=axis, kind="stable")


def _sort_rows():
    rows = []
    for shape, axis in SHAPES_AXES + [((3, 4), None), ((), None)]:
        rows.append(
            OpRecord(
                f"sort-axis={axis}",
                jnp.sort,
                np_sort,
                [(shape,)],
                SORT_DTYPES,
                static_kwargs=dict(axis=axis),
            )
        )
        rows.append(
            OpRecord(
                f"argsort-axis={axis}",
                jnp.argsort,
                np_argsort,
                [(shape,)],
                SORT_DTYPES,
                static_kwargs=dict(axis=axis),
                out_dtype=lambda d: I32,
            )
        )
    return rows


SORT_RECORDS = _mark(_sort_rows(), "sorting", differentiable={"sort"})


# =============================================================================================
# kiln.nn: activations, softmax/log_softmax and logsumexp
# =============================================================================================

NN_TOL = {F16: 4e-3, BF16: 3e-2, F32: 2e-5}
NN_SHAPES = [((),), ((0,),), ((7,),), ((3, 4),), ((2, 3, 4),)]
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def f64(fn):
    """A reference evaluated in float64 (the harness rounds it to the input's dtype)."""

    def ref(x, **kwargs):
        with np.errstate(all="ignore"):
            return fn(np.asarray(x, np.float64), **kwargs)

    return ref


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


ACTIVATIONS = [
    ("relu", nn.relu, lambda x: np.maximum(x, 0)),
    ("relu6", nn.relu6, lambda x: np.clip(x, 0, 6)),
    ("gelu", nn.gelu, _gelu_tanh),
    (
        "gelu_exact",
        lambda x: nn.gelu(x, approximate=False),
        lambda x: 0.5 * x * (1 + special.erf(x / np.sqrt(2))),
    ),
    ("sigmoid", nn.sigmoid, special.expit),
    ("log_sigmoid", nn.log_sigmoid, special.log_expit),
    ("tanh", nn.tanh, np.tanh),
    ("silu", nn.silu, lambda x: x * special.expit(x)),
    ("swish", nn.swish, lambda x: x * special.expit(x)),
    ("softplus", nn.softplus, lambda x: np.logaddexp(x, 0)),
    ("soft_sign", nn.soft_sign, lambda x: x / (np.abs(x) + 1)),
    ("elu", nn.elu, _elu),
    ("elu_alpha", lambda x: nn.elu(x, alpha=0.5), lambda x: _elu(x, 0.5)),
    (
        "celu",
        lambda x: nn.celu(x, alpha=1.5),
        lambda x: np.maximum(x, 0) + 1.5 * np.expm1(np.minimum(x, 0) / 1.5),
    ),
    ("selu", nn.selu, lambda x: SELU_SCALE * _elu(x, SELU_ALPHA)),
    ("leaky_relu", nn.leaky_relu, lambda x: np.where(x >= 0, x, 0.01 * x)),
    (
        "leaky_relu_slope",
        lambda x: nn.leaky_relu(x, negative_slope=0.2),
        lambda x: np.where(x >= 0, x, 0.2 * x),
    ),
    ("hard_tanh", nn.hard_tanh, lambda x: np.clip(x, -1, 1)),
    ("hard_sigmoid", nn.hard_sigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    ("hard_silu", nn.hard_silu, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    ("hard_swish", nn.hard_swish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
]

NN_ACTIVATION_RECORDS = [
    OpRecord(name, fn, f64(ref), NN_SHAPES, FLOATS, out_dtype=same, tol=NN_TOL)
    for name, fn, ref in ACTIVATIONS
]

AXIS_FUNCTIONS = [
    ("softmax", nn.softmax, special.softmax),
    ("log_softmax", nn.log_softmax, special.log_softmax),
]
NN_AXIS_RECORDS = [
    OpRecord(
        f"{name}-axis={axis}",
        fn,
        f64(ref),
        [(shape,)],
        FLOATS,
        out_dtype=same,
        tol=NN_TOL,
        static_kwargs=dict(axis=axis),
    )
    for name, fn, ref in AXIS_FUNCTIONS
    for shape, axis in (
        ((7,), -1),
        ((3, 4), 0),
        ((3, 4), -1),
        ((2, 3, 4), 1),
        ((2, 3, 4), (0, 2)),
        ((0, 3), 1),
    )
]
NN_LOGSUMEXP_RECORDS = [
    OpRecord(
        f"logsumexp-axis={axis}-keepdims={keepdims}",
        nn.logsumexp,
        f64(special.logsumexp),
        [(shape,)],
        FLOATS,
        out_dtype=same,
        tol=NN_TOL,
        static_kwargs=dict(axis=axis, keepdims=keepdims),
    )
    for shape, axis in (
        ((), None),
        ((7,), None),
        ((3, 4), 0),
        ((3, 4), -1),
        ((2, 3, 4), (0, 2)),
        ((2, 3, 4), None),
        ((0, 3), 0),
    )
    for keepdims in ((False, True) if shape else (False,))
]
# Every nn function is smooth or piecewise smooth, and none is linear (relu and leaky_relu are
# only positively homogeneous; the hard_* ones are affine between their kinks).
NN_RECORDS = _mark(
    NN_ACTIVATION_RECORDS + NN_AXIS_RECORDS + NN_LOGSUMEXP_RECORDS,
    "nn",
    differentiable={name for name, _, _ in ACTIVATIONS + AXIS_FUNCTIONS} | {"logsumexp"},
)


# =============================================================================================
# Every op
# =============================================================================================

ALL_RECORDS = (
    ELEMENTWISE_RECORDS
    + SHAPE_RECORDS
    + INDEXING_RECORDS
    + REDUCTION_RECORDS
    + PRODUCT_RECORDS
    + SORT_RECORDS
    + NN_RECORDS
)
# The families added later live in their own modules; their rows join the one table here.
from tests.op_records_conv import CONV_RECORDS  # noqa: E402
from tests.op_records_fft import FFT_RECORDS  # noqa: E402
from tests.op_records_linalg import LINALG_RECORDS  # noqa: E402
from tests.op_records_numpy_extra import NUMPY_EXTRA_RECORDS  # noqa: E402
from tests.op_records_scipy import SCIPY_RECORDS  # noqa: E402

ALL_RECORDS += FFT_RECORDS + CONV_RECORDS + LINALG_RECORDS + SCIPY_RECORDS + NUMPY_EXTRA_RECORDS

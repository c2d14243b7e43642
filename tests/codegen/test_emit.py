"""The LLVM backend against NumPy: every ScalarOp on every dtype it accepts, casts between all
dtypes, integer edge cases, and hand-built kernels (broadcasts, transposes, slices, pads,
concatenates, iotas, gathers, row/column reductions, multi-output and multi-kernel programs).

Programs are compiled once per module and target (per_target_cache) so the file stays fast.
"""

from __future__ import annotations

import itertools
import re

import ml_dtypes
import numpy as np
import pytest
import scipy.special

from kiln.codegen.llvm import scalar_ops
from kiln.compiler import kir
from kiln.compiler.kir import (
    Buffer,
    Const,
    If,
    Kernel,
    Loop,
    Program,
    Reduce,
    ReduceKind,
    ScalarOp,
    Store,
    Var,
)
from kiln.runtime.engine import compile_program
from tests._testing import per_target_cache

O = ScalarOp
BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
FLOATS = [F16, BF16, F32, F64]
SIGNED = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
UNSIGNED = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)]
BOOL = np.dtype(np.bool_)
ALL_DTYPES = [BOOL] + SIGNED + UNSIGNED + FLOATS


def dtype_id(dtype) -> str:
    return kir.short_name(np.dtype(dtype))


def elementwise_program(
    name: str, inputs: dict[str, np.dtype], outputs: dict[str, tuple], size: int
) -> Program:
    """A one-loop program: outputs maps name -> (dtype, builder(loads) -> Expr)."""
    in_buffers = {n: Buffer(n, d, (size,)) for n, d in inputs.items()}
    out_buffers = {n: Buffer(n, d, (size,), "output") for n, (d, _) in outputs.items()}
    i = Var("i")
    loads = {n: b[i] for n, b in in_buffers.items()}
    stores = [Store(out_buffers[n], i, build(loads)) for n, (_, build) in outputs.items()]
    kernel = Kernel(name, [Loop(i, 0, size, stores)])
    return Program(name, list(in_buffers.values()) + list(out_buffers.values()), [kernel])


def run(program: Program, *arrays) -> dict[str, np.ndarray]:
    native = compile_program(program)
    return dict(zip([b.name for b in program.outputs], native(*arrays)))


# ---------------------------------------------------------------------------------------------
# Test data: every pair of edge values, plus random values


def edge_values(dtype: np.dtype) -> list:
    if dtype == BOOL:
        return [False, True]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [0, 1, 2, 3, 7, info.max, info.max - 1, 100 % (info.max + 1)]
        if dtype.kind == "i":
            values += [-1, -2, -7, info.min, info.min + 1]
        return values
    tiny = float(np.finfo(dtype).smallest_subnormal) if dtype != BF16 else 9.18355e-41
    big = float(ml_dtypes.finfo(dtype).max)
    return [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        -2.5,
        2.5,
        3.75,
        -7.25,
        big,
        -big,
        tiny,
        float("inf"),
        float("-inf"),
        float("nan"),
        1e-3,
        100.0,
    ]


@per_target_cache
def pair_inputs(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    edges = edge_values(dtype)
    a, b = zip(*itertools.product(edges, edges))
    rng = np.random.default_rng(0)
    if dtype == BOOL:
        extra_a, extra_b = rng.random(16) < 0.5, rng.random(16) < 0.5
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        extra_a = rng.integers(info.min, info.max, 32, dtype=dtype, endpoint=True)
        extra_b = rng.integers(info.min, info.max, 32, dtype=dtype, endpoint=True)
    else:
        extra_a, extra_b = rng.standard_normal(32) * 10, rng.standard_normal(32) * 10
    a = np.concatenate([np.array(a, dtype=object).astype(dtype), np.asarray(extra_a).astype(dtype)])
    b = np.concatenate([np.array(b, dtype=object).astype(dtype), np.asarray(extra_b).astype(dtype)])
    return a, b


# ---------------------------------------------------------------------------------------------
# References (NumPy, or Python integers where C semantics must be spelled out)


def _bits(dtype) -> int:
    return dtype.itemsize * 8


def _wrap(values, dtype) -> np.ndarray:
    """Python ints -> dtype, wrapping modulo 2**bits."""
    unsigned = np.dtype(f"u{dtype.itemsize}")
    return np.array([v % (1 << _bits(dtype)) for v in values], dtype=unsigned).view(dtype)


def _c_divide(a, b, dtype):
    info = np.iinfo(dtype)
    out = []
    for x, y in zip(map(int, a), map(int, b)):
        if y == 0:
            out.append(-1)
        elif x == info.min and y == -1:
            out.append(info.min)
        else:
            out.append(abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1))
    return _wrap(out, dtype)


def _c_remainder(a, b, dtype):
    quotients = _c_divide(a, b, dtype)
    return _wrap(
        [x if y == 0 else x - int(q) * y for x, y, q in zip(map(int, a), map(int, b), quotients)],
        dtype,
    )


def _shift(kind: str):
    def reference(a, b, dtype):
        bits, out = _bits(dtype), []
        for x, y in zip(map(int, a), map(int, b)):
            amount = y % (1 << bits)  # read as unsigned
            unsigned_x = x % (1 << bits)
            signed_x = unsigned_x - (1 << bits) if unsigned_x >> (bits - 1) else unsigned_x
            if kind == "left":
                out.append(unsigned_x << amount if amount < bits else 0)
            elif kind == "logical":
                out.append(unsigned_x >> amount if amount < bits else 0)
            else:
                out.append(signed_x >> min(amount, bits - 1))
        return _wrap(out, dtype)

    return reference


def _round_half_away(x):
    whole = np.trunc(x)
    return np.where(np.abs(x - whole) >= 0.5, whole + np.sign(x), whole).astype(x.dtype)


def _sign(x):
    return np.where(x > 0, 1, np.where(x < 0, -1, x)).astype(x.dtype)


def _nextafter(a, b, dtype):
    if dtype in (F32, F64):
        return np.nextafter(a, b)
    # Narrow floats: step the bit pattern by hand, with C's rules (x == y gives y; NumPy's
    # float16 loop gives x there, so it cannot serve as the reference).
    tiny = float(np.array([1], np.int16).view(dtype)[0])
    out = []
    for x, y in zip(a.astype(F32), b.astype(F32)):
        if np.isnan(x) or np.isnan(y):
            out.append(np.nan)
        elif x == y:
            out.append(y)
        elif x == 0:
            out.append(np.copysign(np.float32(tiny), y))
        else:
            bits = np.array([x], dtype).view(np.int16)[0]
            bits = bits + (1 if (x < y) == (x > 0) else -1)
            out.append(np.array([bits], np.int16).view(dtype)[0])
    return np.array(out, dtype=F32).astype(dtype)


def _popcount(a, dtype):
    return _wrap([bin(int(x) % (1 << _bits(dtype))).count("1") for x in a], dtype)


def _clz(a, dtype):
    return _wrap([_bits(dtype) - (int(x) % (1 << _bits(dtype))).bit_length() for x in a], dtype)


# op -> (arity, reference(a, b, dtype) or reference(a, dtype), exact?)
_NP_BINARY = {
    O.ADD: np.add,
    O.SUB: np.subtract,
    O.MUL: np.multiply,
    O.MAX: np.maximum,
    O.MIN: np.minimum,
    O.EQ: np.equal,
    O.NE: np.not_equal,
    O.LT: np.less,
    O.LE: np.less_equal,
    O.GT: np.greater,
    O.GE: np.greater_equal,
    O.LOGICAL_AND: np.logical_and,
    O.LOGICAL_OR: np.logical_or,
    O.LOGICAL_XOR: np.logical_xor,
    O.BITWISE_AND: np.bitwise_and,
    O.BITWISE_OR: np.bitwise_or,
    O.BITWISE_XOR: np.bitwise_xor,
}
_NP_UNARY = {
    O.NEG: np.negative,
    O.ABS: np.abs,
    O.FLOOR: np.floor,
    O.CEIL: np.ceil,
    O.ROUND_HALF_EVEN: np.rint,
    O.ROUND_HALF_AWAY: _round_half_away,
    O.SQRT: np.sqrt,
    O.RSQRT: lambda x: 1 / np.sqrt(x),
    O.IS_FINITE: np.isfinite,
    O.LOGICAL_NOT: np.logical_not,
    O.BITWISE_NOT: np.invert,
    O.SIGN: _sign,
}
_INT_BINARY = {
    O.DIV: _c_divide,
    O.REM: _c_remainder,
    O.SHIFT_LEFT: _shift("left"),
    O.SHIFT_RIGHT_LOGICAL: _shift("logical"),
    O.SHIFT_RIGHT_ARITHMETIC: _shift("arithmetic"),
}
_FLOAT_BINARY = {O.DIV: np.divide, O.REM: np.fmod}
_INT_UNARY = {O.POPULATION_COUNT: _popcount, O.CLZ: _clz}


def exact_reference(scalar_op: ScalarOp, a, b, dtype):
    """The expected result of an exactly specified op, or None if not applicable."""
    family = kir.dtype_family(dtype)
    if family == "float" and dtype in (F16, BF16):
        # Narrow floats: NumPy semantics are 'compute in float32, round once'.
        wide = exact_reference(scalar_op, a.astype(F32), b.astype(F32), F32)
        if wide is None or scalar_op is O.NEXTAFTER:
            return None if wide is None else _nextafter(a, b, dtype)
        return wide if wide.dtype == BOOL else wide.astype(dtype)
    if family in ("sint", "uint"):
        if scalar_op in _INT_BINARY:
            return _INT_BINARY[scalar_op](a, b, dtype)
        if scalar_op in _INT_UNARY:
            return _INT_UNARY[scalar_op](a, dtype)
    if family == "float":
        if scalar_op in _FLOAT_BINARY:
            return _FLOAT_BINARY[scalar_op](a, b)
        if scalar_op is O.NEXTAFTER:
            return _nextafter(a, b, dtype)
    if scalar_op in _NP_BINARY:
        return _NP_BINARY[scalar_op](a, b)
    if scalar_op in _NP_UNARY:
        return _NP_UNARY[scalar_op](a)
    return None


EXACT_OPS = [
    op
    for op in O
    if op not in kir.OpGroup.TRANSCENDENTAL and op not in (O.SELECT, O.CAST, O.BITCAST, O.FMA)
]


def _applies(scalar_op: ScalarOp, dtype: np.dtype) -> bool:
    return kir.dtype_family(dtype) in kir.OP_SPECS[scalar_op].families


@per_target_cache
def exact_results(dtype: np.dtype) -> dict:
    """All exactly specified ops on dtype, in one compiled multi-output program."""
    outputs = {}
    for scalar_op in EXACT_OPS:
        if not _applies(scalar_op, dtype):
            continue
        arity = kir.OP_SPECS[scalar_op].arity
        result = kir.check_op(scalar_op, [dtype] * arity, None)
        outputs[scalar_op.value] = (
            result,
            lambda loads, o=scalar_op, n=arity: kir.op(o, *[loads["a"], loads["b"]][:n]),
        )
    outputs["select"] = (
        dtype,
        lambda loads: kir.select(kir.op(O.LT, loads["a"], loads["b"]), loads["a"], loads["b"]),
    )
    a, b = pair_inputs(dtype)
    program = elementwise_program(
        f"exact_{dtype_id(dtype)}", {"a": dtype, "b": dtype}, outputs, len(a)
    )
    return run(program, a, b)


EXACT_CASES = [(o, d) for d in ALL_DTYPES for o in EXACT_OPS + [O.SELECT] if _applies(o, d)]


@pytest.mark.parametrize(
    "scalar_op,dtype", EXACT_CASES, ids=[f"{o.value}-{dtype_id(d)}" for o, d in EXACT_CASES]
)
def test_exact_op_matches_numpy(scalar_op, dtype):
    a, b = pair_inputs(dtype)
    got = exact_results(dtype)[scalar_op.value]
    with np.errstate(all="ignore"):
        if scalar_op is O.SELECT:
            expected = np.where(a < b, a, b)
        else:
            expected = exact_reference(scalar_op, a, b, dtype)
    assert got.dtype == expected.dtype
    if kir.dtype_family(got.dtype) == "float":
        # Compare bit patterns (NaN == NaN, and -0.0 is told from 0.0), except max/min whose
        # sign of zero legitimately differs from NumPy's (llvm.maximum orders -0 < +0).
        if scalar_op in (O.MAX, O.MIN):
            np.testing.assert_array_equal(got.astype(F64), expected.astype(F64))
        else:
            view = np.dtype(f"u{got.dtype.itemsize}")
            bad = (got.view(view) != expected.view(view)) & ~(np.isnan(got) & np.isnan(expected))
            assert not bad.any(), (
                f"{scalar_op.value}: a={a[bad][:5]} b={b[bad][:5]} "
                f"got={got[bad][:5]} expected={expected[bad][:5]}"
            )
    else:
        bad = got != expected
        assert not bad.any(), (
            f"{scalar_op.value}: a={a[bad][:5]} b={b[bad][:5]} "
            f"got={got[bad][:5]} expected={expected[bad][:5]}"
        )


def test_integer_edge_cases_by_hand():
    """The C corner cases named in the spec, against values worked out by hand."""
    i32 = np.dtype(np.int32)
    a = np.array([7, -7, 7, -(2**31), -(2**31), 5, 5, 1, -8, -8], np.int32)
    b = np.array([2, 2, 0, -1, 0, 40, -1, 31, 1, 35], np.int32)
    program = elementwise_program(
        "by_hand",
        {"a": i32, "b": i32},
        {
            "div": (i32, lambda l: l["a"] / l["b"]),
            "rem": (i32, lambda l: l["a"] % l["b"]),
            "shl": (i32, lambda l: l["a"] << l["b"]),
            "sra": (i32, lambda l: l["a"] >> l["b"]),
            "srl": (i32, lambda l: kir.op(O.SHIFT_RIGHT_LOGICAL, l["a"], l["b"])),
        },
        len(a),
    )
    out = run(program, a, b)
    int_min = -(2**31)
    assert out["div"].tolist() == [3, -3, -1, int_min, -1, 0, -5, 0, -8, 0]
    assert out["rem"].tolist() == [1, -1, 7, 0, int_min, 5, 0, 1, 0, -8]
    # Negative shift amounts read as huge unsigned ones.
    assert out["shl"].tolist() == [28, -28, 7, 0, int_min, 0, 0, int_min, -16, 0]
    assert out["sra"].tolist() == [1, -2, 7, -1, int_min, 0, 0, 0, -4, -1]
    assert out["srl"].tolist() == [1, 2**30 - 2, 7, 0, int_min, 0, 0, 0, 2**31 - 4, 0]


def test_float_sign_and_rounding_specials():
    f32 = F32
    x = np.array([-0.0, 0.0, np.nan, -3.0, 2.5, -2.5, 0.49999997, -0.5], np.float32)
    program = elementwise_program(
        "specials",
        {"x": f32},
        {
            "sign": (f32, lambda l: kir.op(O.SIGN, l["x"])),
            "away": (f32, lambda l: kir.op(O.ROUND_HALF_AWAY, l["x"])),
            "even": (f32, lambda l: kir.op(O.ROUND_HALF_EVEN, l["x"])),
            "max": (f32, lambda l: kir.op(O.MAX, l["x"], Const(1.0, f32))),
        },
        len(x),
    )
    out = run(program, x)
    assert np.signbit(out["sign"][:2]).tolist() == [True, False]
    assert np.isnan(out["sign"][2]) and out["sign"][3:].tolist()[:3] == [-1.0, 1.0, -1.0]
    assert out["away"][4:].tolist() == [3.0, -3.0, 0.0, -1.0]
    assert out["even"][4:].tolist() == [2.0, -2.0, 0.0, -0.0]
    assert np.isnan(out["max"][2]), "max must propagate NaN"


# ---------------------------------------------------------------------------------------------
# Casts between every pair of dtypes


def cast_sources(dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "f" or dtype == BF16:
        values = [
            np.nan,
            np.inf,
            -np.inf,
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            127.9,
            128.0,
            255.5,
            256.0,
            -129.0,
            65504.0,
            70000.0,
            -70000.0,
            1e10,
            -1e10,
            0.1,
            -3.7,
            2.0**31,
            -(2.0**31),
            2.0**63,
            2.0**64,
            -(2.0**63),
            3e38,
            1e-40,
            1 + 2.0**-11,
        ]
        with np.errstate(all="ignore"):
            return np.array(values, F64).astype(dtype)
    values = edge_values(dtype) + [200, 65535, 2**24 + 1, 2**31 - 1, 2**53 + 1, 2**63 - 1]
    if dtype == BOOL:
        return np.array([True, False], BOOL)
    info = np.iinfo(dtype)
    return np.array([v for v in values if info.min <= v <= info.max], dtype=dtype)


def expected_cast(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    src_float = x.dtype.kind == "f" or x.dtype == BF16
    if dst == BOOL:
        return x.astype(F64) != 0 if src_float else x != 0
    if src_float and dst.kind in "iu":
        info = np.iinfo(dst)  # saturating truncation, NaN -> 0
        values = [
            0
            if np.isnan(v)
            else min(max(int(v), info.min), info.max)
            if np.isfinite(v)
            else (info.max if v > 0 else info.min)
            for v in x.astype(F64)
        ]
        return np.array(values, dtype=dst)
    with np.errstate(all="ignore"):
        return x.astype(dst)


@per_target_cache
def cast_results() -> dict:
    inputs, outputs, arrays = {}, {}, []
    size = max(len(cast_sources(d)) for d in ALL_DTYPES)
    for src in ALL_DTYPES:
        values = cast_sources(src)
        arrays.append(np.resize(values, size))
        inputs[f"x_{dtype_id(src)}"] = src
        for dst in ALL_DTYPES:
            outputs[f"{dtype_id(src)}_to_{dtype_id(dst)}"] = (
                dst,
                lambda loads, s=src, d=dst: kir.cast(loads[f"x_{dtype_id(s)}"], d),
            )
    return run(elementwise_program("casts", inputs, outputs, size), *arrays), arrays


CAST_CASES = list(itertools.product(ALL_DTYPES, ALL_DTYPES))


@pytest.mark.parametrize(
    "src,dst", CAST_CASES, ids=[f"{dtype_id(s)}-{dtype_id(d)}" for s, d in CAST_CASES]
)
def test_cast_matches_numpy(src, dst):
    results, arrays = cast_results()
    x = arrays[ALL_DTYPES.index(src)]
    got = results[f"{dtype_id(src)}_to_{dtype_id(dst)}"]
    expected = expected_cast(x, dst)
    if kir.dtype_family(dst) == "float":
        same = (got.astype(F64) == expected.astype(F64)) | (
            np.isnan(got.astype(F64)) & np.isnan(expected.astype(F64))
        )
    else:
        same = got == expected
    assert same.all(), f"x={x[~same]} got={got[~same]} expected={expected[~same]}"


# ---------------------------------------------------------------------------------------------
# Transcendentals (vmath, or the libm fallback), within a tolerance

_TRANSCENDENTAL_REFERENCE = {
    O.EXP: (np.exp, (-20, 20)),
    O.EXP2: (np.exp2, (-20, 20)),
    O.EXPM1: (np.expm1, (-5, 5)),
    O.LOG: (np.log, (1e-3, 1e3)),
    O.LOG1P: (np.log1p, (-0.9, 10)),
    O.LOG2: (np.log2, (1e-3, 1e3)),
    O.LOG10: (np.log10, (1e-3, 1e3)),
    O.TANH: (np.tanh, (-5, 5)),
    O.LOGISTIC: (scipy.special.expit, (-20, 20)),
    O.ERF: (scipy.special.erf, (-3, 3)),
    O.ERFC: (scipy.special.erfc, (-2, 5)),
    O.ERF_INV: (scipy.special.erfinv, (-0.99, 0.99)),
    O.SIN: (np.sin, (-10, 10)),
    O.COS: (np.cos, (-10, 10)),
    O.TAN: (np.tan, (-1.5, 1.5)),
    O.ASIN: (np.arcsin, (-0.99, 0.99)),
    O.ACOS: (np.arccos, (-0.99, 0.99)),
    O.ATAN: (np.arctan, (-10, 10)),
    O.SINH: (np.sinh, (-5, 5)),
    O.COSH: (np.cosh, (-5, 5)),
    O.ASINH: (np.arcsinh, (-10, 10)),
    O.ACOSH: (np.arccosh, (1.01, 10)),
    O.ATANH: (np.arctanh, (-0.99, 0.99)),
    O.LGAMMA: (scipy.special.gammaln, (0.1, 20)),
    O.DIGAMMA: (scipy.special.digamma, (0.1, 20)),
    O.CBRT: (np.cbrt, (-100, 100)),
    O.POW: (np.power, (0.1, 5)),
    O.ATAN2: (np.arctan2, (-5, 5)),
}
_RTOL = {F16: 2e-3, BF16: 1.6e-2, F32: 1e-5, F64: 1e-12}
TRANSCENDENTAL_CASES = [(o, d) for o in _TRANSCENDENTAL_REFERENCE for d in FLOATS]


@per_target_cache
def transcendental_results(dtype: np.dtype):
    rng = np.random.default_rng(1)
    inputs, arrays, outputs = {}, [], {}
    for scalar_op, (_, (low, high)) in _TRANSCENDENTAL_REFERENCE.items():
        if not scalar_ops.op_supported(scalar_op, dtype):
            continue
        for name in ("a", "b"):
            inputs[f"{name}_{scalar_op.value}"] = dtype
            arrays.append(rng.uniform(low, high, 64).astype(dtype))
        arity = kir.OP_SPECS[scalar_op].arity
        outputs[scalar_op.value] = (
            dtype,
            lambda loads, o=scalar_op, n=arity: kir.op(
                o, *[loads[f"a_{o.value}"], loads[f"b_{o.value}"]][:n]
            ),
        )
    program = elementwise_program(f"transcendental_{dtype_id(dtype)}", inputs, outputs, 64)
    return run(program, *arrays), dict(zip(inputs, arrays))


@pytest.mark.parametrize(
    "scalar_op,dtype",
    TRANSCENDENTAL_CASES,
    ids=[f"{o.value}-{dtype_id(d)}" for o, d in TRANSCENDENTAL_CASES],
)
def test_transcendental_close_to_numpy(scalar_op, dtype):
    if not scalar_ops.op_supported(scalar_op, dtype):
        pytest.skip(f"neither vmath nor libm provides {scalar_op.value} yet")
    results, inputs = transcendental_results(dtype)
    reference = _TRANSCENDENTAL_REFERENCE[scalar_op][0]
    args = [inputs[f"a_{scalar_op.value}"], inputs[f"b_{scalar_op.value}"]]
    args = args[: kir.OP_SPECS[scalar_op].arity]
    with np.errstate(all="ignore"):
        expected = reference(*[a.astype(F64) for a in args]).astype(dtype).astype(F64)
    got = results[scalar_op.value].astype(F64)
    np.testing.assert_allclose(got, expected, rtol=_RTOL[dtype], atol=_RTOL[dtype] * 1e-3)


def test_unsupported_op_is_reported_not_miscompiled():
    for scalar_op in (O.ERF_INV, O.DIGAMMA):
        if not scalar_ops.op_supported(scalar_op, F32):
            x = Buffer("x", F32, (4,))
            y = Buffer("y", F32, (4,), "output")
            i = Var("i")
            program = Program(
                "unsupported",
                [x, y],
                [Kernel("k", [Loop(i, 0, 4, [Store(y, i, kir.op(scalar_op, x[i]))])])],
            )
            with pytest.raises(NotImplementedError, match=scalar_op.value):
                compile_program(program)


def test_fma_is_close_to_exact():
    a, b, c = (np.random.default_rng(s).standard_normal(64).astype(np.float32) for s in range(3))
    out = run(
        elementwise_program(
            "fma",
            {"a": F32, "b": F32, "c": F32},
            {"r": (F32, lambda l: kir.op(O.FMA, l["a"], l["b"], l["c"]))},
            64,
        ),
        a,
        b,
        c,
    )["r"]
    exact = (a.astype(F64) * b + c).astype(F32)
    np.testing.assert_allclose(out, exact, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Hand-built kernels: what the jaxpr lowering will produce, checked against NumPy


def single_kernel_program(name, inputs, outputs, body_fn) -> Program:
    """A one-kernel program; body_fn(*in_buffers, *out_buffers) returns the statements."""
    ins = [Buffer(n, d, s) for n, (d, s) in inputs.items()]
    outs = [Buffer(n, d, s, "output") for n, (d, s) in outputs.items()]
    return Program(name, ins + outs, [Kernel(name, body_fn(*ins, *outs))])


@per_target_cache
def broadcast_program():
    # z = x * y[None, :] + w[:, None]: broadcasts are indices that skip an axis.
    return single_kernel_program(
        "broadcast",
        {"x": (F32, (5, 37)), "y": (F32, (37,)), "w": (F32, (5, 1))},
        {"z": (F32, (5, 37))},
        lambda x, y, w, z: kir.loop_nest(
            z.shape, lambda i, j: [Store(z, (i, j), x[i, j] * y[j] + w[i, 0])]
        ),
    )


def test_broadcast():
    rng = np.random.default_rng(2)
    x, y, w = rng.standard_normal((5, 37)), rng.standard_normal(37), rng.standard_normal((5, 1))
    (z,) = compile_program(broadcast_program())(x, y, w)
    # x * y + w contracts into one FMA: closer to the exact value than NumPy's two roundings.
    np.testing.assert_allclose(z, (x * y + w).astype(F32), rtol=1e-5, atol=1e-6)


def test_transposed_read_and_iota():
    # z[i, j] = x.T[i, j] + 10 * i + j, with x of shape (7, 19): a transpose is swapped strides.
    program = single_kernel_program(
        "transpose",
        {"x": (np.dtype(np.int32), (7, 19))},
        {"z": (np.dtype(np.int32), (19, 7))},
        lambda x, z: kir.loop_nest(
            z.shape,
            lambda i, j: [
                Store(
                    z, (i, j), x[j, i] + kir.cast(kir.index_add(kir.index_mul(i, 10), j), np.int32)
                )
            ],
        ),
    )
    x = np.arange(7 * 19, dtype=np.int32).reshape(7, 19) * 3
    (z,) = compile_program(program)(x)
    np.testing.assert_array_equal(z, x.T + 10 * np.arange(19)[:, None] + np.arange(7))


def test_strided_slice_pad_and_concatenate():
    n = 23
    i32 = np.dtype(np.int32)

    def body(a, b, sliced, padded, joined):
        # sliced = a[1::3]; padded = pad(a, (2, 3), -1); joined = concatenate([a, b]).
        slice_loop = kir.loop_nest(
            sliced.shape, lambda i: [Store(sliced, (i,), a[kir.affine([(i, 3)], 1)])], prefix="s"
        )
        inside = lambda i: (i >= 2) & (i < n + 2)  # noqa: E731
        pad_loop = kir.loop_nest(
            padded.shape,
            lambda i: [
                Store(
                    padded,
                    (i,),
                    kir.select(inside(i), a[kir.clamp(kir.index_sub(i, 2), 0, n - 1)], -1),
                )
            ],
            prefix="p",
        )
        join_loop = kir.loop_nest(
            joined.shape,
            lambda i: [
                Store(
                    joined,
                    (i,),
                    kir.select(
                        i < n, a[kir.clamp(i, 0, n - 1)], b[kir.clamp(kir.index_sub(i, n), 0, 4)]
                    ),
                )
            ],
            prefix="c",
        )
        return slice_loop + pad_loop + join_loop

    program = single_kernel_program(
        "slices",
        {"a": (i32, (n,)), "b": (i32, (5,))},
        {"sliced": (i32, (8,)), "padded": (i32, (n + 5,)), "joined": (i32, (n + 5,))},
        body,
    )
    a, b = np.arange(n, dtype=np.int32) * 7, np.arange(5, dtype=np.int32) - 100
    sliced, padded, joined = compile_program(program)(a, b)
    np.testing.assert_array_equal(sliced, a[1::3])
    np.testing.assert_array_equal(padded, np.pad(a, (2, 3), constant_values=-1))
    np.testing.assert_array_equal(joined, np.concatenate([a, b]))


def test_gather_and_dynamic_slice_clamp_data_dependent_indices():
    i64 = np.dtype(np.int64)

    def body(x, rows, start, gathered, window):
        # gathered[i, j] = x[clip(rows[i]), j]; window = dynamic_slice(x, (start, 0), (2, 4)).
        row = lambda i: kir.clamp(rows[i], 0, 5)  # noqa: E731
        first = kir.clamp(start[()], 0, 6 - 2)
        return kir.loop_nest(
            gathered.shape, lambda i, j: [Store(gathered, (i, j), x[row(i), j])]
        ) + kir.loop_nest(
            window.shape,
            lambda i, j: [Store(window, (i, j), x[kir.index_add(first, i), j])],
            prefix="w",
        )

    program = single_kernel_program(
        "gather",
        {"x": (F32, (6, 4)), "rows": (np.dtype(np.int32), (5,)), "start": (i64, ())},
        {"gathered": (F32, (5, 4)), "window": (F32, (2, 4))},
        body,
    )
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    rows = np.array([3, -7, 5, 99, 0], np.int32)
    native = compile_program(program)
    gathered, window = native(x, rows, np.int64(9))
    np.testing.assert_array_equal(gathered, x[np.clip(rows, 0, 5)])
    np.testing.assert_array_equal(window, x[4:6])
    assert native(x, rows, np.int64(1))[1].tolist() == x[1:3].tolist()


@per_target_cache
def row_reduction_program(dtype):
    k = Var("k")

    def body(x, total, largest, smallest, where_max, where_min):
        def outputs(i):
            element = x[i, k]
            arg_max = Reduce(ReduceKind.ARGMAX, k, 0, 33, element, index_dtype=np.int32)
            return [
                Store(total, (i,), Reduce(ReduceKind.SUM, k, 0, 33, element)),
                Store(largest, (i,), Reduce(ReduceKind.MAX, k, 0, 33, element)),
                Store(smallest, (i,), Reduce(ReduceKind.MIN, k, 0, 33, element)),
                Store(where_max, (i,), arg_max),
                Store(
                    where_min,
                    (i,),
                    Reduce(ReduceKind.ARGMIN, k, 0, 33, element, index_dtype=np.int32),
                ),
            ]

        return kir.loop_nest((6,), outputs)

    i32 = np.dtype(np.int32)
    return single_kernel_program(
        f"rows_{dtype_id(dtype)}",
        {"x": (dtype, (6, 33))},
        {
            "total": (dtype, (6,)),
            "largest": (dtype, (6,)),
            "smallest": (dtype, (6,)),
            "where_max": (i32, (6,)),
            "where_min": (i32, (6,)),
        },
        body,
    )


@pytest.mark.parametrize(
    "dtype", [F32, F64, F16, BF16, np.dtype(np.int32), np.dtype(np.uint8)], ids=dtype_id
)
def test_row_reductions_sum_max_min_argmax_argmin(dtype):
    rng = np.random.default_rng(3)
    if dtype.kind in "iu":
        x = rng.integers(0, 100, (6, 33)).astype(dtype)
        x[1] = 7  # ties: the first index wins
    else:
        x = rng.standard_normal((6, 33)).astype(dtype)
        x[2, 5] = x[2, 9] = np.nan  # the first NaN is both the max and the min
        x[3] = -np.inf
    total, largest, smallest, where_max, where_min = compile_program(row_reduction_program(dtype))(
        x
    )
    wide = x.astype(F64) if dtype.kind in "f" or dtype == BF16 else x
    expected_total = wide.sum(axis=1).astype(dtype)
    tolerance = {F16: 2e-3, BF16: 1e-2}.get(dtype, 1e-5)
    np.testing.assert_allclose(
        total.astype(F64), expected_total.astype(F64), rtol=tolerance, atol=tolerance
    )
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(largest.astype(F64), x.max(axis=1).astype(F64))
        np.testing.assert_array_equal(smallest.astype(F64), x.min(axis=1).astype(F64))
    np.testing.assert_array_equal(where_max, x.argmax(axis=1))
    np.testing.assert_array_equal(where_min, x.argmin(axis=1))


def test_column_reduction_both_loop_orders():
    k = Var("k")

    def body(x, by_reduce, by_accumulate):
        # Reduce form: a strided inner loop. Accumulate form: rows streamed into the output.
        strided = kir.loop_nest(
            (9,),
            lambda j: [Store(by_reduce, (j,), Reduce(ReduceKind.MAX, k, 0, 50, x[k, j]))],
            prefix="j",
        )
        init = kir.loop_nest((9,), lambda j: [Store(by_accumulate, (j,), 0.0)], prefix="c")
        streamed = kir.loop_nest((50, 9), lambda i, j: [kir.accumulate(by_accumulate, j, x[i, j])])
        return strided + init + streamed

    program = single_kernel_program(
        "columns",
        {"x": (F32, (50, 9))},
        {"by_reduce": (F32, (9,)), "by_accumulate": (F32, (9,))},
        body,
    )
    x = np.random.default_rng(4).standard_normal((50, 9)).astype(np.float32)
    by_reduce, by_accumulate = compile_program(program)(x)
    np.testing.assert_array_equal(by_reduce, x.max(axis=0))
    np.testing.assert_allclose(by_accumulate, x.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_bool_and_integer_reductions_with_init():
    k = Var("k")
    u8, i16 = np.dtype(np.uint8), np.dtype(np.int16)

    def body(flags, values, every, some, wrapped, product):
        return kir.loop_nest(
            (3,),
            lambda i: [
                Store(every, (i,), Reduce(ReduceKind.AND, k, 0, 4, flags[i, k])),
                Store(some, (i,), Reduce(ReduceKind.OR, k, 0, 4, flags[i, k])),
                Store(wrapped, (i,), Reduce(ReduceKind.SUM, k, 0, 4, values[i, k], init=200)),
                Store(product, (i,), Reduce(ReduceKind.PROD, k, 0, 4, kir.cast(values[i, k], i16))),
            ],
        )

    program = single_kernel_program(
        "logic",
        {"flags": (BOOL, (3, 4)), "values": (u8, (3, 4))},
        {
            "every": (BOOL, (3,)),
            "some": (BOOL, (3,)),
            "wrapped": (u8, (3,)),
            "product": (i16, (3,)),
        },
        body,
    )
    flags = np.array([[1, 1, 1, 1], [1, 0, 1, 1], [0, 0, 0, 0]], bool)
    values = np.array([[1, 2, 3, 4], [100, 100, 100, 100], [255, 255, 1, 0]], np.uint8)
    every, some, wrapped, product = compile_program(program)(flags, values)
    assert every.tolist() == [True, False, False] and some.tolist() == [True, True, False]
    assert wrapped.tolist() == [(200 + 10) % 256, (200 + 400) % 256, (200 + 511) % 256]
    assert product.tolist() == [24, 100**4 % 65536 - 65536, 0]  # int16 wraps, like NumPy


def test_softmax_multi_output_with_reduction_used_per_element():
    # out[i, j] = exp(x[i, j] - max_i) / sum_k exp(x[i, k] - max_i), plus the row max and
    # row sum as extra outputs: several stores in one nest sharing two reductions.
    k, m = Var("k"), Var("m")
    exp = lambda v: kir.op(O.EXP, v)  # noqa: E731

    def body(x, out, row_max, row_sum):
        def row(i):
            largest = Reduce(ReduceKind.MAX, m, 0, 200, x[i, m])
            total = Reduce(ReduceKind.SUM, k, 0, 200, exp(x[i, k] - largest))
            return [
                Loop(
                    Var("j"),
                    0,
                    200,
                    [Store(out, (i, Var("j")), exp(x[i, Var("j")] - largest) / total)],
                ),
                Store(row_max, (i,), largest),
                Store(row_sum, (i,), total),
            ]

        return kir.loop_nest((8,), row)

    program = single_kernel_program(
        "softmax",
        {"x": (F32, (8, 200))},
        {"out": (F32, (8, 200)), "row_max": (F32, (8,)), "row_sum": (F32, (8,))},
        body,
    )
    x = np.random.default_rng(5).standard_normal((8, 200)).astype(np.float32)
    out, row_max, row_sum = compile_program(program)(x)
    shifted = np.exp(x.astype(F64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, shifted / shifted.sum(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(row_max, x.max(axis=1))
    np.testing.assert_allclose(row_sum, shifted.sum(axis=1), rtol=1e-5)
    # The row's max and sum are computed once per row, before the j loop, not per element.
    text = compile_program(program).unoptimized_ir
    kernel = text[text.index("define internal") :]
    # (Each loop is a vector loop, k.vec or j.vec, then its remainder.)
    assert kernel.index('"k.') < kernel.index('"j.')


def test_two_kernel_program_with_temps_on_stack_and_heap():
    # t = x * 2 (temp), u = t + 1 (temp), y = t * u, in three kernels; the large temps come
    # from aligned_alloc, the small one from the stack.
    for size in (16, 5000):
        x = Buffer("x", F32, (size,))
        t = Buffer("t", F32, (size,), "temp")
        u = Buffer("u", F32, (size,), "temp")
        y = Buffer("y", F32, (size,), "output")
        i = Var("i")
        kernels = [
            Kernel("double", [Loop(i, 0, size, [Store(t, i, x[i] * 2.0)])]),
            Kernel("inc", [Loop(i, 0, size, [Store(u, i, t[i] + 1.0)])]),
            Kernel("mul", [Loop(i, 0, size, [Store(y, i, t[i] * u[i])])]),
        ]
        program = Program(f"temps{size}", [x, y, t, u], kernels)
        data = np.random.default_rng(6).standard_normal(size).astype(np.float32)
        (result,) = compile_program(program)(data)
        np.testing.assert_allclose(result, (data * 2) * (data * 2 + 1), rtol=1e-6)
        assert ("aligned_alloc" in compile_program(program).unoptimized_ir) == (size > 1000)


def test_if_statement_and_rank0_buffers():
    # y[()] = sum of the positive entries, written under an If per element.
    x = Buffer("x", np.dtype(np.int64), (10,))
    y = Buffer("y", np.dtype(np.int64), (), "output")
    i = Var("i")
    program = Program(
        "conditional",
        [x, y],
        [
            Kernel(
                "k", [Store(y, 0, 0), Loop(i, 0, 10, [If(x[i] > 0, [kir.accumulate(y, 0, x[i])])])]
            )
        ],
    )
    data = np.arange(10, dtype=np.int64) - 4
    (result,) = compile_program(program)(data)
    assert result.shape == () and int(result) == data[data > 0].sum()


def test_empty_buffers_run_no_iterations():
    x = Buffer("x", F32, (0, 3))
    y = Buffer("y", F32, (0,), "output")
    k = Var("k")
    program = Program(
        "empty",
        [x, y],
        [
            Kernel(
                "k",
                kir.loop_nest(
                    (0,), lambda i: [Store(y, (i,), Reduce(ReduceKind.SUM, k, 0, 3, x[i, k]))]
                ),
            )
        ],
    )
    (result,) = compile_program(program)(np.zeros((0, 3), np.float32))
    assert result.shape == (0,)


# ---------------------------------------------------------------------------------------------
# Native code quality and the engine


def _kernel_ir(native) -> str:
    return native.llvm_ir[native.llvm_ir.index("define ") :]


def test_elementwise_and_row_sum_are_vectorized_to_512_bits():
    from kiln.codegen.llvm.target import current_target

    if not current_target().has_avx512:
        pytest.skip("the target has no AVX-512")
    n = 4096
    x, y = Buffer("x", F32, (n,)), Buffer("y", F32, (n,))
    z = Buffer("z", F32, (n,), "output")
    i = Var("i")
    elementwise = Program(
        "vector_add", [x, y, z], [Kernel("add", [Loop(i, 0, n, [Store(z, i, x[i] * y[i] + 1.0)])])]
    )
    assert "<16 x float>" in _kernel_ir(compile_program(elementwise))
    m = Buffer("m", F32, (64, 512))
    s = Buffer("s", F32, (64,), "output")
    k = Var("k")
    row_sum = Program(
        "vector_row_sum",
        [m, s],
        [
            Kernel(
                "row_sum",
                kir.loop_nest(
                    (64,), lambda r: [Store(s, (r,), Reduce(ReduceKind.SUM, k, 0, 512, m[r, k]))]
                ),
            )
        ],
    )
    text = _kernel_ir(compile_program(row_sum))
    # Vector accumulators in kiln's own order (emit_vector): nothing left for LLVM to reorder.
    assert "<16 x float>" in text and "reassoc" not in text
    assert not re.search(r"\b(nnan|ninf|fast)\b", text), "no value-changing fast-math flags"


def test_identical_programs_share_native_code_and_expose_ir_and_asm():
    first, second = compile_program(broadcast_program()), compile_program(broadcast_program())
    assert first is second
    assert "prefer-vector-width" in first.unoptimized_ir or "avx512f" not in first.asm
    assert "noalias" in first.unoptimized_ir and "getelementptr inbounds" in first.unoptimized_ir
    assert first.symbol in first.asm and "ret" in first.asm


def test_run_accepts_pointer_array_int_address_and_ctypes_array():
    import ctypes

    native = compile_program(broadcast_program())
    rng = np.random.default_rng(7)
    x, y, w = (rng.standard_normal(s).astype(np.float32) for s in [(5, 37), (37,), (5, 1)])
    expected = x * y + w
    for style in ("ndarray", "int", "ctypes"):
        z = np.zeros((5, 37), np.float32)
        addresses = [a.ctypes.data for a in (x, y, w, z)]
        if style == "ndarray":
            native.run(np.array(addresses, np.uint64))
        elif style == "int":
            table = np.array(addresses, np.int64)
            native.run(table.ctypes.data)
        else:
            native.run((ctypes.c_void_p * 4)(*addresses))
        np.testing.assert_allclose(z, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="expected 4"):
        native.run(np.zeros(3, np.uint64))


def test_concurrent_compilation_from_threads():
    from concurrent.futures import ThreadPoolExecutor

    def build_and_run(offset: int) -> bool:
        x = Buffer("x", F64, (17,))
        y = Buffer("y", F64, (17,), "output")
        i = Var("i")
        program = Program(
            f"threaded{offset}",
            [x, y],
            [Kernel("k", [Loop(i, 0, 17, [Store(y, i, x[i] * 2.0 + float(offset))])])],
        )
        data = np.arange(17.0)
        return np.array_equal(compile_program(program)(data)[0], data * 2 + offset)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(build_and_run, range(8)))


def test_column_reductions_are_rescheduled_without_changing_results():
    from kiln.compiler.kir_schedule import schedule_kernel

    k = Var("k")
    rows, cols = 30, 70  # 70 columns: strip-mined blocks plus a remainder loop

    def body(x, h, total, mean, where, half_total):
        def column(j):
            return [
                Store(total, (j,), Reduce(ReduceKind.SUM, k, 0, rows, x[k, j])),
                Store(mean, (j,), Reduce(ReduceKind.SUM, k, 0, rows, x[k, j]) * (1 / rows)),
                Store(
                    where,
                    (j,),
                    Reduce(ReduceKind.ARGMAX, k, 0, rows, x[k, j], index_dtype=np.int32),
                ),
                Store(half_total, (j,), Reduce(ReduceKind.SUM, k, 0, rows, h[k, j])),
            ]

        return kir.loop_nest((cols,), column, prefix="j")

    program = single_kernel_program(
        "columns_scheduled",
        {"x": (F32, (rows, cols)), "h": (F16, (rows, cols))},
        {
            "total": (F32, (cols,)),
            "mean": (F32, (cols,)),
            "where": (np.dtype(np.int32), (cols,)),
            "half_total": (F16, (cols,)),
        },
        body,
    )
    scheduled = schedule_kernel(program.kernels[0])
    kir.verify_kernel(scheduled)
    assert scheduled is not program.kernels[0]
    rng = np.random.default_rng(8)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    h = rng.standard_normal((rows, cols)).astype(np.float16)
    total, mean, where, half_total = compile_program(program)(x, h)
    in_order = np.zeros(cols, np.float32)  # the Reduce's own order: k = 0, 1, ...
    for row in x:
        in_order += row
    np.testing.assert_array_equal(total, in_order)
    np.testing.assert_array_equal(mean, in_order * np.float32(1 / rows))
    np.testing.assert_array_equal(where, x.argmax(axis=0))
    np.testing.assert_allclose(
        half_total.astype(F64), h.astype(F64).sum(axis=0), rtol=2e-3, atol=2e-3
    )


def test_scheduling_leaves_row_sums_alone_and_splits_argmax():
    from kiln.compiler.kir_schedule import schedule_kernel

    row_sum = single_kernel_program(
        "row_sum_only",
        {"x": (F32, (4, 9))},
        {"s": (F32, (4,))},
        lambda x, s: kir.loop_nest(
            (4,), lambda i: [Store(s, (i,), Reduce(ReduceKind.SUM, Var("k"), 0, 9, x[i, Var("k")]))]
        ),
    )
    assert schedule_kernel(row_sum.kernels[0]) is row_sum.kernels[0]
    scheduled = schedule_kernel(row_reduction_program(F32).kernels[0])
    kir.verify_kernel(scheduled)
    kinds = {
        n.kind
        for n in kir.toposort(
            [e for s in kir.walk_stmts(scheduled.body) for e in kir.stmt_exprs(s)]
        )
        if isinstance(n, Reduce)
    }
    assert kinds == {ReduceKind.SUM, ReduceKind.MAX, ReduceKind.MIN}


def test_argvalue_is_the_winning_element():
    k = Var("k")

    def body(x, best, where):
        def row(i):
            winner = Reduce(ReduceKind.ARGMIN, k, 0, 6, x[i, k] * x[i, k], index_dtype=np.int16)
            return [Store(best, (i,), kir.ArgValue(winner)), Store(where, (i,), winner)]

        return kir.loop_nest((3,), row)

    program = single_kernel_program(
        "argvalue",
        {"x": (F64, (3, 6))},
        {"best": (F64, (3,)), "where": (np.dtype(np.int16), (3,))},
        body,
    )
    x = np.array([[3, -1, 1, 2, -5, 1], [0, 0, -0.0, 1, 2, 3], [4, np.nan, 1, np.nan, 0, 0]])
    best, where = compile_program(program)(x)
    assert where.tolist() == [1, 0, 1]
    np.testing.assert_array_equal(best, [1.0, 0.0, np.nan])


def test_transpose_and_broadcast_property():
    """Random shapes, axis permutations and broadcast axes, expressed as index arithmetic."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=12, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
    def check(shape, data):
        permutation = data.draw(st.permutations(range(len(shape))))
        axis = data.draw(st.integers(0, len(shape) - 1))
        out_shape = tuple(shape[p] for p in permutation)
        x = Buffer("x", F64, tuple(shape))
        v = Buffer("v", F64, (out_shape[axis],))
        y = Buffer("y", F64, out_shape, "output")

        def body(*index):
            source = [None] * len(shape)
            for position, dim in enumerate(permutation):
                source[dim] = index[position]
            return [Store(y, index, x[tuple(source)] * 2.0 - v[index[axis]])]

        name = f"perm_{'_'.join(map(str, shape))}_{'_'.join(map(str, permutation))}_{axis}"
        program = Program(name, [x, v, y], [Kernel("k", kir.loop_nest(out_shape, body))])
        xs = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
        vs = np.arange(out_shape[axis], dtype=np.float64) + 0.5
        expand = [None] * len(out_shape)
        expand[axis] = slice(None)
        expected = np.transpose(xs, permutation) * 2.0 - vs[tuple(expand)]
        np.testing.assert_array_equal(compile_program(program)(xs, vs)[0], expected)

    check()

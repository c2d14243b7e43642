"""The native backend against the interpreter: every op-record row that has a jit path, a table
of every primitive with a lowering rule across dtype families and shapes, and edge values.

Each case runs jitted twice, `backend="native"` and `backend="interpret"`; results must agree
within the primitive's tolerance, integers and bools exactly. To keep the file fast, the cases of
one table and dtype are compiled together as one program (many outputs, one compile), and any
mismatch names its case.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import optree
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.runtime import native
from tests._testing import make_args, tolerance
from tests.op_records import (
    INDEXING_RECORDS,
    PRODUCT_RECORDS,
    REDUCTION_RECORDS,
    SHAPE_LAX_RECORDS,
    SORT_RECORDS,
)

BOOL, I8, I16, I32 = (np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32))
U8, U32 = np.dtype(np.uint8), np.dtype(np.uint32)
F16, BF16, F32 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
DTYPES = [BOOL, I8, I32, U8, U32, F16, BF16, F32]
SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4)]


@pytest.fixture(autouse=True)
def strict_native(monkeypatch):
    """Backend errors fail the test instead of silently falling back to the interpreter."""
    monkeypatch.setattr(kiln.config, "native_strict", True)


def run_both(fn, args):
    """fn jitted natively and by the interpreter; the flat outputs of each, and the native
    executable's text."""
    compiled = kiln.jit(fn, backend="native").lower(*args).compile()
    outs = optree.tree_leaves(compiled(*args), namespace="kiln")
    reference = optree.tree_leaves(kiln.jit(fn, backend="interpret")(*args), namespace="kiln")
    return outs, reference, compiled.as_text()


def mismatch(actual, expected, tol) -> str | None:
    """Why two results differ, or None when they agree (exactly for ints/bools; within tol,
    NaN matching NaN, for floats)."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape or a.dtype != e.dtype:
        return f"{a.dtype}{list(a.shape)} vs {e.dtype}{list(e.shape)}"
    if a.dtype.kind in "fc" or a.dtype == BF16:
        kind = np.complex128 if a.dtype.kind == "c" else np.float64
        a64, e64 = a.astype(kind), e.astype(kind)
        ok = np.isclose(a64, e64, rtol=tol, atol=tol, equal_nan=True)
        if not ok.all():
            where = np.argwhere(~ok)[0]
            return f"at {tuple(where)}: {a64[tuple(where)]} vs {e64[tuple(where)]}"
        return None
    if not np.array_equal(a, e):
        where = np.argwhere(a != e)[0]
        return f"at {tuple(where)}: {a[tuple(where)]} vs {e[tuple(where)]}"
    return None


# ---------------------------------------------------------------------------------------------
# The op table's families, batched per family and dtype

#: The families of the op table checked here, each with its rows that have a jit path.
TABLES = {
    name: [r for r in records if r.jit]
    for name, records in (
        ("shape", SHAPE_LAX_RECORDS),
        ("indexing", INDEXING_RECORDS),
        ("reductions", REDUCTION_RECORDS),
        ("products", PRODUCT_RECORDS),
        ("sorting", SORT_RECORDS),
    )
}
#: The reductions table is large (every axis/keepdims combination of each reduction): one
#: dtype per family keeps it quick; shape tables take every dtype their rows list.
TABLE_DTYPES = {"reductions": [BOOL, I8, U8, I32, F16, BF16, F32]}
#: Tables whose programs must lower to native kernels (the others mix in impls).
NATIVE_TABLES = {"shape", "indexing", "reductions"}


def _table_params():
    params = []
    for name, records in TABLES.items():
        dtypes = sorted({d for r in records for _, d in r.cases()}, key=str)
        for dtype in dtypes:
            if dtype in TABLE_DTYPES.get(name, [dtype]):
                params.append(pytest.param(name, dtype, id=f"{name}-{dtype.name}"))
    return params


def _traceable(record, args) -> bool:
    try:
        kiln.make_jaxpr(lambda *a: record.fn(*a, **record.static_kwargs))(*args)
        return True
    except Exception:  # noqa: BLE001 - rows that reject a dtype are tested elsewhere
        return False


@pytest.mark.parametrize("table,dtype", _table_params())
def test_op_record_tables_native_matches_interpreter(table, dtype):
    cases = []
    for record in TABLES[table]:
        for shapes, case_dtype in record.cases():
            if case_dtype != dtype:
                continue
            args = [jnp.asarray(a) for a in make_args(record, shapes, dtype)]
            if _traceable(record, args):
                cases.append((record, shapes, args))
    if not cases:
        pytest.skip("no traceable rows")
    flat_args = [a for _, _, args in cases for a in args]
    spans, start = [], 0
    for _, _, args in cases:
        spans.append((start, start + len(args)))
        start += len(args)

    def program(*flat):
        return [
            record.fn(*flat[lo:hi], **record.static_kwargs)
            for (record, _, _), (lo, hi) in zip(cases, spans)
        ]

    compiled = kiln.jit(program, backend="native").lower(*flat_args).compile()
    actual = compiled(*flat_args)
    expected = kiln.jit(program, backend="interpret")(*flat_args)
    if table in NATIVE_TABLES and dtype.kind != "c":
        assert "native segment" in compiled.as_text()
    failures = []
    for (record, shapes, _), got, want in zip(cases, actual, expected):
        got_leaves = optree.tree_leaves(got, namespace="kiln")
        want_leaves = optree.tree_leaves(want, namespace="kiln")
        for g, w in zip(got_leaves, want_leaves):
            why = mismatch(g, w, tolerance(np.asarray(w).dtype, record.tol))
            if why:
                failures.append(f"{record.name} {shapes}: {why}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------------
# Every elementwise primitive with a lowering rule, per dtype family and shape

BOOLS, SINTS, UINTS, FLOATS = {BOOL}, {I8, I32}, {U8, U32}, {F16, BF16, F32}
INTS = SINTS | UINTS
NUMBERS = INTS | FLOATS
ALL_FAMILIES = NUMBERS | BOOLS

# name -> (function of (x, y, z), dtypes it applies to)
UNARY = {
    "neg": (lax.neg, NUMBERS),
    "abs": (lax.abs, SINTS | FLOATS),
    "sign": (lax.sign, NUMBERS),
    "floor": (lax.floor, FLOATS),
    "ceil": (lax.ceil, FLOATS),
    "round": (lax.round, FLOATS),
    "round_even": (lambda x: lax.round(x, 1), FLOATS),
    "is_finite": (lax.is_finite, FLOATS),
    "not": (lax.bitwise_not, INTS | BOOLS),
    "population_count": (lax.population_count, INTS),
    "clz": (lax.clz, INTS),
    "square": (lax.square, NUMBERS),
    "integer_pow3": (lambda x: lax.integer_pow(x, 3), NUMBERS),
    "integer_pow0": (lambda x: lax.integer_pow(x, 0), NUMBERS),
    "integer_pow_neg": (lambda x: lax.integer_pow(x, -2), FLOATS),
    "exp": (lax.exp, FLOATS),
    "exp2": (lax.exp2, FLOATS),
    "expm1": (lax.expm1, FLOATS),
    "log": (lambda x: lax.log(lax.abs(x) + 0.5), FLOATS),
    "log1p": (lambda x: lax.log1p(lax.abs(x)), FLOATS),
    "sqrt": (lambda x: lax.sqrt(lax.abs(x)), FLOATS),
    "rsqrt": (lambda x: lax.rsqrt(lax.abs(x) + 0.5), FLOATS),
    "cbrt": (lax.cbrt, FLOATS),
    "sin": (lax.sin, FLOATS),
    "cos": (lax.cos, FLOATS),
    "tan": (lax.tan, FLOATS),
    "asin": (lambda x: lax.asin(x * 0.3), FLOATS),
    "acos": (lambda x: lax.acos(x * 0.3), FLOATS),
    "atan": (lax.atan, FLOATS),
    "sinh": (lax.sinh, FLOATS),
    "cosh": (lax.cosh, FLOATS),
    "tanh": (lax.tanh, FLOATS),
    "asinh": (lax.asinh, FLOATS),
    "acosh": (lambda x: lax.acosh(lax.abs(x) + 1), FLOATS),
    "atanh": (lambda x: lax.atanh(x * 0.3), FLOATS),
    "logistic": (lax.logistic, FLOATS),
    "erf": (lax.erf, FLOATS),
    "erfc": (lax.erfc, FLOATS),
    "erf_inv": (lambda x: lax.erf_inv(x * 0.3), FLOATS),
    "lgamma": (lambda x: lax.lgamma(lax.abs(x) + 0.5), FLOATS),
    "digamma": (lambda x: lax.digamma(lax.abs(x) + 0.5), FLOATS),
    "to_f32": (lambda x: lax.convert_element_type(x, np.float32), ALL_FAMILIES),
    "to_i8": (lambda x: lax.convert_element_type(x, np.int8), ALL_FAMILIES),
    "to_u32": (lambda x: lax.convert_element_type(x, np.uint32), ALL_FAMILIES),
    "to_bool": (lambda x: lax.convert_element_type(x, np.bool_), ALL_FAMILIES),
    "to_bf16": (lambda x: lax.convert_element_type(x, ml_dtypes.bfloat16), ALL_FAMILIES),
    "to_f16": (lambda x: lax.convert_element_type(x, np.float16), ALL_FAMILIES),
}
BINARY = {
    "add": (lax.add, NUMBERS),
    "sub": (lax.sub, NUMBERS),
    "mul": (lax.mul, NUMBERS),
    "div": (lax.div, NUMBERS),
    "rem": (lax.rem, NUMBERS),
    "max": (lax.max, ALL_FAMILIES),
    "min": (lax.min, ALL_FAMILIES),
    "pow": (lambda x, y: lax.pow(lax.abs(x) + 0.5, y), FLOATS),
    "pow_int": (lambda x, y: lax.pow(x, lax.convert_element_type(y, np.int32)), FLOATS),
    "atan2": (lax.atan2, FLOATS),
    "nextafter": (lax.nextafter, FLOATS),
    "eq": (lax.eq, ALL_FAMILIES),
    "ne": (lax.ne, ALL_FAMILIES),
    "lt": (lax.lt, ALL_FAMILIES),
    "le": (lax.le, ALL_FAMILIES),
    "gt": (lax.gt, ALL_FAMILIES),
    "ge": (lax.ge, ALL_FAMILIES),
    "and": (lax.bitwise_and, INTS | BOOLS),
    "or": (lax.bitwise_or, INTS | BOOLS),
    "xor": (lax.bitwise_xor, INTS | BOOLS),
    "shift_left": (lax.shift_left, INTS),
    "shift_right_logical": (lax.shift_right_logical, INTS),
    "shift_right_arithmetic": (lax.shift_right_arithmetic, INTS),
    "add_scalar": (
        lambda x, y: x + lax.reduce_max(y, tuple(range(y.ndim))) if y.size else x,
        NUMBERS,
    ),
}
TERNARY = {
    "select": (lambda x, y, z: lax.select(lax.gt(x, y), y, z), ALL_FAMILIES),
    "select_n_int": (
        lambda x, y, z: lax.select_n(lax.convert_element_type(x, np.int32), x, y, z),
        ALL_FAMILIES,
    ),
    "clamp": (lambda x, y, z: lax.clamp(lax.min(y, z), x, lax.max(y, z)), ALL_FAMILIES),
}
OPS = {
    **{k: (1, *v) for k, v in UNARY.items()},
    **{k: (2, *v) for k, v in BINARY.items()},
    **{k: (3, *v) for k, v in TERNARY.items()},
}

# Transcendentals: a few ulps apart from NumPy/SciPy; narrow floats round either way.
TRANSCENDENTAL_TOL = {F32: 2e-5, F16: 4e-3, BF16: 2e-2}
EXACT_OPS = {
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "max",
    "min",
    "neg",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "round_even",
    "square",
    "integer_pow3",
    "integer_pow0",
    "select",
    "select_n_int",
    "clamp",
    "nextafter",
    "sqrt",
    "to_f32",
    "to_i8",
    "to_u32",
    "to_bool",
    "to_bf16",
    "to_f16",
    "add_scalar",
}


def _operands(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == BOOL:
        return [rng.random(shape) < 0.5 for _ in range(3)]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = max(info.min, -40), min(info.max, 40)
        values = [rng.integers(low, high + 1, shape).astype(dtype) for _ in range(2)]
        values.append(rng.integers(0, 2 * info.bits, shape).astype(dtype))  # shift amounts
        return values
    return [(rng.standard_normal(shape) * 2).astype(dtype) for _ in range(3)]


def _elementwise_ops(dtype):
    return {name: (arity, fn) for name, (arity, fn, families) in OPS.items() if dtype in families}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_every_elementwise_primitive(dtype, shape):
    ops = _elementwise_ops(dtype)
    x, y, z = (jnp.asarray(a) for a in _operands(dtype, shape))

    def program(x, y, z):
        return {name: fn(*(x, y, z)[:arity]) for name, (arity, fn) in ops.items()}

    actual, expected, text = run_both(program, (x, y, z))
    assert "interpreted (reference impl)" not in text, text
    failures = []
    for name, got, want in zip(sorted(ops), actual, expected):
        out_dtype = np.asarray(want).dtype
        tol = 0.0 if name in EXACT_OPS else TRANSCENDENTAL_TOL.get(out_dtype, 0.0)
        if name in ("to_bf16", "to_f16", "integer_pow_neg", "pow", "pow_int"):
            tol = tolerance(out_dtype)
        why = mismatch(got, want, tol)
        if why:
            failures.append(f"{name}: {why}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------------
# Edge values: NaN, infinities, signed zeros, denormals, integer extremes, division by zero


def _float_edges(dtype) -> np.ndarray:
    info = ml_dtypes.finfo(dtype)
    values = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        3.5,
        np.inf,
        -np.inf,
        np.nan,
        float(info.max),
        -float(info.max),
        float(info.tiny),
        float(info.smallest_subnormal),
        1e-3,
        88.0,
        -104.0,
        20.0,
    ]
    return np.array(values, dtype=np.float64).astype(dtype)


def _int_edges(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    values = {0, 1, 2, 7, info.max, info.max - 1, info.min, min(info.max, 255)}
    if info.min < 0:
        values |= {-1, -2, info.min + 1}
    return np.array(sorted(values), dtype=dtype)


def _pairs(values: np.ndarray):
    x, y = np.meshgrid(values, values, indexing="ij")
    return x.reshape(-1), y.reshape(-1)


EDGE_BINARY = [
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "max",
    "min",
    "eq",
    "ne",
    "lt",
    "ge",
    "nextafter",
    "atan2",
    "pow",
    "shift_left",
    "shift_right_logical",
    "shift_right_arithmetic",
]
# (sin and cos are left out: vmath's range reduction is accurate for |x| <= 4e5 only, and the
# edges include float32's largest values.)
EDGE_UNARY = [
    "neg",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "round_even",
    "is_finite",
    "exp",
    "expm1",
    "log1p",
    "tanh",
    "logistic",
    "erf",
    "sqrt",
    "square",
    "to_i8",
    "to_u32",
    "to_bool",
    "to_f16",
    "to_bf16",
    "to_f32",
    "not",
    "clz",
    "population_count",
]


# The interpreter's nextafter (np.nextafter) warns when it steps past the largest float.
@pytest.mark.filterwarnings("ignore:overflow encountered in nextafter")
@pytest.mark.parametrize("dtype", [I8, I32, U8, U32, F16, BF16, F32], ids=lambda d: d.name)
def test_edge_values(dtype):
    edges = _float_edges(dtype) if dtype.kind == "f" or dtype == BF16 else _int_edges(dtype)
    x, y = (jnp.asarray(a) for a in _pairs(edges))
    names = [n for n in EDGE_BINARY + EDGE_UNARY if n in OPS and dtype in OPS[n][2]]

    def program(x, y):
        return {n: OPS[n][1](*(x, y, x)[: OPS[n][0]]) for n in names}

    actual, expected, _ = run_both(program, (x, y))
    failures = []
    for name, got, want in zip(sorted(names), actual, expected):
        out_dtype = np.asarray(want).dtype
        tol = 0.0 if name in EXACT_OPS else TRANSCENDENTAL_TOL.get(out_dtype, 0.0)
        if name in ("to_bf16", "to_f16", "pow"):
            tol = tolerance(out_dtype)
        why = mismatch(got, want, tol)
        if why:
            failures.append(f"{name}: {why}")
    assert not failures, "\n".join(failures)


def test_integer_overflow_wraps_and_division_by_zero():
    x = jnp.asarray(np.array([127, -128, 100, -7, 0], np.int8))
    y = jnp.asarray(np.array([1, -1, 100, 0, 0], np.int8))

    def program(x, y):
        return x + y, x * y, x - y, x // y, x % y, lax.div(x, y), lax.rem(x, y), -x, abs(x)

    actual, expected, _ = run_both(program, (x, y))
    for got, want in zip(actual, expected):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(actual[0]), np.array([-128, 127, -56, -7, 0], np.int8))
    np.testing.assert_array_equal(np.asarray(actual[5]), np.array([127, -128, 1, -1, -1], np.int8))


# ---------------------------------------------------------------------------------------------
# Whole programs: fusion across families, mixed native/interpreted, outputs of every kind


def _layernorm(x, g, b):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


PROGRAMS = {
    "softmax": (lambda x: kiln.nn.softmax(x, axis=-1), [(6, 33)]),
    "log_softmax": (lambda x: kiln.nn.log_softmax(x, axis=0), [(7, 5)]),
    "logsumexp": (lambda x: kiln.nn.logsumexp(x, axis=1), [(4, 50)]),
    "layernorm": (_layernorm, [(5, 16), (16,), (16,)]),
    "column_center": (lambda x: x - x.mean(axis=0), [(9, 7)]),
    "transpose_add": (lambda x, y: x.T * 2 + y, [(3, 5), (5, 3)]),
    "matmul_bias_relu": (
        lambda x, w, b: jnp.maximum(jnp.tanh(x) @ w + b, 0.0),
        [(4, 6), (6, 3), (3,)],
    ),
    "sort_then_scale": (lambda x: jnp.sort(jnp.exp(x), axis=-1) * 2 - 1, [(3, 8)]),
    "cumsum_mix": (lambda x: jnp.cumsum(x * x, axis=0) + x.sum(), [(6, 4)]),
    "gather_take": (lambda x: jnp.take(x * 3, jnp.array([2, 0, -1]), axis=1) + 1, [(4, 5)]),
    "fancy_index": (lambda x: x[jnp.array([1, 1, 0]), 1:4:2] ** 2, [(3, 6)]),
    "dynamic_index": (lambda x, i: lax.dynamic_slice(x, (i, 1), (2, 2)).sum(), [(5, 4), "i32"]),
    "update_slice": (
        lambda x, u, i: lax.dynamic_update_slice(x, jnp.exp(u), (i, 0)),
        [(6, 3), (2, 3), "i32"],
    ),
    "pad_concat": (
        lambda x: jnp.concatenate([jnp.pad(x, ((1, 2), (0, 0))), x[::-1] * 2], 0),
        [(3, 4)],
    ),
    "argmax_onehot": (
        lambda x: (jnp.argmax(x, axis=1)[:, None] == jnp.arange(x.shape[1])).astype(jnp.float32),
        [(5, 7)],
    ),
    "outputs_of_every_kind": (lambda x: (x, 3.0 * jnp.ones(()), x + 1, x + 1, x.sum()), [(4,)]),
    "where_nan": (lambda x: jnp.where(jnp.isnan(x), 0.0, jnp.log(x)), [(8,)]),
    "int_math": (lambda x: (x * 3 + 7) // 2 % 5 - (x >> 1), ["i32(6,)"]),
    "iota_ops": (lambda x: x + jnp.arange(x.shape[0], dtype=jnp.float32)[:, None], [(4, 3)]),
}


def _program_args(specs, seed=1):
    rng = np.random.default_rng(seed)
    args = []
    for spec in specs:
        if spec == "i32":
            args.append(jnp.asarray(np.int32(2)))
        elif isinstance(spec, str):  # "i32(6,)"
            args.append(jnp.asarray(rng.integers(-20, 20, (6,)).astype(np.int32)))
        else:
            args.append(jnp.asarray(rng.standard_normal(spec).astype(np.float32)))
    return args


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_programs_native_matches_interpreter(name):
    fn, specs = PROGRAMS[name]
    args = _program_args(specs)
    actual, expected, text = run_both(fn, args)
    assert "native segment" in text
    for got, want in zip(actual, expected):
        assert np.asarray(got).dtype == np.asarray(want).dtype
        why = mismatch(got, want, 2e-5)
        assert why is None, f"{name}: {why}\n{text}"


def test_outputs_keep_weak_types_and_inputs_pass_through():
    f = kiln.jit(lambda x, s: (x, x * s, s + 1), backend="native")
    x = jnp.asarray(np.arange(4, dtype=np.float32))
    out = f(x, 2.0)
    assert out[0].weak_type is False and out[2].weak_type is True
    np.testing.assert_array_equal(np.asarray(out[1]), np.arange(4) * 2.0)


def test_strided_and_unaligned_inputs_are_read_correctly():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    f = kiln.jit(lambda x: x * 2, backend="native")
    view = kiln.Array._wrap(base[:, ::2])  # a strided view behind a kiln Array
    np.testing.assert_array_equal(np.asarray(f(view)), base[:, ::2] * 2)
    assert view._address is None  # never cached for a buffer compiled code cannot read


def test_large_kernels_run_on_threads_and_match():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((1024, 1100)).astype(np.float32))
    f = kiln.jit(lambda x: kiln.nn.softmax(jnp.exp(x) * 0.5, axis=-1), backend="native")
    compiled = f.lower(x).compile()
    assert "threads:" in compiled.as_text() or native.num_threads() == 1
    expected = kiln.jit(f._fun, backend="interpret")(x)
    why = mismatch(compiled(x), expected, 2e-5)
    assert why is None, why


def test_captured_constants_small_and_large():
    small = np.linspace(0, 1, 8).astype(np.float32)
    large = np.random.default_rng(0).standard_normal(300_000).astype(np.float32)  # > 1 MB
    scalar = np.float32(3.0)
    f = kiln.jit(
        lambda x: (x * jnp.asarray(small) + scalar, (x[0] + jnp.asarray(large)).sum()),
        backend="native",
    )
    x = jnp.asarray(np.arange(8, dtype=np.float32))
    compiled = f.lower(x).compile()
    assert "hidden_args=1" in compiled.as_text()
    a, b = compiled(x)
    np.testing.assert_allclose(np.asarray(a), np.arange(8) * small + 3.0, rtol=1e-6)
    np.testing.assert_allclose(float(b), float((large.astype(np.float64)).sum()), rtol=1e-4)


@pytest.mark.native
def test_backend_choice_and_default(monkeypatch):
    x = jnp.asarray(np.ones(3, np.float32))

    def backend_of(**options):
        return kiln.jit(lambda x: x + 1, **options).lower(x).compile()._entry.executable.backend

    assert backend_of() == "native"
    assert backend_of(backend="interpret") == "interpreter"
    monkeypatch.setattr(kiln.config, "backend", kiln.config.backend)
    kiln.config.update("kiln_backend", "interpret")
    assert backend_of() == "interpreter"


def test_dump_prints_each_stage(monkeypatch, capsys):
    monkeypatch.setattr(kiln.config, "dump", frozenset({"kir", "llvm", "asm"}))
    x = jnp.asarray(np.ones(5, np.float32))
    kiln.jit(lambda x: jnp.exp(x) * 7.0, backend="native")(x)
    err = capsys.readouterr().err
    assert "--- kiln: kernel IR of" in err and "kernel fusion_0" in err
    assert "--- kiln: LLVM IR of" in err and "define" in err
    assert "--- kiln: assembly of" in err


def test_concurrent_calls_from_threads_agree():
    import threading

    f = kiln.jit(lambda x, y: jnp.tanh(x) * y + 1, backend="native")
    inputs = [
        (jnp.asarray(np.full(64, k, np.float32)), jnp.asarray(np.full(64, -k, np.float32)))
        for k in range(8)
    ]
    f(*inputs[0])
    errors = []

    def work(k):
        x, y = inputs[k]
        for _ in range(300):
            out = np.asarray(f(x, y))
            if not np.allclose(out, np.tanh(np.float32(k)) * -k + 1, rtol=1e-5):
                errors.append(k)
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64], ids=lambda d: d.__name__)
def test_64_bit_types_with_x64_enabled(dtype, monkeypatch):
    monkeypatch.setattr(kiln.config, "enable_x64", True)
    rng = np.random.default_rng(0)
    x = jnp.asarray((rng.standard_normal((3, 5)) * 100).astype(dtype))
    y = jnp.asarray((rng.standard_normal((3, 5)) * 100 + 1).astype(dtype))

    def program(x, y):
        out = [
            x + y,
            x * y,
            lax.div(x, y),
            lax.rem(x, y),
            jnp.maximum(x, y),
            x.sum(axis=1),
            jnp.argmax(x, axis=0),
            x[jnp.array([2, 0])],
            x.astype(jnp.float32),
            x.T[::-1],
        ]
        if dtype == np.float64:
            out += [jnp.exp(x / 100), jnp.tanh(x / 50), jnp.log1p(jnp.abs(x))]
        return out

    actual, expected, text = run_both(program, (x, y))
    assert "interpreted (reference impl)" not in text
    for got, want in zip(actual, expected):
        assert np.asarray(got).dtype == np.asarray(want).dtype
        assert mismatch(got, want, 1e-12) is None


def test_unmarked_tests_run_on_the_backend_the_environment_names():
    """`make test-interpret` sets KILN_BACKEND=interpret: the tests without the `native` marker
    must then run through the interpreter, or that run would test nothing new."""
    expected = os.environ.get("KILN_BACKEND", "native")
    assert kiln.config.backend == expected
    x = jnp.asarray(np.ones(3, np.float32))
    backend = kiln.jit(lambda x: x * 2).lower(x).compile()._entry.executable.backend
    assert backend == {"native": "native", "interpret": "interpreter"}[expected]


@pytest.mark.native
def test_tests_marked_native_run_natively_whatever_the_environment_says():
    """The `native` marker (tests/conftest.py) pins the backend, here and in child processes."""
    assert kiln.config.backend == "native" and os.environ["KILN_BACKEND"] == "native"
    x = jnp.asarray(np.ones(3, np.float32))
    assert kiln.jit(lambda x: x * 2).lower(x).compile()._entry.executable.backend == "native"

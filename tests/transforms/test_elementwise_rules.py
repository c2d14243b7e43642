"""The jvp, transpose and batching rules of the elementwise primitives (elementwise.py and
elementwise_math.py), each called directly on concrete arrays and checked against an independent
reference: central finite differences in float64 for jvps, the dot-product identity
<ct, f(x)> == <f^T(ct), x> for transposes, and a Python loop over slices for batching."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.core.ad_util import UndefinedPrimal
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives import elementwise as ew
from kiln.primitives import elementwise_math as em
from tests._testing import x64_mode

P = {
    **{v.name: v for v in vars(ew).values() if isinstance(v, Primitive)},
    **{v.name: v for v in vars(em).values() if isinstance(v, Primitive)},
}


@pytest.fixture(autouse=True)
def _x64():
    with x64_mode(True):
        yield


def arr(value, dtype=None):
    value = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
    return jnp.asarray(value, dtype=value.dtype)


def sample(rng, domain: str, shape: tuple, dtype=np.float64) -> np.ndarray:
    """Random points of a domain that keep away from the op's singularities and kinks."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return rng.integers(-3, 4, shape).astype(dtype)
    draw = {
        "normal": lambda: rng.standard_normal(shape),
        "positive": lambda: rng.uniform(0.5, 3.0, shape),
        "unit": lambda: rng.uniform(-0.9, 0.9, shape),
        "above_one": lambda: rng.uniform(1.2, 3.0, shape),
        "nonzero": lambda: np.where(rng.random(shape) < 0.5, -1, 1) * rng.uniform(0.3, 2, shape),
    }[domain]
    value = draw()
    if dtype.kind == "c":
        value = value + 0.3j * draw()
    return np.asarray(value).astype(dtype)


# --- jvp against central finite differences ---------------------------------------------------
# (primitive name, domain of each operand, params, operand dtype); operands without a domain
# (None) are not differentiated (selectors, integer exponents).
F, C = np.float64, np.complex128
JVP_CASES = [
    ("add", ("normal", "normal"), {}, F),
    ("add_any", ("normal", "normal"), {}, F),
    ("sub", ("normal", "normal"), {}, F),
    ("mul", ("normal", "normal"), {}, F),
    ("div", ("normal", "nonzero"), {}, F),
    ("rem", ("normal", "nonzero"), {}, F),
    ("max", ("normal", "normal"), {}, F),
    ("min", ("normal", "normal"), {}, F),
    ("atan2", ("normal", "normal"), {}, F),
    ("pow", ("positive", "normal"), {}, F),
    ("complex", ("normal", "normal"), {}, F),
    ("mul", ("normal", "normal"), {}, C),
    ("div", ("normal", "nonzero"), {}, C),
    ("pow", ("positive", "normal"), {}, C),
    ("neg", ("normal",), {}, F),
    ("abs", ("nonzero",), {}, F),
    ("abs", ("nonzero",), {}, C),
    ("integer_pow", ("normal",), {"y": 3}, F),
    ("integer_pow", ("nonzero",), {"y": -2}, F),
    ("integer_pow", ("normal",), {"y": 1}, F),
    ("integer_pow", ("normal",), {"y": 2}, C),
    ("real", ("normal",), {}, C),
    ("imag", ("normal",), {}, C),
    ("conj", ("normal",), {}, C),
    ("conj", ("normal",), {}, F),
    ("convert_element_type", ("normal",), {"new_dtype": np.dtype(C), "weak_type": False}, F),
    ("convert_element_type", ("normal",), {"new_dtype": np.dtype(F), "weak_type": False}, C),
    ("convert_element_type", ("normal",), {"new_dtype": np.dtype(F), "weak_type": True}, F),
] + [
    (name, (domain,), {}, dtype)
    for name, domain, dtypes in [
        ("exp", "normal", (F, C)),
        ("exp2", "normal", (F, C)),
        ("log", "positive", (F, C)),
        ("log1p", "positive", (F, C)),
        ("expm1", "normal", (F, C)),
        ("sqrt", "positive", (F, C)),
        ("rsqrt", "positive", (F, C)),
        ("cbrt", "nonzero", (F,)),
        ("square", "normal", (F, C)),
        ("sin", "normal", (F, C)),
        ("cos", "normal", (F, C)),
        ("tan", "unit", (F, C)),
        ("asin", "unit", (F, C)),
        ("acos", "unit", (F, C)),
        ("atan", "normal", (F, C)),
        ("sinh", "normal", (F, C)),
        ("cosh", "normal", (F, C)),
        ("tanh", "normal", (F, C)),
        ("asinh", "normal", (F, C)),
        ("acosh", "above_one", (F, C)),
        ("atanh", "unit", (F, C)),
        ("logistic", "normal", (F, C)),
        ("erf", "normal", (F,)),
        ("erfc", "normal", (F,)),
        ("erf_inv", "unit", (F,)),
        ("lgamma", "positive", (F,)),
    ]
    for dtype in dtypes
]


def finite_difference(prim, primals, tangents, params, eps=1e-6):
    def at(step):
        moved = [p if t is None else p + step * t for p, t in zip(primals, tangents)]
        return np.asarray(prim.bind(*map(arr, moved), **params))

    return (at(eps) - at(-eps)) / (2 * eps)


def check_jvp(prim, primals, tangents, params, rtol=1e-6):
    out, out_tangent = prim.rule("jvp")(
        tuple(map(arr, primals)), tuple(None if t is None else arr(t) for t in tangents), **params
    )
    np.testing.assert_array_equal(
        np.asarray(out), np.asarray(prim.bind(*map(arr, primals), **params))
    )
    expected = finite_difference(prim, primals, tangents, params)
    got = np.zeros_like(expected) if out_tangent is None else np.asarray(out_tangent)
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got, expected)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-7)


def _case_id(case):
    name, _, params, dtype = case
    return f"{name}-{np.dtype(dtype).name}" + "".join(
        f"-{k}={v}" for k, v in params.items() if k == "y" or k == "new_dtype"
    )


@pytest.mark.parametrize("case", JVP_CASES, ids=map(_case_id, JVP_CASES))
def test_jvp_matches_finite_differences(case):
    name, domains, params, dtype = case
    prim, rng = P[name], np.random.default_rng(0)
    # Full-shape operands, then (for binary ops) each operand rank-0 in turn, with every
    # non-empty subset of the tangents given (the others are symbolic zeros).
    layouts = [[(4,)] * len(domains)]
    if len(domains) == 2:
        layouts += [[(), (4,)], [(4,), ()]]
    for shapes in layouts:
        primals = [sample(rng, d, s, dtype) for d, s in zip(domains, shapes)]
        for given in itertools.product([True, False], repeat=len(domains)):
            if any(given):
                tangents = [
                    sample(rng, "normal", s, dtype) if g else None for g, s in zip(given, shapes)
                ]
                check_jvp(prim, primals, tangents, params)


@pytest.mark.parametrize("layout", [((4,), (4,)), ((), (4,)), ((4,), ())])
def test_pow_jvp_with_an_integer_exponent(layout):
    rng = np.random.default_rng(1)
    x = sample(rng, "positive", layout[0])
    y = np.array([0, 1, -2, 3])[: np.prod(layout[1], dtype=int)].reshape(layout[1]).astype(np.int32)
    check_jvp(em.pow_p, [x, y], [sample(rng, "normal", layout[0]), None], {})


def test_select_n_and_clamp_jvp():
    rng = np.random.default_rng(2)
    cases = [sample(rng, "normal", (5,)) for _ in range(3)]
    for which in (rng.random(5) < 0.5, np.array(True), np.array([0, 2, 1, 7, -1], np.int32)):
        chosen = cases[:2] if which.dtype == np.bool_ else cases
        for given in itertools.product([True, False], repeat=len(chosen)):
            if any(given):
                tangents = [sample(rng, "normal", (5,)) if g else None for g in given]
                check_jvp(ew.select_n_p, [which, *chosen], [None, *tangents], {})
    x = np.array([-2.0, -0.3, 0.1, 0.45, 3.0])
    for lo, hi in ((np.array(-0.5), np.array(0.5)), (np.full(5, -0.5), np.array(0.5))):
        for given in itertools.product([True, False], repeat=3):
            if any(given):
                tangents = [
                    sample(rng, "normal", np.shape(v)) if g else None
                    for g, v in zip(given, (lo, x, hi))
                ]
                check_jvp(ew.clamp_p, [lo, x, hi], tangents, {})


def jvp_of(prim, primals, tangents, **params):
    return prim.rule("jvp")(
        tuple(map(arr, primals)), tuple(None if t is None else arr(t) for t in tangents), **params
    )[1]


def test_ties_and_kinks_follow_jax():
    one, zero = np.array(1.0), np.array(0.0)
    for prim in (ew.max_p, ew.min_p):  # a tie splits the derivative evenly
        assert float(np.asarray(jvp_of(prim, [one, one], [one, None]))) == 0.5
        assert float(np.asarray(jvp_of(prim, [one, one], [None, one]))) == 0.5
        assert float(np.asarray(jvp_of(prim, [one, one], [one, one]))) == 1.0
    x = np.array([-1.0, -0.0, 0.0, 2.0])
    np.testing.assert_array_equal(
        np.asarray(jvp_of(ew.abs_p, [x], [np.ones(4)])), [-1.0, 1.0, 1.0, 1.0]
    )  # lax.abs: slope 1 at +-0
    np.testing.assert_allclose(  # Re(conj(x) / |x| * t), and 0 at x == 0
        np.asarray(jvp_of(ew.abs_p, [np.array([0j, 3 + 4j])], [np.array([1 + 1j, 1 + 1j])])),
        [0.0, 0.6 + 0.8],
        rtol=1e-15,
    )
    # clamp: a tie with a bound passes no tangent to anyone
    for x_value in (1.0, 2.0):
        lo, x_, hi = np.array(1.0), np.array(x_value), np.array(2.0)
        for i in range(3):
            tangents = [one if j == i else None for j in range(3)]
            assert float(np.asarray(jvp_of(ew.clamp_p, [lo, x_, hi], tangents))) == 0.0
    # pow at x == 0: d/dx 0**2 = 0, d/dy 0**y = 0 (log(0) is replaced), d/dx 0**0 = nan
    two = np.array(2.0)
    assert float(np.asarray(jvp_of(em.pow_p, [zero, two], [one, None]))) == 0.0
    assert float(np.asarray(jvp_of(em.pow_p, [zero, two], [None, one]))) == 0.0
    assert np.isnan(float(np.asarray(jvp_of(em.pow_p, [zero, zero], [one, None]))))
    assert float(np.asarray(jvp_of(em.pow_p, [zero, np.array(0, np.int32)], [one, None]))) == 0
    # rem: d/dy = -trunc(x / y)
    assert float(np.asarray(jvp_of(ew.rem_p, [np.array(7.5), two], [None, one]))) == -3.0
    assert float(np.asarray(jvp_of(ew.rem_p, [np.array(-7.5), two], [None, one]))) == 3.0


ZERO_JVP = [
    ("sign", [np.array([-1.5, 0.0, 2.0])]),
    ("floor", [np.array([-1.5, 2.2])]),
    ("ceil", [np.array([-1.5, 2.2])]),
    ("is_finite", [np.array([1.0, np.inf])]),
    ("eq", [np.array([1.0, 2.0])] * 2),
    ("lt", [np.array([1.0]), np.array([2.0])]),
    ("ne", [np.array([1.0])] * 2),
    ("ge", [np.array([1.0])] * 2),
    ("le", [np.array([1.0])] * 2),
    ("gt", [np.array([1.0])] * 2),
    ("bitcast_convert_type", [np.array([1.5])]),
]


@pytest.mark.parametrize("name,primals", ZERO_JVP, ids=[n for n, _ in ZERO_JVP])
def test_piecewise_constant_and_boolean_ops_have_zero_tangents(name, primals):
    params = {"new_dtype": np.dtype(np.int64)} if name == "bitcast_convert_type" else {}
    assert jvp_of(P[name], primals, [np.ones_like(p) for p in primals], **params) is None


def test_round_integer_results_and_constant_powers_have_zero_tangents():
    out, tangent = P["round"].rule("jvp")(
        (arr([0.5, 1.7]),), (arr([1.0, 1.0]),), rounding_method=ew.RoundingMethod.TO_NEAREST_EVEN
    )
    assert tangent is None and np.asarray(out).tolist() == [0.0, 2.0]
    assert (
        jvp_of(
            ew.convert_element_type_p,
            [np.array([1.5])],
            [np.array([1.0])],
            new_dtype=np.dtype(np.int32),
            weak_type=False,
        )
        is None
    )
    assert jvp_of(ew.integer_pow_p, [np.array([1.5])], [np.array([1.0])], y=0) is None


@pytest.mark.parametrize("name,reason", [("nextafter", "nextafter")])
def test_non_differentiable_ops_raise(name, reason):
    prim = P[name]
    primals = [np.array([1.5])] * (2 if name == "nextafter" else 1)
    with pytest.raises(TypeError, match=reason):
        jvp_of(prim, primals, [np.ones(1)] + [None] * (len(primals) - 1))


# --- transposes: the dot-product test ---------------------------------------------------------
# (primitive name, operands as (shape, dtype, linear?), params). Non-linear operands are known.
def _op(shape, dtype=F, linear=True):
    return (shape, np.dtype(dtype), linear)


TRANSPOSE_CASES = [
    ("add", [_op((3,)), _op((3,))], {}),
    ("add", [_op(()), _op((3,))], {}),
    ("add", [_op((3,)), _op((), linear=False)], {}),
    ("add_any", [_op((3,)), _op((3,))], {}),
    ("sub", [_op((3,)), _op((3,))], {}),
    ("sub", [_op((3,), linear=False), _op(())], {}),
    ("neg", [_op((2, 3))], {}),
    ("mul", [_op((3,)), _op((3,), linear=False)], {}),
    ("mul", [_op(()), _op((3,), linear=False)], {}),
    ("mul", [_op((3,), linear=False), _op(())], {}),
    ("mul", [_op((3,), C, linear=False), _op((3,), C)], {}),
    ("div", [_op((3,)), _op((3,), linear=False)], {}),
    ("div", [_op(()), _op((3,), linear=False)], {}),
    ("div", [_op((3,)), _op((), linear=False)], {}),
    ("real", [_op((3,), C)], {}),
    ("imag", [_op((3,), C)], {}),
    ("conj", [_op((3,), C)], {}),
    ("conj", [_op((3,), F)], {}),
    ("complex", [_op((3,)), _op((3,))], {}),
    ("complex", [_op(()), _op((3,))], {}),
    ("complex", [_op((3,), linear=False), _op(())], {}),
    (
        "convert_element_type",
        [_op((3,), np.float32)],
        {"new_dtype": np.dtype(F), "weak_type": False},
    ),
    ("convert_element_type", [_op((3,), F)], {"new_dtype": np.dtype(C), "weak_type": False}),
    ("convert_element_type", [_op((3,), C)], {"new_dtype": np.dtype(F), "weak_type": False}),
    ("convert_element_type", [_op((3,), F)], {"new_dtype": np.dtype(F), "weak_type": True}),
    ("select_n", [_op((4,), np.bool_, False), _op((4,)), _op((4,))], {}),
    ("select_n", [_op((), np.bool_, False), _op((4,), linear=False), _op((4,))], {}),
    ("select_n", [_op((4,), np.int32, False), _op((4,)), _op((4,), linear=False), _op((4,))], {}),
]


def _known_value(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "i":
        return rng.integers(-1, 4, shape).astype(dtype)  # out of range selectors clip
    return sample(rng, "nonzero", shape, dtype)


def pairing(a, b) -> float:
    """The real pairing of (co)tangents that JAX's transposes use: sum(Re(a * b))."""
    return float(np.sum(np.real(np.asarray(a, np.complex128) * np.asarray(b, np.complex128))))


@pytest.mark.parametrize(
    "name,operands,params",
    TRANSPOSE_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(TRANSPOSE_CASES)],
)
def test_transpose_by_dot_product(name, operands, params):
    prim, rng = P[name], np.random.default_rng(3)
    values = [
        _known_value(rng, s, d) if not lin else sample(rng, "normal", s, d)
        for s, d, lin in operands
    ]
    out = np.asarray(prim.bind(*map(arr, values), **params))
    ct = sample(rng, "normal", out.shape, out.dtype)
    args = [
        UndefinedPrimal(ShapedArray(s, d)) if lin else arr(v)
        for (s, d, lin), v in zip(operands, values)
    ]
    cts = prim.rule("transpose")(arr(ct), *args, **params)
    assert len(cts) == len(operands)
    # Linear in the undefined operands jointly: <ct, f(x)> with the known ones fixed equals the
    # sum of <ct_i, x_i>. (Known operands of add/sub/complex contribute f's affine offset, which
    # is taken out by evaluating f with the linear operands at zero.)
    zeroed = [np.zeros_like(v) if lin else v for (_, _, lin), v in zip(operands, values)]
    offset = np.asarray(prim.bind(*map(arr, zeroed), **params))
    lhs = pairing(ct, out - offset)
    rhs = 0.0
    for (shape, dtype, lin), value, cotangent in zip(operands, values, cts):
        if not lin:
            assert cotangent is None
            continue
        cotangent = np.asarray(cotangent)
        assert cotangent.shape == shape and cotangent.dtype == dtype, (cotangent, shape, dtype)
        rhs += pairing(cotangent, value)
    np.testing.assert_allclose(
        lhs, rhs, rtol=1e-5 if np.float32 in [d for _, d, _ in operands] else 1e-12
    )


def test_linear_jvps_apply_the_op_to_tangents():
    rng = np.random.default_rng(4)
    x, tx = sample(rng, "normal", (3,), C), sample(rng, "normal", (3,), C)
    for name in ("real", "imag", "conj", "neg"):
        np.testing.assert_array_equal(
            np.asarray(jvp_of(P[name], [x], [tx])), np.asarray(P[name].bind(arr(tx)))
        )


def test_nonlinear_transposes_are_refused():
    undefined = UndefinedPrimal(ShapedArray((3,), np.dtype(F)))
    with pytest.raises(TypeError, match="not linear"):
        ew.mul_p.rule("transpose")(arr(np.ones(3)), undefined, undefined)
    with pytest.raises(TypeError, match="numerator"):
        ew.div_p.rule("transpose")(arr(np.ones(3)), arr(np.ones(3)), undefined)


# --- batching against a loop over slices ------------------------------------------------------
B = 3


def _batched(rng, example_shape, dim, dtype, domain="normal"):
    """(value, dim): a batched operand with its batch axis at `dim`, or an unbatched one."""
    if dim is None:
        return sample(rng, domain, example_shape, dtype), None
    value = sample(rng, domain, (B,) + example_shape, dtype)
    return np.moveaxis(value, 0, dim), dim


def check_batching(prim, values, dims, params=None):
    params = params or {}
    out, out_dim = prim.rule("batching")([arr(v) for v in values], list(dims), **params)
    got = np.moveaxis(np.asarray(out), out_dim, 0)
    expected = np.stack(
        [
            np.asarray(
                prim.bind(
                    *[arr(v if d is None else np.take(v, i, axis=d)) for v, d in zip(values, dims)],
                    **params,
                )
            )
            for i in range(B)
        ]
    )
    assert got.dtype == expected.dtype
    # (NumPy's vector loops may round a transcendental differently from its scalar ones)
    np.testing.assert_allclose(got, expected, rtol=0 if got.dtype.kind in "biu" else 1e-14)


# (example shape, batch dim) of each operand of a binary op: mixed axes, unbatched operands,
# rank-0 operands on either side, batched or not
BINARY_LAYOUTS = [
    [((2, 4), 0), ((2, 4), 0)],
    [((2, 4), 1), ((2, 4), 2)],
    [((2, 4), 0), ((2, 4), None)],
    [((), None), ((4,), 1)],
    [((), 0), ((4,), None)],
    [((4,), 0), ((), 0)],
    [((), 0), ((), None)],
    [((), 0), ((), 0)],
]
BINARY_OPS = [
    ("add", F, "normal"),
    ("add_any", F, "normal"),
    ("sub", F, "normal"),
    ("mul", F, "normal"),
    ("div", F, "nonzero"),
    ("rem", F, "nonzero"),
    ("max", F, "normal"),
    ("min", F, "normal"),
    ("nextafter", F, "normal"),
    ("atan2", F, "normal"),
    ("pow", F, "positive"),
    ("complex", F, "normal"),
    ("eq", F, "normal"),
    ("ne", np.int32, ""),
    ("lt", F, "normal"),
    ("le", F, "normal"),
    ("gt", np.int32, ""),
    ("ge", F, "normal"),
    ("and", np.bool_, ""),
    ("or", np.int32, ""),
    ("xor", np.uint8, ""),
    ("shift_left", np.int32, ""),
    ("shift_right_logical", np.int32, ""),
    ("shift_right_arithmetic", np.int32, ""),
    ("div", np.int32, ""),
    ("rem", np.int32, ""),
]


@pytest.mark.parametrize(
    "name,dtype,domain", BINARY_OPS, ids=[f"{n}-{np.dtype(d).name}" for n, d, _ in BINARY_OPS]
)
def test_binary_batching(name, dtype, domain):
    rng = np.random.default_rng(5)
    for layout in BINARY_LAYOUTS:
        operands = [_batched(rng, shape, dim, dtype, domain or "normal") for shape, dim in layout]
        if name == "div" and np.dtype(dtype).kind == "i":
            operands[1] = (np.where(operands[1][0] == 0, 1, operands[1][0]), operands[1][1])
        check_batching(P[name], *zip(*operands))


UNARY_OPS = [
    (name, F, "positive")
    for name in (
        "neg",
        "abs",
        "sign",
        "floor",
        "ceil",
        "is_finite",
        "exp",
        "exp2",
        "log",
        "log1p",
        "expm1",
        "sqrt",
        "rsqrt",
        "cbrt",
        "square",
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
        "conj",
    )
] + [
    ("real", C, "normal"),
    ("imag", C, "normal"),
    ("conj", C, "normal"),
    ("abs", C, "normal"),
    ("not", np.int32, ""),
    ("population_count", np.int32, ""),
    ("clz", np.uint16, ""),
]


@pytest.mark.parametrize(
    "name,dtype,domain", UNARY_OPS, ids=[f"{n}-{np.dtype(d).name}" for n, d, _ in UNARY_OPS]
)
def test_unary_batching(name, dtype, domain):
    rng = np.random.default_rng(6)
    for shape, dim in (((2, 4), 1), ((), 0), ((4,), 0)):
        value, dim = _batched(rng, shape, dim, dtype, domain or "normal")
        check_batching(P[name], [value], [dim])


PARAM_OPS = [
    ("integer_pow", {"y": 3}),
    ("integer_pow", {"y": -1}),
    ("round", {"rounding_method": ew.RoundingMethod.AWAY_FROM_ZERO}),
    ("round", {"rounding_method": ew.RoundingMethod.TO_NEAREST_EVEN}),
    ("convert_element_type", {"new_dtype": np.dtype(np.int32), "weak_type": False}),
    ("convert_element_type", {"new_dtype": np.dtype(C), "weak_type": False}),
    ("bitcast_convert_type", {"new_dtype": np.dtype(np.uint64)}),
]


@pytest.mark.parametrize("name,params", PARAM_OPS, ids=[n for n, _ in PARAM_OPS])
def test_batching_passes_params(name, params):
    rng = np.random.default_rng(7)
    value, dim = _batched(rng, (2, 4), 2, F, "nonzero")
    check_batching(P[name], [value * 3], [dim], params)


def test_pow_batching_with_integer_exponents():
    rng = np.random.default_rng(8)
    x, x_dim = _batched(rng, (4,), 1, F, "positive")
    y, y_dim = _batched(rng, (), 0, np.int32)
    check_batching(em.pow_p, [x, y], [x_dim, y_dim])
    check_batching(em.pow_p, [x[0], np.array(2, np.int32)], [0, None])


# select_n: (selector, cases) as (example shape, batch dim); a selector that is an unbatched or
# batched per-example scalar among larger cases, and rank-0 cases with a batched selector
SELECT_LAYOUTS = [
    ((), None, [((4,), 0), ((4,), 1)]),
    ((), None, [((), 0), ((), None)]),
    ((), 0, [((4,), None), ((4,), 0)]),
    ((), 0, [((4,), None), ((4,), None)]),
    ((4,), 1, [((4,), None), ((4,), 0)]),
    ((), 0, [((), None), ((), None)]),
    ((2, 4), 2, [((2, 4), 1), ((2, 4), None)]),
    ((4,), None, [((4,), 0), ((4,), None)]),
]


@pytest.mark.parametrize("which_dtype", [np.bool_, np.int32])
@pytest.mark.parametrize("layout", SELECT_LAYOUTS, ids=map(str, range(len(SELECT_LAYOUTS))))
def test_select_n_batching(layout, which_dtype):
    rng = np.random.default_rng(9)
    which_shape, which_dim, case_layout = layout
    which, _ = _batched(rng, which_shape, which_dim, which_dtype)
    n_cases = 2 if which_dtype == np.bool_ else 3
    cases = [_batched(rng, shape, dim, F) for shape, dim in (case_layout + case_layout)[:n_cases]]
    check_batching(
        ew.select_n_p, [which, *(c for c, _ in cases)], [which_dim, *(d for _, d in cases)]
    )


# clamp: (lo, x, hi) as (example shape, batch dim); rank-0 bounds batched or not
CLAMP_LAYOUTS = [
    [((), None), ((4,), 0), ((), None)],
    [((), 0), ((4,), 1), ((), None)],
    [((), 0), ((4,), None), ((), 0)],
    [((4,), 1), ((4,), 0), ((), None)],
    [((), None), ((), 0), ((), None)],
    [((), 0), ((), None), ((), None)],
    [((2, 4), 2), ((2, 4), None), ((2, 4), 0)],
]


@pytest.mark.parametrize("layout", CLAMP_LAYOUTS, ids=map(str, range(len(CLAMP_LAYOUTS))))
def test_clamp_batching(layout):
    rng = np.random.default_rng(10)
    (lo, lo_dim), (x, x_dim), (hi, hi_dim) = [_batched(rng, s, d, F) for s, d in layout]
    check_batching(ew.clamp_p, [lo - 1, x, hi + 1], [lo_dim, x_dim, hi_dim])


# --- every primitive of the two modules declares its rules ------------------------------------
LINEAR = {
    "add",
    "add_any",
    "sub",
    "neg",
    "mul",
    "div",
    "real",
    "imag",
    "conj",
    "complex",
    "select_n",
    "convert_element_type",
}


@pytest.mark.parametrize("name", sorted(P))
def test_every_primitive_has_its_rules(name):
    prim = P[name]
    assert prim.rule("jvp") is not None, f"{name} has no jvp rule"
    assert prim.rule("batching") is not None, f"{name} has no batching rule"
    assert (prim.rule("transpose") is not None) == (name in LINEAR), name


# --- through the transformations, where they exist --------------------------------------------
needs = pytest.mark.skipif(
    not all(hasattr(kiln, n) for n in ("jvp", "grad", "vmap")),
    reason="kiln.jvp/grad/vmap not available",
)


@needs
def test_grad_and_vmap_end_to_end():
    lax = kiln.lax

    def f(x, y):
        return lax.mul(lax.sin(x), lax.max(y, 0.5)) + lax.clamp(-1.0, x, 1.0) / y

    x, y, eps = arr(0.3), arr(2.0), 1e-6
    for argnum in (0, 1):
        shift = [np.zeros(()), np.zeros(())]
        shift[argnum] = np.array(eps)
        fd = (float(f(x + shift[0], y + shift[1])) - float(f(x - shift[0], y - shift[1]))) / (
            2 * eps
        )
        np.testing.assert_allclose(float(kiln.grad(f, argnum)(x, y)), fd, rtol=1e-6)
    xs = arr(np.linspace(-2, 2, 5))
    got = np.asarray(kiln.vmap(f, in_axes=(0, None))(xs, y))
    np.testing.assert_allclose(got, [float(f(arr(v), y)) for v in np.asarray(xs)], rtol=1e-12)
    grads = np.asarray(kiln.vmap(kiln.grad(f), in_axes=(0, None))(xs, y))
    np.testing.assert_allclose(
        grads, [float(kiln.grad(f)(arr(v), y)) for v in np.asarray(xs)], rtol=1e-12
    )


@needs
@pytest.mark.parametrize("case", JVP_CASES, ids=map(_case_id, JVP_CASES))
def test_check_grads_forward_and_reverse(case):
    from kiln.test_util import check_grads

    name, domains, params, dtype = case
    prim, rng = P[name], np.random.default_rng(11)
    args = [arr(sample(rng, d, s, dtype)) for d, s in zip(domains, [(3,), ()][: len(domains)])]
    # second order too, except where it would need a derivative kiln lacks (lgamma -> digamma)
    order = 1 if name == "lgamma" else 2
    check_grads(lambda *xs: prim.bind(*xs, **params), args, order=order, modes=("fwd", "rev"))


REAL_CASES = [
    c
    for c in JVP_CASES
    if np.dtype(c[3]).kind == "f"
    and c[2].get("new_dtype", np.dtype(F)).kind == "f"
    and c[0] not in ("complex", "conj")
]


@needs
@pytest.mark.parametrize("case", REAL_CASES, ids=map(_case_id, REAL_CASES))
def test_vmap_of_grad_matches_a_loop(case):
    name, domains, params, dtype = case
    prim, rng = P[name], np.random.default_rng(12)
    args = [sample(rng, d, (4,), dtype) for d in domains]
    argnums = tuple(range(len(domains)))
    grad = kiln.grad(lambda *xs: prim.bind(*xs, **params), argnums)
    for in_axes in [(0,) * len(domains)] + ([(0, None), (None, 0)] if len(domains) == 2 else []):
        batched = kiln.vmap(grad, in_axes=in_axes)(
            *[arr(a if ax == 0 else a[0]) for a, ax in zip(args, in_axes)]
        )
        for i in range(4):
            expected = grad(*[arr(a[i] if ax == 0 else a[0]) for a, ax in zip(args, in_axes)])
            for got, want in zip(batched, expected):
                got = np.asarray(got)
                got = got[i] if got.ndim else got  # unbatched results come back unbatched
                np.testing.assert_allclose(got, np.asarray(want), rtol=1e-13)


@needs
def test_vmap_of_select_n_and_clamp_with_scalars():
    xs, lo = arr(np.linspace(-2, 2, 6).reshape(3, 2)), arr(np.array([-1.0, 0.0, 0.5]))
    pred = arr(np.array([True, False, True]))

    def f(p, x, bound):
        return ew.select_n(p, ew.clamp(bound, x, 1.0), ew.neg(x))

    got = np.asarray(kiln.vmap(f)(pred, xs, lo))
    expected = np.stack([np.asarray(f(pred[i], xs[i], lo[i])) for i in range(3)])
    np.testing.assert_array_equal(got, expected)
    got = np.asarray(kiln.vmap(f, in_axes=(None, 0, None))(arr(np.array(False)), xs, arr(0.0)))
    np.testing.assert_array_equal(got, np.where(np.asarray(xs) > 0, np.minimum(xs, 1.0), 0.0))


def test_digamma_derivative_is_trigamma():
    from scipy.special import polygamma

    x = np.array([-2.5, -0.3, 0.1, 0.5, 1.0, 3.3, 7.0, 50.0])
    with x64_mode(True):
        out, tangent = P["digamma"].rule("jvp")((arr(x),), (arr(np.ones_like(x)),))
    np.testing.assert_allclose(np.asarray(tangent), polygamma(1, x), rtol=1e-11)

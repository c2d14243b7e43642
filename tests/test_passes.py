"""Golden tests of the optimization passes: jaxpr text in, expected jaxpr text out.

A small parser (below) reads the printed jaxpr format back into a ClosedJaxpr. Literals may be
typed (`1.0:f32[]`) or untyped (they take the dtype of the equation's first variable operand);
all parsed literals are weakly typed, like Python scalars. Every pass output must typecheck,
and evaluating it must give bit-for-bit the result of evaluating the input (checked on inputs
that include -0.0, inf and NaN).
"""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.compiler import pipeline
from kiln.compiler.passes import cse, dce, fold_constants, inline_calls, simplify
from kiln.core import dtypes, rules
from kiln.core.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.interpreter import eval_jaxpr
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal, Var, typecheck_jaxpr
from kiln.primitives.pjit import pjit_p

# --- a parser for the printed jaxpr format ---------------------------------------------------

_TOKEN = re.compile(r"\s*(?:([{}\[\](),;=:])|([^\s{}\[\](),;=:]+))")
_DTYPES = {dtypes.short_name(d): d for d in dtypes.SUPPORTED}
_LITERAL_WORDS = {"True", "False", "inf", "-inf", "nan"}


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        out.append(m.group(1) or m.group(2))
        pos = m.end()
    return out


def _primitives() -> dict:
    prims = {p.name: p for p in rules.abstract_eval_rules}
    prims["pjit"] = pjit_p
    return prims


def _is_literal_word(word: str) -> bool:
    return word in _LITERAL_WORDS or word[0].isdigit() or word[0] in "-."


class _Parser:
    def __init__(self, text: str, consts: list):
        self.toks = _tokens(text)
        self.pos = 0
        self.consts = list(consts)
        self.prims = _primitives()

    def peek(self, k: int = 0):
        return self.toks[self.pos + k] if self.pos + k < len(self.toks) else None

    def take(self, expect: str | None = None) -> str:
        tok = self.toks[self.pos]
        if expect is not None and tok != expect:
            raise SyntaxError(f"expected {expect!r}, got {tok!r} at token {self.pos}")
        self.pos += 1
        return tok

    def type_(self) -> tuple:
        dtype = _DTYPES[self.take()]
        self.take("[")
        dims = []
        while self.peek() != "]":
            tok = self.take()
            if tok != ",":
                dims.append(int(tok))
        self.take("]")
        return tuple(dims), dtype

    def binders(self, env: dict, stop: set) -> list:
        out = []
        while self.peek() not in stop:
            name = self.take()
            self.take(":")
            shape, dtype = self.type_()
            var = (
                DropVar(ShapedArray(shape, dtype))
                if name == "_"
                else Var(ShapedArray(shape, dtype))
            )
            if name != "_":
                env[name] = var
            out.append(var)
        return out

    def jaxpr(self, env: dict) -> ClosedJaxpr:
        env = dict(env)
        self.take("{")
        self.take("lambda")
        constvars = self.binders(env, {";"})
        self.take(";")
        invars = self.binders(env, {"."})
        self.take(".")
        self.take("let")
        eqns = []
        while self.peek() != "in":
            eqns.append(self.eqn(env))
        self.take("in")
        self.take("(")
        outs = []
        while self.peek() != ")":
            tok = self.take()
            if tok != ",":
                outs.append(env[tok])
        self.take(")")
        self.take("}")
        consts = [self.consts.pop(0) for _ in constvars]
        return ClosedJaxpr(Jaxpr(constvars, invars, outs, eqns), consts)

    def eqn(self, env: dict) -> JaxprEqn:
        out_types = []
        while self.peek() != "=":
            name = self.take()
            self.take(":")
            out_types.append((name, self.type_()))
        self.take("=")
        prim = self.prims[self.take()]
        params = self.params(env) if self.peek() == "[" else {}
        raw_args = []
        while (
            self.peek() != "in"
            and not (self.peek(1) == ":" and not _is_literal_word(self.peek()))
            and self.peek(1) != "="
        ):
            raw_args.append(self.atom_token())
        ref = next((env[a] for a, _ in raw_args if a in env), None)
        invars = [env[a] if a in env else self.literal(a, t, ref) for a, t in raw_args]
        avals = rules.abstract_eval_rules[prim](*[a.aval for a in invars], **params)
        avals = avals if prim.multiple_results else [avals]
        outvars = []
        for (name, (shape, dtype)), aval in zip(out_types, avals):
            assert (aval.shape, aval.dtype) == (shape, dtype), f"{name}: {aval} != {shape}"
            var = DropVar(aval) if name == "_" else Var(aval)
            if name != "_":
                env[name] = var
            outvars.append(var)
        return JaxprEqn(prim, invars, outvars, params)

    def atom_token(self):
        word = self.take()
        if self.peek() == ":":  # a typed literal
            self.take(":")
            return word, self.type_()
        return word, None

    @staticmethod
    def literal(word: str, typ, ref) -> Literal:
        if typ is not None:
            dtype = typ[1]
        elif word in ("True", "False"):
            dtype = dtypes.bool_
        else:
            dtype = ref.aval.dtype
        value = np.asarray(
            True if word == "True" else False if word == "False" else float(word), dtype=dtype
        )
        return Literal(value, ShapedArray((), dtype, True))

    def params(self, env: dict) -> dict:
        self.take("[")
        params = {}
        while self.peek() != "]":
            key = self.take()
            self.take("=")
            if self.peek() == "{":
                params[key] = self.jaxpr(env)
                continue
            depth, parts = 0, []
            while True:
                tok = self.peek()
                if depth == 0 and (tok == "]" or self.peek(1) == "="):
                    break
                depth += tok in "([" and 1 or 0
                depth -= tok in ")]" and 1 or 0
                parts.append(self.take())
            params[key] = _param_value("".join(parts))
        self.take("]")
        return params


def _tuples(value):
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    return value


def _param_value(text: str):
    try:
        return _tuples(ast.literal_eval(text))
    except (ValueError, SyntaxError):
        pass
    try:
        return dtypes.to_dtype(text)
    except TypeError:
        return text


def parse_jaxpr(text: str, consts=()) -> ClosedJaxpr:
    """Read a printed jaxpr back; `consts` supplies the constvars' values, in order."""
    consts = [c if isinstance(c, Array) else Array(c) for c in consts]
    closed = _Parser(text, consts).jaxpr({})
    typecheck_jaxpr(closed.jaxpr)
    return closed


# --- helpers ---------------------------------------------------------------------------------


def _normalize(text: str) -> str:
    return " ".join(text.split())


def run_pass(pass_fn, text: str, consts=()) -> ClosedJaxpr:
    closed = parse_jaxpr(text, consts)
    out = pass_fn(closed)
    typecheck_jaxpr(out.jaxpr)
    _check_same_results(closed, out)
    return out


def _special_inputs(aval: ShapedArray, rng) -> np.ndarray:
    if aval.dtype.kind == "f":
        pool = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan], dtype=aval.dtype)
        return rng.choice(pool, size=aval.shape).astype(aval.dtype)
    if aval.dtype.kind == "c":
        parts = rng.choice(np.array([0.0, -0.0, 1.0, np.inf, np.nan]), size=aval.shape + (2,))
        out = np.empty(aval.shape, aval.dtype)
        out.real, out.imag = parts[..., 0], parts[..., 1]
        return out
    if aval.dtype == np.bool_:
        return rng.random(aval.shape) < 0.5
    info = np.iinfo(aval.dtype)
    pool = np.array([0, 1, 7, info.max, info.min], dtype=aval.dtype)
    return rng.choice(pool, size=aval.shape).astype(aval.dtype)


def _check_same_results(before: ClosedJaxpr, after: ClosedJaxpr) -> None:
    """The optimized jaxpr computes bit-for-bit what the original computes."""
    rng = np.random.default_rng(0)
    for _ in range(3):
        args = [Array(_special_inputs(a, rng)) for a in before.in_avals]
        expected = eval_jaxpr(before.jaxpr, before.consts, *args)
        actual = eval_jaxpr(after.jaxpr, after.consts, *args)
        for e, a in zip(expected, actual):
            e, a = np.asarray(e), np.asarray(a)
            assert e.dtype == a.dtype and e.shape == a.shape
            np.testing.assert_array_equal(a, e)
            if e.dtype.kind in "fc":
                assert np.array_equal(np.signbit(e.real), np.signbit(a.real))


def check_golden(pass_fn, text: str, expected: str, consts=()) -> ClosedJaxpr:
    out = run_pass(pass_fn, text, consts)
    assert _normalize(str(out)) == _normalize(expected), str(out)
    return out


def test_parser_round_trips_printed_jaxprs():
    def f(x, y):
        z = jnp.exp(x) * y + 2.0
        return z.reshape(6).reshape(3, 2), jnp.transpose(z)

    closed = kiln.make_jaxpr(f)(jnp.ones((2, 3)), jnp.ones((2, 3)))
    assert str(parse_jaxpr(str(closed))) == str(closed)


# --- DCE -----------------------------------------------------------------------------------


def test_dce_removes_dead_equations_and_keeps_the_signature():
    check_golden(
        dce,
        """
        { lambda ; a:f32[3] b:f32[3]. let
            c:f32[3] = mul a a
            d:f32[3] = add a 1.0
            e:f32[3] = neg d
          in (c,) }""",
        "{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = mul a a in (c,) }",
    )


def test_dce_removes_unused_consts():
    out = check_golden(
        dce,
        """
        { lambda a:f32[3] b:f32[3]; c:f32[3]. let
            d:f32[3] = mul c b
            e:f32[3] = mul c a
          in (e,) }""",
        "{ lambda a:f32[3]; b:f32[3]. let c:f32[3] = mul b a in (c,) }",
        consts=[np.arange(3, dtype=np.float32), np.ones(3, np.float32)],
    )
    np.testing.assert_array_equal(np.asarray(out.consts[0]), [0, 1, 2])


def test_dce_keeps_effectful_equations():
    def f(x):
        kiln.debug.print("x={}", x * 2)
        return x

    closed = kiln.make_jaxpr(f)(jnp.ones(3))
    out = dce(closed)
    typecheck_jaxpr(out.jaxpr)
    assert [e.primitive.name for e in out.eqns] == ["mul", "debug_callback"]


def test_dce_keeps_calls_whose_body_has_effects_and_prunes_the_rest():
    inner = kiln.jit(lambda x: (kiln.debug.print("{}", x), x * 2, x + 1)[1:])

    def f(x):
        a, b = inner(x)
        return b

    out = dce(kiln.make_jaxpr(f)(jnp.ones(2)))
    typecheck_jaxpr(out.jaxpr)
    (call,) = out.eqns
    body = call.params["jaxpr"].jaxpr
    assert [e.primitive.name for e in body.eqns] == ["debug_callback", "add"]
    assert len(call.outvars) == 1


def test_dce_removes_unused_effect_free_calls():
    inner = kiln.jit(lambda x: x * 2)
    out = dce(kiln.make_jaxpr(lambda x: (inner(x), x)[1])(jnp.ones(2)))
    assert out.eqns == []


def test_dce_rules_hook_is_consulted():
    calls = []

    def rule(used_outputs, eqn):
        calls.append(used_outputs)
        return [True], eqn  # keep the equation, as if it had an effect

    from kiln.primitives.elementwise import neg_p

    neg_p.def_dce(rule)
    try:
        out = run_pass(dce, "{ lambda ; a:f32[3]. let b:f32[3] = neg a in (a,) }")
    finally:
        del rules.dce_rules[neg_p]
    assert calls == [[False]]
    assert len(out.eqns) == 1


# --- CSE -----------------------------------------------------------------------------------


def test_cse_merges_identical_equations():
    check_golden(
        cse,
        """
        { lambda ; a:f32[3]. let
            b:f32[3] = mul a a
            c:f32[3] = mul a a
            d:f32[3] = exp b
            e:f32[3] = exp c
            f:f32[3] = add d e
          in (f,) }""",
        """
        { lambda ; a:f32[3]. let
            b:f32[3] = mul a a
            c:f32[3] = exp b
            d:f32[3] = add c c
          in (d,) }""",
    )


def test_cse_distinguishes_params_literals_and_signed_zeros():
    text = """
        { lambda ; a:f32[3]. let
            b:f32[3] = add a 0.0
            c:f32[3] = add a -0.0
            d:i32[3] = convert_element_type[new_dtype=int32 weak_type=False] a
            e:i32[3] = convert_element_type[new_dtype=int32 weak_type=True] a
          in (b, c, d, e) }"""
    out = run_pass(cse, text)
    assert len(out.eqns) == 4


def test_cse_never_merges_effects():
    def f(x):
        kiln.debug.print("{}", x)
        kiln.debug.print("{}", x)
        return x

    out = cse(kiln.make_jaxpr(f)(jnp.ones(2)))
    assert [e.primitive.name for e in out.eqns] == ["debug_callback", "debug_callback"]


# --- constant folding ------------------------------------------------------------------------


def test_fold_scalar_result_becomes_a_literal():
    check_golden(
        lambda c: dce(fold_constants(c)),
        """
        { lambda ; a:f32[3]. let
            b:f32[] = add 2.0:f32[] 3.0:f32[]
            c:f32[] = mul b 2.0
            d:f32[3] = mul a c
          in (d,) }""",
        "{ lambda ; a:f32[3]. let b:f32[3] = mul a 10.0 in (b,) }",
    )


def test_fold_array_result_becomes_a_const():
    out = check_golden(
        lambda c: dce(fold_constants(c)),
        """
        { lambda a:f32[3]; b:f32[3]. let
            c:f32[3] = mul a 2.0
            d:f32[3] = add b c
          in (d,) }""",
        "{ lambda a:f32[3]; b:f32[3]. let c:f32[3] = add b a in (c,) }",
        consts=[np.array([1, 2, 3], np.float32)],
    )
    np.testing.assert_array_equal(np.asarray(out.consts[0]), [2, 4, 6])


def test_fold_respects_the_size_cap():
    from kiln.compiler.passes.fold import FOLD_MAX_ELEMENTS

    n = FOLD_MAX_ELEMENTS + 1
    text = f"""
        {{ lambda ; a:f32[{n}]. let
            b:f32[{n}] = broadcast_in_dim[broadcast_dimensions=() shape=({n},)] 1.0:f32[]
            c:f32[{n}] = add a b
          in (c,) }}"""
    assert len(run_pass(fold_constants, text).eqns) == 2


def test_fold_leaves_expanding_equations_to_fusion():
    # A broadcast of a literal is free in a fused loop; as a constant it would cost memory.
    out = run_pass(
        fold_constants,
        """
        { lambda ; a:f32[3]. let
            b:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,)] 2.0:f32[]
            c:f32[3] = mul a b
          in (c,) }""",
    )
    assert [e.primitive.name for e in out.eqns] == ["broadcast_in_dim", "mul"]
    assert out.consts == []


def test_fold_keeps_exact_dtype_and_weak_type():
    out = run_pass(
        fold_constants,
        """
        { lambda ; a:i8[2]. let
            b:i8[] = add 100:i8[] 100:i8[]
            c:i8[2] = mul a b
          in (c,) }""",
    )
    (eqn,) = out.eqns
    literal = eqn.invars[1]
    assert literal.aval.dtype == np.int8 and literal.aval.weak_type
    assert np.asarray(literal.val) == np.int8(-56)  # wraps, as the impl does


def test_fold_never_calls_host_callbacks():
    calls = []

    def f(x):
        y = kiln.pure_callback(
            lambda: calls.append(1) or np.float32(1), kiln.ShapeDtypeStruct((), np.float32)
        )
        return x * y

    out = fold_constants(kiln.make_jaxpr(f)(jnp.ones(2)))
    assert calls == [] and out.eqns[0].primitive.name == "pure_callback"


# --- simplification ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,simplified",
    [
        ("mul a 1.0", True),
        ("mul 1.0 a", True),
        ("div a 1.0", True),
        ("add a -0.0", True),
        ("add -0.0 a", True),
        ("add a 0.0", False),  # (-0.) + 0. == +0.
        ("sub a 0.0", True),
        ("sub a -0.0", False),  # (-0.) - (-0.) == +0.
        ("mul a 2.0", False),
        ("div a 2.0", False),
    ],
)
def test_simplify_float_identities_only_when_exact(body, simplified):
    out = run_pass(simplify, f"{{ lambda ; a:f32[4]. let b:f32[4] = {body} in (b,) }}")
    if simplified:
        assert _normalize(str(out)) == "{ lambda ; a:f32[4]. let in (a,) }"
    else:
        assert len(out.eqns) == 1


@pytest.mark.parametrize("body", ["add a 0", "add 0 a", "sub a 0", "mul a 1", "div a 1"])
def test_simplify_integer_identities(body):
    out = run_pass(simplify, f"{{ lambda ; a:i32[4]. let b:i32[4] = {body} in (b,) }}")
    assert out.eqns == []


def test_simplify_leaves_complex_alone():
    # (inf + 1j) * (1 + 0j) is NaN in its real part: not an identity for complex numbers.
    out = run_pass(simplify, "{ lambda ; a:c64[4]. let b:c64[4] = mul a 1.0 in (b,) }")
    assert len(out.eqns) == 1


def test_simplify_requires_equal_weak_types():
    # x is weakly typed and the literal strong, so x * 1 is strong: replacing it by x would
    # change its type, and the rule must not fire.
    from kiln.primitives.elementwise import mul_p

    x = Var(ShapedArray((), np.float32, weak_type=True))
    out = Var(ShapedArray((), np.float32, weak_type=False))
    one = Literal(np.asarray(1.0, np.float32), ShapedArray((), np.float32, weak_type=False))
    closed = ClosedJaxpr(Jaxpr([], [x], [out], [JaxprEqn(mul_p, [x, one], [out], {})]), [])
    typecheck_jaxpr(closed.jaxpr)
    assert len(simplify(closed).eqns) == 1


def test_simplify_double_negation_chain():
    check_golden(
        simplify,
        """
        { lambda ; a:f32[3]. let
            b:f32[3] = neg a
            c:f32[3] = neg b
            d:f32[3] = neg c
            e:f32[3] = neg d
            f:f32[3] = exp e
          in (f,) }""",
        """
        { lambda ; a:f32[3]. let
            b:f32[3] = neg a
            c:f32[3] = neg a
            d:f32[3] = exp a
          in (d,) }""",
    )


def test_simplify_composes_transposes():
    out = check_golden(
        lambda c: dce(simplify(c)),
        """
        { lambda ; a:f32[2,3,4]. let
            b:f32[3,4,2] = transpose[permutation=(1, 2, 0)] a
            c:f32[4,2,3] = transpose[permutation=(1, 2, 0)] b
          in (c,) }""",
        """
        { lambda ; a:f32[2,3,4]. let
            b:f32[4,2,3] = transpose[permutation=(2, 0, 1)] a
          in (b,) }""",
    )
    assert out.eqns[0].params["permutation"] == (2, 0, 1)


def test_simplify_removes_transpose_pairs_and_identity_transposes():
    check_golden(
        lambda c: dce(simplify(c)),
        """
        { lambda ; a:f32[2,3]. let
            b:f32[3,2] = transpose[permutation=(1, 0)] a
            c:f32[2,3] = transpose[permutation=(1, 0)] b
            d:f32[2,3] = transpose[permutation=(0, 1)] c
          in (d,) }""",
        "{ lambda ; a:f32[2,3]. let in (a,) }",
    )


def test_simplify_composes_reshapes():
    check_golden(
        lambda c: dce(simplify(c)),
        """
        { lambda ; a:f32[2,3]. let
            b:f32[6] = reshape[dimensions=None new_sizes=(6,)] a
            c:f32[3,2] = reshape[dimensions=None new_sizes=(3, 2)] b
            d:f32[6] = reshape[dimensions=None new_sizes=(6,)] c
            e:f32[2,3] = reshape[dimensions=None new_sizes=(2, 3)] d
          in (c, e) }""",
        """
        { lambda ; a:f32[2,3]. let
            b:f32[3,2] = reshape[dimensions=None new_sizes=(3, 2)] a
          in (b, a) }""",
    )


def test_simplify_convert_to_same_type_and_select_n():
    check_golden(
        simplify,
        """
        { lambda ; a:f32[3] b:f32[3] c:bool[3]. let
            d:f32[3] = convert_element_type[new_dtype=float32 weak_type=False] a
            e:f32[3] = select_n True d b
            f:f32[3] = select_n False d b
            g:f32[3] = select_n c e e
            h:i32[3] = convert_element_type[new_dtype=int32 weak_type=False] g
          in (f, g, h) }""",
        """
        { lambda ; a:f32[3] b:f32[3] c:bool[3]. let
            d:i32[3] = convert_element_type[new_dtype=int32 weak_type=False] b
          in (a, b, d) }""",
    )


# --- inlining and the whole pipeline ------------------------------------------------------


def test_inline_nested_calls_with_fresh_variables():
    inner = kiln.jit(lambda x, y: x * y + 1.0)
    outer = kiln.jit(lambda x: inner(x, x) - inner(x, x * 2.0))
    closed = kiln.make_jaxpr(lambda x: outer(x) * 3.0)(jnp.ones(3))
    assert [e.primitive.name for e in closed.eqns] == ["pjit", "mul"]
    out = inline_calls(closed)
    typecheck_jaxpr(out.jaxpr)
    _check_same_results(closed, out)
    assert _normalize(str(out)) == _normalize("""
        { lambda ; a:f32[3]. let
            b:f32[3] = mul a a
            c:f32[3] = add b 1.0
            d:f32[3] = mul a 2.0
            e:f32[3] = mul a d
            f:f32[3] = add e 1.0
            g:f32[3] = sub c f
            h:f32[3] = mul g 3.0
          in (h,) }""")


def test_inline_moves_callee_consts_to_the_caller():
    table = jnp.asarray(np.arange(3, dtype=np.float32))
    inner = kiln.jit(lambda x: x + table)
    closed = kiln.make_jaxpr(lambda x: inner(x) * inner(x))(jnp.ones(3))
    out = inline_calls(closed)
    typecheck_jaxpr(out.jaxpr)
    assert len(out.consts) == 1 and out.consts[0] is table
    _check_same_results(closed, out)


@pytest.mark.parametrize("name,pass_fn", list(pipeline.PASSES))
def test_every_pass_typechecks_on_a_mixed_program(name, pass_fn):
    table = jnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    inner = kiln.jit(lambda x: jnp.exp(x) * 1.0 + table)

    def f(x, y):
        a = inner(x) + inner(x)
        b = jnp.transpose(jnp.transpose(a)) - 0.0
        kiln.debug.print("{}", y)
        return (b * (jnp.ones((2, 3)) * 2.0)).reshape(6).reshape(3, 2), -(-y)

    closed = kiln.make_jaxpr(f)(jnp.ones((2, 3)), jnp.ones(4, dtype=jnp.int32))
    for _, earlier in pipeline.PASSES[: pipeline.PASSES.index((name, pass_fn))]:
        closed = earlier(closed)
    out = pass_fn(closed)
    typecheck_jaxpr(out.jaxpr)
    _check_same_results(closed, out)


def test_pipeline_optimizes_stupid_fn_to_one_copy():
    def stupid_fn(x):
        y = jnp.copy(x)
        for _ in range(1000):
            x = x * x
        return y

    closed = kiln.make_jaxpr(stupid_fn)(jnp.ones(4))
    assert len(closed.eqns) == 1001
    out = pipeline.optimize(closed)
    assert _normalize(str(out)) == "{ lambda ; a:f32[4]. let b:f32[4] = copy a in (b,) }"


def test_kiln_dump_prints_the_jaxpr_after_each_pass(capsys):
    closed = kiln.make_jaxpr(lambda x: x * 1.0 + 2.0)(jnp.ones(2))
    kiln.config.update("kiln_dump", "jaxpr")
    try:
        pipeline.optimize(closed, "dumped")
    finally:
        kiln.config.update("kiln_dump", "")
    err = capsys.readouterr().err
    for stage in ["staged"] + [name for name, _ in pipeline.PASSES]:
        assert f"--- kiln: dumped after {stage} ---" in err
    assert "let b:f32[2] = add a 2.0 in (b,)" in err

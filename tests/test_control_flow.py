"""Control flow: lax.cond, lax.switch, lax.while_loop, lax.fori_loop, lax.scan, lax.map.

The seed's examples with their printed output; results against Python/NumPy loops; pytree
carries, closures and nesting; JAX's type errors; jit (both backends) against eager; the
typechecker; and dead-code elimination of loops and branches in the jit pipeline.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln as jax
import kiln.numpy as jnp
from kiln import lax
from kiln.compiler.passes import dce
from kiln.compiler.pipeline import optimize
from kiln.core import rules
from kiln.core.interpreter import eval_jaxpr
from kiln.core.jaxpr import JaxprTypeError, typecheck_jaxpr
from kiln.core.primitive import Primitive
from tests._testing import ALL, assert_close, rand

needs_jit = pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit not available")
BACKENDS = ["interpreter", "native"]


def _normalize(text: str) -> str:
    return " ".join(text.split())


def _eqn_names(closed) -> list[str]:
    return [e.primitive.name for e in closed.jaxpr.eqns]


def _run_optimized(f, *args):
    """f's jaxpr after the jit pass pipeline, evaluated eagerly (a check on DCE rewrites)."""
    closed = jax.make_jaxpr(f)(*args)
    optimized = optimize(closed)
    typecheck_jaxpr(optimized.jaxpr)
    return eval_jaxpr(optimized.jaxpr, optimized.consts, *args), optimized


# --- the seed's examples ---------------------------------------------------------------------

SEED_FORI_JAXPR = """\
{ lambda ; a:f32[2]. let
    b:f32[2] = copy a
    _:i32[] _:f32[2] = scan[
      jaxpr={ lambda ; c:i32[] d:f32[2]. let
          e:i32[] = add c 1
          f:f32[2] = mul d d
        in (e, f) }
      length=1000
      linear=(False, False)
      num_carry=2
      num_consts=0
      reverse=False
      unroll=1
    ] 0 a
  in (b,) }"""

SEED_WHILE_JAXPR = """\
{ lambda ; a:f32[2]. let
    b:f32[2] = copy a
    _:i32[] _:f32[2] = while[
      body_jaxpr={ lambda ; c:i32[] d:f32[2]. let
          e:i32[] = add c 1
          f:f32[2] = mul d d
        in (e, f) }
      body_nconsts=0
      cond_jaxpr={ lambda ; g:i32[] h:f32[2]. let i:bool[] = lt g 1000 in (i,) }
      cond_nconsts=0
    ] 0 a
  in (b,) }"""

SEED_COND_JAXPR = """{ lambda ; a:f32[2]. let b:f32[2] = pjit[ jaxpr={ lambda ; c:f32[2]. let
d:f32[] = reduce_max[axes=(0,)] c e:f32[] = reduce_min[axes=(0,)] c f:f32[] = sub d e g:f32[] =
abs f h:bool[] = le g 1.0 i:i32[] = convert_element_type[new_dtype=int32 weak_type=False] h
j:f32[2] = cond[ branches=( { lambda ; k:f32[2]. let l:f32[2] = div k 2.0 in (l,) } { lambda ;
m:f32[2]. let in (m,) } ) linear=(False,) ] i c in (j,) } name=cond_fn ] a in (b,) }"""


def seed_less_stupid_fori(x):
    y = jnp.copy(x)
    x = jax.lax.fori_loop(start=0, stop=1000, body_fun=lambda i, x: x * x, init_val=x)
    return y


def seed_less_stupid_while(x):
    y = jnp.copy(x)
    x = jax.lax.while_loop(
        cond_fun=lambda ix: ix[0] < 1000,
        body_fun=lambda ix: (ix[0] + 1, ix[1] * ix[1]),
        init_val=(0, x),
    )
    return y


def test_seed_fori_loop_jaxpr_is_a_scan():
    text = str(jax.make_jaxpr(seed_less_stupid_fori)(jnp.array([1.1, -1.1])))
    assert text == SEED_FORI_JAXPR


def test_seed_while_loop_jaxpr():
    text = str(jax.make_jaxpr(seed_less_stupid_while)(jnp.array([1.1, -1.1])))
    assert text == SEED_WHILE_JAXPR


@needs_jit
@pytest.mark.parametrize("fn", [seed_less_stupid_fori, seed_less_stupid_while])
def test_seed_less_stupid_fn_compiles_to_a_single_copy(fn):
    x = jnp.array([1.1, -1.1])
    compiled = jax.jit(fn).lower(x).compile()
    program = compiled.as_text().split("\n", 1)[1]
    assert _normalize(program).startswith("{ lambda ; a:f32[2]. let b:f32[2] = copy a in (b,) }"), (
        program
    )
    assert "scan[" not in program and "while[" not in program
    assert program.count(" = copy ") == 1
    np.testing.assert_array_equal(np.asarray(compiled(x)), np.float32([1.1, -1.1]))


@jax.jit
def cond_fn(x):
    pred = jnp.abs(x.max() - x.min()) <= 1.0
    return jax.lax.cond(pred, lambda x: x, lambda x: x / 2, x)


@needs_jit
def test_seed_cond_fn_prints(capsys):
    print(cond_fn(jnp.array([0.1, 0.2])))
    print(cond_fn(jnp.array([-0.5, 0.5])))
    print(cond_fn(jnp.array([1.0, -1.0])))
    assert capsys.readouterr().out == "[0.1 0.2]\n[-0.5  0.5]\n[ 0.5 -0.5]\n"


@needs_jit
def test_seed_cond_fn_jaxpr_traces_both_branches():
    closed = jax.make_jaxpr(cond_fn)(jnp.array([1.0, -1.0]))
    assert _normalize(str(closed)) == _normalize(SEED_COND_JAXPR)
    typecheck_jaxpr(closed.jaxpr)


@needs_jit
def test_seed_is_even_fast_switch():
    # The seed elides most of its ~1000 alternating lambdas; switch clamps 123512 to the last
    # branch (JAX does the same), so the list here ends with a True branch as the seed's
    # printed result requires.
    branches = [lambda: True, lambda: False] * 500 + [lambda: True]

    @jax.jit
    def is_even_fast(x):
        return jax.lax.switch(x, branches)

    assert repr(is_even_fast(123512)) == "Array(True, dtype=bool)"
    assert repr(is_even_fast(1)) == "Array(False, dtype=bool)"
    assert repr(is_even_fast(-7)) == "Array(True, dtype=bool)"  # clamped to branch 0


# --- cond ------------------------------------------------------------------------------------


def test_cond_selects_branch_eagerly_and_traced():
    x = np.float32([1.0, -2.0, 3.0])
    for pred, expected in [(True, x + 1), (False, x * 2)]:
        out = lax.cond(pred, lambda v: v + 1, lambda v: v * 2, x)
        assert_close(out, expected)
        traced = jax.make_jaxpr(lambda p, v: lax.cond(p, lambda a: a + 1, lambda a: a * 2, v))
        closed = traced(pred, x)
        typecheck_jaxpr(closed.jaxpr)
        assert_close(eval_jaxpr(closed.jaxpr, closed.consts, pred, x)[0], expected)


def test_cond_numeric_predicates_mean_nonzero():
    assert float(lax.cond(2, lambda: 1.0, lambda: 0.0)) == 1.0
    assert float(lax.cond(0.0, lambda: 1.0, lambda: 0.0)) == 0.0
    assert float(lax.cond(np.uint8(0), lambda: 1.0, lambda: 0.0)) == 0.0
    text = str(jax.make_jaxpr(lambda p: lax.cond(p, lambda: 1.0, lambda: 2.0))(1.5))
    assert "ne a 0.0" in text


def test_cond_pytree_operands_and_outputs():
    def f(p, tree):
        return lax.cond(
            p,
            lambda t: {"s": t[0] + t[1]["w"], "n": t[1]["n"]},
            lambda t: {"s": t[0] - t[1]["w"], "n": t[1]["n"] * 2},
            tree,
        )

    tree = (np.float32([1, 2]), {"w": np.float32([3, 4]), "n": np.int32(5)})
    out = f(False, tree)
    assert set(out) == {"s", "n"}
    assert_close(out["s"], np.float32([-2, -2]))
    assert_close(out["n"], np.int32(10))
    closed = jax.make_jaxpr(f)(True, tree)
    typecheck_jaxpr(closed.jaxpr)


def test_cond_operand_keyword_and_old_five_argument_form():
    assert float(lax.cond(True, lambda v: v + 1, lambda v: v - 1, operand=1.0)) == 2.0
    # cond(pred, true_operand, true_fun, false_operand, false_fun)
    assert float(lax.cond(False, 10.0, lambda a: a + 1, 20.0, lambda b: b * 2)) == 40.0
    assert float(lax.cond(True, 10.0, lambda a: a + 1, 20.0, lambda b: b * 2)) == 11.0
    with pytest.raises(TypeError, match="no positional operands"):
        lax.cond(True, lambda v: v, lambda v: v, 1.0, operand=2.0)
    with pytest.raises(TypeError, match="should be callable"):
        lax.cond(True, 1.0, 2.0)


def test_cond_with_concrete_predicate_still_traces_both_branches():
    traced = []

    def true_fun(v):
        traced.append("true")
        return v + 1

    def false_fun(v):
        traced.append("false")
        return v - 1

    out = lax.cond(True, true_fun, false_fun, 1.0)
    assert float(out) == 2.0
    assert traced == ["true", "false"]  # JAX's order: true_fun is traced first


def test_cond_under_disable_jit_runs_python_branch():
    traced = []
    kiln.config.update("jax_disable_jit", True)
    try:
        out = lax.cond(True, lambda: traced.append("t") or 1.0, lambda: traced.append("f") or 2.0)
    finally:
        kiln.config.update("jax_disable_jit", False)
    assert out == 1.0 and traced == ["t"]


def test_cond_weak_types_join():
    assert (
        repr(lax.cond(True, lambda: 1.0, lambda: 2.0)) == "Array(1., dtype=float32, weak_type=True)"
    )
    out = lax.cond(True, lambda: 1.0, lambda: jnp.float32(2.0))
    assert repr(out) == "Array(1., dtype=float32)"
    closed = jax.make_jaxpr(lambda p: lax.cond(p, lambda: 1.0, lambda: jnp.float32(2.0)))(True)
    typecheck_jaxpr(closed.jaxpr)
    assert closed.out_avals[0].weak_type is False


def test_cond_closures_become_shared_operands():
    big = jnp.arange(3, dtype=jnp.float32)

    def f(p, x, y):
        return lax.cond(p, lambda: x * big, lambda: y + big + x)

    closed = jax.make_jaxpr(f)(True, 2.0, 3.0)
    typecheck_jaxpr(closed.jaxpr)
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "cond"]
    # index, then the closed-over values: x and big (shared by both branches), then y.
    assert len(eqn.invars) == 4
    assert all(len(b.jaxpr.invars) == 3 for b in eqn.params["branches"])
    assert_close(f(True, 2.0, 3.0), big * 2)
    assert_close(f(False, 2.0, 3.0), big + 5)
    assert_close(eval_jaxpr(closed.jaxpr, closed.consts, False, 2.0, 3.0)[0], big + 5)


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3, 4)], ids=str)
def test_cond_every_dtype(dtype, shape):
    rng = np.random.default_rng(0)
    a, b = rand(shape, dtype, rng), rand(shape, dtype, rng)
    for pred, expected in [(True, a), (False, b)]:
        out = lax.cond(pred, lambda u, v: u, lambda u, v: v, a, b)
        assert_close(out, expected)
        assert np.asarray(out).dtype == np.asarray(expected).dtype


def test_cond_errors_match_jax():
    with pytest.raises(TypeError, match=r"Pred must be a scalar, got \[ True False\] of shape"):
        lax.cond(jnp.array([True, False]), lambda: 1.0, lambda: 2.0)
    with pytest.raises(TypeError, match="Pred must be a scalar"):
        lax.cond([True], lambda: 1.0, lambda: 2.0)
    with pytest.raises(
        TypeError, match="Pred type must be either boolean or number, got complex64"
    ):
        lax.cond(jnp.complex64(1), lambda: 1.0, lambda: 2.0)
    with pytest.raises(TypeError, match="cond predicate is None"):
        lax.cond(None, lambda: 1.0, lambda: 2.0)
    with pytest.raises(TypeError, match="Pred must be a scalar"):
        jax.make_jaxpr(lambda p: lax.cond(p, lambda: 1.0, lambda: 2.0))(np.ones(2, bool))


def test_cond_branch_type_mismatches_are_type_errors():
    with pytest.raises(TypeError) as info:
        lax.cond(True, lambda: 1.0, lambda: jnp.float16(2.0))
    message = str(info.value)
    assert message.startswith("cond branches must have equal output types but they differ.")
    assert (
        "The output of true_fun has type float32[] but the corresponding output of "
        "false_fun has type float16[], so the dtypes do not match."
    ) in message
    with pytest.raises(TypeError, match="so the shapes do not match"):
        lax.cond(True, lambda: jnp.zeros(2), lambda: jnp.zeros(3))
    with pytest.raises(
        TypeError,
        match=r"output of true_fun at path \['a'\] has type "
        r"float32\[2\]",
    ):
        lax.cond(True, lambda: {"a": jnp.zeros(2)}, lambda: {"a": jnp.zeros(2, "int32")})
    with pytest.raises(TypeError, match="cond branch outputs must have the same pytree structure"):
        lax.cond(True, lambda: (1.0, 2.0), lambda: [1.0, 2.0])
    with pytest.raises(TypeError, match="arrays or scalars"):
        lax.cond(True, lambda: "a", lambda: "b")


# --- switch ----------------------------------------------------------------------------------


def test_switch_clamps_index_like_jax():
    branches = [lambda v: v + 1, lambda v: v * 10, lambda v: -v]
    for index, expected in [(-3, 3.0), (0, 3.0), (1, 20.0), (2, -2.0), (99, -2.0)]:
        assert float(lax.switch(index, branches, 2.0)) == expected
        if hasattr(kiln, "jit"):
            assert float(jax.jit(lambda i: lax.switch(i, branches, 2.0))(index)) == expected


def test_switch_jaxpr():
    closed = jax.make_jaxpr(
        lambda i, x: lax.switch(i, [lambda x: x + 1, lambda x: x * 2, lambda x: -x], x)
    )(1, 2.0)
    typecheck_jaxpr(closed.jaxpr)
    assert (
        str(closed)
        == """\
{ lambda ; a:i32[] b:f32[]. let
    c:i32[] = convert_element_type[new_dtype=int32 weak_type=False] a
    d:i32[] = clamp 0 c 2
    e:f32[] = cond[
      branches=(
        { lambda ; f:f32[]. let g:f32[] = add f 1.0 in (g,) }
        { lambda ; h:f32[]. let i:f32[] = mul h 2.0 in (i,) }
        { lambda ; j:f32[]. let k:f32[] = neg j in (k,) }
      )
      linear=(False,)
    ] d b
  in (e,) }"""
    )


def test_switch_single_branch_is_called_directly_and_errors():
    assert (
        str(jax.make_jaxpr(lambda: lax.switch(1, [lambda: 1.0]))())
        == "{ lambda ; . let  in (1.0,) }"
    )
    with pytest.raises(ValueError, match="Empty branch sequence"):
        lax.switch(0, [])
    with pytest.raises(TypeError, match="Index type must be an integer, got 1.5 as float32"):
        lax.switch(1.5, [lambda: 1.0, lambda: 2.0])
    with pytest.raises(TypeError, match="Index type must be an integer"):
        lax.switch(True, [lambda: 1.0, lambda: 2.0])
    with pytest.raises(TypeError, match=r"Branch index must be scalar, got \[1\] of shape"):
        lax.switch(jnp.array([1]), [lambda: 1.0, lambda: 2.0])
    with pytest.raises(TypeError, match=r"branch 0 is .*\nbranch 1 is"):
        lax.switch(0, [lambda: 1.0, lambda: jnp.zeros(2)])


# --- while_loop ------------------------------------------------------------------------------


def _collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def test_while_loop_against_python_loop():
    def collatz(n):
        def body(c):
            k, steps = c
            k = jnp.where(k % 2 == 0, k // 2, 3 * k + 1)
            return k, steps + 1

        return lax.while_loop(lambda c: c[0] != 1, body, (n, 0))[1]

    for n in [1, 6, 27, 97]:
        assert int(collatz(n)) == _collatz_steps(n)
    closed = jax.make_jaxpr(collatz)(27)
    typecheck_jaxpr(closed.jaxpr)
    assert int(eval_jaxpr(closed.jaxpr, closed.consts, 27)[0]) == _collatz_steps(27)


def test_while_loop_pytree_carry_and_closures():
    scale = np.float32([1.0, 2.0])

    def f(x, limit):
        def body(c):
            return {"i": c["i"] + 1, "v": c["v"] * scale + x}

        return lax.while_loop(lambda c: c["i"] < limit, body, {"i": 0, "v": jnp.zeros(2)})

    def ref(x, limit):
        v = np.zeros(2, np.float32)
        for _ in range(limit):
            v = v * scale + x
        return v

    x = np.float32([0.5, -1.0])
    out = f(x, 4)
    assert int(out["i"]) == 4
    assert_close(out["v"], ref(x, 4))
    closed = jax.make_jaxpr(f)(x, 4)
    typecheck_jaxpr(closed.jaxpr)
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive is lax.while_p]
    assert eqn.params["cond_nconsts"] == 1 and eqn.params["body_nconsts"] == 2
    assert_close(eval_jaxpr(closed.jaxpr, closed.consts, x, 5)[1], ref(x, 5))


def test_while_loop_zero_iterations_and_python_scalar_promotion():
    out = lax.while_loop(lambda c: c < 0, lambda c: c + 1, 5)
    assert repr(out) == "Array(5, dtype=int32, weak_type=True)"
    # A weakly typed Python scalar carry adopts the body's dtype (JAX retraces the body).
    out = lax.while_loop(lambda c: c < 3, lambda c: c + jnp.float32(1.5), 0)
    assert repr(out) == "Array(3., dtype=float32)"
    # The initial value's buffer is never aliased by the result.
    init = np.float32([1.0, 2.0])
    out = lax.while_loop(lambda c: False, lambda c: c, init)
    init[0] = 99.0
    assert_close(out, np.float32([1.0, 2.0]))


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_while_loop_every_dtype(dtype):
    rng = np.random.default_rng(1)
    x, other = rand((2, 3), dtype, rng), rand((2, 3), dtype, rng)

    def body(c):
        k, a, b = c
        return k + 1, b, a  # swap the arrays each step

    k, a, b = lax.while_loop(lambda c: c[0] < 3, body, (0, x, other))
    assert int(k) == 3
    assert_close(a, other)
    assert_close(b, x)


def test_while_loop_errors_match_jax():
    with pytest.raises(TypeError) as info:
        lax.while_loop(lambda c: c < 10, lambda c: (c + 1).astype(jnp.float16), jnp.float32(0))
    assert str(info.value) == (
        "while_loop body function carry input and carry output must have equal types, but "
        "they differ:\n\nThe input carry c has type float32[] but the corresponding output "
        "carry component has type float16[], so the dtypes do not match.\n\nRevise the "
        "function so that all output types match the corresponding input types."
    )
    with pytest.raises(
        TypeError,
        match=r"The input carry component c\[1\] has type "
        r"float32\[\] but .* int16\[\]",
    ):
        lax.while_loop(
            lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1].astype(jnp.int16)), (0, jnp.float32(0))
        )
    with pytest.raises(
        TypeError,
        match=r"c\['b'\] has type float32\[2\] .* float32\[3\], so "
        "the shapes do not match",
    ):
        lax.while_loop(
            lambda c: c["a"] < 10,
            lambda c: {"a": c["a"] + 1, "b": jnp.zeros(3)},
            {"a": 0, "b": jnp.zeros(2)},
        )
    with pytest.raises(TypeError, match="must have the same pytree structure"):
        lax.while_loop(lambda c: c < 10, lambda c: (c, c), 0)
    with pytest.raises(
        TypeError,
        match=r"cond_fun must return a boolean scalar, but got "
        r"output type\(s\) \[ShapedArray\(bool\[1\]\)\]",
    ):
        lax.while_loop(lambda c: jnp.array([True]), lambda c: c, 20)
    with pytest.raises(TypeError, match="cond_fun must return a boolean scalar"):
        lax.while_loop(lambda c: 1, lambda c: c, 20)
    with pytest.raises(TypeError, match=r"but got pytree PyTreeDef\(\(\*, \*\)\)"):
        lax.while_loop(lambda c: (c < 1, c < 1), lambda c: c, 20)
    with pytest.raises(TypeError, match="arrays or scalars"):
        lax.while_loop(lambda c: True, lambda c: c, "text")


def test_while_loop_traced_python_branch_names_the_loop():
    def body(c):
        if c > 3:  # a Python branch on a traced carry
            return c
        return c + 1

    with pytest.raises(kiln.core.errors.TracerBoolConversionError, match="for while_loop"):
        lax.while_loop(lambda c: c < 5, body, 0)


# --- fori_loop -------------------------------------------------------------------------------


def test_fori_loop_static_bounds_is_a_scan_with_weak_index():
    def f(x):
        return lax.fori_loop(2, 7, lambda i, acc: acc + i * x, jnp.zeros(3))

    x = np.float32([1.0, 2.0, -1.0])
    assert_close(f(x), x * sum(range(2, 7)))
    closed = jax.make_jaxpr(f)(x)
    typecheck_jaxpr(closed.jaxpr)
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "scan"]
    assert eqn.params["length"] == 5 and eqn.params["num_carry"] == 2
    assert eqn.params["num_consts"] == 1  # x
    assert str(eqn.invars[1]) == "2"
    # The index is weakly typed, as JAX's: an int8 carry stays int8.
    out = lax.fori_loop(0, 4, lambda i, c: c + i, jnp.int8(1))
    assert repr(out) == "Array(7, dtype=int8)"
    # upper <= lower runs no iterations.
    assert float(lax.fori_loop(5, 3, lambda i, c: c + 1.0, 0.0)) == 0.0


def test_fori_loop_traced_bounds_is_a_while_loop():
    def f(n, x):
        return lax.fori_loop(0, n, lambda i, c: c * 2.0 + i, x)

    def ref(n, x):
        for i in range(n):
            x = x * 2.0 + i
        return x

    closed = jax.make_jaxpr(f)(3, 1.0)
    typecheck_jaxpr(closed.jaxpr)
    assert _eqn_names(closed) == ["while"]
    assert str(closed).endswith("] 0 a b\n  in (c,) }")
    for n in [0, 1, 5]:
        assert float(eval_jaxpr(closed.jaxpr, closed.consts, n, 1.0)[0]) == ref(n, 1.0)
    if hasattr(kiln, "jit"):
        assert float(jax.jit(f)(6, 1.0)) == ref(6, 1.0)
    # A Python int bound adopts the other bound's integer type.
    closed = jax.make_jaxpr(lambda n: lax.fori_loop(0, n, lambda i, c: c + 1, 0))(np.int16(4))
    assert "i16[]" in str(closed.jaxpr.eqns[0].params["cond_jaxpr"])


def test_fori_loop_errors():
    with pytest.raises(
        TypeError,
        match="lower and upper arguments to fori_loop must have equal types, got float32 and int32",
    ):
        lax.fori_loop(0.0, 3, lambda i, c: c, 0)
    with pytest.raises(ValueError, match="statically known"):
        jax.make_jaxpr(lambda n: lax.fori_loop(0, n, lambda i, c: c, 0.0, unroll=2))(3)
    with pytest.raises(TypeError, match="should be callable"):
        lax.fori_loop(0, 3, None, 0)
    with pytest.raises(TypeError, match="equal types"):
        lax.fori_loop(jnp.int16(0), jnp.int8(3), lambda i, c: c, 0)


# --- scan ------------------------------------------------------------------------------------


def test_scan_cumulative_sum_and_products():
    xs = np.arange(1, 6, dtype=np.float32)

    def f(xs):
        return lax.scan(lambda c, x: (c + x, c * x), 0.0, xs)

    carry, ys = f(xs)
    assert_close(carry, np.float32(15))
    assert_close(ys, np.concatenate([[0], np.cumsum(xs)[:-1]]).astype(np.float32) * xs)
    closed = jax.make_jaxpr(f)(xs)
    typecheck_jaxpr(closed.jaxpr)
    (eqn,) = closed.jaxpr.eqns
    assert eqn.params["length"] == 5 and eqn.params["linear"] == (False, False)
    assert "_split_transpose" in eqn.params and "_split_transpose" not in str(closed)


def test_scan_reverse_unroll_and_pytrees():
    xs = {"a": np.arange(4, dtype=np.float32), "b": np.arange(8, dtype=np.int32).reshape(4, 2)}

    def body(c, x):
        total, count = c
        return (total + x["a"], count + 1), {"prev": total, "b2": x["b"] * 2}

    for reverse in [False, True]:
        for unroll in [1, 3, True]:
            (total, count), ys = lax.scan(body, (0.0, 0), xs, reverse=reverse, unroll=unroll)
            order = np.arange(4)[::-1] if reverse else np.arange(4)
            prev = np.zeros(4, np.float32)
            acc = np.float32(0)
            for i in order:
                prev[i] = acc
                acc += xs["a"][i]
            assert_close(total, acc)
            assert int(count) == 4
            assert_close(ys["prev"], prev)
            assert_close(ys["b2"], xs["b"] * 2)
    closed = jax.make_jaxpr(lambda xs: lax.scan(body, (0.0, 0), xs, reverse=True, unroll=True))(xs)
    assert closed.jaxpr.eqns[0].params["unroll"] == 4
    assert closed.jaxpr.eqns[0].params["reverse"] is True


def test_scan_without_xs_and_empty_scans():
    carry, ys = lax.scan(lambda c, _: (c * 2, c), 1, None, length=5)
    assert int(carry) == 32
    np.testing.assert_array_equal(np.asarray(ys), [1, 2, 4, 8, 16])
    carry, ys = lax.scan(lambda c, x: (c + x.sum(), x * 2), jnp.float32(3), jnp.zeros((0, 2)))
    assert float(carry) == 3.0
    assert ys.shape == (0, 2) and ys.dtype == np.float32
    carry, ys = lax.scan(lambda c, x: (c, None), 0.0, jnp.ones(3))
    assert ys is None


def test_scan_closures_and_const_order():
    w = np.float32([[1, 2], [3, 4]])

    def f(x, xs):
        return lax.scan(lambda c, r: (c @ w + r * x, c.sum()), jnp.ones(2), xs)

    xs = np.float32([[1, 0], [0, 1], [2, 2]])
    c, ys = f(np.float32(0.5), xs)
    ref_c, ref_ys = np.ones(2, np.float32), []
    for r in xs:
        ref_ys.append(ref_c.sum())
        ref_c = ref_c @ w + r * np.float32(0.5)
    assert_close(c, ref_c)
    assert_close(ys, np.float32(ref_ys))
    closed = jax.make_jaxpr(f)(np.float32(0.5), xs)
    typecheck_jaxpr(closed.jaxpr)
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive is lax.scan_p]
    assert eqn.params["num_consts"] == 2  # w and x


def test_scan_weak_carry_promotion():
    carry, _ = lax.scan(lambda c, x: (c + 1.5, x), 0, jnp.zeros(3))
    assert repr(carry) == "Array(4.5, dtype=float32)"
    carry, _ = lax.scan(lambda c, x: (c + x, x), 0.0, jnp.ones(3))
    assert repr(carry) == "Array(3., dtype=float32)"


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (2, 3)], ids=str)
def test_scan_every_dtype(dtype, shape):
    rng = np.random.default_rng(2)
    init = rand(shape, dtype, rng)
    xs = rand((4,) + shape, dtype, rng)
    # The carry is the previous x: ys are init, xs[0], xs[1], xs[2]; the final carry xs[3].
    carry, ys = lax.scan(lambda c, x: (x, c), init, xs)
    assert_close(carry, xs[3])
    assert_close(ys, np.concatenate([init[None], xs[:3]]))


def test_scan_errors_match_jax():
    with pytest.raises(
        ValueError, match="scan got no values to scan over and `length` not provided."
    ):
        lax.scan(lambda c, x: (c, x), 0, None)
    with pytest.raises(
        ValueError,
        match=r"scan got `length` argument of 4 which disagrees "
        r"with leading axis sizes \[3\].",
    ):
        lax.scan(lambda c, x: (c, x), 0, jnp.zeros(3), length=4)
    with pytest.raises(
        ValueError, match="scan got values with different leading axis sizes: 3, 4."
    ):
        lax.scan(lambda c, x: (c, x), 0, (jnp.zeros(3), jnp.zeros(4)))
    with pytest.raises(ValueError, match="no leading axis"):
        lax.scan(lambda c, x: (c, x), 0, jnp.zeros(()))
    with pytest.raises(TypeError, match="scan body output must be a pair"):
        lax.scan(lambda c, x: c, 0.0, jnp.zeros(3))
    with pytest.raises(
        TypeError,
        match=r"(?s)scan body function carry input and carry output "
        r"must have equal types.*The input carry carry has "
        r"type float32\[\] but .* int32\[\]",
    ):
        lax.scan(lambda carry, x: (carry.astype(jnp.int32), x), jnp.float32(0), jnp.zeros(2))
    with pytest.raises(ValueError, match="positive"):
        lax.scan(lambda c, x: (c, x), 0, jnp.zeros(3), unroll=0)
    with pytest.raises(TypeError, match="concrete `int`"):
        jax.make_jaxpr(lambda n: lax.scan(lambda c, x: (c, x), 0, None, length=n))(3)


def test_map_against_numpy():
    xs = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = lax.map(lambda r: (r * r).sum(), xs)
    assert_close(out, (xs * xs).sum(axis=1))
    pair = lax.map(lambda t: {"s": t[0] + t[1], "d": t[0] - t[1]}, (xs, xs[::-1]))
    assert_close(pair["s"], xs + xs[::-1])
    closed = jax.make_jaxpr(lambda xs: lax.map(lambda x: x * 2, xs))(xs)
    assert closed.jaxpr.eqns[0].params["num_carry"] == 0
    with pytest.raises(NotImplementedError):
        lax.map(lambda r: r, xs, batch_size=2)


# --- nesting, jit and the typechecker ----------------------------------------------------------


def nested_control_flow(x, w):
    """cond inside scan inside while; each level closes over values of the enclosing ones."""

    def wbody(c):
        k, v = c

        def sbody(carry, row):
            y = lax.cond(carry.sum() > 0, lambda a: a * row + k, lambda a: a - row, carry)
            return y, y.sum()

        v2, sums = lax.scan(sbody, v, w)
        return k + 1, v2 + sums.mean()

    return lax.while_loop(lambda c: c[0] < 3, wbody, (0, x))


def nested_reference(x, w):
    k, v = 0, x.copy()
    while k < 3:
        sums = []
        for row in w:
            v = v * row + np.float32(k) if v.sum() > 0 else v - row
            sums.append(v.sum())
        v = v + np.float32(np.mean(np.array(sums, np.float32)))
        k += 1
    return k, v


def test_nested_control_flow_eager_against_python():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(4).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    k, v = nested_control_flow(x, w)
    ref_k, ref_v = nested_reference(x, w)
    assert int(k) == ref_k
    assert_close(v, ref_v, tol=1e-5)
    closed = jax.make_jaxpr(nested_control_flow)(x, w)
    typecheck_jaxpr(closed.jaxpr)
    assert _eqn_names(closed) == ["while"]


@needs_jit
@pytest.mark.parametrize("backend", BACKENDS)
def test_jit_equals_eager(backend):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(4).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    programs = [
        (nested_control_flow, (x, w)),
        (lambda xs: lax.scan(lambda c, r: (c * 0.5 + r, c.max()), jnp.zeros(4), xs), (w,)),
        (lambda n, x: lax.fori_loop(0, n, lambda i, c: c + i * x, x), (3, x)),
        (lambda i, x: lax.switch(i, [jnp.sin, jnp.cos, lambda v: v * 2], x), (1, x)),
        (lambda xs: lax.map(lambda r: lax.cond(r[0] > 0, jnp.abs, jnp.negative, r), xs), (w,)),
    ]
    for f, args in programs:
        eager = f(*args)
        compiled = jax.jit(f, backend=backend)(*args)
        for e, c in zip(jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(compiled)):
            assert np.asarray(c).dtype == np.asarray(e).dtype
            assert c.weak_type == e.weak_type
            assert_close(c, np.asarray(e), tol=1e-6)


@needs_jit
def test_jit_inside_loop_body_and_loop_inside_jit_call():
    inner = jax.jit(lambda c, x: (c + x, c * x))

    def f(xs):
        return lax.scan(inner, 1.0, xs)

    xs = np.float32([1, 2, 3])
    closed = jax.make_jaxpr(f)(xs)
    typecheck_jaxpr(closed.jaxpr)
    assert "pjit" in str(closed)
    carry, ys = jax.jit(f)(xs)
    assert float(carry) == 7.0
    assert_close(ys, np.float32([1, 4, 12]))


def test_abstract_eval_rejects_ill_typed_equations():
    body = jax.make_jaxpr(lambda c, x: (c + x, c))(1.0, 2.0)
    with pytest.raises(TypeError, match="xs operand 0"):
        lax.scan_p.bind(
            jnp.float32(0),
            jnp.zeros(4),
            jaxpr=body,
            length=3,
            reverse=False,
            linear=(False, False),
            unroll=1,
            num_consts=0,
            num_carry=1,
            _split_transpose=False,
        )
    with pytest.raises(TypeError, match="operand 0 of jaxpr has type i32"):
        lax.scan_p.bind(
            jnp.int32(0),
            jnp.zeros(3),
            jaxpr=body,
            length=3,
            reverse=False,
            linear=(False, False),
            unroll=1,
            num_consts=0,
            num_carry=1,
            _split_transpose=False,
        )
    branch_a = jax.make_jaxpr(lambda x: x)(1.0)
    branch_b = jax.make_jaxpr(lambda x: x.astype(jnp.int32))(1.0)
    with pytest.raises(TypeError, match="branch 1 returns"):
        lax.cond_p.bind(
            jnp.int32(0), jnp.float32(1), branches=(branch_a, branch_b), linear=(False,)
        )
    with pytest.raises(TypeError, match="int32 scalar"):
        lax.cond_p.bind(
            jnp.float32(0), jnp.float32(1), branches=(branch_a, branch_a), linear=(False,)
        )
    cond = jax.make_jaxpr(lambda c: c)(1.0)
    with pytest.raises(TypeError, match="boolean scalar"):
        lax.while_p.bind(
            jnp.float32(0), cond_jaxpr=cond, body_jaxpr=cond, cond_nconsts=0, body_nconsts=0
        )


def test_typecheck_reaches_into_sub_jaxprs():
    closed = jax.make_jaxpr(lambda xs: lax.scan(lambda c, x: (c + x, c), 0.0, xs))(jnp.ones(3))
    typecheck_jaxpr(closed.jaxpr)
    body = closed.jaxpr.eqns[0].params["jaxpr"].jaxpr
    body.eqns[0].outvars[0].aval = body.eqns[0].outvars[0].aval.update(dtype=np.int32)
    with pytest.raises(JaxprTypeError, match="scan: jaxpr does not typecheck"):
        typecheck_jaxpr(closed.jaxpr)


# --- dead-code elimination -------------------------------------------------------------------


def test_dce_prunes_unused_carries_and_ys_of_scan():
    def f(xs):
        (a, b, _), (ya, yb) = lax.scan(
            lambda c, x: ((c[0] + x, c[1] * 2, c[2] + c[1]), (c[0], x * 3)),
            (jnp.float32(0), jnp.float32(1), jnp.float32(0)),
            xs,
        )
        return a, yb

    xs = np.float32([1, 2, 3, 4])
    closed = dce(jax.make_jaxpr(f)(xs))
    typecheck_jaxpr(closed.jaxpr)
    (eqn,) = closed.jaxpr.eqns
    assert eqn.params["num_carry"] == 1 and len(eqn.outvars) == 2
    assert len(eqn.params["jaxpr"].jaxpr.eqns) == 2  # c[0] + x and x * 3
    out, _ = _run_optimized(f, xs)
    assert_close(out[0], np.float32(10))
    assert_close(out[1], xs * 3)


def test_dce_keeps_carries_the_kept_ones_depend_on():
    def f(xs):
        (a, b), _ = lax.scan(lambda c, x: ((c[0] + c[1], c[1] + x), None), (0.0, 0.0), xs)
        return a

    xs = np.float32([1, 2, 3])
    closed = dce(jax.make_jaxpr(f)(xs))
    assert closed.jaxpr.eqns[0].params["num_carry"] == 2
    out, _ = _run_optimized(f, xs)
    assert_close(out[0], np.float32(0 + 1 + 3))


def test_dce_of_while_keeps_what_the_condition_reads():
    def f(x):
        i, y, z = lax.while_loop(
            lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * 2, c[2] + 1), (0, x, x)
        )
        return y

    closed = dce(jax.make_jaxpr(f)(1.0))
    typecheck_jaxpr(closed.jaxpr)
    (eqn,) = closed.jaxpr.eqns
    assert len(eqn.outvars) == 2  # the counter (read by cond) and y; z is gone
    out, _ = _run_optimized(f, np.float32(1.0))
    assert float(out[0]) == 16.0


def test_dce_of_cond_prunes_outputs_and_operands():
    def f(p, x, y):
        a, b = lax.cond(p, lambda u, v: (u + 1, v * 2), lambda u, v: (u - 1, v / 2), x, y)
        return a

    closed = dce(jax.make_jaxpr(f)(True, 1.0, 2.0))
    typecheck_jaxpr(closed.jaxpr)
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "cond"]
    assert len(eqn.outvars) == 1 and len(eqn.invars) == 2
    assert all(len(b.jaxpr.eqns) == 1 for b in eqn.params["branches"])
    out, _ = _run_optimized(f, False, np.float32(1.0), np.float32(2.0))
    assert float(out[0]) == 0.0
    unused = dce(jax.make_jaxpr(lambda p, x: (lax.cond(p, jnp.sin, jnp.cos, x), x)[1])(True, 1.0))
    assert unused.jaxpr.eqns == []


def test_dce_keeps_loops_with_effects(capsys):
    def f(xs):
        def body(c, x):
            jax.debug.print("x={}", x)
            return c + x, x * 2

        lax.scan(body, 0.0, xs)
        return xs

    closed = dce(jax.make_jaxpr(f)(jnp.arange(2.0)))
    typecheck_jaxpr(closed.jaxpr)
    (eqn,) = closed.jaxpr.eqns
    assert eqn.outvars == [] and eqn.params["num_carry"] == 0
    assert _eqn_names(eqn.params["jaxpr"]) == ["debug_callback"]
    assert rules.effects_rules[lax.scan_p](**eqn.params)
    if hasattr(kiln, "jit"):
        jax.jit(f)(jnp.arange(2.0))
        assert capsys.readouterr().out == "x=0.0\nx=1.0\n"


def test_dce_inside_loop_bodies():
    def f(xs):
        def body(c, x):
            jnp.exp(x) * 3  # dead inside the body
            return c + x, None

        return lax.scan(body, jnp.float32(0), xs)[0]

    _, optimized = _run_optimized(f, jnp.ones(3))
    (eqn,) = optimized.jaxpr.eqns
    assert _eqn_names(eqn.params["jaxpr"]) == ["add"]


def test_dce_rules_registered():
    for prim in (lax.cond_p, lax.while_p, lax.scan_p):
        assert prim in rules.dce_rules and prim in rules.effects_rules
        assert isinstance(prim, Primitive) and prim.multiple_results


# --- JAX as an oracle (optional) ---------------------------------------------------------------


def test_against_jax_when_installed():
    real_jax = pytest.importorskip("jax")
    real_lax = real_jax.lax
    cases = [
        lambda L: L.switch(7, [lambda: 1, lambda: 2, lambda: 3]),
        lambda L: L.fori_loop(0, 4, lambda i, c: c + i, 0),
        lambda L: L.scan(lambda c, x: (c + x, c), 0, np.arange(4, dtype=np.int32))[1],
        lambda L: L.while_loop(lambda c: c < 10, lambda c: c * 2.5, 1.0),
        lambda L: L.cond(0.0, lambda: 1, lambda: 2),
        lambda L: L.cond(True, lambda: 1.0, lambda: np.float32(2.0)),
        lambda L: L.scan(lambda c, x: (c + 1.5, x), 0, np.zeros(3, np.float32))[0],
        lambda L: L.while_loop(lambda c: c < 3, lambda c: c + np.float32(1.5), 0),
        lambda L: L.fori_loop(0, 3, lambda i, c: c + i, np.int8(1)),
        lambda L: L.map(lambda r: r.sum(), np.ones((3, 2), np.int16)),
    ]
    for case in cases:
        expected = case(real_lax)
        actual = case(lax)
        np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=1e-6)
        assert np.asarray(actual).dtype == np.asarray(expected).dtype
        assert actual.weak_type == expected.weak_type


@needs_jit
def test_dce_hook_keeps_every_input_of_a_rewritten_equation():
    # A rule prunes inputs (here pjit's): everything the rewritten equation reads stays live.
    inner = jax.jit(lambda a, b: (a * 2, b + 1))

    def f(x, y):
        _, q = inner(x * 3, y - 1)
        return q

    out = dce(jax.make_jaxpr(f)(jnp.ones(2), jnp.ones(2)))
    typecheck_jaxpr(out.jaxpr)
    assert _eqn_names(out) == ["sub", "pjit"]

"""make_jaxpr and the jaxpr printer: the seed documents' examples, character for character,
plus the printer's layout rules, the typechecker and the tracer errors."""

import numpy as np
import pytest

import kiln as jax
import kiln.numpy as jnp
from kiln.core import errors
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import (
    Jaxpr,
    JaxprEqn,
    Literal,
    Var,
    _alphabetic,
    typecheck_jaxpr,
    JaxprTypeError,
)
from kiln.primitives import elementwise as ew


def log2(x):
    ln_x = jnp.log(x)
    ln_2 = jnp.log(2.0)
    return ln_x / ln_2


LOG2_JAXPR = """{ lambda ; a:f32[]. let
    b:f32[] = log a
    c:f32[] = log 2.0
    d:f32[] = div b c
  in (d,) }"""


def test_seed_log2():
    global_list = []

    def log2_side_effect(x):
        global_list.append(x)
        return log2(x)

    assert str(jax.make_jaxpr(log2_side_effect)(3.0)) == LOG2_JAXPR
    assert len(global_list) == 1  # the side effect ran once, at trace time


def test_seed_print_shows_tracer(capsys):
    def log2_with_print(x):
        print("printed x:", x)
        return log2(x)

    print(jax.make_jaxpr(log2_with_print)(3.0))
    out = capsys.readouterr().out
    assert out == (
        "printed x: Traced<ShapedArray(float32[], weak_type=True)>with"
        "<DynamicJaxprTrace(level=1/0)>\n" + LOG2_JAXPR + "\n"
    )


def test_seed_python_branch_on_rank():
    def log2_if_rank_2(x):
        if x.ndim == 2:
            return log2(x)
        return x

    assert (
        str(jax.make_jaxpr(log2_if_rank_2)(jax.numpy.array([1, 2, 3])))
        == "{ lambda ; a:i32[3]. let  in (a,) }"
    )


def test_seed_static_argnums_full():
    def create_filled(val, length):
        return jnp.full((length,), val)

    assert str(jax.make_jaxpr(create_filled, static_argnums=(1,))(2, 5)) == (
        "{ lambda ; a:i32[]. let\n"
        "    b:i32[5] = broadcast_in_dim[broadcast_dimensions=() shape=(5,)] a\n"
        "  in (b,) }"
    )
    assert str(jax.make_jaxpr(create_filled, static_argnums=(1,))(1.6, 10)) == (
        "{ lambda ; a:f32[]. let\n"
        "    b:f32[10] = broadcast_in_dim[broadcast_dimensions=() shape=(10,)] a\n"
        "  in (b,) }"
    )
    assert str(create_filled(1.0, 5)) == "[1. 1. 1. 1. 1.]"
    assert str(create_filled(2, 2)) == "[2 2]"


def test_names_are_alphabetic():
    assert [_alphabetic(i) for i in (0, 1, 25, 26, 27, 52, 1000)] == [
        "a",
        "b",
        "z",
        "ba",
        "bb",
        "ca",
        "bmm",
    ]


def test_unused_outputs_print_as_underscore_and_long_chains_name_like_jax():
    def stupid_fn(x):
        y = x + 0.0
        for _ in range(1000):
            x = x * x
        return y

    text = str(jax.make_jaxpr(stupid_fn)(jnp.ones(4)))
    lines = text.splitlines()
    assert lines[0] == "{ lambda ; a:f32[4]. let"
    assert "    c:f32[4] = mul a a" in lines
    assert "    bmm:f32[4] = mul bml bml" in lines
    assert "    _:f32[4] = mul bmm bmm" in lines
    assert lines[-1] == "  in (b,) }"


def test_short_jaxpr_prints_on_one_line_and_constvars_come_first():
    c = jnp.array([1.0, 2.0, 3.0])
    text = str(jax.make_jaxpr(lambda x: x + c)(jnp.ones(3)))
    assert text == "{ lambda a:f32[3]; b:f32[3]. let c:f32[3] = add b a in (c,) }"


def test_scalar_constants_inline_as_literals_with_weak_types():
    text = str(jax.make_jaxpr(lambda x: x * 2 + 1.5)(jnp.ones(3)))
    assert "mul a 2.0" in text and "add b 1.5" in text


def test_nested_jaxpr_params_indent_and_share_names():
    inner = jax.make_jaxpr(lambda x: x * x)(jnp.ones(2))
    outer = Jaxpr([], [Var(ShapedArray((2,), np.float32))], [], [])
    v_out = Var(ShapedArray((2,), np.float32))

    class Call(type(ew.add_p)):
        pass

    call_p = Call("pjit")
    eqn = JaxprEqn(call_p, [outer.invars[0]], [v_out], {"jaxpr": inner, "name": "square"})
    outer = Jaxpr([], outer.invars, [v_out], [eqn])
    assert str(outer) == (
        "{ lambda ; a:f32[2]. let\n"
        "    b:f32[2] = pjit[\n"
        "      jaxpr={ lambda ; c:f32[2]. let d:f32[2] = mul c c in (d,) }\n"
        "      name=square\n"
        "    ] a\n"
        "  in (b,) }"
    )


def test_typecheck_accepts_traced_and_rejects_bad_jaxprs():
    closed = jax.make_jaxpr(log2)(1.0)
    typecheck_jaxpr(closed.jaxpr)
    a = Var(ShapedArray((3,), np.float32))
    b = Var(ShapedArray((4,), np.float32))  # wrong: add of f32[3] gives f32[3]
    bad = Jaxpr([], [a], [b], [JaxprEqn(ew.add_p, [a, a], [b], {})])
    with pytest.raises(JaxprTypeError, match="f32\\[4\\]"):
        typecheck_jaxpr(bad)
    c = Var(ShapedArray((3,), np.float32))
    unbound = Jaxpr([], [a], [c], [JaxprEqn(ew.add_p, [a, c], [c], {})])
    with pytest.raises(JaxprTypeError, match="before it is bound"):
        typecheck_jaxpr(unbound)
    lit = Jaxpr(
        [],
        [a],
        [b],
        [JaxprEqn(ew.add_p, [a, Literal(np.float32(1), ShapedArray((), np.float32))], [b], {})],
    )
    with pytest.raises(JaxprTypeError):
        typecheck_jaxpr(lit)


def test_bool_conversion_error_names_argument():
    def f(x):
        if x > 0:
            return x
        return 2 * x

    with pytest.raises(errors.TracerBoolConversionError) as info:
        jax.make_jaxpr(f)(10)
    msg = str(info.value)
    assert msg.startswith("Attempted boolean conversion of traced array with shape bool[]..")
    assert "The error occurred while tracing the function f at " in msg
    assert "depends on the value of the argument x." in msg


def test_bool_conversion_error_names_the_right_argument():
    def g(x, n):
        i = 0
        while i < n:
            i += 1
        return x + i

    with pytest.raises(
        errors.TracerBoolConversionError, match="depends on the value of the argument n\\."
    ):
        jax.make_jaxpr(g)(10, 20)


def test_integer_and_array_conversion_errors():
    with pytest.raises(errors.TracerIntegerConversionError):
        jax.make_jaxpr(lambda x: list(range(10))[x])(1)
    with pytest.raises(errors.TracerArrayConversionError):
        jax.make_jaxpr(lambda x: np.asarray(x))(1.0)
    with pytest.raises(errors.ConcretizationTypeError):
        jax.make_jaxpr(lambda x: float(x))(1.0)


def test_shape_error_suggests_static_argnums():
    def create_filled(val, length):
        return jnp.full((length,), val)

    with pytest.raises(TypeError) as info:
        jax.make_jaxpr(create_filled)(2, 5)
    msg = str(info.value)
    assert msg.startswith(
        "Shapes must be 1D sequences of concrete values of integer type, "
        "got (Traced<ShapedArray(int32[], weak_type=True)>with"
        "<DynamicJaxprTrace(level=1/0)>,)."
    )
    assert "try using `static_argnums`" in msg
    assert "depends on the value of the argument length." in msg


def test_leaked_tracer_is_detected():
    leaked = []

    def f(x):
        leaked.append(x)
        return x

    jax.make_jaxpr(f)(1.0)
    with pytest.raises(errors.UnexpectedTracerError, match="escape the scope"):
        jnp.log(leaked[0])
    with pytest.raises(errors.UnexpectedTracerError):
        jax.make_jaxpr(lambda y: y + leaked[0])(1.0)


def test_non_array_argument_is_rejected_with_its_path():
    with pytest.raises(TypeError, match="path p\\['w'\\]"):
        jax.make_jaxpr(lambda p: p)({"w": "text"})


def test_tracer_item_assignment_points_to_at():
    def f(x):
        x[0] = 1.0
        return x

    with pytest.raises(TypeError, match="\\.at\\["):
        jax.make_jaxpr(f)(jnp.ones(3))


def test_eager_ops_are_checked_like_traced_ones():
    from kiln import lax

    with pytest.raises(TypeError, match="incompatible shapes"):
        lax.add(jnp.ones(3), jnp.ones((2, 3)))
    with pytest.raises(TypeError, match="same dtypes"):
        lax.add(jnp.ones(3), jnp.ones(3, dtype=jnp.int32))
    out = lax.add(jnp.ones(3, dtype=jnp.int8), jnp.ones(3, dtype=jnp.int8))
    assert out.dtype == np.int8 and not out.weak_type


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: jnp.sum(jnp.exp(x) * 2.0) + x[0],
        lambda x: jax.lax.cond(x[0] > 0, lambda v: v * 2.0, lambda v: -v, x),
        lambda x: jax.lax.scan(lambda c, r: (c + r, c * r), 0.0, x),
        lambda x: jax.lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2.0), (0, x)),
        lambda x: jax.jit(lambda y: jnp.sin(y) @ y)(x),
        lambda x: jax.grad(lambda y: jnp.sum(jnp.tanh(y) ** 2))(x),
        lambda x: jax.lax.switch(1, [jnp.sin, jnp.cos, lambda v: v + 1.0], x),
    ],
)
def test_variables_are_named_as_the_printer_names_them(fun):
    from kiln.core.jaxpr import _Names, name_variables, pp_jaxpr

    closed = jax.make_jaxpr(fun)(np.arange(1.0, 5.0, dtype=np.float32))
    printed, named = _Names(), _Names()
    pp_jaxpr(closed.jaxpr, printed)
    name_variables(closed.jaxpr, named)
    assert named.names == printed.names and len(named.names) >= 3

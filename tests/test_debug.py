"""kiln.debug.print / debug.callback and the host callbacks (pure_callback, io_callback)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.experimental import io_callback


def _normalize(text: str) -> str:
    return " ".join(text.split())


# --- debug.print ----------------------------------------------------------------------------


def test_debug_print_eager_prints_immediately(capsys):
    kiln.debug.print("x={} name={name} y={y:.2f}", jnp.arange(3), name="n", y=jnp.array(1.5))
    assert capsys.readouterr().out == "x=[0 1 2] name=n y=1.50\n"


def test_debug_print_runs_on_every_execution(capsys):
    @kiln.jit
    def f(x):
        kiln.debug.print("x={x} doubled={}", x * 2, x=x)
        return x + 1

    x = jnp.array([1.0, 2.5])
    f(x)
    f(x)
    f(jnp.array([3.0, 4.0]))
    assert capsys.readouterr().out == (
        "x=[1.  2.5] doubled=[2. 5.]\n" * 2 + "x=[3. 4.] doubled=[6. 8.]\n"
    )


def test_debug_print_formats_like_numpy(capsys):
    values = [
        jnp.array(2.0),
        jnp.array([[1, 2], [3, 4]], dtype=jnp.int8),
        jnp.array([True, False]),
        jnp.array([1e-8, 1.0]),
    ]
    kiln.jit(lambda *xs: kiln.debug.print("{} | {} | {} | {}", *xs))(*values)
    expected = " | ".join(str(np.asarray(v)) for v in values)
    assert capsys.readouterr().out == expected + "\n"


def test_debug_print_is_staged_as_an_effect_and_never_removed(capsys):
    def f(x):
        kiln.debug.print("a {}", x)
        unused = x * 3
        kiln.debug.print("a {}", x)  # identical, must not be merged
        kiln.debug.print("b {}", unused)
        return x

    closed = kiln.make_jaxpr(f)(jnp.ones(2))
    names = [e.primitive.name for e in closed.eqns]
    assert names == ["debug_callback", "mul", "debug_callback", "debug_callback"]
    jitted = kiln.jit(f)
    program = jitted.lower(jnp.ones(2)).compile()._entry.executable.program
    assert [e.primitive.name for e in program.eqns].count("debug_callback") == 3
    capsys.readouterr()
    jitted(jnp.array([1.0, 2.0]))
    assert capsys.readouterr().out == "a [1. 2.]\na [1. 2.]\nb [3. 6.]\n"


def test_debug_print_inside_a_nested_jit_keeps_the_call(capsys):
    inner = kiln.jit(lambda x: (kiln.debug.print("inner {}", x), x * 2)[1])

    @kiln.jit
    def outer(x):
        inner(x)  # result unused: the call stays for its effect
        return x

    outer(jnp.array([1.0]))
    outer(jnp.array([1.0]))
    assert capsys.readouterr().out == "inner [1.]\ninner [1.]\n"


def test_debug_print_order_follows_program_order(capsys):
    @kiln.jit
    def f(x):
        y = x + 1
        kiln.debug.print("second {}", y)
        kiln.debug.print("first {}", x)
        return y

    f(jnp.array(1))
    assert capsys.readouterr().out == "second 2\nfirst 1\n"


def test_debug_print_rejects_non_string_format():
    with pytest.raises(TypeError, match="format"):
        kiln.debug.print(3)


def test_debug_callback_receives_arrays_each_run():
    seen = []

    @kiln.jit
    def f(x, tag):
        kiln.debug.callback(lambda v, t: seen.append((np.asarray(v).tolist(), t)), x * 2, "tag")
        return x

    f(jnp.array([1, 2]), 0)
    f(jnp.array([3, 4]), 0)
    assert seen == [([2, 4], "tag"), ([6, 8], "tag")]
    kiln.debug.callback(lambda v: seen.append(type(v)), jnp.ones(1))
    assert seen[-1] is kiln.Array


# --- pure_callback ---------------------------------------------------------------------------


def test_pure_callback_eager_and_jitted_match_numpy():
    def host_sin(a):
        assert isinstance(a, np.ndarray)
        return np.sin(a)

    spec = kiln.ShapeDtypeStruct((3,), jnp.float32)
    x = np.array([0.0, 1.0, 2.0], np.float32)
    eager = kiln.pure_callback(host_sin, spec, jnp.asarray(x))
    jitted = kiln.jit(lambda v: kiln.pure_callback(host_sin, spec, v) * 2)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(eager), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jitted), 2 * np.sin(x), rtol=1e-6)


def test_pure_callback_pytrees_and_kwargs():
    def host(a, *, b):
        return {"sum": a + b, "prod": (a * b).astype(np.int32)}

    specs = {
        "sum": kiln.ShapeDtypeStruct((2,), jnp.float32),
        "prod": kiln.ShapeDtypeStruct((2,), jnp.int32),
    }
    out = kiln.jit(lambda a, b: kiln.pure_callback(host, specs, a, b=b))(
        jnp.array([1.0, 2.0]), jnp.array([3.0, 4.0])
    )
    np.testing.assert_array_equal(np.asarray(out["sum"]), [4.0, 6.0])
    np.testing.assert_array_equal(np.asarray(out["prod"]), [3, 8])
    assert out["prod"].dtype == np.int32


def test_pure_callback_checks_shapes_and_dtypes():
    spec = kiln.ShapeDtypeStruct((3,), jnp.float32)
    with pytest.raises(TypeError, match="returned dtype float64.*declared float32"):
        kiln.pure_callback(lambda a: np.sin(a).astype(np.float64), spec, jnp.ones(3))
    with pytest.raises(ValueError, match=r"returned shape \(2,\).*declared \(3,\)"):
        kiln.jit(lambda v: kiln.pure_callback(lambda a: a[:2], spec, v))(jnp.ones(3))
    with pytest.raises(TypeError, match="structure"):
        kiln.pure_callback(lambda a: (a, a), spec, jnp.ones(3))
    # Python scalars are converted to the declared dtype.
    out = kiln.pure_callback(lambda: 1.5, kiln.ShapeDtypeStruct((), jnp.float32))
    assert out.dtype == np.float32 and float(out) == 1.5


def test_unused_pure_callback_is_removed_but_io_callback_is_not():
    calls = []

    def f(x):
        kiln.pure_callback(
            lambda a: calls.append("pure") or a, kiln.ShapeDtypeStruct((2,), jnp.float32), x
        )
        io_callback(lambda a: calls.append("io"), None, x)
        return x

    jitted = kiln.jit(f)
    text = jitted.lower(jnp.ones(2)).compile().as_text()
    assert "pure_callback" not in text and "io_callback" in text
    jitted(jnp.ones(2))
    jitted(jnp.ones(2))
    assert calls == ["io", "io"]


def test_io_callback_results_and_order():
    log = []

    def record(tag, value):
        log.append((tag, np.asarray(value).tolist()))
        return np.asarray(value, np.float32) + 1

    spec = kiln.ShapeDtypeStruct((), jnp.float32)

    @kiln.jit
    def f(x):
        a = io_callback(lambda v: record("a", v), spec, x, ordered=True)
        b = io_callback(lambda v: record("b", v), spec, x, ordered=True)
        return a + b

    assert float(f(jnp.array(1.0))) == 4.0
    assert float(f(jnp.array(2.0))) == 6.0
    assert log == [("a", 1.0), ("b", 1.0), ("a", 2.0), ("b", 2.0)]
    closed = kiln.make_jaxpr(f)(jnp.array(1.0))
    body = closed.eqns[0].params["jaxpr"]
    assert [e.primitive.name for e in body.eqns] == ["io_callback", "io_callback", "add"]


def test_effects_barrier_is_a_no_op():
    assert kiln.effects_barrier() is None

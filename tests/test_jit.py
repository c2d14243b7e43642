"""kiln.jit: the seed documents' examples (printed output asserted), staging under outer
traces, weak types, argument handling and errors, lowering and compilation."""

from __future__ import annotations

import functools
import inspect
import warnings
from functools import partial

import numpy as np
import pytest

import kiln
import kiln as jax
import kiln.numpy as jnp
from kiln.core import errors
from kiln.core.interpreter import eval_jaxpr
from kiln.core.jaxpr import typecheck_jaxpr
from kiln.primitives.pjit import pjit_p
from kiln.transforms.jit import StaleCaptureWarning

needs_matmul = pytest.mark.skipif(not hasattr(jnp, "matmul"), reason="matmul not written yet")


def _line_of(fn) -> str:
    code = fn.__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


def _normalize(text: str) -> str:
    return " ".join(text.split())


def _assert_program(compiled, expected_jaxpr: str) -> None:
    """Compiled.as_text() is a header line, then the optimized jaxpr (a native backend appends
    its kernel program after it)."""
    body = compiled.as_text().split("\n", 1)[1]
    assert _normalize(body).startswith(_normalize(expected_jaxpr)), body


# --- seed: why can't we just jit everything -----------------------------------------------


def test_seed_condition_on_value_raises_tracer_bool_conversion_error():
    def f(x):
        if x > 0:
            return x
        else:
            return 2 * x

    with pytest.raises(errors.TracerBoolConversionError) as info:
        jax.jit(f)(10)
    lines = str(info.value).splitlines()
    assert lines[0] == "Attempted boolean conversion of traced array with shape bool[].."
    assert lines[1] == (
        f"The error occurred while tracing the function f at {_line_of(f)} for jit. This "
        "concrete value was not available in Python because it depends on the value of the "
        "argument x."
    )
    assert lines[-1].startswith("See https://jax.readthedocs.io/en/latest/errors.html")


def test_seed_while_loop_on_traced_n_names_argument_n():
    def g(x, n):
        i = 0
        while i < n:
            i += 1
        return x + i

    with pytest.raises(errors.TracerBoolConversionError) as info:
        jax.jit(g)(10, 20)
    assert (
        f"while tracing the function g at {_line_of(g)} for jit. This concrete value was "
        "not available in Python because it depends on the value of the argument n."
    ) in str(info.value)


def test_seed_jitted_loop_body_keeps_weak_type():
    @jax.jit
    def loop_body(prev_i):
        return prev_i + 1

    def g_inner_jitted(x, n):
        i = 0
        while i < n:
            i = loop_body(i)
        return x + i

    assert repr(g_inner_jitted(10, 20)) == "Array(30, dtype=int32, weak_type=True)"
    # The Python int 0 and the weakly typed int32 results share one compiled entry.
    assert loop_body._cache_size() == 1


def test_seed_static_argnums_and_argnames(capsys):
    def f(x):
        if x > 0:
            return x
        else:
            return 2 * x

    def g(x, n):
        i = 0
        while i < n:
            i += 1
        return x + i

    f_jit_correct = jax.jit(f, static_argnums=0)
    print(f_jit_correct(10))
    g_jit_correct = jax.jit(g, static_argnames=["n"])
    print(g_jit_correct(10, 20))

    @partial(jax.jit, static_argnames=["n"])
    def g_jit_decorated(x, n):
        i = 0
        while i < n:
            i += 1
        return x + i

    print(g_jit_decorated(10, 20))
    assert capsys.readouterr().out == "10\n30\n30\n"
    assert g_jit_decorated.__name__ == "g_jit_decorated"
    assert repr(g_jit_correct(10, n=20)) == "Array(30, dtype=int32, weak_type=True)"


def test_seed_jnp_full_needs_static_length(capsys):
    def create_filled(val, length):
        return jnp.full((length,), val)

    with pytest.raises(TypeError) as info:
        jax.jit(create_filled)(2, 5)
    message = str(info.value)
    assert message.startswith(
        "Shapes must be 1D sequences of concrete values of integer type, "
        "got (Traced<ShapedArray(int32[], weak_type=True)>with"
        "<DynamicJaxprTrace(level=1/0)>,)."
    )
    assert (
        "If using `jit`, try using `static_argnums` or applying `jit` to smaller "
        "subfunctions." in message
    )
    assert (
        f"The error occurred while tracing the function create_filled at "
        f"{_line_of(create_filled)} for jit. This concrete value was not available in "
        "Python because it depends on the value of the argument length."
    ) in message

    jit_create_filled = jax.jit(create_filled, static_argnums=(1,))
    print(jit_create_filled(2, 5))
    print(jit_create_filled(1.0, 10))
    assert capsys.readouterr().out == "[2 2 2 2 2]\n[1. 1. 1. 1. 1. 1. 1. 1. 1. 1.]\n"
    assert jit_create_filled._cache_size() == 2


def test_seed_print_runs_at_trace_time_only(capsys):
    def fn(x):
        print("called identity function")
        return x

    jit_fn = jax.jit(fn)
    print("called `jit_fn(0.5)`")
    _ = jit_fn(0.5)
    print("called `jit_fn(1.0)`")
    _ = jit_fn(1.0)
    print("called `jit_fn([-1, 1])`")
    _ = jit_fn(jnp.array([-1, 1]))
    assert capsys.readouterr().out == (
        "called `jit_fn(0.5)`\ncalled identity function\n"
        "called `jit_fn(1.0)`\n"
        "called `jit_fn([-1, 1])`\ncalled identity function\n"
    )


SHIFT = -1.0


def _shift_fn(x):
    return x + SHIFT


@pytest.mark.parametrize("mode", ["warn", "retrace", "ignore"])
def test_seed_global_shift(mode, capsys):
    global SHIFT
    x1, x2, x3 = jnp.array([0, 1, 2]), jnp.array([0, -1, 0]), jnp.array([0, 1, 2, 3])
    try:
        SHIFT = -1.0
        jit_fn = jax.jit(_shift_fn, on_stale_capture=mode)
        print(jit_fn(x1))
        SHIFT = 1.0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print(jit_fn(x2))
            print(jit_fn(x3))
            print(jit_fn(x2))
    finally:
        SHIFT = -1.0
    out = capsys.readouterr().out
    stale = [w for w in caught if issubclass(w.category, StaleCaptureWarning)]
    if mode == "retrace":
        assert out == "[-1.  0.  1.]\n[1. 0. 1.]\n[1. 2. 3. 4.]\n[1. 0. 1.]\n"
        assert not stale
    else:  # JAX's answer: the cached code keeps the traced value of SHIFT
        assert out == "[-1.  0.  1.]\n[-1. -2. -1.]\n[1. 2. 3. 4.]\n[-1. -2. -1.]\n"
        if mode == "warn":
            assert len(stale) == 1
            message = str(stale[0].message)
            assert "`SHIFT`" in message and _line_of(_shift_fn) in message
            assert stale[0].filename == __file__  # points at the caller's line
        else:
            assert not stale


B = jnp.array([1, 2, 3])


def test_seed_global_array_becomes_an_implicit_argument(capsys):
    global B

    def fn(x):
        return x + B

    jit_fn = jax.jit(fn)
    x = jnp.array([1, 2, 3])
    try:
        print(jit_fn(x))
        B = jnp.array([0, 0, 0])
        with pytest.warns(StaleCaptureWarning, match="`B`"):
            print(jit_fn(x))
    finally:
        B = jnp.array([1, 2, 3])
    assert capsys.readouterr().out == "[2 4 6]\n[2 4 6]\n"


@needs_matmul
def test_seed_config_relu_make_jaxpr_shows_pjit():
    config = dict(relu=False)

    @jax.jit
    def fn(W, x):
        y = x @ W
        if config["relu"]:
            y = jax.nn.relu(y)
        return y

    W, x = jnp.ones((2, 2)), jnp.ones((2,))
    assert (
        str(jax.make_jaxpr(fn)(W, x))
        == """\
{ lambda ; a:f32[2,2] b:f32[2]. let
    c:f32[2] = pjit[
      jaxpr={ lambda ; d:f32[2,2] e:f32[2]. let
          f:f32[2] = dot_general[dimension_numbers=(([0], [0]), ([], []))] e d
        in (f,) }
      name=fn
    ] a b
  in (c,) }"""
    )
    np.testing.assert_allclose(np.asarray(fn(W, x)), [2.0, 2.0])


@needs_matmul
def test_seed_fn_lower_compile_as_text():
    def fn(W, b, x):
        return x @ W + b

    rng = np.random.default_rng(0)
    W_np, b_np, x_np = (rng.standard_normal(s).astype(np.float32) for s in [(4, 2), (2,), (4,)])
    jit_fn = jax.jit(fn)
    np.testing.assert_allclose(np.asarray(jit_fn(W_np, b_np, x_np)), x_np @ W_np + b_np, rtol=1e-5)
    compiled = jax.jit(fn).lower(W_np, b_np, x_np).compile()
    assert compiled.as_text().startswith(
        "kiln module jit_fn, entry_signature=(f32[4,2], f32[2], f32[4]) -> f32[2]"
    )
    _assert_program(
        compiled,
        """
        { lambda ; a:f32[4,2] b:f32[2] c:f32[4]. let
            d:f32[2] = dot_general[dimension_numbers=(([0], [0]), ([], []))] c a
            e:f32[2] = add d b
          in (e,) }""",
    )


def _copy(x):
    if hasattr(jnp, "copy"):
        return jnp.copy(x)
    pytest.skip("jnp.copy not written yet")


def test_seed_stupid_fn_compiles_to_a_single_copy():
    import time

    def stupid_fn(x):
        y = _copy(x)
        for _ in range(1000):
            x = x * x
        return y

    x = jnp.array([0.9, -0.9, 0.5, 1.0])  # no overflow in the eager run
    jit_stupid_fn = jax.jit(stupid_fn)
    compiled = jit_stupid_fn.lower(x).compile()
    assert compiled.as_text().startswith(
        "kiln module jit_stupid_fn, entry_signature=(f32[4]) -> f32[4]"
    )
    _assert_program(compiled, "{ lambda ; a:f32[4]. let b:f32[4] = copy a in (b,) }")
    assert [e.primitive.name for e in compiled._entry.executable.program.eqns] == ["copy"]
    np.testing.assert_array_equal(np.asarray(jit_stupid_fn(x)), np.asarray(x))

    start = time.perf_counter()
    stupid_fn(x)
    eager = time.perf_counter() - start
    best = min(_time(lambda: jit_stupid_fn(x)) for _ in range(5))
    assert best < eager / 20  # one copy, against 1000 eager multiplications


def _time(fn) -> float:
    import time

    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@pytest.mark.skipif(not hasattr(jnp, "invert"), reason="jnp.invert not written yet")
def test_seed_mask_tensor_rewritten_with_static_shapes():
    def mask_tensor(x, mask):
        x = ~mask * x - mask * 100.0
        return x

    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    mask = rng.uniform(size=(4, 4)) < 0.5
    expected = (~mask) * x - mask * np.float32(100.0)
    eager = mask_tensor(jnp.asarray(x), jnp.asarray(mask))
    jitted = jax.jit(mask_tensor)(jnp.asarray(x), jnp.asarray(mask))
    np.testing.assert_allclose(np.asarray(jitted), expected, rtol=1e-6)
    assert str(jitted) == str(eager)


@needs_matmul
def test_seed_pytree_feed_forward():
    dims = [784, 64, 10]
    rng = np.random.default_rng(2)
    params = [
        {
            "W": jnp.asarray(rng.standard_normal((o, i)).astype(np.float32) * 0.05),
            "b": jnp.zeros((o,)),
        }
        for i, o in zip(dims[:-1], dims[1:])
    ]

    @jax.jit
    def feed_forward(params, x):
        for p in params:
            x = jnp.tanh(p["W"] @ x + p["b"])
        return x

    x = rng.standard_normal(dims[0]).astype(np.float32)
    expected = x
    for p in params:
        expected = np.tanh(np.asarray(p["W"]) @ expected + np.asarray(p["b"]))
    out = feed_forward(params, jnp.asarray(x))
    assert out.shape == (10,) and out.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-5)


# --- the jit wrapper ---------------------------------------------------------------------------


def test_jit_as_function_decorator_and_partial():
    def add(x, y):
        """Add two arrays."""
        return x + y

    jitted = jax.jit(add)
    assert jitted.__name__ == "add" and jitted.__doc__ == "Add two arrays."
    assert jitted.__wrapped__ is add
    assert inspect.signature(jitted) == inspect.signature(add)

    @jax.jit
    def mul(x, y):
        return x * y

    @functools.partial(jax.jit, static_argnames=["k"])
    def shift(x, k):
        return x + k

    @jax.jit(static_argnums=1)
    def scale(x, k):
        return x * k

    x = jnp.array([1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(jitted(x, x)), [2.0, 4.0])
    np.testing.assert_array_equal(np.asarray(mul(x, x)), [1.0, 4.0])
    np.testing.assert_array_equal(np.asarray(scale(x, 3)), [3.0, 6.0])
    np.testing.assert_array_equal(np.asarray(shift(x, k=1)), [2.0, 3.0])


@pytest.mark.parametrize(
    "arg,expected",
    [
        (0, "Array(1, dtype=int32, weak_type=True)"),
        (1.5, "Array(2.5, dtype=float32, weak_type=True)"),
        (True, "Array(2, dtype=int32, weak_type=True)"),
        (np.int16(3), "Array(4, dtype=int16)"),
        (np.float64(1.0), "Array(2., dtype=float32)"),
    ],
)
def test_weak_types_preserved_end_to_end(arg, expected):
    assert repr(jax.jit(lambda p: p + 1)(arg)) == expected


def test_weak_type_of_outputs_matches_eager():
    def f(x, y):
        return x * 2, y + x, 3.0

    x, y = jnp.array(1.5), jnp.array([1, 2], dtype=jnp.int8)
    for args in [(1.5, y), (x, y), (2, jnp.array([1.0, 2.0]))]:
        eager, jitted = f(*args), jax.jit(f)(*args)
        for e, j in zip(eager, jitted):
            e = e if isinstance(e, kiln.Array) else jnp.asarray(e)
            assert (j.dtype, j.weak_type, j.shape) == (e.dtype, e.weak_type, e.shape)
            np.testing.assert_array_equal(np.asarray(j), np.asarray(e))


def test_pytrees_in_and_out():
    @jax.jit
    def f(params, x, scale=2.0):
        out = {
            "sum": params["a"] + params["b"][0] * x,
            "nothing": None,
            "pair": (x * scale, params["b"][1]),
        }
        return out

    params = {"a": jnp.ones(3), "b": (jnp.arange(3.0), np.float32(4.0))}
    out = f(params, jnp.full((3,), 2.0))
    assert set(out) == {"sum", "nothing", "pair"} and out["nothing"] is None
    np.testing.assert_array_equal(np.asarray(out["sum"]), [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(np.asarray(out["pair"][0]), [4.0, 4.0, 4.0])
    assert out["pair"][1].dtype == np.float32 and float(out["pair"][1]) == 4.0
    out = f(params, jnp.full((3,), 2.0), scale=3.0)
    np.testing.assert_array_equal(np.asarray(out["pair"][0]), [6.0, 6.0, 6.0])


def test_numpy_arguments_are_copied_not_frozen():
    x = np.arange(4, dtype=np.float64)
    out = jax.jit(lambda a: a * 2)(x)
    assert out.dtype == np.float32  # canonicalized, as JAX does without x64
    assert x.flags.writeable
    x[0] = 100.0
    np.testing.assert_array_equal(np.asarray(out), [0.0, 2.0, 4.0, 6.0])
    out2 = jax.jit(lambda a: a)(x)
    assert float(out2[0]) == 100.0 and x.flags.writeable


def test_outputs_that_are_inputs_literals_or_constants():
    table = jnp.array([1.0, 2.0])

    @jax.jit
    def f(x):
        return x, 7, table, x * 1.0

    x = jnp.array([3.0, 4.0])
    a, seven, t, same = f(x)
    np.testing.assert_array_equal(np.asarray(a), [3.0, 4.0])
    assert repr(seven) == "Array(7, dtype=int32, weak_type=True)"
    np.testing.assert_array_equal(np.asarray(t), [1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(same), [3.0, 4.0])


def test_invalid_argument_names_its_pytree_path():
    @jax.jit
    def f(params, x):
        return x

    with pytest.raises(TypeError) as info:
        f([{"W": "weights", "b": jnp.ones(2)}], jnp.ones(2))
    message = str(info.value)
    assert "path params[0]['W']" in message and "<class 'str'>" in message
    assert "static_argnums" in message
    with pytest.raises(TypeError, match=r"path x"):
        f([], object())
    with pytest.raises(TypeError, match=r"path params\[0\]"):
        f([np.array(["a"])], 1.0)


def test_unhashable_static_argument_is_a_clear_error():
    f = jax.jit(lambda x, shape: jnp.zeros(shape) + x, static_argnums=1)
    with pytest.raises(ValueError) as info:
        f(1.0, [2, 3])
    message = str(info.value)
    assert "`shape`" in message and "hashable" in message and "list" in message
    assert f(1.0, (2, 3)).shape == (2, 3)


def test_static_argnums_out_of_range_and_bad_options():
    with pytest.raises(ValueError, match="static_argnums"):
        jax.jit(lambda x: x, static_argnums=2)
    with pytest.raises(ValueError, match="on_stale_capture"):
        jax.jit(lambda x: x, on_stale_capture="maybe")
    with pytest.raises(ValueError, match="Unknown backend"):
        jax.jit(lambda x: x, backend="tpu")
    with pytest.raises(TypeError, match="callable"):
        jax.jit(3)


def test_static_values_of_different_types_do_not_share_entries():
    f = jax.jit(lambda x, k: x * k if not isinstance(k, bool) else x, static_argnums=1)
    x = jnp.array([2.0])
    assert float(f(x, True)[0]) == 2.0
    assert float(f(x, 1)[0]) == 2.0 and float(f(x, 1.0)[0]) == 2.0
    assert f._cache_size() == 3


def test_static_argument_by_position_or_keyword():
    f = jax.jit(lambda x, n: x * n, static_argnames="n")
    assert float(f(jnp.array(2.0), 3)) == 6.0
    assert float(f(jnp.array(2.0), n=3)) == 6.0


def test_disable_jit_runs_python_every_time(capsys):
    def f(x):
        print("ran")
        return x + 1

    jitted = jax.jit(f)
    jax.config.update("jax_disable_jit", True)
    try:
        jitted(1.0)
        jitted(1.0)
    finally:
        jax.config.update("jax_disable_jit", False)
    jitted(1.0)
    jitted(1.0)
    assert capsys.readouterr().out == "ran\nran\nran\n"


def test_x64_flag_is_part_of_the_key():
    f = jax.jit(lambda x: x + 1)
    assert f(1).dtype == np.int32
    jax.config.update("jax_enable_x64", True)
    try:
        assert f(1).dtype == np.int64
    finally:
        jax.config.update("jax_enable_x64", False)
    assert f(1).dtype == np.int32


def test_methods_bind_like_functions():
    class Scaler:
        def __init__(self, k):
            self.k = k

        @functools.partial(jax.jit, static_argnums=0)
        def apply(self, x):
            return x * self.k

        def __hash__(self):
            return hash(self.k)

        def __eq__(self, other):
            return isinstance(other, Scaler) and other.k == self.k

    np.testing.assert_array_equal(np.asarray(Scaler(3).apply(jnp.array([1.0]))), [3.0])


def test_donate_argnums_is_accepted():
    f = jax.jit(lambda x: x * 2, donate_argnums=0)
    np.testing.assert_array_equal(np.asarray(f(jnp.array([1.0]))), [2.0])


# --- staging under outer traces ------------------------------------------------------------


def test_nested_jit_is_staged_as_pjit():
    inner = jax.jit(lambda x, y: x * y + 1.0)

    def outer(x):
        return inner(x, x) - 1.0

    assert _normalize(str(jax.make_jaxpr(outer)(jnp.ones(3)))) == _normalize("""
        { lambda ; a:f32[3]. let
            b:f32[3] = pjit[
              jaxpr={ lambda ; c:f32[3] d:f32[3]. let
                  e:f32[3] = mul c d
                  f:f32[3] = add e 1.0
                in (f,) }
              name=<lambda>
            ] a a
            g:f32[3] = sub b 1.0
          in (g,) }""")
    np.testing.assert_array_equal(np.asarray(jax.jit(outer)(jnp.array([2.0]))), [4.0])


def test_inner_trace_is_cached_so_python_runs_once_per_signature(capsys):
    @jax.jit
    def inner(x):
        print("tracing inner")
        return x * 2

    def outer(x):
        return inner(x) + inner(x + 1)

    jax.make_jaxpr(outer)(jnp.ones(2))
    jax.jit(outer)(jnp.ones(2))
    assert capsys.readouterr().out == "tracing inner\n"
    inner(jnp.ones(2))  # the top-level call compiles the cached trace: no new trace
    assert capsys.readouterr().out == ""


def test_closure_over_outer_tracer_becomes_an_explicit_input():
    def outer(x):
        y = x * 2
        return jax.jit(lambda z: z + y)(x)

    closed = jax.make_jaxpr(outer)(jnp.ones(3))
    typecheck_jaxpr(closed.jaxpr)
    assert _normalize(str(closed)) == _normalize("""
        { lambda ; a:f32[3]. let
            b:f32[3] = mul a 2.0
            c:f32[3] = pjit[
              jaxpr={ lambda ; d:f32[3] e:f32[3]. let f:f32[3] = add e d in (f,) }
              name=<lambda>
            ] b a
          in (c,) }""")
    np.testing.assert_array_equal(np.asarray(jax.jit(outer)(jnp.array([1.0, 2.0]))), [3.0, 6.0])


def test_constants_of_a_staged_call_stay_in_its_jaxpr():
    table = jnp.array([1, 2, 3])
    closed = jax.make_jaxpr(jax.jit(lambda x: x + table))(jnp.array([1, 2, 3]))
    (eqn,) = closed.eqns
    assert eqn.primitive is pjit_p and eqn.params["jaxpr"].consts[0] is table
    np.testing.assert_array_equal(
        np.asarray(eval_jaxpr(closed.jaxpr, closed.consts, jnp.array([1, 1, 1]))[0]), [2, 3, 4]
    )


def test_pjit_runs_eagerly_and_under_eval_jaxpr_retracing():
    closed = jax.make_jaxpr(lambda x: jax.jit(lambda y: y * 3.0)(x) + 1.0)(jnp.ones(2))
    (out,) = eval_jaxpr(closed.jaxpr, closed.consts, jnp.array([1.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(out), [4.0, 7.0])
    restaged = jax.make_jaxpr(lambda x: eval_jaxpr(closed.jaxpr, closed.consts, x))(jnp.ones(2))
    assert str(restaged) == str(closed)
    # A NumPy input to the eager pjit impl is neither frozen nor aliased.
    x = np.ones(2, np.float32)
    identity = jax.make_jaxpr(jax.jit(lambda y: y))(x)
    (res,) = eval_jaxpr(identity.jaxpr, [], x)
    assert x.flags.writeable and np.asarray(res) is not x


def test_jit_under_make_jaxpr_with_static_args():
    f = jax.jit(lambda x, n: x * n, static_argnums=1)
    closed = jax.make_jaxpr(lambda x: f(x, 3))(jnp.ones(2))
    (eqn,) = closed.eqns
    assert eqn.primitive is pjit_p
    assert "mul" in str(eqn.params["jaxpr"]) and " 3" in str(eqn.params["jaxpr"])
    (out,) = eval_jaxpr(closed.jaxpr, closed.consts, jnp.array([1.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(out), [3.0, 6.0])


# --- constants ---------------------------------------------------------------------------


def test_large_constants_are_hidden_arguments_not_copies():
    big = jnp.asarray(np.arange(300_000, dtype=np.float32))  # 1.2 MB > 1 MiB
    small = jnp.asarray(np.arange(4, dtype=np.float32))
    g = kiln.jit(lambda x: x + big)
    compiled = g.lower(jnp.ones(300_000)).compile()
    executable = compiled._entry.executable
    assert len(executable.hidden_args) == 1 and executable.hidden_args[0] is big
    assert "hidden_args=1" in compiled.as_text().splitlines()[0]
    np.testing.assert_array_equal(
        np.asarray(g(jnp.ones(300_000))), np.arange(300_000, dtype=np.float32) + 1
    )
    f = kiln.jit(lambda x: x + small)
    assert f.lower(jnp.ones(4)).compile()._entry.executable.hidden_args == ()
    np.testing.assert_array_equal(np.asarray(f(jnp.zeros(4))), [0.0, 1.0, 2.0, 3.0])


def test_small_constant_expressions_are_folded():
    table = jnp.asarray(np.array([1.0, 2.0, 3.0], np.float32))
    f = jax.jit(lambda x: x + table * 2.0 + (3.0 - 1.0))
    _assert_program(
        f.lower(jnp.ones(3)).compile(),
        "{ lambda a:f32[3]; b:f32[3]. let c:f32[3] = add b a d:f32[3] = add c 2.0 in (d,) }",
    )
    np.testing.assert_array_equal(np.asarray(f(jnp.ones(3))), [5.0, 7.0, 9.0])


# --- lowering --------------------------------------------------------------------------------


def test_lower_with_shape_dtype_structs_and_compile():
    def f(x, y):
        return x * y + 1.0

    jitted = jax.jit(f)
    spec = jax.ShapeDtypeStruct((3,), jnp.float32)
    lowered = jitted.lower(spec, spec)
    assert lowered.as_text() == str(jax.make_jaxpr(f)(jnp.ones(3), jnp.ones(3)))
    compiled = lowered.compile()
    np.testing.assert_array_equal(
        np.asarray(compiled(jnp.ones(3), jnp.full((3,), 2.0))), [3.0, 3.0, 3.0]
    )
    with pytest.raises(TypeError, match="compiled for arguments"):
        compiled(jnp.ones(4), jnp.ones(4))
    # The call path reuses what lower/compile built: no new trace or compile.
    info = jitted.cache_info()
    jitted(jnp.ones(3), jnp.ones(3))
    assert jitted.cache_info() == info


def test_shape_dtype_struct_only_allowed_in_lower():
    with pytest.raises(TypeError, match="abstract array"):
        jax.jit(lambda x: x)(jax.ShapeDtypeStruct((2,), jnp.float32))


def test_explicit_interpreter_backend():
    f = jax.jit(lambda x: x * 2, backend="interpreter")
    assert "backend=interpreter" in f.lower(jnp.ones(2)).compile().as_text()
    np.testing.assert_array_equal(np.asarray(f(jnp.ones(2))), [2.0, 2.0])


# --- host/device helpers ---------------------------------------------------------------------


def test_device_put_devices_block_until_ready():
    tree = jax.device_put({"a": 1, "b": np.arange(3), "c": (2.5, jnp.ones(2))})
    assert repr(tree["a"]) == "Array(1, dtype=int32, weak_type=True)"
    assert isinstance(tree["b"], kiln.Array) and tree["b"].dtype == np.int32
    assert tree["c"][1] is not None
    assert jax.block_until_ready(tree) is tree
    assert jax.devices() == [jax.devices()[0]] and jax.devices()[0].platform == "cpu"
    assert jax.default_backend() == "cpu"
    with pytest.raises(TypeError, match="device_put"):
        jax.device_put("text")
    source = np.ones(2)
    put = jax.device_put(source)
    source[0] = 5
    assert float(put[0]) == 1.0

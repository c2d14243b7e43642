"""The debug_nans and debug_infs flags: FloatingPointError naming the primitive that produced
a NaN (an infinity), eagerly, under jit (outputs checked, then an op-by-op run to find the
primitive), inside control-flow bodies and under grad; the messages are JAX 0.10.2's first
lines, and no check happens (and nothing raises) while the flags are off."""

import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core import trace

NAN_IN = "invalid value (nan) encountered in {}"
INF_IN = "invalid value (inf) encountered in {}"


@pytest.fixture(autouse=True)
def _flags_restored():
    previous = (kiln.config.debug_nans, kiln.config.debug_infs)
    yield
    kiln.config.update("jax_debug_nans", previous[0])
    kiln.config.update("jax_debug_infs", previous[1])


@pytest.fixture
def nans():
    kiln.config.update("jax_debug_nans", True)


@pytest.fixture
def infs():
    kiln.config.update("jax_debug_infs", True)


def _message(call) -> str:
    with pytest.raises(FloatingPointError) as info:
        call()
    return str(info.value)


def _first_line(call) -> str:
    return _message(call).splitlines()[0]


# --- eager ----------------------------------------------------------------------------------


def test_eager_division_and_log(nans):
    zero = jnp.array(0.0)
    assert _message(lambda: zero / zero) == NAN_IN.format("div")
    assert _message(lambda: jnp.float32(0.0) / 0.0) == NAN_IN.format("div")
    assert _message(lambda: jnp.log(jnp.array(-1.0))) == NAN_IN.format("log")
    assert _message(lambda: jnp.sqrt(jnp.array([-1.0, 4.0]))) == NAN_IN.format("sqrt")
    assert _message(lambda: jnp.arcsin(jnp.array(2.0))) == NAN_IN.format("asin")
    inf = jnp.array(np.inf)
    assert _message(lambda: inf - inf) == NAN_IN.format("sub")
    # Same-shape array operators (kiln's eager fast path) are checked too.
    zeros = jnp.zeros(3)
    assert _message(lambda: zeros / zeros) == NAN_IN.format("div")
    assert _message(lambda: zeros / 0.0) == NAN_IN.format("div")
    assert _message(lambda: (-jnp.ones(3)) ** 0.5) == NAN_IN.format("pow")
    np.testing.assert_array_equal(jnp.ones(3) / jnp.ones(3), [1, 1, 1])


def test_eager_other_dtypes(nans):
    assert _message(lambda: jnp.log(jnp.array(-1.0, jnp.float16))) == NAN_IN.format("log")
    assert _message(lambda: jnp.log(jnp.array(-1.0, jnp.bfloat16))) == NAN_IN.format("log")
    f8 = jnp.array(-1.0, jnp.float8_e4m3fn)
    assert _message(lambda: jnp.log(f8)) == NAN_IN.format("log")
    assert _message(lambda: jnp.log(jnp.array(0j)) * 0) == NAN_IN.format("mul")
    # sqrt(-1+0j) is 1j: nothing to report; integer division by zero is no float error.
    assert complex(jnp.sqrt(jnp.array(-1.0 + 0j))) == 1j
    assert int(jnp.array(1) // jnp.array(0)) == -2  # JAX's value for 1 // 0 in int32


def test_outputs_are_checked_so_nan_inputs_raise_where_passed_along(nans):
    # JAX checks each operation's output only: a NaN that came in is reported by the first
    # operation that returns it.
    kiln.config.update("jax_debug_nans", False)
    x = jnp.array([np.nan, 1.0])
    kiln.config.update("jax_debug_nans", True)
    assert _message(lambda: x + 1) == NAN_IN.format("add")
    assert _message(lambda: x.reshape(2, 1)) == NAN_IN.format("reshape")
    assert _message(lambda: x.sum()) == NAN_IN.format("reduce_sum")
    assert float(jnp.nansum(jnp.array([1.0, 2.0]))) == 3.0
    # A NaN that a where masks out is still a NaN result of log, eagerly.
    m1 = jnp.array(-1.0)
    assert _message(lambda: jnp.where(m1 > 0, jnp.log(m1), 0.0)) == NAN_IN.format("log")


def test_infinities_need_debug_infs(nans):
    one, zero = jnp.array(1.0), jnp.array(0.0)
    assert float(one / zero) == np.inf  # debug_nans alone lets infinities through
    kiln.config.update("jax_debug_infs", True)
    assert _message(lambda: one / zero) == INF_IN.format("div")
    assert _message(lambda: jnp.exp(jnp.array(1000.0))) == INF_IN.format("exp")
    kiln.config.update("jax_debug_nans", False)
    assert np.isnan(float(zero / zero))  # and debug_infs alone lets NaNs through
    assert _message(lambda: jnp.array(1.0) / 0.0) == INF_IN.format("div")


def test_no_checks_while_off():
    assert not kiln.config.debug_nans and not kiln.config.debug_infs
    assert trace._special_value_check is None
    zero = jnp.array(0.0)
    assert np.isnan(float(zero / zero))
    assert np.isnan(float(kiln.jit(jnp.log)(-1.0)))
    assert float(jnp.array(1.0) / 0.0) == np.inf


def test_flag_toggling_and_context_managers():
    zero = jnp.array(0.0)
    kiln.config.update("jax_debug_nans", True)
    assert kiln.config.read("jax_debug_nans") and kiln.config.check_special
    assert _message(lambda: zero / zero) == NAN_IN.format("div")
    kiln.config.update("jax_debug_nans", False)
    assert not kiln.config.check_special and trace._special_value_check is None
    assert np.isnan(float(zero / zero))
    assert kiln.debug_nans.value is False
    with kiln.debug_nans(True):
        assert kiln.debug_nans.value is True
        assert _message(lambda: zero / zero) == NAN_IN.format("div")
        with kiln.debug_nans(False):
            assert np.isnan(float(zero / zero))
        assert kiln.config.debug_nans
    assert not kiln.config.debug_nans
    with kiln.debug_infs():
        assert _message(lambda: jnp.array(1.0) / zero) == INF_IN.format("div")
    assert not kiln.config.debug_infs
    kiln.config.update("kiln_debug_nans", True)
    assert kiln.config.debug_nans
    kiln.config.debug_nans = False  # plain assignment (monkeypatch.setattr) works the same
    assert not kiln.config.check_special and trace._special_value_check is None
    kiln.config.debug_infs = True
    assert kiln.config.check_special
    assert _message(lambda: jnp.array(1.0) / zero) == INF_IN.format("div")
    with pytest.raises(AttributeError):
        kiln.config.update("check_special", True)


@pytest.mark.parametrize("variable", ["JAX_DEBUG_NANS", "KILN_DEBUG_NANS"])
def test_environment_variables(variable):
    script = (
        "import kiln, kiln.numpy as jnp\n"
        "assert kiln.config.debug_nans and not kiln.config.debug_infs\n"
        "try:\n"
        "    jnp.log(jnp.array(-1.0))\n"
        "except FloatingPointError as err:\n"
        "    print(err)\n"
    )
    env = {k: v for k, v in os.environ.items() if "DEBUG_NANS" not in k and "DEBUG_INFS" not in k}
    env[variable] = "1"
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == NAN_IN.format("log")


# --- jit ---------------------------------------------------------------------------------------


def test_jit_names_the_inner_primitive(nans):
    m1 = jnp.array(-1.0)

    def f(x):
        return jnp.log(x) * 2.0 + 1.0

    message = _message(lambda: kiln.jit(f)(m1))
    first, note = message.splitlines()
    assert first == NAN_IN.format("log")
    assert "jit(f)" in note and "op by op" in note

    def g(x):
        y = x - x
        return y / y + 1.0

    assert _first_line(lambda: kiln.jit(g)(jnp.array(1.0))) == NAN_IN.format("div")
    two_outputs = kiln.jit(lambda y: (y, jnp.sqrt(y)))
    assert _first_line(lambda: two_outputs(m1)) == NAN_IN.format("sqrt")
    nested = kiln.jit(lambda y: kiln.jit(jnp.log)(y) + 1)
    assert _first_line(lambda: nested(m1)) == NAN_IN.format("log")


def test_jit_checks_outputs_only(nans):
    # A NaN masked inside the compiled function never reaches an output: no error (JAX).
    masked = kiln.jit(lambda y: jnp.where(y > 0, jnp.log(y), 0.0))
    assert float(masked(jnp.array(-1.0))) == 0.0
    in_cond = kiln.jit(
        lambda x: lax.cond(x < 0, lambda y: jnp.where(y > 0, jnp.log(y), 0.0), lambda y: y, x)
    )
    assert float(in_cond(-1.0)) == 0.0


def test_jit_nan_passed_through_unchanged(nans):
    kiln.config.update("jax_debug_nans", False)
    x = jnp.array([np.nan, 1.0])
    kiln.config.update("jax_debug_nans", True)
    assert _first_line(lambda: kiln.jit(lambda y: y + 1)(x)) == NAN_IN.format("add")
    # An identity has no operation to blame.
    message = _message(lambda: kiln.jit(lambda y: y)(x))
    assert message.startswith("invalid value (nan) encountered in the output of jit(<lambda>).")
    assert "no operation produced a nan" in message


def test_jit_infinities(nans, infs):
    exp2 = kiln.jit(lambda x: jnp.exp(x) * 2)
    assert _first_line(lambda: exp2(1000.0)) == INF_IN.format("exp")
    assert "held an inf" in _message(lambda: exp2(1000.0))
    kiln.config.update("jax_debug_infs", False)
    assert float(exp2(1000.0)) == np.inf


def test_compile_cache_is_not_polluted():
    @kiln.jit
    def f(x):
        return jnp.log(x) + 1.0

    m1 = jnp.array(-1.0)
    assert np.isnan(float(f(m1)))  # compiled and cached with the flags off
    assert f._cache_size() == 1
    kiln.config.update("jax_debug_nans", True)
    assert _first_line(lambda: f(m1)) == NAN_IN.format("log")
    assert float(f(jnp.array(1.0))) == 1.0  # clean inputs run the same entry
    kiln.config.update("jax_debug_nans", False)
    assert np.isnan(float(f(m1)))
    assert f._cache_size() == 1


def test_donated_arguments_are_kept_for_the_rerun(nans):
    f = kiln.jit(lambda x: jnp.log(x - 2.0), donate_argnums=0)
    assert _first_line(lambda: f(jnp.ones(1000))) == NAN_IN.format("log")
    g = kiln.jit(lambda x: x * 2.0, donate_argnums=0)
    np.testing.assert_array_equal(g(jnp.ones(1000)), np.full(1000, 2.0))


def test_ahead_of_time_compiled_calls(nans):
    m1 = jnp.array(-1.0)
    compiled = kiln.jit(lambda x: jnp.log(x) * 2.0).lower(m1).compile()
    assert _first_line(lambda: compiled(m1)) == NAN_IN.format("log")
    assert float(compiled(jnp.array(1.0))) == 0.0


def test_disable_jit_checks_each_operation(nans):
    f = kiln.jit(lambda x: jnp.where(x > 0, jnp.log(x), 0.0))
    with kiln.disable_jit():
        assert _message(lambda: f(jnp.array(-1.0))) == NAN_IN.format("log")


# --- control flow, grad, vmap ----------------------------------------------------------------


def test_control_flow_bodies_name_their_primitive(nans):
    cond = kiln.jit(lambda x: lax.cond(x > 0, lambda y: jnp.log(-y), lambda y: y, x))
    assert _first_line(lambda: cond(1.0)) == NAN_IN.format("log")

    def body(c):
        return c[0] + 1, jnp.log(c[1] - 2.0)

    loop = kiln.jit(lambda x: lax.while_loop(lambda c: c[0] < 3, body, (0, x)))
    assert _first_line(lambda: loop(1.0)) == NAN_IN.format("log")
    scan = kiln.jit(lambda xs: lax.scan(lambda c, a: (c, jnp.arcsin(a)), 0.0, xs))
    assert _first_line(lambda: scan(jnp.array([0.5, 2.0]))) == NAN_IN.format("asin")
    eager = lambda: lax.scan(lambda c, a: (c, jnp.arcsin(a)), 0.0, jnp.array([0.5, 2.0]))  # noqa: E731
    assert _message(eager) == NAN_IN.format("asin")
    fori = kiln.jit(lambda x: lax.fori_loop(0, 3, lambda i, c: jnp.sqrt(c - 2.0), x))
    assert _first_line(lambda: fori(3.0)) == NAN_IN.format("sqrt")


def test_grad(nans):
    assert _message(lambda: kiln.grad(jnp.sqrt)(-1.0)) == NAN_IN.format("sqrt")
    assert _message(lambda: kiln.grad(lambda x: x / x)(0.0)) == NAN_IN.format("div")
    assert _message(lambda: kiln.grad(jnp.log)(-1.0)) == NAN_IN.format("log")
    jitted = kiln.jit(kiln.grad(lambda y: jnp.sqrt(y) * 1.0))
    assert _first_line(lambda: jitted(-1.0)) == NAN_IN.format("sqrt")
    assert float(kiln.grad(jnp.sqrt)(0.0)) == np.inf  # an infinity, not a NaN
    kiln.config.update("jax_debug_infs", True)
    assert _message(lambda: kiln.grad(jnp.sqrt)(0.0)) == INF_IN.format("div")
    assert _message(lambda: kiln.grad(jnp.log)(0.0)) == INF_IN.format("log")


def test_vmap_and_clean_programs(nans):
    assert _message(lambda: kiln.vmap(jnp.log)(jnp.array([1.0, -1.0]))) == NAN_IN.format("log")
    # Programs without NaNs run as usual, eagerly and compiled.
    x = jnp.linspace(0.5, 2.0, 8)
    np.testing.assert_allclose(kiln.jit(jnp.log)(x), np.log(np.linspace(0.5, 2.0, 8)), rtol=1e-6)
    np.testing.assert_allclose(jnp.log(x), np.log(np.linspace(0.5, 2.0, 8)), rtol=1e-6)
    assert float(kiln.nn.relu(jnp.array(-1.0))) == 0.0
    assert float(kiln.grad(lambda v: jnp.sum(v**2))(x)[0]) == 1.0

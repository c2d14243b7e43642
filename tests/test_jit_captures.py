"""Captured values and the content-keyed jit cache: a new jitted object never reuses a trace whose
captured globals, closure cells, attributes or bound containers have changed since (it traces
again, as a new function object does in JAX), the same jitted object keeps its trace-time values
(warning once), and nothing is retraced when nothing changed."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import sys
import textwrap
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.runtime import cache
from kiln.transforms.jit import JitWrapped, StaleCaptureWarning

TRACES: list = []


@pytest.fixture(autouse=True)
def _fresh_traces():
    TRACES.clear()
    yield


@contextlib.contextmanager
def no_stale_warning():
    """A block in which a StaleCaptureWarning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", StaleCaptureWarning)
        yield


def _run_module(source: str, jit_module=kiln) -> dict:
    """Run `source` as the body of a fresh module (with `kiln` bound to `jit_module`) and
    return its namespace."""
    namespace = {"kiln": jit_module, "functools": functools, "__name__": "loop_module"}
    exec(compile(textwrap.dedent(source), "<loop_module>", "exec"), namespace)
    return namespace


LOOP = """
    outs = []
    for i in range(4):
        outs.append(float(kiln.jit(lambda x: x * i)(1.0)))
"""


# --- loops creating new functions ----------------------------------------------------------------


def test_module_level_loop_over_a_global_gives_each_value():
    with no_stale_warning():
        assert _run_module(LOOP)["outs"] == [0.0, 1.0, 2.0, 3.0]


def test_module_level_loop_matches_jax():
    jax = pytest.importorskip("jax")
    assert _run_module(LOOP)["outs"] == _run_module(LOOP, jax)["outs"]


DTYPE_LOOP = """
    import numpy as np
    import kiln.numpy as jnp
    outs = []
    for dt in (jnp.float32, jnp.int32, np.int16, np.dtype("uint8")):
        outs.append(str(kiln.jit(lambda x: x.astype(dt))(jnp.asarray([1.5])).dtype))
"""


def test_module_level_loop_over_a_global_dtype_gives_each_dtype():
    with no_stale_warning():
        assert _run_module(DTYPE_LOOP)["outs"] == ["float32", "int32", "int16", "uint8"]


def test_function_level_loop_over_a_closure_variable_gives_each_value():
    outs = []
    for i in range(4):
        outs.append(float(kiln.jit(lambda x: x * i)(1.0)))
    assert outs == [0.0, 1.0, 2.0, 3.0]


# --- module globals ------------------------------------------------------------------------------

SCALE = 2.0
TABLE = jnp.array([1.0, 2.0])
UNRELATED = 0


def _times_scale(x):
    TRACES.append("scale")
    return x * SCALE


def test_new_jit_of_a_function_sees_a_rebound_global_and_the_old_one_keeps_its_value():
    global SCALE
    old = kiln.jit(_times_scale)
    try:
        assert float(old(1.0)) == 2.0
        SCALE = 3.0
        # Every new jitted object traces again, even of the same function object (where JAX
        # would reuse its trace): it gets the values a fresh trace would see.
        fresh = kiln.jit(_times_scale)
        with no_stale_warning():
            assert float(fresh(1.0)) == 3.0
        with pytest.warns(StaleCaptureWarning, match="`SCALE`"):
            assert float(old(1.0)) == 2.0  # the old one keeps its trace-time value
        with no_stale_warning():
            assert float(old(1.0)) == 2.0  # warned once
            assert float(fresh(1.0)) == 3.0
        assert TRACES == ["scale", "scale"]
        # A third object while SCALE is still 3.0 shares the second trace.
        assert float(kiln.jit(_times_scale)(1.0)) == 3.0
        assert TRACES == ["scale", "scale"]
        # Back to the first value: a new object must trace again (the newest trace read 3.0).
        SCALE = 2.0
        assert float(kiln.jit(_times_scale)(1.0)) == 2.0
        with pytest.warns(StaleCaptureWarning, match="`SCALE` held 3.0"):
            assert float(fresh(1.0)) == 3.0
    finally:
        SCALE = 2.0


def test_rebinding_an_unrelated_global_keeps_hitting_the_cache():
    global UNRELATED
    cache.clear_all()
    try:
        for step in range(5):
            UNRELATED = step
            assert float(kiln.jit(_times_scale)(1.0)) == 2.0
        assert TRACES == ["scale"]
    finally:
        UNRELATED = 0


def test_global_array_rebound_between_new_objects():
    global TABLE
    original = TABLE
    try:
        outs = []
        for values in ([1.0, 2.0], [5.0, 6.0]):
            TABLE = jnp.array(values)
            outs.append(np.asarray(kiln.jit(lambda x: x + TABLE)(jnp.zeros(2))).tolist())
        assert outs == [[1.0, 2.0], [5.0, 6.0]]
    finally:
        TABLE = original


# --- nested helpers ------------------------------------------------------------------------------

OFFSET = 1.0


def _adds_offset(x):
    return x + OFFSET


def _calls_adds_offset(x):
    TRACES.append("helper")
    return _adds_offset(x) * 2.0


def test_helper_functions_reading_globals():
    global OFFSET
    try:
        outs = []
        for OFFSET in (1.0, 2.0, 2.0, 3.0):  # noqa: B020 (rebinding the global on purpose)
            outs.append(float(kiln.jit(lambda x: _calls_adds_offset(x))(0.0)))
        assert outs == [2.0, 4.0, 4.0, 6.0]
        assert len(TRACES) == 3  # the repeated 2.0 hit the cache
    finally:
        OFFSET = 1.0


def test_helper_from_another_module_and_module_attributes(tmp_path, monkeypatch):
    source = textwrap.dedent("""
        FACTOR = 2.0

        def scaled(x):
            return x * FACTOR
    """)
    (tmp_path / "capture_helpers.py").write_text(source)
    spec = importlib.util.spec_from_file_location(
        "capture_helpers", tmp_path / "capture_helpers.py"
    )
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    monkeypatch.setitem(sys.modules, "capture_helpers", helpers)
    namespace = _run_module("""
        def through_helper(x):
            return helpers.scaled(x)

        def through_attribute(x):
            return x + helpers.FACTOR
    """)
    namespace["helpers"] = helpers
    outs = []
    for factor in (2.0, 5.0):
        helpers.FACTOR = factor
        outs.append(
            (
                float(kiln.jit(namespace["through_helper"])(1.0)),
                float(kiln.jit(namespace["through_attribute"])(1.0)),
            )
        )
    assert outs == [(2.0, 3.0), (5.0, 6.0)]


# --- closures ------------------------------------------------------------------------------------


def test_closure_cell_rebound_between_creation_and_first_call():
    scale = 1.0

    def make():
        return kiln.jit(lambda x: x * scale)  # one code object, reading this frame's cell

    first = make()  # keyed while scale == 1.0 ...
    scale = 2.0
    assert float(first(1.0)) == 2.0  # ... but traced with 2.0
    scale = 1.0
    second = make()  # the same content key as `first`
    assert second._fc_key == first._fc_key
    assert float(second(1.0)) == 1.0  # a stale trace is never reused
    with pytest.warns(StaleCaptureWarning, match="closure variable `scale`"):
        assert float(first(1.0)) == 2.0


def test_closure_holding_a_helper_that_reads_a_global():
    global OFFSET

    def make():
        def inner(x):
            return _adds_offset(x)

        return kiln.jit(lambda x: inner(x))

    try:
        outs = []
        for OFFSET in (1.0, 4.0):  # noqa: B020
            outs.append(float(make()(0.0)))
        assert outs == [1.0, 4.0]
    finally:
        OFFSET = 1.0


def test_closure_dict_changed_in_place():
    config = {"relu": False, "shift": 0.0}

    def make():
        def fn(x):
            y = x + config["shift"]
            return jnp.maximum(y, 0.0) if config["relu"] else y

        return kiln.jit(fn)

    old = make()
    assert float(old(-1.0)) == -1.0
    config["relu"] = True
    assert float(make()(-1.0)) == 0.0
    config["shift"] = 3.0
    assert float(make()(-1.0)) == 2.0
    assert float(old(-1.0)) == -1.0


# --- default arguments ---------------------------------------------------------------------------


def test_default_arguments():
    outs = [float(kiln.jit(lambda x, k=k: x * k)(1.0)) for k in (1.0, 2.0, 2.0, 3.0)]
    assert outs == [1.0, 2.0, 2.0, 3.0]

    def fn(x, table=[1.0, 2.0]):  # noqa: B006 (a mutable default on purpose)
        return x * table[0] + table[1]

    assert float(kiln.jit(fn)(1.0)) == 3.0
    fn.__defaults__[0][0] = 10.0  # changed in place
    assert float(kiln.jit(fn)(1.0)) == 12.0
    fn.__defaults__ = ([0.0, 1.0],)  # replaced
    assert float(kiln.jit(fn)(1.0)) == 1.0


def test_keyword_only_defaults():
    def make(k):
        def fn(x, *, k=k):
            return x * k

        return fn

    assert [float(kiln.jit(make(k))(1.0)) for k in (2.0, 3.0)] == [2.0, 3.0]


# --- functools.partial ---------------------------------------------------------------------------


def _affine(x, a, b=0.0):
    TRACES.append("affine")
    return x * a + b + OFFSET


def test_partial_arguments_and_the_globals_of_their_function():
    global OFFSET
    try:
        outs = [
            float(kiln.jit(functools.partial(_affine, a=a, b=1.0))(1.0)) for a in (1.0, 2.0, 2.0)
        ]
        assert outs == [3.0, 4.0, 4.0]
        assert len(TRACES) == 2
        OFFSET = 10.0
        assert float(kiln.jit(functools.partial(_affine, a=2.0, b=1.0))(1.0)) == 13.0
        assert float(kiln.jit(functools.partial(_affine, 3.0))(2.0)) == 16.0  # x bound
        table = {"a": 2.0}
        fn = functools.partial(lambda x, t: _affine(x, t["a"]), t=table)
        assert float(kiln.jit(fn)(1.0)) == 12.0
        table["a"] = 5.0  # a partial argument changed in place
        assert float(kiln.jit(fn)(1.0)) == 15.0
    finally:
        OFFSET = 1.0


# --- bound methods and callable objects ----------------------------------------------------------


class Layer:
    bias = 0.0

    def __init__(self, weight):
        self.weight = weight

    def apply(self, x):
        TRACES.append("apply")
        return x * self.weight + self.bias

    def apply_twice(self, x):
        return self.apply(self.apply(x))

    def __call__(self, x):
        return self.apply(x) + OFFSET


def test_bound_method_attribute_rebound():
    layer = Layer(2.0)
    old = kiln.jit(layer.apply)
    assert float(old(1.0)) == 2.0
    layer.weight = 5.0
    assert float(kiln.jit(layer.apply)(1.0)) == 5.0
    with pytest.warns(StaleCaptureWarning, match="attribute `weight`"):
        assert float(old(1.0)) == 2.0
    TRACES.clear()
    assert float(kiln.jit(layer.apply)(1.0)) == 5.0
    assert TRACES == []  # nothing changed: the cache hits


def test_bound_method_class_attribute_and_helper_method():
    layer = Layer(2.0)
    assert float(kiln.jit(layer.apply_twice)(1.0)) == 4.0
    layer.weight = 3.0  # read through self.apply
    assert float(kiln.jit(layer.apply_twice)(1.0)) == 9.0
    try:
        Layer.bias = 1.0  # a class attribute
        assert float(kiln.jit(layer.apply)(1.0)) == 4.0
    finally:
        Layer.bias = 0.0


def test_callable_object():
    global OFFSET
    layer = Layer(2.0)
    try:
        assert float(kiln.jit(layer)(1.0)) == 3.0
        layer.weight = 4.0
        OFFSET = 0.5
        assert float(kiln.jit(layer)(1.0)) == 4.5
    finally:
        OFFSET = 1.0


def test_bound_method_matches_jax():
    jax = pytest.importorskip("jax")

    def outputs(jit):
        layer = Layer(2.0)
        first = float(jit(layer.apply)(1.0))
        layer.weight = 5.0
        return [first, float(jit(layer.apply)(1.0))]

    assert outputs(kiln.jit) == outputs(jax.jit) == [2.0, 5.0]


# --- the cache still hits ------------------------------------------------------------------------


def _jit_doubler():
    return kiln.jit(lambda x: x * 2.0)


def _jit_table_adder():
    return kiln.jit(lambda x: x + TABLE)


def test_unchanged_captures_trace_once():
    start = kiln.jit_cache_stats()["traces"]
    for _ in range(5):
        assert float(_jit_doubler()(3.0)) == 6.0
    assert kiln.jit_cache_stats()["traces"] == start + 1
    assert _jit_doubler().cache_info()["traces"] == 1
    for _ in range(5):
        np.testing.assert_array_equal(np.asarray(_jit_table_adder()(jnp.ones(2))), [2.0, 3.0])
    assert _jit_table_adder().cache_info()["traces"] == 1
    for _ in range(3):
        float(kiln.jit(lambda x: _calls_adds_offset(x))(0.0))
    assert TRACES == ["helper"]


WEIGHT = 2.0


def _times_weight(x):
    return x * WEIGHT


def test_the_call_path_of_a_used_object_skips_the_check(monkeypatch):
    global WEIGHT
    plain = kiln.jit(lambda x: x * 2.0)
    guarded = kiln.jit(_times_weight)
    assert float(plain(1.0)) == 2.0 and float(guarded(1.0)) == 2.0
    try:
        WEIGHT = 3.0
        with pytest.warns(StaleCaptureWarning, match="`WEIGHT`"):
            guarded(1.0)

        def no_lookup(self, key):
            raise AssertionError("the call path looked beyond the object's own table")

        monkeypatch.setattr(JitWrapped, "_find", no_lookup)
        for _ in range(3):
            assert float(plain(1.0)) == 2.0
            assert float(guarded(1.0)) == 2.0
        assert all(e.fast for e in plain._entries.values())
        assert all(e.fast for e in guarded._entries.values())  # fast again after the warning
    finally:
        WEIGHT = 2.0


def test_a_new_object_adopts_an_entry_once(monkeypatch):
    _jit_table_adder()(jnp.ones(2))
    fresh = _jit_table_adder()
    adopted = []
    original = cache.adopt
    monkeypatch.setattr(
        cache, "adopt", lambda table, entry: adopted.append(entry) or original(table, entry)
    )
    for _ in range(4):
        np.testing.assert_array_equal(np.asarray(fresh(jnp.ones(2))), [2.0, 3.0])
    assert len(adopted) == 1 and fresh.cache_info()["traces"] == 1


# --- modes ---------------------------------------------------------------------------------------


def test_retrace_mode_shares_the_retraced_entry():
    global SCALE
    try:
        a = kiln.jit(_times_scale, on_stale_capture="retrace")
        b = kiln.jit(_times_scale, on_stale_capture="retrace")
        assert float(a(1.0)) == 2.0 and float(b(1.0)) == 2.0
        assert TRACES == ["scale"]
        SCALE = 4.0
        assert float(a(1.0)) == 4.0 and float(b(1.0)) == 4.0
        assert TRACES == ["scale", "scale"]
    finally:
        SCALE = 2.0


def test_ignore_mode_keeps_the_old_value_silently_but_new_objects_retrace():
    global SCALE
    try:
        old = kiln.jit(_times_scale, on_stale_capture="ignore")
        assert float(old(1.0)) == 2.0
        SCALE = 6.0
        with no_stale_warning():
            assert float(old(1.0)) == 2.0
            assert float(kiln.jit(_times_scale, on_stale_capture="ignore")(1.0)) == 6.0
    finally:
        SCALE = 2.0


# --- under outer traces, lower(), eviction -------------------------------------------------------


def test_new_inner_jit_under_an_outer_jit_sees_new_globals():
    global SCALE
    try:
        outs = []
        for SCALE in (2.0, 3.0):  # noqa: B020
            outs.append(float(kiln.jit(lambda x: kiln.jit(_times_scale)(x) + 1.0)(1.0)))
        assert outs == [3.0, 4.0]
        SCALE = 5.0
        jaxpr = kiln.make_jaxpr(lambda x: kiln.jit(_times_scale)(x))(1.0)
        assert "5.0" in str(jaxpr)
    finally:
        SCALE = 2.0


def test_lower_of_a_new_object_sees_new_globals():
    global SCALE
    try:
        assert "2.0" in kiln.jit(_times_scale).lower(1.0).as_text()
        SCALE = 7.0
        lowered = kiln.jit(_times_scale).lower(1.0)
        assert "7.0" in lowered.as_text()
        assert float(lowered.compile()(1.0)) == 7.0
    finally:
        SCALE = 2.0


def _counted_triple(x):
    TRACES.append("c")
    return x * 3.0


def test_clear_cache_and_eviction_reach_every_object():
    f = kiln.jit(_counted_triple)
    g = kiln.jit(_counted_triple)
    f(1.0)
    g(1.0)
    assert TRACES == ["c"]
    f.clear_cache()
    assert len(g._entries) == 0
    assert float(g(1.0)) == 3.0 and TRACES == ["c", "c"]
    previous = kiln.config.compile_cache_size
    kiln.config.update("kiln_compile_cache_size", 1)
    try:
        kiln.jit(lambda x: x - 1.0)(1.0)  # evicts g's entry
        assert len(g._entries) == 0
    finally:
        kiln.config.update("kiln_compile_cache_size", previous)


# --- jit's options -------------------------------------------------------------------------------


def _two(x, n):
    return x * n


def _doubled_n_times(x, n):
    for _ in range(n):
        x = x * 2.0
    return x


@pytest.mark.parametrize(
    "options,error,match",
    [
        (dict(static_argnames="y"), ValueError, r"invalid argnames \{'y'\} in static_argnames"),
        (dict(static_argnames=("n", "y")), ValueError, r"\{'y'\}.*parameters are x, n"),
        (dict(static_argnums=2), ValueError, r"static_argnums=\(2,\).*2 positional"),
        (dict(static_argnums=-3), ValueError, r"static_argnums=\(-3,\)"),
        (dict(static_argnums=1.0), TypeError, "static_argnums must be an int"),
        (dict(static_argnums="n"), TypeError, "static_argnums must be an int"),
        (dict(static_argnames=1), TypeError, "static_argnames must be a str"),
        (dict(donate_argnums=5), ValueError, r"donate_argnums=\(5,\)"),
        (dict(donate_argnames="q"), ValueError, r"\{'q'\} in donate_argnames"),
        (dict(static_argnums=1, donate_argnums=1), ValueError, r"\{'n'\}.*static and donated"),
        (dict(static_argnames="n", donate_argnames="n"), ValueError, "cannot intersect"),
        (dict(static_argnums=1, donate_argnames="n"), ValueError, "cannot intersect"),
    ],
)
def test_option_mistakes_raise_at_jit_time(options, error, match):
    with pytest.raises(error, match=match):
        kiln.jit(_two, **options)


@pytest.mark.parametrize(
    "options",
    [
        dict(static_argnames="y"),
        dict(static_argnums=2),
        dict(static_argnums=1.0),
        dict(donate_argnums=5),
        dict(static_argnums=1, donate_argnums=1),
        dict(donate_argnames="q"),
    ],
)
def test_option_mistakes_match_jax(options):
    jax = pytest.importorskip("jax")
    with pytest.raises(Exception) as ours:
        kiln.jit(_two, **options)
    with pytest.raises(Exception) as theirs:
        jax.jit(_two, **options)
    assert type(ours.value) is type(theirs.value)


def test_positional_only_names_and_accepted_forms():
    def positional_only(x, n, /):
        return x * n

    with pytest.raises(ValueError, match="positional-only"):
        kiln.jit(positional_only, static_argnames="n")
    assert float(kiln.jit(positional_only, static_argnums=1)(2.0, 3)) == 6.0

    def with_kwargs(x, **options):
        return x * options.get("k", 1)

    assert float(kiln.jit(with_kwargs, static_argnames="k")(2.0, k=4)) == 8.0

    def with_varargs(x, *rest):
        return x * rest[-1]

    assert float(kiln.jit(with_varargs, static_argnums=3)(2.0, 0.0, 0.0, 5)) == 10.0
    # range(n) fails for a traced n, so these pass only if n is static however it is passed.
    by_name = kiln.jit(_doubled_n_times, static_argnames=["n"])
    assert float(by_name(1.0, 3)) == 8.0 and float(by_name(1.0, n=4)) == 16.0
    by_number = kiln.jit(_doubled_n_times, static_argnums=np.int64(1))
    assert float(by_number(1.0, n=5)) == 32.0 and float(by_number(1.0, 2)) == 4.0
    assert float(kiln.jit(_two, donate_argnums=(0,), donate_argnames="x")(2.0, 3.0)) == 6.0
    kiln.jit(max, static_argnames="y")  # no signature to check, as in JAX


def test_retrace_mode_new_object_after_a_change_made_in_place():
    table = {"k": 2.0}

    def fn(x):
        return x * table["k"]

    old = kiln.jit(fn, on_stale_capture="retrace")
    assert float(old(1.0)) == 2.0
    table["k"] = 3.0
    assert float(kiln.jit(fn, on_stale_capture="retrace")(1.0)) == 3.0
    assert float(old(1.0)) == 3.0  # the stale entry was dropped for everyone


def test_explain_cache_miss_names_the_changed_capture(caplog):
    global WEIGHT
    caplog.set_level(logging.WARNING, logger="kiln")
    kiln.config.update("jax_explain_cache_misses", True)
    try:
        kiln.jit(_times_weight)(1.0)
        WEIGHT = 4.0
        caplog.clear()
        assert float(kiln.jit(_times_weight)(1.0)) == 4.0
    finally:
        WEIGHT = 2.0
        kiln.config.update("jax_explain_cache_misses", False)
    messages = [r.getMessage() for r in caplog.records if r.name == "kiln"]
    assert len(messages) == 1
    assert "global variable `WEIGHT` held 2.0; it has changed since" in messages[0]


def test_self_attributes_read_through_paired_loads_are_found(monkeypatch):
    """From Python 3.13 on, `x * self.weight` loads both locals with one LOAD_FAST_LOAD_FAST
    (argval ('x', 'self')) before LOAD_ATTR weight: the attribute is still a read of self's
    (missed, a rebound weight gave the old trace's result). The suite runs these methods on
    whichever Python it has; this feeds the analysis the newer interpreters' instructions."""
    from kiln.runtime import capture_guards

    def method(self, x):
        return x * self.weight + self.bias

    newer = (
        ("RESUME", 0),
        ("LOAD_FAST_LOAD_FAST", ("x", "self")),
        ("LOAD_ATTR", "weight"),
        ("BINARY_OP", 5),
        ("LOAD_FAST_BORROW", "self"),
        ("LOAD_ATTR", "bias"),
        ("BINARY_OP", 0),
        ("STORE_FAST_LOAD_FAST", ("y", "self")),
        ("LOAD_ATTR", "scale"),
        ("LOAD_FAST_LOAD_FAST", ("self", "x")),
        ("LOAD_ATTR", "real"),  # (an attribute of x, not of self)
        ("RETURN_VALUE", None),
    )
    capture_guards._self_attribute_loads.cache_clear()
    monkeypatch.setattr(capture_guards, "_instructions", lambda code: newer)
    try:
        found = capture_guards._self_attribute_loads(method.__code__)
    finally:
        capture_guards._self_attribute_loads.cache_clear()
    assert found == ("weight", "bias", "scale")


def _code_objects(limit: int = 6000):
    """Code objects of the modules imported so far (kiln's, NumPy's, the standard library's)
    and everything nested in them."""
    import types as _types

    stack = []
    for module in list(sys.modules.values()):
        for value in list(vars(module).values()) if hasattr(module, "__dict__") else ():
            for fn in [value] + list(vars(value).values() if isinstance(value, type) else []):
                code = getattr(fn, "__code__", None)
                if isinstance(code, _types.CodeType):
                    stack.append(code)
    seen, found = set(), []
    while stack and len(found) < limit:
        code = stack.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        found.append(code)
        stack.extend(c for c in code.co_consts if isinstance(c, _types.CodeType))
    return found


def _wide():
    # More than 256 names: the last attribute loads come after an EXTENDED_ARG prefix.
    namespace: dict = {}
    body = "\n".join(f"    v{i} = self.a{i}" for i in range(300))
    exec(f"def method(self):\n{body}\n    return np.pi\n", {"np": np}, namespace)
    return namespace["method"]


def test_the_bytecode_decoder_reads_what_dis_reads():
    # Every code object of the imported modules, and one whose operands need EXTENDED_ARG:
    # the decoder's (opname, argval) equal dis's wherever the analyses read an argval.
    from kiln.runtime import capture_guards

    codes = _code_objects() + [_wide().__code__]
    assert len(codes) > 2000
    for code in codes:
        assert capture_guards._instructions.__wrapped__(code) == (
            capture_guards._dis_instructions(code)
        ), code
    method = _wide()
    loads = capture_guards._self_attribute_loads.__wrapped__(method.__code__)
    assert loads == tuple(f"a{i}" for i in range(300))
    assert capture_guards._global_loads.__wrapped__(method.__code__) == ("np",)

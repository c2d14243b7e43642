"""The jit compile cache: content keys for functions, LRU bound, compile-once under threads,
statistics, cache-miss explanations, compile logging and the captured-global guard."""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.runtime import cache
from kiln.transforms.jit import RecompilationWarning, StaleCaptureWarning

TRACES: list = []


def body(x):
    TRACES.append(1)
    return x + 1


@pytest.fixture(autouse=True)
def _fresh_counter():
    TRACES.clear()
    yield


# --- function content keys --------------------------------------------------------------------


def test_lambda_created_in_a_loop_hits_the_cache():
    for i in range(5):
        assert int(kiln.jit(lambda x: body(x))(i)) == i + 1
    assert len(TRACES) == 1


def test_partial_created_in_a_loop_hits_the_cache():
    for i in range(5):
        assert int(kiln.jit(functools.partial(body))(i)) == i + 1
    assert len(TRACES) == 1


def test_seed_loops_compile_once():
    def unjitted_loop_body(prev_i):
        TRACES.append(1)
        return prev_i + 1

    def g_inner_jitted_partial(x, n):
        i = 0
        while i < n:
            i = kiln.jit(functools.partial(unjitted_loop_body))(i)
        return x + i

    def g_inner_jitted_lambda(x, n):
        i = 0
        while i < n:
            i = kiln.jit(lambda x: unjitted_loop_body(x))(i)
        return x + i

    def g_inner_jitted_normal(x, n):
        i = 0
        while i < n:
            i = kiln.jit(unjitted_loop_body)(i)
        return x + i

    for loop in (g_inner_jitted_partial, g_inner_jitted_lambda, g_inner_jitted_normal):
        TRACES.clear()
        for _ in range(3):
            assert repr(loop(10, 20)) == "Array(30, dtype=int32, weak_type=True)"
        assert len(TRACES) == 1, loop.__name__


def _scaled(k):
    return lambda x: x * k


@pytest.mark.parametrize(
    "a,b", [(2.0, 3.0), (1, 1.0), (1, True), (0.0, -0.0), ((1, 2), (1, 2.0)), ("a", "b")]
)
def test_closures_with_different_values_never_share(a, b):
    fa, fb = kiln.jit(_scaled(a)), kiln.jit(_scaled(b))
    assert fa._fc is not fb._fc
    if not isinstance(a, (tuple, str)):
        x = jnp.array([1.0])
        np.testing.assert_array_equal(np.asarray(fa(x)), np.asarray(x) * a)
        np.testing.assert_array_equal(np.asarray(fb(x)), np.asarray(x) * b)
        assert np.signbit(np.asarray(fa(x))) == np.signbit(np.float32(a))
        assert np.signbit(np.asarray(fb(x))) == np.signbit(np.float32(b))


def test_closures_with_equal_values_share():
    assert kiln.jit(_scaled(2.0))._fc is kiln.jit(_scaled(2.0))._fc
    assert kiln.jit(_scaled((1, "a")))._fc is kiln.jit(_scaled((1, "a")))._fc


def test_unhashable_and_array_closure_values_compare_by_identity():
    shared = [1.0]
    table_a, table_b = jnp.ones(2), jnp.ones(2)
    assert kiln.jit(_scaled(shared))._fc is kiln.jit(_scaled(shared))._fc
    assert kiln.jit(_scaled([1.0]))._fc is not kiln.jit(_scaled([1.0]))._fc
    assert kiln.jit(_scaled(table_a))._fc is kiln.jit(_scaled(table_a))._fc
    assert kiln.jit(_scaled(table_a))._fc is not kiln.jit(_scaled(table_b))._fc
    fa, fb = kiln.jit(_scaled(jnp.array([2.0]))), kiln.jit(_scaled(jnp.array([3.0])))
    assert float(fa(jnp.array([1.0]))[0]) == 2.0 and float(fb(jnp.array([1.0]))[0]) == 3.0


def test_partials_defaults_and_globals_are_part_of_the_key():
    def scale(x, k=2.0):
        return x * k

    assert (
        kiln.jit(functools.partial(scale, k=2.0))._fc
        is kiln.jit(functools.partial(scale, k=2.0))._fc
    )
    p2, p3 = kiln.jit(functools.partial(scale, k=2.0)), kiln.jit(functools.partial(scale, k=3.0))
    assert float(p2(1.0)) == 2.0 and float(p3(1.0)) == 3.0
    d2 = kiln.jit(lambda x, k=2.0: x * k)
    d3 = kiln.jit(lambda x, k=3.0: x * k)
    assert float(d2(1.0)) == 2.0 and float(d3(1.0)) == 3.0
    source = "def f(x):\n    return x * K\n"
    ns_a, ns_b = {"K": 2.0}, {"K": 5.0}
    exec(source, ns_a)
    exec(source, ns_b)
    assert float(kiln.jit(ns_a["f"])(1.0)) == 2.0
    assert float(kiln.jit(ns_b["f"])(1.0)) == 5.0


def test_fresh_helper_functions_in_closures_compare_by_content():
    def make():
        def helper(x):
            TRACES.append(1)
            return x * 2

        return kiln.jit(lambda x: helper(x))

    for _ in range(3):
        assert float(make()(1.0)) == 2.0
    assert len(TRACES) == 1


# --- size, eviction, statistics ---------------------------------------------------------------


def test_cache_size_and_clear_cache():
    f = kiln.jit(lambda x: x * 2)
    for n in range(3):
        f(jnp.ones(n + 1))
    f(jnp.ones(1))
    assert f._cache_size() == 3
    f.clear_cache()
    assert f._cache_size() == 0
    np.testing.assert_array_equal(np.asarray(f(jnp.ones(2))), [2.0, 2.0])
    assert f._cache_size() == 1


def test_lru_eviction_with_a_bounded_cache():
    previous = kiln.config.compile_cache_size
    cache.clear_all()
    kiln.config.update("kiln_compile_cache_size", 3)
    try:
        f = kiln.jit(lambda x: x + 1)
        before = kiln.jit_cache_stats()["evictions"]
        for n in (1, 2, 3):
            f(jnp.ones(n))
        f(jnp.ones(1))  # n=1 is now the most recently used
        f(jnp.ones(4))  # evicts n=2, the least recently used
        assert f._cache_size() == 3
        assert kiln.jit_cache_stats()["evictions"] == before + 1
        traces = f.cache_info()["traces"]
        f(jnp.ones(1))
        f(jnp.ones(3))
        assert f.cache_info()["traces"] == traces  # both still cached
        f(jnp.ones(2))
        assert f.cache_info()["traces"] == traces + 1  # was evicted
    finally:
        kiln.config.update("kiln_compile_cache_size", previous)


def test_hit_and_miss_statistics():
    f = kiln.jit(lambda x: x - 1)
    start = kiln.jit_cache_stats()
    f(jnp.ones(2))
    f(jnp.ones(2))
    f(jnp.ones(2))
    now = kiln.jit_cache_stats()
    assert now["misses"] - start["misses"] == 1
    assert now["compiles"] - start["compiles"] == 1
    assert now["hits"] - start["hits"] == 2
    assert f.cache_info()["size"] == 1


def test_failed_trace_leaves_no_entry_behind():
    state = {"fail": True}

    @kiln.jit
    def f(x):
        if state["fail"]:
            raise ValueError("user error")
        return x * 3

    with pytest.raises(ValueError, match="user error"):
        f(jnp.ones(2))
    assert f._cache_size() == 0
    state["fail"] = False
    np.testing.assert_array_equal(np.asarray(f(jnp.ones(2))), [3.0, 3.0])


# --- threads ---------------------------------------------------------------------------------


def test_concurrent_first_calls_compile_once():
    traces = []

    @kiln.jit
    def f(x):
        traces.append(threading.get_ident())
        time.sleep(0.05)  # keep the trace open while the other threads arrive
        return x * 2 + 1

    n_threads = 8
    barrier = threading.Barrier(n_threads)
    results, failures = [None] * n_threads, []

    def worker(i):
        try:
            barrier.wait()
            results[i] = np.asarray(f(jnp.full((3,), float(i))))
        except BaseException as err:  # pragma: no cover - reported below
            failures.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert len(traces) == 1 and f.cache_info()["compiles"] == 1
    for i, r in enumerate(results):
        np.testing.assert_array_equal(r, np.full(3, 2.0 * i + 1, np.float32))


def test_concurrent_calls_with_different_shapes_and_a_failing_trace():
    @kiln.jit
    def f(x):
        time.sleep(0.01)
        if x.shape == (5,):
            raise ValueError("bad shape")
        return x.sum() if hasattr(x, "sum") else x

    errors, results = [], {}

    def worker(n):
        try:
            results[n] = f(jnp.ones(n))
        except ValueError as err:
            errors.append((n, str(err)))

    threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2, 3, 5, 5, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(n for n, _ in errors) == [5, 5]
    assert f._cache_size() == 3
    assert set(results) == {1, 2, 3}


# --- diagnostics -------------------------------------------------------------------------------


@pytest.fixture
def explain(caplog):
    kiln.config.update("jax_explain_cache_misses", True)
    caplog.set_level(logging.WARNING, logger="kiln")
    yield caplog
    kiln.config.update("jax_explain_cache_misses", False)


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kiln"]


def test_explain_cache_misses(explain):
    def forward(params, x, *, n=1):
        return params[0]["W"] * 2, x * n

    f = kiln.jit(forward, static_argnames="n")
    params = [{"W": jnp.ones(3)}]
    f(params, jnp.ones(3))
    f(params, jnp.ones(4))
    f([{"W": jnp.ones(3, dtype=jnp.int32)}], jnp.ones(3))
    f(params, 1.0)
    f(params, jnp.ones(3), n=2)
    f(params, jnp.ones(3), n=2)  # a hit: nothing logged
    messages = _messages(explain)
    assert len(messages) == 5
    assert "`forward`" in messages[0] and "first time" in messages[0]
    assert "argument x: shape (3,) -> (4,)" in messages[1]
    assert "argument params[0]['W']: dtype float32 -> int32" in messages[2]
    assert "argument x: shape (3,) -> (), weak_type False -> True" in messages[3]
    assert "static argument n: not passed -> 2" in messages[4]


def test_explain_cache_miss_for_pytree_structure(explain):
    f = kiln.jit(lambda tree: tree["a"])
    f({"a": jnp.ones(2)})
    f({"a": jnp.ones(2), "b": jnp.ones(2)})
    assert "pytree structure" in _messages(explain)[1]


def test_log_compiles(caplog):
    caplog.set_level(logging.WARNING, logger="kiln")
    kiln.config.update("jax_log_compiles", True)
    try:

        def logged_fn(x, y):
            return x * y

        kiln.jit(logged_fn)(jnp.ones((2, 3)), 2.0)
    finally:
        kiln.config.update("jax_log_compiles", False)
    (message,) = _messages(caplog)
    assert message.startswith("Compiling logged_fn for signature (x: f32[2,3], y: f32[] weak)")
    assert "trace" in message and "ms" in message


def test_kiln_log_compiles_environment_variable():
    code = "import logging; logging.basicConfig(); import kiln; kiln.jit(lambda x: x + 1)(1.0)"
    env = dict(os.environ, KILN_LOG_COMPILES="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "Compiling <lambda> for signature (x: f32[] weak)" in done.stderr


def test_recompilation_warning_after_ten_compilations():
    f = kiln.jit(lambda x: x * 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 13):
            f(jnp.ones(n))
    recompiles = [w for w in caught if issubclass(w.category, RecompilationWarning)]
    assert len(recompiles) == 1
    message = str(recompiles[0].message)
    assert "10 times" in message and "pad" in message and "static_argnums" in message


# --- the captured-global guard ---------------------------------------------------------------

SCALE = 2.0
TABLE = jnp.array([1.0, 2.0])


def _uses_scale(x):
    return x * SCALE


def _helper_reads_table(x):
    return x + TABLE


def _calls_helper(x):
    return _helper_reads_table(x) * 1.0


def test_rebinding_a_global_to_an_equal_value_is_not_stale():
    global SCALE
    f = kiln.jit(_uses_scale)
    f(1.0)
    try:
        SCALE = float("2.0")  # a new float object with the same value
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert float(f(1.0)) == 2.0
    finally:
        SCALE = 2.0


def test_stale_global_warns_once_per_variable_and_keeps_the_traced_value():
    global SCALE
    f = kiln.jit(_uses_scale)
    try:
        assert float(f(jnp.array(1.0))) == 2.0
        SCALE = 3.0
        with pytest.warns(StaleCaptureWarning, match="`SCALE`"):
            assert float(f(jnp.array(1.0))) == 2.0
        assert float(f(jnp.array([1.0]))[0]) == 3.0  # a new shape traces with the new value
        SCALE = 4.0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            f(jnp.array(1.0))
            f(jnp.array([1.0]))
    finally:
        SCALE = 2.0


def test_stale_global_read_through_a_helper_function():
    global TABLE
    f = kiln.jit(_calls_helper)
    original = TABLE
    try:
        f(jnp.zeros(2))
        TABLE = jnp.array([5.0, 5.0])
        with pytest.warns(StaleCaptureWarning, match="`TABLE`"):
            np.testing.assert_array_equal(np.asarray(f(jnp.zeros(2))), [1.0, 2.0])
        g = kiln.jit(_calls_helper, on_stale_capture="retrace")
        g(jnp.zeros(2))
        TABLE = jnp.array([7.0, 7.0])
        np.testing.assert_array_equal(np.asarray(g(jnp.zeros(2))), [7.0, 7.0])
    finally:
        TABLE = original


def test_stale_closure_cell():
    def make():
        offset = 1.0

        def f(x):
            return x + offset

        def rebind(value):
            nonlocal offset
            offset = value

        return f, rebind

    f, rebind = make()
    jitted = kiln.jit(f)
    retracing = kiln.jit(f, on_stale_capture="retrace")
    assert float(jitted(1.0)) == 2.0 and float(retracing(1.0)) == 2.0
    rebind(10.0)
    with pytest.warns(StaleCaptureWarning, match="closure variable `offset`"):
        assert float(jitted(1.0)) == 2.0
    assert float(retracing(1.0)) == 11.0


def test_modules_and_functions_are_not_guarded():
    f = kiln.jit(lambda x: jnp.exp(x) + np.float32(0))
    f(1.0)
    entry = next(iter(f._fc.entries.values()))
    assert entry.guards == () and entry.fast


def test_installed_packages_are_library_code_wherever_they_are():
    """A package directory outside this interpreter's own (put on sys.path by PYTHONPATH, or
    a system Python's dist-packages) holds library code, never followed for captures: NumPy
    found there made `np.float32` a guarded capture of every function that used it."""
    user = os.path.join(os.sep, "home", "someone", "project", "model.py")
    assert cache._is_user_file(user)
    assert not cache._is_user_file(np.__file__)
    for layer in (
        os.path.join(os.sep, "opt", "layer", "lib", "python3.11", "site-packages"),
        os.path.join(os.sep, "usr", "lib", "python3", "dist-packages"),
    ):
        assert not cache._is_user_file(os.path.join(layer, "numpy", "__init__.py"))
    assert not cache._is_user_file(os.path.join(os.path.dirname(os.__file__), "functools.py"))


# --- the last-signature shortcut of the call path --------------------------------------------


def test_repeat_calls_take_the_shortcut_and_stay_correct():
    f = kiln.jit(lambda a, b: a * 2 + b)
    x, y = jnp.arange(3.0), jnp.ones(3)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x, y)), [1.0, 3.0, 5.0])
    assert f._entries.last is not None
    # Other arrays of the same signature share the interned signature object.
    z = jnp.asarray(np.full(3, 4.0, np.float32))
    np.testing.assert_array_equal(np.asarray(f(z, y)), [9.0, 9.0, 9.0])
    assert f._cache_size() == 1
    # A different shape, dtype or weak type misses the shortcut and compiles its own entry.
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(2.0), jnp.ones(2))), [1.0, 3.0])
    out = f(jnp.arange(3), jnp.ones(3, jnp.int32))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), [1, 3, 5])
    strong = f(jnp.full((), 2.0, jnp.float32), 1.0)
    assert strong.weak_type is False and float(strong) == 5.0
    weak = f(jnp.asarray(2.0), 1.0)  # a weakly typed scalar array: its own signature
    assert weak.weak_type is True and float(weak) == 5.0
    assert f._cache_size() == 5


def test_shortcut_is_dropped_with_the_entry():
    f = kiln.jit(lambda a: a + 1)
    x = jnp.arange(3.0)
    f(x), f(x)
    assert f._entries.last is not None
    f.clear_cache()
    assert f._entries.last is None
    np.testing.assert_array_equal(np.asarray(f(x)), [1.0, 2.0, 3.0])


def test_shortcut_respects_config_changes():
    f = kiln.jit(lambda a: a.astype(jnp.float64))
    x = jnp.arange(3.0)
    assert f(x).dtype == np.float32 and f(x).dtype == np.float32  # x64 off: float32
    kiln.config.update("jax_enable_x64", True)
    try:
        assert f(x).dtype == np.float64
    finally:
        kiln.config.update("jax_enable_x64", False)
    assert f(x).dtype == np.float32


@pytest.mark.native
def test_shortcut_sees_donated_arguments_deleted():
    f = kiln.jit(lambda a: a + 1, donate_argnums=0)
    x = jnp.arange(4.0)
    f(jnp.arange(4.0)), f(jnp.arange(4.0))
    f(x)
    with pytest.raises(RuntimeError, match="deleted"):
        f(x)


def test_signatures_are_interned():
    a, b = jnp.zeros((2, 3)), jnp.ones((2, 3))
    f = kiln.jit(lambda u: u)
    f(a), f(b)
    assert a._sig is b._sig
    assert cache.intern_signature(((2, 3), np.dtype(np.float32), False)) is a._sig


def test_a_function_jitted_before_the_target_changes_compiles_again_after():
    """The code generation target (kiln_cpu, kiln_cpu_features) is part of the compile-cache
    key, as x64 is: a function jitted for the host and called again once the target is the
    AVX2 baseline ran the host's code."""
    from kiln.codegen.llvm import target
    from tests._testing import use_codegen_target

    if not target.host_can_run("x86-64-v3"):
        pytest.skip("this CPU cannot run x86-64-v3 code")
    f = kiln.jit(lambda x: jnp.exp(x) * 2.0)
    x = np.linspace(-3.0, 3.0, 4096, dtype=np.float32)
    expected = np.asarray(f(x))
    assert f._cache_size() == 1
    before = kiln.config.trace_key
    with use_codegen_target("x86-64-v3"):
        np.testing.assert_allclose(np.asarray(f(x)), expected, rtol=1e-6)
        assert f._cache_size() == 2
        (entry,) = [e for e in f._fc.entries.values() if e.key[2] != before]
        assert entry.key[2][2:4] == (kiln.config.cpu, kiln.config.cpu_features)
    np.testing.assert_array_equal(np.asarray(f(x)), expected)  # (the host's entry again)
    assert f._cache_size() == 2


@pytest.mark.native
def test_a_function_jitted_before_the_thread_count_changes_compiles_again_after(monkeypatch):
    """kiln_num_threads is fixed in a program when it is built (how its kernels are cut into
    chunks): a function jitted before it changed kept running on the old count."""
    f = kiln.jit(lambda x: jnp.tanh(x) * 2.0 + 1.0)
    x = np.linspace(-3.0, 3.0, 1 << 20, dtype=np.float32)
    monkeypatch.setattr(kiln.config, "num_threads", 2)
    expected = np.asarray(f(x))
    np.testing.assert_allclose(expected, np.tanh(x) * 2.0 + 1.0, rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(kiln.config, "num_threads", 1)
    np.testing.assert_array_equal(np.asarray(f(x)), expected)  # (the same code, in one chunk)
    assert f._cache_size() == 2
    threads = {
        entry.key[2][5]: {s.threads for s in entry.executable.segments if s is not None}
        for entry in f._fc.entries.values()
    }
    assert threads == {2: {2}, 1: {1}}


@pytest.mark.native
def test_a_function_jitted_before_vector_loops_change_compiles_again_after(monkeypatch):
    """kiln_vector_loops chooses the code emitted for every loop: turned off after a function
    was jitted, the function kept running its explicit vector code."""
    f = kiln.jit(lambda x: jnp.exp(x) * 2.0)
    x = np.linspace(-3.0, 3.0, 4096, dtype=np.float32)
    expected = np.exp(x.astype(np.float64)) * 2.0
    np.testing.assert_allclose(np.asarray(f(x)), expected, rtol=1e-6)
    monkeypatch.setattr(kiln.config, "vector_loops", False)
    np.testing.assert_allclose(np.asarray(f(x)), expected, rtol=1e-6)
    assert f._cache_size() == 2
    programs = {
        entry.key[2][4]: [p for s in entry.executable.segments if s for p in s._natives()]
        for entry in f._fc.entries.values()
    }
    # (what kiln emits for each, read under the setting it was compiled with)
    scalar = "".join(p.unoptimized_ir for p in programs[False])
    monkeypatch.setattr(kiln.config, "vector_loops", True)
    vector = "".join(p.unoptimized_ir for p in programs[True])
    assert not {id(p) for p in programs[True]} & {id(p) for p in programs[False]}
    assert "x float>" in vector
    assert "x float>" not in scalar  # (scalar loops, left to LLVM's vectorizer)


@pytest.mark.parametrize("bad", [0, -2, "many", 1.5, True])
def test_a_thread_count_that_is_not_a_positive_int_is_refused(bad):
    previous = kiln.config.num_threads
    with pytest.raises((TypeError, ValueError), match="kiln_num_threads must be a positive int"):
        kiln.config.update("kiln_num_threads", bad)
    assert kiln.config.num_threads == previous  # (nothing half-set)
    kiln.config.update("kiln_num_threads", "3")  # (as the environment gives it)
    try:
        assert kiln.config.num_threads == 3 and kiln.config.trace_key[5] == 3
    finally:
        kiln.config.update("kiln_num_threads", previous)

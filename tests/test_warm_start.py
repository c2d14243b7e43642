"""Warm starts (kiln.runtime.program_cache): a process that finds a program's build in the disk
cache replays its stages and segment plans and loads its machine code, runs no fusion and no
LLVM, and computes exactly what a cold build computes; the key tells programs apart by
structure, constants and name; records that do not answer the build's questions, entries that
do not verify, and records naming foreign classes are never used."""

from __future__ import annotations

import os
import pickle
import textwrap

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.compiler import fusion, pipeline
from kiln.runtime import disk_cache, engine, program_cache
from tests._testing import run_script_json

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native


def _layernorm_softmax_loss(x, g, t):
    c = x - jnp.mean(x, axis=-1, keepdims=True)
    h = c * lax.rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + 1e-5) * g
    z = h - lax.stop_gradient(jnp.max(h, axis=-1, keepdims=True))
    e = jnp.exp(z)
    return jnp.sum(e / jnp.sum(e, axis=-1, keepdims=True) * t)


def _reference_softmax_layernorm(x, g):
    x = x.astype(np.float64)
    c = x - x.mean(-1, keepdims=True)
    h = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * g
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _inputs(rows: int, columns: int = 256):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, columns)).astype(np.float32)
    g = (1 + 0.1 * rng.standard_normal(columns)).astype(np.float32)
    t = rng.standard_normal((rows, columns)).astype(np.float32)
    return x, g, t


# --- across processes ------------------------------------------------------------------------

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, %r)
    import kiln, kiln.numpy as jnp
    from kiln.runtime import engine, program_cache
    from tests.test_warm_start import _inputs, _layernorm_softmax_loss
    kiln.config.update("jax_compilation_cache_dir", sys.argv[1])
    results = {}
    # 2048 rows: large kernels split into chunks for threads; 8 rows: one small entry.
    for rows in (2048, 8):
        x, g, t = _inputs(rows)
        grads = kiln.jit(kiln.grad(_layernorm_softmax_loss, argnums=(0, 1)))(x, g, t)
        forward = kiln.jit(lambda x, g: jnp.exp(x * g) / 3)(x, g)
        for n, value in enumerate(list(grads) + [forward]):
            np.save(f"{sys.argv[2]}_{rows}_{n}.npy", np.asarray(value))
    print(json.dumps({"program": program_cache.stats, "compile": engine.compile_stats()}))
    """
    % os.getcwd()
)


def _run(cache, out) -> dict:
    return run_script_json(_SCRIPT, str(cache), str(out))


def test_a_second_process_replays_the_build_and_computes_the_same_bits(tmp_path):
    cache = tmp_path / "cache"
    cold = _run(cache, tmp_path / "cold")
    assert cold["program"]["stored"] == 4 and cold["program"]["replayed"] == 0
    assert cold["compile"]["modules"] > 0
    warm = _run(cache, tmp_path / "warm")
    assert warm["program"]["replayed"] == 4 and warm["program"]["stored"] == 0
    assert warm["program"]["diverged"] == 0
    assert warm["compile"]["modules"] == 0  # no LLVM at all
    for rows in (2048, 8):
        x, g, t = _inputs(rows)
        for n in range(3):
            cold_value = np.load(tmp_path / f"cold_{rows}_{n}.npy")
            warm_value = np.load(tmp_path / f"warm_{rows}_{n}.npy")
            np.testing.assert_array_equal(warm_value, cold_value)
        # and the values are right: the forward pass against NumPy, dg against a float64
        # gradient of sum(softmax(h) * t) with respect to g
        forward = np.load(tmp_path / f"warm_{rows}_2.npy")
        np.testing.assert_allclose(forward, np.exp(x * g) / 3, rtol=2e-6)
        p = _reference_softmax_layernorm(x, g)
        x64 = x.astype(np.float64)
        c = x64 - x64.mean(-1, keepdims=True)
        normalized = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
        dh = p * (t - (p * t).sum(-1, keepdims=True))
        dg = (dh * normalized).sum(0)
        np.testing.assert_allclose(
            np.load(tmp_path / f"warm_{rows}_1.npy"), dg, rtol=2e-3, atol=2e-3
        )


_LIBRARY_SCRIPT = textwrap.dedent(
    """
    import json, sys, warnings
    import numpy as np
    import kiln, kiln.numpy as jnp
    from kiln.runtime import engine, kernel_library, program_cache
    kiln.config.update("jax_compilation_cache_dir", sys.argv[1])
    rng = np.random.default_rng(7)
    x = rng.standard_normal((128, 784)).astype(np.float32)
    w = (rng.standard_normal((784, 512)) / 28).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    v = (rng.standard_normal((512, 10)) / 23).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = kiln.jit(lambda x, w, b, v: jnp.maximum(x @ w + b, 0.0) @ v)(x, w, b, v)
    np.save(sys.argv[2] + ".npy", np.asarray(out))
    print(json.dumps({
        "program": program_cache.stats, "compile": engine.compile_stats(),
        "library": len(kernel_library._loaded), "warnings": [str(w.message) for w in caught],
    }))
    """
)


def test_a_warm_start_loads_the_kernel_library_its_products_call(tmp_path):
    # A process that reads its program from the disk cache never emits a call to kiln's gemm
    # library: linking still loads the library modules the objects call (it once found no
    # module for their symbols, warned and compiled the program again).
    cache = tmp_path / "cache"
    cold = run_script_json(_LIBRARY_SCRIPT, str(cache), str(tmp_path / "cold"))
    assert cold["library"] >= 1 and cold["compile"]["modules"] > 0
    warm = run_script_json(_LIBRARY_SCRIPT, str(cache), str(tmp_path / "warm"))
    assert warm["program"]["replayed"] == 1 and warm["compile"]["modules"] == 0, warm
    assert warm["library"] == cold["library"] and warm["warnings"] == []
    got = np.load(tmp_path / "warm.npy")
    np.testing.assert_array_equal(got, np.load(tmp_path / "cold.npy"))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((128, 784))
    w = rng.standard_normal((784, 512)).astype(np.float32) / 28
    b = rng.standard_normal(512)
    v = rng.standard_normal((512, 10)).astype(np.float32) / 23
    expected = np.maximum(x.astype(np.float32) @ w + b.astype(np.float32), 0) @ v
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# --- within a process ------------------------------------------------------------------------


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(kiln.config, "cache_dir", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _stats_delta(before: dict) -> dict:
    return {k: program_cache.stats[k] - before[k] for k in before}


def test_a_new_function_object_replays_and_skips_fusion(cache_dir, monkeypatch):
    x, g, t = _inputs(64)
    first = kiln.jit(kiln.grad(_layernorm_softmax_loss, argnums=(0, 1)))(x, g, t)
    kiln.clear_caches()  # (else jit finds the compiled function by its content)
    calls = []
    monkeypatch.setattr(fusion, "plan_segment", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(fusion, "partition", lambda *a, **k: calls.append(a))
    before = dict(program_cache.stats)
    again = kiln.jit(kiln.grad(_layernorm_softmax_loss, argnums=(0, 1)))(x, g, t)
    assert _stats_delta(before)["replayed"] == 1 and not calls
    for a, b in zip(first, again):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_programs_that_differ_in_a_constant_do_not_share_records(cache_dir):
    x = np.linspace(-2, 2, 300, dtype=np.float32)
    for scale in (2.0, 3.0, 2.0):
        weights = np.full(300, scale, np.float32)  # a closed-over array: a constant
        result = kiln.jit(lambda v: jnp.tanh(v * weights) + 1)(x)
        expected = np.tanh(x.astype(np.float64) * scale) + 1
        np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-6, atol=1e-6)


def _program_of(fun, *args, name="f"):
    closed = kiln.make_jaxpr(fun)(*args)
    program, hidden = pipeline.split_hidden_consts(pipeline.optimize(closed))
    return program_cache.program_key(program, hidden, name, "tag")


def test_the_key_follows_structure_constants_literals_and_name():
    x = np.ones((4, 3), np.float32)
    w = np.arange(3, dtype=np.float32)
    key = _program_of(lambda v: jnp.sin(v) * w + 2.0, x)
    assert key is not None and key == _program_of(lambda v: jnp.sin(v) * w + 2.0, x)
    assert key != _program_of(lambda v: jnp.sin(v) * (w + 1) + 2.0, x)  # constant bytes
    assert key != _program_of(lambda v: jnp.sin(v) * w + 3.0, x)  # a literal
    assert key != _program_of(lambda v: jnp.cos(v) * w + 2.0, x)  # a primitive
    assert key != _program_of(lambda v: jnp.sin(v) * w + 2.0, x[:2])  # avals
    assert key != _program_of(lambda v: jnp.sin(v) * w + 2.0, x.astype(np.int32))
    assert key != _program_of(lambda v: jnp.sum(jnp.sin(v) * w + 2.0, axis=0), x)
    assert key != _program_of(lambda v: jnp.sin(v) * w + 2.0, x, name="g")


def test_a_program_with_a_python_callable_param_is_not_cached(cache_dir):
    def host(v):
        return np.asarray(v) * 2

    def fun(v):
        shape = jax_shape(v)
        return kiln.pure_callback(host, shape, v) + 1

    jax_shape = lambda v: kiln.ShapeDtypeStruct(v.shape, v.dtype)  # noqa: E731
    x = np.arange(5, dtype=np.float32)
    assert _program_of(fun, x) is None
    before = dict(program_cache.stats)
    np.testing.assert_array_equal(np.asarray(kiln.jit(fun)(x)), x * 2 + 1)
    assert _stats_delta(before)["stored"] == 0


def _program_entries(cache_dir) -> list:
    return sorted(cache_dir.glob("program-*.kiln"))


def test_records_that_answer_other_questions_are_not_replayed(cache_dir):
    x, g, t = _inputs(32)
    fun = kiln.grad(_layernorm_softmax_loss, argnums=(0, 1))
    first = kiln.jit(fun)(x, g, t)
    (entry,) = _program_entries(cache_dir)
    key = entry.name[: -len(".kiln")]
    cache = engine.engine().disk_cache
    records, _ = cache.load(key)
    records = pickle.loads(records)
    # The first plan now claims to answer a question about another segment name.
    position = next(n for n, (question, _) in enumerate(records) if question[0] == "plan")
    question, answer = records[position]
    records[position] = (question[:-1] + (("other_name",) + question[-1][1:],), answer)
    cache.store(key, pickle.dumps(records), None)
    kiln.clear_caches()
    before = dict(program_cache.stats)
    again = kiln.jit(kiln.grad(_layernorm_softmax_loss, argnums=(0, 1)))(x, g, t)
    delta = _stats_delta(before)
    assert delta["diverged"] == 1 and delta["replayed"] == 0
    assert delta["stored"] == 1  # the entry is rewritten with the right answers
    for a, b in zip(first, again):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    kiln.clear_caches()
    before = dict(program_cache.stats)
    third = kiln.jit(kiln.grad(_layernorm_softmax_loss, argnums=(0, 1)))(x, g, t)
    assert _stats_delta(before)["replayed"] == 1
    for a, b in zip(first, third):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_record_naming_a_foreign_class_is_never_built(cache_dir, caplog):
    x = np.linspace(0, 1, 50, dtype=np.float32)
    fun = lambda v: jnp.exp(v) * 2  # noqa: E731
    expected = np.asarray(kiln.jit(fun)(x))
    (entry,) = _program_entries(cache_dir)
    key = entry.name[: -len(".kiln")]
    cache = engine.engine().disk_cache
    records = pickle.loads(cache.load(key)[0])

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo should-never-run",))

    records = [(question, pickle.dumps(Boom())) for question, _ in records]
    cache.store(key, pickle.dumps(records), None)
    kiln.clear_caches()
    with caplog.at_level("WARNING", logger="kiln"):
        result = np.asarray(kiln.jit(lambda v: jnp.exp(v) * 2)(x))
    np.testing.assert_array_equal(result, expected)
    assert "did not load" in caplog.text and ".system" in caplog.text
    # rewritten: the next build replays it
    kiln.clear_caches()
    before = dict(program_cache.stats)
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda v: jnp.exp(v) * 2)(x)), expected)
    assert _stats_delta(before)["replayed"] == 1


def test_a_corrupt_program_entry_is_rejected_and_rewritten(cache_dir, caplog):
    x = np.linspace(-1, 1, 70, dtype=np.float32)
    expected = np.asarray(kiln.jit(lambda v: jnp.sin(v) + v)(x))
    (entry,) = _program_entries(cache_dir)
    data = entry.read_bytes()
    entry.write_bytes(data[:-10] + bytes(10))
    kiln.clear_caches()
    before = dict(program_cache.stats)
    with caplog.at_level("WARNING", logger="kiln"):
        result = np.asarray(kiln.jit(lambda v: jnp.sin(v) + v)(x))
    np.testing.assert_array_equal(result, expected)
    assert "checksum mismatch" in caplog.text
    assert _stats_delta(before)["stored"] == 1
    disk = disk_cache.DiskCache(cache_dir, engine.engine().disk_cache.identity)
    assert disk.load(entry.name[: -len(".kiln")]) is not None  # rewritten, verifies again


def test_a_program_with_a_loop_replays_its_segments(cache_dir):
    def fun(x):
        y = jnp.tanh(x) * 2
        y = lax.fori_loop(0, 5, lambda i, c: c * 0.5 + jnp.sin(c), y)
        return jnp.exp(-y) + x

    x = np.linspace(-3, 3, 500, dtype=np.float32)
    expected = np.tanh(x.astype(np.float64)) * 2
    for _ in range(5):
        expected = expected * 0.5 + np.sin(expected)
    expected = np.exp(-expected) + x
    first = np.asarray(kiln.jit(fun)(x))
    np.testing.assert_allclose(first, expected, rtol=2e-5, atol=1e-6)
    kiln.clear_caches()
    before = dict(program_cache.stats)
    again = np.asarray(kiln.jit(fun)(x))
    assert _stats_delta(before)["replayed"] == 1
    np.testing.assert_array_equal(again, first)


def test_a_program_with_rewritten_products_replays(cache_dir):
    # Gradients of matrix products: fusion rewrites some products (operands transposed
    # first, transposes folded into swapped products), equations that are not the jaxpr's
    # own and are kept whole in the records.
    rng = np.random.default_rng(5)
    w1 = rng.standard_normal((40, 32)).astype(np.float32) / 6
    w2 = rng.standard_normal((32, 10)).astype(np.float32) / 6
    x = rng.standard_normal((16, 40)).astype(np.float32)

    def loss(w1, w2, x):
        h = jnp.maximum(x @ w1, 0.0)
        return jnp.sum(jnp.tanh(h @ w2) ** 2)

    step = kiln.value_and_grad(loss, argnums=(0, 1))
    value, (g1, g2) = kiln.jit(step)(w1, w2, x)
    # float64 reference gradients
    x64, a64, b64 = x.astype(np.float64), w1.astype(np.float64), w2.astype(np.float64)
    pre = x64 @ a64
    h = np.maximum(pre, 0)
    t = np.tanh(h @ b64)
    dz = 2 * t * (1 - t**2)
    np.testing.assert_allclose(float(value), (t**2).sum(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g2), h.T @ dz, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(g1), x64.T @ ((dz @ b64.T) * (pre > 0)), rtol=1e-4, atol=1e-5
    )
    kiln.clear_caches()
    before = dict(program_cache.stats)
    again = kiln.jit(kiln.value_and_grad(loss, argnums=(0, 1)))(w1, w2, x)
    assert _stats_delta(before)["replayed"] == 1
    for a, b in zip(kiln.tree_util.tree_leaves(again), [value, g1, g2]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_replayed_build_that_fails_is_built_afresh(cache_dir, monkeypatch, caplog):
    x = np.linspace(-1, 1, 90, dtype=np.float32)
    expected = np.asarray(kiln.jit(lambda v: jnp.cos(v) * v)(x))
    kiln.clear_caches()
    original = program_cache._load_plan

    def broken(data, jaxpr):
        plan = original(data, jaxpr)
        plan.buffers = {}  # a plan the backend cannot use
        return plan

    monkeypatch.setattr(program_cache, "_load_plan", broken)
    before = dict(program_cache.stats)
    with caplog.at_level("WARNING", logger="kiln"):
        compiled = kiln.jit(lambda v: jnp.cos(v) * v).lower(x).compile()
        result = np.asarray(compiled(x))
    np.testing.assert_array_equal(result, expected)
    assert "building it afresh" in caplog.text
    assert _stats_delta(before)["stored"] == 1
    assert compiled._entry.executable.backend == "native"  # not the interpreter

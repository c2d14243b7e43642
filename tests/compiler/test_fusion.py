"""Fusion decisions: how many kernels and temps a program becomes, what is materialized and
why, how a mixed program is split into native and interpreted stages, and the parallel split.
Results are checked against NumPy here too, so a plan that looks right but computes the wrong
thing fails."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.compiler import fusion, kir, lower
from kiln.runtime import native, native_call, native_segment


@pytest.fixture(autouse=True)
def strict_native(monkeypatch):
    monkeypatch.setattr(kiln.config, "native_strict", True)


@pytest.fixture
def products_interpreted(monkeypatch):
    """dot_general runs through its impl (no inline sums, no BLAS calls): the tests below use
    it as their example of an equation between native stages."""
    from kiln.codegen.llvm import blas_calls
    from kiln.compiler import lowering_linalg

    monkeypatch.setattr(lowering_linalg, "INLINE_MAX_WORK", -1)
    monkeypatch.setattr(blas_calls, "available", lambda: False)
    lower._lowerable_cache.clear()
    yield
    lower._lowerable_cache.clear()


def compile_native(fn, *args):
    """(executable, compiled) of fn jitted natively for args."""
    compiled = kiln.jit(fn, backend="native").lower(*args).compile()
    return compiled._entry.executable, compiled


def segments(executable):
    return [s for s in executable.segments if s is not None]


def counts(executable):
    """(kernels, full-size temps, kernel-local buffers) over every native segment."""
    plans = [s.plan for s in segments(executable)]
    kernels = sum(len(p.kernels) for p in plans)
    temps = sum(len(p.temps) for p in plans)
    local = sum(len(g.local_buffers) for p in plans for g in p.kernels)
    return kernels, temps, local


def f32(*shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_elementwise_chain_is_one_kernel_without_temps():
    def chain(x, y):
        z = x * 2.0 + 1.0
        z = jnp.tanh(z) * y - jnp.exp(-z)
        return jnp.maximum(z, 0.0) / (1.0 + jnp.abs(y))

    x, y = f32(8, 16), f32(8, 16, seed=1)
    executable, compiled = compile_native(chain, x, y)
    assert counts(executable) == (1, 0, 0)
    # The intermediates never touch memory: the only buffers are the inputs and the output.
    program = segments(executable)[0].program
    assert [b.role for b in program.buffers] == ["input", "input", "output"]
    xn, yn = np.asarray(x, np.float64), np.asarray(y, np.float64)
    z = xn * 2 + 1
    z = np.tanh(z) * yn - np.exp(-z)
    np.testing.assert_allclose(
        np.asarray(compiled(x, y)), np.maximum(z, 0) / (1 + np.abs(yn)), rtol=1e-5, atol=1e-6
    )


def test_softmax_is_at_most_two_kernels():
    x = f32(6, 40)
    executable, compiled = compile_native(lambda x: kiln.nn.softmax(x, axis=-1), x)
    kernels, temps, _ = counts(executable)
    assert kernels <= 2 and temps == 0
    text = compiled.as_text()
    assert text.count("kernel fusion_") == kernels
    xn = np.asarray(x, np.float64)
    e = np.exp(xn - xn.max(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(compiled(x)), e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_softmax_exp_is_computed_once_per_element():
    x = f32(4, 32)
    executable, _ = compile_native(lambda x: kiln.nn.softmax(x, axis=-1), x)
    (kernel,) = [g.kernel for s in segments(executable) for g in s.plan.kernels]
    runs = fusion.evaluation_counts(kernel)
    exps = [n for n in runs if isinstance(n, kir.Op) and n.op is kir.ScalarOp.EXP]
    assert sum(runs[n] for n in exps) == x.size


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def test_printed_row_buffer_reductions_sit_where_they_are_computed():
    """A reduction over a row buffer the kernel itself fills prints inside the outer loop,
    after the loop that writes the row (where the emitter computes it), not hoisted above."""

    def layernorm_softmax(x, g, b):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
        y = (x - mean) * kiln.lax.rsqrt(var + 1e-5) * g + b
        return kiln.nn.softmax(y, axis=-1)

    x, g, b = f32(8, 16), f32(16, seed=1), f32(16, seed=2)
    _, compiled = compile_native(layernorm_softmax, x, g, b)
    lines = compiled.as_text().splitlines()
    row_buffers = {
        m.group(1) for line in lines if (m := re.fullmatch(r"\s*temp (\w+): f32\[16\]", line))
    }
    assert row_buffers, "expected a row buffer temp in:\n" + "\n".join(lines)
    checked = 0
    for name in row_buffers:
        stores = [i for i, line in enumerate(lines) if re.match(rf"\s*{name}\[\w+\] = ", line)]
        readers = [
            i
            for i, line in enumerate(lines)
            if re.match(r"\s*r\d+: f32 = \w+\(", line) and f"{name}[k" in line
        ]
        for i in readers:
            loops_above = [j for j in range(i) if lines[j].lstrip().startswith("for i0 ")]
            assert loops_above, f"{lines[i].strip()!r} printed above the outer loop"
            outer = loops_above[-1]
            assert _indent(lines[i]) > _indent(lines[outer]), lines[i]
            assert any(outer < j < i for j in stores), (lines[i], stores)
            checked += 1
    assert checked, "no reduction over a row buffer printed:\n" + "\n".join(lines)
    xn, gn, bn = (np.asarray(a, np.float64) for a in (x, g, b))
    mean = xn.mean(-1, keepdims=True)
    y = (xn - mean) / np.sqrt(((xn - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * gn + bn
    e = np.exp(y - y.max(-1, keepdims=True))
    np.testing.assert_allclose(
        np.asarray(compiled(x, g, b)), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: kiln.nn.logsumexp(x, axis=1),
        lambda x: (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, keepdims=True) + 1e-5),
    ],
    ids=["logsumexp", "layernorm"],
)
def test_row_reductions_fuse_with_producers_and_consumers(fn):
    x = f32(5, 64)
    executable, compiled = compile_native(fn, x)
    assert counts(executable) == (1, 0, 0)
    expected = kiln.jit(fn, backend="interpret")(x)
    np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(expected), rtol=1e-5, atol=1e-6)


def test_reduction_consumer_uses_the_reduce_expression():
    x = f32(7, 9)
    executable, compiled = compile_native(lambda x: x - jnp.max(x, axis=-1, keepdims=True), x)
    assert counts(executable) == (1, 0, 0)
    (kernel,) = segments(executable)[0].program.kernels
    runs = fusion.evaluation_counts(kernel)
    reductions = [n for n in runs if isinstance(n, kir.Reduce)]
    assert len(reductions) == 1 and runs[reductions[0]] == 7  # once per row
    xn = np.asarray(x)
    np.testing.assert_array_equal(np.asarray(compiled(x)), xn - xn.max(-1, keepdims=True))


def test_column_reduction_read_per_row_is_materialized():
    x = f32(6, 5)
    executable, compiled = compile_native(lambda x: x - x.mean(axis=0), x)
    kernels, temps, _ = counts(executable)
    assert (kernels, temps) == (2, 1)
    xn = np.asarray(x)
    np.testing.assert_allclose(np.asarray(compiled(x)), xn - xn.mean(0), rtol=1e-5, atol=1e-6)


def test_expensive_producer_read_twice_is_materialized_cheap_one_is_not():
    x = f32(10)
    # exp read at i and at i+1 (two different elements per output): computed once into a temp.
    expensive, compiled = compile_native(lambda x: jnp.exp(x)[1:] + jnp.exp(x)[:-1], x)
    assert counts(expensive)[:2] == (2, 1)
    xn = np.exp(np.asarray(x, np.float64))
    np.testing.assert_allclose(np.asarray(compiled(x)), xn[1:] + xn[:-1], rtol=1e-6)
    # the same with a cheap producer is recomputed in place: one kernel.
    cheap, _ = compile_native(lambda x: (x * 2)[1:] + (x * 2)[:-1], x)
    assert counts(cheap) == (1, 0, 0)


def test_broadcast_of_expensive_row_value_stays_fused():
    x = f32(4, 6)
    # exp of a per-row value, broadcast along the row: runs once per row, no temp needed.
    executable, _ = compile_native(lambda x: x * jnp.exp(x.sum(axis=1, keepdims=True)), x)
    assert counts(executable) == (1, 0, 0)


def test_multi_output_fusion_shares_one_loop_nest():
    x = f32(3, 4)

    def outputs(x):
        y = jnp.exp(x)
        return y, y * 2, jnp.sin(x) + y

    executable, compiled = compile_native(outputs, x)
    assert counts(executable) == (1, 0, 0)
    (kernel,) = segments(executable)[0].program.kernels
    runs = fusion.evaluation_counts(kernel)
    assert (
        sum(c for n, c in runs.items() if isinstance(n, kir.Op) and n.op is kir.ScalarOp.EXP)
        == x.size
    )
    y, y2, z = compiled(x)
    np.testing.assert_allclose(np.asarray(y2), 2 * np.exp(np.asarray(x)), rtol=1e-6)


def test_outputs_of_different_shapes_get_their_own_kernels():
    x = f32(3, 4)
    executable, _ = compile_native(lambda x: (x + 1, x.sum(axis=1), x.sum()), x)
    assert counts(executable)[:2] == (3, 0)


def test_mixed_program_runs_impls_between_native_kernels(products_interpreted):
    x, w, b = f32(4, 6), f32(6, 3, seed=1), f32(3, seed=2)

    def mlp(x, w, b):
        h = jnp.tanh(x * 0.5)  # native
        y = h @ w  # dot_general: interpreted
        return jnp.maximum(y + b, 0.0)  # native, after the matmul

    executable, compiled = compile_native(mlp, x, w, b)
    kinds = [s.native for s in executable.stages]
    assert kinds == [True, False, True]
    text = compiled.as_text()
    assert len(re.findall(r"native segment \d", text)) == 2
    assert "interpreted (reference impl):" in text and "dot_general" in text
    xn, wn, bn = (np.asarray(a, np.float64) for a in (x, w, b))
    np.testing.assert_allclose(
        np.asarray(compiled(x, w, b)),
        np.maximum(np.tanh(xn * 0.5) @ wn + bn, 0),
        rtol=1e-5,
        atol=1e-6,
    )


def test_partition_delays_native_work_to_its_consumer(products_interpreted):
    x, w = f32(4, 4), f32(4, 4, seed=1)
    # exp(x) is only needed after the matmul: it moves to the second native stage and fuses
    # with the add there instead of being stored at the boundary.
    executable, _ = compile_native(lambda x, w: (x @ w) + jnp.exp(x), x, w)
    assert [s.native for s in executable.stages] == [False, True]
    assert counts(executable) == (1, 0, 0)


def test_interpreted_equations_keep_program_order():
    x = f32(3)
    order = []

    def f(x):
        kiln.debug.callback(lambda v: order.append("first"), x)
        y = jnp.sort(x * 2)
        kiln.debug.callback(lambda v: order.append("second"), y)
        return y + 1

    if not hasattr(kiln.debug, "callback"):
        pytest.skip("kiln.debug.callback is not available")
    kiln.jit(f, backend="native")(x)
    assert order[-2:] == ["first", "second"]


def test_long_chain_lowers_without_deep_recursion():
    """Lowering walks the program with an explicit stack: a chain far deeper than Python's
    recursion limit still fuses into one kernel."""

    def long_chain(x):
        for _ in range(1500):
            x = x * 1.0001 + 0.0001
        return x

    x = f32(4)
    executable, compiled = compile_native(long_chain, x)
    kernels, temps, _ = counts(executable)
    # one kernel per segment, each of at most MAX_SEGMENT_WEIGHT equations
    assert temps == 0 and kernels == len(segments(executable)) >= 3000 // fusion.MAX_SEGMENT_WEIGHT
    expected = kiln.jit(long_chain, backend="interpret")(x)
    # (the multiply-adds contract to FMAs natively, one rounding each instead of two.)
    np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(expected), rtol=1e-3, atol=1e-4)


@pytest.mark.native
def test_lowering_from_a_deep_caller_stack_still_compiles_natively():
    """Lowering keeps its own stack (stand-ins and reruns, see lower.ExprBuilder): a caller
    whose Python stack is already near the recursion limit still compiles natively, where a
    recursive builder would raise RecursionError and send the program to the interpreter."""
    import inspect
    import sys

    from kiln.runtime import engine

    def chain(x):
        for _ in range(60):
            x = jnp.sin(x) * 1.01 + 0.5
        return x

    x = np.linspace(0.0, 1.0, 64, dtype=np.float32)
    expected = x.astype(np.float64)
    for _ in range(60):
        expected = np.sin(expected) * 1.01 + 0.5
    modules = engine.compile_stats()["modules"]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 100)  # (a recursive build went ~200 deep)
    try:
        got = np.asarray(kiln.jit(chain)(x))
    finally:
        sys.setrecursionlimit(limit)
    assert engine.compile_stats()["modules"] > modules  # (natively, not interpreted)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_heavy_stage_is_cut_only_where_few_values_cross():
    limit = fusion.MAX_SEGMENT_WEIGHT

    def program(x):
        kept = [x + k for k in range(fusion.MAX_CROSSING + 8)]  # live across the first chain
        acc = x
        for _ in range(limit):
            acc = acc * 1.0001
        for value in kept:
            acc = acc + value
        for _ in range(2 * limit):  # only acc is live here
            acc = acc * 0.999
        return acc

    closed = kiln.make_jaxpr(program)(f32(4))
    stages = fusion.partition(closed.jaxpr.eqns, closed.jaxpr.outvars, lower.lowerable)
    assert len(stages) >= 3 and all(s.native for s in stages)
    for position, stage in enumerate(stages[:-1]):
        made_before = {v for s in stages[: position + 1] for e in s.eqns for v in e.outvars}
        read_after = {a for s in stages[position + 1 :] for e in s.eqns for a in e.invars}
        assert len(made_before & read_after) <= fusion.MAX_CROSSING
    # The first stage holds the whole first chain: no cut was allowed inside it.
    assert sum(map(fusion.equation_weight, stages[0].eqns)) > limit
    assert all(sum(map(fusion.equation_weight, s.eqns)) <= limit for s in stages[1:])


def test_kernel_work_weighs_transcendentals():
    x = f32(100)
    cheap, _ = compile_native(lambda x: x + 1, x)
    costly, _ = compile_native(lambda x: jnp.exp(x) + 1, x)
    (k1,), (k2,) = (segments(e)[0].program.kernels for e in (cheap, costly))
    assert fusion.kernel_work(k1) == 100 and fusion.kernel_work(k2) == 500


def test_large_kernels_split_their_outer_loop(monkeypatch):
    monkeypatch.setattr(native, "num_threads", lambda: 2)
    monkeypatch.setattr(native_segment, "PARALLEL_MIN_WORK", 1000)
    monkeypatch.setattr(native_segment, "MIN_CHUNK_WORK", 1000)
    x = f32(64, 50)
    fn = lambda x: kiln.nn.softmax(jnp.sin(x), axis=-1)  # noqa: E731
    executable, compiled = compile_native(fn, x)
    (segment,) = segments(executable)
    # one entry, whose chunk bounds come from a buffer: 8 chunks (4 per thread) of 8 rows
    assert segment.parallel and [(len(s.entries), s.chunks) for s in segment.steps] == [(1, 8)]
    assert "2 threads: fusion_0 in 8 chunks" in compiled.as_text()
    expected = kiln.jit(fn, backend="interpret")(x)
    for _ in range(3):  # the temp buffers are reused across calls
        np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(expected), rtol=1e-5)


def test_rank1_chunks_are_cache_line_aligned(monkeypatch):
    monkeypatch.setattr(native, "num_threads", lambda: 2)
    monkeypatch.setattr(native_segment, "PARALLEL_MIN_WORK", 1000)
    monkeypatch.setattr(native_segment, "CHUNKS_PER_THREAD", 1)
    x = f32(1000)
    executable, compiled = compile_native(lambda x: x * 3 - 1, x)
    (segment,) = segments(executable)
    assert segment._split(segment.plan.kernels[0], 10**9) == (0, [0, 512, 1000])
    np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(x) * 3 - 1, atol=1e-6)


def test_split_column_reduction_compiles_once(monkeypatch):
    monkeypatch.setattr(native, "num_threads", lambda: 2)
    monkeypatch.setattr(native_segment, "PARALLEL_MIN_WORK", 1000)
    monkeypatch.setattr(native_segment, "MIN_CHUNK_WORK", 1000)
    x = f32(40, 300)
    executable, compiled = compile_native(lambda x: x.sum(axis=0), x)
    (segment,) = segments(executable)
    (step,) = segment.steps
    # one entry per chunk width, reading its chunk's start (kir_schedule rewrites the loop)
    widths = {hi - lo for lo, hi in step.bounds}
    assert len(step.entries) == len(widths) < step.chunks
    np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(x).sum(0), rtol=1e-5, atol=1e-5)


def test_pool_runs_every_chunk_once():
    pool = native_call.thread_pool(2)
    seen = []
    tasks = [(lambda table, n=n: seen.append(n), 0) for n in range(10)]
    pool.run(tasks)
    assert sorted(seen) == list(range(10))


def test_stage_partition_of_a_handmade_jaxpr(products_interpreted):
    def f(x, w):
        a = jnp.exp(x)  # native, needed by the matmul: stage 0
        b = a @ w  # interpreted: stage 1
        c = jnp.sort(b, axis=0)  # interpreted, same stage
        return c * 2 + a  # native: stage 2

    closed = kiln.make_jaxpr(f)(f32(3, 3), f32(3, 3))
    stages = fusion.partition(closed.jaxpr.eqns, closed.jaxpr.outvars, lower.lowerable)
    names = [[str(e.primitive) for e in s.eqns] for s in stages]
    assert [s.native for s in stages] == [True, False, True]
    assert names[1] == ["dot_general", "sort"]


def test_wide_concatenate_runs_its_impl_between_native_segments():
    x = f32(40)
    fn = lambda x: jnp.concatenate([jnp.exp(x[i : i + 1]) for i in range(20)]) * 2  # noqa: E731
    executable, compiled = compile_native(fn, x)
    assert [s.native for s in executable.stages] == [True, False, True]
    np.testing.assert_allclose(np.asarray(compiled(x)), np.exp(np.asarray(x)[:20]) * 2, rtol=1e-6)


def _attention_loss(x, w):
    # Causal softmax attention and a layernorm, differentiated: fusing makes some expensive
    # values run more often than they have elements, so the planner stores them and plans
    # again, more than once.
    q, k, v = x @ w[0], x @ w[1], x @ w[2]
    s = q @ jnp.swapaxes(k, -1, -2) / 4.0
    s = jnp.where(jnp.tril(jnp.ones((s.shape[-1], s.shape[-1]), dtype=bool)), s, -1e9)
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    h = (e / jnp.sum(e, axis=-1, keepdims=True)) @ v + x
    c = h - jnp.mean(h, axis=-1, keepdims=True)
    return jnp.mean((c * jax_rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + 1e-5)) ** 2)


def jax_rsqrt(z):
    return kiln.lax.rsqrt(z)


def test_replanning_reuses_unchanged_kernels_and_plans_the_same(monkeypatch):
    x = f32(4, 32, 16, seed=3)
    w = f32(3, 16, 16, seed=4) * 0.25
    fun = kiln.value_and_grad(_attention_loss, argnums=(0, 1))

    def plan(reuse: bool):
        reused, builds = [], []
        kept = fusion._Reuse.kernel
        monkeypatch.setattr(
            fusion._Reuse,
            "kernel",
            (lambda self, g, b: reused.append(kept(self, g, b)) or reused[-1])
            if reuse
            else (lambda self, g, b: None),
        )
        build = fusion._build
        monkeypatch.setattr(fusion, "_build", lambda *a, **k: builds.append(a[6]) or build(*a, **k))
        kiln.clear_caches()
        executable, compiled = compile_native(fun, x, w)

        def canonical(text):  # (reduction variables are numbered per plan)
            names: dict = {}
            return re.sub(
                r"\bk\d+\b", lambda m: names.setdefault(m.group(0), f"K{len(names)}"), text
            )

        kernels = [canonical(str(k)) for s in segments(executable) for k in s.program.kernels]
        return kernels, compiled(x, w), sum(r is not None for r in reused), builds

    kernels, (value, grads), reused, builds = plan(True)
    fresh_kernels, (fresh_value, fresh_grads), none, _ = plan(False)
    assert sum(b is not None for b in builds) >= 1  # planned again at least once
    assert reused >= 1 and none == 0
    assert kernels == fresh_kernels
    np.testing.assert_array_equal(np.asarray(value), np.asarray(fresh_value))
    for a, b in zip(grads, fresh_grads):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(float(value), _numpy_attention_loss(x, w), rtol=1e-4)


def test_the_row_local_build_takes_the_nodes_no_row_buffer_changes(monkeypatch):
    # plan_segment's last build reads some stored values from row buffers; every node whose
    # expression reads none of them is the one the build before made (lower.ExprBuilder.
    # inherit), so fewer rules run, and the kernels are the same but for the numbering of
    # reduction variables.
    from tests._testing import count_rule_runs

    def forward(x, g, b):
        c = x - jnp.mean(x, axis=-1, keepdims=True)
        z = c * kiln.lax.rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + 1e-5) * g + b
        e = jnp.exp(z - jnp.max(z, axis=-1, keepdims=True))
        return e / jnp.sum(e, axis=-1, keepdims=True)

    args = (f32(48, 96, seed=5), f32(96, seed=6), f32(96, seed=7))

    def plan(inherit: bool):
        with monkeypatch.context() as patch:
            if not inherit:
                patch.setattr(lower.ExprBuilder, "inherit", lambda self, other, changed: None)
            kiln.clear_caches()
            calls = count_rule_runs(patch)
            executable, compiled = compile_native(forward, *args)
            runs = calls["n"]
        names: dict = {}
        kernels = [
            re.sub(
                r"\bk\d+(?=\b|_)", lambda m: names.setdefault(m.group(0), f"K{len(names)}"), str(k)
            )
            for s in segments(executable)
            for k in s.program.kernels
        ]
        assert any(g.local_buffers for s in segments(executable) for g in s.plan.kernels)
        return kernels, np.asarray(compiled(*args)), runs

    kernels, out, runs = plan(True)
    fresh_kernels, fresh_out, fresh_runs = plan(False)
    assert kernels == fresh_kernels
    np.testing.assert_array_equal(out, fresh_out)
    assert runs < fresh_runs
    x, g, b = (np.asarray(a, np.float64) for a in args)
    c = x - x.mean(-1, keepdims=True)
    z = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * g + b
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=2e-5, atol=1e-7)


def _numpy_attention_loss(x, w) -> float:
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    q, k, v = x @ w[0], x @ w[1], x @ w[2]
    s = q @ np.swapaxes(k, -1, -2) / 4.0
    s = np.where(np.tril(np.ones((s.shape[-1],) * 2, bool)), s, -1e9)
    e = np.exp(s - s.max(-1, keepdims=True))
    h = (e / e.sum(-1, keepdims=True)) @ v + x
    c = h - h.mean(-1, keepdims=True)
    return float(np.mean((c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)) ** 2))


def test_stored_row_values_pull_their_row_by_row_reader_into_their_kernel():
    # The mean and variance are outputs (a gradient would need them again), so they are
    # stored; the kernels that read them row by row still run in the kernel that stores them.
    x = f32(16, 48)

    def layernorm(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
        return (x - mean) * kiln.lax.rsqrt(var + 1e-5), mean, var

    executable, compiled = compile_native(layernorm, x)
    assert counts(executable)[0] == 1
    xn = np.asarray(x, np.float64)
    mean, var = xn.mean(-1, keepdims=True), xn.var(-1, keepdims=True)
    y, got_mean, got_var = compiled(x)
    np.testing.assert_allclose(np.asarray(y), (xn - mean) / np.sqrt(var + 1e-5), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(got_mean), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got_var), var, rtol=1e-5)


def test_a_stored_row_value_read_at_other_rows_keeps_its_reader_apart():
    # Row i reads the sum of row n-1-i, which the same pass has not stored yet.
    x = f32(9, 20)

    def reversed_rows(x):
        total = jnp.sum(x, axis=1, keepdims=True)
        return total, x - total[::-1]

    executable, compiled = compile_native(reversed_rows, x)
    assert counts(executable)[0] == 2
    xn = np.asarray(x, np.float64)
    total, shifted = compiled(x)
    np.testing.assert_allclose(np.asarray(total), xn.sum(1, keepdims=True), rtol=1e-5)
    expected = xn - xn.sum(1, keepdims=True)[::-1]
    np.testing.assert_allclose(np.asarray(shifted), expected, rtol=1e-5, atol=1e-5)


def test_a_row_value_two_kernels_read_stays_one_row():
    # In a layernorm+softmax gradient, e = exp(z) is read by two kernels: the one summing it
    # over the row and the one scaling each element by that sum (which needs the first's
    # row value). Both are pulled into e's kernel and e is kept one row at a time; only what
    # the column sums of the g and b gradients read stays a full temp.
    x, g, b, t = f32(24, 40), f32(40, seed=1), f32(40, seed=2), f32(24, 40, seed=3)

    def loss(x, g, b):
        c = x - jnp.mean(x, axis=-1, keepdims=True)
        z = c * kiln.lax.rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + 1e-5) * g + b
        e = jnp.exp(z - kiln.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True)))
        return jnp.sum(e / jnp.sum(e, axis=-1, keepdims=True) * t)

    grad = kiln.grad(loss, argnums=(0, 1, 2))
    executable, compiled = compile_native(grad, x, g, b)
    plan = segments(executable)[0].plan
    full = [v for v in plan.temps if v.aval.shape == (24, 40)]
    assert counts(executable)[0] == 2 and len(full) == 2
    reference = kiln.jit(grad, backend="interpret")(x, g, b)
    for got, want in zip(compiled(x, g, b), reference):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-6)


def test_parallel_chunks_keep_their_bounds_buffer_as_a_parameter():
    """A chunk of a kernel (the kernel's own statements with its outer loop bounded by a
    buffer the entry reads) lists that buffer among its parameters, as a kernel built from
    scratch would."""
    from kiln.compiler import kir_stmts

    executable, _ = compile_native(lambda a: jnp.exp(a) * 2.0, f32(64, 32))
    plan = segments(executable)[0].plan
    (group,) = plan.kernels
    bounds = kir.Buffer("chunk_bounds", np.int64, (2,))
    start = kir.Load(bounds, kir.as_index(0))
    chunk = fusion.chunked_kernel(plan, group, {0: (start, kir.Load(bounds, kir.as_index(1)))})
    assert bounds in chunk.params
    assert list(chunk.params) == kir_stmts.buffers_of(chunk.body)
    (loop,) = chunk.body
    assert loop.start is start and loop.body == group.kernel.body[0].body

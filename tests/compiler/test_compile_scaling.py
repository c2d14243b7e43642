"""Compile work grows linearly with the program: values that feed several consumers at
different indices (rolls, stencils) are recomputed only while that stays cheap, deep chains
lower with bounded recursion, and heavy stages are cut into segments. Work is counted (rule
expansions, kernel IR nodes), not timed; results are checked against the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.compiler import fusion, kir
from tests._testing import count_rule_runs


@pytest.fixture(autouse=True)
def strict_native(monkeypatch):
    monkeypatch.setattr(kiln.config, "native_strict", True)


def compiled_native(fn, *args):
    compiled = kiln.jit(fn, backend="native").lower(*args).compile()
    return compiled._entry.executable, compiled


def kernel_nodes(executable) -> int:
    """Distinct expression nodes over every kernel of every native segment (a node shared by
    two statements of one kernel counts once, as the emitter computes it once)."""
    total = 0
    for segment in executable.segments:
        if segment is None:
            continue
        for kernel in segment.program.kernels:
            roots = [e for s in kir.walk_stmts(kernel.body) for e in kir.stmt_exprs(s)]
            total += len(kir.toposort(roots))
    return total


def rolled(n):
    def f(x):
        for _ in range(n):
            x = jnp.roll(x, 1) + x
        return x

    return f


def check_against_interpreter(fn, *args, rtol=1e-5, atol=1e-6):
    _, compiled = compiled_native(fn, *args)
    expected = kiln.jit(fn, backend="interpret")(*args)
    np.testing.assert_allclose(
        np.asarray(compiled(*args)), np.asarray(expected), rtol=rtol, atol=atol
    )


def test_roll_program_results_match_the_interpreter():
    x = jnp.asarray(np.linspace(-1, 1, 37, dtype=np.float32))
    check_against_interpreter(rolled(16), x, rtol=1e-5, atol=1e-3)


def test_roll_program_kernel_size_is_linear_in_depth():
    x = jnp.asarray(np.ones(64, np.float32))
    sizes = {n: kernel_nodes(compiled_native(rolled(n), x)[0]) for n in (4, 8, 16)}
    # Fused without limit the kernel would hold about 3**n nodes (3**16 is 43 million).
    assert sizes[16] <= 40 * 16
    assert sizes[16] <= 2.5 * sizes[8] and sizes[8] <= 2.5 * sizes[4]


def test_a_cheap_value_read_at_two_indices_stays_fused():
    # x * 2 read at i and i + 1: recomputing it is cheaper than a temp.
    x = jnp.asarray(np.arange(10, dtype=np.float32))
    executable, _ = compiled_native(lambda x: (x * 2)[1:] + (x * 2)[:-1], x)
    assert sum(len(s.plan.kernels) for s in executable.segments if s is not None) == 1


def test_every_fused_value_is_built_at_most_max_reads_times():
    x = jnp.asarray(np.linspace(0, 1, 32, dtype=np.float32))

    def stencils(x):
        for _ in range(10):
            x = 0.25 * jnp.roll(x, 1) + 0.5 * x + 0.25 * jnp.roll(x, -1)
        return x

    executable, compiled = compiled_native(stencils, x)
    for segment in executable.segments:
        if segment is None:
            continue
        plan = segment.plan
        for var, nodes in plan.builder.nodes_of.items():
            if not plan.builder.is_loaded(var):
                assert len(nodes) <= fusion.MAX_READS
    expected = kiln.jit(stencils, backend="interpret")(x)
    np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(expected), rtol=1e-5, atol=1e-6)


def test_deep_shared_values_on_two_axes_match_the_interpreter():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((6, 9)).astype(np.float32))

    def f(x):
        for k in range(8):
            y = jnp.roll(x, 1, axis=k % 2)
            x = jnp.tanh(y * 0.5 + x) if k % 3 == 0 else y - 0.5 * x
        return x.sum(axis=1), x

    _, compiled = compiled_native(f, x)
    expected = kiln.jit(f, backend="interpret")(x)
    for got, want in zip(compiled(x), expected):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def random_dag(n, seed=0):
    """n binary ops, each on the previous value and a random earlier one (all stay live)."""
    rng = np.random.default_rng(seed)
    picks = [(int(rng.integers(0, k + 1)), int(rng.integers(0, 3))) for k in range(n)]

    def f(x):
        values = [x]
        for other, op in picks:
            u, v = values[-1], values[other]
            values.append(u + v if op == 0 else u * v if op == 1 else u - v)
        return values[-1]

    return f


def test_random_dag_matches_the_interpreter():
    x = jnp.asarray(np.linspace(-0.3, 0.3, 16, dtype=np.float32))
    fn = random_dag(1200)
    _, compiled = compiled_native(fn, x)
    expected = np.asarray(kiln.jit(fn, backend="interpret")(x))
    got = np.asarray(compiled(x))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-3)


def test_long_chain_lowering_work_is_linear(monkeypatch):
    """A 2,000-equation chain: each equation's rule runs a bounded number of times (once in
    the read analysis, at most twice when building), and the chain is cut into segments."""
    calls = count_rule_runs(monkeypatch)

    def chain(x):
        for k in range(1000):
            x = x * 1.0001 if k % 2 else x + 0.5
            x = jnp.maximum(x, -1.0)
        return x

    x = jnp.asarray(np.linspace(0, 1, 8, dtype=np.float32))
    executable, compiled = compiled_native(chain, x)
    assert calls["n"] <= 4 * 2000
    assert sum(s is not None for s in executable.segments) >= 2
    expected = kiln.jit(chain, backend="interpret")(x)
    np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(expected), rtol=1e-3)

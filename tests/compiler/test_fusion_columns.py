"""Column sums folded into the row kernel that computes their summands (fusion_columns): which
programs fold, what the plan holds afterwards (no full temps, small block partials), and the
results: against the same program planned without the fold (the same block arithmetic: equal
up to the last bit of values the row kernel now keeps in one-row buffers, where LLVM may fuse
a multiply-add differently), against NumPy in float64, and bit for bit across thread counts
and chunkings."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.compiler import fusion_columns
from kiln.runtime import native, native_segment
from tests._testing import CODEGEN_TARGETS, use_codegen_target


@pytest.fixture(autouse=True)
def strict_native(monkeypatch):
    monkeypatch.setattr(kiln.config, "native_strict", True)


def compile_native(fn, *args):
    """(executable, compiled) of fn jitted natively for args."""
    compiled = kiln.jit(fn, backend="native").lower(*args).compile()
    return compiled._entry.executable, compiled


def plans(executable):
    return [s.plan for s in executable.segments if s is not None]


def unfolded(monkeypatch, fn, *args):
    """fn's results with the fold turned off (a fresh function, so a fresh compile)."""
    with monkeypatch.context() as patch:
        patch.setattr(fusion_columns, "fold_column_sums", lambda plan: plan)
        kiln.clear_caches()
        try:
            out = kiln.jit(lambda *a: fn(*a), backend="native")(*args)
        finally:
            kiln.clear_caches()
        return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else [out])]


def assert_same_sums(folded, plain):
    """Equal but for rounding, within a few ulps of the largest element. The two plans are
    different kernels: besides the column sums' order, their other sums may round
    differently where terms cancel. LLVM fuses a `contract` multiply into a `reassoc` add
    (one rounding) in blocks that SelectionDAG selects; at code generator level 0 (small
    kernels), a block of scalar code alone goes through fast instruction selection, which
    never fuses, and a block that holds vector code too does not."""
    scale = float(np.abs(plain[np.isfinite(plain)]).max(initial=0.0))
    np.testing.assert_allclose(folded, plain, rtol=1e-6, atol=4 * np.finfo(np.float32).eps * scale)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def layernorm_grad(x, g, b, t):
    """The gradient of sum(softmax(layernorm(x) * g + b) * t) w.r.t. x, g and b: dg and db are
    sums over the rows of what the row kernel computes."""

    def loss(x, g, b, t):
        c = x - jnp.mean(x, axis=-1, keepdims=True)
        z = c * lax.rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + 1e-5) * g + b
        z = z - lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
        e = jnp.exp(z)
        return jnp.sum(e / jnp.sum(e, axis=-1, keepdims=True) * t)

    return kiln.grad(loss, argnums=(0, 1, 2))(x, g, b, t)


def layernorm_grad_numpy(x, g, b, t):
    """The same gradient by hand, in float64."""
    x, g, b, t = (a.astype(np.float64) for a in (x, g, b, t))
    c = x - x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
    xhat = c * rstd
    z = xhat * g + b
    s = np.exp(z - z.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    dz = s * (t - (s * t).sum(-1, keepdims=True))
    dxhat = dz * g
    centered = dxhat - dxhat.mean(-1, keepdims=True)
    dx = rstd * (centered - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, (dz * xhat).sum(0), dz.sum(0)


def layernorm_args(rows, columns):
    return (
        normal(rows, columns),
        1 + 0.1 * normal(columns, seed=1),
        0.1 * normal(columns, seed=2),
        normal(rows, columns, seed=3),
    )


@pytest.mark.parametrize("rows, columns", [(1000, 96), (64, 33), (33, 8)])
def test_layernorm_gradient_folds_its_column_sums_and_matches_the_unfolded_plan(
    monkeypatch, rows, columns
):
    args = layernorm_args(rows, columns)
    executable, compiled = compile_native(layernorm_grad, *args)
    (plan,) = plans(executable)
    # one row kernel and the blocks' combination; no temp of the input's size is left
    assert len(plan.kernels) == 2
    assert all(plan.buffers[v].size < rows * columns for v in plan.temps)
    blocks = -(-rows // fusion_columns.BLOCK)
    assert [p.shape for p in plan.partials] == [(blocks, columns)] * 2
    assert plan.kernels[0].row_block == fusion_columns.BLOCK and plan.kernels[1].whole
    stats = compiled.memory_analysis()
    assert stats.temp_size_in_bytes < rows * columns * 4
    got = [np.asarray(o) for o in compiled(*args)]
    for folded, plain in zip(got, unfolded(monkeypatch, layernorm_grad, *args)):
        assert_same_sums(folded, plain)
    for value, expected in zip(got, layernorm_grad_numpy(*args)):
        np.testing.assert_allclose(value, expected, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("target", CODEGEN_TARGETS)
def test_folded_gradient_on_each_baseline_target(monkeypatch, target):
    # the folded kernels' selects, block indices and one-row buffers as each target's vector
    # code (AVX2 on x86-64-v3, 512-bit vectors on x86-64-v4), with parallel chunks
    monkeypatch.setattr(native, "num_threads", lambda: 2)
    monkeypatch.setattr(native_segment, "PARALLEL_MIN_WORK", 1000)
    args = layernorm_args(200, 72)
    with use_codegen_target(target):
        kiln.clear_caches()
        try:
            executable, compiled = compile_native(layernorm_grad, *args)
            assert plans(executable)[0].partials
            got = [np.asarray(o) for o in compiled(*args)]
        finally:
            kiln.clear_caches()
    for value, expected in zip(got, layernorm_grad_numpy(*args)):
        np.testing.assert_allclose(value, expected, rtol=2e-4, atol=2e-5)


def test_folded_sums_are_the_same_for_every_thread_count_and_chunking(monkeypatch):
    args = layernorm_args(1000, 96)
    results = []
    for threads, chunks in [(1, 4), (2, 4), (2, 3), (3, 5)]:
        monkeypatch.setattr(native, "num_threads", lambda threads=threads: threads)
        monkeypatch.setattr(native_segment, "PARALLEL_MIN_WORK", 1000)
        monkeypatch.setattr(native_segment, "MIN_CHUNK_WORK", 1000)
        monkeypatch.setattr(native_segment, "CHUNKS_PER_THREAD", chunks)
        kiln.clear_caches()  # (else the build of the first thread count is found again)
        executable, compiled = compile_native(lambda *a: layernorm_grad(*a), *args)
        (segment,) = [s for s in executable.segments if s is not None]
        if threads > 1:
            (row_step, combine) = segment.steps
            # chunks start at block boundaries; the combination runs whole
            assert row_step.chunks > 1 and combine.chunks == 1
            assert all(lo % fusion_columns.BLOCK == 0 for lo, _ in row_step.bounds)
        results.append([np.asarray(o) for o in compiled(*args)])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


def test_bias_gradient_of_a_row_kernel_output_folds(monkeypatch):
    # n is an output (stored whole); the column sum reads it at the row being computed
    def fn(x):
        n = x / jnp.max(jnp.abs(x), axis=1, keepdims=True)
        return n, jnp.sum(n * 2.0, axis=0), jnp.sum(jnp.exp(n), axis=0)

    x = normal(300, 40)
    executable, compiled = compile_native(fn, x)
    (plan,) = plans(executable)
    assert len(plan.partials) == 2
    got = [np.asarray(o) for o in compiled(x)]
    for folded, plain in zip(got, unfolded(monkeypatch, fn, x)):
        assert_same_sums(folded, plain)
    n = x.astype(np.float64) / np.abs(x).max(1, keepdims=True)
    np.testing.assert_allclose(got[1], (2 * n).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[2], np.exp(n).sum(0), rtol=1e-5)


def test_folded_sums_keep_inf_and_nan(monkeypatch):
    def fn(x, w):
        n = x / jnp.sum(jnp.abs(x), axis=1, keepdims=True)
        return n, jnp.sum(n * w, axis=0)

    x, w = normal(200, 6), normal(200, 6, seed=1)
    w[10, 1] = np.inf
    w[20, 2], w[150, 2] = np.inf, -np.inf  # inf - inf: nan
    w[40, 3] = np.nan
    w[50, 4] = -np.inf
    executable, compiled = compile_native(fn, x, w)
    assert plans(executable)[0].partials
    got = np.asarray(compiled(x, w)[1])
    plain = unfolded(monkeypatch, fn, x, w)[1]
    finite = np.isfinite(plain)
    np.testing.assert_array_equal(got[~finite], plain[~finite])  # (nan where nan, signed inf)
    assert_same_sums(got, plain)
    n = x.astype(np.float64) / np.abs(x).sum(1, keepdims=True)
    with np.errstate(invalid="ignore"):
        expected = (n * w).sum(0)
    assert np.isnan(got[[2, 3]]).all() and np.isinf(expected[[1, 4]]).all()
    np.testing.assert_array_equal(got[[1, 4]], expected[[1, 4]])  # (the signs too)
    np.testing.assert_allclose(got[[0, 5]], expected[[0, 5]], rtol=1e-5)


def test_a_sum_over_neighbouring_rows_is_not_folded():
    # the column sum reads the row kernel's value at two rows: it cannot run inside its loop
    def fn(x):
        n = x / jnp.sum(jnp.abs(x), axis=1, keepdims=True)
        return jnp.sum(n[1:] * n[:-1], axis=0)

    x = normal(100, 24)
    executable, compiled = compile_native(fn, x)
    assert not any(plan.partials for plan in plans(executable))
    n = x.astype(np.float64) / np.abs(x).sum(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(compiled(x)), (n[1:] * n[:-1]).sum(0), rtol=1e-5)


def test_short_column_sums_are_left_to_the_scheduler():
    # 32 rows or fewer: one block, nothing to gain (kir_schedule sums them in place)
    def fn(x):
        n = x / jnp.sum(jnp.abs(x), axis=1, keepdims=True)
        return jnp.sum(n, axis=0)

    x = normal(fusion_columns.BLOCK, 24)
    executable, compiled = compile_native(fn, x)
    assert not any(plan.partials for plan in plans(executable))
    n = x.astype(np.float64) / np.abs(x).sum(1, keepdims=True)
    # (Against the terms' magnitude: a column's terms may cancel to a small sum, whose relative
    # error then depends on the summation order, which differs with the vector width.)
    error = np.abs(np.asarray(compiled(x)) - n.sum(0))
    assert (error <= 1e-6 * np.abs(n).sum(0)).all(), error

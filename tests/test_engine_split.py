"""Split compilation (kiln.runtime.engine): a group of programs with many kernels is compiled
as several LLVM modules, parts of a few kernels each (with the entries of the programs that end
there), each optimized on one of two threads as soon as it is emitted. The machine code is the same
as unsplit, warm starts load every object, a group missing one part is never half-used, and the
worker process path compiles every module too."""

from __future__ import annotations

import os
import textwrap

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.config import config
from kiln.runtime import engine
from tests._testing import run_script_json


def many_kernels(x, w):
    # Reductions along alternating axes, each broadcast back: one kernel per step or so.
    for step in range(6):
        axis = step % 2
        x = jnp.tanh(x - jnp.mean(x, axis=axis, keepdims=True)) * w
        w = w + jnp.max(x, axis=0)
    return x, jnp.sum(x * x, axis=1)


def _numpy_many_kernels(x, w):
    x, w = x.astype(np.float64), w.astype(np.float64)
    for step in range(6):
        x = np.tanh(x - x.mean(axis=step % 2, keepdims=True)) * w
        w = w + x.max(axis=0)
    return x, (x * x).sum(axis=1)


def _inputs():
    rng = np.random.default_rng(7)
    return rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal(48).astype(
        np.float32
    )


def _compile_and_run(monkeypatch, threads: int):
    monkeypatch.setattr(config, "num_threads", threads)
    kiln.clear_caches()
    before = engine.compile_stats()["modules"]
    split_groups = []
    original = engine.Engine._compile_fresh

    def spy(self, pending, verify):
        for units, group in pending:  # the parts of a split group, 0 for a whole one
            split = any(unit.parts for unit in units)
            split_groups.append(len(self._module_names(units, group)) if split else 0)
        return original(self, pending, verify)

    monkeypatch.setattr(engine.Engine, "_compile_fresh", spy)
    out = kiln.jit(many_kernels)(*_inputs())
    modules = engine.compile_stats()["modules"] - before
    # (A copy: a later call's spy wraps this one, which would go on recording.)
    return [np.asarray(o) for o in out], modules, list(split_groups)


def test_split_group_gives_the_same_bits_as_unsplit(monkeypatch):
    split_out, split_modules, split_groups = _compile_and_run(monkeypatch, 2)
    whole_out, whole_modules, whole_groups = _compile_and_run(monkeypatch, 1)
    assert any(split_groups) and not any(whole_groups)
    # One module per whole group, one per part (a few kernels each) of a split group.
    assert split_modules == sum(parts or 1 for parts in split_groups)
    assert max(split_groups) >= 2
    assert whole_modules == len(whole_groups)
    for a, b in zip(split_out, whole_out):
        np.testing.assert_array_equal(a, b)
    for got, want in zip(split_out, _numpy_many_kernels(*_inputs())):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_split_group_through_the_worker_process(monkeypatch):
    monkeypatch.setattr(config, "llvm_in_process_compiles", 0)
    out, modules, groups = _compile_and_run(monkeypatch, 2)
    assert any(groups)
    for got, want in zip(out, _numpy_many_kernels(*_inputs())):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_a_missing_part_means_recompiling(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    first, _, groups = _compile_and_run(monkeypatch, 2)
    assert any(groups)
    # Drop one part's object from the disk cache: the other parts alone must not load.
    real_load = engine.disk_cache.DiskCache.load
    dropped_keys = set()
    real_key = engine.Engine._disk_key

    def disk_key(group):
        key = real_key(group)
        if group.endswith(" part1"):
            dropped_keys.add(key)
        return key

    monkeypatch.setattr(engine.Engine, "_disk_key", staticmethod(disk_key))
    monkeypatch.setattr(
        engine.disk_cache.DiskCache,
        "load",
        lambda self, key: None if key in dropped_keys else real_load(self, key),
    )
    again, modules, groups = _compile_and_run(monkeypatch, 2)
    assert any(groups) and modules >= 2  # compiled again, not half-loaded
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, %r)
    import kiln
    from kiln.runtime import engine
    from tests.test_engine_split import _inputs, many_kernels
    kiln.config.update("jax_compilation_cache_dir", sys.argv[1])
    kiln.config.num_threads = 2
    out = kiln.jit(many_kernels)(*_inputs())
    for n, value in enumerate(out):
        np.save(f"{sys.argv[2]}_{n}.npy", np.asarray(value))
    print(json.dumps(engine.compile_stats()))
    """
    % os.getcwd()
)


def _run(cache, out) -> dict:
    return run_script_json(_SCRIPT, str(cache), str(out))


def test_a_new_process_loads_both_objects(tmp_path):
    cold = _run(tmp_path / "cache", tmp_path / "cold")
    assert cold["modules"] >= 2
    warm = _run(tmp_path / "cache", tmp_path / "warm")
    assert warm["modules"] == 0
    for n in range(2):
        np.testing.assert_array_equal(
            np.load(tmp_path / f"warm_{n}.npy"), np.load(tmp_path / f"cold_{n}.npy")
        )


def test_a_forked_child_compiles_split_groups_too(monkeypatch):
    # The helper thread of the parent does not exist in a forked child: the child must make
    # its own instead of waiting on the parent's forever.
    import multiprocessing

    _compile_and_run(monkeypatch, 2)  # the parent's helper thread exists now
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        result = pool.apply_async(_child_many_kernels)
        got = result.get(timeout=120)
    for a, b in zip(got, _numpy_many_kernels(*_inputs())):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


def _child_many_kernels():
    config.num_threads = 2
    kiln.clear_caches()
    x, w = _inputs()
    # A new function: nothing of it is loaded in this process yet.
    out = kiln.jit(lambda a, b: many_kernels(a * 1.0, b))(x, w)
    return [np.asarray(o) for o in out]


def test_a_failure_while_emitting_leaves_no_stream_behind(monkeypatch):
    # Emission fails after the helper has started on the first part: the error reaches the
    # caller, the helper is released (a later split compile runs), and the switch interval
    # the stream shortened is restored.
    import sys

    import pytest

    from kiln.codegen.llvm import emit

    monkeypatch.setattr(config, "native_strict", True)
    monkeypatch.setattr(config, "num_threads", 2)
    kiln.clear_caches()
    interval = sys.getswitchinterval()
    calls = []
    original = emit.emit_kernels

    def failing(program, names):
        calls.append(program)
        if len(calls) >= 2:  # (every time: a failed group is retried segment by segment)
            raise RuntimeError("emission failed on purpose")
        return original(program, names)

    monkeypatch.setattr(emit, "emit_kernels", failing)
    with pytest.raises(RuntimeError, match="on purpose"):
        kiln.jit(lambda a, b: many_kernels(a + 0.5, b))(*_inputs())
    assert len(calls) >= 2
    assert sys.getswitchinterval() == interval
    monkeypatch.setattr(emit, "emit_kernels", original)
    out = kiln.jit(lambda a, b: many_kernels(a + 0.0, b))(*_inputs())
    for got, want in zip(out, _numpy_many_kernels(*_inputs())):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-4)


def test_a_split_groups_ir_and_assembly_cover_every_part(monkeypatch):
    _compile_and_run(monkeypatch, 2)
    split = [
        native
        for native in list(engine.engine()._programs.values())
        if native.llvm_ir and engine.MODULE_SEPARATOR in native.llvm_ir
    ]
    assert split
    native = split[0]
    parts = native.llvm_ir.count(engine.MODULE_SEPARATOR) + 1
    assert parts >= 2
    assembly = native.asm
    assert assembly.count(engine.MODULE_SEPARATOR) == parts - 1
    assert native.symbol in assembly

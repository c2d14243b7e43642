"""Split compilation (kiln.runtime.engine): a group of programs with many kernels is compiled
as several LLVM modules, parts of a few kernels each (with the entries of the programs that end
there), each optimized on one of two threads as soon as it is emitted. The machine code is the same
as unsplit, warm starts load every object, a group missing one part is never half-used, and the
worker process path compiles every module too."""

from __future__ import annotations

import os
import re
import textwrap

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.config import config
from kiln.runtime import engine
from tests._testing import CODEGEN_TARGETS, first_compile, run_script_json, use_codegen_target

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native


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
    """(outputs, modules compiled, for each group compiled its parts: 0 when whole)."""
    outs, modules, groups = first_compile(monkeypatch, many_kernels, _inputs(), threads)
    parts = [
        len(engine.Engine._module_names(units, group)) if any(u.parts for u in units) else 0
        for units, group in groups
    ]
    return outs, modules, parts


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
    # (Scalar loops: their modules keep LLVM's default pipelines, which go to the worker.)
    monkeypatch.setattr(config, "vector_loops", False)
    monkeypatch.setattr(config, "llvm_in_process_compiles", 0)
    monkeypatch.setattr(engine._optimizer, "leaky", 0)
    before = engine._optimizer.in_worker
    out, modules, groups = _compile_and_run(monkeypatch, 2)
    assert any(groups) and engine._optimizer.in_worker >= before + modules
    for got, want in zip(out, _numpy_many_kernels(*_inputs())):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_compiling_on_two_threads_leaves_the_locale_alone(monkeypatch):
    # llvmlite prints a module with the process's locale switched to "C" and back: two threads
    # printing at once (each module's optimized text) could leave it at "C", and every later
    # text file or subprocess output the process decodes with ASCII. Split compiles print on
    # two threads; the locale they leave must be the one they found.
    import locale

    before = locale.setlocale(locale.LC_ALL)
    encoding = locale.getpreferredencoding(False)
    for n in range(24):

        def program(x, w, n=n):  # (a new program each time: compiled, not found loaded)
            return many_kernels(x + float(n), w)

        outs, modules, _ = first_compile(monkeypatch, program, _inputs(), 2)
        assert modules >= 2
        assert locale.setlocale(locale.LC_ALL) == before
        assert locale.getpreferredencoding(False) == encoding
        if n == 0:
            for got, want in zip(outs, _numpy_many_kernels(*_inputs())):
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

    def failing(program, names, *more):
        calls.append(program)
        if len(calls) >= 2:  # (every time: a failed group is retried segment by segment)
            raise RuntimeError("emission failed on purpose")
        return original(program, names, *more)

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


# --- kernels inlined into their entries ----------------------------------------------------------


def _chain(name: str, kernels: int, size: int = 96, shift: float = 0.0):
    """y = x passed through `kernels` kernels (t = t * 1.5 + j + shift each, through temps),
    and its NumPy reference. (Programs that differ only in their names share one machine
    code: give each program of a compile its own shift.)"""
    from kiln.compiler.kir import Buffer, Kernel, Loop, Program, Store, Var

    f32 = np.dtype(np.float32)
    x = Buffer("x", f32, (size,))
    y = Buffer("y", f32, (size,), "output")
    temps = [Buffer(f"t{j}", f32, (size,), "temp") for j in range(kernels - 1)]
    chain = [x] + temps + [y]
    i = Var("i")
    steps = [Store(chain[j + 1], i, chain[j][i] * 1.5 + (j + shift)) for j in range(kernels)]
    body = [Kernel(f"k{j}", [Loop(i, 0, size, [step])]) for j, step in enumerate(steps)]

    def reference(data):
        # (in float64, rounded once per kernel, as the contracted multiply-add does)
        for j in range(kernels):
            data = (data.astype(np.float64) * 1.5 + (j + shift)).astype(np.float32)
        return data

    return Program(name, [x, y] + temps, body), reference


def _defined(module_text: str) -> list[str]:
    return re.findall(r'^define [^@]*@"?([\w.]+)"?\(', module_text, re.M)


def test_a_programs_kernels_are_inlined_into_its_entry():
    # Each kernel is an internal always-inline function of the emitted module; once optimized
    # only the entry is left: LLVM's cost per function is paid once per program.
    program, reference = _chain("inlined_chain", 3)
    native = engine.compile_program(program)
    assert native.unoptimized_ir.count("alwaysinline") >= 1
    assert len(_defined(native.unoptimized_ir)) == 4
    assert _defined(native.llvm_ir) == [native.symbol]
    data = np.linspace(-2, 2, 96, dtype=np.float32)
    np.testing.assert_allclose(native(data)[0], reference(data), rtol=1e-6, atol=1e-6)


def test_a_split_group_exports_only_the_kernels_another_part_calls(monkeypatch):
    # Three programs of three kernels, in parts of PART_KERNELS (4) kernels: the second
    # program's first kernel lies in part 0 but its entry in part 1, the third's first two in
    # part 1 and its entry in part 2. Those kernels stay external functions of their parts;
    # every other kernel is inlined into its entry.
    monkeypatch.setattr(config, "num_threads", 2)
    assert engine.PART_KERNELS == 4
    host = engine.Engine(engine.engine().target)
    chains = [_chain(f"split_chain_{n}", 3, shift=n / 4) for n in range(3)]
    natives = host.compile_many([p for p, _ in chains], pipelines=["lean"] * 3)
    modules = natives[0].llvm_ir.split(engine.MODULE_SEPARATOR)
    assert len(modules) == 3 and host.stats["modules"] == 3
    defined = [_defined(text) for text in modules]
    first, second, third = (native.symbol for native in natives)
    assert sorted(defined[0]) == sorted([first, f"{second}.k0"])
    assert sorted(defined[1]) == sorted([second, f"{third}.k0", f"{third}.k1"])
    assert defined[2] == [third]
    data = np.linspace(-2, 2, 96, dtype=np.float32)
    for native, (_, reference) in zip(natives, chains):
        np.testing.assert_allclose(native(data)[0], reference(data), rtol=1e-6, atol=1e-6)


def test_a_small_group_next_to_a_large_one_is_split_too(monkeypatch):
    # Whether a group is split depends on the kernels of the whole compile: a group of a few
    # costly kernels would otherwise be one module that one thread compiles alone while the
    # other finishes the many small ones.
    monkeypatch.setattr(config, "num_threads", 2)
    host = engine.Engine(engine.engine().target)
    lean, lean_reference = _chain("few_lean_kernels", 3)
    quick = [_chain(f"many_quick_{n}", 2, shift=n / 4) for n in range(3)]
    natives = host.compile_many([lean] + [p for p, _ in quick], pipelines=["lean"] + ["quick"] * 3)
    # lean: 3 kernels, one part; quick: 6 kernels, two parts
    assert host.stats["modules"] == 3
    data = np.linspace(-2, 2, 96, dtype=np.float32)
    np.testing.assert_allclose(natives[0](data)[0], lean_reference(data), rtol=1e-6, atol=1e-6)
    for native, (_, reference) in zip(natives[1:], quick):
        np.testing.assert_allclose(native(data)[0], reference(data), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target_name", CODEGEN_TARGETS)
def test_each_thread_reuses_its_own_machine_and_gets_the_same_object(monkeypatch, target_name):
    """Modules compiled on one thread share that thread's target machine (its subtarget built
    once); another thread gets a machine of its own; reusing one changes no byte of the
    object code (on the host and the baselines it can run)."""
    import threading

    import llvmlite.binding as llvm

    from kiln.codegen.llvm import llvm_pipeline
    from kiln.runtime import llvm_threads

    with use_codegen_target(target_name) as host:
        _, _, groups = first_compile(monkeypatch, many_kernels, _inputs(), 1)
        text = engine.engine().emit_ir(groups[0][0][0].program)

    def compiled(machine) -> bytes:
        context = llvm.create_context()
        module = llvm.parse_assembly(text, context=context)
        _, object_bytes = llvm_pipeline.compile_module_private(module, machine, "vector")
        del module
        return object_bytes

    mine = llvm_threads.thread_machine(host, 3)
    assert llvm_threads.thread_machine(host, 3) is mine
    assert llvm_threads.thread_machine(host, 0) is not mine  # (one per code generator level)
    fresh = compiled(host.create_machine(3))
    assert compiled(mine) == fresh and compiled(mine) == fresh  # (used twice: same bytes)
    other = []
    thread = threading.Thread(target=lambda: other.append(llvm_threads.thread_machine(host, 3)))
    thread.start()
    thread.join()
    assert other[0] is not mine

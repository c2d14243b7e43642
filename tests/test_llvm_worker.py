"""The LLVM worker process (kiln/codegen/llvm/llvm_worker.py) makes the same machine code as
the parent: a program gives the same bits whether its module was optimized in the process or
in the worker, for every pipeline. (A worker that ran only the full pipeline made jitted
float32 BFGS stop early after a few hundred earlier compiles: vectorized sums round
differently from scalar ones.)"""

from __future__ import annotations

import numpy as np
import pytest

from kiln.codegen.llvm import emit, llvm_pipeline, target
from kiln.compiler.kir import Buffer, Kernel, Load, Loop, Program, Reduce, ReduceKind, Store, Var
from kiln.config import config
from kiln.runtime import engine, native_library

F32 = np.dtype(np.float32)


def _program(name: str) -> Program:
    """Row sums of x * y + z (a reduction and a multiply-add, whose rounding depends on
    vectorization and FMA contraction)."""
    rows, cols = 16, 999
    x, y = Buffer("x", F32, (rows, cols)), Buffer("y", F32, (rows, cols))
    z = Buffer("z", F32, (rows,))
    out = Buffer("out", F32, (rows,), "output")
    i, k = Var("i"), Var("k")
    element = Load(x, i * cols + k) * Load(y, i * cols + k)
    total = Reduce(ReduceKind.SUM, k, 0, cols, element)
    body = [Loop(i, 0, rows, [Store(out, i, total * Load(z, i) + Load(x, i * cols))])]
    return Program(name, [x, y, z, out], [Kernel("k", body)])


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 999)).astype(F32)
    y = rng.standard_normal((16, 999)).astype(F32)
    z = rng.standard_normal(16).astype(F32)
    return x, y, z


def _run(native) -> np.ndarray:
    (out,) = native(*_inputs())
    return out


def _numpy() -> np.ndarray:
    """_program's output in float64: each row's sum of x * y, times z, plus the row's x[0]."""
    x, y, z = (a.astype(np.float64) for a in _inputs())
    return (x * y).sum(axis=1) * z + x[:, 0]


@pytest.mark.parametrize("pipeline", ["quick", "lean", "full"])
def test_worker_and_process_make_the_same_code(pipeline, monkeypatch):
    # (Scalar loops: a module of vector loops gets a short pipeline, which never goes to the
    # worker; these keep LLVM's default pipelines.)
    monkeypatch.setattr(config, "vector_loops", False)
    results = []
    for in_process in (10**6, 0):
        monkeypatch.setattr(config, "llvm_in_process_compiles", in_process)
        monkeypatch.setattr(engine._optimizer, "leaky", 0)
        before = engine._optimizer.in_worker
        fresh = engine.Engine(target.host_target(), None)
        (native,) = fresh.compile_many([_program(f"p_{pipeline}")], pipelines=[pipeline])
        results.append(_run(native))
        assert (engine._optimizer.in_worker > before) == (in_process == 0)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], _numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pipeline", ["quick", "lean"])
def test_modules_of_vector_loops_stay_in_the_process(pipeline, monkeypatch):
    # Their short pipeline, built once per thread, leaks nothing measurable: past the limit
    # of in-process compiles they are still compiled here, with the same code.
    reference = _run(
        engine.Engine(target.host_target(), None).compile_many(
            [_program(f"v_{pipeline}")], pipelines=[pipeline]
        )[0]
    )
    monkeypatch.setattr(config, "llvm_in_process_compiles", 0)
    monkeypatch.setattr(engine._optimizer, "leaky", 0)
    before = (engine._optimizer.in_worker, engine._optimizer.in_process)
    fresh = engine.Engine(target.host_target(), None)
    (native,) = fresh.compile_many([_program(f"v_{pipeline}")], pipelines=[pipeline])
    assert engine._optimizer.in_worker == before[0]
    assert engine._optimizer.in_process == before[1] + 1
    np.testing.assert_array_equal(_run(native), reference)
    np.testing.assert_allclose(reference, _numpy(), rtol=1e-4, atol=1e-4)


def test_the_worker_is_replaced_after_its_jobs(monkeypatch):
    monkeypatch.setattr(config, "vector_loops", False)
    monkeypatch.setattr(config, "llvm_in_process_compiles", 0)
    monkeypatch.setattr(engine._optimizer, "WORKER_JOBS", 2)
    started = engine._optimizer.workers_started
    results = []
    for n in range(5):
        fresh = engine.Engine(target.host_target(), None)
        (native,) = fresh.compile_many([_program(f"w_{n}")], pipelines=["lean"])
        results.append(_run(native))
    assert engine._optimizer.workers_started - started >= 2
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])
    np.testing.assert_allclose(results[0], _numpy(), rtol=1e-4, atol=1e-4)


def test_a_reused_pipeline_makes_the_same_code_for_every_module():
    # llvm_pipeline.Passes is built once and run on many modules: LLVM's default pipeline
    # (built afresh for each module: a second run of one crashed) and the short ones.
    import llvmlite.binding as llvm

    host = target.host_target()
    text = engine.engine().emit_ir(_program("p_reused"))
    for pipeline in ("vector", "quick vector", "lean", "full"):
        machine = host.create_machine(llvm_pipeline.CODEGEN_LEVELS[pipeline])
        passes = llvm_pipeline.Passes(machine, pipeline)
        objects = set()
        for fresh in (False, False, False, True):
            module = llvm.parse_assembly(text, context=llvm.create_context())
            objects.add(
                llvm_pipeline.compile_module_private(
                    module, machine, pipeline, None if fresh else passes
                )[1]
            )
        assert len(objects) == 1, pipeline


@pytest.mark.parametrize("pipeline", ["quick", "full"])
def test_the_worker_starts_where_nothing_imported_types_before_it(pipeline, monkeypatch):
    """Run by path, Python puts the worker's directory (kiln/codegen/llvm) first on sys.path,
    where types.py would shadow the standard library's `types`. Started without `site` (-S),
    as an installed package's start-up may be, nothing imports `types` before the worker
    does: its command must still give a working worker (it exited at once without -P). Its
    object is byte for byte this process's, at code generator level 0 and 3 (so the worker
    sets llvm_pipeline.CODEGEN_OPTIONS as this process does)."""
    import os
    import subprocess

    import llvmlite

    from kiln.codegen.llvm import llvm_worker

    executable, *rest = llvm_worker.command()
    environment = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(llvmlite.__file__)))
    worker = subprocess.Popen(
        [executable, "-S", *rest],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
    )
    host = target.host_target()
    monkeypatch.setattr(config, "vector_loops", False)  # (scalar loops: LLVM's own pipeline)
    text = engine.engine().emit_ir(_program(f"p_started_{pipeline}"))
    try:
        llvm_worker.write_frame(
            worker.stdin, (host.triple, host.cpu_name, host.features, pipeline, text)
        )
        reply = llvm_worker.read_frame(worker.stdout)
    finally:
        worker.stdin.close()
        error = worker.stderr.read().decode()
        worker.wait(timeout=60)
    assert reply is not None, error
    status, optimized, object_bytes = reply
    assert worker.returncode == 0, error
    # The same module optimized in this process, with the machine the worker makes for it.
    machine = host.create_machine(llvm_pipeline.CODEGEN_LEVELS[pipeline])
    expected = llvm_pipeline.optimize_to_object(text, machine, pipeline)
    assert status == "ok" and (optimized, object_bytes) == expected


def test_the_code_generator_options_are_set_and_take_effect():
    """A process that generates code has llvm_pipeline.CODEGEN_OPTIONS set; a fresh process
    that compiles the same module at level 3 before and after setting them gets other
    machine code (the options reach LLVM's code generator), and that code, loaded in this
    process, computes NumPy's results."""
    import subprocess
    import sys

    host = target.host_target()  # (the native target's set-up sets them)
    assert llvm_pipeline._configured
    text = engine.engine().emit_ir(_program("p_options"))
    script = (
        "import sys, importlib.util, llvmlite.binding as llvm\n"
        "spec = importlib.util.spec_from_file_location('p', sys.argv[1])\n"
        "p = importlib.util.module_from_spec(spec); spec.loader.exec_module(p)\n"
        "llvm.initialize_native_target(); llvm.initialize_native_asmprinter()\n"
        "machine = p.create_machine(sys.argv[2], sys.argv[3], sys.argv[4], 3)\n"
        "text = sys.stdin.read()\n"
        "before = p.optimize_to_object(text, machine, 'lean')[1]\n"
        "p.configure(); p.configure()\n"  # (the second sets nothing again)
        "after = p.optimize_to_object(text, machine, 'lean')[1]\n"
        "sys.stdout.write(before.hex() + ' ' + after.hex())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, llvm_pipeline.__file__, host.triple, host.cpu_name,
         host.features],
        input=text, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    before, after = (bytes.fromhex(part) for part in done.stdout.split())
    machine = host.create_machine(3)
    assert after == llvm_pipeline.optimize_to_object(text, machine, "lean")[1]
    assert before != after
    program = _program("p_options")
    native = engine.NativeProgram(
        program, emit.ENTRY_NAME, native_library.Library(after, host), text, None, engine.engine()
    )
    np.testing.assert_allclose(_run(native), _numpy(), rtol=1e-4, atol=1e-4)


def test_the_private_calls_verify_and_emit_as_llvmlite_does():
    """verify_unlocked and emit_object_unlocked (the short C calls in them hold the GIL:
    llvm_pipeline._held) report what module.verify() reports and give the bytes of
    machine.emit_object; a module whose value does not dominate its use is refused by both
    verifiers, with LLVM's message."""
    import llvmlite.binding as llvm

    bad = (
        "define i32 @f(i1 %c) {\n"
        "entry:\n  br i1 %c, label %a, label %b\n"
        "a:\n  %x = add i32 1, 2\n  br label %b\n"
        "b:\n  ret i32 %x\n}\n"
    )
    module = llvm.parse_assembly(bad)
    with pytest.raises(RuntimeError, match="does not dominate all uses") as ours:
        llvm_pipeline.verify_unlocked(module)
    with pytest.raises(RuntimeError) as theirs:
        module.verify()
    assert str(theirs.value) in str(ours.value)
    text = engine.engine().emit_ir(_program("p_private"))
    machine = target.host_target().create_machine(3)
    context = llvm.create_context()  # (a private context, as the compile threads use)
    good = llvm.parse_assembly(text, context=context)
    llvm_pipeline.verify_unlocked(good)
    llvm_pipeline.optimize(good, machine, "lean")
    assert llvm_pipeline.emit_object_unlocked(good, machine) == machine.emit_object(good)
    del good  # (a module goes before its context)

"""LLVM made ready on its helper thread after import (kiln.runtime.llvm_prepare): on the
native backend the import queues the host target, the helper's machine and passes and two
warm-up compiles (the second leaves a machine and passes for the first compiling thread);
with a disk cache it first reads kiln's source digest; KILN_PREPARE_LLVM=0 and the
interpreter backend queue nothing; a native build that has begun skips the warm-up
compiles; the warm-up module compiles for every baseline target and computes what NumPy
does where the host can run it; a fork waits for the preparation, and the child compiles and
runs programs."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import kiln
from kiln.codegen.llvm import llvm_pipeline
from kiln.codegen.llvm import target as target_module
from kiln.runtime import llvm_prepare, llvm_threads, native_library

pytestmark = pytest.mark.native


def _run(script: str, **env) -> str:
    inherited = {k: v for k, v in os.environ.items() if k != "KILN_CACHE_DIR"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**inherited, **env},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


_REPORT = """
    import os
    import kiln
    from kiln.runtime import llvm_prepare, llvm_threads, native_library
    from kiln.codegen.llvm import target
    llvm_prepare.wait()
    results = [job.result() for job in llvm_prepare._jobs]
    host = target.current_target()
    helper = (os.getpid(), host, llvm_prepare.PIPELINE) in llvm_threads._helper_has
    spare = (host, llvm_prepare.PIPELINE) in llvm_threads._spares
    print(results, helper, spare)
"""


def test_the_import_prepares_llvm_on_the_native_backend():
    # The target and the helper's passes (None), the two warm-up compiles (True): the
    # helper has its machine and passes, and a spare pair waits for the first compile.
    out = _run(_REPORT, KILN_BACKEND="native", KILN_PREPARE_LLVM="1")
    assert out.split() == ["[None,", "True,", "True]", "True", "True"]


def test_with_a_disk_cache_the_source_digest_is_read_first(tmp_path):
    # (a warm start's first lookup needs kiln's source digest: a scan of its files)
    out = _run(
        textwrap.dedent(_REPORT)
        + "from kiln.runtime import disk_cache\nprint(disk_cache._source_files is not None)",
        KILN_BACKEND="native",
        KILN_PREPARE_LLVM="1",
        KILN_CACHE_DIR=str(tmp_path / "cache"),
    )
    assert out.split() == ["[None,", "None,", "True,", "True]", "True", "True", "True"]


@pytest.mark.parametrize(
    "env", [{"KILN_PREPARE_LLVM": "0"}, {"KILN_BACKEND": "interpret", "KILN_PREPARE_LLVM": "1"}]
)
def test_nothing_is_prepared_when_turned_off_or_on_the_interpreter(env):
    assert _run(_REPORT, **env).split() == ["[]", "False", "False"]


def test_a_native_build_that_has_begun_skips_the_warm_up_compiles(monkeypatch):
    monkeypatch.setattr(llvm_prepare, "_compiling", threading.Event())
    llvm_prepare.compile_begins()
    assert llvm_prepare._first_compile() is False and llvm_prepare._spare_compile() is False


def test_a_build_marks_the_compile_begun(monkeypatch):
    monkeypatch.setattr(llvm_prepare, "_compiling", threading.Event())
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda a: a * 3 + 1)(x)), x * 3 + 1)
    assert llvm_prepare._compiling.is_set()


@pytest.mark.parametrize(
    "cpu,features", [("x86-64", "")] + [v[:2] for _, v in sorted(target_module.BASELINES.items())]
)
def test_the_warm_up_module_compiles_for_every_baseline_and_runs_where_it_can(cpu, features):
    # Compiled for any target, whatever the host has (its vectors of the target's width, 4
    # floats at the least); run where the host can: max(fma(x, x, 0.5), 0) against NumPy.
    made = target_module.make_target(cpu, features, runnable=False)
    text = llvm_prepare.prepare_ir(made)
    lanes = max(made.vector_bytes // 4, 4)
    assert f"<{lanes} x float>" in text and made.triple in text
    machine = made.create_machine(3)
    _, data = llvm_pipeline.optimize_to_object(text, machine, llvm_prepare.PIPELINE)
    needed = target_module.BASELINES[cpu][2] if cpu in target_module.BASELINES else frozenset()
    if not needed <= target_module.host_features():
        return
    library = native_library.load_object(data, made, "the warm-up module")
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        library.address("kiln_prepare")
    )
    x = np.linspace(-3, 3, 8 * lanes, dtype=np.float32)
    y = np.full_like(x, np.nan)
    run(x.ctypes.data, y.ctypes.data, x.size)
    # (a fused multiply-add: x * x + 0.5 is exact in float64, so rounding it once to float32
    # is the fma's result)
    expected = np.maximum(x.astype(np.float64) ** 2 + 0.5, 0).astype(np.float32)
    np.testing.assert_array_equal(y, expected)


def test_a_spare_goes_to_a_thread_without_a_machine_of_its_own(monkeypatch):
    host = target_module.host_target()
    pipeline = llvm_prepare.PIPELINE
    monkeypatch.setattr(llvm_threads, "_spares", {})
    machine = host.create_machine(llvm_pipeline.CODEGEN_LEVELS[pipeline])
    passes = llvm_pipeline.Passes(machine, pipeline)
    llvm_threads.spare_passes(host, pipeline, machine, passes)
    got = []

    def fresh_thread():
        got.append(llvm_threads.thread_passes(host, pipeline))
        got.append(llvm_threads.thread_passes(host, pipeline))  # (its own from now on)

    thread = threading.Thread(target=fresh_thread)
    thread.start()
    thread.join()
    assert got[0] == (machine, passes) and got[1] == (machine, passes)
    assert llvm_threads._spares == {}
    # A thread with a machine of that level keeps its own; the spare stays for another.
    own = llvm_threads.thread_passes(host, pipeline)
    llvm_threads.spare_passes(host, pipeline, machine, passes)
    assert llvm_threads.thread_passes(host, pipeline) == own != (machine, passes)
    assert (host, pipeline) in llvm_threads._spares


def test_the_host_target_is_made_once_for_every_thread():
    found = []
    threads = [
        threading.Thread(target=lambda: found.append(target_module.host_target())) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(made is target_module.host_target() for made in found) and len(found) == 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_right_after_import_waits_for_the_preparation_and_the_child_compiles():
    # The fork comes while the helper is (most likely) still inside LLVM: the child must not
    # inherit a lock held by a thread it does not have; both processes compile and run.
    out = _run(
        """
        import os, warnings
        import numpy as np
        import kiln
        from kiln.runtime import llvm_prepare
        warnings.simplefilter("ignore", DeprecationWarning)  # (fork with threads, 3.12+)
        pid = os.fork()
        x = np.arange(1024, dtype=np.float32)
        got = np.asarray(kiln.jit(lambda a: kiln.numpy.exp(a / 512.0).sum())(x))
        ok = np.allclose(got, np.exp(x / 512.0).sum(), rtol=1e-5)
        if pid == 0:
            os._exit(0 if ok and all(job.done() for job in llvm_prepare._jobs) else 3)
        _, status = os.waitpid(pid, 0)
        print(ok, os.waitstatus_to_exitcode(status))
        """,
        KILN_PREPARE_LLVM="1",
        KILN_BACKEND="native",
    )
    assert out.split() == ["True", "0"]

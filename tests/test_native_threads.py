"""kiln's own threads (kiln.runtime.native_call.OneThread, start_thread): jobs run in order on
one thread and report their results and errors through futures; submitting never waits for
the thread; at exit a running job finishes first; a forked child's copy never blocks the
child's exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kiln.runtime import native_call


def test_jobs_run_in_order_on_one_thread_and_report_through_futures():
    worker = native_call.OneThread()
    seen = []

    def job(n):
        seen.append((n, threading.get_ident()))
        return n * n

    futures = [worker.submit(job, n) for n in range(20)]
    assert [f.result(timeout=10) for f in futures] == [n * n for n in range(20)]
    assert [n for n, _ in seen] == list(range(20))
    assert len({ident for _, ident in seen}) == 1 != threading.get_ident()
    failed = worker.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result(timeout=10)
    assert worker.submit(job, 7).result(timeout=10) == 49  # (still running after an error)
    worker.shutdown()


def test_submitting_does_not_wait_for_the_thread():
    release = threading.Event()
    worker = native_call.OneThread()
    blocked = worker.submit(release.wait, 10)
    start = time.perf_counter()
    queued = worker.submit(lambda: "after")
    assert time.perf_counter() - start < 0.5 and not queued.done()
    release.set()
    assert blocked.result(timeout=10) and queued.result(timeout=10) == "after"
    worker.shutdown()


def test_a_job_running_at_exit_finishes_first(tmp_path):
    # The process's exit waits for the job (an LLVM compile must not outlive the process's
    # teardown of LLVM); the file it writes after a pause is there.
    marker = tmp_path / "finished"
    script = textwrap.dedent(
        f"""
        import time
        from kiln.runtime import native_call

        def job():
            time.sleep(0.3)
            open({str(marker)!r}, "w").write("done")

        native_call.single_thread("llvm").submit(job)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert marker.read_text() == "done"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_thread_and_exits():
    parent = native_call.single_thread("llvm")
    assert parent.submit(lambda: 1).result(timeout=10) == 1
    pid = os.fork()
    if pid == 0:  # (the child: its own executor; exiting must not wait for the parent's)
        ok = False
        try:
            child = native_call.single_thread("llvm")
            ok = child is not parent and child.submit(lambda: 2).result(timeout=10) == 2
            parent.shutdown()  # (returns at once: not this process's thread)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

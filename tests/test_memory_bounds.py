"""Bounded memory: a jitted function called with thousands of signatures keeps its process
size bounded (evicted programs free their native code; LLVM work moves to a recycled worker
process), and kiln.clear_caches() frees everything compiled."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
from kiln.runtime import engine

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native

#: The stated bound: growth of the process (RSS) after the first 1,000 signatures, over the
#: next 2,000, with 64 cached signatures. Without eviction and freeing this grows by
#: ~100-150 KB per signature (250 MB or more here).
GROWTH_BOUND_MB = 40


@pytest.mark.parametrize("vector_loops", ["1", "0"])
def test_rss_stays_bounded_over_3000_signatures(vector_loops):
    # With vector loops (the default) each module gets a short pipeline, compiled in this
    # process: it leaks nothing measurable. With scalar loops each gets LLVM's default
    # pipeline, which leaks ~100 KB a module: past KILN_LLVM_IN_PROCESS_COMPILES of them
    # they go to the worker process, replaced every 512 modules.
    script = textwrap.dedent("""
        import numpy as np, kiln
        from kiln.runtime import engine

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 / 1e6
        f = kiln.jit(lambda x: x * 2.0 + 1.0)
        marks = {}
        for n in range(1, 3001):
            out = f(np.ones(n, np.float32))
            if n in (1000, 3000):
                marks[n] = rss()
        assert np.array_equal(np.asarray(out), np.full(3000, 3.0, np.float32))
        stats = kiln.jit_cache_stats()
        import gc; gc.collect()  # programs and their entries refer to each other
        print(marks[1000], marks[3000], stats["entries"], engine.engine().live_programs(),
              engine._optimizer.workers_started)
        """)
    env = dict(
        os.environ,
        KILN_COMPILE_CACHE_SIZE="64",
        KILN_LLVM_IN_PROCESS_COMPILES="64",
        KILN_VECTOR_LOOPS=vector_loops,
    )
    env.pop("KILN_CACHE_DIR", None)
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    at_1000, at_3000, entries, live, workers = result.stdout.split()
    growth = float(at_3000) - float(at_1000)
    assert growth < GROWTH_BOUND_MB, f"grew by {growth:.1f} MB from 1,000 to 3,000 signatures"
    assert int(entries) == 64
    assert int(live) <= 64 + 8  # programs still referenced by cached entries only
    if vector_loops == "1":
        assert int(workers) == 0
    else:
        assert int(workers) >= 5  # the LLVM worker was recycled (512 modules each)


def test_clear_caches_frees_native_code_and_retraces():
    traces = []

    def fun(x):
        traces.append(1)
        return x * 3.0 - 1.0

    f = kiln.jit(fun)
    x = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(f(x)), x * 3 - 1)
    before = engine.engine().live_programs()
    assert before >= 1
    kiln.clear_caches()
    gc.collect()
    assert engine.engine().live_programs() == 0
    assert kiln.jit_cache_stats()["entries"] == 0
    np.testing.assert_array_equal(np.asarray(f(x)), x * 3 - 1)
    assert len(traces) == 2

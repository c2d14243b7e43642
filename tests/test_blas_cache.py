"""Objects that call BLAS (kiln_cblas_* symbols) link in a new process straight from the disk
cache: the symbols are bound before the object is linked, not only when a product is planned."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native

SCRIPT = textwrap.dedent(
    """
    import numpy as np, kiln, kiln.numpy as jnp
    from kiln.runtime import engine
    rng = np.random.default_rng(0)
    a = rng.standard_normal((96, 80)).astype(np.float32)
    b = rng.standard_normal((80, 72)).astype(np.float32)
    f = kiln.jit(lambda a, b: jnp.tanh(a @ b) + 1)
    text = f.lower(a, b).compile().as_text()
    assert "gemm(" in text and text.splitlines()[0].endswith("backend=native"), text
    got = np.asarray(f(a, b))
    assert np.allclose(got, np.tanh(a.astype(np.float64) @ b) + 1, atol=1e-5)
    print(engine.engine().disk_cache.stats.hits)
    """
)


def test_blas_objects_load_from_the_disk_cache_in_a_new_process(tmp_path):
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "cache"), KILN_NATIVE_STRICT="1")

    def run():
        return subprocess.run(
            [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
        )

    first = run()
    assert first.returncode == 0, first.stderr
    assert list((tmp_path / "cache").glob("*.kiln"))
    second = run()
    assert second.returncode == 0, second.stderr
    assert int(second.stdout.split()[-1]) > 0  # it linked cached objects


def test_scipy_openblas_loads_without_spinning_workers():
    # Loaded with its default thread count, OpenBLAS starts a worker per core that spins for
    # ~0.2 s, taking a core from the compile that asked for the library. It is loaded with
    # one thread (OPENBLAS_NUM_THREADS=1 while it loads), and the environment is as it was.
    script = textwrap.dedent(
        """
        import os, time, numpy as np, kiln, kiln.numpy as jnp
        from kiln.primitives import blas
        tasks = lambda: len(os.listdir(f"/proc/{os.getpid()}/task"))
        before, start = tasks(), os.times()
        assert blas.scipy_openblas() is not None
        time.sleep(0.3)
        end = os.times()
        busy = (end.user + end.system) - (start.user + start.system)
        a = np.arange(64 * 48, dtype=np.float32).reshape(64, 48) / 1000
        got = np.asarray(kiln.jit(lambda a: a @ a.T)(a))
        assert np.allclose(got, a.astype(np.float64) @ a.T, rtol=1e-5)
        print(tasks() - before, round(busy, 2) < 0.05, os.environ.get("OPENBLAS_NUM_THREADS"))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert out == ["0", "True", "None"]

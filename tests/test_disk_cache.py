"""The persistent object cache: round trips, entries that do not verify (random bytes, empty,
truncated, written for another CPU) are ignored and rewritten, concurrent writers, and
directories that cannot be used."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from kiln.codegen.llvm import target
from kiln.compiler.kir import Buffer, Kernel, Loop, Program, Store, Var
from kiln.runtime import disk_cache, engine

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native

F32 = np.dtype(np.float32)


def _program(offset: float = 1.0, size: int = 301) -> Program:
    x, y = Buffer("x", F32, (size,)), Buffer("y", F32, (size,), "output")
    i = Var("i")
    return Program(
        "cached", [x, y], [Kernel("k", [Loop(i, 0, size, [Store(y, i, x[i] * 2.0 + offset)])])]
    )


def _engine(directory) -> engine.Engine:
    host = target.host_target()
    cache = disk_cache.DiskCache(disk_cache.usable_directory(directory), disk_cache.identity(host))
    return engine.Engine(host, cache)


def _check_runs(native, offset: float = 1.0) -> None:
    x = np.arange(301, dtype=F32)
    np.testing.assert_array_equal(native(x)[0], x * 2 + np.float32(offset))


def test_round_trip_loads_the_same_code(tmp_path):
    writer = _engine(tmp_path)
    compiled = writer.compile(_program())
    assert writer.disk_cache.stats.writes == 1
    (entry,) = tmp_path.glob("*.kiln")
    reader = _engine(tmp_path)
    loaded = reader.compile(_program())
    assert reader.disk_cache.stats.hits == 1 and reader.disk_cache.stats.writes == 0
    assert loaded.symbol == compiled.symbol and loaded.llvm_ir == compiled.llvm_ir
    _check_runs(loaded)


def _corrupt(path, how: str, rng) -> None:
    data = path.read_bytes()
    if how == "random":
        path.write_bytes(rng.bytes(len(data)))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":  # one bit of the machine code
        position = len(data) - 200
        path.write_bytes(data[:position] + bytes([data[position] ^ 0x10]) + data[position + 1 :])
    elif how == "random_after_header":
        header_end = data.index(b"}") + 1
        path.write_bytes(data[:header_end] + rng.bytes(len(data) - header_end))


@pytest.mark.parametrize("how", ["random", "empty", "truncated", "flipped", "random_after_header"])
def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path, how, caplog):
    rng = np.random.default_rng(0)
    _engine(tmp_path).compile(_program())
    (entry,) = tmp_path.glob("*.kiln")
    _corrupt(entry, how, rng)
    second = _engine(tmp_path)
    with caplog.at_level("WARNING", logger="kiln"):
        native = second.compile(_program())
    _check_runs(native)
    assert second.disk_cache.stats.rejected == 1 and second.disk_cache.stats.writes == 1
    assert "ignoring the disk cache entry" in caplog.text
    # The rewritten entry verifies again.
    third = _engine(tmp_path)
    _check_runs(third.compile(_program()))
    assert third.disk_cache.stats.hits == 1 and third.disk_cache.stats.rejected == 0


def test_an_entry_written_for_another_cpu_is_not_loaded(tmp_path):
    _engine(tmp_path).compile(_program())
    (entry,) = tmp_path.glob("*.kiln")
    data = entry.read_bytes()
    start = len(disk_cache.MAGIC) + 4
    length = int.from_bytes(data[len(disk_cache.MAGIC) : start], "little")
    header = json.loads(data[start : start + length])
    header["cpu"] = "some-other-cpu"
    new_header = json.dumps(header, sort_keys=True).encode()
    entry.write_bytes(
        disk_cache.MAGIC
        + len(new_header).to_bytes(4, "little")
        + new_header
        + data[start + length :]
    )
    second = _engine(tmp_path)
    _check_runs(second.compile(_program()))
    assert second.disk_cache.stats.reasons == {"written for another cpu": 1}


def test_corrupt_entries_never_crash_a_fresh_process(tmp_path):
    # The original failure: a process that finds garbage where its objects were died with a
    # segmentation fault. Here each run must exit cleanly with the right answer.
    script = textwrap.dedent("""
        import numpy as np, kiln, kiln.numpy as jnp
        f = kiln.jit(lambda x: jnp.sin(x) * 2 + x)
        x = np.linspace(-1, 1, 1000, dtype=np.float32)
        assert np.allclose(np.asarray(f(x)), np.sin(x) * 2 + x, atol=1e-5)
        print("ok")
        """)
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "cache"))
    run = lambda: subprocess.run(
        [sys.executable, "-c", script],
        env=env,  # noqa: E731
        capture_output=True,
        text=True,
        timeout=300,
    )
    first = run()
    assert first.returncode == 0 and first.stdout.strip() == "ok", first.stderr
    entries = list((tmp_path / "cache").glob("*.kiln"))
    assert entries
    rng = np.random.default_rng(1)
    for round_ in ("random", "empty"):
        for entry in entries:
            _corrupt(entry, round_, rng)
        result = run()
        assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
        assert "ignoring the disk cache entry" in result.stderr


def test_concurrent_writers_fill_one_directory_correctly(tmp_path):
    script = textwrap.dedent(
        """
        import sys, numpy as np
        sys.path.insert(0, %r)
        from tests.test_disk_cache import _engine, _program, _check_runs
        eng = _engine(sys.argv[1])
        for offset in range(12):
            _check_runs(eng.compile(_program(float(offset))), float(offset))
        print(eng.disk_cache.stats.rejected)
        """
        % os.getcwd()
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err
        assert out.strip() == "0"
    assert len(list(tmp_path.glob("*.kiln"))) == 12
    assert not list(tmp_path.glob("*.tmp"))
    reader = _engine(tmp_path)
    for offset in range(12):
        _check_runs(reader.compile(_program(float(offset))), float(offset))
    assert reader.disk_cache.stats.hits == 12


def test_directory_is_created_user_only(tmp_path):
    directory = tmp_path / "new" / "cache"
    assert disk_cache.usable_directory(directory) == directory
    assert stat.S_IMODE(directory.stat().st_mode) & 0o077 == 0


@pytest.mark.parametrize("kind", ["file", "shared"])
def test_an_unusable_directory_warns_once_and_compiles_natively(tmp_path, kind, monkeypatch):
    import kiln

    path = tmp_path / f"cache_{kind}"
    if kind == "file":
        path.write_text("not a directory")
    else:
        path.mkdir()
        path.chmod(0o777)
    monkeypatch.setattr(kiln.config, "cache_dir", str(path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = engine.engine()
        again = engine.engine()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and str(path) in messages[0]
    assert first is again and first.disk_cache is None
    _check_runs(first.compile(_program(5.0)), 5.0)  # native code, just no disk cache


def test_jax_compilation_cache_dir_turns_the_disk_cache_on(tmp_path):
    """config.update("jax_compilation_cache_dir", ...) is $KILN_CACHE_DIR: a second process
    finds the first one's objects and loads them instead of compiling."""
    script = textwrap.dedent("""
        import sys, numpy as np, kiln, kiln.numpy as jnp
        from kiln.runtime import engine
        kiln.config.update("jax_compilation_cache_dir", sys.argv[1])
        f = kiln.jit(lambda x: jnp.tanh(x) * 3 - x)
        x = np.linspace(-1, 1, 999, dtype=np.float32)
        assert np.allclose(np.asarray(f(x)), np.tanh(x) * 3 - x, atol=1e-5)
        print(engine.disk_cache_stats().get("hits", 0))
        """)
    env = {k: v for k, v in os.environ.items() if k != "KILN_CACHE_DIR"}
    run = lambda: subprocess.run(  # noqa: E731
        [sys.executable, "-c", script, str(tmp_path / "c")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    first, second = run(), run()
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert int(first.stdout) == 0 and int(second.stdout) > 0
    assert list((tmp_path / "c").glob("*.kiln"))

"""kiln's kernel library (kiln/codegen/llvm/gemm_library.py, kiln/runtime/kernel_library.py):
product kernels compiled once per target and dtype and called by name from generated code.

Each test runs per codegen target (conftest): a program compiled for a target calls that
target's library, never another's; the library is compiled once, found in the disk cache by a
later process, and a forked child whose parent was still compiling it compiles its own.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import multiprocessing
import os

import numpy as np
import pytest

import kiln
from kiln.codegen.llvm import gemm_library, llvm_pipeline, objects, target
from kiln.config import config
from kiln.runtime import engine, kernel_library

_RUNS = itertools.count()


def _product_inputs(rows: int):
    rng = np.random.default_rng(rows)
    return (
        rng.standard_normal((rows, 64)).astype(np.float32),
        rng.standard_normal((64, 96)).astype(np.float32),
    )


def test_symbols_name_their_target_and_dtype():
    current = target.current_target()
    name = gemm_library.symbol("small_gemm", np.float32)
    assert name.startswith(gemm_library.PREFIX) and "_f32_" in name
    assert gemm_library.parse(name) == (current, "small_gemm", np.dtype(np.float32))
    assert gemm_library.symbol("small_gemm", np.float64) != name
    other = target.make_target("x86-64-v2", runnable=False)
    assert gemm_library.symbol("small_gemm", np.float32, other) != name
    assert gemm_library.parse("kiln_cblas_sgemm") is None
    assert gemm_library.parse(gemm_library.PREFIX + "small_gemm_f32_unknowntag") is None


def test_a_program_calls_its_targets_library():
    rows = 40 + next(_RUNS)  # a new shape: this target compiles a new program
    a, b = _product_inputs(rows)
    got = np.asarray(kiln.jit(lambda x, y: x @ y)(a, b))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    key = kernel_library._key(target.current_target(), "small_gemm", np.float32)
    assert key in kernel_library._loaded
    # The loaded library's symbol resolves to its own code.
    name = gemm_library.symbol("small_gemm", np.float32)
    assert kernel_library._loaded[key].address(name)


def test_the_library_is_compiled_once_and_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(kernel_library, "PREBUILT", tmp_path / "nothing built")
    current = target.current_target()
    compiles = []
    original = kernel_library._compile

    def counting(*args, **kwargs):
        compiles.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(kernel_library, "_compile", counting)
    first = kernel_library._object(current, "small_gemm", np.float64)
    second = kernel_library._object(current, "small_gemm", np.float64)
    assert first == second
    assert len(compiles) == 1  # the second came from the disk cache
    assert engine._disk_cache_for(current).stats.hits >= 1


def test_modules_built_ahead_load_without_compiling(tmp_path, monkeypatch):
    current = target.current_target()
    store = tmp_path / "prebuilt"
    assert kernel_library.build(store, current) == len(gemm_library.KERNELS) * 2
    assert kernel_library.build(store, current) == 0  # (kept)
    monkeypatch.setattr(kernel_library, "PREBUILT", store)
    monkeypatch.setattr(config, "cache_dir", None)

    def no_compiling(*args):
        raise AssertionError("compiled although it was built ahead")

    original = kernel_library._compile
    monkeypatch.setattr(kernel_library, "_compile", no_compiling)
    for dtype in gemm_library.DTYPES:
        text = str(gemm_library.module(current, "small_gemm", dtype))
        assert kernel_library._object(current, "small_gemm", dtype) == original(text, current)
    # A store other users may write is not trusted: the module is compiled instead.
    store.chmod(0o777)
    monkeypatch.setattr(kernel_library, "_compile", original)
    assert kernel_library._prebuilt_cache(current) is None
    assert kernel_library._object(current, "small_gemm", np.float32)


def _child_product(rows: int):
    config.num_threads = 1
    kiln.clear_caches()
    a, b = _product_inputs(rows)
    return np.asarray(kiln.jit(lambda x, y: (x @ y) + 0.0)(a, b))


#: Libraries taken out of the process's table by tests: programs linked earlier still call them.
_RETIRED = []


def test_a_forked_child_does_not_wait_for_its_parents_compile():
    # A forked child inherits the parent's table of pending compiles but not the thread doing
    # them: it must compile its own library rather than wait for that one forever. (The
    # parent's compile is stood in for by a future that never completes, so that no LLVM call
    # is in flight when the process forks.)
    current = target.current_target()
    key = kernel_library._key(current, "small_gemm", np.float32)
    _RETIRED.append(kernel_library._loaded.pop(key, None))
    kernel_library._pending[key] = (concurrent.futures.Future(), os.getpid())
    rows = 70 + next(_RUNS)
    try:
        context = multiprocessing.get_context("fork")
        with context.Pool(1) as pool:
            got = pool.apply_async(_child_product, (rows,)).get(timeout=120)
    finally:
        kernel_library._pending.pop(key, None)
    a, b = _product_inputs(rows)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    kernel_library.ensure([gemm_library.symbol("small_gemm", np.float32)])  # the parent's own
    assert key in kernel_library._loaded
    again = np.asarray(kiln.jit(lambda x, y: (x @ y) - 0.0)(a, b))
    np.testing.assert_allclose(again, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", sorted(gemm_library.KERNELS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_module_defines_its_symbol_and_needs_nothing(kernel, dtype):
    current = target.current_target()
    text = str(gemm_library.module(current, kernel, dtype))
    name = gemm_library.symbol(kernel, dtype, current)
    assert f'define void @"{name}"' in text or f"define void @{name}" in text
    machine = llvm_pipeline.create_machine(current.triple, current.cpu_name, current.features)
    _, object_bytes = llvm_pipeline.compile_private(text, machine, "lean")
    assert objects.undefined_symbols(object_bytes) == []  # (no libc, no other library)


@pytest.mark.parametrize(
    "dtype, m, k, n, stored_transposed, kernel",
    [
        (np.float32, 300, 700, 600, None, "packed_gemm"),  # b beyond 1 MiB
        (np.float32, 64, 700, 96, None, "packed_gemm"),  # k beyond small_gemm's
        (np.float32, 200, 100, 64, None, "small_gemm"),
        (np.float32, 784, 128, 512, "a", "packed_gemm_ta"),  # a weight gradient's xᵀ @ g
        (np.float32, 300, 700, 600, "b", None),  # b transposed: BLAS
        (np.float64, 300, 700, 600, None, None),  # float64: BLAS
        (np.float32, 4, 700, 600, None, None),  # fewer rows than a block: BLAS
    ],
)
def test_products_take_the_library_kernel_that_fits(
    dtype, m, k, n, stored_transposed, kernel, monkeypatch
):
    from tests._testing import x64_mode

    called = []
    original = gemm_library.call

    def spy(builder, name, kind, arguments):
        called.append(name)
        return original(builder, name, kind, arguments)

    monkeypatch.setattr(gemm_library, "call", spy)
    k += next(_RUNS)  # a new depth per run: each target compiles its own program
    rng = np.random.default_rng(k)
    a = rng.standard_normal((k, m) if stored_transposed == "a" else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if stored_transposed == "b" else (k, n)).astype(dtype)
    # Which dim of each stored operand is contracted: a stored transposed contracts its rows.
    contract = (
        (0,) if stored_transposed == "a" else (1,),
        (1,) if stored_transposed == "b" else (0,),
    )
    with x64_mode(dtype == np.float64):
        product = kiln.jit(lambda x, y: kiln.lax.dot_general(x, y, (contract, ((), ()))))
        got = np.asarray(product(a, b))
    logical_a = a.T if stored_transposed == "a" else a
    logical_b = b.T if stored_transposed == "b" else b
    expected = logical_a.astype(np.float64) @ logical_b.astype(np.float64)
    assert called == ([kernel] * len(called) if kernel else [])
    assert called or kernel is None
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.sqrt(k))

"""kiln's register-blocked products with a small rhs (kiln/codegen/llvm/small_gemm.py).

The kernel (from kiln's kernel library, every extent and stride given at run time) is compiled
on its own for each codegen target (conftest runs every test per target) and checked against
NumPy in float64: row counts that fill whole blocks and leave a tail, one or two vectors of
columns per block, operands and result inside larger matrices (strides above the extents).
Then the products of a scan body and the chunks of a split product, where it replaces BLAS."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest
from llvmlite import ir

import kiln
import kiln.runtime.native
import kiln.numpy as jnp
from kiln.codegen.llvm import gemm_library, objects, small_gemm, target
from kiln.config import config
from tests._testing import jit_module, x64_mode


def _compile(dtype):
    """The kernel library's small_gemm for the current target, as a ctypes function
    (a, b, c, m, n, k, lda, ldb, ldc), and the library's object file."""
    current = target.current_target()
    module = gemm_library.module(current, "small_gemm", dtype)
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, *[ctypes.c_int64] * 6)
    return jit_module(module, gemm_library.symbol("small_gemm", dtype, current), signature)


def _constant(value):
    """The int of an LLVM constant, None for a value known only at run time."""
    return value.constant if isinstance(value, ir.Constant) else None


def _lanes(dtype) -> int:
    return small_gemm._layout(np.dtype(dtype))[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "rows, column_vectors, k, padding",
    [
        (32, 2, 64, 0),  # whole blocks only
        (13, 2, 37, 0),  # a full block and a tail (rows per block are 6 or 8)
        (5, 3, 20, 0),  # only a tail; an odd number of vectors: one vector per block
        (64, 4, 100, 3),  # operands and result inside wider matrices
        (2, 1, 2, 5),
        (203, 2, 48, 1),  # many rows, as a chunk of a split product has
    ],
)
def test_kernel_matches_numpy(dtype, rows, column_vectors, k, padding):
    m, n = rows, column_vectors * _lanes(dtype)
    lda, ldb, ldc = k + padding, n + padding, n + 2 * padding
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.standard_normal((m, lda)).astype(dtype)
    b = rng.standard_normal((k, ldb)).astype(dtype)
    c = np.full((m, ldc), 7.0, dtype)
    engine, run, code = _compile(np.dtype(dtype))
    run(a.ctypes.data, b.ctypes.data, c.ctypes.data, m, n, k, lda, ldb, ldc)
    expected = a[:, :k].astype(np.float64) @ b[:, :n].astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(c[:, :n], expected, rtol=tol, atol=tol * np.sqrt(k))
    assert np.all(c[:, n:] == 7.0)  # nothing written past the columns
    assert objects.undefined_symbols(code) == []


def test_fits_untransposed_products_with_a_small_rhs():
    f32 = np.float32
    lanes = _lanes(f32)
    assert small_gemm.fits(f32, False, False, 32, 256, 256)
    assert small_gemm.fits(np.float64, False, False, 32, 256, 256)
    assert not small_gemm.fits(f32, True, False, 32, 256, 256)
    assert not small_gemm.fits(f32, False, True, 32, 256, 256)
    assert not small_gemm.fits(np.float16, False, False, 32, 256, 256)
    assert small_gemm.fits(f32, False, False, None, 256, 256)  # rows known at run time
    assert small_gemm.fits(f32, False, False, 3200, 256, 256)
    assert not small_gemm.fits(f32, False, False, 32, None, 256)
    assert not small_gemm.fits(f32, False, False, 1, 256, 256)  # a row: gemv's job
    assert not small_gemm.fits(f32, False, False, 32, lanes + 1, 256)
    assert not small_gemm.fits(f32, False, False, 32, 1024, 1024)  # rhs beyond 1 MiB
    assert not small_gemm.fits(f32, False, False, 32, 1024, 128)  # rhs rows a page apart
    assert not small_gemm.fits(f32, False, False, 32, 256, 256, ldb=1024)
    assert not small_gemm.fits(f32, False, False, 8, 32, 1024)  # long sums stay with BLAS


_RUNS = itertools.count()


def _rnn(h0, w, u, b, xs):
    def cell(h, x):
        return jnp.tanh(h @ w + x @ u + b), None

    h, _ = kiln.lax.scan(cell, h0, xs)
    return h


def _rnn_reference(h0, w, u, b, xs):
    h = h0.astype(np.float64)
    for x in xs:
        h = np.tanh(h @ w + x @ u + b)
    return h


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scan_body_products_use_the_kernel(dtype, monkeypatch):
    # A new scan length per run, so that each target compiles its own program.
    batch, hidden, steps = 13, 64, 3 + next(_RUNS)
    rng = np.random.default_rng(6)
    h0 = rng.standard_normal((batch, hidden)).astype(dtype)
    w, u = (rng.standard_normal((hidden, hidden)).astype(dtype) / 16 for _ in range(2))
    b = rng.standard_normal(hidden).astype(dtype)
    xs = rng.standard_normal((steps, batch, hidden)).astype(dtype)
    emitted = []
    original = gemm_library.call

    def counting(builder, kernel, dtype, arguments):
        emitted.append(tuple(_constant(value) for value in arguments[3:6]))
        return original(builder, kernel, dtype, arguments)

    monkeypatch.setattr(gemm_library, "call", counting)
    with x64_mode(dtype == np.float64):
        got = np.asarray(kiln.jit(_rnn)(h0, w, u, b, xs))
    assert (batch, hidden, hidden) in emitted
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, _rnn_reference(h0, w, u, b, xs), rtol=tol, atol=tol)


def test_split_products_run_their_row_chunks_here(monkeypatch):
    """A product large enough to split across threads: each chunk's row count is a run-time
    value; with one thread the whole product is one static call. Both match NumPy."""
    rng = np.random.default_rng(7)
    rows = 1000 + next(_RUNS)  # a new shape per run: each target compiles its own program
    lhs = rng.standard_normal((rows, 200)).astype(np.float32)
    rhs = rng.standard_normal((200, 128)).astype(np.float32)
    emitted = []
    original = gemm_library.call

    def counting(builder, kernel, dtype, arguments):
        emitted.append(_constant(arguments[3]) or "run time")
        return original(builder, kernel, dtype, arguments)

    monkeypatch.setattr(gemm_library, "call", counting)
    expected = lhs.astype(np.float64) @ rhs
    threaded = np.asarray(kiln.jit(lambda a, b: a @ b)(lhs, rhs))
    monkeypatch.setattr(config, "num_threads", 1)
    single = np.asarray(kiln.jit(lambda a, b: (a @ b) * 1.0)(lhs, rhs))
    assert rows in emitted
    if kiln.runtime.native.num_threads() > 1:
        assert "run time" in emitted
    np.testing.assert_allclose(threaded, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(single, expected, rtol=1e-4, atol=1e-4)

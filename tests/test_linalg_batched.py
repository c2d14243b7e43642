"""The batched LAPACK impls of kiln's linalg primitives against SciPy, one matrix at a time."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.linalg as sla

from kiln.core import rules
from kiln.primitives import lapack_batched
from kiln.primitives.linalg_decomp import (
    cholesky_p,
    lu_p,
    triangular_solve_p,
    tridiagonal_solve_p,
)

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _impl(prim):
    """The NumPy impl of a primitive, called directly."""
    return rules.impl_rules[prim]


def _tol(dtype) -> float:
    return 1e-5 if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64)) else 1e-12


def _random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _close(actual, expected, dtype, scale=1.0):
    error = np.max(np.abs(np.asarray(actual) - expected)) / max(np.max(np.abs(expected)), 1.0)
    assert error <= _tol(dtype) * scale, error


def test_batched_loop_is_available():
    assert lapack_batched.available()


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_matches_per_matrix(dtype):
    rng = np.random.default_rng(0)
    x = _random(rng, (3, 2, 6, 6), dtype)
    a = (x @ np.conj(np.swapaxes(x, -1, -2)) + 6 * np.eye(6)).astype(dtype)
    # The upper triangle is not read: garbage there must not matter.
    garbage = a + np.triu(_random(rng, a.shape, dtype), 1)
    out = _impl(cholesky_p)(garbage)
    expected = np.stack([sla.cholesky(m, lower=True) for m in a.reshape(-1, 6, 6)])
    assert out.dtype == np.dtype(dtype)
    _close(out, expected.reshape(a.shape), dtype, 10)


def test_cholesky_failure_gives_nan_for_that_matrix_only():
    a = np.stack([np.eye(3), -np.eye(3), 2 * np.eye(3)]).astype(np.float32)
    out = _impl(cholesky_p)(a)
    assert np.isnan(out[1]).all()
    np.testing.assert_allclose(out[0], np.eye(3))
    np.testing.assert_allclose(out[2], np.sqrt(2) * np.eye(3), rtol=1e-6)


def _triangle(a, lower, unit_diagonal):
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        t = t - np.diag(np.diag(t)) + np.eye(a.shape[-1])
    return t


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("columns", [1, 3])
def test_triangular_solve_matches_per_matrix(dtype, columns):
    rng = np.random.default_rng(1)
    n = 5
    a = _random(rng, (2, 3, n, n), dtype) + 4 * np.eye(n, dtype=dtype)
    for left, lower, trans, conj, unit in itertools.product([True, False], repeat=5):
        shape = (2, 3, n, columns) if left else (2, 3, columns, n)
        b = _random(rng, shape, dtype)
        out = _impl(triangular_solve_p)(
            a,
            b,
            left_side=left,
            lower=lower,
            transpose_a=trans,
            conjugate_a=conj and np.dtype(dtype).kind == "c",
            unit_diagonal=unit,
        )
        expected = []
        for m, rhs in zip(a.reshape(-1, n, n), b.reshape((-1,) + shape[-2:])):
            t = _triangle(m, lower, unit)
            t = t.T if trans else t
            t = np.conj(t) if conj else t
            expected.append(sla.solve(t, rhs) if left else sla.solve(t.T, rhs.T).T)
        _close(out, np.stack(expected).reshape(shape), dtype, 100)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 5, 5), (2, 2, 4, 6), (2, 6, 4), (1, 1)])
def test_lu_matches_per_matrix(dtype, shape):
    rng = np.random.default_rng(2)
    x = _random(rng, shape, dtype)
    factors, pivots, permutation = _impl(lu_p)(x)
    m, n = shape[-2:]
    flat = x.reshape((-1, m, n))
    for i, matrix in enumerate(flat):
        lu, piv = sla.lu_factor(matrix)
        _close(factors.reshape(flat.shape)[i], lu, dtype, 10)
        np.testing.assert_array_equal(pivots.reshape(-1, min(m, n))[i], piv)
        p, _, _ = sla.lu(matrix)
        np.testing.assert_array_equal(matrix[permutation.reshape(-1, m)[i]], p.T @ matrix)
    assert pivots.dtype == np.int32 and permutation.dtype == np.int32


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 2, 7])
def test_tridiagonal_solve_matches_per_matrix(dtype, m):
    rng = np.random.default_rng(3)
    dl, du = (_random(rng, (2, 3, m), dtype) for _ in range(2))
    d = _random(rng, (2, 3, m), dtype) + 4
    b = _random(rng, (2, 3, m, 2), dtype)
    out = _impl(tridiagonal_solve_p)(dl, d, du, b, perturb_singular=False)
    for index in np.ndindex(2, 3):
        matrix = np.diag(d[index]) + np.diag(dl[index][1:], -1) + np.diag(du[index][:-1], 1)
        _close(out[index], np.linalg.solve(matrix, b[index]), dtype, 100)


def test_tridiagonal_singular_system_gives_nan():
    d = np.array([[1.0, 1.0], [0.0, 0.0]])
    zero = np.zeros((2, 2))
    out = _impl(tridiagonal_solve_p)(zero, d, zero, np.ones((2, 2, 1)), perturb_singular=False)
    np.testing.assert_allclose(out[0], np.ones((2, 1)))
    assert np.isnan(out[1]).all()


def test_large_batch_split_across_threads_matches():
    # Enough work per call that the batch is cut into pieces for several threads.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 40, 40))
    a = x @ np.swapaxes(x, -1, -2) + 40 * np.eye(40)
    out = _impl(cholesky_p)(a)
    expected = np.linalg.cholesky(a)
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eig_matches_per_matrix_geev(dtype):
    from kiln.primitives.linalg_spectral import eig_p

    rng = np.random.default_rng(5)
    x = _random(rng, (2, 3, 5, 5), dtype)
    w, vl, vr = _impl(eig_p)(
        x,
        compute_left_eigenvectors=True,
        compute_right_eigenvectors=True,
        enable_eigvec_derivs=False,
        implementation=None,
    )
    complex_dtype = np.result_type(dtype, np.complex64)
    assert w.dtype == vl.dtype == vr.dtype == complex_dtype
    for index in np.ndindex(2, 3):
        rw, rvl, rvr = sla.eig(x[index], left=True, right=True)
        _close(w[index], rw, dtype, 100)
        _close(vl[index], rvl, dtype, 1000)
        _close(vr[index], rvr, dtype, 1000)


def test_eig_of_a_non_finite_matrix_is_nan_for_that_matrix_only():
    from kiln.primitives.linalg_spectral import eig_p

    x = np.stack([np.eye(3), np.full((3, 3), np.inf)]).astype(np.float32)
    w, vr = _impl(eig_p)(
        x,
        compute_left_eigenvectors=False,
        compute_right_eigenvectors=True,
        enable_eigvec_derivs=False,
        implementation=None,
    )
    np.testing.assert_allclose(w[0], np.ones(3))
    assert np.isnan(w[1]).all() and np.isnan(vr[1]).all()


def test_inputs_are_not_overwritten():
    rng = np.random.default_rng(6)
    b = rng.standard_normal((3, 1, 2))  # a shape whose transposed view is still contiguous
    d = rng.standard_normal((3, 1)) + 4
    zero = np.zeros((3, 1))
    kept = b.copy()
    _impl(tridiagonal_solve_p)(zero, d, zero, b, perturb_singular=False)
    np.testing.assert_array_equal(b, kept)
    x = rng.standard_normal((2, 1, 4))
    kept = x.copy()
    _impl(lu_p)(x)
    np.testing.assert_array_equal(x, kept)


def test_batch_loop_is_built_for_the_generic_cpu():
    import llvmlite.binding as llvm

    library = lapack_batched._library()
    assert library._machine.target_data is not None
    module = llvm.parse_assembly(lapack_batched._loop_ir(4))
    module.triple = llvm.get_process_triple()
    assembly = library._machine.emit_assembly(module)
    assert "kiln_batched_call_4" in assembly
    for register in ("ymm", "zmm"):  # no wide vector registers: no host features in use
        assert register not in assembly

"""Edge cases, errors and JAX conventions of the Householder reductions, Schur-based functions,
qdwh, cholesky_update and symmetric_product (the value checks are op-record rows)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

import kiln
import kiln.numpy as jnp
import kiln.scipy.linalg as ksl
from kiln import lax
from tests._testing import assert_close

L = lax.linalg


def test_new_names_are_in_lax_linalg():
    for name in (
        "hessenberg",
        "householder_product",
        "ormqr",
        "schur",
        "tridiagonal",
        "cholesky_update",
        "symmetric_product",
        "qdwh",
        "EigImplementation",
        "EighImplementation",
        "SvdAlgorithm",
    ):
        assert hasattr(L, name), name
    for name in ("schur", "rsf2csf", "hessenberg", "sqrtm", "funm", "polar"):
        assert hasattr(ksl, name), name


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: L.hessenberg(a)[0],
        lambda a: L.tridiagonal(a)[1],
        lambda a: L.schur(a)[0],
        lambda a: L.householder_product(a, jnp.ones(2)),
        lambda a: L.ormqr(a, jnp.ones(2), a),
        lambda a: L.symmetric_product(a, a),
    ],
)
def test_jax_defines_no_derivative_and_neither_does_kiln(fn):
    a = jnp.eye(3) + 0.1
    with pytest.raises(NotImplementedError, match="Differentiation rule for '.*' not implemented"):
        kiln.grad(lambda x: jnp.real(fn(x)).sum())(a)


def test_cholesky_update_matches_jax_and_has_no_batching_rule():
    r = np.triu(np.array([[2.0, 1, 0], [0, 3, 1], [0, 0, 1]], np.float32))
    w = np.array([1.0, -1, 2], np.float32)
    out = np.asarray(L.cholesky_update(r, w))
    # JAX 0.10.2's result for the same arguments.
    expected = [[2.236068, 0.4472136, 0.8944272], [0.0, 3.2863355, 0.18257421], [0, 0, 2.27303]]
    assert_close(out, np.array(expected, np.float32), 1e-5)
    assert_close(out.T @ out, r.T @ r + np.outer(w, w), 1e-5)
    with pytest.raises(NotImplementedError, match="Batching rule for 'cholesky_update'"):
        kiln.vmap(L.cholesky_update)(jnp.ones((2, 3, 3)), jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="Rank-1 update"):
        L.cholesky_update(jnp.eye(3), jnp.ones(2))
    with pytest.raises(TypeError, match="float32 or float64"):
        L.cholesky_update(jnp.eye(2, dtype=jnp.complex64), jnp.ones(2, jnp.complex64))


def test_symmetric_product_and_symmetrize_output():
    out = L.symmetric_product(jnp.ones((2, 3)), jnp.eye(2), alpha=2.0, beta=3.0)
    assert_close(out, np.array([[9.0, 6.0], [6.0, 9.0]], np.float32), 1e-7)
    c = jnp.array([[1.0, 5.0], [0.0, 1.0]])  # an upper triangle that is not c's transpose
    mirrored = L.symmetric_product(jnp.zeros((2, 1)), c, beta=1.0, symmetrize_output=True)
    assert_close(mirrored, np.array([[1.0, 0.0], [0.0, 1.0]], np.float32), 1e-7)
    with pytest.raises(ValueError, match="symmetric_update expects"):
        L.symmetric_product(jnp.ones((2, 3)), jnp.eye(3))


def test_shape_and_option_errors():
    with pytest.raises(ValueError, match="square matrix"):
        L.tridiagonal(jnp.zeros((0, 0)))
    with pytest.raises(ValueError, match="Hessenberg"):
        L.hessenberg(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="at least as many rows"):
        L.householder_product(jnp.ones((2, 3)), jnp.ones(2))
    with pytest.raises(ValueError, match="minimum"):
        L.householder_product(jnp.ones((3, 2)), jnp.ones(3))
    with pytest.raises(ValueError, match="same number of rows"):
        L.ormqr(jnp.ones((3, 2)), jnp.ones(2), jnp.ones((4, 2)))
    with pytest.raises(NotImplementedError, match="sort feature"):
        L.schur(jnp.eye(2), sort_eig_vals=True)
    with pytest.raises(TypeError, match="hessenberg does not accept dtype int32"):
        L.hessenberg(jnp.eye(2, dtype=jnp.int32))


def test_schur_without_vectors_and_nan_input():
    a = jnp.array([[0.0, 1.0], [-1.0, 0.0]])  # eigenvalues +-i: one 2 x 2 block
    t = L.schur(a, compute_schur_vectors=False)
    assert np.asarray(t).shape == (2, 2)
    # The block's eigenvalues are a's.
    assert_close(
        np.sort_complex(np.linalg.eigvals(np.asarray(t))),
        np.array([-1j, 1j]),
        1e-6,
        check_dtype=False,
    )
    # NaN input: what LAPACK's gees leaves, as in JAX.
    t, z = L.schur(jnp.array([[np.nan, 1.0], [2.0, 1.0]]))
    assert np.isnan(np.asarray(z)).all()
    assert np.isnan(np.asarray(t)[0]).all() and np.asarray(t)[1, 0] == 0


def test_hessenberg_q_reconstructs_and_matches_scipy_batched():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5, 5)).astype(np.float32)
    h, q = ksl.hessenberg(a, calc_q=True)
    for i in range(3):
        rh, rq = scipy.linalg.hessenberg(a[i].astype(np.float64), calc_q=True)
        assert_close(h[i], rh.astype(np.float32), 2e-5)
        assert_close(q[i], rq.astype(np.float32), 2e-5)
    assert_close(jnp.asarray(ksl.hessenberg(jnp.zeros((0, 0)))), np.zeros((0, 0), np.float32))


def test_tridiagonal_reconstructs_from_its_diagonals():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))
    a = (x + x.conj().T).astype(np.complex64)
    _, d, e, _ = L.tridiagonal(a, lower=True)
    tri = np.diag(np.asarray(d)) + np.diag(np.asarray(e), -1) + np.diag(np.asarray(e), 1)
    assert np.asarray(d).dtype == np.float32
    assert_close(
        np.linalg.eigvalsh(tri),
        np.linalg.eigvalsh(a.astype(np.complex128)),
        1e-4,
        check_dtype=False,
    )


def test_qdwh_follows_jax():
    a = np.array([[4.0, 1, 0.5], [1, 3, 0.2], [0.5, 0.2, 2], [1, 1, 1]], np.float32)
    u, h, iterations, converged = L.qdwh(a)
    # JAX 0.10.2: 4 iterations, converged; its u to float32 rounding.
    assert int(iterations) == 4 and bool(converged)
    expected_u = np.array(
        [
            [0.99217099, -0.02301829, -0.04397823],
            [-0.00673891, 0.97121817, -0.05988438],
            [-0.00513583, -0.03591777, 0.91997302],
            [0.12459911, 0.23434013, 0.38487589],
        ],
        np.float32,
    )
    assert_close(u, expected_u, 2e-5)
    assert_close(np.asarray(u) @ np.asarray(h), a, 2e-5)
    _, _, iterations, converged = L.qdwh(a, max_iterations=2)
    assert int(iterations) == 2 and not bool(converged)
    jitted = kiln.jit(lambda x: L.qdwh(x)[0])(a)
    assert_close(jitted, np.asarray(u), 1e-6)
    with pytest.raises(ValueError, match="M >= N"):
        L.qdwh(jnp.ones((2, 3)))


def test_polar_sides_methods_and_errors():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    u, p = ksl.polar(a, side="left")
    ru, rp = scipy.linalg.polar(a.astype(np.float64), side="left")
    assert_close(u, ru.astype(np.float32), 1e-4)
    assert_close(p, rp.astype(np.float32), 1e-4)
    with pytest.raises(NotImplementedError, match="qdwh"):
        ksl.polar(a, side="right")
    with pytest.raises(ValueError, match="'right' or 'left'"):
        ksl.polar(a, side="top")
    with pytest.raises(ValueError, match="Unknown polar decomposition method"):
        ksl.polar(a, method="newton")
    with pytest.raises(ValueError, match="2-D"):
        ksl.polar(jnp.ones(3))


def test_sqrtm_funm_and_rsf2csf_errors():
    with pytest.raises(NotImplementedError, match="Blocked"):
        ksl.sqrtm(jnp.eye(2), blocksize=2)
    with pytest.raises(ValueError, match="square"):
        ksl.funm(jnp.ones((2, 3)), jnp.exp)
    with pytest.raises(ValueError, match="Input 'T' must be square"):
        ksl.rsf2csf(jnp.ones((2, 3)), jnp.eye(2))
    with pytest.raises(ValueError, match="shapes must match"):
        ksl.rsf2csf(jnp.eye(2), jnp.eye(3))
    # sqrtm of a matrix with a negative eigenvalue is complex, as SciPy's.
    a = np.array([[-4.0, 1.0], [0.0, 9.0]])
    root = np.asarray(ksl.sqrtm(a.astype(np.float32)))
    assert_close(root @ root, a.astype(np.complex64), 1e-5)
    f, error = ksl.funm(np.diag([1.0, 2.0]).astype(np.float32), jnp.log, disp=False)
    assert_close(f, np.diag(np.log([1.0, 2.0])).astype(np.complex64), 1e-6)
    assert 0 < float(error) < 1e-5

"""kiln.numpy.linalg and kiln.lax.linalg: the op-record rows eagerly and under jit, then edge
cases, errors and derivative conventions."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from tests._testing import assert_close, check_record_eager, check_record_jit, x64_mode
from tests.op_records import ALL_RECORDS

LINALG_RECORDS = [r for r in ALL_RECORDS if r.family == "linalg"]
CASES = [(r, s, d) for r in LINALG_RECORDS for s, d in r.cases()]
IDS = [i for r in LINALG_RECORDS for i in r.ids()]


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_record_eager(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_record_jit(record, shapes, dtype):
    check_record_jit(record, shapes, dtype)


# --- helpers ---------------------------------------------------------------------------------


def _rng(seed=0):
    return np.random.default_rng(seed)


def _well_conditioned(shape, dtype=np.float64, seed=0):
    from tests.op_records_linalg import well_conditioned

    return well_conditioned(shape, np.dtype(dtype), _rng(seed))


def _spd(shape, dtype=np.float64, seed=0):
    from tests.op_records_linalg import spd

    return spd(shape, np.dtype(dtype), _rng(seed))


def _grads(f, args, order=2):
    """check_grads in float64 (complex128), forward and reverse."""
    from kiln.test_util import check_grads

    with x64_mode(True):
        check_grads(
            f,
            [jnp.asarray(a) for a in args],
            order=order,
            modes=("fwd", "rev"),
            atol=1e-5,
            rtol=1e-5,
            eps=1e-6,
        )


# --- errors ----------------------------------------------------------------------------------


def test_errors_name_the_problem():
    square = jnp.ones((3, 3))
    with pytest.raises(ValueError, match="square"):
        lax.linalg.cholesky(jnp.ones((2, 3)))
    with pytest.raises(TypeError, match="does not accept dtype int32"):
        lax.linalg.lu(jnp.ones((3, 3), jnp.int32))
    with pytest.raises(TypeError, match="float16"):
        lax.linalg.qr(jnp.ones((3, 3), jnp.float16))
    with pytest.raises(ValueError, match="Incompatible shapes"):
        lax.linalg.triangular_solve(square, jnp.ones((2, 4)), left_side=True)
    with pytest.raises(ValueError, match="has to exceed"):
        lax.linalg.lu_pivots_to_permutation(jnp.zeros((4,), jnp.int32), 3)
    with pytest.raises(ValueError, match="at least two dimensional"):
        jnp.linalg.solve(jnp.ones(3), jnp.ones(3))
    with pytest.raises(ValueError, match="Invalid shapes for solve"):
        jnp.linalg.solve(jnp.ones((2, 3, 3)), jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"\[..., n, n\]"):
        jnp.linalg.inv(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"\[..., n, n\]"):
        jnp.linalg.det(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="Unknown slogdet method"):
        jnp.linalg.slogdet(square, method="cholesky")
    with pytest.raises(ValueError, match="Unsupported QR decomposition mode"):
        jnp.linalg.qr(square, mode="full")
    with pytest.raises(ValueError, match="UPLO"):
        jnp.linalg.eigh(square, UPLO="X")
    with pytest.raises(ValueError, match="only one of rtol and rcond"):
        jnp.linalg.pinv(square, rtol=0.1, rcond=0.1)
    with pytest.raises(ValueError, match="only one of tol or rtol"):
        jnp.linalg.matrix_rank(square, rtol=0.1, tol=0.1)
    with pytest.raises(TypeError, match="exponent must be an integer"):
        jnp.linalg.matrix_power(square, 1.5)
    with pytest.raises(TypeError, match="square"):
        jnp.linalg.matrix_power(jnp.ones((2, 3)), 2)
    with pytest.raises(ValueError, match="ind must be a positive integer"):
        jnp.linalg.tensorinv(jnp.ones((2, 2)), ind=0)
    with pytest.raises(ValueError, match="at least two arrays"):
        jnp.linalg.multi_dot([square])
    with pytest.raises(TypeError, match="kiln.numpy.array"):
        jnp.linalg.det([[1.0, 2.0], [3.0, 4.0]])


# --- edge cases ------------------------------------------------------------------------------


def test_cholesky_of_a_matrix_that_is_not_positive_definite_gives_nans_for_it_only():
    good = _spd((3, 3))
    batch = np.stack([good, -good]).astype(np.float32)
    out = np.asarray(jnp.linalg.cholesky(batch))
    assert_close(out[0], np.linalg.cholesky(good).astype(np.float32), 1e-5)
    assert np.isnan(out[1]).all()


def test_cholesky_reads_only_the_lower_triangle_without_symmetrizing():
    a = _spd((4, 4)).astype(np.float32)
    garbage = a + np.triu(np.full((4, 4), 100.0, np.float32), 1)
    out = lax.linalg.cholesky(garbage, symmetrize_input=False)
    assert_close(out, np.linalg.cholesky(a), 1e-5)


def test_singular_systems_give_infinities_not_errors():
    x = np.asarray(jnp.linalg.solve(jnp.zeros((2, 2)), jnp.ones(2)))
    assert not np.isfinite(x).any()
    assert not np.isfinite(np.asarray(jnp.linalg.inv(jnp.zeros((3, 3))))).all()
    sign, logdet = jnp.linalg.slogdet(jnp.zeros((4, 4)))
    assert float(sign) == 0 and float(logdet) == -np.inf
    assert float(jnp.linalg.det(jnp.zeros((4, 4)))) == 0
    assert float(jnp.linalg.cond(jnp.array([[1.0, 0.0], [0.0, 0.0]]))) == np.inf


def test_empty_matrices():
    empty = jnp.zeros((2, 0, 0))
    assert_close(jnp.linalg.det(empty), np.ones(2, np.float32))
    assert jnp.linalg.inv(empty).shape == (2, 0, 0)
    assert jnp.linalg.cholesky(empty).shape == (2, 0, 0)
    factors, pivots, permutation = lax.linalg.lu(jnp.zeros((0, 3)))
    assert factors.shape == (0, 3) and pivots.shape == (0,) and permutation.shape == (0,)
    u, s, vh = jnp.linalg.svd(jnp.zeros((3, 0)))
    assert (u.shape, s.shape, vh.shape) == ((3, 3), (0,), (0, 0))
    w, v = jnp.linalg.eigh(jnp.zeros((0, 0)))
    assert w.shape == (0,) and v.shape == (0, 0)
    q, r = jnp.linalg.qr(jnp.zeros((0, 2)))
    assert q.shape == (0, 0) and r.shape == (0, 2)


def test_lu_reconstructs_the_permuted_matrix_and_pivots_agree():
    a = _rng().standard_normal((2, 5, 3)).astype(np.float32)
    factors, pivots, permutation = (np.asarray(t) for t in lax.linalg.lu(a))
    assert pivots.dtype == np.int32 and permutation.dtype == np.int32
    lower = np.tril(factors[..., :, :3], -1) + np.eye(5, 3)
    upper = np.triu(factors[..., :3, :])
    assert_close(
        lower @ upper, np.take_along_axis(a, permutation[..., None], -2), 1e-5, check_dtype=False
    )
    assert_close(lax.linalg.lu_pivots_to_permutation(pivots, 5), permutation)


def test_dtypes_follow_jax():
    ints = jnp.array([[2, 1], [1, 3]])
    assert jnp.linalg.inv(ints).dtype == jnp.float32
    assert jnp.linalg.eigvals(jnp.eye(3)).dtype == jnp.complex64
    w, v = jnp.linalg.eigh(jnp.eye(2, dtype=jnp.complex64))
    assert w.dtype == jnp.float32 and v.dtype == jnp.complex64
    assert jnp.linalg.svd(jnp.eye(2, dtype=jnp.complex64), compute_uv=False).dtype == jnp.float32
    assert jnp.linalg.matrix_rank(jnp.eye(3)).dtype == jnp.int32
    with x64_mode(True):
        assert jnp.linalg.det(np.eye(3)).dtype == jnp.float64


def test_svd_hermitian_matches_the_general_svd():
    a = _rng().standard_normal((4, 4)).astype(np.float32)
    a = a + a.T
    u, s, vh = jnp.linalg.svd(a, hermitian=True)
    assert_close(s, np.linalg.svd(a, compute_uv=False), 1e-4)
    assert_close(np.asarray(u) @ np.diag(np.asarray(s)) @ np.asarray(vh), a, 1e-4)


def test_lstsq_numpy_residuals_are_empty_for_wide_systems():
    a, b = _rng().standard_normal((2, 4)), _rng(1).standard_normal(2)
    x, resid, rank, s = jnp.linalg.lstsq(a, b, numpy_resid=True)
    assert resid.shape == (0,) and int(rank) == 2
    assert_close(x, np.linalg.lstsq(a, b, rcond=None)[0].astype(np.float32), 1e-5)


# --- derivatives -----------------------------------------------------------------------------


def test_det_gradient_is_the_adjugate_even_where_singular():
    a = _well_conditioned((5, 5))
    with x64_mode(True):
        grad = kiln.grad(jnp.linalg.det)(a)
    assert_close(grad, np.linalg.det(a) * np.linalg.inv(a).T, 1e-10, check_dtype=False)
    # rank n - 1 with the zero pivot last: adj = det of the leading block at the corner
    singular = np.diag([2.0, 3.0, 0.5, 0.0]).astype(np.float32)
    expected = np.zeros((4, 4), np.float32)
    expected[3, 3] = 3.0
    assert_close(kiln.grad(jnp.linalg.det)(singular), expected)
    # rank below n - 1: the adjugate is zero
    assert_close(kiln.grad(jnp.linalg.det)(jnp.zeros((4, 4))), np.zeros((4, 4), np.float32))


def test_slogdet_gradient_is_the_inverse_transpose():
    a = -_well_conditioned((4, 4), seed=3)
    with x64_mode(True):
        grad = kiln.grad(lambda x: jnp.linalg.slogdet(x)[1])(a)
        sign_grad = kiln.grad(lambda x: jnp.linalg.slogdet(x)[0])(a)
    assert_close(grad, np.linalg.inv(a).T, 1e-10, check_dtype=False)
    assert_close(sign_grad, np.zeros((4, 4)), 0, check_dtype=False)


def test_eigh_derivative_with_a_repeated_eigenvalue_follows_jax():
    """Where eigenvalues repeat, the eigenvectors are not unique and JAX's rule divides by zero
    between them (their tangents are not finite); everything else is finite and matches JAX:
    for a = diag(1, 1, 2), w' = (0, 8, 16) and the third eigenvector moves by (8, 12, 0)."""
    a = np.diag([1.0, 1.0, 2.0]).astype(np.float32)
    t = np.arange(9.0, dtype=np.float32).reshape(3, 3)
    t = t + t.T
    (w, v), (w_dot, v_dot) = kiln.jvp(lambda x: tuple(jnp.linalg.eigh(x)), (a,), (t,))
    assert_close(w_dot, np.array([0.0, 8.0, 16.0], np.float32), 1e-5)
    assert not np.isfinite(np.asarray(v_dot)[:, :2]).all()
    assert_close(np.asarray(v_dot)[:, 2], np.array([8.0, 12.0, 0.0], np.float32), 1e-5)


def test_eigh_jvp_matches_perturbation_theory():
    a = _rng(4).standard_normal((4, 4))
    a = a + a.T
    t = _rng(5).standard_normal((4, 4))
    t = t + t.T
    with x64_mode(True):
        (w, v), (w_dot, v_dot) = kiln.jvp(lambda x: tuple(jnp.linalg.eigh(x)), (a,), (t,))
    w_ref, v_ref = np.linalg.eigh(a)
    projected = v_ref.T @ t @ v_ref
    assert_close(w_dot, np.diag(projected), 1e-10, check_dtype=False)
    gaps = w_ref[None, :] - w_ref[:, None]
    np.fill_diagonal(gaps, np.inf)
    signs = np.sign(np.asarray(v)[0] * v_ref[0])
    assert_close(np.asarray(v_dot) * signs, v_ref @ (projected / gaps), 1e-8, check_dtype=False)


def test_eigenvalues_of_eig_are_differentiable_eigenvectors_only_on_request():
    a = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    # d(sum of eigenvalues)/da = d(trace)/da = I.
    grad = kiln.grad(lambda x: jnp.real(jnp.linalg.eigvals(x)).sum())(a)
    assert_close(grad, np.eye(2), 1e-6, check_dtype=False)
    with pytest.raises(NotImplementedError, match="enable_eigvec_derivs"):
        kiln.grad(lambda x: jnp.real(jnp.linalg.eig(x)[1]).sum())(a)
    # JAX 0.10.2's values for the same loss (geev's normalization differentiated).
    expected = np.array([[0.0535071, 0.05660803], [0.01576841, -0.0535071]])
    for index in (1, 2):
        grad = kiln.grad(
            lambda x, i=index: jnp.abs(lax.linalg.eig(x, enable_eigvec_derivs=True)[i]).sum()
        )(a)
        assert_close(grad, expected, 1e-5, check_dtype=False)


def test_eig_options_follow_jax():
    a = jnp.eye(2)
    with pytest.raises(ValueError, match="lapack"):
        lax.linalg.eig(a, implementation=lax.linalg.EigImplementation.MAGMA)
    with pytest.warns(DeprecationWarning, match="use_magma"):
        w, _, _ = lax.linalg.eig(a, use_magma=False)
    assert_close(w, np.ones(2), 1e-7, check_dtype=False)
    with pytest.raises(NotImplementedError, match="Jacobi"):
        lax.linalg.eigh(a, implementation=lax.linalg.EighImplementation.JACOBI)
    with pytest.raises(NotImplementedError, match="TPU"):
        lax.linalg.eigh(a, implementation=lax.linalg.EighImplementation.QDWH)
    v, w = lax.linalg.eigh(a, implementation=lax.linalg.EighImplementation.QR)
    assert_close(w, np.ones(2), 1e-7, check_dtype=False)
    with pytest.raises(NotImplementedError, match="Jacobi and Polar"):
        lax.linalg.svd(a, algorithm=lax.linalg.SvdAlgorithm.POLAR)
    s = lax.linalg.svd(a, compute_uv=False, algorithm=lax.linalg.SvdAlgorithm.QR)
    assert_close(s, np.ones(2), 1e-7, check_dtype=False)
    q, r = lax.linalg.qr(a, use_magma=False)
    assert_close(q @ r, np.eye(2), 1e-6, check_dtype=False)


def test_svd_of_a_non_square_matrix_has_no_full_matrices_derivative():
    with pytest.raises(NotImplementedError, match="full matrices"):
        kiln.jvp(lambda x: lax.linalg.svd(x)[0], (jnp.ones((3, 2)),), (jnp.ones((3, 2)),))


@pytest.mark.parametrize(
    "name,fn,make",
    [
        ("qr_wide", lambda a: tuple(jnp.linalg.qr(a)), lambda: _rng().standard_normal((3, 5))),
        (
            "qr_complete_batched",
            lambda a: tuple(jnp.linalg.qr(a, mode="complete")),
            lambda: _rng().standard_normal((2, 5, 3)),
        ),
        ("svd_wide", None, lambda: _rng().standard_normal((3, 5))),
        ("cholesky_batched", jnp.linalg.cholesky, lambda: _spd((2, 4, 4))),
        ("solve_batched", None, lambda: _well_conditioned((2, 3, 3))),
        ("eigh_batched", None, lambda: _rng().standard_normal((2, 4, 4))),
        ("det_batched", jnp.linalg.det, lambda: _well_conditioned((3, 4, 4))),
        ("pinv_wide", jnp.linalg.pinv, lambda: _rng().standard_normal((3, 5))),
        ("pinv_hermitian", lambda a: jnp.linalg.pinv(a, hermitian=True), lambda: _spd((4, 4))),
        ("lu_wide", lambda a: lax.linalg.lu(a)[0], lambda: _rng().standard_normal((3, 5))),
    ],
)
def test_gradients_beyond_the_table(name, fn, make):
    from tests.op_records_linalg import kiln_eigh, kiln_svd

    a = make()
    if name == "svd_wide":
        fn = kiln_svd
    elif name == "eigh_batched":
        fn = kiln_eigh
    elif name == "solve_batched":
        b = _rng(1).standard_normal((2, 3, 2))
        _grads(jnp.linalg.solve, [a, b])
        return
    _grads(fn, [a])


@pytest.mark.parametrize(
    "name",
    ["cholesky", "solve", "det", "inv", "qr", "eigh", "svd", "lu", "triangular_solve", "slogdet"],
)
def test_complex_gradients(name):
    from tests.op_records_linalg import kiln_eigh, kiln_svd

    dtype = np.complex128
    square = _well_conditioned((3, 3), dtype)
    args = [square]
    fn = {
        "cholesky": jnp.linalg.cholesky,
        "det": jnp.linalg.det,
        "inv": jnp.linalg.inv,
        "qr": lambda a: tuple(jnp.linalg.qr(a)),
        "eigh": kiln_eigh,
        "svd": kiln_svd,
        "lu": lambda a: lax.linalg.lu(a)[0],
        "slogdet": lambda a: tuple(jnp.linalg.slogdet(a)),
    }.get(name)
    if name == "cholesky":
        args = [_spd((3, 3), dtype)]
    elif name == "solve":
        fn, args = jnp.linalg.solve, [square, _rng(2).standard_normal((3, 2)) + 1j]
    elif name == "triangular_solve":
        args = [square, _rng(2).standard_normal((3, 2)) + 1j]

        def fn(a, b):
            return lax.linalg.triangular_solve(
                a, b, left_side=True, lower=True, transpose_a=True, conjugate_a=True
            )

    elif name in ("qr", "svd", "lu"):
        args = [_rng(3).standard_normal((4, 3)) + 1j * _rng(4).standard_normal((4, 3))]
    _grads(fn, args, order=1)


def test_triangular_solve_transpose_is_the_adjoint_map():
    a = _well_conditioned((4, 4))
    ct = _rng(1).standard_normal((2, 4))
    x = _rng(2).standard_normal((2, 4))
    params = dict(left_side=False, lower=False, transpose_a=True, unit_diagonal=False)
    with x64_mode(True):
        f = lambda b: lax.linalg.triangular_solve(jnp.asarray(a), b, **params)  # noqa: E731
        (transposed,) = kiln.linear_transpose(f, jnp.asarray(x))(jnp.asarray(ct))
        forward = np.asarray(f(jnp.asarray(x)))
    assert np.isclose(np.sum(ct * forward), np.sum(np.asarray(transposed) * x), rtol=1e-12)


# --- batching --------------------------------------------------------------------------------


def test_vmap_of_the_primitives_over_inner_axes():
    a = _rng().standard_normal((4, 3, 4)).astype(np.float32)  # batch on axis 1
    out = kiln.vmap(lax.linalg.lu, in_axes=1, out_axes=(0, 1, 0))(a)
    for i in range(3):
        expected = lax.linalg.lu(a[:, i, :])
        assert_close(np.asarray(out[0])[i], np.asarray(expected[0]))
        assert_close(np.asarray(out[1])[:, i], np.asarray(expected[1]))
        assert_close(np.asarray(out[2])[i], np.asarray(expected[2]))
    spd = np.moveaxis(_spd((3, 4, 4)).astype(np.float32), 0, 2)
    rhs = _rng(2).standard_normal((4, 2)).astype(np.float32)
    solved = kiln.vmap(
        lambda m: lax.linalg.triangular_solve(
            lax.linalg.cholesky(m), rhs, left_side=True, lower=True
        ),
        in_axes=2,
    )(spd)
    for i in range(3):
        factor = np.linalg.cholesky(spd[..., i].astype(np.float64))
        assert_close(np.asarray(solved)[i], np.linalg.solve(factor, rhs), 1e-4)


def test_grad_of_a_batched_cholesky_solve_under_jit_matches_finite_differences():
    a = _spd((3, 4, 4), seed=7)
    b = _rng(8).standard_normal((3, 4, 1))

    def loss(m, rhs):
        factor = lax.linalg.cholesky(m)
        y = lax.linalg.triangular_solve(factor, rhs, left_side=True, lower=True)
        x = lax.linalg.triangular_solve(factor, y, left_side=True, lower=True, transpose_a=True)
        return jnp.sum(x * x)

    with x64_mode(True):
        grad_a, grad_b = kiln.jit(kiln.grad(loss, argnums=(0, 1)))(a, b)
        x = np.linalg.solve(a, b)
        # d/db |A^-1 b|^2 = 2 A^-T A^-1 b; d/dA = -A^-T (2 A^-1 b) x^T, symmetrized by cholesky
        expected_b = 2 * np.linalg.solve(np.swapaxes(a, -1, -2), x)
        g = -expected_b @ np.swapaxes(x, -1, -2)
        expected_a = (g + np.swapaxes(g, -1, -2)) / 2
    assert_close(grad_b, expected_b, 1e-9, check_dtype=False)
    assert_close(grad_a, expected_a, 1e-9, check_dtype=False)


def test_tridiagonal_solve_ignores_the_unused_corners_and_transposes():
    rng = _rng(11)
    dl, d, du = rng.standard_normal(5), 4 + rng.standard_normal(5), rng.standard_normal(5)
    b = rng.standard_normal((5, 2))
    moved = lax.linalg.tridiagonal_solve(
        *(jnp.asarray(v) for v in (dl + 100 * np.eye(5)[0], d, du + 100 * np.eye(5)[4], b))
    )
    plain = lax.linalg.tridiagonal_solve(*(jnp.asarray(v) for v in (dl, d, du, b)))
    assert_close(moved, np.asarray(plain), 1e-6)
    dense = np.diag(d) + np.diag(dl[1:], -1) + np.diag(du[:-1], 1)
    assert_close(plain, np.linalg.solve(dense, b).astype(np.float32), 1e-5)
    ct, x = rng.standard_normal((5, 2)), rng.standard_normal((5, 2))
    with x64_mode(True):
        f = lambda rhs: lax.linalg.tridiagonal_solve(dl, d, du, rhs)  # noqa: E731
        (transposed,) = kiln.linear_transpose(f, jnp.asarray(x))(jnp.asarray(ct))
        assert np.isclose(
            np.sum(ct * np.asarray(f(jnp.asarray(x)))), np.sum(np.asarray(transposed) * x)
        )
    with pytest.raises(NotImplementedError, match="perturb_singular"):
        lax.linalg.tridiagonal_solve(dl, d, du, b, perturb_singular=True)


def test_pivoted_qr_orders_the_diagonal_and_differentiates_with_fixed_pivots():
    a = _rng(12).standard_normal((5, 4))
    q, r, p = (np.asarray(t) for t in lax.linalg.qr(a, pivoting=True, full_matrices=False))
    assert p.dtype == np.int32 and sorted(p.tolist()) == [0, 1, 2, 3]
    assert np.all(np.diff(np.abs(np.diag(r))) <= 1e-6)
    assert_close(q @ r, a[:, p].astype(np.float32), 1e-5)
    _grads(lambda x: lax.linalg.qr(x, pivoting=True, full_matrices=False)[:2], [a])
    _grads(lambda x: lax.linalg.qr(x, pivoting=True, full_matrices=True)[:2], [a.T], order=1)

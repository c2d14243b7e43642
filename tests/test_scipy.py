"""kiln.scipy: the special-function and distribution rows checked eagerly against SciPy and
under jit; edge cases and derivative conventions of kiln.scipy.special; the BFGS minimizer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.special as ss
import scipy.stats as st

import kiln
import kiln.numpy as jnp
from kiln.scipy import special as ks
from kiln.scipy import stats as kst
from kiln.scipy.optimize import OptimizeResults, minimize
from tests._testing import check_record_eager, check_record_jit, x64_mode
from tests.op_records_scipy import SCIPY_RECORDS

CASES = [(r, s, d) for r in SCIPY_RECORDS for s, d in r.cases()]
IDS = [i for r in SCIPY_RECORDS for i in r.ids()]


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_record_eager(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_record_jit(record, shapes, dtype):
    check_record_jit(record, shapes, dtype)


# --- special functions: values at the edges ------------------------------------------------------


def test_promotion_and_dtypes():
    assert ks.gammaln(3).dtype == np.float32
    assert ks.xlogy(np.int32(2), np.float32(3.0)).dtype == np.float32
    assert ks.erf(np.float16(0.5)).dtype == np.float16
    with x64_mode(True):
        assert ks.gammaln(np.float64(3.0)).dtype == np.float64


def test_xlogy_xlog1py_at_zero():
    assert float(ks.xlogy(0.0, 0.0)) == 0.0
    assert float(ks.xlog1py(0.0, -1.0)) == 0.0
    assert np.isnan(float(ks.xlogy(0.0, np.nan)))
    np.testing.assert_allclose(float(ks.xlogy(2.0, 3.0)), 2 * math.log(3), rtol=1e-6)


def test_xlogy_custom_derivatives():
    # d/dx at x == 0 is log(y); d/dy is x / y (0 at x == 0, NaN at y == 0 as well).
    np.testing.assert_allclose(float(kiln.grad(lambda x: ks.xlogy(x, 2.0))(0.0)), math.log(2))
    assert float(kiln.grad(lambda y: ks.xlogy(0.0, y))(3.0)) == 0.0
    np.testing.assert_allclose(
        float(kiln.grad(lambda x: ks.xlog1py(x, 1.0))(0.0)), math.log(2), rtol=1e-6
    )
    np.testing.assert_allclose(float(kiln.grad(lambda y: ks.xlog1py(2.0, y))(1.0)), 1.0)


def test_entr_values_and_slope():
    np.testing.assert_array_equal(
        np.asarray(ks.entr(np.float32([-1.0, 0.0]))), np.float32([-np.inf, 0.0])
    )
    np.testing.assert_allclose(float(kiln.grad(ks.entr)(2.0)), -(math.log(2) + 1), rtol=1e-6)


def test_logit_expit_inverse_and_slope():
    p = np.float32([0.1, 0.5, 0.9])
    np.testing.assert_allclose(np.asarray(ks.expit(ks.logit(p))), p, rtol=1e-6)
    np.testing.assert_allclose(float(kiln.grad(ks.logit)(0.25)), 1 / (0.25 * 0.75), rtol=1e-6)


def test_log_ndtr_tails_and_segments():
    x = np.float32([-200.0, -30.0, -10.5, -9.5, 0.0, 4.9, 5.1, 9.0])
    # Between the segments float32 log(ndtr(x)) keeps only absolute accuracy near 0 (as in JAX).
    np.testing.assert_allclose(
        np.asarray(ks.log_ndtr(x)), ss.log_ndtr(x.astype(float)), rtol=1e-5, atol=1e-8
    )
    with x64_mode(True):
        x64 = np.float64([-300.0, -21.0, -19.0, 7.9, 8.1, 30.0])
        np.testing.assert_allclose(
            np.asarray(ks.log_ndtr(x64)), ss.log_ndtr(x64), rtol=1e-9, atol=1e-16
        )


def test_log_ndtr_derivative_deep_tail():
    # d/dx log ndtr(x) = pdf / cdf ~ -x far in the lower tail (no 0/0).
    slope = float(kiln.grad(ks.log_ndtr)(-40.0))
    np.testing.assert_allclose(slope, 40.0248, rtol=1e-4)


def test_log_ndtr_errors():
    with pytest.raises(TypeError, match="series_order must be a Python integer"):
        ks.log_ndtr(1.0, series_order=2.0)
    with pytest.raises(ValueError, match="non-negative"):
        ks.log_ndtr(1.0, series_order=-1)
    with pytest.raises(TypeError, match="not supported"):
        ks.ndtr(np.float16(1.0))


def test_ndtri_edges():
    out = np.asarray(ks.ndtri(np.float32([0.0, 1e-30, 0.5, 1.0])))
    assert out[0] == -np.inf and out[3] == np.inf and out[2] == 0
    np.testing.assert_allclose(out[1], ss.ndtri(1e-30), rtol=1e-6)


def test_gammainc_derivatives():
    with x64_mode(True):
        a, x = np.float64(2.5), np.float64(1.7)
        grad_a, grad_x = kiln.grad(ks.gammainc, argnums=(0, 1))(a, x)
        h = 1e-6
        fd_a = (ss.gammainc(a + h, x) - ss.gammainc(a - h, x)) / (2 * h)
        np.testing.assert_allclose(float(grad_a), fd_a, rtol=1e-6)
        np.testing.assert_allclose(float(grad_x), st.gamma.pdf(x, a), rtol=1e-12)
        grad_c = kiln.grad(ks.gammaincc, argnums=0)(a, x)
        np.testing.assert_allclose(float(grad_c), -fd_a, rtol=1e-6)


def test_gammainc_second_derivative_in_a_is_refused():
    with pytest.raises(TypeError, match="igamma_grad_a"):
        kiln.grad(kiln.grad(ks.gammainc))(2.0, 1.0)


def test_betainc_derivative_in_shape_is_refused():
    np.testing.assert_allclose(
        float(kiln.grad(ks.betainc, argnums=2)(2.0, 3.0, 0.4)), st.beta.pdf(0.4, 2, 3), rtol=1e-5
    )
    with pytest.raises(TypeError, match="betainc"):
        kiln.grad(ks.betainc, argnums=0)(2.0, 3.0, 0.4)


def test_zeta_and_polygamma():
    with pytest.raises(NotImplementedError, match="Riemann zeta"):
        ks.zeta(2.0)
    with pytest.raises(ValueError, match="integer type"):
        ks.polygamma(1.0, 2.0)
    x = np.float32([0.3, 1.0, 2.5, 7.0])
    for n in range(4):
        np.testing.assert_allclose(
            np.asarray(ks.polygamma(n, x)), ss.polygamma(n, x.astype(float)), rtol=2e-5
        )
    # polygamma(1, x) is the trigamma behind digamma's derivative.
    np.testing.assert_allclose(
        np.asarray(ks.polygamma(1, x)), np.asarray(kiln.vmap(kiln.grad(ks.digamma))(x)), rtol=1e-5
    )
    # d/dx polygamma(n, x) = polygamma(n + 1, x)
    np.testing.assert_allclose(
        float(kiln.grad(lambda v: ks.polygamma(2, v))(1.5)), ss.polygamma(3, 1.5), rtol=1e-5
    )
    np.testing.assert_allclose(
        float(kiln.grad(lambda q: ks.zeta(3.0, q))(2.0)), -3 * ss.zeta(4.0, 2.0), rtol=1e-6
    )


def test_bessel_derivatives_at_zero():
    assert float(kiln.grad(ks.i1e)(0.0)) == 0.5
    assert float(kiln.grad(ks.i0e)(0.0)) == 0.0
    with x64_mode(True):
        x, h = 1.3, 1e-6
        fd = (ss.i1e(x + h) - ss.i1e(x - h)) / (2 * h)
        np.testing.assert_allclose(float(kiln.grad(ks.i1e)(np.float64(x))), fd, rtol=1e-7)


def test_logsumexp_is_reexported():
    np.testing.assert_allclose(
        float(ks.logsumexp(np.float32([1.0, 2.0, 3.0]))), ss.logsumexp([1.0, 2.0, 3.0]), rtol=1e-6
    )


# --- distributions ---------------------------------------------------------------------------


def test_multivariate_normal_logpdf():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 4))
    cov = (a @ a.T + np.eye(4)).astype(np.float32)
    mean = rng.normal(size=4).astype(np.float32)
    x = rng.normal(size=(6, 4)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(kst.multivariate_normal.logpdf(x, mean, cov)),
        st.multivariate_normal.logpdf(x, mean, cov),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        np.asarray(kst.multivariate_normal.logpdf(x, mean, np.float32(2.0))),
        st.multivariate_normal.logpdf(x, mean, 2.0 * np.eye(4)),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        float(kst.multivariate_normal.logpdf(np.float32(0.3), np.float32(0.1), np.float32(2.0))),
        st.norm.logpdf(0.3, 0.1, math.sqrt(2.0)),
        rtol=1e-6,
    )
    with pytest.raises(ValueError, match="incompatible shapes"):
        kst.multivariate_normal.logpdf(x, mean, np.eye(3, dtype=np.float32))
    # The gradient in the mean is cov^-1 (x - mean).
    with x64_mode(True):
        grad = kiln.grad(lambda m: kst.multivariate_normal.logpdf(x[0], m, cov))(mean)
        expected = np.linalg.solve(cov.astype(float), (x[0] - mean).astype(float))
        np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-4)


def test_dirichlet_logpdf():
    alpha = np.float32([1.5, 2.0, 3.0])
    x = np.float32([[0.2, 0.5], [0.3, 0.2], [0.5, 0.3]])
    np.testing.assert_allclose(
        np.asarray(kst.dirichlet.logpdf(x, alpha)), st.dirichlet.logpdf(x, alpha), rtol=1e-5
    )
    # The last component may be left out; points off the simplex get -inf.
    np.testing.assert_allclose(
        np.asarray(kst.dirichlet.logpdf(x[:2], alpha)), st.dirichlet.logpdf(x, alpha), rtol=1e-5
    )
    assert float(kst.dirichlet.logpdf(np.float32([0.5, 0.6, 0.1]), alpha)) == -np.inf
    with pytest.raises(ValueError):
        kst.dirichlet.logpdf(np.float32([0.5]), alpha)


def test_out_of_support_values():
    assert float(kst.poisson.logpmf(2.5, 3.0)) == -np.inf
    assert float(kst.poisson.logpmf(-1.0, 3.0)) == -np.inf
    assert float(kst.binom.logpmf(6.0, 5.0, 0.3)) == -np.inf
    assert float(kst.bernoulli.logpmf(2.0, 0.3)) == -np.inf
    assert float(kst.beta.logpdf(1.5, 2.0, 3.0)) == -np.inf
    assert float(kst.gamma.logpdf(-1.0, 2.0)) == -np.inf
    assert float(kst.expon.logpdf(-1.0)) == -np.inf
    assert float(kst.uniform.logpdf(2.0)) == -np.inf
    assert np.isnan(float(kst.uniform.ppf(1.5)))
    np.testing.assert_array_equal(
        np.asarray(kst.bernoulli.ppf(np.float32([0.2, 0.8]), 0.3)), np.float32([0.0, 1.0])
    )


def test_norm_logcdf_far_tail():
    np.testing.assert_allclose(float(kst.norm.logcdf(-50.0)), st.norm.logcdf(-50.0), rtol=1e-6)
    np.testing.assert_allclose(float(kst.norm.logsf(50.0)), st.norm.logsf(50.0), rtol=1e-6)


# --- optimize --------------------------------------------------------------------------------


def _rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def test_minimize_bfgs_rosenbrock():
    x0 = np.float32([-1.2, 1.0, 0.5, 0.0])
    result = minimize(_rosenbrock, x0, method="BFGS")
    assert isinstance(result, OptimizeResults)
    assert bool(result.success) and int(result.status) == 0
    np.testing.assert_allclose(np.asarray(result.x), np.ones(4), atol=1e-3)
    assert float(result.fun) < 1e-6
    assert np.asarray(result.hess_inv).shape == (4, 4)
    assert int(result.nfev) == int(result.njev) >= int(result.nit) > 0
    # Compiled against eager in float64. In float32, from this start, rounding decides the
    # run: one ulp here or there (fused kernels, another summation order) and the line search
    # in the valley stops after 31 iterations with status 3, where float64 stops too (JAX
    # 0.10.2 converges in 40 iterations in float32 and stops there in float64, as kiln does).
    with x64_mode(True):
        start = x0.astype(np.float64)
        eager = minimize(_rosenbrock, start, method="BFGS")
        compiled = kiln.jit(lambda x: minimize(_rosenbrock, x, method="bfgs"))(start)
        np.testing.assert_allclose(np.asarray(compiled.x), np.asarray(eager.x), atol=1e-9)
        assert int(compiled.nit) == int(eager.nit) and int(compiled.status) == int(eager.status)
        np.testing.assert_allclose(float(compiled.fun), float(eager.fun), rtol=1e-9)


def test_minimize_quadratic_matches_scipy():
    with x64_mode(True):
        a = np.array([[3.0, 0.5], [0.5, 1.0]])
        b = np.array([1.0, -2.0])

        def quadratic(x, a, b):
            return 0.5 * x @ a @ x - b @ x

        result = minimize(
            quadratic, np.zeros(2), args=(a, b), method="BFGS", options={"gtol": 1e-10}
        )
        expected = scipy.optimize.minimize(quadratic, np.zeros(2), args=(a, b), method="BFGS")
        np.testing.assert_allclose(np.asarray(result.x), np.linalg.solve(a, b), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(result.x), expected.x, rtol=1e-5)
        # The estimate approaches inv(a) (line searches are inexact, so not exactly).
        hess_inv = np.asarray(result.hess_inv)
        np.testing.assert_allclose(hess_inv, hess_inv.T, rtol=1e-10)
        np.testing.assert_allclose(hess_inv, np.linalg.inv(a), rtol=1e-2)


def test_minimize_options_and_errors():
    result = minimize(_rosenbrock, np.float32([-1.2, 1.0]), method="BFGS", options={"maxiter": 3})
    assert int(result.nit) == 3 and int(result.status) == 1 and not bool(result.success)
    with pytest.raises(ValueError, match="not recognized"):
        minimize(_rosenbrock, np.zeros(2), method="Nelder-Mead")
    with pytest.raises(TypeError, match="must be a tuple"):
        minimize(_rosenbrock, np.zeros(2), args=[1], method="BFGS")


def test_minimize_under_vmap():
    starts = np.float32([[-1.0, 2.0], [0.5, 0.5], [2.0, -1.0]])
    batched = kiln.vmap(lambda x: minimize(_rosenbrock, x, method="BFGS"))(starts)
    for i, start in enumerate(starts):
        single = minimize(_rosenbrock, start, method="BFGS")
        np.testing.assert_allclose(np.asarray(batched.x[i]), np.asarray(single.x), rtol=1e-5)
        assert int(batched.status[i]) == int(single.status)
    # Like JAX's, the float32 search from (0.5, 0.5) converges; the others stop with a failed
    # zoom (status 3) at the same points as JAX's.
    np.testing.assert_allclose(np.asarray(batched.x[1]), np.ones(2), atol=1e-4)


# --- linalg ----------------------------------------------------------------------------------


def _linalg_operands():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 4))
    spd = a @ a.T + 4 * np.eye(4)
    lower = np.tril(a) + 4 * np.eye(4)
    return (
        x.astype(np.float32) for x in (a, spd, lower, rng.normal(size=4), rng.normal(size=(4, 2)))
    )


def test_linalg_solvers_match_scipy():
    import scipy.linalg as sl

    from kiln.scipy import linalg as kl

    a, spd, lower, b, rhs = _linalg_operands()
    close = dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(kl.cholesky(spd)), sl.cholesky(spd), **close)
    np.testing.assert_allclose(
        np.asarray(kl.cholesky(spd, lower=True)), sl.cholesky(spd, lower=True), **close
    )
    for is_lower in (True, False):
        np.testing.assert_allclose(
            np.asarray(kl.cho_solve(kl.cho_factor(spd, lower=is_lower), b)),
            sl.cho_solve(sl.cho_factor(spd, lower=is_lower), b),
            **close,
        )
    for trans in (0, 1, 2, "N", "T", "C"):
        np.testing.assert_allclose(
            np.asarray(kl.solve_triangular(lower, rhs, trans=trans, lower=True)),
            sl.solve_triangular(lower, rhs, trans=trans, lower=True),
            **close,
        )
    with pytest.raises(ValueError, match="trans"):
        kl.solve_triangular(lower, rhs, trans=3)
    np.testing.assert_allclose(np.asarray(kl.solve(a, b)), sl.solve(a, b), **close)
    np.testing.assert_allclose(
        np.asarray(kl.solve(spd, rhs, assume_a="pos")), sl.solve(spd, rhs, assume_a="pos"), **close
    )
    np.testing.assert_allclose(np.asarray(kl.inv(a)), sl.inv(a), **close)
    np.testing.assert_allclose(float(kl.det(a)), sl.det(a), rtol=1e-4)
    for trans in (0, 1, 2):
        np.testing.assert_allclose(
            np.asarray(kl.lu_solve(kl.lu_factor(a), b, trans=trans)),
            sl.lu_solve(sl.lu_factor(a), b, trans=trans),
            **close,
        )


def test_linalg_factorizations_match_scipy():
    import scipy.linalg as sl

    from kiln.scipy import linalg as kl

    a, spd, _, _, _ = _linalg_operands()
    close = dict(rtol=1e-4, atol=1e-5)
    for actual, expected in zip(kl.lu(a), sl.lu(a)):
        np.testing.assert_allclose(np.asarray(actual), expected, **close)
    tall = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    for actual, expected in zip(kl.lu(tall), sl.lu(tall)):
        np.testing.assert_allclose(np.asarray(actual), expected, **close)
    pl, u = kl.lu(a, permute_l=True)
    np.testing.assert_allclose(np.asarray(pl) @ np.asarray(u), a, **close)
    q, r = kl.qr(a)
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), a, **close)
    assert len(kl.qr(a, mode="r")) == 1
    w, v = kl.eigh(spd)
    np.testing.assert_allclose(np.asarray(w), sl.eigh(spd, eigvals_only=True), rtol=1e-4)
    np.testing.assert_allclose(
        np.asarray(v) @ np.diag(np.asarray(w)) @ np.asarray(v).T, spd, rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(
        np.asarray(kl.svd(a, compute_uv=False)), sl.svd(a, compute_uv=False), rtol=1e-4
    )

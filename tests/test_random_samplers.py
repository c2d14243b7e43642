"""The samplers of kiln.random built on gamma, Poisson/binomial rejection and transforms of
uniform and normal draws: samples equal to JAX 0.10.2's (jax_threefry_partitionable=False)
where JAX's arithmetic is reproduced exactly, distributions checked against scipy.stats with
fixed seeds (Kolmogorov-Smirnov tests and moments), shapes, dtypes, errors and the implicit
reparameterization gradient of gamma."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st

import kiln
import kiln.numpy as jnp
import kiln.random as kr
from tests._testing import x64_mode


def _f32(bits, shape):
    return np.array(bits, np.uint32).view(np.float32).reshape(shape)


# Draws of jax.random.<name>(jax.random.PRNGKey(42), ...) from JAX 0.10.2 on x86-64.
JAX_SAMPLES = {
    "gamma": (
        lambda k: kr.gamma(k, 2.5, (6,)),
        _f32([1072500197, 1084385967, 1056817216, 1076538963, 1079100561, 1055661666], (6,)),
    ),
    "loggamma": (
        lambda k: kr.loggamma(k, 0.3, (6,)),
        _f32([3225531832, 3230305177, 3226876135, 3196112914, 3185179584, 3229776684], (6,)),
    ),
    "poisson_small": (
        lambda k: kr.poisson(k, 3.0, (6,)),
        np.array([4, 3, 5, 2, 4, 2], np.int32),
    ),
    "poisson_large": (
        lambda k: kr.poisson(k, 30.0, (6,)),
        np.array([29, 27, 23, 27, 29, 29], np.int32),
    ),
    "poisson_vector": (
        lambda k: kr.poisson(k, jnp.array([0.0, 0.5, 3.0, 9.9, 10.0, 50.0])),
        np.array([0, 1, 5, 10, 9, 48], np.int32),
    ),
    "binomial_small": (
        lambda k: kr.binomial(k, 10.0, 0.3, (6,)),
        np.float32([4, 3, 4, 3, 3, 3]),
    ),
    "binomial_large": (
        lambda k: kr.binomial(k, 100.0, 0.4, (6,)),
        np.float32([40, 37, 40, 38, 39, 39]),
    ),
    "binomial_high_p": (
        lambda k: kr.binomial(k, 20.0, 0.9, (6,)),
        np.float32([17, 20, 17, 18, 17, 17]),
    ),
    "rayleigh": (
        lambda k: kr.rayleigh(k, 2.0, (6,)),
        _f32([1070280243, 1065848272, 1065734510, 1080214671, 1080723648, 1074522750], (6,)),
    ),
    "geometric": (
        lambda k: kr.geometric(k, 0.3, (6,)),
        np.array([1, 1, 1, 5, 5, 2], np.int32),
    ),
    "multinomial": (
        lambda k: kr.multinomial(k, 10.0, jnp.array([0.2, 0.3, 0.5]), shape=(2, 3)),
        np.float32([[0, 3, 7], [3, 3, 4]]),
    ),
    "triangular": (
        lambda k: kr.triangular(k, 0.0, 1.0, 3.0, (6,)),
        _f32([1071449895, 1074220350, 1074264736, 1061834853, 1061129490, 1068349998], (6,)),
    ),
}


@pytest.mark.parametrize("name", sorted(JAX_SAMPLES))
def test_bit_exact_with_jax(name):
    sampler, expected = JAX_SAMPLES[name]
    actual = np.asarray(sampler(kr.PRNGKey(42)))
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("name", ["gamma", "poisson_small", "binomial_large", "triangular"])
def test_jit_and_typed_keys_draw_the_same(name):
    sampler, expected = JAX_SAMPLES[name]
    np.testing.assert_array_equal(np.asarray(sampler(kr.key(42))), expected)
    compiled = np.asarray(kiln.jit(sampler)(kr.PRNGKey(42)))
    if name == "gamma":
        # Compiled rsqrt (in Marsaglia and Tsang's constant c) may differ in the last bit.
        np.testing.assert_allclose(compiled, expected, rtol=1e-5)
    else:
        np.testing.assert_array_equal(compiled, expected)


def test_gamma_gradients_match_jax():
    key = kr.PRNGKey(42)
    grad = kiln.grad(lambda a: kr.gamma(key, a, (20,)).sum())(np.float32(2.5))
    np.testing.assert_allclose(float(grad), float(_f32(1101008570, ())), rtol=1e-5)
    log_grad = kiln.grad(lambda a: kr.loggamma(key, a, (20,)).sum())(np.float32(0.4))
    np.testing.assert_allclose(float(log_grad), float(_f32(1124759180, ())), rtol=1e-5)


def test_gamma_implicit_reparameterization():
    # The derivative holds the sample's CDF value fixed: dx/da = -(dF/da)(x; a) / pdf(x; a).
    with x64_mode(True):
        keys = kr.split(kr.PRNGKey(7), 50)
        a, h = np.float64(1.7), 1e-6
        samples = np.asarray(kiln.vmap(lambda k: kr.gamma(k, a))(keys))
        grads = np.asarray(kiln.vmap(kiln.grad(lambda a, k: kr.gamma(k, a)), (None, 0))(a, keys))
        dcdf_da = (st.gamma.cdf(samples, a + h) - st.gamma.cdf(samples, a - h)) / (2 * h)
        np.testing.assert_allclose(grads, -dcdf_da / st.gamma.pdf(samples, a), rtol=1e-5)
        log_grads = np.asarray(
            kiln.vmap(kiln.grad(lambda a, k: kr.loggamma(k, a)), (None, 0))(a, keys)
        )
        log_samples = np.exp(np.asarray(kiln.vmap(lambda k: kr.loggamma(k, a))(keys)))
        dcdf_da = (st.gamma.cdf(log_samples, a + h) - st.gamma.cdf(log_samples, a - h)) / (2 * h)
        expected = -dcdf_da / st.gamma.pdf(log_samples, a) / log_samples
        np.testing.assert_allclose(log_grads, expected, rtol=1e-5)


# --- distributions ---------------------------------------------------------------------------

N = 4000
KS_CASES = {
    "gamma_small": (lambda k: kr.gamma(k, 0.4, (N,)), st.gamma(0.4).cdf),
    "gamma": (lambda k: kr.gamma(k, 3.0, (N,)), st.gamma(3.0).cdf),
    "loggamma": (lambda k: kr.loggamma(k, 0.7, (N,)), st.loggamma(0.7).cdf),
    "beta": (lambda k: kr.beta(k, 2.0, 0.5, (N,)), st.beta(2.0, 0.5).cdf),
    "chisquare": (lambda k: kr.chisquare(k, 3.0, (N,)), st.chi2(3.0).cdf),
    "t": (lambda k: kr.t(k, 4.0, (N,)), st.t(4.0).cdf),
    "f": (lambda k: kr.f(k, 3.0, 7.0, (N,)), st.f(3.0, 7.0).cdf),
    "cauchy": (lambda k: kr.cauchy(k, (N,)), st.cauchy().cdf),
    "lognormal": (lambda k: kr.lognormal(k, 0.5, (N,)), st.lognorm(0.5).cdf),
    "pareto": (lambda k: kr.pareto(k, 3.0, (N,)), st.pareto(3.0).cdf),
    "weibull_min": (
        lambda k: kr.weibull_min(k, 2.0, 1.5, (N,)),
        st.weibull_min(1.5, scale=2.0).cdf,
    ),
    "maxwell": (lambda k: kr.maxwell(k, (N,)), st.maxwell().cdf),
    "double_sided_maxwell": (
        lambda k: jnp.abs(kr.double_sided_maxwell(k, 1.0, 2.0, (N,)) - 1.0) / 2.0,
        st.maxwell().cdf,
    ),
    "rayleigh": (lambda k: kr.rayleigh(k, 2.0, (N,)), st.rayleigh(scale=2.0).cdf),
    "triangular": (lambda k: kr.triangular(k, 0.0, 1.0, 3.0, (N,)), st.triang(1 / 3, 0, 3).cdf),
    "wald": (lambda k: kr.wald(k, 1.5, (N,)), st.invgauss(1.5).cdf),
    "generalized_normal": (lambda k: kr.generalized_normal(k, 1.5, (N,)), st.gennorm(1.5).cdf),
    "dirichlet_marginal": (
        lambda k: kr.dirichlet(k, jnp.array([1.0, 2.0, 3.0]), (N,))[:, 1],
        st.beta(2.0, 4.0).cdf,
    ),
    "ball_radius": (
        lambda k: jnp.sum(kr.ball(k, 3, 2, (N,)) ** 2, axis=-1) ** 1.5,
        st.uniform().cdf,
    ),
}


@pytest.mark.parametrize("name", sorted(KS_CASES))
def test_kolmogorov_smirnov(name):
    sampler, cdf = KS_CASES[name]
    samples = np.asarray(sampler(kr.PRNGKey(0)), np.float64)
    assert np.all(np.isfinite(samples))
    assert st.kstest(samples, cdf).pvalue > 1e-3


@pytest.mark.parametrize(
    "sampler,mean,var",
    [
        (lambda k: kr.poisson(k, 2.5, (N,)), 2.5, 2.5),
        (lambda k: kr.poisson(k, 40.0, (N,)), 40.0, 40.0),
        (lambda k: kr.binomial(k, 12.0, 0.3, (N,)), 3.6, 2.52),
        (lambda k: kr.binomial(k, 200.0, 0.7, (N,)), 140.0, 42.0),
        (lambda k: kr.geometric(k, 0.25, (N,)), 4.0, 12.0),
    ],
    ids=["poisson_small", "poisson_large", "binomial_small", "binomial_large", "geometric"],
)
def test_discrete_moments(sampler, mean, var):
    samples = np.asarray(sampler(kr.PRNGKey(1)), np.float64)
    assert np.all(samples == np.floor(samples)) and samples.min() >= 0
    assert abs(samples.mean() - mean) < 4 * np.sqrt(var / N)
    assert abs(samples.var() / var - 1) < 0.1


def test_multinomial_counts():
    p = np.float32([0.1, 0.2, 0.3, 0.4])
    counts = np.asarray(kr.multinomial(kr.PRNGKey(2), 20.0, p, shape=(N, 4)))
    assert counts.shape == (N, 4)
    np.testing.assert_array_equal(counts.sum(-1), np.full(N, 20.0))
    np.testing.assert_allclose(counts.mean(0), 20 * p, rtol=0.05)


def test_multivariate_normal_moments():
    mean = np.float32([1.0, -2.0, 0.5])
    cov = np.float32([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 1.5]])
    x = np.asarray(kr.multivariate_normal(kr.PRNGKey(3), mean, cov, (N,)))
    assert x.shape == (N, 3) and x.dtype == np.float32
    np.testing.assert_allclose(x.mean(0), mean, atol=0.08)
    np.testing.assert_allclose(np.cov(x.T), cov, atol=0.12)
    with pytest.raises(ValueError, match="cov.shape"):
        kr.multivariate_normal(kr.PRNGKey(3), mean, np.eye(2, dtype=np.float32))


@pytest.mark.parametrize("n,m", [(4, None), (3, 5), (5, 2)])
def test_orthogonal(n, m):
    q = np.asarray(kr.orthogonal(kr.PRNGKey(4), n, (7,), m=m), np.float64)
    cols = n if m is None else m
    assert q.shape == (7, n, cols)
    gram = q @ np.swapaxes(q, -1, -2) if n <= cols else np.swapaxes(q, -1, -2) @ q
    np.testing.assert_allclose(gram, np.broadcast_to(np.eye(min(n, cols)), gram.shape), atol=1e-5)


def test_shapes_dtypes_and_broadcasting():
    key = kr.PRNGKey(5)
    assert kr.gamma(key, jnp.ones((2, 3))).shape == (2, 3)
    assert kr.gamma(key, 2.0, (4, 2)).shape == (4, 2)
    assert kr.beta(key, jnp.ones(3), 2.0).shape == (3,)
    assert kr.dirichlet(key, jnp.ones((2, 4))).shape == (2, 4)
    assert kr.dirichlet(key, jnp.ones(4), (5,)).shape == (5, 4)
    assert kr.poisson(key, 3.0, (5,)).dtype == np.int32
    assert kr.geometric(key, 0.5, (5,)).dtype == np.int32
    assert kr.binomial(key, 5.0, 0.5, (5,)).dtype == np.float32
    assert kr.ball(key, 3, shape=(2,)).shape == (2, 3)
    assert kr.double_sided_maxwell(key, jnp.zeros(3), 1.0, (2,)).shape == (2, 3)
    assert kr.maxwell(key, (4,)).shape == (4,)
    with x64_mode(True):
        assert kr.gamma(key, 2.0, (3,)).dtype == np.float64
        assert kr.t(key, 3.0, (3,), dtype=np.float32).dtype == np.float32
    gamma16 = kr.gamma(key, 2.0, (3,), dtype=np.float16)
    assert gamma16.dtype == np.float16


def test_errors():
    key = kr.PRNGKey(6)
    with pytest.raises(ValueError, match="broadcast"):
        kr.gamma(key, jnp.ones(3), (2,))
    with pytest.raises(ValueError, match="float dtype"):
        kr.gamma(key, 2.0, (2,), dtype=np.int32)
    with pytest.raises(ValueError, match="int dtype"):
        kr.poisson(key, 2.0, (2,), dtype=np.float32)
    with pytest.raises(ValueError, match="alpha.ndim >= 1"):
        kr.dirichlet(key, 1.0)
    with pytest.raises(TypeError, match="PRNG key"):
        kr.gamma(np.zeros(3, np.uint32), 2.0)


def test_poisson_and_binomial_edge_parameters():
    key = kr.PRNGKey(8)
    np.testing.assert_array_equal(np.asarray(kr.poisson(key, 0.0, (4,))), np.zeros(4, np.int32))
    out = np.asarray(
        kr.binomial(key, jnp.array([-1.0, 5.0, np.inf, 5.0]), jnp.array([0.5, -0.1, 0.5, 1.0]))
    )
    assert np.isnan(out[0]) and np.isnan(out[1]) and out[2] == np.inf and out[3] == 5.0


def test_samplers_under_vmap_match_loop():
    keys = kr.split(kr.PRNGKey(9), 3)
    alphas = jnp.array([0.5, 2.0, 7.0])
    batched = np.asarray(kiln.vmap(lambda k, a: kr.gamma(k, a, (4,)))(keys, alphas))
    for i in range(3):
        np.testing.assert_array_equal(batched[i], np.asarray(kr.gamma(keys[i], alphas[i], (4,))))
    batched = np.asarray(kiln.vmap(lambda k: kr.poisson(k, 20.0, (4,)))(keys))
    for i in range(3):
        np.testing.assert_array_equal(batched[i], np.asarray(kr.poisson(keys[i], 20.0, (4,))))

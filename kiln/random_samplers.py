"""The continuous and discrete samplers of kiln.random built on the basic ones: gamma and the
distributions derived from it (beta, dirichlet, chi-square, t, F, loggamma, generalized
normal, ball), Poisson, binomial and multinomial, the multivariate normal and orthogonal
matrices, and the transforms of uniform and normal samples (cauchy, lognormal, pareto,
weibull_min, geometric, maxwell, rayleigh, triangular, wald).

Each follows JAX's algorithm and consumes the key as JAX does, so where JAX's arithmetic is
ordinary (logarithms, square roots, products; see kiln.primitives.random_bits) the samples are
JAX's bit for bit. Samplers that go through exp, pow, tan, lgamma or a matrix factorization
draw the same distribution and agree with JAX to rounding.
"""

from __future__ import annotations

import math
import operator
from typing import Sequence

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln.core import dtypes
from kiln.core.shapes import canonicalize_shape
from kiln.custom_derivatives import custom_jvp
from kiln.primitives.random_bits import fma, threefry_split, xla_log, xla_log1p
from kiln.primitives.special import random_gamma_grad
from kiln.random import (
    _broadcast,
    _broadcast_shapes,
    _check_key,
    _check_shape,
    _float_dtype,
    _normal_real,
    _shape_of,
    _split_pair,
    _uniform,
    rademacher,
)

__all__ = [
    "gamma",
    "loggamma",
    "beta",
    "dirichlet",
    "chisquare",
    "t",
    "f",
    "poisson",
    "binomial",
    "multinomial",
    "multivariate_normal",
    "orthogonal",
    "cauchy",
    "lognormal",
    "pareto",
    "weibull_min",
    "geometric",
    "maxwell",
    "double_sided_maxwell",
    "rayleigh",
    "triangular",
    "wald",
    "generalized_normal",
    "ball",
]


def _param_shape(name: str, shape, *params) -> tuple:
    """The sample shape: `shape` (checked against the parameters) or their broadcast shape."""
    if shape is None:
        return _broadcast_shapes(*(_shape_of(p) for p in params))
    shape = canonicalize_shape(shape)
    _check_shape(name, shape, *(_shape_of(p) for p in params))
    return shape


def _as_dtype(x, dtype, shape: tuple | None = None):
    x = lax.convert_element_type(jnp.asarray(x), dtype)
    return x if shape is None else _broadcast(x, shape)


def _uniform01(data, shape: tuple, dtype):
    return _uniform(data, shape, dtype, 0.0, 1.0)


# --- gamma: Marsaglia and Tsang, with an implicit reparameterization gradient -------------------


def _gamma_one(data, alpha, log_space: bool):
    """One Gamma(alpha) sample (or its log) from one key: Marsaglia and Tsang's squeeze and
    rejection steps for alpha >= 1; smaller alphas are boosted to alpha + 1 and scaled by
    u ** (1 / alpha)."""
    dtype = np.dtype(alpha.dtype)
    zero, one = lax.full_like(alpha, 0), lax.full_like(alpha, 1)
    boost_mask = lax.ge(alpha, one)
    alpha_orig = alpha
    alpha = lax.select(boost_mask, alpha, lax.add(alpha, one))
    d = lax.sub(alpha, np.array(1 / 3, dtype))
    c = lax.mul(np.array(1 / 3, dtype), lax.rsqrt(d))

    def accept_fails(state):
        _, x2, v3, u = state
        squeeze = lax.ge(u, fma(np.array(-0.0331, dtype), lax.mul(x2, x2), one))
        log_v = xla_log(v3)
        bound = fma(d, lax.add(lax.sub(one, v3), log_v), lax.mul(x2, np.array(0.5, dtype)))
        return lax.bitwise_and(squeeze, lax.ge(xla_log(u), bound))

    def propose(state):
        key = state[0]
        keys = threefry_split(key, (3,))
        key, x_key, u_key = keys[0], keys[1], keys[2]

        def next_normal(kxv):
            pair = threefry_split(kxv[0], (2,))
            x = _normal_real(pair[1], (), dtype)
            return pair[0], x, fma(x, c, one)

        _, x, v = lax.while_loop(
            lambda kxv: lax.le(kxv[2], zero), next_normal, (x_key, zero, lax.neg(one))
        )
        x2 = lax.mul(x, x)
        v3 = lax.mul(lax.mul(v, v), v)
        return key, x2, v3, _uniform01(u_key, (), dtype)

    key, subkey = _split_pair(data)
    _, _, v3, _ = lax.while_loop(accept_fails, propose, (key, zero, one, lax.full_like(alpha, 2)))
    if log_space:
        # log(1 - u), the negated exponential sample JAX draws from the same key.
        log_samples = xla_log1p(lax.neg(_uniform01(subkey, (), dtype)))
        skip = lax.bitwise_or(boost_mask, lax.eq(log_samples, zero))
        log_boost = lax.select(skip, zero, lax.mul(log_samples, lax.div(one, alpha_orig)))
        return lax.add(lax.add(xla_log(d), xla_log(v3)), log_boost)
    samples = lax.sub(one, _uniform01(subkey, (), dtype))
    boost = lax.select(boost_mask, one, lax.pow(samples, lax.div(one, alpha_orig)))
    return lax.mul(lax.mul(d, v3), boost)


def _gamma_impl(data, a, log_space: bool):
    from kiln.transforms.vmap import vmap

    shape = tuple(a.shape)
    size = math.prod(shape)
    if size == 0:
        return jnp.zeros(shape, a.dtype)
    keys = threefry_split(data, (size,))
    flat = lax.reshape(a, (size,))
    samples = vmap(lambda k, alpha: _gamma_one(k, alpha, log_space))(keys, flat)
    return lax.reshape(samples, shape)


_random_gamma = custom_jvp(_gamma_impl, nondiff_argnums=(2,))


@_random_gamma.defjvp
def _random_gamma_jvp(log_space, primals, tangents):
    data, a = primals
    _, a_dot = tangents
    out = _random_gamma(data, a, log_space)
    if log_space:
        # d log(x) = dx / x, with x = exp(log x) kept away from 0.
        samples = lax.exp(out)
        tiny = lax.full_like(samples, float(dtypes.finfo(samples.dtype).tiny))
        samples = lax.select(lax.eq(samples, lax.full_like(samples, 0)), tiny, samples)
        slope = lax.div(random_gamma_grad(a, samples), samples)
    else:
        slope = random_gamma_grad(a, out)
    return out, lax.mul(a_dot, slope)


def _gamma(name: str, key, a, shape, dtype, log_space: bool):
    data, _ = _check_key(name, key)
    dtype = _float_dtype(name, dtype)
    shape = _param_shape(name, shape, a)
    return _random_gamma(data, _as_dtype(a, dtype, shape), log_space)


def gamma(key, a, shape: Sequence[int] | None = None, dtype=None):
    """Gamma(a, 1) samples (Marsaglia and Tsang); differentiable in `a` by implicit
    reparameterization."""
    return _gamma("gamma", key, a, shape, dtype, False)


def loggamma(key, a, shape: Sequence[int] | None = None, dtype=None):
    """log of Gamma(a, 1) samples, computed in log space (accurate for small a)."""
    return _gamma("loggamma", key, a, shape, dtype, True)


def beta(key, a, b, shape: Sequence[int] | None = None, dtype=None):
    """Beta(a, b) samples, X / (X + Y) of two gamma samples taken in log space."""
    data, _ = _check_key("beta", key)
    dtype = _float_dtype("beta", dtype)
    shape = _param_shape("beta", shape, a, b)
    key_a, key_b = _split_pair(data)
    log_a = _random_gamma(key_a, _as_dtype(a, dtype, shape), True)
    log_b = _random_gamma(key_b, _as_dtype(b, dtype, shape), True)
    log_max = lax.max(log_a, log_b)
    scaled_a = lax.exp(lax.sub(log_a, log_max))
    scaled_b = lax.exp(lax.sub(log_b, log_max))
    return lax.div(scaled_a, lax.add(scaled_a, scaled_b))


def dirichlet(key, alpha, shape: Sequence[int] | None = None, dtype=None):
    """Dirichlet(alpha) samples along the last axis: normalized log-space gamma samples."""
    from kiln.nn import softmax

    data, _ = _check_key("dirichlet", key)
    dtype = _float_dtype("dirichlet", dtype)
    alpha_shape = _shape_of(alpha)
    if not len(alpha_shape) >= 1:
        raise ValueError(
            f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == {len(alpha_shape)}"
        )
    shape = _param_shape("dirichlet", shape, np.empty(alpha_shape[:-1]))
    full = shape + alpha_shape[-1:]
    log_samples = _random_gamma(data, _as_dtype(alpha, dtype, full), True)
    return softmax(log_samples, axis=-1)


def chisquare(key, df, shape: Sequence[int] | None = None, dtype=None):
    """Chi-square(df) samples: 2 Gamma(df / 2)."""
    data, _ = _check_key("chisquare", key)
    dtype = _float_dtype("chisquare", dtype)
    shape = _param_shape("chisquare", shape, df)
    return _chisquare(data, df, shape, dtype)


def _chisquare(data, df, shape: tuple, dtype):
    half_df = lax.div(_as_dtype(df, dtype, shape), np.array(2, dtype))
    return lax.mul(lax.exp(_random_gamma(data, half_df, True)), np.array(2, dtype))


def t(key, df, shape: Sequence[int] | None = None, dtype=None):
    """Student's t(df) samples: N * sqrt(df / 2 / G) for G ~ Gamma(df / 2)."""
    data, _ = _check_key("t", key)
    dtype = _float_dtype("t", dtype)
    shape = _param_shape("t", shape, df)
    key_n, key_g = _split_pair(data)
    n = _normal_real(key_n, shape, dtype)
    half_df = lax.div(_as_dtype(df, dtype, shape), np.array(2, dtype))
    g = _random_gamma(key_g, half_df, False)
    return lax.mul(n, lax.sqrt(lax.div(half_df, g)))


def f(key, dfnum, dfden, shape: Sequence[int] | None = None, dtype=None):
    """F(dfnum, dfden) samples: the ratio of two scaled chi-square samples."""
    data, _ = _check_key("f", key)
    dtype = _float_dtype("f", dtype)
    shape = _param_shape("f", shape, dfnum, dfden)
    key_den, key_num = _split_pair(data)
    dfnum = _as_dtype(dfnum, dtype, shape)
    dfden = _as_dtype(dfden, dtype, shape)
    num = lax.div(_chisquare(key_num, dfnum, shape, dtype), dfnum)
    den = lax.div(_chisquare(key_den, dfden, shape, dtype), dfden)
    return lax.div(num, den)


def generalized_normal(key, p: float, shape: Sequence[int] = (), dtype=None):
    """Samples of density proportional to exp(-|x|**p): a random sign times G ** (1/p) for
    G ~ Gamma(1/p)."""
    data, _ = _check_key("generalized_normal", key)
    dtype = _float_dtype("generalized_normal", dtype)
    shape = canonicalize_shape(shape)
    return _generalized_normal(data, p, shape, dtype)


def _generalized_normal(data, p, shape: tuple, dtype):
    key_g, key_r = _split_pair(data)
    g = _random_gamma(key_g, _as_dtype(1 / jnp.asarray(p), dtype, shape), False)
    r = rademacher(key_r, shape, dtype)
    return lax.mul(r, lax.pow(g, _as_dtype(1 / jnp.asarray(p), dtype, shape)))


def ball(key, d: int, p: float = 2, shape: Sequence[int] = (), dtype=None):
    """Points uniform in the d-dimensional unit Lp ball, shape (*shape, d)."""
    data, _ = _check_key("ball", key)
    dtype = _float_dtype("ball", dtype)
    shape = canonicalize_shape(shape)
    d = operator.index(d)
    key_g, key_e = _split_pair(data)
    g = _generalized_normal(key_g, p, (*shape, d), dtype)
    e = lax.neg(xla_log1p(lax.neg(_uniform01(key_e, shape, dtype))))
    radius = (jnp.sum(jnp.abs(g) ** p, axis=-1) + e) ** (1 / p)
    return g / radius[..., None]


# --- Poisson, binomial, multinomial -----------------------------------------------------------


def _poisson_knuth(data, lam, shape: tuple, dtype):
    """Count uniforms until their product falls below exp(-lam) (for lam < 10)."""
    max_iters = int(np.iinfo(dtype).max)

    def body(carry):
        i, k, key, log_prod = carry
        pair = threefry_split(key, (2,))
        k = lax.select(lax.gt(log_prod, lax.neg(lam)), lax.add(k, 1), k)
        u = _uniform01(pair[1], shape, dtypes.float32)
        return lax.add(i, 1), k, pair[0], lax.add(log_prod, xla_log(u))

    def cond(carry):
        i, _, _, log_prod = carry
        return lax.bitwise_and(jnp.any(lax.gt(log_prod, lax.neg(lam))), lax.lt(i, max_iters))

    init = (
        jnp.asarray(0, dtypes.int32),
        jnp.zeros(shape, dtype),
        data,
        jnp.zeros(shape, dtypes.float32),
    )
    k = lax.while_loop(cond, body, init)[1]
    return lax.sub(k, lax.full_like(k, 1)).astype(dtype)


def _poisson_rejection(data, lam, shape: tuple, dtype):
    """Hormann's transformed rejection with squeeze (PTRS), for lam >= 10."""
    max_iters = int(np.iinfo(dtype).max)
    log_lam = xla_log(lam)
    b = 0.931 + 2.53 * lax.sqrt(lam)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2)

    def body(carry):
        i, k_out, accepted, key = carry
        keys = threefry_split(key, (3,))
        u = _uniform01(keys[1], shape, lam.dtype) - 0.5
        v = _uniform01(keys[2], shape, lam.dtype)
        u_shifted = 0.5 - jnp.abs(u)
        k = lax.floor((2 * a / u_shifted + b) * u + lam + 0.43)
        s = xla_log(v * inv_alpha / (a / (u_shifted * u_shifted) + b))
        bound = -lam + k * log_lam - lax.lgamma(k + 1)
        accept1 = (u_shifted >= 0.07) & (v <= v_r)
        reject = (k < 0) | ((u_shifted < 0.013) & (v > u_shifted))
        accept = accept1 | (~reject & (s <= bound))
        return i + 1, lax.select(accept, k, k_out), accepted | accept, keys[0]

    def cond(carry):
        i, _, accepted, _ = carry
        return lax.bitwise_and(jnp.any(~accepted), lax.lt(i, max_iters))

    init = (
        jnp.asarray(0, dtypes.int32),
        jnp.full(shape, -1, lam.dtype),
        jnp.zeros(shape, bool),
        data,
    )
    return lax.while_loop(cond, body, init)[1].astype(dtype)


def poisson(key, lam, shape: Sequence[int] | None = None, dtype=None):
    """Poisson(lam) samples: Knuth's method for lam < 10, transformed rejection above."""
    data, _ = _check_key("poisson", key)
    dtype = dtypes.default_int() if dtype is None else dtypes.canonicalize(dtype)
    if not dtypes.is_integer(dtype):
        raise ValueError(f"dtype argument to `poisson` must be an int dtype, got {dtype.name}")
    shape = _param_shape("poisson", shape, lam)
    lam = _as_dtype(lam, dtypes.float32, shape)
    use_knuth = jnp.isnan(lam) | (lam < 10)
    lam_knuth = lax.select(use_knuth, lam, jnp.zeros_like(lam))
    lam_rejection = lax.select(use_knuth, jnp.full_like(lam, 1e5), lam)
    result = lax.select(
        use_knuth,
        _poisson_knuth(data, lam_knuth, shape, dtype),
        _poisson_rejection(data, lam_rejection, shape, dtype),
    )
    return lax.select(lam == 0, jnp.zeros_like(result), result)


def _binomial_inversion(data, count, prob, shape: tuple, dtype):
    """Sum geometric waiting times until they pass `count` (for count * p <= 10)."""
    log1m = xla_log1p(-prob)

    def body(carry):
        i, num_geom, geom_sum, key = carry
        pair = threefry_split(key, (2,))
        num_geom = lax.select(geom_sum <= count, num_geom + 1, num_geom)
        u = _uniform01(pair[0], shape, prob.dtype)
        geom_sum = geom_sum + lax.ceil(xla_log(u) / log1m)
        return i + 1, num_geom, geom_sum, pair[1]

    def cond(carry):
        return jnp.any(carry[2] <= count)

    init = (
        jnp.asarray(0, dtypes.int32),
        jnp.zeros(shape, prob.dtype),
        jnp.zeros(shape, prob.dtype),
        data,
    )
    return (lax.while_loop(cond, body, init)[1] - 1).astype(dtype)


_STIRLING_TAIL = (
    0.0810614667953272,
    0.0413406959554092,
    0.0276779256849983,
    0.02079067210376509,
    0.0166446911898211,
    0.0138761288230707,
    0.0118967099458917,
    0.0104112652619720,
    0.00925546218271273,
    0.00833056343336287,
)


def _stirling_tail(k):
    """log k! - (Stirling's approximation): a table for k <= 9, a series above."""
    table = jnp.asarray(np.array(_STIRLING_TAIL, k.dtype))
    use_table = k <= 9
    k = lax.clamp(np.array(0, k.dtype), k, np.array(9, k.dtype))
    kp1sq = (k + 1) * (k + 1)
    approx = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)
    return lax.select(use_table, table[jnp.floor(k).astype(dtypes.int32)], approx)


def _btrs(data, count, prob, shape: tuple, dtype):
    """Hormann's transformed rejection (BTRS) for count * p > 10."""
    stddev = lax.sqrt(count * prob * (1 - prob))
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * prob
    c = count * prob + 0.5
    v_r = 0.92 - 4.2 / b
    r = prob / (1 - prob)
    alpha = (2.83 + 5.1 / b) * stddev
    m = lax.floor((count + 1) * prob)

    def body(carry):
        i, k_out, accepted, key = carry
        keys = threefry_split(key, (3,))
        u = _uniform01(keys[1], shape, prob.dtype) - 0.5
        v = _uniform01(keys[2], shape, prob.dtype)
        us = 0.5 - jnp.abs(u)
        accept1 = (us >= 0.07) & (v <= v_r)
        k = lax.floor((2 * a / us + b) * u + c)
        reject = (k < 0) | (k > count)
        v = xla_log(v * alpha / (a / (us * us) + b))
        bound = (
            (m + 0.5) * xla_log((m + 1) / (r * (count - m + 1)))
            + (count + 1) * xla_log((count - m + 1) / (count - k + 1))
            + (k + 0.5) * xla_log(r * (count - k + 1) / (k + 1))
            + _stirling_tail(m)
            + _stirling_tail(count - m)
            - _stirling_tail(k)
            - _stirling_tail(count - k)
        )
        accept = accept1 | (~reject & (v <= bound))
        return i + 1, lax.select(accept, k, k_out), accepted | accept, keys[0]

    def cond(carry):
        return jnp.any(~carry[2])

    init = (
        jnp.asarray(0, dtypes.int32),
        jnp.full(shape, -1, prob.dtype),
        jnp.zeros(shape, bool),
        data,
    )
    return lax.while_loop(cond, body, init)[1].astype(dtype)


def binomial(key, n, p, shape: Sequence[int] | None = None, dtype=None):
    """Binomial(n, p) samples as floats: geometric inversion for n min(p, 1-p) <= 10, BTRS
    above; NaN for invalid parameters, inf for n = inf."""
    data, _ = _check_key("binomial", key)
    dtype = _float_dtype("binomial", dtype)
    shape = _param_shape("binomial", shape, n, p)
    prob = jnp.asarray(p)
    if not dtypes.is_inexact(prob.dtype):
        prob = prob.astype(dtypes.default_float())
    count = _as_dtype(n, prob.dtype, shape)
    prob = _broadcast(prob, shape)
    p_lt_half = prob < 0.5
    q = lax.select(p_lt_half, prob, 1.0 - prob)
    count_bad = jnp.isnan(count) | (count < 0.0)
    count_inf = jnp.isinf(count)
    q_nan, q_negative = jnp.isnan(q), q < 0.0
    q = lax.select(q_nan | q_negative, jnp.full_like(q, 0.01), q)
    use_inversion = count_bad | (count * q <= 10.0)
    count = lax.floor(count)
    count_inv = lax.select(use_inversion, count, jnp.zeros_like(count))
    count_btrs = lax.select(use_inversion, jnp.full_like(count, 1e4), count)
    q_btrs = lax.select(use_inversion, jnp.full_like(q, 0.5), q)
    samples = lax.select(
        use_inversion,
        _binomial_inversion(data, count_inv, q, shape, dtype),
        _btrs(data, count_btrs, q_btrs, shape, dtype),
    )
    invalid = q_negative | q_nan | count_bad
    samples = lax.select(invalid, jnp.full_like(samples, np.nan), samples)
    samples = lax.select(count_inf & ~invalid, jnp.full_like(samples, np.inf), samples)
    return lax.select(
        p_lt_half | invalid | count_inf, samples, count.astype(samples.dtype) - samples
    )


def multinomial(key, n, p, *, shape: Sequence[int] | None = None, dtype=None, unroll=1):
    """Counts of n draws over the categories of p (last axis), as a chain of binomials."""
    data, _ = _check_key("multinomial", key)
    dtype = _float_dtype("multinomial", dtype)
    p = jnp.asarray(p)
    if not dtypes.is_inexact(p.dtype):
        p = p.astype(dtypes.default_float())
    if shape is None:
        shape = tuple(p.shape)
    else:
        shape = canonicalize_shape(shape)
    n = jnp.broadcast_to(jnp.asarray(n), shape[:-1])
    p = jnp.moveaxis(jnp.broadcast_to(p, shape), -1, 0)
    remaining = jnp.flip(jnp.cumsum(jnp.flip(p, 0), axis=0), 0)
    ratios = p / jnp.where(remaining == 0, 1, remaining)
    keys = threefry_split(data, (ratios.shape[0],))

    def step(remainder, ratio_key):
        ratio, k = ratio_key
        count = binomial(k, remainder, jnp.clip(ratio, 0, 1), dtype=remainder.dtype)
        return remainder - count, count

    _, counts = lax.scan(step, n.astype(p.dtype), (ratios, keys), unroll=unroll)
    return jnp.moveaxis(counts, 0, -1).astype(dtype)


# --- multivariate normal and orthogonal matrices ----------------------------------------------


def multivariate_normal(
    key, mean, cov, shape: Sequence[int] | None = None, dtype=None, method: str = "cholesky"
):
    """N(mean, cov) samples of shape (*shape, n): mean + A z for a factor A A^T = cov (the
    Cholesky factor, or from the eigendecomposition or SVD of cov)."""
    data, _ = _check_key("multivariate_normal", key)
    dtype = _float_dtype("multivariate_normal", dtype)
    if method not in ("svd", "eigh", "cholesky"):
        raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
    mean, cov = jnp.asarray(mean, dtype), jnp.asarray(cov, dtype)
    if not mean.ndim >= 1:
        raise ValueError(
            f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == {mean.ndim}"
        )
    if not cov.ndim >= 2:
        raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == {cov.ndim}")
    n = mean.shape[-1]
    if tuple(cov.shape[-2:]) != (n, n):
        raise ValueError(
            f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, "
            f"but got cov.shape == {tuple(cov.shape)}."
        )
    if shape is None:
        shape = _broadcast_shapes(tuple(mean.shape[:-1]), tuple(cov.shape[:-2]))
    else:
        shape = canonicalize_shape(shape)
        _check_shape("normal", shape, tuple(mean.shape[:-1]), tuple(cov.shape[:-2]))
    if method == "svd":
        u, s, _ = jnp.linalg.svd(cov)
        factor = u * jnp.sqrt(s[..., None, :])
    elif method == "eigh":
        w, v = jnp.linalg.eigh(cov)
        factor = v * jnp.sqrt(w[..., None, :])
    else:
        factor = jnp.linalg.cholesky(cov)
    z = _normal_real(data, (*shape, n), dtype)
    return mean + jnp.einsum("...ij,...j->...i", factor, z)


def orthogonal(key, n: int, shape: Sequence[int] = (), dtype=None, m: int | None = None):
    """Haar-distributed orthogonal (n x m: semi-orthogonal) matrices of shape (*shape, n, m):
    the Q of a QR factorization of a Gaussian matrix, with column signs making R's diagonal
    positive."""
    data, _ = _check_key("orthogonal", key)
    dtype = _float_dtype("orthogonal", dtype)
    shape = canonicalize_shape(shape)
    n = operator.index(n)
    m = n if m is None else operator.index(m)
    rows, cols = max(n, m), min(n, m)
    z = _normal_real(data, (*shape, rows, cols), dtype)
    q, r = jnp.linalg.qr(z)
    x = q * jnp.expand_dims(jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1)), -2)
    return jnp.swapaxes(x, -1, -2) if n < m else x


# --- transforms of uniform and normal samples -------------------------------------------------


def cauchy(key, shape: Sequence[int] = (), dtype=None):
    """Standard Cauchy samples: tan(pi (u - 1/2)) for u in [eps, 1)."""
    data, _ = _check_key("cauchy", key)
    dtype = _float_dtype("cauchy", dtype)
    shape = canonicalize_shape(shape)
    u = _uniform(data, shape, dtype, float(dtypes.finfo(dtype).eps), 1.0)
    return lax.tan(lax.mul(np.array(np.pi, dtype), lax.sub(u, np.array(0.5, dtype))))


def lognormal(key, sigma=np.float32(1), shape: Sequence[int] | None = None, dtype=None):
    """exp(sigma * N(0, 1))."""
    data, _ = _check_key("lognormal", key)
    dtype = _float_dtype("lognormal", dtype)
    shape = () if shape is None else canonicalize_shape(shape)
    sigma = _as_dtype(sigma, dtype)
    return lax.exp(_normal_real(data, shape, dtype) * sigma)


def pareto(key, b, shape: Sequence[int] | None = None, dtype=None):
    """Pareto(b) samples on [1, inf): exp(E / b) for E exponential."""
    data, _ = _check_key("pareto", key)
    dtype = _float_dtype("pareto", dtype)
    shape = _param_shape("pareto", shape, b)
    e = lax.neg(xla_log1p(lax.neg(_uniform01(data, shape, dtype))))
    return lax.exp(e / _as_dtype(b, dtype))


def weibull_min(key, scale, concentration, shape: Sequence[int] = (), dtype=None):
    """Weibull samples: scale * (-log(1 - u)) ** (1 / concentration)."""
    data, _ = _check_key("weibull_min", key)
    dtype = _float_dtype("weibull_min", dtype)
    shape = canonicalize_shape(shape)
    u = _uniform01(data, shape, dtype)
    return jnp.power(-xla_log1p(-u), 1.0 / jnp.asarray(concentration, dtype)) * jnp.asarray(
        scale, dtype
    )


def geometric(key, p, shape: Sequence[int] | None = None, dtype=None):
    """The number of Bernoulli(p) trials up to the first success (>= 1): floor(log u /
    log(1 - p)) + 1 (default int32)."""
    data, _ = _check_key("geometric", key)
    dtype = dtypes.default_int() if dtype is None else dtypes.canonicalize(dtype)
    if not dtypes.is_integer(dtype):
        raise ValueError(f"dtype argument to `geometric` must be an int dtype, got {dtype.name}")
    shape = _param_shape("geometric", shape, p)
    p = jnp.asarray(p)
    if not dtypes.is_inexact(p.dtype):
        p = p.astype(dtypes.default_float())
    u = _uniform01(data, shape, np.dtype(p.dtype))
    u = jnp.where(u == 0, 1, u).astype(p.dtype)
    log_one_minus_p = _broadcast(xla_log1p(-p), shape)
    return (lax.floor(lax.div(xla_log(u), log_one_minus_p)) + 1).astype(dtype)


def maxwell(key, shape: Sequence[int] = (), dtype=None):
    """Maxwell samples: the length of a 3-d standard normal vector."""
    data, _ = _check_key("maxwell", key)
    dtype = _float_dtype("maxwell", dtype)
    shape = canonicalize_shape(shape)
    return _maxwell(data, shape, dtype)


def _maxwell(data, shape: tuple, dtype):
    z = _normal_real(data, (*shape, 3), dtype)
    return lax.sqrt(jnp.sum(z * z, axis=-1))


def double_sided_maxwell(key, loc, scale, shape: Sequence[int] = (), dtype=None):
    """A Maxwell sample with a random sign, scaled and shifted: sign * M * scale + loc."""
    data, _ = _check_key("double_sided_maxwell", key)
    dtype = _float_dtype("double_sided_maxwell", dtype)
    params_shape = _broadcast_shapes(_shape_of(loc), _shape_of(scale))
    shape = canonicalize_shape(shape) + params_shape
    key_m, key_r = _split_pair(data)
    maxwell_rvs = _maxwell(key_m, shape, dtype)
    sign = rademacher(key_r, shape, dtype)
    return sign * maxwell_rvs * jnp.asarray(scale, dtype) + jnp.asarray(loc, dtype)


def rayleigh(key, scale, shape: Sequence[int] | None = None, dtype=None):
    """Rayleigh(scale) samples: scale * sqrt(-2 log u)."""
    data, _ = _check_key("rayleigh", key)
    dtype = _float_dtype("rayleigh", dtype)
    shape = _param_shape("rayleigh", shape, scale)
    u = _uniform01(data, shape, dtype)
    scale = _as_dtype(scale, dtype, shape)
    return lax.mul(scale, lax.sqrt(lax.mul(xla_log(u), np.array(-2, dtype))))


def triangular(key, left, mode, right, shape: Sequence[int] | None = None, dtype=None):
    """Triangular(left, mode, right) samples by inverting the CDF."""
    data, _ = _check_key("triangular", key)
    dtype = _float_dtype("triangular", dtype)
    shape = _param_shape("triangular", shape, left, mode, right)
    left, mode, right = (_as_dtype(v, dtype, shape) for v in (left, mode, right))
    fc = (mode - left) / (right - left)
    u = _uniform01(data, shape, dtype)
    out1 = left + lax.sqrt(u * (right - left) * (mode - left))
    out2 = right - lax.sqrt((1 - u) * (right - left) * (right - mode))
    return lax.select(u < fc, out1, out2)


def wald(key, mean, shape: Sequence[int] | None = None, dtype=None):
    """Wald (inverse Gaussian) samples with scale 1 (Michael, Schucany and Haas)."""
    data, _ = _check_key("wald", key)
    dtype = _float_dtype("wald", dtype)
    shape = _param_shape("wald", shape, mean)
    k1, k2 = _split_pair(data)
    mean = _as_dtype(mean, dtype, shape)
    v = _normal_real(k1, shape, dtype)
    z = _uniform01(k2, shape, dtype)
    y = lax.integer_pow(v, 2)
    y_sq = lax.integer_pow(y, 2)
    mean_sq = lax.integer_pow(mean, 2)
    sqrt_term = lax.sqrt(4 * mean * y + mean_sq * y_sq)
    x = mean + mean_sq * y / 2 - mean / 2 * sqrt_term
    return lax.select(lax.le(z, mean / (mean + x)), x, mean_sq / x)

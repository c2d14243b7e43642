"""The Poisson distribution (jax.scipy.stats.poisson)."""

from __future__ import annotations

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.special import gammaincc, gammaln, xlogy
from kiln.scipy.stats._util import promote


def logpmf(k, mu, loc=0):
    """log P(K = k) = x log mu - log x! - mu for integer x = k - loc >= 0, -inf elsewhere."""
    k, mu, loc = promote("poisson.logpmf", k, mu, loc)
    x = k - loc
    log_probs = xlogy(x, mu) - gammaln(x + 1) - mu
    outside = jnp.logical_or(x < 0, x != jnp.floor(x))
    return jnp.where(outside, -np.inf, log_probs).astype(mu.dtype)


def pmf(k, mu, loc=0):
    """P(K = k)."""
    return jnp.exp(logpmf(k, mu, loc))


def cdf(k, mu, loc=0):
    """P(K <= k) = Q(floor(x) + 1, mu), 0 below loc."""
    k, mu, loc = promote("poisson.cdf", k, mu, loc)
    x = k - loc
    p = gammaincc(jnp.floor(1 + x), mu)
    return jnp.where(x < 0, 0.0, p).astype(mu.dtype)

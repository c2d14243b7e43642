"""The Bernoulli distribution (jax.scipy.stats.bernoulli)."""

from __future__ import annotations

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.special import xlog1py, xlogy
from kiln.scipy.stats._util import promote


def logpmf(k, p, loc=0):
    """log P(K = k): log(p) at 1, log(1 - p) at 0, -inf elsewhere."""
    k, p, loc = promote("bernoulli.logpmf", k, p, loc)
    x = k - loc
    inside = jnp.logical_or(x == 0, x == 1)
    return jnp.where(inside, xlogy(x, p) + xlog1py(1 - x, -p), -np.inf).astype(p.dtype)


def pmf(k, p, loc=0):
    """P(K = k)."""
    return jnp.exp(logpmf(k, p, loc))


def cdf(k, p):
    """P(K <= k): 0 below 0, 1 - p on [0, 1), 1 from 1 on (NaN for p outside [0, 1])."""
    k, p = promote("bernoulli.cdf", k, p)
    value = jnp.where(k < 0, 0.0, jnp.where(k < 1, 1 - p, 1.0)).astype(p.dtype)
    return jnp.where(jnp.logical_or(p < 0, p > 1), np.nan, value).astype(p.dtype)


def ppf(q, p):
    """The smallest k with cdf(k) >= q (NaN for q or p outside [0, 1])."""
    q, p = promote("bernoulli.ppf", q, p)
    valid = jnp.logical_and(jnp.logical_and(q >= 0, q <= 1), jnp.logical_and(p >= 0, p <= 1))
    return jnp.where(valid, jnp.where(q > 1 - p, 1.0, 0.0), np.nan).astype(q.dtype)

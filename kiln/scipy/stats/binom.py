"""The binomial distribution (jax.scipy.stats.binom)."""

from __future__ import annotations

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.special import gammaln, xlog1py, xlogy
from kiln.scipy.stats._util import promote


def logpmf(k, n, p, loc=0):
    """log P(K = k) = log C(n, y) + y log p + (n - y) log(1 - p), y = k - loc in [0, n]."""
    k, n, p, loc = promote("binom.logpmf", k, n, p, loc)
    y = k - loc
    comb = gammaln(n + 1) - gammaln(y + 1) - gammaln(n - y + 1)
    log_linear = xlogy(y, p) + xlog1py(n - y, -p)
    inside = jnp.logical_and(y >= 0, y <= n)
    return jnp.where(inside, comb + log_linear, -np.inf).astype(p.dtype)


def pmf(k, n, p, loc=0):
    """P(K = k)."""
    return jnp.exp(logpmf(k, n, p, loc))

"""The exponential distribution (jax.scipy.stats.expon)."""

from __future__ import annotations

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.stats._util import promote


def logpdf(x, loc=0, scale=1):
    """-(x - loc) / scale - log(scale) for x >= loc, -inf below."""
    x, loc, scale = promote("expon.logpdf", x, loc, scale)
    return jnp.where(x < loc, -np.inf, -(x - loc) / scale - jnp.log(scale))


def pdf(x, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """The CDF 1 - exp(-z), 0 below loc."""
    x, loc, scale = promote("expon.cdf", x, loc, scale)
    return jnp.where(x < loc, 0.0, -jnp.expm1(-(x - loc) / scale)).astype(x.dtype)


def logcdf(x, loc=0, scale=1):
    """log of the CDF."""
    x, loc, scale = promote("expon.logcdf", x, loc, scale)
    return jnp.where(x < loc, -np.inf, jnp.log(-jnp.expm1(-(x - loc) / scale))).astype(x.dtype)


def sf(x, loc=0, scale=1):
    """The survival function exp(-z), 1 below loc."""
    x, loc, scale = promote("expon.sf", x, loc, scale)
    return jnp.where(x < loc, 1.0, jnp.exp(-(x - loc) / scale)).astype(x.dtype)


def logsf(x, loc=0, scale=1):
    """log of the survival function, -z (0 below loc)."""
    x, loc, scale = promote("expon.logsf", x, loc, scale)
    return jnp.where(x < loc, 0.0, -(x - loc) / scale).astype(x.dtype)


def ppf(q, loc=0, scale=1):
    """The quantile function loc - scale log1p(-q) for q in [0, 1], NaN otherwise."""
    q, loc, scale = promote("expon.ppf", q, loc, scale)
    inside = jnp.logical_and(q >= 0, q <= 1)
    return jnp.where(inside, loc - scale * jnp.log1p(-q), np.nan).astype(q.dtype)

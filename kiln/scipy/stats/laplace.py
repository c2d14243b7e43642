"""The Laplace distribution (jax.scipy.stats.laplace)."""

from __future__ import annotations

from kiln import numpy as jnp
from kiln.scipy.stats._util import promote


def logpdf(x, loc=0, scale=1):
    """log of the density exp(-|x - loc| / scale) / (2 scale)."""
    x, loc, scale = promote("laplace.logpdf", x, loc, scale)
    return -jnp.log(2 * scale) - jnp.abs(x - loc) / scale


def pdf(x, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """The CDF: exp(z) / 2 below loc, 1 - exp(-z) / 2 above."""
    x, loc, scale = promote("laplace.cdf", x, loc, scale)
    z = (x - loc) / scale
    return jnp.where(z < 0, 0.5 * jnp.exp(z), 1 - 0.5 * jnp.exp(-z))

"""The logistic distribution (jax.scipy.stats.logistic)."""

from __future__ import annotations

from kiln import nn
from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._util import promote


def logpdf(x, loc=0, scale=1):
    """log of the density exp(-z) / (scale (1 + exp(-z))**2), z = (x - loc) / scale."""
    x, loc, scale = promote("logistic.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return -2 * nn.softplus(-z) - z - jnp.log(scale)


def pdf(x, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """The CDF expit((x - loc) / scale)."""
    x, loc, scale = promote("logistic.cdf", x, loc, scale)
    return special.expit((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
    """log of the CDF, -softplus(-z)."""
    x, loc, scale = promote("logistic.logcdf", x, loc, scale)
    return -nn.softplus(-(x - loc) / scale)


def sf(x, loc=0, scale=1):
    """The survival function expit(-z)."""
    x, loc, scale = promote("logistic.sf", x, loc, scale)
    return special.expit(-(x - loc) / scale)


def logsf(x, loc=0, scale=1):
    """log of the survival function, -softplus(z)."""
    x, loc, scale = promote("logistic.logsf", x, loc, scale)
    return -nn.softplus((x - loc) / scale)


def ppf(q, loc=0, scale=1):
    """The quantile function loc + scale logit(q)."""
    q, loc, scale = promote("logistic.ppf", q, loc, scale)
    return special.logit(q) * scale + loc


def isf(q, loc=0, scale=1):
    """The inverse survival function loc - scale logit(q)."""
    q, loc, scale = promote("logistic.isf", q, loc, scale)
    return -special.logit(q) * scale + loc

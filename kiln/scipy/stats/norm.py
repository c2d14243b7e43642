"""The normal distribution N(loc, scale**2) (jax.scipy.stats.norm)."""

from __future__ import annotations

import math

from kiln import numpy as jnp
from kiln.scipy import special
from kiln.scipy.stats._util import promote

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def logpdf(x, loc=0, scale=1):
    """log of the density: -((x - loc) / scale)**2 / 2 - log(scale) - log(sqrt(2 pi))."""
    x, loc, scale = promote("norm.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return -0.5 * z * z - jnp.log(scale) - _LOG_SQRT_2PI


def pdf(x, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """The cumulative distribution function."""
    x, loc, scale = promote("norm.cdf", x, loc, scale)
    return special.ndtr((x - loc) / scale)


def logcdf(x, loc=0, scale=1):
    """log of the CDF, accurate far in the lower tail."""
    x, loc, scale = promote("norm.logcdf", x, loc, scale)
    return special.log_ndtr((x - loc) / scale)


def sf(x, loc=0, scale=1):
    """The survival function 1 - cdf, as the CDF at the mirrored point."""
    x, loc, scale = promote("norm.sf", x, loc, scale)
    return cdf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """log of the survival function."""
    x, loc, scale = promote("norm.logsf", x, loc, scale)
    return logcdf(-x, -loc, scale)


def ppf(q, loc=0, scale=1):
    """The quantile function (inverse CDF)."""
    q, loc, scale = promote("norm.ppf", q, loc, scale)
    return special.ndtri(q) * scale + loc


def isf(q, loc=0, scale=1):
    """The inverse survival function."""
    q, loc, scale = promote("norm.isf", q, loc, scale)
    return ppf(1 - q, loc, scale)

"""The Cauchy distribution (jax.scipy.stats.cauchy)."""

from __future__ import annotations

import math

from kiln import numpy as jnp
from kiln.scipy.stats._util import promote


def logpdf(x, loc=0, scale=1):
    """log of the density 1 / (pi scale (1 + z**2))."""
    x, loc, scale = promote("cauchy.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return -math.log(math.pi) - jnp.log(scale) - jnp.log1p(z * z)


def pdf(x, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """The CDF 1/2 + atan(z) / pi."""
    x, loc, scale = promote("cauchy.cdf", x, loc, scale)
    return 0.5 + jnp.arctan((x - loc) / scale) / math.pi


def logcdf(x, loc=0, scale=1):
    """log of the CDF."""
    return jnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """The survival function, the CDF at the mirrored point."""
    x, loc, scale = promote("cauchy.sf", x, loc, scale)
    return cdf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """log of the survival function."""
    x, loc, scale = promote("cauchy.logsf", x, loc, scale)
    return logcdf(-x, -loc, scale)


def ppf(q, loc=0, scale=1):
    """The quantile function loc + scale tan(pi (q - 1/2))."""
    q, loc, scale = promote("cauchy.ppf", q, loc, scale)
    return loc + scale * jnp.tan(math.pi * (q - 0.5))


def isf(q, loc=0, scale=1):
    """The inverse survival function loc + scale tan(pi (1/2 - q))."""
    q, loc, scale = promote("cauchy.isf", q, loc, scale)
    return loc + scale * jnp.tan(math.pi * (0.5 - q))

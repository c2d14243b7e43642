"""The gamma distribution (jax.scipy.stats.gamma)."""

from __future__ import annotations

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.special import gammainc, gammaincc, gammaln, xlogy
from kiln.scipy.stats._util import promote


def logpdf(x, a, loc=0, scale=1):
    """log of the density y**(a-1) exp(-y) / (Gamma(a) scale), y = (x - loc) / scale >= 0."""
    x, a, loc, scale = promote("gamma.logpdf", x, a, loc, scale)
    y = (x - loc) / scale
    log_probs = xlogy(a - 1, y) - y - gammaln(a) - jnp.log(scale)
    return jnp.where(x < loc, -np.inf, log_probs).astype(x.dtype)


def pdf(x, a, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, a, loc, scale))


def cdf(x, a, loc=0, scale=1):
    """The CDF P(a, y), y clipped at 0."""
    x, a, loc, scale = promote("gamma.cdf", x, a, loc, scale)
    return gammainc(a, jnp.clip((x - loc) / scale, 0, None))


def logcdf(x, a, loc=0, scale=1):
    """log of the CDF."""
    return jnp.log(cdf(x, a, loc, scale))


def sf(x, a, loc=0, scale=1):
    """The survival function Q(a, y)."""
    x, a, loc, scale = promote("gamma.sf", x, a, loc, scale)
    return gammaincc(a, jnp.clip((x - loc) / scale, 0, None))


def logsf(x, a, loc=0, scale=1):
    """log of the survival function."""
    return jnp.log(sf(x, a, loc, scale))

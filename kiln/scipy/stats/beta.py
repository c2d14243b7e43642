"""The beta distribution (jax.scipy.stats.beta)."""

from __future__ import annotations

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.special import betainc, betaln, xlog1py, xlogy
from kiln.scipy.stats._util import promote


def logpdf(x, a, b, loc=0, scale=1):
    """log of the density y**(a-1) (1-y)**(b-1) / (B(a, b) scale), y = (x - loc) / scale in
    [0, 1]; -inf outside."""
    x, a, b, loc, scale = promote("beta.logpdf", x, a, b, loc, scale)
    y = (x - loc) / scale
    log_linear = xlogy(a - 1, y) + xlog1py(b - 1, -y)
    log_probs = log_linear - betaln(a, b) - jnp.log(scale)
    outside = jnp.logical_or(y < 0, y > 1)
    return jnp.where(outside, -np.inf, log_probs).astype(x.dtype)


def pdf(x, a, b, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, a, b, loc, scale))


def cdf(x, a, b, loc=0, scale=1):
    """The CDF I_y(a, b), y clipped to [0, 1]."""
    x, a, b, loc, scale = promote("beta.cdf", x, a, b, loc, scale)
    return betainc(a, b, jnp.clip((x - loc) / scale, 0, 1))


def logcdf(x, a, b, loc=0, scale=1):
    """log of the CDF."""
    return jnp.log(cdf(x, a, b, loc, scale))


def sf(x, a, b, loc=0, scale=1):
    """The survival function I_{1-y}(b, a)."""
    x, a, b, loc, scale = promote("beta.sf", x, a, b, loc, scale)
    return betainc(b, a, 1 - jnp.clip((x - loc) / scale, 0, 1))


def logsf(x, a, b, loc=0, scale=1):
    """log of the survival function."""
    return jnp.log(sf(x, a, b, loc, scale))

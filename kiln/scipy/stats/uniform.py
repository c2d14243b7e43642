"""The uniform distribution on [loc, loc + scale] (jax.scipy.stats.uniform)."""

from __future__ import annotations

import numpy as np

from kiln import numpy as jnp
from kiln.scipy.stats._util import promote


def logpdf(x, loc=0, scale=1):
    """-log(scale) inside [loc, loc + scale], -inf outside."""
    x, loc, scale = promote("uniform.logpdf", x, loc, scale)
    outside = jnp.logical_or(x > loc + scale, x < loc)
    return jnp.where(outside, -np.inf, -jnp.log(scale))


def pdf(x, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """The CDF: 0 below loc, (x - loc) / scale inside, 1 above."""
    x, loc, scale = promote("uniform.cdf", x, loc, scale)
    return jnp.where(x < loc, 0.0, jnp.where(x >= loc + scale, 1.0, (x - loc) / scale)).astype(
        x.dtype
    )


def ppf(q, loc=0, scale=1):
    """The quantile function loc + q scale for q in [0, 1], NaN otherwise."""
    q, loc, scale = promote("uniform.ppf", q, loc, scale)
    return jnp.where(jnp.logical_and(q >= 0, q <= 1), loc + q * scale, np.nan).astype(q.dtype)

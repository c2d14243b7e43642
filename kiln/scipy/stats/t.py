"""Student's t distribution (jax.scipy.stats.t)."""

from __future__ import annotations

import math

from kiln import numpy as jnp
from kiln.scipy.special import gammaln
from kiln.scipy.stats._util import promote


def logpdf(x, df, loc=0, scale=1):
    """log of the density: gammaln((df+1)/2) - gammaln(df/2) - log(df pi scale**2) / 2
    - (df + 1)/2 log1p(z**2 / df)."""
    x, df, loc, scale = promote("t.logpdf", x, df, loc, scale)
    z = (x - loc) / scale
    half_df = df / 2
    normalizer = gammaln(half_df) - gammaln(half_df + 0.5)
    normalizer = normalizer + jnp.log(scale * scale * df * math.pi) / 2
    return -(half_df + 0.5) * jnp.log1p(z * z / df) - normalizer


def pdf(x, df, loc=0, scale=1):
    """The density."""
    return jnp.exp(logpdf(x, df, loc, scale))

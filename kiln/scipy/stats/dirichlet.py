"""The Dirichlet distribution (jax.scipy.stats.dirichlet)."""

from __future__ import annotations

import numpy as np

from kiln import numpy as jnp
from kiln.numpy.util import promote_dtypes_inexact
from kiln.scipy.special import gammaln, xlogy


def _is_simplex(x):
    x_sum = jnp.sum(x, axis=0)
    return jnp.logical_and(jnp.all(x > 0, axis=0), jnp.abs(x_sum - 1) < 1e-6)


def logpdf(x, alpha):
    """log of the density at points x on the simplex (the components along the first axis;
    the last component may be left out), -inf off the simplex."""
    x, alpha = promote_dtypes_inexact(x, alpha)
    if alpha.ndim != 1:
        raise ValueError(f"`alpha` must be one-dimensional; got alpha.shape={alpha.shape}")
    if x.shape[0] not in (alpha.shape[0], alpha.shape[0] - 1):
        raise ValueError(
            "`x` must have either the same number of entries as `alpha` or one entry "
            f"fewer; got x.shape={x.shape}, alpha.shape={alpha.shape}"
        )
    one = jnp.ones((1,) + tuple(x.shape[1:]), dtype=x.dtype)
    if x.shape[0] != alpha.shape[0]:
        x = jnp.concatenate([x, one - jnp.sum(x, axis=0, keepdims=True)], axis=0)
    normalizer = jnp.sum(gammaln(alpha)) - gammaln(jnp.sum(alpha))
    if x.ndim > 1:
        alpha = alpha.reshape(alpha.shape + (1,) * (x.ndim - 1))
    log_probs = jnp.sum(xlogy(alpha - 1, x), axis=0) - normalizer
    return jnp.where(_is_simplex(x), log_probs, -np.inf).astype(x.dtype)


def pdf(x, alpha):
    """The density."""
    return jnp.exp(logpdf(x, alpha))

"""The multivariate normal distribution (jax.scipy.stats.multivariate_normal): the log density
whitens x - mean with the Cholesky factor of the covariance."""

from __future__ import annotations

import math

import numpy as np

from kiln import numpy as jnp
from kiln.lax_linalg import triangular_solve
from kiln.numpy.util import promote_dtypes_inexact


def logpdf(x, mean, cov, allow_singular=None):
    """log of the density of N(mean, cov) at x. A scalar or 0-d cov is a multiple of the
    identity; otherwise cov has shape (..., n, n). allow_singular is not supported."""
    if allow_singular is not None:
        raise NotImplementedError("allow_singular argument of multivariate_normal.logpdf")
    x, mean, cov = promote_dtypes_inexact(x, mean, cov)
    if not mean.shape:
        return -0.5 * jnp.square(x - mean) / cov - 0.5 * (math.log(2 * math.pi) + jnp.log(cov))
    n = mean.shape[-1]
    y = x - mean
    if not cov.shape:
        return -0.5 * jnp.sum(y * y, axis=-1) / cov - n / 2 * (math.log(2 * math.pi) + jnp.log(cov))
    if cov.ndim < 2 or tuple(cov.shape[-2:]) != (n, n):
        raise ValueError("multivariate_normal.logpdf got incompatible shapes")
    lower = jnp.linalg.cholesky(cov)
    batch = np.broadcast_shapes(tuple(lower.shape[:-2]), tuple(y.shape[:-1]))
    lower = jnp.broadcast_to(lower, batch + (n, n))
    y = jnp.broadcast_to(y, batch + (n,))
    white = triangular_solve(lower, y[..., None], left_side=True, lower=True)[..., 0]
    log_det = jnp.sum(jnp.log(jnp.diagonal(lower, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * jnp.sum(white * white, axis=-1) - n / 2 * math.log(2 * math.pi) - log_det


def pdf(x, mean, cov):
    """The density."""
    return jnp.exp(logpdf(x, mean, cov))

"""kiln.scipy.stats: log densities, CDFs and quantiles of SciPy's distributions with JAX's
semantics (jax.scipy.stats); each distribution is a module of functions."""

from kiln.scipy.stats import (  # noqa: F401
    bernoulli,
    beta,
    binom,
    cauchy,
    dirichlet,
    expon,
    gamma,
    laplace,
    logistic,
    multivariate_normal,
    norm,
    poisson,
    t,
    uniform,
)

"""kiln.scipy: SciPy's special functions, distributions and optimizers on kiln arrays, with
JAX's semantics (jax.scipy)."""

from kiln.scipy import special  # noqa: F401

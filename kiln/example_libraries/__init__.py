"""kiln.example_libraries: small, readable libraries built on kiln's public API, with the
interfaces of JAX's `jax.example_libraries`: `optimizers` (pure optimizer triples over
pytrees, and step-size schedules) and `stax` (neural-network layers as init/apply pairs).
"""

from kiln.example_libraries import optimizers, stax

__all__ = ["optimizers", "stax"]

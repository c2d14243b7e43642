"""kiln: composable transformations of numerical Python programs, compiled to native code."""
from kiln.config import config
from kiln.api import ShapeDtypeStruct, make_jaxpr
from kiln.runtime.array import Array

from kiln import lax, numpy, nn, tree_util  # noqa: E402  (the public namespaces)

__version__ = "0.1.0"

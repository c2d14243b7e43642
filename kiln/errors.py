"""kiln.errors: the exception types kiln raises where JAX raises them, for `except` clauses
(`except kiln.errors.ConcretizationTypeError`)."""

from kiln.core.errors import (  # noqa: F401
    ConcretizationTypeError,
    KilnTypeError,
    NonConcreteBooleanIndexError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerIntegerConversionError,
    UnexpectedTracerError,
)
from kiln.core.jaxpr import JaxprTypeError  # noqa: F401

# JAX's name for the base of the tracer TypeErrors.
JAXTypeError = KilnTypeError

__all__ = [
    "ConcretizationTypeError",
    "JAXTypeError",
    "JaxprTypeError",
    "KilnTypeError",
    "NonConcreteBooleanIndexError",
    "TracerArrayConversionError",
    "TracerBoolConversionError",
    "TracerIntegerConversionError",
    "UnexpectedTracerError",
]

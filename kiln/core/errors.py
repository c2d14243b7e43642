"""The errors kiln raises where JAX raises them; each names the culprit and suggests the fix."""

from __future__ import annotations

_DOCS = "https://jax.readthedocs.io/en/latest/errors.html"


class KilnTypeError(TypeError):
    """Base for tracer errors that are TypeErrors (as in JAX)."""


class ConcretizationTypeError(KilnTypeError):
    """A traced (abstract) value was used where Python needed a concrete one."""

    def __init__(self, tracer, context: str = ""):
        self.tracer = tracer
        super().__init__(
            f"Abstract tracer value encountered where concrete value is expected: {tracer}\n"
            f"{context}{tracer._origin_msg()}\n"
            f"See {_DOCS}#jax.errors.ConcretizationTypeError"
        )


class TracerBoolConversionError(ConcretizationTypeError):
    def __init__(self, tracer):
        self.tracer = tracer
        KilnTypeError.__init__(
            self,
            f"Attempted boolean conversion of traced array with shape {tracer.aval.str_short()}..\n"
            f"{tracer._origin_msg()}\n"
            "Use lax.cond or jnp.where for value-dependent branches, or mark the argument as "
            "static with static_argnums/static_argnames.\n"
            f"See {_DOCS}#jax.errors.TracerBoolConversionError",
        )


class TracerIntegerConversionError(KilnTypeError):
    def __init__(self, tracer):
        self.tracer = tracer
        super().__init__(
            f"The __index__() method was called on traced array with shape "
            f"{tracer.aval.str_short()}.\n{tracer._origin_msg()}\n"
            "Python needs a concrete integer here; mark the argument as static with "
            "static_argnums/static_argnames, or use lax.dynamic_slice for traced offsets.\n"
            f"See {_DOCS}#jax.errors.TracerIntegerConversionError"
        )


class TracerArrayConversionError(KilnTypeError):
    def __init__(self, tracer):
        self.tracer = tracer
        super().__init__(
            f"The numpy.ndarray conversion method __array__() was called on traced array with "
            f"shape {tracer.aval.str_short()}.\n{tracer._origin_msg()}\n"
            "Use kiln.numpy functions instead of numpy ones inside transformed functions, or "
            "kiln.pure_callback to call host code.\n"
            f"See {_DOCS}#jax.errors.TracerArrayConversionError"
        )


class NonConcreteBooleanIndexError(IndexError):
    def __init__(self, aval):
        super().__init__(
            f"Array boolean indices must be concrete; got {aval}\n"
            "A traced boolean mask gives an array whose shape depends on its values. Use "
            "jnp.where(mask, x, y) (or x * mask) to keep shapes static.\n"
            f"See {_DOCS}#jax.errors.NonConcreteBooleanIndexError"
        )


class UnexpectedTracerError(Exception):
    def __init__(self, msg: str):
        super().__init__(
            msg + "\nThis usually means a traced value escaped its transformation through a "
            "side effect (a global, a list, an attribute). Return it from the function instead.\n"
            f"See {_DOCS}#jax.errors.UnexpectedTracerError"
        )

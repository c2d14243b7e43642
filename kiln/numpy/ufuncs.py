"""Elementwise kiln.numpy functions (NumPy's ufuncs), built from lax with JAX's promotion."""
from __future__ import annotations

from kiln import lax
from kiln.numpy.util import check_arraylike, promote_and_broadcast

__all__ = ["add", "subtract", "multiply", "divide", "true_divide", "negative", "exp", "log",
           "tanh", "maximum", "minimum", "equal", "not_equal", "less", "less_equal", "greater",
           "greater_equal"]


def _binary(name: str, lax_fn, inexact: bool = False):
    def ufunc(x, y, /):
        x, y = promote_and_broadcast(name, x, y, inexact=inexact)
        return lax_fn(x, y)
    ufunc.__name__ = name
    ufunc.__doc__ = f"Elementwise {name} with NumPy broadcasting and JAX type promotion."
    return ufunc


def _unary(name: str, lax_fn, inexact: bool = False):
    def ufunc(x, /):
        (x,) = promote_and_broadcast(name, x, inexact=inexact)
        return lax_fn(x)
    ufunc.__name__ = name
    ufunc.__doc__ = f"Elementwise {name}."
    return ufunc


add = _binary("add", lax.add)
subtract = _binary("subtract", lax.sub)
multiply = _binary("multiply", lax.mul)
true_divide = divide = _binary("divide", lax.div, inexact=True)
maximum = _binary("maximum", lax.max)
minimum = _binary("minimum", lax.min)
equal = _binary("equal", lax.eq)
not_equal = _binary("not_equal", lax.ne)
less = _binary("less", lax.lt)
less_equal = _binary("less_equal", lax.le)
greater = _binary("greater", lax.gt)
greater_equal = _binary("greater_equal", lax.ge)
negative = _unary("negative", lax.neg)
exp = _unary("exp", lax.exp, inexact=True)
log = _unary("log", lax.log, inexact=True)
tanh = _unary("tanh", lax.tanh, inexact=True)

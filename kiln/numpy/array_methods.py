"""Operators and methods shared by kiln.Array and tracers, defined once in terms of
kiln.numpy. kiln.Array also gets a fast path for same-shape, same-dtype arithmetic in eager mode,
which skips promotion and tracing machinery entirely (it is what `x * y` costs)."""

from __future__ import annotations

import functools

import numpy as np

from kiln.core.array import Array
from kiln.core import trace as _trace
from kiln.core.trace import Tracer, current_trace_state

# The eager fast path calls a NumPy ufunc directly; like XLA, kiln produces inf/nan silently,
# whatever NumPy's error state and the warnings filters (a filter of this module's warnings was
# undone by pytest's per-test filters, and `filterwarnings = error` made inf - inf raise). Each
# call sets NumPy's error-state context variable to "ignore" and back, which is what np.errstate
# does, without its object (entering np.errstate costs four times the multiply itself).
try:
    from numpy._core.umath import _extobj_contextvar as _fp_errors, _make_extobj

    _FP_QUIET = _make_extobj(all="ignore")
except (ImportError, TypeError):  # (a NumPy without them as 2.4 has them: np.errstate, slower)
    _fp_errors = _FP_QUIET = None


def _errstate_enter():
    state = np.errstate(all="ignore")
    state.__enter__()
    return state


def _errstate_exit(state) -> None:
    state.__exit__(None, None, None)


_jnp_module = None


def _jnp():
    global _jnp_module
    if _jnp_module is None:
        import kiln.numpy as jnp

        _jnp_module = jnp
    return _jnp_module


def _forward(name: str, reverse: bool = False):
    if reverse:

        def op(self, other):
            return getattr(_jnp(), name)(other, self)
    else:

        def op(self, other):
            return getattr(_jnp(), name)(self, other)

    op.__name__ = name
    return op


def _fast_binop(ufunc, name: str, reverse: bool = False):
    """Eager fast paths that need no promotion or broadcasting: two arrays of the same dtype
    and shape, or a float array and a Python float (which, being weakly typed, takes the
    array's dtype). 0-d arrays take the general path, since NumPy returns scalars for them."""
    slow = _forward(name, reverse)
    new_array = functools.partial(object.__new__, Array)
    if _fp_errors is not None:
        quiet, loud = functools.partial(_fp_errors.set, _FP_QUIET), _fp_errors.reset
    else:
        quiet, loud = _errstate_enter, _errstate_exit

    def op(self, other):
        # (the general path while debug_nans/debug_infs check each result)
        if current_trace_state.trace is None and _trace._special_value_check is None:
            a = self._value
            kind = type(other)
            if kind is Array:
                b = other._value
                if not (
                    a.dtype is b.dtype and a.shape == b.shape and a.shape and a.dtype.kind in "fiu"
                ):
                    return slow(self, other)
                weak = self.weak_type and other.weak_type
            elif kind is float and a.dtype.kind == "f" and a.shape:
                b = a.dtype.type(other)
                weak = self.weak_type
            else:
                return slow(self, other)
            result = new_array()
            token = quiet()
            try:
                result._value = ufunc(b, a) if reverse else ufunc(a, b)
            finally:
                loud(token)
            result.weak_type = weak
            result._aval = None
            result._address = None
            result._readonly = None
            result._sig = None
            return result
        return slow(self, other)

    op.__name__ = name
    return op


_BINARY = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "truediv": "true_divide",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "pow": "power",
    "matmul": "matmul",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "lshift": "left_shift",
    "rshift": "right_shift",
    "divmod": "divmod",
}
_COMPARE = {
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
}
_UNARY = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "invert"}

# method name -> kiln.numpy function name (the array is the first argument)
_METHODS = {
    "all": "all",
    "any": "any",
    "argmax": "argmax",
    "argmin": "argmin",
    "argsort": "argsort",
    "astype": "_astype",
    "clip": "clip",
    "conj": "conjugate",
    "conjugate": "conjugate",
    "cumprod": "cumprod",
    "cumsum": "cumsum",
    "diagonal": "diagonal",
    "dot": "dot",
    "flatten": "ravel",
    "max": "max",
    "mean": "mean",
    "min": "min",
    "nonzero": "nonzero",
    "prod": "prod",
    "ptp": "ptp",
    "ravel": "ravel",
    "repeat": "repeat",
    "round": "round",
    "searchsorted": "searchsorted",
    "sort": "sort",
    "squeeze": "squeeze",
    "std": "std",
    "sum": "sum",
    "swapaxes": "swapaxes",
    "take": "take",
    "trace": "trace",
    "var": "var",
    "copy": "copy",
}


def _reshape(self, *shape, order="C"):
    if len(shape) == 1 and not isinstance(shape[0], int) and not hasattr(shape[0], "__index__"):
        shape = shape[0]
    return _jnp().reshape(self, shape, order=order)


def _transpose(self, *axes):
    if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
        axes = axes[0]
    return _jnp().transpose(self, axes or None)


def _method(name: str):
    def method(self, *args, **kwargs):
        return getattr(_jnp(), name)(self, *args, **kwargs)

    method.__name__ = name
    return method


def _getitem(self, index):
    return _jnp()._getitem(self, index)


def _at(self):
    return _jnp()._IndexUpdateHelper(self)


def _T(self):
    return _jnp().transpose(self)


def _mT(self):
    return _jnp().swapaxes(self, -1, -2)


def _real(self):
    return _jnp().real(self)


def _imag(self):
    return _jnp().imag(self)


def install(cls, fast: bool) -> None:
    fast_ufuncs = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
    for short, fname in _BINARY.items():
        if fast and short in fast_ufuncs:
            setattr(cls, f"__{short}__", _fast_binop(fast_ufuncs[short], fname))
            setattr(cls, f"__r{short}__", _fast_binop(fast_ufuncs[short], fname, reverse=True))
        else:
            setattr(cls, f"__{short}__", _forward(fname))
            setattr(cls, f"__r{short}__", _forward(fname, reverse=True))
    for short, fname in _COMPARE.items():
        setattr(cls, f"__{short}__", _forward(fname))
    for short, fname in _UNARY.items():
        setattr(cls, f"__{short}__", _method(fname))
    for mname, fname in _METHODS.items():
        setattr(cls, mname, _method(fname))
    cls.reshape = _reshape
    cls.transpose = _transpose
    cls.__getitem__ = _getitem
    cls.at = property(_at)
    cls.T = property(_T)
    cls.mT = property(_mT)
    cls.real = property(_real)
    cls.imag = property(_imag)
    cls.__round__ = lambda self, ndigits=None: _jnp().round(self, ndigits or 0)


install(Array, fast=True)
install(Tracer, fast=False)

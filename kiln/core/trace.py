"""Traces and tracers: the current-trace model and eager evaluation.

With no transformation active, `bind` evaluates a primitive's NumPy `impl` (eager mode). A
transformation installs its Trace as the current one; each Trace knows its parent, and a Trace
handles a value that is not one of its own tracers as a constant of its computation.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any

import numpy as np

from kiln.core import dtypes, errors, rules
from kiln.core.array import Array
from kiln.core.avals import ShapedArray


class _TraceState(threading.local):
    trace: "Trace | None" = None


current_trace_state = _TraceState()


def current_trace() -> "Trace | None":
    return current_trace_state.trace


@contextmanager
def set_current_trace(trace: "Trace | None"):
    state = current_trace_state
    previous = state.trace
    state.trace = trace
    try:
        yield trace
    finally:
        state.trace = previous


class Trace:
    """A transformation in progress. Subclasses implement `process_primitive`."""

    def __init__(self, parent: "Trace | None"):
        self.parent = parent
        self.level = 1 if parent is None else parent.level + 1
        self.alive = True

    def process_primitive(self, primitive, args, params):
        raise NotImplementedError

    def invalidate(self) -> None:
        """Called when the transformation ends: its tracers may no longer be used."""
        self.alive = False


class Tracer:
    """A stand-in for an array while a transformation runs."""

    __slots__ = ("_trace", "__weakref__")
    __array_priority__ = 1000

    @property
    def aval(self) -> ShapedArray:
        raise NotImplementedError

    def to_concrete_value(self):
        """The concrete value behind this tracer if the transformation knows it, else None."""
        return None

    @property
    def shape(self) -> tuple:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return len(self.aval.shape)

    @property
    def size(self) -> int:
        return self.aval.size

    @property
    def weak_type(self) -> bool:
        return self.aval.weak_type

    def __len__(self) -> int:
        if not self.aval.shape:
            raise TypeError("len() of unsized object")
        return self.aval.shape[0]

    def __iter__(self):
        if not self.aval.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.aval.shape[0]))

    def __bool__(self) -> bool:
        value = self.to_concrete_value()
        if value is None:
            raise errors.TracerBoolConversionError(self)
        return bool(value)

    def __index__(self) -> int:
        value = self.to_concrete_value()
        if value is None or not dtypes.is_integer(self.aval.dtype):
            raise errors.TracerIntegerConversionError(self)
        return int(value)

    def __int__(self) -> int:
        value = self.to_concrete_value()
        if value is None:
            raise errors.ConcretizationTypeError(
                self, "The problem arose with the `int` function. "
            )
        return int(value)

    def __float__(self) -> float:
        value = self.to_concrete_value()
        if value is None:
            raise errors.ConcretizationTypeError(
                self, "The problem arose with the `float` function. "
            )
        return float(value)

    def __complex__(self) -> complex:
        value = self.to_concrete_value()
        if value is None:
            raise errors.ConcretizationTypeError(
                self, "The problem arose with the `complex` function. "
            )
        return complex(value)

    def __array__(self, dtype=None, copy=None):
        raise errors.TracerArrayConversionError(self)

    def __hash__(self):
        raise TypeError(
            f"unhashable type: {type(self).__name__}. Static arguments must be "
            "hashable Python values, not traced arrays."
        )

    def __setitem__(self, index, value):
        raise TypeError(_IMMUTABLE_MSG.format(type(self).__name__))

    def _origin_msg(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"Traced<{self.aval}>with<{self._trace}>"

    __str__ = __repr__


_IMMUTABLE_MSG = (
    "'{}' object does not support item assignment. JAX arrays are immutable. Instead of "
    "x[idx] = y, use x = x.at[idx].set(y) or another .at[] method: "
    "https://jax.readthedocs.io/en/latest/_autosummary/jax.numpy.ndarray.at.html"
)


def leaked_tracer_error(tracer: Tracer) -> errors.UnexpectedTracerError:
    return errors.UnexpectedTracerError(
        f"Encountered an unexpected tracer. A function transformed by kiln had a side effect, "
        f"allowing for a reference to an intermediate value with type "
        f"{tracer.aval.str_short()} wrapped in a {type(tracer).__name__} to escape the scope "
        f"of the transformation."
    )


# --- eager evaluation ------------------------------------------------------------------------


def to_numpy_and_weak(x: Any) -> tuple[np.ndarray, bool]:
    """Unwrap an eager operand: kiln.Array, NumPy value or Python scalar."""
    if type(x) is Array:
        return x._value, x.weak_type
    if isinstance(x, Tracer):
        raise leaked_tracer_error(x)
    if isinstance(x, np.ndarray):
        dtype = dtypes.canonicalize(x.dtype)
        return (x if x.dtype == dtype else x.astype(dtype)), False
    dtype, weak = dtypes.dtype_and_weak_of(x)
    return np.asarray(x, dtype=dtype), weak


# Eager calls run the same abstract evaluation as traced ones (so an op that would fail under
# jit fails eagerly too, and results get the same dtype and weak type), memoized per signature.
_eager_avals: dict = {}
_EAGER_AVALS_LIMIT = 8192


def _eager_out_avals(primitive, values, weak, params):
    try:
        key = (
            primitive,
            tuple((v.shape, v.dtype, w) for v, w in zip(values, weak)),
            tuple(params.items()),
        )
        return _eager_avals[key]
    except KeyError:
        pass
    except TypeError:  # unhashable params (e.g. a callback): evaluate without memoizing
        key = None
    in_avals = [ShapedArray(v.shape, v.dtype, w) for v, w in zip(values, weak)]
    out = rules.abstract_eval_rules[primitive](*in_avals, **params)
    out = tuple(out) if primitive.multiple_results else out
    if key is not None:
        if len(_eager_avals) >= _EAGER_AVALS_LIMIT:
            _eager_avals.clear()
        _eager_avals[key] = out
    return out


def _wrap_output(value, aval):
    value = np.asarray(value)
    if value.dtype != aval.dtype:
        value = value.astype(aval.dtype)
    return Array._wrap(value, aval.weak_type)


# Native kernels for large eager operations live above core (kiln/runtime/eager_kernels.py),
# which registers them here: the primitives it may run, and a hook taking (primitive, NumPy
# values, params, out avals) that returns the outputs, or None to leave the op to its impl.
_eager_kernel_primitives: frozenset = frozenset()
_eager_kernel_hook = None


def set_eager_kernel_hook(primitives, hook) -> None:
    """Install `hook` as the native path of eager `primitives` (a hook of None removes it)."""
    global _eager_kernel_primitives, _eager_kernel_hook
    _eager_kernel_hook = hook
    _eager_kernel_primitives = frozenset(primitives) if hook is not None else frozenset()


# While the debug_nans / debug_infs flags are on, kiln/core/debug_checks.py installs a check
# of every eager result here (None otherwise: one test per call).
_special_value_check = None


def set_special_value_check(check) -> None:
    """Install `check(primitive, result, args, params)`, run on each eager primitive's result
    (an Array, or a list of them); None removes it."""
    global _special_value_check
    _special_value_check = check


def eval_primitive(primitive, args, params):
    """Run a primitive eagerly on concrete values: through its NumPy impl, or a native kernel
    that an upper layer installed for large operands."""
    values, weak = [], []
    for a in args:
        if type(a) is Array:
            values.append(a._value)
            weak.append(a.weak_type)
        else:
            v, w = to_numpy_and_weak(a)
            values.append(v)
            weak.append(w)
    out_avals = _eager_out_avals(primitive, values, weak, params)
    out = None
    if primitive in _eager_kernel_primitives:
        out = _eager_kernel_hook(primitive, values, params, out_avals)
    if out is None:
        out = rules.impl_rules[primitive](*values, **params)
    if primitive.multiple_results:
        result = [_wrap_output(o, a) for o, a in zip(out, out_avals)]
    else:
        result = _wrap_output(out, out_avals)
    if _special_value_check is not None:
        _special_value_check(primitive, result, args, params)
    return result

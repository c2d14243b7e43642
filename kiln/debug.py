"""kiln.debug: `print` and `callback`, which run every time a (compiled) function runs.

Both stage one effectful `debug_callback` equation: it is never removed, merged or folded by the
optimizer, and the interpreter runs it in program order. Called eagerly, they run at once.
Under differentiation they see the primal values; under vmap they run once per batch element.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable

import numpy as np
import optree

from kiln.core.array import Array
from kiln.core.primitive import Primitive
from kiln.core.trace import Tracer, current_trace_state
from kiln.primitives.base import batch_size
from kiln.primitives.shape_slice import index_in_dim

__all__ = ["print", "callback", "debug_callback_p"]

_NAMESPACE = "kiln"
_DYNAMIC = (Array, Tracer, np.ndarray, np.generic)


class _HostCall:
    """The host function a debug_callback equation calls, and how to rebuild its arguments
    from the equation's inputs (arrays) and the values fixed at trace time (everything else,
    e.g. strings and Python scalars, which keep their exact Python formatting)."""

    __slots__ = ("fn", "in_tree", "static", "label")

    def __init__(self, fn: Callable, in_tree, static: dict, label: str):
        self.fn = fn
        self.in_tree = in_tree
        self.static = static  # leaf position -> value
        self.label = label

    def __call__(self, *values) -> None:
        dynamic = iter(values)
        leaves = [
            self.static[i] if i in self.static else _as_array(next(dynamic))
            for i in range(self.in_tree.num_leaves)
        ]
        args, kwargs = optree.tree_unflatten(self.in_tree, leaves)
        self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return self.label


def _as_array(value: Any) -> Any:
    if isinstance(value, (Array, Tracer)):
        return value
    value = np.asarray(value)
    return Array._wrap(value.copy() if value.flags.writeable else value)


# --- the primitive ---------------------------------------------------------------------------
debug_callback_p = Primitive("debug_callback", multiple_results=True)
debug_callback_p.foldable = False


@debug_callback_p.def_impl
def _debug_callback_impl(*values, callback: _HostCall, effect: str) -> list:
    callback(*values)
    return []


@debug_callback_p.def_abstract_eval
def _debug_callback_abstract_eval(*avals, callback: _HostCall, effect: str) -> list:
    return []


@debug_callback_p.def_effects
def _debug_callback_effects_rule(*, callback, effect):
    return frozenset({effect})


@debug_callback_p.def_jvp
def _debug_callback_jvp_rule(primals, tangents, *, callback: _HostCall, effect: str):
    # The callback has no results, so there is no tangent to give; it sees the primal values.
    debug_callback_p.bind(*primals, callback=callback, effect=effect)
    return [], []


@debug_callback_p.def_transpose
def _debug_callback_transpose_rule(cotangents, *args, callback: _HostCall, effect: str):
    # Nothing flows back through a callback without results.
    return [None] * len(args)


@debug_callback_p.def_batching
def _debug_callback_batching_rule(args, dims, *, callback: _HostCall, effect: str):
    # As JAX does: the callback runs once per batch element, in order, with that element's
    # slice of each batched argument (the unbatched ones are passed whole every time).
    for i in range(batch_size(args, dims)):
        example = [
            x if d is None else index_in_dim(x, i, d, keepdims=False) for x, d in zip(args, dims)
        ]
        debug_callback_p.bind(*example, callback=callback, effect=effect)
    return [], []


def _stage(fn: Callable, label: str, ordered: bool, args: tuple, kwargs: dict) -> None:
    leaves, in_tree = optree.tree_flatten((args, kwargs), namespace=_NAMESPACE)
    static = {i: x for i, x in enumerate(leaves) if not isinstance(x, _DYNAMIC)}
    dynamic = [x for x in leaves if isinstance(x, _DYNAMIC)]
    host_call = _HostCall(fn, in_tree, static, label)
    if current_trace_state.trace is None:
        host_call(*dynamic)  # eager: run now
        return
    debug_callback_p.bind(
        *dynamic, callback=host_call, effect="OrderedDebug" if ordered else "Debug"
    )


# --- the public functions ----------------------------------------------------------------------


def print(fmt: str, *args, ordered: bool = False, **kwargs) -> None:  # noqa: A001
    """Print `fmt.format(*args, **kwargs)` each time the function runs (not only when it is
    traced). Arrays format as NumPy prints them."""
    if not isinstance(fmt, str):
        raise TypeError(f"kiln.debug.print: the format must be a string, got {type(fmt)}")

    def print_formatted(*call_args, **call_kwargs) -> None:
        builtins.print(fmt.format(*call_args, **call_kwargs))

    _stage(print_formatted, f"print({fmt!r})", ordered, args, kwargs)


def callback(fn: Callable, *args, ordered: bool = False, **kwargs) -> None:
    """Call `fn(*args, **kwargs)` on the host each time the function runs; array arguments
    arrive as kiln Arrays. The return value is ignored."""
    if not callable(fn):
        raise TypeError(f"kiln.debug.callback: expected a callable, got {fn!r}")
    _stage(fn, f"callback({getattr(fn, '__name__', type(fn).__name__)})", ordered, args, kwargs)

"""Host callbacks: pure_callback (a pure function computed on the host, in NumPy) and
io_callback (a callback with side effects), plus effects_barrier.

Each stages one equation whose impl calls the host function with NumPy arrays and checks the
results against the declared shapes and dtypes. pure_callback may be removed when its result
is unused (it is pure); io_callback never is.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import optree

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive

__all__ = ["pure_callback", "io_callback", "effects_barrier"]

_NAMESPACE = "kiln"


class _HostFunction:
    """The user's callback with the pytree structures of its arguments and results."""

    __slots__ = ("fn", "in_tree", "out_tree", "kind")

    def __init__(self, fn: Callable, in_tree, out_tree, kind: str):
        self.fn = fn
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.kind = kind

    def __call__(self, values: tuple, result_avals: tuple) -> list[np.ndarray]:
        args, kwargs = optree.tree_unflatten(self.in_tree, [np.asarray(v) for v in values])
        result = self.fn(*args, **kwargs)
        leaves, tree = optree.tree_flatten(result, namespace=_NAMESPACE)
        if tree != self.out_tree and (tree.num_leaves or self.out_tree.num_leaves):
            raise TypeError(f"{self.kind}: the callback {self._name()} returned a value with "
                            f"structure {tree}, but result_shape_dtypes declared "
                            f"{self.out_tree}.")
        paths = optree.tree_paths(result, namespace=_NAMESPACE)
        return [self._check(leaf, aval, path) for leaf, aval, path
                in zip(leaves, result_avals, paths)]

    def _check(self, leaf: Any, aval: ShapedArray, path: tuple) -> np.ndarray:
        where = "".join(f"[{k!r}]" for k in path) or "the result"
        if isinstance(leaf, (np.ndarray, np.generic)) or hasattr(leaf, "__array__") and \
                hasattr(leaf, "dtype"):
            value = np.asarray(leaf)
            if value.dtype != aval.dtype:
                raise TypeError(
                    f"{self.kind}: the callback {self._name()} returned dtype {value.dtype} at "
                    f"{where}, but result_shape_dtypes declared {aval.dtype}. Return arrays of "
                    f"the declared dtype (e.g. np.asarray(out, dtype=np.{aval.dtype.name})).")
        else:  # a Python scalar or list: convert to the declared dtype
            value = np.asarray(leaf, dtype=aval.dtype)
        if value.shape != aval.shape:
            raise ValueError(
                f"{self.kind}: the callback {self._name()} returned shape {value.shape} at "
                f"{where}, but result_shape_dtypes declared {aval.shape}.")
        return value

    def _name(self) -> str:
        return getattr(self.fn, "__name__", type(self.fn).__name__)

    def __repr__(self) -> str:
        return f"<{self.kind} {self._name()}>"


def _result_avals(result_shape_dtypes: Any) -> tuple[tuple, Any]:
    leaves, tree = optree.tree_flatten(result_shape_dtypes, namespace=_NAMESPACE)
    avals = []
    for leaf in leaves:
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            raise TypeError("result_shape_dtypes must be a pytree of objects with .shape and "
                            f".dtype (e.g. kiln.ShapeDtypeStruct), got {leaf!r}")
        avals.append(ShapedArray(tuple(leaf.shape), dtypes.canonicalize(leaf.dtype),
                                 bool(getattr(leaf, "weak_type", False))))
    return tuple(avals), tree


# --- pure_callback ----------------------------------------------------------------------------
pure_callback_p = Primitive("pure_callback", multiple_results=True)
pure_callback_p.foldable = False  # the host function runs when the program runs, not before


@pure_callback_p.def_impl
def _pure_callback_impl(*values, callback: _HostFunction, result_avals: tuple, vmap_method):
    return callback(values, result_avals)


@pure_callback_p.def_abstract_eval
def _pure_callback_abstract_eval(*avals, callback, result_avals: tuple, vmap_method):
    return list(result_avals)


def pure_callback(callback: Callable, result_shape_dtypes: Any, *args,
                  vmap_method: str | None = None, **kwargs) -> Any:
    """Call the pure host function `callback(*args, **kwargs)` on NumPy arrays.

    result_shape_dtypes is a pytree of ShapeDtypeStruct (or anything with .shape and .dtype)
    describing the result; a callback whose results differ in shape or dtype raises."""
    result_avals, out_tree = _result_avals(result_shape_dtypes)
    leaves, in_tree = optree.tree_flatten((args, kwargs), namespace=_NAMESPACE)
    host = _HostFunction(callback, in_tree, out_tree, "pure_callback")
    outs = pure_callback_p.bind(*leaves, callback=host, result_avals=result_avals,
                                vmap_method=vmap_method)
    return optree.tree_unflatten(out_tree, outs)


# --- io_callback -------------------------------------------------------------------------------
io_callback_p = Primitive("io_callback", multiple_results=True)
io_callback_p.foldable = False


@io_callback_p.def_impl
def _io_callback_impl(*values, callback: _HostFunction, result_avals: tuple, ordered: bool):
    return callback(values, result_avals)


@io_callback_p.def_abstract_eval
def _io_callback_abstract_eval(*avals, callback, result_avals: tuple, ordered: bool):
    return list(result_avals)


@io_callback_p.def_effects
def _io_callback_effects_rule(*, callback, result_avals, ordered):
    return frozenset({"OrderedIO" if ordered else "IO"})


def io_callback(callback: Callable, result_shape_dtypes: Any, *args, ordered: bool = False,
                **kwargs) -> Any:
    """Call the host function `callback(*args, **kwargs)`, which may have side effects, each
    time the program runs. Results are checked against result_shape_dtypes."""
    result_avals, out_tree = _result_avals(result_shape_dtypes)
    leaves, in_tree = optree.tree_flatten((args, kwargs), namespace=_NAMESPACE)
    host = _HostFunction(callback, in_tree, out_tree, "io_callback")
    outs = io_callback_p.bind(*leaves, callback=host, result_avals=result_avals,
                              ordered=ordered)
    return optree.tree_unflatten(out_tree, outs)


def effects_barrier() -> None:
    """Wait until every pending effect has run. kiln runs callbacks synchronously, in program
    order, so there is never anything to wait for."""
    return None

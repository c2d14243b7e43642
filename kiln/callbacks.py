"""Host callbacks: pure_callback (a pure function computed on the host, in NumPy) and
io_callback (a callback with side effects), plus effects_barrier.

Each stages one equation whose impl calls the host function with NumPy arrays and checks the
results against the declared shapes and dtypes. pure_callback may be removed when its result
is unused (it is pure); io_callback never is. Neither can be differentiated (kiln cannot see
inside the host function); under vmap, pure_callback does what its `vmap_method` says and an
unordered io_callback runs once per batch element.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import optree

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import batch_size, def_non_differentiable, move_bdim
from kiln.primitives.control_flow_loops import scan
from kiln.primitives.shape import broadcast

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
            raise TypeError(
                f"{self.kind}: the callback {self._name()} returned a value with "
                f"structure {tree}, but result_shape_dtypes declared "
                f"{self.out_tree}."
            )
        paths = optree.tree_paths(result, namespace=_NAMESPACE)
        return [
            self._check(leaf, aval, path) for leaf, aval, path in zip(leaves, result_avals, paths)
        ]

    def _check(self, leaf: Any, aval: ShapedArray, path: tuple) -> np.ndarray:
        where = "".join(f"[{k!r}]" for k in path) or "the result"
        if (
            isinstance(leaf, (np.ndarray, np.generic))
            or hasattr(leaf, "__array__")
            and hasattr(leaf, "dtype")
        ):
            value = np.asarray(leaf)
            if value.dtype != aval.dtype:
                raise TypeError(
                    f"{self.kind}: the callback {self._name()} returned dtype {value.dtype} at "
                    f"{where}, but result_shape_dtypes declared {aval.dtype}. Return arrays of "
                    f"the declared dtype (e.g. np.asarray(out, dtype=np.{aval.dtype.name}))."
                )
        else:  # a Python scalar or list: convert to the declared dtype
            value = np.asarray(leaf, dtype=aval.dtype)
        if value.shape != aval.shape:
            raise ValueError(
                f"{self.kind}: the callback {self._name()} returned shape {value.shape} at "
                f"{where}, but result_shape_dtypes declared {aval.shape}."
            )
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
            raise TypeError(
                "result_shape_dtypes must be a pytree of objects with .shape and "
                f".dtype (e.g. kiln.ShapeDtypeStruct), got {leaf!r}"
            )
        avals.append(
            ShapedArray(
                tuple(leaf.shape),
                dtypes.canonicalize(leaf.dtype),
                bool(getattr(leaf, "weak_type", False)),
            )
        )
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


def_non_differentiable(
    pure_callback_p,
    "Pure callbacks do not support JVP. Please use `kiln.custom_jvp` to use callbacks while "
    "taking gradients.",
)

_VMAP_METHODS = (
    "sequential",
    "sequential_unrolled",
    "expand_dims",
    "broadcast_all",
    "legacy_vectorized",
)


def _batched_aval(aval: ShapedArray, size: int) -> ShapedArray:
    return ShapedArray((size,) + tuple(aval.shape), aval.dtype, aval.weak_type)


def _call_per_element(prim: Primitive, args: list, dims, unroll: bool, **params) -> list:
    """Bind `prim` once per batch element in a scan over the batched operands (the unbatched
    ones are the same in every call); the results are stacked along axis 0."""
    batched = [d is not None for d in dims]
    fixed = [x for x, b in zip(args, batched) if not b]
    sliced = [move_bdim(x, d, 0) for x, d in zip(args, dims) if d is not None]

    def body(carry, example):
        fixed_args, example_args = iter(fixed), iter(example)
        merged = [next(example_args) if b else next(fixed_args) for b in batched]
        return carry, prim.bind(*merged, **params)

    _, outs = scan(body, (), sliced, unroll=unroll)
    return list(outs)


@pure_callback_p.def_batching
def _pure_callback_batching_rule(
    args, dims, *, callback: _HostFunction, result_avals: tuple, vmap_method
):
    size = batch_size(args, dims)
    if vmap_method in ("sequential", "sequential_unrolled"):
        # The host function sees one example at a time, exactly as without vmap.
        outs = _call_per_element(
            pure_callback_p,
            args,
            dims,
            unroll=vmap_method == "sequential_unrolled",
            callback=callback,
            result_avals=result_avals,
            vmap_method=vmap_method,
        )
        return outs, [0] * len(outs)
    if vmap_method not in _VMAP_METHODS:
        raise NotImplementedError(
            "vmap is only supported for the pure_callback primitive when vmap_method is one "
            f"of {', '.join(repr(m) for m in _VMAP_METHODS)}. Got vmap_method={vmap_method!r}. "
            "Pass vmap_method to kiln.pure_callback: 'sequential' calls the callback once per "
            "batch element; 'expand_dims', 'broadcast_all' and 'legacy_vectorized' call it "
            "once on the whole batch (see kiln.pure_callback's docstring)."
        )
    # One call on the whole batch: batched arguments carry the batch as their leading axis.
    # 'expand_dims' gives the unbatched ones a leading axis of size 1, 'broadcast_all' tiles
    # them to the batch size, and 'legacy_vectorized' passes them unchanged.
    operands = [move_bdim(x, d, 0) for x, d in zip(args, dims)]
    if vmap_method != "legacy_vectorized":
        leading = size if vmap_method == "broadcast_all" else 1
        operands = [broadcast(x, (leading,)) if d is None else x for x, d in zip(operands, dims)]
    outs = pure_callback_p.bind(
        *operands,
        callback=callback,
        result_avals=tuple(_batched_aval(a, size) for a in result_avals),
        vmap_method=vmap_method,
    )
    return outs, [0] * len(outs)


def pure_callback(
    callback: Callable, result_shape_dtypes: Any, *args, vmap_method: str | None = None, **kwargs
) -> Any:
    """Call the pure host function `callback(*args, **kwargs)` on NumPy arrays.

    result_shape_dtypes is a pytree of ShapeDtypeStruct (or anything with .shape and .dtype)
    describing the result; a callback whose results differ in shape or dtype raises.

    vmap_method says what vmap does with the call (without one, vmap raises):
    'sequential' (or 'sequential_unrolled') calls `callback` once per batch element;
    'expand_dims' calls it once, with the batch as the leading axis of the batched arguments
    and a new leading axis of size 1 on the others; 'broadcast_all' tiles the others to the
    batch size instead; 'legacy_vectorized' leaves the others as they are. In the three
    vectorized methods the callback returns results with the batch as their leading axis."""
    if vmap_method is not None and vmap_method not in _VMAP_METHODS:
        raise ValueError(
            f"vmap_method must be one of the allowed methods "
            f"{list(_VMAP_METHODS) + [None]}, but got: {vmap_method!r}"
        )
    result_avals, out_tree = _result_avals(result_shape_dtypes)
    leaves, in_tree = optree.tree_flatten((args, kwargs), namespace=_NAMESPACE)
    host = _HostFunction(callback, in_tree, out_tree, "pure_callback")
    outs = pure_callback_p.bind(
        *leaves, callback=host, result_avals=result_avals, vmap_method=vmap_method
    )
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


def_non_differentiable(io_callback_p, "IO callbacks do not support JVP.")


@io_callback_p.def_batching
def _io_callback_batching_rule(
    args, dims, *, callback: _HostFunction, result_avals: tuple, ordered: bool
):
    if ordered:
        raise ValueError("Cannot `vmap` ordered IO callback.")
    outs = _call_per_element(
        io_callback_p,
        args,
        dims,
        unroll=False,
        callback=callback,
        result_avals=result_avals,
        ordered=False,
    )
    return outs, [0] * len(outs)


def io_callback(
    callback: Callable, result_shape_dtypes: Any, *args, ordered: bool = False, **kwargs
) -> Any:
    """Call the host function `callback(*args, **kwargs)`, which may have side effects, each
    time the program runs. Results are checked against result_shape_dtypes."""
    result_avals, out_tree = _result_avals(result_shape_dtypes)
    leaves, in_tree = optree.tree_flatten((args, kwargs), namespace=_NAMESPACE)
    host = _HostFunction(callback, in_tree, out_tree, "io_callback")
    outs = io_callback_p.bind(*leaves, callback=host, result_avals=result_avals, ordered=ordered)
    return optree.tree_unflatten(out_tree, outs)


def effects_barrier() -> None:
    """Wait until every pending effect has run. kiln runs callbacks synchronously, in program
    order, so there is never anything to wait for."""
    return None

"""User-facing transformations: make_jaxpr (and, in their own modules, jit, grad, vmap)."""

from __future__ import annotations

import functools
from typing import Callable, Sequence

from kiln import api_util
from kiln.core.jaxpr import ClosedJaxpr
from kiln.transforms.staging import DebugInfo, flat_arg_names, function_name, trace_to_jaxpr


def make_jaxpr(
    fun: Callable, static_argnums: int | Sequence[int] = (), return_shape: bool = False
) -> Callable[..., ClosedJaxpr]:
    """A function that traces `fun` on the given arguments and returns its jaxpr."""
    static_argnums, _ = api_util.normalize_argnums(fun, static_argnums, ())

    @functools.wraps(fun)
    def make_jaxpr_f(*args, **kwargs):
        dyn_args, dyn_kwargs, static_key = api_util.split_static(args, kwargs, static_argnums, ())
        leaves, in_tree = api_util.flatten((dyn_args, dyn_kwargs))
        paths = api_util.leaf_path_strings((dyn_args, dyn_kwargs))
        names = flat_arg_names(fun, dyn_args, dyn_kwargs, paths)
        avals = api_util.abstractify_leaves(leaves, names, "make_jaxpr")
        debug = DebugInfo.for_function(fun, "make_jaxpr", names)

        def flat_fun(*tracers):
            call_args, call_kwargs = api_util.unflatten(in_tree, list(tracers))
            call_args, call_kwargs = api_util.merge_static(call_args, call_kwargs, static_key)
            out = fun(*call_args, **call_kwargs)
            out_leaves, out_tree = api_util.flatten(out)
            return out_leaves, (out_tree, out)

        closed, (out_tree, _) = trace_to_jaxpr(flat_fun, avals, debug)
        if return_shape:
            shapes = [ShapeDtypeStruct(a.shape, a.dtype) for a in closed.out_avals]
            return closed, api_util.unflatten(out_tree, shapes)
        return closed

    make_jaxpr_f.__name__ = f"make_jaxpr({function_name(fun)})"
    return make_jaxpr_f


class ShapeDtypeStruct:
    """A shape and dtype, standing for an array that does not exist (yet)."""

    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape, dtype, weak_type: bool = False):
        from kiln.core import dtypes

        self.shape = tuple(shape)
        self.dtype = dtypes.to_dtype(dtype)
        self.weak_type = weak_type

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        import math

        return math.prod(self.shape)

    def __eq__(self, other) -> bool:
        return isinstance(other, ShapeDtypeStruct) and (self.shape, self.dtype) == (
            other.shape,
            other.dtype,
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name})"


def clear_caches() -> None:
    """Forget every compiled program and memoized trace result of this process.

    Compiled native code is freed as soon as nothing else (a Compiled object, a running call)
    refers to it; the next call of any jitted function traces and compiles afresh.
    """
    import gc

    from kiln.compiler import lower
    from kiln.core import trace
    from kiln.runtime import cache, engine

    cache.clear_all()
    engine.clear()
    lower._lowerable_cache.clear()
    trace._eager_avals.clear()
    gc.collect()

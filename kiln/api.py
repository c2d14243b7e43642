"""User-facing transformations and helpers: make_jaxpr, eval_shape, the context managers
(disable_jit, ensure_compile_time_eval, default_device, named_scope) and host transfers (and,
in their own modules, jit, grad, vmap)."""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, Sequence

from kiln import api_util
from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.trace import Trace, Tracer, current_trace, set_current_trace
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
        return isinstance(other, ShapeDtypeStruct) and (
            self.shape,
            self.dtype,
            self.weak_type,
        ) == (other.shape, other.dtype, other.weak_type)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.weak_type))

    def __repr__(self) -> str:
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{weak})"


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


# --- shapes without computing -------------------------------------------------------------------
def _abstract_leaf(leaf: Any, path: str):
    from kiln.core.avals import ShapedArray
    from kiln.core import dtypes

    if isinstance(leaf, ShapeDtypeStruct):
        return ShapedArray(leaf.shape, dtypes.canonicalize(leaf.dtype), leaf.weak_type)
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype") and not hasattr(leaf, "__array__"):
        # any object with a shape and a dtype describes an array (as in JAX)
        return ShapedArray(tuple(leaf.shape), dtypes.canonicalize(leaf.dtype), False)
    return api_util.abstractify_leaves([leaf], [path], "eval_shape")[0]


def eval_shape(fun: Callable, *args, **kwargs):
    """The shapes and dtypes `fun` would return for these arguments, as a pytree of
    ShapeDtypeStruct, found by tracing without computing anything. Arguments may be arrays,
    scalars or ShapeDtypeStruct (or anything with .shape and .dtype)."""
    leaves, in_tree = api_util.flatten((args, kwargs))
    paths = api_util.leaf_path_strings((args, kwargs))
    avals = [_abstract_leaf(leaf, path) for leaf, path in zip(leaves, paths)]
    names = flat_arg_names(fun, args, kwargs, paths)
    debug = DebugInfo.for_function(fun, "eval_shape", names)

    def flat_fun(*tracers):
        call_args, call_kwargs = api_util.unflatten(in_tree, list(tracers))
        out_leaves, out_tree = api_util.flatten(fun(*call_args, **call_kwargs))
        return out_leaves, out_tree

    closed, out_tree = trace_to_jaxpr(flat_fun, avals, debug)
    shapes = [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in closed.out_avals]
    return api_util.unflatten(out_tree, shapes)


# --- context managers ---------------------------------------------------------------------------
@contextlib.contextmanager
def disable_jit(disable: bool = True) -> Iterator[None]:
    """Inside the block, jit-decorated functions (and the control-flow primitives) run
    eagerly, op by op in Python, so that prints and debuggers see concrete values."""
    from kiln.config import config

    previous = config.disable_jit
    config.update("disable_jit", bool(disable))
    try:
        yield
    finally:
        config.update("disable_jit", previous)


@contextlib.contextmanager
def ensure_compile_time_eval() -> Iterator[None]:
    """Inside the block, operations whose operands are all concrete run now, even while a
    function is being traced (their results are constants of the trace); operations on
    traced values are staged as usual."""
    outer = current_trace()
    if outer is None:
        yield
        return
    with set_current_trace(_CompileTimeEvalTrace(outer)):
        yield


class _CompileTimeEvalTrace(Trace):
    """Evaluates primitives on concrete operands eagerly; hands the others to the trace that
    was current when the block began."""

    def __init__(self, outer: Trace):
        super().__init__(outer)
        self.outer = outer

    def process_primitive(self, primitive, args, params):
        traced = any(isinstance(a, Tracer) for a in args)
        with set_current_trace(self.outer if traced else None):
            return primitive.bind(*args, **params)


@contextlib.contextmanager
def default_device(device: Any) -> Iterator[None]:
    """Place new arrays on `device` inside the block. kiln computes on the host CPU only, so
    the device must be None, "cpu" or a kiln CPU device."""
    _check_device(device)
    yield


def _check_device(device: Any) -> None:
    if device is None or device == "cpu" or getattr(device, "platform", None) == "cpu":
        return
    raise ValueError(f"kiln has only the host CPU device; got {device!r}")


@contextlib.contextmanager
def named_scope(name: str) -> Iterator[None]:
    """Group the operations of the block under `name` in profiles (kiln records no such
    metadata yet, so the block runs unchanged)."""
    if not isinstance(name, str):
        raise TypeError("named_scope name argument must be a string.")
    yield


# --- host transfers and environment -------------------------------------------------------------
def device_get(x: Any) -> Any:
    """The pytree x with every kiln array replaced by a NumPy array (other leaves
    unchanged)."""
    import numpy as np

    from kiln.core.array import Array
    from kiln.tree_util import tree_map

    def to_host(leaf):
        return np.asarray(leaf) if isinstance(leaf, Array) else leaf

    return tree_map(to_host, x)


def print_environment_info(return_string: bool = False) -> str | None:
    """Print (or return) the versions of kiln, its dependencies, Python and the platform."""
    import platform
    import sys

    import llvmlite
    import ml_dtypes
    import numpy as np

    import kiln

    lines = [
        f"kiln:      {kiln.__version__}",
        f"numpy:     {np.__version__}",
        f"llvmlite:  {llvmlite.__version__}",
        f"ml_dtypes: {ml_dtypes.__version__}",
        f"python:    {sys.version}",
        f"platform:  {platform.platform()} ({platform.machine()})",
        f"backend:   {kiln.config.backend}, cpu target: {kiln.config.cpu}",
    ]
    text = "\n".join(lines)
    if return_string:
        return text
    print(text)
    return None

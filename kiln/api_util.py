"""Argument handling shared by the user-facing transformations: static arguments, pytree
flattening of (args, kwargs), abstract values of leaves, and argument names for errors."""

from __future__ import annotations

import inspect
import operator
from typing import Any, Callable, Sequence

import numpy as np
import optree

from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.avals import ShapedArray, get_aval
from kiln.core.trace import Tracer

NAMESPACE = "kiln"


def flatten(tree: Any):
    return optree.tree_flatten(tree, namespace=NAMESPACE)


def unflatten(treedef, leaves):
    return optree.tree_unflatten(treedef, leaves)


def leaf_path_strings(tree: Any) -> list[str]:
    """Each leaf's key path in JAX's spelling: `[0]['W']`, `.field`."""
    from kiln.tree_util import keystr_of_leaf_paths

    return keystr_of_leaf_paths(tree)


def normalize_argnums(fun: Callable, static_argnums, static_argnames) -> tuple[tuple, tuple]:
    """Fill in static_argnums from static_argnames and vice versa, as jit does."""
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    static_argnums = tuple(operator.index(i) for i in (static_argnums or ()))
    static_argnames = tuple(static_argnames or ())
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return static_argnums, static_argnames
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = set(static_argnames)
    nums = set(static_argnums)
    for i, p in enumerate(positional):
        if p.name in names:
            nums.add(i)
        if i in nums or (i - len(positional)) in nums:
            if p.kind != p.POSITIONAL_ONLY:
                names.add(p.name)
    return tuple(sorted(nums)), tuple(sorted(names))


def split_static(
    args: tuple, kwargs: dict, static_argnums: Sequence[int], static_argnames: Sequence[str]
):
    """Separate static from dynamic arguments. Returns (dyn_args, dyn_kwargs, static_key)."""
    nargs = len(args)
    static_positions = {i % nargs if nargs else i for i in static_argnums if -nargs <= i < nargs}
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static_positions)
    static_args = tuple((i, args[i]) for i in sorted(static_positions))
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_argnames}
    static_kwargs = tuple(sorted((k, v) for k, v in kwargs.items() if k in static_argnames))
    return dyn_args, dyn_kwargs, (static_args, static_kwargs)


def merge_static(dyn_args: tuple, dyn_kwargs: dict, static_key) -> tuple[tuple, dict]:
    static_args, static_kwargs = static_key
    args = list(dyn_args)
    for i, value in static_args:
        args.insert(i, value)
    kwargs = dict(dyn_kwargs)
    kwargs.update(static_kwargs)
    return tuple(args), kwargs


_VALID_LEAF = (Array, Tracer, np.ndarray, np.generic, bool, int, float, complex)


def abstractify_leaves(leaves: list, paths: list[str], fun_name: str) -> list[ShapedArray]:
    """The abstract value of each argument leaf; a TypeError names any leaf that is not an
    array or scalar."""
    avals = []
    for leaf, path in zip(leaves, paths):
        if not isinstance(leaf, _VALID_LEAF):
            raise TypeError(
                f"Error interpreting argument to {fun_name} as an abstract array. The "
                f"problematic value is of type {type(leaf)} and was passed to the function at "
                f"path {path}.\nThis typically means that a jit-wrapped function was called "
                "with a non-array argument, and this argument was not marked as static using "
                "the static_argnums or static_argnames parameters of jit."
            )
        if (
            isinstance(leaf, (np.ndarray, np.generic))
            and leaf.dtype.kind not in "biufc"
            and not dtypes.is_floating(leaf.dtype)
        ):
            raise TypeError(
                f"Argument at path {path} of {fun_name} has dtype {leaf.dtype}, "
                "which kiln cannot trace."
            )
        avals.append(get_aval(leaf))
    return avals

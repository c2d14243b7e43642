"""The vmap API: mapping a function over an axis of its arguments, by the batching trace.

`in_axes` and `out_axes` are ints, None or pytree prefixes of the arguments and outputs (JAX's
rules); keyword arguments are mapped over axis 0.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any, Callable

import numpy as np
import optree

from kiln import api_util
from kiln.core.array import Array
from kiln.core.avals import get_aval
from kiln.core.trace import Tracer
from kiln.transforms.batching import batch_flat
from kiln.transforms.staging import flat_arg_names, function_name

_LEAF_TYPES = (Array, Tracer, np.ndarray, np.generic, bool, int, float, complex)


def _broadcast_prefix(prefix, tree, what: str) -> list:
    """One entry of `prefix` (an axis spec tree, None as a leaf) per leaf of `tree`."""
    if prefix is None or isinstance(prefix, int):
        return [prefix] * len(api_util.flatten(tree)[0])
    axes, spec = optree.tree_flatten(prefix, none_is_leaf=True, namespace=api_util.NAMESPACE)
    try:
        subtrees = spec.flatten_up_to(tree)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"vmap {what} specification must be a tree prefix of the corresponding value; {e}"
        ) from None
    out = []
    for axis, sub in zip(axes, subtrees):
        if axis is not None and not isinstance(axis, int):
            raise TypeError(f"vmap {what} must be an int, None, or a pytree of them; got {axis!r}")
        out.extend([axis] * len(api_util.flatten(sub)[0]))
    return out


def _normalize_in_axes(in_axes, args: tuple):
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if in_axes is None or isinstance(in_axes, int):
        return tuple([in_axes] * len(args))
    if not isinstance(in_axes, tuple):
        raise TypeError(
            "vmap in_axes must be an int, None, or a tuple of entries "
            "corresponding to the positional arguments passed to the function, but "
            f"got {in_axes}."
        )
    if len(in_axes) != len(args):
        raise ValueError(
            "vmap in_axes must be an int, None, or a tuple of entries "
            "corresponding to the positional arguments passed to the function, "
            f"but got len(in_axes)={len(in_axes)}, len(args)={len(args)}"
        )
    return in_axes


def vmap(
    fun: Callable,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Any = None,
    axis_size: int | None = None,
    spmd_axis_name: Any = None,
) -> Callable:
    """Vectorize `fun` over an axis of its arguments (see the module docstring)."""
    if not callable(fun):
        raise TypeError(f"vmap requires a callable argument, got {fun!r}")
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not (
        in_axes is None
        or isinstance(in_axes, (int, tuple, dict))
        or optree.tree_leaves(in_axes, none_is_leaf=True, namespace=api_util.NAMESPACE)
    ):
        raise TypeError(
            f"vmap in_axes must be an int, None, or a tuple of entries "
            f"corresponding to the positional arguments passed to the function, but "
            f"got {in_axes}."
        )

    @functools.wraps(fun)
    def vmapped(*args, **kwargs):
        axes = _normalize_in_axes(in_axes, args)
        leaves, treedef = api_util.flatten((args, kwargs))
        flat_axes = []
        for a, spec in zip(args, axes):
            flat_axes.extend(_broadcast_prefix(spec, a, "in_axes"))
        flat_axes.extend([0] * len(api_util.flatten(kwargs)[0]))
        if not leaves and axis_size is None:
            raise ValueError(
                "vmap wrapped function must be passed at least one argument "
                "containing an array or axis_size must be specified, got empty "
                f"*args={args} and **kwargs={kwargs}"
            )
        if all(a is None for a in flat_axes) and axis_size is None:
            raise ValueError(
                "vmap must have at least one non-None value in in_axes or "
                "axis_size must be specified"
            )
        names = _arg_names(fun, args, kwargs)
        dims, size = [], None
        sizes = []
        for leaf, axis, name in zip(leaves, flat_axes, names):
            if not isinstance(leaf, _LEAF_TYPES):
                raise TypeError(
                    f"vmap got an argument of type {type(leaf)} at {name}, which "
                    "is not a valid JAX type."
                )
            if axis is None:
                dims.append(None)
                continue
            shape = tuple(get_aval(leaf).shape)
            ndim = len(shape)
            if not -ndim <= axis < ndim:
                raise ValueError(
                    f"vmap was requested to map its argument along axis {axis}, "
                    f"which implies that its rank should be at least "
                    f"{axis + 1 if axis >= 0 else -axis}, but is only {ndim} "
                    f"(its shape is {shape})"
                )
            axis %= ndim
            dims.append(axis)
            sizes.append(
                (
                    shape[axis],
                    axis,
                    name,
                    f"{get_aval(leaf).dtype.name}[{','.join(map(str, shape))}]",
                )
            )
        size = axis_size
        if sizes:
            distinct = {s[0] for s in sizes}
            if axis_size is not None:
                distinct.add(axis_size)
            if len(distinct) > 1:
                raise ValueError(_size_mismatch_message(sizes, axis_size))
            size = sizes[0][0]
        out_box = {}

        def flat_fun(*flat):
            a, kw = api_util.unflatten(treedef, list(flat))
            out = fun(*a, **kw)
            out_leaves, out_tree = api_util.flatten(out)
            out_box["tree"] = out_tree
            out_box["out"] = out
            return out_leaves

        def out_dims_for(n):
            return _broadcast_out_axes(out_axes, out_box)

        outs = batch_flat(flat_fun, leaves, dims, size, out_dims_for, axis_name, spmd_axis_name)
        return api_util.unflatten(out_box["tree"], outs)

    return vmapped


def _broadcast_out_axes(out_axes, box) -> list:
    out = box["out"]
    if isinstance(out_axes, list):
        out_axes = tuple(out_axes)
    flat = _broadcast_prefix(out_axes, out, "out_axes")
    return flat


def _arg_names(fun, args, kwargs) -> list[str]:
    paths = api_util.leaf_path_strings((args, kwargs))
    try:
        return [f"argument {n}" for n in flat_arg_names(fun, args, kwargs, paths)]
    except Exception:  # naming is best effort
        return [f"argument at {p}" for p in paths]


def _size_mismatch_message(sizes, axis_size) -> str:
    lines = ["vmap got inconsistent sizes for array axes to be mapped:"]
    if axis_size is not None:
        lines.append(f"  * axis_size was specified as {axis_size};")
    counts = Counter(s[0] for s in sizes)
    most, most_count = counts.most_common(1)[0]
    items = []
    for value in counts:
        example = next(s for s in sizes if s[0] == value)
        _, axis, name, typ = example
        if counts[value] > 1 and len(counts) > 1 and value == most:
            items.append(
                f"  * most axes ({most_count} of them) had size {value}, e.g. axis "
                f"{axis} of {name} of type {typ};"
            )
        else:
            for s in sizes:
                if s[0] == value:
                    items.append(
                        f"  * one axis had size {s[0]}: axis {s[1]} of {s[2]} of type {s[3]};"
                    )
    items[-1] = items[-1].rstrip(";")
    return "\n".join(lines + items)


def vectorize_helper_name(fun) -> str:
    return function_name(fun)

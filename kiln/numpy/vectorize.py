"""kiln.numpy.vectorize: NumPy's `vectorize`, built on kiln.vmap as JAX builds it.

A function written for one element (or, with a gufunc `signature`, for one set of core
dimensions) is mapped over the broadcast loop dimensions of its arguments, one vmap per loop
dimension, so nothing is broadcast to the full shape before the call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

from kiln.numpy.creation import asarray
from kiln.numpy.manipulation import expand_dims, squeeze
from kiln.numpy.manipulation_shape import broadcast_shapes

__all__ = ["vectorize"]

# The grammar of generalized-ufunc signatures, as NumPy defines it:
# https://numpy.org/doc/stable/reference/c-api/generalized-ufuncs.html
_DIMENSION_NAME = r"\w+"
_CORE_DIMENSION_LIST = "(?:{0:}(?:,{0:})*)?".format(_DIMENSION_NAME)
_ARGUMENT = rf"\({_CORE_DIMENSION_LIST}\)"
_ARGUMENT_LIST = "{0:}(?:,{0:})*".format(_ARGUMENT)
_SIGNATURE = "^{0:}->{0:}$".format(_ARGUMENT_LIST)

CoreDims = tuple[str, ...]


def _parse_gufunc_signature(signature: str) -> tuple[list[CoreDims], list[CoreDims]]:
    """The core dimension names of each input and each output of a signature like
    "(m,n),(n)->(m)"."""
    if not re.match(_SIGNATURE, signature):
        raise ValueError(f"not a valid gufunc signature: {signature}")
    inputs, outputs = (
        [tuple(re.findall(_DIMENSION_NAME, arg)) for arg in re.findall(_ARGUMENT, arg_list)]
        for arg_list in signature.split("->")
    )
    return inputs, outputs


def _update_dim_sizes(
    dim_sizes: dict[str, int],
    shape: tuple[int, ...],
    core_dims: CoreDims,
    error_context: str,
    *,
    is_input: bool,
) -> None:
    """Record the size of each core dimension of `shape` in `dim_sizes`, raising when a name
    was already bound to another size or when the shape has too few (input) or not exactly the
    right number (output) of dimensions."""
    num_core_dims = len(core_dims)
    if is_input:
        if len(shape) < num_core_dims:
            raise ValueError(
                f"input with shape {shape!r} does not have enough dimensions for "
                f"all core dimensions {core_dims!r} {error_context}"
            )
    elif len(shape) != num_core_dims:
        raise ValueError(
            f"output shape {shape!r} does not match core dimensions {core_dims!r} {error_context}"
        )
    core_shape = shape[-num_core_dims:] if core_dims else ()
    for dim, size in zip(core_dims, core_shape):
        if dim not in dim_sizes:
            dim_sizes[dim] = size
        elif size != dim_sizes[dim]:
            raise ValueError(
                f"inconsistent size for core dimension {dim!r}: {size!r} vs "
                f"{dim_sizes[dim]!r} {error_context}"
            )


def _parse_input_dimensions(
    args: Sequence[Any], input_core_dims: list[CoreDims], error_context: str
) -> tuple[tuple[int, ...], dict[str, int]]:
    """The broadcast shape of the loop (non-core) dimensions, and the core dimension sizes."""
    if len(args) != len(input_core_dims):
        raise TypeError(
            f"wrong number of positional arguments: expected "
            f"{len(input_core_dims)!r}, got {len(args)!r} {error_context}"
        )
    loop_shapes = []
    dim_sizes: dict[str, int] = {}
    for arg, core_dims in zip(args, input_core_dims):
        _update_dim_sizes(dim_sizes, arg.shape, core_dims, error_context, is_input=True)
        loop_shapes.append(arg.shape[: arg.ndim - len(core_dims)])
    return broadcast_shapes(*loop_shapes), dim_sizes


def _check_output_dims(
    func: Callable,
    dim_sizes: dict[str, int],
    expected_output_core_dims: list[CoreDims],
    error_context: str,
) -> Callable:
    """Wrap `func` so that its outputs are checked against the signature's output core
    dimensions (at trace time, on one element)."""

    def wrapped(*args):
        out = func(*args)
        outs = out if isinstance(out, tuple) else [out]
        out_shapes = [tuple(getattr(o, "shape", ())) for o in outs]
        if len(expected_output_core_dims) > 1 and not isinstance(out, tuple):
            raise TypeError(
                "output must be a tuple when multiple outputs are expected, "
                f"got: {out!r}\n{error_context}"
            )
        if len(out_shapes) != len(expected_output_core_dims):
            raise TypeError(
                f"wrong number of output arguments: expected "
                f"{len(expected_output_core_dims)!r}, got {len(out_shapes)!r} "
                f"{error_context}"
            )
        sizes = dict(dim_sizes)
        for shape, core_dims in zip(out_shapes, expected_output_core_dims):
            _update_dim_sizes(sizes, shape, core_dims, error_context, is_input=False)
        return out

    return wrapped


def _apply_excluded(
    func: Callable, excluded: Collection[int | str], args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[Callable, list, dict]:
    """Close `func` over the excluded arguments (by position or keyword name), returning it
    with the arguments that remain to be vectorized."""
    if not excluded:
        return func, list(args), kwargs
    dynamic_args = [arg for i, arg in enumerate(args) if i not in excluded]
    dynamic_kwargs = {key: val for key, val in kwargs.items() if key not in excluded}
    static_args = [
        (i, args[i]) for i in sorted(e for e in excluded if isinstance(e, int)) if i < len(args)
    ]
    static_kwargs = {key: val for key, val in kwargs.items() if key in excluded}

    def new_func(*args, **kwargs):
        args = list(args)
        for i, arg in static_args:
            args.insert(i, arg)
        return func(*args, **kwargs, **static_kwargs)

    return new_func, dynamic_args, dynamic_kwargs


def vectorize(
    pyfunc: Callable, *, excluded: Collection[int | str] = frozenset(), signature: str | None = None
) -> Callable:
    """Define a vectorized function with broadcasting, as `numpy.vectorize` does, by mapping
    `pyfunc` with `kiln.vmap` over the loop dimensions of its arguments.

    Args:
      pyfunc: the function of one element (or of one set of core dimensions).
      excluded: positions (ints) or keyword names (strs) of arguments passed to `pyfunc`
        unchanged, not vectorized.
      signature: a generalized-ufunc signature such as "(n),(n)->()"; the named core
        dimensions are the trailing dimensions `pyfunc` sees whole. Without it every argument
        is mapped elementwise.

    Returns:
      The vectorized function. Keyword arguments and `None` positional arguments are passed
      to `pyfunc` whole, not vectorized.
    """
    if any(not isinstance(exclude, (str, int)) for exclude in excluded):
        raise TypeError(
            "kiln.numpy.vectorize can only exclude integer or string arguments, "
            f"but excluded={excluded!r}"
        )
    if any(isinstance(e, int) and e < 0 for e in excluded):
        raise ValueError(f"excluded={excluded!r} contains negative numbers")

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        from kiln.transforms.vmap import vmap  # kiln.transforms imports kiln.numpy

        error_context = (
            f"on vectorized function with excluded={excluded!r} and signature={signature!r}"
        )
        excluded_func, args, kwargs = _apply_excluded(pyfunc, excluded, args, kwargs)
        if kwargs:
            # Keyword arguments are not mapped: each call of pyfunc gets them whole.
            excluded_func = functools.partial(excluded_func, **kwargs)

        if signature is not None:
            input_core_dims, output_core_dims = _parse_gufunc_signature(signature)
        else:
            input_core_dims, output_core_dims = [()] * len(args), None

        none_args = {i for i, arg in enumerate(args) if arg is None}
        if none_args:
            if any(i < len(input_core_dims) and input_core_dims[i] != () for i in none_args):
                raise ValueError(
                    f"Cannot pass None at locations {none_args} with signature={signature!r}"
                )
            excluded_func, args, _ = _apply_excluded(excluded_func, none_args, args, {})
            input_core_dims = [dims for i, dims in enumerate(input_core_dims) if i not in none_args]

        args = tuple(asarray(arg) for arg in args)
        broadcast_shape, dim_sizes = _parse_input_dimensions(args, input_core_dims, error_context)
        if output_core_dims is None:
            checked_func = excluded_func
        else:
            checked_func = _check_output_dims(
                excluded_func, dim_sizes, output_core_dims, error_context
            )

        # Rather than broadcasting every argument to the full loop shape, squeeze its size-1
        # loop dimensions and let one vmap per loop dimension map only the arguments that
        # have it (in_axes None for the rest); dimensions no argument has are added back.
        squeezed_args = []
        reversed_filled_shapes = []
        for arg, core_dims in zip(args, input_core_dims):
            loop_shape = arg.shape[: arg.ndim - len(core_dims)]
            filled_shape = (len(broadcast_shape) - len(loop_shape)) * (1,) + loop_shape
            reversed_filled_shapes.append(filled_shape[::-1])
            size_one_axes = tuple(i for i, size in enumerate(loop_shape) if size == 1)
            squeezed_args.append(squeeze(arg, axis=size_one_axes) if size_one_axes else arg)

        vectorized_func = checked_func
        dims_to_expand = []
        for negative_dim, axis_sizes in enumerate(zip(*reversed_filled_shapes)):
            in_axes = tuple(None if size == 1 else 0 for size in axis_sizes)
            if all(axis is None for axis in in_axes):
                dims_to_expand.append(len(broadcast_shape) - 1 - negative_dim)
            else:
                vectorized_func = vmap(vectorized_func, in_axes)
        result = vectorized_func(*squeezed_args)

        if not dims_to_expand:
            return result
        if isinstance(result, tuple):
            return tuple(expand_dims(r, axis=tuple(dims_to_expand)) for r in result)
        return expand_dims(result, axis=tuple(dims_to_expand))

    return wrapped

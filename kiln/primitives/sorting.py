"""Sorting primitives: sort (several operands ordered by their first `num_keys`) and top_k.

Floats sort in NumPy's order: NaNs last, -0.0 equal to 0.0; complex numbers sort by real part,
then imaginary part. Each block holds all the rules of one primitive.
"""

from __future__ import annotations

import operator

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import ANY, BOOL, FLOAT, INT, check_dtype, move_bdim
from kiln.primitives.indexing_gather import GatherDimensionNumbers, gather
from kiln.primitives.shape import broadcast_in_dim, expand_dims, reshape
from kiln.primitives.shape_slice import broadcasted_iota, concatenate

__all__ = ["sort", "sort_key_val", "top_k", "sort_p", "top_k_p"]


def _sort_key(x: np.ndarray) -> np.ndarray:
    """A NumPy array that orders like `x` under np.lexsort (bfloat16 via float32: exact)."""
    if dtypes.is_narrow_float(x.dtype):  # float16, bfloat16 and the float8 types
        x = x.astype(np.float32)
    # -0.0 and 0.0 are equal keys, so a stable sort keeps them in input order.
    return x


def _lexsort_permutation(keys: list[np.ndarray], dimension: int) -> np.ndarray:
    """Indices that stably sort along `dimension` by keys[0], then keys[1], ..."""
    moved = [np.moveaxis(_sort_key(k), dimension, -1) for k in keys]
    # np.lexsort sorts by its last key first; it is stable and puts NaNs last.
    order = np.lexsort(moved[::-1], axis=-1)
    return np.moveaxis(order, -1, dimension)


# --- sort ------------------------------------------------------------------------------------
sort_p = Primitive("sort", multiple_results=True)


@sort_p.def_impl
def _sort_impl(*operands: np.ndarray, dimension, is_stable, num_keys) -> list[np.ndarray]:
    if operands[0].size == 0:
        return [np.array(op) for op in operands]
    order = _lexsort_permutation(list(operands[:num_keys]), dimension)
    return [np.take_along_axis(op, order, axis=dimension) for op in operands]


@sort_p.def_abstract_eval
def _sort_abstract_eval(*operands: ShapedArray, dimension, is_stable, num_keys):
    if not operands:
        raise TypeError("sort requires at least one operand")
    shape = operands[0].shape
    for op in operands:
        if op.shape != shape:
            raise TypeError(
                "sort operands must all have the same shape, got "
                f"{', '.join(o.str_short() for o in operands)}"
            )
        check_dtype("sort", op.dtype, ANY)
    if not isinstance(num_keys, int) or not 1 <= num_keys <= len(operands):
        raise ValueError(
            f"sort num_keys={num_keys} must be between 1 and the number of "
            f"operands ({len(operands)})"
        )
    if not isinstance(dimension, int) or not 0 <= dimension < len(shape):
        raise ValueError(
            f"sort dimension {dimension} is out of bounds for operands of rank {len(shape)}"
        )
    return [ShapedArray(op.shape, op.dtype, op.weak_type) for op in operands]


def sort(operand, dimension: int = -1, is_stable: bool = True, num_keys: int = 1):
    """Sort along `dimension`. `operand` is an array or a sequence of same-shape arrays; with a
    sequence, all are permuted by the lexicographic order of the first `num_keys`, and the
    sorted sequence is returned as a tuple."""
    single = not isinstance(operand, (tuple, list))
    operands = (operand,) if single else tuple(operand)
    if not operands:
        raise TypeError("sort requires at least one operand")
    ndim = len(np.shape(operands[0]) if not hasattr(operands[0], "shape") else operands[0].shape)
    dimension = operator.index(dimension)
    if not -ndim <= dimension < ndim:
        raise ValueError(f"sort dimension {dimension} is out of bounds for an array of rank {ndim}")
    out = sort_p.bind(
        *operands,
        dimension=dimension % ndim,
        is_stable=bool(is_stable),
        num_keys=operator.index(num_keys),
    )
    return out[0] if single else tuple(out)


def sort_key_val(keys, values, dimension: int = -1, is_stable: bool = True):
    """Sort `keys` along `dimension` and permute `values` the same way."""
    return sort((keys, values), dimension, is_stable, num_keys=1)


def _take_along_axis(x, indices, axis: int):
    """x[..., indices, ...] along `axis`, indices shaped like x except along `axis`: a gather
    of single elements by their full coordinates (the iota of every other dimension)."""
    shape = tuple(indices.shape)
    rank = len(shape)
    if 0 in tuple(x.shape):
        # No element to take (the result is empty too); a gather's windows would not fit.
        return reshape(x, shape)
    coordinates = [
        indices if d == axis else broadcasted_iota(indices.dtype, shape, d) for d in range(rank)
    ]
    index_vectors = concatenate([expand_dims(c, (rank,)) for c in coordinates], rank)
    dimension_numbers = GatherDimensionNumbers(
        offset_dims=(), collapsed_slice_dims=tuple(range(rank)), start_index_map=tuple(range(rank))
    )
    return gather(x, index_vectors, dimension_numbers, (1,) * rank)


# The tangents of sorted operands are their tangents permuted the same way: the sort carries
# an extra operand, the positions along `dimension`, which comes out as the permutation.
@sort_p.def_jvp
def _sort_jvp_rule(primals, tangents, *, dimension, is_stable, num_keys):
    shape = tuple(primals[0].shape)
    positions = broadcasted_iota(dtypes.int32, shape, dimension)
    *outs, permutation = sort_p.bind(
        *primals, positions, dimension=dimension, is_stable=is_stable, num_keys=num_keys
    )
    out_tangents = [
        None if t is None else _take_along_axis(t, permutation, dimension) for t in tangents
    ]
    return outs, out_tangents


@sort_p.def_batching
def _sort_batching_rule(args, dims, *, dimension, is_stable, num_keys):
    # Every operand gets the batch dimension where the first batched one has it; unbatched
    # operands are broadcast along it.
    template, bdim = next((x, d) for x, d in zip(args, dims) if d is not None)
    shape = tuple(template.shape)
    example_dims = tuple(d for d in range(len(shape)) if d != bdim)
    operands = [
        broadcast_in_dim(x, shape, example_dims) if d is None else move_bdim(x, d, bdim)
        for x, d in zip(args, dims)
    ]
    outs = sort_p.bind(
        *operands, dimension=dimension + (dimension >= bdim), is_stable=is_stable, num_keys=num_keys
    )
    return outs, [bdim] * len(outs)


# --- top_k -----------------------------------------------------------------------------------
top_k_p = Primitive("top_k", multiple_results=True)


@top_k_p.def_impl
def _top_k_impl(operand: np.ndarray, *, k) -> list[np.ndarray]:
    key = _sort_key(operand)
    if key.dtype.kind == "f":
        # Largest first, NaN counted as the largest value: the primary key puts NaNs first,
        # the secondary sorts the rest by their negation, the last puts +0.0 before -0.0
        # (XLA's top_k orders -0.0 below +0.0).
        is_number = ~np.isnan(key)
        negated = np.where(is_number, -key, 0)
        order = np.lexsort((np.signbit(key), negated, is_number), axis=-1)
    elif key.dtype == np.bool_:
        order = np.argsort(~key, axis=-1, kind="stable")
    elif key.dtype.kind == "u":
        order = np.argsort(np.iinfo(key.dtype).max - key, axis=-1, kind="stable")
    else:
        # Negating would overflow INT_MIN: compare bitwise-inverted values instead (~x = -x-1
        # reverses the order of signed integers exactly).
        order = np.argsort(~key, axis=-1, kind="stable")
    order = order[..., :k]
    return [np.take_along_axis(operand, order, axis=-1), order.astype(np.int32)]


@top_k_p.def_abstract_eval
def _top_k_abstract_eval(operand: ShapedArray, *, k):
    check_dtype("top_k", operand.dtype, (BOOL, INT, FLOAT))
    if operand.ndim == 0:
        raise TypeError("top_k needs an operand of rank at least 1")
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"top_k k must be a non-negative int, got {k!r}")
    if k > operand.shape[-1]:
        raise TypeError(
            f"top_k k={k} is larger than the last dimension of the operand ({operand.shape[-1]})"
        )
    shape = operand.shape[:-1] + (k,)
    return [
        ShapedArray(shape, operand.dtype, operand.weak_type),
        ShapedArray(shape, dtypes.int32, False),
    ]


def top_k(operand, k: int):
    """The `k` largest entries along the last axis, largest first, and their int32 indices
    (ties keep the lower index first)."""
    values, indices = top_k_p.bind(operand, k=operator.index(k))
    return values, indices


@top_k_p.def_jvp
def _top_k_jvp_rule(primals, tangents, *, k):
    (operand,), (tangent,) = primals, tangents
    values, indices = top_k_p.bind(operand, k=k)
    out_tangent = (
        None if tangent is None else _take_along_axis(tangent, indices, len(operand.shape) - 1)
    )
    return [values, indices], [out_tangent, None]


@top_k_p.def_batching
def _top_k_batching_rule(args, dims, *, k):
    # top_k works on the last axis: a batch dimension there moves to the front.
    (operand,), (bdim,) = args, dims
    if bdim == len(operand.shape) - 1:
        operand, bdim = move_bdim(operand, bdim, 0), 0
    return top_k_p.bind(operand, k=k), [bdim, bdim]

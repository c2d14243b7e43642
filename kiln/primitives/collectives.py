"""Collectives over a named axis: psum, pmean, pmax, pmin, all_gather, axis_index, ppermute.

On one device a named axis is a vmap axis (`kiln.vmap(f, axis_name="i")`): the batch trace
whose `axis_name` matches reduces, gathers or permutes along its batch dimension; other traces
pass the collective through. Naming an axis that no enclosing vmap binds is a NameError, raised
as soon as the collective is traced.
"""

from __future__ import annotations

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.transforms import batching

__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "axis_index", "ppermute"]


def _names(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _check_bound(names, op: str) -> None:
    bound = batching.bound_axis_names()
    for name in names:
        if name not in bound:
            raise NameError(
                f"Found an unbound axis name: {name}. To fix this, please call {op} "
                f"under `kiln.vmap(..., axis_name={name!r})`."
            )


def _unbound_impl(op: str):
    def impl(*args, axes, **params):
        raise NameError(
            f"Found an unbound axis name: {axes[0]}. To fix this, please call {op} "
            f"under `kiln.vmap(..., axis_name={axes[0]!r})`."
        )

    return impl


# --- reductions over an axis: psum, pmax, pmin ---------------------------------------------------


def _make_reducer(name: str):
    prim = Primitive(name, multiple_results=True)
    prim.def_impl(_unbound_impl(name))

    @prim.def_abstract_eval
    def _abstract_eval(*avals, axes):
        _check_bound(axes, name)
        return [ShapedArray(a.shape, a.dtype, a.weak_type) for a in avals]

    return prim


psum_p = _make_reducer("psum")
pmax_p = _make_reducer("pmax")
pmin_p = _make_reducer("pmin")


def _reducer_collective(prim, reduce_batched, reduce_unbatched):
    def rule(trace, vals, dims, *, axes):
        if trace.axis_name not in axes:
            _check_bound(axes, prim.name)
            return prim.bind(*vals, axes=axes), list(dims)
        rest = tuple(a for a in axes if a != trace.axis_name)
        outs = [
            reduce_unbatched(v, trace.axis_size) if d is None else reduce_batched(v, d)
            for v, d in zip(vals, dims)
        ]
        if rest:
            outs = prim.bind(*outs, axes=rest)
        return outs, [None] * len(outs)

    prim.def_collective_batching(rule)


def _sum_batched(v, d):
    from kiln.primitives.reductions import reduce_sum

    return reduce_sum(v, (d,))


def _sum_unbatched(v, size):
    from kiln.primitives.base import scalar_to_array
    from kiln.primitives.elementwise import mul

    return mul(v, scalar_to_array(size, v.dtype))


def _max_batched(v, d):
    from kiln.primitives.reductions import reduce_max

    return reduce_max(v, (d,))


def _min_batched(v, d):
    from kiln.primitives.reductions import reduce_min

    return reduce_min(v, (d,))


_reducer_collective(psum_p, _sum_batched, _sum_unbatched)
_reducer_collective(pmax_p, _max_batched, lambda v, size: v)
_reducer_collective(pmin_p, _min_batched, lambda v, size: v)


@psum_p.def_jvp
def _psum_jvp(primals, tangents, *, axes):
    from kiln.primitives.base import instantiate

    out = psum_p.bind(*primals, axes=axes)
    if all(t is None for t in tangents):
        return out, [None] * len(out)
    return out, psum_p.bind(*(instantiate(t, p) for t, p in zip(tangents, primals)), axes=axes)


@psum_p.def_transpose
def _psum_transpose(cts, *args, axes):
    # psum is its own transpose: every member of the axis receives the sum of the cotangents.
    from kiln.primitives.base import zeros_like_aval

    cts = [zeros_like_aval(a.aval) if ct is None else ct for ct, a in zip(cts, args)]
    return psum_p.bind(*cts, axes=axes)


def _pminmax_jvp(prim):
    def jvp(primals, tangents, *, axes):
        from kiln.primitives.base import instantiate
        from kiln.primitives.elementwise import convert_element_type, div, eq, mul, select_n

        outs = prim.bind(*primals, axes=axes)
        out_tangents = []
        for x, t, out in zip(primals, tangents, outs):
            if t is None:
                out_tangents.append(None)
                continue
            hit = convert_element_type(eq(x, out), x.dtype)
            count = psum_p.bind(hit, axes=axes)[0]
            picked = psum_p.bind(mul(instantiate(t, x), hit), axes=axes)[0]
            out_tangents.append(div(picked, count))
        del select_n
        return outs, out_tangents

    prim.def_jvp(jvp)


_pminmax_jvp(pmax_p)
_pminmax_jvp(pmin_p)


def psum(x, axis_name):
    """The sum of `x` over the named axis (every leaf of a pytree)."""
    from kiln import api_util

    leaves, tree = api_util.flatten(x)
    return api_util.unflatten(tree, psum_p.bind(*leaves, axes=_names(axis_name)))


def pmax(x, axis_name):
    """The maximum of `x` over the named axis."""
    from kiln import api_util

    leaves, tree = api_util.flatten(x)
    return api_util.unflatten(tree, pmax_p.bind(*leaves, axes=_names(axis_name)))


def pmin(x, axis_name):
    """The minimum of `x` over the named axis."""
    from kiln import api_util

    leaves, tree = api_util.flatten(x)
    return api_util.unflatten(tree, pmin_p.bind(*leaves, axes=_names(axis_name)))


def pmean(x, axis_name):
    """The mean of `x` over the named axis."""
    from kiln import api_util
    from kiln.primitives.base import scalar_to_array
    from kiln.primitives.elementwise import div

    names = _names(axis_name)
    leaves, tree = api_util.flatten(x)
    sums = psum_p.bind(*leaves, axes=names)
    counts = psum_p.bind(scalar_to_array(1, np.dtype(np.int32), False), axes=names)[0]
    outs = []
    for s in sums:
        from kiln.primitives.elementwise import convert_element_type

        outs.append(div(s, convert_element_type(counts, s.dtype, weak_type=True)))
    return api_util.unflatten(tree, outs)


# --- axis_index ----------------------------------------------------------------------------------

axis_index_p = Primitive("axis_index")
axis_index_p.def_impl(lambda *, axes: _unbound_impl("axis_index")(axes=axes))


@axis_index_p.def_abstract_eval
def _axis_index_abstract_eval(*, axes):
    _check_bound(axes, "axis_index")
    return ShapedArray((), np.dtype(np.int32), False)


def _axis_index_collective(trace, vals, dims, *, axes):
    from kiln.primitives.shape_slice import iota

    if trace.axis_name != axes[0]:
        _check_bound(axes, "axis_index")
        return axis_index_p.bind(axes=axes), None
    return iota(np.dtype(np.int32), trace.axis_size), 0


axis_index_p.def_collective_batching(_axis_index_collective)


def axis_index(axis_name):
    """The position of the current example along the named axis."""
    return axis_index_p.bind(axes=(axis_name,))


# --- all_gather ----------------------------------------------------------------------------------

all_gather_p = Primitive("all_gather")
all_gather_p.def_impl(lambda x, *, axes, axis, tiled: _unbound_impl("all_gather")(axes=axes))


@all_gather_p.def_abstract_eval
def _all_gather_abstract_eval(x, *, axes, axis, tiled):
    _check_bound(axes, "all_gather")
    size = batching.bound_axis_size(axes[0])
    shape = list(x.shape)
    if tiled:
        shape[axis] *= size
    else:
        shape.insert(axis, size)
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


def _all_gather_collective(trace, vals, dims, *, axes, axis, tiled):
    from kiln.primitives.shape import reshape

    (x,), (d,) = vals, dims
    if trace.axis_name != axes[0]:
        _check_bound(axes, "all_gather")
        if d is None:
            return all_gather_p.bind(x, axes=axes, axis=axis, tiled=tiled), None
        # gather along the other axis, per example of this one
        from kiln.primitives.base import move_bdim

        x = move_bdim(x, d, 0)
        out = all_gather_p.bind(x, axes=axes, axis=axis + 1, tiled=tiled)
        return out, 0
    x = batching.move_to(x, d, axis, trace.axis_size)
    if tiled:
        shape = list(x.shape)
        merged = shape[:axis] + [shape[axis] * shape[axis + 1]] + shape[axis + 2 :]
        x = reshape(x, tuple(merged), None)
    return x, None


all_gather_p.def_collective_batching(_all_gather_collective)


def all_gather(x, axis_name, *, axis: int = 0, tiled: bool = False):
    """Every example's `x` along the named axis, stacked at `axis` (concatenated if `tiled`)."""
    from kiln import api_util

    leaves, tree = api_util.flatten(x)
    outs = []
    for leaf in leaves:
        ndim = len(getattr(leaf, "shape", ()))
        ax = axis % (ndim + (0 if tiled else 1)) if ndim or not tiled else axis
        outs.append(all_gather_p.bind(leaf, axes=(axis_name,), axis=ax, tiled=tiled))
    return api_util.unflatten(tree, outs)


# --- ppermute ------------------------------------------------------------------------------------

ppermute_p = Primitive("ppermute")
ppermute_p.def_impl(lambda x, *, axes, perm: _unbound_impl("ppermute")(axes=axes))


@ppermute_p.def_abstract_eval
def _ppermute_abstract_eval(x, *, axes, perm):
    _check_bound(axes, "ppermute")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _ppermute_collective(trace, vals, dims, *, axes, perm):
    from kiln.primitives.base import scalar_to_array
    from kiln.primitives.elementwise import mul, convert_element_type
    from kiln.primitives.shape import broadcast_in_dim

    (x,), (d,) = vals, dims
    if trace.axis_name != axes[0]:
        _check_bound(axes, "ppermute")
        return ppermute_p.bind(x, axes=axes, perm=perm), d
    size = trace.axis_size
    x = batching.move_to(x, d, 0, size)
    source = np.zeros(size, np.int32)
    received = np.zeros(size, bool)
    for src, dst in perm:
        source[dst] = src
        received[dst] = True
    from kiln.primitives.indexing_gather import GatherDimensionNumbers, gather

    dnums = GatherDimensionNumbers(
        offset_dims=tuple(range(1, len(x.shape))), collapsed_slice_dims=(0,), start_index_map=(0,)
    )
    from kiln.core.array import Array

    out = gather(x, Array(source.reshape(size, 1)), dnums, (1,) + tuple(x.shape[1:]), mode="clip")
    mask = broadcast_in_dim(convert_element_type(Array(received), x.dtype), tuple(out.shape), (0,))
    del scalar_to_array
    return mul(out, mask), 0


ppermute_p.def_collective_batching(_ppermute_collective)


def ppermute(x, axis_name, perm):
    """Send each example's `x` to another position along the named axis: `perm` is a list of
    (source, destination) pairs; positions nothing is sent to receive zeros."""
    from kiln import api_util

    perm = tuple((int(s), int(d)) for s, d in perm)
    dsts = [d for _, d in perm]
    srcs = [s for s, _ in perm]
    if len(set(dsts)) != len(dsts) or len(set(srcs)) != len(srcs):
        raise ValueError(f"ppermute sources and destinations must be unique, got {perm}.")
    leaves, tree = api_util.flatten(x)
    return api_util.unflatten(
        tree, [ppermute_p.bind(leaf, axes=(axis_name,), perm=perm) for leaf in leaves]
    )


# --- derivatives of the data-movement collectives ------------------------------------------------


def _linear_jvp(prim):
    def jvp(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        return out, prim.bind(tangents[0], **params)

    prim.def_jvp(jvp)


_linear_jvp(all_gather_p)
_linear_jvp(ppermute_p)


@ppermute_p.def_transpose
def _ppermute_transpose(ct, x, *, axes, perm):
    return [ppermute_p.bind(ct, axes=axes, perm=tuple((d, s) for s, d in perm))]


@axis_index_p.def_jvp
def _axis_index_jvp(primals, tangents, *, axes):
    return axis_index_p.bind(axes=axes), None

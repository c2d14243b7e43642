"""The scatter family: XLA's indexed writes (scatter) and indexed combines (scatter-add, -mul,
-min, -max), each with its derivative and batching rules. The dimension numbers, modes and the
NumPy window machinery are shared with gather (indexing_gather.py), which the rules use to read
back the positions a scatter writes.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.core import dtypes
from kiln.core.ad_util import is_undefined_primal
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import (
    ANY,
    NUMBER,
    batch_size,
    bdim_at_front,
    check_dtype,
    instantiate,
    lax_operands,
    move_bdim,
    scalar_to_array,
    zeros_like,
)
from kiln.primitives.elementwise import add, add_any, div, eq, mul, ne, select
from kiln.primitives.indexing_gather import (
    GatherScatterMode,
    ScatterDimensionNumbers,
    _canonical_scatter_dnums,
    _check_batching,
    _check_indices,
    _check_sorted_unique,
    _shifted,
    _window_grid,
    _window_starts,
    gather,
    gather_for_scatter,
    zeros,
)
from kiln.primitives.shape import broadcast_in_dim, reshape
from kiln.primitives.shape_slice import iota

__all__ = [
    "scatter",
    "scatter_add",
    "scatter_mul",
    "scatter_min",
    "scatter_max",
    "scatter_p",
    "scatter_add_p",
    "scatter_mul_p",
    "scatter_min_p",
    "scatter_max_p",
]


# --- shared: abstract evaluation, impl, wrappers ---------------------------------------------


class _ScatterPrimitive(Primitive):
    def params_for_printing(self, params: dict) -> dict:
        # JAX's scatters carry the combining computation as params; kiln's primitives are
        # specialized instead, so print the values JAX shows for them.
        return {**params, "update_consts": (), "update_jaxpr": None}


def _scatter_window(operand: ShapedArray, updates: ShapedArray, dn) -> list[int]:
    """The full-rank window size per operand dim (1 for inserted and batching dims)."""
    window = [1] * operand.ndim
    window_dims = [
        d
        for d in range(operand.ndim)
        if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims
    ]
    for od, ud in zip(window_dims, dn.update_window_dims):
        window[od] = updates.shape[ud]
    return window


def _scatter_abstract_eval_for(name: str, allowed):
    def abstract_eval(
        operand: ShapedArray,
        indices: ShapedArray,
        updates: ShapedArray,
        *,
        dimension_numbers,
        indices_are_sorted,
        unique_indices,
        mode,
    ) -> ShapedArray:
        dn = dimension_numbers
        check_dtype(name, operand.dtype, allowed)
        if updates.dtype != operand.dtype:
            raise TypeError(
                f"{name} updates dtype {updates.dtype.name} must match the operand "
                f"dtype {operand.dtype.name}; convert it with "
                "lax.convert_element_type first."
            )
        _check_indices(
            name, indices, dn.scatter_dims_to_operand_dims, "scatter_dims_to_operand_dims"
        )
        _check_sorted_unique(
            name, "update_window_dims", dn.update_window_dims, updates.ndim, "updates dims"
        )
        _check_sorted_unique(
            name, "inserted_window_dims", dn.inserted_window_dims, operand.ndim, "operand dims"
        )
        _check_sorted_unique(
            name, "operand_batching_dims", dn.operand_batching_dims, operand.ndim, "operand dims"
        )
        sd = dn.scatter_dims_to_operand_dims
        if len(set(sd)) != len(sd) or any(not 0 <= d < operand.ndim for d in sd):
            raise TypeError(
                f"{name} scatter_dims_to_operand_dims must hold distinct operand "
                f"dims, got {sd} for operand rank {operand.ndim}."
            )
        if set(dn.inserted_window_dims) & set(dn.operand_batching_dims):
            raise TypeError(
                f"{name} inserted_window_dims and operand_batching_dims must be disjoint."
            )
        if set(sd) & set(dn.operand_batching_dims):
            raise TypeError(
                f"{name} scatter_dims_to_operand_dims and operand_batching_dims must be disjoint."
            )
        _check_batching(
            name,
            operand,
            indices,
            dn.operand_batching_dims,
            dn.scatter_indices_batching_dims,
            "scatter_indices_batching_dims",
        )
        n_window = operand.ndim - len(dn.inserted_window_dims) - len(dn.operand_batching_dims)
        if len(dn.update_window_dims) != n_window:
            raise TypeError(
                f"{name} update_window_dims must have one entry per operand dim "
                f"that is not inserted or batched ({n_window}), got "
                f"update_window_dims={dn.update_window_dims}."
            )
        if updates.ndim != n_window + indices.ndim - 1:
            raise TypeError(
                f"{name} updates must have rank {n_window + indices.ndim - 1} "
                f"(window dims plus the indices' batch dims), got updates shape "
                f"{updates.shape}."
            )
        window = _scatter_window(operand, updates, dn)
        window_dims = [
            d
            for d in range(operand.ndim)
            if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims
        ]
        # (An inserted dim of size 0 is allowed: every update then falls outside and drops.)
        if any(window[d] > operand.shape[d] for d in window_dims):
            raise TypeError(
                f"{name} update window sizes {tuple(window)} must not exceed the "
                f"operand shape {operand.shape}."
            )
        scatter_dims = [d for d in range(updates.ndim) if d not in dn.update_window_dims]
        if tuple(updates.shape[d] for d in scatter_dims) != indices.shape[:-1]:
            raise TypeError(
                f"{name} updates scatter dims {tuple(scatter_dims)} (sizes "
                f"{tuple(updates.shape[d] for d in scatter_dims)}) must match the "
                f"indices' batch shape {indices.shape[:-1]}."
            )
        return ShapedArray(operand.shape, operand.dtype, operand.weak_type)

    return abstract_eval


def _assign(out: np.ndarray, index: tuple, values: np.ndarray) -> None:
    # With repeated indices the last write wins (XLA leaves the order unspecified).
    out[index] = values


def _scatter_impl_for(combine):
    def impl(
        operand: np.ndarray,
        indices: np.ndarray,
        updates: np.ndarray,
        *,
        dimension_numbers,
        indices_are_sorted,
        unique_indices,
        mode,
    ) -> np.ndarray:
        dn = dimension_numbers
        out = operand.copy()
        if updates.size == 0 or operand.size == 0:
            return out
        window = _scatter_window(operand, updates, dn)
        scatter_dims = [d for d in range(updates.ndim) if d not in dn.update_window_dims]
        # Put the scatter dims first, then lay the window out at full operand rank.
        values = np.transpose(updates, scatter_dims + list(dn.update_window_dims))
        values = values.reshape((-1,) + tuple(window))
        starts = _window_starts(
            indices,
            operand.ndim,
            dn.scatter_dims_to_operand_dims,
            dn.operand_batching_dims,
            dn.scatter_indices_batching_dims,
        )
        upper = np.asarray(operand.shape, dtype=np.int64) - np.asarray(window, dtype=np.int64)
        if mode == GatherScatterMode.CLIP:
            starts = np.clip(starts, 0, upper)
        else:  # FILL_OR_DROP, and PROMISE_IN_BOUNDS as XLA implements it: skip whole windows
            keep = np.all((starts >= 0) & (starts <= upper), axis=1)
            if not keep.all():
                starts, values = starts[keep], values[keep]
        target = out
        if operand.ndim == 0:  # give fancy indexing an axis to index: a view of length 1
            target, window = out.reshape(1), [1]
            starts, values = np.zeros((len(values), 1), dtype=np.int64), values.reshape(-1, 1)
        with np.errstate(all="ignore"):
            combine(target, _window_grid(starts, window), values)
        return out

    return impl


def _define_scatter(name: str, combine, allowed) -> Primitive:
    prim = _ScatterPrimitive(name)
    prim.def_impl(_scatter_impl_for(combine))
    prim.def_abstract_eval(_scatter_abstract_eval_for(name, allowed))
    return prim


def _scatter_wrapper(prim: Primitive, doc: str):
    def wrapper(
        operand,
        scatter_indices,
        updates,
        dimension_numbers: ScatterDimensionNumbers,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode: "str | GatherScatterMode | None" = None,
    ):
        dn = _canonical_scatter_dnums(dimension_numbers)
        operand, updates = lax_operands(operand, updates)
        params = dict(
            dimension_numbers=dn,
            indices_are_sorted=bool(indices_are_sorted),
            unique_indices=bool(unique_indices),
            mode=GatherScatterMode.from_any(mode),
        )
        return prim.bind(operand, scatter_indices, updates, **params)

    wrapper.__name__ = prim.name.replace("-", "_")
    wrapper.__doc__ = (
        f"XLA's scatter: {doc} at the window starting at each index vector of "
        "`scatter_indices` (see ScatterDimensionNumbers). Windows that do not fit are dropped "
        "(mode None/'fill'/'drop') or clamped (mode 'clip')."
    )
    return wrapper


# --- shared: derivative and batching machinery -----------------------------------------------


def _gather_at_updates(x, indices, updates_shape: tuple, dimension_numbers, mode):
    """One value of `x` (shaped like the operand) per updates element: the one at the position
    that element is written to. In fill mode, the windows a scatter drops read 0."""
    gather_dn, slice_sizes = gather_for_scatter(
        dimension_numbers, tuple(x.shape), tuple(updates_shape)
    )
    return gather(x, indices, gather_dn, slice_sizes, mode=mode, fill_value=0)


def _reading_mode(mode: GatherScatterMode) -> GatherScatterMode:
    """The gather mode that reads back where a scatter of `mode` wrote each update: a clip
    scatter clamps its windows, and so does this gather. The other modes drop the windows that
    do not fit; this gather reads those at a clamped window, which is harmless, as what it
    reads there did not come from them and the scatters that use it drop them again."""
    return (
        GatherScatterMode.CLIP
        if mode == GatherScatterMode.CLIP
        else GatherScatterMode.PROMISE_IN_BOUNDS
    )


def _scatter_batching_rule_for(prim: Primitive):
    """The batching rule of a scatter: one scatter over the whole batch. The batch leads the
    operand and the updates (broadcast when unbatched). With unbatched indices it is one more
    update window dim; with batched indices, a pair of operand/indices batching dims, so
    example b writes only its own operand slab."""

    def batching_rule(args, dims, *, dimension_numbers, indices_are_sorted, unique_indices, mode):
        (operand, indices, updates), (operand_bdim, indices_bdim, updates_bdim) = args, dims
        size = batch_size(args, dims)
        operand = bdim_at_front(operand, operand_bdim, size)
        updates = bdim_at_front(updates, updates_bdim, size)
        dn = dimension_numbers
        if indices_bdim is None:
            batched_dn = ScatterDimensionNumbers(
                update_window_dims=(0,) + _shifted(dn.update_window_dims),
                inserted_window_dims=_shifted(dn.inserted_window_dims),
                scatter_dims_to_operand_dims=_shifted(dn.scatter_dims_to_operand_dims),
                operand_batching_dims=_shifted(dn.operand_batching_dims),
                scatter_indices_batching_dims=dn.scatter_indices_batching_dims,
            )
        else:
            indices = move_bdim(indices, indices_bdim, 0)
            batched_dn = ScatterDimensionNumbers(
                update_window_dims=_shifted(dn.update_window_dims),
                inserted_window_dims=_shifted(dn.inserted_window_dims),
                scatter_dims_to_operand_dims=_shifted(dn.scatter_dims_to_operand_dims),
                operand_batching_dims=(0,) + _shifted(dn.operand_batching_dims),
                scatter_indices_batching_dims=(0,) + _shifted(dn.scatter_indices_batching_dims),
            )
        out = prim.bind(
            operand,
            indices,
            updates,
            dimension_numbers=batched_dn,
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices,
            mode=mode,
        )
        return out, 0

    return prim.def_batching(batching_rule)


def _require_unique(unique_indices: bool, what: str) -> None:
    if not unique_indices:
        raise NotImplementedError(
            f"{what} is only implemented for unique indices: pass unique_indices=True (to "
            "lax.scatter*, or to .at[...] updates) when no two updates write the same position."
        )


# --- scatter-add -----------------------------------------------------------------------------
scatter_add_p = _define_scatter("scatter-add", np.add.at, NUMBER)
scatter_add = _scatter_wrapper(scatter_add_p, "add `updates` (repeated indices accumulate)")


def _scatter_add_jvp_rule(primals, tangents, **params):
    operand, indices, updates = primals
    out = scatter_add_p.bind(operand, indices, updates, **params)
    g_operand, _, g_updates = tangents
    if g_operand is None and g_updates is None:
        return out, None
    return out, scatter_add_p.bind(
        instantiate(g_operand, operand), indices, instantiate(g_updates, updates), **params
    )


def _scatter_add_transpose_rule(ct, operand, indices, updates, **params):
    updates_ct = None
    if is_undefined_primal(updates):
        # Each update's cotangent is the cotangent where it was added (0 where it was dropped).
        updates_ct = _gather_at_updates(
            ct, indices, updates.shape, params["dimension_numbers"], params["mode"]
        )
    return [ct if is_undefined_primal(operand) else None, None, updates_ct]


scatter_add_p.def_jvp(_scatter_add_jvp_rule)
scatter_add_p.def_transpose(_scatter_add_transpose_rule)
_scatter_batching_rule_for(scatter_add_p)


# --- scatter ---------------------------------------------------------------------------------
scatter_p = _define_scatter("scatter", _assign, ANY)
scatter = _scatter_wrapper(scatter_p, "write `updates` (the last write wins for repeated indices)")


def _scatter_jvp_rule(primals, tangents, **params):
    operand, indices, updates = primals
    out = scatter_p.bind(operand, indices, updates, **params)
    g_operand, _, g_updates = tangents
    if g_operand is None and g_updates is None:
        return out, None
    g_operand, g_updates = instantiate(g_operand, operand), instantiate(g_updates, updates)
    if params["unique_indices"]:
        return out, scatter_p.bind(g_operand, indices, g_updates, **params)
    # Which of several updates to one position wins is the scatter's choice, so ask it: scatter
    # a distinct positive id per index vector the same way, and read the ids back where each
    # update would land. An update element whose id comes back is in the result; an operand
    # element under id 0 was not overwritten. The tangent adds exactly those elements (a
    # scatter-add, which is linear and transposes without unique indices).
    dn = params["dimension_numbers"]
    scatter_dims = tuple(d for d in range(updates.ndim) if d not in dn.update_window_dims)
    scatter_shape = tuple(updates.shape[d] for d in scatter_dims)
    count = math.prod(scatter_shape)
    id_dtype = np.dtype(np.uint32) if count < 2**32 - 1 else np.dtype(np.uint64)
    ids = reshape(add(iota(id_dtype, count), 1), scatter_shape)
    ids = broadcast_in_dim(ids, tuple(updates.shape), scatter_dims)
    scattered_ids = scatter_p.bind(zeros(operand.shape, id_dtype), indices, ids, **params)
    read_ids = _gather_at_updates(
        scattered_ids, indices, updates.shape, dn, _reading_mode(params["mode"])
    )
    kept = eq(scattered_ids, 0)
    won = eq(ids, read_ids)
    tangent = scatter_add_p.bind(
        select(kept, g_operand, zeros_like(g_operand)),
        indices,
        select(won, g_updates, zeros_like(g_updates)),
        **params,
    )
    return out, tangent


def _scatter_transpose_rule(ct, operand, indices, updates, **params):
    _require_unique(params["unique_indices"], "Transposing a scatter")
    operand_ct = updates_ct = None
    if is_undefined_primal(operand):
        # The operand shows through wherever no update was written.
        dtype, weak = dtypes.dtype_and_weak_of(ct)
        operand_ct = scatter_p.bind(ct, indices, zeros(updates.shape, dtype, weak), **params)
    if is_undefined_primal(updates):
        updates_ct = _gather_at_updates(
            ct, indices, updates.shape, params["dimension_numbers"], params["mode"]
        )
    return [operand_ct, None, updates_ct]


scatter_p.def_jvp(_scatter_jvp_rule)
scatter_p.def_transpose(_scatter_transpose_rule)
_scatter_batching_rule_for(scatter_p)


# --- scatter-mul -----------------------------------------------------------------------------
scatter_mul_p = _define_scatter("scatter-mul", np.multiply.at, NUMBER)
scatter_mul = _scatter_wrapper(scatter_mul_p, "multiply by `updates` (repeated indices accumulate)")


def _scatter_mul_jvp_rule(primals, tangents, **params):
    operand, indices, updates = primals
    out = scatter_mul_p.bind(operand, indices, updates, **params)
    g_operand, _, g_updates = tangents
    tangent = None
    if g_operand is not None:  # linear in the operand: scaled by the same multipliers
        tangent = scatter_mul_p.bind(g_operand, indices, updates, **params)
    if g_updates is not None:
        # With one update per position, out = operand * update there.
        _require_unique(
            params["unique_indices"], "Differentiating scatter_mul with respect to its updates"
        )
        spread = scatter_add_p.bind(zeros_like(operand), indices, g_updates, **params)
        term = mul(operand, spread)
        tangent = term if tangent is None else add_any(tangent, term)
    return out, tangent


def _scatter_mul_transpose_rule(ct, operand, indices, updates, **params):
    operand_ct = updates_ct = None
    if is_undefined_primal(operand):
        operand_ct = scatter_mul_p.bind(ct, indices, updates, **params)
    if is_undefined_primal(updates):
        _require_unique(params["unique_indices"], "Transposing scatter_mul in its updates")
        updates_ct = _gather_at_updates(
            mul(ct, operand), indices, updates.shape, params["dimension_numbers"], params["mode"]
        )
    return [operand_ct, None, updates_ct]


scatter_mul_p.def_jvp(_scatter_mul_jvp_rule)
scatter_mul_p.def_transpose(_scatter_mul_transpose_rule)
_scatter_batching_rule_for(scatter_mul_p)


# --- scatter-min, scatter-max ----------------------------------------------------------------


def _ones_like(x):
    dtype, weak = dtypes.dtype_and_weak_of(x)
    return broadcast_in_dim(scalar_to_array(1, dtype, weak), tuple(x.shape), ())


def _scatter_extremum_jvp_rule_for(prim: Primitive):
    """The jvp of scatter-min/max. As for lax.max, tied contributors share the derivative
    equally: at each written position the tangent is the mean of the tangents of the updates
    equal to the result there and of the operand if it equals the result too. Positions no
    update reaches keep the operand's tangent."""

    def jvp_rule(primals, tangents, **params):
        operand, indices, updates = primals
        out = prim.bind(operand, indices, updates, **params)
        g_operand, _, g_updates = tangents
        if g_operand is None and g_updates is None:
            return out, None
        g_operand, g_updates = instantiate(g_operand, operand), instantiate(g_updates, updates)
        dn, mode = params["dimension_numbers"], params["mode"]
        won = eq(updates, _gather_at_updates(out, indices, updates.shape, dn, _reading_mode(mode)))
        kept = eq(operand, out)
        no_updates, one_per_update = zeros_like(updates), _ones_like(updates)
        base = zeros_like(operand)
        reached = scatter_add_p.bind(base, indices, one_per_update, **params)
        winners = scatter_add_p.bind(
            base, indices, select(won, one_per_update, no_updates), **params
        )
        ties = add(winners, select(kept, _ones_like(operand), base))
        total = add(
            select(kept, g_operand, zeros_like(g_operand)),
            scatter_add_p.bind(
                base, indices, select(won, g_updates, zeros_like(g_updates)), **params
            ),
        )
        # (ties is 0 only where nothing matches the result, e.g. a NaN: total is 0 there too)
        shared = div(total, select(eq(ties, base), _ones_like(operand), ties))
        return out, select(ne(reached, base), shared, g_operand)

    return prim.def_jvp(jvp_rule)


scatter_min_p = _define_scatter("scatter-min", np.minimum.at, ANY)
scatter_min = _scatter_wrapper(scatter_min_p, "take the minimum with `updates`")
_scatter_extremum_jvp_rule_for(scatter_min_p)
_scatter_batching_rule_for(scatter_min_p)

scatter_max_p = _define_scatter("scatter-max", np.maximum.at, ANY)
scatter_max = _scatter_wrapper(scatter_max_p, "take the maximum with `updates`")
_scatter_extremum_jvp_rule_for(scatter_max_p)
_scatter_batching_rule_for(scatter_max_p)

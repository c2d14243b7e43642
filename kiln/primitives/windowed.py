"""Windowed reductions: reduce_window (a reducer traced to a jaxpr, several operands at once) and
its fast monoid cases reduce_window_sum/max/min, with the selection primitives that carry the
derivative of max/min pooling (select_and_gather_add forward, select_and_scatter_add backward).

Every window of the padded, base-dilated operand is a strided view (no copy); padding and the
holes of a base dilation hold the reduction's initial value. Max/min pooling differentiates as
XLA does: each window passes on the tangent of the first element that wins the comparison
(`ge` for max, `le` for min), so ties go to the earliest position in the window.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any, Callable, Sequence

import numpy as np

from kiln import tree_util
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.primitive import Primitive
from kiln.core.trace import Tracer
from kiln.primitives.base import ANY, NUMBER, check_dtype, move_bdim, zeros_like
from kiln.primitives.conv import _dilate_shape, _stride_dim, dilate_and_pad, padtype_to_pads
from kiln.primitives.shape import broadcast_in_dim
from kiln.primitives.shape_slice import pad

__all__ = [
    "reduce_window",
    "reduce_window_shape_tuple",
    "reduce_window_p",
    "reduce_window_sum_p",
    "reduce_window_max_p",
    "reduce_window_min_p",
    "select_and_scatter_add_p",
    "select_and_gather_add_p",
]


# --- shapes and windows ----------------------------------------------------------------------


def reduce_window_shape_tuple(
    operand_shape,
    window_dimensions,
    window_strides,
    padding,
    base_dilation=None,
    window_dilation=None,
) -> tuple:
    """The shape of a windowed reduction's result."""
    if base_dilation is not None:
        operand_shape = _dilate_shape(operand_shape, base_dilation)
    if window_dilation is not None:
        window_dimensions = _dilate_shape(window_dimensions, window_dilation)
    padded = [s + lo + hi for s, (lo, hi) in zip(operand_shape, padding)]
    return tuple(_stride_dim(p, w, s) for p, w, s in zip(padded, window_dimensions, window_strides))


def _check_window_params(
    name, aval, window_dimensions, window_strides, padding, base_dilation, window_dilation
):
    ndim = len(aval.shape)
    for what, value in (
        ("window_dimensions", window_dimensions),
        ("window_strides", window_strides),
        ("padding", padding),
        ("base_dilation", base_dilation),
        ("window_dilation", window_dilation),
    ):
        if len(value) != ndim:
            raise TypeError(
                f"{name} got the wrong number of {what} for operand array of rank {ndim}: "
                f"{tuple(value)}"
            )
    for what, value in (
        ("window_dimensions", window_dimensions),
        ("window_strides", window_strides),
        ("base_dilation", base_dilation),
        ("window_dilation", window_dilation),
    ):
        if any(v <= 0 for v in value):
            raise TypeError(
                f"{name} {what} must have every element be positive, got {tuple(value)}"
            )
    return reduce_window_shape_tuple(
        aval.shape, window_dimensions, window_strides, padding, base_dilation, window_dilation
    )


def _windows(x: np.ndarray, window_dimensions, window_strides, window_dilation) -> np.ndarray:
    """A read-only view (output positions..., window taps...) of every window of x."""
    out = [
        _stride_dim(n, 1 + d * (w - 1), s)
        for n, w, s, d in zip(x.shape, window_dimensions, window_strides, window_dilation)
    ]
    if 0 in out or x.size == 0:
        return np.zeros(tuple(out) + tuple(window_dimensions), x.dtype)
    strides = [st * s for st, s in zip(x.strides, window_strides)]
    strides += [st * d for st, d in zip(x.strides, window_dilation)]
    if dtypes.is_float8(x.dtype):  # a strided view cannot name the 8-bit floats: take bytes
        raw = x.view(np.uint8)
        shape = tuple(out) + tuple(window_dimensions)
        return np.lib.stride_tricks.as_strided(raw, shape, strides, writeable=False).view(x.dtype)
    return np.lib.stride_tricks.as_strided(
        x, tuple(out) + tuple(window_dimensions), strides, writeable=False
    )


def _padded_windows(
    x, fill, window_dimensions, window_strides, padding, base_dilation, window_dilation
):
    padded = dilate_and_pad(x, base_dilation, padding, fill)
    return _windows(padded, window_dimensions, window_strides, window_dilation)


def _window_params(params) -> tuple:
    return tuple(
        params[k]
        for k in (
            "window_dimensions",
            "window_strides",
            "padding",
            "base_dilation",
            "window_dilation",
        )
    )


def _with_unit_window_at(bdim: int, params: dict) -> dict:
    """Window parameters with a size-1 window inserted at axis `bdim` (a batch axis)."""
    unit = {
        "window_dimensions": 1,
        "window_strides": 1,
        "padding": (0, 0),
        "base_dilation": 1,
        "window_dilation": 1,
    }
    changed = dict(params)
    for key, value in unit.items():
        changed[key] = tuple(params[key][:bdim]) + (value,) + tuple(params[key][bdim:])
    return changed


def _max_identity(dtype: np.dtype):
    if dtype.kind == "b":
        return False
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


def _min_identity(dtype: np.dtype):
    if dtype.kind == "b":
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return np.inf


def _accumulator(dtype: np.dtype) -> np.dtype:
    """Half floats sum in float32, as XLA does on CPU."""
    return np.dtype(np.float32) if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


# --- reduce_window_sum / max / min -------------------------------------------------------------


def _monoid_primitive(name: str, identity: Callable, reduce: Callable, allowed) -> Primitive:
    prim = Primitive(name)

    def impl(operand, **params):
        dtype = operand.dtype
        compute = _accumulator(dtype) if name == "reduce_window_sum" else dtype
        windows = _padded_windows(
            operand.astype(compute, copy=False), identity(dtype), *_window_params(params)
        )
        out_shape = windows.shape[: operand.ndim]
        if 0 in params["window_dimensions"]:
            return np.full(out_shape, identity(dtype), dtype)
        # One pass per window tap over strided views: cheap for the small windows of pooling.
        acc = None
        with np.errstate(all="ignore"):
            for tap in itertools.product(*(range(w) for w in params["window_dimensions"])):
                value = windows[(Ellipsis,) + tap]
                acc = np.array(value) if acc is None else reduce(acc, value)
        return np.ascontiguousarray(acc).astype(dtype, copy=False)

    def abstract_eval(operand: ShapedArray, **params):
        check_dtype(name, operand.dtype, allowed)
        shape = _check_window_params(name, operand, *_window_params(params))
        return ShapedArray(shape, operand.dtype, operand.weak_type)

    def batching_rule(args, dims, **params):
        (operand,), (bdim,) = args, dims
        return prim.bind(operand, **_with_unit_window_at(bdim, params)), bdim

    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval)
    prim.def_batching(batching_rule)
    return prim


reduce_window_sum_p = _monoid_primitive("reduce_window_sum", lambda d: 0, np.add, NUMBER)
reduce_window_max_p = _monoid_primitive("reduce_window_max", _max_identity, np.maximum, ANY)
reduce_window_min_p = _monoid_primitive("reduce_window_min", _min_identity, np.minimum, ANY)


def _bind_window(
    prim, operand, window_dimensions, window_strides, padding, base_dilation, window_dilation
):
    return prim.bind(
        operand,
        window_dimensions=tuple(window_dimensions),
        window_strides=tuple(window_strides),
        padding=tuple(tuple(p) for p in padding),
        base_dilation=tuple(base_dilation),
        window_dilation=tuple(window_dilation),
    )


def reduce_window_sum(
    operand, window_dimensions, window_strides, padding, base_dilation, window_dilation
):
    """The sum of every window (padding counts as zero)."""
    return _bind_window(
        reduce_window_sum_p,
        operand,
        window_dimensions,
        window_strides,
        padding,
        base_dilation,
        window_dilation,
    )


def reduce_window_max(
    operand, window_dimensions, window_strides, padding, base_dilation, window_dilation
):
    """The maximum of every window (padding counts as -inf)."""
    return _bind_window(
        reduce_window_max_p,
        operand,
        window_dimensions,
        window_strides,
        padding,
        base_dilation,
        window_dilation,
    )


def reduce_window_min(
    operand, window_dimensions, window_strides, padding, base_dilation, window_dilation
):
    """The minimum of every window (padding counts as +inf)."""
    return _bind_window(
        reduce_window_min_p,
        operand,
        window_dimensions,
        window_strides,
        padding,
        base_dilation,
        window_dilation,
    )


# The window sum is linear; its transpose spreads each cotangent over the inputs its window
# covered: the cotangent, dilated by the strides and padded, summed over windows of the same
# size with the base dilation as stride.
def _reduce_window_sum_transpose_rule(ct, operand, **params):
    window_dimensions, window_strides, padding, base_dilation, window_dilation = _window_params(
        params
    )
    in_shape = tuple(operand.aval.shape)
    extent = _dilate_shape(window_dimensions, window_dilation)
    in_dilated = _dilate_shape(in_shape, base_dilation)
    out_dilated = _dilate_shape(tuple(ct.shape), window_strides)
    before = [e - lo - 1 for e, (lo, _) in zip(extent, padding)]
    after = [i + e - 1 - o - b for i, e, o, b in zip(in_dilated, extent, out_dilated, before)]
    config = tuple((b, a, s - 1) for b, a, s in zip(before, after, window_strides))
    from kiln.primitives.base import scalar_to_array

    padded = pad(ct, scalar_to_array(0, ct.dtype, False), config)
    result = reduce_window_sum(
        padded,
        window_dimensions,
        base_dilation,
        [(0, 0)] * len(in_shape),
        (1,) * len(in_shape),
        window_dilation,
    )
    assert tuple(result.shape) == in_shape, (result.shape, in_shape)
    return [result]


def _linear_jvp(prim):
    def jvp_rule(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        return out, None if tangents[0] is None else prim.bind(tangents[0], **params)

    return jvp_rule


reduce_window_sum_p.def_jvp(_linear_jvp(reduce_window_sum_p))
reduce_window_sum_p.def_transpose(_reduce_window_sum_transpose_rule)


def _chooser_jvp_rule(prim, select_prim: str):
    def jvp_rule(primals, tangents, **params):
        (operand,), (tangent,) = primals, tangents
        out = prim.bind(operand, **params)
        if tangent is None or not dtypes.is_inexact(operand.dtype):
            return out, None
        return out, select_and_gather_add_p.bind(
            tangent, operand, select_prim=select_prim, **params
        )

    return jvp_rule


# --- selection: the derivative of max/min pooling ----------------------------------------------


def _selected_positions(operand: np.ndarray, select_prim: str, params) -> np.ndarray:
    """For every window, the flat index into `operand` of the element the window selects (the
    first maximum for 'ge', the first minimum for 'le'); -1 where it is padding."""
    window_dimensions, window_strides, padding, base_dilation, window_dilation = _window_params(
        params
    )
    fill = _max_identity(operand.dtype) if select_prim == "ge" else _min_identity(operand.dtype)
    values = _padded_windows(operand, fill, *_window_params(params))
    ndim = operand.ndim
    out_shape = values.shape[:ndim]
    if 0 in out_shape or 0 in window_dimensions:
        return np.full(out_shape, -1, np.int64)
    # A running selection over the taps in window order, as XLA's select(ge(acc, x), acc, x):
    # a later tap replaces the current one only if the current one does not compare ge (le).
    taps = list(itertools.product(*(range(w) for w in window_dimensions)))
    compare = np.greater_equal if select_prim == "ge" else np.less_equal
    best = np.array(values[(Ellipsis,) + taps[0]])
    choice = np.zeros(out_shape, np.min_scalar_type(len(taps)))
    replace = np.empty(out_shape, bool)
    for t, tap in enumerate(taps[1:], 1):
        value = values[(Ellipsis,) + tap]
        np.logical_not(compare(best, value), out=replace)
        np.copyto(best, value, where=replace)
        np.copyto(choice, t, where=replace, casting="unsafe")
    # Where each tap of each window reads the operand: the windows of the operand's own flat
    # indices, dilated and padded as the operand is, with -1 in the holes and the padding.
    indices = np.arange(operand.size, dtype=np.int64).reshape(operand.shape)
    index_windows = _padded_windows(indices, -1, *_window_params(params))
    if any(lo or hi for lo, hi in padding) or any(d != 1 for d in base_dilation):
        index_windows = index_windows.reshape(out_shape + (-1,))
        return np.take_along_axis(index_windows, choice[..., None].astype(np.intp), axis=-1)[..., 0]
    # Without padding or holes every tap is in bounds: window origin plus the tap's offset.
    origin = index_windows[(Ellipsis,) + (0,) * ndim]
    offsets = np.array(
        [index_windows[(0,) * ndim + tap] - index_windows[(0,) * (2 * ndim)] for tap in taps]
    )
    return origin + offsets[choice]


select_and_gather_add_p = Primitive("select_and_gather_add")


@select_and_gather_add_p.def_impl
def _select_and_gather_add_impl(tangent, operand, *, select_prim, **params):
    chosen = _selected_positions(operand, select_prim, params)
    flat = tangent.reshape(-1)
    gathered = flat[np.maximum(chosen, 0)] if flat.size else np.zeros(chosen.shape, tangent.dtype)
    return np.where(chosen >= 0, gathered, np.zeros((), tangent.dtype)).astype(tangent.dtype)


@select_and_gather_add_p.def_abstract_eval
def _select_and_gather_add_abstract_eval(
    tangent: ShapedArray, operand: ShapedArray, *, select_prim, **params
):
    if tangent.shape != operand.shape:
        raise TypeError(
            f"select_and_gather_add tangent and operand must have the same shape, got "
            f"{tangent.shape} and {operand.shape}"
        )
    shape = _check_window_params("select_and_gather_add", operand, *_window_params(params))
    return ShapedArray(shape, tangent.dtype, tangent.weak_type)


def _select_and_gather_add_transpose_rule(ct, tangent, operand, *, select_prim, **params):
    out = select_and_scatter_add_p.bind(ct, operand, select_prim=select_prim, **params)
    return [out, None]


select_and_gather_add_p.def_transpose(_select_and_gather_add_transpose_rule)


@select_and_gather_add_p.def_jvp
def _select_and_gather_add_jvp_rule(primals, tangents, **params):
    (tangent, operand), (tangent_dot, _) = primals, tangents
    out = select_and_gather_add_p.bind(tangent, operand, **params)
    if tangent_dot is None:
        return out, None
    return out, select_and_gather_add_p.bind(tangent_dot, operand, **params)


def _selection_batching_rule(prim):
    def batching_rule(args, dims, *, select_prim, **params):
        size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
        operands = []
        for x, d in zip(args, dims):
            if d is None:
                shape = (size,) + tuple(x.shape)
                operands.append(broadcast_in_dim(x, shape, tuple(range(1, len(shape)))))
            else:
                operands.append(move_bdim(x, d, 0))
        out = prim.bind(*operands, select_prim=select_prim, **_with_unit_window_at(0, params))
        return out, 0

    return batching_rule


select_and_gather_add_p.def_batching(_selection_batching_rule(select_and_gather_add_p))


select_and_scatter_add_p = Primitive("select_and_scatter_add")


@select_and_scatter_add_p.def_impl
def _select_and_scatter_add_impl(source, operand, *, select_prim, **params):
    chosen = _selected_positions(operand, select_prim, params).reshape(-1)
    values = source.reshape(-1)
    keep = chosen >= 0
    chosen, values = chosen[keep], values[keep]
    extents = [
        1 + d * (w - 1) for w, d in zip(params["window_dimensions"], params["window_dilation"])
    ]
    if all(s >= e for s, e in zip(params["window_strides"], extents)):
        # Windows that do not overlap select distinct elements: a plain scatter.
        out = np.zeros(operand.size, source.dtype)
        out[chosen] = values
        return out.reshape(operand.shape)
    # Windows overlap when strides are smaller than windows: sum what lands on one element.
    if values.dtype.kind == "c":
        out = np.bincount(chosen, values.real, operand.size) + 1j * np.bincount(
            chosen, values.imag, operand.size
        )
    else:
        out = np.bincount(chosen, values.astype(np.float64), operand.size)
    return out.reshape(operand.shape).astype(source.dtype)


@select_and_scatter_add_p.def_abstract_eval
def _select_and_scatter_add_abstract_eval(
    source: ShapedArray, operand: ShapedArray, *, select_prim, **params
):
    shape = _check_window_params("select_and_scatter_add", operand, *_window_params(params))
    if tuple(source.shape) != shape:
        raise TypeError(
            f"select_and_scatter_add source must have the shape of the windowed reduction, "
            f"{shape}, got {source.shape}"
        )
    return ShapedArray(operand.shape, source.dtype, source.weak_type)


def _select_and_scatter_add_transpose_rule(ct, source, operand, *, select_prim, **params):
    out = select_and_gather_add_p.bind(ct, operand, select_prim=select_prim, **params)
    return [out, None]


select_and_scatter_add_p.def_transpose(_select_and_scatter_add_transpose_rule)


@select_and_scatter_add_p.def_jvp
def _select_and_scatter_add_jvp_rule(primals, tangents, **params):
    (source, operand), (source_dot, _) = primals, tangents
    out = select_and_scatter_add_p.bind(source, operand, **params)
    if source_dot is None:
        return out, None
    return out, select_and_scatter_add_p.bind(source_dot, operand, **params)


select_and_scatter_add_p.def_batching(_selection_batching_rule(select_and_scatter_add_p))

reduce_window_max_p.def_jvp(_chooser_jvp_rule(reduce_window_max_p, "ge"))
reduce_window_min_p.def_jvp(_chooser_jvp_rule(reduce_window_min_p, "le"))


# --- reduce_window with a traced reducer -------------------------------------------------------
# The reducer, traced on scalars, runs on whole arrays: one call per window tap folds that tap
# of every window into the accumulators (acc = f(acc, tap), starting from the initial values),
# so a window is reduced in its natural order.

reduce_window_p = Primitive("reduce_window", multiple_results=True)


def _run_reducer(jaxpr: ClosedJaxpr, args: list) -> list:
    from kiln.primitives.control_flow_common import run_jaxpr, wrap_inputs

    wrapped = wrap_inputs(args, jaxpr.in_avals)
    return [np.asarray(o._value if type(o) is Array else o) for o in run_jaxpr(jaxpr, wrapped)]


@reduce_window_p.def_impl
def _reduce_window_impl(*args, jaxpr, **params):
    n = len(args) // 2
    operands, inits = args[:n], args[n:]
    window_dimensions = params["window_dimensions"]
    views = [_padded_windows(x, init, *_window_params(params)) for x, init in zip(operands, inits)]
    out_shape = views[0].shape[: operands[0].ndim]
    acc = [np.full(out_shape, init, x.dtype) for x, init in zip(operands, inits)]
    if 0 in out_shape:
        return acc
    for tap in itertools.product(*(range(w) for w in window_dimensions)):
        index = (Ellipsis,) + tap
        acc = _run_reducer(jaxpr, acc + [np.ascontiguousarray(v[index]) for v in views])
        acc = [
            np.broadcast_to(a, out_shape).astype(x.dtype, copy=False) for a, x in zip(acc, operands)
        ]
    return [np.ascontiguousarray(a) for a in acc]


@reduce_window_p.def_abstract_eval
def _reduce_window_abstract_eval(*avals, jaxpr, **params):
    n = len(avals) // 2
    operands, inits = avals[:n], avals[n:]
    if any(o.dtype != i.dtype for o, i in zip(operands, inits)):
        raise TypeError(
            "reduce_window got inconsistent dtypes for operands and init_values: got operand "
            f"dtypes {[o.dtype.name for o in operands]} and init_value dtypes "
            f"{[i.dtype.name for i in inits]}."
        )
    if any(i.shape != () for i in inits):
        raise TypeError(
            "reduce_window expected init_values to be scalars but init_values have shapes "
            f"{[i.shape for i in inits]}."
        )
    if any(o.shape != operands[0].shape for o in operands):
        raise TypeError(
            f"reduce_window operands must have the same shape, got {[o.shape for o in operands]}"
        )
    shape = _check_window_params("reduce_window", operands[0], *_window_params(params))
    return [ShapedArray(shape, o.dtype, o.weak_type) for o in operands]


@reduce_window_p.def_jvp
def _reduce_window_jvp_rule(primals, tangents, *, jaxpr, **params):
    # Reduce (primal, tangent) pairs with the reducer's jvp: the tangents of the initial values
    # must be zero, as in JAX.
    from kiln.transforms.jvp import jvp_jaxpr

    n = len(primals) // 2
    operands, inits = list(primals[:n]), list(primals[n:])
    if any(t is not None for t in tangents[n:]):
        raise TypeError("reduce_window jvp does not support non-zero init_value_tangent.")
    operand_tangents = [zeros_like(x) if t is None else t for x, t in zip(operands, tangents[:n])]
    jvp_reducer, _ = jvp_jaxpr(jaxpr, [True] * (2 * n), True)

    def pair_reducer(*args):
        # Each side is (primals..., tangents...), as the operands are passed below.
        left_p, left_t = list(args[:n]), list(args[n : 2 * n])
        right_p, right_t = list(args[2 * n : 3 * n]), list(args[3 * n :])
        from kiln.core.interpreter import eval_jaxpr

        return eval_jaxpr(
            jvp_reducer.jaxpr, jvp_reducer.consts, *left_p, *right_p, *left_t, *right_t
        )

    init_tangents = [zeros_like(i) for i in inits]
    avals = [ShapedArray((), x.dtype) for x in operands] * 2
    pair_jaxpr = _trace_reducer(pair_reducer, avals + avals)
    outs = reduce_window_p.bind(
        *operands, *operand_tangents, *inits, *init_tangents, jaxpr=pair_jaxpr, **params
    )
    return outs[:n], outs[n:]


@reduce_window_p.def_batching
def _reduce_window_batching_rule(args, dims, *, jaxpr, **params):
    n = len(args) // 2
    if any(d is not None for d in dims[n:]):
        raise NotImplementedError("reduce_window batching is not implemented for initial values")
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    operands = []
    for x, d in zip(args[:n], dims[:n]):
        if d is None:
            shape = (size,) + tuple(x.shape)
            operands.append(broadcast_in_dim(x, shape, tuple(range(1, len(shape)))))
        else:
            operands.append(move_bdim(x, d, 0))
    outs = reduce_window_p.bind(
        *operands, *args[n:], jaxpr=jaxpr, **_with_unit_window_at(0, params)
    )
    return outs, [0] * n


def _trace_reducer(fun: Callable, avals: Sequence[ShapedArray]) -> ClosedJaxpr:
    """The reducer `fun(*lefts, *rights) -> list` as a closed jaxpr of scalars; what it closes
    over must be a concrete value, since the jaxpr is a parameter of the primitive."""
    from kiln.transforms.staging import trace_to_jaxpr

    closed, _ = trace_to_jaxpr(lambda *xs: (list(fun(*xs)), None), list(avals))
    if any(isinstance(c, Tracer) for c in closed.consts):
        raise TypeError(
            "reduce_window: the reduction function closes over a traced value; pass it as "
            "an operand instead (the reducer must depend only on its two arguments)."
        )
    return closed


def _is_monoid(computation: Callable, init, dtype: np.dtype) -> Callable | None:
    """The fast primitive when the reducer is lax.add/max/min with its identity as init."""
    from kiln.primitives import elementwise

    if isinstance(init, Tracer):
        return None
    value = np.asarray(init._value if type(init) is Array else init)
    if value.shape != ():
        return None
    if computation is elementwise.add and value == 0:
        return reduce_window_sum
    if computation is elementwise.max and value == _max_identity(dtype):
        return reduce_window_max
    if computation is elementwise.min and value == _min_identity(dtype):
        return reduce_window_min
    return None


def reduce_window(
    operand: Any,
    init_value: Any,
    computation: Callable,
    window_dimensions: Sequence[int],
    window_strides: Sequence[int] | None = None,
    padding="VALID",
    base_dilation: Sequence[int] | None = None,
    window_dilation: Sequence[int] | None = None,
) -> Any:
    """Reduce every window of `operand` (an array or a pytree of same-shape arrays) with
    `computation(x, y)`, starting from `init_value` (a scalar, or a pytree like `operand`).

    `padding` is 'VALID', 'SAME', 'SAME_LOWER' or (low, high) pairs; padding and the holes of
    `base_dilation` hold `init_value`. lax.add, lax.max and lax.min with their identities as
    init run as dedicated primitives; any other reducer is traced to a jaxpr."""
    flat_operands, operand_tree = tree_util.tree_flatten(operand)
    flat_inits, init_tree = tree_util.tree_flatten(init_value)
    if operand_tree != init_tree:
        raise ValueError(
            "Operands must have the same tree structure as init_values: "
            f"{operand_tree} vs. {init_tree}"
        )
    if not flat_operands:
        raise ValueError("reduce_window must have at least one operand.")
    ndim = len(flat_operands[0].shape)
    window_dimensions = tuple(operator.index(w) for w in window_dimensions)
    if window_strides is None:
        window_strides = (1,) * len(window_dimensions)
    window_strides = tuple(operator.index(s) for s in window_strides)
    base_dilation = (1,) * ndim if base_dilation is None else tuple(base_dilation)
    window_dilation = (1,) * ndim if window_dilation is None else tuple(window_dilation)
    if isinstance(padding, str):
        extent = _dilate_shape(window_dimensions, window_dilation)
        padding = padtype_to_pads(flat_operands[0].shape, extent, window_strides, padding)
    padding = tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
    if len(flat_operands) == 1:
        dtype = np.dtype(flat_operands[0].dtype)
        fast = _is_monoid(computation, flat_inits[0], dtype)
        if fast is not None:
            out = fast(
                flat_operands[0],
                window_dimensions,
                window_strides,
                padding,
                base_dilation,
                window_dilation,
            )
            return tree_util.tree_unflatten(operand_tree, [out])
    inits = []
    for x, init in zip(flat_operands, flat_inits):
        dtype = np.dtype(x.dtype)
        if isinstance(init, (bool, int, float, complex, np.generic, np.ndarray)):
            init = Array._wrap(np.asarray(init, dtype), False)
        inits.append(init)
    avals = [ShapedArray((), np.dtype(x.dtype)) for x in flat_operands]
    n = len(flat_operands)

    def flat_reducer(*xs):
        left = tree_util.tree_unflatten(operand_tree, list(xs[:n]))
        right = tree_util.tree_unflatten(operand_tree, list(xs[n:]))
        out = computation(left, right)
        leaves, out_tree = tree_util.tree_flatten(out)
        if out_tree != operand_tree:
            raise ValueError(
                "reduce_window output must have the same tree structure as the operands "
                f"{operand_tree} vs. {out_tree}"
            )
        return leaves

    jaxpr = _trace_reducer(flat_reducer, avals + avals)
    outs = reduce_window_p.bind(
        *flat_operands,
        *inits,
        jaxpr=jaxpr,
        window_dimensions=window_dimensions,
        window_strides=window_strides,
        padding=padding,
        base_dilation=base_dilation,
        window_dilation=window_dilation,
    )
    return tree_util.tree_unflatten(operand_tree, list(outs))

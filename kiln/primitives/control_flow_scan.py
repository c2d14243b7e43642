"""Scans: the `scan` primitive and `lax.scan` and `lax.map`.

`scan` runs `jaxpr` a static `length` times over a carry and the leading axis of its `xs`,
stacking the per-step outputs `ys`; `map` is a scan without a carry. Its derivative rules keep
loops as loops: the jvp scans over tangents alongside primals, partial evaluation splits it into
a known scan that saves per-step residuals and an unknown scan that reads them, and the
transpose scans the other way, accumulating the cotangents of the loop-invariant operands.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from kiln.config import config
from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives import control_flow_common as cf
from kiln.primitives.elementwise import convert_element_type
from kiln.primitives.shape import expand_dims, operand_shape
from kiln.primitives.shape_slice import concatenate

__all__ = ["scan", "map", "scan_p"]


class _ScanPrimitive(Primitive):
    """scan prints its params as JAX does: `_split_transpose` stays hidden."""

    def params_for_printing(self, params: dict) -> dict:
        return {k: v for k, v in params.items() if k != "_split_transpose"}


scan_p = _ScanPrimitive("scan", multiple_results=True)


# --- scan ------------------------------------------------------------------------------------


def scan(
    f: Callable,
    init: Any,
    xs: Any = None,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    _split_transpose: bool = False,
) -> tuple[Any, Any]:
    """Loop `carry, y = f(carry, x)` over the leading axis of `xs`, stacking the `y`s.

    Args:
      f: the body, `(carry, x) -> (carry, y)`; the carry keeps its structure and types.
      init: the initial carry (a pytree).
      xs: a pytree of arrays scanned along their leading axis, or None (then `length` says
        how many steps to run).
      length: the number of steps; must agree with the leading axis of `xs`.
      reverse: scan from the end of `xs` to the start (ys are still stored in place).
      unroll: how many steps a compiled loop may unroll (True: all); does not change results.
    Returns:
      `(final_carry, stacked_ys)`.
    """
    return _scan(
        f,
        init,
        xs,
        length,
        reverse,
        unroll,
        _split_transpose,
        carry_name=cf.first_param_name(f) if callable(f) else None,
    )


def _scan(
    f: Callable,
    init: Any,
    xs: Any,
    length: int | None,
    reverse: bool,
    unroll: int | bool,
    split_transpose: bool,
    carry_name: str | None,
    carry_offset: int | None = None,
) -> tuple[Any, Any]:
    """scan, naming the carry `carry_name` in errors; fori_loop's carry is `(i, val)`, and
    with `carry_offset=1` its errors name components of `val` as the user's own."""
    if not callable(f):
        raise TypeError("lax.scan: f argument should be callable.")
    xs_leaves, xs_tree = cf.flatten(xs)
    xs_avals = cf.abstractify(xs_leaves, cf.leaf_paths(xs), "the xs of scan")
    for leaf, aval in zip(xs_leaves, xs_avals):
        if not aval.shape:
            raise ValueError(f"scan got value with no leading axis to scan over: {leaf!r}")
    if length is not None:
        try:
            length = operator.index(length)
        except TypeError:
            raise TypeError(
                f"The `length` argument to scan expects a concrete `int` value, got {length!r}."
            ) from None
        if length < 0:
            raise ValueError(f"scan got a negative length: {length}")
    sizes = sorted({a.shape[0] for a in xs_avals})
    if len(sizes) > 1:
        raise ValueError(
            "scan got values with different leading axis sizes: "
            f"{', '.join(str(a.shape[0]) for a in xs_avals)}."
        )
    if length is None:
        if not sizes:
            raise ValueError("scan got no values to scan over and `length` not provided.")
        length = sizes[0]
    elif sizes and sizes[0] != length:
        raise ValueError(
            f"scan got `length` argument of {length} which disagrees with "
            f"leading axis sizes {sizes}."
        )
    if isinstance(unroll, bool):
        unroll = max(length, 1) if unroll else 1
    try:
        unroll = operator.index(unroll)
    except TypeError:
        raise TypeError(
            f"The `unroll` argument to scan expects a concrete `int` or `bool` "
            f"value, got {unroll!r}."
        ) from None
    if unroll < 1:
        raise ValueError("`unroll` must be a `bool` or a positive `int`.")

    init_leaves, init_tree = cf.flatten(init)
    init_paths = cf.leaf_paths(init)
    init_avals = cf.abstractify(init_leaves, init_paths, "the initial carry of scan")
    if config.disable_jit and all(cf.is_concrete(x) for x in init_leaves + xs_leaves):
        return _scan_in_python(f, init, xs, xs_tree, xs_leaves, length, reverse)

    x_avals = [a.update(shape=a.shape[1:]) for a in xs_avals]
    if carry_offset is not None:
        init_paths = [_drop_prefix(p, carry_offset) for p in init_paths]
    in_tree = cf.flatten((init, xs))[1]
    traced = _trace_scan(f, in_tree, init_avals, x_avals)
    cf.check_carry_structure("scan body", carry_name, init_tree, traced.out_tree[0])
    num_carry = len(init_leaves)
    init_leaves, changed = cf.promote_weak_carries(
        init_leaves, init_avals, traced.out_avals[:num_carry]
    )
    if changed:
        init_avals = [cf.aval_of(x) for x in init_leaves]
        traced = _trace_scan(f, in_tree, init_avals, x_avals)
    cf.check_carry_types(
        "scan body", carry_name, init_paths, init_avals, traced.out_avals[:num_carry]
    )

    operands = [*traced.consts, *init_leaves, *xs_leaves]
    outs = scan_p.bind(
        *operands,
        jaxpr=traced.jaxpr,
        length=length,
        reverse=bool(reverse),
        linear=(False,) * len(operands),
        unroll=unroll,
        num_consts=len(traced.consts),
        num_carry=num_carry,
        _split_transpose=bool(split_transpose),
    )
    carry_tree, ys_tree = traced.out_tree
    return cf.unflatten(carry_tree, outs[:num_carry]), cf.unflatten(ys_tree, outs[num_carry:])


def _drop_prefix(path: str, index: int) -> str:
    prefix = f"[{index}]"
    return path[len(prefix) :] if path.startswith(prefix) else path


def _trace_scan(f, in_tree, init_avals, x_avals) -> cf.Traced:
    """Trace the scan body on (carry, x) of the given types; its `out_tree` is the pair
    (carry_tree, ys_tree)."""

    def split_output(out):
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"scan body output must be a pair, got {out!r}.")
        carry_leaves, carry_tree = cf.flatten(out[0])
        y_leaves, y_tree = cf.flatten(out[1])
        return carry_leaves + y_leaves, (carry_tree, y_tree)

    return cf.trace_function(f, in_tree, list(init_avals) + list(x_avals), "scan", split_output)


def _scan_in_python(f, init, xs, xs_tree, xs_leaves, length, reverse):
    """scan under config.disable_jit: a Python loop over concrete values."""
    carry, ys = init, []
    steps = range(length - 1, -1, -1) if reverse else range(length)
    for i in steps:
        x = cf.unflatten(xs_tree, [leaf[i] for leaf in xs_leaves])
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:
        raise ValueError("scan with config.disable_jit cannot infer the ys of an empty scan")
    y_leaves = [cf.flatten(y)[0] for y in ys]
    y_tree = cf.flatten(ys[0])[1]
    return carry, cf.unflatten(y_tree, [_stack(parts) for parts in zip(*y_leaves)])


def _stack(parts: tuple) -> Any:
    """Join same-shape values along a new leading axis, promoting them to their common dtype
    (what jnp.stack does, in lax-level operations: primitives/ does not import kiln.numpy)."""
    shapes = [operand_shape(p) for p in parts]
    if any(s != shapes[0] for s in shapes[1:]):
        raise ValueError(
            f"All input arrays must have the same shape. Got {', '.join(str(s) for s in shapes)}."
        )
    dtype, weak = dtypes.result_type_with_weak(*(dtypes.dtype_and_weak_of(p) for p in parts))
    return concatenate([expand_dims(convert_element_type(p, dtype, weak), (0,)) for p in parts], 0)


def map(f: Callable, xs: Any, *, batch_size: int | None = None) -> Any:  # noqa: A001
    """Apply `f` to each slice of `xs` along its leading axis and stack the results
    (a scan without a carry: `f` is traced once)."""
    if batch_size is not None:
        raise NotImplementedError(
            "lax.map(batch_size=...) needs vmap, which kiln does not "
            "have yet; call lax.map without batch_size."
        )
    _, ys = scan(lambda _, x: ((), f(x)), (), xs)
    return ys


@scan_p.def_impl
def _scan_impl(
    *args,
    jaxpr,
    length: int,
    reverse: bool,
    linear: tuple,
    unroll: int,
    num_consts: int,
    num_carry: int,
    _split_transpose: bool,
):
    in_avals = jaxpr.in_avals
    consts = cf.wrap_inputs(args[:num_consts], in_avals[:num_consts])
    carry_avals = in_avals[num_consts : num_consts + num_carry]
    x_avals = in_avals[num_consts + num_carry :]
    carry = cf.wrap_inputs(args[num_consts : num_consts + num_carry], carry_avals)
    xs = [np.asarray(x) for x in args[num_consts + num_carry :]]
    y_avals = jaxpr.out_avals[num_carry:]
    ys = [np.empty((length,) + a.shape, a.dtype) for a in y_avals]
    for i in range(length - 1, -1, -1) if reverse else range(length):
        x = cf.wrap_inputs([x[i] for x in xs], x_avals)
        outs = cf.run_jaxpr(jaxpr, consts + carry + x)
        carry = cf.wrap_inputs(outs[:num_carry], carry_avals)
        for buffer, y in zip(ys, outs[num_carry:]):
            buffer[i] = y._value
    return cf.unwrap_outputs(carry, args) + ys


@scan_p.def_abstract_eval
def _scan_abstract_eval(
    *avals: ShapedArray,
    jaxpr,
    length: int,
    reverse: bool,
    linear: tuple,
    unroll: int,
    num_consts: int,
    num_carry: int,
    _split_transpose: bool,
):
    cf.typecheck_sub_jaxpr("scan", "jaxpr", jaxpr)
    if not isinstance(length, int) or length < 0:
        raise TypeError(f"scan: length must be a non-negative int, got {length!r}")
    if len(linear) != len(avals):
        raise TypeError(f"scan: linear has {len(linear)} entries for {len(avals)} operands")
    consts, carry = avals[:num_consts], avals[num_consts : num_consts + num_carry]
    xs = avals[num_consts + num_carry :]
    for i, x in enumerate(xs):
        if not x.shape or x.shape[0] != length:
            raise TypeError(
                f"scan: xs operand {i} has type {x.str_short()}, which has no "
                f"leading axis of the scan length {length}"
            )
    x_slices = [x.update(shape=x.shape[1:]) for x in xs]
    cf.check_operands("scan", "jaxpr", list(consts) + list(carry) + x_slices, jaxpr.in_avals)
    out = jaxpr.out_avals
    if len(out) < num_carry or not all(cf.same_type(a, b) for a, b in zip(carry, out)):
        raise TypeError(
            "scan: jaxpr must return the carry types "
            f"({', '.join(a.str_short() for a in carry)}) first, got "
            f"({', '.join(a.str_short() for a in out)})"
        )
    carry_out = cf.carry_out_avals(
        jaxpr.in_avals[num_consts : num_consts + num_carry], out[:num_carry]
    )
    ys = [ShapedArray((length,) + y.shape, y.dtype, y.weak_type) for y in out[num_carry:]]
    return carry_out + ys


@scan_p.def_effects
def _scan_effects_rule(*, jaxpr, **_):
    return cf.effects_of(jaxpr)


@scan_p.def_dce
def _scan_dce_rule(used_outputs: list[bool], eqn):
    """Keep the used ys and the carries that a used output, an effect or a kept carry's update
    depends on; drop the loop when no output is used and the body has no effects."""
    p = eqn.params
    jaxpr, num_consts, num_carry = p["jaxpr"], p["num_consts"], p["num_carry"]
    effects = cf.effects_of(jaxpr)
    if not any(used_outputs) and not effects:
        return [False] * len(eqn.invars), None
    used_carry, used_ys = list(used_outputs[:num_carry]), list(used_outputs[num_carry:])
    while True:
        new_jaxpr, reads = cf.dce_sub_jaxpr(jaxpr, used_carry + used_ys)
        grown = [u or r for u, r in zip(used_carry, reads[num_consts : num_consts + num_carry])]
        if grown == used_carry:
            break
        used_carry = grown
    keep = reads[:num_consts] + used_carry + reads[num_consts + num_carry :]
    new_jaxpr = cf.prune_inputs(new_jaxpr, keep)
    invars = [a for a, k in zip(eqn.invars, keep) if k]
    new_eqn = eqn.replace(
        invars=invars,
        outvars=[v for v, k in zip(eqn.outvars, used_carry + used_ys) if k],
        params={
            **p,
            "jaxpr": new_jaxpr,
            "num_consts": sum(reads[:num_consts]),
            "num_carry": sum(used_carry),
            "linear": tuple(l for l, k in zip(p["linear"], keep) if k),
        },
    )
    return keep, new_eqn


# --- differentiation and batching ----------------------------------------------------------


def _bind_scan(
    body,
    consts,
    init,
    xs,
    *,
    length: int,
    reverse: bool,
    unroll: int,
    _split_transpose: bool = False,
) -> list:
    """Bind scan with a body that may have captured consts (passed as leading consts)."""
    body, captured = cf.hoist_consts(body)
    operands = [*captured, *consts, *init, *xs]
    return scan_p.bind(
        *operands,
        jaxpr=body,
        length=length,
        reverse=reverse,
        linear=(False,) * len(operands),
        unroll=unroll,
        num_consts=len(captured) + len(consts),
        num_carry=len(init),
        _split_transpose=_split_transpose,
    )


@scan_p.def_jvp
def _scan_jvp_rule(
    primals,
    tangents,
    *,
    jaxpr,
    length: int,
    reverse: bool,
    linear: tuple,
    unroll: int,
    num_consts: int,
    num_carry: int,
    _split_transpose: bool,
):
    from kiln.primitives.base import zeros_like
    from kiln.transforms.jvp import jvp_jaxpr

    consts, init, xs = cf.split_list(primals, [num_consts, num_carry])
    const_dots, init_dots, xs_dots = cf.split_list(tangents, [num_consts, num_carry])
    const_nz = [t is not None for t in const_dots]
    xs_nz = [t is not None for t in xs_dots]
    num_ys = len(jaxpr.out_avals) - num_carry
    # The carries with a tangent: a fixed point, as for while.
    carry_nz = [t is not None for t in init_dots]
    while True:
        body_jvp, out_nz = jvp_jaxpr(
            jaxpr, const_nz + carry_nz + xs_nz, instantiate=carry_nz + [False] * num_ys
        )
        if out_nz[:num_carry] == carry_nz:
            break
        carry_nz = [a or b for a, b in zip(carry_nz, out_nz)]
    ys_nz = out_nz[num_carry:]
    # Inputs (consts, carry, xs, their tangents) -> (consts, const tangents, carry, carry
    # tangents, xs, xs tangents); outputs (carry, ys, their tangents) likewise.
    in_order = cf.interleave_order(
        [[num_consts, num_carry, len(xs)], [sum(const_nz), sum(carry_nz), sum(xs_nz)]], 2
    )
    out_order = cf.interleave_order([[num_carry, num_ys], [sum(carry_nz), sum(ys_nz)]], 2)
    body_jvp = cf.permute_outputs(cf.permute_inputs(body_jvp, in_order), out_order)
    init_dots = [
        zeros_like(x) if t is None else t for x, t, nz in zip(init, init_dots, carry_nz) if nz
    ]
    outs = _bind_scan(
        body_jvp,
        [*consts, *(t for t in const_dots if t is not None)],
        [*init, *init_dots],
        [*xs, *(t for t in xs_dots if t is not None)],
        length=length,
        reverse=reverse,
        unroll=unroll,
        _split_transpose=_split_transpose,
    )
    carry, carry_dots, ys, ys_dots = cf.split_list(outs, [num_carry, sum(carry_nz), num_ys])
    return carry + ys, (
        cf.merge_masked(carry_nz, carry_dots, [None] * num_carry)
        + cf.merge_masked(ys_nz, ys_dots, [None] * num_ys)
    )


@scan_p.def_partial_eval
def _scan_partial_eval_rule(
    trace,
    args,
    *,
    jaxpr,
    length: int,
    reverse: bool,
    linear: tuple,
    unroll: int,
    num_consts: int,
    num_carry: int,
    _split_transpose: bool,
):
    """Split a scan with some unknown operands into a known scan, run now, and an unknown
    scan, staged. The known scan also returns the residuals the unknown body needs, stacked
    per step as extra ys; residuals that depend only on known consts are loop invariants and
    are computed once, outside the loop, and passed to the unknown scan as consts."""
    from kiln.core.interpreter import eval_jaxpr
    from kiln.core.jaxpr_dce import dce_jaxpr
    from kiln.transforms.partial_eval import partial_eval_jaxpr

    params = dict(
        jaxpr=jaxpr,
        length=length,
        reverse=reverse,
        linear=linear,
        unroll=unroll,
        num_consts=num_consts,
        num_carry=num_carry,
        _split_transpose=_split_transpose,
    )
    unknowns = [trace.is_unknown(x) for x in args]
    if all(unknowns):
        return trace.stage(scan_p, args, params)
    const_uk, carry_uk, xs_uk = cf.split_list(unknowns, [num_consts, num_carry])
    num_ys = len(jaxpr.out_avals) - num_carry
    while True:
        known, unknown, out_uk, num_res = partial_eval_jaxpr(
            jaxpr, const_uk + carry_uk + xs_uk, instantiate=carry_uk + [False] * num_ys
        )
        if out_uk[:num_carry] == carry_uk:
            break
        carry_uk = [a or b for a, b in zip(carry_uk, out_uk)]
    ys_uk = out_uk[num_carry:]
    consts, init, xs = cf.split_list(args, [num_consts, num_carry])
    known_consts = cf.select_mask(consts, const_uk, keep=False)
    known_init = cf.select_mask(init, carry_uk, keep=False)
    known_xs = cf.select_mask(xs, xs_uk, keep=False)

    # Classify the residuals (the known body's last `num_res` outputs): a known xs slice
    # passes its whole stacked operand; one that depends only on consts is hoisted out of
    # the loop; the rest are stacked per step by the known scan.
    known, captured = cf.hoist_consts(known)
    num_leading = len(captured) + len(known_consts)
    num_known_out = len(known.out_avals) - num_res
    known_jaxpr = known.jaxpr
    res_vars = known_jaxpr.outvars[num_known_out:]
    xs_invars = known_jaxpr.invars[num_leading + len(known_init) :]
    # (With effects in the body, nothing is hoisted: they must run once per step, in order.)
    invariant = cf.inputs_only_from(known_jaxpr, num_leading)[num_known_out:]
    if cf.effects_of(known):
        invariant = [False] * num_res
    forwarded = [next((k for k, v in enumerate(xs_invars) if v is r), None) for r in res_vars]
    # Residuals the unknown body does not read (after its dead code is removed) are dropped.
    unknown_jaxpr, unknown_reads = dce_jaxpr(unknown.jaxpr)
    unknown = cf.ClosedJaxpr(unknown_jaxpr, unknown.consts)
    kinds = [
        "unused" if not read else "invariant" if inv else "xs" if fwd is not None else "stacked"
        for read, inv, fwd in zip(unknown_reads, invariant, forwarded)
    ]

    leading = [*captured, *known_consts]
    hoisted = []
    if "invariant" in kinds:
        hoisted_jaxpr, reads = dce_jaxpr(
            known_jaxpr,
            [False] * num_known_out + [k == "invariant" for k in kinds],
            prune_invars=True,
        )
        hoisted = trace.run_known(
            eval_jaxpr, hoisted_jaxpr, [], *(a for a, r in zip(leading, reads) if r)
        )
    body, _ = dce_jaxpr(known_jaxpr, [True] * num_known_out + [k == "stacked" for k in kinds])
    known_outs = trace.run_known(
        _bind_scan,
        cf.ClosedJaxpr(body, []),
        leading,
        known_init,
        known_xs,
        length=length,
        reverse=reverse,
        unroll=unroll,
        _split_transpose=_split_transpose,
    )
    num_known_carry = len(known_init)
    known_carry, known_ys, stacked = cf.split_list(
        known_outs, [num_known_carry, num_known_out - num_known_carry]
    )
    if not any(out_uk):
        return cf.merge_masked(carry_uk + ys_uk, [], known_carry + known_ys)

    # The unknown body takes (residuals, unknown consts, unknown carry, unknown xs); as a
    # scan body it must take (invariant residuals, unknown consts, unknown carry, per-step
    # residuals, unknown xs).
    positions = {
        kind: [k for k, kd in enumerate(kinds) if kd == kind]
        for kind in ("invariant", "stacked", "xs")
    }
    num_uk_consts, num_uk_carry = sum(const_uk), sum(carry_uk)
    rest = list(range(num_res, len(unknown.in_avals)))
    order = (
        positions["invariant"]
        + rest[: num_uk_consts + num_uk_carry]
        + positions["stacked"]
        + positions["xs"]
        + rest[num_uk_consts + num_uk_carry :]
    )
    unknown = cf.permute_inputs(unknown, order)
    hoisted_iter, stacked_iter = iter(hoisted), iter(stacked)
    res_values = {
        "invariant": [next(hoisted_iter) for _ in positions["invariant"]],
        "stacked": [next(stacked_iter) for _ in positions["stacked"]],
        "xs": [known_xs[forwarded[k]] for k in positions["xs"]],
    }
    unknown, unknown_captured = cf.hoist_consts(unknown)
    staged_consts = [*unknown_captured, *res_values["invariant"], *cf.select_mask(consts, const_uk)]
    staged_xs = [*res_values["stacked"], *res_values["xs"], *cf.select_mask(xs, xs_uk)]
    staged = [*staged_consts, *cf.select_mask(init, carry_uk), *staged_xs]
    unknown_outs = trace.stage(
        scan_p,
        staged,
        dict(
            params,
            jaxpr=unknown,
            linear=(False,) * len(staged),
            num_consts=len(staged_consts),
            num_carry=num_uk_carry,
        ),
    )
    return cf.merge_masked(carry_uk + ys_uk, unknown_outs, known_carry + known_ys)


@scan_p.def_transpose
def _scan_transpose_rule(
    cts,
    *args,
    jaxpr,
    length: int,
    reverse: bool,
    linear: tuple,
    unroll: int,
    num_consts: int,
    num_carry: int,
    _split_transpose: bool,
):
    """Scan the other way over the cotangents: the carry holds the carry cotangents and the
    running sums of the linear consts' cotangents, the ys are the cotangents of the linear
    xs. Every carry is linear; consts and xs are linear where they are undefined."""
    from kiln.core.ad_util import UndefinedPrimal, is_undefined_primal
    from kiln.primitives.base import zeros_like_aval
    from kiln.primitives.elementwise import add_any
    from kiln.transforms.transpose import backward_pass

    consts, init, xs = cf.split_list(args, [num_consts, num_carry])
    const_lin = [is_undefined_primal(c) for c in consts]
    xs_lin = [is_undefined_primal(x) for x in xs]
    body_avals = jaxpr.in_avals
    const_avals, carry_avals, x_avals = cf.split_list(body_avals, [num_consts, num_carry])
    num_ys = len(jaxpr.out_avals) - num_carry
    ct_carry, ct_ys = cf.split_list(cts, [num_carry])
    ct_carry = [
        zeros_like_aval(a) if ct is None else ct
        for ct, a in zip(ct_carry, jaxpr.out_avals[:num_carry])
    ]
    ys_avals = [a.update(shape=(length,) + tuple(a.shape)) for a in jaxpr.out_avals[num_carry:]]
    ct_ys = [zeros_like_aval(a) if ct is None else ct for ct, a in zip(ct_ys, ys_avals)]
    res_consts = cf.select_mask(consts, const_lin, keep=False)
    res_xs = cf.select_mask(xs, xs_lin, keep=False)
    lin_const_avals = cf.select_mask(const_avals, const_lin)
    num_res_consts, num_lin_consts = len(res_consts), len(lin_const_avals)

    def transposed_body(*args):
        res_c, acc, ct_c, ct_y, res_x = cf.split_list(
            args, [num_res_consts, num_lin_consts, num_carry, num_ys]
        )
        res_c_iter, res_x_iter = iter(res_c), iter(res_x)
        invals = (
            [
                UndefinedPrimal(a) if lin else next(res_c_iter)
                for a, lin in zip(const_avals, const_lin)
            ]
            + [UndefinedPrimal(a) for a in carry_avals]
            + [UndefinedPrimal(a) if lin else next(res_x_iter) for a, lin in zip(x_avals, xs_lin)]
        )
        cts_in = backward_pass(jaxpr.jaxpr, jaxpr.consts, invals, [*ct_c, *ct_y])
        cts_in = [zeros_like_aval(a) if ct is None else ct for a, ct in zip(body_avals, cts_in)]
        ct_consts, ct_init, ct_x = cf.split_list(cts_in, [num_consts, num_carry])
        new_acc = [add_any(a, ct) for a, ct in zip(acc, cf.select_mask(ct_consts, const_lin))]
        return [*new_acc, *ct_init, *cf.select_mask(ct_x, xs_lin)]

    res_x_avals = cf.select_mask(x_avals, xs_lin, keep=False)
    in_avals = [
        *cf.select_mask(const_avals, const_lin, keep=False),
        *lin_const_avals,
        *carry_avals,
        *jaxpr.out_avals[num_carry:],
        *res_x_avals,
    ]
    body = cf.trace_jaxpr(transposed_body, in_avals)
    outs = _bind_scan(
        body,
        res_consts,
        [*(zeros_like_aval(a) for a in lin_const_avals), *ct_carry],
        [*ct_ys, *res_xs],
        length=length,
        reverse=not reverse,
        unroll=unroll,
        _split_transpose=_split_transpose,
    )
    ct_consts, ct_init, ct_xs = cf.split_list(outs, [num_lin_consts, num_carry])
    return (
        cf.merge_masked(const_lin, ct_consts, [None] * num_consts)
        + [ct if is_undefined_primal(x) else None for x, ct in zip(init, ct_init)]
        + cf.merge_masked(xs_lin, ct_xs, [None] * len(xs))
    )


@scan_p.def_batching
def _scan_batching_rule(
    args,
    dims,
    *,
    jaxpr,
    length: int,
    reverse: bool,
    linear: tuple,
    unroll: int,
    num_consts: int,
    num_carry: int,
    _split_transpose: bool,
):
    """One scan over the batch: batched carries keep the batch at axis 0, batched xs and ys at
    axis 1 (axis 0 is the scanned one); consts keep theirs."""
    from kiln.primitives.base import batch_size, move_bdim
    from kiln.transforms.batching import batch_jaxpr, move_to

    size = batch_size(args, dims)
    consts, init, xs = cf.split_list(args, [num_consts, num_carry])
    const_dims, init_dims, xs_dims = cf.split_list(dims, [num_consts, num_carry])
    x_dims = [None if d is None else 0 for d in xs_dims]
    carry_batched = [d is not None for d in init_dims]
    while True:
        carry_dims = [0 if b else None for b in carry_batched]
        _, out_dims = batch_jaxpr(jaxpr, size, const_dims + carry_dims + x_dims)
        out_batched = [a or d is not None for a, d in zip(carry_batched, out_dims)]
        if out_batched == carry_batched:
            break
        carry_batched = out_batched
    y_dims = [None if d is None else 0 for d in out_dims[num_carry:]]
    body, _ = batch_jaxpr(jaxpr, size, const_dims + carry_dims + x_dims, carry_dims + y_dims)
    init = [move_to(x, d, dst, size) for x, d, dst in zip(init, init_dims, carry_dims)]
    xs = [x if d is None else move_bdim(x, d, 1) for x, d in zip(xs, xs_dims)]
    outs = _bind_scan(
        body,
        consts,
        init,
        xs,
        length=length,
        reverse=reverse,
        unroll=unroll,
        _split_transpose=_split_transpose,
    )
    return outs, carry_dims + [None if d is None else 1 for d in y_dims]

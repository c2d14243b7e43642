"""Loops: the `while` primitive and `lax.while_loop` and `lax.fori_loop`.

`while` repeats `body_jaxpr` on its carries while `cond_jaxpr` says so. `fori_loop` becomes a
scan (control_flow_scan.py) when its trip count is known while tracing (concrete bounds), so
that it can be differentiated in reverse mode, and a while loop otherwise.
"""

from __future__ import annotations

from typing import Any, Callable

from kiln.config import config
from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives import control_flow_common as cf

# scan and map are importable from here as well (kiln.callbacks takes scan from this module).
from kiln.primitives.control_flow_scan import _drop_prefix, _scan, map, scan, scan_p
from kiln.primitives.elementwise import add, convert_element_type, lt

__all__ = ["while_loop", "fori_loop", "scan", "map", "while_p", "scan_p"]


class _Required:
    """The default of fori_loop's bound arguments, which may come by their other names."""

    def __repr__(self) -> str:
        return "<required>"


_MISSING = _Required()


while_p = Primitive("while", multiple_results=True)


# --- while_loop ------------------------------------------------------------------------------


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """Repeat `val = body_fun(val)` while `cond_fun(val)` is true, starting from `init_val`.

    `cond_fun` must return a boolean scalar; `body_fun` must return a value of the carry's
    pytree structure, shapes and dtypes (a Python scalar in `init_val` adopts the dtype the
    body gives it).

    Returns:
      The final carry.
    """
    return _while_loop(
        cond_fun, body_fun, init_val, cf.first_param_name(body_fun) if callable(body_fun) else None
    )


def _while_loop(
    cond_fun: Callable,
    body_fun: Callable,
    init_val: Any,
    carry_name: str | None,
    carry_offset: int | None = None,
) -> Any:
    """while_loop, naming the carry `carry_name` in errors (see `_scan` for `carry_offset`)."""
    if not callable(cond_fun) or not callable(body_fun):
        raise TypeError("lax.while_loop: cond_fun and body_fun arguments should be callable.")
    leaves, in_tree = cf.flatten(init_val)
    paths = cf.leaf_paths(init_val)
    avals = cf.abstractify(leaves, paths, "the initial carry of while_loop")
    if config.disable_jit and all(cf.is_concrete(x) for x in leaves):
        val = init_val
        while cond_fun(val):
            val = body_fun(val)
        return val

    if carry_offset is not None:
        paths = [_drop_prefix(p, carry_offset) for p in paths]
    args_tree = cf.flatten((init_val,))[1]  # the functions take the carry as one argument
    cond_traced, body_traced = _trace_while(cond_fun, body_fun, args_tree, avals)
    cf.check_carry_structure("while_loop body", carry_name, in_tree, body_traced.out_tree)
    leaves, changed = cf.promote_weak_carries(leaves, avals, body_traced.out_avals)
    if changed:
        avals = [cf.aval_of(x) for x in leaves]
        cond_traced, body_traced = _trace_while(cond_fun, body_fun, args_tree, avals)
    cf.check_carry_types("while_loop body", carry_name, paths, avals, body_traced.out_avals)

    outs = while_p.bind(
        *cond_traced.consts,
        *body_traced.consts,
        *leaves,
        cond_jaxpr=cond_traced.jaxpr,
        body_jaxpr=body_traced.jaxpr,
        cond_nconsts=len(cond_traced.consts),
        body_nconsts=len(body_traced.consts),
    )
    return cf.unflatten(in_tree, outs)


def _trace_while(cond_fun, body_fun, in_tree, avals):
    cond_traced = cf.trace_function(cond_fun, in_tree, avals, "while_loop")
    out = cond_traced.out_avals
    if not cond_traced.out_tree.num_leaves == 1 or cond_traced.out_tree.num_nodes != 1:
        raise TypeError(
            "cond_fun must return a boolean scalar, but got pytree "
            f"{cf.tree_text(cond_traced.out_tree)}."
        )
    if out[0].shape != () or out[0].dtype != dtypes.bool_:
        raise TypeError(
            f"cond_fun must return a boolean scalar, but got output type(s) [{out[0]!r}]."
        )
    body_traced = cf.trace_function(body_fun, in_tree, avals, "while_loop")
    return cond_traced, body_traced


def fori_loop(
    lower=_MISSING,
    upper=_MISSING,
    body_fun=_MISSING,
    init_val=_MISSING,
    *,
    unroll: int | bool | None = None,
    start=_MISSING,
    stop=_MISSING,
) -> Any:
    """Loop `val = body_fun(i, val)` for `i` in `range(lower, upper)`; returns the final val.

    With concrete bounds (Python ints, NumPy or kiln values outside a trace) the trip count
    is static and the loop is a `scan`; with traced bounds it is a `while` loop. `start` and
    `stop` are accepted as other names for `lower` and `upper`.
    """
    lower = _alias("lower", lower, "start", start)
    upper = _alias("upper", upper, "stop", stop)
    if body_fun is _MISSING or init_val is _MISSING:
        raise TypeError("fori_loop() missing required arguments: body_fun and init_val")
    if not callable(body_fun):
        raise TypeError("lax.fori_loop: body_fun argument should be callable.")
    lower_dtype, lower_weak = dtypes.dtype_and_weak_of(lower)
    upper_dtype, upper_weak = dtypes.dtype_and_weak_of(upper)
    dtype = lower_dtype if lower_dtype == upper_dtype else None
    if dtype is None and lower_dtype.kind == "i" and upper_dtype.kind == "i":
        # A Python int bound adopts the other bound's integer type.
        if lower_weak and not upper_weak:
            dtype = upper_dtype
        elif upper_weak and not lower_weak:
            dtype = lower_dtype
    if dtype is None:
        raise TypeError(
            "lower and upper arguments to fori_loop must have equal types, got "
            f"{lower_dtype.name} and {upper_dtype.name}"
        )

    val_tree = cf.flatten(init_val)[1]
    val_name = cf.first_param_name(body_fun, 1)

    def step(i, x):
        out = body_fun(i, x)
        cf.check_carry_structure("fori_loop body", val_name, val_tree, cf.flatten(out)[1])
        return out

    if cf.is_concrete(lower) and cf.is_concrete(upper):
        lower_, upper_ = int(lower), int(upper)
        length = max(upper_ - lower_, 0)
        if config.disable_jit:
            val = init_val
            for i in range(lower_, upper_):
                val = body_fun(i, val)
            return val

        def scan_body(carry, _):
            i, x = carry
            return (i + 1, step(i, x)), None

        # The index starts as the Python int, so it is weakly typed as in JAX.
        (_, result), _ = _scan(
            scan_body,
            (lower_, init_val),
            None,
            length,
            False,
            1 if unroll is None else unroll,
            False,
            carry_name=val_name,
            carry_offset=1,
        )
        return result
    if unroll is not None and unroll is not False and unroll != 1:
        raise ValueError(
            "Can only use `unroll` in `fori_loop` if the loop bounds are statically known."
        )
    if lower_dtype != dtype:
        lower = convert_element_type(lower, dtype)
    if upper_dtype != dtype:
        upper = convert_element_type(upper, dtype)

    def while_cond(carry):
        i, stop_, _ = carry
        return lt(i, stop_)

    def while_body(carry):
        i, stop_, x = carry
        return add(i, 1), stop_, step(i, x)

    _, _, result = _while_loop(
        while_cond, while_body, (lower, upper, init_val), val_name, carry_offset=2
    )
    return result


def _alias(name: str, value, alias: str, alias_value):
    if alias_value is _MISSING:
        if value is _MISSING:
            raise TypeError(f"fori_loop() missing required argument: '{name}'")
        return value
    if value is not _MISSING:
        raise TypeError(f"fori_loop() got both '{name}' and its alias '{alias}'")
    return alias_value


@while_p.def_impl
def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts: int, body_nconsts: int):
    cond_consts = cf.wrap_inputs(args[:cond_nconsts], cond_jaxpr.in_avals)
    body_consts = cf.wrap_inputs(
        args[cond_nconsts : cond_nconsts + body_nconsts], body_jaxpr.in_avals
    )
    init = args[cond_nconsts + body_nconsts :]
    cond_avals = cond_jaxpr.in_avals[cond_nconsts:]
    body_avals = body_jaxpr.in_avals[body_nconsts:]
    carry = cf.wrap_inputs(init, body_avals)
    while True:
        (keep_going,) = cf.run_jaxpr(cond_jaxpr, cond_consts + cf.wrap_inputs(carry, cond_avals))
        if not bool(keep_going._value):
            break
        carry = cf.wrap_inputs(cf.run_jaxpr(body_jaxpr, body_consts + carry), body_avals)
    return cf.unwrap_outputs(carry, args)


@while_p.def_abstract_eval
def _while_abstract_eval(
    *avals: ShapedArray, cond_jaxpr, body_jaxpr, cond_nconsts: int, body_nconsts: int
):
    cf.typecheck_sub_jaxpr("while", "cond_jaxpr", cond_jaxpr)
    cf.typecheck_sub_jaxpr("while", "body_jaxpr", body_jaxpr)
    carry = avals[cond_nconsts + body_nconsts :]
    cf.check_operands("while", "cond_jaxpr", avals[:cond_nconsts] + carry, cond_jaxpr.in_avals)
    cf.check_operands("while", "body_jaxpr", avals[cond_nconsts:], body_jaxpr.in_avals)
    (pred, *rest) = cond_jaxpr.out_avals or [None]
    if pred is None or rest or pred.shape != () or pred.dtype != dtypes.bool_:
        raise TypeError(
            "while: cond_jaxpr must return one boolean scalar, got "
            f"({', '.join(a.str_short() for a in cond_jaxpr.out_avals)})"
        )
    body_out = body_jaxpr.out_avals
    if len(body_out) != len(carry) or not all(cf.same_type(a, b) for a, b in zip(carry, body_out)):
        raise TypeError(
            "while: body_jaxpr must return the carry types "
            f"({', '.join(a.str_short() for a in carry)}), got "
            f"({', '.join(a.str_short() for a in body_out)})"
        )
    return cf.carry_out_avals(body_jaxpr.in_avals[body_nconsts:], body_out)


@while_p.def_effects
def _while_effects_rule(*, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    return cf.effects_of(cond_jaxpr, body_jaxpr)


@while_p.def_dce
def _while_dce_rule(used_outputs: list[bool], eqn):
    """Keep the carries that a used output, the condition, an effect or a kept carry's update
    depends on; drop the loop when no output is used and neither jaxpr has effects."""
    p = eqn.params
    cond_jaxpr, body_jaxpr = p["cond_jaxpr"], p["body_jaxpr"]
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    effects = cf.effects_of(cond_jaxpr, body_jaxpr)
    if not any(used_outputs) and not effects:
        return [False] * len(eqn.invars), None
    _, cond_reads = cf.dce_sub_jaxpr(cond_jaxpr, [True])
    used_carry = [u or r for u, r in zip(used_outputs, cond_reads[nc:])]
    while True:
        new_body, body_reads = cf.dce_sub_jaxpr(body_jaxpr, used_carry)
        grown = [u or r for u, r in zip(used_carry, body_reads[nb:])]
        if grown == used_carry:
            break
        used_carry = grown
    keep_cond = cond_reads[:nc] + used_carry
    keep_body = body_reads[:nb] + used_carry
    new_cond = cf.prune_inputs(cond_jaxpr, keep_cond)
    new_body = cf.prune_inputs(new_body, keep_body)
    cond_consts = [a for a, k in zip(eqn.invars[:nc], cond_reads[:nc]) if k]
    body_consts = [a for a, k in zip(eqn.invars[nc : nc + nb], body_reads[:nb]) if k]
    init = [a for a, k in zip(eqn.invars[nc + nb :], used_carry) if k]
    new_eqn = eqn.replace(
        invars=cond_consts + body_consts + init,
        outvars=[v for v, k in zip(eqn.outvars, used_carry) if k],
        params={
            **p,
            "cond_jaxpr": new_cond,
            "body_jaxpr": new_body,
            "cond_nconsts": len(cond_consts),
            "body_nconsts": len(body_consts),
        },
    )
    return keep_cond[:nc] + body_reads[:nb] + used_carry, new_eqn


# --- differentiation and batching ----------------------------------------------------------
# A while loop's trip count is only known when it has run, so no residuals can be saved per
# step: forward mode carries the tangents through the loop, partial evaluation runs the known
# carries now and re-runs the whole loop for the unknown ones, and reverse mode is refused.


def _bind_while(cond_jaxpr, body_jaxpr, cond_consts, body_consts, init) -> list:
    """Bind while with jaxprs that may have captured consts (passed as leading consts)."""
    cond_jaxpr, cond_captured = cf.hoist_consts(cond_jaxpr)
    body_jaxpr, body_captured = cf.hoist_consts(body_jaxpr)
    cond_consts = [*cond_captured, *cond_consts]
    body_consts = [*body_captured, *body_consts]
    return while_p.bind(
        *cond_consts,
        *body_consts,
        *init,
        cond_jaxpr=cond_jaxpr,
        body_jaxpr=body_jaxpr,
        cond_nconsts=len(cond_consts),
        body_nconsts=len(body_consts),
    )


@while_p.def_jvp
def _while_jvp_rule(
    primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts: int, body_nconsts: int
):
    from kiln.primitives.base import zeros_like
    from kiln.transforms.jvp import jvp_jaxpr

    cond_consts, body_consts, init = cf.split_list(primals, [cond_nconsts, body_nconsts])
    _, body_const_tangents, init_tangents = cf.split_list(tangents, [cond_nconsts, body_nconsts])
    body_const_nonzeros = [t is not None for t in body_const_tangents]
    # The carries with a tangent: those given one, and those the body gives one (a fixed
    # point: each round adds at least one carry).
    carry_nonzeros = [t is not None for t in init_tangents]
    while True:
        body_jvp, out_nonzeros = jvp_jaxpr(
            body_jaxpr, body_const_nonzeros + carry_nonzeros, instantiate=carry_nonzeros
        )
        if out_nonzeros == carry_nonzeros:
            break
        carry_nonzeros = [a or b for a, b in zip(carry_nonzeros, out_nonzeros)]
    num_carry = len(init)
    num_const_tangents, num_carry_tangents = sum(body_const_nonzeros), sum(carry_nonzeros)
    # (consts, carry, const tangents, carry tangents) -> (consts, const tangents, carry,
    # carry tangents), the layout of a while body's inputs.
    order = cf.interleave_order(
        [[body_nconsts, num_carry], [num_const_tangents, num_carry_tangents]], 2
    )
    body_jvp = cf.permute_inputs(body_jvp, order)
    tangent_avals = [a for a, nz in zip(body_jaxpr.out_avals, carry_nonzeros) if nz]
    cond_jvp = cf.with_extra_inputs(cond_jaxpr, tangent_avals, len(cond_jaxpr.in_avals))
    init_dots = [
        zeros_like(x) if t is None else t
        for x, t, nz in zip(init, init_tangents, carry_nonzeros)
        if nz
    ]
    const_dots = [t for t in body_const_tangents if t is not None]
    outs = _bind_while(
        cond_jvp, body_jvp, cond_consts, [*body_consts, *const_dots], [*init, *init_dots]
    )
    return outs[:num_carry], cf.merge_masked(carry_nonzeros, outs[num_carry:], [None] * num_carry)


@while_p.def_partial_eval
def _while_partial_eval_rule(
    trace, args, *, cond_jaxpr, body_jaxpr, cond_nconsts: int, body_nconsts: int
):
    """The carries that depend only on known values come from a known while loop run now (if
    the condition is known too); the others come from the whole loop, staged."""
    from kiln.transforms.partial_eval import partial_eval_jaxpr

    params = dict(
        cond_jaxpr=cond_jaxpr,
        body_jaxpr=body_jaxpr,
        cond_nconsts=cond_nconsts,
        body_nconsts=body_nconsts,
    )
    unknowns = [trace.is_unknown(x) for x in args]
    cond_const_uk, body_const_uk, carry_uk = cf.split_list(unknowns, [cond_nconsts, body_nconsts])
    while True:
        known_body, _, out_uk, _ = partial_eval_jaxpr(
            body_jaxpr, body_const_uk + carry_uk, instantiate=carry_uk
        )
        out_uk = out_uk[: len(carry_uk)]
        if out_uk == carry_uk:
            break
        carry_uk = [a or b for a, b in zip(carry_uk, out_uk)]
    _, cond_reads = cf.dce_sub_jaxpr(cond_jaxpr, [True])
    cond_uk = any(r and uk for r, uk in zip(cond_reads, cond_const_uk + carry_uk))
    if cond_uk or all(carry_uk):
        return trace.stage(while_p, args, params)

    num_known = carry_uk.count(False)
    known_body, _ = cf.dce_sub_jaxpr(
        known_body, [True] * num_known + [False] * (len(known_body.out_avals) - num_known)
    )
    known_cond = cf.prune_inputs(cond_jaxpr, [not uk for uk in cond_const_uk + carry_uk])
    cond_consts, body_consts, init = cf.split_list(args, [cond_nconsts, body_nconsts])
    known_outs = trace.run_known(
        _bind_while,
        known_cond,
        known_body,
        cf.select_mask(cond_consts, cond_const_uk, keep=False),
        cf.select_mask(body_consts, body_const_uk, keep=False),
        cf.select_mask(init, carry_uk, keep=False),
    )
    staged = trace.stage(while_p, args, params)
    return cf.merge_masked(carry_uk, cf.select_mask(staged, carry_uk), known_outs)


@while_p.def_transpose
def _while_transpose_rule(cts, *args, **params):
    raise ValueError(
        "Reverse-mode differentiation does not work for lax.while_loop or "
        "lax.fori_loop with dynamic start/stop values. Try using lax.scan, or "
        "using fori_loop with static start/stop."
    )


@while_p.def_batching
def _while_batching_rule(
    args, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts: int, body_nconsts: int
):
    from kiln.core.interpreter import eval_jaxpr
    from kiln.primitives.base import batch_size
    from kiln.primitives.elementwise import select_n
    from kiln.primitives.reductions import reduce_or
    from kiln.primitives.shape import broadcast_in_dim
    from kiln.transforms.batching import batch_jaxpr, move_to

    effects = cf.effects_of(cond_jaxpr, body_jaxpr)
    if "OrderedIO" in effects:
        raise NotImplementedError("Ordered IO effects not supported in vmap.")
    size = batch_size(args, dims)
    cond_consts, body_consts, init = cf.split_list(args, [cond_nconsts, body_nconsts])
    cond_const_dims, body_const_dims, init_dims = cf.split_list(dims, [cond_nconsts, body_nconsts])
    carry_batched = [d is not None for d in init_dims]
    while True:
        carry_dims = [0 if b else None for b in carry_batched]
        _, out_dims = batch_jaxpr(body_jaxpr, size, body_const_dims + carry_dims)
        out_batched = [a or d is not None for a, d in zip(carry_batched, out_dims)]
        if out_batched == carry_batched:
            break
        carry_batched = out_batched
    _, (pred_dim,) = batch_jaxpr(cond_jaxpr, size, cond_const_dims + carry_dims)

    if pred_dim is None:
        body_batched, _ = batch_jaxpr(body_jaxpr, size, body_const_dims + carry_dims, carry_dims)
        cond_batched, _ = batch_jaxpr(cond_jaxpr, size, cond_const_dims + carry_dims, [None])
        init = [move_to(x, d, dst, size) for x, d, dst in zip(init, init_dims, carry_dims)]
        return _bind_while(cond_batched, body_batched, cond_consts, body_consts, init), carry_dims

    # Each example stops at its own step: loop while any example's condition holds, and
    # update only the carries of the examples whose condition still holds.
    if "IO" in effects:
        raise NotImplementedError(
            "Unordered IO effects not supported in while_loop with batched predicate"
        )
    carry_dims = [0] * len(init)
    body_batched, _ = batch_jaxpr(body_jaxpr, size, body_const_dims + carry_dims, carry_dims)
    cond_batched, _ = batch_jaxpr(cond_jaxpr, size, cond_const_dims + carry_dims, [0])
    init = [move_to(x, d, 0, size) for x, d in zip(init, init_dims)]
    cond_const_avals = cf.avals_of(cond_consts)
    carry_avals = cf.avals_of(init)

    def any_example(*args):
        (pred,) = eval_jaxpr(cond_batched.jaxpr, cond_batched.consts, *args)
        return [reduce_or(pred, (0,))]

    def masked_body(*args):
        cond_args, body_args = args[:cond_nconsts], args[cond_nconsts:]
        carry = body_args[body_nconsts:]
        (pred,) = eval_jaxpr(cond_batched.jaxpr, cond_batched.consts, *cond_args, *carry)
        new = eval_jaxpr(body_batched.jaxpr, body_batched.consts, *body_args)
        return [
            select_n(broadcast_in_dim(pred, tuple(n.shape), (0,)), old, n)
            for old, n in zip(carry, new)
        ]

    new_cond = cf.trace_jaxpr(any_example, cond_const_avals + carry_avals)
    new_body = cf.trace_jaxpr(
        masked_body, cond_const_avals + cf.avals_of(body_consts) + carry_avals
    )
    return _bind_while(
        new_cond, new_body, cond_consts, [*cond_consts, *body_consts], init
    ), carry_dims

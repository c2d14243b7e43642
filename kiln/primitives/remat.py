"""The `checkpoint` primitive (kiln.checkpoint / kiln.remat) and `name` (checkpoint_name).

`checkpoint` calls its jaxpr like any call, and computes the same values; it differs only in
reverse mode. Its partial evaluation keeps as residuals only the values its `policy` allows to
save (plus its own known inputs); every other primal value the backward pass needs is
recomputed there, inside the staged (unknown) call, from those residuals. The compiler inlines
it (`call_jaxpr_param`), so it costs nothing once compiled.

`name` is the identity; it tags a value so that a policy can save it by name.
"""

from __future__ import annotations

from typing import Callable, Sequence

from kiln.core.ad_util import is_undefined_primal
from kiln.core.avals import ShapedArray
from kiln.core.interpreter import _literal_value, eval_jaxpr, is_effectful, jaxpr_effects
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal, Var
from kiln.core.jaxpr_dce import dce_jaxpr
from kiln.core.primitive import Primitive
from kiln.core.trace import current_trace, set_current_trace

__all__ = ["remat_p", "name_p", "partial_eval_jaxpr_with_policy", "is_saveable"]


class RematPrimitive(Primitive):
    """A call of `jaxpr` (a ClosedJaxpr) whose residuals under differentiation are chosen by
    `policy`: `policy(prim, *in_avals, **params) -> bool` says whether an equation's outputs
    may be saved (None saves nothing)."""

    call_jaxpr_param = "jaxpr"

    def params_for_printing(self, params: dict) -> dict:
        shown = dict(params)
        policy = params.get("policy")
        if policy is not None:
            shown["policy"] = getattr(policy, "__name__", type(policy).__name__)
        return shown


remat_p = RematPrimitive("checkpoint", multiple_results=True)


@remat_p.def_impl
def _remat_impl(*args, jaxpr: ClosedJaxpr, prevent_cse, differentiated, policy):
    from kiln.core.array import Array

    values = [a if isinstance(a, Array) else Array._wrap(a) for a in args]
    return [
        o._value if isinstance(o, Array) else o
        for o in eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *values)
    ]


@remat_p.def_abstract_eval
def _remat_abstract_eval(
    *in_avals: ShapedArray, jaxpr: ClosedJaxpr, prevent_cse, differentiated, policy
):
    expected = jaxpr.jaxpr.in_avals
    if len(in_avals) != len(expected) or any(
        tuple(a.shape) != tuple(e.shape) or a.dtype != e.dtype for a, e in zip(in_avals, expected)
    ):
        raise TypeError(
            f"checkpoint: called with arguments "
            f"({', '.join(a.str_short() for a in in_avals)}) but its jaxpr takes "
            f"({', '.join(e.str_short() for e in expected)})"
        )
    return list(jaxpr.jaxpr.out_avals)


@remat_p.def_effects
def _remat_effects_rule(*, jaxpr, prevent_cse, differentiated, policy):
    return jaxpr_effects(jaxpr)


@remat_p.def_dce
def _remat_dce_rule(used_outputs: list[bool], eqn: JaxprEqn):
    """Drop unused outputs and unread inputs; drop the call if nothing is left."""
    closed = eqn.params["jaxpr"]
    if not any(used_outputs) and not jaxpr_effects(closed):
        return [False] * len(eqn.invars), None
    inner, used_inputs = dce_jaxpr(closed.jaxpr, used_outputs, prune_invars=True)
    new_eqn = eqn.replace(
        invars=[a for a, u in zip(eqn.invars, used_inputs) if u],
        outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
        params={**eqn.params, "jaxpr": ClosedJaxpr(inner, closed.consts)},
    )
    return used_inputs, new_eqn


# --- forward mode and batching: the transformed body stays under checkpoint ---------------------


@remat_p.def_jvp
def _remat_jvp_rule(primals, tangents, *, jaxpr: ClosedJaxpr, prevent_cse, differentiated, policy):
    from kiln.transforms.jvp import jvp_jaxpr

    nonzeros = [t is not None for t in tangents]
    jvp_closed, out_nonzeros = jvp_jaxpr(jaxpr, nonzeros, instantiate=False)
    outs = remat_p.bind(
        *primals,
        *(t for t in tangents if t is not None),
        jaxpr=jvp_closed,
        prevent_cse=prevent_cse,
        differentiated=differentiated,
        policy=policy,
    )
    n = len(jaxpr.jaxpr.outvars)
    out_tangents = iter(outs[n:])
    return outs[:n], [next(out_tangents) if nz else None for nz in out_nonzeros]


@remat_p.def_batching
def _remat_batching_rule(args, dims, *, jaxpr: ClosedJaxpr, prevent_cse, differentiated, policy):
    from kiln.primitives.base import batch_size
    from kiln.transforms.batching import batch_jaxpr

    batched, out_dims = batch_jaxpr(jaxpr, batch_size(args, dims), dims)
    outs = remat_p.bind(
        *args, jaxpr=batched, prevent_cse=prevent_cse, differentiated=differentiated, policy=policy
    )
    return outs, out_dims


# --- reverse mode: save what the policy allows, recompute the rest ------------------------------


@remat_p.def_partial_eval
def _remat_partial_eval_rule(
    trace, args, *, jaxpr: ClosedJaxpr, prevent_cse, differentiated, policy
):
    """Run the known part now (inlined: only the unknown part is rematerialized) and stage the
    unknown part as another checkpoint that recomputes what was not saved."""
    unknowns = [trace.is_unknown(a) for a in args]
    known, unknown, out_unknowns, num_res = partial_eval_jaxpr_with_policy(jaxpr, unknowns, policy)
    known_args = [a for a, uk in zip(args, unknowns) if not uk]
    known_outs = trace.run_known(eval_jaxpr, known.jaxpr, known.consts, *known_args)
    n_known = len(known_outs) - num_res
    residuals = list(known_outs[n_known:])
    unknown_args = [a for a, uk in zip(args, unknowns) if uk]
    unknown_outs = trace.stage(
        remat_p,
        residuals + unknown_args,
        dict(jaxpr=unknown, prevent_cse=prevent_cse, differentiated=True, policy=policy),
    )
    known_iter, unknown_iter = iter(known_outs[:n_known]), iter(unknown_outs)
    return [next(unknown_iter) if uk else next(known_iter) for uk in out_unknowns]


@remat_p.def_transpose
def _remat_transpose_rule(cts, *args, jaxpr: ClosedJaxpr, prevent_cse, differentiated, policy):
    """The transposed body, under checkpoint again: its non-linear equations (the
    recomputation) run inside the backward call."""
    from kiln.primitives.base import zeros_like_aval
    from kiln.transforms.transpose import transpose_jaxpr

    linear = [is_undefined_primal(a) for a in args]
    transposed = transpose_jaxpr(jaxpr, linear)
    cts = [zeros_like_aval(v.aval) if ct is None else ct for ct, v in zip(cts, jaxpr.jaxpr.outvars)]
    nonlinear = [a for a, lin in zip(args, linear) if not lin]
    outs = iter(
        remat_p.bind(
            *nonlinear,
            *cts,
            jaxpr=transposed,
            prevent_cse=prevent_cse,
            differentiated=differentiated,
            policy=policy,
        )
    )
    return [next(outs) if lin else None for lin in linear]


def is_saveable(policy: Callable | None, eqn: JaxprEqn) -> bool:
    """Whether `policy` lets the outputs of `eqn` be saved as residuals. Effectful equations
    are always saved: running them again would repeat their effects."""
    if is_effectful(eqn):
        return True
    if policy is None:
        return False
    avals = [a.aval for a in eqn.invars]
    return bool(policy(eqn.primitive, *avals, **eqn.params))


def partial_eval_jaxpr_with_policy(
    closed: ClosedJaxpr,
    in_unknowns: Sequence[bool],
    policy: Callable | None,
    instantiate: bool | Sequence[bool] = False,
) -> tuple[ClosedJaxpr, ClosedJaxpr, list[bool], int]:
    """Split `closed` by which inputs are unknown, saving only what `policy` allows.

    As `partial_eval_jaxpr`: returns (known, unknown, out_unknowns, num_res), `known` taking the
    known inputs and returning the known outputs then `num_res` residuals, `unknown` taking the
    residuals then the unknown inputs. The residuals are the known inputs, outputs of equations
    the policy saves, and values that equations with sub-jaxprs split off; every other known
    value the unknown side reads is recomputed in `unknown` by re-running the equations (all of
    whose inputs are known) that produced it."""
    from kiln.transforms.partial_eval import PartialEvalTrace
    from kiln.transforms.staging import trace_to_jaxpr

    jaxpr = closed.jaxpr
    n_out = len(jaxpr.outvars)
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * n_out
    known_avals = [v.aval for v, uk in zip(jaxpr.invars, in_unknowns) if not uk]
    unknown_avals = [v.aval for v, uk in zip(jaxpr.invars, in_unknowns) if uk]
    box: dict = {}

    def known_fun(*known_args):
        trace = PartialEvalTrace(current_trace())
        try:
            env: dict = {}
            # The body variable each known value stands for, and the equations to re-run
            # (known inputs, outputs not saveable) for the values that are not saved.
            origin: dict[int, Var] = {}
            recomputable: dict[Var, JaxprEqn] = {}

            def read(atom):
                if type(atom) is Literal:
                    return _literal_value(atom)
                return env[atom]

            unknown_args = iter([trace.new_arg(a) for a in unknown_avals])
            known_iter = iter(known_args)
            env.update(zip(jaxpr.constvars, closed.consts))
            for var, uk in zip(jaxpr.invars, in_unknowns):
                env[var] = next(unknown_args) if uk else next(known_iter)
            with set_current_trace(trace):
                for eqn in jaxpr.eqns:
                    values = [read(a) for a in eqn.invars]
                    all_known = not any(trace.is_unknown(x) for x in values)
                    out = eqn.primitive.bind(*values, **eqn.params)
                    outs = out if eqn.primitive.multiple_results else [out]
                    recompute = all_known and not is_saveable(policy, eqn)
                    for var, value in zip(eqn.outvars, outs):
                        if isinstance(var, DropVar):
                            continue
                        env[var] = value
                        if recompute:
                            origin[id(value)] = var
                            recomputable[var] = eqn
                outs = [read(v) for v in jaxpr.outvars]
            out_unknowns = [trace.is_unknown(o) or inst for o, inst in zip(outs, instantiate)]
            unknown_closed = trace.to_jaxpr([o for o, uk in zip(outs, out_unknowns) if uk])
        finally:
            trace.invalidate()
        unknown_jaxpr, residuals = _recompute_unsaved(
            unknown_closed, env, origin, recomputable, jaxpr.eqns
        )
        box["unknown"] = ClosedJaxpr(unknown_jaxpr, [])
        box["out_unknowns"] = out_unknowns
        box["num_res"] = len(residuals)
        known_outs = [o for o, uk in zip(outs, out_unknowns) if not uk]
        return known_outs + residuals, None

    known, _ = trace_to_jaxpr(known_fun, known_avals)
    # The known side ran every known equation; only what feeds the known outputs and the
    # residuals remains.
    known_jaxpr, _ = dce_jaxpr(known.jaxpr)
    return (
        ClosedJaxpr(known_jaxpr, known.consts),
        box["unknown"],
        box["out_unknowns"],
        box["num_res"],
    )


def _recompute_unsaved(
    unknown: ClosedJaxpr, env: dict, origin: dict, recomputable: dict, body_eqns: list
) -> tuple[Jaxpr, list]:
    """Rewrite the unknown side so that the known values it reads that may not be saved are
    recomputed in it. Returns the jaxpr (residuals then unknown inputs) and the residual
    values."""
    uj = unknown.jaxpr
    residual_vars: list[Var] = []
    residual_values: list = []
    residual_of: dict[int, Var] = {}

    def residual(value, aval) -> Var:
        var = residual_of.get(id(value))
        if var is None:
            var = residual_of[id(value)] = Var(aval)
            residual_vars.append(var)
            residual_values.append(value)
        return var

    # Which producing equations must run again: walk back from the values the unknown side
    # reads through the inputs of equations that may not be saved.
    needed: set[int] = set()
    stack = [origin[id(c)] for c in unknown.consts if id(c) in origin]
    while stack:
        var = stack.pop()
        eqn = recomputable.get(var)
        if eqn is None or id(eqn) in needed:
            continue
        needed.add(id(eqn))
        stack.extend(a for a in eqn.invars if type(a) is not Literal)

    rename: dict = {}
    eqns: list[JaxprEqn] = []
    for eqn in body_eqns:  # in the body's order, so each input is defined before its use
        if id(eqn) not in needed:
            continue
        invars = []
        for a in eqn.invars:
            if type(a) is Literal:
                invars.append(a)
            elif a in rename:
                invars.append(rename[a])
            else:
                invars.append(residual(env[a], a.aval))
        outvars = []
        for v in eqn.outvars:
            new = DropVar(v.aval) if isinstance(v, DropVar) else Var(v.aval)
            if not isinstance(v, DropVar):
                rename[v] = new
            outvars.append(new)
        eqns.append(eqn.replace(invars=invars, outvars=outvars))

    substitute: dict = {}
    for constvar, value in zip(uj.constvars, unknown.consts):
        body_var = origin.get(id(value))
        if body_var is not None and body_var in rename:
            substitute[constvar] = rename[body_var]
        else:
            substitute[constvar] = residual(value, constvar.aval)

    def sub(atom):
        return atom if type(atom) is Literal else substitute.get(atom, atom)

    for eqn in uj.eqns:
        eqns.append(eqn.replace(invars=[sub(a) for a in eqn.invars]))
    outvars = [sub(v) for v in uj.outvars]
    new = Jaxpr([], residual_vars + list(uj.invars), outvars, eqns, uj.effects)
    return new, residual_values


# --- name: tag a value for name-based policies ---------------------------------------------------

name_p = Primitive("name")
name_p.def_impl(lambda x, *, name: x)
name_p.def_abstract_eval(lambda x, *, name: x)


@name_p.def_jvp
def _name_jvp_rule(primals, tangents, *, name: str):
    # Only the primal carries the name: the policy decides about saving primal values.
    return name_p.bind(primals[0], name=name), tangents[0]


@name_p.def_batching
def _name_batching_rule(args, dims, *, name: str):
    return name_p.bind(args[0], name=name), dims[0]


# --- optimization_barrier: what keeps a recomputation from being merged away -------------------
# The identity, opaque to the compiler's common-subexpression elimination. The compiler passes
# the inputs of a differentiated checkpoint through it when it inlines the call (prevent_cse),
# so the recomputed values cannot be merged with the forward pass's, which would keep the
# forward values alive until the backward pass and undo the checkpoint.

optimization_barrier_p = Primitive("optimization_barrier")
optimization_barrier_p.def_impl(lambda x: x)
optimization_barrier_p.def_abstract_eval(lambda x: x)


@optimization_barrier_p.def_jvp
def _barrier_jvp(primals, tangents):
    out = optimization_barrier_p.bind(primals[0])
    t = tangents[0]
    return out, None if t is None else optimization_barrier_p.bind(t)


@optimization_barrier_p.def_transpose
def _barrier_transpose(ct, x):
    return [ct]


@optimization_barrier_p.def_batching
def _barrier_batching(args, dims):
    return optimization_barrier_p.bind(args[0]), dims[0]

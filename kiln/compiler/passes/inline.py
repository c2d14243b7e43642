"""Inlining: replace every call equation (pjit) by the equations of the jaxpr it calls.

A jitted function called inside another is staged as one `pjit` equation so that make_jaxpr
shows the structure the user wrote; the compiler wants one flat program, so the callee's body
is spliced in with fresh variables (the same callee may be inlined several times) and its
constants become constants of the caller.
"""

from __future__ import annotations

from kiln.compiler.passes import call_jaxpr, fresh_outvars, rebuild
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Literal, Var


def inline_calls(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Inline all nested call equations, recursively."""
    jaxpr = closed.jaxpr
    if not any(call_jaxpr(e) is not None for e in jaxpr.eqns):
        return closed
    constvars = list(jaxpr.constvars)
    consts = list(closed.consts)
    # The same const object captured by caller and callee becomes one constvar.
    const_var_of = {id(c): v for v, c in zip(constvars, consts)}
    eqns: list = []

    def const_var(aval, value) -> Var:
        var = const_var_of.get(id(value))
        if var is None:
            var = const_var_of[id(value)] = Var(aval)
            constvars.append(var)
            consts.append(value)
        return var

    def emit(body_eqns, env: dict, fresh: bool) -> None:
        """Append `body_eqns` with inputs renamed by `env`; `env` learns their outputs."""
        for eqn in body_eqns:
            invars = [a if type(a) is Literal else env.get(a, a) for a in eqn.invars]
            inner = call_jaxpr(eqn)
            if inner is None:
                outvars = fresh_outvars(eqn) if fresh else eqn.outvars
                for old, new in zip(eqn.outvars, outvars):
                    if not isinstance(old, DropVar):
                        env[old] = new
                eqns.append(eqn.replace(invars=invars, outvars=outvars))
                continue
            inner_env = {
                cv: const_var(cv.aval, c) for cv, c in zip(inner.jaxpr.constvars, inner.consts)
            }
            if _needs_barrier(eqn):
                invars = [_barrier(a, eqns) for a in invars]
            inner_env.update(zip(inner.jaxpr.invars, invars))
            emit(inner.jaxpr.eqns, inner_env, fresh=True)
            for outer, inner_out in zip(eqn.outvars, inner.jaxpr.outvars):
                if not isinstance(outer, DropVar):
                    env[outer] = (
                        inner_out
                        if type(inner_out) is Literal
                        else inner_env.get(inner_out, inner_out)
                    )

    env: dict = {}
    emit(jaxpr.eqns, env, fresh=False)
    outvars = [v if type(v) is Literal else env.get(v, v) for v in jaxpr.outvars]
    return rebuild(closed, eqns, outvars=outvars, constvars=constvars, consts=consts)


def _needs_barrier(eqn) -> bool:
    """The recomputing half of a differentiated checkpoint (prevent_cse): its inputs go through
    an optimization barrier, so common-subexpression elimination cannot merge the recomputed
    values with the forward pass's."""
    from kiln.primitives.remat import remat_p

    params = eqn.params
    return eqn.primitive is remat_p and params.get("prevent_cse") and params.get("differentiated")


def _barrier(atom, eqns: list):
    from kiln.core.jaxpr import JaxprEqn
    from kiln.primitives.remat import optimization_barrier_p

    if type(atom) is Literal:
        return atom
    out = Var(atom.aval)
    eqns.append(JaxprEqn(optimization_barrier_p, [atom], [out], {}))
    return out

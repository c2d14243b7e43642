"""Dead-code elimination: drop equations whose outputs nothing reads, and unused constants.

The equation-level work (effects, `Primitive.def_dce` rules) is `core.jaxpr_dce.dce_jaxpr`,
shared with the control-flow primitives; this pass adds the pruning of unused constants.
"""

from __future__ import annotations

from kiln.compiler.passes import rebuild
from kiln.core.jaxpr import ClosedJaxpr, Literal
from kiln.core.jaxpr_dce import dce_jaxpr


def dce(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Remove dead equations and unused constants; the signature is unchanged."""
    jaxpr, _ = dce_jaxpr(closed.jaxpr)
    read = {a for eqn in jaxpr.eqns for a in eqn.invars if type(a) is not Literal}
    read.update(v for v in jaxpr.outvars if type(v) is not Literal)
    pairs = [(v, c) for v, c in zip(jaxpr.constvars, closed.consts) if v in read]
    return rebuild(
        closed,
        jaxpr.eqns,
        outvars=jaxpr.outvars,
        constvars=[v for v, _ in pairs],
        consts=[c for _, c in pairs],
    )

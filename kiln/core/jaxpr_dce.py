"""Dead-code elimination on a bare jaxpr: drop equations whose outputs nothing reads.

It lives in core/ because both the compiler's DCE pass and the control-flow primitives (which
prune their sub-jaxprs) need it. Equations with effects (debug.print, io_callback, or a call whose
body has them) are always kept. A primitive with sub-jaxprs may register a rule with
`Primitive.def_dce`:

    rule(used_outputs: list[bool], eqn) -> (used_inputs: list[bool], new_eqn | None)

It returns which of the equation's inputs are still read (one flag per input of the original
equation) and the rewritten equation (None to delete it); every input of the rewritten equation
is live. The rule, not this function, is then responsible for keeping effects.
"""

from __future__ import annotations

from kiln.core import rules
from kiln.core.interpreter import is_effectful
from kiln.core.jaxpr import DropVar, Jaxpr, Literal


def dce_jaxpr(
    jaxpr: Jaxpr, used_outputs: list[bool] | None = None, prune_invars: bool = False
) -> tuple[Jaxpr, list[bool]]:
    """Dead-code-eliminate `jaxpr`, keeping the outputs marked in `used_outputs` (all by
    default). Returns the new jaxpr and which invars it still reads; with `prune_invars` the
    unread invars are removed from the result (constvars are never removed here)."""
    outvars = (
        jaxpr.outvars
        if used_outputs is None
        else [v for v, used in zip(jaxpr.outvars, used_outputs) if used]
    )
    live = {v for v in outvars if type(v) is not Literal}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        used = [not isinstance(v, DropVar) and v in live for v in eqn.outvars]
        rule = rules.dce_rules.get(eqn.primitive)
        if rule is not None:
            used_inputs, new_eqn = rule(used, eqn)
            if new_eqn is None:
                continue
            # Everything the rewritten equation reads is live. (`used_inputs` is aligned
            # with the original equation's inputs, which a rule may have pruned.)
            live.update(a for a in new_eqn.invars if type(a) is not Literal)
            kept.append(new_eqn)
            continue
        if not any(used) and not is_effectful(eqn):
            continue
        if not all(used):
            eqn = eqn.replace(
                outvars=[v if u else DropVar(v.aval) for v, u in zip(eqn.outvars, used)]
            )
        live.update(a for a in eqn.invars if type(a) is not Literal)
        kept.append(eqn)
    kept.reverse()
    used_invars = [v in live for v in jaxpr.invars]
    invars = [v for v, u in zip(jaxpr.invars, used_invars) if u] if prune_invars else jaxpr.invars
    new = Jaxpr(jaxpr.constvars, invars, outvars, kept, jaxpr.effects)
    return new, used_invars

"""Evaluating a jaxpr by binding its equations, and the effects of equations and jaxprs.

`eval_jaxpr` binds each equation's primitive in turn, so the same function runs a jaxpr eagerly
(no trace: each primitive's NumPy impl) and re-stages or transforms it under whatever trace is
current. Compiled execution does not come through here: see kiln.runtime.executable.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kiln.core import rules
from kiln.core.array import Array
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal


def _literal_value(literal: Literal):
    """A literal as a kiln value: a weakly typed literal must stay weak when rebound eagerly
    (a bare NumPy scalar would count as strongly typed)."""
    value = np.asarray(literal.val, dtype=literal.aval.dtype)
    return Array._wrap(np.array(value), literal.aval.weak_type)


def eval_jaxpr(jaxpr: Jaxpr, consts: Sequence[Any], *args: Any) -> list:
    """Evaluate `jaxpr` on `consts` (one per constvar) and `args` (one per invar).

    Each equation is bound through its primitive, so this works eagerly and under any outer
    trace (staging, differentiation, batching). Returns the list of output values."""
    if len(consts) != len(jaxpr.constvars) or len(args) != len(jaxpr.invars):
        raise TypeError(
            f"eval_jaxpr: the jaxpr takes {len(jaxpr.constvars)} consts and "
            f"{len(jaxpr.invars)} arguments, got {len(consts)} and {len(args)}"
        )
    env: dict = {}

    def read(atom):
        if type(atom) is Literal:
            return _literal_value(atom)
        return env[atom]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        values = [read(a) for a in eqn.invars]
        out = eqn.primitive.bind(*values, **eqn.params)
        outs = out if eqn.primitive.multiple_results else (out,)
        for var, value in zip(eqn.outvars, outs):
            if not isinstance(var, DropVar):
                env[var] = value
    return [read(v) for v in jaxpr.outvars]


def eval_closed_jaxpr(closed: ClosedJaxpr, *args: Any) -> list:
    """`eval_jaxpr` of a ClosedJaxpr with its own consts."""
    return eval_jaxpr(closed.jaxpr, closed.consts, *args)


# --- effects ---------------------------------------------------------------------------------


def eqn_effects(eqn: JaxprEqn) -> frozenset:
    """The side effects of one equation: those recorded on it plus what its primitive's
    effects rule says (call primitives report the effects of the jaxpr they call)."""
    rule = rules.effects_rules.get(eqn.primitive)
    if rule is None:
        return eqn.effects
    effects = rule(**eqn.params)
    return effects | eqn.effects if eqn.effects else effects


def jaxpr_effects(jaxpr: Jaxpr | ClosedJaxpr) -> frozenset:
    """The union of the effects of every equation of `jaxpr` (recursively through calls)."""
    if isinstance(jaxpr, ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    effects = frozenset(jaxpr.effects)
    for eqn in jaxpr.eqns:
        e = eqn_effects(eqn)
        if e:
            effects |= e
    return effects


def is_effectful(eqn: JaxprEqn) -> bool:
    """Whether an equation must run even when nothing reads its outputs."""
    return bool(eqn_effects(eqn))

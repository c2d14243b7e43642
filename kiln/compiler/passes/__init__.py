"""Jaxpr-to-jaxpr optimization passes. Each pass is a plain function ClosedJaxpr -> ClosedJaxpr
whose result typechecks; kiln.compiler.pipeline lists them in order.

This module holds the small helpers the passes share (substitution, rebuilding a jaxpr); the
passes themselves live one per module and are re-exported at the bottom.
"""

from __future__ import annotations

from typing import Sequence

from kiln.core.avals import ShapedArray
from kiln.core.interpreter import eqn_effects
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal, Var


def is_literal(atom) -> bool:
    return type(atom) is Literal


def substitute(atoms: Sequence, subst: dict) -> list:
    """Replace each atom by what `subst` maps it to (literals and unmapped vars stay)."""
    return [subst.get(a, a) for a in atoms]


def substitute_eqn(eqn: JaxprEqn, subst: dict) -> JaxprEqn:
    if not subst:
        return eqn
    invars = substitute(eqn.invars, subst)
    if all(a is b for a, b in zip(invars, eqn.invars)):
        return eqn
    return eqn.replace(invars=invars)


def same_aval(a: ShapedArray, b: ShapedArray) -> bool:
    """Equal shape, dtype and weak type: only then may one value stand in for the other."""
    return a.shape == b.shape and a.dtype == b.dtype and a.weak_type == b.weak_type


def fresh_outvars(eqn: JaxprEqn) -> list:
    return [DropVar(v.aval) if isinstance(v, DropVar) else Var(v.aval) for v in eqn.outvars]


def rebuild(
    closed: ClosedJaxpr,
    eqns: list,
    outvars: list | None = None,
    constvars: list | None = None,
    consts: list | None = None,
    invars: list | None = None,
) -> ClosedJaxpr:
    """A new ClosedJaxpr from `closed` with some parts replaced; effects are recomputed."""
    jaxpr = closed.jaxpr
    effects = frozenset()
    for eqn in eqns:
        e = eqn_effects(eqn)
        if e:
            effects |= e
    new = Jaxpr(
        jaxpr.constvars if constvars is None else constvars,
        jaxpr.invars if invars is None else invars,
        jaxpr.outvars if outvars is None else outvars,
        eqns,
        effects,
    )
    return ClosedJaxpr(new, closed.consts if consts is None else consts)


def call_jaxpr(eqn: JaxprEqn) -> ClosedJaxpr | None:
    """The jaxpr a call primitive (pjit) calls, or None for other equations."""
    param = getattr(eqn.primitive, "call_jaxpr_param", None)
    return None if param is None else eqn.params[param]


# The passes (imported last: they use the helpers above).
from kiln.compiler.passes.inline import inline_calls  # noqa: E402
from kiln.compiler.passes.dce import dce  # noqa: E402
from kiln.compiler.passes.cse import cse  # noqa: E402
from kiln.compiler.passes.fold import fold_constants  # noqa: E402
from kiln.compiler.passes.simplify import simplify  # noqa: E402
from kiln.compiler.passes.scan_accumulators import hoist_scan_accumulators  # noqa: E402

__all__ = [
    "inline_calls",
    "dce",
    "cse",
    "fold_constants",
    "simplify",
    "hoist_scan_accumulators",
]

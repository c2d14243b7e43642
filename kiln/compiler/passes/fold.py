"""Constant folding: an equation whose inputs are all literals or constants is evaluated at
compile time with its primitive's NumPy impl (the reference semantics, so folding never changes
a result).

A scalar result becomes a literal, a larger one a new constant. Equations whose result has
more elements than their inputs together (a broadcast of a literal, an iota) are not folded:
they cost nothing in fused code, while a constant costs memory and loads. Nor are results with
more than `FOLD_MAX_ELEMENTS` elements. Equations with effects, call equations and primitives
marked `foldable = False` (host callbacks) are never folded.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.compiler.passes import call_jaxpr, rebuild, substitute_eqn
from kiln.core import rules
from kiln.core.array import Array
from kiln.core.interpreter import is_effectful
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Literal, Var

#: The largest result (in elements) constant folding produces.
FOLD_MAX_ELEMENTS = 1024


def _host_value(value) -> np.ndarray:
    return value._value if hasattr(value, "_value") else np.asarray(value)


def _foldable(eqn) -> bool:
    in_size = max(1, sum(math.prod(a.aval.shape) for a in eqn.invars))
    out_size = max(math.prod(v.aval.shape) for v in eqn.outvars) if eqn.outvars else 0
    return (
        eqn.primitive in rules.impl_rules
        and getattr(eqn.primitive, "foldable", True)
        and call_jaxpr(eqn) is None
        and out_size <= min(FOLD_MAX_ELEMENTS, in_size)
        and not is_effectful(eqn)
    )


def fold_constants(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Evaluate equations on constant inputs at compile time."""
    jaxpr = closed.jaxpr
    known = {
        v: c
        for v, c in zip(jaxpr.constvars, closed.consts)
        if hasattr(c, "_value") or isinstance(c, np.ndarray)
    }
    constvars, consts = list(jaxpr.constvars), list(closed.consts)
    subst: dict = {}
    eqns = []
    for eqn in jaxpr.eqns:
        eqn = substitute_eqn(eqn, subst)
        if not all(type(a) is Literal or a in known for a in eqn.invars) or not _foldable(eqn):
            eqns.append(eqn)
            continue
        outs = _evaluate(eqn, known)
        if outs is None:
            eqns.append(eqn)
            continue
        for var, value in zip(eqn.outvars, outs):
            if isinstance(var, DropVar):
                continue
            if value.shape == ():
                subst[var] = Literal(value, var.aval)
            else:
                new_var = Var(var.aval)
                constvars.append(new_var)
                consts.append(Array._wrap(value, var.aval.weak_type))
                known[new_var] = consts[-1]
                subst[var] = new_var
    if not subst:
        return closed
    outvars = [subst.get(v, v) for v in jaxpr.outvars]
    return rebuild(closed, eqns, outvars=outvars, constvars=constvars, consts=consts)


def _evaluate(eqn, known: dict) -> list | None:
    """The equation's outputs as NumPy arrays, or None when it cannot be folded safely (the
    impl raised, or produced a value that disagrees with the equation's types)."""
    args = [
        np.asarray(a.val, dtype=a.aval.dtype) if type(a) is Literal else _host_value(known[a])
        for a in eqn.invars
    ]
    try:
        with np.errstate(all="ignore"):
            out = rules.impl_rules[eqn.primitive](*args, **eqn.params)
    except Exception:  # leave the error to run time, where the user will see it
        return None
    outs = list(out) if eqn.primitive.multiple_results else [out]
    values = []
    for var, value in zip(eqn.outvars, outs):
        value = np.array(value)  # a private copy: impls may return views of their inputs
        if value.shape != var.aval.shape or value.dtype != var.aval.dtype:
            return None
        values.append(value)
    return values

"""Common-subexpression elimination: an equation with the same primitive, the same params and
the same inputs as an earlier one reuses the earlier outputs.

Equations with effects are never merged (two debug.prints print twice). Literals are equal
when their dtype, weak type and bytes are equal (so -0.0 and 0.0 stay distinct); params compare
by value and Python type (so 1, 1.0 and True stay distinct); an equation whose params cannot be
hashed is left alone.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.compiler.passes import rebuild, same_aval, substitute_eqn
from kiln.core.interpreter import is_effectful
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Literal


def _param_key(value: Any) -> Any:
    if isinstance(value, float):
        return (float, value.hex() if math.isfinite(value) else repr(value))
    if isinstance(value, (bool, int, complex, str)):
        return (type(value), value)
    if isinstance(value, tuple):
        return (tuple, tuple(_param_key(v) for v in value))
    if isinstance(value, np.generic):
        return (type(value), value.tobytes())
    return value


def _atom_key(atom) -> Any:
    if type(atom) is Literal:
        value = np.asarray(atom.val, dtype=atom.aval.dtype)
        return ("literal", atom.aval.dtype, atom.aval.weak_type, value.shape, value.tobytes())
    return atom


def _eqn_key(eqn) -> Any:
    key = (
        eqn.primitive,
        tuple(sorted((k, _param_key(v)) for k, v in eqn.params.items())),
        tuple(_atom_key(a) for a in eqn.invars),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def cse(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Merge equations that compute the same thing from the same inputs."""
    jaxpr = closed.jaxpr
    subst: dict = {}
    seen: dict = {}
    eqns = []
    for eqn in jaxpr.eqns:
        eqn = substitute_eqn(eqn, subst)
        if is_effectful(eqn):
            eqns.append(eqn)
            continue
        key = _eqn_key(eqn)
        if key is not None:
            previous = seen.get(key)
            if previous is not None and _can_reuse(previous, eqn.outvars):
                subst.update(
                    (v, p) for v, p in zip(eqn.outvars, previous) if not isinstance(v, DropVar)
                )
                continue
            seen[key] = eqn.outvars
        eqns.append(eqn)
    if not subst:
        return closed
    outvars = [subst.get(v, v) for v in jaxpr.outvars]
    return rebuild(closed, eqns, outvars=outvars)


def _can_reuse(previous: list, outvars: list) -> bool:
    """The earlier outputs can stand in where this equation's outputs are read (an output the
    earlier equation dropped cannot)."""
    for p, v in zip(previous, outvars):
        if isinstance(v, DropVar):
            continue
        if isinstance(p, DropVar) or not same_aval(p.aval, v.aval):
            return False
    return True

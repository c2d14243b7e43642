"""Algebraic simplification: local rewrites that are exact, bit for bit.

Every rule below states why it is exact. A rule that would replace an equation's output by an
existing value fires only when that value has the same shape, dtype *and weak type*, so types
seen by the rest of the program never change. Complex operands are left alone: NumPy computes
(a+bj)*(1+0j) as (a*1 - b*0) + (a*0 + b*1)j, which turns b = inf into NaN.

    mul x 1, mul 1 x      x*1 == x for every integer and real float value (incl. NaN, inf, -0.)
    div x 1               x/1 == x likewise (IEEE division by one is exact; C integer division)
    add x 0, add 0 x      integers: always. Floats: only for the literal -0.0, since
                          (-0.) + (+0.) == +0. while x + (-0.) == x for every x
    sub x 0               integers: always. Floats: only for the literal +0.0 (x - (+0.) is
                          x + (-0.)); x - (-0.) would turn -0. into +0.
    neg (neg x)           negation flips the sign bit (floats) or wraps mod 2**n (integers)
    transpose(transpose)  permutations compose; the identity permutation is removed
    reshape(reshape)      row-major reshapes compose; a reshape to the input shape is removed
    broadcast_in_dim      to the operand's own shape with identity dimensions is removed
    convert_element_type  to the operand's own dtype and weak type is removed
    select_n              with a literal predicate picks its case; with identical cases picks it
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from kiln.compiler.passes import rebuild, same_aval, substitute_eqn
from kiln.core.interpreter import is_effectful
from kiln.core.jaxpr import ClosedJaxpr, JaxprEqn, Literal
from kiln.core.rules import RuleTable
from kiln.primitives import elementwise as ew
from kiln.primitives import shape as shape_prims
from kiln.primitives.custom_derivatives import stop_gradient_p

#: prim -> f(eqn, producer) -> replacement atom | rewritten equation | None.
simplify_rules = RuleTable("simplify")


def register(*prims) -> Callable[[Callable], Callable]:
    """Decorator: `@register(mul_p)` stores the function as mul_p's simplification rule."""
    return simplify_rules.register(*prims)


def _literal_equals(atom, value: float, negative_zero: bool | None = None) -> bool:
    """Is `atom` a literal equal to `value` (and, for zero, with the given sign bit)?"""
    if type(atom) is not Literal:
        return False
    x = np.asarray(atom.val)
    if x.shape != () or x.dtype.kind == "c" or x != value:
        return False
    if negative_zero is not None and (x.dtype.kind == "f" or x.dtype.name == "bfloat16"):
        return bool(np.signbit(x.astype(np.float32))) == negative_zero
    return True


def _is_real_or_int(aval) -> bool:
    return aval.dtype.kind in "iuf" or aval.dtype.name == "bfloat16"


def _is_integer(aval) -> bool:
    return aval.dtype.kind in "iu"


def _pass_through(eqn: JaxprEqn, atom):
    """`atom` replaces the equation's output when their types agree exactly."""
    return atom if same_aval(atom.aval, eqn.outvars[0].aval) else None


@register(stop_gradient_p)
def _stop_gradient(eqn, producer):
    return _pass_through(eqn, eqn.invars[0])


@register(ew.mul_p)
def _mul(eqn, producer):
    x, y = eqn.invars
    if not _is_real_or_int(eqn.outvars[0].aval):
        return None
    if _literal_equals(y, 1):
        return _pass_through(eqn, x)
    if _literal_equals(x, 1):
        return _pass_through(eqn, y)
    return None


@register(ew.div_p)
def _div(eqn, producer):
    x, y = eqn.invars
    if _is_real_or_int(eqn.outvars[0].aval) and _literal_equals(y, 1):
        return _pass_through(eqn, x)
    return None


@register(ew.add_p, ew.add_any_p)
def _add(eqn, producer):
    x, y = eqn.invars
    aval = eqn.outvars[0].aval
    if not _is_real_or_int(aval):
        return None
    sign = None if _is_integer(aval) else True  # floats: only x + (-0.) is exact
    if _literal_equals(y, 0, sign):
        return _pass_through(eqn, x)
    if _literal_equals(x, 0, sign):
        return _pass_through(eqn, y)
    return None


@register(ew.sub_p)
def _sub(eqn, producer):
    x, y = eqn.invars
    aval = eqn.outvars[0].aval
    if not _is_real_or_int(aval):
        return None
    sign = None if _is_integer(aval) else False  # floats: only x - (+0.) is exact
    if _literal_equals(y, 0, sign):
        return _pass_through(eqn, x)
    return None


@register(ew.neg_p)
def _neg(eqn, producer):
    inner = producer.get(eqn.invars[0])
    if inner is not None and inner.primitive is ew.neg_p:
        return _pass_through(eqn, inner.invars[0])
    return None


@register(shape_prims.transpose_p)
def _transpose(eqn, producer):
    permutation = eqn.params.get("permutation")
    if permutation is None:
        return None
    operand = eqn.invars[0]
    inner = producer.get(operand)
    if (
        inner is not None
        and inner.primitive is shape_prims.transpose_p
        and inner.params.get("permutation") is not None
    ):
        # y = transpose(x, p) has y.shape[i] = x.shape[p[i]]; transposing y by q gives
        # x.shape[p[q[j]]]: one transpose by p∘q.
        inner_perm = inner.params["permutation"]
        permutation = tuple(inner_perm[j] for j in permutation)
        operand = inner.invars[0]
    if permutation == tuple(range(len(permutation))):
        return _pass_through(eqn, operand)
    if operand is eqn.invars[0]:
        return None
    return eqn.replace(invars=[operand], params={**eqn.params, "permutation": permutation})


@register(shape_prims.reshape_p)
def _reshape(eqn, producer):
    if eqn.params.get("dimensions") is not None:
        return None
    operand = eqn.invars[0]
    inner = producer.get(operand)
    if (
        inner is not None
        and inner.primitive is shape_prims.reshape_p
        and inner.params.get("dimensions") is None
    ):
        operand = inner.invars[0]
    if operand.aval.shape == eqn.outvars[0].aval.shape:
        return _pass_through(eqn, operand)
    if operand is eqn.invars[0]:
        return None
    return eqn.replace(invars=[operand])


@register(shape_prims.broadcast_in_dim_p)
def _broadcast_in_dim(eqn, producer):
    operand = eqn.invars[0]
    if operand.aval.shape == eqn.outvars[0].aval.shape and tuple(
        eqn.params.get("broadcast_dimensions", ())
    ) == tuple(range(operand.aval.ndim)):
        return _pass_through(eqn, operand)
    return None


@register(ew.convert_element_type_p)
def _convert_element_type(eqn, producer):
    return _pass_through(eqn, eqn.invars[0])


@register(ew.select_n_p)
def _select_n(eqn, producer):
    which, *cases = eqn.invars
    if all(c is cases[0] for c in cases[1:]) and type(cases[0]) is not Literal:
        return _pass_through(eqn, cases[0])
    if type(which) is Literal and np.shape(which.val) == ():
        index = int(np.asarray(which.val))
        return _pass_through(eqn, cases[min(max(index, 0), len(cases) - 1)])
    return None


def simplify(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Apply the exact algebraic rewrites above in one forward sweep (chains such as
    neg(neg(neg(neg x))) collapse because producers are simplified before their users)."""
    jaxpr = closed.jaxpr
    subst: dict = {}
    producer: dict = {}
    eqns = []
    changed = False
    for eqn in jaxpr.eqns:
        eqn = substitute_eqn(eqn, subst)
        rule = simplify_rules.get(eqn.primitive)
        if rule is not None and len(eqn.outvars) == 1 and not is_effectful(eqn):
            result = rule(eqn, producer)
            if isinstance(result, JaxprEqn):
                eqn = result
                changed = True
            elif result is not None:
                subst[eqn.outvars[0]] = result
                changed = True
                continue
        eqns.append(eqn)
        for v in eqn.outvars:
            producer[v] = eqn
    if not changed and not subst:
        return closed
    outvars = [subst.get(v, v) for v in jaxpr.outvars]
    return rebuild(closed, eqns, outvars=outvars)

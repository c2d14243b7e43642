"""Products accumulated across a scan, computed after it as one product.

Reverse-mode differentiation of a scan (an RNN cell, say) gives a backward scan whose carries
include weight gradients accumulated step by step: `dW = dW + transpose(u_t ᵀ x_t)`, with u_t
computed from the other carries and x_t a row of the scan's xs. Each step then runs one small
product (32x256 by 32x256 for an RNN of batch 32 and width 256). This pass removes such an
accumulator from the loop: the body emits u_t as one more ys, and after the scan one product
contracts the stacked u and x over the steps as well (a 256x256x3200 product, split over
kiln's threads), added to the accumulator's initial value.

The rewrite applies to a carry whose body output is `add(c, v)` or `add_any(c, v)` (either
order), whose input c is read by nothing else, where v is `dot_general(p, x)` or
`dot_general(x, p)` without batch dimensions, possibly through one transpose, x is an xs row
read directly, and p does not depend on c. Only float dtypes (the sum is reassociated).
"""

from __future__ import annotations

from kiln.compiler.passes import rebuild
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
from kiln.primitives import elementwise as ew
from kiln.primitives.control_flow import scan_p
from kiln.primitives.linalg import dot_general_p
from kiln.primitives.shape import transpose_p

__all__ = ["hoist_scan_accumulators"]

_ADDS = (ew.add_p, ew.add_any_p)


def hoist_scan_accumulators(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Rewrite every scan of the top-level jaxpr whose accumulators qualify (see above)."""
    eqns, changed = [], False
    for eqn in closed.jaxpr.eqns:
        rewritten = _rewrite(eqn) if eqn.primitive is scan_p else None
        if rewritten is None:
            eqns.append(eqn)
        else:
            eqns.extend(rewritten)
            changed = True
    return rebuild(closed, eqns) if changed else closed


def _accumulator(body: Jaxpr, producers: dict, uses: dict, carry_in, carry_out, xs: set):
    """(p, x, dot eqn, transpose eqn or None, p is lhs) if carry `carry_in` -> `carry_out`
    accumulates a product of an xs row, else None."""
    if carry_in.aval.dtype.kind not in "fc" or uses.get(carry_in, 0) != 1:
        return None
    add = producers.get(carry_out)
    if add is None or add.primitive not in _ADDS:
        return None
    a, b = add.invars
    v = b if a is carry_in else a if b is carry_in else None
    if v is None or type(v) is Literal or uses.get(v, 0) != 1:
        return None
    transpose = None
    producer = producers.get(v)
    if producer is not None and producer.primitive is transpose_p:
        transpose, v = producer, producer.invars[0]
        if type(v) is Literal or uses.get(v, 0) != 1:
            return None
        producer = producers.get(v)
    if producer is None or producer.primitive is not dot_general_p:
        return None
    (_, _), (lb, rb) = producer.params["dimension_numbers"]
    if lb or rb or producer.params.get("preferred_element_type") not in (None, v.aval.dtype):
        return None
    lhs, rhs = producer.invars
    if type(lhs) is Literal or type(rhs) is Literal:
        return None
    if rhs in xs and lhs not in xs:
        p, x, p_is_lhs = lhs, rhs, True
    elif lhs in xs and rhs not in xs:
        p, x, p_is_lhs = rhs, lhs, False
    else:
        return None
    if _depends_on(p, carry_in, producers):
        return None
    return p, x, producer, transpose, p_is_lhs


def _depends_on(var, target, producers: dict) -> bool:
    stack, seen = [var], set()
    while stack:
        v = stack.pop()
        if v is target:
            return True
        if id(v) in seen:
            continue
        seen.add(id(v))
        eqn = producers.get(v)
        if eqn is not None:
            stack.extend(a for a in eqn.invars if type(a) is not Literal)
    return False


def _rewrite(eqn: JaxprEqn):
    params = eqn.params
    closed: ClosedJaxpr = params["jaxpr"]
    body = closed.jaxpr
    num_consts, num_carry = params["num_consts"], params["num_carry"]
    if params.get("length", 0) < 1:
        return None
    carry_ins = body.invars[num_consts : num_consts + num_carry]
    xs_ins = body.invars[num_consts + num_carry :]
    carry_outs = body.outvars[:num_carry]
    producers = {v: e for e in body.eqns for v in e.outvars}
    uses: dict = {}
    for e in body.eqns:
        for a in e.invars:
            if type(a) is not Literal:
                uses[a] = uses.get(a, 0) + 1
    for a in body.outvars:
        if type(a) is not Literal:
            uses[a] = uses.get(a, 0) + 1
    xs_set = set(xs_ins)
    found = {}
    for j, (cin, cout) in enumerate(zip(carry_ins, carry_outs)):
        if type(cout) is Literal or cout in carry_outs[:j]:
            continue
        hit = _accumulator(body, producers, uses, cin, cout, xs_set)
        if hit is not None:
            found[j] = hit
    if not found:
        return None
    # The new body: the accumulators' carries gone, each p once as an extra ys.
    dropped = {id(producers[carry_outs[j]]) for j in found}
    dropped |= {id(hit[2]) for hit in found.values()}
    dropped |= {id(hit[3]) for hit in found.values() if hit[3] is not None}
    extra_ys = list(dict.fromkeys(hit[0] for hit in found.values()))
    keep = [j for j in range(num_carry) if j not in found]
    new_body = Jaxpr(
        body.constvars,
        body.invars[:num_consts] + [carry_ins[j] for j in keep] + list(xs_ins),
        [carry_outs[j] for j in keep] + list(body.outvars[num_carry:]) + extra_ys,
        [e for e in body.eqns if id(e) not in dropped],
        body.effects,
    )
    consts = eqn.invars[:num_consts]
    inits = eqn.invars[num_consts : num_consts + num_carry]
    xs_outer = eqn.invars[num_consts + num_carry :]
    length = params["length"]
    stacked = {p: Var(p.aval.update(shape=(length,) + p.aval.shape)) for p in extra_ys}
    outs = eqn.outvars
    new_params = dict(params)
    new_params["jaxpr"] = ClosedJaxpr(new_body, closed.consts)
    new_params["num_carry"] = len(keep)
    linear = params.get("linear")
    if linear is not None:
        linear = tuple(linear)
        new_params["linear"] = (
            linear[:num_consts]
            + tuple(linear[num_consts + j] for j in keep)
            + linear[num_consts + num_carry :]
        )
    new_scan = eqn.replace(
        invars=list(consts) + [inits[j] for j in keep] + list(xs_outer),
        outvars=[outs[j] for j in keep] + list(outs[num_carry:]) + [stacked[p] for p in extra_ys],
        params=new_params,
    )
    result = [new_scan]
    for j, (p, x, dot, transpose, p_is_lhs) in found.items():
        (lc, rc), _ = dot.params["dimension_numbers"]
        x_outer = xs_outer[xs_ins.index(x)]
        lhs, rhs = (stacked[p], x_outer) if p_is_lhs else (x_outer, stacked[p])
        # Contract the step axis too: axis 0 of both stacked operands; the rest shift by one.
        numbers = (
            ((0,) + tuple(d + 1 for d in lc), (0,) + tuple(d + 1 for d in rc)),
            ((), ()),
        )
        product = Var(dot.outvars[0].aval)
        result.append(
            JaxprEqn(
                dot_general_p, [lhs, rhs], [product], {**dot.params, "dimension_numbers": numbers}
            )
        )
        total = product
        if transpose is not None:
            total = Var(transpose.outvars[0].aval)
            result.append(JaxprEqn(transpose_p, [product], [total], dict(transpose.params)))
        add = producers[carry_outs[j]]
        result.append(JaxprEqn(add.primitive, [inits[j], total], [outs[j]], dict(add.params)))
    return result

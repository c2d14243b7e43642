"""Row-invariant products out of scan bodies: an equation of a scan body that reads only the
loop's constants and its xs row, and that runs through a reference impl or as a BLAS call (a
dot_general, most often: `x_t @ U` in an RNN cell), is computed for every row at once before
the loop, as one batched product over all the rows, and the body reads its row of the result
as one more xs.

One large product instead of `length` small ones: BLAS runs it at full speed and kiln splits
it across its threads, where each small one ran on one thread. Equations that lower to native
kernels stay in the body, where they fuse with the rest and cost no extra memory traffic.
"""

from __future__ import annotations

from kiln.compiler import lower
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal

__all__ = ["hoist_row_invariants"]


def hoist_row_invariants(body: ClosedJaxpr, num_consts: int, num_carry: int, length: int):
    """(prologue, body') where prologue maps (consts, stacked xs) to the stacked values of the
    hoisted equations and body' reads their rows as extra trailing xs; None when nothing in
    the body is worth hoisting."""
    jaxpr = body.jaxpr
    if length < 2:
        return None
    carry = jaxpr.invars[num_consts : num_consts + num_carry]
    xs = jaxpr.invars[num_consts + num_carry :]
    varying = set(carry)
    per_row = set(xs)  # values that depend on the row but not on the carry
    heavy = []
    for eqn in jaxpr.eqns:
        atoms = [a for a in eqn.invars if type(a) is not Literal]
        if eqn.effects or any(a in varying for a in atoms):
            varying.update(eqn.outvars)
            continue
        if any(a in per_row for a in atoms):
            per_row.update(eqn.outvars)
            if eqn.primitive.multiple_results:
                continue
            if not lower.lowerable(eqn) or lower.is_kernel_call(eqn):
                heavy.append(eqn)
    if not heavy:
        return None
    hoisted = [eqn.outvars[0] for eqn in heavy]
    # The equations the hoisted values need (none of them reads the carry).
    needed, kept = set(hoisted), []
    for eqn in reversed(jaxpr.eqns):
        if any(v in needed for v in eqn.outvars):
            kept.append(eqn)
            needed.update(a for a in eqn.invars if type(a) is not Literal)
    kept.reverse()
    consts = jaxpr.invars[:num_consts]
    row_jaxpr = Jaxpr(jaxpr.constvars, list(consts) + list(xs), hoisted, kept)
    prologue = _batched(ClosedJaxpr(row_jaxpr, body.consts), num_consts, length)
    heavy_ids = {id(e) for e in heavy}
    new_body = Jaxpr(
        jaxpr.constvars,
        list(jaxpr.invars) + hoisted,
        jaxpr.outvars,
        [e for e in jaxpr.eqns if id(e) not in heavy_ids],
        jaxpr.effects,
    )
    return prologue, ClosedJaxpr(new_body, body.consts)


def _batched(row: ClosedJaxpr, num_consts: int, length: int) -> ClosedJaxpr:
    """The row function mapped over the leading axis of its xs (its consts unmapped)."""
    import kiln
    from kiln.core.interpreter import eval_jaxpr
    from kiln.transforms.staging import trace_to_jaxpr

    def one_row(*args):
        return eval_jaxpr(row.jaxpr, row.consts, *args)

    in_axes = (None,) * num_consts + (0,) * (len(row.jaxpr.invars) - num_consts)
    avals = [
        a if n < num_consts else a.update(shape=(length,) + a.shape)
        for n, a in enumerate(row.in_avals)
    ]

    def flat(*args):
        return list(kiln.vmap(one_row, in_axes=in_axes)(*args)), None

    closed, _ = trace_to_jaxpr(flat, avals)
    return closed

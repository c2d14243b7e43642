"""Forward-mode differentiation: the JVP trace.

A `JVPTracer` carries a primal value and its tangent. A tangent of None is a symbolic zero: no
work is spent on it until a rule needs it concretely. When a primitive is bound with at least
one tracer of this trace, the trace unpacks every operand into (primal, tangent) and runs the
primitive's jvp rule with the enclosing trace current, so the rule's own operations on primals
and tangents go to whatever transformation (or eager evaluation) encloses this one. Primal
values therefore stay concrete in eager mode, and Python control flow on them works.

Integer and boolean values have no tangent space: their tangents are always symbolic zeros
here, and float0 arrays at the API boundary.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kiln.core import rules
from kiln.core.ad_util import has_tangent_space
from kiln.core.avals import ShapedArray, get_aval
from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.trace import Trace, Tracer, current_trace, leaked_tracer_error, set_current_trace


class JVPTracer(Tracer):
    __slots__ = ("primal", "tangent")

    def __init__(self, trace: "JVPTrace", primal: Any, tangent: Any):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent

    @property
    def aval(self) -> ShapedArray:
        return get_aval(self.primal)

    def to_concrete_value(self):
        primal = self.primal
        if isinstance(primal, Tracer):
            return primal.to_concrete_value()
        return primal

    def _origin_msg(self) -> str:
        primal = self.primal
        return primal._origin_msg() if isinstance(primal, Tracer) else ""


class JVPTrace(Trace):
    """Propagates (primal, tangent) pairs through primitives by their jvp rules."""

    handles_call_primitives = True  # a jitted call stays one call (pjit's jvp rule)

    def __repr__(self) -> str:
        return f"JVPTrace(level={self.level})"

    def lift(self, x: Any) -> JVPTracer:
        return JVPTracer(self, x, None)

    def unpack(self, x: Any) -> tuple[Any, Any]:
        if isinstance(x, JVPTracer) and x._trace is self:
            return x.primal, x.tangent
        if isinstance(x, Tracer) and not x._trace.alive:
            raise leaked_tracer_error(x)
        return x, None

    def process_primitive(self, primitive, args, params):
        primals, tangents = [], []
        for a in args:
            p, t = self.unpack(a)
            primals.append(p)
            tangents.append(t)
        with set_current_trace(self.parent):
            if all(t is None for t in tangents):
                return primitive.bind(*primals, **params)
            rule = rules.jvp_rules.get(primitive)
            if rule is None:
                raise NotImplementedError(
                    f"Differentiation rule for '{primitive.name}' not implemented"
                )
            out, out_tangent = rule(primals, tangents, **params)
        if primitive.multiple_results:
            return [self._wrap(o, t) for o, t in zip(out, out_tangent)]
        return self._wrap(out, out_tangent)

    def _wrap(self, primal, tangent):
        if tangent is None or not has_tangent_space(get_aval(primal).dtype):
            return JVPTracer(self, primal, None)
        return JVPTracer(self, primal, tangent)


def jvp_flat(
    fun: Callable, primals: Sequence[Any], tangents: Sequence[Any | None]
) -> tuple[list, list]:
    """Run `fun(*primals) -> list` with the given tangents (None: zero); returns the output
    primals and tangents (None for a zero tangent)."""
    trace = JVPTrace(current_trace())
    try:
        tracers = [
            JVPTracer(trace, p, t if has_tangent_space(get_aval(p).dtype) else None)
            for p, t in zip(primals, tangents)
        ]
        with set_current_trace(trace):
            outs = fun(*tracers)
        out_primals, out_tangents = [], []
        for o in outs:
            p, t = trace.unpack(o)
            out_primals.append(p)
            out_tangents.append(t)
        return out_primals, out_tangents
    finally:
        trace.invalidate()


def jvp_jaxpr(
    closed: ClosedJaxpr, nonzeros: Sequence[bool], instantiate: bool | Sequence[bool]
) -> tuple[ClosedJaxpr, list[bool]]:
    """The jvp of a jaxpr as a jaxpr: inputs are the primals then the tangents of the inputs
    marked in `nonzeros`; outputs are the primal outputs then the tangents of the outputs that
    are not symbolic zeros (or all of those marked in `instantiate`). Returns the jaxpr and, per
    output, whether its tangent is an output."""
    from kiln.core.interpreter import eval_jaxpr
    from kiln.primitives.base import zeros_like
    from kiln.transforms.staging import trace_to_jaxpr

    n = len(closed.jaxpr.invars)
    in_avals = list(closed.jaxpr.in_avals)
    tangent_avals = [a for a, nz in zip(in_avals, nonzeros) if nz]
    n_out = len(closed.jaxpr.outvars)
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * n_out

    def fun(*args):
        primals, nz_tangents = list(args[:n]), iter(args[n:])
        tangents = [next(nz_tangents) if nz else None for nz in nonzeros]
        out_primals, out_tangents = jvp_flat(
            lambda *xs: eval_jaxpr(closed.jaxpr, closed.consts, *xs), primals, tangents
        )
        out_nonzeros = []
        kept = []
        for p, t, inst in zip(out_primals, out_tangents, instantiate):
            if t is None and inst and has_tangent_space(get_aval(p).dtype):
                t = zeros_like(p)
            out_nonzeros.append(t is not None)
            if t is not None:
                kept.append(t)
        return out_primals + kept, out_nonzeros

    jaxpr, out_nonzeros = trace_to_jaxpr(fun, in_avals + tangent_avals)
    return jaxpr, out_nonzeros

"""Partial evaluation: run what is known now, stage what is not.

A `PartialEvalTrace` is a staging trace whose own tracers are the *unknown* values. A primitive
bound on known values only (concrete arrays, or tracers of an enclosing transformation) is
passed straight to the enclosing trace, so it runs now; a primitive with an unknown operand is
recorded as an equation of the unknown jaxpr, and the known values it reads become that jaxpr's
residuals (its constvars). Primitives with sub-jaxprs (pjit, cond, scan, while, remat) register
a `partial_eval` rule that splits them into a known call and an unknown call.

Reverse mode is built on it: `linearize` runs the jvp of a function with known primals and
unknown tangents, so the primal computation happens (or is staged into the enclosing jit) while
the tangent computation is recorded as a linear jaxpr, which transpose.py then runs backwards.
`partial_eval_jaxpr` does the same to a jaxpr whose inputs are split into known and unknown.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kiln.core import rules
from kiln.core.ad_util import has_tangent_space
from kiln.core.avals import ShapedArray, get_aval
from kiln.core.interpreter import eval_jaxpr
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal
from kiln.core.jaxpr_dce import dce_jaxpr
from kiln.core.trace import Tracer, current_trace, set_current_trace
from kiln.transforms.staging import DynamicJaxprTrace, trace_to_jaxpr


class PartialEvalTrace(DynamicJaxprTrace):
    """Known values run in the enclosing trace; operations on unknown values are recorded."""

    def __repr__(self) -> str:
        return f"PartialEvalTrace(level={self.level})"

    def is_unknown(self, x: Any) -> bool:
        return isinstance(x, Tracer) and x._trace is self

    def process_primitive(self, primitive, args, params):
        if not any(isinstance(a, Tracer) and a._trace is self for a in args):
            with set_current_trace(self.parent):
                return primitive.bind(*args, **params)
        rule = rules.partial_eval_rules.get(primitive)
        if rule is not None:
            return rule(self, list(args), **params)
        return self.stage(primitive, args, params)

    def stage(self, primitive, args, params):
        """Record `primitive` as an equation of the unknown jaxpr (every output unknown)."""
        return DynamicJaxprTrace.process_primitive(self, primitive, args, params)

    def run_known(self, fn: Callable, *args, **kwargs):
        """Call `fn` with the enclosing trace current (for the known part of a split call)."""
        with set_current_trace(self.parent):
            return fn(*args, **kwargs)


# --- linearize ---------------------------------------------------------------------------------


class Linearized:
    """The linear map of a linearization: `jaxpr` takes the tangents of the inputs marked in
    `in_mask` and returns those of the outputs marked in `out_mask` (others are zero); its
    constvars are the residuals, whose values are `consts`."""

    __slots__ = ("jaxpr", "consts", "in_mask", "out_mask", "in_avals", "out_avals")

    def __init__(
        self,
        jaxpr: Jaxpr,
        consts: list,
        in_mask: list[bool],
        out_mask: list[bool],
        in_avals: list[ShapedArray],
        out_avals: list[ShapedArray],
    ):
        self.jaxpr, self.consts = jaxpr, consts
        self.in_mask, self.out_mask = in_mask, out_mask
        self.in_avals, self.out_avals = in_avals, out_avals

    def apply(self, tangents: Sequence[Any]) -> list:
        """Forward: the output tangents (None for zeros) given input tangents (None: zero)."""
        from kiln.primitives.base import zeros_like_aval

        args = [
            zeros_like_aval(a) if t is None else t
            for t, a, m in zip(tangents, self.in_avals, self.in_mask)
            if m
        ]
        outs = iter(eval_jaxpr(self.jaxpr, self.consts, *args))
        return [next(outs) if m else None for m in self.out_mask]

    def transpose(self, cotangents: Sequence[Any]) -> list:
        """Backward: the input cotangents (None for zeros) given output cotangents (None:
        zero)."""
        from kiln.core.ad_util import UndefinedPrimal
        from kiln.transforms.transpose import backward_pass

        cts = [c for c, m in zip(cotangents, self.out_mask) if m]
        undefined = [UndefinedPrimal(v.aval) for v in self.jaxpr.invars]
        cts_in = iter(backward_pass(self.jaxpr, self.consts, undefined, cts))
        return [next(cts_in) if m else None for m in self.in_mask]


def linearize_flat(fun: Callable, primals: Sequence[Any]) -> tuple[list, Linearized]:
    """Evaluate `fun(*primals) -> list` and linearize it at `primals`: returns the outputs and
    the linear map from input tangents to output tangents."""
    from kiln.transforms.jvp import jvp_flat

    trace = PartialEvalTrace(current_trace())
    try:
        in_avals = [get_aval(p) for p in primals]
        in_mask = [has_tangent_space(a.dtype) for a in in_avals]
        tangents = [trace.new_arg(a) if m else None for a, m in zip(in_avals, in_mask)]
        with set_current_trace(trace):
            out_primals, out_tangents = jvp_flat(fun, primals, tangents)
        for p in out_primals:
            if trace.is_unknown(p):
                raise AssertionError("linearize: a primal output depends on a tangent")
        out_mask = [t is not None for t in out_tangents]
        closed = trace.to_jaxpr([t for t in out_tangents if t is not None])
    finally:
        trace.invalidate()
    jaxpr, _ = dce_jaxpr(closed.jaxpr)
    out_avals = [get_aval(p) for p in out_primals]
    return out_primals, Linearized(
        jaxpr, list(closed.consts), in_mask, out_mask, in_avals, out_avals
    )


# --- partial evaluation of a jaxpr ---------------------------------------------------------------


def partial_eval_jaxpr(
    closed: ClosedJaxpr, in_unknowns: Sequence[bool], instantiate: bool | Sequence[bool] = False
) -> tuple[ClosedJaxpr, ClosedJaxpr, list[bool], int]:
    """Split `closed` by which inputs are unknown.

    Returns (known, unknown, out_unknowns, num_res): `known` takes the known inputs and returns
    the known outputs followed by `num_res` residuals; `unknown` takes the residuals followed by
    the unknown inputs and returns the unknown outputs. An output is unknown if it depends on an
    unknown input, or if `instantiate` says so."""
    in_avals = closed.jaxpr.in_avals
    n_out = len(closed.jaxpr.outvars)
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * n_out
    known_avals = [a for a, uk in zip(in_avals, in_unknowns) if not uk]
    unknown_avals = [a for a, uk in zip(in_avals, in_unknowns) if uk]
    box: dict = {}

    def known_fun(*known_args):
        trace = PartialEvalTrace(current_trace())
        try:
            unknown_args = iter([trace.new_arg(a) for a in unknown_avals])
            known_iter = iter(known_args)
            args = [next(unknown_args) if uk else next(known_iter) for uk in in_unknowns]
            with set_current_trace(trace):
                outs = eval_jaxpr(closed.jaxpr, closed.consts, *args)
            out_unknowns = [trace.is_unknown(o) or inst for o, inst in zip(outs, instantiate)]
            unknown_outs = [o for o, uk in zip(outs, out_unknowns) if uk]
            unknown_closed = trace.to_jaxpr(unknown_outs)
        finally:
            trace.invalidate()
        uj = unknown_closed.jaxpr
        residuals = list(unknown_closed.consts)
        unknown_jaxpr = Jaxpr([], uj.constvars + uj.invars, uj.outvars, uj.eqns, uj.effects)
        box["unknown"] = ClosedJaxpr(unknown_jaxpr, [])
        box["out_unknowns"] = out_unknowns
        box["num_res"] = len(residuals)
        known_outs = [o for o, uk in zip(outs, out_unknowns) if not uk]
        return known_outs + residuals, None

    known, _ = trace_to_jaxpr(known_fun, known_avals)
    return known, box["unknown"], box["out_unknowns"], box["num_res"]


def is_literal(atom) -> bool:
    return type(atom) is Literal

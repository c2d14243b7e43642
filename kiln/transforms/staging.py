"""Staging: tracing a Python function into a jaxpr (the DynamicJaxprTrace), and make_jaxpr.

Every primitive bound while the trace is current is recorded as an equation. Values that are
not this trace's tracers become constants: scalars inline as literals, arrays (and tracers of an
enclosing transformation) as constvars.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from kiln.core import rules
from kiln.core.array import Array
from kiln.core.avals import ShapedArray, get_aval
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal, Var
from kiln.core.trace import Trace, Tracer, leaked_tracer_error, set_current_trace


@dataclass
class DebugInfo:
    """Where a traced function came from, to make error messages name the user's code."""

    func_name: str
    source: str | None
    transform: str
    arg_names: list[str] = field(default_factory=list)

    @staticmethod
    def for_function(fun: Callable, transform: str, arg_names: Sequence[str]) -> "DebugInfo":
        return DebugInfo(function_name(fun), function_source(fun), transform, list(arg_names))


def function_name(fun: Callable) -> str:
    while hasattr(fun, "func") and not hasattr(fun, "__code__"):  # functools.partial
        fun = fun.func
    return getattr(fun, "__name__", type(fun).__name__)


def function_source(fun: Callable) -> str | None:
    while hasattr(fun, "func") and not hasattr(fun, "__code__"):
        fun = fun.func
    code = getattr(fun, "__code__", None)
    if code is None:
        return None
    return f"{code.co_filename}:{code.co_firstlineno}"


def flat_arg_names(fun: Callable, args: tuple, kwargs: dict, leaf_paths) -> list[str]:
    """Names of each flattened argument leaf, e.g. `x`, `params[0]['W']`."""
    try:
        sig = inspect.signature(fun)
        bound = sig.bind(*args, **kwargs)
        names = list(bound.arguments)
        positional = []
        for name in names:
            param = sig.parameters[name]
            if param.kind == param.VAR_POSITIONAL:
                positional.extend(f"{name}[{i}]" for i in range(len(bound.arguments[name])))
            elif param.kind != param.VAR_KEYWORD and name not in kwargs:
                positional.append(name)
    except (TypeError, ValueError):
        positional = [f"args[{i}]" for i in range(len(args))]
    out = []
    for path in leaf_paths:
        # path looks like "[0]['W']" over the (args, kwargs) tuple
        out.append(_rename_path(path, positional))
    return out


def _rename_path(path: str, positional: list[str]) -> str:
    if path.startswith("[0]["):
        rest = path[len("[0][") :]
        index, _, tail = rest.partition("]")
        if index.isdigit() and int(index) < len(positional):
            return positional[int(index)] + tail
    if path.startswith("[1]['"):
        rest = path[len("[1]['") :]
        name, _, tail = rest.partition("']")
        return name + tail
    return path


class JaxprTracer(Tracer):
    """A tracer of the staging trace: an abstract value plus the jaxpr atom it stands for."""

    __slots__ = ("_aval", "_atom")

    def __init__(self, trace: "DynamicJaxprTrace", aval: ShapedArray, atom):
        self._trace = trace
        self._aval = aval
        self._atom = atom

    @property
    def aval(self) -> ShapedArray:
        return self._aval

    def _origin_msg(self) -> str:
        return self._trace.origin_message(self)


class DynamicJaxprTrace(Trace):
    """Records primitives into a jaxpr instead of running them."""

    def __init__(self, parent: Trace | None, debug_info: DebugInfo | None = None):
        super().__init__(parent)
        self.debug_info = debug_info
        self.invars: list[Var] = []
        self.eqns: list[JaxprEqn] = []
        self.constvars: list[Var] = []
        self.consts: list[Any] = []
        self._const_tracers: dict[int, JaxprTracer] = {}
        self._producer: dict[int, JaxprEqn] = {}

    def __repr__(self) -> str:
        return f"DynamicJaxprTrace(level={self.level}/0)"

    def new_arg(self, aval: ShapedArray) -> JaxprTracer:
        var = Var(aval)
        self.invars.append(var)
        return JaxprTracer(self, aval, var)

    def to_tracer(self, x: Any) -> JaxprTracer:
        if isinstance(x, Tracer):
            if x._trace is self:
                return x
            if not x._trace.alive:
                raise leaked_tracer_error(x)
            return self._constvar(x, x.aval)
        aval = get_aval(x)
        if not aval.shape:
            value = x._value if hasattr(x, "_value") else np.asarray(x, dtype=aval.dtype)
            return JaxprTracer(self, aval, Literal(value, aval))
        return self._constvar(x, aval)

    def _constvar(self, value: Any, aval: ShapedArray) -> JaxprTracer:
        tracer = self._const_tracers.get(id(value))
        if tracer is None:
            if not isinstance(value, Tracer) and not hasattr(value, "_value"):
                value = Array(value)
            var = Var(aval)
            self.constvars.append(var)
            self.consts.append(value)  # keeps `value` alive, so its id stays unique
            tracer = self._const_tracers[id(value)] = JaxprTracer(self, aval, var)
        return tracer

    def process_primitive(self, primitive, args, params):
        tracers = [self.to_tracer(a) for a in args]
        in_avals = [t._aval for t in tracers]
        out = rules.abstract_eval_rules[primitive](*in_avals, **params)
        out_avals = out if primitive.multiple_results else [out]
        out_tracers = [JaxprTracer(self, aval, Var(aval)) for aval in out_avals]
        eqn = JaxprEqn(
            primitive, [t._atom for t in tracers], [t._atom for t in out_tracers], params
        )
        self.eqns.append(eqn)
        for t in out_tracers:
            self._producer[id(t._atom)] = eqn
        return out_tracers if primitive.multiple_results else out_tracers[0]

    def to_jaxpr(self, outs: Sequence[Any]) -> ClosedJaxpr:
        """Finish: the recorded jaxpr with outputs `outs`; unused equation outputs become `_`."""
        outvars = [self.to_tracer(o)._atom for o in outs]
        used = {id(v) for eqn in self.eqns for v in eqn.invars} | {id(v) for v in outvars}
        eqns = []
        for eqn in self.eqns:
            if all(id(v) in used for v in eqn.outvars):
                eqns.append(eqn)
            else:
                eqns.append(
                    eqn.replace(
                        outvars=[v if id(v) in used else DropVar(v.aval) for v in eqn.outvars]
                    )
                )
        effects = frozenset().union(*(e.effects for e in eqns)) if eqns else frozenset()
        jaxpr = Jaxpr(self.constvars, self.invars, outvars, eqns, effects)
        return ClosedJaxpr(jaxpr, self.consts)

    # --- error messages ---------------------------------------------------------------------
    def origin_message(self, tracer: JaxprTracer) -> str:
        info = self.debug_info
        if info is None:
            return ""
        where = f" at {info.source}" if info.source else ""
        msg = (
            f"The error occurred while tracing the function {info.func_name}{where} for "
            f"{info.transform}."
        )
        names = [
            info.arg_names[i] for i in self._input_dependencies(tracer) if i < len(info.arg_names)
        ]
        if len(names) == 1:
            msg += (
                " This concrete value was not available in Python because it depends on "
                f"the value of the argument {names[0]}."
            )
        elif names:
            msg += (
                " This concrete value was not available in Python because it depends on "
                f"the values of the arguments {', '.join(names[:-1])} and {names[-1]}."
            )
        return msg

    def _input_dependencies(self, tracer: JaxprTracer) -> list[int]:
        index_of = {id(v): i for i, v in enumerate(self.invars)}
        seen, stack, found = set(), [tracer._atom], set()
        while stack:
            atom = stack.pop()
            if isinstance(atom, Literal) or id(atom) in seen:
                continue
            seen.add(id(atom))
            if id(atom) in index_of:
                found.add(index_of[id(atom)])
            eqn = self._producer.get(id(atom))
            if eqn is not None:
                stack.extend(eqn.invars)
        return sorted(found)


def trace_to_jaxpr(
    fun: Callable, in_avals: Sequence[ShapedArray], debug_info: DebugInfo | None = None
) -> tuple[ClosedJaxpr, Any]:
    """Trace `fun(*flat_tracers) -> (flat_outs, aux)` into a ClosedJaxpr; returns (jaxpr, aux).

    `aux` is anything the caller wants back from inside the trace (e.g. the output pytree)."""
    from kiln.core.trace import current_trace

    trace = DynamicJaxprTrace(current_trace(), debug_info)
    try:
        args = [trace.new_arg(a) for a in in_avals]
        with set_current_trace(trace):
            flat_outs, aux = fun(*args)
        return trace.to_jaxpr(flat_outs), aux
    finally:
        trace.invalidate()

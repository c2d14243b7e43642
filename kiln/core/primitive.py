"""Primitive: a named operation with rules; `bind` sends it to the current trace."""
from __future__ import annotations

from kiln.core import rules
from kiln.core.trace import current_trace_state, eval_primitive


class Primitive:
    """An operation kiln knows how to evaluate, trace, differentiate, batch and lower."""

    multiple_results = False

    def __init__(self, name: str, multiple_results: bool = False):
        self.name = name
        self.multiple_results = multiple_results

    def bind(self, *args, **params):
        trace = current_trace_state.trace
        if trace is None:
            return eval_primitive(self, args, params)
        return trace.process_primitive(self, args, params)

    # Registration helpers, so a primitive's rules read as declarations.
    def def_impl(self, fn):
        rules.impl_rules[self] = fn
        return fn

    def def_abstract_eval(self, fn):
        rules.abstract_eval_rules[self] = fn
        return fn

    def params_for_printing(self, params: dict) -> dict:
        """The params as the jaxpr printer shows them (a primitive may hide or reformat some)."""
        return params

    def __repr__(self) -> str:
        return self.name

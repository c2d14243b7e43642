"""Primitive: a named operation with rules; `bind` sends it to the current trace."""

from __future__ import annotations

from typing import Callable

from kiln.core import rules
from kiln.core.trace import current_trace_state, eval_primitive


class Primitive:
    """An operation kiln knows how to evaluate, trace, differentiate, batch and lower."""

    multiple_results = False
    #: Why differentiating through this primitive is an error (None: it has a jvp rule).
    non_differentiable_reason: str | None = None

    def __init__(self, name: str, multiple_results: bool = False):
        self.name = name
        self.multiple_results = multiple_results

    def bind(self, *args, **params):
        trace = current_trace_state.trace
        if trace is None:
            return eval_primitive(self, args, params)
        return trace.process_primitive(self, args, params)

    # One method per rule kind, so a primitive's rules read as declarations. Each stores the
    # function and returns it: use it as a decorator or call it with a function.
    def def_impl(self, fn: Callable) -> Callable:
        """The NumPy reference: `fn(*numpy_values, **params) -> value | list`."""
        return rules.impl_rules.register(self)(fn)

    def def_abstract_eval(self, fn: Callable) -> Callable:
        """Shapes and dtypes: `fn(*avals, **params) -> aval | list[aval]`."""
        return rules.abstract_eval_rules.register(self)(fn)

    def def_jvp(self, fn: Callable) -> Callable:
        """Forward derivative: `fn(primals, tangents, **params) -> (out, out_tangent)`."""
        return rules.jvp_rules.register(self)(fn)

    def def_transpose(self, fn: Callable) -> Callable:
        """Transpose of a linear op: `fn(cotangent, *args, **params) -> list`."""
        return rules.transpose_rules.register(self)(fn)

    def def_batching(self, fn: Callable) -> Callable:
        """vmap: `fn(args, batch_dims, **params) -> (outs, out_dims)`."""
        return rules.batching_rules.register(self)(fn)

    def def_collective_batching(self, fn: Callable) -> Callable:
        """vmap of an op that names an axis:
        `fn(trace, args, batch_dims, **params) -> (outs, out_dims)`."""
        return rules.collective_batching_rules.register(self)(fn)

    def def_partial_eval(self, fn: Callable) -> Callable:
        """Splitting a call into known and unknown parts (primitives with sub-jaxprs):
        `fn(trace, args, **params) -> out | list` (see transforms/partial_eval.py)."""
        return rules.partial_eval_rules.register(self)(fn)

    def def_effects(self, fn: Callable) -> Callable:
        """Side effects: `fn(**params) -> frozenset` of effect names."""
        return rules.effects_rules.register(self)(fn)

    def def_dce(self, fn: Callable) -> Callable:
        """Dead code of a primitive with sub-jaxprs:
        `fn(used_outputs, eqn) -> (used_inputs, new_eqn | None)`."""
        return rules.dce_rules.register(self)(fn)

    def rule(self, kind: str) -> Callable | None:
        """This primitive's rule of `kind` ('impl', 'jvp', ...), or None when it has none."""
        return rules.PRIMITIVE_RULE_TABLES[kind].get(self)

    def params_for_printing(self, params: dict) -> dict:
        """The params as the jaxpr printer shows them (a primitive may hide or reformat some)."""
        return params

    def __repr__(self) -> str:
        return self.name

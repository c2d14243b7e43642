"""The rule registries, keyed by primitive. Primitives write their rules here; interpreters
(eager evaluation, tracing, jvp, transpose, batching, lowering) only read them."""
from __future__ import annotations

from typing import Callable

impl_rules: dict = {}            # prim -> f(*numpy_values, **params) -> value | list
abstract_eval_rules: dict = {}   # prim -> f(*avals, **params) -> aval | list[aval]
jvp_rules: dict = {}             # prim -> f(primals, tangents, **params) -> (outs, out_tangents)
transpose_rules: dict = {}       # prim -> f(cotangents, *args, **params) -> list
batching_rules: dict = {}        # prim -> f(args, batch_dims, **params) -> (outs, out_dims)
lowering_rules: dict = {}        # prim -> kernel-IR lowering (kiln.compiler.lower)
dce_rules: dict = {}             # prim -> custom dead-code rule for primitives with sub-jaxprs


def register(registry: dict, prim) -> Callable:
    """Decorator: `@register(jvp_rules, sin_p)` stores the function as sin_p's rule."""
    def decorate(fn):
        registry[prim] = fn
        return fn
    return decorate


# Appended by the jit work: which primitives have side effects (debug.print, io_callback).
effects_rules: dict = {}         # prim -> f(**params) -> frozenset of effect names; an equation
#                                  with effects is never removed, merged, folded or reordered

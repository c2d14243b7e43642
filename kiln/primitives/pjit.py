"""The `pjit` call primitive: one equation that calls a traced jaxpr.

A jitted function called under an outer trace is staged as a `pjit` equation (kiln.jit builds
it); this module holds the primitive and its rules. Eagerly the call compiles its jaxpr and
runs the executable; compiling belongs to the layers above, so kiln.transforms.jit installs the
function that does it with `set_executable_builder`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from kiln.core.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.interpreter import eval_jaxpr, jaxpr_effects
from kiln.core.jaxpr import ClosedJaxpr, JaxprEqn
from kiln.core.jaxpr_dce import dce_jaxpr
from kiln.core.primitive import Primitive
from kiln.core.trace import current_trace_state, eval_primitive
from kiln.transforms.staging import DynamicJaxprTrace

__all__ = ["PjitPrimitive", "pjit_p", "set_executable_builder"]

_trace_state = current_trace_state

# (jaxpr, name) -> a compiled executable of the jaxpr; installed by kiln.transforms.jit, since
# the compile cache and the backends sit above primitives/.
_executable_builder: Callable | None = None


def set_executable_builder(builder: Callable) -> None:
    """Install the function the eager impl of `pjit` compiles its jaxpr with: it takes
    `(jaxpr: ClosedJaxpr, name: str)` and returns an Executable."""
    global _executable_builder
    _executable_builder = builder


class PjitPrimitive(Primitive):
    """A call of a traced jaxpr (param `jaxpr`, a ClosedJaxpr; `name`, the function's name).

    Staging traces record it as one equation; other transformations that have not opted in
    (by setting `handles_call_primitives = True` on their Trace and registering a rule) see
    the callee's equations inlined; eagerly it compiles through the cache and runs."""

    call_jaxpr_param = "jaxpr"

    def bind(self, *args, **params):
        trace = _trace_state.trace
        if trace is None:
            return eval_primitive(self, args, params)
        if isinstance(trace, DynamicJaxprTrace) or getattr(trace, "handles_call_primitives", False):
            return trace.process_primitive(self, args, params)
        closed = params["jaxpr"]
        return eval_jaxpr(closed.jaxpr, closed.consts, *args)


pjit_p = PjitPrimitive("pjit", multiple_results=True)


@pjit_p.def_impl
def _pjit_impl(*args, jaxpr: ClosedJaxpr, name: str):
    if _executable_builder is None:
        raise RuntimeError(
            "pjit needs kiln.transforms.jit to be imported (it installs the "
            "compiler the eager call runs through)"
        )
    executable = _executable_builder(jaxpr, name)
    borrowed = [
        _borrow(np.asarray(a, dtype=aval.dtype)) for a, aval in zip(args, executable.in_avals)
    ]
    inputs = {id(a) for a in args}
    # An output may be an input buffer; copy it so the caller's wrapping never marks a
    # user's NumPy array read-only.
    return [
        o._value.copy() if id(o._value) in inputs else o._value
        for o in executable.execute(borrowed)
    ]


def _borrow(value: np.ndarray) -> Array:
    """A kiln Array over `value` for the length of one call (executables never write their
    inputs, and outputs that alias an input are copied by the caller)."""
    return Array._wrap(value)


@pjit_p.def_abstract_eval
def _pjit_abstract_eval(*in_avals: ShapedArray, jaxpr: ClosedJaxpr, name: str):
    expected = jaxpr.in_avals
    if len(in_avals) != len(expected) or any(
        a.shape != e.shape or a.dtype != e.dtype for a, e in zip(in_avals, expected)
    ):
        raise TypeError(
            f"pjit of {name}: called with arguments "
            f"({', '.join(a.str_short() for a in in_avals)}) but the jaxpr takes "
            f"({', '.join(e.str_short() for e in expected)})"
        )
    return [v.aval for v in jaxpr.jaxpr.outvars]


@pjit_p.def_effects
def _pjit_effects_rule(*, jaxpr, name):
    return jaxpr_effects(jaxpr)


@pjit_p.def_dce
def _pjit_dce_rule(used_outputs: list[bool], eqn: JaxprEqn):
    """Drop unused outputs and unread inputs of a call; drop the call if nothing is left."""
    closed = eqn.params["jaxpr"]
    effects = jaxpr_effects(closed)
    if not any(used_outputs) and not effects:
        return [False] * len(eqn.invars), None
    inner, used_inputs = dce_jaxpr(closed.jaxpr, used_outputs, prune_invars=True)
    new_eqn = eqn.replace(
        invars=[a for a, u in zip(eqn.invars, used_inputs) if u],
        outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
        params={**eqn.params, "jaxpr": ClosedJaxpr(inner, closed.consts)},
    )
    return used_inputs, new_eqn


# --- differentiation and batching: a call stays one call ------------------------------------


@pjit_p.def_jvp
def _pjit_jvp_rule(primals, tangents, *, jaxpr: ClosedJaxpr, name: str):
    from kiln.transforms.jvp import jvp_jaxpr

    nonzeros = [t is not None for t in tangents]
    jvp_closed, out_nonzeros = jvp_jaxpr(jaxpr, nonzeros, instantiate=False)
    outs = pjit_p.bind(
        *primals, *(t for t in tangents if t is not None), jaxpr=jvp_closed, name=name
    )
    n = len(jaxpr.jaxpr.outvars)
    out_tangents = iter(outs[n:])
    return outs[:n], [next(out_tangents) if nz else None for nz in out_nonzeros]


@pjit_p.def_partial_eval
def _pjit_partial_eval_rule(trace, args, *, jaxpr: ClosedJaxpr, name: str):
    """Run the known part of the callee now (one call) and stage the unknown part (another)."""
    from kiln.transforms.partial_eval import partial_eval_jaxpr

    unknowns = [trace.is_unknown(a) for a in args]
    known, unknown, out_unknowns, num_res = partial_eval_jaxpr(jaxpr, unknowns)
    known_args = [a for a, uk in zip(args, unknowns) if not uk]
    known_outs = trace.run_known(pjit_p.bind, *known_args, jaxpr=known, name=name)
    n_known = len(known_outs) - num_res
    residuals = list(known_outs[n_known:])
    unknown_args = [a for a, uk in zip(args, unknowns) if uk]
    unknown_outs = trace.stage(pjit_p, residuals + unknown_args, dict(jaxpr=unknown, name=name))
    known_iter, unknown_iter = iter(known_outs[:n_known]), iter(unknown_outs)
    return [next(unknown_iter) if uk else next(known_iter) for uk in out_unknowns]


@pjit_p.def_transpose
def _pjit_transpose_rule(cts, *args, jaxpr: ClosedJaxpr, name: str):
    from kiln.core.ad_util import is_undefined_primal
    from kiln.primitives.base import zeros_like_aval
    from kiln.transforms.transpose import transpose_jaxpr

    linear = [is_undefined_primal(a) for a in args]
    transposed = transpose_jaxpr(jaxpr, linear)
    cts = [zeros_like_aval(v.aval) if ct is None else ct for ct, v in zip(cts, jaxpr.jaxpr.outvars)]
    nonlinear = [a for a, lin in zip(args, linear) if not lin]
    outs = iter(pjit_p.bind(*nonlinear, *cts, jaxpr=transposed, name=name))
    return [next(outs) if lin else None for lin in linear]


@pjit_p.def_batching
def _pjit_batching_rule(args, dims, *, jaxpr: ClosedJaxpr, name: str):
    from kiln.primitives.base import batch_size
    from kiln.transforms.batching import batch_jaxpr

    batched, out_dims = batch_jaxpr(jaxpr, batch_size(args, dims), dims)
    return pjit_p.bind(*args, jaxpr=batched, name=name), out_dims

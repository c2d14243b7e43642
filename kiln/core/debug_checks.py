"""The debug_nans and debug_infs flags: find the operation that first produces a NaN (an
infinity) and raise FloatingPointError naming it.

Eagerly, every primitive's result is checked as it is computed (trace.py calls `check_eager`
while a flag is on, and nothing at all otherwise). A jitted call checks only its outputs, so
compiled code runs unchanged; when one holds a NaN, the call's jaxpr is evaluated again
equation by equation, without compilation, and the first equation whose result holds one
names the primitive. Control-flow bodies run eagerly under that evaluation, so a NaN produced
inside a cond, while or scan body names the primitive in the body, and a nested jitted call is
searched the same way. Only results are checked: an operation that passes a NaN input along
(x + 1 for a NaN x) raises too, as in JAX.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from kiln.config import config
from kiln.core import dtypes, trace
from kiln.core.array import Array
from kiln.core.interpreter import eval_jaxpr
from kiln.core.jaxpr import ClosedJaxpr

__all__ = [
    "check_eager",
    "check_jit_outputs",
    "execute_checked",
    "register_call_primitive",
    "special_value_kind",
]


class _State(threading.local):
    compiled_depth = 0  # > 0 while a jitted call's compiled code runs


_state = _State()

# Call primitives whose eager impl runs compiled code (pjit): a special value in their result
# is searched for in the jaxpr they call.
_call_primitives: set = set()


def register_call_primitive(primitive) -> None:
    """Mark `primitive` as one whose `jaxpr` parameter is evaluated on its operands, so that
    a NaN in its result is traced back to an equation of that jaxpr."""
    _call_primitives.add(primitive)


def special_value_kind(values: Sequence[Any]) -> str | None:
    """'nan' or 'inf' for the first of `values` holding a value a set flag looks for (NaNs
    under debug_nans, infinities under debug_infs), else None."""
    for value in values:
        array = value._value if hasattr(value, "_value") else np.asarray(value)
        if not dtypes.is_inexact(array.dtype):
            continue
        if config.debug_nans and np.isnan(array).any():
            return "nan"
        if config.debug_infs and np.isinf(array).any():
            return "inf"
    return None


_A = {"nan": "a", "inf": "an"}


def _invalid_value_error(kind: str, where: str) -> FloatingPointError:
    return FloatingPointError(f"invalid value ({kind}) encountered in {where}")


def check_eager(primitive, result, args, params) -> None:
    """Raise FloatingPointError if an eager primitive's result holds a special value; for a
    call primitive, name the equation inside the called jaxpr that produced it."""
    if _state.compiled_depth:
        return
    outs = result if primitive.multiple_results else (result,)
    kind = special_value_kind(outs)
    if kind is None:
        return
    jaxpr = params.get("jaxpr")
    if primitive in _call_primitives and isinstance(jaxpr, ClosedJaxpr):
        _run_op_by_op(jaxpr, args)
        raise _not_reproduced_error(kind, f"jit({params.get('name', primitive.name)})")
    raise _invalid_value_error(kind, primitive.name)


def execute_checked(name: str, entry, args: Sequence[Any]) -> list:
    """Run a jit cache entry's compiled code on `args` and check its outputs (see
    check_jit_outputs). Results inside the compiled call are not checked, even those of
    control-flow bodies that run through their impls, as compiled code is checked at its
    outputs only."""
    kept = list(args)
    for position in getattr(entry.executable, "donated", ()):
        # The call may hand this argument's buffer to an output: keep a copy for a re-run.
        value = args[position]
        copy = np.array(getattr(value, "_value", value))
        kept[position] = Array._wrap(copy, getattr(value, "weak_type", False))
    _state.compiled_depth += 1
    try:
        outs = entry.execute(args)
    finally:
        _state.compiled_depth -= 1
    check_jit_outputs(name, entry.traced.jaxpr, kept, outs)
    return outs


def check_jit_outputs(name: str, jaxpr: ClosedJaxpr, args: Sequence[Any], outs) -> None:
    """After a compiled call of jit(`name`): if an output holds a special value, evaluate
    `jaxpr` on `args` op by op and raise FloatingPointError naming the primitive that
    produced it."""
    kind = special_value_kind(outs)
    if kind is None:
        return
    try:
        _run_op_by_op(jaxpr, args)
    except FloatingPointError as err:
        raise FloatingPointError(
            f"{err}\n(the output of the compiled jit({name}) held {_A[kind]} {kind}; its jaxpr was "
            "evaluated again op by op, without compilation, to find the operation that "
            "produced it)"
        ) from None
    raise _not_reproduced_error(kind, f"jit({name})")


def _run_op_by_op(jaxpr: ClosedJaxpr, args: Sequence[Any]) -> None:
    """Evaluate `jaxpr` eagerly: each equation's result goes through check_eager."""
    with trace.set_current_trace(None):
        eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)


def _not_reproduced_error(kind: str, where: str) -> FloatingPointError:
    return FloatingPointError(
        f"invalid value ({kind}) encountered in the output of {where}. With debug_nans or "
        f"debug_infs set, the function was evaluated again op by op without compilation to "
        f"find the operation that produced it, but no operation produced {_A[kind]} {kind} "
        "there. "
        "Either the compiled code computed differently (fused or reordered arithmetic can "
        f"overflow where the op-by-op evaluation does not), or the {kind} is an input or a "
        "constant that the function returns as it is, as in jit(lambda x: x)(nan). Removing "
        "the jit decorator avoids the first case, at the cost of compilation."
    )


def _sync() -> None:
    trace.set_special_value_check(check_eager if config.check_special else None)


config.on_special_change(_sync)
_sync()

"""Batching: the vmap trace.

A `BatchTracer` is a value with one extra axis, its batch dimension (`bdim`, an int), standing
for a stack of per-example values. When a primitive is bound with at least one tracer of this
trace, the trace unpacks every operand into (value, bdim) — None for an operand that is the same
for every example — and runs the primitive's batching rule with the enclosing trace current.
Collective primitives (psum, axis_index, ...) name an axis; the trace whose `axis_name` matches
reduces over its batch dimension, the others pass them through.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Sequence

from kiln.core import rules
from kiln.core.avals import ShapedArray, get_aval
from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.trace import Trace, Tracer, current_trace, leaked_tracer_error, set_current_trace


class _RuleContext(threading.local):
    trace: "BatchTrace | None" = None


# The batch trace whose rule is running: `batch_jaxpr` (for sub-jaxprs of pjit and control
# flow) gives its own trace the same axis name, so collectives inside bodies find their axis.
_rule_context = _RuleContext()


@contextmanager
def _restore_rule_context(previous):
    try:
        yield
    finally:
        _rule_context.trace = previous


class _AxisEnv(threading.local):
    def __init__(self):
        self.frames: list = []


# The named axes bound by the vmaps being traced (outermost first), as (name, size) pairs.
_axis_env = _AxisEnv()


@contextmanager
def bind_axis(name, size: int):
    """Within the block, collectives may name `name` (an axis of `size` examples)."""
    if name is None:
        yield
        return
    _axis_env.frames.append((name, size))
    try:
        yield
    finally:
        _axis_env.frames.pop()


def bound_axis_names() -> set:
    return {name for name, _ in _axis_env.frames}


def bound_axis_size(name) -> int:
    for n, size in reversed(_axis_env.frames):
        if n == name:
            return size
    raise NameError(f"Found an unbound axis name: {name}.")


def current_axis_name():
    trace = _rule_context.trace
    return None if trace is None else trace.axis_name


class BatchTracer(Tracer):
    __slots__ = ("val", "bdim")

    def __init__(self, trace: "BatchTrace", val: Any, bdim: int | None):
        self._trace = trace
        self.val = val
        self.bdim = bdim

    @property
    def aval(self) -> ShapedArray:
        aval = get_aval(self.val)
        if self.bdim is None:
            return aval
        shape = tuple(aval.shape)
        return aval.update(shape=shape[: self.bdim] + shape[self.bdim + 1 :])

    def _origin_msg(self) -> str:
        val = self.val
        return val._origin_msg() if isinstance(val, Tracer) else ""


class BatchTrace(Trace):
    """Runs primitives on stacks of values by their batching rules."""

    handles_call_primitives = True  # a jitted call stays one call (pjit's batching rule)

    def __init__(
        self,
        parent: Trace | None,
        axis_size: int,
        axis_name: Any = None,
        spmd_axis_name: Any = None,
    ):
        super().__init__(parent)
        self.axis_size = axis_size
        self.axis_name = axis_name

    def __repr__(self) -> str:
        return f"BatchTrace(level={self.level}, axis_size={self.axis_size})"

    def unpack(self, x: Any) -> tuple[Any, int | None]:
        if isinstance(x, BatchTracer) and x._trace is self:
            return x.val, x.bdim
        if isinstance(x, Tracer) and not x._trace.alive:
            raise leaked_tracer_error(x)
        return x, None

    def process_primitive(self, primitive, args, params):
        vals, dims = [], []
        for a in args:
            v, d = self.unpack(a)
            vals.append(v)
            dims.append(d)
        collective = rules.collective_batching_rules.get(primitive)
        previous = _rule_context.trace
        _rule_context.trace = self
        with set_current_trace(self.parent), _restore_rule_context(previous):
            if collective is not None:
                out, out_dims = collective(self, vals, dims, **params)
            elif all(d is None for d in dims):
                return primitive.bind(*vals, **params)
            else:
                rule = rules.batching_rules.get(primitive)
                if rule is None:
                    raise NotImplementedError(
                        f"Batching rule for '{primitive.name}' not implemented"
                    )
                out, out_dims = rule(vals, dims, **params)
        if primitive.multiple_results:
            return [self._wrap(o, d) for o, d in zip(out, out_dims)]
        return self._wrap(out, out_dims)

    def _wrap(self, val, bdim):
        if bdim is not None and bdim < 0:
            bdim += len(get_aval(val).shape)
        return BatchTracer(self, val, bdim)


def move_to(x, src: int | None, dst: int | None, size: int):
    """x with its batch dimension moved from `src` to `dst`; an unbatched x (src None) is
    broadcast along a new axis `dst`. dst None requires src None."""
    from kiln.primitives.base import move_bdim
    from kiln.primitives.shape import broadcast_in_dim

    if dst is None:
        if src is not None:
            raise ValueError("move_to: cannot unbatch a batched value")
        return x
    if src is None:
        shape = list(get_aval(x).shape)
        out_shape = tuple(shape[:dst] + [size] + shape[dst:])
        dims = tuple(i if i < dst else i + 1 for i in range(len(shape)))
        return broadcast_in_dim(x, out_shape, dims)
    return move_bdim(x, src, dst)


def batch_flat(
    fun: Callable,
    args: Sequence[Any],
    in_dims: Sequence[int | None],
    axis_size: int,
    out_dims: Sequence[int | None] | Callable,
    axis_name: Any = None,
    spmd_axis_name: Any = None,
) -> list:
    """Run `fun(*per_example_args) -> list` on `args` batched along `in_dims` (None: not
    batched); returns the outputs with their batch dimension at `out_dims` (a list, or a
    function of the number of outputs giving one)."""
    trace = BatchTrace(current_trace(), axis_size, axis_name, spmd_axis_name)
    try:
        tracers = [BatchTracer(trace, a, d) if d is not None else a for a, d in zip(args, in_dims)]
        with set_current_trace(trace), bind_axis(axis_name, axis_size):
            outs = fun(*tracers)
        dims_out = out_dims(len(outs)) if callable(out_dims) else out_dims
        results = []
        for o, dst in zip(outs, dims_out):
            val, src = trace.unpack(o)
            if dst is not None and dst < 0:
                dst += len(get_aval(val).shape) + (src is None)
            with set_current_trace(trace.parent):
                results.append(move_to(val, src, dst, axis_size))
        return results
    finally:
        trace.invalidate()


def batch_jaxpr(
    closed: ClosedJaxpr,
    axis_size: int,
    in_dims: Sequence[int | None],
    out_dims: Sequence[int | None] | None = None,
    axis_name: Any = None,
) -> tuple[ClosedJaxpr, list[int | None]]:
    """The batched version of a jaxpr, as a jaxpr: inputs batched along `in_dims` (None: not
    batched; the jaxpr takes them as they are). With `out_dims` given, every output is moved
    (or broadcast) to it; otherwise each output keeps the dimension its rules gave it (at 0,
    or None for outputs that do not depend on the batch). Returns the jaxpr and the output
    batch dimensions."""
    from kiln.core.interpreter import eval_jaxpr
    from kiln.transforms.staging import trace_to_jaxpr

    in_avals = []
    for aval, d in zip(closed.jaxpr.in_avals, in_dims):
        if d is None:
            in_avals.append(aval)
        else:
            shape = list(aval.shape)
            shape.insert(d, axis_size)
            in_avals.append(aval.update(shape=tuple(shape)))
    box = {}
    if axis_name is None:
        axis_name = current_axis_name()

    def fun(*args):
        trace = BatchTrace(current_trace(), axis_size, axis_name)
        try:
            tracers = [
                BatchTracer(trace, a, d) if d is not None else a for a, d in zip(args, in_dims)
            ]
            with set_current_trace(trace), bind_axis(axis_name, axis_size):
                outs = eval_jaxpr(closed.jaxpr, closed.consts, *tracers)
            results, dims = [], []
            for i, o in enumerate(outs):
                val, src = trace.unpack(o)
                dst = (0 if src is not None else None) if out_dims is None else out_dims[i]
                with set_current_trace(trace.parent):
                    results.append(move_to(val, src, dst, axis_size))
                dims.append(dst)
            box["dims"] = dims
            return results, None
        finally:
            trace.invalidate()

    jaxpr, _ = trace_to_jaxpr(fun, in_avals)
    return jaxpr, box["dims"]

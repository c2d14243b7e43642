"""Control flow in the native backend: while, scan (fori_loop is one of them) and cond run
their bodies, conditions and branches as compiled programs of their own.

Each sub-jaxpr goes through the same pass pipeline and fusion as a top-level program and
becomes a raw NativeExecutable (kiln/runtime/native.py), built once with the program that
holds the loop. A runner here then drives the iteration: the carry alternates between two
preallocated buffer sets (the body reads one and stores into the other, so nothing is
copied), scan's xs are passed as views of their rows and its ys are stored in place into the
stacked outputs, and loop-invariant inputs are converted once per loop. Where a body and its
condition are each a single native segment, the whole loop runs in one native call instead
(kiln/runtime/native_loop_driver.py), and a small scan body is compiled together with its loop
as one kernel (kiln/runtime/native_loop_kernel.py).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import numpy as np

from kiln.compiler import kir, pipeline
from kiln.core.array import Array
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
from kiln.primitives.control_flow import CONTROL_FLOW_PRIMITIVES, scan_p, while_p
from kiln.primitives.shape import copy_p
from kiln.runtime import native_loop_hoist, native_segment
from kiln.runtime.native_call import host_buffer
from kiln.runtime.native_loop_driver import dense_operands

__all__ = ["is_control_flow", "build_runner"]

logger = logging.getLogger("kiln")


def is_control_flow(eqn) -> bool:
    """Whether the native backend runs eqn through compiled sub-programs (a loop or branch
    whose operands and results are all of dtypes native buffers hold)."""
    if eqn.primitive not in CONTROL_FLOW_PRIMITIVES or eqn.effects:
        return False
    return all(
        getattr(a.aval, "dtype", None) in kir.SUPPORTED_DTYPES
        for a in list(eqn.invars) + list(eqn.outvars)
    )


def build_runner(eqn, name: str) -> Callable:
    """A function of the equation's operands (NumPy values) returning its results as dense
    NumPy arrays."""
    params = eqn.params
    if eqn.primitive is while_p:
        return WhileRunner(params, name)
    if eqn.primitive is scan_p:
        return ScanRunner(params, name)
    return CondRunner(params, name)


# --- compiled sub-programs ---------------------------------------------------------------------


class SubProgram:
    """A sub-jaxpr compiled as a raw native executable: `execute(values, outs)`, values and
    results dense NumPy arrays, `outs` one buffer per output for native code to store into.
    A sub-jaxpr the native backend cannot build runs through the reference evaluator."""

    def __init__(
        self,
        closed: ClosedJaxpr,
        name: str,
        may_pass: Callable[[int, object, list], bool] | None = None,
    ):
        from kiln.runtime.native import NativeExecutable

        self.in_avals = list(closed.in_avals)
        self.out_avals = list(closed.out_avals)
        self.executable = None
        optimized = pipeline.optimize(closed, name)
        if may_pass is not None:
            optimized = _produce_outputs(optimized, may_pass)
        try:
            program, hidden = pipeline.split_hidden_consts(optimized)
            with native_segment.loop_body():
                self.executable = NativeExecutable(program, hidden, name, raw=True)
            self.execute = self.executable.execute
        except NotImplementedError as err:
            logger.debug("kiln: %s runs through the reference evaluator (%s)", name, err)
            self._closed = optimized
            self.execute = self._evaluate

    def _evaluate(self, values: Sequence[np.ndarray], outs) -> list[np.ndarray]:
        from kiln.primitives import control_flow_common as cf

        args = [Array._wrap(v, a.weak_type) for v, a in zip(values, self.in_avals)]
        return [
            host_buffer(o._value if type(o) is Array else o, a.dtype)
            for o, a in zip(cf.run_jaxpr(self._closed, args), self.out_avals)
        ]

    def describe(self) -> str:
        if self.executable is None:
            return "reference evaluator"
        segments = sum(1 for s in self.executable.segments if s is not None)
        return f"{segments} native segment{'s' * (segments != 1)}"

    def new_outputs(self) -> list[np.ndarray]:
        return [np.empty(a.shape, a.dtype) for a in self.out_avals]


def _produce_outputs(closed: ClosedJaxpr, may_pass) -> ClosedJaxpr:
    """The sub-jaxpr with a copy equation for each output that no equation of its own
    produces (an input, a constant, a literal, or a value returned twice), except where
    `may_pass(position, atom, invars)` allows it (a carry the loop passes through unchanged).
    Every other output is then a buffer the body's native code stores, which is what lets a
    loop keep its carry in two buffer sets and store its ys in place."""
    jaxpr = closed.jaxpr
    produced = {v for eqn in jaxpr.eqns for v in eqn.outvars}
    seen: set = set()
    eqns, outvars = list(jaxpr.eqns), []
    for position, atom in enumerate(jaxpr.outvars):
        if type(atom) is not Literal and atom in produced and atom not in seen:
            seen.add(atom)
            outvars.append(atom)
        elif type(atom) is not Literal and may_pass(position, atom, jaxpr.invars):
            outvars.append(atom)
        else:
            copied = Var(atom.aval)
            eqns.append(JaxprEqn(copy_p, [atom], [copied], {}))
            outvars.append(copied)
    if outvars == list(jaxpr.outvars):
        return closed
    return ClosedJaxpr(
        Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns, jaxpr.effects), closed.consts
    )


def _dense(values: Sequence, avals: Sequence) -> list[np.ndarray]:
    return [host_buffer(v, a.dtype) for v, a in zip(values, avals)]


# --- the runners -----------------------------------------------------------------------------


class WhileRunner:
    """while_p: the condition, then the body, until the condition is false."""

    def __init__(self, params: dict, name: str):
        self.cond_nconsts = params["cond_nconsts"]
        self.body_nconsts = params["body_nconsts"]
        carry_start = self.body_nconsts
        self.cond = SubProgram(
            params["cond_jaxpr"], f"{name}_cond", lambda position, atom, invars: False
        )
        self.body = SubProgram(
            params["body_jaxpr"],
            f"{name}_body",
            lambda position, atom, invars: atom is invars[carry_start + position],
        )
        self.in_avals = self.cond.in_avals[: self.cond_nconsts] + self.body.in_avals
        self.in_dtypes = [a.dtype for a in self.in_avals]
        from kiln.runtime import native_loop_driver

        self.native = native_loop_driver.native_while(self)

    def describe(self) -> str:
        how = "one native call" if self.native is not None else "compiled body"
        return f"{how}; cond: {self.cond.describe()}, body: {self.body.describe()}"

    def __call__(self, *args) -> list[np.ndarray]:
        if self.native is not None:
            return self.native.run(*args)
        args = dense_operands(args, self.in_dtypes)
        cond_consts = args[: self.cond_nconsts]
        body_consts = args[self.cond_nconsts : self.cond_nconsts + self.body_nconsts]
        carry = args[self.cond_nconsts + self.body_nconsts :]
        cond, body = self.cond.execute, self.body.execute
        predicate = self.cond.new_outputs()
        sets = (self.body.new_outputs(), self.body.new_outputs())
        which = 0
        while cond(cond_consts + carry, predicate)[0]:
            carry = body(body_consts + carry, sets[which])
            which ^= 1
        return list(carry)


class ScanRunner:
    """scan_p: the body once per row of xs (last row first when reversed), storing each row
    of ys in place."""

    def __init__(self, params: dict, name: str):
        self.length = params["length"]
        self.reverse = params["reverse"]
        self.num_consts = params["num_consts"]
        self.num_carry = params["num_carry"]
        num_consts, num_carry = self.num_consts, self.num_carry
        jaxpr = params["jaxpr"]
        split = num_consts + num_carry
        self.operand_avals = list(jaxpr.in_avals[:split]) + [
            a.update(shape=(self.length,) + a.shape) for a in jaxpr.in_avals[split:]
        ]
        self.prologue = None
        hoisted = native_loop_hoist.hoist_row_invariants(
            pipeline.optimize(jaxpr, f"{name}_body"), num_consts, num_carry, self.length
        )
        if hoisted is not None:
            self.prologue = SubProgram(hoisted[0], f"{name}_prologue")
            jaxpr = hoisted[1]
        self.body = SubProgram(
            jaxpr,
            f"{name}_body",
            lambda position, atom, invars: (
                position < num_carry and atom is invars[num_consts + position]
            ),
        )
        avals = self.body.in_avals
        self.x_avals = avals[self.num_consts + self.num_carry :]
        self.in_avals = avals[: self.num_consts + self.num_carry] + [
            a.update(shape=(self.length,) + a.shape) for a in self.x_avals
        ]
        self.y_avals = self.body.out_avals[self.num_carry :]
        self.operand_dtypes = [a.dtype for a in self.operand_avals]
        from kiln.runtime import native_loop_driver

        self.native = native_loop_driver.native_scan(self)

    def describe(self) -> str:
        how = "one native call" if self.native is not None else "compiled body"
        if self.native is not None and self.native.kernel is not None:
            how += " (the loop and its body in one kernel)"
        if self.prologue is not None:
            how += f", row-invariant products hoisted ({self.prologue.describe()})"
        return f"{how}; body: {self.body.describe()}"

    def __call__(self, *args) -> list[np.ndarray]:
        if self.native is not None and self.prologue is None:
            return self.native.run(*args)
        args = dense_operands(args, self.operand_dtypes)
        split = self.num_consts + self.num_carry
        if self.prologue is not None:
            consts, xs = args[: self.num_consts], args[split:]
            args = args + self.prologue.execute(consts + xs, self.prologue.new_outputs())
        if self.native is not None:
            return self.native.run(*args)
        consts, carry, xs = args[: self.num_consts], args[self.num_consts : split], args[split:]
        ys = [np.empty((self.length,) + a.shape, a.dtype) for a in self.y_avals]
        body = self.body.execute
        num_carry = self.num_carry
        sets = (self.body.new_outputs()[:num_carry], self.body.new_outputs()[:num_carry])
        which = 0
        rows = range(self.length - 1, -1, -1) if self.reverse else range(self.length)
        for i in rows:
            y_rows = [y[i, ...] for y in ys]
            results = body(consts + carry + [x[i, ...] for x in xs], sets[which] + y_rows)
            carry = results[:num_carry]
            which ^= 1
            for y_row, result in zip(y_rows, results[num_carry:]):
                if result is not y_row:
                    y_row[...] = result
        return list(carry) + ys


class CondRunner:
    """cond_p: the branch the (clamped) index names."""

    def __init__(self, params: dict, name: str):
        self.branches = [
            SubProgram(branch, f"{name}_branch{n}") for n, branch in enumerate(params["branches"])
        ]
        self.in_avals = self.branches[0].in_avals

    def describe(self) -> str:
        return "branches: " + ", ".join(b.describe() for b in self.branches)

    def __call__(self, index, *operands) -> list[np.ndarray]:
        which = min(max(int(index), 0), len(self.branches) - 1)
        branch = self.branches[which]
        return list(branch.execute(_dense(operands, self.in_avals), branch.new_outputs()))

"""Transposition: running a linear jaxpr backwards.

`backward_pass` takes a jaxpr, the values of its non-linear inputs and an `UndefinedPrimal` for
each linear one, and the cotangents of its outputs; it returns the cotangents of the linear
inputs. Equations that read no linear value are evaluated forwards first (they compute
constants of the linear map); the linear ones are visited in reverse order and each
primitive's transpose rule turns the cotangents of its outputs into cotangents of its linear
operands, which accumulate with `add_any`. A cotangent of None is a symbolic zero: equations
whose outputs all have zero cotangents are skipped.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kiln.core import rules
from kiln.core.ad_util import UndefinedPrimal, is_undefined_primal
from kiln.core.avals import get_aval
from kiln.core.interpreter import _literal_value
from kiln.core.jaxpr import ClosedJaxpr, DropVar, Jaxpr, Literal


def backward_pass(
    jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[Any], cotangents: Sequence[Any]
) -> list:
    """Cotangents of `jaxpr`'s inputs (None for zeros and for non-linear inputs).

    `args` has one entry per invar: an `UndefinedPrimal` for a linear input, else its value.
    `cotangents` has one entry per outvar (None: zero)."""
    from kiln.primitives.elementwise import add_any

    primal_env: dict = {}
    linear: set = set()

    def read_primal(atom):
        if type(atom) is Literal:
            return _literal_value(atom)
        return primal_env[atom]

    primal_env.update(zip(jaxpr.constvars, consts))
    for var, arg in zip(jaxpr.invars, args):
        if is_undefined_primal(arg):
            linear.add(var)
        else:
            primal_env[var] = arg

    # Forward: the non-linear equations (constants of the linear map).
    linear_eqns = []
    for eqn in jaxpr.eqns:
        if any(type(v) is not Literal and v in linear for v in eqn.invars):
            linear_eqns.append(eqn)
            linear.update(v for v in eqn.outvars if not isinstance(v, DropVar))
            continue
        out = eqn.primitive.bind(*(read_primal(v) for v in eqn.invars), **eqn.params)
        outs = out if eqn.primitive.multiple_results else (out,)
        for var, value in zip(eqn.outvars, outs):
            if not isinstance(var, DropVar):
                primal_env[var] = value

    ct_env: dict = {}

    def write_ct(var, ct):
        if ct is None or type(var) is Literal or var not in linear:
            return
        previous = ct_env.get(var)
        ct_env[var] = ct if previous is None else add_any(previous, ct)

    for var, ct in zip(jaxpr.outvars, cotangents):
        write_ct(var, ct)

    for eqn in reversed(linear_eqns):
        cts_out = [None if isinstance(v, DropVar) else ct_env.pop(v, None) for v in eqn.outvars]
        if all(ct is None for ct in cts_out):
            continue
        invals = [
            UndefinedPrimal(v.aval) if type(v) is not Literal and v in linear else read_primal(v)
            for v in eqn.invars
        ]
        rule = rules.transpose_rules.get(eqn.primitive)
        if rule is None:
            raise NotImplementedError(
                f"Transpose rule (for reverse-mode differentiation) for '{eqn.primitive.name}' "
                "not implemented"
            )
        if eqn.primitive.multiple_results:
            cts_in = rule(cts_out, *invals, **eqn.params)
        else:
            cts_in = rule(cts_out[0], *invals, **eqn.params)
        for var, val, ct in zip(eqn.invars, invals, cts_in):
            if is_undefined_primal(val):
                write_ct(var, _check_cotangent(eqn, val, ct))

    return [ct_env.get(v) if v in linear else None for v in jaxpr.invars]


def _check_cotangent(eqn, undefined: UndefinedPrimal, ct):
    """A rule's cotangent must have its operand's shape (and, converted if need be, dtype)."""
    if ct is None:
        return None
    aval = get_aval(ct)
    if tuple(aval.shape) != tuple(undefined.aval.shape):
        raise ValueError(
            f"transpose rule of '{eqn.primitive.name}' returned a cotangent of "
            f"shape {aval.shape} for an operand of shape {undefined.aval.shape}"
        )
    if aval.dtype != undefined.aval.dtype:
        from kiln.primitives.elementwise import convert_element_type

        ct = convert_element_type(ct, undefined.aval.dtype)
    return ct


def transpose_jaxpr(closed: ClosedJaxpr, linear: Sequence[bool]) -> ClosedJaxpr:
    """The transpose of `closed` with respect to the inputs marked in `linear`, as a jaxpr.

    It takes the non-linear inputs followed by one cotangent per output and returns one
    cotangent per linear input (zeros where the cotangent is a symbolic zero)."""
    from kiln.primitives.base import zeros_like_aval
    from kiln.transforms.staging import trace_to_jaxpr

    in_avals = closed.jaxpr.in_avals
    nonlin_avals = [a for a, lin in zip(in_avals, linear) if not lin]
    out_avals = closed.jaxpr.out_avals

    def fun(*args):
        nonlin = iter(args[: len(nonlin_avals)])
        cts = list(args[len(nonlin_avals) :])
        invals = [UndefinedPrimal(a) if lin else next(nonlin) for a, lin in zip(in_avals, linear)]
        cts_in = backward_pass(closed.jaxpr, closed.consts, invals, cts)
        return [
            zeros_like_aval(a) if ct is None else ct
            for a, ct, lin in zip(in_avals, cts_in, linear)
            if lin
        ], None

    jaxpr, _ = trace_to_jaxpr(fun, nonlin_avals + list(out_avals))
    return jaxpr


def linear_transpose_flat(fun: Callable, in_avals, cotangents: Sequence[Any]) -> list:
    """Transpose the linear function `fun(*flat) -> list` (traced at `in_avals`)."""
    from kiln.transforms.staging import trace_to_jaxpr

    closed, _ = trace_to_jaxpr(lambda *xs: (list(fun(*xs)), None), in_avals)
    undefined = [UndefinedPrimal(a) for a in in_avals]
    return backward_pass(closed.jaxpr, closed.consts, undefined, cotangents)

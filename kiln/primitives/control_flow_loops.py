"""Loops: the `while` and `scan` primitives and `lax.while_loop`, `lax.fori_loop`, `lax.scan`,
`lax.map`.

`while` repeats `body_jaxpr` on its carries while `cond_jaxpr` says so. `scan` runs `jaxpr` a
static `length` times over a carry and the leading axis of its `xs`, stacking the per-step
outputs `ys`. `fori_loop` becomes a scan when its trip count is known while tracing (concrete
bounds) and a while loop otherwise; `map` is a scan without a carry.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from kiln.config import config
from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives import control_flow_common as cf
from kiln.primitives.elementwise import add, convert_element_type, lt
from kiln.primitives.shape import expand_dims, operand_shape
from kiln.primitives.shape_slice import concatenate

__all__ = ["while_loop", "fori_loop", "scan", "map", "while_p", "scan_p"]

class _Required:
    """The default of fori_loop's bound arguments, which may come by their other names."""

    def __repr__(self) -> str:
        return "<required>"


_MISSING = _Required()


class _ScanPrimitive(Primitive):
    """scan prints its params as JAX does: `_split_transpose` stays hidden."""

    def params_for_printing(self, params: dict) -> dict:
        return {k: v for k, v in params.items() if k != "_split_transpose"}


while_p = Primitive("while", multiple_results=True)
scan_p = _ScanPrimitive("scan", multiple_results=True)


# --- while_loop ------------------------------------------------------------------------------

def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """Repeat `val = body_fun(val)` while `cond_fun(val)` is true, starting from `init_val`.

    `cond_fun` must return a boolean scalar; `body_fun` must return a value of the carry's
    pytree structure, shapes and dtypes (a Python scalar in `init_val` adopts the dtype the
    body gives it).

    Returns:
      The final carry.
    """
    return _while_loop(cond_fun, body_fun, init_val,
                       cf.first_param_name(body_fun) if callable(body_fun) else None)


def _while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any, carry_name: str | None,
                carry_offset: int | None = None) -> Any:
    """while_loop, naming the carry `carry_name` in errors (see `_scan` for `carry_offset`)."""
    if not callable(cond_fun) or not callable(body_fun):
        raise TypeError("lax.while_loop: cond_fun and body_fun arguments should be callable.")
    leaves, in_tree = cf.flatten(init_val)
    paths = cf.leaf_paths(init_val)
    avals = cf.abstractify(leaves, paths, "the initial carry of while_loop")
    if config.disable_jit and all(cf.is_concrete(x) for x in leaves):
        val = init_val
        while cond_fun(val):
            val = body_fun(val)
        return val

    if carry_offset is not None:
        paths = [_drop_prefix(p, carry_offset) for p in paths]
    args_tree = cf.flatten((init_val,))[1]  # the functions take the carry as one argument
    cond_traced, body_traced = _trace_while(cond_fun, body_fun, args_tree, avals)
    cf.check_carry_structure("while_loop body", carry_name, in_tree, body_traced.out_tree)
    leaves, changed = cf.promote_weak_carries(leaves, avals, body_traced.out_avals)
    if changed:
        avals = [cf.aval_of(x) for x in leaves]
        cond_traced, body_traced = _trace_while(cond_fun, body_fun, args_tree, avals)
    cf.check_carry_types("while_loop body", carry_name, paths, avals, body_traced.out_avals)

    outs = while_p.bind(*cond_traced.consts, *body_traced.consts, *leaves,
                        cond_jaxpr=cond_traced.jaxpr, body_jaxpr=body_traced.jaxpr,
                        cond_nconsts=len(cond_traced.consts),
                        body_nconsts=len(body_traced.consts))
    return cf.unflatten(in_tree, outs)


def _trace_while(cond_fun, body_fun, in_tree, avals):
    cond_traced = cf.trace_function(cond_fun, in_tree, avals, "while_loop")
    out = cond_traced.out_avals
    if not cond_traced.out_tree.num_leaves == 1 or cond_traced.out_tree.num_nodes != 1:
        raise TypeError("cond_fun must return a boolean scalar, but got pytree "
                        f"{cf.tree_text(cond_traced.out_tree)}.")
    if out[0].shape != () or out[0].dtype != dtypes.bool_:
        raise TypeError("cond_fun must return a boolean scalar, but got output type(s) "
                        f"[{out[0]!r}].")
    body_traced = cf.trace_function(body_fun, in_tree, avals, "while_loop")
    return cond_traced, body_traced


def fori_loop(lower=_MISSING, upper=_MISSING, body_fun=_MISSING, init_val=_MISSING, *,
              unroll: int | bool | None = None, start=_MISSING, stop=_MISSING) -> Any:
    """Loop `val = body_fun(i, val)` for `i` in `range(lower, upper)`; returns the final val.

    With concrete bounds (Python ints, NumPy or kiln values outside a trace) the trip count
    is static and the loop is a `scan`; with traced bounds it is a `while` loop. `start` and
    `stop` are accepted as other names for `lower` and `upper`.
    """
    lower = _alias("lower", lower, "start", start)
    upper = _alias("upper", upper, "stop", stop)
    if body_fun is _MISSING or init_val is _MISSING:
        raise TypeError("fori_loop() missing required arguments: body_fun and init_val")
    if not callable(body_fun):
        raise TypeError("lax.fori_loop: body_fun argument should be callable.")
    lower_dtype, lower_weak = dtypes.dtype_and_weak_of(lower)
    upper_dtype, upper_weak = dtypes.dtype_and_weak_of(upper)
    dtype = lower_dtype if lower_dtype == upper_dtype else None
    if dtype is None and lower_dtype.kind == "i" and upper_dtype.kind == "i":
        # A Python int bound adopts the other bound's integer type.
        if lower_weak and not upper_weak:
            dtype = upper_dtype
        elif upper_weak and not lower_weak:
            dtype = lower_dtype
    if dtype is None:
        raise TypeError("lower and upper arguments to fori_loop must have equal types, got "
                        f"{lower_dtype.name} and {upper_dtype.name}")

    val_tree = cf.flatten(init_val)[1]
    val_name = cf.first_param_name(body_fun, 1)

    def step(i, x):
        out = body_fun(i, x)
        cf.check_carry_structure("fori_loop body", val_name, val_tree, cf.flatten(out)[1])
        return out

    if cf.is_concrete(lower) and cf.is_concrete(upper):
        lower_, upper_ = int(lower), int(upper)
        length = max(upper_ - lower_, 0)
        if config.disable_jit:
            val = init_val
            for i in range(lower_, upper_):
                val = body_fun(i, val)
            return val

        def scan_body(carry, _):
            i, x = carry
            return (i + 1, step(i, x)), None

        # The index starts as the Python int, so it is weakly typed as in JAX.
        (_, result), _ = _scan(scan_body, (lower_, init_val), None, length, False,
                               1 if unroll is None else unroll, False,
                               carry_name=val_name, carry_offset=1)
        return result
    if unroll is not None and unroll is not False and unroll != 1:
        raise ValueError("Can only use `unroll` in `fori_loop` if the loop bounds are "
                         "statically known.")
    if lower_dtype != dtype:
        lower = convert_element_type(lower, dtype)
    if upper_dtype != dtype:
        upper = convert_element_type(upper, dtype)

    def while_cond(carry):
        i, stop_, _ = carry
        return lt(i, stop_)

    def while_body(carry):
        i, stop_, x = carry
        return add(i, 1), stop_, step(i, x)

    _, _, result = _while_loop(while_cond, while_body, (lower, upper, init_val), val_name,
                               carry_offset=2)
    return result


def _alias(name: str, value, alias: str, alias_value):
    if alias_value is _MISSING:
        if value is _MISSING:
            raise TypeError(f"fori_loop() missing required argument: '{name}'")
        return value
    if value is not _MISSING:
        raise TypeError(f"fori_loop() got both '{name}' and its alias '{alias}'")
    return alias_value


@while_p.def_impl
def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts: int, body_nconsts: int):
    cond_consts = cf.wrap_inputs(args[:cond_nconsts], cond_jaxpr.in_avals)
    body_consts = cf.wrap_inputs(args[cond_nconsts:cond_nconsts + body_nconsts],
                                 body_jaxpr.in_avals)
    init = args[cond_nconsts + body_nconsts:]
    cond_avals = cond_jaxpr.in_avals[cond_nconsts:]
    body_avals = body_jaxpr.in_avals[body_nconsts:]
    carry = cf.wrap_inputs(init, body_avals)
    while True:
        (keep_going,) = cf.run_jaxpr(cond_jaxpr, cond_consts + cf.wrap_inputs(carry, cond_avals))
        if not bool(keep_going._value):
            break
        carry = cf.wrap_inputs(cf.run_jaxpr(body_jaxpr, body_consts + carry), body_avals)
    return cf.unwrap_outputs(carry, args)


@while_p.def_abstract_eval
def _while_abstract_eval(*avals: ShapedArray, cond_jaxpr, body_jaxpr, cond_nconsts: int,
                         body_nconsts: int):
    cf.typecheck_sub_jaxpr("while", "cond_jaxpr", cond_jaxpr)
    cf.typecheck_sub_jaxpr("while", "body_jaxpr", body_jaxpr)
    carry = avals[cond_nconsts + body_nconsts:]
    cf.check_operands("while", "cond_jaxpr", avals[:cond_nconsts] + carry, cond_jaxpr.in_avals)
    cf.check_operands("while", "body_jaxpr", avals[cond_nconsts:], body_jaxpr.in_avals)
    (pred, *rest) = cond_jaxpr.out_avals or [None]
    if pred is None or rest or pred.shape != () or pred.dtype != dtypes.bool_:
        raise TypeError("while: cond_jaxpr must return one boolean scalar, got "
                        f"({', '.join(a.str_short() for a in cond_jaxpr.out_avals)})")
    body_out = body_jaxpr.out_avals
    if len(body_out) != len(carry) or not all(
            cf.same_type(a, b) for a, b in zip(carry, body_out)):
        raise TypeError("while: body_jaxpr must return the carry types "
                        f"({', '.join(a.str_short() for a in carry)}), got "
                        f"({', '.join(a.str_short() for a in body_out)})")
    return cf.carry_out_avals(body_jaxpr.in_avals[body_nconsts:], body_out)


@while_p.def_effects
def _while_effects_rule(*, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    return cf.effects_of(cond_jaxpr, body_jaxpr)


@while_p.def_dce
def _while_dce_rule(used_outputs: list[bool], eqn):
    """Keep the carries that a used output, the condition, an effect or a kept carry's update
    depends on; drop the loop when no output is used and neither jaxpr has effects."""
    p = eqn.params
    cond_jaxpr, body_jaxpr = p["cond_jaxpr"], p["body_jaxpr"]
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    effects = cf.effects_of(cond_jaxpr, body_jaxpr)
    if not any(used_outputs) and not effects:
        return [False] * len(eqn.invars), None
    _, cond_reads = cf.dce_sub_jaxpr(cond_jaxpr, [True])
    used_carry = [u or r for u, r in zip(used_outputs, cond_reads[nc:])]
    while True:
        new_body, body_reads = cf.dce_sub_jaxpr(body_jaxpr, used_carry)
        grown = [u or r for u, r in zip(used_carry, body_reads[nb:])]
        if grown == used_carry:
            break
        used_carry = grown
    keep_cond = cond_reads[:nc] + used_carry
    keep_body = body_reads[:nb] + used_carry
    new_cond = cf.prune_inputs(cond_jaxpr, keep_cond)
    new_body = cf.prune_inputs(new_body, keep_body)
    cond_consts = [a for a, k in zip(eqn.invars[:nc], cond_reads[:nc]) if k]
    body_consts = [a for a, k in zip(eqn.invars[nc:nc + nb], body_reads[:nb]) if k]
    init = [a for a, k in zip(eqn.invars[nc + nb:], used_carry) if k]
    new_eqn = eqn.replace(
        invars=cond_consts + body_consts + init,
        outvars=[v for v, k in zip(eqn.outvars, used_carry) if k],
        params={**p, "cond_jaxpr": new_cond, "body_jaxpr": new_body,
                "cond_nconsts": len(cond_consts), "body_nconsts": len(body_consts)})
    return keep_cond[:nc] + body_reads[:nb] + used_carry, new_eqn



# --- scan ------------------------------------------------------------------------------------

def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int | bool = 1,
         _split_transpose: bool = False) -> tuple[Any, Any]:
    """Loop `carry, y = f(carry, x)` over the leading axis of `xs`, stacking the `y`s.

    Args:
      f: the body, `(carry, x) -> (carry, y)`; the carry keeps its structure and types.
      init: the initial carry (a pytree).
      xs: a pytree of arrays scanned along their leading axis, or None (then `length` says
        how many steps to run).
      length: the number of steps; must agree with the leading axis of `xs`.
      reverse: scan from the end of `xs` to the start (ys are still stored in place).
      unroll: how many steps a compiled loop may unroll (True: all); does not change results.
    Returns:
      `(final_carry, stacked_ys)`.
    """
    return _scan(f, init, xs, length, reverse, unroll, _split_transpose,
                 carry_name=cf.first_param_name(f) if callable(f) else None)


def _scan(f: Callable, init: Any, xs: Any, length: int | None, reverse: bool,
          unroll: int | bool, split_transpose: bool, carry_name: str | None,
          carry_offset: int | None = None) -> tuple[Any, Any]:
    """scan, naming the carry `carry_name` in errors; fori_loop's carry is `(i, val)`, and
    with `carry_offset=1` its errors name components of `val` as the user's own."""
    if not callable(f):
        raise TypeError("lax.scan: f argument should be callable.")
    xs_leaves, xs_tree = cf.flatten(xs)
    xs_avals = cf.abstractify(xs_leaves, cf.leaf_paths(xs), "the xs of scan")
    for leaf, aval in zip(xs_leaves, xs_avals):
        if not aval.shape:
            raise ValueError(f"scan got value with no leading axis to scan over: {leaf!r}")
    if length is not None:
        try:
            length = operator.index(length)
        except TypeError:
            raise TypeError(f"The `length` argument to scan expects a concrete `int` value, "
                            f"got {length!r}.") from None
        if length < 0:
            raise ValueError(f"scan got a negative length: {length}")
    sizes = sorted({a.shape[0] for a in xs_avals})
    if len(sizes) > 1:
        raise ValueError("scan got values with different leading axis sizes: "
                         f"{', '.join(str(a.shape[0]) for a in xs_avals)}.")
    if length is None:
        if not sizes:
            raise ValueError("scan got no values to scan over and `length` not provided.")
        length = sizes[0]
    elif sizes and sizes[0] != length:
        raise ValueError(f"scan got `length` argument of {length} which disagrees with "
                         f"leading axis sizes {sizes}.")
    if isinstance(unroll, bool):
        unroll = max(length, 1) if unroll else 1
    try:
        unroll = operator.index(unroll)
    except TypeError:
        raise TypeError(f"The `unroll` argument to scan expects a concrete `int` or `bool` "
                        f"value, got {unroll!r}.") from None
    if unroll < 1:
        raise ValueError("`unroll` must be a `bool` or a positive `int`.")

    init_leaves, init_tree = cf.flatten(init)
    init_paths = cf.leaf_paths(init)
    init_avals = cf.abstractify(init_leaves, init_paths, "the initial carry of scan")
    if config.disable_jit and all(cf.is_concrete(x) for x in init_leaves + xs_leaves):
        return _scan_in_python(f, init, xs, xs_tree, xs_leaves, length, reverse)

    x_avals = [a.update(shape=a.shape[1:]) for a in xs_avals]
    if carry_offset is not None:
        init_paths = [_drop_prefix(p, carry_offset) for p in init_paths]
    in_tree = cf.flatten((init, xs))[1]
    traced = _trace_scan(f, in_tree, init_avals, x_avals)
    cf.check_carry_structure("scan body", carry_name, init_tree, traced.out_tree[0])
    num_carry = len(init_leaves)
    init_leaves, changed = cf.promote_weak_carries(init_leaves, init_avals,
                                                   traced.out_avals[:num_carry])
    if changed:
        init_avals = [cf.aval_of(x) for x in init_leaves]
        traced = _trace_scan(f, in_tree, init_avals, x_avals)
    cf.check_carry_types("scan body", carry_name, init_paths, init_avals,
                         traced.out_avals[:num_carry])

    operands = [*traced.consts, *init_leaves, *xs_leaves]
    outs = scan_p.bind(*operands, jaxpr=traced.jaxpr, length=length, reverse=bool(reverse),
                       linear=(False,) * len(operands), unroll=unroll,
                       num_consts=len(traced.consts), num_carry=num_carry,
                       _split_transpose=bool(split_transpose))
    carry_tree, ys_tree = traced.out_tree
    return cf.unflatten(carry_tree, outs[:num_carry]), cf.unflatten(ys_tree, outs[num_carry:])


def _drop_prefix(path: str, index: int) -> str:
    prefix = f"[{index}]"
    return path[len(prefix):] if path.startswith(prefix) else path


def _trace_scan(f, in_tree, init_avals, x_avals) -> cf.Traced:
    """Trace the scan body on (carry, x) of the given types; its `out_tree` is the pair
    (carry_tree, ys_tree)."""
    def split_output(out):
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"scan body output must be a pair, got {out!r}.")
        carry_leaves, carry_tree = cf.flatten(out[0])
        y_leaves, y_tree = cf.flatten(out[1])
        return carry_leaves + y_leaves, (carry_tree, y_tree)

    return cf.trace_function(f, in_tree, list(init_avals) + list(x_avals), "scan",
                             split_output)


def _scan_in_python(f, init, xs, xs_tree, xs_leaves, length, reverse):
    """scan under config.disable_jit: a Python loop over concrete values."""
    carry, ys = init, []
    steps = range(length - 1, -1, -1) if reverse else range(length)
    for i in steps:
        x = cf.unflatten(xs_tree, [leaf[i] for leaf in xs_leaves])
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:
        raise ValueError("scan with config.disable_jit cannot infer the ys of an empty scan")
    y_leaves = [cf.flatten(y)[0] for y in ys]
    y_tree = cf.flatten(ys[0])[1]
    return carry, cf.unflatten(y_tree, [_stack(parts) for parts in zip(*y_leaves)])


def _stack(parts: tuple) -> Any:
    """Join same-shape values along a new leading axis, promoting them to their common dtype
    (what jnp.stack does, in lax-level operations: primitives/ does not import kiln.numpy)."""
    shapes = [operand_shape(p) for p in parts]
    if any(s != shapes[0] for s in shapes[1:]):
        raise ValueError(f"All input arrays must have the same shape. Got "
                         f"{', '.join(str(s) for s in shapes)}.")
    dtype, weak = dtypes.result_type_with_weak(*(dtypes.dtype_and_weak_of(p) for p in parts))
    return concatenate([expand_dims(convert_element_type(p, dtype, weak), (0,))
                        for p in parts], 0)


def map(f: Callable, xs: Any, *, batch_size: int | None = None) -> Any:  # noqa: A001
    """Apply `f` to each slice of `xs` along its leading axis and stack the results
    (a scan without a carry: `f` is traced once)."""
    if batch_size is not None:
        raise NotImplementedError("lax.map(batch_size=...) needs vmap, which kiln does not "
                                  "have yet; call lax.map without batch_size.")
    _, ys = scan(lambda _, x: ((), f(x)), (), xs)
    return ys


@scan_p.def_impl
def _scan_impl(*args, jaxpr, length: int, reverse: bool, linear: tuple, unroll: int,
               num_consts: int, num_carry: int, _split_transpose: bool):
    in_avals = jaxpr.in_avals
    consts = cf.wrap_inputs(args[:num_consts], in_avals[:num_consts])
    carry_avals = in_avals[num_consts:num_consts + num_carry]
    x_avals = in_avals[num_consts + num_carry:]
    carry = cf.wrap_inputs(args[num_consts:num_consts + num_carry], carry_avals)
    xs = [np.asarray(x) for x in args[num_consts + num_carry:]]
    y_avals = jaxpr.out_avals[num_carry:]
    ys = [np.empty((length,) + a.shape, a.dtype) for a in y_avals]
    for i in (range(length - 1, -1, -1) if reverse else range(length)):
        x = cf.wrap_inputs([x[i] for x in xs], x_avals)
        outs = cf.run_jaxpr(jaxpr, consts + carry + x)
        carry = cf.wrap_inputs(outs[:num_carry], carry_avals)
        for buffer, y in zip(ys, outs[num_carry:]):
            buffer[i] = y._value
    return cf.unwrap_outputs(carry, args) + ys


@scan_p.def_abstract_eval
def _scan_abstract_eval(*avals: ShapedArray, jaxpr, length: int, reverse: bool, linear: tuple,
                        unroll: int, num_consts: int, num_carry: int, _split_transpose: bool):
    cf.typecheck_sub_jaxpr("scan", "jaxpr", jaxpr)
    if not isinstance(length, int) or length < 0:
        raise TypeError(f"scan: length must be a non-negative int, got {length!r}")
    if len(linear) != len(avals):
        raise TypeError(f"scan: linear has {len(linear)} entries for {len(avals)} operands")
    consts, carry = avals[:num_consts], avals[num_consts:num_consts + num_carry]
    xs = avals[num_consts + num_carry:]
    for i, x in enumerate(xs):
        if not x.shape or x.shape[0] != length:
            raise TypeError(f"scan: xs operand {i} has type {x.str_short()}, which has no "
                            f"leading axis of the scan length {length}")
    x_slices = [x.update(shape=x.shape[1:]) for x in xs]
    cf.check_operands("scan", "jaxpr", list(consts) + list(carry) + x_slices, jaxpr.in_avals)
    out = jaxpr.out_avals
    if len(out) < num_carry or not all(
            cf.same_type(a, b) for a, b in zip(carry, out)):
        raise TypeError("scan: jaxpr must return the carry types "
                        f"({', '.join(a.str_short() for a in carry)}) first, got "
                        f"({', '.join(a.str_short() for a in out)})")
    carry_out = cf.carry_out_avals(jaxpr.in_avals[num_consts:num_consts + num_carry],
                                   out[:num_carry])
    ys = [ShapedArray((length,) + y.shape, y.dtype, y.weak_type) for y in out[num_carry:]]
    return carry_out + ys


@scan_p.def_effects
def _scan_effects_rule(*, jaxpr, **_):
    return cf.effects_of(jaxpr)


@scan_p.def_dce
def _scan_dce_rule(used_outputs: list[bool], eqn):
    """Keep the used ys and the carries that a used output, an effect or a kept carry's update
    depends on; drop the loop when no output is used and the body has no effects."""
    p = eqn.params
    jaxpr, num_consts, num_carry = p["jaxpr"], p["num_consts"], p["num_carry"]
    effects = cf.effects_of(jaxpr)
    if not any(used_outputs) and not effects:
        return [False] * len(eqn.invars), None
    used_carry, used_ys = list(used_outputs[:num_carry]), list(used_outputs[num_carry:])
    while True:
        new_jaxpr, reads = cf.dce_sub_jaxpr(jaxpr, used_carry + used_ys)
        grown = [u or r for u, r in zip(used_carry, reads[num_consts:num_consts + num_carry])]
        if grown == used_carry:
            break
        used_carry = grown
    keep = reads[:num_consts] + used_carry + reads[num_consts + num_carry:]
    new_jaxpr = cf.prune_inputs(new_jaxpr, keep)
    invars = [a for a, k in zip(eqn.invars, keep) if k]
    new_eqn = eqn.replace(
        invars=invars,
        outvars=[v for v, k in zip(eqn.outvars, used_carry + used_ys) if k],
        params={**p, "jaxpr": new_jaxpr, "num_consts": sum(reads[:num_consts]),
                "num_carry": sum(used_carry),
                "linear": tuple(l for l, k in zip(p["linear"], keep) if k)})
    return keep, new_eqn

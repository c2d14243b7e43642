"""Machinery shared by the control-flow primitives (cond, while, scan): tracing a user function
into a sub-jaxpr, hoisting what it closes over into explicit operands, checking that branch
outputs and loop carries keep their types, evaluating sub-jaxprs eagerly, and dead-code
elimination inside sub-jaxprs.

Sub-jaxprs are stored as ClosedJaxprs without consts: everything a traced function closes over
(tracers of an enclosing trace, concrete arrays) becomes a leading input of the sub-jaxpr and an
operand of the equation (counted by `num_consts`, `cond_nconsts`, `body_nconsts`), as JAX does.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import numpy as np

from kiln import api_util
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.interpreter import eval_jaxpr, jaxpr_effects
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, JaxprEqn, JaxprTypeError, Literal, Var
from kiln.core.jaxpr_dce import dce_jaxpr
from kiln.core.trace import Tracer, set_current_trace
from kiln.transforms.staging import DebugInfo, function_name, function_source, trace_to_jaxpr

_VALID_LEAF = (Array, Tracer, np.ndarray, np.generic, bool, int, float, complex)


# --- pytrees and avals -----------------------------------------------------------------------


def flatten(tree: Any) -> tuple[list, Any]:
    return api_util.flatten(tree)


def unflatten(treedef, leaves: Sequence) -> Any:
    return api_util.unflatten(treedef, list(leaves))


def leaf_paths(tree: Any) -> list[str]:
    """Each leaf's key path, e.g. `[1]['b']` ('' for a bare leaf)."""
    return api_util.leaf_path_strings(tree)


def abstractify(leaves: Sequence, paths: Sequence[str], what: str) -> list[ShapedArray]:
    """The abstract value of each leaf of a control-flow operand; a TypeError names a leaf
    that is not an array or scalar."""
    avals = []
    for leaf, path in zip(leaves, paths):
        if not isinstance(leaf, _VALID_LEAF):
            raise TypeError(
                f"{what} must be arrays or scalars (or pytrees of them), but the "
                f"value at path {path or '(root)'} is of type "
                f"{type(leaf).__name__}: {leaf!r}"
            )
        avals.append(aval_of(leaf))
    return avals


def aval_of(x: Any) -> ShapedArray:
    if isinstance(x, (np.ndarray, np.generic)):
        if x.dtype.kind not in "biufc" and not dtypes.is_floating(x.dtype):
            raise TypeError(f"kiln cannot use a NumPy value of dtype {x.dtype} here")
        return ShapedArray(np.shape(x), dtypes.canonicalize(x.dtype), False)
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval
    dtype, weak = dtypes.dtype_and_weak_of(x)
    return ShapedArray((), dtype, weak)


def is_concrete(x: Any) -> bool:
    """Whether `x` holds a value Python can look at (not a tracer of any transformation)."""
    return not isinstance(x, Tracer)


def first_param_name(fun: Callable, position: int = 0) -> str | None:
    """The name of `fun`'s positional parameter at `position`, if it can be found."""
    try:
        params = [
            p
            for p in inspect.signature(fun).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return None
    return params[position].name if position < len(params) else None


def describe_function(fun: Callable) -> str:
    """`name at file:line`, as JAX names branch functions in its errors."""
    source = function_source(fun)
    return f"{function_name(fun)} at {source}" if source else function_name(fun)


# --- tracing ---------------------------------------------------------------------------------


class Traced:
    """A user function traced into a const-free sub-jaxpr.

    `jaxpr` takes `len(consts)` leading inputs for what the function closed over, then the
    flattened arguments; `consts` are the values to pass for them (tracers of an enclosing
    trace or concrete arrays); `out_tree` describes the output's structure."""

    __slots__ = ("jaxpr", "consts", "out_tree")

    def __init__(self, jaxpr: ClosedJaxpr, consts: list, out_tree):
        self.jaxpr = jaxpr
        self.consts = consts
        self.out_tree = out_tree

    @property
    def out_avals(self) -> list[ShapedArray]:
        return self.jaxpr.out_avals


def trace_function(
    fun: Callable,
    in_tree,
    in_avals: Sequence[ShapedArray],
    what: str,
    split_output: Callable[[Any], tuple[list, Any]] | None = None,
) -> Traced:
    """Trace `fun(*unflatten(in_tree, args))` for arguments of types `in_avals`.

    `split_output(out) -> (leaves, out_tree)` flattens the function's result (default: the
    whole result is one pytree). `what` names the function in error messages."""
    debug = DebugInfo.for_function(fun, what, [])

    def flat_fun(*tracers):
        args = unflatten(in_tree, tracers)
        out = fun(*args)
        if split_output is None:
            leaves, out_tree = flatten(out)
            paths = leaf_paths(out)
        else:
            leaves, out_tree = split_output(out)
            paths = [f"[{i}]" for i in range(len(leaves))]
        abstractify(leaves, paths, f"the outputs of {what}")
        return leaves, out_tree

    closed, out_tree = trace_to_jaxpr(flat_fun, list(in_avals), debug)
    return Traced(*hoist_consts(closed), out_tree)


def hoist_consts(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """Make a traced jaxpr's constvars leading invars; returns (const-free jaxpr, consts)."""
    jaxpr = closed.jaxpr
    if not jaxpr.constvars:
        return closed, []
    opened = Jaxpr(
        [], list(jaxpr.constvars) + list(jaxpr.invars), jaxpr.outvars, jaxpr.eqns, jaxpr.effects
    )
    return ClosedJaxpr(opened, []), list(closed.consts)


def merge_consts(traced: Sequence[Traced]) -> tuple[list[ClosedJaxpr], list]:
    """Give several sub-jaxprs (cond branches) one shared list of const inputs: each takes all
    the consts (deduplicated by identity) and ignores those it does not read."""
    consts: list = []
    index_of: dict[int, int] = {}
    for t in traced:
        for c in t.consts:
            if id(c) not in index_of:
                index_of[id(c)] = len(consts)
                consts.append(c)
    jaxprs = []
    for t in traced:
        jaxpr = t.jaxpr.jaxpr
        own = jaxpr.invars[: len(t.consts)]
        rest = jaxpr.invars[len(t.consts) :]
        const_vars = [None] * len(consts)
        for var, c in zip(own, t.consts):
            const_vars[index_of[id(c)]] = var
        const_vars = [v if v is not None else Var(aval_of(c)) for v, c in zip(const_vars, consts)]
        jaxprs.append(
            ClosedJaxpr(
                Jaxpr([], const_vars + list(rest), jaxpr.outvars, jaxpr.eqns, jaxpr.effects), []
            )
        )
    return jaxprs, consts


def with_output_avals(closed: ClosedJaxpr, avals: Sequence[ShapedArray]) -> ClosedJaxpr:
    """`closed` with each output whose weak type differs from `avals` converted to it (the
    shapes and dtypes already agree), so that all branches of a cond produce one type."""
    from kiln.primitives.elementwise import convert_element_type_p

    jaxpr = closed.jaxpr
    eqns, outvars = list(jaxpr.eqns), []
    for atom, aval in zip(jaxpr.outvars, avals):
        if atom.aval.weak_type == aval.weak_type:
            outvars.append(atom)
            continue
        var = Var(aval)
        eqns.append(
            JaxprEqn(
                convert_element_type_p,
                [atom],
                [var],
                dict(new_dtype=aval.dtype, weak_type=aval.weak_type),
            )
        )
        outvars.append(var)
    if len(eqns) == len(jaxpr.eqns):
        return closed
    return ClosedJaxpr(
        Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns, jaxpr.effects), closed.consts
    )


# --- type checks with JAX's messages -----------------------------------------------------------


def mismatch_reason(a: ShapedArray, b: ShapedArray) -> str:
    reasons = []
    if a.dtype != b.dtype:
        reasons.append("the dtypes do not match")
    if a.shape != b.shape:
        reasons.append("the shapes do not match")
    if not reasons:
        return ""
    if len(reasons) == 1:
        return ", so " + reasons[0]
    return ", so " + ", ".join(reasons[:-1]) + ", and " + reasons[-1]


def type_name(aval: ShapedArray) -> str:
    """`float32[3]`, as JAX's carry-type errors spell types."""
    return f"{aval.dtype.name}[{','.join(map(str, aval.shape))}]"


def same_type(a: ShapedArray, b: ShapedArray) -> bool:
    """Equal shape and dtype (weak types may differ: they are reconciled separately)."""
    return a.shape == b.shape and a.dtype == b.dtype


def bullet_list(diffs: list[str]) -> str:
    if len(diffs) == 1:
        return diffs[0][0].upper() + diffs[0][1:] + ".\n"
    return "".join(f"  * {d};\n" for d in diffs[:-1]) + f"  * {diffs[-1]}.\n"


def check_carry_structure(name: str, carry_name: str | None, in_tree, out_tree) -> None:
    """TypeError unless a loop body returns the carry's pytree structure."""
    if in_tree == out_tree:
        return
    what = f"the input carry {carry_name}" if carry_name else "the input carry"
    raise TypeError(
        f"{name} function carry input and carry output must have the same pytree structure, "
        f"but they differ:\n\n{what[0].upper() + what[1:]} has structure "
        f"{tree_text(in_tree)} but the carry output has structure {tree_text(out_tree)}.\n\n"
        "Revise the function so that the carry output has the same pytree structure as the "
        "carry input."
    )


def check_carry_types(
    name: str,
    carry_name: str | None,
    paths: Sequence[str],
    in_avals: Sequence[ShapedArray],
    out_avals: Sequence[ShapedArray],
) -> None:
    """TypeError naming each carry component whose shape or dtype the body changed."""

    def component(path: str) -> str:
        base = carry_name or "carry"
        if path:
            return f"the input carry component {base}{path}"
        return f"the input carry {base}"

    diffs = [
        f"{component(p)} has type {type_name(a)} but the corresponding output carry "
        f"component has type {type_name(b)}{mismatch_reason(a, b)}"
        for p, a, b in zip(paths, in_avals, out_avals)
        if not same_type(a, b)
    ]
    if diffs:
        raise TypeError(
            f"{name} function carry input and carry output must have equal types, but they "
            f"differ:\n\n{bullet_list(diffs)}\nRevise the function so that all output types "
            "match the corresponding input types."
        )


def promote_weak_carries(
    init_leaves: list, in_avals: Sequence[ShapedArray], out_avals: Sequence[ShapedArray]
) -> tuple[list, bool]:
    """A weakly typed initial carry (a Python scalar) whose dtype the body changes is promoted
    to the dtype the body produces, as JAX does (the body is then traced again).
    Returns the new initial leaves and whether any changed."""
    from kiln.primitives.elementwise import convert_element_type

    changed = False
    leaves = list(init_leaves)
    for i, (a, b) in enumerate(zip(in_avals, out_avals)):
        if a.weak_type and a.shape == b.shape and a.dtype != b.dtype:
            dtype, _ = dtypes.result_type_with_weak((a.dtype, True), (b.dtype, b.weak_type))
            if dtype != a.dtype:
                leaves[i] = convert_element_type(leaves[i], dtype)
                changed = True
    return leaves, changed


def carry_out_avals(
    in_avals: Sequence[ShapedArray], body_out_avals: Sequence[ShapedArray]
) -> list[ShapedArray]:
    """The types a loop returns for its carries: the carry's shape and dtype, weak only if
    both the initial value and every body result are weak."""
    return [
        ShapedArray(a.shape, a.dtype, a.weak_type and b.weak_type)
        for a, b in zip(in_avals, body_out_avals)
    ]


def tree_text(tree) -> str:
    from kiln.tree_util import PyTreeDef

    return repr(PyTreeDef(tree)) if not isinstance(tree, PyTreeDef) else repr(tree)


# --- abstract-eval checks ----------------------------------------------------------------------


def check_operands(
    prim: str, what: str, operand_avals: Sequence[ShapedArray], expected: Sequence[ShapedArray]
) -> None:
    """TypeError unless the operands have the sub-jaxpr's input shapes and dtypes."""
    if len(operand_avals) != len(expected):
        raise TypeError(
            f"{prim}: {what} takes {len(expected)} inputs, got {len(operand_avals)} operands"
        )
    for i, (a, e) in enumerate(zip(operand_avals, expected)):
        if not same_type(a, e):
            raise TypeError(
                f"{prim}: operand {i} of {what} has type {a.str_short()} but the "
                f"jaxpr expects {e.str_short()}"
            )


def typecheck_sub_jaxpr(prim: str, what: str, closed: ClosedJaxpr) -> None:
    """Typecheck a sub-jaxpr (the rules of its own equations, recursively)."""
    from kiln.core.jaxpr import typecheck_jaxpr

    if not isinstance(closed, ClosedJaxpr):
        raise TypeError(f"{prim}: {what} must be a ClosedJaxpr, got {type(closed).__name__}")
    try:
        typecheck_jaxpr(closed.jaxpr)
    except JaxprTypeError as err:
        raise JaxprTypeError(f"{prim}: {what} does not typecheck: {err}") from None


def effects_of(*jaxprs: ClosedJaxpr) -> frozenset:
    effects = frozenset()
    for j in jaxprs:
        effects |= jaxpr_effects(j)
    return effects


# --- eager evaluation ------------------------------------------------------------------------


def wrap_inputs(values: Sequence, avals: Sequence[ShapedArray]) -> list[Array]:
    """NumPy operands as kiln Arrays with the weak types the sub-jaxpr was traced with."""
    return [
        v
        if type(v) is Array and v.weak_type == a.weak_type
        else Array._wrap(v._value if type(v) is Array else np.asarray(v), a.weak_type)
        for v, a in zip(values, avals)
    ]


def run_jaxpr(closed: ClosedJaxpr, args: Sequence[Array]) -> list[Array]:
    """Evaluate a sub-jaxpr eagerly (whatever trace is current: impls run on values)."""
    with set_current_trace(None):
        return eval_jaxpr(closed.jaxpr, closed.consts, *args)


def unwrap_outputs(outs: Sequence, inputs: Sequence) -> list[np.ndarray]:
    """Arrays as NumPy results; an output that is an input buffer is copied, so that wrapping
    the result never aliases a NumPy array the caller may write."""
    input_ids = {id(np.asarray(x._value if type(x) is Array else x)) for x in inputs}
    results = []
    for o in outs:
        value = o._value if type(o) is Array else np.asarray(o)
        results.append(value.copy() if id(value) in input_ids else value)
    return results


# --- dead-code elimination inside sub-jaxprs ---------------------------------------------------


def dce_sub_jaxpr(
    closed: ClosedJaxpr, used_outputs: Sequence[bool]
) -> tuple[ClosedJaxpr, list[bool]]:
    """Remove what `closed` computes only for unused outputs; the result keeps only the used
    outputs but all inputs. Returns it and which inputs it still reads."""
    jaxpr, used_inputs = dce_jaxpr(closed.jaxpr, list(used_outputs))
    return ClosedJaxpr(jaxpr, closed.consts), used_inputs


def prune_inputs(closed: ClosedJaxpr, keep: Sequence[bool]) -> ClosedJaxpr:
    """`closed` without the inputs not marked in `keep` (which it must not read)."""
    jaxpr = closed.jaxpr
    invars = [v for v, k in zip(jaxpr.invars, keep) if k]
    return ClosedJaxpr(
        Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, jaxpr.eqns, jaxpr.effects), closed.consts
    )


# --- rewiring sub-jaxprs for the derivative and batching rules ----------------------------------
# The jvp, partial-evaluation, transpose and batching rules build new sub-jaxprs from traced
# ones: they reorder inputs and outputs, add inputs a jaxpr ignores, and turn the consts a
# traced jaxpr captured into leading operands of the equation.


def split_list(values: Sequence, sizes: Sequence[int]) -> list[list]:
    """`values` cut into consecutive pieces of the given sizes, plus the rest."""
    pieces, start = [], 0
    for size in sizes:
        pieces.append(list(values[start : start + size]))
        start += size
    pieces.append(list(values[start:]))
    return pieces


def select_mask(values: Sequence, mask: Sequence[bool], keep: bool = True) -> list:
    """The entries of `values` whose flag in `mask` equals `keep`."""
    return [v for v, m in zip(values, mask) if bool(m) == keep]


def merge_masked(mask: Sequence[bool], when_true: Sequence, when_false: Sequence) -> list:
    """Interleave two lists back into one, taking from `when_true` where `mask` is set."""
    true_iter, false_iter = iter(when_true), iter(when_false)
    return [next(true_iter) if m else next(false_iter) for m in mask]


def permute_inputs(closed: ClosedJaxpr, order: Sequence[int]) -> ClosedJaxpr:
    """`closed` taking its inputs in a new order: input k of the result is input `order[k]`."""
    jaxpr = closed.jaxpr
    invars = [jaxpr.invars[i] for i in order]
    return ClosedJaxpr(
        Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, jaxpr.eqns, jaxpr.effects), closed.consts
    )


def permute_outputs(closed: ClosedJaxpr, order: Sequence[int]) -> ClosedJaxpr:
    """`closed` returning its outputs in a new order: output k is output `order[k]`."""
    jaxpr = closed.jaxpr
    outvars = [jaxpr.outvars[i] for i in order]
    return ClosedJaxpr(
        Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, jaxpr.eqns, jaxpr.effects), closed.consts
    )


def interleave_order(sizes: Sequence[int], groups: int) -> list[int]:
    """The order that turns inputs laid out as `groups` blocks of parts [p0, p1, ...] (sizes
    `sizes[g][i]`, flattened) into [p0 of every block, p1 of every block, ...].

    A jvp jaxpr takes (consts, carry, xs, const tangents, carry tangents, xs tangents); a loop
    body must take (consts, const tangents, carry, carry tangents, xs, xs tangents)."""
    offsets, start = [], 0
    for block in range(groups):
        row = []
        for size in sizes[block]:
            row.append(start)
            start += size
        offsets.append(row)
    order = []
    for part in range(len(sizes[0])):
        for block in range(groups):
            order.extend(range(offsets[block][part], offsets[block][part] + sizes[block][part]))
    return order


def with_extra_inputs(closed: ClosedJaxpr, avals: Sequence[ShapedArray], at: int) -> ClosedJaxpr:
    """`closed` with inputs of types `avals`, which it ignores, inserted at position `at`."""
    jaxpr = closed.jaxpr
    extra = [Var(a) for a in avals]
    invars = list(jaxpr.invars[:at]) + extra + list(jaxpr.invars[at:])
    return ClosedJaxpr(
        Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, jaxpr.eqns, jaxpr.effects), closed.consts
    )


def trace_jaxpr(fun: Callable, in_avals: Sequence[ShapedArray]) -> ClosedJaxpr:
    """Trace `fun(*tracers) -> list` into a jaxpr (with the consts it captured), without the
    equations whose results it does not use."""
    closed, _ = trace_to_jaxpr(lambda *args: (list(fun(*args)), None), list(in_avals))
    return ClosedJaxpr(dce_jaxpr(closed.jaxpr)[0], closed.consts)


def shared_consts(closed_jaxprs: Sequence[ClosedJaxpr]) -> tuple[list[ClosedJaxpr], list]:
    """Const-free versions of several jaxprs (cond branches) that all take one shared list of
    leading const inputs; returns them and the consts."""
    traced = [Traced(*hoist_consts(c), None) for c in closed_jaxprs]
    return merge_consts(traced)


def inputs_only_from(jaxpr: Jaxpr, num_leading: int) -> list[bool]:
    """For each output: whether it depends on nothing but the first `num_leading` inputs (and
    constants). Used to find loop-invariant residuals of a scan body."""
    varying = {v for v in jaxpr.invars[num_leading:]}
    for eqn in jaxpr.eqns:
        if any(type(a) is not Literal and a in varying for a in eqn.invars):
            varying.update(eqn.outvars)
    return [not (type(v) is not Literal and v in varying) for v in jaxpr.outvars]


def avals_of(values: Sequence) -> list[ShapedArray]:
    from kiln.core.avals import get_aval

    return [get_aval(v) for v in values]

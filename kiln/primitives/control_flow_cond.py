"""Conditionals: the `cond` primitive and `lax.cond` / `lax.switch`.

`cond` takes an int32 index and operands and applies exactly one of its `branches` (traced
sub-jaxprs with identical types). `lax.cond(pred, true_fun, false_fun, ...)` binds it with the
index `convert_element_type(pred, int32)` and the branches in the order (false, true), so the
predicate's value picks its branch; `lax.switch` clamps its index into range first. Both branch
functions are always traced, even for a concrete predicate, as in JAX.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from kiln.config import config
from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives import control_flow_common as cf
from kiln.primitives.elementwise import clamp, convert_element_type, ne

__all__ = ["cond", "switch", "cond_p"]

_NO_OPERAND = object()

cond_p = Primitive("cond", multiple_results=True)


# --- public wrappers -------------------------------------------------------------------------


def cond(pred, true_fun: Callable, false_fun: Callable, *operands, operand=_NO_OPERAND):
    """Apply `true_fun(*operands)` if `pred` is true, else `false_fun(*operands)`.

    Both functions are traced; their outputs must have the same pytree structure, shapes and
    dtypes. `pred` is a scalar boolean (a number counts as `pred != 0`). The older call form
    `cond(pred, true_operand, true_fun, false_operand, false_fun)` and the `operand=` keyword
    are accepted too.

    Returns:
      The output of the selected branch.
    """
    if not (callable(true_fun) and callable(false_fun)):
        # The old form: cond(pred, true_operand, true_fun, false_operand, false_fun).
        if callable(false_fun) and len(operands) == 2 and callable(operands[1]):
            x_true, f_true, x_false, f_false = true_fun, false_fun, *operands
            return cond(pred, lambda x, _: f_true(x), lambda _, x: f_false(x), x_true, x_false)
        raise TypeError("lax.cond: true_fun and false_fun arguments should be callable.")
    if operand is not _NO_OPERAND:
        if operands:
            raise TypeError(
                "if 'operand' keyword is passed then no positional operands can be "
                f"passed, got operand={operand!r} and positional operands "
                f"{operands!r}"
            )
        operands = (operand,)

    if pred is None:
        raise TypeError("cond predicate is None")
    if isinstance(pred, (list, tuple)) or np.ndim(pred) != 0:
        what = (
            f"type {type(pred)}" if isinstance(pred, (list, tuple)) else f"shape {np.shape(pred)}."
        )
        raise TypeError(f"Pred must be a scalar, got {pred} of {what}")
    pred_dtype = _dtype_of(pred, f"Pred type must be either boolean or number, got {pred!r}.")
    if pred_dtype != dtypes.bool_:
        if pred_dtype.kind not in "iuf" and pred_dtype != dtypes.bfloat16:
            raise TypeError(f"Pred type must be either boolean or number, got {pred_dtype}.")
        pred = ne(pred, 0)

    if config.disable_jit and cf.is_concrete(pred):
        return true_fun(*operands) if bool(pred) else false_fun(*operands)

    index = convert_element_type(pred, np.int32)
    # Branch 0 runs for index 0 (pred false): (false_fun, true_fun).
    return _bind_cond(
        index,
        (false_fun, true_fun),
        operands,
        "cond",
        names=("false_fun", "true_fun"),
        trace_order=(1, 0),
    )


def switch(index, branches: Sequence[Callable], *operands, operand=_NO_OPERAND):
    """Apply `branches[index](*operands)`; an out-of-range index is clamped into range.

    All branches are traced; their outputs must have the same pytree structure, shapes and
    dtypes. `index` is a scalar integer.

    Returns:
      The output of the selected branch.
    """
    if operand is not _NO_OPERAND:
        if operands:
            raise TypeError(
                "if 'operand' keyword is passed then no positional operands can be "
                f"passed, got operand={operand!r} and positional operands "
                f"{operands!r}"
            )
        operands = (operand,)
    if isinstance(index, (list, tuple)) or np.ndim(index) != 0:
        raise TypeError(f"Branch index must be scalar, got {index} of shape {np.shape(index)}.")
    index_dtype = _dtype_of(index, f"Index type must be an integer, got {index!r}.")
    if index_dtype.kind not in "iu":
        raise TypeError(f"Index type must be an integer, got {index} as {index_dtype}")
    branches = tuple(branches)
    for i, branch in enumerate(branches):
        if not callable(branch):
            raise TypeError(f"lax.switch: branches[{i}] is not callable: {branch!r}")
    if not branches:
        raise ValueError("Empty branch sequence")
    if len(branches) == 1:
        return branches[0](*operands)

    index = convert_element_type(index, np.int32)
    index = clamp(np.array(0, np.int32), index, np.array(len(branches) - 1, np.int32))
    if config.disable_jit and cf.is_concrete(index):
        return branches[int(index)](*operands)
    return _bind_cond(
        index,
        branches,
        operands,
        "switch",
        names=tuple(f"branch {i}" for i in range(len(branches))),
        trace_order=range(len(branches)),
    )


def _dtype_of(x: Any, message: str) -> np.dtype:
    try:
        dtype, _ = dtypes.dtype_and_weak_of(x)
    except TypeError:
        raise TypeError(message) from None
    return dtype


def _bind_cond(
    index,
    branches: Sequence[Callable],
    operands: tuple,
    api_name: str,
    names: Sequence[str],
    trace_order: Sequence[int],
):
    """Trace `branches` (in the order the user wrote them: `trace_order`) and bind cond."""
    leaves, in_tree = cf.flatten(operands)
    avals = cf.abstractify(leaves, cf.leaf_paths(operands), f"the operands of {api_name}")
    traced: list = [None] * len(branches)
    for i in trace_order:
        traced[i] = cf.trace_function(branches[i], in_tree, avals, api_name)
    # Report mismatches against the first branch the user wrote (true_fun, branch 0).
    reference = trace_order[0]
    for i, t in enumerate(traced):
        if i != reference:
            _check_branch_outputs(
                api_name,
                names[reference],
                names[i],
                branches[reference],
                branches[i],
                traced[reference],
                t,
            )
    out_avals = _joined_avals([t.out_avals for t in traced])
    jaxprs, consts = cf.merge_consts(traced)
    jaxprs = tuple(cf.with_output_avals(j, out_avals) for j in jaxprs)
    num_operands = len(consts) + len(leaves)
    outs = cond_p.bind(index, *consts, *leaves, branches=jaxprs, linear=(False,) * num_operands)
    return cf.unflatten(traced[reference].out_tree, outs)


def _joined_avals(avals_per_branch: list[list[ShapedArray]]) -> list[ShapedArray]:
    """Branch outputs agree in shape and dtype; the result is weak only if all are weak."""
    return [
        ShapedArray(avals[0].shape, avals[0].dtype, all(a.weak_type for a in avals))
        for avals in zip(*avals_per_branch)
    ]


def _check_branch_outputs(
    api_name: str, name1: str, name2: str, f1: Callable, f2: Callable, t1: cf.Traced, t2: cf.Traced
) -> None:
    """TypeError (JAX's wording) unless two branches return the same structure and types."""
    header = f"{name1} is {cf.describe_function(f1)}\n{name2} is {cf.describe_function(f2)}\n\n"
    if t1.out_tree != t2.out_tree:
        raise TypeError(
            f"{api_name} branch outputs must have the same pytree structure, but they differ:"
            f"\n\n{header}{name1} output is {cf.tree_text(t1.out_tree)} but {name2} output is "
            f"{cf.tree_text(t2.out_tree)}.\n\n"
            f"Revise {name1} and/or {name2} so that they have the same pytree structure."
        )
    paths = _paths_of(t1.out_tree)
    diffs = [
        f"the output of {name1}{f' at path {p}' if p else ''} has type {cf.type_name(a)} "
        f"but the corresponding output of {name2} has type {cf.type_name(b)}"
        f"{cf.mismatch_reason(a, b)}"
        for p, a, b in zip(paths, t1.out_avals, t2.out_avals)
        if not cf.same_type(a, b)
    ]
    if diffs:
        raise TypeError(
            f"{api_name} branches must have equal output types but they differ.\n\n{header}"
            f"{cf.bullet_list(diffs)}\n"
            f"Revise {name1} and/or {name2} so that all output types match."
        )


def _paths_of(treedef) -> list[str]:
    placeholder = cf.unflatten(treedef, [0] * treedef.num_leaves)
    return cf.leaf_paths(placeholder)


# --- rules -----------------------------------------------------------------------------------


@cond_p.def_impl
def _cond_impl(index, *operands, branches: tuple, linear: tuple):
    # Clamped, as XLA's conditional runs the last branch for an out-of-range index.
    which = min(max(int(index), 0), len(branches) - 1)
    branch = branches[which]
    args = cf.wrap_inputs(operands, branch.in_avals)
    return cf.unwrap_outputs(cf.run_jaxpr(branch, args), operands)


@cond_p.def_abstract_eval
def _cond_abstract_eval(index: ShapedArray, *operands: ShapedArray, branches: tuple, linear: tuple):
    if not isinstance(branches, tuple) or not branches:
        raise TypeError("cond: branches must be a non-empty tuple of ClosedJaxprs")
    if index.shape != () or index.dtype != dtypes.int32:
        raise TypeError(f"cond: the branch index must be an int32 scalar, got {index.str_short()}")
    if len(linear) != len(operands):
        raise TypeError(f"cond: linear has {len(linear)} entries for {len(operands)} operands")
    first = branches[0]
    for i, branch in enumerate(branches):
        cf.typecheck_sub_jaxpr("cond", f"branch {i}", branch)
        cf.check_operands("cond", f"branch {i}", operands, branch.in_avals)
        out = branch.out_avals
        if len(out) != len(first.out_avals) or not all(
            cf.same_type(a, b) for a, b in zip(out, first.out_avals)
        ):
            raise TypeError(
                f"cond: branch {i} returns ({', '.join(a.str_short() for a in out)}) but branch "
                f"0 returns ({', '.join(a.str_short() for a in first.out_avals)})"
            )
    return [
        ShapedArray(a.shape, a.dtype, all(b.out_avals[k].weak_type for b in branches))
        for k, a in enumerate(first.out_avals)
    ]


@cond_p.def_effects
def _cond_effects_rule(*, branches, linear):
    return cf.effects_of(*branches)


@cond_p.def_dce
def _cond_dce_rule(used_outputs: list[bool], eqn):
    """Keep the used outputs of every branch and the operands some branch still reads; drop
    the equation when nothing is used and no branch has effects."""
    branches: tuple = eqn.params["branches"]
    if not any(used_outputs) and not cf.effects_of(*branches):
        return [False] * len(eqn.invars), None
    pruned, used_inputs = [], [False] * (len(eqn.invars) - 1)
    for branch in branches:
        new, used = cf.dce_sub_jaxpr(branch, used_outputs)
        pruned.append(new)
        used_inputs = [a or b for a, b in zip(used_inputs, used)]
    new_branches = tuple(cf.prune_inputs(b, used_inputs) for b in pruned)
    operands = [a for a, u in zip(eqn.invars[1:], used_inputs) if u]
    linear = tuple(l for l, u in zip(eqn.params["linear"], used_inputs) if u)
    new_eqn = eqn.replace(
        invars=[eqn.invars[0], *operands],
        outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
        params={**eqn.params, "branches": new_branches, "linear": linear},
    )
    return [True] + used_inputs, new_eqn


# --- differentiation and batching ----------------------------------------------------------
# Every rule keeps one cond: the branches are transformed alike (the same inputs differentiated,
# unknown or batched), then forced to agree on which outputs carry tangents, are unknown or are
# batched, so that they keep identical types.


def _bind_branches(index, operands: Sequence, branches: Sequence) -> list:
    """Bind cond with branches that may have captured consts (passed as leading operands)."""
    jaxprs, consts = cf.shared_consts(branches)
    operands = [*consts, *operands]
    return cond_p.bind(index, *operands, branches=tuple(jaxprs), linear=(False,) * len(operands))


@cond_p.def_jvp
def _cond_jvp_rule(primals, tangents, *, branches: tuple, linear: tuple):
    from kiln.transforms.jvp import jvp_jaxpr

    index, *operands = primals
    nonzeros = [t is not None for t in tangents[1:]]
    out_nonzeros = [False] * len(branches[0].out_avals)
    for branch in branches:
        _, branch_nonzeros = jvp_jaxpr(branch, nonzeros, instantiate=False)
        out_nonzeros = [a or b for a, b in zip(out_nonzeros, branch_nonzeros)]
    jvp_branches = [jvp_jaxpr(branch, nonzeros, instantiate=out_nonzeros)[0] for branch in branches]
    operand_tangents = [t for t in tangents[1:] if t is not None]
    outs = _bind_branches(index, [*operands, *operand_tangents], jvp_branches)
    num_out = len(out_nonzeros)
    return outs[:num_out], cf.merge_masked(out_nonzeros, outs[num_out:], [None] * num_out)


@cond_p.def_partial_eval
def _cond_partial_eval_rule(trace, args, *, branches: tuple, linear: tuple):
    """With a known index: the known half of every branch runs now as one cond, the unknown
    half is staged as another. Each branch's residuals differ, so every known branch returns
    the residuals of all branches (zeros for the others') and every unknown branch takes them
    all. With an unknown index the whole cond is staged."""
    from kiln.transforms.partial_eval import partial_eval_jaxpr

    params = dict(branches=branches, linear=linear)
    index, *operands = args
    if trace.is_unknown(index):
        return trace.stage(cond_p, args, params)
    unknowns = [trace.is_unknown(x) for x in operands]
    out_unknowns = [False] * len(branches[0].out_avals)
    for branch in branches:
        out_unknowns = [
            a or b for a, b in zip(out_unknowns, partial_eval_jaxpr(branch, unknowns)[2])
        ]
    splits = [partial_eval_jaxpr(branch, unknowns, instantiate=out_unknowns) for branch in branches]
    num_known_out = out_unknowns.count(False)
    res_avals = [known.out_avals[num_known_out:] for known, _, _, _ in splits]
    known_branches, unknown_branches = _join_residuals(splits, res_avals, num_known_out)

    known_operands = cf.select_mask(operands, unknowns, keep=False)
    known_outs = trace.run_known(_bind_branches, index, known_operands, known_branches)
    residuals = known_outs[num_known_out:]
    if not any(out_unknowns):
        return known_outs[:num_known_out]
    unknown_operands = cf.select_mask(operands, unknowns)
    jaxprs, consts = cf.shared_consts(unknown_branches)
    staged = [*consts, *residuals, *unknown_operands]
    unknown_outs = trace.stage(
        cond_p, [index, *staged], dict(branches=tuple(jaxprs), linear=(False,) * len(staged))
    )
    return cf.merge_masked(out_unknowns, unknown_outs, known_outs[:num_known_out])


def _join_residuals(splits, res_avals, num_known_out):
    """Known branches that all return (known outputs, residuals of branch 0, of branch 1, ...)
    and unknown branches that all take (every branch's residuals, unknown operands)."""
    from kiln.core.interpreter import eval_jaxpr
    from kiln.primitives.base import zeros_like_aval

    all_res = [a for avals in res_avals for a in avals]
    known_branches, unknown_branches = [], []
    for i, (known, unknown, _, _) in enumerate(splits):

        def known_fun(*args, known=known, i=i):
            outs = eval_jaxpr(known.jaxpr, known.consts, *args)
            res = [[zeros_like_aval(a) for a in avals] for avals in res_avals]
            res[i] = outs[num_known_out:]
            return outs[:num_known_out] + [r for part in res for r in part]

        known_branches.append(cf.trace_jaxpr(known_fun, known.in_avals))
        before = sum(len(avals) for avals in res_avals[:i])
        own_end = before + len(res_avals[i])
        unknown = cf.with_extra_inputs(unknown, all_res[:before], 0)
        unknown_branches.append(cf.with_extra_inputs(unknown, all_res[own_end:], own_end))
    return known_branches, unknown_branches


@cond_p.def_transpose
def _cond_transpose_rule(cts, index, *operands, branches: tuple, linear: tuple):
    from kiln.core.ad_util import is_undefined_primal
    from kiln.primitives.base import zeros_like_aval
    from kiln.transforms.transpose import transpose_jaxpr

    if is_undefined_primal(index):
        raise ValueError("cond: cannot transpose with respect to the branch index")
    is_linear = [is_undefined_primal(x) for x in operands]
    cts = [zeros_like_aval(a) if ct is None else ct for ct, a in zip(cts, branches[0].out_avals)]
    transposed = [transpose_jaxpr(branch, is_linear) for branch in branches]
    nonlinear = cf.select_mask(operands, is_linear, keep=False)
    outs = _bind_branches(index, [*nonlinear, *cts], transposed)
    return [None] + cf.merge_masked(is_linear, outs, [None] * len(operands))


@cond_p.def_batching
def _cond_batching_rule(args, dims, *, branches: tuple, linear: tuple):
    from kiln.core.interpreter import eval_jaxpr
    from kiln.primitives.base import bdim_at_front, batch_size
    from kiln.primitives.custom_derivatives import stop_gradient
    from kiln.primitives.elementwise import eq, select_n
    from kiln.primitives.shape import broadcast_in_dim
    from kiln.transforms.batching import batch_jaxpr

    effects = cf.effects_of(*branches)
    if effects & {"IO", "OrderedIO"}:
        raise NotImplementedError("IO effect not supported in vmap-of-cond.")
    size = batch_size(args, dims)
    index, *operands = args
    index_dim, *operand_dims = dims
    num_out = len(branches[0].out_avals)
    if index_dim is None:
        out_batched = [False] * num_out
        for branch in branches:
            _, branch_dims = batch_jaxpr(branch, size, operand_dims)
            out_batched = [a or d is not None for a, d in zip(out_batched, branch_dims)]
        out_dims = [0 if b else None for b in out_batched]
        batched = [batch_jaxpr(branch, size, operand_dims, out_dims)[0] for branch in branches]
        return _bind_branches(index, operands, batched), out_dims

    # A different branch per example: run every branch on the whole batch and pick each
    # example's result with select_n (as JAX does; so every branch is evaluated). A branch
    # sees its operands through stop_gradient in the examples that do not take it, so that
    # its derivative there (perhaps inf or nan) cannot reach the operands' cotangents.
    index = bdim_at_front(index, index_dim, size)
    operands = [bdim_at_front(x, d, size) for x, d in zip(operands, operand_dims)]
    branch_outs = []
    for i, branch in enumerate(branches):
        batched, _ = batch_jaxpr(branch, size, [0] * len(operands), [0] * num_out)
        taken = eq(index, np.array(i, np.int32))
        guarded = [
            select_n(broadcast_in_dim(taken, tuple(x.shape), (0,)), stop_gradient(x), x)
            for x in operands
        ]
        branch_outs.append(eval_jaxpr(batched.jaxpr, batched.consts, *guarded))
    outs = []
    for cases in zip(*branch_outs):
        shape = tuple(cases[0].shape)
        which = broadcast_in_dim(index, shape, (0,))
        outs.append(select_n(which, *cases))
    return outs, [0] * num_out

"""Custom derivative rules: `custom_jvp` and `custom_vjp` (kiln.custom_derivatives).

A function decorated with `custom_jvp` runs as written, but differentiation uses the jvp rule
given with `defjvp` (or one rule per argument with `defjvps`); `custom_vjp` replaces reverse
mode by the `fwd`/`bwd` pair given with `defvjp`. Arguments listed in `nondiff_argnums` are
passed through to the rules unchanged (first, in order) and are never differentiated.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

from kiln import api_util
from kiln.core.ad_util import float0_zeros, has_tangent_space
from kiln.core.avals import get_aval
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr
from kiln.core.trace import current_trace
from kiln.primitives.custom_derivatives import custom_jvp_call_p, custom_vjp_call_p
from kiln.transforms.staging import function_name, trace_to_jaxpr

__all__ = ["custom_jvp", "custom_vjp", "closure_convert"]


def _split_nondiff(args: tuple, nondiff_argnums: tuple[int, ...]):
    nondiff = [args[i] for i in nondiff_argnums]
    dyn = tuple(a for i, a in enumerate(args) if i not in nondiff_argnums)
    return nondiff, dyn


def _merge_nondiff(nondiff: list, dyn: Sequence, nondiff_argnums: tuple[int, ...]) -> list:
    args, it_nd, it_dyn = [], iter(nondiff), iter(dyn)
    for i in range(len(nondiff) + len(dyn)):
        args.append(next(it_nd) if i in nondiff_argnums else next(it_dyn))
    return args


def _trace_call(fun: Callable, flat_args: list, in_tree):
    """`fun` on flat arguments as a jaxpr whose closed-over values are explicit leading inputs:
    returns (jaxpr, consts, out_tree)."""
    box = {}

    def flat_fun(*leaves):
        out = fun(*api_util.unflatten(in_tree, list(leaves)))
        out_leaves, box["tree"] = api_util.flatten(out)
        return out_leaves, None

    closed, _ = trace_to_jaxpr(flat_fun, [get_aval(a) for a in flat_args])
    j = closed.jaxpr
    hoisted = ClosedJaxpr(Jaxpr([], j.constvars + j.invars, j.outvars, j.eqns, j.effects), [])
    return hoisted, list(closed.consts), box["tree"]


def _resolve_argnums(nondiff_argnums, nargs: int) -> tuple[int, ...]:
    return tuple(sorted(i % nargs if nargs else i for i in nondiff_argnums))


class custom_jvp:
    """A function with a custom forward-mode rule (used by reverse mode too, since reverse
    mode transposes the linearized jvp)."""

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        self.symbolic_zeros = False

    def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
        """`jvp(primals, tangents) -> (primal_out, tangent_out)`, with the nondiff arguments
        first when there are any."""
        self.jvp = jvp
        self.symbolic_zeros = symbolic_zeros
        return jvp

    def defjvps(self, *jvps: Callable | None) -> None:
        """One rule per argument: `jvps[i](g, ans, *primals)` is the output tangent that the
        tangent `g` of argument i contributes (None: not differentiable in it)."""
        if self.nondiff_argnums:
            raise TypeError("Can't use ``defjvps`` with ``nondiff_argnums``.")

        def jvp(primals, tangents):
            from kiln import tree_util

            ans = self(*primals)
            total = None
            for rule, g in zip(jvps, tangents):
                if rule is None or _is_zero(g):
                    continue
                term = rule(g, ans, *primals)
                total = (
                    term if total is None else tree_util.tree_map(lambda a, b: a + b, total, term)
                )
            if total is None:
                total = tree_util.tree_map(_zeros_of, ans)
            return ans, total

        self.defjvp(jvp)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = _bind_kwargs(self.fun, args, kwargs)
        if self.jvp is None:
            raise AttributeError(
                f"No JVP defined for custom_jvp function {function_name(self.fun)} "
                "using ``defjvp``."
            )
        if current_trace() is None:
            return self.fun(*args)
        nondiff_argnums = _resolve_argnums(self.nondiff_argnums, len(args))
        nondiff, dyn = _split_nondiff(args, nondiff_argnums)
        flat_args, in_tree = api_util.flatten(dyn)
        fun = self.fun
        call, consts, out_tree = _trace_call(
            lambda *d: fun(*_merge_nondiff(nondiff, d, nondiff_argnums)), flat_args, in_tree
        )
        user_jvp = self.jvp

        def flat_jvp(primals, tangents):
            p_tree = api_util.unflatten(in_tree, primals)
            t_tree = api_util.unflatten(
                in_tree, [_tangent_or_float0(t, p) for t, p in zip(tangents, primals)]
            )
            if nondiff:
                out, t_out = user_jvp(*nondiff, p_tree, t_tree)
            else:
                out, t_out = user_jvp(p_tree, t_tree)
            out_leaves, tree1 = api_util.flatten(out)
            t_leaves, tree2 = api_util.flatten(t_out)
            if tree1 != out_tree or tree2 != out_tree:
                raise TypeError(
                    f"Custom JVP rule {function_name(user_jvp)} for function "
                    f"{function_name(fun)} must produce primal and tangent outputs with equal "
                    f"container (pytree) structures and equal to the primal function's output "
                    f"structure {out_tree}, but got {tree1} and {tree2}."
                )
            for o, t in zip(out_leaves, t_leaves):
                if not _is_zero(t) and tuple(get_aval(o).shape) != tuple(get_aval(t).shape):
                    raise ValueError(
                        f"Custom JVP rule {function_name(user_jvp)} must produce primal and "
                        "tangent outputs with corresponding shapes, got "
                        f"{get_aval(o).shape} and {get_aval(t).shape}."
                    )
            return out_leaves, [None if _is_zero(t) else t for t in t_leaves]

        flat_jvp.__name__ = function_name(user_jvp)
        outs = custom_jvp_call_p.bind(
            *consts,
            *flat_args,
            call_jaxpr=call,
            jvp=flat_jvp,
            num_consts=len(consts),
            symbolic_zeros=self.symbolic_zeros,
            name=function_name(fun),
        )
        return api_util.unflatten(out_tree, outs)


class custom_vjp:
    """A function with a custom reverse-mode rule: `defvjp(fwd, bwd)`."""

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = None
        self.bwd = None
        self.symbolic_zeros = False

    def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False) -> None:
        """`fwd(*args) -> (out, residuals)`; `bwd(residuals, ct_out) -> tuple of cotangents`
        (one per differentiable argument; nondiff arguments come first in bwd's arguments)."""
        self.fwd, self.bwd, self.symbolic_zeros = fwd, bwd, symbolic_zeros

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = _bind_kwargs(self.fun, args, kwargs)
        if self.fwd is None:
            raise AttributeError(
                f"No VJP defined for custom_vjp function "
                f"{function_name(self.fun)} using ``defvjp``."
            )
        if current_trace() is None:
            return self.fun(*args)
        nondiff_argnums = _resolve_argnums(self.nondiff_argnums, len(args))
        nondiff, dyn = _split_nondiff(args, nondiff_argnums)
        flat_args, in_tree = api_util.flatten(dyn)
        fun, user_fwd, user_bwd = self.fun, self.fwd, self.bwd
        call, consts, out_tree = _trace_call(
            lambda *d: fun(*_merge_nondiff(nondiff, d, nondiff_argnums)), flat_args, in_tree
        )
        res_box = {}

        def flat_fwd(primals):
            p = api_util.unflatten(in_tree, primals)
            result = user_fwd(*_merge_nondiff(nondiff, p, nondiff_argnums))
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise TypeError(
                    f"Custom VJP fwd rule {function_name(user_fwd)} for function "
                    f"{function_name(fun)} must produce a pair (list or tuple of "
                    f"length two) representing primal outputs and residuals."
                )
            out, res = result
            out_leaves, tree = api_util.flatten(out)
            if tree != out_tree:
                raise TypeError(
                    f"Custom VJP fwd rule {function_name(user_fwd)} for function "
                    f"{function_name(fun)} must produce primal outputs with the "
                    f"same container (pytree) structure as the primal function "
                    f"({out_tree}), but got {tree}."
                )
            res_leaves, res_box["tree"] = api_util.flatten(res)
            return out_leaves, res_leaves

        def flat_bwd(res_leaves, cts):
            res = api_util.unflatten(res_box["tree"], res_leaves)
            ct_tree = api_util.unflatten(out_tree, cts)
            cts_in = user_bwd(*nondiff, res, ct_tree)
            if not isinstance(cts_in, (tuple, list)):
                raise TypeError(
                    f"Custom VJP bwd rule must produce a tuple, got {type(cts_in).__name__}"
                )
            if len(cts_in) != len(dyn):
                raise TypeError(
                    f"Custom VJP bwd rule {function_name(user_bwd)} must produce "
                    f"an output with the same container (pytree) structure as "
                    f"the args tuple of the primal function: {len(dyn)} "
                    f"cotangents, but got {len(cts_in)}."
                )
            flat = []
            for ct, arg in zip(cts_in, dyn):
                arg_leaves, arg_tree = api_util.flatten(arg)
                if ct is None:
                    flat.extend([None] * len(arg_leaves))
                    continue
                leaves, tree = api_util.flatten(ct)
                if tree != arg_tree:
                    raise TypeError(
                        f"Custom VJP bwd rule {function_name(user_bwd)} produced "
                        f"a cotangent with structure {tree} for an argument with "
                        f"structure {arg_tree}."
                    )
                flat.extend(leaves)
            return [None if _is_zero(c) else c for c in flat]

        flat_fwd.__name__ = function_name(user_fwd)
        flat_bwd.__name__ = function_name(user_bwd)
        outs = custom_vjp_call_p.bind(
            *consts,
            *flat_args,
            call_jaxpr=call,
            fwd=flat_fwd,
            bwd=flat_bwd,
            num_consts=len(consts),
            out_trees=None,
            symbolic_zeros=self.symbolic_zeros,
            name=function_name(fun),
        )
        return api_util.unflatten(out_tree, outs)


def _bind_kwargs(fun: Callable, args: tuple, kwargs: dict) -> tuple:
    import inspect

    bound = inspect.signature(fun).bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(bound.args) + tuple(bound.kwargs.values())


def _is_zero(t) -> bool:
    import numpy as np
    from kiln.core.ad_util import float0

    return t is None or (isinstance(t, (np.ndarray, np.generic)) and t.dtype == float0)


def _tangent_or_float0(t, p):
    if t is not None:
        return t
    aval = get_aval(p)
    if not has_tangent_space(aval.dtype):
        return float0_zeros(aval.shape)
    from kiln.primitives.base import zeros_like

    return zeros_like(p)


def _zeros_of(x):
    aval = get_aval(x)
    if not has_tangent_space(aval.dtype):
        return float0_zeros(aval.shape)
    from kiln.primitives.base import zeros_like

    return zeros_like(x)


def closure_convert(fun: Callable, *example_args) -> tuple[Callable, list]:
    """`fun` with the values it closes over made explicit: returns (converted, consts) where
    `converted(*args, *consts)` computes `fun(*args)`."""
    flat_args, in_tree = api_util.flatten(example_args)
    call, consts, out_tree = _trace_call(fun, flat_args, in_tree)

    def converted(*args_and_consts):
        from kiln.core.interpreter import eval_jaxpr

        n = len(args_and_consts) - len(consts)
        leaves, _ = api_util.flatten(tuple(args_and_consts[:n]))
        outs = eval_jaxpr(call.jaxpr, [], *args_and_consts[n:], *leaves)
        return api_util.unflatten(out_tree, outs)

    return converted, consts

"""Gradient checkpointing (rematerialization): `checkpoint` (alias `remat`), its policies and
`checkpoint_name`.

A checkpointed function computes the same values as the function it wraps. Under reverse-mode
differentiation it saves, between the forward and the backward pass, only its inputs and the
values its policy allows; the backward pass recomputes everything else from them, trading
computation for memory.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, Sequence

from kiln import api_util
from kiln.core.avals import get_aval
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr
from kiln.core.trace import current_trace
from kiln.primitives.linalg import dot_general_p
from kiln.primitives.remat import name_p, remat_p
from kiln.transforms.staging import trace_to_jaxpr

__all__ = [
    "checkpoint",
    "remat",
    "checkpoint_name",
    "checkpoint_policies",
    "everything_saveable",
    "nothing_saveable",
    "dots_saveable",
    "checkpoint_dots",
    "dots_with_no_batch_dims_saveable",
    "save_only_these_names",
    "save_anything_except_these_names",
    "save_any_names_but_these",
    "save_from_both_policies",
]


# --- policies: (prim, *in_avals, **params) -> whether the equation's outputs may be saved -----


def everything_saveable(*_, **__) -> bool:
    """Save every value: differentiation behaves as if there were no checkpoint."""
    return True


def nothing_saveable(*_, **__) -> bool:
    """Save nothing but the checkpoint's inputs: recompute every other value (the default)."""
    return False


def dots_saveable(prim, *_, **__) -> bool:
    """Save the results of matrix products (dot_general); recompute everything else."""
    return prim is dot_general_p


checkpoint_dots = dots_saveable


def dots_with_no_batch_dims_saveable(prim, *_, **params) -> bool:
    """Save the results of matrix products without batch dimensions; recompute the rest."""
    if prim is not dot_general_p:
        return False
    (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
    return not lhs_batch and not rhs_batch


checkpoint_dots_with_no_batch_dims = dots_with_no_batch_dims_saveable


def save_only_these_names(*names: str) -> Callable[..., bool]:
    """Save only the values tagged by `checkpoint_name` with one of `names`."""
    allowed = frozenset(names)

    def policy(prim, *_, **params) -> bool:
        return prim is name_p and params["name"] in allowed

    policy.__name__ = f"save_only_these_names{tuple(sorted(allowed))}"
    return policy


def save_any_names_but_these(*names: str) -> Callable[..., bool]:
    """Save the values tagged by `checkpoint_name`, except those with one of `names`."""
    excluded = frozenset(names)

    def policy(prim, *_, **params) -> bool:
        return prim is name_p and params["name"] not in excluded

    policy.__name__ = f"save_any_names_but_these{tuple(sorted(excluded))}"
    return policy


def save_anything_except_these_names(*names: str) -> Callable[..., bool]:
    """Save every value except those tagged by `checkpoint_name` with one of `names`.

    Note that the untagged value a tag was applied to is itself saveable, so the backward pass
    reads that value rather than recomputing it, as in JAX."""
    excluded = frozenset(names)

    def policy(prim, *_, **params) -> bool:
        return not (prim is name_p and params["name"] in excluded)

    policy.__name__ = f"save_anything_except_these_names{tuple(sorted(excluded))}"
    return policy


def save_from_both_policies(policy_1: Callable, policy_2: Callable) -> Callable[..., bool]:
    """Save a value when either policy saves it."""

    def policy(prim, *args, **params) -> bool:
        return bool(policy_1(prim, *args, **params)) or bool(policy_2(prim, *args, **params))

    return policy


checkpoint_policies = types.SimpleNamespace(
    everything_saveable=everything_saveable,
    nothing_saveable=nothing_saveable,
    dots_saveable=dots_saveable,
    checkpoint_dots=checkpoint_dots,
    dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=checkpoint_dots_with_no_batch_dims,
    save_anything_except_these_names=save_anything_except_these_names,
    save_any_names_but_these=save_any_names_but_these,
    save_only_these_names=save_only_these_names,
    save_from_both_policies=save_from_both_policies,
)


# --- the API -------------------------------------------------------------------------------------


def checkpoint(
    fun: Callable,
    *,
    prevent_cse: bool = True,
    policy: Callable | None = None,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
) -> Callable:
    """A version of `fun` that recomputes, rather than saves, its intermediate values when
    differentiated in reverse mode.

    Args:
      fun: the function; its arguments and results are pytrees of arrays.
      prevent_cse: when the compiler inlines the recomputing half of a differentiated
        checkpoint, pass its inputs through an optimization barrier, so common-subexpression
        elimination cannot merge the recomputation with the forward values (which would keep
        them alive and undo the checkpoint). False lets the optimizer merge them.
      policy: `policy(prim, *in_avals, **params) -> bool`, whether the outputs of an equation
        may be saved as residuals (see `checkpoint_policies`); None saves nothing but the
        inputs.
      static_argnums: positions of arguments that are not traced (Python values the function
        may branch on).
      static_argnames: names of keyword arguments that are not traced.

    Returns:
      A function with the same inputs and outputs as `fun`.
    """
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    static_argnums, static_argnames = tuple(static_argnums), tuple(static_argnames)

    @functools.wraps(fun)
    def checkpointed(*args, **kwargs):
        if current_trace() is None:
            return fun(*args, **kwargs)
        dyn_args, dyn_kwargs, static_key = api_util.split_static(
            args, kwargs, static_argnums, static_argnames
        )
        flat_args, in_tree = api_util.flatten((dyn_args, dyn_kwargs))
        box: dict = {}

        def flat_fun(*leaves):
            d_args, d_kwargs = api_util.unflatten(in_tree, list(leaves))
            full_args, full_kwargs = api_util.merge_static(d_args, d_kwargs, static_key)
            out_leaves, box["tree"] = api_util.flatten(fun(*full_args, **full_kwargs))
            return out_leaves, None

        closed, _ = trace_to_jaxpr(flat_fun, [get_aval(a) for a in flat_args])
        j = closed.jaxpr
        # Closed-over values (tracers of enclosing transformations included) become explicit
        # inputs, so differentiation and batching see them.
        body = ClosedJaxpr(Jaxpr([], j.constvars + j.invars, j.outvars, j.eqns, j.effects), [])
        outs = remat_p.bind(
            *closed.consts,
            *flat_args,
            jaxpr=body,
            prevent_cse=prevent_cse,
            differentiated=False,
            policy=policy,
        )
        return api_util.unflatten(box["tree"], outs)

    return checkpointed


remat = checkpoint


def checkpoint_name(x: Any, name: str) -> Any:
    """`x` (a pytree of arrays), tagged with `name` for the policies `save_only_these_names`,
    `save_any_names_but_these` and `save_anything_except_these_names`."""
    leaves, tree = api_util.flatten(x)
    return api_util.unflatten(tree, [name_p.bind(leaf, name=name) for leaf in leaves])


def _register_name_compilation() -> None:
    """The compiler reads a tagged value as the value itself."""
    from kiln.compiler.lower import register_lowering

    @register_lowering(name_p)
    def _name_lowering_rule(ctx, index, x, *, name):
        return x.read(index)


_register_name_compilation()

"""kiln.tree: the pytree functions under short names (kiln.tree.map, kiln.tree.leaves, ...),
as JAX's jax.tree module offers them; each is the kiln.tree_util function of the same job."""

from __future__ import annotations

from typing import Any, Callable

from kiln import tree_util as _tree_util
from kiln.tree_util import (
    tree_all as all,  # noqa: A004 (the namespace's name)
    tree_flatten as flatten,
    tree_flatten_with_path as flatten_with_path,
    tree_leaves as leaves,
    tree_leaves_with_path as leaves_with_path,
    tree_map as map,  # noqa: A004
    tree_map_with_path as map_with_path,
    tree_reduce as reduce,
    tree_structure as structure,
    tree_transpose as transpose,
    tree_unflatten as unflatten,
)

__all__ = [
    "all",
    "broadcast",
    "flatten",
    "flatten_with_path",
    "leaves",
    "leaves_with_path",
    "map",
    "map_with_path",
    "reduce",
    "reduce_associative",
    "structure",
    "transpose",
    "unflatten",
]

_NO_IDENTITY = object()


def broadcast(prefix_tree: Any, full_tree: Any, is_leaf: Callable[[Any], bool] | None = None):
    """`prefix_tree` with each of its leaves repeated over the matching subtree of
    `full_tree`, so that the result has full_tree's structure."""
    spec = _tree_util.tree_structure(prefix_tree, is_leaf)
    prefix_leaves = _tree_util.tree_leaves(prefix_tree, is_leaf)
    subtrees = spec.flatten_up_to(full_tree)
    return spec.unflatten(
        [
            _tree_util.tree_map(lambda _, leaf=leaf: leaf, sub)
            for leaf, sub in zip(prefix_leaves, subtrees)
        ]
    )


def reduce_associative(
    operation: Callable[[Any, Any], Any],
    tree: Any,
    *,
    identity: Any = _NO_IDENTITY,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Combine the leaves of `tree` with an associative `operation`, pairwise as a balanced
    tree (`identity` is the result for a tree without leaves)."""
    items = _tree_util.tree_leaves(tree, is_leaf)
    if not items:
        if identity is _NO_IDENTITY:
            raise TypeError("Must specify identity for parallel reduction of empty sequence.")
        return identity
    while len(items) > 1:
        paired = [operation(a, b) for a, b in zip(items[::2], items[1::2])]
        items = paired + ([items[-1]] if len(items) % 2 else [])
    return items[0]

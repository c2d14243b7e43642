"""Pytrees: flattening nested containers into leaves and a structure, with JAX's semantics.

This module owns kiln's optree namespace ("kiln"), the `PyTreeDef` wrapper that prints as JAX
does, node registration, key paths (`SequenceKey`, `DictKey`, ...) and `Partial`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import operator
import reprlib
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import optree

__all__ = [
    "NAMESPACE",
    "PyTreeDef",
    "Partial",
    "SequenceKey",
    "DictKey",
    "GetAttrKey",
    "FlattenedIndexKey",
    "KeyEntry",
    "KeyPath",
    "tree_flatten",
    "tree_unflatten",
    "tree_leaves",
    "tree_structure",
    "tree_map",
    "tree_reduce",
    "tree_all",
    "tree_transpose",
    "treedef_is_leaf",
    "treedef_is_strict_leaf",
    "treedef_children",
    "treedef_tuple",
    "all_leaves",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "register_dataclass",
    "register_static",
    "tree_flatten_with_path",
    "tree_leaves_with_path",
    "tree_map_with_path",
    "keystr",
    "keystr_of_leaf_paths",
]

# Every optree call in kiln passes this namespace, so registrations made here never leak into
# (or collide with) other libraries that use optree's global registry.
NAMESPACE = "kiln"

T = TypeVar("T")
Typ = TypeVar("Typ", bound=type)
Leaf = Any

_NONE_TYPE = type(None)
_NO_INITIALIZER = object()


# ---------------------------------------------------------------------------------------------
# Key path entries
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class SequenceKey:
    """Key of a child of a list or tuple: prints as `[0]`."""

    idx: int

    def __str__(self) -> str:
        return f"[{self.idx!r}]"


@dataclasses.dataclass(frozen=True, slots=True)
class DictKey:
    """Key of a child of a dict (or OrderedDict, defaultdict): prints as `['W']`."""

    key: Hashable

    def __str__(self) -> str:
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True, slots=True)
class GetAttrKey:
    """Key of an attribute child (namedtuple field, dataclass field): prints as `.name`."""

    name: str

    def __str__(self) -> str:
        return f".{self.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class FlattenedIndexKey:
    """Child position in a custom node registered without keys: prints as `[<flat index 0>]`."""

    key: int

    def __str__(self) -> str:
        return f"[<flat index {self.key}>]"


KeyEntry = Hashable
KeyPath = tuple[KeyEntry, ...]


class _KeyEntry(optree.PyTreeEntry):
    """optree path entry whose `entry` is already a kiln key (from `register_pytree_with_keys`)."""

    __slots__ = ()


def _key_of_entry(entry: optree.PyTreeEntry) -> KeyEntry:
    """Translate one optree path entry into the JAX-style key it stands for."""
    if isinstance(entry, _KeyEntry):
        return entry.entry
    # Named fields first: optree's namedtuple entries are also sequence entries.
    if isinstance(entry, (optree.NamedTupleEntry, optree.StructSequenceEntry)):
        return GetAttrKey(entry.field)
    if isinstance(entry, optree.SequenceEntry):
        return SequenceKey(entry.entry)
    if isinstance(entry, optree.MappingEntry):
        return DictKey(entry.entry)
    if isinstance(entry, optree.GetAttrEntry):
        return GetAttrKey(entry.name)
    return FlattenedIndexKey(entry.entry)


def _simple_key_str(key: Any) -> str:
    if isinstance(key, SequenceKey):
        return str(key.idx)
    if isinstance(key, DictKey):
        return str(key.key)
    if isinstance(key, GetAttrKey):
        return key.name
    if isinstance(key, FlattenedIndexKey):
        return str(key.key)
    return str(key)


def keystr(keys: KeyPath, *, simple: bool = False, separator: str = "") -> str:
    """Render a key path the way JAX does, e.g. `[0]['W']` or `.params['b']`.

    Args:
      keys: a tuple of key entries, as produced by `tree_flatten_with_path`.
      simple: render each key bare (`0`, `W`, `params`) instead of with brackets and dots.
      separator: string placed between keys.
    """
    render = _simple_key_str if simple else str
    return separator.join(map(render, keys))


# ---------------------------------------------------------------------------------------------
# PyTreeDef
# ---------------------------------------------------------------------------------------------


def _repr_node(node_type: type, node_data: Any, children: tuple[str, ...]) -> str:
    """Render one node, given its already-rendered children, in JAX's PyTreeDef spelling."""
    joined = ", ".join(children)
    if node_type is tuple:
        return f"({joined},)" if len(children) == 1 else f"({joined})"
    if node_type is list:
        return f"[{joined}]"
    if node_type is dict:
        return "{" + ", ".join(f"{key!r}: {child}" for key, child in zip(node_data, children)) + "}"
    if node_type is _NONE_TYPE:
        return "None"
    # JAX has no native kinds beyond the four above, so everything else is a "CustomNode" whose
    # bracket shows the aux data JAX would store (namedtuples show their class name).
    if node_data is node_type and optree.is_namedtuple_class(node_type):
        name, data = "namedtuple", node_type.__name__
    else:
        name, data = node_type.__name__, _jax_node_data(node_type, node_data)
    return f"CustomNode({name}[{data}], [{joined}])"


def _jax_node_data(node_type: type, node_data: Any) -> Any:
    """Convert optree's node data for a built-in node into what JAX's registration stores."""
    if node_type is collections.OrderedDict:
        return tuple(node_data)
    if node_type is collections.defaultdict:
        default_factory, keys = node_data
        return (default_factory, tuple(keys))
    return node_data


class PyTreeDef:
    """The structure of a pytree: a thin, hashable wrapper around optree's `PyTreeSpec`.

    Two treedefs are equal iff their specs are. `spec` is public so hot paths (jit dispatch) can
    flatten with optree directly and wrap only when a `PyTreeDef` must be handed out.
    """

    __slots__ = ("spec", "_hash")

    def __init__(self, spec: optree.PyTreeSpec) -> None:
        self.spec = spec

    @property
    def num_leaves(self) -> int:
        """Number of leaves in the structure."""
        return self.spec.num_leaves

    @property
    def num_nodes(self) -> int:
        """Number of nodes (leaves, None, and containers) in the structure."""
        return self.spec.num_nodes

    def unflatten(self, leaves: Iterable[Leaf]) -> Any:
        """Rebuild a pytree of this structure from its leaves, in flatten order."""
        try:
            return self.spec.unflatten(leaves)
        except ValueError as error:
            message = str(error)
            if not message.startswith(("Too few leaves", "Too many leaves")):
                raise
            message = message.replace("PyTreeSpec", "PyTreeDef")
            raise ValueError(f"{message} Structure: {self!r}.") from None

    def children(self) -> list[PyTreeDef]:
        """Treedefs of the root's immediate children (empty for a leaf or None)."""
        if self.spec.is_leaf():
            return []
        return [PyTreeDef(child) for child in self.spec.children()]

    def flatten_up_to(self, tree: Any) -> list[Any]:
        """Flatten `tree` down to this structure, returning one subtree per leaf of `self`.

        Raises:
          ValueError: `tree` does not have this structure as a prefix; the message names the key
            path of the first difference.
        """
        try:
            return self.spec.flatten_up_to(tree)
        except ValueError as error:
            raise ValueError(_mismatch_message(self.spec, tree, str(error))) from None

    def node_data(self) -> tuple[type, Any] | None:
        """The root's `(type, aux data)` as JAX reports it, or None for a leaf.

        Dicts give their sorted keys; tuples, lists, None and namedtuples give None.
        """
        if self.spec.is_leaf():
            return None
        one_level = self.spec.one_level()
        node_type, node_data = one_level.walk(
            itertools.repeat(None, one_level.num_leaves),
            lambda node_type, node_data, children: (node_type, node_data),
            None,
        )
        if node_type is dict:
            return dict, list(node_data)
        if node_type in (tuple, list, _NONE_TYPE):
            return node_type, None
        if node_data is node_type and optree.is_namedtuple_class(node_type):
            return node_type, None
        return node_type, _jax_node_data(node_type, node_data)

    def compose(self, inner: PyTreeDef) -> PyTreeDef:
        """The structure obtained by replacing every leaf of `self` with `inner`."""
        return PyTreeDef(self.spec.compose(inner.spec))

    def __repr__(self) -> str:
        body = self.spec.walk(itertools.repeat("*", self.spec.num_leaves), _repr_node, None)
        return f"PyTreeDef({body})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return self.spec == other.spec

    def __hash__(self) -> int:
        # Hashing a spec walks the whole structure; jit caches hash the same treedef repeatedly.
        try:
            return self._hash
        except AttributeError:
            self._hash = hash(self.spec)
            return self._hash

    def __reduce__(self) -> tuple[type, tuple[optree.PyTreeSpec]]:
        return PyTreeDef, (self.spec,)


# ---------------------------------------------------------------------------------------------
# Structure-mismatch diagnosis (error path only)
# ---------------------------------------------------------------------------------------------


def _one_level_structure(tree: Any) -> optree.PyTreeSpec:
    """The structure of `tree`'s root node with every child (None included) as a leaf."""
    seen_root = False

    def is_leaf(_: Any) -> bool:
        nonlocal seen_root
        if seen_root:
            return True
        seen_root = True
        return False

    return optree.tree_structure(tree, is_leaf=is_leaf, namespace=NAMESPACE)


def _first_mismatch(
    spec: optree.PyTreeSpec, tree: Any, path: KeyPath
) -> tuple[KeyPath, optree.PyTreeSpec, Any] | None:
    """Depth-first search for the first node where `tree` departs from the prefix `spec`.

    Returns the key path, the expected sub-structure there, and the offending subtree.
    """
    if spec.is_leaf():
        return None  # a leaf of the prefix matches any subtree
    expected_root = spec.one_level()
    if expected_root != _one_level_structure(tree):
        return path, spec, tree
    children = optree.tree_flatten_one_level(tree, namespace=NAMESPACE).children
    keys = [_key_of_entry(accessor[0]) for accessor in expected_root.accessors()]
    for key, child_spec, child in zip(keys, spec.children(), children):
        mismatch = _first_mismatch(child_spec, child, (*path, key))
        if mismatch is not None:
            return mismatch
    return None


def _structure_text(spec: optree.PyTreeSpec, limit: int = 200) -> str:
    """A spec's JAX-style spelling without the `PyTreeDef(...)` wrapper, cut to `limit` chars."""
    text = repr(PyTreeDef(spec))[len("PyTreeDef(") : -1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _mismatch_message(spec: optree.PyTreeSpec, tree: Any, fallback: str) -> str:
    """Explain why `tree` does not have `spec` as a prefix, naming the key path."""
    mismatch = _first_mismatch(spec, tree, ())
    if mismatch is None:
        return f"pytree structure mismatch: {fallback}"
    path, expected, subtree = mismatch
    found = optree.tree_structure(subtree, namespace=NAMESPACE)
    where = f"key path {keystr(path)}" if path else "the root"
    expected_text, found_text = _structure_text(expected), _structure_text(found)
    message = (
        f"pytree structure mismatch at {where}: expected {expected_text}, "
        f"got {found_text} (value: {reprlib.repr(subtree)})."
    )
    if (
        found.type is not None
        and found.type is not expected.type
        and found.type.__name__ == expected.type.__name__
    ):
        # Same spelling but different types: two distinct classes share a name (e.g. a
        # namedtuple defined twice), so name them by identity.
        message += (
            f" The node types are distinct classes with the same name: expected "
            f"{expected.type!r} (id {id(expected.type):#x}), got {found.type!r} "
            f"(id {id(found.type):#x})."
        )
    if expected.type is _NONE_TYPE:
        message += (
            " None is an empty pytree, not a leaf; to map over it, pass "
            "is_leaf=lambda x: x is None."
        )
    return message + f" Full expected structure: {PyTreeDef(spec)!r}."


# ---------------------------------------------------------------------------------------------
# Flattening and mapping
# ---------------------------------------------------------------------------------------------


def tree_flatten(
    tree: Any, is_leaf: Callable[[Any], bool] | None = None
) -> tuple[list[Leaf], PyTreeDef]:
    """Flatten `tree` into its leaves (in JAX's order: dict keys sorted) and its structure.

    Args:
      tree: a pytree. None is an empty subtree, not a leaf.
      is_leaf: optional predicate; a node for which it returns True is kept whole as a leaf.

    Where optree's built-ins differ from JAX: `collections.deque` and structseqs are containers
    (JAX: leaves); dict keys that cannot be sorted keep insertion order (JAX: ValueError); and
    unflatten rebuilds a dict in the key order of the dict it was flattened from (JAX: sorted),
    which leaves equality unchanged.
    """
    leaves, spec = optree.tree_flatten(tree, is_leaf, namespace=NAMESPACE)
    return leaves, PyTreeDef(spec)


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Leaf]) -> Any:
    """Rebuild a pytree with structure `treedef` from `leaves`."""
    return treedef.unflatten(leaves)


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Leaf]:
    """The leaves of `tree`, in flatten order."""
    return optree.tree_leaves(tree, is_leaf, namespace=NAMESPACE)


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> PyTreeDef:
    """The structure of `tree`."""
    return PyTreeDef(optree.tree_structure(tree, is_leaf, namespace=NAMESPACE))


def _flatten_rest(spec: optree.PyTreeSpec, rest: Sequence[Any], caller: str) -> list[list[Any]]:
    """Flatten each tree of `rest` up to `spec`, naming the offending argument on mismatch."""
    flat = []
    for position, other in enumerate(rest):
        try:
            flat.append(spec.flatten_up_to(other))
        except ValueError as error:
            detail = _mismatch_message(spec, other, str(error))
            raise ValueError(
                f"{caller}: rest[{position}] (tree argument {position + 2}) does not "
                f"match the structure of the first tree; {detail}"
            ) from None
    return flat


def tree_map(
    f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """Apply `f` leafwise: `f(x, *xs)` for each leaf `x` of `tree` and matching entries of `rest`.

    Args:
      f: function of `1 + len(rest)` arguments.
      tree: the pytree whose structure the result has.
      *rest: pytrees with the structure of `tree` (or with `tree` as a prefix: a leaf of `tree`
        then matches a whole subtree).
      is_leaf: optional predicate marking extra leaves of `tree`.

    Raises:
      ValueError: a tree in `rest` does not match; the message gives the key path.
    """
    leaves, spec = optree.tree_flatten(tree, is_leaf, namespace=NAMESPACE)
    if not rest:
        return spec.unflatten(map(f, leaves))
    return spec.unflatten(map(f, leaves, *_flatten_rest(spec, rest, "tree_map")))


def tree_reduce(
    function: Callable[[T, Any], T],
    tree: Any,
    initializer: Any = _NO_INITIALIZER,
    is_leaf: Callable[[Any], bool] | None = None,
) -> T:
    """Fold `function` over the leaves of `tree`, left to right, as `functools.reduce` does."""
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _NO_INITIALIZER:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_all(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """True iff every leaf of `tree` is truthy (True for a tree with no leaves)."""
    return all(tree_leaves(tree, is_leaf))


def tree_transpose(
    outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None, pytree_to_transpose: Any
) -> Any:
    """Turn an outer-of-inner pytree into an inner-of-outer one.

    Args:
      outer_treedef: structure of the outer level.
      inner_treedef: structure of each inner subtree; None infers it from the first one.
      pytree_to_transpose: a pytree with structure `outer_treedef.compose(inner_treedef)`.

    Raises:
      TypeError: the leaf count does not match the two structures.
    """
    leaves, treedef = tree_flatten(pytree_to_transpose)
    if inner_treedef is None:
        inner_treedef = tree_structure(outer_treedef.flatten_up_to(pytree_to_transpose)[0])
    inner_size, outer_size = inner_treedef.num_leaves, outer_treedef.num_leaves
    if treedef.num_leaves != inner_size * outer_size:
        raise TypeError(f"Mismatch\n{treedef}\n != \n{outer_treedef.compose(inner_treedef)}")
    leaf_iter = iter(leaves)
    rows = [[next(leaf_iter) for _ in range(inner_size)] for _ in range(outer_size)]
    return inner_treedef.unflatten(outer_treedef.unflatten(column) for column in zip(*rows))


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """True if `treedef` is a single node: a leaf, or None (an empty tree)."""
    return treedef.num_nodes == 1


def treedef_is_strict_leaf(treedef: PyTreeDef) -> bool:
    """True only if `treedef` is exactly one leaf."""
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """Treedefs of the immediate children of `treedef`'s root."""
    return treedef.children()


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
    """The treedef of a tuple whose elements have the given structures."""
    specs = [treedef.spec for treedef in treedefs]
    return PyTreeDef(optree.treespec_tuple(specs, namespace=NAMESPACE))


def all_leaves(iterable: Iterable[Any], is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """True if no element of `iterable` is a pytree node (None counts as a node)."""
    return optree.all_leaves(iterable, is_leaf, namespace=NAMESPACE)


# ---------------------------------------------------------------------------------------------
# Key paths
# ---------------------------------------------------------------------------------------------


def _leaf_paths(spec: optree.PyTreeSpec) -> list[KeyPath]:
    return [tuple(map(_key_of_entry, accessor)) for accessor in spec.accessors()]


def tree_flatten_with_path(
    tree: Any, is_leaf: Callable[[Any], bool] | None = None
) -> tuple[list[tuple[KeyPath, Leaf]], PyTreeDef]:
    """Like `tree_flatten`, but each leaf comes paired with its key path."""
    leaves, spec = optree.tree_flatten(tree, is_leaf, namespace=NAMESPACE)
    return list(zip(_leaf_paths(spec), leaves)), PyTreeDef(spec)


def tree_leaves_with_path(
    tree: Any, is_leaf: Callable[[Any], bool] | None = None
) -> list[tuple[KeyPath, Leaf]]:
    """The `(key path, leaf)` pairs of `tree`, in flatten order."""
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(
    f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """Like `tree_map`, but `f` receives each leaf's key path first: `f(path, x, *xs)`."""
    leaves, spec = optree.tree_flatten(tree, is_leaf, namespace=NAMESPACE)
    flat_rest = _flatten_rest(spec, rest, "tree_map_with_path")
    return spec.unflatten(map(f, _leaf_paths(spec), leaves, *flat_rest))


def keystr_of_leaf_paths(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[str]:
    """Each leaf's key path as a string, in flatten order, e.g. `["[0]['W']", "[0]['b']"]`.

    jit uses these to name the user's arguments in error messages.
    """
    spec = optree.tree_structure(tree, is_leaf, namespace=NAMESPACE)
    return [keystr(path) for path in _leaf_paths(spec)]


# ---------------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------------


def register_pytree_node(
    nodetype: type[T],
    flatten_func: Callable[[T], tuple[Iterable[Any], Hashable]],
    unflatten_func: Callable[[Hashable, Iterable[Any]], T],
) -> None:
    """Make `nodetype` a pytree node (JAX's convention).

    Args:
      nodetype: the class to treat as an internal node.
      flatten_func: `x -> (children, aux_data)`; children are flattened further, aux_data is
        hashable static data kept in the treedef.
      unflatten_func: `(aux_data, children) -> x`.

    Key paths of its children are `FlattenedIndexKey(i)`; use `register_pytree_with_keys` to
    name them.
    """
    optree.register_pytree_node(
        nodetype,
        flatten_func,
        unflatten_func,
        path_entry_type=optree.FlattenedEntry,
        namespace=NAMESPACE,
    )


def register_pytree_node_class(cls: Typ) -> Typ:
    """Class decorator: register `cls` using its `tree_flatten` method and `tree_unflatten`
    classmethod."""
    register_pytree_node(cls, operator.methodcaller("tree_flatten"), cls.tree_unflatten)
    return cls


def register_pytree_with_keys(
    nodetype: type[T],
    flatten_with_keys: Callable[[T], tuple[Iterable[tuple[KeyEntry, Any]], Hashable]],
    unflatten_func: Callable[[Hashable, Iterable[Any]], T],
    flatten_func: Callable[[T], tuple[Iterable[Any], Hashable]] | None = None,
) -> None:
    """Make `nodetype` a pytree node whose children carry keys for key paths.

    Args:
      nodetype: the class to treat as an internal node.
      flatten_with_keys: `x -> (((key, child), ...), aux_data)`; keys are usually `GetAttrKey`,
        `DictKey` or `SequenceKey`.
      unflatten_func: `(aux_data, children) -> x`.
      flatten_func: accepted for JAX compatibility; unused, since optree keeps one flatten
        function per type and the keyed one serves both purposes.
    """
    del flatten_func

    def flatten_with_entries(node: T) -> tuple[tuple[Any, ...], Hashable, tuple[Any, ...]]:
        key_children, aux_data = flatten_with_keys(node)
        key_children = tuple(key_children)
        keys = tuple(key for key, _ in key_children)
        children = tuple(child for _, child in key_children)
        return children, aux_data, keys

    optree.register_pytree_node(
        nodetype,
        flatten_with_entries,
        unflatten_func,
        path_entry_type=_KeyEntry,
        namespace=NAMESPACE,
    )


def register_pytree_with_keys_class(cls: Typ) -> Typ:
    """Class decorator: register `cls` using its `tree_flatten_with_keys` method and
    `tree_unflatten` classmethod."""
    register_pytree_with_keys(
        cls, operator.methodcaller("tree_flatten_with_keys"), cls.tree_unflatten
    )
    return cls


def _attribute_tuple_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A fast `x -> tuple(getattr(x, name) for name in names)`."""
    if len(names) >= 2:
        return operator.attrgetter(*names)  # already returns a tuple for two or more names
    if len(names) == 1:
        getter = operator.attrgetter(names[0])
        return lambda obj: (getter(obj),)
    return lambda obj: ()


def _dataclass_field_split(
    nodetype: type,
    data_fields: Sequence[str] | None,
    meta_fields: Sequence[str] | None,
    drop_fields: Sequence[str],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Fill in omitted field lists from the dataclass and check the split covers `__init__`."""
    is_dataclass = dataclasses.is_dataclass(nodetype)
    if (data_fields is None or meta_fields is None) and not is_dataclass:
        raise TypeError(
            f"register_dataclass: {nodetype.__name__} is not a dataclass, so "
            "data_fields and meta_fields must both be given."
        )
    init_fields = (
        [
            field
            for field in dataclasses.fields(nodetype)
            if field.init and field.name not in drop_fields
        ]
        if is_dataclass
        else []
    )
    if meta_fields is None:
        meta_fields = [
            field.name
            for field in init_fields
            if field.metadata.get("static", False) and field.name not in (data_fields or ())
        ]
    if data_fields is None:
        data_fields = [field.name for field in init_fields if field.name not in meta_fields]
    data_fields, meta_fields = tuple(data_fields), tuple(meta_fields)
    if overlap := set(data_fields) & set(meta_fields):
        raise ValueError(
            f"register_dataclass: fields {sorted(overlap)} are listed as both data and meta fields."
        )
    if is_dataclass:
        names = {field.name for field in init_fields}
        given = {*data_fields, *meta_fields}
        if given != names:
            message = (
                "register_dataclass: data_fields and meta_fields must together list "
                f"exactly the __init__ fields of {nodetype.__name__}."
            )
            if missing := names - given:
                message += f" Missing: {sorted(missing)} (add them to drop_fields to skip them)."
            if unexpected := given - names:
                message += f" Unexpected: {sorted(unexpected)}."
            raise ValueError(message)
    return data_fields, meta_fields


def register_dataclass(
    nodetype: Typ | None = None,
    data_fields: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
    drop_fields: Sequence[str] = (),
) -> Any:
    """Register a dataclass-like type as a pytree node whose children are its data fields.

    Usable as `register_dataclass(cls, ...)`, as a bare `@register_dataclass`, or as
    `@register_dataclass(data_fields=..., meta_fields=...)`.

    Args:
      nodetype: the class; it is rebuilt with `nodetype(**fields)`.
      data_fields: fields holding pytrees (arrays). Omitted: every `__init__` field not marked
        static.
      meta_fields: static, hashable fields kept in the treedef. Omitted: the fields declared with
        `dataclasses.field(metadata=dict(static=True))`.
      drop_fields: `__init__` fields that are neither (they must have defaults).

    Returns:
      `nodetype` itself (or a decorator when `nodetype` is omitted). Children's key paths are
      `GetAttrKey(field)`.
    """
    if nodetype is None:
        return functools.partial(
            register_dataclass,
            data_fields=data_fields,
            meta_fields=meta_fields,
            drop_fields=drop_fields,
        )
    data_names, meta_names = _dataclass_field_split(nodetype, data_fields, meta_fields, drop_fields)
    get_data = _attribute_tuple_getter(data_names)
    get_meta = _attribute_tuple_getter(meta_names)

    def flatten(node: Any) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[str, ...]]:
        return get_data(node), get_meta(node), data_names

    def unflatten(meta: tuple[Any, ...], data: Iterable[Any]) -> Any:
        return nodetype(**dict(zip(meta_names, meta)), **dict(zip(data_names, data)))

    optree.register_pytree_node(
        nodetype, flatten, unflatten, path_entry_type=optree.GetAttrEntry, namespace=NAMESPACE
    )
    return nodetype


def register_static(cls: Typ) -> Typ:
    """Register `cls` as a pytree with no leaves: the instance itself is the (hashable) aux data,
    so jit treats it as static."""
    register_pytree_with_keys(cls, lambda node: ((), node), lambda node, _: node)
    return cls


# ---------------------------------------------------------------------------------------------
# Partial
# ---------------------------------------------------------------------------------------------


class _HashableCallableShim:
    """Stands in for a `functools.partial` passed to `Partial`, delegating call, hash and eq."""

    def __init__(self, fun: Callable[..., Any]) -> None:
        self.fun = fun

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fun(*args, **kwargs)

    def __hash__(self) -> int:
        return hash(self.fun)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _HashableCallableShim):
            return self.fun == other.fun
        return self.fun == other

    def __repr__(self) -> str:
        return f"_HashableCallableShim({self.fun!r})"


class Partial(functools.partial):
    """`functools.partial` that is a pytree: the bound args and keywords are its children and the
    function is static aux data, so a `Partial` can be passed into transformed functions."""

    def __new__(cls, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Partial:
        # functools.partial merges a partial `func` into the new one, which would move its bound
        # arguments into our children; boxing it keeps exactly `args`/`kwargs` as the pytree.
        if isinstance(func, functools.partial):
            original = func
            func = _HashableCallableShim(original)
            out = super().__new__(cls, func, *args, **kwargs)
            func.func, func.args, func.keywords = original.func, original.args, original.keywords
            return out
        return super().__new__(cls, func, *args, **kwargs)


register_pytree_node(
    Partial,
    lambda partial_: ((partial_.args, partial_.keywords), partial_.func),
    lambda func, children: Partial(func, *children[0], **children[1]),
)

"""Tests for kiln.tree_util: pytree flattening, PyTreeDef reprs, registration, key paths."""

import collections
import dataclasses
import functools
import operator
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import tree_util

Point = collections.namedtuple("Point", ["x", "y"])


# ---------------------------------------------------------------------------------------------
# An independent reference: JAX's rules written out directly as recursion.
# ---------------------------------------------------------------------------------------------


def reference_leaves_with_paths(tree, path=""):
    """(path string, leaf) pairs by JAX's rules: dict keys sorted, None empty, fields by name."""
    if tree is None:
        return []
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return [
            pair
            for name in tree._fields
            for pair in reference_leaves_with_paths(getattr(tree, name), f"{path}.{name}")
        ]
    if isinstance(tree, (list, tuple)):
        return [
            pair
            for i, child in enumerate(tree)
            for pair in reference_leaves_with_paths(child, f"{path}[{i}]")
        ]
    if isinstance(tree, dict):
        return [
            pair
            for key in sorted(tree)
            for pair in reference_leaves_with_paths(tree[key], f"{path}[{key!r}]")
        ]
    return [(path, tree)]


def reference_map(f, tree):
    if tree is None:
        return None
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(reference_map(f, child) for child in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(reference_map(f, child) for child in tree)
    if isinstance(tree, dict):
        return {key: reference_map(f, value) for key, value in tree.items()}
    return f(tree)


keys = st.text(alphabet="abcxyzW", min_size=1, max_size=3)
pytrees = st.recursive(
    st.integers(-1000, 1000) | st.none(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(keys, children, max_size=4)
        | st.tuples(children, children).map(lambda pair: Point(*pair))
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(pytrees)
def test_flatten_round_trip_matches_reference(tree):
    leaves, treedef = tree_util.tree_flatten(tree)
    reference = reference_leaves_with_paths(tree)
    assert leaves == [leaf for _, leaf in reference]
    assert treedef.num_leaves == len(reference)
    assert tree_util.tree_unflatten(treedef, leaves) == tree
    assert tree_util.keystr_of_leaf_paths(tree) == [path for path, _ in reference]
    assert [tree_util.keystr(path) for path, _ in tree_util.tree_leaves_with_path(tree)] == [
        path for path, _ in reference
    ]


@settings(max_examples=100, deadline=None)
@given(pytrees)
def test_tree_map_matches_reference_and_keeps_structure(tree):
    mapped = tree_util.tree_map(lambda x: x * 3 + 1, tree)
    assert mapped == reference_map(lambda x: x * 3 + 1, tree)
    assert tree_util.tree_structure(mapped) == tree_util.tree_structure(tree)
    assert hash(tree_util.tree_structure(mapped)) == hash(tree_util.tree_structure(tree))
    summed = tree_util.tree_map(operator.add, tree, mapped)
    assert summed == reference_map(lambda x: x * 4 + 1, tree)


# ---------------------------------------------------------------------------------------------
# PyTreeDef printing, equality, methods
# ---------------------------------------------------------------------------------------------

REPR_CASES = [
    ([{"W": 1, "b": 2}, {"W": 3, "b": 4}], "PyTreeDef([{'W': *, 'b': *}, {'W': *, 'b': *}])"),
    ((1, None), "PyTreeDef((*, None))"),
    (1, "PyTreeDef(*)"),
    (None, "PyTreeDef(None)"),
    ((1,), "PyTreeDef((*,))"),
    ((), "PyTreeDef(())"),
    ([], "PyTreeDef([])"),
    ({}, "PyTreeDef({})"),
    ({"b": 1, "a": (2, [3])}, "PyTreeDef({'a': (*, [*]), 'b': *})"),
    ({1: None, 0: 2}, "PyTreeDef({0: *, 1: None})"),
    (Point(1, (2, 3)), "PyTreeDef(CustomNode(namedtuple[Point], [*, (*, *)]))"),
    (
        collections.OrderedDict([("b", 1), ("a", 2)]),
        "PyTreeDef(CustomNode(OrderedDict[('b', 'a')], [*, *]))",
    ),
    (
        collections.defaultdict(list, {"b": 1, "a": 2}),
        "PyTreeDef(CustomNode(defaultdict[(<class 'list'>, ('a', 'b'))], [*, *]))",
    ),
]


@pytest.mark.parametrize("tree,expected", REPR_CASES, ids=[case[1] for case in REPR_CASES])
def test_treedef_repr(tree, expected):
    treedef = tree_util.tree_structure(tree)
    assert repr(treedef) == expected
    assert str(treedef) == expected


def test_treedef_counts_and_children():
    treedef = tree_util.tree_structure([{"W": 1, "b": 2}, {"W": 3, "b": 4}])
    assert treedef.num_leaves == 4
    assert treedef.num_nodes == 7  # 4 leaves + 2 dicts + 1 list
    assert [repr(child) for child in treedef.children()] == [
        "PyTreeDef({'W': *, 'b': *})",
        "PyTreeDef({'W': *, 'b': *})",
    ]
    assert tree_util.treedef_children(treedef) == treedef.children()
    assert tree_util.tree_structure(7).children() == []
    assert tree_util.tree_structure((1, None)).num_nodes == 3


def test_treedef_node_data():
    assert tree_util.tree_structure(1).node_data() is None
    assert tree_util.tree_structure({"b": 1, "a": 2}).node_data() == (dict, ["a", "b"])
    assert tree_util.tree_structure((1, 2)).node_data() == (tuple, None)
    assert tree_util.tree_structure([1]).node_data() == (list, None)
    assert tree_util.tree_structure(None).node_data() == (type(None), None)
    assert tree_util.tree_structure(Point(1, 2)).node_data() == (Point, None)
    ordered = collections.OrderedDict([("z", 1), ("a", 2)])
    assert tree_util.tree_structure(ordered).node_data() == (collections.OrderedDict, ("z", "a"))


def test_treedef_equality_and_hash():
    a = tree_util.tree_structure({"x": 1, "y": (2, 3)})
    b = tree_util.tree_structure({"y": (20, 30), "x": 10})  # other insertion order, same keys
    c = tree_util.tree_structure({"x": 1, "y": [2, 3]})
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert len({a, b, c}) == 2
    assert (a == a.spec) is False  # a PyTreeDef only equals PyTreeDefs
    assert a.spec == b.spec
    assert tree_util.PyTreeDef(a.spec) == a
    assert tree_util.tree_structure([None]) != tree_util.tree_structure([1])


def test_treedef_pickles():
    treedef = tree_util.tree_structure({"a": (1, None), "b": [2]})
    assert pickle.loads(pickle.dumps(treedef)) == treedef


def test_unflatten_wrong_leaf_count():
    treedef = tree_util.tree_structure([1, 2])
    with pytest.raises(ValueError, match=r"Too few leaves for PyTreeDef.*PyTreeDef\(\[\*, \*\]\)"):
        treedef.unflatten([1])
    with pytest.raises(ValueError, match="Too many leaves"):
        treedef.unflatten([1, 2, 3])


def test_compose_and_treedef_tuple():
    outer = tree_util.tree_structure([0, 0])
    inner = tree_util.tree_structure((0, 0))
    assert outer.compose(inner) == tree_util.tree_structure([(1, 2), (3, 4)])
    pair = tree_util.treedef_tuple([outer, inner])
    assert pair == tree_util.tree_structure(([1, 2], (3, 4)))


# ---------------------------------------------------------------------------------------------
# None and dict ordering
# ---------------------------------------------------------------------------------------------


def test_none_is_an_empty_subtree():
    assert tree_util.tree_leaves([None, 1, (None,)]) == [1]
    assert tree_util.tree_leaves(None) == []
    none_def = tree_util.tree_structure(None)
    assert none_def.num_leaves == 0 and none_def.num_nodes == 1
    assert tree_util.treedef_is_leaf(none_def)
    assert not tree_util.treedef_is_strict_leaf(none_def)
    assert tree_util.treedef_is_strict_leaf(tree_util.tree_structure(3))
    assert not tree_util.treedef_is_leaf(tree_util.tree_structure([3]))
    assert tree_util.tree_map(lambda x: x + 1, (1, None, [2])) == (2, None, [3])
    # Made a leaf explicitly, None reaches the function.
    assert tree_util.tree_map(
        lambda x: "none" if x is None else x, [None, 1], is_leaf=lambda x: x is None
    ) == ["none", 1]
    assert not tree_util.all_leaves([1, None])
    assert tree_util.all_leaves([1, "a", 2.0])
    assert not tree_util.all_leaves([1, [2]])


def test_dict_keys_are_sorted():
    tree = {"b": 1, "a": 2, "c": {"z": 3, "y": 4}}
    assert tree_util.tree_leaves(tree) == [2, 1, 4, 3]
    assert tree_util.keystr_of_leaf_paths(tree) == ["['a']", "['b']", "['c']['y']", "['c']['z']"]
    leaves, treedef = tree_util.tree_flatten(tree)
    assert tree_util.tree_unflatten(treedef, [10, 20, 30, 40]) == {
        "a": 10,
        "b": 20,
        "c": {"y": 30, "z": 40},
    }


def test_ordered_dict_keeps_insertion_order_and_defaultdict_sorts():
    ordered = collections.OrderedDict([("b", 1), ("a", 2)])
    assert tree_util.tree_leaves(ordered) == [1, 2]
    rebuilt = tree_util.tree_map(lambda x: x * 10, ordered)
    assert type(rebuilt) is collections.OrderedDict and list(rebuilt.items()) == [
        ("b", 10),
        ("a", 20),
    ]
    default = collections.defaultdict(list, {"b": 1, "a": 2})
    assert tree_util.tree_leaves(default) == [2, 1]
    rebuilt = tree_util.tree_map(lambda x: x, default)
    assert type(rebuilt) is collections.defaultdict and rebuilt.default_factory is list


# ---------------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------------


def test_register_pytree_node_calls_flatten_and_unflatten():
    calls = []

    class Box:
        def __init__(self, a, b, tag):
            self.a, self.b, self.tag = a, b, tag

    def flatten(box):
        calls.append(("flatten", box))
        return (box.a, box.b), box.tag

    def unflatten(tag, children):
        calls.append(("unflatten", tag, tuple(children)))
        a, b = children
        return Box(a, b, tag)

    tree_util.register_pytree_node(Box, flatten, unflatten)
    box = Box(1, [2, 3], "t")
    leaves, treedef = tree_util.tree_flatten(box)
    assert leaves == [1, 2, 3]
    assert calls == [("flatten", box)]
    assert repr(treedef) == "PyTreeDef(CustomNode(Box[t], [*, [*, *]]))"
    assert treedef.node_data() == (Box, "t")

    rebuilt = tree_util.tree_unflatten(treedef, [10, 20, 30])
    assert calls[-1] == ("unflatten", "t", (10, [20, 30]))
    assert (rebuilt.a, rebuilt.b, rebuilt.tag) == (10, [20, 30], "t")
    assert tree_util.keystr_of_leaf_paths(box) == [
        "[<flat index 0>]",
        "[<flat index 1>][0]",
        "[<flat index 1>][1]",
    ]
    # Aux data is part of the structure.
    assert tree_util.tree_structure(Box(1, [2, 3], "u")) != treedef


def test_register_pytree_node_class():
    @tree_util.register_pytree_node_class
    class Pair:
        def __init__(self, first, second):
            self.first, self.second = first, second

        def tree_flatten(self):
            return (self.first, self.second), None

        @classmethod
        def tree_unflatten(cls, aux_data, children):
            assert aux_data is None
            return cls(*children)

    doubled = tree_util.tree_map(lambda x: 2 * x, Pair(1, {"k": 2}))
    assert isinstance(doubled, Pair) and (doubled.first, doubled.second) == (2, {"k": 4})
    assert repr(tree_util.tree_structure(Pair(1, 2))) == "PyTreeDef(CustomNode(Pair[None], [*, *]))"


def test_register_pytree_with_keys_gives_named_paths():
    class Params:
        def __init__(self, weight, bias):
            self.weight, self.bias = weight, bias

    tree_util.register_pytree_with_keys(
        Params,
        lambda p: (
            ((tree_util.GetAttrKey("weight"), p.weight), (tree_util.GetAttrKey("bias"), p.bias)),
            None,
        ),
        lambda aux, children: Params(*children),
    )
    tree = [Params(1, (2, 3))]
    assert tree_util.keystr_of_leaf_paths(tree) == ["[0].weight", "[0].bias[0]", "[0].bias[1]"]
    paths = [path for path, _ in tree_util.tree_leaves_with_path(tree)]
    assert paths[1] == (
        tree_util.SequenceKey(0),
        tree_util.GetAttrKey("bias"),
        tree_util.SequenceKey(0),
    )
    rebuilt = tree_util.tree_map(lambda x: -x, tree)
    assert (rebuilt[0].weight, rebuilt[0].bias) == (-1, (-2, -3))


def test_register_pytree_with_keys_class():
    @tree_util.register_pytree_with_keys_class
    class Table:
        def __init__(self, rows):
            self.rows = rows

        def tree_flatten_with_keys(self):
            return tuple((tree_util.DictKey(k), v) for k, v in sorted(self.rows.items())), tuple(
                sorted(self.rows)
            )

        @classmethod
        def tree_unflatten(cls, keys, children):
            return cls(dict(zip(keys, children)))

    table = Table({"q": 1, "p": 2})
    assert tree_util.tree_leaves(table) == [2, 1]
    assert tree_util.keystr_of_leaf_paths(table) == ["['p']", "['q']"]
    assert tree_util.tree_map(lambda x: x + 1, table).rows == {"p": 3, "q": 2}


def test_register_dataclass_explicit_fields():
    @dataclasses.dataclass
    class Layer:
        w: object
        b: object
        activation: str

    assert (
        tree_util.register_dataclass(Layer, data_fields=["w", "b"], meta_fields=["activation"])
        is Layer
    )
    layer = Layer(w=[1, 2], b=3, activation="relu")
    leaves, treedef = tree_util.tree_flatten(layer)
    assert leaves == [1, 2, 3]
    assert repr(treedef) == "PyTreeDef(CustomNode(Layer[('relu',)], [[*, *], *]))"
    assert tree_util.tree_unflatten(treedef, [4, 5, 6]) == Layer([4, 5], 6, "relu")
    assert tree_util.keystr_of_leaf_paths(layer) == [".w[0]", ".w[1]", ".b"]
    assert tree_util.tree_structure(Layer(1, 2, "tanh")) != tree_util.tree_structure(
        Layer(1, 2, "relu")
    )


def test_register_dataclass_infers_fields_as_decorator():
    @tree_util.register_dataclass
    @dataclasses.dataclass(frozen=True)
    class State:
        params: dict
        step: int
        name: str = dataclasses.field(default="s", metadata=dict(static=True))

    state = State(params={"w": 1.5}, step=3)
    assert tree_util.tree_leaves(state) == [1.5, 3]
    assert tree_util.tree_structure(state).node_data() == (State, ("s",))
    paths = [path for path, _ in tree_util.tree_leaves_with_path(state)]
    assert paths == [
        (tree_util.GetAttrKey("params"), tree_util.DictKey("w")),
        (tree_util.GetAttrKey("step"),),
    ]
    assert tree_util.tree_map(lambda x: x * 2, state) == State({"w": 3.0}, 6, "s")

    @tree_util.register_dataclass(meta_fields=["kind"])
    @dataclasses.dataclass
    class Tagged:
        value: int
        kind: str

    assert tree_util.tree_leaves(Tagged(7, "k")) == [7]

    @functools.partial(tree_util.register_dataclass, data_fields=["value"], meta_fields=[])
    @dataclasses.dataclass
    class Plain:
        value: int

    assert repr(tree_util.tree_structure(Plain(1))) == "PyTreeDef(CustomNode(Plain[()], [*]))"


def test_register_dataclass_rejects_incomplete_field_lists():
    @dataclasses.dataclass
    class Incomplete:
        a: int
        b: int

    with pytest.raises(ValueError, match=r"Missing: \['b'\]"):
        tree_util.register_dataclass(Incomplete, data_fields=["a"], meta_fields=[])
    with pytest.raises(ValueError, match=r"Unexpected: \['c'\]"):
        tree_util.register_dataclass(Incomplete, data_fields=["a", "b", "c"], meta_fields=[])


def test_register_static():
    @tree_util.register_static
    class Mode(str):
        pass

    tree = {"x": 1, "mode": Mode("train")}
    assert tree_util.tree_leaves(tree) == [1]
    assert tree_util.tree_map(lambda x: x + 1, tree) == {"x": 2, "mode": "train"}
    assert tree_util.tree_structure(tree) != tree_util.tree_structure(
        {"x": 1, "mode": Mode("eval")}
    )


# ---------------------------------------------------------------------------------------------
# Key paths
# ---------------------------------------------------------------------------------------------


def test_key_reprs_strs_and_equality():
    assert repr(tree_util.SequenceKey(0)) == "SequenceKey(idx=0)"
    assert repr(tree_util.DictKey("W")) == "DictKey(key='W')"
    assert repr(tree_util.GetAttrKey("x")) == "GetAttrKey(name='x')"
    assert repr(tree_util.FlattenedIndexKey(2)) == "FlattenedIndexKey(key=2)"
    assert str(tree_util.SequenceKey(0)) == "[0]"
    assert str(tree_util.DictKey("W")) == "['W']"
    assert str(tree_util.DictKey(3)) == "[3]"
    assert str(tree_util.GetAttrKey("x")) == ".x"
    assert str(tree_util.FlattenedIndexKey(2)) == "[<flat index 2>]"
    assert tree_util.DictKey("a") == tree_util.DictKey("a")
    assert tree_util.DictKey("a") != tree_util.GetAttrKey("a")
    assert len({tree_util.SequenceKey(1), tree_util.SequenceKey(1)}) == 1


def test_keystr_spellings():
    path = (tree_util.SequenceKey(0), tree_util.DictKey("W"), tree_util.GetAttrKey("attr"))
    assert tree_util.keystr(path) == "[0]['W'].attr"
    assert tree_util.keystr(path, simple=True, separator="/") == "0/W/attr"
    assert tree_util.keystr(()) == ""


def test_keystr_of_leaf_paths_mixed_tree():
    tree = [{"W": 1, "b": 2}, Point(x=3, y=[4, None])]
    assert tree_util.keystr_of_leaf_paths(tree) == ["[0]['W']", "[0]['b']", "[1].x", "[1].y[0]"]
    assert tree_util.keystr_of_leaf_paths(5) == [""]
    assert tree_util.keystr_of_leaf_paths(
        {"a": [1], "b": 2}, is_leaf=lambda x: isinstance(x, list)
    ) == ["['a']", "['b']"]


def test_tree_flatten_with_path_and_map_with_path():
    tree = {"a": (1, 2), "b": Point(3, 4)}
    pairs, treedef = tree_util.tree_flatten_with_path(tree)
    assert treedef == tree_util.tree_structure(tree)
    assert pairs == [
        ((tree_util.DictKey("a"), tree_util.SequenceKey(0)), 1),
        ((tree_util.DictKey("a"), tree_util.SequenceKey(1)), 2),
        ((tree_util.DictKey("b"), tree_util.GetAttrKey("x")), 3),
        ((tree_util.DictKey("b"), tree_util.GetAttrKey("y")), 4),
    ]
    labelled = tree_util.tree_map_with_path(
        lambda path, x, y: f"{tree_util.keystr(path)}={x + y}", tree, tree
    )
    assert labelled == {"a": ("['a'][0]=2", "['a'][1]=4"), "b": Point("['b'].x=6", "['b'].y=8")}


# ---------------------------------------------------------------------------------------------
# tree_map with several trees, mismatches, flatten_up_to
# ---------------------------------------------------------------------------------------------


def test_tree_map_multiple_trees():
    first = [{"W": 1, "b": 2}, (3, None)]
    second = [{"b": 20, "W": 10}, (30, None)]
    third = [{"W": 100, "b": 200}, (300, None)]
    assert tree_util.tree_map(lambda x, y, z: x + y + z, first, second, third) == [
        {"W": 111, "b": 222},
        (333, None),
    ]
    # A leaf of the first tree matches a whole subtree of the others.
    assert tree_util.tree_map(lambda x, y: (x, y), [1, 2], [[5, 6], {"k": 7}]) == [
        (1, [5, 6]),
        (2, {"k": 7}),
    ]


def test_tree_map_mismatch_names_path():
    first = [{"W": 1, "b": 2}, (3, None)]
    with pytest.raises(
        ValueError,
        match=r"rest\[0\].*key path \[0\]: expected \{'W': \*, "
        r"'b': \*\}, got \{'W': \*\}",
    ):
        tree_util.tree_map(lambda x, y: x, first, [{"W": 1}, (3, None)])
    with pytest.raises(
        ValueError,
        match=r"rest\[1\].*key path \[1\]: expected \(\*, None\), "
        r"got \[\*, None\]",
    ):
        tree_util.tree_map(lambda x, y, z: x, first, first, [{"W": 1, "b": 2}, [3, None]])
    with pytest.raises(ValueError, match=r"key path \[1\]\[1\]: expected None, got \*.*is_leaf"):
        tree_util.tree_map(lambda x, y: x, first, [{"W": 1, "b": 2}, (3, 4)])
    with pytest.raises(ValueError, match=r"the root: expected \[\*, \*\], got \[\*, \*, \*\]"):
        tree_util.tree_map(lambda x, y: x, [1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match=r"rest\[0\].*key path \['a'\]"):
        tree_util.tree_map_with_path(lambda p, x, y: x, {"a": [1]}, {"a": (1,)})


def test_flatten_up_to():
    treedef = tree_util.tree_structure([1, (2, 3)])
    assert treedef.flatten_up_to([{"x": 1}, ([2], None)]) == [{"x": 1}, [2], None]
    with pytest.raises(
        ValueError,
        match=r"key path \[1\]: expected \(\*, \*\), got \* "
        r"\(value: 5\).*PyTreeDef\(\[\*, \(\*, \*\)\]\)",
    ):
        treedef.flatten_up_to([1, 5])
    with pytest.raises(ValueError, match="distinct classes with the same name"):
        other_point = collections.namedtuple("Point", ["x", "y"])
        tree_util.tree_structure(Point(1, 2)).flatten_up_to(other_point(1, 2))


# ---------------------------------------------------------------------------------------------
# Reductions and transposition
# ---------------------------------------------------------------------------------------------


def test_tree_reduce_and_tree_all():
    tree = {"a": [1, 2], "b": (3, None)}
    assert tree_util.tree_reduce(operator.add, tree) == 6
    assert tree_util.tree_reduce(lambda acc, x: acc + [x], tree, []) == [1, 2, 3]
    assert tree_util.tree_all([True, {"k": 1}])
    assert not tree_util.tree_all([True, {"k": 0}])
    assert tree_util.tree_all(None)


def test_tree_transpose():
    outer = tree_util.tree_structure([0, 0, 0])
    inner = tree_util.tree_structure({"a": 0, "b": 0})
    tree = [{"a": 1, "b": 2}, {"a": 3, "b": 4}, {"a": 5, "b": 6}]
    expected = {"a": [1, 3, 5], "b": [2, 4, 6]}
    assert tree_util.tree_transpose(outer, inner, tree) == expected
    assert tree_util.tree_transpose(outer, None, tree) == expected
    with pytest.raises(TypeError, match="Mismatch"):
        tree_util.tree_transpose(outer, tree_util.tree_structure((0, 0, 0)), tree)


# ---------------------------------------------------------------------------------------------
# Partial
# ---------------------------------------------------------------------------------------------


def test_partial_is_a_pytree():
    def affine(x, scale, *, shift):
        return x * scale + shift

    bound = tree_util.Partial(affine, 2, shift=10)
    assert bound(3) == 16
    leaves, treedef = tree_util.tree_flatten(bound)
    assert leaves == [2, 10]
    assert treedef.node_data() == (tree_util.Partial, affine)
    doubled = tree_util.tree_map(lambda v: v * 2, bound)
    assert isinstance(doubled, tree_util.Partial)
    assert doubled.func is affine and doubled.args == (4,) and doubled.keywords == {"shift": 20}
    assert doubled(3) == 3 * 4 + 20
    assert tree_util.keystr_of_leaf_paths(bound) == [
        "[<flat index 0>][0]",
        "[<flat index 1>]['shift']",
    ]
    # A functools.partial given as func stays whole (static), not merged into the children.
    nested = tree_util.Partial(functools.partial(affine, shift=1), 5)
    assert tree_util.tree_leaves(nested) == [5]
    assert nested(2) == 11
    assert nested.func.func is affine and nested.func.keywords == {"shift": 1}
    assert tree_util.tree_structure(tree_util.Partial(affine)).num_leaves == 0


# ---------------------------------------------------------------------------------------------
# Agreement with JAX itself, when it happens to be installed
# ---------------------------------------------------------------------------------------------

JAX_TREES = [
    [{"W": 1, "b": 2}, {"W": 3, "b": 4}],
    (1, None),
    1,
    None,
    (1,),
    {"b": [1, (2, None)], "a": {"z": 3, "y": ()}},
    [Point(1, [2, 3]), {"k": Point(4, None)}],
    collections.OrderedDict([("b", 1), ("a", [2])]),
    {"d": collections.defaultdict(list, {"y": 1, "x": (2,)})},
]


@pytest.mark.parametrize("tree", JAX_TREES, ids=[repr(tree) for tree in JAX_TREES])
def test_repr_matches_jax(tree):
    jax_tree_util = pytest.importorskip("jax.tree_util")
    assert repr(tree_util.tree_structure(tree)) == repr(jax_tree_util.tree_structure(tree))


@pytest.mark.parametrize("tree", JAX_TREES, ids=[repr(tree) for tree in JAX_TREES])
def test_key_paths_match_jax(tree):
    jax_tree_util = pytest.importorskip("jax.tree_util")
    ours = [
        (tree_util.keystr(path), repr(path), leaf)
        for path, leaf in tree_util.tree_leaves_with_path(tree)
    ]
    theirs = [
        (jax_tree_util.keystr(path), repr(path), leaf)
        for path, leaf in jax_tree_util.tree_leaves_with_path(tree)
    ]
    assert ours == theirs


def test_dataclass_repr_and_paths_match_jax():
    jax_tree_util = pytest.importorskip("jax.tree_util")

    @dataclasses.dataclass
    class Cell:
        h: object
        c: object
        size: int

    ours_cls = tree_util.register_dataclass(
        dataclasses.make_dataclass("Cell", ["h", "c", "size"]), ["h", "c"], ["size"]
    )
    theirs_cls = jax_tree_util.register_dataclass(Cell, ["h", "c"], ["size"])
    ours = ours_cls(h=[1, 2], c=3, size=4)
    theirs = theirs_cls(h=[1, 2], c=3, size=4)
    assert repr(tree_util.tree_structure(ours)) == repr(jax_tree_util.tree_structure(theirs))
    assert [tree_util.keystr(p) for p, _ in tree_util.tree_leaves_with_path(ours)] == [
        jax_tree_util.keystr(p) for p, _ in jax_tree_util.tree_leaves_with_path(theirs)
    ]


def test_custom_node_and_partial_match_jax():
    jax_tree_util = pytest.importorskip("jax.tree_util")

    class Box:
        def __init__(self, a, b):
            self.a, self.b = a, b

    def flatten(box):
        return (box.a, box.b), ("aux", 1)

    def unflatten(aux, children):
        return Box(*children)

    tree_util.register_pytree_node(Box, flatten, unflatten)
    jax_tree_util.register_pytree_node(Box, flatten, unflatten)
    tree = {"box": Box([1, None], 2)}
    assert repr(tree_util.tree_structure(tree)) == repr(jax_tree_util.tree_structure(tree))
    assert [tree_util.keystr(p) for p, _ in tree_util.tree_leaves_with_path(tree)] == [
        jax_tree_util.keystr(p) for p, _ in jax_tree_util.tree_leaves_with_path(tree)
    ]
    ours = tree_util.Partial(max, 1, key=None)
    theirs = jax_tree_util.Partial(max, 1, key=None)
    assert repr(tree_util.tree_structure(ours)) == repr(jax_tree_util.tree_structure(theirs))

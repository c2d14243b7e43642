"""Indexing: the dynamic_slice / gather / scatter primitives against NumPy reference loops
(fixed op records over every dtype family and random dimension-number configurations),
NumPy-style `x[idx]` against NumPy (hypothesis), out-of-bounds clamping, the index functions
(take, nonzero, where, ...) and the errors users hit."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core import errors
from kiln.core.array import Array
from kiln.core.jaxpr import Literal, typecheck_jaxpr
from tests._testing import ALL, assert_close, check_record_eager, check_record_jit, rand
from tests.op_records import (
    COMBINES,
    INDEXING_RECORDS,
    ROWS,
    gather_reference,
    np_dynamic_slice,
    np_dynamic_update_slice,
    scatter_reference,
)

MODES = lax.GatherScatterMode
needs_jit = pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit not available yet")


def run_traced(fun, *args):
    """Trace `fun` to a jaxpr, typecheck it, then evaluate the jaxpr equation by equation
    (eagerly) so the traced path is checked against NumPy too."""
    closed = kiln.make_jaxpr(fun)(*args)
    typecheck_jaxpr(closed.jaxpr)
    env = dict(zip(map(id, closed.jaxpr.constvars), closed.consts))
    env.update(zip(map(id, closed.jaxpr.invars), args))

    def read(atom):
        if isinstance(atom, Literal):
            return Array._wrap(np.array(atom.val, dtype=atom.aval.dtype), atom.aval.weak_type)
        return env[id(atom)]

    for eqn in closed.jaxpr.eqns:
        out = eqn.primitive.bind(*map(read, eqn.invars), **eqn.params)
        outs = out if eqn.primitive.multiple_results else [out]
        env.update(zip(map(id, eqn.outvars), outs))
    outs = [read(v) for v in closed.jaxpr.outvars]
    return outs[0] if len(outs) == 1 else outs


# --- op records for the primitives -----------------------------------------------------------

_RECORD_CASES = [(r, s, d) for r in INDEXING_RECORDS for s, d in r.cases()]
_RECORD_IDS = [i for r in INDEXING_RECORDS for i in r.ids()]


@pytest.mark.parametrize("record,shapes,dtype", _RECORD_CASES, ids=_RECORD_IDS)
def test_primitive_records_match_numpy(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)


@needs_jit
@pytest.mark.parametrize("record,shapes,dtype", _RECORD_CASES[::7], ids=_RECORD_IDS[::7])
def test_primitive_records_jit(record, shapes, dtype):
    check_record_jit(record, shapes, dtype)


# --- random dimension numbers ---------------------------------------------------------------


def _random_gather_case(rng):
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(s) for s in rng.integers(1, 5, ndim))
    dims = list(rng.permutation(ndim))
    n_batching = int(rng.integers(0, 2)) if ndim > 1 else 0
    operand_batching = tuple(sorted(int(d) for d in dims[:n_batching]))
    rest = [int(d) for d in dims[n_batching:]]
    start_index_map = tuple(rest[: int(rng.integers(0, len(rest) + 1))])
    collapsed = tuple(sorted(d for d in rest if rng.random() < 0.5))
    slice_sizes = tuple(
        1 if d in operand_batching or d in collapsed else int(rng.integers(0, shape[d] + 1))
        for d in range(ndim)
    )
    batch_rank = int(rng.integers(n_batching, n_batching + 3))
    batch_shape = [int(s) for s in rng.integers(1, 4, batch_rank)]
    indices_batching = tuple(int(d) for d in rng.permutation(batch_rank)[:n_batching])
    for od, idim in zip(operand_batching, indices_batching):
        batch_shape[idim] = shape[od]
    bounds = [shape[d] for d in start_index_map]
    indices = (
        np.stack([rng.integers(-2, b + 2, batch_shape) for b in bounds], axis=-1)
        if bounds
        else np.zeros(batch_shape + [0], np.int32)
    )
    n_window = ndim - len(collapsed) - len(operand_batching)
    offset_dims = tuple(sorted(int(d) for d in rng.permutation(n_window + batch_rank)[:n_window]))
    dn = lax.GatherDimensionNumbers(
        offset_dims, collapsed, start_index_map, operand_batching, indices_batching
    )
    return shape, indices.astype(np.int32), dn, slice_sizes


@pytest.mark.parametrize("seed", range(60))
def test_gather_random_dimension_numbers(seed):
    rng = np.random.default_rng(seed)
    shape, indices, dn, slice_sizes = _random_gather_case(rng)
    x = rng.standard_normal(shape).astype(np.float32)
    for mode in (MODES.CLIP, MODES.FILL_OR_DROP, MODES.PROMISE_IN_BOUNDS):
        expected = gather_reference(x, indices, dn, slice_sizes, mode)
        actual = lax.gather(jnp.asarray(x), indices, dn, slice_sizes, mode=mode)
        assert_close(actual, expected, err_msg=f"{dn} {slice_sizes} {mode}")
    traced = run_traced(
        lambda a, i: lax.gather(a, i, dn, slice_sizes, mode="clip"),
        jnp.asarray(x),
        jnp.asarray(indices),
    )
    assert_close(traced, gather_reference(x, indices, dn, slice_sizes))


def _random_scatter_case(rng):
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(s) for s in rng.integers(1, 5, ndim))
    dims = [int(d) for d in rng.permutation(ndim)]
    n_batching = int(rng.integers(0, 2)) if ndim > 1 else 0
    operand_batching = tuple(sorted(dims[:n_batching]))
    rest = dims[n_batching:]
    index_map = tuple(rest[: int(rng.integers(0, len(rest) + 1))])
    inserted = tuple(sorted(d for d in rest if rng.random() < 0.5))
    window_dims = [d for d in range(ndim) if d not in inserted and d not in operand_batching]
    window = [int(rng.integers(0, shape[d] + 1)) for d in window_dims]
    batch_rank = int(rng.integers(n_batching, n_batching + 3))
    batch_shape = [int(s) for s in rng.integers(1, 4, batch_rank)]
    indices_batching = tuple(int(d) for d in rng.permutation(batch_rank)[:n_batching])
    for od, idim in zip(operand_batching, indices_batching):
        batch_shape[idim] = shape[od]
    indices = (
        np.stack([rng.integers(-2, shape[d] + 2, batch_shape) for d in index_map], axis=-1)
        if index_map
        else np.zeros(batch_shape + [0], np.int32)
    )
    rank = len(window) + batch_rank
    update_window_dims = tuple(sorted(int(d) for d in rng.permutation(rank)[: len(window)]))
    window_iter, batch_iter = iter(window), iter(batch_shape)
    updates_shape = tuple(
        next(window_iter) if i in update_window_dims else next(batch_iter) for i in range(rank)
    )
    dn = lax.ScatterDimensionNumbers(
        update_window_dims, inserted, index_map, operand_batching, indices_batching
    )
    return shape, indices.astype(np.int32), updates_shape, dn


@pytest.mark.parametrize("seed", range(60))
def test_scatter_random_dimension_numbers(seed):
    rng = np.random.default_rng(seed)
    shape, indices, updates_shape, dn = _random_scatter_case(rng)
    x = rng.integers(-5, 5, shape).astype(np.float32)
    updates = rng.integers(-3, 4, updates_shape).astype(np.float32)
    for name, (fn, combine) in COMBINES.items():
        for mode in (MODES.FILL_OR_DROP, MODES.CLIP):
            expected = scatter_reference(x, indices, updates, dn, combine, mode)
            actual = fn(jnp.asarray(x), indices, jnp.asarray(updates), dn, mode=mode)
            assert_close(actual, expected, err_msg=f"{name} {dn} {mode}")
    traced = run_traced(
        lambda a, i, u: lax.scatter_add(a, i, u, dn),
        jnp.asarray(x),
        jnp.asarray(indices),
        jnp.asarray(updates),
    )
    assert_close(traced, scatter_reference(x, indices, updates, dn, COMBINES["scatter_add"][1]))


# --- primitive details -----------------------------------------------------------------------


def test_dynamic_slice_clamps_like_xla():
    x = jnp.asarray(np.arange(5))
    assert_close(lax.dynamic_slice(x, (-1,), (2,)), np.array([3, 4]))
    assert_close(lax.dynamic_slice(x, (-100,), (2,)), np.array([0, 1]))
    assert_close(lax.dynamic_slice(x, (jnp.asarray(np.int32(4)),), (3,)), np.array([2, 3, 4]))
    assert_close(lax.dynamic_slice(x, (np.uint8(1),), (2,)), np.array([1, 2]))
    assert_close(lax.dynamic_slice(x, jnp.asarray(np.array([3])), (2,)), np.array([3, 4]))
    assert_close(lax.dynamic_slice(x, (-1,), (2,), allow_negative_indices=False), np.array([0, 1]))
    y = jnp.asarray(np.zeros(5, np.int32))
    assert_close(
        lax.dynamic_update_slice(y, jnp.asarray(np.array([7, 8], np.int32)), (9,)),
        np.array([0, 0, 0, 7, 8]),
    )


def test_dynamic_slice_traced_starts():
    x = jnp.asarray(np.arange(12.0, dtype=np.float32).reshape(3, 4))
    for i, j in [(0, 0), (2, 3), (-1, -2), (5, -9)]:
        got = run_traced(
            lambda a, i, j: lax.dynamic_slice(a, (i, j), (2, 2)),
            x,
            jnp.asarray(np.int32(i)),
            jnp.asarray(np.int32(j)),
        )
        assert_close(got, np_dynamic_slice(np.asarray(x), (i, j), (2, 2)))
        got = run_traced(
            lambda a, i: lax.dynamic_update_slice(a, jnp.ones((1, 2)), (i, 1)),
            x,
            jnp.asarray(np.int32(i)),
        )
        assert_close(
            got, np_dynamic_update_slice(np.asarray(x), np.ones((1, 2), np.float32), (i, 1))
        )


def test_dynamic_slice_jaxpr_text():
    jaxpr = kiln.make_jaxpr(lambda x, i: lax.dynamic_slice(x, (i,), (2,)))(
        jnp.asarray(np.arange(4)), 1
    )
    assert (
        str(jaxpr)
        == """{ lambda ; a:i32[4] b:i32[]. let
    c:bool[] = lt b 0
    d:i32[] = add b 4
    e:i32[] = select_n c b d
    f:i32[2] = dynamic_slice[slice_sizes=(2,)] a e
  in (f,) }"""
    )


def test_in_dim_helpers():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    kx = jnp.asarray(x)
    assert_close(lax.dynamic_slice_in_dim(kx, 1, 2, axis=1), x[:, 1:3])
    assert_close(lax.dynamic_slice_in_dim(kx, -1, 1, axis=2), x[:, :, 3:])
    assert_close(lax.dynamic_index_in_dim(kx, 1, axis=0), x[1:2])
    assert_close(lax.dynamic_index_in_dim(kx, 2, axis=2, keepdims=False), x[:, :, 2])
    update = np.full((2, 1, 4), -1.0, np.float32)
    expected = x.copy()
    expected[:, 2:3] = update
    assert_close(lax.dynamic_update_slice_in_dim(kx, jnp.asarray(update), 2, axis=1), expected)
    assert_close(
        lax.dynamic_update_index_in_dim(kx, jnp.asarray(update[:, 0]), -1, axis=1), expected
    )


def test_weak_types_follow_the_operand():
    weak = lax.full((4,), 1.0)
    assert weak.weak_type
    idx = np.array([[1], [2]], np.int32)
    assert lax.gather(weak, idx, lax.GatherDimensionNumbers((), (0,), (0,)), (1,)).weak_type
    assert lax.dynamic_slice(weak, (jnp.asarray(np.int32(1)),), (2,)).weak_type
    strong = jnp.asarray(np.ones(4, np.float32))
    assert not lax.dynamic_slice(strong, (1,), (2,)).weak_type
    dn = lax.ScatterDimensionNumbers((), (0,), (0,))
    assert lax.scatter_add(weak, idx, jnp.asarray(np.ones(2, np.float32)), dn).weak_type
    assert not lax.scatter_add(strong, idx, lax.full((2,), 1.0), dn).weak_type
    assert weak[1].weak_type and weak[jnp.asarray(np.array([0, 1]))].weak_type
    assert weak.at[1].set(5).weak_type
    jaxpr = kiln.make_jaxpr(lambda w: lax.dynamic_slice(w, (1,), (2,)))(1.0 * weak)
    assert jaxpr.out_avals[0].weak_type


def test_primitive_errors():
    x = jnp.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    with pytest.raises(TypeError, match="same type"):
        lax.dynamic_slice(x, (jnp.asarray(np.int8(0)), jnp.asarray(np.int16(0))), (1, 1))
    with pytest.raises(TypeError, match="integer"):
        lax.dynamic_slice(x, (0, 0.5), (1, 1))
    with pytest.raises(TypeError, match="length equal"):
        lax.dynamic_slice(x, (0,), (1, 1))
    with pytest.raises(TypeError, match="slice_sizes"):
        lax.dynamic_slice(x, (0, 0), (3, 1))
    with pytest.raises(TypeError, match="dtype"):
        lax.dynamic_update_slice(x, jnp.asarray(np.ones((1, 1), np.int32)), (0, 0))
    with pytest.raises(TypeError, match="rank"):
        lax.dynamic_update_slice(x, jnp.asarray(np.ones(1, np.float32)), (0, 0))
    idx = np.array([[0]], np.int32)
    with pytest.raises(TypeError, match="slice size 1"):
        lax.gather(x, idx, lax.GatherDimensionNumbers((0,), (1,), (0,)), (1, 2))
    with pytest.raises(TypeError, match="offset_dims"):
        lax.gather(x, idx, lax.GatherDimensionNumbers((), (0,), (0,)), (1, 3))
    with pytest.raises(TypeError, match="last dimension"):
        lax.gather(
            x, np.array([0], np.int32), lax.GatherDimensionNumbers((1,), (0,), (0, 1)), (1, 3)
        )
    with pytest.raises(TypeError, match="integer"):
        lax.gather(x, np.array([[0.0]], np.float32), ROWS, (1, 3))
    with pytest.raises(TypeError, match="GatherDimensionNumbers"):
        lax.gather(x, idx, ((1,), (0,), (0,)), (1, 3))
    dn = lax.ScatterDimensionNumbers((1,), (0,), (0,))
    with pytest.raises(TypeError, match="dtype"):
        lax.scatter(x, idx, jnp.asarray(np.ones((1, 3), np.int32)), dn)
    with pytest.raises(TypeError, match="batch shape"):
        lax.scatter(x, idx, jnp.asarray(np.ones((2, 3), np.float32)), dn)
    with pytest.raises(TypeError, match="bool"):
        lax.scatter_add(
            jnp.asarray(np.ones(3, bool)),
            idx,
            jnp.asarray(np.ones(1, bool)),
            lax.ScatterDimensionNumbers((), (0,), (0,)),
        )
    with pytest.raises(ValueError, match="mode"):
        lax.gather(x, idx, ROWS, (1, 3), mode="bogus")


def test_gather_scatter_jaxpr_text():
    x = jnp.asarray(np.arange(4.0, dtype=np.float32))
    idx = jnp.asarray(np.array([[7], [1]], np.int32))
    dn = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    text = str(kiln.make_jaxpr(lambda x, i: lax.gather(x, i, dn, (1,)))(x, idx))
    assert (
        text
        == """{ lambda ; a:f32[4] b:i32[2,1]. let
    c:f32[2] = gather[
      dimension_numbers=GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
      fill_value=None
      indices_are_sorted=False
      mode=GatherScatterMode.PROMISE_IN_BOUNDS
      slice_sizes=(1,)
      unique_indices=False
    ] a b
  in (c,) }"""
    )
    sdn = lax.ScatterDimensionNumbers((), (0,), (0,))
    text = str(kiln.make_jaxpr(lambda x, i: lax.scatter_add(x, i, x[:2], sdn))(x, idx))
    assert "scatter-add[" in text and "mode=GatherScatterMode.FILL_OR_DROP" in text
    assert "update_jaxpr=None" in text
    batched = lax.GatherDimensionNumbers((1,), (1,), (1,), (0,), (0,))
    assert "operand_batching_dims=(0,)" in repr(batched)


# --- x[idx] against NumPy -------------------------------------------------------------------


@st.composite
def shapes_and_indices(draw):
    """An operand shape and an in-bounds index: items for some leading dims, optionally an
    Ellipsis and items for some trailing dims, with newaxes sprinkled in."""
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    ndim = len(shape)
    array_shape = draw(st.sampled_from([(), (2,), (1,), (2, 1), (3,)]))
    use_ellipsis = draw(st.booleans())
    lead = draw(st.integers(0, ndim))
    trail = draw(st.integers(0, ndim - lead)) if use_ellipsis else 0

    def item_for(size):
        kind = draw(st.sampled_from(["int", "slice", "array", "array"]))
        if kind == "int" and size:
            return draw(st.integers(-size, size - 1))
        if kind == "array" and size:
            count = int(np.prod(array_shape))
            values = np.asarray(
                draw(st.lists(st.integers(-size, size - 1), min_size=count, max_size=count)),
                dtype=np.int64,
            )
            values = values.reshape(array_shape)
            wrap = draw(st.sampled_from(["numpy", "kiln", "list"]))
            if wrap == "kiln":
                return jnp.asarray(values)
            return values.tolist() if wrap == "list" and values.ndim else values
        return slice(
            draw(st.one_of(st.none(), st.integers(-size - 2, size + 2))),
            draw(st.one_of(st.none(), st.integers(-size - 2, size + 2))),
            draw(st.sampled_from([None, 1, 2, 3, -1, -2])),
        )

    items = []
    for d in list(range(lead)) + ([None] if use_ellipsis else []) + list(range(ndim - trail, ndim)):
        if draw(st.integers(0, 5)) == 0:
            items.append(None)
        items.append(Ellipsis if d is None else item_for(shape[d]))
    if len(items) == 1 and draw(st.booleans()):
        return shape, items[0]
    return shape, tuple(items)


def _numpy_index(index):
    if isinstance(index, tuple):
        return tuple(_numpy_index(i) for i in index)
    if isinstance(index, Array):
        return np.asarray(index)
    if isinstance(index, list):
        return np.asarray(index)
    return index


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes_and_indices())
def test_getitem_matches_numpy(case):
    shape, index = case
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    try:
        expected = x[_numpy_index(index)]
    except IndexError:  # index arrays that do not broadcast together (all are in bounds)
        with pytest.raises((IndexError, ValueError)):
            jnp.asarray(x)[index]
        return
    actual = jnp.asarray(x)[index]
    assert_close(actual, expected, err_msg=str(index))
    traced = run_traced(lambda a: a[index], jnp.asarray(x))
    assert_close(traced, expected, err_msg=f"traced {index}")


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_getitem_every_dtype(dtype):
    x = rand((3, 4, 2), dtype, np.random.default_rng(0))
    kx = jnp.asarray(x)
    for index in [
        0,
        -1,
        (1, 2),
        (slice(None, None, -1), 1),
        (Ellipsis, 0),
        (None, 1),
        (np.array([2, 0, 2]),),
        (np.array([1, 0]), slice(1, 3), np.array([1, 0])),
        (x[..., 0] > x[..., 1] if dtype.kind != "c" else np.ones((3, 4), bool)),
    ]:
        assert_close(kx[index], x[index], err_msg=str(index))


def test_traced_scalar_and_array_indices():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    kx = jnp.asarray(x)
    long = jnp.asarray(np.arange(300, dtype=np.float32))
    for i in (-3, 100, 127):  # an int8 index into an axis longer than int8 can count
        got = run_traced(lambda a, i: a[i], long, jnp.asarray(np.int8(i)))
        assert float(got) == (i + 300 if i < 0 else i)
        got = run_traced(lambda a, i: a[i], long, jnp.asarray(np.array([i, -1], np.int8)))
        assert_close(got, np.array([i + 300 if i < 0 else i, 299], np.float32))
    for i in [0, 2, -1, -3, 7, -10]:
        clamped = min(max(i + 3 if i < 0 else i, 0), 2)
        got = run_traced(lambda a, i: a[i, 1:, ::-2], kx, jnp.asarray(np.int32(i)))
        assert_close(got, x[clamped, 1:, ::-2])
        got = run_traced(lambda a, i: a[:, i], kx, jnp.asarray(np.int32(i)))
        assert_close(got, x[:, min(max(i + 4 if i < 0 else i, 0), 3)])
    idx = np.array([[0, -1], [2, 1]], np.int32)
    got = run_traced(lambda a, i: a[1, :, i], kx, jnp.asarray(idx))
    assert_close(got, x[1, :, idx])
    got = run_traced(lambda a, i, j: a[i, None, j], kx, jnp.asarray(idx), jnp.asarray(np.int32(3)))
    assert_close(got, x[idx, None, 3])


def test_static_indexing_lowers_to_cheap_primitives():
    x = jnp.asarray(np.zeros((3, 4, 5), np.float32))
    cases = [
        lambda a: a[1],
        lambda a: a[-1, ::2],
        lambda a: a[..., ::-1, None],
        lambda a: a[1:2, 3, None, -2:],
        lambda a: a[10000],
    ]
    for fn in cases:
        names = {e.primitive.name for e in kiln.make_jaxpr(fn)(x).eqns}
        assert names <= {"slice", "squeeze", "rev", "broadcast_in_dim", "reshape"}, names
    names = [e.primitive.name for e in kiln.make_jaxpr(lambda a, i: a[i])(x, 1).eqns]
    assert "dynamic_slice" in names and "gather" not in names
    names = [e.primitive.name for e in kiln.make_jaxpr(lambda a: a[np.array([0, 1])])(x).eqns]
    assert "gather" in names
    assert kiln.make_jaxpr(lambda a: a[...])(x).eqns == []


def test_getitem_jaxpr_text():
    x1 = jnp.array([0, 2, 4, 6])
    assert (
        str(kiln.make_jaxpr(lambda x, i: x[i])(x1, 1))
        == """{ lambda ; a:i32[4] b:i32[]. let
    c:bool[] = lt b 0
    d:i32[] = add b 4
    e:i32[] = select_n c b d
    f:i32[1] = dynamic_slice[slice_sizes=(1,)] a e
    g:i32[] = squeeze[dimensions=(0,)] f
  in (g,) }"""
    )
    assert (
        str(kiln.make_jaxpr(lambda x: x[1])(x1))
        == """{ lambda ; a:i32[4]. let
    b:i32[1] = slice[limit_indices=(2,) start_indices=(1,) strides=None] a
    c:i32[] = squeeze[dimensions=(0,)] b
  in (c,) }"""
    )


def test_out_of_bounds_reads_clamp():
    x1 = jnp.array([0, 2, 4, 6])
    assert (
        repr((x1[0], x1[-1], x1[10000]))
        == "(Array(0, dtype=int32), Array(6, dtype=int32), Array(6, dtype=int32))"
    )
    assert int(x1[-10000]) == 0
    assert_close(x1[np.array([5, -7, 1])], np.array([6, 0, 2]))
    x = jnp.asarray(np.arange(12).reshape(3, 4))
    assert_close(x[5, -9], np.array(8))
    assert_close(
        x.at[np.array([9, 1])].get(mode="fill", fill_value=-1),
        np.array([[-1, -1, -1, -1], [4, 5, 6, 7]]),
    )
    assert_close(x.at[3].get(mode="clip"), np.array([8, 9, 10, 11]))
    assert np.isnan(np.asarray(jnp.asarray(np.ones(3, np.float32)).at[3].get(mode="fill")))
    # The same reads through the primitives (traced), not the eager NumPy fast path.
    assert int(run_traced(lambda a: a[10000], x1)) == 6
    assert int(run_traced(lambda a: a[-10000], x1)) == 0
    assert_close(run_traced(lambda a: a[np.array([5, -7, 1])], x1), np.array([6, 0, 2]))
    assert_close(
        run_traced(lambda a, i: a[i, -9], x, jnp.asarray(np.array([5, 0]))), np.array([8, 0])
    )


def test_bool_indices():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    kx = jnp.asarray(x)
    mask = x % 3 == 0
    assert_close(kx[mask], x[mask])
    assert_close(kx[jnp.asarray(mask)], x[mask])
    assert_close(kx[mask[:, 0]], x[mask[:, 0]])
    assert_close(kx[:, [True, False, True, True]], x[:, [True, False, True, True]])
    assert_close(kx[1:, mask[0]], x[1:, mask[0]])
    assert kx[True].shape == (1, 3, 4) and kx[False].shape == (0, 3, 4)
    assert_close(kx[jnp.asarray(np.bool_(True)), 1], x[True, 1])
    with pytest.raises(IndexError, match="did not match"):
        kx[np.array([True, False])]
    # A concrete mask is fine under tracing: it is a constant of the jaxpr.
    assert_close(run_traced(lambda a: a[mask], kx), x[mask])
    assert_close(run_traced(lambda a: a.at[mask].set(-1.0), kx), np.where(mask, -1, x))


def test_traced_boolean_mask_is_an_error():
    x = jnp.asarray(np.zeros((4, 4), np.float32))
    mask = jnp.asarray(np.ones((4, 4), bool))
    with pytest.raises(
        errors.NonConcreteBooleanIndexError,
        match=r"Array boolean indices must be concrete; got "
        r"ShapedArray\(bool\[4,4\]\)",
    ):
        kiln.make_jaxpr(lambda x, m: x[m])(x, mask)
    with pytest.raises(IndexError):  # the error is an IndexError, as in JAX
        kiln.make_jaxpr(lambda x, m: x[m[0]])(x, mask)


def test_indexing_errors():
    x = jnp.asarray(np.arange(4))
    with pytest.raises(TypeError, match="integer or boolean"):
        x[1.0]
    with pytest.raises(TypeError, match="integer or boolean"):
        x[jnp.asarray(np.array([0.0, 1.0], np.float32))]
    with pytest.raises(TypeError, match="string"):
        x["a"]
    with pytest.raises(IndexError, match="Too many indices"):
        x[0, 0]
    with pytest.raises(IndexError, match="Too many indices"):
        jnp.asarray(np.zeros((2, 2)))[0, :, None, 1]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="static"):
        kiln.make_jaxpr(lambda x, i: x[i : i + 2])(x, 1)
    with pytest.raises(ValueError, match="zero"):
        x[::0]
    with pytest.raises(ValueError, match="broadcast"):
        jnp.asarray(np.zeros((2, 3)))[np.array([0, 1]), np.array([0, 1, 2])]
    with pytest.raises(IndexError, match="size 0"):
        jnp.zeros(0)[0]
    with pytest.raises(TypeError, match=r"\.at"):
        x[0] = 5
    assert jnp.zeros(0)[np.array([], np.int32)].shape == (0,)


# --- index functions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype",
    [np.float32, np.int32, np.bool_, np.complex64, np.uint8],
    ids=lambda d: np.dtype(d).name,
)
def test_take(dtype):
    x = rand((3, 4), dtype, np.random.default_rng(1))
    kx = jnp.asarray(x)
    idx = np.array([[0, 2], [3, 1]])
    assert_close(jnp.take(kx, idx), np.take(x, idx))
    assert_close(jnp.take(kx, idx, axis=1), np.take(x, idx, axis=1))
    assert_close(jnp.take(kx, np.array([-1, 1]), axis=0), np.take(x, [-1, 1], axis=0))
    assert_close(
        jnp.take(kx, np.array([5, -7]), axis=1, mode="wrap"),
        np.take(x, [5, -7], axis=1, mode="wrap"),
    )
    assert_close(
        jnp.take(kx, np.array([5, -7]), axis=1, mode="clip"),
        np.take(x, [5, -7], axis=1, mode="clip"),
    )
    assert_close(jnp.take(kx, 2), np.take(x, 2))
    assert_close(kx.take(np.array([1, 1]), axis=1), np.take(x, [1, 1], axis=1))
    traced = run_traced(
        lambda a, i: jnp.take(a, i, axis=1, mode="wrap"),
        kx,
        jnp.asarray(np.array([[5, -1]], np.int32)),
    )
    assert_close(traced, np.take(x, [[5, -1]], axis=1, mode="wrap"))


def test_take_fill_values():
    x = jnp.asarray(np.arange(4.0, dtype=np.float32))
    assert np.isnan(float(jnp.take(x, 7)))
    assert float(jnp.take(x, -1)) == 3.0
    assert float(jnp.take(x, 7, fill_value=-1)) == -1.0
    assert int(jnp.take(jnp.asarray(np.arange(4)), 7)) == np.iinfo(np.int32).min
    assert int(jnp.take(jnp.asarray(np.arange(4, dtype=np.uint8)), 7)) == 255
    with pytest.raises(IndexError, match="empty axis"):
        jnp.take(jnp.zeros((2, 0)), np.array([0]), axis=1)
    with pytest.raises(NotImplementedError):
        jnp.take(x, 1, mode="raise")
    with pytest.raises(TypeError):
        jnp.take(x, [0, 1])
    with pytest.raises(TypeError, match="integer"):
        jnp.take(x, np.array([0.5]))


def test_take_along_axis():
    rng = np.random.default_rng(2)
    x = rand((3, 4, 5), np.float32, rng)
    kx = jnp.asarray(x)
    for axis in (0, 1, 2, -1):
        idx = np.argsort(x, axis=axis)
        assert_close(jnp.take_along_axis(kx, idx, axis=axis), np.take_along_axis(x, idx, axis=axis))
    idx = rng.integers(0, 4, (1, 2, 5))
    assert_close(jnp.take_along_axis(kx, idx, axis=1), np.take_along_axis(x, idx, axis=1))
    assert_close(jnp.take_along_axis(kx, np.array([[[-1]]]), axis=2), x[:, :, -1:])
    flat = np.array([3, 0, 59])
    assert_close(jnp.take_along_axis(kx, flat, axis=None), x.ravel()[flat])
    out = jnp.take_along_axis(
        jnp.asarray(np.arange(6).reshape(2, 3)), np.array([[0, 9, 1]]), axis=0
    )
    assert_close(out, np.array([[0, np.iinfo(np.int32).min, 5]]))
    with pytest.raises(ValueError, match="same number of dimensions"):
        jnp.take_along_axis(kx, np.array([0]), axis=0)
    traced = run_traced(
        lambda a, i: jnp.take_along_axis(a, i, axis=1), kx, jnp.asarray(np.argsort(x, axis=1))
    )
    assert_close(traced, np.sort(x, axis=1))


def test_put():
    x = jnp.asarray(np.arange(5))
    assert_close(
        jnp.put(x, np.array([0, 7, 1]), np.array([9, 8]), inplace=False), np.array([9, 9, 2, 3, 8])
    )
    assert_close(
        jnp.put(x, np.array([0, 7]), np.array([9, 8]), mode="wrap", inplace=False),
        np.array([9, 1, 8, 3, 4]),
    )
    assert_close(
        jnp.put(x, np.array([0, 7]), np.array([9, 8]), mode="fill", inplace=False),
        np.array([9, 1, 2, 3, 4]),
    )
    with pytest.raises(ValueError, match="immutable"):
        jnp.put(x, np.array([0]), np.array([1]))


def test_nonzero_family():
    x = np.array([[0, 3, 0], [1, 0, 2]], np.int32)
    kx = jnp.asarray(x)
    for got, want in zip(jnp.nonzero(kx), np.nonzero(x)):
        assert_close(got, want.astype(np.int32))
    assert_close(jnp.argwhere(kx), np.argwhere(x).astype(np.int32))
    assert_close(jnp.flatnonzero(kx), np.flatnonzero(x).astype(np.int32))
    for got, want in zip(jnp.where(kx), np.where(x)):
        assert_close(got, want.astype(np.int32))
    assert_close(kx.nonzero()[1], np.nonzero(x)[1].astype(np.int32))
    rows, cols = jnp.nonzero(kx, size=4, fill_value=(7, 8))
    assert_close(rows, np.array([0, 1, 1, 7])) and assert_close(cols, np.array([1, 0, 2, 8]))
    assert_close(jnp.nonzero(kx, size=2)[0], np.array([0, 1]))
    assert_close(
        jnp.argwhere(kx, size=4, fill_value=-1), np.array([[0, 1], [1, 0], [1, 2], [-1, -1]])
    )
    assert jnp.argwhere(jnp.asarray(np.array(3))).shape == (1, 0)
    assert jnp.argwhere(jnp.asarray(np.array(0))).shape == (0, 0)
    with pytest.raises(ValueError, match="0d"):
        jnp.nonzero(jnp.asarray(np.array(1)))
    with pytest.raises(errors.ConcretizationTypeError, match="size"):
        kiln.make_jaxpr(jnp.nonzero)(kx)
    for size in (1, 3, 5):
        expected = np.nonzero(x)
        traced = run_traced(lambda a: jnp.nonzero(a, size=size, fill_value=-1), kx)
        for got, want in zip(traced, expected):
            padded = np.concatenate([want[:size], np.full(max(size - len(want), 0), -1)])
            assert_close(got, padded.astype(np.int32))
    traced = run_traced(lambda a: jnp.flatnonzero(a, size=4), kx)
    assert_close(traced, np.array([1, 3, 5, 0]))
    empty = run_traced(lambda a: jnp.nonzero(a, size=2), jnp.asarray(np.zeros((0, 3))))
    assert_close(empty[0], np.zeros(2, np.int32))


def test_compress_and_extract():
    x = np.arange(8).reshape(2, 4)
    kx = jnp.asarray(x)
    cond = np.array([True, False, True])
    assert_close(jnp.compress(cond, kx, axis=1), np.compress(cond, x, axis=1))
    assert_close(jnp.compress(np.array([1, 0, 2]), kx), np.compress([1, 0, 2], x))
    assert_close(
        jnp.compress(cond, jnp.asarray(np.arange(4)), size=3, fill_value=9), np.array([0, 2, 9])
    )
    with pytest.raises(ValueError, match="out of bounds"):
        jnp.compress(np.array([True, False, True, False, True]), kx, axis=1)
    assert_close(jnp.extract(x % 3 == 0, kx), np.extract(x % 3 == 0, x))
    traced = run_traced(
        lambda c, a: jnp.compress(c, a, size=2, axis=1),
        jnp.asarray(np.array([False, True, True, True])),
        kx,
    )
    assert_close(traced, x[:, 1:3])


def test_where_and_choose():
    rng = np.random.default_rng(3)
    c = rng.random((3, 4)) < 0.5
    a = rand((3, 4), np.float32, rng)
    b = rand((4,), np.int32, rng)
    assert_close(jnp.where(c, jnp.asarray(a), jnp.asarray(b)), np.where(c, a, b))
    out = jnp.where(jnp.asarray(np.array([0, 1, 1])), 1, 2.5)
    assert_close(out, np.array([2.5, 1, 1], np.float32))
    assert out.weak_type
    with pytest.raises(ValueError, match="both or neither"):
        jnp.where(c, 1)
    choices = [np.arange(3), 10 + np.arange(3), 20 + np.arange(3)]
    sel = np.array([0, 2, 1])
    assert_close(jnp.choose(sel, [jnp.asarray(ch) for ch in choices]), np.choose(sel, choices))
    assert_close(
        jnp.choose(np.array([0, 4, -1]), [jnp.asarray(ch) for ch in choices], mode="clip"),
        np.choose([0, 4, -1], choices, mode="clip"),
    )
    assert_close(
        jnp.choose(np.array([0, 4, -1]), [jnp.asarray(ch) for ch in choices], mode="wrap"),
        np.choose([0, 4, -1], choices, mode="wrap"),
    )
    with pytest.raises(ValueError, match="invalid entry"):
        jnp.choose(np.array([3]), [jnp.asarray(ch) for ch in choices])


def test_unravel_and_ravel_multi_index():
    flat = np.array([0, 5, 7, 11, 23])
    for got, want in zip(jnp.unravel_index(flat, (2, 3, 4)), np.unravel_index(flat, (2, 3, 4))):
        assert_close(got, want.astype(np.int32))
    rows, cols = jnp.unravel_index(jnp.asarray(np.array([7, 100, -1, -100])), (2, 3))
    assert_close(rows, np.array([1, 1, 1, 0])) and assert_close(cols, np.array([2, 2, 2, 0]))
    scalar = jnp.unravel_index(7, (2, 3))
    assert [int(s) for s in scalar] == [1, 2] and all(s.weak_type for s in scalar)
    assert jnp.unravel_index(3, ()) == ()
    narrow = jnp.unravel_index(jnp.asarray(np.array([1, 127, -1], np.int8)), (20, 20))
    assert_close(narrow[0], np.array([0, 6, 19], np.int8))
    assert_close(narrow[1], np.array([1, 7, 19], np.int8))
    coords = (np.array([1, 0, 1]), np.array([2, 1, 0]))
    assert_close(jnp.ravel_multi_index(coords, (2, 3)), np.ravel_multi_index(coords, (2, 3)))
    assert_close(
        jnp.ravel_multi_index(coords, (2, 3), order="F"),
        np.ravel_multi_index(coords, (2, 3), order="F"),
    )
    bad = (np.array([1, 5]), np.array([2, -1]))
    assert_close(jnp.ravel_multi_index(bad, (2, 3), mode="clip"), np.array([5, 3]))
    assert_close(jnp.ravel_multi_index(bad, (2, 3), mode="wrap"), np.array([5, 5]))
    with pytest.raises(ValueError, match="invalid entry"):
        jnp.ravel_multi_index(bad, (2, 3))
    with pytest.raises(ValueError, match="length"):
        jnp.ravel_multi_index(coords, (2, 3, 4))


def test_index_constructors():
    for got, want in zip(jnp.tril_indices(3, 1, 4), np.tril_indices(3, 1, 4)):
        assert_close(got, want.astype(np.int32))
    for got, want in zip(jnp.triu_indices(4, -1), np.triu_indices(4, -1)):
        assert_close(got, want.astype(np.int32))
    m = np.zeros((2, 3))
    for got, want in zip(jnp.triu_indices_from(m, 1), np.triu_indices_from(m, 1)):
        assert_close(got, want.astype(np.int32))
    for got, want in zip(jnp.tril_indices_from(m), np.tril_indices_from(m)):
        assert_close(got, want.astype(np.int32))
    for got, want in zip(jnp.diag_indices(3, 3), np.diag_indices(3, 3)):
        assert_close(got, want.astype(np.int32))
    assert len(jnp.diag_indices_from(np.zeros((2, 2)))) == 2
    with pytest.raises(ValueError):
        jnp.diag_indices_from(np.zeros((2, 3)))
    with pytest.raises(ValueError):
        jnp.diag_indices(-1)
    grid = jnp.ix_(np.array([0, 2]), np.array([True, False, True, True]))
    want = np.ix_(np.array([0, 2]), np.array([True, False, True, True]))
    for got, w in zip(grid, want):
        assert_close(got, w.astype(np.int32))
    x = np.arange(20).reshape(4, 5)
    assert_close(
        jnp.asarray(x)[jnp.ix_(np.array([3, 1]), np.array([0, 4]))], x[np.ix_([3, 1], [0, 4])]
    )

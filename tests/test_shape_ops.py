"""Shape primitives (kiln.lax) and kiln.numpy array manipulation against NumPy.

Every row of the op-record tables runs eagerly against its NumPy reference and is traced with
make_jaxpr: the jaxpr must typecheck, evaluate to the eager result bit for bit and agree with it
on shape, dtype and weak type. Then come the seed's jaxpr spellings, weak-type rules, property
tests of round trips and broadcasting, and the errors bad input must raise.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.array import Array
from kiln.core.jaxpr import Literal, typecheck_jaxpr
from tests._testing import ALL, OpRecord, check_record_eager, check_record_jit, make_args
from tests.op_records import (
    SHAPE_LAX_RECORDS,
    SHAPE_NUMPY_RECORDS,
    SHAPE_TRACE_RECORDS,
    np_pad_reference,
)


# --- tracing checks ----------------------------------------------------------------------------


def _flatten(tree):
    if isinstance(tree, (list, tuple)):
        return [leaf for item in tree for leaf in _flatten(item)]
    return [tree]


def run_jaxpr(closed, *args):
    """Evaluate a ClosedJaxpr eagerly by binding each equation (an independent interpreter)."""
    env = {}

    def read(atom):
        if isinstance(atom, Literal):
            return Array._wrap(np.array(atom.val, dtype=atom.aval.dtype), atom.aval.weak_type)
        return env[id(atom)]

    for var, value in zip(closed.jaxpr.constvars, closed.consts):
        env[id(var)] = value
    for var, value in zip(closed.jaxpr.invars, args):
        env[id(var)] = value
    for eqn in closed.jaxpr.eqns:
        out = eqn.primitive.bind(*[read(a) for a in eqn.invars], **eqn.params)
        for var, value in zip(eqn.outvars, out if eqn.primitive.multiple_results else [out]):
            env[id(var)] = value
    return [read(v) for v in closed.jaxpr.outvars]


def check_record_traced(record: OpRecord, shapes, dtype) -> None:
    args = [jnp.asarray(a) for a in make_args(record, shapes, dtype)]
    kwargs = record.static_kwargs
    eager = _flatten(record.fn(*args, **kwargs))
    closed = kiln.make_jaxpr(lambda *a: record.fn(*a, **kwargs))(*args)
    typecheck_jaxpr(closed.jaxpr)
    traced = run_jaxpr(closed, *args)
    assert len(traced) == len(eager) == len(closed.out_avals)
    for t, e, aval in zip(traced, eager, closed.out_avals):
        e_aval = jnp.asarray(e).aval
        assert (aval.shape, aval.dtype, aval.weak_type) == (
            e_aval.shape,
            e_aval.dtype,
            e_aval.weak_type,
        ), (record.name, aval, e_aval)
        t, e = np.asarray(t), np.asarray(e)
        assert t.shape == e.shape and t.dtype == e.dtype and t.tobytes() == e.tobytes()


# --- the op records ----------------------------------------------------------------------------


def _cases(records):
    return (
        [(r, s, d) for r in records for s, d in r.cases()],
        [i for r in records for i in r.ids()],
    )


LAX_CASES, LAX_IDS = _cases(SHAPE_LAX_RECORDS)
JNP_CASES, JNP_IDS = _cases(SHAPE_NUMPY_RECORDS)


@pytest.mark.parametrize("record,shapes,dtype", LAX_CASES, ids=LAX_IDS)
def test_lax_records(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)
    check_record_traced(record, shapes, dtype)


@pytest.mark.parametrize("record,shapes,dtype", JNP_CASES, ids=JNP_IDS)
def test_jnp_records(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)
    check_record_traced(record, shapes, dtype)


@pytest.mark.skipif(not hasattr(jnp, "sum"), reason="jnp.sum (reductions) not available")
@pytest.mark.parametrize(
    "record,shapes,dtype", _cases(SHAPE_TRACE_RECORDS)[0], ids=_cases(SHAPE_TRACE_RECORDS)[1]
)
def test_trace_records(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)
    check_record_traced(record, shapes, dtype)


JIT_SAMPLE = [
    (r, s, d)
    for r, s, d in LAX_CASES + JNP_CASES
    if d in (np.dtype(np.float32), np.dtype(np.int8)) and s == r.shapes[-1]
]


@pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit is not available yet")
@pytest.mark.parametrize(
    "record,shapes,dtype", JIT_SAMPLE, ids=[f"{r.name}-{d.name}" for r, _, d in JIT_SAMPLE]
)
def test_records_jit(record, shapes, dtype):
    check_record_jit(record, shapes, dtype)


# --- iota ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [d for d in ALL if d != np.bool_], ids=str)
@pytest.mark.parametrize("shape,dimension", [((5,), 0), ((3, 4), 1), ((0, 2), 0), ((2, 3), 0)])
def test_iota(dtype, shape, dimension):
    out = lax.broadcasted_iota(dtype, shape, dimension)
    expected = np.broadcast_to(
        np.arange(shape[dimension]).reshape(
            [-1 if i == dimension else 1 for i in range(len(shape))]
        ),
        shape,
    ).astype(dtype)
    assert out.dtype == dtype and not out.weak_type
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize(
    "dtype,length",
    [(np.uint8, 256), (np.uint8, 257), (np.int8, 300), (np.int16, 40000), (np.uint32, 2**20 + 3)],
)
def test_iota_at_and_past_the_end_of_its_dtype(dtype, length):
    # Counts that fit are made in the dtype itself; longer ones wrap like a conversion.
    out = lax.iota(dtype, length)
    assert out.dtype == dtype
    np.testing.assert_array_equal(np.asarray(out), np.arange(length).astype(dtype))


def test_iota_counts_exactly_in_narrow_floats():
    out = np.asarray(lax.iota(ml_dtypes.bfloat16, 300))
    np.testing.assert_array_equal(out, np.arange(300).astype(ml_dtypes.bfloat16))


# --- jaxpr spelling --------------------------------------------------------------------------


def _jaxpr_text(fn, *args, **kwargs):
    return str(kiln.make_jaxpr(fn, **kwargs)(*args))


def test_full_of_traced_value_is_broadcast_in_dim():
    text = _jaxpr_text(lambda a, n: jnp.full((n,), a), 2, 5, static_argnums=(1,))
    assert text == (
        "{ lambda ; a:i32[]. let\n"
        "    b:i32[5] = broadcast_in_dim[broadcast_dimensions=() shape=(5,)] a\n"
        "  in (b,) }"
    )
    text = _jaxpr_text(lambda a, n: jnp.full((n,), a), 1.6, 10, static_argnums=(1,))
    assert "b:f32[10] = broadcast_in_dim[broadcast_dimensions=() shape=(10,)] a" in text


def test_copy_is_staged_as_copy():
    def stupid_fn(x):
        y = jnp.copy(x)
        for _ in range(3):
            x = x * x
        return y

    text = _jaxpr_text(stupid_fn, jnp.ones(4))
    assert text.startswith("{ lambda ; a:f32[4]. let\n    b:f32[4] = copy a\n")
    assert text.endswith("in (b,) }")
    assert (
        _jaxpr_text(lambda x: jnp.array(x), jnp.ones(2))
        == "{ lambda ; a:f32[2]. let b:f32[2] = copy a in (b,) }"
    )
    assert (
        _jaxpr_text(lambda x: jnp.asarray(x), jnp.ones(2)) == "{ lambda ; a:f32[2]. let  in (a,) }"
    )


def test_shape_primitives_print_like_jax():
    x = jnp.ones((2, 3))
    cases = [
        (
            lambda x: jnp.reshape(x, (3, 2)),
            "b:f32[3,2] = reshape[dimensions=None new_sizes=(3, 2)] a",
        ),
        (lambda x: jnp.ravel(x), "b:f32[6] = reshape[dimensions=None new_sizes=(6,)] a"),
        (lambda x: jnp.transpose(x), "b:f32[3,2] = transpose[permutation=(1, 0)] a"),
        (
            lambda x: jnp.expand_dims(x, 0),
            "b:f32[1,2,3] = broadcast_in_dim[broadcast_dimensions=(1, 2) shape=(1, 2, 3)] a",
        ),
        (lambda x: jnp.flip(x, 0), "b:f32[2,3] = rev[dimensions=(0,)] a"),
        (lambda x: jnp.concatenate([x, x]), "b:f32[4,3] = concatenate[dimension=0] a a"),
        (
            lambda x: lax.slice(x, (0, 1), (2, 3)),
            "b:f32[2,2] = slice[limit_indices=(2, 3) start_indices=(0, 1) strides=None] a",
        ),
        (
            lambda x: lax.pad(x, 0.0, [(1, 1, 0), (0, -1, 1)]),
            "b:f32[4,4] = pad[padding_config=((1, 1, 0), (0, -1, 1))] a 0.0",
        ),
        (
            lambda x: lax.squeeze(lax.expand_dims(x, (0,)), (0,)),
            "c:f32[2,3] = squeeze[dimensions=(0,)] b",
        ),
        (lambda x: jnp.arange(5), "b:i32[5] = iota[dimension=0 dtype=int32 shape=(5,)] "),
    ]
    for fn, line in cases:
        assert line in _jaxpr_text(fn, x), (line, _jaxpr_text(fn, x))


def test_no_op_reshapes_and_transposes_stage_nothing():
    x = jnp.ones((2, 3))
    for fn in (
        lambda x: jnp.reshape(x, (2, 3)),
        lambda x: jnp.transpose(x, (0, 1)),
        lambda x: lax.slice(x, (0, 0), (2, 3)),
        lambda x: jnp.concatenate([x]),
        lambda x: jnp.squeeze(x),
        lambda x: jnp.broadcast_to(x, (2, 3)),
    ):
        assert _jaxpr_text(fn, x) == "{ lambda ; a:f32[2,3]. let  in (a,) }"


def test_repeat_and_tile_stage_broadcast_and_reshape():
    text = _jaxpr_text(lambda x: jnp.repeat(x, 2, 1), jnp.ones((2, 3)))
    assert "broadcast_in_dim[broadcast_dimensions=(0, 1) shape=(2, 3, 2)]" in text
    assert "reshape[dimensions=None new_sizes=(2, 6)]" in text


# --- weak types ------------------------------------------------------------------------------


def test_shape_ops_keep_weak_type():
    w = jnp.asarray(2.0)  # a Python scalar: weakly typed
    assert w.weak_type
    for out in (
        lax.reshape(w, (1,)),
        lax.expand_dims(w, (0,)),
        lax.rev(w, ()),
        lax.copy(w),
        jnp.ravel(w),
        jnp.atleast_2d(w),
        jnp.broadcast_to(w, (3,)),
        jnp.tile(w, 3),
        lax.pad(lax.reshape(w, (1,)), 0.0, [(1, 1, 0)]),
    ):
        assert out.weak_type and out.dtype == np.float32
        closed = kiln.make_jaxpr(lambda: out)()
        assert closed.out_avals[0].weak_type


def test_concatenate_weak_type_needs_all_weak():
    w, s = jnp.asarray(1.0), jnp.ones((), np.float32)
    assert lax.concatenate([lax.reshape(w, (1,)), lax.reshape(w, (1,))], 0).weak_type
    assert not lax.concatenate([lax.reshape(w, (1,)), lax.reshape(s, (1,))], 0).weak_type
    assert jnp.stack([1.0, 2]).weak_type and jnp.stack([1.0, 2]).dtype == np.float32
    mixed = jnp.concatenate([jnp.ones(2, np.float16), jnp.atleast_1d(3.0)])
    assert mixed.dtype == np.float16 and not mixed.weak_type
    traced = kiln.make_jaxpr(lambda a, b: lax.concatenate([a, b], 0))(
        jnp.atleast_1d(1.0), jnp.ones(1)
    )
    assert not traced.out_avals[0].weak_type


def test_pad_weak_type_and_int_padding_value():
    x = jnp.arange(3)
    out = lax.pad(x, 7, [(1, 0, 0)])
    assert out.dtype == np.int32 and not out.weak_type
    np.testing.assert_array_equal(np.asarray(out), [7, 0, 1, 2])
    out = jnp.pad(jnp.asarray(np.arange(3, dtype=np.uint8)), 1, constant_values=300)
    assert out.dtype == np.uint8


# --- immutability ----------------------------------------------------------------------------


def test_views_never_alias_writable_numpy_input():
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    outs = [
        lax.reshape(host, (6,)),
        lax.slice(host, (0, 0), (1, 3)),
        lax.squeeze(host[None], (0,)),
        lax.transpose(host, (1, 0)),
        lax.rev(host, (0,)),
        lax.rev(host, ()),
        lax.squeeze(host, ()),
        lax.concatenate([host], 0),
    ]
    assert host.flags.writeable  # wrapping a result must not freeze the caller's array
    snapshots = [np.asarray(o).copy() for o in outs]
    host[...] = -1
    for out, snap in zip(outs, snapshots):
        np.testing.assert_array_equal(np.asarray(out), snap)
        assert np.asarray(out).flags.c_contiguous and not np.asarray(out).flags.writeable


def test_inputs_are_not_mutated():
    host = np.arange(6, dtype=np.int32).reshape(2, 3)
    before = host.copy()
    jnp.pad(host, 2, mode="reflect")
    lax.pad(host, 0, [(1, -1, 2), (0, 0, 0)])
    jnp.insert(jnp.asarray(host), 1, 5)
    np.testing.assert_array_equal(host, before)


# --- property tests --------------------------------------------------------------------------

shapes_st = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)
PROPERTY = settings(max_examples=40, deadline=None)


def _data(shape, dtype=np.float32):
    return np.arange(math.prod(shape), dtype=np.int64).astype(dtype).reshape(shape)


@PROPERTY
@given(shapes_st, st.randoms(use_true_random=False))
def test_reshape_round_trip(shape, rng):
    x = _data(shape)
    target = list(shape)
    rng.shuffle(target)
    out = jnp.reshape(jnp.asarray(x), tuple(target))
    np.testing.assert_array_equal(np.asarray(out), x.reshape(target))
    back = jnp.reshape(out, shape)
    np.testing.assert_array_equal(np.asarray(back), x)
    if x.size and shape:
        minus = jnp.reshape(jnp.asarray(x), (-1,) + tuple(shape[1:]))
        assert minus.shape == shape


@PROPERTY
@given(shapes_st, st.randoms(use_true_random=False))
def test_transpose_round_trip(shape, rng):
    x = _data(shape)
    perm = list(range(len(shape)))
    rng.shuffle(perm)
    out = lax.transpose(jnp.asarray(x), tuple(perm))
    np.testing.assert_array_equal(np.asarray(out), np.transpose(x, perm))
    inverse = tuple(np.argsort(perm))
    np.testing.assert_array_equal(np.asarray(lax.transpose(out, inverse)), x)


@PROPERTY
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=4), shapes_st.filter(bool), st.integers(0, 3)
)
def test_concatenate_then_split_round_trip(lengths, base, axis_pick):
    axis = axis_pick % len(base)
    parts = []
    for i, n in enumerate(lengths):
        shape = list(base)
        shape[axis] = n
        parts.append(_data(tuple(shape), np.int32) + 100 * i)
    joined = jnp.concatenate([jnp.asarray(p) for p in parts], axis=axis)
    np.testing.assert_array_equal(np.asarray(joined), np.concatenate(parts, axis=axis))
    pieces = jnp.split(joined, np.cumsum(lengths)[:-1].tolist(), axis=axis)
    assert len(pieces) == len(parts)
    for piece, part in zip(pieces, parts):
        np.testing.assert_array_equal(np.asarray(piece), part)


pad_triple = st.tuples(st.integers(-2, 3), st.integers(-2, 3), st.integers(0, 2))


@PROPERTY
@given(st.lists(st.tuples(st.integers(0, 4), pad_triple), min_size=0, max_size=3))
def test_pad_matches_reference_and_slices_back(dims):
    shape = tuple(d for d, _ in dims)
    config = [t for _, t in dims]
    sizes = [lo + hi + d + max(d - 1, 0) * i for d, (lo, hi, i) in zip(shape, config)]
    x = _data(shape, np.int32)
    if any(s < 0 for s in sizes):
        with pytest.raises(ValueError, match="Dimension size after padding"):
            lax.pad(jnp.asarray(x), -1, config)
        return
    out = lax.pad(jnp.asarray(x), -1, config)
    np.testing.assert_array_equal(np.asarray(out), np_pad_reference(x, -1, config))
    if all(lo >= 0 and hi >= 0 for lo, hi, _ in config):
        back = lax.slice(
            out,
            [lo for lo, _, _ in config],
            [lo + d + max(d - 1, 0) * i for d, (lo, _, i) in zip(shape, config)],
            [i + 1 for _, _, i in config],
        )
        np.testing.assert_array_equal(np.asarray(back), x)


@st.composite
def broadcastable_shapes(draw):
    result = draw(st.lists(st.integers(0, 3), min_size=0, max_size=4))
    shapes = []
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(0, len(result)))
        tail = result[len(result) - k :]
        shapes.append(tuple(d if draw(st.booleans()) else 1 for d in tail))
    return shapes


@PROPERTY
@given(broadcastable_shapes())
def test_broadcasting_matches_numpy(shapes):
    expected = np.broadcast_shapes(*shapes)
    assert jnp.broadcast_shapes(*shapes) == expected
    arrays = [_data(s, np.int16) for s in shapes]
    outs = jnp.broadcast_arrays(*[jnp.asarray(a) for a in arrays])
    for out, ref in zip(outs, np.broadcast_arrays(*arrays)):
        np.testing.assert_array_equal(np.asarray(out), ref)
    out = jnp.broadcast_to(jnp.asarray(arrays[0]), expected)
    np.testing.assert_array_equal(np.asarray(out), np.broadcast_to(arrays[0], expected))


# --- errors ----------------------------------------------------------------------------------

X = jnp.ones((2, 3))

LAX_ERRORS = [
    (
        lambda: lax.reshape(jnp.ones(6), (4,)),
        TypeError,
        r"total size must be unchanged.*\(4,\)"
        r".*\(6,\)",
    ),
    (lambda: lax.squeeze(X, (0,)), ValueError, "cannot select an axis to squeeze out"),
    (lambda: lax.squeeze(X, (2,)), ValueError, "out of bounds"),
    (lambda: lax.transpose(X, (0,)), TypeError, "isn't a permutation"),
    (lambda: lax.transpose(X, (0, 0)), TypeError, "isn't a permutation"),
    (lambda: lax.rev(X, (3,)), TypeError, "less than operand ndim"),
    (lambda: lax.expand_dims(jnp.ones(3), (0, 0)), ValueError, "repeated axis"),
    (lambda: lax.expand_dims(jnp.ones(3), (5,)), ValueError, "out of bounds"),
    (lambda: lax.concatenate([jnp.ones(3), jnp.ones(3, np.int32)], 0), TypeError, "same dtypes"),
    (
        lambda: lax.concatenate([jnp.ones(3), jnp.ones((3, 1))], 0),
        TypeError,
        "different numbers of dimensions",
    ),
    (lambda: lax.concatenate([jnp.ones(3), jnp.ones(3)], 1), TypeError, "dimension out of bounds"),
    (lambda: lax.concatenate([X, jnp.ones((3, 2))], 0), TypeError, "differ in dimensions"),
    (lambda: lax.concatenate([], 0), ValueError, "non-empty"),
    (lambda: lax.pad(jnp.ones(3), 0.0, [(-2, -2, 0)]), ValueError, "Dimension size after padding"),
    (lambda: lax.pad(jnp.ones(3), 0.0, [(1, 1, -1)]), ValueError, "interior padding"),
    (lambda: lax.pad(jnp.ones(3), 0.0, [(1, 1, 0)] * 2), TypeError, "one \\(lo, hi"),
    (lambda: lax.pad(jnp.ones(3), jnp.ones(2), [(1, 1, 0)]), TypeError, "scalar"),
    (lambda: lax.pad(jnp.ones(3), jnp.ones((), np.int32), [(1, 1, 0)]), TypeError, "same dtype"),
    (lambda: lax.slice(jnp.ones(3), (2,), (1,)), TypeError, "greater than or equal"),
    (lambda: lax.slice(jnp.ones(3), (0,), (4,)), TypeError, "less than or equal"),
    (lambda: lax.slice(jnp.ones(3), (0,), (3,), (0,)), TypeError, "strides must be positive"),
    (lambda: lax.slice(X, (0,), (1,)), TypeError, "one entry per operand dimension"),
    (lambda: lax.iota(np.bool_, 3), TypeError, "iota does not accept dtype bool"),
    (lambda: lax.broadcasted_iota(np.int32, (2, 3), 2), ValueError, "iota dimension"),
    (lambda: lax.broadcast_in_dim(jnp.ones(3), (4,), (0,)), TypeError, "cannot broadcast"),
    (lambda: lax.index_in_dim(X, 5), IndexError, "out of bounds"),
    (lambda: lax.full((2,), jnp.ones(2)), TypeError, "scalar fill_value"),
]

JNP_ERRORS = [
    (
        lambda: X.reshape(4),
        TypeError,
        r"cannot reshape array of shape \(2, 3\) \(size 6\) into shape \(?4,?\)? \(size 4\)",
    ),
    (lambda: X.reshape(4, -1), TypeError, r"into shape \(4, -1\) because the product"),
    (lambda: X.reshape(-1, -1), TypeError, "only specify one unknown axis"),
    (lambda: jnp.reshape(X, (2, 3), order="K"), ValueError, "order"),
    (lambda: jnp.reshape(X, (2, 3), order="A"), NotImplementedError, "order='A'"),
    (lambda: jnp.transpose(X, (0, 2)), ValueError, "axis 2 is out of bounds"),
    (lambda: jnp.transpose(X, (0,)), TypeError, "isn't a permutation"),
    (lambda: jnp.squeeze(X, 0), ValueError, "cannot select an axis to squeeze out"),
    (lambda: jnp.expand_dims(jnp.ones(3), 5), ValueError, "out of bounds"),
    (lambda: jnp.moveaxis(X, 0, 3), ValueError, "out of bounds"),
    (lambda: jnp.moveaxis(X, (0, 1), 0), ValueError, "Inconsistent number"),
    (lambda: jnp.swapaxes(X, 0, 2), ValueError, "out of bounds"),
    (lambda: jnp.concatenate([jnp.ones(()), jnp.ones(())]), ValueError, "Zero-dimensional"),
    (lambda: jnp.concatenate([]), ValueError, "Need at least one array"),
    (lambda: jnp.concatenate([X, X], axis=2), ValueError, "out of bounds"),
    (lambda: jnp.stack([jnp.ones(2), jnp.ones(3)]), ValueError, "same shape"),
    (lambda: jnp.stack([]), ValueError, "Need at least one array"),
    (
        lambda: jnp.broadcast_to(jnp.ones(3), (4,)),
        ValueError,
        r"Incompatible types for broadcasting: input type=f32\[3\] and requested type=f32\[4\]",
    ),
    (lambda: jnp.broadcast_to(jnp.ones((2, 3)), (3,)), ValueError, "Incompatible types"),
    (lambda: jnp.broadcast_shapes((2,), (3,)), ValueError, "Incompatible shapes"),
    (lambda: jnp.broadcast_arrays(jnp.ones(2), jnp.ones(3)), ValueError, "Incompatible"),
    (lambda: jnp.split(jnp.ones(5), 2), ValueError, "equal division: rest is 1"),
    (lambda: jnp.split(jnp.ones(5), 0), ValueError, "larger than 0"),
    (lambda: jnp.hsplit(jnp.ones(()), 1), ValueError, "1 or more dimensions"),
    (lambda: jnp.vsplit(jnp.ones(3), 1), ValueError, "2 or more dimensions"),
    (lambda: jnp.dsplit(X, 1), ValueError, "3 or more dimensions"),
    (lambda: jnp.tril(jnp.ones(3)), ValueError, "at least 2D"),
    (lambda: jnp.triu(jnp.ones(3)), ValueError, "at least 2D"),
    (lambda: jnp.diag(jnp.ones((2, 2, 2))), ValueError, "1d or 2d"),
    (lambda: jnp.diagonal(jnp.ones(3)), ValueError, "at least two dimensions"),
    (lambda: jnp.diagonal(X, 0, 1, 1), ValueError, "cannot be the same"),
    (lambda: jnp.rot90(jnp.ones(3)), ValueError, "ndim at least two"),
    (lambda: jnp.rot90(X, axes=(1, 1)), ValueError, "Axes must be different"),
    (
        lambda: jnp.pad(jnp.arange(3), 1, mode="foo"),
        NotImplementedError,
        "Unimplemented padding mode 'foo'",
    ),
    (lambda: jnp.pad(jnp.arange(3), 1, mode="mean"), NotImplementedError, "not implemented"),
    (lambda: jnp.pad(jnp.arange(3), -1), ValueError, "negative values"),
    (lambda: jnp.pad(jnp.arange(3), ((1, 2, 3),)), ValueError, "cannot be broadcast"),
    (lambda: jnp.pad(jnp.arange(0), 2, mode="edge"), ValueError, "empty axis"),
    (lambda: jnp.pad(jnp.arange(0), 2, mode="reflect"), ValueError, "empty axis"),
    (
        lambda: jnp.pad(jnp.arange(3), 1, mode="edge", constant_values=1),
        ValueError,
        "Unsupported keyword",
    ),
    (
        lambda: jnp.pad(jnp.arange(3), 1, mode="reflect", reflect_type="sideways"),
        ValueError,
        "reflect_type",
    ),
    (lambda: jnp.repeat(jnp.arange(3), np.array([1, 2])), ValueError, "do not match"),
    (lambda: jnp.repeat(jnp.arange(3), -1), ValueError, "negative"),
    (lambda: jnp.tile(jnp.arange(3), -1), ValueError, "non-negative"),
    (lambda: jnp.resize(jnp.arange(3), (-1,)), ValueError, "non-negative"),
    (lambda: jnp.delete(jnp.arange(3), 5), IndexError, "out of bounds"),
    (lambda: jnp.insert(jnp.arange(3), 5, 1), IndexError, "out of bounds"),
    (lambda: jnp.block([[X], X]), ValueError, "depths are mismatched"),
    (lambda: jnp.block([]), ValueError, "cannot be empty"),
    (lambda: jnp.block((X, X)), TypeError, "tuple"),
    (lambda: jnp.size(X, 2), ValueError, "out of bounds"),
]


@pytest.mark.parametrize(
    "fn,exc,match",
    LAX_ERRORS + JNP_ERRORS,
    ids=[f"error{i}" for i in range(len(LAX_ERRORS + JNP_ERRORS))],
)
def test_bad_input_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


LIST_CALLS = [
    ("reshape", lambda a: jnp.reshape(a, (2,))),
    ("ravel", jnp.ravel),
    ("transpose", jnp.transpose),
    ("moveaxis", lambda a: jnp.moveaxis(a, 0, 0)),
    ("swapaxes", lambda a: jnp.swapaxes(a, 0, 0)),
    ("squeeze", jnp.squeeze),
    ("expand_dims", lambda a: jnp.expand_dims(a, 0)),
    ("atleast_1d", jnp.atleast_1d),
    ("atleast_2d", jnp.atleast_2d),
    ("atleast_3d", jnp.atleast_3d),
    ("broadcast_to", lambda a: jnp.broadcast_to(a, (2,))),
    ("broadcast_arrays", lambda a: jnp.broadcast_arrays(a, a)),
    ("concatenate", lambda a: jnp.concatenate([a, a])),
    ("stack", lambda a: jnp.stack([a])),
    ("hstack", lambda a: jnp.hstack([a])),
    ("vstack", lambda a: jnp.vstack([a])),
    ("split", lambda a: jnp.split(a, 2)),
    ("array_split", lambda a: jnp.array_split(a, 2)),
    ("tile", lambda a: jnp.tile(a, 2)),
    ("repeat", lambda a: jnp.repeat(a, 2)),
    ("repeat", lambda a: jnp.repeat(jnp.ones(2), a)),
    ("flip", jnp.flip),
    ("roll", lambda a: jnp.roll(a, 1)),
    ("rot90", jnp.rot90),
    ("tril", jnp.tril),
    ("triu", jnp.triu),
    ("diag", jnp.diag),
    ("diagonal", jnp.diagonal),
    ("diagflat", jnp.diagflat),
    ("trace", jnp.trace),
    ("pad", lambda a: jnp.pad(a, 1)),
    ("resize", lambda a: jnp.resize(a, 3)),
    ("append", lambda a: jnp.append(a, a)),
    ("delete", lambda a: jnp.delete(jnp.ones(2), a)),
    ("delete", lambda a: jnp.delete(a, 0)),
    ("insert", lambda a: jnp.insert(a, 0, 1)),
    ("copy", jnp.copy),
    ("column_stack", lambda a: jnp.column_stack([a])),
]


@pytest.mark.parametrize(
    "name,call", LIST_CALLS, ids=[f"{n}{i}" for i, (n, _) in enumerate(LIST_CALLS)]
)
def test_lists_are_rejected(name, call):
    with pytest.raises(TypeError, match=f"{name} requires ndarray or scalar arguments"):
        call([1, 2])


def test_shape_queries_accept_lists_like_numpy():
    assert jnp.shape([[1, 2, 3]]) == (1, 3)
    assert jnp.ndim([[1, 2, 3]]) == 2
    assert jnp.size([[1, 2, 3]]) == 3 and jnp.size(X, -1) == 3
    assert jnp.shape(X) == (2, 3) and jnp.ndim(3.0) == 0


def test_traced_shape_arguments_ask_for_static_values():
    with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values"):
        kiln.make_jaxpr(lambda x, n: jnp.reshape(x, (n, -1)))(jnp.ones(6), 2)
    with pytest.raises(kiln.core.errors.ConcretizationTypeError, match="'shift'"):
        kiln.make_jaxpr(lambda x, s: jnp.roll(x, s))(jnp.ones(6), 2)
    with pytest.raises(kiln.core.errors.ConcretizationTypeError, match="repeat"):
        kiln.make_jaxpr(lambda x, r: jnp.repeat(x, r))(jnp.ones(6), jnp.ones(6, np.int32))
    with pytest.raises(TypeError, match="static"):
        kiln.make_jaxpr(lambda x, i: jnp.delete(x, i))(jnp.ones(6), jnp.ones((), np.int32))


def test_shape_ops_accept_numpy_and_scalars():
    np.testing.assert_array_equal(
        np.asarray(jnp.reshape(np.arange(6), (2, 3))), np.arange(6).reshape(2, 3)
    )
    out = jnp.atleast_1d(3)
    assert out.shape == (1,) and out.dtype == np.int32 and out.weak_type
    out = jnp.concatenate([np.zeros(2, np.int8), jnp.atleast_1d(3)])
    assert out.dtype == np.int8
    assert lax.reshape(2.5, (1, 1)).shape == (1, 1)

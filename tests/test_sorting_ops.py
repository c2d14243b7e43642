"""Sorting: the lax sort (multi-operand, num_keys) and top_k primitives, and kiln.numpy's sort,
argsort, lexsort, partition, searchsorted and unique, against NumPy (NaNs last, stable ties),
across dtype families, 0-d and empty shapes, traced evaluation and bad input."""

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.errors import ConcretizationTypeError
from kiln.core.interpreter import eval_closed_jaxpr
from kiln.core.jaxpr import typecheck_jaxpr
from tests._testing import check_record_eager, rand
from tests.op_records import SHAPES_AXES, SORT_DTYPES, SORT_RECORDS, np_sort, np_sortable

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, C64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.complex64)
I8, U8, I32, U32 = (np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.uint32))
BOOL = np.dtype(np.bool_)
ALL = SORT_DTYPES


def with_specials(x: np.ndarray, rng) -> np.ndarray:
    """Sprinkle NaN, +-inf, -0.0 and ties into float data so that the order rules matter."""
    if x.dtype.kind not in "fc" and x.dtype != BF16 or x.size < 4:
        return x
    flat = x.reshape(-1).copy()
    specials = [np.nan, np.inf, -np.inf, -0.0, 0.0, flat[0]]
    picks = rng.choice(flat.size, size=min(len(specials), flat.size), replace=False)
    for i, v in zip(picks, specials):
        flat[i] = v
    return flat.reshape(x.shape)


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rand(shape, dtype, rng)
    if dtype.kind in "iu" and x.size:
        x = (x % 4).astype(dtype)  # many ties
    return with_specials(x, rng)


def assert_same(actual, expected):
    """Exact equality with NaN == NaN (bfloat16 compared through float32)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if BF16 in (actual.dtype, expected.dtype):
        actual, expected = actual.astype(np.float32), expected.astype(np.float32)
    np.testing.assert_array_equal(actual, expected)


def check_traced(fn, *args):
    args = [jnp.asarray(a) for a in args]
    eager = fn(*args)
    closed = kiln.make_jaxpr(fn)(*args)
    typecheck_jaxpr(closed.jaxpr)
    traced = eval_closed_jaxpr(closed, *args)
    eager_flat = list(eager) if isinstance(eager, (tuple, list)) else [eager]
    for t, e, aval in zip(traced, eager_flat, closed.out_avals):
        assert aval.shape == e.shape and aval.dtype == e.dtype
        assert_same(np.asarray(t), np.asarray(e))


# --- lax.sort --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
def test_lax_sort_single_operand(shape, axis, dtype):
    x = data(shape, dtype, 1)
    out = lax.sort(jnp.asarray(x), dimension=axis)
    assert out.dtype == dtype and out.shape == shape
    expected = np.sort(np_sortable(x), axis=axis, kind="stable").astype(dtype)
    assert_same(np.asarray(out), expected)


@pytest.mark.parametrize("dtype", [BOOL, I8, U32, F16, BF16, F32], ids=lambda d: d.name)
@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
def test_lax_sort_carries_operands_stably(shape, axis, dtype):
    x = data(shape, dtype, 2)
    idx = np.broadcast_to(
        np.arange(shape[axis]).reshape(
            [-1 if d == axis % len(shape) else 1 for d in range(len(shape))]
        ),
        shape,
    )
    keys, perm = lax.sort(
        (jnp.asarray(x), jnp.asarray(idx.astype(np.int32))), dimension=axis, num_keys=1
    )
    expected_perm = np.argsort(np_sortable(x), axis=axis, kind="stable")
    assert_same(np.asarray(perm), expected_perm)
    assert_same(
        np.asarray(keys), np.take_along_axis(np_sortable(x), expected_perm, axis).astype(dtype)
    )


def test_lax_sort_num_keys_is_lexicographic():
    primary = np.array([2, 1, 2, 1, 0, 2], np.int32)
    secondary = np.array([0.5, np.nan, -1.0, 0.0, 9.0, -1.0], np.float32)
    payload = np.arange(6, dtype=np.int32)
    outs = lax.sort(
        (jnp.asarray(primary), jnp.asarray(secondary), jnp.asarray(payload)), num_keys=2
    )
    order = np.lexsort((secondary, primary))
    for out, ref in zip(outs, (primary, secondary, payload)):
        assert_same(np.asarray(out), ref[order])
    # num_keys=1 ignores the second key: ties in the first keep their input order.
    outs = lax.sort(
        (jnp.asarray(primary), jnp.asarray(secondary), jnp.asarray(payload)), num_keys=1
    )
    assert_same(np.asarray(outs[2]), np.argsort(primary, kind="stable"))


def test_lax_sort_nan_and_signed_zero_order():
    x = np.array([np.nan, 1.0, -np.inf, -0.0, np.inf, 0.0, -np.nan, -2.0], np.float32)
    out = np.asarray(lax.sort(jnp.asarray(x)))
    assert_same(out[:6], [-np.inf, -2.0, -0.0, 0.0, 1.0, np.inf])
    assert np.signbit(out[2]) and not np.signbit(out[3])  # stable: -0.0 came first
    assert np.isnan(out[6:]).all()
    c = np.array([1 + 1j, np.nan + 0j, 1 - 1j, -1 + 0j], np.complex64)
    assert_same(np.asarray(lax.sort(jnp.asarray(c))), np.sort(c))


def test_lax_sort_weak_types_errors_and_printing():
    out = lax.sort((jnp.asarray(np.ones(3, np.float32)), jnp.asarray(np.ones(3, np.int32))))
    assert isinstance(out, tuple) and len(out) == 2
    text = str(
        kiln.make_jaxpr(lambda a, b: lax.sort((a, b), num_keys=1))(
            jnp.asarray(np.ones(2, np.float32)), jnp.asarray(np.ones(2, np.int32))
        )
    )
    assert "sort[dimension=0 is_stable=True num_keys=1] a b" in text
    with pytest.raises(TypeError, match="same shape"):
        lax.sort((jnp.asarray(np.ones(3)), jnp.asarray(np.ones(4))))
    with pytest.raises(ValueError, match="num_keys"):
        lax.sort((jnp.asarray(np.ones(3)),), num_keys=2)
    with pytest.raises(ValueError, match="dimension"):
        lax.sort(jnp.asarray(np.ones(3)), dimension=1)


def test_lax_sort_keeps_weak_types_per_operand():
    weak = lax.full((3,), 1.0)
    strong = jnp.asarray(np.ones(3, np.float32))
    a, b = lax.sort((weak, strong))
    assert a.weak_type and not b.weak_type
    closed = kiln.make_jaxpr(lambda x, y: lax.sort((x, y)))(weak, strong)
    assert [v.weak_type for v in closed.out_avals] == [True, False]


# --- lax.top_k -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [BOOL, I8, U8, I32, F16, BF16, F32], ids=lambda d: d.name)
@pytest.mark.parametrize("shape,k", [((6,), 3), ((6,), 6), ((6,), 0), ((3, 5), 2), ((2, 3, 4), 4)])
def test_top_k(shape, k, dtype):
    x = data(shape, dtype, 3)
    values, indices = lax.top_k(jnp.asarray(x), k)
    assert values.dtype == dtype and indices.dtype == np.int32
    assert values.shape == shape[:-1] + (k,)
    # Reference: largest first, NaN counted largest, ties by lower index.
    key = np_sortable(x).astype(np.float64) if dtype != BOOL else x.astype(np.float64)
    key = np.where(np.isnan(key), np.inf, key)
    rank_nan = (
        np.isnan(np_sortable(x).astype(np.float64)) if dtype != BOOL else np.zeros(shape, bool)
    )
    order = np.lexsort((-key, ~rank_nan), axis=-1)[..., :k]
    assert_same(np.asarray(indices), order)
    assert_same(np.asarray(values), np.take_along_axis(x, order, -1))


def test_top_k_extremes_and_errors():
    x = jnp.asarray(np.array([-128, 127, 0, -128], np.int8))
    values, indices = lax.top_k(x, 4)
    assert_same(np.asarray(values), [127, 0, -128, -128])
    assert_same(np.asarray(indices), [1, 2, 0, 3])
    with pytest.raises(TypeError, match="larger"):
        lax.top_k(x, 5)
    with pytest.raises(TypeError, match="rank"):
        lax.top_k(jnp.asarray(np.float32(1)), 1)


# --- kiln.numpy.sort / argsort ---------------------------------------------------------------


def _special_data_record_check(record, shapes, dtype):
    x = data(shapes[0], dtype, 4)
    out = record.fn(jnp.asarray(x), **record.static_kwargs)
    expected = record.ref(x, **record.static_kwargs)
    expected = np.asarray(expected).astype(record.out_dtype(dtype) if record.out_dtype else dtype)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    assert_same(np.asarray(out), expected)


@pytest.mark.parametrize(
    "record,shapes,dtype",
    [(r, s, d) for r in SORT_RECORDS for s, d in r.cases()],
    ids=[i for r in SORT_RECORDS for i in r.ids()],
)
def test_jnp_sort_argsort(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)  # random data
    _special_data_record_check(record, shapes, dtype)  # NaNs, infs, signed zeros, ties


@pytest.mark.parametrize("dtype", [BOOL, I8, F16, F32], ids=lambda d: d.name)
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 4), 1), ((3, 4), 0), ((0,), 0)])
def test_descending(shape, axis, dtype):
    x = data(shape, dtype, 5)
    out = jnp.sort(jnp.asarray(x), axis=axis, descending=True)
    assert_same(np.asarray(out), np.flip(np_sort(x, axis), axis))
    idx = np.asarray(jnp.argsort(jnp.asarray(x), axis=axis, descending=True))
    # Stable descending: order by -value (NaN first), equal values keep their input order.
    key = np_sortable(x).astype(np.float64)
    nan = np.isnan(key)
    expected = np.lexsort((np.where(nan, 0.0, -key), ~nan), axis=axis)
    assert_same(idx, expected)


def test_sort_prints_and_traces():
    x = jnp.asarray(np.array([3.0, 1.0], np.float32))
    text = str(kiln.make_jaxpr(jnp.argsort)(x))
    assert "iota[dimension=0 dtype=int32 shape=(2,)]" in text
    assert "sort[dimension=0 is_stable=True num_keys=1]" in text
    check_traced(lambda v: jnp.sort(v, axis=0), data((4, 3), F32, 6))
    check_traced(lambda v: jnp.argsort(v, descending=True), data((4, 3), F32, 6))
    assert str(x.sort()) == str(jnp.sort(x))
    assert_same(np.asarray(x.argsort()), [1, 0])


def test_sort_bad_input():
    with pytest.raises(TypeError, match="list"):
        jnp.sort([3, 1, 2])
    with pytest.raises(TypeError, match="list"):
        jnp.argsort([3, 1, 2])
    with pytest.raises(ValueError, match="axis 2 is out of bounds"):
        jnp.sort(jnp.asarray(np.ones((2, 2))), axis=2)
    with pytest.raises(ValueError, match="out of bounds"):
        jnp.sort(jnp.asarray(np.float32(1.0)))
    with pytest.raises(ValueError, match="order"):
        jnp.sort(jnp.asarray(np.ones(3)), order="x")


def test_msort_sort_complex():
    x = data((4, 3), F32, 7)
    assert_same(np.asarray(jnp.msort(jnp.asarray(x))), np_sort(x, 0))
    xi = np.array([[3, 1, 2], [0, -1, 5]], np.int32)
    out = jnp.sort_complex(jnp.asarray(xi))
    assert out.dtype == np.complex64
    assert_same(np.asarray(out), np.sort_complex(xi).astype(np.complex64))


# --- lexsort, partition ----------------------------------------------------------------------


@pytest.mark.parametrize("shape,axis", [((6,), -1), ((3, 5), 1), ((3, 5), 0), ((0,), 0)])
def test_lexsort(shape, axis):
    rng = np.random.default_rng(8)
    keys = [
        rng.integers(0, 3, shape).astype(np.int32),
        data(shape, F32, 9),
        rng.integers(0, 2, shape).astype(bool),
    ]
    out = jnp.lexsort([jnp.asarray(k) for k in keys], axis=axis)
    assert out.dtype == np.int32
    assert_same(np.asarray(out), np.lexsort(keys, axis=axis))
    stacked = np.stack([k.astype(np.float32) for k in keys])
    assert_same(
        np.asarray(jnp.lexsort(jnp.asarray(stacked), axis=axis)), np.lexsort(stacked, axis=axis)
    )


def test_lexsort_errors_and_scalars():
    with pytest.raises(TypeError, match="len > 0"):
        jnp.lexsort(())
    with pytest.raises(ValueError, match="same shape"):
        jnp.lexsort((jnp.asarray(np.ones(3)), jnp.asarray(np.ones(4))))
    assert int(jnp.lexsort((jnp.asarray(np.float32(1.0)),))) == 0


@pytest.mark.parametrize("dtype", [I8, U8, F32], ids=lambda d: d.name)
@pytest.mark.parametrize(
    "shape,kth,axis", [((7,), 3, -1), ((7,), 0, 0), ((7,), -1, 0), ((3, 6), 2, 1), ((4, 3), 1, 0)]
)
def test_partition_and_argpartition(shape, kth, axis, dtype):
    x = data(shape, dtype, 10)
    out = np.asarray(jnp.partition(jnp.asarray(x), kth, axis=axis))
    idx = np.asarray(jnp.argpartition(jnp.asarray(x), kth, axis=axis))
    size = shape[axis]
    k = kth % size
    sorted_x = np_sort(x, axis)
    kth_value = np.take(sorted_x, [k], axis=axis)

    def order_key(v):  # NaN sorts last: compare it as +inf
        return np.where(np.isnan(v), np.inf, v) if v.dtype.kind == "f" else v

    # The partition property (NumPy's contract), for values and for indices.
    for values in (out, np.take_along_axis(x, idx, axis)):
        assert_same(np.take(values, [k], axis=axis), kth_value)
        before = order_key(np.take(values, range(k), axis=axis))
        after = order_key(np.take(values, range(k + 1, size), axis=axis))
        assert np.all(before <= order_key(kth_value))
        assert np.all(after >= order_key(kth_value))
    assert_same(
        np.sort(idx, axis=axis),
        np.broadcast_to(
            np.arange(size).reshape(
                [-1 if d == axis % len(shape) else 1 for d in range(len(shape))]
            ),
            shape,
        ),
    )


def test_partition_matches_jax_layout():
    x = jnp.asarray(np.array([5, 3, 1, 4, 2], np.int32))
    assert_same(np.asarray(jnp.partition(x, 2)), [1, 2, 3, 5, 4])
    assert_same(np.asarray(jnp.argpartition(x, 2)), [2, 4, 1, 0, 3])
    with pytest.raises(ValueError, match="out of bounds"):
        jnp.partition(x, 5)


# --- searchsorted ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["scan", "compare_all"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("dtype", [I8, U8, I32, F16, BF16, F32], ids=lambda d: d.name)
@pytest.mark.parametrize("n,v_shape", [(1, (4,)), (7, (3, 5)), (16, ()), (33, (10,)), (5, (0,))])
def test_searchsorted(n, v_shape, dtype, side, method):
    rng = np.random.default_rng(n)
    a = np.sort(np_sortable(rand((n,), dtype, rng)), kind="stable").astype(dtype)
    v = rand(v_shape, dtype, rng)
    if dtype.kind == "f" or dtype == BF16:
        a = a.astype(np.float32)
        a[-1:] = np.nan if n > 2 else a[-1:]
        a = a.astype(dtype)
        if v.size > 2:
            v = v.astype(np.float32)
            v.reshape(-1)[:3] = [np.nan, a[0], np.inf]
            v = v.astype(dtype)
    out = jnp.searchsorted(jnp.asarray(a), jnp.asarray(v), side=side, method=method)
    expected = np.searchsorted(np_sortable(a), np_sortable(v), side=side)
    assert out.dtype == np.int32 and out.shape == v_shape
    assert_same(np.asarray(out), expected)


def test_searchsorted_sorter_empty_traced_and_errors():
    a = np.array([3.0, 1.0, 2.0], np.float32)
    sorter = np.argsort(a)
    out = jnp.searchsorted(
        jnp.asarray(a), jnp.asarray(np.float32(2.5)), sorter=jnp.asarray(sorter.astype(np.int32))
    )
    assert int(out) == np.searchsorted(a, 2.5, sorter=sorter)
    assert_same(
        np.asarray(
            jnp.searchsorted(
                jnp.asarray(np.zeros(0, np.float32)), jnp.asarray(np.ones(3, np.float32))
            )
        ),
        [0, 0, 0],
    )
    check_traced(
        lambda x, y: jnp.searchsorted(x, y, side="right"),
        np.arange(10, dtype=np.float32),
        np.array([0.5, 3.0, 11.0], np.float32),
    )
    # mixed dtypes promote
    out = jnp.searchsorted(jnp.asarray(np.array([1, 2, 3], np.int32)), 2.5)
    assert int(out) == 2
    with pytest.raises(ValueError, match="1-dimensional"):
        jnp.searchsorted(jnp.asarray(np.ones((2, 2))), 1.0)
    with pytest.raises(ValueError, match="side"):
        jnp.searchsorted(jnp.asarray(np.ones(2)), 1.0, side="middle")
    with pytest.raises(TypeError, match="list"):
        jnp.searchsorted([1, 2], 1)


# --- unique ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [BOOL, I8, U32, F16, BF16, F32], ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(), (0,), (9,), (3, 4)])
def test_unique_concrete(shape, dtype):
    x = data(shape, dtype, 11)
    values, index, inverse, counts = jnp.unique(
        jnp.asarray(x), return_index=True, return_inverse=True, return_counts=True
    )
    e_values, e_index, e_inverse, e_counts = np.unique(
        np_sortable(x), return_index=True, return_inverse=True, return_counts=True
    )
    assert_same(np.asarray(values), e_values.astype(dtype))
    assert values.dtype == dtype
    for out, ref in ((index, e_index), (counts, e_counts)):
        assert out.dtype == np.int32
        assert_same(np.asarray(out), ref)
    assert_same(np.asarray(inverse).reshape(-1), e_inverse.reshape(-1))
    assert_same(np.asarray(jnp.unique(jnp.asarray(x))), e_values.astype(dtype))


def test_unique_nan_and_axis():
    x = np.array([1.0, np.nan, np.nan, 1.0, 0.0], np.float32)
    assert_same(np.asarray(jnp.unique(jnp.asarray(x))), np.unique(x))
    assert jnp.unique(jnp.asarray(x), equal_nan=False).shape == (4,)
    m = np.array([[1, 2], [0, 5], [1, 2]], np.int32)
    assert_same(np.asarray(jnp.unique(jnp.asarray(m), axis=0)), np.unique(m, axis=0))


@pytest.mark.parametrize("size", [1, 3, 4, 9])
def test_unique_with_size_traces(size):
    x = np.array([3, 1, 1, 2, 3, 3, 0], np.int32)
    fn = lambda v: jnp.unique(
        v, size=size, fill_value=-1, return_index=True, return_inverse=True, return_counts=True
    )
    values, index, inverse, counts = fn(jnp.asarray(x))
    e_values, e_index, e_inverse, e_counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True
    )
    n = len(e_values)

    def fitted(ref, fill):
        out = np.full(size, fill, np.int32)
        out[: min(n, size)] = ref[:size]
        return out

    assert_same(np.asarray(values), fitted(e_values, -1))
    assert_same(np.asarray(index), fitted(e_index, 0))
    assert_same(np.asarray(counts), fitted(e_counts, 0))
    assert_same(np.asarray(inverse), e_inverse)
    check_traced(fn, x)
    # fill_value defaults to the smallest element
    assert int(jnp.unique(jnp.asarray(x), size=6)[-1]) == 0


def test_unique_needs_size_under_tracing():
    with pytest.raises(ConcretizationTypeError, match="size"):
        kiln.make_jaxpr(jnp.unique)(jnp.asarray(np.ones(3, np.float32)))
    with pytest.raises(TypeError, match="list"):
        jnp.unique([1, 2, 2])

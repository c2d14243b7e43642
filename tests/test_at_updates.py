"""`.at[...]` functional updates against NumPy's in-place ones: every method and dtype family,
duplicate indices, out-of-bounds drops and modes, value broadcasting and casting, boolean masks
(eager only; traced masks are an error, as in the seed), and the seed's examples verbatim."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln
import kiln.numpy as jnp
from kiln.core import errors
from kiln.core.jaxpr import typecheck_jaxpr
from tests._testing import ALL, COMPLEX, FLOATS, INTS, assert_close, rand
from tests.test_indexing import run_traced

needs_jit = pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit not available yet")


# --- the seed's examples ---------------------------------------------------------------------


def test_seed_reads_and_updates():
    x1 = jnp.array([0, 2, 4, 6])
    assert (
        repr((x1[0], x1[-1], x1[10000]))
        == "(Array(0, dtype=int32), Array(6, dtype=int32), Array(6, dtype=int32))"
    )
    x1_p999 = x1.at[0].add(999)
    # The seed's text has its runs of spaces collapsed (NumPy pads "[999,   2, ...").
    assert (
        re.sub(r"\s+", " ", repr((x1, x1_p999)))
        == "(Array([0, 2, 4, 6], dtype=int32), Array([999, 2, 4, 6], dtype=int32))"
    )
    x1 = x1.at[10000].set(999)
    assert repr(x1) == "Array([0, 2, 4, 6], dtype=int32)"


def test_seed_item_assignment_is_an_error():
    x1 = jnp.array([0, 2, 4, 6])
    with pytest.raises(TypeError, match=r"does not support item assignment.*x\.at\[idx\]\.set"):
        x1[0] = 5
    with pytest.raises(TypeError, match=r"\.at\["):
        kiln.make_jaxpr(lambda x: x.__setitem__(0, 5))(x1)


def mask_tensor(x, mask):
    x = x.at[mask].set(-100.0)
    return x


def test_seed_mask_tensor_eager_and_traced():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    mask = rng.random((4, 4)) < 0.5
    out = mask_tensor(jnp.asarray(x), jnp.asarray(mask))
    assert_close(out, np.where(mask, np.float32(-100.0), x))
    with pytest.raises(errors.NonConcreteBooleanIndexError) as info:
        kiln.make_jaxpr(mask_tensor)(jnp.asarray(x), jnp.asarray(mask))
    assert str(info.value).startswith(
        "Array boolean indices must be concrete; got ShapedArray(bool[4,4])"
    )


@needs_jit
def test_seed_mask_tensor_jit():
    x = jnp.asarray(np.ones((4, 4), np.float32))
    mask = jnp.asarray(np.eye(4, dtype=bool))
    with pytest.raises(errors.NonConcreteBooleanIndexError, match=r"bool\[4,4\]"):
        kiln.jit(mask_tensor)(x, mask)


# --- every method, every dtype family ------------------------------------------------------

INDEX = (np.array([0, 2, 0, 3]), slice(None, None, 2))  # repeats row 0
METHODS = {
    "set": lambda ref, idx, v: ref.__setitem__(idx, v),
    "add": lambda ref, idx, v: np.add.at(ref, idx, v),
    "multiply": lambda ref, idx, v: np.multiply.at(ref, idx, v),
    "min": lambda ref, idx, v: np.minimum.at(ref, idx, v),
    "max": lambda ref, idx, v: np.maximum.at(ref, idx, v),
}


def _families(method):
    if method in ("add", "multiply"):
        return INTS + FLOATS + COMPLEX
    return ALL


@pytest.mark.parametrize(
    "method,dtype",
    [(m, d) for m in METHODS for d in _families(m)],
    ids=lambda v: v if isinstance(v, str) else v.name,
)
def test_method_matches_numpy(method, dtype):
    rng = np.random.default_rng(1)
    x = rand((4, 5), dtype, rng, "positive")
    values = rand((4, 3), dtype, rng, "positive")
    index = INDEX
    if method == "set":  # the winner among repeated indices is unspecified
        index = (np.array([0, 2, 1, 3]), slice(None, None, 2))
    expected = x.copy()
    with np.errstate(all="ignore"):
        METHODS[method](expected, index, values)
    actual = getattr(jnp.asarray(x).at[index], method)(jnp.asarray(values))
    assert_close(actual, expected, err_msg=method)
    if method in ("set", "add"):
        traced = run_traced(
            lambda a, v: getattr(a.at[index], method)(v), jnp.asarray(x), jnp.asarray(values)
        )
        assert_close(traced, expected, err_msg=f"{method} traced")


@pytest.mark.parametrize(
    "dtype", [np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.int8)], ids=lambda d: d.name
)
def test_divide_power_apply_get(dtype):
    x = np.arange(1, 7).astype(dtype)
    kx = jnp.asarray(x)
    idx = np.array([1, 4, 1])
    quotient = kx.at[idx].divide(2)
    expected = x.astype(np.float32)
    np.divide.at(expected, idx, np.float32(2))
    assert_close(quotient, expected)  # true division: integers give float32, as in JAX
    if hasattr(jnp, "power"):  # kiln.numpy.power is written by the ufuncs family
        powered = kx.at[2].power(2)
        expected = x.copy()
        expected[2] = x[2] ** 2
        assert_close(powered, expected)
    applied = kx.at[np.array([0, 5])].apply(lambda v: v * 3)
    expected = x.copy()
    expected[[0, 5]] *= 3
    assert_close(applied, expected)
    assert_close(kx.at[1:4].get(), x[1:4])
    assert_close(kx.at[idx].mul(3), x * np.array([1, 9, 1, 1, 3, 1], dtype))


def test_add_and_multiply_reject_bool():
    x = jnp.asarray(np.ones(3, bool))
    with pytest.raises(TypeError, match="bool"):
        x.at[0].add(True)
    with pytest.raises(TypeError, match="bool"):
        x.at[0].multiply(True)
    assert_close(x.at[0].min(False), np.array([False, True, True]))
    assert_close(x.at[0].set(0), np.array([False, True, True]))


# --- duplicates, bounds, modes ----------------------------------------------------------------


def test_duplicate_indices_accumulate():
    x = jnp.asarray(np.zeros(5, np.float32))
    idx = np.array([0, 1, 0, 0, 4, 1])
    assert_close(x.at[idx].add(1.0), np.array([3, 2, 0, 0, 1], np.float32))
    assert_close(
        x.at[idx].add(np.arange(6, dtype=np.float32)),
        np.array([0 + 2 + 3, 1 + 5, 0, 0, 4], np.float32),
    )
    ones = jnp.asarray(np.ones(5, np.int32))
    assert_close(ones.at[idx].multiply(2), np.array([8, 4, 1, 1, 2]))
    values = np.array([5, -1, 3, -7, 2, 9], np.int32)
    assert_close(ones.at[idx].min(values), np.array([-7, -1, 1, 1, 1]))
    assert_close(ones.at[idx].max(values), np.array([5, 9, 1, 1, 2]))
    kidx = jnp.asarray(idx)
    assert_close(
        run_traced(lambda a, i: a.at[i].add(1.0), x, kidx), np.array([3, 2, 0, 0, 1], np.float32)
    )


def test_out_of_bounds_updates_are_dropped():
    x = np.arange(4, dtype=np.int32)
    kx = jnp.asarray(x)
    for method in ("set", "add", "multiply", "min", "max"):
        assert_close(getattr(kx.at[10000], method)(999), x, err_msg=method)
        assert_close(getattr(kx.at[-5], method)(999), x, err_msg=method)
        got = getattr(kx.at[np.array([4, -1, -9, 1])], method)(np.array([7, 7, 7, 7]))
        expected = x.copy()
        METHODS[method](expected, np.array([3, 1]), np.array([7, 7], np.int32))
        assert_close(got, expected, err_msg=method)
    assert_close(kx.at[10000].set(999, mode="clip"), np.array([0, 1, 2, 999]))
    assert_close(kx.at[-10].add(5, mode="clip"), np.array([5, 1, 2, 3]))
    assert_close(kx.at[3].set(9, mode="drop"), np.array([0, 1, 2, 9]))
    traced = run_traced(lambda a, i: a.at[i].set(999), kx, jnp.asarray(np.int32(10000)))
    assert_close(traced, x)
    traced = run_traced(lambda a, i: a.at[i].set(999), kx, jnp.asarray(np.int32(-1)))
    assert_close(traced, np.array([0, 1, 2, 999]))


def test_partially_out_of_bounds_rows():
    x = np.zeros((3, 4), np.float32)
    got = jnp.asarray(x).at[np.array([1, 7]), 1:3].set(np.ones((2, 2), np.float32))
    expected = x.copy()
    expected[1, 1:3] = 1
    assert_close(got, expected)
    got = jnp.asarray(x).at[np.array([[0], [5]]), np.array([0, 3])].add(1.0)
    expected = x.copy()
    expected[0, [0, 3]] += 1
    assert_close(got, expected)


def test_negative_indices_wrap():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected = x.copy()
    expected[-1, -2] = -1
    assert_close(jnp.asarray(x).at[-1, -2].set(-1), expected)
    expected = x.copy()
    expected[np.array([-1, 0]), -1] += 10
    assert_close(jnp.asarray(x).at[np.array([-1, 0]), -1].add(10), expected)


# --- index kinds ------------------------------------------------------------------------------

UPDATE_INDICES = [
    (),
    1,
    -1,
    (1, 2),
    (slice(None), 2),
    (slice(1, None), slice(None, None, -2)),
    (Ellipsis, 1),
    (None, 0),
    (slice(None, None, 3), None, slice(1, 3)),
    (np.array([2, 0]),),
    (slice(None), np.array([[3], [0]])),
    (np.array([1, 2]), slice(None), np.array([0, 1])),
    (np.array([1, 2]), None, np.array([0, 1])),
    (1, slice(None), np.array([0, 2])),
    (slice(2, 0, -1), 0, np.array([1, 1])),
]


@pytest.mark.parametrize("index", UPDATE_INDICES, ids=str)
def test_update_index_kinds(index):
    rng = np.random.default_rng(2)
    x = rng.integers(-5, 5, (3, 4, 5)).astype(np.float32)
    target_shape = x[index].shape
    values = rng.integers(-3, 3, target_shape).astype(np.float32)
    added = x.copy()
    np.add.at(added, index, values)
    assert_close(jnp.asarray(x).at[index].add(values), added)
    assert_close(
        run_traced(lambda a, v: a.at[index].add(v), jnp.asarray(x), jnp.asarray(values)), added
    )
    expected = x.copy()
    expected[index] = 7
    assert_close(jnp.asarray(x).at[index].set(7), expected)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_boolean_mask_updates(dtype):
    rng = np.random.default_rng(3)
    x = rand((3, 4), dtype, rng)
    mask = rng.random((3, 4)) < 0.5
    value = rand((), dtype, rng)
    expected = x.copy()
    expected[mask] = value
    assert_close(jnp.asarray(x).at[mask].set(value), expected)
    assert_close(jnp.asarray(x).at[jnp.asarray(mask)].set(jnp.asarray(value)), expected)
    rows = mask[:, 0]
    expected = x.copy()
    expected[rows] = value
    assert_close(jnp.asarray(x).at[rows].set(value), expected)


def test_values_broadcast_and_cast():
    x = np.zeros((2, 3), np.int8)
    kx = jnp.asarray(x)
    i8 = np.int8
    assert_close(kx.at[:, 1].set(np.array([4, 5], np.int64)), np.array([[0, 4, 0], [0, 5, 0]], i8))
    assert_close(kx.at[0].set(2.7), np.array([[2, 2, 2], [0, 0, 0]], i8))
    assert_close(kx.at[1].add(np.array([1, 2, 3])), np.array([[0, 0, 0], [1, 2, 3]], i8))
    assert_close(kx.at[0, 0].set(1000), np.array([[-24, 0, 0], [0, 0, 0]], i8))  # as JAX
    assert kx.at[0].set(1.5).dtype == np.int8
    assert_close(kx.at[:].set([[1, 2, 3]]), np.array([[1, 2, 3], [1, 2, 3]], i8))
    with pytest.raises(ValueError, match="broadcast"):
        kx.at[0].set(np.ones(2))
    weak = kiln.lax.full((3,), 1.0)
    assert weak.at[0].set(5).weak_type
    assert not jnp.asarray(np.ones(3, np.float32)).at[0].set(5.0).weak_type


def test_scalar_and_empty_operands():
    s = jnp.asarray(np.float32(3))
    assert_close(s.at[()].set(4.0), np.float32(4))
    assert_close(s.at[...].add(1.0), np.float32(4))
    assert_close(s.at[None].get(), np.array([3.0], np.float32))
    e = jnp.zeros((0, 3))
    assert e.at[:, 1].set(1.0).shape == (0, 3)
    assert e.at[np.array([], np.int32)].add(1.0).shape == (0, 3)
    with pytest.raises(IndexError, match="size 0"):
        e.at[0].set(1.0)


def test_at_reprs_and_kwargs():
    x = jnp.asarray(np.arange(3))
    assert repr(x.at) == "_IndexUpdateHelper(Array([0, 1, 2], dtype=int32))"
    assert repr(x.at[1]) == "_IndexUpdateRef(Array([0, 1, 2], dtype=int32), 1)"
    jaxpr = kiln.make_jaxpr(
        lambda a: a.at[np.array([0, 2])].add(1, indices_are_sorted=True, unique_indices=True)
    )(x)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "scatter-add"]
    assert eqn.params["indices_are_sorted"] and eqn.params["unique_indices"]
    jaxpr = kiln.make_jaxpr(lambda a: a.at[1].add(9))(x)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "scatter-add"]
    assert eqn.params["indices_are_sorted"] and eqn.params["unique_indices"]
    assert str(eqn.params["mode"]) == "GatherScatterMode.FILL_OR_DROP"


def test_update_jaxprs_typecheck():
    x = jnp.asarray(np.zeros((3, 4), np.float32))
    for fn in [
        lambda a, i: a.at[i].set(1.0),
        lambda a, i: a.at[:, i].add(a[:, 0]),
        lambda a, i: a.at[i, ::-1].max(2.0),
        lambda a, i: a.at[i].get(mode="fill"),
        lambda a, i: a.at[np.array([0, 2]), i].multiply(3.0),
    ]:
        closed = kiln.make_jaxpr(fn)(x, jnp.asarray(np.int32(1)))
        typecheck_jaxpr(closed.jaxpr)
        assert closed.out_avals[0].dtype == np.float32


@needs_jit
def test_updates_under_jit():
    x = jnp.asarray(np.arange(5, dtype=np.float32))
    fn = kiln.jit(lambda a, i: a.at[i].add(10.0))
    assert_close(
        fn(x, jnp.asarray(np.array([0, 0, 9], np.int32))), np.array([20, 1, 2, 3, 4], np.float32)
    )


# --- property tests ---------------------------------------------------------------------------


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_add_matches_numpy_add_at(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    axis_count = data.draw(st.integers(1, len(shape)))
    index_shape = tuple(data.draw(st.lists(st.integers(0, 3), min_size=0, max_size=2)))
    index = tuple(
        np.asarray(
            data.draw(
                st.lists(
                    st.integers(-shape[d], shape[d] - 1),
                    min_size=int(np.prod(index_shape)),
                    max_size=int(np.prod(index_shape)),
                )
            )
        )
        .reshape(index_shape)
        .astype(np.int64)
        for d in range(axis_count)
    )
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    values = np.ones(x[index].shape, np.float32) * 2
    expected = x.copy()
    np.add.at(expected, index, values)
    assert_close(jnp.asarray(x).at[index].add(values), expected)
    expected = x.copy()
    expected[index] = -1
    assert_close(jnp.asarray(x).at[index].set(-1.0), expected)

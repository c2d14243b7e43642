"""The kiln.numpy functions added for JAX's API breadth: every op-record row eagerly against
NumPy and under jit; set operations (size= and the errors without it under jit), unique_*,
index helpers, aliases, I/O and queries, polynomial fitting and roots, and their errors."""

import io

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.core.errors import ConcretizationTypeError
from tests._testing import assert_close, check_record_eager, check_record_jit
from tests.op_records_numpy_extra import NUMPY_EXTRA_RECORDS

CASES = [(r, s, d) for r in NUMPY_EXTRA_RECORDS for s, d in r.cases()]
IDS = [f"{r.label}-{'x'.join(map(str, s))}-{d.name}" for r, s, d in CASES]


@pytest.mark.parametrize("record,shapes,dtype", CASES, ids=IDS)
def test_extra_record_eager(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)


@pytest.mark.parametrize("record,shapes,dtype", CASES[::2], ids=IDS[::2])
def test_extra_record_jit(record, shapes, dtype):
    check_record_jit(record, shapes, dtype)


# --- set operations --------------------------------------------------------------------------
A = np.array([5, 1, 3, 3, 7], np.int32)
B = np.array([3, 9, 5, 5, 2], np.int32)


def test_set_operations_match_numpy():
    for fn, ref in [
        (jnp.union1d, np.union1d),
        (jnp.intersect1d, np.intersect1d),
        (jnp.setdiff1d, np.setdiff1d),
        (jnp.setxor1d, np.setxor1d),
    ]:
        assert_close(fn(jnp.asarray(A), jnp.asarray(B)), ref(A, B))
        assert_close(fn(jnp.asarray(B), jnp.asarray(A)), ref(B, A))
    values, i1, i2 = jnp.intersect1d(jnp.asarray(A), jnp.asarray(B), return_indices=True)
    expected = np.intersect1d(A, B, return_indices=True)
    for actual, want in zip((values, i1, i2), expected):
        np.testing.assert_array_equal(actual, want)


def test_set_operations_with_size_pad_as_jax():
    # The padding JAX 0.10.2 gives for these inputs.
    a, b = jnp.asarray(A), jnp.asarray(B)
    np.testing.assert_array_equal(jnp.intersect1d(a, b, size=4), [3, 5, 3, 3])
    out = jnp.intersect1d(a, b, size=4, fill_value=-1, return_indices=True)
    np.testing.assert_array_equal(out[0], [3, 5, -1, -1])
    np.testing.assert_array_equal(out[1], [2, 0, 5, 5])
    np.testing.assert_array_equal(out[2], [0, 2, 5, 5])
    np.testing.assert_array_equal(jnp.intersect1d(a, b, size=1), [3])
    np.testing.assert_array_equal(jnp.setdiff1d(a, b, size=4), [1, 7, 0, 0])
    np.testing.assert_array_equal(jnp.setdiff1d(a, b, size=4, fill_value=-1), [1, 7, -1, -1])
    np.testing.assert_array_equal(jnp.union1d(a, b, size=8), [1, 2, 3, 5, 7, 9, 1, 1])
    np.testing.assert_array_equal(jnp.setxor1d(a, b, size=6), [1, 2, 7, 9, 1, 1])
    np.testing.assert_array_equal(jnp.setxor1d(a, b, size=6, fill_value=-1), [1, 2, 7, 9, -1, -1])


def test_set_operations_trace_with_size():
    a, b = jnp.asarray(A), jnp.asarray(B)
    f = kiln.jit(lambda x, y: jnp.intersect1d(x, y, size=3, fill_value=0))
    np.testing.assert_array_equal(f(a, b), [3, 5, 0])
    g = kiln.jit(lambda x, y: (jnp.setdiff1d(x, y, size=2), jnp.union1d(x, y, size=6)))
    diff, union = g(a, b)
    np.testing.assert_array_equal(diff, [1, 7])
    np.testing.assert_array_equal(union, [1, 2, 3, 5, 7, 9])
    h = kiln.jit(lambda x: jnp.unique_values(x, size=5, fill_value=-1))
    np.testing.assert_array_equal(h(a), [1, 3, 5, 7, -1])


@pytest.mark.parametrize("name", ["union1d", "intersect1d", "setdiff1d", "setxor1d"])
def test_set_operations_need_size_under_jit(name):
    fn = getattr(jnp, name)
    with pytest.raises(ConcretizationTypeError, match=f"The error arose in {name}"):
        kiln.jit(fn)(jnp.asarray(A), jnp.asarray(B))


@pytest.mark.parametrize("name", ["unique_values", "unique_counts", "unique_inverse", "unique_all"])
def test_unique_functions_need_size_under_jit(name):
    with pytest.raises(ConcretizationTypeError):
        kiln.jit(getattr(jnp, name))(jnp.asarray(A))


def test_set_operations_on_empty_inputs():
    empty = jnp.zeros((0,), jnp.int32)
    assert jnp.intersect1d(empty, jnp.asarray(B)).shape == (0,)
    np.testing.assert_array_equal(jnp.setdiff1d(jnp.asarray(A), empty), np.unique(A))
    np.testing.assert_array_equal(jnp.setdiff1d(empty, jnp.asarray(B), size=2), [0, 0])
    np.testing.assert_array_equal(jnp.union1d(empty, jnp.asarray(B)), np.unique(B))


def test_isin_matches_numpy_and_promotes():
    x = np.array([[1.0, 2.5], [3.0, 4.0]], np.float32)
    assert_close(jnp.isin(jnp.asarray(x), jnp.asarray(np.array([4, 1]))), np.isin(x, [4, 1]))
    assert not bool(jnp.isin(1.0, jnp.array([1, 2]), invert=True))
    assert jnp.isin(jnp.ones((2, 3)), jnp.zeros((0,))).shape == (2, 3)


def test_unique_array_api_functions():
    x = jnp.array([3.0, 1.0, 3.0, np.nan, np.nan])
    result = jnp.unique_all(x)
    assert type(result).__name__ == "UniqueAllResult"
    np.testing.assert_array_equal(result.values, [1.0, 3.0, np.nan, np.nan])
    np.testing.assert_array_equal(result.indices, [1, 0, 3, 4])
    np.testing.assert_array_equal(result.inverse_indices, [1, 0, 1, 2, 3])
    np.testing.assert_array_equal(result.counts, [1, 2, 1, 1])
    counts = jnp.unique_counts(jnp.asarray(A), size=5, fill_value=0)
    np.testing.assert_array_equal(counts.values, [1, 3, 5, 7, 0])
    np.testing.assert_array_equal(counts.counts, [1, 2, 1, 1, 0])
    inverse = jnp.unique_inverse(jnp.array([[2, 1], [1, 2]]))
    np.testing.assert_array_equal(inverse.values, [1, 2])
    np.testing.assert_array_equal(inverse.inverse_indices, [[1, 0], [0, 1]])


# --- index helpers and aliases ----------------------------------------------------------------
def test_r_and_c_concatenate_like_numpy():
    np.testing.assert_array_equal(jnp.r_[1:4, jnp.array([7, 8])], np.r_[1:4, np.array([7, 8])])
    assert_close(jnp.r_[0:1:5j], np.r_[0:1:5j].astype(np.float32))
    assert_close(jnp.c_[jnp.ones(2), jnp.zeros(2)], np.c_[np.ones(2), np.zeros(2)])
    assert_close(
        jnp.r_["-1", jnp.ones((2, 2)), jnp.zeros((2, 1))],
        np.r_["-1", np.ones((2, 2)), np.zeros((2, 1))].astype(np.float32),
    )
    assert_close(jnp.r_["0,2", jnp.ones(3), jnp.zeros(3)], np.r_["0,2", np.ones(3), np.zeros(3)])
    assert_close(
        jnp.r_["0,2,0", jnp.ones(3), jnp.zeros(3)], np.r_["0,2,0", np.ones(3), np.zeros(3)]
    )
    assert jnp.s_[1:3, None] == np.s_[1:3, None]
    assert jnp.index_exp[2] == (2,)


def test_array_api_aliases_are_the_numpy_functions():
    assert jnp.acos is jnp.arccos and jnp.atan2 is jnp.arctan2 and jnp.pow is jnp.power
    assert jnp.bitwise_invert is jnp.invert and jnp.bitwise_left_shift is jnp.left_shift
    assert jnp.astype(jnp.ones(2), jnp.int8).dtype == np.int8


def test_scalar_types_and_constants():
    assert np.dtype(jnp.float8_e4m3fn).name == "float8_e4m3fn"
    assert np.dtype(jnp.float8_e5m2).name == "float8_e5m2"
    assert np.dtype(jnp.int4).name == "int4"
    assert jnp.bool(1).dtype == np.bool_
    assert jnp.euler_gamma == pytest.approx(np.euler_gamma)
    assert jnp.ComplexWarning is np.exceptions.ComplexWarning


def test_queries():
    assert jnp.isscalar(1.0) and jnp.isscalar(jnp.ones(())) and not jnp.isscalar(jnp.ones(3))
    assert jnp.isscalar(np.float32(1)) and not jnp.isscalar([1])
    assert jnp.iterable(jnp.ones(3)) and not jnp.iterable(1)
    assert jnp.iscomplexobj(jnp.ones(2, jnp.complex64)) and not jnp.iscomplexobj(jnp.ones(2))
    assert jnp.isrealobj(1.0) and not jnp.isrealobj(1j)
    np.testing.assert_array_equal(jnp.iscomplex(jnp.array([1, 1j])), [False, True])
    np.testing.assert_array_equal(jnp.isreal(jnp.array([1, 1j])), [True, False])
    np.testing.assert_array_equal(jnp.isreal(jnp.array([1.0, 2.0])), [True, True])


def test_print_options_and_strings():
    x = jnp.array([1.0 / 3, 2.0])
    with jnp.printoptions(precision=2):
        assert "0.33" in str(x) and "0.333" not in str(x)
        assert jnp.get_printoptions()["precision"] == 2
    assert jnp.get_printoptions()["precision"] == 8
    assert jnp.array_str(jnp.ones(2)) == "[1. 1.]"
    assert jnp.array_repr(jnp.ones(2)).startswith("Array([1., 1.]")


def test_save_load_and_buffers(tmp_path):
    x = jnp.arange(6.0).reshape(2, 3)
    path = tmp_path / "x.npy"
    jnp.save(path, x)
    loaded = jnp.load(path)
    assert isinstance(loaded, kiln.Array)
    assert_close(loaded, np.arange(6.0, dtype=np.float32).reshape(2, 3))
    buffer = io.BytesIO()
    jnp.savez(buffer, a=x)
    buffer.seek(0)
    assert_close(jnp.load(buffer)["a"], np.asarray(x))
    out = jnp.frombuffer(b"\x01\x02\x03\x04", dtype=jnp.uint8)
    assert isinstance(out, kiln.Array)
    np.testing.assert_array_equal(out, [1, 2, 3, 4])
    assert_close(
        jnp.fromstring("1 2 3", dtype=jnp.float32, sep=" "), np.array([1, 2, 3.0], np.float32)
    )
    for name in ("fromiter", "fromfile", "frompyfunc"):
        with pytest.raises(NotImplementedError, match="non-pure"):
            getattr(jnp, name)(range(3))


def test_bitwise_count_counts_magnitude_bits():
    out = jnp.bitwise_count(jnp.array([7, -1, -128], jnp.int8))
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, np.bitwise_count(np.array([7, -1, -128], np.int8)))
    with pytest.raises(TypeError, match="integer"):
        jnp.bitwise_count(jnp.ones(2))


# --- numerical functions: arguments and derivatives -------------------------------------------
def test_windows_match_numpy():
    for name in ("bartlett", "blackman", "hamming", "hanning"):
        for m in (0, 1, 2, 5, 8):
            out = getattr(jnp, name)(m)
            assert out.dtype == np.float32
            assert_close(out, getattr(np, name)(m).astype(np.float32), tol=1e-6)


def test_interp_details():
    xp = jnp.array([0.0, 1.0, 2.0])
    fp = jnp.array([0.0, 10.0, 0.0])
    x = jnp.array([-1.0, 0.5, 1.5, 3.0])
    np.testing.assert_allclose(jnp.interp(x, xp, fp), [0.0, 5.0, 5.0, 0.0])
    np.testing.assert_allclose(
        jnp.interp(x, xp, fp, left="extrapolate", right="extrapolate"), [-10.0, 5.0, 5.0, -10.0]
    )
    complex_fp = jnp.array([0, 1j, 2])
    assert jnp.interp(0.5, xp, complex_fp).dtype == np.complex64
    # d interp / d fp at x = 0.5: the hat weights (0.5, 0.5, 0)
    g = kiln.grad(lambda f: jnp.interp(0.5, xp, f))(fp)
    np.testing.assert_allclose(g, [0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="same length"):
        jnp.interp(x, xp, fp[:2])
    with pytest.raises(ValueError, match="not supported"):
        jnp.interp(x, xp, fp, left="nearest")


def test_gradient_and_cov_errors():
    with pytest.raises(ValueError, match="at least 2 elements"):
        jnp.gradient(jnp.ones(1))
    with pytest.raises(NotImplementedError, match="edge_order"):
        jnp.gradient(jnp.ones(3), edge_order=2)
    with pytest.raises(TypeError, match="Invalid number of spacing"):
        jnp.gradient(jnp.ones((3, 3)), 1.0, 2.0, 3.0)
    assert jnp.gradient(jnp.ones((3, 3)), axis=()) == []
    with pytest.raises(ValueError, match="more than 2 dimensions"):
        jnp.cov(jnp.ones((2, 2, 2)))
    with pytest.raises(TypeError, match="fweights must be integer"):
        jnp.cov(jnp.ones((2, 3)), fweights=jnp.ones(3))
    assert np.isnan(jnp.cov(jnp.ones((1, 0)))).all()


def test_cross_vander_digitize_errors():
    with pytest.raises(ValueError, match="either 2 or 3"):
        jnp.cross(jnp.ones(4), jnp.ones(3))
    assert_close(jnp.cross(jnp.array([1.0, 0]), jnp.array([0.0, 1])), np.float32(1.0))
    with pytest.raises(ValueError, match="one-dimensional"):
        jnp.vander(jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="1-dimensional"):
        jnp.digitize(jnp.ones(3), jnp.ones((2, 2)))
    np.testing.assert_array_equal(jnp.digitize(jnp.ones(3), jnp.zeros(0)), [0, 0, 0])


def test_put_along_axis_and_fill_diagonal():
    with pytest.raises(ValueError, match="inplace=False"):
        jnp.put_along_axis(jnp.ones((2, 2)), jnp.zeros((2, 1), jnp.int32), 0.0, axis=1)
    with pytest.raises(ValueError, match="inplace=False"):
        jnp.fill_diagonal(jnp.ones((2, 2)), 0.0)
    out = jnp.put_along_axis(jnp.zeros(5), jnp.array([1, 3]), 2.0, axis=None, inplace=False)
    np.testing.assert_array_equal(out, [0, 2, 0, 2, 0])
    expected = np.zeros((7, 3))
    np.fill_diagonal(expected, 5, wrap=True)
    assert_close(
        jnp.fill_diagonal(jnp.zeros((7, 3)), 5.0, wrap=True, inplace=False),
        expected.astype(np.float32),
    )
    cube = np.zeros((3, 3, 3))
    np.fill_diagonal(cube, [1, 2, 3])
    got = jnp.fill_diagonal(jnp.zeros((3, 3, 3)), jnp.array([1.0, 2, 3]), inplace=False)
    assert_close(got, cube.astype(np.float32))


def test_packbits_errors_and_roundtrip():
    bits = np.random.default_rng(0).integers(0, 2, (4, 13)).astype(bool)
    packed = jnp.packbits(jnp.asarray(bits), axis=1)
    np.testing.assert_array_equal(jnp.unpackbits(packed, axis=1, count=13), bits.astype(np.uint8))
    with pytest.raises(TypeError, match="integer or boolean"):
        jnp.packbits(jnp.ones(3))
    with pytest.raises(TypeError, match="unsigned byte"):
        jnp.unpackbits(jnp.ones(3, jnp.int32))
    with pytest.raises(ValueError, match="'little' or 'big'"):
        jnp.packbits(jnp.ones(3, jnp.int32), bitorder="middle")


def test_apply_along_and_over_axes():
    x = np.arange(12.0).reshape(3, 4)
    assert_close(
        jnp.apply_along_axis(lambda r: r[0] + r[-1], 1, jnp.asarray(x)),
        np.apply_along_axis(lambda r: r[0] + r[-1], 1, x).astype(np.float32),
    )
    assert_close(
        jnp.apply_along_axis(jnp.cumsum, 0, jnp.asarray(x)), np.cumsum(x, 0).astype(np.float32)
    )
    assert_close(jnp.apply_over_axes(jnp.sum, jnp.asarray(x), [0, 1]), np.float32([[66.0]]))


def test_trim_zeros_and_polydiv():
    np.testing.assert_array_equal(jnp.trim_zeros(jnp.array([0, 0, 1, 2, 0])), [1, 2])
    np.testing.assert_array_equal(jnp.trim_zeros(jnp.array([0, 1, 0]), "f"), [1, 0])
    with pytest.raises(ConcretizationTypeError):
        kiln.jit(jnp.trim_zeros)(jnp.array([0, 1]))
    q, r = jnp.polydiv(jnp.array([2.0, -1, 3, 0.5]), jnp.array([1.0, 4]))
    np.testing.assert_allclose(q, [2.0, -9.0, 39.0])
    np.testing.assert_allclose(r, [0.0, 0.0, 0.0, -155.5])
    _, r = jnp.polydiv(jnp.array([2.0, -1, 3, 0.5]), jnp.array([1.0, 4]), trim_leading_zeros=True)
    np.testing.assert_allclose(r, [-155.5])


def test_polynomial_derivatives():
    p = jnp.array([2.0, -1.0, 3.0, 0.5])
    g = kiln.grad(lambda c: jnp.polyval(c, 2.0))(p)
    np.testing.assert_allclose(g, [8.0, 4.0, 2.0, 1.0])
    dx = kiln.grad(lambda x: jnp.polyval(p, x))(2.0)
    np.testing.assert_allclose(dx, np.polyval(np.polyder([2.0, -1, 3, 0.5]), 2.0), rtol=1e-6)
    with pytest.raises(ValueError, match="Order of derivative must be positive"):
        jnp.polyder(p, -1)
    with pytest.raises(ValueError, match="k must be a scalar"):
        jnp.polyint(p, 2, k=jnp.ones(3))


def test_polyfit_and_roots():
    if not hasattr(jnp.linalg, "lstsq") or not hasattr(jnp.linalg, "eigvals"):
        pytest.skip("kiln.numpy.linalg has no lstsq/eigvals")
    rng = np.random.default_rng(0)
    xs = np.linspace(0, 1, 12)
    ys = np.polyval([2.0, -1.0, 3.0, 0.5], xs) + 0.01 * rng.standard_normal(12)
    assert_close(
        jnp.polyfit(jnp.asarray(xs), jnp.asarray(ys), 3),
        np.polyfit(xs, ys, 3).astype(np.float32),
        tol=2e-2,
    )
    two = np.stack([ys, 2 * ys], axis=1)
    assert_close(
        jnp.polyfit(jnp.asarray(xs), jnp.asarray(two), 2),
        np.polyfit(xs, two, 2).astype(np.float32),
        tol=2e-2,
    )
    with pytest.raises(ValueError, match="deg >= 0"):
        jnp.polyfit(jnp.asarray(xs), jnp.asarray(ys), -1)
    with pytest.raises(TypeError, match="same length"):
        jnp.polyfit(jnp.asarray(xs), jnp.asarray(ys[:3]), 1)
    roots = np.sort_complex(np.asarray(jnp.roots(jnp.array([0.0, 0.0, 1.0, -3.0, 2.0]))))
    np.testing.assert_allclose(roots, [1.0, 2.0], atol=1e-5)
    traced = kiln.jit(lambda p: jnp.roots(p, strip_zeros=False))(jnp.array([0.0, 1, -3, 2]))
    np.testing.assert_allclose(np.sort_complex(np.asarray(traced)[:2]), [1.0, 2.0], atol=1e-5)
    assert np.isnan(np.asarray(traced)[2])
    with pytest.raises(ConcretizationTypeError, match="strip_zeros=False"):
        kiln.jit(jnp.roots)(jnp.array([1.0, -3, 2]))
    # As in JAX, the eigenvalues of a matrix make the coefficients complex.
    expected = np.poly(np.array([[1.0, 2], [3, 4]])).astype(np.complex64)
    assert_close(jnp.poly(jnp.array([[1.0, 2], [3, 4]])), expected, tol=1e-4)


def test_kaiser_place_mask_indices_einsum_path():
    assert_close(jnp.kaiser(7, 3.0), np.kaiser(7, 3.0).astype(np.float32), tol=1e-5)
    assert jnp.kaiser(0, 1.0).shape == (0,) and float(jnp.kaiser(1, 1.0)[0]) == 1.0
    out = jnp.place(jnp.arange(5.0), jnp.arange(5) > 1, jnp.array([9.0, 8.0]), inplace=False)
    np.testing.assert_array_equal(out, [0.0, 1.0, 9.0, 8.0, 9.0])
    with pytest.raises(ValueError, match="inplace=False"):
        jnp.place(jnp.ones(3), jnp.ones(3, bool), 0.0)
    rows, cols = jnp.mask_indices(3, jnp.triu)
    expected_rows, expected_cols = np.mask_indices(3, np.triu)
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_array_equal(cols, expected_cols)
    path, _ = jnp.einsum_path("ij,jk->ik", jnp.ones((2, 3)), jnp.ones((3, 4)))
    assert path == ["einsum_path", (0, 1)]
    with pytest.raises(ValueError, match="complex"):
        jnp.i0(jnp.ones(2, jnp.complex64))


def test_histogramdd_weights_and_errors():
    rng = np.random.default_rng(3)
    sample = rng.standard_normal((40, 2)).astype(np.float32)
    weights = rng.uniform(size=40).astype(np.float32)
    hist, edges = jnp.histogramdd(jnp.asarray(sample), bins=(3, 4), weights=jnp.asarray(weights))
    expected, expected_edges = np.histogramdd(sample, bins=(3, 4), weights=weights)
    assert_close(hist, expected.astype(np.float32), tol=1e-5)
    assert_close(edges[1], expected_edges[1].astype(np.float32), tol=1e-6)
    with pytest.raises(ValueError, match="a bin for each dimension"):
        jnp.histogramdd(jnp.asarray(sample), bins=(3, 4, 5))

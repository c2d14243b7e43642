"""dot_general and the kiln.numpy products against NumPy: shapes, dtypes, batching, einsum
subscripts, and the seed's jaxpr spelling."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from tests._testing import assert_close, check_record_eager, rand
from tests.op_records import PRODUCT_RECORDS

EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("abc,cd,da->b", [(2, 3, 4), (4, 5), (5, 2)]),
    ("ijk->kij", [(2, 3, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
]


@pytest.mark.parametrize(
    "record,shapes,dtype",
    [(r, s, d) for r in PRODUCT_RECORDS for s, d in r.cases()],
    ids=[i for r in PRODUCT_RECORDS for i in r.ids()],
)
def test_products_match_numpy(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)


@pytest.mark.parametrize("subscripts,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_einsum_matches_numpy(subscripts, shapes, dtype):
    rng = np.random.default_rng(0)
    args = [rand(s, dtype, rng) for s in shapes]
    expected = np.einsum(subscripts, *args)
    actual = jnp.einsum(subscripts, *[jnp.asarray(a) for a in args])
    assert_close(actual, np.asarray(expected).astype(dtype), tol=1e-5)


def test_dot_general_batch_and_free_dims_order():
    rng = np.random.default_rng(1)
    a = rand((2, 3, 4), np.float32, rng)
    b = rand((4, 2, 5), np.float32, rng)
    out = lax.dot_general(jnp.asarray(a), jnp.asarray(b), (((2,), (0,)), ((0,), (1,))))
    assert out.shape == (2, 3, 5)
    expected = np.einsum("bik,bkj->bij", a, np.transpose(b, (1, 0, 2)))
    assert_close(out, expected, tol=1e-5)


def test_half_precision_accumulates_in_float32():
    a = np.full((4096,), 0.1, np.float16)
    out = jnp.dot(jnp.asarray(a), jnp.asarray(a))
    exact = float(np.dot(a.astype(np.float64), a.astype(np.float64)))
    assert out.dtype == np.float16
    assert abs(float(out) - exact) / exact < 2e-3


def test_mixed_dtypes_promote():
    a = jnp.ones((2, 3), dtype=jnp.int8)
    b = jnp.ones((3,), dtype=jnp.float32)
    assert (a @ b).dtype == np.float32
    assert jnp.matmul(jnp.ones((2, 2)), 2.0 * jnp.ones(2)).dtype == np.float32


def test_seed_jaxpr_of_vector_matrix_product():
    def fn(W, b, x):
        return x @ W + b

    text = str(kiln.make_jaxpr(fn)(jnp.ones((4, 2)), jnp.ones(2), jnp.ones(4)))
    assert text == (
        "{ lambda ; a:f32[4,2] b:f32[2] c:f32[4]. let\n"
        "    d:f32[2] = dot_general[dimension_numbers=(([0], [0]), ([], []))] c a\n"
        "    e:f32[2] = add d b\n"
        "  in (e,) }"
    )


def test_seed_integer_dot_and_outer():
    x_jnp = jnp.array([0, 1, 2, 3], dtype=jnp.int32)
    x1, x2 = x_jnp * 2, x_jnp + 1
    assert repr(jnp.dot(x1, x2)) == "Array(40, dtype=int32)"
    assert repr(jnp.outer(x1, x2)) == (
        "Array([[ 0,  0,  0,  0],\n"
        "       [ 2,  4,  6,  8],\n"
        "       [ 4,  8, 12, 16],\n"
        "       [ 6, 12, 18, 24]], dtype=int32)"
    )


def test_bad_inputs():
    with pytest.raises(TypeError, match="contracting dimensions"):
        jnp.matmul(jnp.ones((2, 3)), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="scalars"):
        jnp.matmul(jnp.ones(()), jnp.ones(3))
    with pytest.raises(TypeError, match="requires ndarray or scalar arguments"):
        jnp.dot([1, 2], jnp.ones(2))
    with pytest.raises(ValueError, match="label 'j'"):
        jnp.einsum("ij,jk->ik", jnp.ones((2, 3)), jnp.ones((4, 2)))
    with pytest.raises(TypeError, match="same dtype"):
        lax.dot_general(jnp.ones(3), jnp.ones(3, dtype=jnp.int32), (((0,), (0,)), ((), ())))


@pytest.mark.parametrize(
    "ord_,axis",
    [
        (None, None),
        (2, 0),
        (1, 1),
        (np.inf, None),
        (-np.inf, 1),
        (0, 1),
        (3, 0),
        ("fro", None),
        (1, (0, 1)),
        (np.inf, (0, 1)),
        (-1, (0, 1)),
    ],
)
def test_linalg_norm(ord_, axis):
    rng = np.random.default_rng(3)
    x = rand((3, 4), np.float32, rng)
    if ord_ is not None and axis is None and not isinstance(ord_, str):
        expected = np.linalg.norm(x.ravel(), ord=ord_)
        actual = jnp.linalg.norm(jnp.asarray(x).ravel(), ord=ord_)
    else:
        expected = np.linalg.norm(x, ord=ord_, axis=axis)
        actual = jnp.linalg.norm(jnp.asarray(x), ord=ord_, axis=axis)
    assert_close(actual, np.asarray(expected, np.float32), tol=1e-5)


MATMUL_SHAPES = [
    ((2, 3, 4), (4, 5)),
    ((4, 5), (2, 5, 3)),
    ((4,), (2, 4, 5)),
    ((2, 3, 4), (4,)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((1, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (1, 4, 5)),
    ((1, 1, 3, 4), (1, 4, 5)),
    ((7, 1, 3, 4), (1, 6, 4, 2)),
    ((3, 2, 3, 4), (3, 2, 4, 5)),
]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES)
def test_matmul_broadcasting_matches_numpy_without_copying(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rand(a_shape, np.float32, rng), rand(b_shape, np.float32, rng)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = jnp.matmul(jnp.asarray(a), jnp.asarray(b))
    assert got.shape == expected.shape
    np.testing.assert_allclose(np.asarray(got), expected, rtol=2e-5, atol=2e-5)
    # As in JAX: one dot_general; an operand's own leading dims are free dims of the
    # product, never broadcast (copied) across the other's.
    closed = kiln.make_jaxpr(jnp.matmul)(a, b)
    names = [e.primitive.name for e in closed.jaxpr.eqns]
    assert names.count("dot_general") == 1 and "broadcast_in_dim" not in names


def test_matmul_jaxpr_spelling_of_a_batch_against_a_matrix():
    text = str(kiln.make_jaxpr(jnp.matmul)(jnp.ones((2, 3, 4)), jnp.ones((4, 5))))
    assert "dot_general[dimension_numbers=(([2], [0]), ([], []))] a b" in text
    text = str(kiln.make_jaxpr(jnp.matmul)(jnp.ones((2, 1, 3, 4)), jnp.ones((5, 4, 6))))
    assert "squeeze[dimensions=(1,)]" in text and "transpose[permutation=(0, 2, 1, 3)]" in text


def test_matmul_incompatible_batch_dims():
    with pytest.raises(ValueError, match="Incompatible shapes for matmul arguments"):
        jnp.matmul(jnp.ones((2, 3, 4)), jnp.ones((3, 4, 5)))

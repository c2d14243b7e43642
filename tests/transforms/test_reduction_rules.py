"""The derivative and batching rules of the reductions, cumulative reductions, sort, top_k and
dot_general: jvps against central finite differences in float64 (and, at ties and zeros, against
values JAX gives, worked out by hand below), transposes by the dot-product test
<ct, f(x)> == <f^T(ct), x>, and batching against a Python loop over the batch (batch axis first
and last, batched operands mixed with unbatched ones); then end to end through kiln.jvp,
kiln.grad and kiln.vmap."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.ad_util import UndefinedPrimal
from kiln.core.avals import ShapedArray
from kiln.primitives.linalg import dot_general_p
from kiln.primitives.reductions import (
    argmax_p,
    argmin_p,
    cumlogsumexp_p,
    cummax_p,
    cummin_p,
    cumprod_p,
    cumsum_p,
    reduce_and_p,
    reduce_max_p,
    reduce_min_p,
    reduce_or_p,
    reduce_precision_p,
    reduce_prod_p,
    reduce_sum_p,
    reduce_xor_p,
)
from kiln.primitives.sorting import sort_p, top_k_p
from tests._testing import x64_mode


@pytest.fixture(autouse=True)
def float64():
    with x64_mode(True):
        yield


def _kiln(x):
    return None if x is None else jnp.asarray(x)


def _listed(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _bind(prim, args, params) -> list:
    return [np.asarray(o) for o in _listed(prim.bind(*[_kiln(a) for a in args], **params))]


def _is_float(x) -> bool:
    return np.asarray(x).dtype.kind == "f"


def _jvp(prim, args, tangents, params):
    out, out_tangent = prim.rule("jvp")(
        [_kiln(a) for a in args], [_kiln(t) for t in tangents], **params
    )
    return _listed(out), _listed(out_tangent)


# --- checks ------------------------------------------------------------------------------------


def check_jvp(prim, args, params, differentiate=None, seed=0, eps=1e-4, tol=1e-7):
    """The jvp rule's primal equals the forward result, and its tangents equal a central
    finite difference for random tangents of the float args in `differentiate` (default all;
    the others get symbolic-zero tangents). Integer outputs must get None tangents."""
    rng = np.random.default_rng(seed)
    chosen = range(len(args)) if differentiate is None else differentiate
    tangents = [
        rng.standard_normal(np.shape(a)) if i in chosen and _is_float(a) else None
        for i, a in enumerate(args)
    ]
    outs, out_tangents = _jvp(prim, args, tangents, params)
    forward = _bind(prim, args, params)
    for o, f in zip(outs, forward):
        np.testing.assert_array_equal(np.asarray(o), f)
    shifted = [
        [a if t is None else a + sign * eps * t for a, t in zip(args, tangents)] for sign in (1, -1)
    ]
    plus, minus = _bind(prim, shifted[0], params), _bind(prim, shifted[1], params)
    assert len(out_tangents) == len(forward)
    for f, t, p, m in zip(forward, out_tangents, plus, minus):
        if f.dtype.kind != "f":
            assert t is None
            continue
        t = np.zeros_like(f) if t is None else np.asarray(t)  # None: a symbolic zero
        assert t.shape == f.shape and t.dtype == np.float64
        np.testing.assert_allclose(t, (p - m) / (2 * eps), rtol=tol, atol=tol)


def check_transpose(prim, args, params, undefined, seed=0):
    """Dot-product test of the transpose rule with respect to the args in `undefined` (the
    op must be linear in them; the others are known values)."""
    rng = np.random.default_rng(seed)
    xs = {i: rng.standard_normal(np.shape(args[i])) for i in undefined}
    forward_args = [xs.get(i, a) for i, a in enumerate(args)]
    (forward,) = _bind(prim, forward_args, params)
    ct = rng.standard_normal(forward.shape)
    rule_args = [
        UndefinedPrimal(ShapedArray(np.shape(a), np.dtype(np.float64))) if i in xs else _kiln(a)
        for i, a in enumerate(args)
    ]
    cts = prim.rule("transpose")(_kiln(ct), *rule_args, **params)
    assert len(cts) == len(args)
    for i, c in enumerate(cts):
        if i not in xs:
            assert c is None
            continue
        c = np.asarray(c)
        assert c.shape == np.shape(args[i]) and c.dtype == np.float64
        others = [
            xs[i] if j == i else (np.zeros_like(xs[j]) if j in xs else a)
            for j, a in enumerate(args)
        ]
        (partial,) = _bind(prim, others, params)
        np.testing.assert_allclose(np.vdot(ct, partial), np.vdot(c, xs[i]), rtol=1e-10)


def check_batching(prim, args, dims, params, rtol=0.0, atol=0.0):
    """The batching rule agrees with the primitive applied to each batch element (exactly,
    unless `rtol` allows for a different order of summation)."""
    size = next(np.shape(a)[d] for a, d in zip(args, dims) if d is not None)
    outs, out_dims = prim.rule("batching")([_kiln(a) for a in args], list(dims), **params)
    outs, out_dims = _listed(outs), _listed(out_dims)
    for b in range(size):
        example = [a if d is None else np.take(a, b, axis=d) for a, d in zip(args, dims)]
        for out, out_dim, expected in zip(outs, out_dims, _bind(prim, example, params)):
            got = np.take(np.asarray(out), b, axis=out_dim)
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


RNG = np.random.default_rng(42)


@pytest.fixture(autouse=True)
def _fresh_rng(request):
    """Each test draws the same data whichever tests ran before it on its worker."""
    global RNG
    RNG = np.random.default_rng(sum(map(ord, request.node.nodeid)))


def _rand(*shape):
    return RNG.standard_normal(shape)


def _separated(*shape):
    """Distinct values at least 0.1 apart, in random order: finite differences (steps of about
    1e-4) never reorder them, so the order an op picks (max, sort, top_k) is the same at x±eps."""
    n = int(np.prod(shape, dtype=np.int64))
    return ((RNG.permutation(n) - n / 2) * 0.1).reshape(shape)


# --- reductions --------------------------------------------------------------------------------

REDUCTION_CASES = [
    ((5,), (0,)),
    ((3, 4), (0,)),
    ((3, 4), (1,)),
    ((2, 3, 4), (0, 2)),
    ((2, 3, 4), (2, 1)),
    ((2, 3, 4), (0, 1, 2)),
    ((3, 4), ()),
]


@pytest.mark.parametrize("prim", [reduce_sum_p, reduce_prod_p, reduce_max_p, reduce_min_p])
@pytest.mark.parametrize("shape,axes", REDUCTION_CASES)
def test_reduction_jvp(prim, shape, axes):
    check_jvp(prim, [_separated(*shape)], dict(axes=axes))


@pytest.mark.parametrize("shape,axes", REDUCTION_CASES)
def test_reduce_sum_transpose(shape, axes):
    check_transpose(reduce_sum_p, [_rand(*shape)], dict(axes=axes), undefined=[0])


def test_reduce_prod_jvp_with_zeros():
    # d/dx_i prod(x) = prod of the others: one zero leaves only its own partial non-zero, two
    # zeros make every partial zero (JAX: [0, 6, 0, 0] and zeros).
    tangent = np.eye(4)
    for x, jacobian in (
        ([1.0, 0.0, 3.0, 2.0], [0.0, 6.0, 0.0, 0.0]),
        ([1.0, 0.0, 3.0, 0.0], [0.0] * 4),
    ):
        for i in range(4):
            _, (t,) = _jvp(reduce_prod_p, [np.array(x)], [tangent[i]], dict(axes=(0,)))
            assert float(t) == jacobian[i]
    # along one axis of a matrix with zeros in some rows; multilinear, so finite differences
    # are exact up to rounding
    x = _rand(3, 4)
    x[0, 1] = 0.0
    x[1, 0] = x[1, 3] = 0.0
    check_jvp(reduce_prod_p, [x], dict(axes=(1,)))
    check_jvp(reduce_prod_p, [x], dict(axes=(0, 1)))


def test_reduce_max_min_jvp_ties_average_the_tangents():
    # JAX's convention (checked with jax.jvp): the mean of the tangents at the positions equal
    # to the result.
    x = np.array([[2.0, 5.0, 5.0], [2.0, 1.0, 5.0], [0.0, 5.0, 3.0]])
    t = np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0], [64.0, 128.0, 256.0]])
    cases = [
        (reduce_max_p, (0,), [4.5, 65.0, 18.0]),
        (reduce_max_p, (1,), [3.0, 32.0, 128.0]),
        (reduce_max_p, (0, 1), 41.5),
        (reduce_min_p, (0,), [64.0, 16.0, 256.0]),
    ]
    for prim, axes, expected in cases:
        _, (out_tangent,) = _jvp(prim, [x], [t], dict(axes=axes))
        np.testing.assert_array_equal(np.asarray(out_tangent), expected)


@pytest.mark.parametrize(
    "prim", [reduce_sum_p, reduce_prod_p, reduce_max_p, reduce_min_p, argmax_p, argmin_p]
)
@pytest.mark.parametrize("bdim", [0, 2])
@pytest.mark.parametrize("axes", [(0,), (1,)])
def test_reduction_batching(prim, bdim, axes):
    x = _rand(3, 4, 5) if bdim == 0 else _rand(4, 5, 3)
    params = dict(axes=axes)
    if prim in (argmax_p, argmin_p):
        params["index_dtype"] = np.dtype(np.int32)
    check_batching(prim, [x], [bdim], params)


def test_two_axis_reduction_batching_around_the_batch_dim():
    check_batching(reduce_sum_p, [_rand(2, 3, 4, 5)], [1], dict(axes=(0, 2)))
    check_batching(reduce_max_p, [_rand(2, 3, 4, 5)], [2], dict(axes=(2, 0)))


@pytest.mark.parametrize("prim", [reduce_and_p, reduce_or_p, reduce_xor_p])
def test_bitwise_reductions(prim):
    x = RNG.integers(0, 256, (4, 6)).astype(np.int32)
    out, out_tangent = prim.rule("jvp")([_kiln(x)], [None], axes=(1,))
    assert out_tangent is None
    for bdim in (0, 1):
        check_batching(prim, [x], [bdim], dict(axes=(0,)))


def test_argmax_argmin_have_zero_tangents():
    x = _rand(3, 4)
    for prim in (argmax_p, argmin_p):
        check_jvp(prim, [x], dict(axes=(1,), index_dtype=np.dtype(np.int32)))


# --- cumulative reductions --------------------------------------------------------------------

CUMULATIVE = [cumsum_p, cumprod_p, cummax_p, cummin_p, cumlogsumexp_p]


@pytest.mark.parametrize("prim", CUMULATIVE)
@pytest.mark.parametrize(
    "shape,axis", [((1,), 0), ((7,), 0), ((8,), 0), ((3, 5), 1), ((5, 3), 0), ((2, 6, 3), 1)]
)
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_jvp(prim, shape, axis, reverse):
    check_jvp(prim, [_separated(*shape)], dict(axis=axis, reverse=reverse))


def test_cumprod_jvp_with_zeros():
    x = np.array([1.5, 0.0, 3.0, -2.0, 0.0, 0.5, 2.0])
    check_jvp(cumprod_p, [x], dict(axis=0, reverse=False))
    check_jvp(cumprod_p, [x], dict(axis=0, reverse=True))


def test_cummax_cummin_ties_as_jax():
    # At ties, JAX's parallel scan of max/min splits the tangent 1/2 : 1/2 at each max/min of
    # two equal values, so equal elements get weights by the shape of the scan's tree. The
    # expected values are jax.jvp's.
    t = 2.0 ** np.arange(7.0)
    y = np.array([4.0, 2.0, 2.0, 3.0, 2.0, 1.0, 1.0])
    cases = [
        (cummin_p, False, [1.0, 2.0, 3.0, 3.0, 9.5, 32.0, 48.0]),
        (cummin_p, True, [48.0, 48.0, 48.0, 48.0, 48.0, 48.0, 64.0]),
    ]
    for prim, reverse, expected in cases:
        _, (out_tangent,) = _jvp(prim, [y], [t], dict(axis=0, reverse=reverse))
        np.testing.assert_array_equal(np.asarray(out_tangent), expected)
    # the Jacobian of cummax on five equal values, row by row (jax.jacfwd)
    jacobian = np.array(
        [
            [1.0, 0.0, 0.0, 0.0, 0.0],
            [0.5, 0.5, 0.0, 0.0, 0.0],
            [0.25, 0.25, 0.5, 0.0, 0.0],
            [0.25, 0.25, 0.25, 0.25, 0.0],
            [0.125, 0.125, 0.125, 0.125, 0.5],
        ]
    )
    for i in range(5):
        _, (column,) = _jvp(cummax_p, [np.ones(5)], [np.eye(5)[i]], dict(axis=0, reverse=False))
        np.testing.assert_array_equal(np.asarray(column), jacobian[:, i])
    x = np.array([[2.0, 5.0, 5.0], [2.0, 1.0, 5.0], [0.0, 5.0, 3.0]])
    tx = np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0], [64.0, 128.0, 256.0]])
    _, (out_tangent,) = _jvp(cummax_p, [x], [tx], dict(axis=1, reverse=True))
    np.testing.assert_array_equal(
        np.asarray(out_tangent), [[3.0, 3.0, 4.0], [32.0, 32.0, 32.0], [128.0, 128.0, 256.0]]
    )


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_transpose(reverse):
    check_transpose(cumsum_p, [_rand(4, 5)], dict(axis=1, reverse=reverse), undefined=[0])
    check_transpose(cumsum_p, [_rand(4, 5)], dict(axis=0, reverse=reverse), undefined=[0])


@pytest.mark.parametrize("prim", CUMULATIVE)
@pytest.mark.parametrize("bdim,axis", [(0, 0), (0, 1), (2, 0), (2, 1)])
def test_cumulative_batching(prim, bdim, axis):
    x = _rand(3, 4, 5) if bdim == 0 else _rand(4, 5, 3)
    check_batching(prim, [x], [bdim], dict(axis=axis, reverse=bool(axis)))


def test_reduce_precision_rules():
    params = dict(exponent_bits=5, mantissa_bits=10)
    x, t = _rand(3, 4), _rand(3, 4)
    out, out_tangent = reduce_precision_p.rule("jvp")([_kiln(x)], [_kiln(t)], **params)
    np.testing.assert_array_equal(np.asarray(out_tangent), np.float64(t.astype(np.float16)))
    ct = reduce_precision_p.rule("transpose")(
        _kiln(t), UndefinedPrimal(ShapedArray((3, 4), np.dtype(np.float64))), **params
    )
    np.testing.assert_array_equal(np.asarray(ct[0]), np.float64(t.astype(np.float16)))
    check_batching(reduce_precision_p, [x], [1], params)


# --- sort and top_k ----------------------------------------------------------------------------


def test_sort_jvp_permutes_the_tangents():
    # ties keep their order (stable): the tangents follow their elements (as jax.jvp)
    z = np.array([3.0, 1.0, 3.0, 2.0, 1.0])
    tz = np.array([1.0, 10.0, 100.0, 1000.0, 10000.0])
    outs, (t,) = _jvp(sort_p, [z], [tz], dict(dimension=0, is_stable=True, num_keys=1))
    np.testing.assert_array_equal(np.asarray(outs[0]), [1.0, 1.0, 2.0, 3.0, 3.0])
    np.testing.assert_array_equal(np.asarray(t), [10.0, 10000.0, 1000.0, 1.0, 100.0])


@pytest.mark.parametrize("dimension", [0, 1, 2])
def test_sort_jvp_several_operands(dimension):
    keys = RNG.integers(0, 3, (3, 4, 5)).astype(np.float64)  # ties in the first key
    second = _separated(3, 4, 5)  # orders the ties of the first key
    values = _rand(3, 4, 5)
    labels = RNG.integers(0, 10, (3, 4, 5)).astype(np.int32)
    params = dict(dimension=dimension, is_stable=True, num_keys=2)
    # a perturbed tied key would reorder the ties: finite differences move the others only
    check_jvp(sort_p, [keys, second, values, labels], params, differentiate=[1, 2])
    check_jvp(sort_p, [keys, second, values, labels], params, differentiate=[2])
    check_jvp(sort_p, [_separated(3, 4, 5), values, labels], dict(params, num_keys=1))


@pytest.mark.parametrize("dims", [(0, 0), (1, None), (None, 2), (2, 0)])
@pytest.mark.parametrize("num_keys", [1, 2])
def test_sort_batching(dims, num_keys):
    args = [RNG.integers(0, 3, (3, 4, 5)).astype(np.float64), _rand(3, 4, 5)]
    args = [a if d is not None else np.take(a, 0, axis=0) for a, d in zip(args, dims)]
    args = [np.moveaxis(a, 0, d) if d is not None else a for a, d in zip(args, dims)]
    for dimension in (0, 1):
        check_batching(
            sort_p, args, dims, dict(dimension=dimension, is_stable=True, num_keys=num_keys)
        )


@pytest.mark.parametrize("shape,k", [((6,), 3), ((3, 5), 5), ((2, 3, 4), 2), ((4, 1), 1)])
def test_top_k_jvp(shape, k):
    check_jvp(top_k_p, [_separated(*shape)], dict(k=k))


def test_top_k_jvp_ties():
    z = np.array([3.0, 1.0, 3.0, 2.0, 1.0])
    tz = np.array([1.0, 10.0, 100.0, 1000.0, 10000.0])
    _, (t, index_tangent) = _jvp(top_k_p, [z], [tz], dict(k=3))
    assert index_tangent is None
    np.testing.assert_array_equal(np.asarray(t), [1.0, 100.0, 1000.0])  # jax.jvp's


@pytest.mark.parametrize("bdim", [0, 1, 2])
def test_top_k_batching(bdim):
    check_batching(top_k_p, [_rand(3, 4, 5)], [bdim], dict(k=2))


# --- dot_general -------------------------------------------------------------------------------

# (lhs shape, rhs shape, ((lhs contracting, rhs contracting), (lhs batch, rhs batch)))
DOT_CASES = [
    ((2, 3), (3, 4), (((1,), (0,)), ((), ()))),  # matmul
    ((3,), (3,), (((0,), (0,)), ((), ()))),  # vector dot
    ((3,), (3, 4), (((0,), (0,)), ((), ()))),  # vector-matrix
    ((2,), (3,), (((), ()), ((), ()))),  # outer product
    ((3, 2), (4, 3), (((0,), (1,)), ((), ()))),  # both transposed
    ((5, 2, 3), (5, 3, 4), (((2,), (1,)), ((0,), (0,)))),  # batched matmul
    ((2, 5, 3), (3, 4, 5), (((2,), (0,)), ((1,), (2,)))),  # batch dims not leading
    ((2, 3, 4), (4, 3, 5), (((1, 2), (1, 0)), ((), ()))),  # two contracting, crossed
    ((3, 2, 6, 4), (4, 6, 5, 3), (((3,), (0,)), ((2, 0), (1, 3)))),  # two batch, reordered
    ((6, 2, 3, 4), (4, 6, 3), (((3, 2), (0, 2)), ((0,), (1,)))),  # batch + two contracting
]


def _dot_params(dimension_numbers, preferred=None):
    return dict(
        dimension_numbers=dimension_numbers, precision=None, preferred_element_type=preferred
    )


@pytest.mark.parametrize("lhs_shape,rhs_shape,dimension_numbers", DOT_CASES)
def test_dot_general_jvp(lhs_shape, rhs_shape, dimension_numbers):
    args = [_rand(*lhs_shape), _rand(*rhs_shape)]
    params = _dot_params(dimension_numbers)
    check_jvp(dot_general_p, args, params)
    check_jvp(dot_general_p, args, params, differentiate=[0])
    check_jvp(dot_general_p, args, params, differentiate=[1])


@pytest.mark.parametrize("lhs_shape,rhs_shape,dimension_numbers", DOT_CASES)
def test_dot_general_transpose(lhs_shape, rhs_shape, dimension_numbers):
    args = [_rand(*lhs_shape), _rand(*rhs_shape)]
    params = _dot_params(dimension_numbers)
    check_transpose(dot_general_p, args, params, undefined=[0])
    check_transpose(dot_general_p, args, params, undefined=[1])


def test_dot_general_transpose_with_preferred_element_type():
    # float32 operands with a float64 product: the cotangents come back as float32
    lhs = _rand(2, 3).astype(np.float32)
    rhs = _rand(3, 4).astype(np.float32)
    params = _dot_params((((1,), (0,)), ((), ())), np.dtype(np.float64))
    ct = _rand(2, 4)
    lhs_ct, none = dot_general_p.rule("transpose")(
        _kiln(ct), UndefinedPrimal(ShapedArray((2, 3), np.dtype(np.float32))), _kiln(rhs), **params
    )
    assert none is None and lhs_ct.dtype == np.float32 and lhs_ct.shape == (2, 3)
    np.testing.assert_allclose(np.asarray(lhs_ct), ct @ rhs.T.astype(np.float64), rtol=1e-6)
    _, rhs_ct = dot_general_p.rule("transpose")(
        _kiln(ct), _kiln(lhs), UndefinedPrimal(ShapedArray((3, 4), np.dtype(np.float32))), **params
    )
    assert rhs_ct.dtype == np.float32
    np.testing.assert_allclose(np.asarray(rhs_ct), lhs.T.astype(np.float64) @ ct, rtol=1e-6)


def _batched(x, bdim, size=2):
    """x stacked `size` times (perturbed) along a new axis `bdim`; x itself if bdim is None."""
    if bdim is None:
        return x
    return np.stack([x + i for i in range(size)], axis=bdim)


@pytest.mark.parametrize("lhs_shape,rhs_shape,dimension_numbers", DOT_CASES)
@pytest.mark.parametrize(
    "dims", [(0, 0), ("last", None), (None, "last"), (0, "last"), (None, 0), (1, None)]
)
def test_dot_general_batching(lhs_shape, rhs_shape, dimension_numbers, dims):
    shapes = (lhs_shape, rhs_shape)
    dims = tuple(len(s) if d == "last" else d for s, d in zip(shapes, dims))
    if any(d is not None and d > len(s) for s, d in zip(shapes, dims)):
        pytest.skip("batch axis beyond the operand's rank")
    args = [_batched(_rand(*s), d) for s, d in zip(shapes, dims)]
    # float64 products summed in another order (one batched product vs one per example): the
    # bound is relative to the operands' scale, not to results that cancel to near zero.
    check_batching(
        dot_general_p, args, dims, _dot_params(dimension_numbers), rtol=1e-13, atol=1e-13
    )


# --- end to end --------------------------------------------------------------------------------


def _count_primitives(closed_jaxpr, name: str) -> int:
    return sum(eqn.primitive.name == name for eqn in closed_jaxpr.jaxpr.eqns)


@pytest.mark.parametrize(
    "in_axes,shapes",
    [
        ((None, 0), ((3, 4), (5, 4))),
        ((None, 1), ((3, 4), (4, 5))),
        ((0, None), ((5, 3, 4), (4,))),
        ((2, 0), ((3, 4, 5), (5, 4))),
    ],
)
def test_vmap_of_matrix_vector_product_is_one_dot_general(in_axes, shapes):
    m, v = _rand(*shapes[0]), _rand(*shapes[1])
    batched = kiln.vmap(lambda m, v: jnp.dot(m, v), in_axes=in_axes)
    assert _count_primitives(kiln.make_jaxpr(batched)(m, v), "dot_general") == 1
    size = next(np.shape(x)[d] for x, d in zip((m, v), in_axes) if d is not None)
    looped = [np.take(m, b, in_axes[0]) if in_axes[0] is not None else m for b in range(size)]
    looped = [
        lm @ (np.take(v, b, in_axes[1]) if in_axes[1] is not None else v)
        for b, lm in enumerate(looped)
    ]
    np.testing.assert_allclose(np.asarray(batched(m, v)), np.stack(looped), rtol=1e-12)


def test_grad_of_product_with_zeros_and_of_sort():
    np.testing.assert_array_equal(
        np.asarray(kiln.grad(lambda x: jnp.prod(x))(np.array([1.0, 0.0, 3.0, 2.0]))),
        [0.0, 6.0, 0.0, 0.0],
    )
    weights = np.array([1.0, 2.0, 3.0, 4.0])
    grad = kiln.grad(lambda x: jnp.sum(jnp.sort(x) * weights))(np.array([4.0, 0.0, 3.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(grad), [4.0, 1.0, 3.0, 2.0])


def test_grad_and_jvp_through_dot_general_and_cumulative_ops():
    a, b = _rand(3, 4), _rand(4, 2)

    def f(a, b):
        return jnp.sum(lax.cumlogsumexp(lax.cummax(jnp.dot(a, b), 0), 1) ** 2)

    ga, gb = kiln.grad(f, argnums=(0, 1))(a, b)
    ta, tb = _rand(3, 4), _rand(4, 2)
    eps = 1e-6
    fd = (np.asarray(f(a + eps * ta, b + eps * tb)) - np.asarray(f(a - eps * ta, b - eps * tb))) / (
        2 * eps
    )
    np.testing.assert_allclose(
        np.vdot(np.asarray(ga), ta) + np.vdot(np.asarray(gb), tb), fd, rtol=1e-6
    )
    _, tangent = kiln.jvp(f, (a, b), (ta, tb))
    np.testing.assert_allclose(np.asarray(tangent), fd, rtol=1e-6)


def test_vmap_of_grad_of_top_k_and_reductions():
    x = _rand(4, 6)

    def f(row):
        values, _ = lax.top_k(row, 3)
        return jnp.sum(values * jnp.arange(3.0)) + jnp.max(row) * jnp.prod(row)

    batched = kiln.vmap(kiln.grad(f))(x)
    looped = np.stack([np.asarray(kiln.grad(f)(row)) for row in x])
    np.testing.assert_allclose(np.asarray(batched), looped, rtol=1e-12)


def test_empty_operands():
    empty = np.zeros((3, 0))
    for f, expected_shape in (
        (lambda x: jnp.sum(jnp.prod(x, axis=1)), (3, 0)),
        (lambda x: jnp.sum(lax.cumprod(x, 1)), (3, 0)),
        (lambda x: jnp.sum(lax.cummax(x, 1)), (3, 0)),
        (lambda x: jnp.sum(jnp.sort(x, axis=1)), (3, 0)),
        (lambda x: jnp.sum(lax.top_k(x.T, 2)[0]), (3, 0)),
    ):
        assert kiln.grad(f)(empty).shape == expected_shape
    # the product over an empty axis is the constant 1: zero tangent
    out, tangent = reduce_prod_p.rule("jvp")([_kiln(empty)], [_kiln(empty)], axes=(1,))
    np.testing.assert_array_equal(np.asarray(out), np.ones(3))
    assert tangent is None


def test_float32_gradients_keep_their_dtype():
    x = _rand(3, 4).astype(np.float32)
    for f in (
        lambda x: jnp.prod(x),
        lambda x: jnp.max(x),
        lambda x: jnp.sum(lax.cummin(x, 1)),
        lambda x: jnp.sum(lax.cumlogsumexp(x, 0)),
        lambda x: jnp.sum(jnp.sort(x, 0)[0]),
        lambda x: jnp.sum(jnp.dot(x, x.T)),
    ):
        grad = kiln.grad(f)(x)
        assert grad.dtype == np.float32 and grad.shape == (3, 4)

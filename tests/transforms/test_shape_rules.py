"""The derivative and batching rules of the shape, slicing and dynamic-slicing primitives,
called directly: jvps against central finite differences in float64, transposes by the
dot-product test <ct, f(x)> == <f^T(ct), x>, and batching against a Python loop over the batch
(batch axis first, last and in between, batched operands mixed with unbatched ones)."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.ad_util import UndefinedPrimal
from kiln.core.avals import ShapedArray
from kiln.primitives.indexing import dynamic_slice_p, dynamic_update_slice_p
from kiln.primitives.shape import (
    broadcast_in_dim_p,
    copy_p,
    reshape_p,
    rev_p,
    squeeze_p,
    transpose_p,
)
from kiln.primitives.shape_slice import concatenate_p, iota_p, pad_p, slice_p
from tests._testing import x64_mode


@pytest.fixture(autouse=True)
def float64():
    with x64_mode(True):
        yield


def _kiln(x):
    return None if x is None else jnp.asarray(x)


def _int(value):
    return np.asarray(value, dtype=np.int64)


def _bind(prim, args, params):
    return np.asarray(prim.bind(*[_kiln(a) for a in args], **params))


def _is_float(x) -> bool:
    return np.asarray(x).dtype.kind == "f"


# --- checks ------------------------------------------------------------------------------------


def check_jvp(prim, args, params, differentiate=None, seed=0):
    """The jvp rule's primal equals the forward result and its tangent equals a central
    finite difference, for random tangents of the float args in `differentiate` (default
    all; the others get symbolic-zero tangents)."""
    rng = np.random.default_rng(seed)
    chosen = range(len(args)) if differentiate is None else differentiate
    tangents = [
        rng.standard_normal(np.shape(a)) if i in chosen and _is_float(a) else None
        for i, a in enumerate(args)
    ]
    out, out_tangent = prim.rule("jvp")(
        [_kiln(a) for a in args], [_kiln(t) for t in tangents], **params
    )
    np.testing.assert_array_equal(np.asarray(out), _bind(prim, args, params))
    eps = 1e-3
    shifted = [
        [a if t is None else a + sign * eps * t for a, t in zip(args, tangents)] for sign in (1, -1)
    ]
    expected = (_bind(prim, shifted[0], params) - _bind(prim, shifted[1], params)) / (2 * eps)
    if all(t is None for t in tangents):
        assert out_tangent is None
        return
    out_tangent = np.asarray(out_tangent)
    assert out_tangent.shape == expected.shape and out_tangent.dtype == np.float64
    np.testing.assert_allclose(out_tangent, expected, rtol=1e-9, atol=1e-9)


def check_transpose(prim, args, params, undefined, known_linear=(), seed=0):
    """Dot-product test of the transpose rule for the args in `undefined`. The other args are
    known; those in `known_linear` are linear ones held at zero in the forward product."""
    rng = np.random.default_rng(seed)
    xs = {i: rng.standard_normal(np.shape(args[i])) for i in undefined}
    forward_args = [
        xs[i] if i in xs else np.zeros_like(a) if i in known_linear else a
        for i, a in enumerate(args)
    ]
    forward = _bind(prim, forward_args, params)
    ct = rng.standard_normal(forward.shape)
    rule_args = [
        UndefinedPrimal(ShapedArray(np.shape(a), np.dtype(np.float64))) if i in xs else _kiln(a)
        for i, a in enumerate(args)
    ]
    cts = prim.rule("transpose")(_kiln(ct), *rule_args, **params)
    assert len(cts) == len(args)
    rhs = 0.0
    for i, (a, c) in enumerate(zip(args, cts)):
        if i not in xs:
            assert c is None
            continue
        c = np.asarray(c)
        assert c.shape == np.shape(a) and c.dtype == np.float64
        rhs += np.vdot(c, xs[i])
    np.testing.assert_allclose(np.vdot(ct, forward), rhs, rtol=1e-10, atol=1e-10)


def check_batching(prim, args, dims, params):
    """The batching rule against a Python loop applying the primitive to each batch element
    (`args[i]` holds its batch on axis dims[i]; None: shared by every element)."""
    size = next(np.shape(a)[d] for a, d in zip(args, dims) if d is not None)
    out, out_dim = prim.rule("batching")([_kiln(a) for a in args], dims, **params)
    expected = np.stack(
        [
            _bind(
                prim,
                [a if d is None else np.take(a, b, axis=d) for a, d in zip(args, dims)],
                params,
            )
            for b in range(size)
        ]
    )
    out = np.moveaxis(np.asarray(out), out_dim, 0)
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


def _batched(rng, shape, bdim, size=3, dtype=np.float64):
    """Random data of per-example `shape` with a batch of `size` on axis `bdim`."""
    if bdim is None:
        full_shape = shape
    else:
        full_shape = shape[:bdim] + (size,) + shape[bdim:]
    if np.dtype(dtype).kind == "i":
        return rng.integers(-8, 9, full_shape).astype(dtype)
    return rng.standard_normal(full_shape)


# --- the linear shape primitives: jvp and transpose --------------------------------------------
# (primitive, arg shapes, params): one float operand.
UNARY_CASES = [
    (broadcast_in_dim_p, (3, 1), dict(shape=(2, 3, 4), broadcast_dimensions=(1, 2))),
    (broadcast_in_dim_p, (3,), dict(shape=(3, 4), broadcast_dimensions=(0,))),
    (broadcast_in_dim_p, (), dict(shape=(2, 3), broadcast_dimensions=())),
    (broadcast_in_dim_p, (1, 2), dict(shape=(0, 2), broadcast_dimensions=(0, 1))),
    (broadcast_in_dim_p, (1,), dict(shape=(1, 1), broadcast_dimensions=(1,))),
    (reshape_p, (2, 3, 4), dict(new_sizes=(6, 4), dimensions=None)),
    (reshape_p, (2, 3, 4), dict(new_sizes=(4, 6), dimensions=(2, 0, 1))),
    (reshape_p, (), dict(new_sizes=(1, 1), dimensions=None)),
    (squeeze_p, (2, 1, 3, 1), dict(dimensions=(1, 3))),
    (squeeze_p, (1,), dict(dimensions=(0,))),
    (transpose_p, (2, 3, 4), dict(permutation=(2, 0, 1))),
    (transpose_p, (2, 3), dict(permutation=(1, 0))),
    (rev_p, (3, 4), dict(dimensions=(0,))),
    (rev_p, (2, 3, 4), dict(dimensions=(0, 2))),
    (copy_p, (2, 3), {}),
    (slice_p, (5, 6), dict(start_indices=(1, 0), limit_indices=(4, 6), strides=None)),
    (slice_p, (5, 7), dict(start_indices=(1, 2), limit_indices=(5, 7), strides=(2, 3))),
    (slice_p, (6, 4), dict(start_indices=(0, 1), limit_indices=(5, 1), strides=(2, 1))),
    (slice_p, (4,), dict(start_indices=(3,), limit_indices=(4,), strides=(3,))),
]


def _case_id(case):
    return f"{case[0].name}-{case[1]}-{sorted(case[2].items())}"


@pytest.mark.parametrize("case", UNARY_CASES, ids=_case_id)
def test_unary_jvp_and_transpose(case):
    prim, shape, params = case
    x = np.random.default_rng(1).standard_normal(shape)
    check_jvp(prim, [x], params)
    check_transpose(prim, [x], params, undefined=[0])


PAD_CONFIGS = [
    (((1, 2, 1), (-1, 2, 0)), (3, 4)),
    (((2, -3, 1), (0, 0, 2)), (3, 4)),
    (((-4, 5, 0),), (3,)),  # every operand element is cropped away
    (((-1, -1, 2),), (3,)),  # negative edges crop into the interior padding
    (((1, 1, 0),), (0,)),  # an empty operand: the result is all padding
    ((), ()),
]


@pytest.mark.parametrize("config,shape", PAD_CONFIGS)
def test_pad_jvp_and_transpose(config, shape):
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(shape), np.asarray(rng.standard_normal())]
    params = dict(padding_config=config)
    check_jvp(pad_p, args, params)
    check_jvp(pad_p, args, params, differentiate=[0])
    check_jvp(pad_p, args, params, differentiate=[1])
    check_transpose(pad_p, args, params, undefined=[0, 1])
    check_transpose(pad_p, args, params, undefined=[0], known_linear=[1])
    check_transpose(pad_p, args, params, undefined=[1], known_linear=[0])


def test_pad_transpose_of_padding_value_by_hand():
    # pad([a, b], p, (1, 2, 1)) = [p, a, p, b, p, p]: p's cotangent is the sum at p's places.
    ct = np.arange(1.0, 7.0)
    operand_ct, padding_ct = pad_p.rule("transpose")(
        _kiln(ct),
        UndefinedPrimal(ShapedArray((2,), np.dtype(np.float64))),
        UndefinedPrimal(ShapedArray((), np.dtype(np.float64))),
        padding_config=((1, 2, 1),),
    )
    np.testing.assert_array_equal(np.asarray(operand_ct), [2.0, 4.0])
    assert float(padding_ct) == 1.0 + 3.0 + 5.0 + 6.0


def test_concatenate_jvp_and_transpose():
    rng = np.random.default_rng(3)
    args = [
        rng.standard_normal((2, 3)),
        rng.standard_normal((2, 1)),
        rng.standard_normal((2, 0)),
        rng.standard_normal((2, 4)),
    ]
    params = dict(dimension=1)
    check_jvp(concatenate_p, args, params)
    check_jvp(concatenate_p, args, params, differentiate=[1])
    check_transpose(concatenate_p, args, params, undefined=[0, 1, 2, 3])
    check_transpose(concatenate_p, args, params, undefined=[0, 3], known_linear=[1, 2])


def test_iota_has_a_zero_jvp_and_an_unbatched_result():
    params = dict(dtype=np.dtype(np.float64), shape=(2, 3), dimension=1)
    out, tangent = iota_p.rule("jvp")([], [], **params)
    assert tangent is None
    np.testing.assert_array_equal(np.asarray(out), [[0, 1, 2], [0, 1, 2]])
    out, out_dim = iota_p.rule("batching")([], [], **params)
    assert out_dim is None and np.asarray(out).shape == (2, 3)


# --- dynamic_slice / dynamic_update_slice: jvp and transpose -----------------------------------
# Start indices inside, below and beyond the operand: the primitives clamp them so that the
# window fits, and the rules must clamp the same way.
STARTS = [(1, 2), (-3, 10), (4, 0), (0, 3)]


@pytest.mark.parametrize("starts", STARTS)
def test_dynamic_slice_jvp_and_transpose(starts):
    x = np.random.default_rng(4).standard_normal((5, 6))
    args = [x, *(_int(s) for s in starts)]
    params = dict(slice_sizes=(2, 3))
    check_jvp(dynamic_slice_p, args, params)
    check_transpose(dynamic_slice_p, args, params, undefined=[0])


@pytest.mark.parametrize("starts", STARTS)
def test_dynamic_update_slice_jvp_and_transpose(starts):
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((5, 6)), rng.standard_normal((2, 3)), *(_int(s) for s in starts)]
    check_jvp(dynamic_update_slice_p, args, {})
    check_jvp(dynamic_update_slice_p, args, {}, differentiate=[0])
    check_jvp(dynamic_update_slice_p, args, {}, differentiate=[1])
    check_transpose(dynamic_update_slice_p, args, {}, undefined=[0, 1])
    check_transpose(dynamic_update_slice_p, args, {}, undefined=[0], known_linear=[1])
    check_transpose(dynamic_update_slice_p, args, {}, undefined=[1], known_linear=[0])


def test_dynamic_update_slice_transpose_by_hand():
    # Clamped to start 2 in a length-4 operand: the update's cotangent is ct[2:4], the
    # operand's is ct with those places zeroed.
    ct = np.arange(1.0, 5.0)
    f64 = np.dtype(np.float64)
    operand_ct, update_ct, start_ct = dynamic_update_slice_p.rule("transpose")(
        _kiln(ct),
        UndefinedPrimal(ShapedArray((4,), f64)),
        UndefinedPrimal(ShapedArray((2,), f64)),
        _kiln(_int(7)),
    )
    np.testing.assert_array_equal(np.asarray(operand_ct), [1.0, 2.0, 0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(update_ct), [3.0, 4.0])
    assert start_ct is None


# --- batching ----------------------------------------------------------------------------------
# (primitive, per-example shape, params); each is batched at the front, the back and inside.
@pytest.mark.parametrize("case", UNARY_CASES, ids=_case_id)
def test_unary_batching(case):
    prim, shape, params = case
    rng = np.random.default_rng(6)
    for bdim in sorted({0, len(shape) // 2, len(shape)}):
        check_batching(prim, [_batched(rng, shape, bdim)], [bdim], params)


def test_unary_batching_of_integers():
    x = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    check_batching(transpose_p, [x], [1], dict(permutation=(1, 0)))
    check_batching(reshape_p, [x], [2], dict(new_sizes=(6,), dimensions=(1, 0)))


@pytest.mark.parametrize("config,shape", PAD_CONFIGS[:4])
@pytest.mark.parametrize("dims", [(0, None), (-1, None), (None, 0), (0, 0), (-1, 0)])
def test_pad_batching(config, shape, dims):
    rng = np.random.default_rng(7)
    operand_dim = None if dims[0] is None else dims[0] % (len(shape) + 1)
    args = [_batched(rng, shape, operand_dim), _batched(rng, (), dims[1])]
    check_batching(pad_p, args, [operand_dim, dims[1]], dict(padding_config=config))


@pytest.mark.parametrize("dims", [(0, 0, 0), (1, None, 2), (None, 0, None), (2, 2, None)])
def test_concatenate_batching(dims):
    rng = np.random.default_rng(8)
    shapes = [(2, 3), (2, 1), (2, 4)]
    args = [_batched(rng, s, d) for s, d in zip(shapes, dims)]
    for dimension in (1, 0):
        if dimension == 0:
            shapes_0 = [(s[1], s[0]) for s in shapes]  # the concatenated axis varies
            args = [_batched(rng, s, d) for s, d in zip(shapes_0, dims)]
        check_batching(concatenate_p, args, list(dims), dict(dimension=dimension))


# Starts per batch element, with out-of-range values on both sides (clamped).
BATCHED_STARTS = np.array([[0, 5], [-2, 1], [9, 3], [3, -7]])


@pytest.mark.parametrize("operand_dim", [None, 0, 1, 2])
@pytest.mark.parametrize("start_dims", [(None, None), (0, 0), (0, None), (None, 0)])
def test_dynamic_slice_batching(operand_dim, start_dims):
    if operand_dim is None and start_dims == (None, None):
        return  # nothing batched
    rng = np.random.default_rng(9)
    operand = _batched(rng, (5, 6), operand_dim, size=4)
    starts = [
        _int(BATCHED_STARTS[:, i]) if d is not None else _int(s)
        for i, (d, s) in enumerate(zip(start_dims, (2, 9)))
    ]
    check_batching(
        dynamic_slice_p, [operand, *starts], [operand_dim, *start_dims], dict(slice_sizes=(2, 3))
    )


def test_dynamic_slice_batching_of_a_scalar_and_of_integers():
    rng = np.random.default_rng(10)
    check_batching(dynamic_slice_p, [rng.standard_normal(4)], [0], dict(slice_sizes=()))
    operand = rng.integers(0, 100, (4, 7)).astype(np.int32)
    starts = [_int(BATCHED_STARTS[:, 0])]
    check_batching(dynamic_slice_p, [operand[0], *starts], [None, 0], dict(slice_sizes=(3,)))
    check_batching(dynamic_slice_p, [operand, *starts], [0, 0], dict(slice_sizes=(3,)))


@pytest.mark.parametrize(
    "operand_dim,update_dim",
    [(None, 0), (0, None), (0, 0), (2, 1), (None, 2), (1, None), (None, None)],
)
@pytest.mark.parametrize("start_dims", [(None, None), (0, 0), (None, 0)])
def test_dynamic_update_slice_batching(operand_dim, update_dim, start_dims):
    if operand_dim is None and update_dim is None and start_dims == (None, None):
        return  # nothing batched
    rng = np.random.default_rng(11)
    operand = _batched(rng, (5, 6), operand_dim, size=4)
    update = _batched(rng, (2, 3), update_dim, size=4)
    starts = [
        _int(BATCHED_STARTS[:, i]) if d is not None else _int(s)
        for i, (d, s) in enumerate(zip(start_dims, (-1, 4)))
    ]
    check_batching(
        dynamic_update_slice_p,
        [operand, update, *starts],
        [operand_dim, update_dim, *start_dims],
        {},
    )


def test_dynamic_update_slice_batching_of_integers():
    operand = np.zeros((4, 5), np.int32)
    update = np.arange(8, dtype=np.int32).reshape(4, 2)
    starts = [_int(BATCHED_STARTS[:, 0])]
    check_batching(dynamic_update_slice_p, [operand, update, *starts], [0, 0, 0], {})


# --- end to end: the rules under kiln.jvp, kiln.grad, kiln.vmap and kiln.jit -------------------


def _pipeline(x, y, p, i, j):
    """Every primitive of the family on one path: (5, 6), (5, 6), (), int, int -> (2, 12)."""
    s = lax.dynamic_slice(x, (i, j), (3, 4))
    s = lax.pad(s, p, ((1, -1, 1), (0, 2, 0)))  # (5, 6)
    s = lax.dynamic_update_slice(s, lax.slice(y, (0, 1), (4, 6), (2, 2)), (j, i))
    t = lax.reshape(lax.transpose(s, (1, 0)), (3, 10))
    t = lax.concatenate([t, lax.slice(lax.rev(t, (1,)), (0, 0), (3, 2))], 1)
    row = lax.squeeze(lax.slice(t, (1, 0), (2, 12)), (0,))
    b = lax.broadcast_in_dim(row, (2, 12), (1,))
    return lax.copy(b) * lax.concatenate([b[:1], lax.mul(b[1:], b[1:])], 0)


def _pipeline_loss(x, y, p, i, j):
    return jnp.sum(_pipeline(x, y, p, i, j))


def _pipeline_args(seed=12):
    rng = np.random.default_rng(seed)
    return (
        jnp.asarray(rng.standard_normal((5, 6))),
        jnp.asarray(rng.standard_normal((5, 6))),
        jnp.asarray(rng.standard_normal()),
    )


@pytest.mark.parametrize("i,j", [(1, 2), (-7, 9)])
def test_end_to_end_jvp_and_grad_match_finite_differences(i, j):
    x, y, p = _pipeline_args()
    rng = np.random.default_rng(13)
    tangents = tuple(jnp.asarray(rng.standard_normal(np.shape(a))) for a in (x, y, p))
    f = lambda x, y, p: _pipeline(x, y, p, i, j)  # noqa: E731
    out, out_tangent = kiln.jvp(f, (x, y, p), tangents)
    eps = 1e-4
    shifted = [f(*(a + sign * eps * t for a, t in zip((x, y, p), tangents))) for sign in (1, -1)]
    expected = (np.asarray(shifted[0]) - np.asarray(shifted[1])) / (2 * eps)
    np.testing.assert_allclose(np.asarray(out), np.asarray(f(x, y, p)))
    np.testing.assert_allclose(np.asarray(out_tangent), expected, rtol=1e-6, atol=1e-7)
    # Reverse mode: <grad, t> is the directional derivative of the loss.
    grads = kiln.grad(_pipeline_loss, argnums=(0, 1, 2))(x, y, p, i, j)
    directional = sum(np.vdot(np.asarray(g), np.asarray(t)) for g, t in zip(grads, tangents))
    np.testing.assert_allclose(directional, expected.sum(), rtol=1e-6, atol=1e-7)
    staged = kiln.jit(kiln.grad(lambda x, y, p: _pipeline_loss(x, y, p, i, j), (0, 1, 2)))
    for g, h in zip(grads, staged(x, y, p)):
        np.testing.assert_allclose(np.asarray(h), np.asarray(g), rtol=1e-12, atol=1e-12)


def test_end_to_end_linear_transpose():
    x, y, p = _pipeline_args()

    def linear(x, y):
        s = lax.pad(lax.dynamic_slice(x, (2, 1), (3, 4)), 0.0, ((1, -1, 1), (0, 2, 0)))
        s = lax.dynamic_update_slice(s, lax.slice(y, (0, 1), (4, 6), (2, 2)), (jnp.asarray(4), 2))
        return lax.concatenate([lax.rev(s, (0,)), lax.broadcast_in_dim(y[0], (2, 6), (1,))], 0)

    ct = jnp.asarray(np.random.default_rng(14).standard_normal((7, 6)))
    ct_x, ct_y = kiln.linear_transpose(linear, x, y)(ct)
    lhs = np.vdot(np.asarray(ct), np.asarray(linear(x, y)))
    rhs = np.vdot(np.asarray(ct_x), np.asarray(x)) + np.vdot(np.asarray(ct_y), np.asarray(y))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize(
    "in_axes",
    [(0, None, None, 0, 0), (None, 1, 0, 0, None), (1, 0, None, None, 0), (0, 0, 0, None, None)],
)
def test_end_to_end_vmap_matches_a_loop(in_axes, jit):
    rng = np.random.default_rng(15)
    size = 4
    shapes = [(5, 6), (5, 6), (), (), ()]
    args = []
    for k, (shape, axis) in enumerate(zip(shapes, in_axes)):
        if k >= 3:  # start indices, some of them out of range
            values = rng.integers(-9, 10, () if axis is None else (size,))
            args.append(jnp.asarray(values.astype(np.int64)))
        else:
            args.append(jnp.asarray(_batched(rng, shape, axis, size)))
    f = kiln.vmap(_pipeline, in_axes=in_axes)
    out = np.asarray((kiln.jit(f) if jit else f)(*args))
    expected = np.stack(
        [
            np.asarray(
                _pipeline(
                    *(
                        a if axis is None else np.take(np.asarray(a), b, axis=axis)
                        for a, axis in zip(args, in_axes)
                    )
                )
            )
            for b in range(size)
        ]
    )
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_end_to_end_grad_of_vmap_with_batched_starts():
    x = jnp.asarray(np.arange(30.0).reshape(5, 6))
    starts = jnp.asarray(np.array([0, 3, 9, -1, 2]))

    def loss(x):
        rows = kiln.vmap(lambda r, i: lax.dynamic_slice(r, (i,), (2,)))(x, starts)
        return jnp.sum(rows * rows)

    # Row r reads columns clamp(start, 0, 4) and clamp + 1 (negative starts count from the
    # end first): the gradient is 2 x there.
    expected = np.zeros((5, 6))
    for r, s in enumerate([0, 3, 4, 4, 2]):
        expected[r, s : s + 2] = 2 * np.asarray(x)[r, s : s + 2]
    np.testing.assert_array_equal(np.asarray(kiln.grad(loss)(x)), expected)

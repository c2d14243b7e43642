"""Derivative and batching rules of gather and the scatter family: jvps against central finite
differences in float64, transposes by the dot-product test, batching against a loop over
slices. The dimension numbers are the ones the kiln.numpy front ends build (x[idx], x.at[idx],
take, take_along_axis), plus lax.gather/scatter with windows, batching dims and every mode."""

import itertools

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.ad_util import UndefinedPrimal
from kiln.core.avals import ShapedArray
from kiln.primitives.indexing_gather import GatherScatterMode, gather_p
from kiln.primitives.indexing_scatter import (
    scatter_add_p,
    scatter_max_p,
    scatter_min_p,
    scatter_mul_p,
    scatter_p,
)
from tests._testing import x64_mode

GDN, SDN = lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers


@pytest.fixture(autouse=True)
def float64():
    with x64_mode(True):
        yield


def _rand(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape))


def _idx(values):
    return jnp.asarray(np.asarray(values, dtype=np.int32))


def capture(prim, thunk):
    """The operands (as NumPy arrays) and params of the last `prim` that `thunk` binds."""
    calls = []
    original = prim.bind

    def recording(*args, **params):
        calls.append((args, params))
        return original(*args, **params)

    prim.bind = recording
    try:
        thunk()
    finally:
        del prim.bind
    assert calls, f"{prim} was not bound"
    args, params = calls[-1]
    return [np.asarray(a) for a in args], params


# --- the cases: (primitive, a call that binds it) --------------------------------------------

GATHER_CASES = {
    # x[idx] as traced code sees it (eager indexing reads the buffer directly)
    "getitem_int_array": lambda: _rand((5, 3), 0).at[_idx([4, 0, 4, -1])].get(),
    "getitem_two_arrays": lambda: _rand((4, 5), 1).at[_idx([[0, 3], [1, 1]]), _idx([2, 4])].get(),
    "getitem_slice_and_array": lambda: _rand((4, 5, 3), 2).at[1:3, _idx([4, 0])].get(),
    "take_fill_value_oob": lambda: jnp.take(
        _rand((3, 4), 3), _idx([2, 7, -9, 1]), axis=1, fill_value=-3.0
    ),
    "take_nan_fill_oob": lambda: jnp.take(_rand((6,), 4), _idx([1, 9, 3, 1])),
    "take_clip_oob": lambda: jnp.take(_rand((3, 4), 5), _idx([5, -7, 1]), axis=0, mode="clip"),
    "take_along_axis_oob": lambda: jnp.take_along_axis(
        _rand((3, 4), 6), _idx([[0, 3], [1, 1], [9, 2]]), axis=1
    ),
    "at_get_fill": lambda: _rand((5,), 7).at[_idx([0, 6, 2, 2])].get(mode="fill", fill_value=2.5),
    "lax_windows_clip": lambda: lax.gather(
        _rand((6, 5), 8),
        _idx([[1, 3], [5, 0], [-2, 4]]),
        GDN((1, 2), (), (0, 1)),
        (2, 3),
        mode="clip",
    ),
    "lax_windows_fill": lambda: lax.gather(
        _rand((6, 5), 9),
        _idx([[1, 3], [5, 0], [-2, 1], [4, 2]]),
        GDN((1, 2), (), (0, 1)),
        (2, 3),
        mode="fill",
        fill_value=1.0,
    ),
    "lax_windows_promise": lambda: lax.gather(
        _rand((6, 5), 10),
        _idx([[1, 2], [4, 0], [1, 2]]),
        GDN((0, 2), (), (0, 1)),
        (2, 3),
        mode="promise_in_bounds",
    ),
    "lax_batching_dims": lambda: lax.gather(
        _rand((3, 5, 2), 11),
        _idx([[[4], [0]], [[2], [2]], [[7], [1]]]),
        GDN(
            offset_dims=(2,),
            collapsed_slice_dims=(1,),
            start_index_map=(1,),
            operand_batching_dims=(0,),
            start_indices_batching_dims=(0,),
        ),
        (1, 1, 2),
        mode="fill",
    ),
}


# 2x2 windows into a 5x4 operand: overlapping ones (one clamped or dropped), disjoint ones
# (one clamped in clip mode, dropped otherwise), and disjoint ones in bounds (a kept promise)
_OVERLAPPING = [[3, 1], [2, 2], [3, 7]]
_DISJOINT = [[0, 0], [2, 2], [5, 0]]
_IN_BOUNDS = [[0, 0], [2, 2], [3, 0]]


def _windows_scatter(fn, mode, seed, starts=_OVERLAPPING):
    operand, updates = _rand((5, 4), seed), _rand((3, 2, 2), seed + 1)
    return fn(
        operand,
        _idx(starts),
        updates,
        SDN((1, 2), (), (0, 1)),
        mode=mode,
        unique_indices=starts is not _OVERLAPPING,
    )


def _batching_dims_scatter(fn, seed):
    dn = SDN(
        update_window_dims=(2,),
        inserted_window_dims=(1,),
        scatter_dims_to_operand_dims=(1,),
        operand_batching_dims=(0,),
        scatter_indices_batching_dims=(0,),
    )
    indices = _idx([[[4], [0], [4]], [[2], [9], [1]]])
    return fn(_rand((2, 5, 3), seed), indices, _rand((2, 3, 3), seed + 1), dn)


SCATTER_CASES = {
    "at_add_repeated_oob": (
        scatter_add_p,
        lambda: _rand((5,), 20).at[_idx([1, 3, 1, 7, 1, -1])].add(_rand((6,), 21)),
    ),
    "at_add_rows": (
        scatter_add_p,
        lambda: _rand((4, 3), 22).at[_idx([0, 2, 0])].add(_rand((3, 3), 23)),
    ),
    "lax_add_windows_clip": (scatter_add_p, lambda: _windows_scatter(lax.scatter_add, "clip", 24)),
    "lax_add_windows_promise": (
        scatter_add_p,
        lambda: _windows_scatter(lax.scatter_add, "promise_in_bounds", 26, _IN_BOUNDS),
    ),
    "lax_add_batching_dims": (scatter_add_p, lambda: _batching_dims_scatter(lax.scatter_add, 28)),
    "at_set_repeated_oob": (
        scatter_p,
        lambda: _rand((6,), 30).at[_idx([2, 4, 2, 8, 2])].set(_rand((5,), 31)),
    ),
    "at_set_unique": (
        scatter_p,
        lambda: _rand((4, 3), 32).at[_idx([3, 0])].set(_rand((2, 3), 33), unique_indices=True),
    ),
    "lax_set_windows_clip": (scatter_p, lambda: _windows_scatter(lax.scatter, "clip", 34)),
    "lax_set_windows_fill": (scatter_p, lambda: _windows_scatter(lax.scatter, "fill", 36)),
    "lax_set_batching_dims": (scatter_p, lambda: _batching_dims_scatter(lax.scatter, 38)),
    "at_mul_unique_oob": (
        scatter_mul_p,
        lambda: _rand((5,), 40).at[_idx([4, 1, 6])].multiply(_rand((3,), 41), unique_indices=True),
    ),
    "at_mul_repeated": (
        scatter_mul_p,
        lambda: _rand((5,), 42).at[_idx([1, 3, 1])].multiply(_rand((3,), 43)),
    ),
    "lax_mul_windows_clip": (
        scatter_mul_p,
        lambda: _windows_scatter(lax.scatter_mul, "clip", 44, _DISJOINT),
    ),
    "at_min_repeated_oob": (
        scatter_min_p,
        lambda: _rand((6,), 46).at[_idx([2, 4, 2, 9, 0, 2])].min(_rand((6,), 47)),
    ),
    "at_max_repeated": (
        scatter_max_p,
        lambda: _rand((4, 3), 48).at[_idx([1, 1, 3])].max(_rand((3, 3), 49)),
    ),
    "lax_max_windows_clip": (scatter_max_p, lambda: _windows_scatter(lax.scatter_max, "clip", 50)),
    "lax_min_batching_dims": (scatter_min_p, lambda: _batching_dims_scatter(lax.scatter_min, 52)),
}


# --- jvp against finite differences ----------------------------------------------------------


def finite_difference(f, primals, tangents, eps=1e-6):
    plus = f(*[p + eps * t for p, t in zip(primals, tangents)])
    minus = f(*[p - eps * t for p, t in zip(primals, tangents)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)


def check_jvp(prim, args, params, differentiable, tangent_seed=0):
    """Compare prim's jvp with finite differences for the tangents of the positions in
    `differentiable` (the others are symbolic zeros)."""
    rng = np.random.default_rng(tangent_seed)
    tangents = [
        rng.standard_normal(a.shape) if i in differentiable else None for i, a in enumerate(args)
    ]
    out, tangent = prim.rule("jvp")(
        [jnp.asarray(a) for a in args],
        [None if t is None else jnp.asarray(t) for t in tangents],
        **params,
    )
    np.testing.assert_array_equal(
        np.asarray(out), np.asarray(prim.bind(*[jnp.asarray(a) for a in args], **params))
    )
    assert tangent.shape == out.shape and tangent.dtype == out.dtype

    def f(*float_args):
        full = list(args)
        for i, a in zip(differentiable, float_args):
            full[i] = a
        return prim.bind(*[jnp.asarray(a) for a in full], **params)

    expected = finite_difference(
        f, [args[i] for i in differentiable], [tangents[i] for i in differentiable]
    )
    filled = np.isnan(np.asarray(out))  # NaN fill values: a constant, tangent 0
    expected = np.where(filled, 0.0, expected)
    np.testing.assert_allclose(np.asarray(tangent), expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", sorted(GATHER_CASES))
def test_gather_jvp(case):
    args, params = capture(gather_p, GATHER_CASES[case])
    check_jvp(gather_p, args, params, differentiable=[0])


def _scatter_tangent_sets(prim, params):
    if prim is scatter_mul_p and not params["unique_indices"]:
        return [[0]]
    return [[0], [2], [0, 2]]


@pytest.mark.parametrize("case", sorted(SCATTER_CASES))
def test_scatter_jvp(case):
    prim, thunk = SCATTER_CASES[case]
    args, params = capture(prim, thunk)
    for seed, differentiable in enumerate(_scatter_tangent_sets(prim, params)):
        check_jvp(prim, args, params, differentiable, tangent_seed=seed)


def test_scatter_mul_updates_jvp_needs_unique_indices():
    args, params = capture(*SCATTER_CASES["at_mul_repeated"])
    tangents = [None, None, jnp.ones(args[2].shape)]
    with pytest.raises(NotImplementedError, match="unique"):
        scatter_mul_p.rule("jvp")([jnp.asarray(a) for a in args], tangents, **params)


def test_scatter_jvp_follows_the_winning_update():
    # Both updates write position 1; the tangent there is the winner's, and the operand's
    # tangent survives only where nothing was written.
    operand, indices, updates = jnp.zeros(4), _idx([[1], [1], [6]]), jnp.asarray([5.0, 7.0, 9.0])
    dn = SDN((), (0,), (0,))
    params = dict(
        dimension_numbers=dn,
        indices_are_sorted=False,
        unique_indices=False,
        mode=GatherScatterMode.FILL_OR_DROP,
    )
    out, tangent = scatter_p.rule("jvp")(
        [operand, indices, updates],
        [jnp.asarray([1.0, 2.0, 3.0, 4.0]), None, jnp.asarray([10.0, 20.0, 30.0])],
        **params,
    )
    winner = int(np.asarray(out)[1] == 7.0)  # kiln's scatter: the last write wins
    assert winner == 1
    np.testing.assert_array_equal(np.asarray(tangent), [1.0, 20.0, 3.0, 4.0])


@pytest.mark.parametrize("prim", [scatter_max_p, scatter_min_p])
def test_scatter_extremum_jvp_shares_ties(prim):
    # Position 0: the operand and two updates tie; position 1: two updates tie and beat the
    # operand; position 2: not written; position 3: the operand wins outright.
    sign = 1.0 if prim is scatter_max_p else -1.0
    operand = jnp.asarray(sign * np.array([3.0, 0.0, 1.0, 9.0]))
    updates = jnp.asarray(sign * np.array([3.0, 3.0, 2.0, 2.0, 5.0]))
    indices = _idx([[0], [0], [1], [1], [3]])
    params = dict(
        dimension_numbers=SDN((), (0,), (0,)),
        indices_are_sorted=False,
        unique_indices=False,
        mode=GatherScatterMode.FILL_OR_DROP,
    )
    g_operand = jnp.asarray([1.0, 2.0, 4.0, 8.0])
    g_updates = jnp.asarray([16.0, 32.0, 64.0, 128.0, 256.0])
    _, tangent = prim.rule("jvp")(
        [operand, indices, updates], [g_operand, None, g_updates], **params
    )
    np.testing.assert_allclose(
        np.asarray(tangent), [(1.0 + 16.0 + 32.0) / 3, (64.0 + 128.0) / 2, 4.0, 8.0]
    )


# --- transposes: the dot-product test --------------------------------------------------------


def _undefined(a):
    return UndefinedPrimal(ShapedArray(a.shape, a.dtype))


def check_transpose(prim, args, params, linear, seed=0):
    """<ct, f(x)> == <f^T(ct), x> for f: the `linear` args -> prim(args), the rest fixed. For
    scatter and scatter-add, linear in operand and updates together, the float args left out
    of `linear` are zeros (the transpose does not see them)."""
    rng = np.random.default_rng(seed)
    x = {i: rng.standard_normal(args[i].shape) for i in linear}
    if prim in (scatter_p, scatter_add_p):
        x.update(
            {
                i: np.zeros_like(a)
                for i, a in enumerate(args)
                if i not in linear and a.dtype.kind == "f"
            }
        )
    full = [jnp.asarray(x.get(i, a)) for i, a in enumerate(args)]
    out = np.asarray(prim.bind(*full, **params))
    # scatter-mul with a fixed operand is affine in its updates (unwritten positions keep the
    # operand): its linear part is what the transpose transposes.
    at_zero = [jnp.zeros(a.shape, a.dtype) if i in linear else a for i, a in enumerate(full)]
    out = out - np.asarray(prim.bind(*at_zero, **params))
    ct = rng.standard_normal(out.shape)
    rule_args = [_undefined(a) if i in linear else jnp.asarray(a) for i, a in enumerate(args)]
    cts = prim.rule("transpose")(jnp.asarray(ct), *rule_args, **params)
    assert len(cts) == len(args)
    for i in range(len(args)):
        if i not in linear:
            assert cts[i] is None
        else:
            assert cts[i].shape == args[i].shape and cts[i].dtype == args[i].dtype
    lhs = np.vdot(ct, out)
    rhs = sum(np.vdot(np.asarray(cts[i]), x[i]) for i in linear)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10)


def _linear_gather_params(params):
    # The jvp's gather: a fill-mode gather fills with 0, the only fill that is linear.
    fill = 0 if params["mode"] == GatherScatterMode.FILL_OR_DROP else None
    return {**params, "fill_value": fill}


@pytest.mark.parametrize("case", sorted(GATHER_CASES))
def test_gather_transpose(case):
    args, params = capture(gather_p, GATHER_CASES[case])
    check_transpose(gather_p, args, _linear_gather_params(params), linear=[0])


@pytest.mark.parametrize(
    "case", sorted(c for c in SCATTER_CASES if SCATTER_CASES[c][0] is scatter_add_p)
)
def test_scatter_add_transpose(case):
    args, params = capture(*SCATTER_CASES[case])
    for seed, linear in enumerate([[0], [2], [0, 2]]):
        check_transpose(scatter_add_p, args, params, linear, seed)


def test_scatter_transpose_with_unique_indices():
    args, params = capture(*SCATTER_CASES["at_set_unique"])
    for seed, linear in enumerate([[0], [2], [0, 2]]):
        check_transpose(scatter_p, args, params, linear, seed)
    windows, window_params = capture(
        scatter_p, lambda: _windows_scatter(lax.scatter, "fill", 60, _DISJOINT)
    )
    check_transpose(scatter_p, windows, window_params, [0, 2])


def test_scatter_transpose_needs_unique_indices():
    args, params = capture(*SCATTER_CASES["at_set_repeated_oob"])
    with pytest.raises(NotImplementedError, match="unique"):
        scatter_p.rule("transpose")(
            jnp.ones(args[0].shape),
            _undefined(args[0]),
            jnp.asarray(args[1]),
            jnp.asarray(args[2]),
            **params,
        )


@pytest.mark.parametrize("case", ["at_mul_unique_oob", "at_mul_repeated", "lax_mul_windows_clip"])
def test_scatter_mul_transpose(case):
    args, params = capture(*SCATTER_CASES[case])
    check_transpose(scatter_mul_p, args, params, linear=[0])
    if params["unique_indices"]:  # then also linear in the updates, for a fixed operand
        check_transpose(scatter_mul_p, args, params, linear=[2], seed=1)


# --- batching against a loop over slices -----------------------------------------------------

BATCH = 3


def _variants(a, i, seed):
    """BATCH different values for argument i of the case: random data, or for the indices the
    case's own index vectors reordered (so out-of-bounds and repeated ones stay)."""
    if np.issubdtype(a.dtype, np.integer):
        return [a, np.flip(a, 0), np.roll(a, 1, axis=0)]
    rng = np.random.default_rng(seed + i)
    return [rng.standard_normal(a.shape) for _ in range(BATCH)]


def check_batching(prim, args, params):
    for pattern in itertools.product([False, True], repeat=len(args)):
        if not any(pattern):
            continue
        batched, dims, per_example = [], [], []
        for i, (a, is_batched) in enumerate(zip(args, pattern)):
            if not is_batched:
                batched.append(jnp.asarray(a))
                dims.append(None)
                per_example.append([a] * BATCH)
                continue
            values = _variants(a, i, seed=len(dims))
            bdim = (i + sum(pattern)) % (a.ndim + 1)
            batched.append(jnp.asarray(np.stack(values, axis=bdim)))
            dims.append(bdim)
            per_example.append(values)
        out, out_dim = prim.rule("batching")(batched, dims, **params)
        expected = np.stack(
            [
                np.asarray(prim.bind(*[jnp.asarray(v[b]) for v in per_example], **params))
                for b in range(BATCH)
            ]
        )
        np.testing.assert_allclose(
            np.moveaxis(np.asarray(out), out_dim, 0),
            expected,
            rtol=1e-13,
            err_msg=f"batched {pattern}",
        )


@pytest.mark.parametrize("case", sorted(GATHER_CASES))
def test_gather_batching(case):
    args, params = capture(gather_p, GATHER_CASES[case])
    check_batching(gather_p, args, params)


@pytest.mark.parametrize("case", sorted(SCATTER_CASES))
def test_scatter_batching(case):
    prim, thunk = SCATTER_CASES[case]
    args, params = capture(prim, thunk)
    check_batching(prim, args, params)


def test_gather_batching_of_an_empty_batch():
    args, params = capture(gather_p, GATHER_CASES["getitem_two_arrays"])
    operand = jnp.zeros((0,) + args[0].shape)
    indices = jnp.zeros((0,) + args[1].shape, dtype=args[1].dtype)
    out, out_dim = gather_p.rule("batching")([operand, indices], [0, 0], **params)
    expected_shape = list(
        np.asarray(gather_p.bind(*[jnp.asarray(a) for a in args], **params)).shape
    )
    expected_shape.insert(out_dim, 0)
    assert tuple(out.shape) == tuple(expected_shape)


# --- end to end, through the transformations --------------------------------------------------

needs_transforms = pytest.mark.skipif(
    not all(hasattr(kiln, name) for name in ("jvp", "vjp", "vmap")),
    reason="kiln.jvp / kiln.vjp / kiln.vmap are not available",
)


@needs_transforms
def test_grad_of_indexing_through_the_front_ends():
    x = _rand((5, 3), 70)
    idx = _idx([4, 0, 4, 9])

    def f(x):
        x = jnp.asarray(x)
        picked = jnp.take(x, idx, axis=0, fill_value=0.0)
        return x.at[_idx([1, 1, 2])].add(picked[:3] * 2.0).at[_idx([0])].set(picked[1:2])

    ct = _rand((5, 3), 71)
    out, f_vjp = kiln.vjp(f, x)
    (x_ct,) = f_vjp(ct)
    tangent = _rand((5, 3), 72)
    _, out_tangent = kiln.jvp(f, (x,), (tangent,))
    np.testing.assert_allclose(
        np.vdot(np.asarray(ct), np.asarray(out_tangent)),
        np.vdot(np.asarray(x_ct), np.asarray(tangent)),
        rtol=1e-10,
    )
    expected = finite_difference(f, [np.asarray(x)], [np.asarray(tangent)])
    np.testing.assert_allclose(np.asarray(out_tangent), expected, rtol=1e-6, atol=1e-8)


@needs_transforms
def test_vmap_of_indexing_through_the_front_ends():
    xs, idxs = _rand((3, 5), 73), _idx([[1, 4], [0, 0], [3, 7]])

    def f(x, idx):
        return x.at[idx].max(x[idx] * 2.0) + jnp.take_along_axis(x, idx[::-1], axis=0)[0]

    out = kiln.vmap(f)(xs, idxs)
    expected = np.stack([np.asarray(f(xs[b], idxs[b])) for b in range(3)])
    np.testing.assert_allclose(np.asarray(out), expected)


def _differentiable_function(prim, args, params):
    """The case as a function of its float operands (the indices fixed) and those operands."""
    floats = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    if prim is scatter_mul_p and not params["unique_indices"]:
        floats = [0]

    def f(*values):
        full = [jnp.asarray(a) for a in args]
        for i, v in zip(floats, values):
            full[i] = v
        return prim.bind(*full, **params)

    return f, [jnp.asarray(args[i]) for i in floats]


ALL_CASES = {**{name: (gather_p, thunk) for name, thunk in GATHER_CASES.items()}, **SCATTER_CASES}


@needs_transforms
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_vjp_transposes_jvp(case):
    # The jvp's tangent map is linear and the reverse mode transposes it: <ct, J t> = <J^T ct, t>.
    args, params = capture(*ALL_CASES[case])
    f, primals = _differentiable_function(ALL_CASES[case][0], args, params)
    tangents = [_rand(p.shape, 80 + i) for i, p in enumerate(primals)]
    out, out_tangent = kiln.jvp(f, tuple(primals), tuple(tangents))
    _, f_vjp = kiln.vjp(f, *primals)
    ct = _rand(out.shape, 90)
    cts = f_vjp(ct)
    np.testing.assert_allclose(
        np.vdot(np.asarray(ct), np.asarray(out_tangent)),
        sum(np.vdot(np.asarray(c), np.asarray(t)) for c, t in zip(cts, tangents)),
        rtol=1e-10,
    )


@needs_transforms
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_vmap_of_jvp(case):
    # Batching the jvp batches the rules' own gathers and scatters (ids, counts, masks).
    args, params = capture(*ALL_CASES[case])
    f, primals = _differentiable_function(ALL_CASES[case][0], args, params)
    n = len(primals)
    stacked = [
        jnp.asarray(np.stack([np.asarray(_rand(p.shape, 100 + 10 * b + i)) for b in range(BATCH)]))
        for i, p in enumerate(primals * 2)
    ]
    batched = kiln.vmap(lambda *xs: kiln.jvp(f, xs[:n], xs[n:]))(*stacked)
    for b in range(BATCH):
        expected = kiln.jvp(f, tuple(x[b] for x in stacked[:n]), tuple(x[b] for x in stacked[n:]))
        for got, want in zip(batched, expected):
            np.testing.assert_allclose(np.asarray(got[b]), np.asarray(want), rtol=1e-13)

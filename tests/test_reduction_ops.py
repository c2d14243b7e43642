"""Reductions: the lax reduction, argmax/argmin and cumulative primitives, and kiln.numpy's
reductions, against NumPy references (computed in float64, then rounded to JAX's result
dtype), across dtype families, shapes (0-d and empty included), axes, keepdims, where/initial,
NaNs, traced evaluation and bad input."""

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.interpreter import eval_closed_jaxpr
from kiln.core.jaxpr import typecheck_jaxpr
from tests._testing import assert_close, check_record_eager, check_record_jit, rand
from tests.op_records import REDUCTION_RECORDS, quiet, wide

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, C64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.complex64)
I8, U8, I16, I32, U32 = (np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.uint32))
BOOL = np.dtype(np.bool_)
LOWP = (F16, BF16)

needs_jit = pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit not available yet")


def check_traced(fn, *args):
    """make_jaxpr(fn) typechecks, its avals match the eager result, and evaluating the jaxpr
    gives the eager values."""
    args = [jnp.asarray(a) for a in args]
    eager = fn(*args)
    closed = kiln.make_jaxpr(fn)(*args)
    typecheck_jaxpr(closed.jaxpr)
    traced = eval_closed_jaxpr(closed, *args)
    eager_flat = list(eager) if isinstance(eager, (tuple, list)) else [eager]
    assert len(traced) == len(eager_flat)
    for t, e, aval in zip(traced, eager_flat, closed.out_avals):
        assert aval.shape == e.shape and aval.dtype == e.dtype, (aval, e.shape, e.dtype)
        np.testing.assert_array_equal(np.asarray(t), np.asarray(e))


# =============================================================================================
# lax primitives
# =============================================================================================


def _axes_for(shape):
    nd = len(shape)
    out = [()] if nd == 0 else [(0,), (nd - 1,), tuple(range(nd))]
    if nd == 3:
        out.append((0, 2))
    return out


LAX_SHAPES = [(), (0,), (5,), (3, 4), (2, 0, 3), (2, 3, 4)]


def _lax_sum_ref(x, axes):
    acc = np.float32 if x.dtype in LOWP else x.dtype
    return np.sum(x.astype(acc), axis=axes, dtype=acc).astype(x.dtype)


def _lax_prod_ref(x, axes):
    acc = np.float32 if x.dtype in LOWP else x.dtype
    return np.prod(x.astype(acc), axis=axes, dtype=acc).astype(x.dtype)


def _identity_reduce(ufunc, identity):
    def ref(x, axes):
        work = x.astype(np.float32) if x.dtype == BF16 else x
        init = np.array(identity(work.dtype)).astype(work.dtype)[()]
        return ufunc.reduce(work, axis=axes, initial=init).astype(x.dtype)

    return ref


def _low(d):
    return False if d == BOOL else (np.iinfo(d).min if d.kind in "iu" else -np.inf)


def _high(d):
    return True if d == BOOL else (np.iinfo(d).max if d.kind in "iu" else np.inf)


def _ones(d):
    return True if d == BOOL else (np.iinfo(d).max if d.kind == "u" else -1)


LAX_REDUCTIONS = [
    ("reduce_sum", lax.reduce_sum, _lax_sum_ref, [I8, U8, I32, F16, BF16, F32, C64]),
    ("reduce_prod", lax.reduce_prod, _lax_prod_ref, [I8, U32, I32, F16, F32, C64]),
    (
        "reduce_max",
        lax.reduce_max,
        _identity_reduce(np.maximum, _low),
        [BOOL, I8, U8, I32, F16, BF16, F32],
    ),
    (
        "reduce_min",
        lax.reduce_min,
        _identity_reduce(np.minimum, _high),
        [BOOL, I8, U8, I32, F16, BF16, F32],
    ),
    ("reduce_and", lax.reduce_and, _identity_reduce(np.bitwise_and, _ones), [BOOL, I8, U8, I32]),
    ("reduce_or", lax.reduce_or, _identity_reduce(np.bitwise_or, lambda d: 0), [BOOL, I8, U8, I32]),
    ("reduce_xor", lax.reduce_xor, _identity_reduce(np.bitwise_xor, lambda d: 0), [BOOL, I8, U32]),
]

LAX_REDUCTION_CASES = [
    (name, fn, ref, shape, axes, dtype)
    for name, fn, ref, dts in LAX_REDUCTIONS
    for shape in LAX_SHAPES
    for axes in _axes_for(shape)
    for dtype in dts
]


@pytest.mark.parametrize(
    "name,fn,ref,shape,axes,dtype",
    LAX_REDUCTION_CASES,
    ids=[f"{c[0]}-{'x'.join(map(str, c[3]))}-{c[4]}-{c[5].name}" for c in LAX_REDUCTION_CASES],
)
def test_lax_reductions_match_numpy(name, fn, ref, shape, axes, dtype):
    x = rand(
        shape, dtype, np.random.default_rng(len(shape)), "unit" if "prod" in name else "normal"
    )
    out = fn(jnp.asarray(x), axes)
    expected = ref(x, axes)
    assert out.dtype == dtype
    assert_close(out, expected, tol={F16: 1e-3, BF16: 1e-2, F32: 1e-6, C64: 1e-6}, err_msg=name)


def test_lax_reductions_keep_exact_dtypes_and_wrap_integers():
    x = jnp.asarray(np.full((300,), 100, np.int8))
    out = lax.reduce_sum(x, (0,))
    assert out.dtype == np.int8 and int(out) == np.int8(np.int64(30000).astype(np.int8))
    # float16 sums accumulate in float32: 4096 + 1 + ... would stall in float16.
    h = jnp.asarray(np.concatenate([[2048.0], np.ones(2048)]).astype(np.float16))
    assert float(lax.reduce_sum(h, (0,))) == 4096.0
    assert lax.reduce_sum(h, (0,)).dtype == np.float16


def test_lax_reduction_negative_axes_and_weak_type():
    x = jnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert_close(lax.reduce_sum(x, (-1,)), np.array([3.0, 12.0], np.float32))
    weak = lax.reduce_max(3.0, ())
    assert weak.weak_type and weak.dtype == np.float32
    jaxpr = kiln.make_jaxpr(lambda s: lax.reduce_sum(s, ()))(2.0)
    assert jaxpr.out_avals[0].weak_type


@pytest.mark.parametrize("prim", [lax.reduce_max, lax.reduce_min])
def test_lax_max_min_propagate_nan(prim):
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    out = np.asarray(prim(jnp.asarray(x), (1,)))
    assert np.isnan(out[0]) and not np.isnan(out[1])


def test_lax_reduction_bad_input():
    x = jnp.asarray(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="axes"):
        lax.reduce_sum(x, (2,))
    with pytest.raises(ValueError, match="duplicate"):
        lax.reduce_sum(x, (0, 0))
    with pytest.raises(TypeError, match="reduce_sum does not accept dtype bool"):
        lax.reduce_sum(jnp.asarray(np.ones(3, bool)), (0,))
    with pytest.raises(TypeError, match="reduce_and does not accept dtype float32"):
        lax.reduce_and(x, (0,))
    with pytest.raises(TypeError, match="reduce_sum does not accept dtype bool"):
        kiln.make_jaxpr(lambda b: lax.reduce_sum(b, (0,)))(jnp.asarray(np.ones(3, bool)))


# --- argmax / argmin -------------------------------------------------------------------------

ARG_CASES = [
    (fn, np_fn, shape, axis, dtype)
    for fn, np_fn in ((lax.argmax, np.argmax), (lax.argmin, np.argmin))
    for shape, axis in (
        ((5,), 0),
        ((3, 4), 0),
        ((3, 4), 1),
        ((2, 3, 4), 2),
        ((2, 3, 4), -2),
        ((3, 0), 0),
    )
    for dtype in (BOOL, I8, U8, I32, F16, BF16, F32)
]


@pytest.mark.parametrize(
    "fn,np_fn,shape,axis,dtype",
    ARG_CASES,
    ids=[f"{c[0].__name__}-{c[2]}-{c[3]}-{c[4].name}" for c in ARG_CASES],
)
def test_lax_argmax_argmin(fn, np_fn, shape, axis, dtype):
    x = rand(shape, dtype, np.random.default_rng(3))
    out = fn(jnp.asarray(x), axis, np.int32)
    assert out.dtype == np.int32 and not out.weak_type
    expected = np_fn(x.astype(np.float32) if dtype == BF16 else x, axis=axis)
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_lax_argmax_first_nan_wins_and_ties_take_first():
    x = jnp.asarray(np.array([1.0, np.nan, 3.0, np.nan, 3.0], np.float32))
    assert int(lax.argmax(x, 0, np.int32)) == 1
    assert int(lax.argmin(x, 0, np.int32)) == 1
    y = jnp.asarray(np.array([2, 7, 7, 1, 1], np.int32))
    assert int(lax.argmax(y, 0, np.int32)) == 1 and int(lax.argmin(y, 0, np.int32)) == 3


def test_lax_argmax_errors_and_printing():
    with pytest.raises(ValueError, match="non-empty"):
        lax.argmax(jnp.asarray(np.zeros((0, 3), np.float32)), 0, np.int32)
    with pytest.raises(TypeError, match="complex"):
        lax.argmax(jnp.asarray(np.ones(3, np.complex64)), 0, np.int32)
    with pytest.raises(TypeError, match="index_dtype"):
        lax.argmax(jnp.asarray(np.ones(3, np.float32)), 0, np.float32)
    text = str(
        kiln.make_jaxpr(lambda x: lax.argmax(x, 0, np.int32))(jnp.asarray(np.ones(2, np.float32)))
    )
    assert "argmax[axes=(0,) index_dtype=int32] a" in text


# --- cumulative ------------------------------------------------------------------------------


def _cum_ref(kind):
    def ref(x, axis, reverse):
        acc = np.float32 if x.dtype in LOWP else x.dtype
        work = x.astype(acc)
        if reverse:
            work = np.flip(work, axis)
        if kind == "cumsum":
            out = np.cumsum(work, axis, dtype=acc)
        elif kind == "cumprod":
            out = np.cumprod(work, axis, dtype=acc)
        elif kind == "cummax":
            out = np.maximum.accumulate(work, axis)
        elif kind == "cummin":
            out = np.minimum.accumulate(work, axis)
        else:
            out = np.logaddexp.accumulate(work.astype(np.float64), axis)
        if reverse:
            out = np.flip(out, axis)
        return out.astype(x.dtype)

    return ref


CUM_OPS = [
    ("cumsum", lax.cumsum, [I8, U8, I32, F16, BF16, F32, C64]),
    ("cumprod", lax.cumprod, [I8, I32, F16, F32]),
    ("cummax", lax.cummax, [I8, U8, I32, F16, BF16, F32]),
    ("cummin", lax.cummin, [I8, I32, F16, F32]),
    ("cumlogsumexp", lax.cumlogsumexp, [F16, BF16, F32]),
]
CUM_CASES = [
    (name, fn, shape, axis, reverse, dtype)
    for name, fn, dts in CUM_OPS
    for shape, axis in (((5,), 0), ((0,), 0), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), 1))
    for reverse in (False, True)
    for dtype in dts
]


@pytest.mark.parametrize(
    "name,fn,shape,axis,reverse,dtype",
    CUM_CASES,
    ids=[f"{c[0]}-{c[2]}-{c[3]}-{'rev' if c[4] else 'fwd'}-{c[5].name}" for c in CUM_CASES],
)
def test_lax_cumulative_ops(name, fn, shape, axis, reverse, dtype):
    x = rand(shape, dtype, np.random.default_rng(5), "unit" if name == "cumprod" else "normal")
    out = fn(jnp.asarray(x), axis=axis, reverse=reverse)
    assert out.dtype == dtype and out.shape == shape
    assert_close(
        out,
        _cum_ref(name)(x, axis, reverse),
        tol={F16: 2e-3, BF16: 1e-2, F32: 1e-5, C64: 1e-5},
        err_msg=name,
    )


def test_lax_cumulative_errors_and_printing():
    with pytest.raises(TypeError, match="cumsum does not accept dtype bool"):
        lax.cumsum(jnp.asarray(np.ones(3, bool)))
    with pytest.raises(TypeError, match="cumlogsumexp does not accept dtype int32"):
        lax.cumlogsumexp(jnp.asarray(np.ones(3, np.int32)))
    with pytest.raises(ValueError, match="axis"):
        lax.cumsum(jnp.asarray(np.ones(3, np.float32)), axis=1)
    text = str(
        kiln.make_jaxpr(lambda x: lax.cumsum(x, reverse=True))(jnp.asarray(np.ones(3, np.float32)))
    )
    assert "cumsum[axis=0 reverse=True] a" in text
    with pytest.raises(ValueError):
        lax.cumsum(jnp.asarray(np.float32(1.0)))


def test_lax_cumlogsumexp_is_stable():
    x = jnp.asarray(np.array([1000.0, 1000.0, -np.inf, 1000.0], np.float32))
    expected = np.logaddexp.accumulate(np.array([1000.0, 1000.0, -np.inf, 1000.0]))
    assert_close(lax.cumlogsumexp(x), expected.astype(np.float32))


def test_lax_reduce_precision_matches_casts():
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [
            rng.standard_normal(200) * 10.0 ** rng.integers(-9, 6, 200),
            [np.inf, -np.inf, np.nan, 0.0, -0.0, 65519.0, 65520.0, 1e-8],
        ]
    )
    x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        as_f16 = x.astype(np.float16).astype(np.float32)
        as_bf16 = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(lax.reduce_precision(jnp.asarray(x), 5, 10)), as_f16)
    np.testing.assert_array_equal(np.asarray(lax.reduce_precision(jnp.asarray(x), 8, 7)), as_bf16)
    with pytest.raises(TypeError):
        lax.reduce_precision(jnp.asarray(np.ones(2, np.int32)), 5, 10)


# =============================================================================================
# kiln.numpy reductions
# =============================================================================================

JNP_CASES = [(r, s, d) for r in REDUCTION_RECORDS for s, d in r.cases()]


@pytest.mark.parametrize(
    "record,shapes,dtype", JNP_CASES, ids=[i for r in REDUCTION_RECORDS for i in r.ids()]
)
def test_jnp_reductions_match_numpy(record, shapes, dtype):
    check_record_eager(record, shapes, dtype)


TRACED_RECORDS = [
    r for r in REDUCTION_RECORDS if "keepdims=True" in r.name and r.static_kwargs["axis"] == 0
]
RANK3_RECORDS = [r for r in REDUCTION_RECORDS if r.shapes == [((2, 3, 4),)]]


@pytest.mark.parametrize("record", RANK3_RECORDS, ids=[r.name for r in RANK3_RECORDS])
def test_jnp_reductions_trace_like_eager(record):
    # Tracing checks what eager NumPy broadcasting would hide: lax ops need equal shapes.
    x = rand((2, 3, 4), F32, np.random.default_rng(0))
    check_traced(lambda a: record.fn(a, **record.static_kwargs), x)


MORE_TRACED = [
    ("nanargmax", lambda a: jnp.nanargmax(a, axis=1, keepdims=True)),
    ("nanargmin", lambda a: jnp.nanargmin(a)),
    ("argmin", lambda a: jnp.argmin(a, axis=-1)),
    ("nanprod", lambda a: jnp.nanprod(a, axis=(0, 2), keepdims=True)),
    ("nanvar", lambda a: jnp.nanvar(a, axis=(0, 2), keepdims=True, ddof=1)),
    (
        "average",
        lambda a: jnp.average(
            a,
            axis=2,
            weights=jnp.asarray(np.arange(1.0, 5.0).astype(np.float32)),
            returned=True,
            keepdims=True,
        ),
    ),
    ("where", lambda a: jnp.mean(a, axis=1, where=a > 0, keepdims=True)),
    ("var_where", lambda a: jnp.var(a, axis=(0, 1), where=a > 0)),
    ("max_initial", lambda a: jnp.max(a, axis=2, initial=0.5, where=a < 1)),
    (
        "quantile",
        lambda a: jnp.quantile(
            a, jnp.asarray(np.array([0.2, 0.7], np.float32)), axis=(0, 2), keepdims=True
        ),
    ),
    ("nanmedian", lambda a: jnp.nanmedian(a, axis=1, keepdims=True)),
    ("percentile", lambda a: jnp.percentile(a, 30.0, method="nearest")),
    ("cumprod", lambda a: jnp.cumprod(a, axis=1)),
    ("nancumsum", lambda a: jnp.nancumsum(a)),
    ("cumulative_sum", lambda a: jnp.cumulative_sum(a, axis=2, include_initial=True)),
    ("diff", lambda a: jnp.diff(a, n=2, axis=1, prepend=0.0)),
    ("ediff1d", lambda a: jnp.ediff1d(a, to_begin=jnp.asarray(np.float32(1.0)))),
    ("histogram", lambda a: jnp.histogram(a, bins=4, range=(-1.0, 1.0), density=True)[0]),
    (
        "bincount",
        lambda a: (
            jnp.bincount(jnp.abs(a * 3).astype(np.int32).reshape(-1), length=5)
            if hasattr(jnp, "abs")
            else jnp.bincount(lax.convert_element_type(lax.reshape(a, (24,)), np.int32), length=5)
        ),
    ),
]


@pytest.mark.parametrize("name,fn", MORE_TRACED, ids=[m[0] for m in MORE_TRACED])
def test_more_reductions_trace_like_eager(name, fn):
    x = rand((2, 3, 4), F32, np.random.default_rng(1))
    x[0, 1, 2] = np.nan
    check_traced(fn, x)


@needs_jit
@pytest.mark.parametrize("record", TRACED_RECORDS, ids=[r.name for r in TRACED_RECORDS])
def test_jnp_reductions_jit(record):
    check_record_jit(record, ((3, 4),), F32)


def test_sum_prod_dtype_rules():
    x8 = jnp.asarray(np.array([100, 100, 100], np.int8))
    assert jnp.sum(x8).dtype == np.int32 and int(jnp.sum(x8)) == 300
    assert jnp.sum(x8, dtype=np.int8).dtype == np.int8
    assert int(jnp.sum(x8, dtype=np.int8)) == np.int8(np.int64(300).astype(np.int8))
    assert jnp.sum(x8, promote_integers=False).dtype == np.int8
    assert jnp.sum(jnp.asarray(np.ones(3, np.uint8))).dtype == np.uint32
    assert jnp.sum(jnp.asarray(np.ones(3, bool))).dtype == np.int32
    assert jnp.sum(jnp.asarray(np.ones(3, bool)), promote_integers=False).dtype == np.int32
    assert jnp.sum(jnp.asarray(np.ones(3, np.float16))).dtype == np.float16
    assert jnp.sum(jnp.asarray(np.ones(3, np.int8)), dtype=np.float16).dtype == np.float16
    assert jnp.mean(jnp.asarray(np.ones(3, np.int8))).dtype == np.float32
    assert jnp.mean(jnp.asarray(np.ones(3, np.int8)), dtype=np.int32).dtype == np.int32
    assert jnp.var(jnp.asarray(np.ones(3, np.complex64))).dtype == np.float32
    # Python scalars reduce to strongly typed results, as in JAX.
    s = jnp.sum(3.0)
    assert s.dtype == np.float32 and not s.weak_type
    assert jnp.sum(3).dtype == np.int32 and not jnp.max(3.0).weak_type
    assert jnp.argmax(3.0).dtype == np.int32 and int(jnp.argmax(3.0)) == 0


def test_sum_of_float16_accumulates_in_float32():
    h = np.concatenate([[2048.0], np.ones(2048)]).astype(np.float16)
    assert float(jnp.sum(jnp.asarray(h))) == 4096.0
    text = str(kiln.make_jaxpr(jnp.sum)(jnp.asarray(np.ones(2, np.float16))))
    assert "convert_element_type[new_dtype=float32 weak_type=False]" in text
    assert "reduce_sum[axes=(0,)]" in text


@pytest.mark.parametrize(
    "fn,np_fn", [(jnp.sum, np.sum), (jnp.prod, np.prod), (jnp.max, np.max), (jnp.min, np.min)]
)
def test_where_and_initial(fn, np_fn):
    x = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], np.float32)
    mask = np.array([True, False, True])
    out = fn(jnp.asarray(x), axis=1, where=jnp.asarray(mask), initial=2.0)
    assert_close(out, np_fn(x, axis=1, where=mask, initial=2.0))
    out = fn(jnp.asarray(x), initial=-10.0)
    assert_close(out, np_fn(x, initial=-10.0))
    # initial combines with an empty reduction too.
    empty = fn(jnp.asarray(np.zeros((0, 2), np.float32)), axis=0, initial=7.0)
    assert_close(empty, np_fn(np.zeros((0, 2), np.float32), axis=0, initial=7.0))


def test_where_masks_for_any_all_mean_var():
    x = np.array([[0.0, 2.0, 3.0], [4.0, 0.0, 6.0]], np.float32)
    mask = np.array([[True, True, False], [False, True, True]])
    for fn, np_fn in (
        (jnp.any, np.any),
        (jnp.all, np.all),
        (jnp.mean, np.mean),
        (jnp.var, np.var),
        (jnp.std, np.std),
    ):
        assert_close(
            fn(jnp.asarray(x), axis=1, where=jnp.asarray(mask)),
            np_fn(x, axis=1, where=mask).astype(
                np.bool_ if fn in (jnp.any, jnp.all) else np.float32
            ),
        )
    # a broadcastable mask
    assert_close(
        jnp.sum(jnp.asarray(x), where=jnp.asarray(np.array([True, False, True]))), np.float32(13.0)
    )


def test_max_min_empty_and_where_errors():
    empty = jnp.asarray(np.zeros((0, 3), np.float32))
    with pytest.raises(ValueError, match="zero-size array to reduction operation max"):
        jnp.max(empty)
    with pytest.raises(ValueError, match="zero-size array to reduction operation min"):
        jnp.min(empty, axis=0)
    assert jnp.max(empty, axis=1).shape == (0,)
    with pytest.raises(ValueError, match="initial"):
        jnp.max(jnp.asarray(np.ones(3, np.float32)), where=jnp.asarray(np.ones(3, bool)))
    with pytest.raises(ValueError, match="empty sequence"):
        jnp.argmax(empty)
    with pytest.raises(ValueError, match="empty sequence"):
        jnp.argmin(empty, axis=0)
    with pytest.raises(ValueError, match="initial value must be a scalar"):
        jnp.sum(jnp.asarray(np.ones(3, np.float32)), initial=jnp.asarray(np.ones(2, np.float32)))


def test_bad_axis_and_list_input():
    x = jnp.asarray(np.ones((2, 3), np.float32))
    for fn in (jnp.sum, jnp.max, jnp.mean, jnp.var, jnp.argmax, jnp.any, jnp.median, jnp.cumsum):
        with pytest.raises(ValueError, match="axis 2 is out of bounds"):
            fn(x, axis=2)
    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        jnp.sum(x, axis=(0, 0))
    with pytest.raises(ValueError, match="axis -3 is out of bounds"):
        jnp.prod(x, axis=(0, -3))
    for fn in (jnp.sum, jnp.max, jnp.mean, jnp.argmax, jnp.cumsum, jnp.median, jnp.all):
        with pytest.raises(TypeError, match="list"):
            fn([1.0, 2.0])
    with pytest.raises(TypeError, match="tuple"):
        jnp.sum((1, 2))
    with pytest.raises(TypeError):
        jnp.sum(x, axis=1.5)
    with pytest.raises(NotImplementedError, match="out"):
        jnp.sum(x, out=x)


def test_reductions_accept_numpy_and_scalars():
    assert_close(jnp.sum(np.arange(4, dtype=np.int16)), np.int32(6))
    assert_close(jnp.max(np.float32(2.5)), np.float32(2.5))
    assert_close(jnp.mean(True), np.float32(1.0))
    assert_close(jnp.prod(3), np.int32(3))


def test_nan_behaviour():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan], [4.0, -1.0, 2.0]], np.float32)
    kx = jnp.asarray(x)
    cases = [
        (jnp.max, np.max),
        (jnp.min, np.min),
        (jnp.sum, np.sum),
        (jnp.mean, np.mean),
        (jnp.nansum, np.nansum),
        (jnp.nanprod, np.nanprod),
        (jnp.nanmax, np.nanmax),
        (jnp.nanmin, np.nanmin),
        (jnp.nanmean, np.nanmean),
        (jnp.nanvar, np.nanvar),
        (jnp.nanstd, np.nanstd),
        (jnp.median, np.median),
        (jnp.nanmedian, np.nanmedian),
    ]
    for fn, np_fn in cases:
        for axis in (None, 0, 1):
            assert_close(
                fn(kx, axis=axis),
                quiet(np_fn)(x, axis=axis).astype(np.float32),
                err_msg=f"{fn.__name__} axis={axis}",
            )
    assert_close(
        jnp.nanvar(kx, axis=1, ddof=1), quiet(np.nanvar)(x, axis=1, ddof=1).astype(np.float32)
    )
    # argmax/argmin: the first NaN wins; nanarg* skip NaNs and give -1 for all-NaN rows.
    np.testing.assert_array_equal(np.asarray(jnp.argmax(kx, axis=1)), np.argmax(x, axis=1))
    np.testing.assert_array_equal(np.asarray(jnp.argmin(kx, axis=0)), np.argmin(x, axis=0))
    np.testing.assert_array_equal(np.asarray(jnp.nanargmax(kx, axis=1)), [2, -1, 0])
    np.testing.assert_array_equal(np.asarray(jnp.nanargmin(kx, axis=1)), [0, -1, 1])
    assert int(jnp.nanargmax(kx)) == np.nanargmax(x)
    # any(): NaN is truthy
    assert bool(jnp.any(jnp.asarray(np.array([0.0, np.nan], np.float32))))


def test_nan_reductions_of_integers_are_plain_reductions():
    x = jnp.asarray(np.array([3, 1, 2], np.int8))
    assert jnp.nanmax(x).dtype == np.int8 and int(jnp.nanmax(x)) == 3
    assert jnp.nansum(x).dtype == np.int32
    assert int(jnp.nanargmin(x)) == 1


def test_var_ddof_correction_and_small_counts():
    x = np.arange(5, dtype=np.float32)
    assert_close(jnp.var(jnp.asarray(x), ddof=1), np.var(x, ddof=1))
    assert_close(jnp.std(jnp.asarray(x), correction=2), np.std(x, ddof=2))
    assert np.isnan(float(jnp.var(jnp.asarray(x), ddof=5)))  # JAX: NaN, not inf
    assert np.isnan(float(jnp.var(jnp.asarray(np.zeros(0, np.float32)))))
    with pytest.raises(ValueError, match="ddof and correction"):
        jnp.var(jnp.asarray(x), ddof=1, correction=1)


def test_mean_and_median_of_empty_are_nan():
    assert np.isnan(float(jnp.mean(jnp.asarray(np.zeros((0,), np.float32)))))
    assert np.isnan(float(jnp.median(jnp.asarray(np.zeros((0,), np.float32)))))
    assert jnp.median(jnp.asarray(np.zeros((2, 0, 3), np.float32)), axis=(0, 2)).shape == (0,)
    assert jnp.mean(jnp.asarray(np.zeros((0, 3), np.int32)), axis=0).shape == (3,)


def test_ptp_rejects_bool():
    with pytest.raises(TypeError, match="boolean"):
        jnp.ptp(jnp.asarray(np.ones(3, bool)))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_argmax_argmin_keepdims(axis, keepdims):
    x = rand((3, 4), F32, np.random.default_rng(11))
    for fn, np_fn in ((jnp.argmax, np.argmax), (jnp.argmin, np.argmin)):
        out = fn(jnp.asarray(x), axis=axis, keepdims=keepdims)
        expected = np_fn(x, axis=axis, keepdims=keepdims)
        assert out.dtype == np.int32
        np.testing.assert_array_equal(np.asarray(out), expected)


def test_argmax_rejects_complex():
    with pytest.raises(TypeError, match="complex"):
        jnp.argmax(jnp.asarray(np.ones(3, np.complex64)))


def test_average():
    rng = np.random.default_rng(2)
    x = rand((3, 4), F32, rng)
    w = rand((4,), F32, rng, "positive")
    assert_close(jnp.average(jnp.asarray(x)), np.average(x).astype(np.float32))
    out, total = jnp.average(jnp.asarray(x), axis=1, weights=jnp.asarray(w), returned=True)
    e_out, e_total = np.average(x, axis=1, weights=w, returned=True)
    assert_close(out, e_out.astype(np.float32))
    assert_close(total, e_total.astype(np.float32))
    w2 = rand((3, 4), F32, rng, "positive")
    assert_close(
        jnp.average(jnp.asarray(x), weights=jnp.asarray(w2)),
        np.average(x, weights=w2).astype(np.float32),
    )
    avg, count = jnp.average(jnp.asarray(x.astype(np.int32)), axis=0, returned=True)
    assert avg.dtype == np.float32 and count.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(count), [3.0] * 4)
    assert jnp.average(jnp.asarray(x), axis=1, keepdims=True).shape == (3, 1)
    with pytest.raises(ValueError, match="Axis must be specified"):
        jnp.average(jnp.asarray(x), weights=jnp.asarray(w))
    with pytest.raises(ValueError, match="Length of weights"):
        jnp.average(jnp.asarray(x), axis=0, weights=jnp.asarray(w))


# --- quantiles -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize(
    "shape,axis",
    [((7,), None), ((4, 6), 1), ((4, 6), 0), ((2, 3, 5), (0, 2)), ((2, 3, 5), None), ((1,), 0)],
)
def test_quantile_methods(method, shape, axis):
    x = rand(shape, F32, np.random.default_rng(4))
    # q * (n - 1) is exact in float32 and float64 for these q, so both sides pick the same
    # neighbours (other q can round onto an integer position in float32 only).
    q = np.array([0.0, 0.125, 0.25, 0.375, 0.5, 0.875, 1.0], np.float32)
    out = jnp.quantile(jnp.asarray(x), jnp.asarray(q), axis=axis, method=method)
    expected = np.quantile(x.astype(np.float64), q.astype(np.float64), axis=axis, method=method)
    assert_close(out, expected.astype(np.float32), tol=1e-5)
    out = jnp.quantile(jnp.asarray(x), 0.625, axis=axis, method=method, keepdims=True)
    expected = np.quantile(x.astype(np.float64), 0.625, axis=axis, method=method, keepdims=True)
    assert_close(out, expected.astype(np.float32), tol=1e-5)


def test_quantile_percentile_median_dtypes_and_values():
    xi = np.array([[1, 5, 2, 8], [3, 3, 9, 0]], np.int32)
    assert_close(jnp.median(jnp.asarray(xi), axis=1), np.median(xi, axis=1).astype(np.float32))
    assert_close(jnp.percentile(jnp.asarray(xi), 50), np.float32(np.percentile(xi, 50)))
    assert_close(
        jnp.percentile(jnp.asarray(xi), jnp.asarray(np.array([10.0, 90.0])), axis=0),
        np.percentile(xi, [10.0, 90.0], axis=0).astype(np.float32),
    )
    h = jnp.asarray(np.array([1.0, 2.0, 4.0], np.float16))
    assert jnp.median(h).dtype == np.float16 and float(jnp.median(h)) == 2.0
    assert jnp.median(jnp.asarray(np.array([True, False]))).dtype == np.float32
    with pytest.raises(ValueError, match="complex"):
        jnp.median(jnp.asarray(np.ones(3, np.complex64)))
    with pytest.raises(ValueError, match="method"):
        jnp.quantile(jnp.asarray(xi), 0.5, method="bogus")
    # infinities interpolate without NaN at exact positions
    xinf = np.array([1.0, 2.0, np.inf], np.float32)
    assert float(jnp.median(jnp.asarray(xinf))) == 2.0
    assert float(jnp.quantile(jnp.asarray(xinf), 1.0)) == np.inf


def test_nanquantile_and_traced_q():
    x = np.array([[1.0, np.nan, 3.0, 4.0], [np.nan] * 4, [2.0, 2.0, 5.0, np.nan]], np.float32)
    q = np.array([0.2, 0.5, 0.9], np.float32)
    out = jnp.nanquantile(jnp.asarray(x), jnp.asarray(q), axis=1)
    assert_close(out, quiet(np.nanquantile)(x.astype(np.float64), q, axis=1).astype(np.float32))
    assert_close(
        jnp.nanpercentile(jnp.asarray(x), 50.0, axis=1),
        quiet(np.nanpercentile)(x, 50.0, axis=1).astype(np.float32),
    )
    # q traced: the jaxpr computes the positions
    check_traced(
        lambda a, qq: jnp.quantile(a, qq, axis=0), rand((5, 3), F32, np.random.default_rng(1)), q
    )


# --- cumulative kiln.numpy -------------------------------------------------------------------

CUMULATIVE = [
    ("cumsum", jnp.cumsum, np.cumsum),
    ("cumprod", jnp.cumprod, np.cumprod),
    ("nancumsum", jnp.nancumsum, np.nancumsum),
    ("nancumprod", jnp.nancumprod, np.nancumprod),
]


@pytest.mark.parametrize("dtype", [BOOL, I8, U8, I32, F16, F32, C64], ids=lambda d: d.name)
@pytest.mark.parametrize(
    "shape,axis",
    [
        ((), None),
        ((0,), None),
        ((5,), 0),
        ((3, 4), None),
        ((3, 4), 1),
        ((2, 3, 4), -2),
        ((0, 3), 0),
    ],
)
@pytest.mark.parametrize("name,fn,np_fn", CUMULATIVE, ids=[c[0] for c in CUMULATIVE])
def test_jnp_cumulative(name, fn, np_fn, shape, axis, dtype):
    x = rand(shape, dtype, np.random.default_rng(9), "unit" if "prod" in name else "normal")
    out = fn(jnp.asarray(x), axis=axis)
    expected_dtype = I32 if dtype == BOOL else dtype  # JAX keeps int8 (NumPy widens it)
    expected = np_fn(wide(x), axis=axis)
    assert out.dtype == expected_dtype
    with np.errstate(all="ignore"):
        assert_close(out, expected.astype(expected_dtype), tol={F16: 4e-3, F32: 1e-5, C64: 1e-5})


def test_cumsum_dtype_argument_and_nan():
    x = jnp.asarray(np.array([1, 2, 3], np.int8))
    assert jnp.cumsum(x, dtype=np.float32).dtype == np.float32
    y = np.array([1.0, np.nan, 2.0], np.float32)
    assert_close(jnp.nancumsum(jnp.asarray(y)), np.nancumsum(y))
    assert_close(jnp.cumsum(jnp.asarray(y)), np.cumsum(y))
    text = str(kiln.make_jaxpr(jnp.cumsum)(jnp.asarray(np.ones(3, np.float32))))
    assert "cumsum[axis=0 reverse=False] a" in text


def test_cumulative_sum_and_prod():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int8)
    out = jnp.cumulative_sum(jnp.asarray(x), axis=1)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), np.cumsum(x, axis=1))
    out = jnp.cumulative_sum(jnp.asarray(x), axis=0, include_initial=True)
    np.testing.assert_array_equal(
        np.asarray(out), np.concatenate([[[0, 0, 0]], np.cumsum(x, axis=0)])
    )
    out = jnp.cumulative_prod(jnp.asarray(x[0]), include_initial=True)
    np.testing.assert_array_equal(np.asarray(out), [1, 1, 2, 6])
    with pytest.raises(ValueError, match="axis"):
        jnp.cumulative_sum(jnp.asarray(x))
    with pytest.raises(ValueError, match="scalar"):
        jnp.cumulative_sum(jnp.asarray(np.int32(1)))


# --- diff, ediff1d, bincount, histogram ------------------------------------------------------


@pytest.mark.parametrize("dtype", [BOOL, I8, U8, I32, F16, F32, C64], ids=lambda d: d.name)
@pytest.mark.parametrize(
    "shape,n,axis",
    [
        ((5,), 1, -1),
        ((5,), 3, 0),
        ((3, 4), 1, 0),
        ((3, 4), 2, 1),
        ((2, 3, 4), 1, 1),
        ((0,), 1, 0),
        ((2,), 4, 0),
        ((3,), 0, 0),
    ],
)
def test_diff(shape, n, axis, dtype):
    x = rand(shape, dtype, np.random.default_rng(12))
    out = jnp.diff(jnp.asarray(x), n=n, axis=axis)
    expected = np.diff(x, n=n, axis=axis)
    assert out.dtype == dtype
    assert_close(out, expected)


def test_diff_prepend_append_and_errors():
    x = np.array([[1.0, 4.0, 9.0], [2.0, 3.0, 5.0]], np.float32)
    assert_close(
        jnp.diff(jnp.asarray(x), prepend=0.0, append=jnp.asarray(np.ones((2, 1), np.float32))),
        np.diff(x, prepend=0.0, append=np.ones((2, 1), np.float32)),
    )
    with pytest.raises(ValueError, match="non-negative"):
        jnp.diff(jnp.asarray(x), n=-1)
    with pytest.raises(ValueError, match="at least one dimensional"):
        jnp.diff(jnp.asarray(np.float32(1.0)))
    with pytest.raises(TypeError, match="list"):
        jnp.diff([1, 2, 3])


def test_ediff1d():
    x = np.array([[1, 2], [4, 8]], np.int32)
    np.testing.assert_array_equal(np.asarray(jnp.ediff1d(jnp.asarray(x))), np.ediff1d(x))
    out = jnp.ediff1d(
        jnp.asarray(x),
        to_begin=jnp.asarray(np.array([-1], np.int32)),
        to_end=jnp.asarray(np.array([9, 9], np.int32)),
    )
    np.testing.assert_array_equal(np.asarray(out), np.ediff1d(x, to_begin=[-1], to_end=[9, 9]))


def test_bincount():
    x = np.array([0, 1, 1, 3, 2, 1, 7], np.int32)
    w = np.array([0.3, 0.5, 0.2, 0.7, 1.0, -0.6, 2.0], np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.bincount(jnp.asarray(x))), np.bincount(x))
    assert jnp.bincount(jnp.asarray(x)).dtype == np.int32
    assert_close(jnp.bincount(jnp.asarray(x), jnp.asarray(w)), np.bincount(x, w).astype(np.float32))
    np.testing.assert_array_equal(
        np.asarray(jnp.bincount(jnp.asarray(x), minlength=10)), np.bincount(x, minlength=10)
    )
    # length truncates (larger values are dropped); negative values count into bin 0 (JAX).
    np.testing.assert_array_equal(np.asarray(jnp.bincount(jnp.asarray(x), length=3)), [1, 3, 1])
    np.testing.assert_array_equal(
        np.asarray(jnp.bincount(jnp.asarray(np.array([-2, 1], np.int32)), length=2)), [1, 1]
    )
    out = kiln.make_jaxpr(lambda v: jnp.bincount(v, length=8))(jnp.asarray(x))
    assert out.out_avals[0].shape == (8,)
    with pytest.raises(kiln.core.errors.ConcretizationTypeError, match="length"):
        kiln.make_jaxpr(jnp.bincount)(jnp.asarray(x))
    with pytest.raises(TypeError, match="integer"):
        jnp.bincount(jnp.asarray(w))
    with pytest.raises(ValueError, match="1-dimensional"):
        jnp.bincount(jnp.asarray(x.reshape(7, 1)))


@pytest.mark.parametrize(
    "bins,range_,density",
    [(3, None, False), (5, (0.0, 4.0), False), (4, None, True), (1, None, False)],
)
def test_histogram(bins, range_, density):
    x = np.array([1.0, 2.0, 2.0, 3.0, 2.5, 0.5, 3.9, 1.2], np.float32)
    counts, edges = jnp.histogram(jnp.asarray(x), bins=bins, range=range_, density=density)
    e_counts, e_edges = np.histogram(x, bins=bins, range=range_, density=density)
    assert_close(edges, e_edges.astype(np.float32), tol=1e-6)
    assert_close(counts, e_counts.astype(np.float32), tol=1e-5)
    w = np.linspace(0.0, 1.0, x.size).astype(np.float32)
    counts, _ = jnp.histogram(
        jnp.asarray(x),
        bins=jnp.asarray(np.array([0.0, 1.0, 2.5, 4.0], np.float32)),
        weights=jnp.asarray(w),
    )
    assert_close(
        counts,
        np.histogram(x, bins=[0.0, 1.0, 2.5, 4.0], weights=w)[0].astype(np.float32),
        tol=1e-6,
    )


# --- printing (the seed's format) ------------------------------------------------------------


def test_max_prints_like_the_seed():
    x = jnp.asarray(np.array([0.1, 0.2], np.float32))
    expected = "{ lambda ; a:f32[2]. let b:f32[] = reduce_max[axes=(0,)] a in (b,) }"
    assert str(kiln.make_jaxpr(jnp.max)(x)) == expected
    assert str(kiln.make_jaxpr(lambda v: v.max())(x)) == expected
    text = str(kiln.make_jaxpr(lambda v: v.min())(x))
    assert "reduce_min[axes=(0,)] a" in text
    text = str(kiln.make_jaxpr(lambda v: jnp.sum(v, keepdims=True))(x))
    assert "broadcast_in_dim[broadcast_dimensions=() shape=(1,)] b" in text
    text = str(kiln.make_jaxpr(lambda v: jnp.any(v > 0))(x))
    assert "reduce_or[axes=(0,)]" in text

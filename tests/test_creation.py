"""kiln.numpy array creation against NumPy values and JAX's dtype and weak-type rules.

The dtype/weak-type expectations in the tables below were read off JAX (jax.numpy) with 64-bit
mode off and on; values come from NumPy. Creation functions are also traced: under make_jaxpr
a filled array is a `broadcast_in_dim` of a literal and a range an `iota`.
"""

import math

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.core import errors
from kiln.core.jaxpr import typecheck_jaxpr
from tests._testing import ALL, assert_close, x64_mode
from tests.test_shape_ops import run_jaxpr

F32, F64, I32, I64 = (np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))
C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)


@pytest.fixture
def x64():
    with x64_mode(True):
        yield


def check(out, expected, dtype, weak=False, tol=None):
    """Value against NumPy, dtype and weak type against JAX's rule."""
    assert out.dtype == dtype, (out.dtype, dtype)
    assert out.weak_type == weak, (out.weak_type, weak)
    assert_close(out, np.asarray(expected).astype(dtype), tol=tol, check_dtype=False)


# --- dtype and weak-type rules (JAX's, 64-bit mode off / on) ---------------------------------

DTYPE_RULES = [
    # (expression, NumPy value, dtype with x64 off, with x64 on, weak)
    (lambda: jnp.full((2,), 2), [2, 2], I32, I64, True),
    (lambda: jnp.full((2,), 2.0), [2.0, 2.0], F32, F64, True),
    (lambda: jnp.full((2,), 1j), [1j, 1j], C64, C128, True),
    (lambda: jnp.full((2,), True), [True, True], np.dtype(bool), np.dtype(bool), False),
    (
        lambda: jnp.full((2,), np.float16(1)),
        [1, 1],
        np.dtype(np.float16),
        np.dtype(np.float16),
        False,
    ),
    (lambda: jnp.full((2,), np.int64(3)), [3, 3], I32, I64, False),
    (
        lambda: jnp.full((2,), 3, dtype=np.uint8),
        [3, 3],
        np.dtype(np.uint8),
        np.dtype(np.uint8),
        False,
    ),
    (lambda: jnp.zeros(3), np.zeros(3), F32, F64, False),
    (lambda: jnp.zeros(3, int), np.zeros(3), I32, I64, False),
    (lambda: jnp.zeros(2, float), np.zeros(2), F32, F64, False),
    (lambda: jnp.ones(2, complex), np.ones(2), C64, C128, False),
    (lambda: jnp.empty((2, 0)), np.zeros((2, 0)), F32, F64, False),
    (lambda: jnp.zeros_like(3), 0, I32, I64, True),
    (lambda: jnp.zeros_like(3.0), 0.0, F32, F64, True),
    (lambda: jnp.ones_like(np.float32(1)), 1.0, F32, F32, False),
    (lambda: jnp.ones_like(jnp.asarray(2.0)), 1.0, F32, F64, True),
    (lambda: jnp.full_like(3, 2.5), 2, I32, I64, True),
    (lambda: jnp.full_like(np.arange(2, dtype=np.int32), 2), [2, 2], I32, I32, False),
    (lambda: jnp.full_like(jnp.ones(2), 3, dtype=int), [3, 3], I32, I64, False),
    (lambda: jnp.empty_like(jnp.full((), 2.0)), 0.0, F32, F64, True),
    (lambda: jnp.arange(5), np.arange(5), I32, I64, False),
    (lambda: jnp.arange(3.0), np.arange(3.0), F32, F64, False),
    (lambda: jnp.arange(np.int8(3)), np.arange(3), np.dtype(np.int8), np.dtype(np.int8), False),
    (lambda: jnp.arange(5, dtype=np.float32), np.arange(5), F32, F32, False),
    (lambda: jnp.arange(2, 5.0), np.arange(2, 5.0), F32, F64, False),
    (lambda: jnp.linspace(0, 1, 3), np.linspace(0, 1, 3), F32, F64, False),
    (lambda: jnp.linspace(np.uint8(0), 1, 2), [0, 1], F32, F32, False),
    (lambda: jnp.linspace(np.int64(0), 1, 2), [0, 1], F32, F64, False),
    (lambda: jnp.logspace(0, 1, 2), np.logspace(0, 1, 2), F32, F64, False),
    (lambda: jnp.geomspace(1, 2, 2), np.geomspace(1, 2, 2), F32, F64, False),
    (lambda: jnp.eye(2), np.eye(2), F32, F64, False),
    (lambda: jnp.tri(2), np.tri(2), F32, F32, False),
    (lambda: jnp.indices((2,)), np.indices((2,)), I32, I64, False),
    (lambda: jnp.mgrid[0:2], np.mgrid[0:2], I32, I64, False),
    (lambda: jnp.array(3), 3, I32, I64, True),
    (lambda: jnp.array([1, 2]), [1, 2], I32, I64, False),
    (lambda: jnp.asarray(2.5), 2.5, F32, F64, True),
]


@pytest.mark.parametrize(
    "expr,expected,dtype32,dtype64,weak",
    DTYPE_RULES,
    ids=[f"rule{i}" for i in range(len(DTYPE_RULES))],
)
def test_dtype_rules_x64_off(expr, expected, dtype32, dtype64, weak):
    check(expr(), expected, dtype32, weak)


@pytest.mark.parametrize(
    "expr,expected,dtype32,dtype64,weak",
    DTYPE_RULES,
    ids=[f"rule{i}" for i in range(len(DTYPE_RULES))],
)
def test_dtype_rules_x64_on(x64, expr, expected, dtype32, dtype64, weak):
    check(expr(), expected, dtype64, weak)


# --- filled arrays over dtypes and shapes ----------------------------------------------------

SHAPES = [(), (0,), (3,), (2, 3), (2, 0, 4)]


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_filled_arrays(dtype, shape):
    check(jnp.zeros(shape, dtype), np.zeros(shape), dtype)
    check(jnp.ones(shape, dtype), np.ones(shape), dtype)
    check(jnp.empty(shape, dtype), np.zeros(shape), dtype)
    check(jnp.full(shape, 1, dtype), np.full(shape, 1), dtype)
    base = jnp.asarray(np.zeros(shape, dtype))
    check(jnp.zeros_like(base), np.zeros(shape), dtype)
    check(jnp.ones_like(base), np.ones(shape), dtype)
    check(jnp.empty_like(base), np.zeros(shape), dtype)
    check(jnp.full_like(base, 1), np.ones(shape), dtype)
    check(jnp.zeros_like(base, dtype=np.int16, shape=(2,)), np.zeros(2), np.dtype(np.int16))


def test_shape_arguments_accept_ints_lists_and_arrays():
    assert jnp.zeros(3).shape == (3,)
    assert jnp.zeros([2, 3]).shape == (2, 3)
    assert jnp.ones(np.int64(2)).shape == (2,)
    assert jnp.full(jnp.asarray(2), 1.0).shape == (2,)
    assert jnp.zeros_like(kiln.ShapeDtypeStruct((2, 2), np.int8)).dtype == np.int8


def test_full_with_array_fill_value_broadcasts():
    check(
        jnp.full((2, 2), jnp.asarray(np.array([1.0, 2.0])), dtype=np.int8),
        [[1, 2], [1, 2]],
        np.dtype(np.int8),
    )
    check(jnp.full((2,), jnp.asarray(np.array([1, 2]))), [1, 2], I32)
    check(jnp.full_like(jnp.ones(2), jnp.asarray(np.array([3, 4]))), [3.0, 4.0], F32)


# --- ranges ----------------------------------------------------------------------------------

ARANGE_CASES = [
    ((5,), {}),
    ((0,), {}),
    ((-3,), {}),
    ((5.5,), {}),
    ((2, 10), {}),
    ((2, 10, 3), {}),
    ((10, 1, -3), {}),
    ((1, 4, 0.5), {}),
    ((0.1, 0.5, 0.1), {}),
    ((5, 2), {}),
    ((-2.5, 2.5, 0.5), {}),
    ((3,), {"dtype": np.float16}),
    ((1, 7, 2), {"dtype": np.uint8}),
    ((4,), {"dtype": ml_dtypes.bfloat16}),
    ((2, 12, 3), {"dtype": np.int8}),
    ((5,), {"step": 2}),
]


@pytest.mark.parametrize(
    "args,kwargs", ARANGE_CASES, ids=[str(a) + str(k) for a, k in ARANGE_CASES]
)
def test_arange_matches_numpy(args, kwargs):
    out = jnp.arange(*args, **kwargs)
    if "step" in kwargs:
        expected = np.arange(0, args[0], kwargs["step"])
    else:
        expected = np.arange(*args, **kwargs)
    dtype = (
        np.dtype(kwargs["dtype"])
        if "dtype" in kwargs
        else (F32 if any(isinstance(a, float) for a in args) else I32)
    )
    check(out, expected, dtype, tol=1e-6)


@pytest.mark.parametrize("num", [0, 1, 2, 5, 50])
@pytest.mark.parametrize("endpoint", [True, False])
def test_linspace_matches_numpy(num, endpoint):
    out, step = jnp.linspace(-1.5, 4, num, endpoint=endpoint, retstep=True)
    expected, expected_step = np.linspace(-1.5, 4, num, endpoint=endpoint, retstep=True)
    check(out, expected, F32, tol=1e-6)
    assert step.dtype == F32
    np.testing.assert_allclose(np.asarray(step), expected_step, rtol=1e-6, equal_nan=True)
    if num > 1 and endpoint:
        assert float(out[-1]) == 4.0 and float(out[0]) == -1.5  # ends are exact


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.complex64, np.int32, np.int8, np.uint8]
)
def test_linspace_dtypes(dtype):
    out = jnp.linspace(0, 10, 7, dtype=dtype)
    expected = np.linspace(0, 10, 7)
    if np.dtype(dtype).kind in "iu":
        expected = np.floor(expected)  # integer outputs round down, as NumPy >= 2 and JAX do
    check(
        out,
        expected,
        np.dtype(dtype),
        tol={np.dtype(np.float16): 1e-2, np.dtype(ml_dtypes.bfloat16): 5e-2},
    )
    check(jnp.linspace(-5, 5, 4, dtype=int), [-5, -2, 1, 5], I32)


def test_linspace_with_array_bounds_and_axis():
    start = np.array([0.0, 1.0])
    stop = np.array([[2.0], [3.0]])
    for axis in (0, 1, -1, 2):
        out = jnp.linspace(jnp.asarray(start), jnp.asarray(stop), 4, axis=axis)
        check(out, np.linspace(start, stop, 4, axis=axis).astype(np.float32), F32, tol=1e-6)


def test_logspace_and_geomspace_match_numpy():
    check(jnp.logspace(0, 3, 4, base=2), np.logspace(0, 3, 4, base=2), F32, tol=1e-6)
    check(
        jnp.logspace(-1, 2, 5, endpoint=False), np.logspace(-1, 2, 5, endpoint=False), F32, tol=1e-5
    )
    check(jnp.logspace(0, 2, 3, dtype=int), [1, 10, 100], I32)
    check(jnp.geomspace(1, 1000, 4), np.geomspace(1, 1000, 4), F32, tol=1e-5)
    check(jnp.geomspace(-1, -1000, 4), np.geomspace(-1, -1000, 4), F32, tol=1e-5)
    check(
        jnp.geomspace(2, 32, 5, endpoint=False),
        np.geomspace(2, 32, 5, endpoint=False),
        F32,
        tol=1e-5,
    )
    start, stop = np.array([1.0, -2.0]), np.array([16.0, -32.0])
    check(
        jnp.geomspace(jnp.asarray(start), jnp.asarray(stop), 3, axis=1),
        np.geomspace(start, stop, 3, axis=1),
        F32,
        tol=1e-5,
    )


# --- special matrices ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,m,k", [(3, None, 0), (2, 4, 1), (4, 2, -1), (3, 3, 5), (0, 2, 0), (3, 3, -3)]
)
@pytest.mark.parametrize(
    "dtype", [None, np.bool_, np.int8, np.uint32, np.float16, ml_dtypes.bfloat16, np.complex64]
)
def test_eye_and_tri(n, m, k, dtype):
    want = F32 if dtype is None else np.dtype(dtype)
    check(jnp.eye(n, m, k, dtype=dtype), np.eye(n, m, k), want)
    check(jnp.tri(n, m, k, dtype=dtype), np.tri(n, m, k), want)


def test_identity():
    check(jnp.identity(3), np.identity(3), F32)
    check(jnp.identity(2, bool), np.identity(2), np.dtype(bool))
    check(jnp.eye(3, k=jnp.asarray(np.int32(1))), np.eye(3, k=1), F32)


# --- grids -----------------------------------------------------------------------------------


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sparse", [False, True])
def test_meshgrid(indexing, sparse):
    a = np.arange(2, dtype=np.int32)
    b = np.linspace(0, 1, 3).astype(np.float32)
    c = np.arange(4, dtype=np.int8)
    for args in ((a,), (a, b), (a, b, c)):
        outs = jnp.meshgrid(*[jnp.asarray(x) for x in args], indexing=indexing, sparse=sparse)
        refs = np.meshgrid(*args, indexing=indexing, sparse=sparse)
        assert len(outs) == len(refs)
        for out, ref in zip(outs, refs):
            check(out, ref, ref.dtype)
    assert jnp.meshgrid() == []


@pytest.mark.parametrize("dims", [(), (3,), (2, 3), (2, 0, 3)])
def test_indices(dims):
    check(jnp.indices(dims), np.indices(dims), I32)
    check(jnp.indices(dims, dtype=np.int8), np.indices(dims), np.dtype(np.int8))
    for out, ref in zip(jnp.indices(dims, sparse=True), np.indices(dims, sparse=True)):
        check(out, ref, I32)


def test_mgrid_ogrid():
    check(jnp.mgrid[0:3], np.mgrid[0:3], I32)
    check(jnp.mgrid[0:1:3j], np.mgrid[0:1:3j], F32, tol=1e-6)
    check(jnp.mgrid[0:3, 0.0:1.0:0.5], np.mgrid[0:3, 0.0:1.0:0.5], F32)
    check(jnp.mgrid[-1:2, 4:0:-2], np.mgrid[-1:2, 4:0:-2], I32)
    outs, refs = jnp.ogrid[0:2, 0:3], np.ogrid[0:2, 0:3]
    assert len(outs) == 2
    for out, ref in zip(outs, refs):
        check(out, ref, I32)


def test_fromfunction():
    check(
        jnp.fromfunction(lambda i, j: i + 2 * j, (2, 3)),
        np.fromfunction(lambda i, j: i + 2 * j, (2, 3)),
        F32,
    )
    check(
        jnp.fromfunction(lambda i: i * 3, (4,), dtype=int),
        np.fromfunction(lambda i: i * 3, (4,), dtype=int),
        I32,
    )


# --- array, asarray, copy --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_copy_and_array_round_trip(dtype):
    host = np.arange(6).reshape(2, 3).astype(dtype)
    x = jnp.asarray(host)
    for out in (jnp.copy(x), jnp.array(x), x.copy(), jnp.asarray(x), jnp.copy(host)):
        check(out, host, np.dtype(dtype))
    assert jnp.asarray(x) is x
    assert jnp.copy(x) is not x
    assert not np.shares_memory(np.asarray(jnp.copy(x)), np.asarray(x))


def test_array_ndmin_and_nested_tracers():
    check(jnp.array(2.0, ndmin=2), [[2.0]], F32, weak=True)
    closed = kiln.make_jaxpr(lambda a, b: jnp.array([a, b]))(1.0, 2.0)
    assert closed.out_avals[0].shape == (2,) and not closed.out_avals[0].weak_type
    out = run_jaxpr(closed, jnp.asarray(1.0), jnp.asarray(2.0))[0]
    assert np.asarray(out).tolist() == [1.0, 2.0]


# --- tracing ---------------------------------------------------------------------------------


def _jaxpr(fn, *args, **kwargs):
    return kiln.make_jaxpr(fn, **kwargs)(*args)


def test_filled_arrays_stage_broadcast_of_a_literal():
    assert str(_jaxpr(lambda: jnp.zeros(3))) == (
        "{ lambda ; . let\n"
        "    a:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,)] 0.0\n"
        "  in (a,) }"
    )
    assert "broadcast_in_dim[broadcast_dimensions=() shape=(2, 2)] 1" in str(
        _jaxpr(lambda: jnp.ones((2, 2), np.int32))
    )
    assert "broadcast_in_dim[broadcast_dimensions=() shape=(3,)] 0.0" in str(
        _jaxpr(lambda x: jnp.zeros_like(x), jnp.ones(3))
    )
    text = str(_jaxpr(lambda a, n: jnp.full((n,), a), 2, 5, static_argnums=(1,)))
    assert text == (
        "{ lambda ; a:i32[]. let\n"
        "    b:i32[5] = broadcast_in_dim[broadcast_dimensions=() shape=(5,)] a\n"
        "  in (b,) }"
    )


def test_ranges_stage_iota():
    assert str(_jaxpr(lambda: jnp.arange(5))) == (
        "{ lambda ; . let a:i32[5] = iota[dimension=0 dtype=int32 shape=(5,)]  in (a,) }"
    )
    text = str(_jaxpr(lambda: jnp.arange(2, 10, 2)))
    assert "iota[dimension=0 dtype=int32 shape=(4,)]" in text
    assert "mul 2 a" in text and "add 2 b" in text
    text = str(_jaxpr(lambda: jnp.eye(3)))
    assert "iota[dimension=1 dtype=int32 shape=(3, 3)]" in text and "eq" in text
    assert "convert_element_type[new_dtype=float32 weak_type=False]" in text


def test_traced_shape_error_suggests_static_argnums():
    def create_filled(val, length):
        return jnp.full((length,), val)

    with pytest.raises(TypeError) as info:
        _jaxpr(create_filled, 2, 5)
    msg = str(info.value)
    assert msg.startswith(
        "Shapes must be 1D sequences of concrete values of integer type, got "
        "(Traced<ShapedArray(int32[], weak_type=True)>with"
        "<DynamicJaxprTrace(level=1/0)>,)."
    )
    assert "static_argnums" in msg and "argument length" in msg
    for fn in (
        lambda n: jnp.zeros(n),
        lambda n: jnp.ones((2, n)),
        lambda n: jnp.eye(n),
        lambda n: jnp.indices((n,)),
    ):
        with pytest.raises(TypeError):
            _jaxpr(fn, 3)


def test_traced_arange_asks_for_static_values():
    with pytest.raises(
        errors.ConcretizationTypeError, match="It arose in the jnp.arange argument 'stop'"
    ):
        _jaxpr(lambda x: jnp.arange(0, x), 3.0)
    with pytest.raises(errors.ConcretizationTypeError, match="argument 'start'"):
        _jaxpr(lambda x: jnp.arange(x), 3)
    with pytest.raises(errors.ConcretizationTypeError, match="static"):
        _jaxpr(lambda n: jnp.linspace(0, 1, n), 3)
    text = str(_jaxpr(lambda x: jnp.arange(x.shape[0] + 1.5), jnp.ones(2)))
    assert "iota[dimension=0 dtype=float32 shape=(4,)]" in text


TRACED_CREATION = [
    ("full", lambda v: jnp.full((2, 3), v), [np.float32(1.5)]),
    ("full_array", lambda v: jnp.full((2, 3), v), [np.arange(3, dtype=np.int8)]),
    ("zeros_like", jnp.zeros_like, [np.ones((2, 3), np.float16)]),
    ("ones_like_dtype", lambda x: jnp.ones_like(x, dtype=np.int32), [np.ones(3, np.float32)]),
    ("full_like", lambda x, v: jnp.full_like(x, v), [np.ones(3, np.int8), np.float32(2.5)]),
    ("linspace", lambda a, b: jnp.linspace(a, b, 5), [np.float32(-1), np.float32(2)]),
    (
        "linspace_int",
        lambda a, b: jnp.linspace(a, b, 4, dtype=np.int32),
        [np.float32(-5), np.float32(5)],
    ),
    (
        "linspace_arrays",
        lambda a, b: jnp.linspace(a, b, 3, axis=-1, retstep=True),
        [np.zeros(2, np.float32), np.ones(2, np.float32)],
    ),
    ("logspace", lambda a, b: jnp.logspace(a, b, 4), [np.float32(0), np.float32(2)]),
    ("geomspace", lambda a, b: jnp.geomspace(a, b, 4), [np.float32(-1), np.float32(-8)]),
    ("meshgrid", lambda a, b: jnp.meshgrid(a, b), [np.arange(2.0), np.arange(3)]),
    ("copy", jnp.copy, [np.arange(4.0, dtype=np.float32)]),
    ("array_dtype", lambda x: jnp.array(x, dtype=np.int8), [np.arange(4.0)]),
]


@pytest.mark.parametrize("name,fn,args", TRACED_CREATION, ids=[c[0] for c in TRACED_CREATION])
def test_creation_traced_matches_eager(name, fn, args):
    args = [jnp.asarray(a) for a in args]
    eager = fn(*args)
    eager = list(eager) if isinstance(eager, (list, tuple)) else [eager]
    closed = kiln.make_jaxpr(fn)(*args)
    typecheck_jaxpr(closed.jaxpr)
    traced = run_jaxpr(closed, *args)
    for t, e, aval in zip(traced, eager, closed.out_avals):
        assert (aval.shape, aval.dtype, aval.weak_type) == (e.shape, e.dtype, e.weak_type)
        assert np.asarray(t).tobytes() == np.asarray(e).tobytes()


@pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit is not available yet")
def test_creation_under_jit():
    out = kiln.jit(lambda x: jnp.zeros_like(x) + jnp.arange(3) + jnp.eye(3)[0])(jnp.ones(3))
    check(out, np.arange(3) + np.eye(3)[0], F32)
    out = kiln.jit(lambda a, b: jnp.linspace(a, b, 5))(jnp.asarray(0.0), jnp.asarray(1.0))
    check(out, np.linspace(0, 1, 5), F32, tol=1e-6)


# --- bad input -------------------------------------------------------------------------------

CREATION_ERRORS = [
    (lambda: jnp.zeros(-1), TypeError, "non-negative"),
    (lambda: jnp.ones((2, 2.5)), TypeError, "Shapes must be 1D sequences"),
    (lambda: jnp.zeros(None), TypeError, "shape"),
    (lambda: jnp.eye(-1), ValueError, "negative dimensions are not allowed"),
    (lambda: jnp.tri(2, -1), ValueError, "negative dimensions are not allowed"),
    (lambda: jnp.arange(1, 5, 0), ValueError, "step must not be zero"),
    (lambda: jnp.arange(np.ones(2)), ValueError, "must be a scalar"),
    (lambda: jnp.arange(None), TypeError, "start or stop"),
    (lambda: jnp.linspace(0, 1, -1), ValueError, "Number of samples, -1, must be non-negative"),
    (lambda: jnp.linspace(0, 1, 3, axis=2), ValueError, "out of bounds"),
    (lambda: jnp.geomspace(0, 1, 3), ValueError, "cannot include zero"),
    (lambda: jnp.meshgrid(jnp.ones((2, 2))), ValueError, "must be 1D"),
    (lambda: jnp.meshgrid(jnp.ones(2), indexing="xx"), ValueError, "Valid values for indexing"),
    (lambda: jnp.meshgrid(jnp.ones(2), copy=False), ValueError, "copy=True"),
    (lambda: jnp.mgrid[1], TypeError, "takes slices"),
    (lambda: jnp.full((2,), np.ones(3)), ValueError, "Incompatible"),
    (
        lambda: (
            jnp.zeros(2, dtype=np.float128)
            if hasattr(np, "float128")
            else jnp.zeros(2, dtype=object)
        ),
        TypeError,
        "dtype",
    ),
]

LIST_ARGS = [
    ("full", lambda v: jnp.full((2,), v)),
    ("zeros_like", jnp.zeros_like),
    ("ones_like", jnp.ones_like),
    ("empty_like", jnp.empty_like),
    ("full_like", lambda v: jnp.full_like(v, 1)),
    ("full_like", lambda v: jnp.full_like(1, v)),
    ("linspace", lambda v: jnp.linspace(v, 1)),
    ("logspace", lambda v: jnp.logspace(0, v)),
    ("geomspace", lambda v: jnp.geomspace(v, 2)),
    ("meshgrid", jnp.meshgrid),
    ("copy", jnp.copy),
    ("arange", jnp.arange),
]


@pytest.mark.parametrize(
    "fn,exc,match", CREATION_ERRORS, ids=[f"error{i}" for i in range(len(CREATION_ERRORS))]
)
def test_creation_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


@pytest.mark.parametrize(
    "name,fn", LIST_ARGS, ids=[f"{n}{i}" for i, (n, _) in enumerate(LIST_ARGS)]
)
def test_creation_rejects_lists(name, fn):
    with pytest.raises(TypeError, match=f"{name} requires ndarray or scalar arguments"):
        fn([1.0, 2.0])


def test_array_and_asarray_accept_lists():
    check(jnp.array([[1, 2], [3, 4]]), [[1, 2], [3, 4]], I32)
    check(jnp.asarray((1.0, 2)), [1.0, 2.0], F32)
    check(jnp.array([True, False]), [True, False], np.dtype(bool))
    assert math.isclose(float(jnp.asarray([0.5], dtype=np.float16)[0]), 0.5)

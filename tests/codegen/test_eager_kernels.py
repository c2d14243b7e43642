"""Native kernels for large eager operations (kiln/runtime/eager_kernels.py): the elementwise
op records run through them (the threshold forced to one element) and must match the same
NumPy/SciPy references as the impls do; special values keep their signs; small operations
stay on the impls; one kernel serves every shape; views and broadcasts are read correctly."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core import trace
from kiln.primitives import elementwise_math, random_bits
from kiln.runtime import eager_kernels
from tests._testing import assert_close
from tests.op_records import ELEMENTWISE_LAX_RECORDS, ELEMENTWISE_NUMPY_RECORDS, F32, TOL
from tests.test_elementwise_ops import (
    SPECIAL_FUNCTIONS,
    SPECIALS,
    _cases,
    check_eager,
)


@pytest.fixture
def every_op_native():
    """Every eager elementwise op on at least one element runs natively."""
    with eager_kernels.eager_kernel_threshold(1):
        yield


def _native_calls() -> int:
    return eager_kernels.stats()["native_calls"]


def test_the_hook_is_installed_by_kiln():
    assert trace._eager_kernel_hook is eager_kernels.run_eager
    assert elementwise_math.exp_p in trace._eager_kernel_primitives


@pytest.mark.parametrize("record,dtype", _cases(ELEMENTWISE_LAX_RECORDS))
def test_lax_records_through_native_kernels(record, dtype, every_op_native):
    check_eager(record, dtype)


@pytest.mark.parametrize("record,dtype", _cases(ELEMENTWISE_NUMPY_RECORDS))
def test_numpy_records_through_native_kernels(record, dtype, every_op_native):
    check_eager(record, dtype)


@pytest.mark.parametrize("dtype", [F32, np.dtype(np.float16)], ids=str)
@pytest.mark.parametrize("name,fn,ref", SPECIAL_FUNCTIONS, ids=[s[0] for s in SPECIAL_FUNCTIONS])
def test_special_values_through_native_kernels(name, fn, ref, dtype, every_op_native):
    x = np.array(SPECIALS, F32).astype(dtype)
    with eager_kernels.eager_kernel_threshold(1 << 40):
        expected = np.asarray(fn(jnp.asarray(x)))
    actual = np.asarray(fn(jnp.asarray(x)))
    assert actual.dtype == expected.dtype
    assert_close(actual, expected, TOL, err_msg=name)
    if actual.dtype != np.bool_:
        zeros = (expected == 0) & ~np.isnan(expected.astype(np.float64))
        np.testing.assert_array_equal(np.signbit(actual[zeros]), np.signbit(expected[zeros]))


def test_small_operations_stay_on_the_impl():
    x = jnp.asarray(np.linspace(-2, 2, 16, dtype=np.float32))
    before = _native_calls()
    lax.exp(x)
    lax.tanh(x)
    assert _native_calls() == before


def test_large_operations_run_natively_and_match_the_impl():
    rng = np.random.default_rng(0)
    n = 3 * eager_kernels.threshold()[0] + 5
    x = jnp.asarray(rng.standard_normal(n).astype(np.float32) * 4)
    before = _native_calls()
    results = [lax.exp(x), lax.tanh(x), lax.expm1(x), kiln.nn.selu(x)]
    assert _native_calls() > before
    with eager_kernels.eager_kernel_threshold(1 << 40):
        expected = [lax.exp(x), lax.tanh(x), lax.expm1(x), kiln.nn.selu(x)]
    for actual, reference in zip(results, expected):
        assert_close(actual, np.asarray(reference), TOL)


def test_one_kernel_serves_every_shape(every_op_native):
    lax.sin(jnp.ones((3,), np.float32))
    compiled = eager_kernels.stats()["compiled"]
    for shape in [(7,), (2, 5), (4, 3, 2), (1000,)]:
        x = np.linspace(-3, 3, int(np.prod(shape)), dtype=np.float32).reshape(shape)
        out = lax.sin(jnp.asarray(x))
        assert out.shape == shape
        assert_close(out, np.sin(x), TOL)
    assert eager_kernels.stats()["compiled"] == compiled


def test_views_and_broadcasts(every_op_native):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    strided = jnp.asarray(base)[:, ::2]  # a non-contiguous operand
    np.testing.assert_array_equal(lax.neg(strided), -base[:, ::2])
    filled = lax.broadcast_in_dim(np.float32(2.5), (4, 3), ())
    np.testing.assert_array_equal(filled, np.full((4, 3), 2.5, np.float32))
    np.testing.assert_array_equal(lax.mul(strided, filled), base[:, ::2] * 2.5)
    np.testing.assert_array_equal(lax.add(filled, np.float32(1)), np.full((4, 3), 3.5))
    selected = lax.select(strided > 5, strided, filled)
    np.testing.assert_array_equal(selected, np.where(base[:, ::2] > 5, base[:, ::2], 2.5))


def test_threefry_runs_natively_bit_for_bit(every_op_native):
    rng = np.random.default_rng(1)
    x1 = rng.integers(0, 2**32, 1001, dtype=np.uint32)
    x2 = rng.integers(0, 2**32, 1001, dtype=np.uint32)
    k1, k2 = np.uint32(0x12345678), np.uint32(0x9ABCDEF0)
    before = _native_calls()
    out = random_bits.threefry2x32(k1, k2, jnp.asarray(x1), jnp.asarray(x2))
    assert _native_calls() == before + 1
    expected = random_bits._threefry2x32_impl(np.asarray(k1), np.asarray(k2), x1, x2)
    for actual, reference in zip(out, expected):
        np.testing.assert_array_equal(np.asarray(actual), reference)


def test_thresholds_are_configurable():
    default = eager_kernels.threshold()
    with eager_kernels.eager_kernel_threshold(10, cheap=20):
        assert eager_kernels.threshold() == (10, 20)
    assert eager_kernels.threshold() == default

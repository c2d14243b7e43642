"""Random numbers in native code equal the reference impls bit for bit: the Threefry-2x32 hash
and the samplers' float maps (uniform's mantissa trick, normal's erf_inv, the XLA log/log1p/erf
polynomials, fma, bitcast_convert_type) compiled by kiln/compiler/lowering_random.py, under jit
(native backend vs the interpreter), eagerly through the native eager kernels, and under vmap;
and the jitted samplers compile to native code only, large ones split over threads."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.random as kr
from kiln import lax
from kiln.config import config
from kiln.primitives import random_bits
from kiln.runtime import eager_kernels, native
from tests._testing import x64_mode

SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 3, 4), (3, 0), (1000,)]
FLOATS = [np.float32, np.float16, kiln.numpy.bfloat16]


def _interpreted(fn):
    return kiln.jit(fn, backend="interpreter")


def _native(fn):
    return kiln.jit(fn, backend="native")


def _assert_same_bits(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype.kind == "f" or actual.dtype == kiln.numpy.bfloat16:
        width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[actual.dtype.itemsize]
        actual, expected = actual.view(width), expected.view(width)
    np.testing.assert_array_equal(actual, expected)


def _check(fn, *args):
    """fn under the native backend, eagerly through native kernels, and eagerly on the impls,
    all bit for bit equal to the interpreter."""
    expected = _interpreted(fn)(*args)
    _assert_same_bits(_native(fn)(*args), expected)
    with eager_kernels.eager_kernel_threshold(1):
        _assert_same_bits(fn(*args), expected)
    with eager_kernels.eager_kernel_threshold(1 << 40):
        _assert_same_bits(fn(*args), expected)


@pytest.fixture(params=[False, True], ids=["flat", "partitionable"])
def layout(request):
    previous = config.threefry_partitionable
    config.update("jax_threefry_partitionable", request.param)
    yield request.param
    config.update("jax_threefry_partitionable", previous)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_threefry2x32(shape):
    rng = np.random.default_rng(0)
    x1 = rng.integers(0, 2**32, shape, dtype=np.uint32)
    x2 = rng.integers(0, 2**32, shape, dtype=np.uint32)
    keys = np.array([0, 0xFFFFFFFF], np.uint32), np.array([0x1BD11BDA, 7], np.uint32)
    for k1, k2 in zip(*keys):
        _check(lambda a, b: random_bits.threefry2x32(k1, k2, a, b), x1, x2)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_uniform(shape, dtype, layout):
    key = kr.PRNGKey(42)
    _check(lambda k: kr.uniform(k, shape, dtype), key)
    _check(lambda k: kr.uniform(k, shape, dtype, minval=-3.0, maxval=5.5), key)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_normal(shape, dtype, layout):
    _check(lambda k: kr.normal(k, shape, dtype), kr.PRNGKey(3))


def test_normal_tails_and_many_draws():
    # 2**16 draws reach both polynomial branches of erf_inv (|x| beyond ~2.9).
    draws = _interpreted(lambda k: kr.normal(k, (1 << 16,)))(kr.PRNGKey(0))
    assert np.abs(np.asarray(draws)).max() > 3.5
    _check(lambda k: kr.normal(k, (1 << 16,)), kr.PRNGKey(0))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bernoulli(shape, layout):
    _check(lambda k: kr.bernoulli(k, 0.3, shape), kr.PRNGKey(5))
    p = np.linspace(0, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    _check(lambda k, q: kr.bernoulli(k, q), kr.PRNGKey(6), p)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int16], ids=str)
def test_randint(shape, dtype, layout):
    _check(lambda k: kr.randint(k, shape, 0, 100, dtype), kr.PRNGKey(11))
    _check(
        lambda k: kr.randint(k, shape, -7, 3, dtype if dtype != np.uint8 else np.int8),
        kr.PRNGKey(12),
    )


@pytest.mark.parametrize("num", [2, 3, (2, 5), 64])
def test_split(num, layout):
    _check(lambda k: kr.split(k, num), kr.PRNGKey(0))
    _check(lambda k: kr.split(k, num), kr.PRNGKey(2**31 + 17))


@pytest.mark.parametrize("data", [0, 1, 12345, 2**32 - 1])
def test_fold_in(data, layout):
    _check(lambda k: kr.fold_in(k, data), kr.PRNGKey(9))
    _check(lambda k, d: kr.fold_in(k, d), kr.PRNGKey(9), np.uint32(data))


def test_bits(layout):
    for dtype in (np.uint8, np.uint16, np.uint32):
        _check(lambda k: kr.bits(k, (5, 7), dtype), kr.PRNGKey(1))


@pytest.mark.parametrize("sampler", ["uniform", "normal", "bernoulli", "randint", "split"])
def test_under_vmap(sampler, layout):
    draw = {
        "uniform": lambda k: kr.uniform(k, (3, 4)),
        "normal": lambda k: kr.normal(k, (33,)),
        "bernoulli": lambda k: kr.bernoulli(k, 0.7, (9,)),
        "randint": lambda k: kr.randint(k, (6,), -5, 50),
        "split": lambda k: kr.split(k, 3),
    }[sampler]
    keys = kr.split(kr.PRNGKey(21), 5)
    batched = kiln.vmap(draw)
    _check(batched, keys)
    looped = jnp.stack([draw(keys[i]) for i in range(5)])
    _assert_same_bits(_native(batched)(keys), looped)


def test_float_maps_on_chosen_values():
    # The XLA float polynomials on values that reach every branch (tiny, subnormal, zero, one,
    # negative, inf, nan), natively and against the impls.
    values = np.array(
        [
            0.0,
            -0.0,
            1e-40,
            1e-30,
            0.1,
            0.41,
            0.42,
            0.5,
            0.99999994,
            1.0,
            -1.0,
            2.0,
            3.9,
            -3.9,
            -0.5,
            1e30,
            np.inf,
            -np.inf,
            np.nan,
            3.0e38,
            -0.99999994,
            0.3,
            -0.3,
        ],
        np.float32,
    )
    for fn in (
        random_bits.xla_log,
        random_bits.xla_log1p,
        random_bits.xla_erf,
        random_bits.xla_erf_inv,
        lambda x: random_bits.fma(x, x, np.float32(-1)),
    ):
        _check(fn, values)


def test_bitcast_from_every_kind_of_bit_pattern():
    patterns = np.array(
        [
            0,
            1,
            0x7FFFFF,
            0x800000,
            0x3F800000,
            0x3F7FFFFF,
            0x7F7FFFFF,
            0x7F800000,
            0x7FC00000,
            0x80000000,
            0x80000001,
            0xBF800000,
            0xFF800000,
            0x00400000,
            0x4B000000,
            0x1234567,
        ],
        np.uint32,
    )
    _check(lambda b: lax.bitcast_convert_type(b, np.float32), patterns[~_is_nan(patterns)])
    _check(lambda b: lax.bitcast_convert_type(b, np.float32), patterns.view(np.int32)[:8])
    nan = _native(lambda b: lax.bitcast_convert_type(b, np.float32))(patterns[_is_nan(patterns)])
    assert np.isnan(np.asarray(nan)).all()


def _is_nan(patterns):
    return ((patterns >> 23) & 0xFF == 0xFF) & (patterns & 0x7FFFFF != 0)


@pytest.mark.parametrize("shape", [(), (0,), (9,), (2, 7)], ids=str)
def test_float64_samplers(shape, layout):
    with x64_mode(True):
        key = kr.PRNGKey(4)
        _check(lambda k: kr.uniform(k, shape, np.float64), key)
        _check(lambda k: kr.uniform(k, shape, np.float64, minval=-2.0, maxval=0.5), key)
        _check(lambda k: kr.normal(k, shape, np.float64), key)
        _check(lambda k: kr.bits(k, shape, np.uint64), key)


def _interpreted_equations(fn, *args) -> list[str]:
    text = kiln.jit(fn, backend="native").lower(*args).compile().as_text()
    return [line for line in text.splitlines() if line.startswith("interpreted")]


N = 1 << 20
SAMPLERS = {
    "normal": lambda k: kr.normal(k, (N,)),
    "uniform": lambda k: kr.uniform(k, (N,)),
    "bernoulli": lambda k: kr.bernoulli(k, 0.3, (N,)),
    "randint": lambda k: kr.randint(k, (N,), -5, 100),
    "split": lambda k: kr.split(k, 100),
    "fold_in": lambda k: kr.fold_in(k, 7),
    "bits": lambda k: kr.bits(k, (N,)),
    "normal_float16": lambda k: kr.normal(k, (N,), np.float16),
    "normal_bfloat16": lambda k: kr.normal(k, (N,), kiln.numpy.bfloat16),
    "uniform_float16": lambda k: kr.uniform(k, (N,), np.float16),
    "uniform_bfloat16": lambda k: kr.uniform(k, (N,), kiln.numpy.bfloat16),
}


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_jitted_samplers_compile_to_native_code_only(sampler, layout):
    assert _interpreted_equations(SAMPLERS[sampler], kr.PRNGKey(0)) == []


def test_float64_uniform_compiles_to_native_code_only(layout):
    with x64_mode(True):
        draw = lambda k: kr.uniform(k, (N,), np.float64)  # noqa: E731
        assert _interpreted_equations(draw, kr.PRNGKey(0)) == []


@pytest.mark.parametrize("sampler", ["normal", "uniform", "bernoulli", "randint"])
def test_large_draws_run_on_threads(sampler, layout, monkeypatch):
    monkeypatch.setattr(native, "num_threads", lambda: 2)
    draw = SAMPLERS[sampler]
    compiled = kiln.jit(draw, backend="native").lower(kr.PRNGKey(8)).compile()
    segments = [s for s in compiled._entry.executable.segments if s is not None]
    assert any(s.parallel for s in segments)
    assert "2 threads" in compiled.as_text()
    _assert_same_bits(compiled(kr.PRNGKey(8)), _interpreted(draw)(kr.PRNGKey(8)))


def test_bitcast_of_every_16_bit_pattern():
    patterns = np.arange(1 << 16, dtype=np.uint16)
    for target in (np.float16, kiln.numpy.bfloat16):
        for source in (patterns, patterns.view(np.int16)):
            cast = lambda b: lax.bitcast_convert_type(b, target)  # noqa: E731
            assert _interpreted_equations(cast, source) == []
            got = np.asarray(_native(cast)(source))
            expected = source.view(target)
            nan = np.isnan(expected.astype(np.float32))
            # Every non-NaN pattern keeps its bits; NaN patterns stay NaN.
            np.testing.assert_array_equal(got.view(np.uint16)[~nan], patterns[~nan])
            assert np.isnan(got[nan].astype(np.float32)).all()


def test_bitcast_both_ways_at_32_and_64_bits():
    rng = np.random.default_rng(1)
    words = rng.integers(0, 2**32, 4096, dtype=np.uint32)
    words[:6] = [0, 0x80000000, 0x7F800000, 0xFF800000, 1, 0x807FFFFF]
    floats = words.view(np.float32)[~np.isnan(words.view(np.float32))]
    for fn, arg in (
        (lambda b: lax.bitcast_convert_type(b, np.float32), words),
        (lambda b: lax.bitcast_convert_type(b, np.int32), floats),
        (lambda b: lax.bitcast_convert_type(b, np.uint32), floats),
    ):
        assert _interpreted_equations(fn, arg) == []
        _check(fn, arg)
    with x64_mode(True):
        wide = rng.integers(0, 2**64, 4096, dtype=np.uint64)
        doubles = wide.view(np.float64)[~np.isnan(wide.view(np.float64))]
        for fn, arg in (
            (lambda b: lax.bitcast_convert_type(b, np.float64), wide),
            (lambda b: lax.bitcast_convert_type(b, np.uint64), doubles),
            (lambda b: lax.bitcast_convert_type(b, np.int64), doubles),
        ):
            _check(fn, arg)

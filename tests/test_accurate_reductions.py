"""Float sums whose rounding error grows like log(n), not n: long float32 sums, means,
variances, log-sum-exps, softmaxes and cumulative sums, natively (jit), on the interpreter and
eagerly, against float64 and math.fsum references; and the compensated kernels themselves
(blocks, tails, dynamic bounds, inf and NaN, initial values, column sums accumulated in place).

A float32 sum carried in one accumulator per vector lane loses about 1e-3 of its value over
10M elements; every check here allows 1e-6 (about 8 ulps).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import nn
from kiln.compiler import kir
from kiln.compiler.kir import Buffer, Kernel, Program, Reduce, ReduceKind, Store, Var
from kiln.compiler.kir_schedule import schedule_kernel
from kiln.runtime.engine import compile_program
from tests._testing import CODEGEN_TARGETS, use_codegen_target

RTOL = 1e-6
TENTH = float(np.float32(0.1))  # the float32 nearest 0.1, exactly


def relative_error(value, reference: float) -> float:
    return abs(float(value) - reference) / abs(reference)


def modes(fn):
    """fn compiled natively, run by the interpreter, and called eagerly."""
    return {"jit": kiln.jit(fn), "interpret": kiln.jit(fn, backend="interpret"), "eager": fn}


MODES = ["jit", "interpret", "eager"]


# --- whole-array sums of 10M and 50M float32 values ----------------------------------------------


@pytest.mark.parametrize("codegen_target", CODEGEN_TARGETS)
def test_a_long_float32_sum_is_as_accurate_on_every_target(codegen_target):
    """Each vector lane adds as many elements per compensated block whatever the vector width:
    with a fixed 1024-element block, AVX2's 8 lanes added 128 each, and float32 tenths summed
    9.7e-7 off (the in-block error, the same from 64K elements to 10M; 1.1e-6 at 50M), against
    6.0e-7 with AVX-512's 16 lanes of 64."""
    n = 1 << 18
    with use_codegen_target(codegen_target):
        total = kiln.jit(jnp.sum)(np.full(n, 0.1, np.float32))
    assert relative_error(total, n * TENTH) < 0.75 * RTOL


@pytest.fixture(scope="module")
def tenths_50m():
    return jnp.asarray(np.full(50_000_000, 0.1, np.float32))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [10_000_000, 50_000_000])
def test_sum_of_many_tenths(n, mode, tenths_50m):
    x = tenths_50m[:n] if n < 50_000_000 else tenths_50m
    # n * TENTH is exact in float64 (24 + 26 bits), so it is the exact sum.
    total = modes(jnp.sum)[mode](x)
    assert relative_error(total, n * TENTH) < RTOL
    mean = modes(jnp.mean)[mode](x)
    assert relative_error(mean, TENTH) < RTOL


@pytest.fixture(scope="module")
def random_10m():
    values = np.random.default_rng(0).random(10_000_000, dtype=np.float32) * 2 + 0.5
    return values, math.fsum(values.astype(np.float64).tolist())


@pytest.mark.parametrize("mode", MODES)
def test_sum_of_random_values_matches_fsum(mode, random_10m):
    values, reference = random_10m
    assert relative_error(modes(jnp.sum)[mode](jnp.asarray(values)), reference) < RTOL


# --- 2-D arrays with a long reduced axis ---------------------------------------------------------


@pytest.fixture(scope="module")
def tall():
    rng = np.random.default_rng(1)
    return rng.random((1_000_000, 12), dtype=np.float32) + np.float32(0.5)


@pytest.mark.parametrize("mode", MODES)
def test_column_sums_of_a_tall_array(mode, tall):
    # Columns of 1M elements, read with a stride: accumulated in place natively, summed row by
    # row by NumPy.
    reference = tall.astype(np.float64).sum(axis=0)
    got = np.asarray(modes(lambda a: jnp.sum(a, axis=0))[mode](jnp.asarray(tall)))
    np.testing.assert_allclose(got, reference, rtol=RTOL)


@pytest.mark.parametrize("mode", MODES)
def test_column_statistics_of_a_tall_array(mode, tall):
    x = jnp.asarray(tall)
    wide = tall.astype(np.float64)
    means = np.asarray(modes(lambda a: jnp.mean(a, axis=0))[mode](x))
    np.testing.assert_allclose(means, wide.mean(axis=0), rtol=RTOL)
    # two reductions in one output: the strip-mined form, each column blocked in order
    variances = np.asarray(modes(lambda a: jnp.var(a, axis=0))[mode](x))
    np.testing.assert_allclose(variances, wide.var(axis=0), rtol=2 * RTOL)
    deviations = np.asarray(modes(lambda a: jnp.std(a, axis=0))[mode](x))
    np.testing.assert_allclose(deviations, wide.std(axis=0), rtol=RTOL)


@pytest.mark.parametrize("mode", MODES)
def test_column_sums_of_tenths(mode):
    x = np.full((3_000_000, 4), 0.1, np.float32)
    got = np.asarray(modes(lambda a: jnp.sum(a, axis=0))[mode](jnp.asarray(x)))
    np.testing.assert_allclose(got, np.full(4, 3_000_000 * TENTH), rtol=RTOL)


@pytest.mark.parametrize("mode", MODES)
def test_half_precision_column_sums(mode):
    # float16 sums accumulate in float32 and round once: the result is the correctly rounded
    # float16 of the exact sum (to within one float16 ulp).
    x = np.full((200_000, 8), 0.1, np.float16)
    exact = 200_000 * float(np.float16(0.1))
    got = np.asarray(modes(lambda a: jnp.sum(a, axis=0))[mode](jnp.asarray(x)))
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=1e-3)


@pytest.mark.parametrize("mode", MODES)
def test_row_sums_and_whole_sums_of_long_rows(mode):
    rng = np.random.default_rng(2)
    x = rng.random((3, 4_000_000), dtype=np.float32)
    wide = x.astype(np.float64)
    rows = np.asarray(modes(lambda a: jnp.sum(a, axis=1))[mode](jnp.asarray(x)))
    np.testing.assert_allclose(rows, wide.sum(axis=1), rtol=RTOL)
    # a sum of many row sums: the outer sum runs in order over rows
    y = np.full((40_000, 250), 0.1, np.float32)
    assert relative_error(modes(jnp.sum)[mode](jnp.asarray(y)), 10_000_000 * TENTH) < RTOL


@pytest.mark.parametrize("mode", MODES)
def test_logsumexp_and_softmax_over_long_rows(mode):
    rng = np.random.default_rng(3)
    x = rng.random((2, 3_000_000), dtype=np.float32) * 4
    wide = x.astype(np.float64)
    shifted = np.exp(wide - wide.max(axis=1, keepdims=True))
    lse = np.asarray(modes(lambda a: nn.logsumexp(a, axis=1))[mode](jnp.asarray(x)))
    np.testing.assert_allclose(lse, np.log(shifted.sum(axis=1)) + wide.max(axis=1), rtol=RTOL)
    soft = np.asarray(modes(lambda a: nn.softmax(a, axis=1))[mode](jnp.asarray(x)))
    np.testing.assert_allclose(soft, shifted / shifted.sum(axis=1, keepdims=True), rtol=2 * RTOL)


# --- cumulative sums -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_cumsum_of_many_tenths(mode):
    n = 10_000_000
    x = jnp.asarray(np.full(n, 0.1, np.float32))
    running = np.asarray(modes(jnp.cumsum)[mode](x))
    assert relative_error(running[-1], n * TENTH) < RTOL
    # every prefix, not only the total
    exact = np.arange(1, n + 1, dtype=np.float64) * TENTH
    assert np.max(np.abs(running - exact) / exact) < RTOL


@pytest.mark.parametrize("mode", MODES)
def test_cumsum_along_a_long_column(mode):
    rng = np.random.default_rng(4)
    x = rng.random((2_000_000, 3), dtype=np.float32)
    running = np.asarray(modes(lambda a: jnp.cumsum(a, axis=0))[mode](jnp.asarray(x)))
    np.testing.assert_allclose(running[-1], x.astype(np.float64).sum(axis=0), rtol=RTOL)


# --- the compensated kernels ---------------------------------------------------------------------


def sum_program(name: str, dtype, n: int, *, init=None, dynamic: bool = False) -> Program:
    x = Buffer("x", dtype, (n,))
    out = Buffer("out", dtype, (), "output")
    k = Var("k")
    buffers = [x]
    stop = n
    if dynamic:
        length = Buffer("length", np.int64, (1,))
        buffers.insert(0, length)
        stop = kir.clamp(kir.Load(length, kir.as_index(0)), 0, n)
    value = Reduce(ReduceKind.SUM, k, 0, stop, x[k], init=init)
    return Program(name, buffers + [out], [Kernel("k", [Store(out, 0, value)])])


def run_sum(program: Program, *arrays) -> float:
    return float(compile_program(program)(*arrays)[0])


@pytest.mark.parametrize("n", [1024, 1025, 5000, 1 << 20])
def test_long_kernel_sums_match_fsum(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32) + 3
    reference = math.fsum(x.astype(np.float64).tolist())
    assert relative_error(run_sum(sum_program(f"sum{n}", np.float32, n), x), reference) < RTOL


@pytest.mark.parametrize("n", [0, 7, 1024, 5000, 123_457])
def test_sums_with_bounds_known_only_at_run_time(n):
    size = 123_457
    x = np.full(size, 0.1, np.float32)
    program = sum_program("dynamic_sum", np.float32, size, dynamic=True)
    got = run_sum(program, np.array([n], np.int64), x)
    if n == 0:
        assert got == 0.0
    else:
        assert relative_error(got, n * TENTH) < RTOL


def test_initial_value_is_added_once():
    n = 10_000
    program = sum_program("init_sum", np.float32, n, init=kir.const(1000.0, np.float32))
    assert relative_error(run_sum(program, np.full(n, 0.5, np.float32)), 1000.0 + n * 0.5) < RTOL


@pytest.mark.parametrize(
    "special, expected",
    [
        ([np.inf], np.inf),
        ([-np.inf], -np.inf),
        ([np.inf, -np.inf], np.nan),
        ([np.nan], np.nan),
        ([3e38, 3e38], np.inf),
    ],
)
def test_inf_and_nan_survive_the_compensation(special, expected):
    n = 100_000
    x = np.full(n, 0.25, np.float32)
    x[np.linspace(10, n - 10, len(special)).astype(int)] = special
    got = run_sum(sum_program("special_sum", np.float32, n), x)
    if np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got == expected


def test_long_half_precision_sum_rounds_once():
    n = 100_000
    x = np.full(n, 0.1, np.float16)
    got = run_sum(sum_program("half_sum", np.float16, n), x)
    assert got == float(np.float16(n * float(np.float16(0.1))))


def test_integer_sums_stay_exact():
    n = 3_000_000
    x = np.arange(n, dtype=np.int32)
    got = compile_program(sum_program("int_sum", np.int32, n))(x)[0]
    exact = sum(range(n))
    assert int(got) == (exact + (1 << 31)) % (1 << 32) - (1 << 31)  # wrapped to int32


def column_sum_program(rows: int, cols: int) -> Program:
    x = Buffer("x", np.float32, (rows, cols))
    out = Buffer("out", np.float32, (cols,), "output")
    k = Var("k")
    body = kir.loop_nest(
        (cols,),
        lambda j: [Store(out, (j,), Reduce(ReduceKind.SUM, k, 0, rows, x[k, j]) * 2.0)],
        prefix="j",
    )
    return Program("column_sums", [x, out], [Kernel("k", body)])


def test_compensated_in_place_column_sums():
    rows, cols = 100_003, 5  # whole blocks of rows and a shorter last block
    program = column_sum_program(rows, cols)
    scheduled = schedule_kernel(program.kernels[0])
    scratch = [b for b in kir.buffers_of(scheduled.body) if b not in scheduled.params]
    assert len(scratch) == 2 and all(b.role == "temp" for b in scratch)
    x = np.full((rows, cols), 0.1, np.float32)
    x[500, 1], x[7, 2], x[9, 2], x[rows - 1, 3] = np.inf, np.inf, -np.inf, np.nan
    (got,) = compile_program(program)(x)
    assert got[0] == pytest.approx(2 * rows * TENTH, rel=RTOL)
    assert got[1] == np.inf and np.isnan(got[2]) and np.isnan(got[3])
    assert got[4] == pytest.approx(2 * rows * TENTH, rel=RTOL)

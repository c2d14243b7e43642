"""Whole-domain accuracy of kiln's native math functions, against mpmath.

Each function of vmath (and sqrt, rsqrt) is compiled through kiln's scalar-op table and
pipeline (benchmarks/ulp_table.py builds the kernels, the inputs and the mpmath references) and
must stay within vmath.ULP_BOUNDS on a sample of its whole domain and its edge cases, with
special values exact. kiln.jit must agree with eager evaluation (NumPy) within the bound plus
NumPy's own error. benchmarks/ulp_table.py prints the same measurement on a larger sample.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import kiln
import kiln.lax as lax
import kiln.numpy as jnp
from kiln.codegen.llvm import objects, target, vmath
from tests._testing import CODEGEN_TARGETS, use_codegen_target

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import ulp_table  # noqa: E402

DTYPES = ("float32", "float64")
SAMPLES = 400  # random inputs per region; the edges come on top


@pytest.fixture(autouse=True)
def codegen_target():
    """The whole-domain sweep runs for the host only (it compiles every function; conftest would
    repeat it per baseline); test_large_trig_arguments_on_every_target covers the baselines."""
    yield target.current_target()


_KERNELS: dict = {}


def kernels(op: str) -> ulp_table.Kernels:
    key = (op, target.current_target().cache_tag)
    if key not in _KERNELS:
        _KERNELS[key] = ulp_table.Kernels([op])
    return _KERNELS[key]


def test_bounds_cover_every_function():
    expected = {(op, dtype) for op in ulp_table.OPS for dtype in DTYPES}
    assert set(vmath.ULP_BOUNDS) == expected
    assert set(ulp_table.OPS) >= vmath.SUPPORTED


@pytest.mark.parametrize("op", ulp_table.OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_ulp_within_bound(op, dtype):
    xs = ulp_table.inputs(op, dtype, SAMPLES, seed=7)
    err, worst = ulp_table.measure(kernels(op), op, dtype, xs)
    bound = vmath.ULP_BOUNDS[(op, dtype)]
    assert err <= bound, f"{op} {dtype}: {err:.3f} ulp > {bound} at {worst}"


def test_ulp_errors_catch_special_value_mismatches():
    """The measure itself: a wrong NaN, infinity or zero sign is an infinite error."""
    hi = np.array([np.nan, np.inf, -0.0, 1.0, 1.0])
    lo = np.zeros(5)
    got = np.array([1.0, np.finfo(np.float64).max, 0.0, np.nan, 1.0 + 2**-52])
    err = ulp_table.ulp_errors(got, hi, lo)
    assert np.all(np.isinf(err[:4])) and err[4] == 1.0


def test_large_trig_arguments():
    """The examples of issue #14: reductions that ran out of bits before."""
    cases = {
        "float32": [3e7, 1e10, -1e30, 3.4e38],
        # The last is the float64 closest to a multiple of pi/2 (r ~ 2**-61 * x's ulp).
        "float64": [1e17, 1e300, -(2.0**1000), 6381956970095103 * 2.0**797],
    }
    for dtype, values in cases.items():
        x = np.array(values, dtype=dtype)
        for op in ("sin", "cos", "tan"):
            got = kernels(op)(op, dtype, x)
            hi, lo, _ = ulp_table.reference(op, dtype, x)
            assert ulp_table.ulp_errors(got, hi, lo).max() <= vmath.ULP_BOUNDS[(op, dtype)]
    sin_3e7 = kernels("sin")("sin", "float32", np.array([3e7], np.float32))[0]
    assert abs(sin_3e7 - 0.9641303) < 1e-6


@pytest.mark.parametrize("name", CODEGEN_TARGETS)
def test_large_trig_arguments_on_every_target(name):
    """The large-argument path (its masked vector variants, the lane walk) on each baseline:
    every lane of a vector large, some lanes large, and the scalar remainder."""
    rng = np.random.default_rng(3)
    with use_codegen_target(name):
        for dtype in DTYPES:
            top = 3e38 if dtype == "float32" else 1e308
            mixed = np.where(
                rng.random(67) < 0.3,
                10.0 ** rng.uniform(5, np.log10(top), 67),
                rng.uniform(-4, 4, 67),
            ) * rng.choice([-1, 1], 67)
            for x in (mixed, 10.0 ** rng.uniform(5, np.log10(top), 67)):
                x = x.astype(dtype)
                for op in ("sin", "cos", "tan"):
                    got = kernels(op)(op, dtype, x)
                    hi, lo, _ = ulp_table.reference(op, dtype, x)
                    err = ulp_table.ulp_errors(got, hi, lo).max()
                    assert err <= vmath.ULP_BOUNDS[(op, dtype)], (name, op, dtype, err)
            code = kernels("sin").object_code()
            assert objects.undefined_symbols(code) == [], name


# kiln's public function for each measured op (the eager result is computed by NumPy).
KILN_FUNCTIONS = ulp_table.resolve_functions(jnp, lax)


# kiln.numpy forms these as log(x) / log(base) (lax has no log2/log10 primitive), so kiln.jit
# does not reach vmath's log2/log10: its bound there is log's plus the rounded constant and the
# division.
COMPOSED = {"log2": ("log", 1.5), "log10": ("log", 1.5)}


@pytest.fixture
def strict_native(monkeypatch):
    """A native-backend failure must fail the test, not fall back to the interpreter (which
    would make jit agree with eager trivially)."""
    monkeypatch.setattr(kiln.config, "native_strict", True)


def _jit_and_eager(dtype: str):
    """(op, inputs, kiln.jit result, eager result) for every op, two jitted programs in all."""
    unary = sorted(op for op in KILN_FUNCTIONS if op not in ulp_table.BINARY)
    binary = sorted(ulp_table.BINARY)
    x = np.concatenate(
        [
            ulp_table.inputs("sin", dtype, 100, seed=11)[0],
            ulp_table.inputs("log1p", dtype, 100, seed=12)[0],
        ]
    )
    pairs = ulp_table.inputs("pow", dtype, 60, seed=13)

    def unary_all(v):
        return [KILN_FUNCTIONS[op](v) for op in unary]

    def binary_all(a, b):
        return [KILN_FUNCTIONS[op](a, b) for op in binary]

    with np.errstate(all="ignore"):
        rows = list(zip(unary, [(x,)] * len(unary), kiln.jit(unary_all)(x), unary_all(x)))
        rows += list(
            zip(binary, [pairs] * len(binary), kiln.jit(binary_all)(*pairs), binary_all(*pairs))
        )
    return rows


@pytest.mark.parametrize("dtype", DTYPES)
def test_jit_agrees_with_eager(dtype, strict_native):
    """kiln.jit's results are within ULP_BOUNDS of the exact values (the whole compiled path,
    not only the kernels above), and within the bound plus one ulp of eager NumPy/SciPy
    wherever those are themselves within an ulp (they are not everywhere: SciPy's erfc tails,
    digamma and lgamma near their zeros, NumPy's cos next to multiples of pi/2)."""
    previous = kiln.config.read("jax_enable_x64")
    kiln.config.update("jax_enable_x64", dtype == "float64")
    try:
        rows = _jit_and_eager(dtype)
    finally:
        kiln.config.update("jax_enable_x64", previous)
    for op, xs, jitted, eager in rows:
        jitted, eager = np.asarray(jitted), np.asarray(eager)
        assert jitted.dtype == eager.dtype == np.dtype(dtype), (op, jitted.dtype, eager.dtype)
        bound = vmath.ULP_BOUNDS[(op, dtype)]
        if op in COMPOSED:
            bound = vmath.ULP_BOUNDS[(COMPOSED[op][0], dtype)] + COMPOSED[op][1]
        exact = ulp_table.reference(op, dtype, *xs)
        jit_err = ulp_table.ulp_errors(jitted, *exact)
        assert jit_err.max() <= bound, f"{op} {dtype}: kiln.jit is {jit_err.max():.2f} ulp off"
        accurate = ulp_table.ulp_errors(eager, *exact) <= 1.0
        # In the same units as the bound (lgamma and digamma scale them for x < 0).
        diff = ulp_table.ulp_errors(
            jitted[accurate],
            eager[accurate].astype(np.float64),
            np.zeros(int(accurate.sum())),
            exact[2][accurate],
        )
        assert diff.max(initial=0.0) <= bound + 1.0, f"{op} {dtype}: jit and eager differ"

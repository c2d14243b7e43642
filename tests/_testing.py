"""Shared test helpers: random argument makers, tolerance-aware comparison against NumPy, the
`OpRecord` row type of the op table (tests/op_records.py) and the harness that checks a row."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

import kiln
from kiln.core import dtypes

# dtype families, as lists of dtypes
BOOLS = [np.dtype(np.bool_)]
SIGNED = [np.dtype(t) for t in (np.int8, np.int16, np.int32)]
UNSIGNED = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32)]
INTS = SIGNED + UNSIGNED
FLOATS = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
FLOAT32 = [np.dtype(np.float32)]
COMPLEX = [np.dtype(np.complex64)]
NUMERIC = INTS + FLOATS
ALL = BOOLS + INTS + FLOATS + COMPLEX

# shapes to cover: scalars, empty arrays, vectors, matrices, higher rank
SHAPES_1 = [(), (0,), (5,), (3, 4), (2, 3, 4)]

DEFAULT_TOL = {
    np.dtype(np.float16): 2e-3,
    np.dtype(ml_dtypes.bfloat16): 1e-2,
    np.dtype(np.float32): 1e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex64): 1e-5,
    np.dtype(np.complex128): 1e-12,
}


def rand(shape, dtype, rng: np.random.Generator, kind: str = "normal") -> np.ndarray:
    """Random data of a dtype. kind: 'normal', 'positive', 'unit' (in (-1, 1)), 'small_int'."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        if kind == "positive":
            return rng.integers(1, 10, shape).astype(dtype)
        low = 0 if dtype.kind == "u" else -10
        return rng.integers(low, 10, shape).astype(dtype)
    if kind == "positive":
        base = rng.uniform(0.1, 4.0, shape)
    elif kind == "unit":
        base = rng.uniform(-0.95, 0.95, shape)
    else:
        base = rng.standard_normal(shape) * 2
    if dtype.kind == "c":
        base = base + 1j * (
            rng.standard_normal(shape) if kind != "positive" else rng.uniform(0.1, 1, shape)
        )
    return np.asarray(base).astype(dtype)


def tolerance(dtype, tol=None) -> float:
    dtype = np.dtype(dtype)
    if isinstance(tol, dict):
        return tol.get(dtype, DEFAULT_TOL.get(dtype, 0))
    if tol is not None:
        return tol
    return DEFAULT_TOL.get(dtype, 0)


def assert_close(actual, expected, tol=None, check_dtype: bool = True, err_msg: str = ""):
    """Compare a kiln result with a NumPy reference: dtype (canonicalized) and values."""
    actual_np = np.asarray(actual)
    expected_np = np.asarray(expected)
    if check_dtype:
        assert actual_np.dtype == dtypes.canonicalize(expected_np.dtype), (
            f"{err_msg}: dtype {actual_np.dtype} != expected {expected_np.dtype}"
        )
    assert actual_np.shape == expected_np.shape, (
        f"{err_msg}: shape {actual_np.shape} != expected {expected_np.shape}"
    )
    t = tolerance(actual_np.dtype, tol)
    if actual_np.dtype.kind in "fcV" or actual_np.dtype == ml_dtypes.bfloat16:
        np.testing.assert_allclose(
            actual_np.astype(np.complex128 if actual_np.dtype.kind == "c" else np.float64),
            expected_np.astype(np.complex128 if expected_np.dtype.kind == "c" else np.float64),
            rtol=t,
            atol=t,
            equal_nan=True,
            err_msg=err_msg,
        )
    else:
        np.testing.assert_array_equal(
            actual_np, expected_np.astype(actual_np.dtype), err_msg=err_msg
        )


@dataclass
class OpRecord:
    """One row of the op table (tests/op_records.py).

    fn: the kiln function under test; ref: its NumPy reference, called on NumPy arrays.
    shapes: a list of argument-shape tuples (one shape per array argument).
    dtypes: dtypes to try (every argument gets the same dtype unless `arg_dtypes` is given).
    kind: how to draw random data (see `draw`), one kind for every argument or a tuple with one
    per argument. arg_dtypes: optional function of the row's dtype giving each argument's dtype.
    out_dtype: optional function of the input dtype giving the expected kiln result dtype when
    it differs from NumPy's. tol: a float or a {dtype: tolerance} dict (see `tolerance`).
    native: the reference runs on the arguments' own dtypes instead of widened ones.
    jit: whether the row has a compiled path worth checking.
    family: the table the row belongs to ("elementwise", "shape", ...); label: the row's name
    where names repeat across tables (defaults to `name`).
    differentiable, linear: which derivative checks apply (conventions in tests/op_records.py).
    """

    name: str
    fn: Callable
    ref: Callable
    shapes: Sequence[tuple]
    dtypes: Sequence[Any]
    kind: Any = "normal"
    tol: Any = None
    out_dtype: Callable | None = None
    static_kwargs: dict = field(default_factory=dict)
    jit: bool = True
    native: bool = False
    arg_dtypes: Callable | None = None
    family: str = ""
    label: str = ""
    differentiable: bool = False
    linear: bool = False

    def __post_init__(self):
        self.label = self.label or self.name

    def cases(self):
        for shapes, dtype in itertools.product(self.shapes, self.dtypes):
            yield shapes, np.dtype(dtype)

    def ids(self):
        return [f"{self.name}-{'x'.join(map(str, s))}-{d.name}" for s, d in self.cases()]


def draw(kind, shape, dtype, rng: np.random.Generator) -> np.ndarray:
    """Random data of one argument. Besides `rand`'s kinds: 'nonzero' (no zeros), 'ge1' (floats
    >= 1), 'shift' (shift amounts, including >= the bit width and negative), 'exponent' (small
    non-negative integers), 'small' (magnitudes that do not overflow); or a function
    (shape, dtype, rng) -> array."""
    dtype = np.dtype(dtype)
    if callable(kind):
        return kind(shape, dtype, rng)
    if kind in ("normal", "positive", "unit", "small_int"):
        return rand(shape, dtype, rng, kind)
    if kind == "nonzero":
        if dtype == np.bool_:
            return np.ones(shape, bool)
        if dtype.kind in "iu":
            low = 1 if dtype.kind == "u" else -9
            values = rng.integers(low, 10, shape)
            return np.where(values == 0, 3, values).astype(dtype)
        base = rng.uniform(0.5, 4, shape) * rng.choice([-1, 1], shape)
        if dtype.kind == "c":
            base = base + 1j * rng.uniform(0.5, 2, shape)
        return np.asarray(base).astype(dtype)
    if kind == "ge1":
        return rng.uniform(1, 4, shape).astype(dtype)
    if kind == "shift":
        bits = 8 * dtype.itemsize
        values = rng.integers(-2, bits + 3, shape)
        return (
            values.astype(dtype)
            if dtype.kind == "i"
            else np.where(values < 0, bits + 5, values).astype(dtype)
        )
    if kind == "exponent":
        return rng.integers(0, 5, shape).astype(dtype)
    if kind == "small":
        if dtype == np.bool_:
            return rng.random(shape) < 0.5
        if dtype.kind in "iu":
            return rng.integers(0 if dtype.kind == "u" else -3, 4, shape).astype(dtype)
        return rng.uniform(-2, 2, shape).astype(dtype)
    raise ValueError(kind)


def make_args(record: OpRecord, shapes, dtype, seed: int = 0) -> list[np.ndarray]:
    """A row's random arguments for one case, drawn per argument kind and dtype."""
    rng = np.random.default_rng(seed)
    kinds = record.kind if isinstance(record.kind, tuple) else (record.kind,) * len(shapes)
    arg_dtypes = record.arg_dtypes(dtype) if record.arg_dtypes else (dtype,) * len(shapes)
    return [
        draw(kind, shape, arg_dtype, rng)
        for kind, shape, arg_dtype in zip(kinds, shapes, arg_dtypes)
    ]


def check_record_eager(record: OpRecord, shapes, dtype) -> None:
    args = make_args(record, shapes, dtype)
    expected = record.ref(*args, **record.static_kwargs)
    actual = record.fn(*[kiln.numpy.asarray(a) for a in args], **record.static_kwargs)
    _compare(record, actual, expected, dtype)


def _compare(record: OpRecord, actual, expected, dtype) -> None:
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _compare(record, a, e, dtype)
        return
    expected = np.asarray(expected)
    if record.out_dtype is not None:
        expected = expected.astype(record.out_dtype(dtype))
    elif expected.dtype != dtypes.canonicalize(expected.dtype) or (
        dtype != expected.dtype
        and dtype.kind == expected.dtype.kind
        and dtype.kind in "fc"
        and dtype.itemsize < expected.dtype.itemsize
    ):
        # NumPy computed in a wider type; kiln keeps the input's (canonical) type.
        expected = expected.astype(
            dtypes.canonicalize(expected.dtype) if dtype.kind != expected.dtype.kind else dtype
        )
    assert_close(actual, expected, record.tol, err_msg=record.name)


def check_record_jit(record: OpRecord, shapes, dtype) -> None:
    """The jitted function equals the eager one."""
    args = [kiln.numpy.asarray(a) for a in make_args(record, shapes, dtype)]
    fn = record.fn
    kwargs = record.static_kwargs
    eager = fn(*args, **kwargs)
    compiled = kiln.jit(lambda *a: fn(*a, **kwargs))(*args)
    flat_e = eager if isinstance(eager, (tuple, list)) else [eager]
    flat_c = compiled if isinstance(compiled, (tuple, list)) else [compiled]
    for e, c in zip(flat_e, flat_c):
        assert np.asarray(c).dtype == np.asarray(e).dtype
        assert_close(c, np.asarray(e), record.tol, err_msg=f"{record.name} (jit)")


# --- code generation targets -------------------------------------------------------------------

#: The targets the codegen tests run for: the host, and baselines every machine of the fleet
#: may be (AVX2 without AVX-512; AVX-512 without FP16), where this host can run their code.
CODEGEN_TARGETS = ("host", "x86-64-v3", "x86-64-v4")


def use_codegen_target(name: str):
    """Context manager: compile for the named target ("host" or a baseline) inside the block;
    skips the test when this machine cannot run that target's code."""
    import contextlib

    import pytest

    from kiln.codegen.llvm import target

    @contextlib.contextmanager
    def pinned():
        if name != "host" and not target.host_can_run(name):
            pytest.skip(f"this CPU cannot run {name} code")
        cpu, features = ("host", "") if name == "host" else target.BASELINES[name][:2]
        saved = kiln.config.cpu, kiln.config.cpu_features
        kiln.config.update("kiln_cpu", cpu)
        kiln.config.update("kiln_cpu_features", features)
        try:
            yield target.current_target()
        finally:
            kiln.config.update("kiln_cpu", saved[0])
            kiln.config.update("kiln_cpu_features", saved[1])

    return pinned()


def per_target_cache(function):
    """functools.cache keyed on the current code generation target as well as the arguments,
    for test data compiled once per target."""
    import functools

    from kiln.codegen.llvm import target

    @functools.cache
    def cached(target_, *args):
        return function(*args)

    @functools.wraps(function)
    def wrapper(*args):
        return cached(target.current_target(), *args)

    return wrapper


# --- 64-bit mode -----------------------------------------------------------------------------


def x64_mode(enabled: bool):
    """Context manager: run the block with jax_enable_x64 set to `enabled`, then restore it."""
    import contextlib

    @contextlib.contextmanager
    def switched():
        previous = kiln.config.read("jax_enable_x64")
        kiln.config.update("jax_enable_x64", enabled)
        try:
            yield enabled
        finally:
            kiln.config.update("jax_enable_x64", previous)

    return switched()


def run_script_json(script: str, *argv: str) -> dict:
    """Run a Python script in a fresh process (without KILN_CACHE_DIR from this one) and
    return the JSON object its last line of output prints."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KILN_CACHE_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", script, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def jit_module(module, symbol: str, signature):
    """(MCJIT engine, ctypes function of `symbol` with the given CFUNCTYPE signature, the
    module's object file) for an llvmlite.ir module, optimized with kiln's pipeline for the
    current codegen target. Keep the engine alive while the function is used."""
    from llvmlite import binding as llvm

    from kiln.codegen.llvm import target

    current = target.current_target()
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    machine = current.create_machine()
    target.optimize(parsed, machine)
    code = current.create_machine().emit_object(llvm.parse_assembly(str(parsed)))
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    return engine, signature(engine.get_function_address(symbol)), code


def results_in_threads(call: Callable, inputs: Sequence, repeats: int) -> list:
    """call(*args) for each args of `inputs`, each on a thread of its own and `repeats` times
    over (all threads at once): the last result of each, in the order of `inputs`."""
    import threading

    results: list = [None] * len(inputs)

    def work(position: int) -> None:
        for _ in range(repeats):
            results[position] = call(*inputs[position])

    threads = [threading.Thread(target=work, args=(p,)) for p in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def first_compile(monkeypatch, fun: Callable, args: Sequence, threads: int):
    """(outputs as NumPy arrays, LLVM modules compiled, [(units, group name)] for each group
    of programs compiled) of fun's first call, jitted with empty caches on `threads` threads
    (kiln.runtime.engine's view of the compile, for the split and row-cut tests)."""
    from kiln.config import config
    from kiln.runtime import engine

    monkeypatch.setattr(config, "num_threads", threads)
    kiln.clear_caches()
    before = engine.compile_stats()["modules"]
    groups = []
    original = engine.Engine._compile_fresh

    def spy(self, pending, verify):
        groups.extend(pending)
        return original(self, pending, verify)

    monkeypatch.setattr(engine.Engine, "_compile_fresh", spy)
    try:
        out = kiln.jit(fun)(*args)
    finally:
        monkeypatch.setattr(engine.Engine, "_compile_fresh", original)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    modules = engine.compile_stats()["modules"] - before
    return [np.asarray(o) for o in outs], modules, groups


def count_rule_runs(monkeypatch) -> dict:
    """{"n": how many lowering rules ExprBuilder has run since}: lower.ExprBuilder.lower
    wrapped to count its calls for the rest of the test."""
    from kiln.compiler import lower

    calls = {"n": 0}
    original = lower.ExprBuilder.lower

    def counting(self, var, index):
        calls["n"] += 1
        return original(self, var, index)

    monkeypatch.setattr(lower.ExprBuilder, "lower", counting)
    return calls

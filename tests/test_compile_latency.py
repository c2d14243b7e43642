"""What keeps a first call cheap stays correct: column reductions split into chunks compile
once per chunk width (an entry reading its chunk's start at run time), in one module, and
every chunk adds its own columns; the
kernels of a program compile as one LLVM module per pipeline, whose entries all load and run,
share the disk cache and are reused by later programs; nested reductions and loop nests over
adjacent axes merge into one loop; every pipeline computes what the interpreter computes."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.codegen.llvm import llvm_pipeline, target
from kiln.compiler import kir, kir_schedule
from kiln.compiler.kir import Buffer, Kernel, Load, Loop, Program, Reduce, ReduceKind, Store, Var
from kiln.runtime import disk_cache, engine, native_segment
from tests._testing import CODEGEN_TARGETS, use_codegen_target

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native

F32 = np.dtype(np.float32)


def _stats() -> dict:
    return dict(engine.compile_stats())


def _delta(before: dict) -> dict:
    after = engine.compile_stats()
    return {name: after[name] - before[name] for name in after}


def _interpreted(fun, *args):
    return kiln.jit(fun, backend="interpret")(*args)


# --- column reductions in chunks ------------------------------------------------------------


def _integers(rng, shape, dtype=np.float32):
    # Small integers: every partial sum is exact, so any order of addition gives one answer
    # and a column added twice or skipped shows.
    return rng.integers(-8, 9, shape).astype(dtype)


@pytest.mark.parametrize("columns", [1024, 1000, 77])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_chunked_column_reduction_compiles_one_module_and_is_exact(columns, dtype):
    rows = max(native_segment.PARALLEL_MIN_WORK // columns + 1, 4096)
    x = _integers(np.random.default_rng(columns), (rows, columns), dtype)
    before = _stats()
    fun = kiln.jit(lambda a: jnp.sum(a, axis=0) * 2)
    result = np.asarray(fun(x))
    np.testing.assert_array_equal(result, x.sum(axis=0, dtype=np.int64).astype(dtype) * 2)
    # one entry per chunk width (one or two), all in one module
    delta = _delta(before)
    assert delta["programs"] <= 2 and delta["modules"] == 1


def test_chunked_float_column_sum_is_accurate():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8192, 512)).astype(np.float32) + 100
    result = np.asarray(kiln.jit(lambda a: jnp.sum(a, axis=0))(x))
    exact = x.astype(np.float64).sum(axis=0)
    np.testing.assert_allclose(result, exact, rtol=2e-6)


def _column_program(columns: int, rows: int, strip_mined: bool = False) -> Program:
    """out[j] = sum(x[k, j] for k) for j in [bounds[0], bounds[1]), as a chunk is compiled;
    strip_mined: out[j] = sum(...) + max(...), which cannot accumulate in place."""
    bounds = Buffer("bounds", np.int64, (2,))
    x = Buffer("x", F32, (rows, columns))
    out = Buffer("out", F32, (columns,), "output")
    j, k = Var("j"), Var("k")
    start = kir.clamp(Load(bounds, kir.as_index(0)), 0, columns)
    stop = kir.clamp(Load(bounds, kir.as_index(1)), 0, columns)
    element = Load(x, kir.index_add(kir.index_mul(k, columns), j))
    total = Reduce(ReduceKind.SUM, k, 0, rows, element)
    if strip_mined:
        total = total + Reduce(ReduceKind.MAX, k, 0, rows, element)
    kernel = Kernel("column", [Loop(j, start, stop, [Store(out, j, total)])])
    return Program("column", [bounds, x, out], [kernel])


def test_schedule_rewrites_column_loops_with_runtime_bounds():
    program = _column_program(300, 64)
    (kernel,) = program.kernels
    scheduled = kir_schedule.schedule_kernel(kernel)
    assert scheduled is not kernel
    # The reduction left the loop over columns: rows are streamed into the output in place.
    loops = [s for s in scheduled.body if isinstance(s, Loop)]
    assert len(loops) > 1


@pytest.mark.parametrize("strip_mined", [False, True])
@pytest.mark.parametrize("edges", [(0, 64, 128, 300), (0, 100, 101, 300), (0, 300)])
def test_runtime_bounded_column_chunks_cover_every_column_once(edges, strip_mined):
    columns, rows = 300, 64
    program = _column_program(columns, rows, strip_mined)
    assert kir_schedule.schedule_kernel(program.kernels[0]) is not program.kernels[0]
    native = engine.compile_program(program)
    x = _integers(np.random.default_rng(1), (rows, columns))
    out = np.full(columns, np.nan, np.float32)
    for lo, hi in zip(edges, edges[1:]):
        bounds = np.array([lo, hi], np.int64)
        native.run(np.array([bounds.ctypes.data, x.ctypes.data, out.ctypes.data], np.uint64))
    expected = x.sum(axis=0) + (x.max(axis=0) if strip_mined else 0)
    np.testing.assert_array_equal(out, expected)


# --- one module per program -------------------------------------------------------------------


def _scaled_program(name: str, factor: float, size: int = 257) -> Program:
    x, y = Buffer("x", F32, (size,)), Buffer("y", F32, (size,), "output")
    i = Var("i")
    return Program(name, [x, y], [Kernel("k", [Loop(i, 0, size, [Store(y, i, x[i] * factor)])])])


def test_compile_many_builds_one_module_whose_entries_all_run():
    host = engine.Engine(target.host_target())
    programs = [_scaled_program(f"scaled_{n}", 1.5 + n) for n in range(5)]
    natives = host.compile_many(programs)
    assert host.stats == {"programs": 5, "reused": 0, "modules": 1}
    x = np.arange(257, dtype=F32)
    for n, native in enumerate(natives):
        np.testing.assert_array_equal(native(x)[0], x * np.float32(1.5 + n))
    # Compiled again (with one new program), the loaded ones are reused.
    again = host.compile_many(programs[:2] + [_scaled_program("scaled_9", 10.5)])
    assert again[:2] == natives[:2]
    assert host.stats == {"programs": 8, "reused": 2, "modules": 2}
    np.testing.assert_array_equal(again[2](x)[0], x * np.float32(10.5))


def test_compile_many_shares_identical_programs():
    host = engine.Engine(target.host_target())
    first, second = host.compile_many([_scaled_program("same", 2.0), _scaled_program("same", 2.0)])
    assert first is second and host.stats["modules"] == 1


def test_programs_that_differ_only_in_name_share_one_machine_code():
    host = engine.Engine(target.host_target())
    first = host.compile(_scaled_program("forward_0", 2.0))
    second = host.compile(_scaled_program("other_0", 2.0))
    assert second is first and host.stats == {"programs": 2, "reused": 1, "modules": 1}
    x = np.arange(257, dtype=F32)
    np.testing.assert_array_equal(second(x)[0], x * np.float32(2.0))
    # Anything else that differs is another program: a constant, a size.
    assert host.compile(_scaled_program("other_0", 3.0)) is not first
    assert host.compile(_scaled_program("other_0", 2.0, size=256)) is not first
    assert host.stats["modules"] == 3


def test_the_same_computation_jitted_under_another_name_compiles_no_module():
    """A second function computing what a first one did (another name, so another program
    name) runs the first one's machine code: before, the program's name was part of the key
    of the engine's table, and the second compile cost as much as the first."""
    x = np.random.default_rng(3).standard_normal((64, 300)).astype(np.float32)

    def normalized(a):
        c = a - jnp.mean(a, axis=-1, keepdims=True)
        return jnp.exp(c) / jnp.sum(jnp.exp(c), axis=-1, keepdims=True) + 0.125

    def also_normalized(a):
        return normalized(a)

    first = np.asarray(kiln.jit(normalized)(x))
    before = _stats()
    second = np.asarray(kiln.jit(also_normalized)(x))
    delta = _delta(before)
    assert delta["modules"] == 0 and delta["reused"] == delta["programs"] >= 1, delta
    np.testing.assert_array_equal(second, first)
    c = x.astype(np.float64) - x.mean(axis=-1, keepdims=True)
    expected = np.exp(c) / np.exp(c).sum(axis=-1, keepdims=True) + 0.125
    np.testing.assert_allclose(second, expected, rtol=2e-6, atol=1e-7)


def test_one_module_per_pipeline():
    host = engine.Engine(target.host_target())
    programs = [_scaled_program(f"p{n}", 1.0 + n) for n in range(3)]
    natives = host.compile_many(programs, pipelines=["quick", "lean", "full"])
    assert host.stats["modules"] == 3
    x = np.linspace(-3, 3, 257, dtype=F32)
    for n, native in enumerate(natives):
        np.testing.assert_array_equal(native(x)[0], x * np.float32(1.0 + n))


def _cached_engine(directory) -> engine.Engine:
    host = target.host_target()
    cache = disk_cache.DiskCache(disk_cache.usable_directory(directory), disk_cache.identity(host))
    return engine.Engine(host, cache)


def test_combined_module_round_trips_through_the_disk_cache(tmp_path):
    programs = [_scaled_program(f"cached_{n}", 0.5 + n) for n in range(3)]
    writer = _cached_engine(tmp_path)
    compiled = writer.compile_many(programs)
    assert writer.disk_cache.stats.writes == 1 and len(list(tmp_path.glob("*.kiln"))) == 1
    reader = _cached_engine(tmp_path)
    loaded = reader.compile_many(programs)
    assert reader.disk_cache.stats.hits == 1 and reader.stats["modules"] == 0
    x = np.arange(257, dtype=F32)
    for n, (a, b) in enumerate(zip(compiled, loaded)):
        assert a.symbol == b.symbol
        np.testing.assert_array_equal(b(x)[0], x * np.float32(0.5 + n))


def test_the_optimized_ir_is_made_when_read_and_is_the_one_a_compile_prints(tmp_path):
    # A compile prints its optimized modules only for the disk cache; without one the text is
    # made again from the modules' IR when first read, and must be the same text.
    pipelines = ["quick", "lean", "full", "vector"]
    programs = [_scaled_program(f"text_{n}", 1.5 + n) for n in range(len(pipelines))]
    printed = _cached_engine(tmp_path).compile_many(programs, pipelines=pipelines)
    later = engine.Engine(target.host_target()).compile_many(programs, pipelines=pipelines)
    for before, after in zip(printed, later):
        assert isinstance(before._llvm_ir, str)
        assert isinstance(after._llvm_ir, engine._OptimizedText)  # (not printed)
        assert after.llvm_ir == before.llvm_ir and "define" in after.llvm_ir
        assert after.asm == before.asm


def test_a_streamed_compile_prints_no_module_and_its_text_matches(monkeypatch, tmp_path):
    # The layernorm+softmax forward compiles as two modules on two threads (a row cut).
    from kiln.config import config
    from tests._testing import first_compile

    def forward(x, g, b):
        c = x - jnp.mean(x, axis=-1, keepdims=True)
        z = c * lax.rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + 1e-5) * g + b
        e = jnp.exp(z - lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True)))
        return e / jnp.sum(e, axis=-1, keepdims=True)

    rng = np.random.default_rng(5)
    args = (rng.standard_normal((96, 160)).astype(F32), np.ones(160, F32), np.zeros(160, F32))
    printing = []
    compile_module = llvm_pipeline.compile_module_private

    def spy(module, machine, pipeline="full", passes=None, text=True):
        printing.append(text)
        return compile_module(module, machine, pipeline, passes, text)

    monkeypatch.setattr(llvm_pipeline, "compile_module_private", spy)

    def texts() -> list[str]:
        return [
            n.llvm_ir
            for n in list(engine.engine()._programs.values())
            if n.llvm_ir and engine.MODULE_SEPARATOR in n.llvm_ir
        ]

    lazy, modules, _ = first_compile(monkeypatch, forward, args, 2)
    assert modules == 2 and printing == [False, False]
    (made,) = texts()
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    printing.clear()
    cached, _, _ = first_compile(monkeypatch, forward, args, 2)
    assert printing == [True, True]
    (printed,) = texts()
    assert made == printed and made.count("define") >= 2
    np.testing.assert_array_equal(lazy[0], cached[0])


def test_combined_module_passes_the_symbol_check():
    # Entries that call libm and kiln's builtins, linked from one object.
    size = 300
    x = Buffer("x", F32, (size,))
    programs = []
    operations = (kir.ScalarOp.EXP, kir.ScalarOp.LOG, kir.ScalarOp.TANH)
    for n, operation in enumerate(operations):
        y = Buffer("y", F32, (size,), "output")
        i = Var("i")
        value = kir.op(operation, x[i] * 0.5 + 2.0)
        programs.append(
            Program(f"math_{n}", [x, y], [Kernel("k", [Loop(i, 0, size, [Store(y, i, value)])])])
        )
    natives = engine.Engine(target.host_target()).compile_many(programs)
    data = np.linspace(-2, 2, size, dtype=F32)
    for native, reference in zip(natives, (np.exp, np.log, np.tanh)):
        expected = reference(data.astype(np.float64) * 0.5 + 2.0)
        np.testing.assert_allclose(native(data)[0], expected, rtol=1e-5, atol=1e-6)


def test_a_program_with_several_segments_compiles_one_module_per_pipeline():
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((64, 32), np.float32), rng.standard_normal((32, 8), np.float32)
    x = rng.standard_normal((16, 64), np.float32)

    def host_copy(h):
        return np.array(h)

    def forward(w1, w2, x):
        h = jnp.tanh(x @ w1 + 1.0)
        # A host callback cannot be compiled: the native code before and after it are two
        # segments.
        h = kiln.pure_callback(host_copy, kiln.ShapeDtypeStruct(h.shape, h.dtype), h)
        return jax_softmax(h @ w2) ** 2

    def jax_softmax(z):
        e = jnp.exp(z - jnp.max(z, axis=-1, keepdims=True))
        return e / jnp.sum(e, axis=-1, keepdims=True)

    before = _stats()
    got = kiln.jit(forward)(w1, w2, x)
    delta = _delta(before)
    assert delta["programs"] >= 2
    assert delta["modules"] <= len(llvm_pipeline.PIPELINES)
    h = np.tanh(x.astype(np.float64) @ w1 + 1.0) @ w2
    e = np.exp(h - h.max(-1, keepdims=True))
    np.testing.assert_allclose(
        np.asarray(got), (e / e.sum(-1, keepdims=True)) ** 2, rtol=1e-4, atol=1e-6
    )


# --- merged reductions and loop nests ---------------------------------------------------------


def _scheduled(fun, *args) -> list[Kernel]:
    """The scheduled kernels of the native segments jit(fun) compiles."""
    captured: list[Program] = []
    original = engine.compile_programs

    def capture(programs, verify=True, pipelines=None):
        captured.extend(programs)
        return original(programs, verify, pipelines)

    engine.compile_programs = capture
    try:
        kiln.jit(fun)(*args)
    finally:
        engine.compile_programs = original
    return [kir_schedule.schedule_kernel(k) for p in captured for k in p.kernels]


def _nested_reductions(kernel: Kernel) -> int:
    exprs = [e for s in kir.walk_stmts(kernel.body) for e in kir.stmt_exprs(s)]
    return sum(isinstance(n, Reduce) and isinstance(n.value, Reduce) for n in kir.toposort(exprs))


def _depth(body) -> int:
    return max((1 + _depth(s.body) for s in body if isinstance(s, Loop)), default=0)


def _broadcast_grad_3d(x, s):
    return jnp.sum(jnp.tanh(x) * s)


def _layernorm_grad_3d(x, s):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return jnp.sum(((x - m) * lax.rsqrt(v + 1e-5) * s) ** 2)


@pytest.mark.parametrize("fun", [_broadcast_grad_3d, _layernorm_grad_3d])
def test_gradient_of_a_vector_broadcast_over_3d_merges_its_reductions(fun):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 32, 64)).astype(np.float32)
    s = (1 + 0.1 * rng.standard_normal(64)).astype(np.float32)
    grad = kiln.grad(fun, argnums=1)
    kernels = _scheduled(grad, x, s)
    assert kernels and all(_nested_reductions(k) == 0 for k in kernels)
    got = np.asarray(kiln.jit(grad)(x, s))
    np.testing.assert_allclose(got, np.asarray(_interpreted(grad, x, s)), rtol=2e-5, atol=1e-5)


def test_merged_reduction_over_leading_axes_is_exact():
    x = _integers(np.random.default_rng(2), (6, 7, 33))
    got = np.asarray(kiln.jit(lambda a: jnp.sum(a, axis=(0, 1)))(x))
    np.testing.assert_array_equal(got, x.sum(axis=(0, 1)))


def test_reductions_over_axes_that_are_not_adjacent_stay_nested():
    x = _integers(np.random.default_rng(4), (6, 5, 7))
    kernels = _scheduled(lambda a: jnp.sum(a, axis=(0, 2)), x)
    assert any(_nested_reductions(k) for k in kernels)
    got = np.asarray(kiln.jit(lambda a: jnp.sum(a, axis=(0, 2)))(x))
    np.testing.assert_array_equal(got, x.sum(axis=(0, 2)))


def test_elementwise_loop_nest_merges_into_one_loop():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((2, 8, 16, 32)).astype(np.float32)

    def fun(a, b):
        return jnp.exp(a) * b + 1.0

    (kernel,) = _scheduled(fun, a, b)
    assert _depth(kernel.body) == 1
    expected = np.exp(a.astype(np.float64)) * b + 1
    np.testing.assert_allclose(np.asarray(kiln.jit(fun)(a, b)), expected, rtol=1e-6, atol=1e-6)


def test_loop_nest_keeps_the_levels_its_body_tells_apart():
    # The mask reads the last two loop variables: those levels stay; the two outer ones merge.
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)

    def fun(a, bias):
        return jnp.where(jnp.tril(jnp.ones((8, 8), bool)), a + bias, -1.0)

    (kernel,) = _scheduled(fun, a, bias)
    assert _depth(kernel.body) == 3
    expected = np.where(np.tril(np.ones((8, 8), bool)), a + bias, -1.0)
    np.testing.assert_array_equal(np.asarray(kiln.jit(fun)(a, bias)), expected)


def test_loop_merge_unit():
    x = Buffer("x", F32, (4, 6, 5))
    y = Buffer("y", F32, (4, 6, 5), "output")
    i0, i1, i2 = Var("i0"), Var("i1"), Var("i2")
    index = kir.affine([(i0, 30), (i1, 5), (i2, 1)])
    body = [
        Loop(i0, 0, 4, [Loop(i1, 0, 6, [Loop(i2, 0, 5, [Store(y, index, Load(x, index) + 1.0)])])])
    ]
    (merged,) = kir_schedule.merge_nested_loops(body)
    assert isinstance(merged, Loop) and merged.stop.value == 120 and _depth([merged]) == 1
    native = engine.compile_program(Program("merged", [x, y], [Kernel("k", body)]))
    data = np.arange(120, dtype=F32).reshape(4, 6, 5)
    np.testing.assert_array_equal(native(data)[0], data + 1)


# --- pipelines --------------------------------------------------------------------------------


@pytest.mark.parametrize("codegen_target", CODEGEN_TARGETS)
@pytest.mark.parametrize("pipeline", ["quick", "lean"])
def test_the_assembly_shown_is_the_code_that_runs(pipeline, codegen_target):
    """A program's assembly (KILN_DUMP=asm, as_text) comes from the code generator level its
    pipeline ran: a "quick" module's level-0 code loads w on its own, where level 3 folds
    the load into the FMA. It was shown at level 3 whatever ran. Both levels fuse x * y + w
    into one FMA, one rounding (level 0's fast instruction selection, which kept two, is
    off: llvm_pipeline.CODEGEN_OPTIONS). Operands where one and two roundings differ:
    x * y = 1 + 2^-11 + 2^-24, whose last term one rounding keeps and two lose (ties to
    even)."""
    x, y, w = (Buffer(n, F32, (1,)) for n in "xyw")
    z = Buffer("z", F32, (1,), "output")
    i = Var("i")
    program = Program(
        f"fused_{pipeline}",
        [x, y, w, z],
        [Kernel("k", [Loop(i, 0, 1, [Store(z, i, x[i] * y[i] + w[i])])])],
    )
    with use_codegen_target(codegen_target) as chosen:
        (native,) = engine.Engine(chosen).compile_many([program], pipelines=[pipeline])
    near_one = np.array([1 + 2.0**-12], F32)
    (got,) = native(near_one, near_one, np.array([-(1 + 2.0**-11)], F32))
    assert got[0] == np.float32(2.0**-24)
    assert "vfmadd" in native.asm and "vmulss" not in native.asm
    folded = re.search(r"vfmadd\w+\s+-?\w*\(", native.asm) is not None
    assert folded == (pipeline == "lean"), native.asm


@pytest.mark.parametrize("codegen_target", CODEGEN_TARGETS)
@pytest.mark.parametrize("size", [1, 3, 17, 1000, 100_000])
def test_a_multiply_add_rounds_once_at_every_size(size, codegen_target):
    """x * y + w is one fused multiply-add, one rounding, whatever the program's size and so
    its code generator level (small programs compile with the quick pipelines, at level 0;
    there, fast instruction selection kept two roundings for scalar code until it was
    turned off). XLA fuses it at every size too."""
    rng = np.random.default_rng(7)
    x, y, w = (rng.standard_normal(size).astype(F32) for _ in range(3))
    with use_codegen_target(codegen_target):
        got = np.asarray(kiln.jit(lambda x, y, w: x * y + w)(x, y, w))
    exact = x.astype(np.float64) * y + w  # (x * y is exact in float64, the sum rounded)
    once = exact.astype(F32)
    # (the sum's rounding in float64 could only change `once` where it lands on a float32
    # tie; none does here)
    assert not (np.abs(exact - once) == np.abs(np.spacing(once)).astype(np.float64) / 2).any()
    np.testing.assert_array_equal(got, once)
    if size >= 1000:  # (where one rounding and two differ somewhere: the test can fail)
        assert (once != x * y + w).any()


@pytest.mark.parametrize("codegen_target", CODEGEN_TARGETS)
@pytest.mark.parametrize("pipeline", sorted(llvm_pipeline.PIPELINES))
def test_every_pipeline_computes_the_same_values(pipeline, codegen_target):
    size = 1000
    x = Buffer("x", F32, (size,))
    y = Buffer("y", F32, (size,), "output")
    i, k = Var("i"), Var("k")
    total = Reduce(ReduceKind.SUM, k, 0, size, x[k])
    value = kir.op(kir.ScalarOp.EXP, x[i] * 0.25) / (total + 2000.0)
    program = Program("tiered", [x, y], [Kernel("k", [Loop(i, 0, size, [Store(y, i, value)])])])
    with use_codegen_target(codegen_target) as chosen:
        (native,) = engine.Engine(chosen).compile_many([program], pipelines=[pipeline])
    data = np.linspace(-4, 4, size, dtype=F32)
    expected = np.exp(data.astype(np.float64) * 0.25) / (data.astype(np.float64).sum() + 2000)
    np.testing.assert_allclose(native(data)[0], expected, rtol=2e-6)


def test_product_kernels_compile_with_the_quick_pipeline(monkeypatch):
    # A product kernel only calls the kernel library (or BLAS), which does the work whatever
    # LLVM pipeline the call was compiled with: it gets the quick one, except in a loop body.
    assert native_segment._pipeline(1 << 30, products=True) == "quick"
    assert native_segment._pipeline(1 << 30) == "lean"
    with native_segment.loop_body():
        assert native_segment._pipeline(1 << 30, products=True) == "lean"
    from kiln.config import config

    monkeypatch.setattr(config, "num_threads", 2)  # (kernels of a parallel segment)
    kiln.clear_caches()
    chosen = []
    original = native_segment._pipeline
    monkeypatch.setattr(
        native_segment,
        "_pipeline",
        lambda work, products=False: (
            chosen.append((products, original(work, products))) or chosen[-1][1]
        ),
    )
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((256, 320), F32), rng.standard_normal((320, 160), F32)
    got = np.asarray(kiln.jit(lambda a, b: jnp.tanh(a @ b) * 2.0)(x, w))
    np.testing.assert_allclose(got, np.tanh(x.astype(np.float64) @ w) * 2, rtol=1e-4, atol=1e-4)
    assert (True, "quick") in chosen  # the product
    assert any(not products for products, _ in chosen)  # the tanh


@pytest.mark.parametrize("codegen_target", CODEGEN_TARGETS)
def test_quick_modules_of_vector_code_take_the_short_passes(monkeypatch, codegen_target):
    # A quick module whose loops kiln emitted as vector code is optimized with the short pass
    # list ("quick vector"), not LLVM's O1 pipeline; one with a scalar loop, or with a module
    # emitted before linked in, keeps the pipeline its programs asked for.
    vector, scalar = type("M", (), {"scalar_loops": 0}), type("M", (), {"scalar_loops": 1})
    assert engine._module_pipeline("quick", vector, []) == "quick vector"
    assert engine._module_pipeline("lean", vector, []) == "vector"
    assert engine._module_pipeline("quick", scalar, []) == "quick"
    assert engine._module_pipeline("quick", vector, [("ir", None, set())]) == "quick"
    assert llvm_pipeline.CODEGEN_LEVELS["quick vector"] == llvm_pipeline.CODEGEN_LEVELS["quick"]
    used = []  # (the pipeline chosen, whether this process or the worker then compiles)
    original = engine._module_pipeline
    monkeypatch.setattr(
        engine,
        "_module_pipeline",
        lambda pipeline, module, linked: (
            used.append(original(pipeline, module, linked)) or used[-1]
        ),
    )
    size = 4096
    x = Buffer("x", F32, (size,))
    y = Buffer("y", F32, (size,), "output")
    i = Var("i")
    value = kir.op(kir.ScalarOp.EXP, x[i] * 0.5) - x[i]
    program = Program("quick_vec", [x, y], [Kernel("k", [Loop(i, 0, size, [Store(y, i, value)])])])
    with use_codegen_target(codegen_target) as chosen:
        (native,) = engine.Engine(chosen).compile_many([program], pipelines=["quick"])
    assert used == ["quick vector"]
    data = np.linspace(-6, 6, size, dtype=F32)
    expected = np.exp(data.astype(np.float64) * 0.5) - data
    np.testing.assert_allclose(native(data)[0], expected, rtol=2e-6, atol=1e-6)


def _run_fresh(code: str, name: str, value: str | None) -> str:
    """What `code` prints in a fresh interpreter whose environment has `name` set to `value`
    (unset when None)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != name}
    if value is not None:
        env[name] = value
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout


@pytest.mark.parametrize("setting, frozen", [(None, True), ("0", False)])
def test_the_first_native_compile_freezes_the_heap(setting, frozen):
    # A full collection during a first compile walked ~50 thousand import-time objects (~18
    # ms); the first native compile freezes them (gc.freeze) unless KILN_FREEZE_HEAP=0.
    code = (
        "import gc, numpy as np, kiln\n"
        "before = gc.get_freeze_count()\n"
        "out = kiln.jit(lambda x: x * 2.0 + 1.0)(np.arange(4.0, dtype=np.float32))\n"
        "kiln.jit(lambda x: x - 1.0)(np.arange(4.0, dtype=np.float32))\n"
        "print(before, gc.get_freeze_count() > before, np.asarray(out).tolist())\n"
    )
    out = _run_fresh(code, "KILN_FREEZE_HEAP", setting).split(maxsplit=2)
    # Importing kiln freezes nothing: the count before is the interpreter's own at start-up
    # (0 on 3.11 and 3.13, 375 on 3.12.1).
    start = _run_fresh("import gc; print(gc.get_freeze_count())", "KILN_FREEZE_HEAP", setting)
    assert out[0] == start.strip() and out[1] == str(frozen)
    assert out[2].strip() == "[1.0, 3.0, 5.0, 7.0]"


_COMPILER_MODULES = (
    "kiln.runtime.native",
    "kiln.runtime.engine",
    "kiln.compiler.fusion",
    "kiln.codegen.llvm.emit",
    "kiln.codegen.llvm.emit_rows",
)


@pytest.mark.parametrize("backend", [None, "interpret", "no-such-backend"])
def test_importing_kiln_loads_the_configured_backends_compiler(backend):
    # `import kiln` loads the native compiler's modules, as `import jax` loads XLA, so that a
    # first call traces, compiles and runs, and imports nothing (a softmax: row reductions
    # and exp, from the vector math library). Under another backend the native
    # compiler is not loaded; an unknown KILN_BACKEND still imports, and jit reports it.
    code = (
        "import sys, numpy as np, kiln, kiln.numpy as jnp\n"
        f"print(all(m in sys.modules for m in {_COMPILER_MODULES!r}))\n"
        "if kiln.config.backend != 'native':\n"
        "    try:\n"
        "        print(np.asarray(kiln.jit(lambda x: x * 3.0)(np.float32(2.0))).item())\n"
        "    except ValueError as err:\n"
        "        print(type(err).__name__, str(err).split(';')[0])\n"
        "    raise SystemExit\n"
        "before = set(sys.modules)\n"
        "x = np.linspace(-3, 3, 512 * 256, dtype=np.float32).reshape(512, 256)\n"
        "def softmax(x):\n"
        "    e = jnp.exp(x - x.max(-1, keepdims=True))\n"
        "    return e / e.sum(-1, keepdims=True)\n"
        "out = np.asarray(kiln.jit(softmax)(x))\n"
        "e = np.exp(x.astype(np.float64))\n"
        "print(sorted(m for m in set(sys.modules) - before if m.startswith('kiln')),\n"
        "      np.abs(out - e / e.sum(-1, keepdims=True)).max() < 1e-6)\n"
    )
    lines = _run_fresh(code, "KILN_BACKEND", backend).splitlines()
    assert lines[0] == str(backend is None)
    if backend is None:
        assert lines[1] == "[] True"
    elif backend == "interpret":
        assert lines[1] == "6.0"
    else:
        assert lines[1] == "ValueError Unknown backend 'no-such-backend'"

"""Row parts (kiln.codegen.llvm.emit_rows): a lone program whose work is one large row kernel
is compiled as two LLVM modules, the kernel's row reductions and first statements in one, the
rest in the other, on two threads. The bits are those of the uncut kernel, the modules hold
what they should, a warm start loads both, and kernels that cannot be cut are left whole."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.codegen.llvm import emit_rows
from kiln.compiler import kir
from kiln.compiler.kir import Buffer, Kernel, Loop, Reduce, ReduceKind, Store, Var
from kiln.config import config
from kiln.runtime import engine
from kiln.codegen.llvm import target
from tests._testing import first_compile, use_codegen_target

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native


def layernorm_softmax(x, g, b):
    c = x - jnp.mean(x, axis=-1, keepdims=True)
    z = c * lax.rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + 1e-5) * g + b
    z = z - lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    e = jnp.exp(z)
    return e / jnp.sum(e, axis=-1, keepdims=True)


def _numpy_layernorm_softmax(x, g, b):
    x = x.astype(np.float64)
    c = x - x.mean(axis=-1, keepdims=True)
    z = c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + 1e-5) * g + b
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _inputs(rows=96, columns=160):
    rng = np.random.default_rng(11)
    return (
        rng.standard_normal((rows, columns)).astype(np.float32),
        (1 + 0.1 * rng.standard_normal(columns)).astype(np.float32),
        (0.1 * rng.standard_normal(columns)).astype(np.float32),
    )


def _compile(monkeypatch, fun, args, threads: int):
    """(outputs, modules compiled, the groups' names) of fun's first call on `threads`."""
    outs, modules, groups = first_compile(monkeypatch, fun, args, threads)
    return outs, modules, [group for _, group in groups]


def test_a_row_kernel_compiles_as_two_modules_with_the_same_bits(monkeypatch):
    args = _inputs()
    cut, modules, groups = _compile(monkeypatch, layernorm_softmax, args, 2)
    whole, whole_modules, whole_groups = _compile(monkeypatch, layernorm_softmax, args, 1)
    assert modules == 2 and [g.endswith(" rows") for g in groups] == [True]
    assert whole_modules == 1 and not whole_groups[0].endswith(" rows")
    np.testing.assert_array_equal(cut[0], whole[0])
    np.testing.assert_allclose(cut[0], _numpy_layernorm_softmax(*args), rtol=2e-5, atol=1e-7)


def _layernorm_gradient(args, seed: int):
    """The gradient w.r.t. x, g and b of sum(layernorm_softmax(x, g, b) * target)."""
    target = np.random.default_rng(seed).standard_normal(args[0].shape).astype(np.float32)

    def loss(x, g, b):
        return jnp.sum(layernorm_softmax(x, g, b) * target)

    return kiln.grad(loss, argnums=(0, 1, 2))


def _same_bits_and_close_to_the_interpreter(grad, args, cut, whole):
    for a, b in zip(cut, whole):
        np.testing.assert_array_equal(a, b)
    reference = kiln.jit(grad, backend="interpret")(*args)
    for got, want in zip(cut, reference):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-6)


def test_the_gradient_of_a_row_kernel_keeps_its_bits_when_cut(monkeypatch):
    args = _inputs(64, 128)
    grad = _layernorm_gradient(args, 3)
    cut, modules, groups = _compile(monkeypatch, grad, args, 2)
    whole, _, _ = _compile(monkeypatch, grad, args, 1)
    assert modules == 2 and groups[0].endswith(" rows")
    _same_bits_and_close_to_the_interpreter(grad, args, cut, whole)


def test_a_row_kernel_next_to_a_small_program_is_cut_too(monkeypatch):
    # On two threads each kernel of the gradient is a program of its own: the row kernel,
    # with the layernorm's scale and bias sums folded in, and the small kernel that adds
    # their blocks. The row kernel outweighs it, so it is cut: three modules.
    from kiln.runtime import native_segment

    monkeypatch.setattr(native_segment, "PARALLEL_MIN_WORK", 1000)
    args = _inputs(256, 128)
    grad = _layernorm_gradient(args, 4)
    cut, modules, groups = _compile(monkeypatch, grad, args, 2)
    assert modules == 3 and [g.endswith(" rows") for g in groups].count(True) == 1
    with monkeypatch.context() as patch:  # (the row kernel left whole)
        patch.setattr(engine.Engine, "_assign_rows", staticmethod(lambda units, missing: False))
        whole, whole_modules, _ = _compile(monkeypatch, grad, args, 2)
    assert whole_modules == 2
    _same_bits_and_close_to_the_interpreter(grad, args, cut, whole)


def _defined(module_text: str) -> list[str]:
    return re.findall(r'^define [^@]*@"?([\w.]+)"?\(', module_text, re.M)


def test_the_row_part_module_exports_only_the_row_part(monkeypatch):
    # The forward can only be cut right after its three row reductions, and the rest (the
    # exp loop, the sum, the division) is the heavier part: it is module 0, emitted first.
    _compile(monkeypatch, layernorm_softmax, _inputs(), 2)
    (native,) = [
        n
        for n in list(engine.engine()._programs.values())
        if n.llvm_ir and engine.MODULE_SEPARATOR in n.llvm_ir
    ]
    first, second = native.llvm_ir.split(engine.MODULE_SEPARATOR)
    assert _defined(first) == [native.symbol]  # (the driver and the rest inlined)
    assert _defined(second) == [f"{native.symbol}.k0.rows0"]
    assert "alwaysinline" in native.unoptimized_ir


def test_the_heavier_part_is_emitted_first(monkeypatch):
    # Whichever part module 0 holds, it starts compiling on the helper thread first: the
    # rest of the forward, the row part of the gradient (see the cut tests below).
    import llvmlite.binding as llvm

    from kiln.runtime import llvm_threads

    order = []
    submit = llvm_threads.Stream.submit

    def recording(self, name, build, pipeline):
        module = build(llvm.create_context())
        order.append(sorted(f.name for f in module.functions if not f.is_declaration))
        return submit(self, name, build, pipeline)

    monkeypatch.setattr(llvm_threads.Stream, "submit", recording)
    _compile(monkeypatch, layernorm_softmax, _inputs(), 2)
    assert len(order) == 2
    assert not any(name.endswith(".rows0") for name in order[0])
    assert any(name.endswith(".rows0") for name in order[1])
    order.clear()
    args = _inputs(64, 128)
    _compile(monkeypatch, _layernorm_gradient(args, 3), args, 2)
    assert len(order) == 2
    assert any(name.endswith(".rows0") for name in order[0])


def test_a_warm_start_loads_both_modules(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    args = _inputs()
    first, modules, _ = _compile(monkeypatch, layernorm_softmax, args, 2)
    assert modules == 2
    engine._ENGINES.clear()  # (a new engine finds both objects on disk)
    again, modules, _ = _compile(monkeypatch, layernorm_softmax, args, 2)
    assert modules == 0
    np.testing.assert_array_equal(first[0], again[0])


# --- where a kernel is cut ---------------------------------------------------------------------

F32 = np.dtype(np.float32)


def _row_kernel(per_kernel_sum: bool = False, columns: int = 64):
    """Three loops over each row that use the row's max and sum of squares of x (the last
    the max alone); with per_kernel_sum, a sum of w that no row changes is used too."""
    x = Buffer("x", F32, (32, columns))
    w = Buffer("w", F32, (columns,))
    y = Buffer("y", F32, (32, columns), "output")
    z = Buffer("z", F32, (32, columns), "output")
    i, j, k, m = Var("i"), Var("j"), Var("k"), Var("m")
    row_max = Reduce(ReduceKind.MAX, k, 0, columns, x[i, k])
    row_sum = Reduce(ReduceKind.SUM, m, 0, columns, x[i, m] * x[i, m])
    scale = kir.Op(kir.ScalarOp.EXP, [x[i, j] - row_max])
    if per_kernel_sum:
        scale = scale * Reduce(ReduceKind.SUM, m, 0, columns, w[m])
    body = [
        Loop(j, 0, columns, [Store(y, (i, j), kir.Op(kir.ScalarOp.TANH, [scale]) / row_sum)]),
        Loop(j, 0, columns, [Store(z, (i, j), kir.Op(kir.ScalarOp.LOG1P, [y[i, j] * w[j]]))]),
        Loop(j, 0, columns, [Store(y, (i, j), kir.Op(kir.ScalarOp.TANH, [z[i, j]]) * row_max)]),
    ]
    return Kernel("rows", [Loop(i, 0, 32, body)])


def test_a_cut_passes_the_reductions_the_second_part_uses():
    cut = emit_rows.split_point(_row_kernel())
    assert cut is not None
    # The first part computes both row reductions; the second uses those its statements read.
    assert 0 <= cut.statements < 3
    second = _row_kernel().body[0].body[cut.statements :]
    used = {n for n in kir.toposort([e for s in kir.walk_stmts(second) for e in kir.stmt_exprs(s)])}
    kernel = _row_kernel()
    reductions = emit_rows.row_reductions(kernel, kernel.body[0])
    assert len(reductions) == 2
    assert set(cut.passed) == {r for r in reductions if r in used}


def test_the_first_part_is_the_heavier_one():
    # Module 0 compiles while module 1 is still emitted, so the cut gives it FIRST_PART_LEAD
    # (1.6) times module 1's weight: of ten equal statements (a loop and an exp each), six.
    x = Buffer("x", F32, (64, 32))
    ys = [Buffer(f"y{n}", F32, (64, 32), "output") for n in range(10)]
    i, j = Var("i"), Var("j")
    body = [
        Loop(j, 0, 32, [Store(y, (i, j), kir.Op(kir.ScalarOp.EXP, [x[i, j] * (n + 1.0)]))])
        for n, y in enumerate(ys)
    ]
    assert emit_rows.FIRST_PART_LEAD == 1.6
    assert emit_rows.split_point(Kernel("ten", [Loop(i, 0, 64, body)])).statements == 6


def _softmax_rows():
    """A softmax after a row's sum, sum of squares and max (the forward's shape), over a
    (64, 32) x into outputs y and z: (the buffers, the three reductions, the row loop's body
    and its variables i, j, k)."""
    x = Buffer("x", F32, (64, 32))
    y, z = Buffer("y", F32, (64, 32), "output"), Buffer("z", F32, (64, 32), "output")
    i, j, k = Var("i"), Var("j"), Var("k")
    total = Reduce(ReduceKind.SUM, k, 0, 32, x[i, k])
    squares = Reduce(ReduceKind.SUM, k, 0, 32, x[i, k] * x[i, k])
    top = Reduce(ReduceKind.MAX, k, 0, 32, x[i, k])
    body = [
        Loop(j, 0, 32, [Store(y, (i, j), kir.Op(kir.ScalarOp.EXP, [x[i, j] - top]) / total)]),
        Loop(j, 0, 32, [Store(z, (i, j), y[i, j] * squares)]),
        Loop(j, 0, 32, [Store(y, (i, j), z[i, j] + x[i, j])]),
    ]
    return (x, y, z), (total, squares, top), body, (i, j, k)


def test_module_zero_is_the_rest_when_only_a_light_row_part_can_be_cut():
    # Cutting the softmax after its exp loop would leave the rest under MIN_PART_WEIGHT, and
    # the only cut left, right after the reductions, makes the rest the heavier part: module
    # 0 is the rest.
    (x, y, z), (total, squares, top), body, (i, j, k) = _softmax_rows()
    cut = emit_rows.split_point(Kernel("rest", [Loop(i, 0, 64, body)]))
    assert cut.statements == 0 and cut.rest_first
    assert set(cut.passed) == {total, squares, top}
    # With the exp in the row's sums instead, the row part is the heavier: module 0.
    total = Reduce(ReduceKind.SUM, k, 0, 32, kir.Op(kir.ScalarOp.EXP, [x[i, k] - top]))
    squares = Reduce(ReduceKind.SUM, k, 0, 32, kir.Op(kir.ScalarOp.TANH, [x[i, k]]))
    body[0] = Loop(j, 0, 32, [Store(y, (i, j), (x[i, j] - top) / total)])
    body[1] = Loop(j, 0, 32, [Store(z, (i, j), y[i, j] * squares)])
    cut = emit_rows.split_point(Kernel("rows", [Loop(i, 0, 64, body)]))
    assert cut is not None and not cut.rest_first


def test_kernels_that_cannot_be_cut_are_left_whole():
    # A reduction no row changes would run once per row in the first part instead of once.
    assert emit_rows.split_point(_row_kernel(per_kernel_sum=True)) is None
    # Too light for two modules.
    x = Buffer("x", F32, (8, 4))
    y = Buffer("y", F32, (8, 4), "output")
    i, j = Var("i"), Var("j")
    light = Kernel("light", [Loop(i, 0, 8, [Loop(j, 0, 4, [Store(y, (i, j), x[i, j] + 1.0)])] * 2)])
    assert emit_rows.split_point(light) is None
    # Not one loop over rows.
    assert emit_rows.row_loop(Kernel("flat", [Store(y, 0, x[0, 0])])) is None


@pytest.mark.parametrize("dtype", [np.float16])
def test_narrow_float_row_reductions_are_not_passed(dtype):
    x = Buffer("x", np.dtype(dtype), (16, 32))
    y = Buffer("y", np.dtype(dtype), (16, 32), "output")
    i, j, k = Var("i"), Var("j"), Var("k")
    total = Reduce(ReduceKind.SUM, k, 0, 32, x[i, k])
    body = [Loop(j, 0, 32, [Store(y, (i, j), kir.Op(kir.ScalarOp.EXP, [x[i, j] / total]))])] * 4
    assert emit_rows.row_loop(Kernel("narrow", [Loop(i, 0, 16, body)])) is None


@pytest.mark.parametrize("codegen_target", ["host", "x86-64-v3", "x86-64-v4"])
def test_a_cut_after_a_statement_runs_it_in_the_first_part(monkeypatch, codegen_target):
    # The synthetic kernel is cut after its first statement (y), so the first part writes y,
    # which the second reads; compiled whole and cut, the bits agree, and match NumPy's, for
    # the host and each baseline target this CPU can run.
    kernel = _row_kernel()
    assert emit_rows.split_point(kernel).statements == 1
    x, w = (Buffer("x", F32, (32, 64)), Buffer("w", F32, (64,)))
    y, z = (Buffer("y", F32, (32, 64), "output"), Buffer("z", F32, (32, 64), "output"))
    program = kir.Program("cut_rows", [x, w, y, z], [kernel])
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((32, 64)).astype(np.float32)
    ws = rng.uniform(0.5, 1.5, 64).astype(np.float32)
    results = _cut_and_whole(monkeypatch, codegen_target, program, xs, ws)
    x64 = xs.astype(np.float64)
    top = x64.max(axis=1, keepdims=True)
    ys = np.tanh(np.exp(x64 - top)) / (x64 * x64).sum(axis=1, keepdims=True)
    zs = np.log1p(ys * ws)
    np.testing.assert_allclose(results[1], zs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[0], np.tanh(zs) * top, rtol=1e-5, atol=1e-6)


def _cut_and_whole(monkeypatch, codegen_target, program, *inputs) -> tuple:
    """program's outputs compiled for codegen_target on two threads (cut in two modules) and
    on one (whole), checked to be the same bits."""
    results = {}
    with use_codegen_target(codegen_target) as current:
        for threads in (2, 1):
            monkeypatch.setattr(config, "num_threads", threads)
            host = engine.Engine(current)
            (native,) = host.compile_many([program], pipelines=["lean"])
            results[threads] = native(*inputs)
            assert host.stats["modules"] == (2 if threads == 2 else 1)
    for a, b in zip(results[2], results[1]):
        np.testing.assert_array_equal(a, b)
    return results[2]


@pytest.mark.parametrize("codegen_target", ["host", "x86-64-v3", "x86-64-v4"])
def test_a_cut_with_the_rest_first_gives_the_bits_of_the_whole_kernel(monkeypatch, codegen_target):
    # The softmax-shaped kernel, cut with the rest as module 0 (the entry and the driver
    # emitted first, the row part second): compiled whole and cut, the bits agree and match
    # NumPy's, for the host and each baseline target this CPU can run.
    (x, y, z), _, body, (i, _, _) = _softmax_rows()
    kernel = Kernel("rest", [Loop(i, 0, 64, body)])
    assert emit_rows.split_point(kernel).rest_first
    program = kir.Program("rest_first", [x, y, z], [kernel])
    xs = np.random.default_rng(8).uniform(0.5, 1.5, (64, 32)).astype(np.float32)
    results = _cut_and_whole(monkeypatch, codegen_target, program, xs)
    x64 = xs.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True)) / x64.sum(axis=1, keepdims=True)
    zs = e * (x64 * x64).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(results[1], zs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[0], zs + x64, rtol=1e-5, atol=1e-6)


def test_a_cut_program_is_still_verified_and_nothing_of_it_loads(monkeypatch):
    # A row-cut program is verified after its first module is on its way to the helper; an
    # invalid one (a read past its row) still fails with the verifier's error, and the
    # engine keeps nothing of it.
    (x, y, z), _, body, (i, j, _) = _softmax_rows()
    body[2] = Loop(j, 0, 32, [Store(y, (i, j), z[i, j] + x[i, j + 1])])
    kernel = Kernel("rest", [Loop(i, 0, 64, body)])
    assert emit_rows.split_point(kernel).rest_first
    monkeypatch.setattr(config, "num_threads", 2)
    host = engine.Engine(target.host_target())
    program = kir.Program("past_the_row", [x, y, z], [kernel])
    with pytest.raises(kir.KirError, match="load from 'x' may index outside it"):
        host.compile_many([program], pipelines=["lean"])
    assert host.stats["modules"] == 0 and host.live_programs() == 0
    (vx, vy, vz), _, valid_body, (vi, _, _) = _softmax_rows()
    valid = kir.Program("valid", [vx, vy, vz], [Kernel("rest", [Loop(vi, 0, 64, valid_body)])])
    host.compile_many([valid], pipelines=["lean"])  # (the engine compiles after the failure)
    assert host.stats["modules"] == 2


def test_a_module_whose_linkage_is_right_is_parsed_to_what_the_linkage_pass_makes(monkeypatch):
    # Engine._linked skips its pass over a module's functions and globals when the emitted
    # module has every definition but the kept ones internal already; what it parses must
    # then be what the pass would have made. Checked on the modules of a row cut, a split
    # group (the gradient) and vmath's tables (erf, lgamma).
    seen = []
    check = engine._linkage_is_right

    def spy(module, kept):
        right = check(module, kept)
        seen.append((str(module), set(kept), right))
        return right

    monkeypatch.setattr(engine, "_linkage_is_right", spy)
    args = _inputs()
    _compile(monkeypatch, layernorm_softmax, args, 2)
    _compile(monkeypatch, _layernorm_gradient(args, 4), args, 2)
    _compile(monkeypatch, lambda x, g, b: lax.erf(x) * lax.lgamma(g) + b, args, 2)
    assert len(seen) >= 5 and any(right for _, _, right in seen)
    for text, kept, right in seen:
        if right:
            skipped = engine.Engine._linked([(text, None, None)], "m")
            passed = engine.Engine._linked([(text, None, kept)], "m")
            assert str(skipped) == str(passed)

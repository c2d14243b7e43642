"""Explicit vector loops (kiln/codegen/llvm/emit_vector.py), for each code generation target:
element-wise loops give the bits of the scalar loops LLVM used to vectorize, reductions add in
the documented order (checked bit for bit against a NumPy emulation), loops that cannot be
vectorized stay scalar and correct, and a module's pipeline follows what its loops became."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.compiler import kir
from kiln.compiler.kir import Buffer, Kernel, Loop, Program, Store, Var
from kiln.runtime import engine
from kiln.runtime.engine import compile_program

O = kir.ScalarOp
Reduce, ReduceKind = kir.Reduce, kir.ReduceKind
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I32, BOOL = np.dtype(np.int32), np.dtype(np.bool_)


@pytest.fixture
def pipelines(monkeypatch):
    """The pipelines the modules compiled in the test were given, in order."""
    chosen = []
    original = engine._module_pipeline

    def recording(*args):
        chosen.append(original(*args))
        return chosen[-1]

    monkeypatch.setattr(engine, "_module_pipeline", recording)
    return chosen


def _both_ways(monkeypatch, program: Program, *arrays) -> tuple[list, list]:
    """The program's outputs with vector loops, then with scalar loops (LLVM's vectorizer)."""
    results = []
    for vector in (True, False):
        monkeypatch.setattr(kiln.config, "vector_loops", vector)
        results.append([np.asarray(a) for a in compile_program(program)(*arrays)])
    return results[0], results[1]


def _lanes(itemsize: int) -> int:
    from kiln.codegen.llvm import target

    return target.current_target().vector_bytes // itemsize


def _elementwise(name: str, n: int, dtype, build, out_dtype=None) -> Program:
    x, y = Buffer("x", dtype, (n,)), Buffer("y", dtype, (n,))
    z = Buffer("z", out_dtype or dtype, (n,), "output")
    i = Var("i")
    kernel = Kernel(name, [Loop(i, 0, n, [Store(z, i, build(x[i], y[i], i))])])
    return Program(name, [x, y, z], [kernel])


_CASES = {
    # name: (dtype, expression of x[i], y[i] and i, output dtype, NumPy reference)
    "fma_f32": (F32, lambda x, y, i: x * y + 1.5, None, lambda x, y: x * y + np.float32(1.5)),
    "exp_div_f64": (F64, lambda x, y, i: kir.op(O.EXP, x) / (y * y + 1.0), None,
                    lambda x, y: np.exp(x) / (y * y + 1.0)),
    "select_max_f32": (F32, lambda x, y, i: kir.select(x < y, kir.op(O.MAX, x, y), x - y),
                       None, lambda x, y: np.where(x < y, np.maximum(x, y), x - y)),
    "iota_f32": (F32, lambda x, y, i: kir.op(O.CAST, i, dtype=F32) * x, None,
                 lambda x, y: np.arange(len(x), dtype=np.float32) * x),
    "int_ops": (I32, lambda x, y, i: kir.op(O.DIV, x, y) + kir.op(O.SHIFT_LEFT, x, y % 40), None,
                lambda x, y: _int_ops_reference(x, y)),
    "compare_to_bool": (F32, lambda x, y, i: kir.op(O.GE, x, y), BOOL, lambda x, y: x >= y),
    "f32_to_i32": (F32, lambda x, y, i: kir.op(O.CAST, x * 1e9, dtype=I32), I32,
                   lambda x, y: _saturating_int32(x * np.float32(1e9))),
}  # fmt: skip


def _int_ops_reference(x, y):
    """lax's int32 x / y (truncating; x / 0 = -1, INT_MIN / -1 = INT_MIN) plus x << (y rem 40)
    (0 for an amount outside [0, 32)), wrapping as int32 does."""
    x64, y64 = x.astype(np.int64), y.astype(np.int64)
    quotient = np.sign(x64) * np.sign(y64) * (np.abs(x64) // np.maximum(np.abs(y64), 1))
    quotient = np.where(y64 == 0, -1, quotient)
    amount = np.fmod(y64, 40)
    shifted = (x64.astype(np.uint64) << np.clip(amount, 0, 31).astype(np.uint64)) & 0xFFFFFFFF
    shifted = np.where((amount >= 0) & (amount < 32), shifted.astype(np.int64), 0)
    return ((quotient + shifted) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def _saturating_int32(values):
    """float -> int32 as lax converts: toward zero, saturating, NaN -> 0."""
    wide = np.trunc(values.astype(np.float64))
    return np.where(np.isnan(wide), 0, np.clip(np.nan_to_num(wide), -(2**31), 2**31 - 1))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 15, 16, 17, 29, 100, 1003])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_elementwise_loops_give_the_scalar_loops_bits(monkeypatch, case, n):
    dtype, build, out_dtype, reference = _CASES[case]
    rng = np.random.default_rng(n)
    if dtype == I32:
        x = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(I32)
        y = rng.integers(-5, 50, n).astype(I32)
    else:
        x, y = (rng.standard_normal(n).astype(dtype) for _ in range(2))
        x[::7] = [np.nan, np.inf, -0.0][: len(x[::7])] + [1.0] * max(len(x[::7]) - 3, 0)
    program = _elementwise(f"vector_{case}", n, dtype, build, out_dtype)
    (vector,), (scalar,) = _both_ways(monkeypatch, program, x, y)
    np.testing.assert_array_equal(vector, scalar)
    with np.errstate(all="ignore"):
        expected = reference(x, y).astype(vector.dtype)
    if vector.dtype.kind == "f":
        np.testing.assert_allclose(vector, expected, rtol=1e-5)
    else:
        np.testing.assert_array_equal(vector, expected)


#: (float32 lanes of a full vector, loop length) -> (the narrow strips' widths, scalar
#: iterations left): 16 lanes on AVX-512, 8 on AVX2.
_TAILS = {
    (16, 4): ([4], 0), (16, 7): ([4, 2], 1), (16, 29): ([8, 4], 1),
    (8, 4): ([4], 0), (8, 7): ([4, 2], 1), (8, 29): ([4], 1),
}  # fmt: skip


@pytest.mark.parametrize("n", [4, 7, 29])
def test_a_short_tail_is_vector_code_of_fewer_lanes(n):
    """A constant tail shorter than a vector, or a whole loop that short, runs as strips of
    halving lane counts, then at most one scalar iteration: the body is emitted once per
    strip rather than once per element (bits: the test above)."""
    program = _elementwise(f"short_tail_{n}", n, F32, lambda x, y, i: x * y * y)
    text = compile_program(program).unoptimized_ir
    strips, tail = _TAILS[_lanes(4), n]
    for width in strips:
        assert f"fmul <{width} x float>" in text or f"fmul contract <{width} x float>" in text
    scalar = text.count("fmul float") + text.count("fmul contract float")
    assert scalar == 2 * tail  # (x * y * y: two multiplies per scalar iteration)
    x, y = np.linspace(-2.0, 2.0, n, dtype=F32), np.linspace(1.0, 3.0, n, dtype=F32)
    np.testing.assert_array_equal(compile_program(program)(x, y)[0], x * y * y)


def _sum(k, n, value):
    return Reduce(ReduceKind.SUM, k, 0, n, value)


def _emulated_sum(row: np.ndarray, lanes: int) -> np.float32:
    """emit_vector's order: lane l adds elements l, l + lanes, ...; the lanes fold pairwise,
    halves first, onto the initial 0; the remainder follows in order (in float32)."""
    whole = len(row) - len(row) % lanes
    total = np.float32(0.0)
    if whole:
        acc = np.full(lanes, -0.0, np.float32)
        for start in range(0, whole, lanes):
            acc = acc + row[start : start + lanes]
        while len(acc) > 1:
            acc = acc[: len(acc) // 2] + acc[len(acc) // 2 :]
        total = total + acc[0]
    for value in row[whole:]:
        total = total + value
    return total


# (At most one compensated block on every target, 512 elements with AVX2: a longer sum runs
# block by block, which test_accurate_reductions covers.)
@pytest.mark.parametrize("n", [5, 64, 500])
def test_row_sums_add_in_the_documented_order(n):
    rows = 6
    m, s = Buffer("m", F32, (rows, n)), Buffer("s", F32, (rows,), "output")
    k = Var("k")
    program = Program(
        f"ordered_sum_{n}",
        [m, s],
        [Kernel("sum", kir.loop_nest((rows,), lambda r: [Store(s, (r,), _sum(k, n, m[r, k]))]))],
    )
    values = np.random.default_rng(n).standard_normal((rows, n)).astype(np.float32) * 1e3
    (sums,) = compile_program(program)(values)
    expected = [_emulated_sum(row, _lanes(4)) for row in values]
    np.testing.assert_array_equal(np.asarray(sums), np.array(expected, np.float32))


@pytest.mark.parametrize(
    "kind, dtype",
    [(k, d) for k in (ReduceKind.MAX, ReduceKind.MIN, ReduceKind.SUM) for d in (F64, I32)]
    + [(ReduceKind.AND, BOOL), (ReduceKind.MAX, BOOL)],
    ids=str,
)
def test_reductions_of_each_kind(monkeypatch, kind, dtype):
    n = 203
    m, s = Buffer("m", dtype, (3, n)), Buffer("s", dtype, (3,), "output")
    k = Var("k")
    program = Program(
        f"reduce_{kind.value}_{dtype.name}",
        [m, s],
        [
            Kernel(
                "r", kir.loop_nest((3,), lambda r: [Store(s, (r,), Reduce(kind, k, 0, n, m[r, k]))])
            )
        ],
    )
    rng = np.random.default_rng(1)
    if dtype == BOOL:
        values = rng.random((3, n)) < 0.995
        values[2] = True
    elif dtype == I32:
        values = rng.integers(-(2**31), 2**31, (3, n), dtype=np.int64).astype(I32)
    else:
        values = rng.standard_normal((3, n))
        values[1, 150] = np.nan  # (max and min propagate it, as np.max does)
    (vector,), (scalar,) = _both_ways(monkeypatch, program, values)
    numpy_reductions = {ReduceKind.MAX: np.max, ReduceKind.MIN: np.min, ReduceKind.SUM: np.sum}
    reference = numpy_reductions.get(kind, np.all)(values, axis=1)
    if dtype == F64 and kind is ReduceKind.SUM:
        np.testing.assert_allclose(vector, reference, rtol=1e-13)
    else:
        np.testing.assert_array_equal(vector, reference.astype(dtype))
        np.testing.assert_array_equal(vector, scalar)


def test_a_loop_that_reads_what_it_wrote_stays_scalar(pipelines):
    # z[i] = z[i - 1] + x[i]: a running sum, whose iterations must run one after another.
    n = 100
    x, z = Buffer("x", F32, (n,)), Buffer("z", F32, (n,), "output")
    i = Var("i")
    body = [Store(z, 0, x[0]), Loop(i, 1, n, [Store(z, i, z[i - 1] + x[i])])]
    program = Program("running_sum", [x, z], [Kernel("running_sum", body)])
    values = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    (out,) = compile_program(program)(values)
    np.testing.assert_array_equal(np.asarray(out), np.cumsum(values, dtype=np.float32))
    assert pipelines[-1] != "vector"


def test_a_transposing_read_is_a_gather(pipelines):
    x, z = Buffer("x", F32, (40, 30)), Buffer("z", F32, (30, 40), "output")
    program = Program(
        "transpose_read",
        [x, z],
        [Kernel("t", kir.loop_nest((30, 40), lambda i, j: [Store(z, (i, j), x[j, i] * 2.0)]))],
    )
    values = np.random.default_rng(3).standard_normal((40, 30)).astype(np.float32)
    native = compile_program(program)
    np.testing.assert_array_equal(np.asarray(native(values)[0]), values.T * 2)
    assert pipelines[-1] == "vector" and "llvm.masked.gather" in native.unoptimized_ir


def test_a_transposing_store_stays_scalar_and_its_module_keeps_the_vectorizer(pipelines):
    # z[j, i] = x[i, j] with j innermost: the stores are 30 elements apart (no scatters).
    x, z = Buffer("x", F32, (40, 30)), Buffer("z", F32, (30, 40), "output")
    program = Program(
        "transpose_store",
        [x, z],
        [Kernel("t", kir.loop_nest((40, 30), lambda i, j: [Store(z, (j, i), x[i, j] - 1.0)]))],
    )
    values = np.random.default_rng(3).standard_normal((40, 30)).astype(np.float32)
    (out,) = compile_program(program)(values)
    np.testing.assert_array_equal(np.asarray(out), values.T - 1)
    assert pipelines[-1] != "vector"


def test_gathered_rows_and_clamped_indices(monkeypatch):
    # An embedding lookup: out[r, j] = table[ids[r], j] (the row index is loaded), and a
    # shifted read with clamped indices, j from 0 to 100: x[min(j + 3, 99)].
    table, ids = Buffer("table", F64, (50, 37)), Buffer("ids", I32, (9,))
    x = Buffer("x", F64, (100,))
    out, shifted = Buffer("out", F64, (9, 37), "output"), Buffer("shifted", F64, (100,), "output")
    r, j = Var("r"), Var("j")
    row = kir.clamp(kir.cast(ids[r], kir.INDEX), 0, 49)
    clamped = kir.op(O.MIN, j + 3, kir.Const(99, kir.INDEX))
    program = Program(
        "gathers",
        [table, ids, x, out, shifted],
        [
            Kernel(
                "lookup",
                [
                    Loop(
                        r,
                        0,
                        9,
                        [Loop(j, 0, 37, [Store(out, (r, j), kir.Load(table, row * 37 + j))])],
                    )
                ],
            ),
            Kernel("shift", [Loop(j, 0, 100, [Store(shifted, j, x[clamped] * 0.5)])]),
        ],
    )
    rng = np.random.default_rng(6)
    values, indices, series = rng.standard_normal((50, 37)), rng.integers(0, 50, 9), rng.random(100)
    (vector_out, vector_shifted), (scalar_out, scalar_shifted) = _both_ways(
        monkeypatch, program, values, indices.astype(np.int32), series
    )
    np.testing.assert_array_equal(vector_out, values[indices])
    np.testing.assert_array_equal(vector_shifted, series[np.minimum(np.arange(100) + 3, 99)] * 0.5)
    np.testing.assert_array_equal(vector_shifted, scalar_shifted)


def test_contiguous_loops_take_the_short_pipeline_and_short_strips_unroll(pipelines):
    # A 48-wide strip (3 or 6 vector iterations): unrolled, no loop of its own.
    x, z = Buffer("x", F32, (7, 48)), Buffer("z", F32, (7, 48), "output")
    program = Program(
        "strip",
        [x, z],
        [Kernel("s", kir.loop_nest((7, 48), lambda i, j: [Store(z, (i, j), x[i, j] + x[i, 0])]))],
    )
    values = np.random.default_rng(4).standard_normal((7, 48)).astype(np.float32)
    native = compile_program(program)
    np.testing.assert_array_equal(np.asarray(native(values)[0]), values + values[:, :1])
    assert pipelines[-1] == "vector"
    kernel = native.unoptimized_ir[native.unoptimized_ir.index("define internal") :]
    assert f"<{_lanes(4)} x float>" in kernel and '"i1.vec.header"' not in kernel


def test_jitted_programs_with_chunked_rows_match_the_scalar_loops(monkeypatch):
    # Large enough to run in chunks on two threads: loop bounds come from a buffer.
    monkeypatch.setattr(kiln.config, "num_threads", 2)
    x = np.random.default_rng(5).standard_normal((517, 1031)).astype(np.float32)

    def f(x):
        centered = x - kiln.numpy.mean(x, axis=1, keepdims=True)
        return kiln.numpy.tanh(centered) * 3.0, kiln.numpy.max(x, axis=1)

    results = []
    for vector in (True, False):
        monkeypatch.setattr(kiln.config, "vector_loops", vector)
        results.append([np.asarray(a) for a in kiln.jit(f)(x)])
    (vector_tanh, vector_max), (scalar_tanh, scalar_max) = results
    np.testing.assert_array_equal(vector_max, x.max(axis=1))
    np.testing.assert_array_equal(vector_max, scalar_max)
    reference = np.tanh(x.astype(F64) - x.astype(F64).mean(axis=1, keepdims=True)) * 3
    np.testing.assert_allclose(vector_tanh, reference, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(vector_tanh, scalar_tanh, rtol=2e-6, atol=1e-7)


def test_splats_print_one_lane_and_lanes_fill_the_target_registers():
    from llvmlite import ir

    from kiln.codegen.llvm import target
    from kiln.codegen.llvm import types as T

    function = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [T.FLOAT]), "f")
    builder = ir.IRBuilder(function.append_basic_block())
    constant = T.splat(builder, ir.Constant(T.FLOAT, 2.0), 16)
    assert str(constant) == "<16 x float> splat (float 0x4000000000000000)"
    broadcast = T.splat(builder, function.args[0], 8)
    assert str(broadcast.type) == "<8 x float>" and "shufflevector" in str(broadcast)
    current = target.current_target()
    # (the baselines by name; the host by the features LLVM reports for it)
    host = 64 if "+avx512f" in current.features else 32 if "+avx2" in current.features else 16
    expected = {"x86-64-v3": 32, "x86-64-v4": 64}.get(current.cpu_name, host)
    assert current.vector_bytes == expected and _lanes(4) == expected // 4


def test_a_loop_whose_invariant_operand_is_a_reduction_of_what_the_kernel_wrote():
    # b[i] = 2 x[i], then z[i] = x[99 - i] * sum(b): the sum reads what the kernel wrote, so
    # it is computed where the second loop needs it (a reduction loop of its own, planned
    # while the second loop, a gather, is being emitted).
    n = 100
    x, b = Buffer("x", F32, (n,)), Buffer("b", F32, (n,), "temp")
    z = Buffer("z", F32, (n,), "output")
    i, k = Var("i"), Var("k")
    total = Reduce(ReduceKind.SUM, k, 0, n, b[k])
    body = [
        Loop(i, 0, n, [Store(b, i, x[i] * 2.0)]),
        Loop(i, 0, n, [Store(z, i, kir.Load(x, (n - 1) - i) * total)]),
    ]
    program = Program("reversed_scaled", [x, z, b], [Kernel("reversed_scaled", body)])
    values = np.arange(n, dtype=np.float32) / 8
    (out,) = compile_program(program)(values)
    expected = values[::-1] * np.float32((values * 2).sum(dtype=np.float64))
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)

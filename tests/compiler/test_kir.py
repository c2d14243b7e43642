"""The kernel IR on its own: construction, hash-consing, index folding, the printer's text, and
the verifier's errors on malformed kernels (no native code here)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.compiler import kir
from kiln.compiler.kir import (
    ArgValue,
    Buffer,
    Const,
    Kernel,
    KirError,
    Load,
    Loop,
    Program,
    Reduce,
    ReduceKind,
    ScalarOp,
    Store,
    Var,
)

F32, I32, I64 = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64)


def test_equal_expressions_are_one_shared_node():
    x = Buffer("x", F32, (4, 8))
    i, j = Var("i"), Var("j")
    first = kir.op(ScalarOp.EXP, x[i, j] + 1.0)
    second = kir.op(ScalarOp.EXP, x[i, j] + 1.0)
    assert first is second
    assert Const(-0.0, F32) is not Const(0.0, F32)
    assert Const(float("nan"), F32) is Const(float("nan"), F32)
    assert Const(0.1, F32).value == float(np.float32(0.1))


def test_expressions_are_immutable():
    node = Var("i") + 1
    with pytest.raises(AttributeError):
        node.dtype = F32


def test_constructors_check_dtypes_with_clear_messages():
    a, b = Var("i"), Const(1.0, F32)
    with pytest.raises(TypeError, match="one dtype.*insert a cast"):
        kir.op(ScalarOp.ADD, a, b)
    with pytest.raises(TypeError, match="sqrt is not defined on i64"):
        kir.op(ScalarOp.SQRT, a)
    with pytest.raises(TypeError, match="bool condition"):
        kir.op(ScalarOp.SELECT, a, a, a)
    with pytest.raises(KirError, match="does not fit"):
        Const(300, np.uint8)
    with pytest.raises(TypeError, match="does not support dtype complex64"):
        Buffer("z", np.complex64, (2,))
    with pytest.raises(TypeError, match="an index must be an integer"):
        Load(Buffer("x", F32, (2,)), Const(1.0, F32))


def test_comparison_and_logical_result_dtypes():
    i = Var("i")
    assert (i < 3).dtype == np.bool_
    assert kir.op(ScalarOp.IS_FINITE, Const(1.0, F32)).dtype == np.bool_
    assert ((i < 3) & (i > 1)).op is ScalarOp.LOGICAL_AND
    assert (i & 3).op is ScalarOp.BITWISE_AND
    assert kir.cast(i, F32).dtype == F32 and kir.cast(i, I64) is i


def test_index_helpers_fold_constants():
    i, j = Var("i"), Var("j")
    assert kir.affine([(i, 0), (j, 1)], 0) is j
    assert kir.index_add(2, 3) is Const(5, I64)
    assert kir.index_mul(i, 1) is i
    assert kir.flat_index((4, 1, 8), (i, 0, j)) is kir.index_add(kir.index_mul(i, 8), j)
    assert kir.index_div(Const(-7, I64), 2).value == -3  # C division
    assert kir.index_rem(Const(-7, I64), 2).value == -1
    assert kir.index_add(i, -2).op is ScalarOp.SUB
    assert kir.index_mul(i, 4).nsw and not (i * 4).nsw  # only index math is no-wrap
    assert kir.clamp(Const(9, I64), 0, 5) is Const(5, I64)


def test_unravel_inverts_flat_index():
    flat = Var("f")
    parts = kir.unravel(flat, (3, 4, 5))
    text = [repr(p) for p in parts]
    assert "f / 20" in text[0] and "f % 20 / 5" in text[1] and "f % 20 % 5" in text[2]


def test_reduce_defaults_and_argvalue():
    x = Buffer("x", F32, (8,))
    k = Var("k")
    total = Reduce(ReduceKind.SUM, k, 0, 8, x[k])
    assert total.init is Const(0.0, F32) and total.dtype == F32
    largest = Reduce(ReduceKind.MAX, k, 0, 8, x[k])
    assert largest.init.value == -np.inf
    where = Reduce(ReduceKind.ARGMAX, k, 0, 8, x[k], index_dtype=np.int32)
    assert where.dtype == I32 and ArgValue(where).dtype == F32
    with pytest.raises(KirError, match="no init"):
        Reduce(ReduceKind.ARGMIN, k, 0, 8, x[k], init=0.0)
    with pytest.raises(TypeError, match="and reduction is not defined on f32"):
        Reduce(ReduceKind.AND, k, 0, 8, x[k])
    assert kir.reduce_identity(ReduceKind.AND, np.dtype(np.uint8)) == 255
    assert kir.reduce_identity(ReduceKind.MIN, I32) == 2**31 - 1


def test_printed_kernel_shows_loops_fused_ops_and_reductions():
    x = Buffer("x", F32, (4, 8))
    y = Buffer("y", F32, (8,))
    z = Buffer("z", F32, (4, 8), "output")
    s = Buffer("s", F32, (4,), "output")
    k = Var("k")

    def body(i):
        row_sum = Reduce(ReduceKind.SUM, k, 0, 8, x[i, k] * x[i, k])
        return [
            Loop(
                Var("j"),
                0,
                8,
                [
                    Store(
                        z,
                        (i, Var("j")),
                        kir.op(ScalarOp.EXP, x[i, Var("j")] - y[Var("j")]) / row_sum,
                    )
                ],
            ),
            Store(s, (i,), row_sum),
        ]

    kernel = Kernel("fused", kir.loop_nest((4,), body))
    assert str(kernel) == "\n".join(
        [
            "kernel fused(x: f32[4,8], y: f32[8]) -> (z: f32[4,8], s: f32[4]):",
            "  for i0 in 0..4:",
            "    r0: f32 = sum(x[i0 * 8 + k] * x[i0 * 8 + k] for k in 0..8)",
            "    for j in 0..8:",
            "      t0: i64 = i0 * 8 + j",
            "      z[t0] = exp(x[t0] - y[j]) / r0",
            "    s[i0] = r0",
        ]
    )
    program = Program("f", [x, y, z, s], [kernel])
    assert str(program).splitlines()[0] == (
        "program f(x: f32[4,8], y: f32[8]) -> (z: f32[4,8], s: f32[4]):"
    )


def test_printer_parenthesizes_by_precedence_and_names_shared_nodes():
    a = Buffer("a", I32, (4,))
    out = Buffer("out", I32, (4,), "output")
    i = Var("i")
    shared = (a[i] + 1) * (a[i] - 2)
    expr = kir.cast(shared - (a[i] << 3), I32) + shared
    text = str(Kernel("k", [Loop(i, 0, 4, [Store(out, i, expr)])]))
    assert "t1: i32 = (t0 + 1) * (t0 - 2)" in text
    assert "out[i] = t1 - (t0 << 3) + t1" in text
    argmin = Reduce(ReduceKind.ARGMIN, Var("k"), 0, 4, a[Var("k")], index_dtype=np.int32)
    text = str(Kernel("k", [Store(out, 0, ArgValue(argmin) + argmin)]))
    assert "r0: i32 = argmin(a[k] for k in 0..4)" in text and "value_of(r0) + r0" in text


# ---------------------------------------------------------------------------------------------
# Verifier


def _expect_error(kernel_or_program, pattern):
    verify = kir.verify_program if isinstance(kernel_or_program, Program) else kir.verify_kernel
    with pytest.raises(KirError, match=pattern):
        verify(kernel_or_program)


def test_verifier_accepts_a_good_kernel():
    x = Buffer("x", F32, (3, 5))
    y = Buffer("y", F32, (5, 3), "output")
    kir.verify_kernel(Kernel("t", kir.loop_nest(y.shape, lambda i, j: [Store(y, (i, j), x[j, i])])))


def test_verifier_rejects_out_of_range_static_indices():
    x = Buffer("x", F32, (4,))
    y = Buffer("y", F32, (5,), "output")
    i = Var("i")
    _expect_error(
        Kernel("k", [Loop(i, 0, 5, [Store(y, i, x[i])])]),
        r"load from 'x' may index outside it: the index ranges over \[0, 4\] but the "
        r"buffer has 4 elements",
    )
    _expect_error(
        Kernel("k", [Loop(i, 0, 5, [Store(y, kir.index_add(i, 1), 0.0)])]),
        r"store to 'y'.*\[1, 5\]",
    )


def test_verifier_demands_clamped_data_dependent_indices():
    x = Buffer("x", F32, (10,))
    idx = Buffer("idx", np.dtype(np.uint8), (3,))
    y = Buffer("y", F32, (3,), "output")
    i = Var("i")
    _expect_error(
        Kernel("gather", [Loop(i, 0, 3, [Store(y, i, x[idx[i]])])]),
        r"\[0, 255\].*clamp data-dependent indices",
    )
    kir.verify_kernel(Kernel("gather", [Loop(i, 0, 3, [Store(y, i, x[kir.clamp(idx[i], 0, 9)])])]))


def test_verifier_rejects_unbound_and_shadowed_variables():
    x = Buffer("x", F32, (4,))
    y = Buffer("y", F32, (4,), "output")
    i, j = Var("i"), Var("j")
    _expect_error(
        Kernel("k", [Loop(i, 0, 4, [Store(y, i, x[j])])]),
        "uses loop variable j outside any loop that binds it",
    )
    _expect_error(
        Kernel("k", [Loop(i, 0, 4, [Loop(i, 0, 4, [Store(y, i, 0.0)])])]), "loop variable i shadows"
    )
    inner = Reduce(ReduceKind.SUM, i, 0, 4, x[i])
    _expect_error(
        Kernel("k", [Loop(i, 0, 4, [Store(y, i, inner)])]), "reduction variable i shadows"
    )


def test_verifier_rejects_bad_buffers_and_store_dtypes():
    x = Buffer("x", F32, (4,))
    y = Buffer("y", F32, (4,), "output")
    other = Buffer("other", F32, (4,))
    i = Var("i")
    _expect_error(Kernel("k", [Loop(i, 0, 4, [Store(x, i, 1.0)])]), "stores to input buffer 'x'")
    _expect_error(
        Kernel("k", [Loop(i, 0, 4, [Store(y, i, other[i])])], params=[y]),
        "loads 'other', which is not a parameter",
    )
    _expect_error(
        Kernel("k", [Loop(i, 0, 4, [Store(y, i, Const(1, I32))])]),
        "stores a i32 value into f32 buffer 'y'; insert a cast",
    )
    _expect_error(Kernel("k", [kir.If(Const(1, I32), [])]), "if condition is i32, not bool")


def test_program_verifier_checks_roles_names_and_temp_order():
    x = Buffer("x", F32, (4,))
    t = Buffer("t", F32, (4,), "temp")
    y = Buffer("y", F32, (4,), "output")
    i = Var("i")
    read_t = Kernel("read", [Loop(i, 0, 4, [Store(y, i, t[i])])])
    write_t = Kernel("write", [Loop(i, 0, 4, [Store(t, i, x[i])])])
    kir.verify_program(Program("ok", [x, y, t], [write_t, read_t]))
    _expect_error(Program("early", [x, y, t], [read_t, write_t]), "reads temp 't' before")
    _expect_error(Program("missing", [x, y], [write_t]), "not among the program's buffers")
    _expect_error(Program("unwritten", [x, y, t], [write_t]), r"outputs \['y'\] are never")
    _expect_error(
        Program("twice", [x, y, Buffer("x", F32, (2,), "temp")], [write_t]),
        "duplicate buffer names",
    )


def test_kernel_params_are_inferred_in_order_of_use():
    x = Buffer("x", F32, (4,))
    y = Buffer("y", F32, (4,), "output")
    i = Var("i")
    kernel = Kernel("k", [Loop(i, 0, 4, [Store(y, i, x[i])])])
    assert kernel.params == (y, x)
    assert kir.stored_buffers(kernel.body) == [y]


def test_deep_expression_chains_do_not_hit_the_recursion_limit():
    x = Buffer("x", F32, (4,))
    y = Buffer("y", F32, (4,), "output")
    i = Var("i")
    value = x[i]
    for step in range(3000):
        value = value + float(step % 7)
    kernel = Kernel("deep", [Loop(i, 0, 4, [Store(y, i, value)])])
    kir.verify_kernel(kernel)
    assert len(kir.toposort([value])) > 3000
    # Long chains print as a sequence of named steps rather than one enormous line.
    lines = str(kernel).splitlines()
    assert len(lines) > 100 and max(map(len, lines)) < 200


def test_free_vars_and_substitution():
    from kiln.compiler import kir_rewrite

    x = Buffer("x", F32, (4, 8))
    i, j, k = Var("i"), Var("j"), Var("k")
    row = Reduce(ReduceKind.SUM, k, 0, 8, x[i, k])
    expr = x[i, j] / row
    assert kir_rewrite.free_vars(expr) == {i, j}
    assert kir_rewrite.free_vars(row) == {i}
    moved = kir_rewrite.substitute(expr, {i: kir.index_add(i, 1), j: Const(3, I64)})
    assert kir_rewrite.free_vars(moved) == {i}
    # Hash-consing: substituting back gives the very same node.
    assert (
        kir_rewrite.substitute(kir_rewrite.substitute(expr, {j: Var("q")}), {Var("q"): j}) is expr
    )
    stmt = kir_rewrite.substitute_stmt(
        Loop(j, 0, 8, [Store(Buffer("y", F32, (4, 8), "output"), (i, j), expr)]), {i: Const(2, I64)}
    )
    assert kir_rewrite.free_vars(stmt.body[0].value) == {j}


def test_affine_coefficients_recognize_strides():
    from kiln.compiler.kir_schedule import affine_coefficient

    i, j, k = Var("i"), Var("j"), Var("k")
    index = kir.affine([(i, 64), (j, 1), (k, 8)], 5)
    assert [affine_coefficient(index, v) for v in (i, j, k, Var("z"))] == [64, 1, 8, 0]
    assert affine_coefficient(kir.index_sub(index, j), j) == 0
    assert affine_coefficient(kir.index_mul(i, j), i) is None
    assert affine_coefficient(kir.clamp(i, 0, 3), i) is None

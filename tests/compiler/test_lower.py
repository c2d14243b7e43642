"""Lowering rules at the kernel-IR level: the index arithmetic each shape, indexing and
reduction rule produces (read as the printed expression), what counts as lowerable, and that
the rule registry covers the primitives it should. Native execution of every rule against the
interpreter is in tests/test_native_vs_interpreter.py."""

from __future__ import annotations

import pathlib

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.compiler import kir, lower
from kiln.compiler.kir import Buffer, Var
from kiln.compiler.kir_print import format_expr
from kiln.core.jaxpr import Literal
from kiln.primitives import elementwise
from tests._testing import count_rule_runs

F32 = np.dtype(np.float32)


def expression(fn, *args):
    """The output of fn's jaxpr as one fused expression at index (i0, i1, ...), every input
    read from a buffer named after its position (x0, x1, ...)."""
    closed = kiln.make_jaxpr(fn)(*args)
    jaxpr = closed.jaxpr
    loaded = {v: Buffer(f"x{n}", v.aval.dtype, v.aval.shape) for n, v in enumerate(jaxpr.invars)}
    producers = {v: e for e in jaxpr.eqns for v in e.outvars}
    builder = lower.ExprBuilder(producers, loaded)
    out = jaxpr.outvars[0]
    index = tuple(Var(f"i{d}") for d in range(len(out.aval.shape)))
    return builder.read(out, index)


def text(fn, *args) -> str:
    return format_expr(expression(fn, *args))


def zeros(*shape, dtype=np.float32):
    return jnp.zeros(shape, dtype)


def test_registry_covers_the_lowerable_primitives():
    names = {str(p) for p in lower.lowering_rules}
    expected = {
        "add",
        "sub",
        "mul",
        "div",
        "rem",
        "neg",
        "max",
        "min",
        "abs",
        "sign",
        "floor",
        "ceil",
        "round",
        "is_finite",
        "nextafter",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "not",
        "and",
        "or",
        "xor",
        "population_count",
        "clz",
        "shift_left",
        "shift_right_logical",
        "shift_right_arithmetic",
        "integer_pow",
        "square",
        "pow",
        "exp",
        "exp2",
        "log",
        "log1p",
        "expm1",
        "sqrt",
        "rsqrt",
        "cbrt",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "atan2",
        "sinh",
        "cosh",
        "tanh",
        "asinh",
        "acosh",
        "atanh",
        "logistic",
        "erf",
        "erfc",
        "erf_inv",
        "lgamma",
        "digamma",
        "select_n",
        "clamp",
        "convert_element_type",
        "broadcast_in_dim",
        "reshape",
        "squeeze",
        "transpose",
        "rev",
        "copy",
        "slice",
        "pad",
        "concatenate",
        "iota",
        "dynamic_slice",
        "dynamic_update_slice",
        "gather",
        "reduce_sum",
        "reduce_prod",
        "reduce_max",
        "reduce_min",
        "reduce_and",
        "reduce_or",
        "reduce_xor",
        "argmax",
        "argmin",
    }
    assert expected <= names


def test_primitives_never_import_the_lowering():
    """The lowering rules live in the compiler, so primitives/ never imports the backend
    (jaxpr-level passes it may use)."""
    root = pathlib.Path(kiln.__file__).parent / "primitives"
    banned = (
        "kiln.compiler.lower",
        "kiln.compiler.fusion",
        "kiln.compiler.kir",
        "kiln.codegen",
        "kiln.runtime.native",
        "kiln.runtime.engine",
    )
    for path in root.glob("*.py"):
        source = path.read_text()
        assert not any(name in source for name in banned), path


def test_lowerable_decisions():
    def first_eqn(fn, *args):
        return kiln.make_jaxpr(fn)(*args).jaxpr.eqns[0]

    x = zeros(3)
    assert lower.lowerable(first_eqn(lambda x: x + 1, x))
    assert lower.lowerable(first_eqn(lambda x: jnp.exp(x), x))
    assert not lower.lowerable(first_eqn(lambda x: x + 1, zeros(3, dtype=np.complex64)))
    assert lower.lowerable(first_eqn(lambda x: x @ x, x))  # a small product: an inline sum
    big = zeros(64, 64)
    assert lower.lowerable(first_eqn(lambda x: x @ x, big))  # a BLAS call
    assert not lower.lowerable(first_eqn(lambda x: x @ x, zeros(3, dtype=np.complex64)))
    assert not lower.lowerable(first_eqn(lambda x: jnp.sort(x), x))
    half = zeros(3, dtype=np.float16)
    assert not lower.lowerable(first_eqn(lambda x: lax.bitcast_convert_type(x, np.int16), half))
    assert not lower.lowerable(first_eqn(lambda x: jnp.cumsum(x), x))


@pytest.mark.parametrize(
    "prim",
    sorted((p for p in lower.lowering_rules if lower.one_op(p)), key=lambda p: p.name),
    ids=lambda p: p.name,
)
def test_a_one_op_trial_answers_what_lowering_the_rule_answers(prim):
    # lowerable's trial of a one-op rule is read off the op's tables; it must be what
    # lowering the equation at a symbolic index finds, for every dtype the backend takes,
    # operands of one dtype or of two, a rank-0 operand among them.
    from kiln.core.avals import ShapedArray
    from kiln.core.jaxpr import JaxprEqn
    from kiln.core.jaxpr import Var as JaxprVar

    arity = kir.OP_SPECS[lower.one_op(prim)].arity
    dtypes = sorted(kir.SUPPORTED_DTYPES, key=str)
    cases = [[d] * arity for d in dtypes]
    if arity == 2:
        cases += [[a, b] for a in dtypes for b in dtypes if a != b][::7]
    checked = 0
    for operand_dtypes in cases:
        for scalar_first in (False, True)[:arity]:
            shapes = [(5,)] * arity
            if scalar_first:
                shapes[0] = ()
            invars = [JaxprVar(ShapedArray(shape, d)) for shape, d in zip(shapes, operand_dtypes)]
            for result in {operand_dtypes[-1], kir.BOOL}:
                eqn = JaxprEqn(prim, invars, [JaxprVar(ShapedArray((5,), result))], {})
                assert lower._trial_lowering(eqn) == lower._lowered_trial(eqn), (
                    prim.name,
                    operand_dtypes,
                    shapes,
                )
                checked += 1
    assert checked >= len(dtypes)


def _chain(length):
    def fn(x, y):
        for k in range(length):
            x = jnp.sin(x) * y if k % 2 else jnp.exp(x) + 1.0
        return x

    return fn


def test_a_shallow_expression_runs_each_rule_once(monkeypatch):
    """Operands are built by nested calls as a rule reads them: no rule runs twice (with
    stand-ins only, every rule that reads a fused operand ran twice: 6 runs here, not 4)."""
    calls = count_rule_runs(monkeypatch)
    node = expression(lambda x, y: jnp.exp(x * y + 1.0) - x, zeros(4), zeros(4))
    assert calls["n"] == 4  # mul, add, exp, sub
    assert format_expr(node) == "exp(x0[i0] * x1[i0] + 1.0) - x0[i0]"


@pytest.mark.parametrize("depth", [0, 3])
def test_a_chain_deeper_than_the_nesting_bound_builds_the_same_nodes(monkeypatch, depth):
    """Past lower.DIRECT_DEPTH nested builds (0: none), reads get stand-ins and rules run
    again: the nodes are the same (hash-consed) ones, and no rule runs more than twice."""
    x = zeros(4)
    direct = expression(_chain(40), x, x)
    monkeypatch.setattr(lower, "DIRECT_DEPTH", depth)
    calls = count_rule_runs(monkeypatch)
    assert expression(_chain(40), x, x) is direct
    assert 80 < calls["n"] <= 2 * 80  # 80 equations: exp, add, sin, mul, ...
    if depth:  # (the first levels ran their rules once)
        assert calls["n"] <= 2 * 80 - depth


def test_an_inheriting_builder_takes_only_nodes_that_read_nothing_changed(monkeypatch):
    """ExprBuilder.inherit: a node another builder made is taken when nothing its expression
    reads is read differently here; the rest is built again, as a fresh builder would."""

    def fn(x, y):
        t = jnp.exp(x * y)
        u = jnp.sin(x) + 2.0  # (reads no t)
        return u * t, u - 1.0

    jaxpr = kiln.make_jaxpr(fn)(zeros(4), zeros(4)).jaxpr
    producers = {v: e for e in jaxpr.eqns for v in e.outvars}
    inputs = {v: Buffer(f"x{n}", v.aval.dtype, v.aval.shape) for n, v in enumerate(jaxpr.invars)}
    (t,) = [e.outvars[0] for e in jaxpr.eqns if e.primitive.name == "exp"]
    index = (Var("i0"),)
    # Built first with t stored, then with t fused (read otherwise: "changed").
    stored = lower.ExprBuilder(producers, {**inputs, t: Buffer("t", t.aval.dtype, t.aval.shape)})
    before = [stored.read(out, index) for out in jaxpr.outvars]
    fresh = lower.ExprBuilder(producers, dict(inputs))
    expected = [fresh.read(out, index) for out in jaxpr.outvars]
    calls = count_rule_runs(monkeypatch)
    taking = lower.ExprBuilder(producers, dict(inputs))
    taking.inherit(stored, {t})
    got = [taking.read(out, index) for out in jaxpr.outvars]
    assert got[1] is before[1] is expected[1]  # u - 1 reads no t: taken
    assert got[0] is expected[0] and got[0] is not before[0]  # u * t: built again
    assert format_expr(got[0]) == "(sin(x0[i0]) + 2.0) * exp(x0[i0] * x1[i0])"
    assert calls["n"] == 3  # u * t, exp, x * y; u itself and u - 1 taken


def test_nesting_stays_within_the_room_the_stack_leaves():
    import sys

    assert lower._direct_depth() == lower.DIRECT_DEPTH
    limit = sys.getrecursionlimit()
    frames = 0
    frame = sys._getframe()
    while frame is not None:
        frames, frame = frames + 1, frame.f_back
    try:
        sys.setrecursionlimit(frames + lower._SPARE_FRAMES + 5 * lower._FRAMES_PER_LEVEL + 3)
        assert lower._direct_depth() == 5
        sys.setrecursionlimit(frames + 50)
        assert lower._direct_depth() == 0
    finally:
        sys.setrecursionlimit(limit)


def test_elementwise_ops_read_operands_at_the_output_index():
    assert text(lambda x, y: x * y + 1.0, zeros(4), zeros(4)) == "x0[i0] * x1[i0] + 1.0"
    # a rank-0 operand broadcasts: it is read at the empty index
    assert (
        text(lambda x, s: lax.sub(x, lax.broadcast(s, (4,))), zeros(4), zeros()) == "x0[i0] - x1[0]"
    )


def test_integer_pow_is_binary_exponentiation():
    node = expression(lambda x: lax.integer_pow(x, 5), zeros(3))
    muls = [n for n in kir.toposort([node]) if isinstance(n, kir.Op) and n.op is kir.ScalarOp.MUL]
    assert len(muls) == 3  # x*x, (x*x)*(x*x), then * x
    half = expression(lambda x: lax.integer_pow(x, 2), zeros(3, dtype=np.float16))
    assert format_expr(half) == "f16(f32(x0[i0]) * f32(x0[i0]))"  # one rounding, at the end


def test_select_n_with_an_integer_selector_clips():
    node = text(
        lambda w, a, b, c: lax.select_n(w, a, b, c),
        zeros(3, dtype=np.int32),
        zeros(3),
        zeros(3),
        zeros(3),
    )
    assert node == "select(x0[i0] <= 0, x1[i0], select(x0[i0] <= 1, x2[i0], x3[i0]))"


def test_transpose_and_rev_permute_and_flip_indices():
    assert text(lambda x: x.T, zeros(3, 5)) == "x0[i1 * 5 + i0]"
    assert text(lambda x: lax.rev(x, (1,)), zeros(3, 5)) == "x0[i0 * 5 + (4 - i1)]"


def test_reshape_divides_only_within_merged_dimension_groups():
    # (2, 3, 4) -> (6, 4): the last axis maps straight through, and the merged pair of axes
    # is read back through its flat index
    assert text(lambda x: x.reshape(6, 4), zeros(2, 3, 4)) == "x0[i0 * 4 + i1]"
    # a split is read at the split indices' flat position; a transpose in between keeps the
    # division (the merged axes are no longer adjacent in memory)
    assert text(lambda x: x.reshape(2, 3, 4), zeros(6, 4)) == "x0[(i0 * 3 + i1) * 4 + i2]"
    assert "/" in text(lambda x: x.T.reshape(12), zeros(3, 4))
    # adding and removing size-1 axes costs no arithmetic at all
    assert text(lambda x: x.reshape(1, 3, 1, 4), zeros(3, 4)) == "x0[i1 * 4 + i3]"
    # a flatten reads the flat index itself, not its unravelling
    assert text(lambda x: x.reshape(12), zeros(3, 4)) == "x0[i0]"
    assert text(lambda x: x.reshape(12)[::-1], zeros(3, 4)) == "x0[11 - i0]"


def test_broadcast_slice_and_squeeze_are_index_arithmetic():
    assert text(lambda x: jnp.broadcast_to(x, (4, 3)), zeros(1, 3)) == "x0[i1]"
    assert text(lambda x: x[1:7:3], zeros(9)) == "x0[i0 * 3 + 1]"
    assert text(lambda x: x[:, 0], zeros(3, 1)) == "x0[i0]"


def test_pad_selects_the_padding_value_outside_the_operand():
    node = text(lambda x: lax.pad(x, 9.0, [(2, 1, 0)]), zeros(4))
    assert node == "select(i0 - 2 >= 0 and i0 - 2 < 4, x0[min(max(i0 - 2, 0), 3)], 9.0)"


def test_concatenate_selects_between_clamped_reads():
    node = text(lambda x, y: jnp.concatenate([x, y]), zeros(2), zeros(3))
    assert node == "select(i0 < 2, x0[min(max(i0, 0), 1)], x1[min(max(i0 - 2, 0), 2)])"


def test_iota_is_the_index_itself():
    assert (
        text(lambda x: x + lax.broadcasted_iota(np.float32, (2, 3), 1), zeros(2, 3))
        == "x0[i0 * 3 + i1] + f32(i1)"
    )


def test_dynamic_slice_clamps_its_start():
    node = text(lambda x, i: lax.dynamic_slice(x, (i,), (2,)), zeros(5), jnp.asarray(np.int32(1)))
    # (kiln.numpy's wrapper first wraps a negative start; the primitive then clamps it)
    assert node.startswith("x0[i0 + min(max(i64(") and node.endswith(", 0), 3)]")


def test_dynamic_update_slice_is_a_select_over_the_update_range():
    node = text(
        lambda x, u, i: lax.dynamic_update_slice(x, u, (i,)),
        zeros(5),
        zeros(2),
        jnp.asarray(np.int32(1)),
    )
    assert node.startswith("select(") and "x1[min(max(" in node and "x0[i0]" in node


def test_gather_clamps_indices_or_fills():
    take = text(lambda x, i: x[i], zeros(5), jnp.asarray(np.array([1, 2], np.int32)))
    assert "min(max(" in take and "x1[i0]" in take
    fill = expression(
        lambda x, i: x.at[i].get(mode="fill", fill_value=-1.0),
        zeros(5),
        jnp.asarray(np.array([1, 9], np.int32)),
    )
    assert fill.op is kir.ScalarOp.SELECT and fill.args[2] is kir.Const(-1.0, F32)


def test_reductions_nest_the_last_axis_innermost():
    node = expression(lambda x: x.sum(axis=(0, 2)), zeros(2, 3, 4))
    assert isinstance(node, kir.Reduce) and isinstance(node.value, kir.Reduce)
    assert node.stop is kir.as_index(2) and node.value.stop is kir.as_index(4)


def test_narrow_float_sums_accumulate_in_float32_across_axes():
    node = expression(lambda x: lax.reduce_sum(x, (0, 1)), zeros(2, 3, dtype=np.float16))
    assert node.op is kir.ScalarOp.CAST and node.dtype == np.float16
    assert node.args[0].dtype == F32 and node.args[0].value.dtype == F32


def test_argmax_is_an_arg_reduction_with_the_index_dtype():
    node = expression(lambda x: jnp.argmax(x, axis=1), zeros(3, 4))
    assert node.kind is kir.ReduceKind.ARGMAX and node.dtype == np.int32


def test_empty_operands_are_never_loaded():
    node = expression(lambda x, y: jnp.concatenate([x, y]), zeros(0), zeros(3))
    assert all(
        not (isinstance(n, kir.Load) and n.buffer.name == "x0") for n in kir.toposort([node])
    )


def test_literals_and_scalars_inline_as_constants():
    closed = kiln.make_jaxpr(lambda x: x * 2.5)(zeros(3))
    (eqn,) = closed.jaxpr.eqns
    assert any(type(a) is Literal for a in eqn.invars)
    assert text(lambda x: x * 2.5, zeros(3)) == "x0[i0] * 2.5"
    bf16 = text(lambda x: x * 0.1, zeros(3, dtype=ml_dtypes.bfloat16))
    assert "0.1" in bf16  # rounded to bfloat16's nearest value, printed as such


def test_a_rule_that_returns_the_wrong_dtype_is_caught():
    prim = elementwise.neg_p
    saved = lower.lowering_rules[prim]
    try:
        lower.register_lowering(prim)(lambda ctx, index, x: kir.cast(x.read(index), np.int32))
        with pytest.raises(kir.KirError, match="produced a i32 value"):
            expression(lambda x: -x, zeros(3))
    finally:
        lower.register_lowering(prim)(saved)

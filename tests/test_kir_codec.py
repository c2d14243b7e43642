"""Kernel IR as bytes and fingerprints (kiln.runtime.kir_codec): a serialized program reads
back as the same program (same text, same LLVM IR, same fingerprint), fingerprints tell apart
programs that differ in one constant, dtype, role or shape, and the engine finds a program's
machine code by its fingerprint without verifying or emitting it again."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from kiln.codegen.llvm import emit, target
from kiln.compiler import kir
from kiln.compiler.kir import (
    Buffer,
    Const,
    If,
    Kernel,
    Loop,
    MatMul,
    Program,
    Reduce,
    ReduceKind,
    Store,
    Var,
)
from kiln.runtime import engine, kir_codec

F32 = np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)


def _program(constant: float = 2.0, dtype=F32, role: str = "output", rows: int = 6) -> Program:
    """Every node and statement kind: loads, ops, a sum with an init, an argmax with an int32
    index and its value, a conditional store, a BLAS product, -0.0 and NaN constants."""
    cols = 5
    x = Buffer("x", dtype, (rows, cols))
    w = Buffer("w", F32, (cols, 3))
    out = Buffer("out", dtype, (rows,), role)
    where = Buffer("where", np.int32, (rows,), "output")
    best = Buffer("best", dtype, (rows,), "output")
    product = Buffer("product", F32, (rows, 3), "output")
    xf = Buffer("xf", F32, (rows, cols), "temp")
    i, j = Var("i"), Var("j")
    element = x[i, j]
    total = Reduce(ReduceKind.SUM, j, 0, cols, element * Const(constant, dtype), init=-0.0)
    arg = Reduce(ReduceKind.ARGMAX, j, 0, cols, element, index_dtype=np.int32)
    positive = kir.op(kir.ScalarOp.GT, total, Const(0.0, dtype))
    body = [
        Loop(
            i,
            0,
            rows,
            [
                Store(out, i, kir.select(kir.op(kir.ScalarOp.NE, total, total), math.nan, total)),
                Store(where, i, arg),
                If(positive, [Store(best, i, kir.ArgValue(arg))]),
                Loop(j, 0, cols, [Store(xf, (i, j), kir.cast(element, F32))]),
            ],
        ),
        MatMul(product, xf, w, rows, 3, cols, lda=cols, ldb=3, ldc=3),
    ]
    buffers = [x, w, out, where, best, product, xf]
    return Program("codec", buffers, [Kernel("k", body)])


def test_a_program_reads_back_as_itself():
    program = _program()
    again = kir_codec.loads(kir_codec.dumps(program))
    assert again is not program
    assert str(again) == str(program)
    assert kir_codec.fingerprint(again) == kir_codec.fingerprint(program)
    host = engine.Engine(target.host_target())
    assert host.emit_ir(again) == host.emit_ir(program)


def test_narrow_float_programs_read_back_too():
    program = _program(dtype=BF16)
    again = kir_codec.loads(kir_codec.dumps(program))
    assert str(again) == str(program)
    assert again.buffers[0].dtype == BF16
    assert kir_codec.fingerprint(again) == kir_codec.fingerprint(program)


@pytest.mark.parametrize(
    "other",
    [
        {"constant": 3.0},
        {"constant": -2.0},
        {"dtype": np.dtype(np.float64)},
        {"role": "temp"},
        {"rows": 7},
    ],
)
def test_fingerprints_tell_programs_apart(other):
    assert kir_codec.fingerprint(_program(**other)) != kir_codec.fingerprint(_program())


def test_zero_and_negative_zero_are_different_programs():
    x, y = Buffer("x", F32, (4,)), Buffer("y", F32, (4,), "output")
    i = Var("i")

    def adding(zero):
        return Program("z", [x, y], [Kernel("k", [Loop(i, 0, 4, [Store(y, i, x[i] * zero)])])])

    assert kir_codec.fingerprint(adding(Const(0.0, F32))) != kir_codec.fingerprint(
        adding(Const(-0.0, F32))
    )


def test_the_fingerprint_does_not_depend_on_which_equal_buffer_a_node_holds():
    # Nodes are interned by value: a program built later may hold buffer objects of an
    # earlier, equal one. The fingerprint must not see the difference.
    def build():
        x, y = Buffer("x", F32, (8,)), Buffer("y", F32, (8,), "output")
        i = Var("i")
        return Program("p", [x, y], [Kernel("k", [Loop(i, 0, 8, [Store(y, i, x[i] + 1.0)])])])

    first, second = build(), build()
    assert first.buffers[0] is not second.buffers[0]
    assert kir_codec.fingerprint(first) == kir_codec.fingerprint(second)


class _Strange(kir.Stmt):
    __slots__ = ()


def test_an_unknown_node_has_no_fingerprint_and_still_compiles_by_its_ir(monkeypatch):
    program = _program()
    strange = Program("s", program.buffers, [Kernel("k", list(program.kernels[0].body))])
    assert kir_codec.fingerprint(Program("s", [], [Kernel("k", [_Strange()], params=[])])) is None
    with pytest.raises(kir_codec.UnknownNode):
        kir_codec.dumps(Program("s", [], [Kernel("k", [_Strange()], params=[])]))
    # A program the codec cannot fingerprint is keyed by its emitted IR (here: the codec is
    # made to fail), compiles and runs.
    monkeypatch.setattr(kir_codec, "fingerprint", lambda program: None)
    native = engine.Engine(target.host_target()).compile(strange)
    _check(native, strange)


def _check(native, program) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    out, where, best, product = native(x, w)
    total = (x * 2).sum(1)
    np.testing.assert_allclose(out, total, rtol=1e-5)
    np.testing.assert_array_equal(where, x.argmax(1))
    positive = total > 0
    np.testing.assert_array_equal(best[positive], x.max(1)[positive])
    np.testing.assert_allclose(product, x @ w, rtol=1e-5, atol=1e-5)


def test_the_engine_finds_a_rebuilt_program_without_emitting_it(monkeypatch):
    host = engine.Engine(target.host_target())
    first = host.compile(_program())
    _check(first, _program())
    emitted = []
    original = emit.emit_program
    monkeypatch.setattr(emit, "emit_program", lambda p: emitted.append(p) or original(p))
    monkeypatch.setattr(kir, "verify_program", lambda p: emitted.append(p))
    again = host.compile(kir_codec.loads(kir_codec.dumps(_program())))
    assert again is first and not emitted
    # The IR is still there for whoever asks (emitted then, once).
    assert again.unoptimized_ir and "define" in again.unoptimized_ir


def test_the_content_fingerprint_leaves_out_the_program_name_only():
    program = _program()
    renamed = Program("renamed", program.buffers, program.kernels)
    (full, content), (full_renamed, content_renamed) = map(
        kir_codec.fingerprints, (program, renamed)
    )
    assert full == kir_codec.fingerprint(program) and full != full_renamed
    assert content == content_renamed
    assert kir_codec.fingerprints(_program(constant=3.0))[1] != content
    assert kir_codec.fingerprints(_program(rows=7))[1] != content

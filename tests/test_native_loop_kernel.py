"""Loops in one native call: small scans compiled with their loop as one kernel
(kiln/runtime/native_loop_kernel.py) and the driver's descriptors
(kiln/runtime/native_loop_driver.py).

A scan run as one kernel rounds every operation on its own, so for a body of arithmetic it
gives the bits of a NumPy loop doing the same float32 operations (and of the interpreter
backend), on the host and on the baseline targets; the same scan run one row per call (whose
kernels may fuse a multiply and an add) agrees within rounding.
"""

from __future__ import annotations


import re

import numpy as np
import optree
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.codegen.llvm import emit
from kiln.compiler import kir
from kiln.runtime import native_loop_driver, native_loop_kernel
from tests._testing import CODEGEN_TARGETS, results_in_threads, use_codegen_target

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native


@pytest.fixture(autouse=True)
def strict_native(monkeypatch):
    """Backend errors fail the test instead of silently falling back to the interpreter."""
    monkeypatch.setattr(kiln.config, "native_strict", True)


@pytest.fixture(params=CODEGEN_TARGETS)
def codegen_target(request):
    with use_codegen_target(request.param) as current:
        yield current


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in optree.tree_leaves(tree, namespace="kiln")]


def both_ways(monkeypatch, fn, *args):
    """(results as one kernel, results one row per call, the first's text), after checking
    that the two agree within rounding and that the first has the interpreter's bits."""
    kiln.clear_caches()
    compiled = kiln.jit(fn).lower(*args).compile()
    merged = leaves(compiled(*args))
    text = compiled.as_text()
    with monkeypatch.context() as patch:
        patch.setattr(native_loop_kernel, "MAX_CARRY_BYTES", -1)
        kiln.clear_caches()
        per_row = leaves(kiln.jit(fn)(*args))
    kiln.clear_caches()
    assert_same_bits(merged, leaves(kiln.jit(fn, backend="interpret")(*args)))
    for a, b in zip(merged, per_row):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    return merged, per_row, text


def assert_same_bits(got: list, want: list) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def one_kernel(text: str) -> bool:
    return any(
        line.startswith("compiled scan") and "in one kernel" in line for line in text.splitlines()
    )


def logistic(steps: int):
    def f(x):
        return lax.fori_loop(0, steps, lambda i, c: c * 0.999 + 0.001 * c * c, x)

    return f


@pytest.mark.parametrize("steps", [0, 1, 2, 7, 1000])
def test_fori_loop_on_two_floats_is_one_kernel_with_numpy_bits(monkeypatch, codegen_target, steps):
    x = np.float32([0.1, 0.9])
    merged, _, text = both_ways(monkeypatch, logistic(steps), x)
    assert one_kernel(text)
    expected = x.copy()
    for _ in range(steps):
        expected = expected * np.float32(0.999) + np.float32(0.001) * expected * expected
    assert_same_bits(merged, [expected])


def test_no_multiply_add_is_contracted_across_rows(monkeypatch, codegen_target):
    # Each row ends in a multiply that the next row's first add reads: in one function the
    # two could fuse into a multiply-add, which rounds once where NumPy rounds twice.
    def f(x):
        return lax.fori_loop(0, 301, lambda i, c: (c + 0.3) * 0.7, x)

    x = np.float32([0.1, 0.9, -2.5])
    merged, per_row, text = both_ways(monkeypatch, f, x)
    assert one_kernel(text)
    assert_same_bits(merged, per_row)  # (the row-by-row loop rounds at each row's end)
    expected = x.copy()
    for _ in range(301):
        expected = (expected + np.float32(0.3)) * np.float32(0.7)
    assert_same_bits(merged, [expected])


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [1, 4, 5])
def test_scan_with_consts_xs_ys_counter_and_passthrough(monkeypatch, reverse, length):
    scale = np.float32([1.5, -0.5, 0.25])

    def f(c0, rows, fixed):
        def body(carry, x):
            c, k, kept = carry
            c = c * jnp.asarray(scale) + x * kept
            return (c, k + 1, kept), (c * 2.0 - 1.0, k.astype(jnp.float32) + x.max())

        return lax.scan(body, (c0, jnp.int32(0), fixed), rows, reverse=reverse)

    c0 = np.float32([1.0, -1.0, 0.5])
    rows = (np.arange(3 * length, dtype=np.float32).reshape(length, 3) - 4.0) / 3.0
    fixed = np.float32(0.75)
    merged, _, text = both_ways(monkeypatch, f, c0, rows, fixed)
    assert one_kernel(text)
    c, ys, ks = c0.copy(), np.zeros((length, 3), np.float32), np.zeros(length, np.float32)
    order = range(length - 1, -1, -1) if reverse else range(length)
    for step, i in enumerate(order):
        c = c * scale + rows[i] * fixed
        ys[i], ks[i] = c * 2 - 1, step + rows[i].max()
    assert_same_bits(merged, [c, np.int32(length), fixed, ys, ks])


def test_body_of_several_kernels_keeps_their_boundaries(monkeypatch, codegen_target):
    # The body fuses into three kernels with a temp between two of them, and one of its ys
    # is read by a later kernel.
    def f(c0, xs):
        def body(c, x):
            outer = c[:, None] * x[None, :]
            r = jnp.max(outer, axis=0)
            q = jnp.min(r[::-1][:, None] * outer, axis=0)
            return q * 0.1 + c * 0.5, r

        return lax.scan(body, c0, xs)

    c0 = np.float32([0.5, -0.25, 1.0])
    xs = np.linspace(-1, 1, 21).astype(np.float32).reshape(7, 3)
    merged, _, text = both_ways(monkeypatch, f, c0, xs)
    assert one_kernel(text)
    c, rs = c0.copy(), []
    for x in xs:
        outer = c[:, None] * x[None, :]
        r = outer.max(axis=0)
        c = (r[::-1][:, None] * outer).min(axis=0) * np.float32(0.1) + c * np.float32(0.5)
        rs.append(r)
    assert_same_bits(merged, [c, np.array(rs)])


def test_float_sums_in_the_body_stay_one_row_per_call():
    # Rounded one operation at a time, a float sum could not be vectorized: the body keeps
    # its own kernels.
    def f(c0, xs):
        return lax.scan(lambda c, x: (c * 0.5 + jnp.sum(c * x), c), c0, xs)

    c0 = np.float32([0.5, -0.25, 1.0])
    xs = np.linspace(-1, 1, 12).astype(np.float32).reshape(4, 3)
    compiled = kiln.jit(f).lower(c0, xs).compile()
    text = compiled.as_text()
    assert "one native call" in text and not one_kernel(text)
    c, ys = c0.astype(np.float64), []
    for x in xs:
        ys.append(c)
        c = c * 0.5 + np.sum(c * x)
    got = leaves(compiled(c0, xs))
    np.testing.assert_allclose(got[0], c, rtol=1e-5)
    np.testing.assert_allclose(got[1], np.array(ys), rtol=1e-5)


def test_large_carry_stays_one_row_per_call():
    f = kiln.jit(logistic(10))
    x = np.linspace(0.1, 0.9, native_loop_kernel.MAX_CARRY_BYTES // 4 + 1).astype(np.float32)
    compiled = f.lower(x).compile()
    assert not one_kernel(compiled.as_text())
    assert "one native call" in compiled.as_text()
    expected = x.copy()
    for _ in range(10):
        expected = expected * np.float32(0.999) + np.float32(0.001) * expected * expected
    np.testing.assert_allclose(np.asarray(compiled(x)), expected, rtol=1e-6)


# --- the driver's calls --------------------------------------------------------------------------


def test_operands_native_code_cannot_read_as_they_are_are_converted():
    def f(c0, rows):
        return lax.scan(lambda c, x: (c * 0.5 + x, c - x), c0, rows)

    rows = np.arange(40, dtype=np.float32).reshape(5, 8).T  # not C-contiguous
    c0 = np.arange(10, dtype=np.float32)[::2]  # strided
    got = leaves(kiln.jit(f)(c0, rows))
    want = leaves(kiln.jit(f)(np.ascontiguousarray(c0), np.ascontiguousarray(rows)))
    assert_same_bits(got, want)
    c, ys = c0.copy(), []
    for x in rows:
        ys.append(c - x)
        c = c * np.float32(0.5) + x
    np.testing.assert_allclose(got[0], c, rtol=1e-6)
    np.testing.assert_allclose(got[1], np.array(ys), rtol=1e-6)


@pytest.mark.parametrize("size", [2, 64])
def test_zero_iterations_return_a_fresh_copy_of_a_stored_carry(size):
    def f(x, n):
        return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))

    x = np.arange(size, dtype=np.float32)
    k, y = kiln.jit(f)(x, np.int32(0))
    assert int(np.asarray(k)) == 0
    x[0] = 100.0  # the caller's buffer changes; the result must not
    np.testing.assert_array_equal(np.asarray(y), np.arange(size, dtype=np.float32))
    x[0] = 0.0
    k, y = kiln.jit(f)(x, np.int32(3))
    np.testing.assert_array_equal(np.asarray(y), x * 8)


@pytest.fixture
def calls(monkeypatch):
    """Every loop call built while the test runs."""
    made = []
    original = native_loop_driver._Call.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(native_loop_driver._Call, "__init__", record)
    return made


@pytest.mark.parametrize("size", [2, 64])
def test_a_call_while_another_runs_uses_its_own_descriptor(calls, size):
    kiln.clear_caches()
    f = kiln.jit(logistic(50))
    x = np.linspace(0.1, 0.9, size).astype(np.float32)
    alone = np.asarray(f(x))
    (call,) = calls
    with call.lock:  # as if another thread were inside the driver
        contended = np.asarray(f(x))
    assert_same_bits([contended], [alone])


def test_threads_calling_one_small_loop_agree():
    f = kiln.jit(lambda x, n: lax.fori_loop(0, 300, lambda i, c: c * 0.99 + n, x))
    inputs = [np.full(3, float(k), np.float32) for k in range(6)]
    expected = [np.asarray(f(x, np.float32(k))) for k, x in enumerate(inputs)]
    arguments = [(x, np.float32(k)) for k, x in enumerate(inputs)]
    results = results_in_threads(lambda *a: np.asarray(f(*a)), arguments, repeats=50)
    for got, want in zip(results, expected):
        assert_same_bits([got], [want])


# --- rounded kernels ---------------------------------------------------------------------------


def test_rounded_kernels_carry_no_fast_math_flags(codegen_target):
    index = kir.Var("i")
    a = kir.Buffer("a", np.float32, (4,))
    b = kir.Buffer("b", np.float32, (4,))
    out = kir.Buffer("out", np.float32, (4,), "output")
    total = kir.Buffer("total", np.float32, (), "output")
    body = [
        kir.Loop(index, 0, 4, [kir.Store(out, index, kir.Load(a, index) * kir.Load(b, index) + 1)]),
        kir.Store(total, 0, kir.Reduce(kir.ReduceKind.SUM, index, 0, 4, kir.Load(a, index))),
    ]
    texts = {}
    for name in ("k", "k" + emit.ROUNDED_SUFFIX):
        program = kir.Program("p", [a, b, out, total], [kir.Kernel(name, body)])
        texts[name] = str(emit.emit_program(program))
    assert "fmul contract" in texts["k"] and "reassoc" in texts["k"]
    rounded = texts["k" + emit.ROUNDED_SUFFIX]
    # (the store loop is a 4-lane strip, the sum scalar: plain instructions either way)
    assert re.search(r"fmul (<4 x )?float", rounded) and re.search(r"fadd (<4 x )?float", rounded)
    assert "contract" not in rounded and "reassoc" not in rounded


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8])
def test_carries_of_other_dtypes(monkeypatch, dtype):
    def f(x, flag):
        def body(i, carry):
            c, on = carry
            c = c * 3 + (c // 2 if np.dtype(dtype).kind in "iu" else c / 2)
            return c, jnp.logical_not(on)

        return lax.fori_loop(0, 9, body, (x, flag))

    x = np.array([1, 2, 5], dtype)
    merged, _, text = both_ways(monkeypatch, f, x, np.bool_(True))
    assert one_kernel(text)
    c = x.copy()
    for _ in range(9):
        c = c * dtype(3) + (c // dtype(2) if np.dtype(dtype).kind in "iu" else c / dtype(2))
    assert_same_bits(merged, [c, np.bool_(False)])

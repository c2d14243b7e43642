"""Hand-built kernel IR programs timed next to NumPy doing the same work (figures, no asserts).

Run: .venv/bin/python benchmarks/bench_kernels.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from kiln.compiler import kir
from kiln.compiler.kir import Buffer, Kernel, Program, Reduce, ReduceKind, ScalarOp, Store, Var
from kiln.runtime.engine import compile_program

from _harness import result_row


def timings(function, repeats: int = 20) -> tuple[float, float]:
    """(best, median) wall time of several runs after one warm-up, in seconds. The machine is
    shared, so the best is the figure to compare and the median says how noisy it was."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def elementwise_chain(n: int):
    """Ten fused elementwise ops: ((x*1.5 + y) * 0.5 - x) ... on n float32 elements."""
    x = Buffer("x", np.float32, (n,))
    y = Buffer("y", np.float32, (n,))
    out = Buffer("out", np.float32, (n,), "output")
    i = Var("i")
    a, b = x[i], y[i]
    v = a * 1.5 + b  # 2 ops
    v = v * 0.5 - a  # 4
    v = kir.op(ScalarOp.MAX, v, b)  # 5
    v = kir.op(ScalarOp.ABS, v) + 1.0  # 7
    v = kir.op(ScalarOp.SQRT, v)  # 8
    v = v * b - 0.25  # 10
    kernel = Kernel("chain", [kir.Loop(i, 0, n, [Store(out, i, v)])])
    program = Program("chain", [x, y, out], [kernel])

    def numpy_chain(xs, ys):
        v = xs * np.float32(1.5) + ys
        v = v * np.float32(0.5) - xs
        v = np.maximum(v, ys)
        v = np.abs(v) + np.float32(1.0)
        v = np.sqrt(v)
        return v * ys - np.float32(0.25)

    return program, numpy_chain


def row_sum(rows: int, cols: int):
    x = Buffer("x", np.float32, (rows, cols))
    out = Buffer("out", np.float32, (rows,), "output")
    k = Var("k")
    body = kir.loop_nest(
        (rows,), lambda i: [Store(out, i, Reduce(ReduceKind.SUM, k, 0, cols, x[i, k]))]
    )
    return Program("row_sum", [x, out], [Kernel("row_sum", body)]), lambda xs: xs.sum(axis=1)


def column_sum(rows: int, cols: int):
    """Accumulate rows into the output row: the loop order that streams memory."""
    x = Buffer("x", np.float32, (rows, cols))
    out = Buffer("out", np.float32, (cols,), "output")
    init = kir.loop_nest((cols,), lambda j: [Store(out, j, 0.0)], prefix="j")
    accumulate = kir.loop_nest((rows, cols), lambda i, j: [kir.accumulate(out, j, x[i, j])])
    return (
        Program("column_sum", [x, out], [Kernel("column_sum", init + accumulate)]),
        lambda xs: xs.sum(axis=0),
    )


def column_sum_strided(rows: int, cols: int):
    """The same column sum as a Reduce per column: a strided inner loop (for comparison)."""
    x = Buffer("x", np.float32, (rows, cols))
    out = Buffer("out", np.float32, (cols,), "output")
    k = Var("k")
    body = kir.loop_nest(
        (cols,), lambda j: [Store(out, j, Reduce(ReduceKind.SUM, k, 0, rows, x[k, j]))]
    )
    return Program("column_sum_strided", [x, out], [Kernel("columns", body)]), lambda xs: xs.sum(
        axis=0
    )


def tiny_add():
    """x + y on 4 floats: the cost of one call through the native entry."""
    x, y = Buffer("x", np.float32, (4,)), Buffer("y", np.float32, (4,))
    out = Buffer("out", np.float32, (4,), "output")
    i = Var("i")
    kernel = Kernel("add", [kir.Loop(i, 0, 4, [Store(out, i, x[i] + y[i])])])
    return Program("tiny_add", [x, y, out], [kernel]), np.add


def report(name: str, program: Program, reference, inputs) -> dict:
    start = time.perf_counter()
    native = compile_program(program)
    compile_ms = (time.perf_counter() - start) * 1e3
    outputs = [np.empty(b.shape, b.dtype) for b in program.outputs]
    pointers = np.array([a.ctypes.data for a in list(inputs) + outputs], dtype=np.uint64)
    address = pointers.ctypes.data  # what an executable caches: one int per call
    kiln_best, kiln_median = timings(lambda: native.entry(address))
    numpy_best, numpy_median = timings(lambda: reference(*inputs))
    expected = reference(*inputs)
    error = np.max(np.abs(outputs[0] - expected)) / np.max(np.abs(expected))
    unit, scale = ("us", 1e6) if kiln_best < 1e-4 else ("ms", 1e3)
    print(
        f"{name:<36} kiln {kiln_best * scale:8.3f} {unit} (median {kiln_median * scale:8.3f})"
        f"   numpy {numpy_best * scale:8.3f} {unit} (median {numpy_median * scale:8.3f})"
        f"   numpy/kiln {numpy_best / kiln_best:5.2f}x"
        f"   compile {compile_ms:4.0f} ms, error {error:.1e}"
    )
    return result_row(f"kernel IR: {name}", kiln_best, numpy_best)


def main(quick: bool = False) -> list[dict]:
    rng = np.random.default_rng(0)
    n, side = (1_000_000, 1024) if quick else (10_000_000, 2048)
    xs, ys = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    rows = [
        report(f"10 fused elementwise ops, {n // 1_000_000}M f32", *elementwise_chain(n), (xs, ys))
    ]
    matrix = rng.standard_normal((side, side), dtype=np.float32)
    rows.append(report(f"row sum {side}x{side} f32", *row_sum(side, side), (matrix,)))
    rows.append(report(f"column sum {side}x{side} f32", *column_sum(side, side), (matrix,)))
    rows.append(
        report("column sum, strided Reduce form", *column_sum_strided(side, side), (matrix,))
    )
    small = rng.standard_normal(4, dtype=np.float32)
    rows.append(report("x + y on 4 f32 (call overhead)", *tiny_add(), (small, small)))
    return rows


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format; `quick` shrinks the arrays."""
    return main(quick)


if __name__ == "__main__":
    main()

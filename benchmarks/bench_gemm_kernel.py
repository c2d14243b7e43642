"""kiln's packed gemm kernel (kiln/codegen/llvm/packed_gemm.py) against BLAS and JAX.

The kernel is compiled for the host and called through ctypes (which releases the GIL), so the
figures are the kernel's alone, without kiln's dispatch. One thread: kiln next to scipy's
bundled OpenBLAS pinned to one thread (what kiln calls today) and NumPy's matmul (its default
threads). Two threads: two Python threads each multiply half of a's rows, next to the same split
with OpenBLAS, NumPy and jax.jit(jnp.dot) when JAX imports. Then the two shapes where kiln uses
small_gemm (b at most 1 MiB), next to that kernel.

Run: .venv/bin/python benchmarks/bench_gemm_kernel.py [--quick]
(with JAX: PYTHONPATH=.:.venv/lib/python3.11/site-packages <jax venv>/bin/python ...)
Each figure is the median of several calls, in blocks that take turns; the machine may be
shared: read the ratios.
"""

from __future__ import annotations

import ctypes
import pathlib
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from llvmlite import binding as llvm  # noqa: E402
from llvmlite import ir  # noqa: E402

from kiln.codegen.llvm import packed_gemm, small_gemm, target  # noqa: E402
from kiln.codegen.llvm import types as T  # noqa: E402
from kiln.primitives import blas  # noqa: E402
from _harness import rows_of  # noqa: E402

_ENGINES = []  # keeps the JIT engines (and so the code) alive
_ROW_MAJOR, _NO_TRANS = 101, 111
_GEMM_ARGUMENTS = [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.c_int64] * 3


def _jit(module: ir.Module, name: str, signature):
    current = target.current_target()
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    machine = current.create_machine()
    target.optimize(parsed, machine)
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    _ENGINES.append(engine)
    return signature(engine.get_function_address(name))


def _module() -> ir.Module:
    current = target.current_target()
    module = ir.Module(name="bench_gemm_kernel")
    module.triple = current.triple
    module.data_layout = current.data_layout
    return module


def packed_kernel(dtype):
    """(a, b, c) -> None running kiln_packed_gemm on whole arrays."""
    module = _module()
    name = packed_gemm.define(module, dtype).name
    function = _jit(module, name, ctypes.CFUNCTYPE(None, *_GEMM_ARGUMENTS))

    def run(a, b, c):
        (m, k), n = a.shape, b.shape[1]
        size = a.itemsize
        function(
            m,
            n,
            k,
            a.ctypes.data,
            a.strides[0] // size,
            b.ctypes.data,
            b.strides[0] // size,
            c.ctypes.data,
            c.strides[0] // size,
        )

    return run


def small_kernel(dtype, m, n, k):
    """(a, b, c) -> None running small_gemm's loop on whole arrays."""
    module = _module()
    if hasattr(small_gemm, "define"):  # extents and strides given at run time
        small_gemm.define(module, "run", np.dtype(dtype))
        arguments = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 6
        compiled = _jit(module, "run", ctypes.CFUNCTYPE(None, *arguments))
        return lambda a, b, c: compiled(
            a.ctypes.data, b.ctypes.data, c.ctypes.data, m, n, k, k, n, n
        )
    function = ir.Function(module, ir.FunctionType(T.VOID, [T.PTR] * 3), "run")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    a, b, c = function.args
    small_gemm.emit(builder, np.dtype(dtype), m, n, k, a, k, b, n, c, n)
    builder.ret_void()
    compiled = _jit(module, "run", ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3))
    return lambda a, b, c: compiled(a.ctypes.data, b.ctypes.data, c.ctypes.data)


def openblas_kernel():
    """(a, b, c) -> None calling scipy's bundled OpenBLAS, pinned to one thread, or None."""
    library = blas.scipy_openblas()
    if library is None or not hasattr(library, "scipy_cblas_sgemm"):
        return None
    blas.pin_scipy_openblas()
    functions = {}
    for letter, scalar, dtype in (
        ("s", ctypes.c_float, np.float32),
        ("d", ctypes.c_double, np.float64),
    ):
        function = getattr(library, f"scipy_cblas_{letter}gemm")
        function.restype = None
        matrix = [ctypes.c_void_p, ctypes.c_int]  # pointer, row stride
        function.argtypes = [ctypes.c_int] * 6 + [scalar] + matrix * 2 + [scalar] + matrix
        functions[np.dtype(dtype)] = function

    def run(a, b, c):
        (m, k), n = a.shape, b.shape[1]
        size = a.itemsize
        functions[a.dtype](
            _ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, 1.0,
            a.ctypes.data, a.strides[0] // size,
            b.ctypes.data, b.strides[0] // size,
            0.0, c.ctypes.data, c.strides[0] // size,
        )  # fmt: skip

    return run


def jax_dot():
    """jax.jit(jnp.dot) on CPU, or None when JAX does not import."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    dot = jax.jit(jnp.dot)

    def run(a, b):
        if a.dtype != np.float64:
            return dot(a, b).block_until_ready()
        with jax.enable_x64(True):  # else float64 operands would multiply in float32
            return dot(a, b).block_until_ready()

    return run


def _split(pool: ThreadPoolExecutor, kernel):
    """The kernel on two threads, each taking half of a's rows (and of c's)."""

    def run(a, b, c):
        half = a.shape[0] // 2
        futures = [
            pool.submit(kernel, a[:half], b, c[:half]),
            pool.submit(kernel, a[half:], b, c[half:]),
        ]
        for future in futures:
            future.result()

    return run


def median_times(systems: dict, repeat: int, rounds: int = 3) -> dict:
    """Median seconds per call of each system. Each system runs a block of calls on its own,
    after a pause: NumPy's and JAX's worker threads spin for a while after a call and would
    slow whatever runs next. The blocks take turns over a few rounds."""
    samples = {name: [] for name in systems}
    for _ in range(rounds):
        for name, fn in systems.items():
            time.sleep(0.05)
            fn()
            for _ in range(repeat):
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def _report(label: str, flops: float, times: dict) -> None:
    figures = "  ".join(f"{name} {flops / t / 1e9:6.1f}" for name, t in times.items())
    base = times["kiln"]
    ratios = "  ".join(
        f"{name}/kiln {t / base:5.2f}" for name, t in times.items() if name != "kiln"
    )
    print(f"{label:26s} GFLOP/s: {figures}   time ratios: {ratios}", flush=True)


def main(quick: bool = False) -> list[tuple[str, dict]]:
    """Print the tables; return the two-thread rows (workload, {system: seconds})."""
    repeat = 3 if quick else 5
    rng = np.random.default_rng(0)
    openblas = openblas_kernel()
    jax = jax_dot()
    kernels = {np.dtype(np.float32): packed_kernel(np.float32)}
    kernels[np.dtype(np.float64)] = packed_kernel(np.float64)
    shapes = [
        (1024, 1024, 1024, np.float32),
        (2048, 1024, 1024, np.float32),
        (512, 512, 512, np.float32),
        (256, 256, 256, np.float32),
        (4096, 256, 1024, np.float32),
        (1024, 1024, 1024, np.float64),
    ]
    if quick:
        shapes = shapes[2:4]
    operands = []
    for m, n, k, dtype in shapes:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        operands.append((f"{m}x{n}x{k} {np.dtype(dtype).name}", 2.0 * m * n * k, a, b))
    print(f"target: {target.current_target().describe()}; the machine may be shared")
    print("\none thread (numpy: its default threads)")
    for label, flops, a, b in operands:
        kernel = kernels[a.dtype]
        c = np.empty((a.shape[0], b.shape[1]), a.dtype)
        systems = {"kiln": lambda: kernel(a, b, c)}
        if openblas is not None:
            systems["openblas"] = lambda: openblas(a, b, c)
        systems["numpy"] = lambda: np.matmul(a, b, out=c)
        _report(label, flops, median_times(systems, repeat))
    print("\ntwo threads, each half of the rows (numpy and jax: their own threading)")
    split = []
    with ThreadPoolExecutor(2) as pool:
        for label, flops, a, b in operands:
            c = np.empty((a.shape[0], b.shape[1]), a.dtype)
            kernel = _split(pool, kernels[a.dtype])
            systems = {"kiln": lambda: kernel(a, b, c)}
            if openblas is not None:
                split_blas = _split(pool, openblas)
                systems["openblas"] = lambda: split_blas(a, b, c)
            systems["numpy"] = lambda: np.matmul(a, b, out=c)
            if jax is not None:
                systems["jax"] = lambda: jax(a, b)
            times = median_times(systems, repeat)
            _report(label, flops, times)
            split.append((f"gemm kernel {label}, 2 threads", times))
    print("\nwhere small_gemm applies (b at most 1 MiB), one thread")
    for m, n, k in ((32, 256, 256), (128, 512, 512)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        small = small_kernel(np.float32, m, n, k)
        kernel = kernels[a.dtype]
        systems = {"kiln": lambda: kernel(a, b, c), "small_gemm": lambda: small(a, b, c)}
        if openblas is not None:
            systems["openblas"] = lambda: openblas(a, b, c)
        _report(f"{m}x{n}x{k} float32", 2.0 * m * n * k, median_times(systems, repeat * 20))
    return split


def report_rows(quick: bool = False) -> list[dict]:
    """The two-thread rows in the combined report's format (benchmarks/run_all.py)."""
    return rows_of(main(quick))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)

"""Throughput of kiln's inline vector math (kiln.codegen.llvm.vmath) against NumPy.

For every op, a float32 (or, with --dtype float64, float64) loop over 1M elements is emitted
with vmath.emit, optimized with kiln's pipeline for the host (512-bit vectors preferred),
JIT-compiled, and timed next to the NumPy/SciPy ufunc (--ops sin,cos picks some).
The cheap ops run at the memory-bandwidth floor on 1M elements (8 MB moved), so a second column
times the same kernel on 32K elements that stay in cache: the rate a fused kernel would see.
Prints figures only; never fails on a timing.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import time

import numpy as np
import scipy.special
from llvmlite import binding as llvm
from llvmlite import ir

from kiln.codegen.llvm import target, vmath

from _harness import result_row

N = 1 << 20
CACHED = 1 << 15
BINARY = {"pow", "atan2"}
NUMPY = {
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "log2": np.log2,
    "log10": np.log10,
    "tanh": np.tanh,
    "logistic": scipy.special.expit,
    "erf": scipy.special.erf,
    "erfc": scipy.special.erfc,
    "sin": np.sin,
    "cos": np.cos,
    "pow": np.power,
    "tan": np.tan,
    "atan": np.arctan,
    "atan2": np.arctan2,
    "asin": np.arcsin,
    "acos": np.arccos,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "cbrt": np.cbrt,
    "erf_inv": scipy.special.erfinv,
    "lgamma": scipy.special.gammaln,
    "digamma": scipy.special.psi,
}
# Inputs inside each op's domain, so neither side spends its time on NaN paths.
DOMAIN = {
    "log": (0.01, 100.0),
    "log2": (0.01, 100.0),
    "log10": (0.01, 100.0),
    "log1p": (-0.9, 100.0),
    "asin": (-1.0, 1.0),
    "acos": (-1.0, 1.0),
    "atanh": (-0.99, 0.99),
    "erf_inv": (-0.999, 0.999),
    "acosh": (1.0, 100.0),
    "pow": (0.01, 10.0),
    "lgamma": (0.01, 50.0),
    "digamma": (0.01, 50.0),
}


def _loop(module: ir.Module, op: str, ty: ir.Type) -> str:
    arity = 2 if op in BINARY else 1
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [ty.as_pointer()] * (arity + 1) + [ir.IntType(64)]),
        f"bench_{op}",
    )
    for arg in fn.args[:-1]:
        arg.add_attribute("noalias")
    *inputs, out, n = fn.args
    entry, body, done = (fn.append_basic_block(name) for name in ("entry", "body", "done"))
    builder = ir.IRBuilder(entry)
    builder.cbranch(builder.icmp_signed(">", n, ir.Constant(n.type, 0)), body, done)
    builder.position_at_end(body)
    index = builder.phi(n.type)
    index.add_incoming(ir.Constant(n.type, 0), entry)
    values = [builder.load(builder.gep(p, [index], inbounds=True)) for p in inputs]
    builder.store(vmath.emit(builder, op, *values), builder.gep(out, [index], inbounds=True))
    following = builder.add(index, ir.Constant(n.type, 1), flags=["nuw", "nsw"])
    index.add_incoming(following, builder.block)
    builder.cbranch(builder.icmp_signed("<", following, n), body, done)
    builder.position_at_end(done)
    builder.ret_void()
    return fn.name


def compile_all(ops, dtype: str = "float32"):
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module(name="bench_vmath")
    module.triple = llvm.get_process_triple()
    ty = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    names = {op: _loop(module, op, ty) for op in ops}
    text = re.sub(r"^(define .*\))$", r"\1 #77", str(module), flags=re.M)
    text += '\nattributes #77 = { "prefer-vector-width"="512" }\n'
    tm = llvm.Target.from_triple(module.triple).create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )
    parsed = llvm.parse_assembly(text)
    parsed.verify()
    target.optimize(parsed, tm)
    engine = llvm.create_mcjit_compiler(parsed, tm)
    engine.finalize_object()
    return engine, names


def best_of(fn, repeats=7):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description="Throughput of kiln's inline vector math.")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--ops", default=None, help="comma-separated (default: all)")
    args = parser.parse_args(argv)
    ops = sorted(vmath.SUPPORTED, key=list(NUMPY).index)
    if args.ops:
        ops = [op for op in ops if op in args.ops.split(",")]
    dtype = np.dtype(args.dtype)
    ctype = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    engine, names = compile_all(ops, args.dtype)
    rng = np.random.default_rng(0)
    print(f"{dtype}, {N} elements, best of 7 (CPU: {llvm.get_host_cpu_name()})")
    print(
        f"{'op':<10}{'kiln Gelem/s':>14}{'in-cache':>10}{'kiln ms':>10}{'numpy ms':>10}"
        f"{'speedup':>10}"
    )
    rows = []
    for op in ops:
        low, high = DOMAIN.get(op, (-5.0, 5.0))
        arrays = [rng.uniform(low, high, N).astype(dtype)]
        if op in BINARY:
            arrays.append(rng.uniform(-5.0, 5.0, N).astype(dtype))
        out = np.empty(N, dtype)
        pointer = ctypes.POINTER(ctype)
        proto = ctypes.CFUNCTYPE(None, *([pointer] * (len(arrays) + 1)), ctypes.c_int64)
        kernel = proto(engine.get_function_address(names[op]))
        pointers = [a.ctypes.data_as(pointer) for a in arrays + [out]]
        kiln_s = best_of(lambda: kernel(*pointers, N))
        cached_s = best_of(lambda: [kernel(*pointers, CACHED) for _ in range(N // CACHED)])
        with np.errstate(all="ignore"):
            numpy_s = best_of(lambda: NUMPY[op](*arrays))
        print(
            f"{op:<10}{N / kiln_s / 1e9:>14.2f}{N / cached_s / 1e9:>10.2f}{kiln_s * 1e3:>10.3f}"
            f"{numpy_s * 1e3:>10.3f}{numpy_s / kiln_s:>9.1f}x"
        )
        rows.append(result_row(f"vmath {op}, {N >> 20}M {dtype}", kiln_s, numpy_s))
    return rows


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format; `quick` times a few ops only."""
    return main(["--ops", "exp,log,tanh,sin,erf,pow"] if quick else [])


if __name__ == "__main__":
    main()

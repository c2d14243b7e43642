"""Inline, vectorizable vector math for kiln's LLVM backend.

llvmlite has no vector math library (llvm.exp.v8f32 is split back into scalar expf calls), so
transcendental ops are emitted here as branch-free polynomial code that LLVM's loop vectorizer
widens together with the surrounding loop. The families live in vmath_exp_log, vmath_hyperbolic,
vmath_trig, vmath_special (error functions) and vmath_gamma; this module is the one entry point
other code uses, and vmath_base holds the typed helpers they share.

Accuracy: `ULP_BOUNDS[(op, dtype)]` bounds the error over the op's whole domain, in units in
the last place of the result dtype at the exact value (subnormal results in units of the
smallest subnormal), measured by benchmarks/ulp_table.py against mpmath at 160 bits on
log-uniform magnitudes of both signs, a dense sample where the op varies, and its edges; the
measured maximum plus a little, rounded up to a half ulp. tests/codegen/test_ulp.py asserts it
on a smaller sample. Special values are exact: NaN where the result is NaN, infinities with
their sign, the sign of exact zeros. `MAX_ULP` is a second table, of the bounds that the
NumPy-based tests (test_vmath, the program fuzzer) check against NumPy/SciPy references.
sin, cos and tan hold their bound for every finite argument: lanes with |x| >= 65536
(float32) or 2**30 (float64) take an exact Payne-Hanek reduction (vmath_trig). Exceptions, by
design:
  * lgamma, digamma for x < 0: computed by reflection, so near their negative zeros the
    error is bounded in ulps of the larger of the two reflected terms (log(pi/|x sin(pi x)|) and
    lgamma(|x|); digamma(1 - x) and pi cot(pi x)), not of the tiny result.
  * erf_inv(-0) is +0, and lgamma(-inf) = -inf, as in SciPy; lgamma of a float64 subnormal is
    the true, finite -log|x| (SciPy returns inf there).
MAX_ULP's float64 references are NumPy in long double (x87, 64-bit mantissa), or for erf, erfc
and erf_inv a long-double series/continued fraction; its float32 references are float64
NumPy/SciPy.
"""

from __future__ import annotations

import importlib

from llvmlite import ir

from .vmath_base import Emitter

#: op -> (operand count, family module, rule name); a family is imported the first time one of
#: its ops is emitted (most programs need one or two of the five).
_OPS: dict[str, tuple[int, str, str]] = {
    "exp": (1, "vmath_exp_log", "exp"),
    "exp2": (1, "vmath_exp_log", "exp2"),
    "expm1": (1, "vmath_exp_log", "expm1"),
    "log": (1, "vmath_exp_log", "log"),
    "log1p": (1, "vmath_exp_log", "log1p"),
    "log2": (1, "vmath_exp_log", "log2"),
    "log10": (1, "vmath_exp_log", "log10"),
    "pow": (2, "vmath_exp_log", "pow"),
    "cbrt": (1, "vmath_exp_log", "cbrt"),
    "tanh": (1, "vmath_hyperbolic", "tanh"),
    "logistic": (1, "vmath_hyperbolic", "logistic"),
    "sinh": (1, "vmath_hyperbolic", "sinh"),
    "cosh": (1, "vmath_hyperbolic", "cosh"),
    "asinh": (1, "vmath_hyperbolic", "asinh"),
    "acosh": (1, "vmath_hyperbolic", "acosh"),
    "atanh": (1, "vmath_hyperbolic", "atanh"),
    "sin": (1, "vmath_trig", "sin"),
    "cos": (1, "vmath_trig", "cos"),
    "tan": (1, "vmath_trig", "tan"),
    "atan": (1, "vmath_trig", "atan"),
    "atan2": (2, "vmath_trig", "atan2"),
    "asin": (1, "vmath_trig", "asin"),
    "acos": (1, "vmath_trig", "acos"),
    "erf": (1, "vmath_special", "erf"),
    "erfc": (1, "vmath_special", "erfc"),
    "erf_inv": (1, "vmath_special", "erf_inv"),
    "lgamma": (1, "vmath_gamma", "lgamma"),
    "digamma": (1, "vmath_gamma", "digamma"),
}

SUPPORTED: frozenset[str] = frozenset(_OPS)

# Whole-domain error bounds in ulps against mpmath (see the module docstring); sqrt and rsqrt
# are not vmath's (scalar_ops emits them) but are measured with the rest. Each comment gives
# the maximum measured on 60,000 inputs per dtype (benchmarks/ulp_table.py --n 20000), then
# JAX 0.10.2's CPU maximum on the same inputs (subnormals and special values left out).
# Bounds above 2 ulps, and why:
#   * erfc, erf_inv: the tails are computed through exp(-x**2) (erfc) or a sqrt(-log(1 - |y|))
#     change of variable (erf_inv), each rounded; XLA's errors reach 60 to 500 ulps there.
#   * lgamma, digamma: near the positive zeros (1, 2; 1.4616...) the argument's shift is
#     rounded; for x < 0 the error is counted in ulps of the larger reflected term (above).
#     XLA's errors near those zeros are unbounded in these terms.
# (*) XLA flushes intermediate results below the normal range, so asin of the smallest normal
# arguments gives 0 there, and exp2(-126) in float32 gives 0.
ULP_BOUNDS: dict[tuple[str, str], float] = {
    ("acos", "float32"): 1.0,
    ("acos", "float64"): 1.5,  # 0.89 0.97; jax 1.72 1.15
    ("acosh", "float32"): 2.0,
    ("acosh", "float64"): 2.0,  # 1.62 1.49; jax 2.87 2.76
    ("asin", "float32"): 2.0,
    ("asin", "float64"): 2.0,  # 1.49 1.51; jax 1.7e7 8e15 (*)
    ("asinh", "float32"): 1.5,
    ("asinh", "float64"): 1.5,  # 1.32 1.43; jax 2.59 2.26
    ("atan", "float32"): 2.0,
    ("atan", "float64"): 2.0,  # 1.76 1.92; jax 2.17 0.51
    ("atan2", "float32"): 2.0,
    ("atan2", "float64"): 2.0,  # 1.73 1.63; jax 1.35 0.51
    ("atanh", "float32"): 2.0,
    ("atanh", "float64"): 2.0,  # 1.59 1.47; jax 2.71 128
    ("cbrt", "float32"): 1.0,
    ("cbrt", "float64"): 1.0,  # 0.73 0.72; jax 0.93 2.96
    ("cos", "float32"): 2.0,
    ("cos", "float64"): 2.0,  # 1.44 1.34; jax 0.56 0.56
    ("cosh", "float32"): 1.5,
    ("cosh", "float64"): 1.5,  # 1.21 1.04; jax inf 496
    ("digamma", "float32"): 4.0,
    ("digamma", "float64"): 4.0,  # 3.42 3.74; jax 2.8e8 2.6e16
    ("erf", "float32"): 1.0,
    ("erf", "float64"): 1.5,  # 0.81 1.01; jax 4.86 1.00
    ("erf_inv", "float32"): 3.0,
    ("erf_inv", "float64"): 2.5,  # 2.71 2.08; jax 61 329
    ("erfc", "float32"): 2.5,
    ("erfc", "float64"): 2.5,  # 2.34 2.20; jax 63 509
    ("exp", "float32"): 1.5,
    ("exp", "float64"): 1.5,  # 0.95 1.00; jax 4.09 1.40
    ("exp2", "float32"): 1.0,
    ("exp2", "float64"): 1.5,  # 0.86 1.00; jax 8e6 697
    ("expm1", "float32"): 1.5,
    ("expm1", "float64"): 1.5,  # 1.22 1.35; jax 4.35 2.83
    ("lgamma", "float32"): 3.0,
    ("lgamma", "float64"): 3.0,  # 2.46 2.47; jax 1.5e8 8e16
    ("log", "float32"): 1.0,
    ("log", "float64"): 1.0,  # 0.79 0.79; jax 1.08 0.51
    ("log10", "float32"): 1.5,
    ("log10", "float64"): 1.0,  # 0.98 0.85; jax 2.51 1.57
    ("log1p", "float32"): 1.0,
    ("log1p", "float64"): 1.0,  # 0.81 0.82; jax 2.36 123
    ("log2", "float32"): 1.5,
    ("log2", "float64"): 1.5,  # 0.96 1.00; jax 2.01 1.34
    ("logistic", "float32"): 2.0,
    ("logistic", "float64"): 2.0,  # 1.70 1.83; jax 1.79 1.86
    ("pow", "float32"): 1.0,
    ("pow", "float64"): 1.0,  # 0.50 0.93; jax 0.50 0.51
    ("sin", "float32"): 2.0,
    ("sin", "float64"): 2.0,  # 1.43 1.40; jax 0.56 0.51
    ("sinh", "float32"): 1.5,
    ("sinh", "float64"): 1.5,  # 1.29 1.34; jax inf 496
    ("tan", "float32"): 2.0,
    ("tan", "float64"): 2.0,  # 1.61 1.69; jax 0.85 0.54
    ("tanh", "float32"): 1.5,
    ("tanh", "float64"): 2.0,  # 1.07 (f32, every input) 1.46; jax 4.03 6.50
    ("sqrt", "float32"): 0.5,
    ("sqrt", "float64"): 0.5,  # correctly rounded (llvm.sqrt)
    ("rsqrt", "float32"): 1.5,
    ("rsqrt", "float64"): 1.5,  # 1.42 1.43; jax 1.50 1.14
}

# Error bounds in ulps against NumPy/SciPy references (long double for float64), as
# tests/codegen/test_vmath.py measures them: the measured maximum rounded up to a half ulp,
# plus half an ulp of margin for inputs no test sampled.
MAX_ULP: dict[tuple[str, str], float] = {
    ("exp", "float32"): 1.5,
    ("exp", "float64"): 1.5,
    ("exp2", "float32"): 1.5,
    ("exp2", "float64"): 1.5,
    ("expm1", "float32"): 2.0,
    ("expm1", "float64"): 2.5,
    ("log", "float32"): 1.5,
    ("log", "float64"): 1.5,
    ("log1p", "float32"): 1.5,
    ("log1p", "float64"): 1.5,
    ("log2", "float32"): 2.0,
    ("log2", "float64"): 2.0,
    ("log10", "float32"): 2.0,
    ("log10", "float64"): 2.0,
    ("tanh", "float32"): 2.0,
    ("tanh", "float64"): 2.0,
    ("logistic", "float32"): 3.0,
    ("logistic", "float64"): 3.0,
    ("erf", "float32"): 1.5,
    ("erf", "float64"): 2.0,
    ("erfc", "float32"): 3.5,
    ("erfc", "float64"): 3.5,
    ("sin", "float32"): 2.0,
    ("sin", "float64"): 2.0,
    ("cos", "float32"): 2.0,
    ("cos", "float64"): 2.0,
    ("pow", "float32"): 1.0,
    ("pow", "float64"): 2.0,
    ("tan", "float32"): 3.5,
    ("tan", "float64"): 3.5,
    ("atan", "float32"): 2.5,
    ("atan", "float64"): 2.5,
    ("atan2", "float32"): 3.0,
    ("atan2", "float64"): 3.0,
    ("asin", "float32"): 2.5,
    ("asin", "float64"): 2.5,
    ("acos", "float32"): 1.5,
    ("acos", "float64"): 1.5,
    ("sinh", "float32"): 2.5,
    ("sinh", "float64"): 2.5,
    ("cosh", "float32"): 2.0,
    ("cosh", "float64"): 2.0,
    ("asinh", "float32"): 2.0,
    ("asinh", "float64"): 2.0,
    ("acosh", "float32"): 3.0,
    ("acosh", "float64"): 3.0,
    ("atanh", "float32"): 2.5,
    ("atanh", "float64"): 2.5,
    ("cbrt", "float32"): 1.5,
    ("cbrt", "float64"): 1.5,
    ("erf_inv", "float32"): 3.0,
    ("erf_inv", "float64"): 3.0,
    ("lgamma", "float32"): 3.5,
    ("lgamma", "float64"): 3.5,
    ("digamma", "float32"): 4.5,
    ("digamma", "float64"): 4.5,
}


def emit(builder: ir.IRBuilder, op: str, *args: ir.Value) -> ir.Value:
    """Emit branch-free IR computing `op` elementwise on float32/float64 scalars or vectors.

    Args:
        builder: positioned where the code should go.
        op: one of SUPPORTED (e.g. "exp", "pow").
        args: one LLVM value per operand, all of the same float or vector-of-float type.

    Returns:
        The result, of the same type as the arguments.
    """
    if op not in _OPS:
        raise ValueError(f"vmath has no op {op!r}; supported ops are {sorted(SUPPORTED)}")
    arity, family, name = _OPS[op]
    if len(args) != arity:
        raise TypeError(f"vmath op {op!r} takes {arity} operand(s), got {len(args)}")
    ty = args[0].type
    if any(arg.type != ty for arg in args):
        raise TypeError(
            f"vmath op {op!r} needs operands of one type, got {[str(arg.type) for arg in args]}"
        )
    rule = getattr(importlib.import_module(f"{__package__}.{family}"), name)
    return rule(Emitter(builder, ty), *args)

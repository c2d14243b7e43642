"""Inline, vectorizable vector math for kiln's LLVM backend.

llvmlite has no vector math library (llvm.exp.v8f32 is split back into scalar expf calls), so
transcendental ops are emitted here as branch-free polynomial code that LLVM's loop vectorizer
widens together with the surrounding loop. The families live in vmath_exp_log, vmath_hyperbolic,
vmath_trig, vmath_special (error functions) and vmath_gamma; this module is the one entry point
other code uses, and vmath_base holds the typed helpers they share.

Accuracy: `MAX_ULP[(op, dtype)]` is the largest error, in units in the last place of the
correctly rounded result, measured by tests/codegen/test_vmath.py against NumPy/SciPy over
dense and log-uniform samples of each op's domain plus special values (subnormal results are
counted in units of the smallest subnormal). Exceptions, by design:
  * sin, cos, tan: the bound holds for |x| <= 4e5 (float32) and |x| <= 1e13 (float64). Beyond,
    the three-part Cody-Waite reduction by pi/2 runs out of bits (there is no Payne-Hanek
    reduction): sin and cos stay finite and within [-1, 1], tan finite, but with no accuracy
    guarantee (errors reach 1e5 ulps at |x| ~ 1e6 in float32).
  * lgamma, digamma for x < 0: computed by reflection, so near their negative zeros the
    error is bounded in ulps of the larger of the two reflected terms (log(pi/|x sin(pi x)|) and
    lgamma(|x|); digamma(1 - x) and pi cot(pi x)), not of the tiny result.
  * erf_inv(-0) is +0, and lgamma(-inf) = -inf, as in SciPy; lgamma of a float64 subnormal is
    the true, finite -log|x| (SciPy returns inf there).
The float64 references are NumPy in long double (x87, 64-bit mantissa), or for erf, erfc and
erf_inv a long-double series/continued fraction; float32 references are float64 NumPy/SciPy.
"""

from __future__ import annotations

from typing import Callable

from llvmlite import ir

from . import vmath_exp_log, vmath_gamma, vmath_hyperbolic, vmath_special, vmath_trig
from .vmath_base import Emitter

_OPS: dict[str, tuple[int, Callable]] = {
    "exp": (1, vmath_exp_log.exp),
    "exp2": (1, vmath_exp_log.exp2),
    "expm1": (1, vmath_exp_log.expm1),
    "log": (1, vmath_exp_log.log),
    "log1p": (1, vmath_exp_log.log1p),
    "log2": (1, vmath_exp_log.log2),
    "log10": (1, vmath_exp_log.log10),
    "pow": (2, vmath_exp_log.pow),
    "cbrt": (1, vmath_exp_log.cbrt),
    "tanh": (1, vmath_hyperbolic.tanh),
    "logistic": (1, vmath_hyperbolic.logistic),
    "sinh": (1, vmath_hyperbolic.sinh),
    "cosh": (1, vmath_hyperbolic.cosh),
    "asinh": (1, vmath_hyperbolic.asinh),
    "acosh": (1, vmath_hyperbolic.acosh),
    "atanh": (1, vmath_hyperbolic.atanh),
    "sin": (1, vmath_trig.sin),
    "cos": (1, vmath_trig.cos),
    "tan": (1, vmath_trig.tan),
    "atan": (1, vmath_trig.atan),
    "atan2": (2, vmath_trig.atan2),
    "asin": (1, vmath_trig.asin),
    "acos": (1, vmath_trig.acos),
    "erf": (1, vmath_special.erf),
    "erfc": (1, vmath_special.erfc),
    "erf_inv": (1, vmath_special.erf_inv),
    "lgamma": (1, vmath_gamma.lgamma),
    "digamma": (1, vmath_gamma.digamma),
}

SUPPORTED: frozenset[str] = frozenset(_OPS)

# Error bounds in ulps: the measured maximum (see the module docstring for how and where it
# holds) rounded up to a half ulp, plus half an ulp of margin for inputs no test sampled.
MAX_ULP: dict[tuple[str, str], float] = {
    ("exp", "float32"): 1.5, ("exp", "float64"): 1.5,
    ("exp2", "float32"): 1.5, ("exp2", "float64"): 1.5,
    ("expm1", "float32"): 2.0, ("expm1", "float64"): 2.5,
    ("log", "float32"): 1.5, ("log", "float64"): 1.5,
    ("log1p", "float32"): 1.5, ("log1p", "float64"): 1.5,
    ("log2", "float32"): 2.0, ("log2", "float64"): 2.0,
    ("log10", "float32"): 2.0, ("log10", "float64"): 2.0,
    ("tanh", "float32"): 2.0, ("tanh", "float64"): 2.0,
    ("logistic", "float32"): 3.0, ("logistic", "float64"): 3.0,
    ("erf", "float32"): 1.5, ("erf", "float64"): 2.0,
    ("erfc", "float32"): 3.5, ("erfc", "float64"): 3.5,
    ("sin", "float32"): 2.0, ("sin", "float64"): 2.0,
    ("cos", "float32"): 2.0, ("cos", "float64"): 2.0,
    ("pow", "float32"): 1.0, ("pow", "float64"): 2.0,
    ("tan", "float32"): 3.5, ("tan", "float64"): 3.5,
    ("atan", "float32"): 2.5, ("atan", "float64"): 2.5,
    ("atan2", "float32"): 3.0, ("atan2", "float64"): 3.0,
    ("asin", "float32"): 2.5, ("asin", "float64"): 2.5,
    ("acos", "float32"): 1.5, ("acos", "float64"): 1.5,
    ("sinh", "float32"): 2.5, ("sinh", "float64"): 2.5,
    ("cosh", "float32"): 2.0, ("cosh", "float64"): 2.0,
    ("asinh", "float32"): 2.0, ("asinh", "float64"): 2.0,
    ("acosh", "float32"): 3.0, ("acosh", "float64"): 3.0,
    ("atanh", "float32"): 2.5, ("atanh", "float64"): 2.5,
    ("cbrt", "float32"): 1.5, ("cbrt", "float64"): 1.5,
    ("erf_inv", "float32"): 3.0, ("erf_inv", "float64"): 3.0,
    ("lgamma", "float32"): 3.5, ("lgamma", "float64"): 3.5,
    ("digamma", "float32"): 4.5, ("digamma", "float64"): 4.5,
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
    arity, rule = _OPS[op]
    if len(args) != arity:
        raise TypeError(f"vmath op {op!r} takes {arity} operand(s), got {len(args)}")
    ty = args[0].type
    if any(arg.type != ty for arg in args):
        raise TypeError(f"vmath op {op!r} needs operands of one type, got "
                        f"{[str(arg.type) for arg in args]}")
    return rule(Emitter(builder, ty), *args)

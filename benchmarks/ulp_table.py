"""Maximum error in ulps of kiln's native math functions over their whole domains.

Each function of kiln.codegen.llvm.vmath (plus sqrt and rsqrt, which scalar_ops emits) is
compiled through kiln's own scalar-op table into an elementwise loop for the current target,
run on random inputs spread over the function's whole domain (log-uniform magnitudes, both
signs, plus the region where the function varies) and on its edge cases (±0, subnormals, the
normal range's ends, ±inf, NaN, overflow and underflow thresholds, poles and zeros), and
compared with mpmath evaluated at 160 bits.

Errors are in ulps of the result dtype at the exact value (subnormal results in units of the
smallest subnormal); a result that overflows must be the right infinity. Where an input is
±0, ±inf or NaN, the result must equal NumPy's/SciPy's (the eager reference) exactly: NaN
where it is NaN, infinities with their sign, zeros with their sign.

    python benchmarks/ulp_table.py [--n 20000] [--ops sin,cos] [--jax-python /path/to/python]

prints function, dtype, the maximum error measured, kiln's bound (vmath.ULP_BOUNDS) and, where
JAX is importable here or through --jax-python, JAX's maximum error on the same inputs (CPU).
Never fails on a figure; tests/codegen/test_ulp.py asserts the bounds on a smaller sample.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable

import mpmath
import numpy as np
import scipy.special
from llvmlite import binding as llvm
from llvmlite import ir

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kiln.codegen.llvm import scalar_ops, target, vmath  # noqa: E402
from kiln.compiler.kir_ops import ScalarOp  # noqa: E402

mp = mpmath.mp
PRECISION = 160
BINARY = frozenset({"pow", "atan2"})
_LLVM_TYPES = {"float32": ir.FloatType(), "float64": ir.DoubleType()}


# ---- references -------------------------------------------------------------------------------


def _real(value):
    """mpmath returns complex numbers outside a real function's domain: those are NaN."""
    if isinstance(value, mpmath.mpc):
        return mp.nan if value.imag != 0 else value.real
    return value


def _pow(x, y):
    if x < 0:
        if y != mp.floor(y):
            return mp.nan
        odd = int(mp.fmod(y, 2)) != 0
        magnitude = _pow(-x, y)
        return -magnitude if odd else magnitude
    if x == 0:
        return mp.inf if y < 0 else (mp.one if y == 0 else mp.zero)
    # Far past the float range the exact power is not needed, only its side of 1.
    scale = y * mp.log(x, 2)
    if abs(scale) > 5000:
        return mp.inf if scale > 0 else mp.zero
    return mp.power(x, y)


def _saturating(fn, limit):
    """fn for |x| <= limit; beyond, fn's limit at ±inf (saves mpmath huge exponents)."""

    def evaluate(x):
        if abs(x) > limit:
            return fn(mp.inf if x > 0 else mp.ninf)
        return fn(x)

    return evaluate


def _lgamma(x):
    if x <= 0 and x == mp.floor(x):
        return mp.inf
    return mp.re(mp.loggamma(x))


def _digamma(x):
    if x <= 0 and x == mp.floor(x):
        return mp.nan
    return mp.digamma(x)


def _logistic(x):
    if x < -2000:  # below the smallest subnormal
        return mp.zero
    return 1 / (1 + mp.exp(-x))


def _erfc(x):
    if x > 1e5:  # below the smallest subnormal
        return mp.zero
    return mp.erfc(x)


# name -> mpmath function of exact arguments (mpf in, mpf out).
MP_FUNCTIONS: dict[str, Callable] = {
    "exp": _saturating(mp.exp, 2000),
    "exp2": _saturating(lambda x: mp.power(2, x), 3000),
    "expm1": _saturating(mp.expm1, 2000),
    "log": lambda x: _real(mp.log(x)),
    "log1p": lambda x: _real(mp.log1p(x)),
    "log2": lambda x: _real(mp.log(x, 2)),
    "log10": lambda x: _real(mp.log10(x)),
    "pow": _pow,
    "sin": mp.sin,
    "cos": mp.cos,
    "tan": mp.tan,
    "asin": lambda x: _real(mp.asin(x)),
    "acos": lambda x: _real(mp.acos(x)),
    "atan": mp.atan,
    "atan2": mp.atan2,
    "sinh": _saturating(mp.sinh, 2000),
    "cosh": _saturating(mp.cosh, 2000),
    "tanh": mp.tanh,
    "asinh": mp.asinh,
    "acosh": lambda x: _real(mp.acosh(x)),
    "atanh": lambda x: _real(mp.atanh(x)) if abs(x) != 1 else mp.inf * mp.sign(x),
    "erf": mp.erf,
    "erfc": _erfc,
    "erf_inv": lambda x: mp.erfinv(x) if abs(x) <= 1 else mp.nan,
    "lgamma": _lgamma,
    "digamma": _digamma,
    "logistic": _logistic,
    "cbrt": lambda x: mp.sign(x) * mp.cbrt(abs(x)),
    "sqrt": lambda x: mp.sqrt(x) if x >= 0 else mp.nan,
    "rsqrt": lambda x: 1 / mp.sqrt(x) if x > 0 else mp.nan,
}

# The eager (NumPy/SciPy) functions: the reference where an input is ±0, ±inf or NaN.
EAGER: dict[str, Callable] = {
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "log2": np.log2,
    "log10": np.log10,
    "pow": np.power,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "atan2": np.arctan2,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "erf": scipy.special.erf,
    "erfc": scipy.special.erfc,
    "erf_inv": scipy.special.erfinv,
    "lgamma": scipy.special.gammaln,
    "digamma": scipy.special.psi,
    "logistic": scipy.special.expit,
    "cbrt": np.cbrt,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
}

# Where kiln's special values differ from the eager functions' on purpose (vmath's docstring):
# (op, dtype-independent input) -> kiln's value.
SPECIAL_EXCEPTIONS = {("lgamma", -np.inf): -np.inf, ("erf_inv", -0.0): 0.0}

OPS = tuple(sorted(vmath.SUPPORTED)) + ("sqrt", "rsqrt")


def _reflection_terms(op: str, x):
    """For lgamma and digamma at x < 0, the two terms kiln's reflection formula subtracts:
    lgamma(x) = log(pi / |x sin(pi x)|) - lgamma(-x), digamma(x) = digamma(1 - x) - pi cot(pi x).
    """
    if op == "lgamma":
        return mp.log(mp.pi / abs(x * mp.sinpi(x))), _lgamma(-x)
    return _digamma(1 - x), mp.pi * mp.cospi(x) / mp.sinpi(x)


def reference(op: str, dtype: str, *xs: np.ndarray):
    """(hi, lo, scale): the exact value of op at each input as float64 hi plus float64 lo, and
    the magnitude errors are measured against (|hi| itself, except where noted below).

    Inputs with a ±0, ±inf or NaN argument take the eager function's value (lo = 0). For
    lgamma and digamma at negative non-integers the scale is the larger of the two reflected
    terms (and 1): near their negative zeros the result cancels, as the module docstring of
    vmath says, and only an error relative to those terms is bounded.
    """
    hi = np.empty(xs[0].shape, np.float64)
    lo = np.zeros(xs[0].shape, np.float64)
    scale = np.zeros(xs[0].shape, np.float64)
    fn = MP_FUNCTIONS[op]
    special = np.zeros(xs[0].shape, bool)
    for x in xs:
        special |= ~np.isfinite(x) | (x == 0)
    with np.errstate(all="ignore"):
        eager = np.asarray(EAGER[op](*xs), dtype=dtype)
    for key, value in SPECIAL_EXCEPTIONS.items():
        if key[0] == op:
            hit = (xs[0] == key[1]) & (np.signbit(xs[0]) == np.signbit(key[1]))
            eager = np.where(hit, np.asarray(value, dtype=dtype), eager)
    hi[special] = eager[special]
    with mp.workprec(PRECISION):
        for i in np.flatnonzero(~special):
            value = fn(*(mp.mpf(float(x[i])) for x in xs))
            if mp.isnan(value) or mp.isinf(value):
                hi[i] = float(value)
                continue
            head = float(value)
            hi[i] = head
            lo[i] = float(value - head) if math.isfinite(head) else 0.0
            x = xs[0][i]
            if op in ("lgamma", "digamma") and x < 0 and x != math.floor(x):
                terms = _reflection_terms(op, mp.mpf(float(x)))
                scale[i] = float(max(abs(terms[0]), abs(terms[1]), 1))
    return hi, lo, scale


def ulp_errors(got: np.ndarray, hi: np.ndarray, lo: np.ndarray, scale=None) -> np.ndarray:
    """|got - (hi + lo)| in ulps of got's dtype at the exact value (at max(|value|, scale)
    where scale is given); inf where a special value (NaN, an infinity, the sign of an exact
    zero) does not match."""
    dtype = got.dtype
    with np.errstate(all="ignore"):
        rounded = (hi + lo).astype(dtype)
        magnitude = np.abs(rounded)
        if scale is not None:
            magnitude = np.maximum(magnitude, scale.astype(dtype))
        spacing = np.spacing(magnitude).astype(np.float64)
        spacing = np.maximum(spacing, float(np.finfo(dtype).smallest_subnormal))
        # Overflow: the ulp just below the largest finite value counts, so that a result of
        # max for a true value slightly above it is still measured.
        spacing = np.where(np.isinf(rounded), np.spacing(np.finfo(dtype).max), spacing)
        diff = (got.astype(np.float64) - hi) - lo
        err = np.abs(diff) / spacing
    nan_ref, nan_got = np.isnan(hi), np.isnan(got)
    inf_ref = np.isinf(rounded) & ~nan_ref
    err = np.where(inf_ref, np.where(got == rounded, 0.0, np.inf), err)
    err = np.where(nan_ref | nan_got, np.where(nan_ref & nan_got, 0.0, np.inf), err)
    zero_ref = (hi == 0) & (lo == 0)
    err = np.where(zero_ref & ((got != 0) | (np.signbit(got) != np.signbit(hi))), np.inf, err)
    return err


# ---- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Domain:
    """Where an op's inputs are drawn: its real domain and the region where it varies."""

    low: float = -np.inf
    high: float = np.inf
    varies: tuple[float, float] = (-10.0, 10.0)


def _domains(dtype: str) -> dict[str, Domain]:
    f64 = dtype == "float64"
    big_exp = 710.0 if f64 else 89.0
    small_exp = -746.0 if f64 else -104.0
    return {
        "exp": Domain(varies=(small_exp, big_exp)),
        "exp2": Domain(varies=(-1075.0 if f64 else -150.0, 1025.0 if f64 else 129.0)),
        "expm1": Domain(varies=(-40.0, big_exp)),
        "log": Domain(0, varies=(0.0, 4.0)),
        "log2": Domain(0, varies=(0.0, 4.0)),
        "log10": Domain(0, varies=(0.0, 4.0)),
        "log1p": Domain(-1, varies=(-1.0, 4.0)),
        "sin": Domain(),
        "cos": Domain(),
        "tan": Domain(),
        "asin": Domain(-1, 1, (-1.0, 1.0)),
        "acos": Domain(-1, 1, (-1.0, 1.0)),
        "atan": Domain(),
        "sinh": Domain(varies=(-big_exp - 1, big_exp + 1)),
        "cosh": Domain(varies=(-big_exp - 1, big_exp + 1)),
        "tanh": Domain(varies=(-20, 20)),
        "asinh": Domain(),
        "acosh": Domain(1, varies=(1.0, 10.0)),
        "atanh": Domain(-1, 1, (-1.0, 1.0)),
        "erf": Domain(varies=(-6.0, 6.0)),
        "erfc": Domain(varies=(-6.0, 28.0 if f64 else 11.0)),
        "erf_inv": Domain(-1, 1, (-1.0, 1.0)),
        "lgamma": Domain(varies=(-20.0, 20.0)),
        "digamma": Domain(varies=(-20.0, 20.0)),
        "logistic": Domain(varies=(-750.0 if f64 else -105.0, 40.0)),
        "cbrt": Domain(),
        "sqrt": Domain(0),
        "rsqrt": Domain(0),
    }


def _log_uniform(rng, count, dtype, low=None, high=None):
    """Magnitudes log-uniform between the smallest subnormal and max (or [low, high])."""
    info = np.finfo(dtype)
    low = float(info.smallest_subnormal) if low is None else low
    high = float(info.max) if high is None else high
    return np.exp(rng.uniform(math.log(low), math.log(high), count))


def _unary_inputs(op: str, dtype: str, count: int, rng) -> np.ndarray:
    domain = _domains(dtype)[op]
    magnitude = _log_uniform(rng, count, dtype)
    signs = rng.choice([-1.0, 1.0], count)
    if domain.low == -1 and domain.high == 1:
        spread = _log_uniform(rng, count, dtype, high=1.0) * signs
        outside = (1 + magnitude) * signs
    elif domain.low == 1:
        spread = 1 + magnitude
        outside = rng.uniform(-10, 1, count)
    elif domain.low == -1:
        spread = np.where(signs > 0, magnitude, -_log_uniform(rng, count, dtype, high=1.0))
        outside = -1 - magnitude
    elif domain.low == 0:
        spread = magnitude
        outside = -magnitude
    else:
        spread = magnitude * signs
        outside = np.zeros(0)
    low, high = domain.varies
    # Results outside the domain must be NaN: a share of inputs goes there too.
    parts = [spread, rng.uniform(low, high, count), outside[: count // 16]]
    if op in ("sin", "cos", "tan"):
        parts.append(
            _log_uniform(rng, count, dtype, 1e4, 1e20 if dtype == "float64" else 1e9) * signs
        )
    with np.errstate(over="ignore"):
        return np.concatenate(parts).astype(dtype)


def _near(values, dtype, steps=2):
    """Each value rounded to dtype and its neighbours within `steps` ulps."""
    out = []
    with np.errstate(over="ignore"):
        for value in np.asarray(values, dtype=dtype):
            below = above = value
            for _ in range(steps):
                below = np.nextafter(below, np.asarray(-np.inf, dtype))
                above = np.nextafter(above, np.asarray(np.inf, dtype))
                out += [below, above]
            out.append(value)
    return np.array(out, dtype=dtype)


def edges(op: str, dtype: str) -> np.ndarray:
    """The edge cases of op: special values, range ends, thresholds, poles and zeros."""
    info = np.finfo(dtype)
    tiny, smallest_normal, huge = (
        float(info.smallest_subnormal),
        float(info.smallest_normal),
        float(info.max),
    )
    largest_subnormal = smallest_normal - tiny
    base = [
        0.0,
        -0.0,
        tiny,
        -tiny,
        largest_subnormal,
        -largest_subnormal,
        smallest_normal,
        -smallest_normal,
        huge,
        -huge,
        np.inf,
        -np.inf,
        np.nan,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
    ]
    log_max, log_tiny = math.log(huge), math.log(tiny)
    log_min_normal = math.log(smallest_normal)
    thresholds = {
        "exp": [log_max, log_tiny, log_min_normal],
        "expm1": [log_max, -math.log(2 / info.eps)],
        "exp2": [math.log2(huge), math.log2(tiny), math.log2(smallest_normal)],
        "sinh": [log_max + math.log(2), log_max],
        "cosh": [log_max + math.log(2), log_max],
        "log1p": [-1.0, -1 + float(info.eps)],
        "atanh": [1.0, -1.0],
        "acosh": [1.0],
        "erf_inv": [1.0, -1.0],
        "asin": [1.0, -1.0],
        "acos": [1.0, -1.0],
        "erfc": [26.5 if dtype == "float64" else 10.0, 27.2 if dtype == "float64" else 10.05],
        "logistic": [-log_max, log_tiny, -log_min_normal],
        "lgamma": [1.0, 2.0, -1.0, -2.0, -2.4570247, -2.7476826, 4e36, 2.5e305],
        "digamma": [1.4616321449683623, -0.5040830082644554, -1.0, -2.0],
        "tan": [math.pi / 2, -math.pi / 2],
        "cos": [math.pi / 2],
        "sin": [math.pi, 3e7, 1e10, 1e17, 6381956970095103 * 2.0**797],
        "tanh": [9.0, 19.0],
        "log": [1.0],
        "log2": [1.0],
        "log10": [1.0],
    }
    with np.errstate(over="ignore"):
        values = np.concatenate(
            [
                np.asarray(base, dtype),
                _near([v for v in thresholds.get(op, []) if abs(v) < huge], dtype),
            ]
        )
    return values


def binary_inputs(op: str, dtype: str, count: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) pairs for pow and atan2: random over the whole plane, dense where it matters,
    and every pair of edge values."""
    info = np.finfo(dtype)
    special = np.asarray(
        [
            0.0,
            -0.0,
            float(info.smallest_subnormal),
            1.0,
            -1.0,
            2.0,
            -2.0,
            0.5,
            3.0,
            -3.0,
            float(info.max),
            -float(info.max),
            np.inf,
            -np.inf,
            np.nan,
        ],
        dtype,
    )
    grid_x, grid_y = (a.ravel() for a in np.meshgrid(special, special))
    signs = rng.choice([-1.0, 1.0], count)
    if op == "atan2":
        y = _log_uniform(rng, count, dtype) * signs
        x = _log_uniform(rng, count, dtype) * rng.choice([-1.0, 1.0], count)
        dense_y, dense_x = rng.uniform(-3, 3, count), rng.uniform(-3, 3, count)
    else:
        x = _log_uniform(rng, count, dtype)
        y = rng.uniform(-1, 1, count) * np.exp(rng.uniform(0, math.log(2000), count))
        dense_x = rng.uniform(0, 4, count)
        dense_y = rng.uniform(-60, 60, count)
        # Negative bases with integer exponents (the only real powers of them).
        x = np.concatenate([x, -rng.uniform(0, 10, count // 8)])
        y = np.concatenate([y, rng.integers(-40, 40, count // 8).astype(float)])
    with np.errstate(over="ignore"):
        xs = np.concatenate([x, dense_x, grid_x]).astype(dtype)
        ys = np.concatenate([y, dense_y, grid_y]).astype(dtype)
    return (xs, ys) if op == "pow" else (ys, xs)


def inputs(op: str, dtype: str, count: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Random inputs over op's domain plus its edges, as a tuple of arrays (one per operand)."""
    rng = np.random.default_rng(seed)
    if op in BINARY:
        return binary_inputs(op, dtype, count, rng)
    return (np.concatenate([_unary_inputs(op, dtype, count, rng), edges(op, dtype)]),)


# ---- native kernels -----------------------------------------------------------------------------


class _KernelAttributes(ir.FunctionAttributes):
    """Function attributes with "key"="value" strings (prefer-vector-width), as kiln's own
    kernels carry them."""

    def __init__(self, strings: dict[str, str]):
        super().__init__()
        self.strings = dict(strings)

    def _to_list(self, ret_type):
        return super()._to_list(ret_type) + [f'"{k}"="{v}"' for k, v in self.strings.items()]


class Kernels:
    """Every (op, dtype) as an elementwise loop emitted through kiln's scalar-op table,
    optimized with kiln's pipeline for the current target and JIT-compiled."""

    def __init__(self, ops=OPS):
        current = self.target = target.current_target()
        module = ir.Module(name="ulp_table")
        module.triple = current.triple
        module.data_layout = current.data_layout
        self.names = {}
        for op in ops:
            for dtype in _LLVM_TYPES:
                self.names[(op, dtype)] = self._emit(module, op, dtype)
        parsed = llvm.parse_assembly(str(module))
        parsed.verify()
        self.machine = current.create_machine()
        target.optimize(parsed, self.machine)
        self.engine = llvm.create_mcjit_compiler(parsed, self.machine)
        self.engine.finalize_object()
        self.module = parsed

    @staticmethod
    def _emit(module: ir.Module, op: str, dtype: str) -> str:
        ty = _LLVM_TYPES[dtype]
        arity = 2 if op in BINARY else 1
        name = f"kernel_{op}_{dtype}"
        fn = ir.Function(
            module,
            ir.FunctionType(ir.VoidType(), [ty.as_pointer()] * (arity + 1) + [ir.IntType(64)]),
            name,
        )
        fn.attributes = _KernelAttributes(target.function_attributes())
        for arg in fn.args[:-1]:
            arg.add_attribute("noalias")
        *operands, out, n = fn.args
        entry, body, done = (fn.append_basic_block(label) for label in ("entry", "body", "done"))
        builder = ir.IRBuilder(entry)
        builder.cbranch(builder.icmp_signed(">", n, ir.Constant(n.type, 0)), body, done)
        builder.position_at_end(body)
        index = builder.phi(n.type)
        index.add_incoming(ir.Constant(n.type, 0), entry)
        values = [builder.load(builder.gep(p, [index], inbounds=True)) for p in operands]
        result = scalar_ops.emit_op(
            builder, ScalarOp(op), values, [np.dtype(dtype)] * arity, np.dtype(dtype)
        )
        builder.store(result, builder.gep(out, [index], inbounds=True))
        following = builder.add(index, ir.Constant(n.type, 1), flags=["nuw", "nsw"])
        index.add_incoming(following, builder.block)
        builder.cbranch(builder.icmp_signed("<", following, n), body, done)
        builder.position_at_end(done)
        builder.ret_void()
        return name

    def object_code(self) -> bytes:
        """The optimized module as an object file, for checking the symbols it needs (from a
        copy: the JIT engine owns the module and its machine)."""
        machine = self.target.create_machine()
        return machine.emit_object(llvm.parse_assembly(str(self.module)))

    def __call__(self, op: str, dtype: str, *arrays: np.ndarray) -> np.ndarray:
        ctype = ctypes.c_float if dtype == "float32" else ctypes.c_double
        arrays = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
        out = np.empty_like(arrays[0])
        pointer = ctypes.POINTER(ctype)
        proto = ctypes.CFUNCTYPE(None, *([pointer] * (len(arrays) + 1)), ctypes.c_int64)
        fn = proto(self.engine.get_function_address(self.names[(op, dtype)]))
        fn(*[a.ctypes.data_as(pointer) for a in arrays + [out]], out.size)
        return out


# ---- JAX, for comparison ----------------------------------------------------------------------

#: Each measured op as a path in a JAX-like namespace (jnp.* or lax.*): resolved against JAX
#: in the oracle process and against kiln in the tests, so both run the same public function.
FUNCTION_PATHS = {
    "exp": "jnp.exp",
    "exp2": "jnp.exp2",
    "expm1": "jnp.expm1",
    "log": "jnp.log",
    "log1p": "jnp.log1p",
    "log2": "jnp.log2",
    "log10": "jnp.log10",
    "pow": "lax.pow",
    "sin": "jnp.sin",
    "cos": "jnp.cos",
    "tan": "jnp.tan",
    "asin": "jnp.arcsin",
    "acos": "jnp.arccos",
    "atan": "jnp.arctan",
    "atan2": "jnp.arctan2",
    "sinh": "jnp.sinh",
    "cosh": "jnp.cosh",
    "tanh": "jnp.tanh",
    "asinh": "jnp.arcsinh",
    "acosh": "jnp.arccosh",
    "atanh": "jnp.arctanh",
    "erf": "lax.erf",
    "erfc": "lax.erfc",
    "erf_inv": "lax.erf_inv",
    "lgamma": "lax.lgamma",
    "digamma": "lax.digamma",
    "logistic": "lax.logistic",
    "cbrt": "jnp.cbrt",
    "sqrt": "jnp.sqrt",
    "rsqrt": "lax.rsqrt",
}


def resolve_functions(jnp, lax) -> dict:
    """FUNCTION_PATHS resolved in one namespace pair (kiln's or JAX's)."""
    namespaces = {"jnp": jnp, "lax": lax}
    return {
        op: getattr(namespaces[path.split(".")[0]], path.split(".")[1])
        for op, path in FUNCTION_PATHS.items()
    }


_JAX_SNIPPET = """
import json, sys
import numpy as np
import jax
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp
from jax import lax
namespaces = {"jnp": jnp, "lax": lax}
functions = {op: getattr(namespaces[path.split(".")[0]], path.split(".")[1])
             for op, path in json.loads(sys.argv[4]).items()}
data = dict(np.load(sys.argv[1]))
out = {}
for key in json.loads(sys.argv[2]):
    op, dtype = key.split("|")
    xs = [data[f"{key}|{i}"] for i in range(2 if op in ("pow", "atan2") else 1)]
    out[key] = np.asarray(jax.jit(functions[op])(*xs))
np.savez(sys.argv[3], **out)
"""


def jax_values(cases: dict, python: str | None) -> dict | None:
    """JAX's CPU results for {(op, dtype): inputs}, computed in `python` (an interpreter with
    jax installed) or in this process when jax imports here; None when neither is available."""
    if python is None:
        if importlib.util.find_spec("jax") is None:
            return None
        python = sys.executable
    with tempfile.TemporaryDirectory() as scratch:
        source, result = os.path.join(scratch, "in.npz"), os.path.join(scratch, "out.npz")
        arrays = {
            f"{op}|{dtype}|{i}": x for (op, dtype), xs in cases.items() for i, x in enumerate(xs)
        }
        np.savez(source, **arrays)
        keys = json.dumps([f"{op}|{dtype}" for op, dtype in cases])
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        subprocess.run(
            [python, "-c", _JAX_SNIPPET, source, keys, result, json.dumps(FUNCTION_PATHS)],
            check=True,
            env=env,
        )
        with np.load(result) as loaded:
            return {tuple(key.split("|")): loaded[key] for key in loaded.files}


# ---- the table --------------------------------------------------------------------------------


def measure(
    kernels: Kernels, op: str, dtype: str, xs: tuple, got=None, normal_only=False, exact=None
):
    """(max ulp error, the worst input) of the kernel's (or `got`'s) results on xs.

    normal_only leaves out inputs where an operand or the exact result is subnormal (XLA's
    CPU backend flushes those to zero, so JAX is compared on the rest), and those with a
    special operand or result (counted by special_mismatches instead).
    """
    if got is None:
        got = kernels(op, dtype, *xs)
    hi, lo, scale = exact if exact is not None else reference(op, dtype, *xs)
    err = ulp_errors(np.asarray(got, dtype=dtype), hi, lo, scale)
    if normal_only:
        smallest = float(np.finfo(dtype).smallest_normal)
        with np.errstate(invalid="ignore"):
            subnormal = (hi != 0) & (np.abs(hi) < smallest)
            for x in xs:
                subnormal |= (x != 0) & (np.abs(x) < smallest)
            special = ~np.isfinite(hi) | ((hi == 0) & (lo == 0))
            for x in xs:
                special |= ~np.isfinite(x) | (x == 0)
        err = np.where(subnormal | special, 0.0, err)
    worst = int(np.argmax(err))
    return float(err[worst]), tuple(x[worst] for x in xs)


def special_mismatches(op: str, dtype: str, xs: tuple, got, exact) -> int:
    """How many results differ from the exact ones (reference()'s) where an operand or the
    result is special (±0, ±inf, NaN)."""
    hi, lo, scale = exact
    err = ulp_errors(np.asarray(got, dtype=dtype), hi, lo, scale)
    special = ~np.isfinite(hi) | ((hi == 0) & (lo == 0))
    for x in xs:
        special |= ~np.isfinite(x) | (x == 0)
    return int(np.count_nonzero(special & (err > 0)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000, help="random inputs per region")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument(
        "--jax-python",
        default=None,
        help="a Python interpreter with jax installed, for JAX's column",
    )
    args = parser.parse_args(argv)
    ops = args.ops.split(",")
    dtypes = args.dtypes.split(",")
    kernels = Kernels(ops)
    cases = {(op, dtype): inputs(op, dtype, args.n) for op in ops for dtype in dtypes}
    jax_results = jax_values(cases, args.jax_python)
    print(
        f"max error in ulps, {args.n} random inputs per region plus edges "
        f"(target: {target.current_target().describe()}); inf: a special value differs"
    )
    if jax_results is not None:
        print(
            "jax: XLA's CPU backend on the same inputs, leaving out subnormal operands and "
            "results (it flushes them) and special ones; * where a special value differs"
        )
    print(f"{'function':<10}{'dtype':<9}{'kiln':>9}{'bound':>8}{'jax':>10}  worst kiln input")
    for (op, dtype), xs in cases.items():
        exact = reference(op, dtype, *xs)
        err, worst = measure(kernels, op, dtype, xs, exact=exact)
        jax_err = ""
        if jax_results is not None:
            jax_got = jax_results[(op, dtype)]
            jax_err = measure(kernels, op, dtype, xs, jax_got, normal_only=True, exact=exact)[0]
            jax_err = f"{jax_err:.3f}" if jax_err < 1000 else f"{jax_err:.2g}"
            if special_mismatches(op, dtype, xs, jax_got, exact):
                jax_err += "*"
        bound = getattr(vmath, "ULP_BOUNDS", {}).get((op, dtype), float("nan"))
        where = ", ".join(repr(float(v)) for v in worst)
        print(f"{op:<10}{dtype:<9}{err:9.3f}{bound:8.1f}{jax_err:>10}  {where}", flush=True)


if __name__ == "__main__":
    main()

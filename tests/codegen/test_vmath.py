"""Accuracy, special values and vectorization of kiln's inline vector math (vmath.emit).

Every (op, dtype) is compiled once into an elementwise loop, optimized at O3 for the host CPU,
JIT-compiled, and compared with NumPy/SciPy: the max ulp error over dense and log-uniform samples
must stay within vmath.MAX_ULP, and special values must match NumPy exactly.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
import scipy.special
from llvmlite import binding as llvm
from llvmlite import ir

from kiln.codegen.llvm import target as codegen_target_module
from kiln.codegen.llvm import vmath

F32, F64 = np.float32, np.float64
LD = np.longdouble
_TYPES = {"float32": ir.FloatType(), "float64": ir.DoubleType()}
_BINARY = {"pow", "atan2"}


# ---- harness: one module with a loop per (op, dtype), optimized and JIT-compiled once --------


def _emit_loop(module: ir.Module, op: str, dtype: str) -> str:
    """Emit `void name(T* in0, [T* in1,] T* out, i64 n)` applying op elementwise."""
    ty = _TYPES[dtype]
    ptr = ty.as_pointer()
    arity = 2 if op in _BINARY else 1
    fnty = ir.FunctionType(ir.VoidType(), [ptr] * (arity + 1) + [ir.IntType(64)])
    name = f"vm_{op}_{dtype}"
    fn = ir.Function(module, fnty, name)
    for arg in fn.args[:-1]:
        arg.add_attribute("noalias")
    *inputs, out, n = fn.args
    entry, body, done = (fn.append_basic_block(label) for label in ("entry", "body", "done"))
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
    return name


def _prefer_512(text: str) -> str:
    """Tag every defined function with "prefer-vector-width"="512" (llvmlite has no API for it)."""
    text = re.sub(r"^(define .*\))$", r"\1 #77", text, flags=re.M)
    return text + '\nattributes #77 = { "prefer-vector-width"="512" }\n'


class _Jit:
    def __init__(self, ops):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        # Compiled for the target the codegen fixture selected (the host or a baseline).
        current = codegen_target_module.current_target()
        module = ir.Module(name="vmath_test")
        module.triple = current.triple
        self.names = {(op, dt): _emit_loop(module, op, dt) for op in ops for dt in _TYPES}
        self.tm = current.create_machine()
        text = _prefer_512(str(module)) if current.has_avx512 else str(module)
        parsed = llvm.parse_assembly(text)
        parsed.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pb = llvm.create_pass_builder(self.tm, pto)
        pb.getModulePassManager().run(parsed, pb)
        late = llvm.create_new_module_pass_manager()
        late.add_always_inliner_pass()
        late.run(parsed, pb)
        self.optimized_ir = str(parsed)
        self.engine = llvm.create_mcjit_compiler(parsed, self.tm)
        self.engine.finalize_object()
        self.module = parsed

    def __call__(self, op, dtype, *arrays):
        ctype = ctypes.c_float if dtype == "float32" else ctypes.c_double
        arrays = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
        out = np.empty_like(arrays[0])
        pointer = ctypes.POINTER(ctype)
        proto = ctypes.CFUNCTYPE(None, *([pointer] * (len(arrays) + 1)), ctypes.c_int64)
        fn = proto(self.engine.get_function_address(self.names[(op, dtype)]))
        pointers = [a.ctypes.data_as(ctypes.POINTER(ctype)) for a in arrays + [out]]
        fn(*pointers, out.size)
        return out


_JITS: dict = {}


def jit() -> _Jit:
    """The kernels of every vmath function, compiled once per target."""
    current = codegen_target_module.current_target()
    if current not in _JITS:
        _JITS[current] = _Jit(sorted(vmath.SUPPORTED))
    return _JITS[current]


# ---- references and ulp measurement ----------------------------------------------------------


def _ld(fn):
    """A reference evaluated in long double (x87 80-bit) for float64 and in double for float32."""
    return lambda *xs: fn(*[x.astype(LD if x.dtype == F64 else F64) for x in xs])


def _logistic_ref(x):
    return 1 / (1 + np.exp(-x))


def _exp_minus_square(t):
    """exp(-t**2) in long double for float64 t, with t**2 split into parts that are exact."""
    head = t.astype(F32).astype(LD)
    rest = t - head
    return np.exp(-head * head) * np.exp(-2 * head * rest) * np.exp(-rest * rest)


def _erf_erfc_ld(x):
    """(erf, erfc) of float64 x in long double, more accurate than SciPy's double versions:
    a series of positive terms (erf for |x| <= 2, erfc = 1 - erf below 1.2) and the continued
    fraction of erfc beyond (with enough terms for each range, fewer for larger |x|)."""
    t = np.minimum(np.abs(x.astype(LD)), 1e4)
    erf, erfc = np.ones_like(t), np.zeros_like(t)
    small = t <= 2
    ts = t[small]
    term = series = ts.copy()
    for k in range(1, 46):  # the 45th term is below 1e-24 of the sum for |x| <= 2
        term = term * 2 * ts * ts / (2 * k + 1)
        series = series + term
    erf[small] = 2 / np.sqrt(LD(np.pi)) * _exp_minus_square(ts) * series
    erfc[small] = 1 - erf[small]
    for low, high, terms in ((1.2, 2.5, 400), (2.5, 5.0, 150), (5.0, 30.0, 60)):
        part = (t >= low) & (t < high)
        tp = t[part]
        fraction = tp.copy()
        for k in range(terms, 0, -1):
            fraction = tp + (LD(k) / 2) / fraction
        erfc[part] = _exp_minus_square(tp) / (np.sqrt(LD(np.pi)) * fraction)
        erf[part & ~small] = 1 - erfc[part & ~small]
    negative = x < 0
    return np.where(negative, -erf, erf), np.where(negative, 2 - erfc, erfc)


def _erf_ref(x):
    return _erf_erfc_ld(x)[0] if x.dtype == F64 else scipy.special.erf(x.astype(F64))


def _erfc_ref(x):
    return _erf_erfc_ld(x)[1] if x.dtype == F64 else scipy.special.erfc(x.astype(F64))


def _erf_inv_ref(y):
    """SciPy's erfinv, polished in long double by one Newton step on the accurate erf above."""
    if y.dtype != F64:
        return scipy.special.erfinv(y.astype(F64))
    x = scipy.special.erfinv(y).astype(LD)
    finite = np.isfinite(x)
    ax = np.abs(np.where(finite, x, 0)).astype(F64)
    erf, erfc = _erf_erfc_ld(ax)
    ay = np.abs(y).astype(LD)
    # erf(x) - y, written through erfc in the tail where 1 - |y| is exact.
    residual = np.where(ax > 1, (1 - ay) - erfc, erf - ay)
    step = residual / (2 / np.sqrt(LD(np.pi)) * _exp_minus_square(ax.astype(LD)))
    return np.where(finite, np.sign(y) * (ax - step), x)


_EULER_GAMMA = LD("0.5772156649015328606065120900824024310422")
_PI = LD("3.141592653589793238462643383279502884197")
_HALF_LOG_2PI = LD("0.9189385332046727417803297364056176398614")
_DIGAMMA_ROOT_TEXT = "1.461632144968362341262659542325721328468"


def _long_double_parts(text: str):
    """A decimal constant as (hi, lo) long doubles with hi + lo ~ 128-bit accurate."""
    from decimal import Decimal, getcontext

    getcontext().prec = 50
    hi = LD(text)
    numerator, denominator = hi.as_integer_ratio()
    return hi, LD(str(Decimal(text) - Decimal(numerator) / Decimal(denominator)))


# digamma's positive zero in two parts: t - root must stay accurate to ~1e-35 near it.
_DIGAMMA_ROOT, _DIGAMMA_ROOT_LO = _long_double_parts(_DIGAMMA_ROOT_TEXT)
# Bernoulli numbers B2, B4, ..., B20 for the asymptotic series.
_BERNOULLI = [
    LD(n) / LD(d)
    for n, d in (
        (1, 6),
        (-1, 30),
        (1, 42),
        (-1, 30),
        (5, 66),
        (-691, 2730),
        (7, 6),
        (-3617, 510),
        (43867, 798),
        (-174611, 330),
    )
]


def _zeta_minus_one(count: int) -> list:
    """zeta(k) - 1 for k = 0..count-1 (entries below 2 unused), in long double, by
    Euler-Maclaurin summation from n = 20 on (the neglected terms are below 1e-22)."""
    n_split = 20
    values = [LD(0), LD(0)]
    for k in range(2, count):
        head = sum(LD(n) ** -k for n in range(2, n_split))
        big_n = LD(n_split)
        tail = big_n ** (1 - k) / (k - 1) + big_n**-k / 2
        rising, factorial = LD(1), LD(1)
        for j, bernoulli in enumerate(_BERNOULLI[:6], start=1):
            rising *= (k + 2 * j - 2) * (k + 2 * j - 3) if j > 1 else k
            factorial *= (2 * j) * (2 * j - 1)
            tail += bernoulli / factorial * rising * big_n ** (-k - 2 * j + 1)
        values.append(head + tail)
    return values


_ZETA_M1 = _zeta_minus_one(170)


def _series_around_one(z, terms, derivative):
    """Sum over k >= 2 of (-1)**k zeta(k) z**(k-1) / (k if not derivative else 1)."""
    total, power = np.zeros_like(z), np.ones_like(z)
    for k in range(2, terms):
        power = power * z if k > 2 else z.copy()
        weight = (1 + _ZETA_M1[k]) / (1 if derivative else k)
        total = total + (-1) ** k * weight * power
    return total


def _series_around_two(z, terms, derivative):
    """Sum over k >= 2 of (-1)**k (zeta(k) - 1) z**(k-1) / (k if not derivative else 1)."""
    total, power = np.zeros_like(z), np.ones_like(z)
    for k in range(2, terms):
        power = power * z if k > 2 else z.copy()
        total = total + (-1) ** k * _ZETA_M1[k] / (1 if derivative else k) * power
    return total


def _shift_up(t, target=30.0):
    """(w, product, reciprocal sum): w = t + n >= target, product of t..w-1, sum of 1/(t+k)."""
    w, product, reciprocals = t.copy(), np.ones_like(t), np.zeros_like(t)
    for _ in range(int(target) + 1):
        below = w < target
        product = np.where(below, product * w, product)
        reciprocals = np.where(below, reciprocals + 1 / w, reciprocals)
        w = np.where(below, w + 1, w)
    return w, product, reciprocals


def _piecewise(t, pieces):
    """Evaluate each (mask, function) piece on its own subset of t (the series are costly)."""
    out = np.full_like(t, np.nan)
    for mask, function in pieces:
        if mask.any():
            out[mask] = function(t[mask])
    return out


def _lgamma_near_one(t):
    z = np.where(t < 0.5, t, t - 1)
    value = z * (-_EULER_GAMMA + _series_around_one(z, 80, False))
    return value - np.where(t < 0.5, np.log(t), 0)


def _lgamma_near_two(t):
    z = t - 2
    return z * ((1 - _EULER_GAMMA) + _series_around_two(z, 165, False))


def _lgamma_stirling(t):
    w, product, _ = _shift_up(t)
    value = (w - 0.5) * np.log(w) - w + _HALF_LOG_2PI
    power = 1 / w
    for k, bernoulli in enumerate(_BERNOULLI, start=1):
        value = value + bernoulli / (2 * k * (2 * k - 1)) * power
        power = power / (w * w)
    return value - np.log(product)


def _lgamma_positive_ld(t):
    """log Gamma(t) for t > 0 in long double: zeta series near 1 and 2 (with the zero factored
    out), lgamma(t+1) - log t below 1/2, Stirling after shifting to >= 30 above 3.5."""
    return _piecewise(
        t,
        [
            (t < 1.5, _lgamma_near_one),
            ((t >= 1.5) & (t < 3.5), _lgamma_near_two),
            (t >= 3.5, _lgamma_stirling),
        ],
    )


def _digamma_near_one(t):
    z = np.where(t < 0.5, t, t - 1)
    return -_EULER_GAMMA + _series_around_one(z, 110, True) - np.where(t < 0.5, 1 / t, 0)


def _digamma_near_root(t):
    # psi(1+z) - psi(1+z0) = (z - z0) sum_k (-1)**k zeta(k) h_k,
    # with h_k = (z**(k-1) - z0**(k-1)) / (z - z0) built up without any division.
    z, z0 = t - 1, (_DIGAMMA_ROOT - 1) + _DIGAMMA_ROOT_LO
    h, z0_power, total = np.ones_like(z), LD(1), np.zeros_like(z)
    for k in range(2, 130):
        if k > 2:
            z0_power = z0_power * z0
            h = z * h + z0_power
        total = total + (-1) ** k * (1 + _ZETA_M1[k]) * h
    return ((t - _DIGAMMA_ROOT) - _DIGAMMA_ROOT_LO) * total


def _digamma_near_two(t):
    return (1 - _EULER_GAMMA) + _series_around_two(t - 2, 110, True)


def _digamma_asymptotic(t):
    w, _, reciprocals = _shift_up(t)
    value = np.log(w) - 1 / (2 * w)
    power = 1 / (w * w)
    for k, bernoulli in enumerate(_BERNOULLI, start=1):
        value = value - bernoulli / (2 * k) * power
        power = power / (w * w)
    return value - reciprocals


def _digamma_positive_ld(t):
    """digamma(t) for t > 0 in long double; near its zero the series is written with
    (t - root) factored out, so the reference keeps its relative accuracy there."""
    return _piecewise(
        t,
        [
            (t < 1.2, _digamma_near_one),
            ((t >= 1.2) & (t < 1.7), _digamma_near_root),
            ((t >= 1.7) & (t < 2.5), _digamma_near_two),
            (t >= 2.5, _digamma_asymptotic),
        ],
    )


def _sin_pi_ld(t):
    return np.sin(_PI * (t - np.round(t)))


def _lgamma_ref(x):
    """log|Gamma(x)| in long double (float64) or double (float32), reflected for x < 0."""
    with np.errstate(all="ignore"):
        t = x.astype(LD)
        regular = np.isfinite(t) & (t != 0)
        out = np.full_like(t, np.inf)
        out[regular] = _lgamma_positive_ld(np.abs(t[regular]))
        negative = regular & (t < 0)
        tn = t[negative]
        out[negative] = np.log(_PI / np.abs(tn * _sin_pi_ld(tn))) - out[negative]
        out = np.where((t <= 0) & (t == np.round(t)), np.inf, out)
        out = np.where(np.isinf(t), t, out)
    return out if x.dtype == F64 else out.astype(F64)


def _digamma_ref(x):
    """digamma(x) in long double, reflected for x < 0 (NaN at the poles, as SciPy)."""
    with np.errstate(all="ignore"):
        t = x.astype(LD)
        regular = np.isfinite(t) & (t != 0)
        out = np.full_like(t, np.nan)
        out[regular] = _digamma_positive_ld(np.where(t > 0, t, 1 - t)[regular])
        negative = regular & (t < 0)
        out[negative] = out[negative] - _pi_cot_pi_ld(t[negative])
        out = np.where((t < 0) & (t == np.round(t)), np.nan, out)
        out = np.where(t == 0, np.where(np.signbit(x), np.inf, -np.inf), out)
        out = np.where(np.isinf(t), np.where(t > 0, np.inf, np.nan), out)
    return out if x.dtype == F64 else out.astype(F64)


def _pi_cot_pi_ld(t):
    r = t - np.round(t)
    return _PI * np.cos(_PI * r) / np.sin(_PI * r)


def _reflection_scale(op, x):
    """For x < 0, lgamma/digamma errors are counted in ulps of the larger of the two terms the
    reflection formula subtracts (its cancellation near the negative zeros is inherent)."""
    scale = np.zeros(x.shape, dtype=LD)
    negative = np.isfinite(x) & (x < 0) & (x != np.round(x))
    t = x[negative].astype(LD)
    with np.errstate(all="ignore"):
        if op == "lgamma":
            terms = (_lgamma_positive_ld(-t), np.log(_PI / np.abs(t * _sin_pi_ld(t))))
        else:
            terms = (_digamma_positive_ld(1 - t), _pi_cot_pi_ld(t))
    scale[negative] = np.maximum(np.maximum(np.abs(terms[0]), np.abs(terms[1])), 1)
    return scale


REFERENCES = {
    "exp": _ld(np.exp),
    "exp2": _ld(np.exp2),
    "expm1": _ld(np.expm1),
    "log": _ld(np.log),
    "log1p": _ld(np.log1p),
    "log2": _ld(np.log2),
    "log10": _ld(np.log10),
    "tanh": _ld(np.tanh),
    "logistic": _ld(_logistic_ref),
    "erf": _erf_ref,
    "erfc": _erfc_ref,
    "sin": _ld(np.sin),
    "cos": _ld(np.cos),
    "pow": _ld(np.power),
    "tan": _ld(np.tan),
    "atan": _ld(np.arctan),
    "atan2": _ld(np.arctan2),
    "asin": _ld(np.arcsin),
    "acos": _ld(np.arccos),
    "sinh": _ld(np.sinh),
    "cosh": _ld(np.cosh),
    "asinh": _ld(np.arcsinh),
    "acosh": _ld(np.arccosh),
    "atanh": _ld(np.arctanh),
    "cbrt": _ld(np.cbrt),
    "erf_inv": _erf_inv_ref,
    "lgamma": _lgamma_ref,
    "digamma": _digamma_ref,
}
# NumPy itself, in the test dtype, for the special-value comparison.
NUMPY_SAME_DTYPE = {
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


def ulp_error(got: np.ndarray, ref: np.ndarray, scale=None) -> np.ndarray:
    """|got - ref| in ulps of the target dtype at ref (NaN/inf must match exactly, else inf);
    where `scale` is given, in ulps of max(|ref|, scale) instead."""
    with np.errstate(all="ignore"):
        return _ulp_error(got, ref, scale)


def _ulp_error(got, ref, scale):
    dtype = got.dtype
    info = np.finfo(dtype)
    ref_rounded = ref.astype(dtype)
    # Spacing at |ref|, measured at the correctly rounded value; subnormals use the min spacing.
    spacing = np.spacing(np.abs(ref_rounded).astype(dtype)).astype(LD)
    spacing = np.maximum(spacing, LD(info.smallest_subnormal))
    if scale is not None:
        spacing = np.maximum(spacing, np.spacing(np.asarray(scale).astype(dtype)).astype(LD))
    err = np.abs(got.astype(LD) - ref.astype(LD)) / spacing
    # Where the true value overflows the dtype, inf is the right answer.
    overflow = np.isinf(ref_rounded) & np.isfinite(ref)
    err = np.where(overflow & (got == ref_rounded), 0, err)
    both_nan = np.isnan(got) & np.isnan(ref)
    same_inf = np.isinf(got) & np.isinf(ref_rounded) & (got == ref_rounded)
    err = np.where(both_nan | same_inf, 0.0, err)
    return np.where(np.isnan(err), np.inf, err)


# ---- sample sets ----------------------------------------------------------------------------


def _logu(rng, low, high, size, dtype, signed=True):
    """Log-uniform magnitudes in [low, high], random signs when signed."""
    x = np.exp(rng.uniform(np.log(low), np.log(high), size))
    if signed:
        x *= rng.choice([-1.0, 1.0], size)
    return x.astype(dtype)


def _lin(low, high, size, dtype):
    return np.linspace(low, high, size).astype(dtype)


def samples(op: str, dtype: str):
    """Dense and random points over op's domain (a tuple of arrays for binary ops)."""
    rng = np.random.default_rng(1234)
    f64 = dtype == "float64"
    info = np.finfo(dtype)
    tiny, huge = float(info.smallest_subnormal), float(info.max)
    # The long-double references of erf* and the gamma functions are slow: fewer points there.
    n = 100_000 if (f64 and op.startswith("erf")) or op in ("lgamma", "digamma") else 200_000
    big = 700.0 if f64 else 88.0

    def cat(*parts):
        return np.concatenate([np.asarray(p, dtype=dtype) for p in parts])

    if op in ("exp", "exp2", "expm1"):
        lo, hi = {
            "exp": (-746.0 if f64 else -104.0, 710.0 if f64 else 89.0),
            "exp2": (-1076.0 if f64 else -150.0, 1025.0 if f64 else 129.0),
            "expm1": (-40.0 if f64 else -18.0, 710.0 if f64 else 89.0),
        }[op]
        return cat(
            _lin(lo, hi, n, dtype), _lin(-1, 1, n // 2, dtype), _logu(rng, tiny, 1.0, n // 4, dtype)
        )
    if op in ("log", "log2", "log10"):
        return cat(_logu(rng, tiny, huge, n, dtype, False), _lin(0.5, 2.0, n, dtype))
    if op == "log1p":
        return cat(
            _lin(-1, 1, n, dtype),
            _logu(rng, tiny, huge, n // 2, dtype, False),
            -_logu(rng, tiny, 1.0, n // 2, dtype, False),
        )
    if op in ("tanh", "sinh", "cosh", "asinh"):
        top = {"tanh": 25.0, "sinh": big + 10, "cosh": big + 10, "asinh": huge}[op]
        return cat(_lin(-min(top, 30.0), min(top, 30.0), n, dtype), _logu(rng, tiny, top, n, dtype))
    if op == "logistic":
        return cat(
            _lin(-110.0 if not f64 else -750.0, 110.0 if not f64 else 750.0, n, dtype),
            _lin(-20, 20, n, dtype),
            _logu(rng, tiny, 1e3, n // 2, dtype),
        )
    if op in ("erf", "erfc"):
        return cat(
            _lin(-30 if f64 else -11, 30 if f64 else 11, n, dtype),
            _lin(-3, 3, n, dtype),
            _logu(rng, tiny, 30.0, n // 2, dtype),
        )
    if op in ("sin", "cos", "tan"):
        # The whole range: the fast reduction below 65536 (float32) or 2**30 (float64), the
        # exact one above, and magnitudes around the switch.
        switch = 65536.0 if not f64 else 2.0**30
        return cat(
            _lin(-10, 10, n, dtype),
            _lin(-2 * switch, 2 * switch, n, dtype),
            _logu(rng, tiny, huge, n, dtype),
            _logu(rng, switch / 4, switch * 4, n, dtype),
        )
    if op == "atan":
        return cat(_lin(-5, 5, n, dtype), _logu(rng, tiny, huge, n, dtype))
    if op in ("asin", "acos", "atanh", "erf_inv"):
        return cat(
            _lin(-1, 1, n, dtype),
            _logu(rng, tiny, 1.0, n, dtype),
            1 - _logu(rng, info.eps / 2, 1.0, n // 4, dtype, False),
        )
    if op == "acosh":
        return cat(
            _lin(1, 10, n, dtype),
            1 + _logu(rng, info.eps, 1.0, n // 2, dtype, False),
            _logu(rng, 1.0, huge, n // 2, dtype, False),
        )
    if op == "cbrt":
        return cat(_logu(rng, tiny, huge, n, dtype), _lin(-10, 10, n // 2, dtype))
    if op == "pow":
        x = cat(
            _logu(rng, 1e-3, 1e3, n, dtype, False),
            _logu(rng, tiny, huge, n // 2, dtype, False),
            _lin(0.5, 2.0, n // 2, dtype),
            -rng.integers(1, 20, n // 4),
        )
        y = cat(
            rng.uniform(-30, 30, n),
            rng.uniform(-1, 1, n // 2),
            rng.uniform(-1000 if f64 else -100, 1000 if f64 else 100, n // 2),
            rng.integers(-30, 30, n // 4),
        )
        return x, y
    if op == "atan2":
        y = cat(_logu(rng, tiny, huge, n, dtype), rng.uniform(-3, 3, n))
        x = cat(_logu(rng, tiny, huge, n, dtype), rng.uniform(-3, 3, n))
        return y, x
    if op in ("lgamma", "digamma"):
        zeros = (1.0, 2.0) if op == "lgamma" else (1.4616321449683623,)
        near = [z + _logu(rng, info.eps, 0.2, n // 8, dtype) for z in zeros]
        return cat(
            _lin(0, 12, n, dtype),
            _logu(rng, tiny, huge, n, dtype, False),
            *near,
            _lin(-20, 0, n // 2, dtype),
            -_logu(rng, tiny, 1e4, n // 2, dtype, False),
        )
    raise KeyError(op)


def special_values(dtype: str) -> np.ndarray:
    info = np.finfo(dtype)
    tiny, small, huge = info.smallest_subnormal, info.smallest_normal, info.max
    values = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        tiny,
        -tiny,
        small,
        -small,
        huge,
        -huge,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        3 * tiny,
        small / 2,
        1e-30,
        -1e-30,
        88.72,
        88.73,
        88.8,
        -87.3,
        -103.9,
        -104.0,
        709.7,
        709.8,
        -745.0,
        -745.2,
        2.0,
        10.0,
        -10.0,
        30.0,
        np.pi,
        np.pi / 2,
        1 - info.epsneg,
        1 + info.eps,
        -1 + info.epsneg,
    ]
    with np.errstate(over="ignore"):
        return np.array(values, dtype=dtype)


def measure(op: str, dtype: str) -> tuple[float, object]:
    """Max ulp error of vmath's op over samples(op, dtype), and the worst input."""
    xs = samples(op, dtype)
    xs = xs if isinstance(xs, tuple) else (xs,)
    got = jit()(op, dtype, *xs)
    with np.errstate(all="ignore"):
        ref = REFERENCES[op](*xs)
    scale = _reflection_scale(op, xs[0]) if op in ("lgamma", "digamma") else None
    err = ulp_error(got, ref, scale)
    worst = int(np.argmax(err))
    return float(err[worst]), tuple(x[worst] for x in xs)


CASES = [(op, dt) for op in sorted(vmath.SUPPORTED) for dt in ("float32", "float64")]


@pytest.mark.parametrize("op,dtype", CASES)
def test_max_ulp(op, dtype):
    err, worst = measure(op, dtype)
    assert err <= vmath.MAX_ULP[(op, dtype)], f"{op} {dtype}: {err:.2f} ulp at {worst}"


@pytest.mark.parametrize("op,dtype", CASES)
def test_special_values(op, dtype):
    """NaN, ±inf, ±0, subnormals and overflow edges behave exactly as NumPy (up to MAX_ULP)."""
    values = special_values(dtype)
    if op in _BINARY:
        x, y = np.meshgrid(values, values)
        args = (x.ravel(), y.ravel())
    else:
        args = (values,)
    got = jit()(op, dtype, *args)
    with np.errstate(all="ignore"):
        expected = NUMPY_SAME_DTYPE[op](*args).astype(dtype)
        if op == "lgamma":
            # SciPy's gammaln gives inf for float64 subnormals; the true value, -log|x|, is finite.
            subnormal = (args[0] != 0) & (np.abs(args[0]) < np.finfo(dtype).smallest_normal)
            expected = np.where(subnormal, REFERENCES[op](*args).astype(dtype), expected)
    assert np.array_equal(np.isnan(got), np.isnan(expected)), (op, args, got, expected)
    zeros = expected == 0
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(expected[zeros])), (op, got, expected)
    infinite = np.isinf(expected)
    assert np.array_equal(got[infinite], expected[infinite]), (op, got, expected)
    finite = np.isfinite(expected)
    with np.errstate(all="ignore"):
        ref = REFERENCES[op](*[a[finite] for a in args])
    scale = _reflection_scale(op, args[0][finite]) if op in ("lgamma", "digamma") else None
    assert ulp_error(got[finite], ref, scale).max() <= vmath.MAX_ULP[(op, dtype)]


def test_pow_c99_edge_cases():
    nan, inf = np.nan, np.inf
    cases = [
        (nan, 0.0, 1.0),
        (1.0, nan, 1.0),
        (-1.0, inf, 1.0),
        (-1.0, -inf, 1.0),
        (-2.0, 3.0, -8.0),
        (-2.0, 2.0, 4.0),
        (-2.0, 0.5, nan),
        (-0.0, -3.0, -inf),
        (-0.0, -2.0, inf),
        (0.0, -1.0, inf),
        (-0.0, 3.0, -0.0),
        (-inf, 3.0, -inf),
        (-inf, -3.0, -0.0),
        (-inf, 2.0, inf),
        (0.5, inf, 0.0),
        (2.0, -inf, 0.0),
        (0.5, -inf, inf),
        (inf, -1.0, 0.0),
        (2.0, 1024.0, inf),
        (2.0, -1074.0, 5e-324),
    ]
    for dtype in ("float32", "float64"):
        x, y, want = (np.array(c, dtype=dtype) for c in zip(*cases))
        got = jit()("pow", dtype, x, y)
        np.testing.assert_array_equal(got, want.astype(dtype))
        assert np.array_equal(np.signbit(got), np.signbit(want))


def test_exp_overflow_and_denormal_edges():
    x = np.array([88.72, 88.8, -87.5, -100.0, -103.0, -104.0], dtype=F32)
    got = jit()("exp", "float32", x)
    assert np.isfinite(got[0]) and got[1] == np.inf
    assert 0 < got[3] < np.finfo(F32).smallest_normal and got[5] == 0.0
    assert ulp_error(got, np.exp(x.astype(F64))).max() <= vmath.MAX_ULP[("exp", "float32")]


def test_exp_loop_is_vectorized():
    text = jit().optimized_ir
    body = text[text.index("@vm_exp_float32") :]
    body = body[: body.index("\n}\n")]
    assert "<16 x float>" in body or "<8 x float>" in body


def test_trig_loop_is_vectorized_with_its_large_path_inline():
    """sin's loop vectorizes, and the large-argument variant the vectorizer calls is inlined
    into it (a call per vector would cost the fast path ~25%); the scalar remainder still
    calls the out-of-line scalar function."""
    text = jit().optimized_ir
    body = text[text.index("@vm_sin_float32") :]
    body = body[: body.index("\n}\n")]
    assert "<16 x float>" in body or "<8 x float>" in body
    assert "@kiln_vmath_sin_large_float32_m" not in body
    assert "@kiln_vmath_sin_large_float32(" in body


def test_large_trig_arguments_in_explicit_vectors():
    """Vector operands take the same exact reduction, lane by lane where a lane is large."""
    module = ir.Module()
    module.triple = llvm.get_process_triple()
    vec = ir.VectorType(ir.FloatType(), 4)
    pointer = vec.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [pointer, pointer]), "sin4")
    builder = ir.IRBuilder(fn.append_basic_block())
    builder.store(vmath.emit(builder, "sin", builder.load(fn.args[0])), fn.args[1])
    builder.ret_void()
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    machine = codegen_target_module.current_target().create_machine()
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    x = np.array([3e7, 0.5, 1e10, -3.4e38], dtype=F32)
    out = np.empty_like(x)
    proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
    proto(engine.get_function_address("sin4"))(x.ctypes.data, out.ctypes.data)
    assert ulp_error(out, np.sin(x.astype(F64))).max() <= vmath.MAX_ULP[("sin", "float32")]


def test_vector_operands_emit_directly():
    """emit accepts vector values too (here <4 x double>) and returns the same type."""
    module = ir.Module()
    vec = ir.VectorType(ir.DoubleType(), 4)
    fn = ir.Function(module, ir.FunctionType(vec, [vec, vec]), "f")
    builder = ir.IRBuilder(fn.append_basic_block())
    result = vmath.emit(builder, "pow", *fn.args)
    assert result.type == vec
    builder.ret(result)
    llvm.parse_assembly(str(module)).verify()


def test_emit_rejects_bad_requests():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.FloatType(), ir.DoubleType()]), "g")
    builder = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(ValueError, match="no op 'sqrt'"):
        vmath.emit(builder, "sqrt", fn.args[0])
    with pytest.raises(TypeError, match="takes 2 operand"):
        vmath.emit(builder, "pow", fn.args[0])
    with pytest.raises(TypeError, match="one type"):
        vmath.emit(builder, "atan2", *fn.args)


def test_max_ulp_table_is_complete():
    assert set(vmath.MAX_ULP) == {(op, dt) for op in vmath.SUPPORTED for dt in _TYPES}


if __name__ == "__main__":
    for case in CASES:
        print(case, "%.3f ulp at %s" % measure(*case))

"""Lowering rules for the random number primitives: the Threefry-2x32 hash in 32-bit integer
ops, and the XLA float algorithms the samplers map bits through (kiln.primitives.random_bits).

Every rule mirrors its NumPy impl operation for operation, with the fused multiply-adds as
explicit FMA ops, so native samples equal the reference ones bit for bit. The kernel IR has no
bit reinterpretation op, so float <-> bits steps are written as exact arithmetic: a float's
exponent is found by a binary search over powers of two (every scaling is exact), and
`bitcast_convert_type` from 32-bit integers to float32 builds the value from its fields.

threefry2x32 has two results, and a lowering rule describes one value, so the hash is offered
as `threefry2x32_words` (both words of one element), which callers that build their own
kernels (kiln/runtime/eager_kernels.py) use directly.
"""

from __future__ import annotations

import numpy as np

from kiln.compiler import kir
from kiln.compiler.kir import Const, Expr, ScalarOp
from kiln.compiler.lower import NotLowerable, register_lowering
from kiln.core import dtypes
from kiln.primitives import elementwise as ew
from kiln.primitives import random_bits as rb

__all__ = ["threefry2x32_words", "ROTATIONS", "KEY_PARITY"]

O = ScalarOp
_U32 = np.dtype(np.uint32)
_I32 = np.dtype(np.int32)
_F32 = np.dtype(np.float32)
_NARROW = frozenset({np.dtype(np.float16), dtypes.bfloat16})

#: Rotation distances and key-schedule parity of Threefry-2x32 (as random_bits uses them).
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
KEY_PARITY = 0x1BD11BDA


# --- Threefry-2x32 ---------------------------------------------------------------------------


def _u32(value: int) -> Const:
    return Const(value, _U32)


def _rotate_left(x: Expr, distance: int) -> Expr:
    # LLVM recognizes the shift pair as one rotate instruction.
    high = kir.op(O.SHIFT_LEFT, x, _u32(distance))
    low = kir.op(O.SHIFT_RIGHT_LOGICAL, x, _u32(32 - distance))
    return kir.op(O.BITWISE_OR, high, low)


def threefry2x32_words(k1: Expr, k2: Expr, x1: Expr, x2: Expr) -> tuple[Expr, Expr]:
    """Both hashed uint32 words of the counter pair (x1, x2) under the key (k1, k2): 20
    rounds of add, rotate and xor, with a key injection every four rounds."""
    schedule = (k1, k2, kir.op(O.BITWISE_XOR, kir.op(O.BITWISE_XOR, k1, k2), _u32(KEY_PARITY)))
    v0 = kir.op(O.ADD, x1, schedule[0])
    v1 = kir.op(O.ADD, x2, schedule[1])
    for injection in range(1, 6):
        for distance in ROTATIONS[(injection - 1) % 2]:
            v0 = kir.op(O.ADD, v0, v1)
            v1 = kir.op(O.BITWISE_XOR, _rotate_left(v1, distance), v0)
        v0 = kir.op(O.ADD, v0, schedule[injection % 3])
        v1 = kir.op(O.ADD, v1, schedule[(injection + 1) % 3])
        v1 = kir.op(O.ADD, v1, _u32(injection))
    return v0, v1


# --- float32 helpers -------------------------------------------------------------------------


def _f32(value: float) -> Const:
    return Const(float(np.float32(value)), _F32)


def _f32_bits(bits: int) -> Const:
    return Const(float(np.array(bits, np.uint32).view(np.float32)), _F32)


def _add(a, b):
    return kir.op(O.ADD, a, b)


def _sub(a, b):
    return kir.op(O.SUB, a, b)


def _mul(a, b):
    return kir.op(O.MUL, a, b)


def _fma(a, b, c):
    return kir.op(O.FMA, a, b, c)


def _where(cond, on_true, on_false):
    return kir.select(cond, on_true, on_false)


_TINY = _f32_bits(0x00800000)
_INF = _f32(np.inf)


def _flush_denormals(x: Expr) -> Expr:
    # XLA:CPU treats subnormal inputs as signed zeros (random_bits._flush_denormals).
    return _where(kir.op(O.LT, kir.op(O.ABS, x), _TINY), _mul(x, _f32(0.0)), x)


def _frexp_positive(y: Expr) -> tuple[Expr, Expr]:
    """(mantissa in [0.5, 1), exponent as float32) of a positive normal float32 (or inf):
    y = mantissa * 2**exponent. A binary search over powers of two, each step exact."""
    mantissa, exponent = y, _f32(0.0)
    for k in (64, 32, 16, 8, 4, 2, 1):
        big = kir.op(O.GE, mantissa, _f32(2.0**k))
        mantissa = _where(big, _mul(mantissa, _f32(2.0**-k)), mantissa)
        exponent = _where(big, _add(exponent, _f32(k)), exponent)
    for k in (64, 32, 16, 8, 4, 2, 1):
        small = kir.op(O.LT, _mul(mantissa, _f32(2.0**k)), _f32(2.0))
        mantissa = _where(small, _mul(mantissa, _f32(2.0**k)), mantissa)
        exponent = _where(small, _sub(exponent, _f32(k)), exponent)
    # mantissa is now in [1, 2); the impl's field arithmetic gives [0.5, 1) and exponent + 1.
    return _mul(mantissa, _f32(0.5)), _add(exponent, _f32(1.0))


def _log_f32(y: Expr) -> Expr:
    """random_bits._log_f32: Eigen's float32 log as XLA:CPU evaluates it."""
    y = _flush_denormals(y)
    clamped = _where(kir.op(O.GT, y, _TINY), y, _TINY)
    mantissa, exponent = _frexp_positive(clamped)
    below = kir.op(O.LT, mantissa, _f32_bits(0x3F3504F3))
    z = _add(_sub(mantissa, _f32(1.0)), _where(below, mantissa, _f32(0.0)))
    exponent = _sub(exponent, _where(below, _f32(1.0), _f32(0.0)))
    z2 = _mul(z, z)
    z3 = _mul(z2, z)
    p1 = _fma(_fma(z, _f32_bits(0x3D9021BB), _f32_bits(0xBDEBD1B8)), z, _f32_bits(0x3DEF251A))
    p2 = _fma(_fma(z, _f32_bits(0xBDFE5D4F), _f32_bits(0x3E11E9BF)), z, _f32_bits(0xBE2AAE50))
    p3 = _fma(_fma(z, _f32_bits(0x3E4CCEAC), _f32_bits(0xBE7FFFFC)), z, _f32_bits(0x3EAAAAAA))
    poly = _fma(_fma(p1, z3, p2), z3, p3)
    poly = _fma(poly, z3, _mul(exponent, _f32_bits(0xB95E8083)))
    out = _fma(exponent, _f32_bits(0x3F318000), _add(_fma(z2, _f32(-0.5), z), poly))
    out = _where(kir.op(O.EQ, y, _f32(0.0)), _f32(-np.inf), out)
    out = _where(kir.op(O.EQ, y, _INF), _INF, out)
    return _where(kir.op(O.GE, y, _f32(0.0)), out, _f32(np.nan))


def _log1p_f32(x: Expr) -> Expr:
    """random_bits._log1p_f32: Cephes' rational log1p near 0, the log of 1 + x elsewhere."""
    x = _flush_denormals(x)
    large = _log_f32(_add(x, _f32(1.0)))
    x2 = _mul(x, x)
    zero = _mul(x, _f32(0.0))
    denominator = _add(zero, _f32(1.0))
    for c in rb._LOG1P_DENOMINATOR:
        denominator = _fma(denominator, x, _f32_bits(c))
    numerator = _add(zero, _f32(4.527e-05))
    for c in rb._LOG1P_NUMERATOR:
        numerator = _fma(numerator, x, _f32_bits(c))
    ratio = kir.op(O.DIV, numerator, denominator)
    small = _add(x, _fma(x2, _f32(-0.5), _mul(_mul(x, x2), ratio)))
    return _where(kir.op(O.LT, kir.op(O.ABS, x), _f32_bits(0x3ED413CD)), small, large)


def _erf_inv_f32(x: Expr) -> Expr:
    """random_bits._erf_inv_f32: Giles' single-precision inverse error function."""
    w = kir.op(O.NEG, _log1p_f32(_mul(x, kir.op(O.NEG, x))))
    central = kir.op(O.LT, w, _f32(5.0))
    t = _where(central, _add(w, _f32(-2.5)), _add(kir.op(O.SQRT, w), _f32(-3.0)))
    poly = _where(central, _f32(rb._ERF_INV_CENTRAL[0]), _f32(rb._ERF_INV_TAIL[0]))
    for c_central, c_tail in zip(rb._ERF_INV_CENTRAL[1:], rb._ERF_INV_TAIL[1:]):
        poly = _fma(poly, t, _where(central, _f32(c_central), _f32(c_tail)))
    at_one = kir.op(O.EQ, kir.op(O.ABS, x), _f32(1.0))
    return _where(at_one, _mul(x, _INF), _mul(poly, x))


def _erf_f32(x: Expr) -> Expr:
    """random_bits._erf_f32: XLA's rational float32 erf, saturating to +-1."""
    x2 = _mul(x, x)
    numerator = _f32_bits(rb._ERF_NUMERATOR[0])
    for c in rb._ERF_NUMERATOR[1:]:
        numerator = _fma(x2, numerator, _f32_bits(c))
    denominator = _f32_bits(rb._ERF_DENOMINATOR[0])
    for c in rb._ERF_DENOMINATOR[1:]:
        denominator = _fma(x2, denominator, _f32_bits(c))
    ratio = kir.op(O.DIV, _mul(x, numerator), denominator)
    saturated = kir.op(O.GE, kir.op(O.ABS, x), _f32_bits(0x407547CB))
    # copysign(1, x): only reached for |x| >= 3.83, so x is neither zero nor NaN there.
    sign = _where(kir.op(O.LT, x, _f32(0.0)), _f32(-1.0), _f32(1.0))
    return _where(saturated, sign, ratio)


def _xla_unary(f32_body):
    """A rule computing float32 (and float16/bfloat16 through float32, rounded once) with
    f32_body; float64 calls the C library in the impl and stays there."""

    def rule(ctx, index, x):
        value = x.read(index if x.ndim else ())
        dtype = value.dtype
        if dtype == _F32:
            return f32_body(value)
        if dtype in _NARROW:
            return kir.cast(f32_body(kir.cast(value, _F32)), dtype)
        raise NotLowerable(f"{ctx.eqn.primitive} lowers for float32, float16 and bfloat16 only")

    rule.__name__ = f"_{f32_body.__name__.strip('_')}_lowering_rule"
    return rule


register_lowering(rb.xla_log_p)(_xla_unary(_log_f32))
register_lowering(rb.xla_log1p_p)(_xla_unary(_log1p_f32))
register_lowering(rb.xla_erf_p)(_xla_unary(_erf_f32))
register_lowering(rb.xla_erf_inv_p)(_xla_unary(_erf_inv_f32))


@register_lowering(rb.fma_p)
def _fma_lowering_rule(ctx, index, a, b, c):
    """One rounding of a * b + c; float16/bfloat16 fuse in float32 and round once more, as
    the impl does."""
    args = [x.read(index if x.ndim else ()) for x in (a, b, c)]
    dtype = args[0].dtype
    if dtype in _NARROW:
        return kir.cast(kir.op(O.FMA, *[kir.cast(v, _F32) for v in args]), dtype)
    return kir.op(O.FMA, *args)


# --- bitcast_convert_type --------------------------------------------------------------------


def _bits_to_f32(bits: Expr) -> Expr:
    """The float32 whose bit pattern is the uint32 `bits`, built from its fields. NaN
    patterns give the default NaN (the payload is not kept)."""
    sign = kir.op(O.SHIFT_RIGHT_LOGICAL, bits, _u32(31))
    field = kir.op(O.BITWISE_AND, kir.op(O.SHIFT_RIGHT_LOGICAL, bits, _u32(23)), _u32(0xFF))
    fraction = kir.cast(kir.op(O.BITWISE_AND, bits, _u32(0x7FFFFF)), _F32)  # exact: < 2**23
    # Normal numbers: (1 + f / 2**23) * 2**(e - 127), the power built from the bits of |e - 127|
    # (at most 2**127, so every factor and product is exact).
    significand = _add(_f32(1.0), _mul(fraction, _f32(2.0**-23)))
    unbiased = kir.op(O.SUB, kir.cast(field, _I32), Const(127, _I32))
    negative = kir.op(O.LT, unbiased, Const(0, _I32))
    magnitude = kir.op(O.ABS, unbiased)
    power = _f32(1.0)
    for k in range(7):
        bit = kir.op(O.BITWISE_AND, magnitude, Const(1 << k, _I32))
        power = _where(kir.op(O.NE, bit, Const(0, _I32)), _mul(power, _f32(2.0 ** (1 << k))), power)
    normal = _where(negative, kir.op(O.DIV, significand, power), _mul(significand, power))
    subnormal = _mul(fraction, _f32(2.0**-149))
    special = _where(kir.op(O.EQ, fraction, _f32(0.0)), _INF, _f32(np.nan))
    value = _where(kir.op(O.EQ, field, _u32(0)), subnormal, normal)
    value = _where(kir.op(O.EQ, field, _u32(0xFF)), special, value)
    return _where(kir.op(O.NE, sign, _u32(0)), kir.op(O.NEG, value), value)


@register_lowering(ew.bitcast_convert_type_p)
def _bitcast_convert_type_lowering_rule(ctx, index, x, *, new_dtype):
    value = x.read(index if x.ndim else ())
    source, target = value.dtype, np.dtype(new_dtype)
    if source == target:
        return value
    if source in (_U32, _I32) and target == _F32:
        if source == _I32:
            value = kir.cast(value, _U32)
        return _bits_to_f32(value)
    if (
        kir.dtype_family(source) in ("sint", "uint")
        and kir.dtype_family(target) in ("sint", "uint")
        and source.itemsize == target.itemsize
    ):
        return kir.cast(value, target)
    raise NotLowerable(f"bitcast_convert_type from {source} to {target}")

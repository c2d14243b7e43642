"""Lowering rules for the random number primitives: the Threefry-2x32 hash in 32-bit integer
ops, and the XLA float algorithms the samplers map bits through (kiln.primitives.random_bits).

Every rule mirrors its NumPy impl operation for operation, with the fused multiply-adds as
explicit FMA ops and the float <-> bits steps as BITCAST ops, so native samples equal the
reference ones bit for bit.

threefry2x32 has two results: its rule returns both words of one element, built from one
shared set of nodes (see lower.py on rules with several results). `threefry2x32_words` is the
hash itself, which callers that build their own kernels (kiln/runtime/eager_kernels.py) use
directly.
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


@register_lowering(rb.threefry2x32_p)
def _threefry2x32_lowering_rule(ctx, index, k1, k2, x1, x2):
    """Both hashed words of one element; rank-0 keys or counters broadcast."""
    words = [x.read(index if x.ndim else ()) for x in (k1, k2, x1, x2)]
    return threefry2x32_words(*words)


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
    y = mantissa * 2**exponent, read off the bits as the impl does."""
    bits = kir.op(O.BITCAST, y, dtype=_U32)
    field = kir.cast(kir.op(O.SHIFT_RIGHT_LOGICAL, bits, _u32(23)), _I32)
    exponent = _add(kir.cast(kir.op(O.SUB, field, Const(127, _I32)), _F32), _f32(1.0))
    halved = kir.op(O.BITWISE_OR, kir.op(O.BITWISE_AND, bits, _u32(0x807FFFFF)), _u32(0x3F000000))
    return kir.op(O.BITCAST, halved, dtype=_F32), exponent


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

_U16 = np.dtype(np.uint16)
_F16 = np.dtype(np.float16)


def _half_bits_to_f32(bits: Expr) -> Expr:
    """The float32 value of the float16 whose bit pattern is the low 16 bits of the uint32
    `bits` (float16 values are all exact in float32)."""
    sign = kir.op(O.SHIFT_LEFT, kir.op(O.SHIFT_RIGHT_LOGICAL, bits, _u32(15)), _u32(31))
    field = kir.op(O.BITWISE_AND, kir.op(O.SHIFT_RIGHT_LOGICAL, bits, _u32(10)), _u32(0x1F))
    fraction = kir.op(O.BITWISE_AND, bits, _u32(0x3FF))
    # Normal numbers move their exponent from bias 15 to bias 127; inf and nan keep theirs.
    exponent = _where(kir.op(O.EQ, field, _u32(0x1F)), _u32(0xFF), _add(field, _u32(112)))
    wide = kir.op(O.SHIFT_LEFT, exponent, _u32(23))
    wide = kir.op(O.BITWISE_OR, wide, kir.op(O.SHIFT_LEFT, fraction, _u32(13)))
    normal = kir.op(O.BITCAST, kir.op(O.BITWISE_OR, sign, wide), dtype=_F32)
    # Zeros and subnormals: fraction * 2**-24, signed.
    tiny = _mul(kir.cast(fraction, _F32), _f32(2.0**-24))
    tiny = _where(kir.op(O.NE, sign, _u32(0)), kir.op(O.NEG, tiny), tiny)
    return _where(kir.op(O.EQ, field, _u32(0)), tiny, normal)


def _bits_to_narrow_float(value: Expr, target: np.dtype) -> Expr:
    """16-bit integers as float16 or bfloat16 (which compute in float32): the float32 with the
    same value, rounded exactly. A signalling NaN pattern comes back quiet."""
    bits = kir.cast(kir.cast(value, _U16), _U32)
    if target == _F16:
        return kir.cast(_half_bits_to_f32(bits), target)
    # A bfloat16 is the top half of the float32 with the same value.
    return kir.cast(kir.op(O.BITCAST, kir.op(O.SHIFT_LEFT, bits, _u32(16)), dtype=_F32), target)


@register_lowering(ew.bitcast_convert_type_p)
def _bitcast_convert_type_lowering_rule(ctx, index, x, *, new_dtype):
    """The same bits as another dtype of the same width. 32- and 64-bit values are
    reinterpreted in place; 16-bit integers become float16/bfloat16 through float32 (the
    other way round, from a 16-bit float, stays with the impl)."""
    value = x.read(index if x.ndim else ())
    source, target = value.dtype, np.dtype(new_dtype)
    if source == target:
        return value
    if source.itemsize != target.itemsize:
        raise NotLowerable(f"bitcast_convert_type from {source} to {target}")
    families = {kir.dtype_family(source), kir.dtype_family(target)}
    if families <= {"sint", "uint"}:
        return kir.cast(value, target)
    if families <= {"sint", "uint", "float"} and source.itemsize in (4, 8):
        return kir.op(O.BITCAST, value, dtype=target)
    if kir.dtype_family(source) in ("sint", "uint") and target in _NARROW:
        return _bits_to_narrow_float(value, target)
    raise NotLowerable(f"bitcast_convert_type from {source} to {target}")

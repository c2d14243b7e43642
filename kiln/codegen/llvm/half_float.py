"""Conversions between float16 and float32/float64 written as integer IR.

LLVM lowers `fptrunc double to half` to a call to the compiler-rt builtin __truncdfhf2 on every
x86-64 CPU without AVX512-FP16, and all half conversions to builtins on CPUs without F16C. The
process has no compiler-rt, so kiln emits these conversions itself: plain integer arithmetic
that rounds to nearest even exactly as the hardware does, vectorizes with the surrounding loop,
and also serves as the body of the builtins kiln registers for anything LLVM still calls
(kiln.codegen.llvm.support).
"""

from __future__ import annotations

from llvmlite import ir

from kiln.codegen.llvm import types as T

I16, I32, I64 = T.I16, T.I32, ir.IntType(64)


def _const(type_: ir.IntType, value: int) -> ir.Constant:
    return ir.Constant(type_, value)


def _shift_right_round_even(builder: ir.IRBuilder, value: ir.Value, shift: ir.Value) -> ir.Value:
    """value >> shift, rounded to nearest with ties to even (0 < shift < bit width)."""
    one = _const(value.type, 1)
    kept = builder.lshr(value, shift)
    dropped = builder.and_(value, builder.sub(builder.shl(one, shift), one))
    half = builder.shl(one, builder.sub(shift, one))
    above = builder.icmp_unsigned(">", dropped, half)
    tie_to_odd = builder.and_(builder.icmp_unsigned("==", dropped, half), builder.trunc(kept, T.I1))
    return builder.add(kept, builder.zext(builder.or_(above, tie_to_odd), value.type))


def _to_half_bits(builder, bits, width, mantissa_bits, exponent_bias, overflow_bits):
    """The float16 bit pattern of a float32/float64 given as its integer bits (RNE)."""
    int_type = bits.type
    shift_normal = mantissa_bits - 10
    sign = builder.trunc(builder.lshr(bits, _const(int_type, width - 16)), I16)
    sign = builder.and_(sign, _const(I16, 0x8000))
    magnitude = builder.and_(bits, _const(int_type, (1 << (width - 1)) - 1))
    exponent = builder.lshr(magnitude, _const(int_type, mantissa_bits))
    mantissa = builder.and_(magnitude, _const(int_type, (1 << mantissa_bits) - 1))
    # Normal halves: rebias the exponent in place, then drop the extra mantissa bits.
    rebias = (exponent_bias - 15) << mantissa_bits
    normal = _shift_right_round_even(
        builder, builder.sub(magnitude, _const(int_type, rebias)), _const(int_type, shift_normal)
    )
    # Subnormal halves count units of 2**-24: the full significand shifted by how far the
    # exponent lies below 2**-14 (capped, which rounds anything that small to zero).
    significand = builder.or_(mantissa, _const(int_type, 1 << mantissa_bits))
    lowest_normal = exponent_bias - 14
    shift = builder.sub(_const(int_type, lowest_normal + shift_normal), exponent)
    # Keep the shift within [1, width - 1] in the lanes that take the other branch too, so no
    # lane ever computes a poison value.
    shift = builder.select(
        builder.icmp_unsigned(">", shift, _const(int_type, width - 1)),
        _const(int_type, width - 1),
        shift,
    )
    shift = builder.select(
        builder.icmp_unsigned("==", shift, _const(int_type, 0)), _const(int_type, 1), shift
    )
    subnormal = _shift_right_round_even(builder, significand, shift)
    is_normal = builder.icmp_unsigned(">=", exponent, _const(int_type, lowest_normal))
    finite = builder.trunc(builder.select(is_normal, normal, subnormal), I16)
    infinity_at = (2 ** (width - 1 - mantissa_bits) - 1) << mantissa_bits
    payload = builder.trunc(builder.lshr(mantissa, _const(int_type, shift_normal)), I16)
    nan = builder.or_(payload, _const(I16, 0x7E00))
    result = builder.select(
        builder.icmp_unsigned(">=", magnitude, _const(int_type, overflow_bits)),
        _const(I16, 0x7C00),
        finite,
    )
    result = builder.select(
        builder.icmp_unsigned(">", magnitude, _const(int_type, infinity_at)), nan, result
    )
    return builder.or_(sign, result)


# 65520 is halfway between float16's largest finite value (65504) and 2**16: it and anything
# above round to infinity.
_F64_OVERFLOW = 0x40EFFE0000000000
_F32_OVERFLOW = 0x477FF000


def double_to_half_bits(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """A double rounded once to float16 (as NumPy and fptrunc do), as its i16 bits."""
    bits = builder.bitcast(value, I64)
    return _to_half_bits(builder, bits, 64, 52, 1023, _F64_OVERFLOW)


def float_to_half_bits(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """A float rounded to float16, as its i16 bits."""
    bits = builder.bitcast(value, I32)
    return _to_half_bits(builder, bits, 32, 23, 127, _F32_OVERFLOW)


def half_bits_to_float(builder: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """The float32 equal to a float16 given as its i16 bits (exact)."""
    wide = builder.zext(bits, I32)
    sign = builder.shl(builder.and_(wide, _const(I32, 0x8000)), _const(I32, 16))
    exponent = builder.and_(builder.lshr(wide, _const(I32, 10)), _const(I32, 0x1F))
    mantissa = builder.and_(wide, _const(I32, 0x3FF))
    normal = builder.or_(
        builder.shl(builder.add(exponent, _const(I32, 112)), _const(I32, 23)),
        builder.shl(mantissa, _const(I32, 13)),
    )
    # Infinities and NaNs keep their payload; a NaN comes out quiet.
    quiet = builder.select(
        builder.icmp_unsigned("!=", mantissa, _const(I32, 0)), _const(I32, 0x400000), _const(I32, 0)
    )
    special = builder.or_(
        builder.or_(_const(I32, 0x7F800000), builder.shl(mantissa, _const(I32, 13))), quiet
    )
    # Subnormals and zeros: mantissa * 2**-24, exact in float32.
    tiny = builder.fmul(builder.uitofp(mantissa, T.FLOAT), ir.Constant(T.FLOAT, 2.0**-24))
    tiny_bits = builder.bitcast(tiny, I32)
    magnitude = builder.select(
        builder.icmp_unsigned("==", exponent, _const(I32, 0x1F)), special, normal
    )
    magnitude = builder.select(
        builder.icmp_unsigned("==", exponent, _const(I32, 0)), tiny_bits, magnitude
    )
    return builder.bitcast(builder.or_(sign, magnitude), T.FLOAT)

"""Typed building blocks for kiln's inline vector math (vmath_*.py).

`Emitter` wraps an IRBuilder and one floating type (scalar or vector of f32/f64) so the
approximations in the family modules read like formulas: constants splat to the right type,
and every operation used is branch-free and vectorizes (fma/fabs/roundeven are intrinsics).
"""

from __future__ import annotations

import functools
import math
import struct

from llvmlite import ir

from kiln.codegen.llvm.types import vector

_F32 = ir.FloatType()
_F64 = ir.DoubleType()


def _round_f32(value: float) -> float:
    """The float32 nearest to value, as a Python float (LLVM wants exact float constants)."""
    return struct.unpack("f", struct.pack("f", value))[0]


class Emitter:
    """Arithmetic on one floating type (f32/f64, scalar or vector), emitted through `builder`."""

    def __init__(self, builder: ir.IRBuilder, ty: ir.Type):
        self.b = builder
        self.ty = ty
        self.lanes = ty.count if isinstance(ty, ir.VectorType) else None
        scalar = ty.element if self.lanes else ty
        if not isinstance(scalar, (ir.FloatType, ir.DoubleType)):
            raise TypeError(f"vmath works on float32/float64 values, got {ty}")
        self.is_f64 = isinstance(scalar, ir.DoubleType)
        self.dtype = "float64" if self.is_f64 else "float32"
        self.bits = 64 if self.is_f64 else 32
        self.mant_bits = 52 if self.is_f64 else 23
        self.exp_bias = 1023 if self.is_f64 else 127
        self.ity = self._shaped(ir.IntType(self.bits))
        self.bool_ty = self._shaped(ir.IntType(1))
        self.native_ldexp = native_ldexp()

    def _shaped(self, scalar: ir.Type) -> ir.Type:
        return vector(scalar, self.lanes) if self.lanes else scalar

    def sibling(self, is_f64: bool) -> "Emitter":
        """An Emitter for the other float width with the same lane count (for f32 via f64)."""
        scalar = _F64 if is_f64 else _F32
        return Emitter(self.b, self._shaped(scalar))

    # ---- constants -------------------------------------------------------------------------
    def c(self, value: float) -> ir.Constant:
        """A float constant of this type (rounded to float32 first when the type is f32)."""
        value = float(value) if self.is_f64 else _round_f32(float(value))
        scalar = ir.Constant(self.ty.element if self.lanes else self.ty, value)
        return ir.Constant(self.ty, [scalar] * self.lanes) if self.lanes else scalar

    def ic(self, value: int) -> ir.Constant:
        """An integer constant of the matching bit width."""
        scalar = ir.Constant(ir.IntType(self.bits), value)
        return ir.Constant(self.ity, [scalar] * self.lanes) if self.lanes else scalar

    def table(self, coefficients: dict[str, tuple[float, ...]]) -> tuple[float, ...]:
        """This type's entry of a {"float32": ..., "float64": ...} coefficient table."""
        return coefficients[self.dtype]

    # ---- arithmetic (no fast-math flags: results must stay exact on NaN/inf/-0) -------------
    def add(self, a, b):
        return self.b.fadd(a, b)

    def sub(self, a, b):
        return self.b.fsub(a, b)

    def mul(self, a, b):
        return self.b.fmul(a, b)

    def div(self, a, b):
        return self.b.fdiv(a, b)

    def neg(self, a):
        return self.b.fneg(a)

    def fma(self, a, b, c):
        """a*b + c with one rounding (the error-free tricks below rely on it)."""
        return self._intrinsic("fma", a, b, c)

    def abs(self, a):
        return self._intrinsic("fabs", a)

    def sqrt(self, a):
        return self._intrinsic("sqrt", a)

    def floor(self, a):
        return self._intrinsic("floor", a)

    def roundeven(self, a):
        return self._intrinsic("roundeven", a)

    def copysign(self, magnitude, sign):
        return self._intrinsic("copysign", magnitude, sign)

    def poly(self, x, coefficients) -> ir.Value:
        """c0 + c1*x + c2*x**2 + ... by Horner's rule with fused multiply-adds."""
        acc = self.c(coefficients[-1])
        for coefficient in reversed(coefficients[:-1]):
            acc = self.fma(acc, x, self.c(coefficient))
        return acc

    def horner(self, x, coefficients) -> ir.Value:
        """Like poly, for coefficients that are already LLVM values (e.g. chosen per lane)."""
        acc = coefficients[-1]
        for coefficient in reversed(coefficients[:-1]):
            acc = self.fma(acc, x, coefficient)
        return acc

    def piecewise(self, key, pieces):
        """Per lane, (centre, coefficients) of the piece whose lower end is the last <= key.

        pieces: (lower end, centre, coefficients) sorted by lower end; shorter tables are padded
        with zeros. Selecting coefficients and running one Horner is cheaper than evaluating
        every piece's polynomial.
        """
        degree = max(len(piece[2]) for piece in pieces)

        def padded(table):
            return tuple(table) + (0.0,) * (degree - len(table))

        centre = self.c(pieces[0][1])
        coefficients = [self.c(c) for c in padded(pieces[0][2])]
        for low, piece_centre, table in pieces[1:]:
            here = self.ge(key, self.c(low))
            centre = self.select(here, self.c(piece_centre), centre)
            coefficients = [
                self.select(here, self.c(new), old) for new, old in zip(padded(table), coefficients)
            ]
        return centre, coefficients

    def _intrinsic(self, name: str, *args):
        if self.lanes:
            suffix = f"v{self.lanes}f{self.bits}"
        else:
            suffix = f"f{self.bits}"
        full_name = f"llvm.{name}.{suffix}"
        module = self.b.module
        fn = module.globals.get(full_name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(self.ty, [self.ty] * len(args)), full_name)
        return self.b.call(fn, args)

    # ---- comparisons and selection ---------------------------------------------------------
    def lt(self, a, b):
        return self.b.fcmp_ordered("<", a, b)

    def gt(self, a, b):
        return self.b.fcmp_ordered(">", a, b)

    def ge(self, a, b):
        return self.b.fcmp_ordered(">=", a, b)

    def eq(self, a, b):
        return self.b.fcmp_ordered("==", a, b)

    def is_nan(self, a):
        return self.b.fcmp_unordered("uno", a, a)

    def is_inf(self, a):
        return self.eq(self.abs(a), self.c(float("inf")))

    def is_finite(self, a):
        return self.lt(self.abs(a), self.c(float("inf")))

    def sign_bit(self, a):
        """True where a has its sign bit set (including -0 and negative NaNs)."""
        return self.b.icmp_signed("<", self.as_int(a), self.ic(0))

    def select(self, cond, a, b):
        return self.b.select(cond, a, b)

    def land(self, a, b):
        return self.b.and_(a, b)

    def lor(self, a, b):
        return self.b.or_(a, b)

    def lnot(self, a):
        return self.b.not_(a)

    def clamp_nan_high(self, x, low: float, high: float):
        """Clamp to [low, high] with NaN mapped to high, in two instructions (vminps, vmaxps).

        Comparing x first (`x < high ? x : high`) is the operand order x86's min/max implement
        directly, NaN giving the second operand; callers must mask NaN lanes afterwards.
        """
        x = self.select(self.lt(x, self.c(high)), x, self.c(high))
        return self.select(self.gt(x, self.c(low)), x, self.c(low))

    def clamp(self, x, low: float, high: float):
        """Clamp to [low, high]; NaN becomes 0 so integer conversions never see it."""
        x = self.select(self.gt(x, self.c(high)), self.c(high), x)
        x = self.select(self.lt(x, self.c(low)), self.c(low), x)
        return self.select(self.is_nan(x), self.c(0.0), x)

    def where_nan(self, x, result):
        """Pass NaN inputs through unchanged (keeps their payload, like libm does)."""
        return self.select(self.is_nan(x), x, result)

    def where_zero(self, x, result):
        """Return x itself where x is ±0 (for odd functions that must keep -0)."""
        return self.select(self.eq(x, self.c(0.0)), x, result)

    # ---- bits ------------------------------------------------------------------------------
    def as_int(self, a):
        return self.b.bitcast(a, self.ity)

    def as_float(self, i):
        return self.b.bitcast(i, self.ty)

    def to_int(self, a):
        """Float to signed integer; callers guarantee a is finite and in range."""
        return self.b.fptosi(a, self.ity)

    def to_float(self, i):
        return self.b.sitofp(i, self.ty)

    def pow2(self, n):
        """2**n for integer n in the normal exponent range, built from exponent bits."""
        biased = self.b.add(n, self.ic(self.exp_bias))
        return self.as_float(self.b.shl(biased, self.ic(self.mant_bits)))

    def scale(self, x, n):
        """x * 2**n, rounding once into denormals and overflowing to inf where the product does.

        On AVX-512 hosts llvm.ldexp becomes one vscalef; elsewhere it would be a libm call per
        element, so the product is formed in two steps by 2**(n//2) and 2**(n - n//2), each a
        power of two built from exponent bits (n must lie within twice the normal range).
        """
        if self.native_ldexp:
            return self.ldexp(x, n)
        half = self.b.ashr(n, self.ic(1))
        rest = self.b.sub(n, half)
        return self.mul(self.mul(x, self.pow2(half)), self.pow2(rest))

    def ldexp(self, x, n):
        """llvm.ldexp(x, n): x * 2**n correctly rounded, n an integer of this width."""
        suffix = f"v{self.lanes}" if self.lanes else ""
        name = f"llvm.ldexp.{suffix}f{self.bits}.{suffix}i{self.bits}"
        module = self.b.module
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(self.ty, [self.ty, self.ity]), name)
        return self.b.call(fn, [x, n])

    # ---- double-word helpers ---------------------------------------------------------------
    def two_sum(self, a, b):
        """(s, e) with s = fl(a + b) and a + b = s + e exactly, for any ordering of a and b."""
        s = self.add(a, b)
        bb = self.sub(s, a)
        e = self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))
        return s, e

    def fast_two_sum(self, a, b):
        """(s, e) with a + b = s + e exactly, assuming |a| >= |b| (or a == 0)."""
        s = self.add(a, b)
        return s, self.sub(b, self.sub(s, a))

    def two_prod(self, a, b):
        """(p, e) with a * b = p + e exactly (barring underflow)."""
        p = self.mul(a, b)
        return p, self.fma(a, b, self.neg(p))


def native_ldexp() -> bool:
    """Whether llvm.ldexp compiles to a single instruction on the target (AVX-512's vscalef).

    Looked up at each Emitter's creation, so tests can patch it to exercise the portable path.
    """
    from .target import current_target  # here, not at import: vmath is usable without one

    return current_target().has_avx512


# ---- exact constants ---------------------------------------------------------------------------
# Decimal expansions (to ~40 digits) of the constants the approximations need; `split` cuts them
# into a head and a tail so that head + tail carries about twice the working precision.
LN2 = "0.6931471805599453094172321214581765680755"
LOG2_E = "1.442695040888963407359924681001892137427"
LOG10_2 = "0.3010299956639811952137388947244930267682"
LOG10_E = "0.4342944819032518276511289189166050822944"
PI = "3.141592653589793238462643383279502884197"
PI_2 = "1.570796326794896619231321691639751442099"
PI_4 = "0.7853981633974483096156608458198757210493"
TWO_OVER_PI = "0.6366197723675813430755350534900574481378"


def _nearest(value, is_f64: bool) -> float:
    return float(value) if is_f64 else _round_f32(float(value))


# The constants are exact rationals (numerator, denominator) in Python ints: int / int is
# correctly rounded, so no rational type (and no import of one) is needed.
def _rational(decimal_text: str) -> tuple[int, int]:
    sign, digits = (-1, decimal_text[1:]) if decimal_text.startswith("-") else (1, decimal_text)
    whole, _, fraction = digits.partition(".")
    return sign * int(whole + fraction), 10 ** len(fraction)


def _minus(exact: tuple[int, int], value: float) -> tuple[int, int]:
    """exact - value, exactly."""
    numerator, denominator = exact
    p, q = value.as_integer_ratio()
    return numerator * q - p * denominator, denominator * q


@functools.lru_cache(maxsize=None)
def split(decimal_text: str, is_f64: bool, head_bits: int | None = None) -> tuple[float, float]:
    """(head, tail) of a constant: head keeps head_bits significant bits (all by default)."""
    numerator, denominator = exact = _rational(decimal_text)
    if head_bits is None:
        head = _nearest(numerator / denominator, is_f64)
    else:
        exponent = math.floor(math.log2(abs(numerator / denominator)))
        shift = exponent + 1 - head_bits  # head = floor(exact / 2**shift) * 2**shift
        if shift >= 0:
            units = numerator // (denominator << shift)
        else:
            units = (numerator << -shift) // denominator
        head = math.ldexp(units, shift)
    numerator, denominator = _minus(exact, head)
    return head, _nearest(numerator / denominator, is_f64)


@functools.lru_cache(maxsize=None)
def split3(decimal_text: str, is_f64: bool) -> tuple[float, float, float]:
    """A constant as three nearest-rounded parts (for Cody-Waite reduction with fma)."""
    exact = _rational(decimal_text)
    parts = []
    for _ in range(3):
        part = _nearest(exact[0] / exact[1], is_f64)
        parts.append(part)
        exact = _minus(exact, part)
    return tuple(parts)

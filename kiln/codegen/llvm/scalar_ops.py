"""ScalarOp x dtype family -> LLVM IR: the one place a scalar operation's native semantics live.

Rules are registered in tables keyed by (op, family); the semantics are NumPy's/lax's, never
LLVM's undefined corners: integer division and shifts never trap or yield poison, float->int
casts saturate (NaN -> 0), float max/min propagate NaN. Transcendentals go to vmath.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np
from llvmlite import ir

from kiln.codegen.llvm import half_float, target
from kiln.codegen.llvm import types as T
from kiln.compiler.kir import BFLOAT16, OpGroup, ScalarOp, dtype_family

O = ScalarOp
#: rule(builder, operand values, operand dtype, float flags) -> result value
Rule = Callable[[ir.IRBuilder, list, np.dtype, tuple], ir.Value]

#: Flags on float arithmetic: `contract` lets a multiply and an add fuse into an FMA. Never
#: nnan/ninf, which would change results on NaN and inf inputs.
FLOAT_FLAGS = ("contract",)
#: Flags on a reduction's own combiner, so the loop vectorizer may reorder the accumulation.
REDUCTION_FLAGS = ("reassoc", "contract")

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


class UnsupportedOpError(NotImplementedError):
    """The backend cannot compile this op for this dtype; the caller should interpret it."""


def shaped(like: ir.Value, ty: ir.Type) -> ir.Type:
    """`ty`, or a vector of `ty` with as many lanes as `like` has when it is a vector (the
    rules below emit the same instructions on scalars and on explicit vectors, see
    emit_vector)."""
    if isinstance(like.type, ir.VectorType):
        return T.vector(ty, like.type.count)
    return ty


def _width(ty: ir.Type) -> int:
    """The bit width of an integer type or of a vector's integer lanes."""
    return (ty.element if isinstance(ty, ir.VectorType) else ty).width


def declare_function(
    builder: ir.IRBuilder, name: str, return_type: ir.Type, arg_types: Sequence[ir.Type]
) -> ir.Function:
    """Get or declare a function (an LLVM intrinsic or a libm symbol) in the builder's module."""
    module = builder.module
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    function = ir.Function(module, ir.FunctionType(return_type, list(arg_types)), name=name)
    function.attributes.add("nounwind")
    return function


def call_overloaded(
    builder: ir.IRBuilder,
    base: str,
    args: Sequence[ir.Value],
    extra: Sequence[ir.Value] = (),
    overload_types=None,
) -> ir.Value:
    """Call `base.<suffix>` (e.g. llvm.maximum.f32), overloaded on the given types."""
    overload_types = overload_types or [args[0].type]
    name = ".".join([base] + [T.type_suffix(t) for t in overload_types])
    operands = list(args) + list(extra)
    function = declare_function(builder, name, overload_types[0], [a.type for a in operands])
    return builder.call(function, operands)


# ---------------------------------------------------------------------------------------------
# Narrow floats: memory <-> register conversions and rounding


def widen_from_memory(builder: ir.IRBuilder, value: ir.Value, dtype: np.dtype) -> ir.Value:
    """A loaded element as its compute value (bool byte -> i1, f16/bf16 -> float)."""
    if dtype == np.dtype(np.bool_):
        return builder.icmp_unsigned("!=", value, ir.Constant(value.type, 0))
    if dtype == _F16:
        if target.current_target().has_f16c:
            return builder.fpext(value, T.FLOAT)
        return half_float.half_bits_to_float(builder, builder.bitcast(value, T.I16))
    if dtype == BFLOAT16:
        wide = builder.shl(builder.zext(value, T.I32), ir.Constant(T.I32, 16))
        return builder.bitcast(wide, T.FLOAT)
    return value


def narrow_to_memory(builder: ir.IRBuilder, value: ir.Value, dtype: np.dtype) -> ir.Value:
    """A compute value as the element to store (values are already rounded to the dtype)."""
    if dtype == np.dtype(np.bool_):
        return builder.zext(value, shaped(value, T.I8))
    if dtype == _F16:
        if target.current_target().has_f16c:
            return builder.fptrunc(value, T.HALF)
        return builder.bitcast(half_float.float_to_half_bits(builder, value), T.HALF)
    if dtype == BFLOAT16:
        bits = builder.lshr(builder.bitcast(value, T.I32), ir.Constant(T.I32, 16))
        return builder.trunc(bits, T.I16)
    return value


def _round_bfloat16(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    # Round-to-nearest-even on the upper 16 bits; NaN becomes the quiet NaN of its sign, as
    # ml_dtypes does. The carry out of the mantissa correctly rounds large values up to inf.
    bits = builder.bitcast(value, T.I32)
    lsb = builder.and_(builder.lshr(bits, ir.Constant(T.I32, 16)), ir.Constant(T.I32, 1))
    biased = builder.add(builder.add(bits, ir.Constant(T.I32, 0x7FFF)), lsb)
    rounded = builder.and_(biased, ir.Constant(T.I32, 0xFFFF0000 - (1 << 32)))
    quiet_nan = builder.or_(
        builder.and_(bits, ir.Constant(T.I32, -(1 << 31))), ir.Constant(T.I32, 0x7FC00000)
    )
    is_nan = builder.fcmp_unordered("uno", value, value)
    return builder.bitcast(builder.select(is_nan, quiet_nan, rounded), T.FLOAT)


def round_to_dtype(builder: ir.IRBuilder, value: ir.Value, dtype: np.dtype) -> ir.Value:
    """Round a float32 value to dtype's value set if dtype is a narrow float; else identity."""
    if dtype == _F16:
        return widen_from_memory(builder, narrow_to_memory(builder, value, dtype), dtype)
    if dtype == BFLOAT16:
        return _round_bfloat16(builder, value)
    return value


# ---------------------------------------------------------------------------------------------
# The rule table

_RULES: dict[tuple[ScalarOp, str], Rule] = {}


def _rule(ops, *families):
    """Register a rule for each (op, family) pair."""
    ops = ops if isinstance(ops, (list, tuple, set, frozenset)) else [ops]

    def register(function: Rule) -> Rule:
        for scalar_op in ops:
            for family in families:
                _RULES[(scalar_op, family)] = function
        return function

    return register


def _instruction(name: str, float_op: bool = False) -> Rule:
    def emit(builder, args, dtype, flags):
        method = getattr(builder, name)
        if float_op:
            return method(*args, flags=flags)
        return method(*args)

    return emit


# Plain instructions: (op, family) -> IRBuilder method.
_INSTRUCTIONS = {
    O.ADD: {"sint": "add", "uint": "add", "float": "fadd"},
    O.SUB: {"sint": "sub", "uint": "sub", "float": "fsub"},
    O.MUL: {"sint": "mul", "uint": "mul", "float": "fmul"},
    O.DIV: {"float": "fdiv"},
    O.REM: {"float": "frem"},
    O.BITWISE_AND: {"sint": "and_", "uint": "and_", "bool": "and_"},
    O.BITWISE_OR: {"sint": "or_", "uint": "or_", "bool": "or_"},
    O.BITWISE_XOR: {"sint": "xor", "uint": "xor", "bool": "xor"},
    O.LOGICAL_AND: {"bool": "and_"},
    O.LOGICAL_OR: {"bool": "or_"},
    O.LOGICAL_XOR: {"bool": "xor"},
    O.MAX: {"bool": "or_"},
    O.MIN: {"bool": "and_"},
}
for _op, _by_family in _INSTRUCTIONS.items():
    for _family, _name in _by_family.items():
        _RULES[(_op, _family)] = _instruction(_name, float_op=_family == "float")

# Intrinsics overloaded on the operand type: (op, family) -> name.
_INTRINSICS = {
    O.MAX: {"sint": "llvm.smax", "uint": "llvm.umax", "float": "llvm.maximum"},
    O.MIN: {"sint": "llvm.smin", "uint": "llvm.umin", "float": "llvm.minimum"},
    O.ABS: {"float": "llvm.fabs"},
    O.FLOOR: {"float": "llvm.floor"},
    O.CEIL: {"float": "llvm.ceil"},
    O.ROUND_HALF_AWAY: {"float": "llvm.round"},
    O.ROUND_HALF_EVEN: {"float": "llvm.roundeven"},
    O.SQRT: {"float": "llvm.sqrt"},
    O.FMA: {"float": "llvm.fma"},
    O.POPULATION_COUNT: {"sint": "llvm.ctpop", "uint": "llvm.ctpop"},
}


def _intrinsic_rule(name: str) -> Rule:
    def emit(builder, args, dtype, flags):
        return call_overloaded(builder, name, args)

    return emit


for _op, _by_family in _INTRINSICS.items():
    for _family, _name in _by_family.items():
        _RULES[(_op, _family)] = _intrinsic_rule(_name)

_COMPARISON_SYMBOL = {O.EQ: "==", O.NE: "!=", O.LT: "<", O.LE: "<=", O.GT: ">", O.GE: ">="}


def _comparison(scalar_op: ScalarOp, family: str) -> Rule:
    symbol = _COMPARISON_SYMBOL[scalar_op]

    def emit(builder, args, dtype, flags):
        if family == "sint":
            return builder.icmp_signed(symbol, *args)
        if family in ("uint", "bool"):
            return builder.icmp_unsigned(symbol, *args)
        # NumPy: every comparison with NaN is false except !=, which is true.
        if scalar_op is O.NE:
            return builder.fcmp_unordered(symbol, *args)
        return builder.fcmp_ordered(symbol, *args)

    return emit


for _op in OpGroup.COMPARISON:
    for _family in ("sint", "uint", "bool", "float"):
        _RULES[(_op, _family)] = _comparison(_op, _family)


def _int_const(value: ir.Value, number: int) -> ir.Constant:
    return ir.Constant(value.type, number)


@_rule(O.NEG, "sint", "uint")
def _negate_int(builder, args, dtype, flags):
    return builder.sub(_int_const(args[0], 0), args[0])


@_rule(O.NEG, "float")
def _negate_float(builder, args, dtype, flags):
    return builder.fneg(args[0])


@_rule(O.ABS, "sint")
def _abs_signed(builder, args, dtype, flags):
    # is_int_min_poison = false: abs(INT_MIN) is INT_MIN, as NumPy wraps.
    return call_overloaded(builder, "llvm.abs", args, extra=[ir.Constant(T.I1, 0)])


@_rule(O.ABS, "uint")
def _abs_unsigned(builder, args, dtype, flags):
    return args[0]


@_rule(O.SIGN, "float")
def _sign_float(builder, args, dtype, flags):
    # +-0 and NaN fail both tests and come back unchanged: sign(-0) = -0, sign(nan) = nan.
    x = args[0]
    one, zero = ir.Constant(x.type, 1.0), ir.Constant(x.type, 0.0)
    negative = builder.select(builder.fcmp_ordered("<", x, zero), ir.Constant(x.type, -1.0), x)
    return builder.select(builder.fcmp_ordered(">", x, zero), one, negative)


@_rule(O.SIGN, "sint")
def _sign_signed(builder, args, dtype, flags):
    x = args[0]
    zero = _int_const(x, 0)
    positive = builder.zext(builder.icmp_signed(">", x, zero), x.type)
    negative = builder.zext(builder.icmp_signed("<", x, zero), x.type)
    return builder.sub(positive, negative)


@_rule(O.SIGN, "uint")
def _sign_unsigned(builder, args, dtype, flags):
    return builder.zext(builder.icmp_unsigned("!=", args[0], _int_const(args[0], 0)), args[0].type)


@_rule(O.DIV, "sint")
def _divide_signed(builder, args, dtype, flags):
    # x / 0 = -1 and INT_MIN / -1 = INT_MIN; a divisor of 1 stands in for both (sdiv traps).
    x, y = args
    by_zero = builder.icmp_signed("==", y, _int_const(y, 0))
    quotient = builder.sdiv(x, _safe_signed_divisor(builder, x, y, by_zero))
    return builder.select(by_zero, _int_const(x, -1), quotient)


@_rule(O.REM, "sint")
def _remainder_signed(builder, args, dtype, flags):
    # x % 0 = x and INT_MIN % -1 = 0 (which x % 1 gives).
    x, y = args
    by_zero = builder.icmp_signed("==", y, _int_const(y, 0))
    remainder = builder.srem(x, _safe_signed_divisor(builder, x, y, by_zero))
    return builder.select(by_zero, x, remainder)


def _safe_signed_divisor(builder, x, y, by_zero):
    int_min = _int_const(x, -(1 << (_width(x.type) - 1)))
    overflow = builder.and_(
        builder.icmp_signed("==", x, int_min), builder.icmp_signed("==", y, _int_const(y, -1))
    )
    return builder.select(builder.or_(by_zero, overflow), _int_const(y, 1), y)


@_rule(O.DIV, "uint")
def _divide_unsigned(builder, args, dtype, flags):
    x, y = args
    by_zero = builder.icmp_unsigned("==", y, _int_const(y, 0))
    quotient = builder.udiv(x, builder.select(by_zero, _int_const(y, 1), y))
    return builder.select(by_zero, _int_const(x, -1), quotient)


@_rule(O.REM, "uint")
def _remainder_unsigned(builder, args, dtype, flags):
    x, y = args
    by_zero = builder.icmp_unsigned("==", y, _int_const(y, 0))
    remainder = builder.urem(x, builder.select(by_zero, _int_const(y, 1), y))
    return builder.select(by_zero, x, remainder)


def _shift_in_range(builder, amount):
    # Amounts are read as unsigned, so negative ones count as too large (as XLA does).
    return builder.icmp_unsigned("<", amount, _int_const(amount, _width(amount.type)))


@_rule(O.SHIFT_LEFT, "sint", "uint")
def _shift_left(builder, args, dtype, flags):
    x, amount = args
    # The select discards the poison an oversized shl would give.
    return builder.select(
        _shift_in_range(builder, amount), builder.shl(x, amount), _int_const(x, 0)
    )


@_rule(O.SHIFT_RIGHT_LOGICAL, "sint", "uint")
def _shift_right_logical(builder, args, dtype, flags):
    x, amount = args
    return builder.select(
        _shift_in_range(builder, amount), builder.lshr(x, amount), _int_const(x, 0)
    )


@_rule(O.SHIFT_RIGHT_ARITHMETIC, "sint", "uint")
def _shift_right_arithmetic(builder, args, dtype, flags):
    x, amount = args
    # Shifting by width - 1 fills with the sign bit, which is what any larger shift means.
    clamped = builder.select(
        _shift_in_range(builder, amount), amount, _int_const(amount, _width(amount.type) - 1)
    )
    return builder.ashr(x, clamped)


@_rule(O.CLZ, "sint", "uint")
def _count_leading_zeros(builder, args, dtype, flags):
    # is_zero_poison = false: clz(0) is the bit width.
    return call_overloaded(builder, "llvm.ctlz", args, extra=[ir.Constant(T.I1, 0)])


@_rule([O.BITWISE_NOT, O.LOGICAL_NOT], "sint", "uint", "bool")
def _invert(builder, args, dtype, flags):
    return builder.xor(args[0], _int_const(args[0], -1))


@_rule(O.SELECT, "bool", "sint", "uint", "float")
def _select(builder, args, dtype, flags):
    return builder.select(*args)


@_rule(O.RSQRT, "float")
def _reciprocal_sqrt(builder, args, dtype, flags):
    root = call_overloaded(builder, "llvm.sqrt", args)
    return builder.fdiv(ir.Constant(root.type, 1.0), root, flags=flags)


@_rule(O.IS_FINITE, "float")
def _is_finite(builder, args, dtype, flags):
    # Ordered !=: false for NaN as well as for +-inf.
    magnitude = call_overloaded(builder, "llvm.fabs", args)
    return builder.fcmp_ordered("!=", magnitude, ir.Constant(magnitude.type, float("inf")))


@_rule(O.NEXTAFTER, "float")
def _next_after(builder, args, dtype, flags):
    # Step x's bit pattern (in its own storage format, so f16/bf16 step by their own ulp) one
    # unit towards y: +1 moves away from zero, -1 towards it.
    x, y = args
    x_bits, y_bits = _float_bits(builder, x, dtype), _float_bits(builder, y, dtype)
    bits_type = x_bits.type
    towards_larger = builder.fcmp_ordered("<", x, y)
    x_positive = builder.icmp_signed(">=", x_bits, ir.Constant(bits_type, 0))
    step = builder.select(
        builder.icmp_unsigned("==", towards_larger, x_positive),
        ir.Constant(bits_type, 1),
        ir.Constant(bits_type, -1),
    )
    stepped = builder.add(x_bits, step)
    sign_mask = ir.Constant(bits_type, -(1 << (bits_type.width - 1)))
    smallest_towards_y = builder.or_(builder.and_(y_bits, sign_mask), ir.Constant(bits_type, 1))
    from_zero = builder.fcmp_ordered("==", x, ir.Constant(x.type, 0.0))
    result = _bits_float(builder, builder.select(from_zero, smallest_towards_y, stepped), dtype)
    result = builder.select(builder.fcmp_ordered("==", x, y), y, result)
    return builder.select(builder.fcmp_unordered("uno", x, y), builder.fadd(x, y), result)


def _float_bits(builder, value, dtype):
    if dtype == _F16:
        return builder.bitcast(narrow_to_memory(builder, value, dtype), T.I16)
    if dtype == BFLOAT16:
        return narrow_to_memory(builder, value, dtype)
    return builder.bitcast(value, ir.IntType(dtype.itemsize * 8))


def _bits_float(builder, bits, dtype):
    if dtype == _F16:
        return widen_from_memory(builder, builder.bitcast(bits, T.HALF), dtype)
    if dtype == BFLOAT16:
        return widen_from_memory(builder, bits, dtype)
    return builder.bitcast(bits, T.compute_type(dtype))


# ---------------------------------------------------------------------------------------------
# Transcendentals: vmath first (vectorizable polynomials), libm as a scalar fallback

_LIBM_NAMES = {
    O.CBRT: "cbrt",
    O.EXP: "exp",
    O.EXP2: "exp2",
    O.EXPM1: "expm1",
    O.LOG: "log",
    O.LOG1P: "log1p",
    O.LOG2: "log2",
    O.LOG10: "log10",
    O.TANH: "tanh",
    O.ERF: "erf",
    O.ERFC: "erfc",
    O.SIN: "sin",
    O.COS: "cos",
    O.TAN: "tan",
    O.ASIN: "asin",
    O.ACOS: "acos",
    O.ATAN: "atan",
    O.SINH: "sinh",
    O.COSH: "cosh",
    O.ASINH: "asinh",
    O.ACOSH: "acosh",
    O.ATANH: "atanh",
    O.LGAMMA: "lgamma",
    O.POW: "pow",
    O.ATAN2: "atan2",
}


@functools.cache
def vmath_module():
    """kiln.codegen.llvm.vmath if it imports, else None (it is developed alongside)."""
    try:
        from kiln.codegen.llvm import vmath
    except Exception:  # noqa: BLE001 - a half-written vmath must not break the backend
        return None
    return vmath


def _vmath_supports(scalar_op: ScalarOp) -> bool:
    vmath = vmath_module()
    return vmath is not None and scalar_op.value in getattr(vmath, "SUPPORTED", ())


def _libm_call(builder, scalar_op: ScalarOp, args):
    base = _LIBM_NAMES[scalar_op]
    name = base + "f" if args[0].type == T.FLOAT else base
    function = declare_function(builder, name, args[0].type, [a.type for a in args])
    return builder.call(function, list(args))


def _transcendental(scalar_op: ScalarOp) -> Rule:
    def emit(builder, args, dtype, flags):
        if _vmath_supports(scalar_op):
            return vmath_module().emit(builder, scalar_op.value, *args)
        if scalar_op in _LIBM_NAMES:
            return _libm_call(builder, scalar_op, args)
        if scalar_op is O.LOGISTIC:
            x = args[0]
            exp_minus_x = _libm_call(builder, O.EXP, [builder.fneg(x)])
            one = ir.Constant(x.type, 1.0)
            return builder.fdiv(one, builder.fadd(one, exp_minus_x))
        raise UnsupportedOpError(
            f"{scalar_op.value} needs kiln.codegen.llvm.vmath, which does not provide it"
        )

    return emit


for _op in OpGroup.TRANSCENDENTAL:
    _RULES[(_op, "float")] = _transcendental(_op)


# ---------------------------------------------------------------------------------------------
# Casts: (source family, target family) -> rule


def _int_resize(builder, value, src, dst):
    target_type = shaped(value, T.compute_type(dst))
    if _width(value.type) == _width(target_type):
        return value
    if _width(value.type) > _width(target_type):
        return builder.trunc(value, target_type)
    if dtype_family(src) == "sint":
        return builder.sext(value, target_type)
    return builder.zext(value, target_type)


def _to_bool(builder, value, src, dst):
    if dtype_family(src) == "float":
        return builder.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))  # NaN -> True
    return builder.icmp_unsigned("!=", value, ir.Constant(value.type, 0))


def _int_to_float(builder, value, src, dst):
    if dtype_family(src) == "sint":
        return builder.sitofp(value, shaped(value, T.compute_type(dst)))
    return builder.uitofp(value, shaped(value, T.compute_type(dst)))


def _float_to_int(builder, value, src, dst):
    name = "llvm.fptosi.sat" if dtype_family(dst) == "sint" else "llvm.fptoui.sat"
    overload_types = [shaped(value, T.compute_type(dst)), value.type]
    return call_overloaded(builder, name, [value], overload_types=overload_types)


def _float_to_float(builder, value, src, dst):
    target = shaped(value, T.compute_type(dst))
    if value.type == target:
        return value
    if T.compute_type(src) == T.DOUBLE:
        return builder.fptrunc(value, target)
    return builder.fpext(value, target)


_CASTS = {}
for _src in ("bool", "sint", "uint"):
    for _dst in ("sint", "uint"):
        _CASTS[(_src, _dst)] = _int_resize
    _CASTS[(_src, "float")] = _int_to_float
for _src in ("sint", "uint", "float"):
    _CASTS[(_src, "bool")] = _to_bool
_CASTS[("float", "sint")] = _float_to_int
_CASTS[("float", "uint")] = _float_to_int
_CASTS[("float", "float")] = _float_to_float


def emit_cast(builder: ir.IRBuilder, value: ir.Value, src: np.dtype, dst: np.dtype) -> ir.Value:
    """Convert a compute value of dtype src to dtype dst (NumPy/lax convert_element_type)."""
    if src == dst:
        return value
    if dst in T.NARROW_FLOATS:
        if src == _F64 and dst == _F16:
            # Straight to half: going through float32 would round twice (NumPy rounds once).
            # Only AVX512-FP16 does this in hardware; elsewhere LLVM would call a compiler-rt
            # builtin, so the rounding is emitted as integer code.
            if target.current_target().has_avx512fp16:
                return widen_from_memory(builder, builder.fptrunc(value, T.HALF), dst)
            bits = half_float.double_to_half_bits(builder, value)
            return widen_from_memory(builder, builder.bitcast(bits, T.HALF), dst)
        return round_to_dtype(builder, emit_cast(builder, value, src, _F32), dst)
    return _CASTS[(dtype_family(src), dtype_family(dst))](builder, value, src, dst)


# ---------------------------------------------------------------------------------------------
# Entry points


def op_supported(scalar_op: ScalarOp, dtype: np.dtype) -> bool:
    """Whether emit_op can compile scalar_op on operands of dtype (the lowering asks first)."""
    dtype = np.dtype(dtype)
    if dtype not in T.SUPPORTED_DTYPES:
        return False
    if scalar_op is O.CAST:
        return True
    if scalar_op is O.BITCAST:  # 32- and 64-bit values only: they compute in their own type
        return dtype.itemsize in (4, 8)
    if (scalar_op, dtype_family(dtype)) not in _RULES:
        return False
    if scalar_op in OpGroup.TRANSCENDENTAL:
        return _vmath_supports(scalar_op) or scalar_op in _LIBM_NAMES or scalar_op is O.LOGISTIC
    return True


def op_vectorizes(scalar_op: ScalarOp, dtype: np.dtype) -> bool:
    """Whether emit_op emits scalar_op on explicit vectors of dtype's compute type as well
    (emit_vector): every rule above is written for both, except those of the narrow floats
    (their widening and rounding are scalar), nextafter, and the libm fallbacks."""
    dtype = np.dtype(dtype)
    if dtype in T.NARROW_FLOATS or scalar_op is O.NEXTAFTER:
        return False
    if not op_supported(scalar_op, dtype):
        return False
    return scalar_op not in OpGroup.TRANSCENDENTAL or _vmath_supports(scalar_op)


def emit_op(
    builder: ir.IRBuilder,
    scalar_op: ScalarOp,
    args: Sequence[ir.Value],
    arg_dtypes: Sequence[np.dtype],
    dtype: np.dtype,
    flags: Sequence[str] = FLOAT_FLAGS,
) -> ir.Value:
    """Emit scalar_op on compute values; the result is a compute value of `dtype`.

    flags are the fast-math flags put on float arithmetic (see REDUCTION_FLAGS).
    """
    if scalar_op is O.CAST:
        return emit_cast(builder, args[0], arg_dtypes[0], dtype)
    if scalar_op is O.BITCAST:
        return builder.bitcast(args[0], shaped(args[0], T.compute_type(dtype)))
    operand_dtype = arg_dtypes[-1]  # select's condition comes first
    rule = _RULES.get((scalar_op, dtype_family(operand_dtype)))
    if rule is None:
        raise UnsupportedOpError(f"no LLVM rule for {scalar_op.value} on {operand_dtype}")
    result = rule(builder, list(args), operand_dtype, tuple(flags))
    return round_to_dtype(builder, result, dtype)

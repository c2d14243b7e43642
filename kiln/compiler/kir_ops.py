"""The closed set of scalar operations and the dtype tables of the kernel IR.

ScalarOp is the only vocabulary kernels compute with (tinygrad's Ops); OP_SPECS says which dtype
families each op accepts and what it yields. Re-exported by kiln.compiler.kir.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

import ml_dtypes
import numpy as np

from kiln.core.dtypes import dtype_family

# ---------------------------------------------------------------------------------------------
# dtypes

BOOL = np.dtype(np.bool_)
INDEX = np.dtype(np.int64)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

#: Every dtype the compiled backend accepts; the lowering sends anything else (complex) to the
#: interpreter.
SUPPORTED_DTYPES: frozenset[np.dtype] = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        ml_dtypes.bfloat16,
        np.float32,
        np.float64,
    )
)

# The families every table below is keyed by are dtype_family's: 'bool', 'sint', 'uint' and
# 'float' (the backend compiles no complex dtype).
DTYPE_SHORT_NAMES = {
    np.dtype(np.bool_): "bool",
    np.dtype(np.int8): "i8",
    np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.uint8): "u8",
    np.dtype(np.uint16): "u16",
    np.dtype(np.uint32): "u32",
    np.dtype(np.uint64): "u64",
    np.dtype(np.float16): "f16",
    BFLOAT16: "bf16",
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
}


def as_dtype(dtype) -> np.dtype:
    """Return `dtype` as an np.dtype, raising TypeError when the backend cannot compile it."""
    result = np.dtype(dtype)
    if result not in SUPPORTED_DTYPES:
        raise TypeError(
            f"kernel IR does not support dtype {result}; supported: "
            f"{sorted(DTYPE_SHORT_NAMES[d] for d in SUPPORTED_DTYPES)}"
        )
    return result


def short_name(dtype: np.dtype) -> str:
    """The compact dtype spelling used in printed kernels ('f32', 'u8', 'bool', ...)."""
    return DTYPE_SHORT_NAMES[dtype]


# ---------------------------------------------------------------------------------------------
# The closed set of scalar operations


class ScalarOp(enum.Enum):
    """Every scalar operation a kernel may perform; the value is the name vmath knows it by."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    REM = "rem"
    NEG = "neg"
    MAX = "max"
    MIN = "min"
    ABS = "abs"
    SIGN = "sign"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND_HALF_AWAY = "round_half_away"
    ROUND_HALF_EVEN = "round_half_even"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    CBRT = "cbrt"
    EXP = "exp"
    EXP2 = "exp2"
    EXPM1 = "expm1"
    LOG = "log"
    LOG1P = "log1p"
    LOG2 = "log2"
    LOG10 = "log10"
    TANH = "tanh"
    LOGISTIC = "logistic"
    ERF = "erf"
    ERFC = "erfc"
    ERF_INV = "erf_inv"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    LGAMMA = "lgamma"
    DIGAMMA = "digamma"
    POW = "pow"
    ATAN2 = "atan2"
    IS_FINITE = "is_finite"
    NEXTAFTER = "nextafter"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    LOGICAL_AND = "logical_and"
    LOGICAL_OR = "logical_or"
    LOGICAL_XOR = "logical_xor"
    LOGICAL_NOT = "logical_not"
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    BITWISE_NOT = "bitwise_not"
    SHIFT_LEFT = "shift_left"
    SHIFT_RIGHT_LOGICAL = "shift_right_logical"
    SHIFT_RIGHT_ARITHMETIC = "shift_right_arithmetic"
    POPULATION_COUNT = "population_count"
    CLZ = "clz"
    SELECT = "select"
    CAST = "cast"
    BITCAST = "bitcast"
    FMA = "fma"

    # Members are singletons compared by identity: hashing them by identity too skips Enum's
    # Python-level __hash__ (hash of the name), which every interned Op key pays.
    __hash__ = object.__hash__


class OpGroup:
    """Named groups of ScalarOps (tinygrad's GroupOp) used by the tables here and in codegen."""

    TRANSCENDENTAL = frozenset(
        {
            ScalarOp.CBRT,
            ScalarOp.EXP,
            ScalarOp.EXP2,
            ScalarOp.EXPM1,
            ScalarOp.LOG,
            ScalarOp.LOG1P,
            ScalarOp.LOG2,
            ScalarOp.LOG10,
            ScalarOp.TANH,
            ScalarOp.LOGISTIC,
            ScalarOp.ERF,
            ScalarOp.ERFC,
            ScalarOp.ERF_INV,
            ScalarOp.SIN,
            ScalarOp.COS,
            ScalarOp.TAN,
            ScalarOp.ASIN,
            ScalarOp.ACOS,
            ScalarOp.ATAN,
            ScalarOp.SINH,
            ScalarOp.COSH,
            ScalarOp.ASINH,
            ScalarOp.ACOSH,
            ScalarOp.ATANH,
            ScalarOp.LGAMMA,
            ScalarOp.DIGAMMA,
            ScalarOp.POW,
            ScalarOp.ATAN2,
        }
    )
    COMPARISON = frozenset(
        {ScalarOp.EQ, ScalarOp.NE, ScalarOp.LT, ScalarOp.LE, ScalarOp.GT, ScalarOp.GE}
    )
    ROUNDING = frozenset(
        {ScalarOp.FLOOR, ScalarOp.CEIL, ScalarOp.ROUND_HALF_AWAY, ScalarOp.ROUND_HALF_EVEN}
    )
    LOGICAL = frozenset(
        {ScalarOp.LOGICAL_AND, ScalarOp.LOGICAL_OR, ScalarOp.LOGICAL_XOR, ScalarOp.LOGICAL_NOT}
    )
    BITWISE = frozenset(
        {ScalarOp.BITWISE_AND, ScalarOp.BITWISE_OR, ScalarOp.BITWISE_XOR, ScalarOp.BITWISE_NOT}
    )
    SHIFT = frozenset(
        {ScalarOp.SHIFT_LEFT, ScalarOp.SHIFT_RIGHT_LOGICAL, ScalarOp.SHIFT_RIGHT_ARITHMETIC}
    )


@dataclass(frozen=True)
class OpSpec:
    """What an op accepts: its arity, the operand families, and how the result dtype is formed.

    result is 'same' (the operands' dtype), 'bool', or 'explicit' (cast: the caller names it).
    """

    arity: int
    families: frozenset[str]
    result: str = "same"


FLOAT_FAMILY = frozenset({"float"})
INT_FAMILIES = frozenset({"sint", "uint"})
NUMERIC_FAMILIES = INT_FAMILIES | FLOAT_FAMILY
ALL_FAMILIES = NUMERIC_FAMILIES | {"bool"}
BOOL_FAMILY = frozenset({"bool"})
INT_OR_BOOL_FAMILIES = INT_FAMILIES | BOOL_FAMILY


def _build_op_specs() -> dict[ScalarOp, OpSpec]:
    specs: dict[ScalarOp, OpSpec] = {}

    def group(ops, spec):
        for op in ops:
            specs[op] = spec

    O = ScalarOp
    group([O.ADD, O.SUB, O.MUL, O.DIV, O.REM], OpSpec(2, NUMERIC_FAMILIES))
    group([O.NEG, O.ABS, O.SIGN], OpSpec(1, NUMERIC_FAMILIES))
    group([O.MAX, O.MIN], OpSpec(2, ALL_FAMILIES))
    group(OpGroup.ROUNDING | {O.SQRT, O.RSQRT}, OpSpec(1, FLOAT_FAMILY))
    group(OpGroup.TRANSCENDENTAL, OpSpec(1, FLOAT_FAMILY))
    group([O.POW, O.ATAN2, O.NEXTAFTER], OpSpec(2, FLOAT_FAMILY))
    group([O.IS_FINITE], OpSpec(1, FLOAT_FAMILY, "bool"))
    group(OpGroup.COMPARISON, OpSpec(2, ALL_FAMILIES, "bool"))
    group([O.LOGICAL_AND, O.LOGICAL_OR, O.LOGICAL_XOR], OpSpec(2, BOOL_FAMILY))
    group([O.LOGICAL_NOT], OpSpec(1, BOOL_FAMILY))
    group([O.BITWISE_AND, O.BITWISE_OR, O.BITWISE_XOR], OpSpec(2, INT_OR_BOOL_FAMILIES))
    group([O.BITWISE_NOT], OpSpec(1, INT_OR_BOOL_FAMILIES))
    group(OpGroup.SHIFT, OpSpec(2, INT_FAMILIES))
    group([O.POPULATION_COUNT, O.CLZ], OpSpec(1, INT_FAMILIES))
    group([O.SELECT], OpSpec(3, ALL_FAMILIES))
    group([O.CAST], OpSpec(1, ALL_FAMILIES, "explicit"))
    # The same bits read as another dtype of the same width.
    group([O.BITCAST], OpSpec(1, NUMERIC_FAMILIES, "explicit"))
    group([O.FMA], OpSpec(3, FLOAT_FAMILY))
    return specs


OP_SPECS: dict[ScalarOp, OpSpec] = _build_op_specs()
assert set(OP_SPECS) == set(ScalarOp), "every ScalarOp needs an OpSpec"


class KirError(ValueError):
    """A malformed kernel: raised by the constructors and by verify_kernel/verify_program."""


def check_op(op: ScalarOp, arg_dtypes: Sequence[np.dtype], dtype: np.dtype | None) -> np.dtype:
    """Check operand dtypes against OP_SPECS and return the result dtype (TypeError if wrong)."""
    spec = OP_SPECS[op]
    if len(arg_dtypes) != spec.arity:
        raise TypeError(f"{op.value} takes {spec.arity} operands, got {len(arg_dtypes)}")
    operands = list(arg_dtypes)
    if op is ScalarOp.SELECT:
        if operands[0] != BOOL:
            raise TypeError(f"select needs a bool condition, got {short_name(operands[0])}")
        operands = operands[1:]
    if any(d != operands[0] for d in operands):
        names = ", ".join(short_name(d) for d in arg_dtypes)
        raise TypeError(f"{op.value} needs operands of one dtype, got ({names}); insert a cast")
    family = dtype_family(operands[0])
    if family not in spec.families:
        raise TypeError(
            f"{op.value} is not defined on {short_name(operands[0])} "
            f"(accepts {', '.join(sorted(spec.families))})"
        )
    if spec.result == "explicit":
        if dtype is None:
            raise TypeError(f"{op.value} needs an explicit result dtype")
        if op is ScalarOp.BITCAST and np.dtype(dtype).itemsize != operands[0].itemsize:
            raise TypeError(f"bitcast needs dtypes of one width, not {operands[0]} -> {dtype}")
        return as_dtype(dtype)
    expected = BOOL if spec.result == "bool" else operands[0]
    if dtype is not None and as_dtype(dtype) != expected:
        raise TypeError(
            f"{op.value} on {short_name(operands[0])} yields {short_name(expected)}, "
            f"not {short_name(np.dtype(dtype))}"
        )
    return expected

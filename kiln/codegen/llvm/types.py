"""dtype -> LLVM type tables: how each kernel IR dtype lives in memory and in registers.

Narrow floats (float16, bfloat16) are computed in float32: loads widen exactly, every op that
yields a narrow float rounds its float32 result to the narrow value set, and stores narrow.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir

from kiln.compiler.kir import BFLOAT16, SUPPORTED_DTYPES, dtype_family  # noqa: F401

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
HALF = ir.HalfType()
FLOAT = ir.FloatType()
DOUBLE = ir.DoubleType()
VOID = ir.VoidType()
PTR = ir.PointerType()

_F16 = np.dtype(np.float16)


class _VectorType(ir.VectorType):
    """ir.VectorType whose constants of one repeated lane print as LLVM's `splat (x)`: a
    16-lane constant otherwise prints every lane, and vector code is full of them (each
    polynomial coefficient of vmath), text that llvmlite builds and LLVM parses."""

    prints_splat = True  # (ir_text writes these constants the same way)

    def format_constant(self, value):
        first = value[0]
        if all(lane is first for lane in value):  # (wrap_constant_value repeats one object)
            return f"splat ({first.type} {first.get_reference()})"
        return super().format_constant(value)


def vector(element: ir.Type, lanes: int) -> ir.VectorType:
    """The type of `lanes` lanes of `element` (emit_vector's vectors)."""
    return _VectorType(element, lanes)


@functools.cache
def int_vector(bits: int, values: tuple[int, ...]) -> ir.Constant:
    """The constant vector of these integers of `bits` bits (shuffle masks, lane steps), one
    object per distinct vector: llvmlite makes a Constant per lane each time a list constant
    is made, and a reduction's lane fold alone asks for 8 masks (profiled: ~4% of a first
    compile's main thread). Constants are never changed once made, so they are shared."""
    return ir.Constant(vector(ir.IntType(bits), len(values)), list(values))


def splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """A vector of `lanes` copies of a scalar value (a constant one stays a constant)."""
    vector_type = vector(value.type, lanes)
    if isinstance(value, ir.Constant):
        return ir.Constant(vector_type, value.constant)
    undefined = ir.Constant(vector_type, ir.Undefined)
    single = builder.insert_element(undefined, value, ir.Constant(I32, 0))
    return builder.shuffle_vector(single, undefined, int_vector(32, (0,) * lanes))


#: How a dtype is laid out in a buffer (bool is one byte holding 0 or 1; bfloat16 is its bits).
MEMORY_TYPE: dict[np.dtype, ir.Type] = {
    np.dtype(np.bool_): I8,
    np.dtype(np.int8): I8,
    np.dtype(np.uint8): I8,
    np.dtype(np.int16): I16,
    np.dtype(np.uint16): I16,
    np.dtype(np.int32): I32,
    np.dtype(np.uint32): I32,
    np.dtype(np.int64): I64,
    np.dtype(np.uint64): I64,
    _F16: HALF,
    BFLOAT16: I16,
    np.dtype(np.float32): FLOAT,
    np.dtype(np.float64): DOUBLE,
}

#: How a dtype is held in registers while a kernel computes with it.
COMPUTE_TYPE: dict[np.dtype, ir.Type] = {
    **MEMORY_TYPE,
    np.dtype(np.bool_): I1,
    _F16: FLOAT,
    BFLOAT16: FLOAT,
}

#: Narrow float dtypes computed in float32.
NARROW_FLOATS = frozenset({_F16, BFLOAT16})

assert set(MEMORY_TYPE) == set(SUPPORTED_DTYPES) == set(COMPUTE_TYPE)


def memory_type(dtype: np.dtype) -> ir.Type:
    """The LLVM type of one element of a buffer of this dtype."""
    return MEMORY_TYPE[dtype]


def compute_type(dtype: np.dtype) -> ir.Type:
    """The LLVM type a value of this dtype has in registers."""
    return COMPUTE_TYPE[dtype]


def bit_width(dtype: np.dtype) -> int:
    """Bits of the integer/float representation (bool counts as 1)."""
    return 1 if dtype == np.dtype(np.bool_) else dtype.itemsize * 8


def is_narrow_float(dtype: np.dtype) -> bool:
    return dtype in NARROW_FLOATS


def type_suffix(ty: ir.Type) -> str:
    """The overload suffix LLVM intrinsic names use for a type ('f32', 'i64', 'v16f32')."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{type_suffix(ty.element)}"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {HALF: "f16", FLOAT: "f32", DOUBLE: "f64"}[ty]


def constant(value, dtype: np.dtype) -> ir.Constant:
    """An LLVM constant of dtype's compute type (unsigned values keep their bit pattern)."""
    ty = compute_type(dtype)
    family = dtype_family(dtype)
    if family == "float":
        return ir.Constant(ty, float(value))
    if family == "bool":
        return ir.Constant(ty, int(bool(value)))
    bits = int(value) & ((1 << ty.width) - 1)
    # LLVM's text form spells integer constants signed, whatever the op interprets them as.
    return ir.Constant(ty, bits - (1 << ty.width) if bits >> (ty.width - 1) else bits)

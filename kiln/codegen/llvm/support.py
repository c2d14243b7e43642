"""The runtime builtins generated code may call, defined by kiln itself.

On some x86-64 CPUs LLVM lowers an operation to a call to a compiler-rt builtin instead of
instructions (half-precision conversions without F16C or AVX512-FP16). The Python process
links no compiler-rt, so kiln defines those builtins here in integer IR, compiles them once
for the baseline x86-64 CPU (so they run everywhere) and registers their addresses with LLVM's
symbol table (kiln.runtime.engine). The emitter avoids these calls where it can; this module
is what keeps a call LLVM still emits from jumping to address 0.
"""

from __future__ import annotations

from llvmlite import ir

from kiln.codegen.llvm import half_float
from kiln.codegen.llvm import types as T

#: The CPU the builtins are compiled for: plain x86-64, which every machine runs.
SUPPORT_CPU = "x86-64"


def _define(module: ir.Module, name: str, return_type, argument_types, body) -> None:
    function = ir.Function(module, ir.FunctionType(return_type, argument_types), name=name)
    function.attributes.add("nounwind")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    builder.ret(body(builder, *function.args))


def _truncdfhf2(builder, value):
    return builder.bitcast(half_float.double_to_half_bits(builder, value), T.HALF)


def _truncsfhf2(builder, value):
    return builder.bitcast(half_float.float_to_half_bits(builder, value), T.HALF)


def _extendhfsf2(builder, value):
    return half_float.half_bits_to_float(builder, builder.bitcast(value, T.I16))


def _gnu_f2h(builder, value):
    return half_float.float_to_half_bits(builder, value)


def _gnu_h2f(builder, bits):
    return half_float.half_bits_to_float(builder, bits)


#: name -> (return type, argument types, body(builder, *arguments) -> value)
BUILTINS = {
    "__truncdfhf2": (T.HALF, [T.DOUBLE], _truncdfhf2),
    "__truncsfhf2": (T.HALF, [T.FLOAT], _truncsfhf2),
    "__extendhfsf2": (T.FLOAT, [T.HALF], _extendhfsf2),
    # The same conversions under their older names, which pass the half as an i16.
    "__gnu_f2h_ieee": (T.I16, [T.FLOAT], _gnu_f2h),
    "__gnu_h2f_ieee": (T.FLOAT, [T.I16], _gnu_h2f),
}


def support_module(triple: str, data_layout: str) -> ir.Module:
    """An LLVM module defining every builtin in BUILTINS."""
    module = ir.Module(name="kiln_support")
    module.triple = triple
    module.data_layout = data_layout
    for name, (return_type, argument_types, body) in BUILTINS.items():
        _define(module, name, return_type, argument_types, body)
    return module

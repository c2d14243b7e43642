"""kiln's object loader (kiln.runtime.native_library): objects of the large code model (what
kiln compiles) and of the small one (32-bit relocations) load into pages of their own and
compute what NumPy computes; code pages are executable and not writable, and go away with
their Library; an object with what the loader does not handle (an unwind table) loads
through MCJIT instead, to the same effect."""

from __future__ import annotations

import ctypes
import struct

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from kiln.codegen.llvm import objects, target
from kiln.codegen.llvm import types as T
from kiln.compiler import kir
from kiln.compiler.kir import Buffer, Kernel, Loop, Program, Store, Var
from kiln.runtime import engine, native_library

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native

F32 = np.dtype(np.float32)
UNARY = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)


def _mapping(address: int) -> str | None:
    """The permissions of the mapping of /proc/self/maps that holds `address`, if any."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, permissions = line.split()[:2]
            start, end = (int(edge, 16) for edge in span.split("-"))
            if start <= address < end:
                return permissions
    return None


def _module(name: str) -> ir.Module:
    host = target.host_target()
    module = ir.Module(name=name)
    module.triple, module.data_layout = host.triple, host.data_layout
    return module


def _polynomial_module(name: str, attributes=("nounwind",)) -> ir.Module:
    """@name(x) = helper(x) * 0.25 + table lookups: an internal call, float constants (in
    constant pools) and a global table indexed at run time (read-only data)."""
    module = _module(name)
    signature = ir.FunctionType(T.DOUBLE, [T.DOUBLE])
    helper = ir.Function(module, signature, name=f"{name}_helper")
    helper.linkage = "internal"
    helper.attributes.add("noinline")
    helper.attributes.add("nounwind")
    builder = ir.IRBuilder(helper.append_basic_block("entry"))
    x = helper.args[0]
    builder.ret(builder.fadd(builder.fmul(x, x), ir.Constant(T.DOUBLE, 1.5)))
    table_type = ir.ArrayType(T.DOUBLE, 4)
    table = ir.GlobalVariable(module, table_type, name=f"{name}_table")
    table.global_constant = True
    table.linkage = "internal"
    table.initializer = ir.Constant(table_type, [10.0, 20.0, 30.0, 40.0])
    function = ir.Function(module, signature, name=name)
    for attribute in attributes:
        function.attributes.add(attribute)
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    x = function.args[0]
    scaled = builder.fmul(builder.call(helper, [x]), ir.Constant(T.DOUBLE, 0.25))
    index = builder.and_(builder.fptosi(x, T.I64), ir.Constant(T.I64, 3))
    entry = builder.load(builder.gep(table, [ir.Constant(T.I64, 0), index], inbounds=True))
    builder.ret(builder.fadd(scaled, entry))
    return module


def _expected(x: float) -> float:
    return (x * x + 1.5) * 0.25 + [10.0, 20.0, 30.0, 40.0][int(x) & 3]


def _object(module: ir.Module, codemodel: str = "jitdefault") -> bytes:
    host = target.host_target()
    machine = llvm.Target.from_triple(host.triple).create_target_machine(
        cpu=host.cpu_name,
        features=host.features,
        opt=2,
        codemodel=codemodel,
        reloc="default" if codemodel == "jitdefault" else "pic",
        jit=True,
    )
    return machine.emit_object(llvm.parse_assembly(str(module)))


def _relocation_types(data: bytes) -> set[int]:
    found = set()
    for header in objects.sections(data):
        if header[1] == 4:  # SHT_RELA: entries of (offset, info, addend), the type in info
            for position in range(header[4], header[4] + header[5], 24):
                found.add(struct.unpack_from("<Q", data, position + 8)[0] & 0xFFFFFFFF)
    return found


@pytest.mark.parametrize("codemodel", ["jitdefault", "small"])
def test_an_object_loads_without_mcjit_and_computes(codemodel):
    data = _object(_polynomial_module(f"kiln_test_poly_{codemodel}"), codemodel)
    kinds = _relocation_types(data)
    assert kinds == {1} if codemodel == "jitdefault" else (kinds and kinds <= {2, 4})
    library = native_library.load_object(data, target.host_target(), "poly")
    assert library.kind == "elf"
    function = UNARY(library.address(f"kiln_test_poly_{codemodel}"))
    for x in (0.0, 1.0, 2.5, 3.75, -7.0, 6.0):
        assert function(x) == _expected(x)
    assert library.address("kiln_test_no_such_function") == 0


def test_code_pages_are_executable_never_writable_and_freed_with_the_library():
    library = native_library.load_object(
        _object(_polynomial_module("kiln_test_pages")), target.host_target(), "pages"
    )
    address = library.address("kiln_test_pages")
    assert UNARY(address)(2.0) == _expected(2.0)
    assert _mapping(address).startswith("r-x")
    library.close()
    assert _mapping(address) is None


def test_an_object_with_an_unwind_table_loads_through_mcjit():
    # A function that may unwind gets an .eh_frame section, which the loader leaves to MCJIT
    # (it registers unwind tables).
    module = _polynomial_module("kiln_test_unwind", attributes=("uwtable",))
    data = _object(module)
    library = native_library.load_object(data, target.host_target(), "unwind")
    assert library.kind == "mcjit"
    function = UNARY(library.address("kiln_test_unwind"))
    for x in (0.5, 3.0, -2.0):
        assert function(x) == _expected(x)


def test_objects_linked_together_call_each_other_and_the_process():
    # A split program's shape: one object's entry calls a kernel the other defines, and
    # libm's exp (resolved in the process).
    modules = [_module("kiln_test_side"), _module("kiln_test_main")]
    signature = ir.FunctionType(T.DOUBLE, [T.DOUBLE])
    exp = ir.Function(modules[0], signature, name="exp")
    side = ir.Function(modules[0], signature, name="kiln_test_side_kernel")
    side.attributes.add("nounwind")
    builder = ir.IRBuilder(side.append_basic_block("entry"))
    builder.ret(builder.call(exp, [side.args[0]]))
    declared = ir.Function(modules[1], signature, name="kiln_test_side_kernel")
    entry = ir.Function(modules[1], signature, name="kiln_test_entry")
    entry.attributes.add("nounwind")
    builder = ir.IRBuilder(entry.append_basic_block("entry"))
    builder.ret(builder.fmul(builder.call(declared, [entry.args[0]]), ir.Constant(T.DOUBLE, 2)))
    side_object, main_object = (_object(m) for m in modules)
    library = native_library.load_object(main_object, target.host_target(), "pair", [side_object])
    assert library.kind == "elf"
    function = UNARY(library.address("kiln_test_entry"))
    for x in (-1.0, 0.0, 0.7, 3.0):
        assert function(x) == 2.0 * float(np.exp(np.float64(x)))


def test_compiled_programs_load_without_mcjit():
    # What the engine compiles (vector loops, vmath's exp and libm's calls, constants) loads
    # through the loader and computes what NumPy computes.
    size = 301
    x = Buffer("x", F32, (size,))
    programs = []
    for n, operation in enumerate((kir.ScalarOp.EXP, kir.ScalarOp.LOG1P, kir.ScalarOp.ERF)):
        y = Buffer("y", F32, (size,), "output")
        i = Var("i")
        body = [Store(y, i, kir.op(operation, x[i] * 0.5 + 0.25))]
        programs.append(Program(f"loaded_{n}", [x, y], [Kernel("k", [Loop(i, 0, size, body)])]))
    natives = engine.Engine(target.host_target()).compile_many(programs)
    data = np.linspace(-0.4, 3, size, dtype=F32)
    from scipy import special

    for native, reference in zip(natives, (np.exp, np.log1p, special.erf)):
        assert native._library.kind == "elf"
        expected = reference(data.astype(np.float64) * 0.5 + 0.25)
        np.testing.assert_allclose(native(data)[0], expected, rtol=2e-6, atol=1e-7)


def test_kilns_own_objects_load_without_mcjit():
    # The loop driver, the builtins and a kernel library module are made by kiln too: none
    # has an unwind table or anything else that would send it to MCJIT.
    from kiln.runtime import native_loop_driver

    assert native_loop_driver._driver_entry().library.kind == "elf"
    native_library._load_builtins()
    assert native_library._support_library.kind == "elf"

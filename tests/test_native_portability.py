"""Native code that runs on every x86-64 CPU: no call to a symbol the process lacks on any
target, kiln's own half-precision builtins against NumPy, unresolved symbols reported by name,
and the KILN_CPU / KILN_CPU_FEATURES target override."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from kiln.codegen.llvm import emit, objects, scalar_ops, support, target
from kiln.codegen.llvm import types as T
from kiln.compiler import kir
from kiln.compiler.kir import Buffer, Kernel, Loop, Program, ScalarOp, Store, Var
from kiln.runtime import engine
from tests._testing import CODEGEN_TARGETS, use_codegen_target

O = ScalarOp
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
DTYPES = [
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
        np.float32,
        np.float64,
    )
] + [kir.BFLOAT16]

#: CPUs whose code is inspected (not run): the oldest x86-64, SSE4.2 without AVX, the two
#: baselines, an Intel part with AVX512-FP16 and an AMD one without it.
CROSS_CPUS = ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "sapphirerapids", "znver4"]


def _one_loop(name, inputs, outputs, size=37) -> Program:
    in_buffers = {n: Buffer(n, d, (size,)) for n, d in inputs.items()}
    out_buffers = {n: Buffer(n, d, (size,), "output") for n, (d, _) in outputs.items()}
    i = Var("i")
    loads = {n: b[i] for n, b in in_buffers.items()}
    stores = [Store(out_buffers[n], i, build(loads)) for n, (_, build) in outputs.items()]
    return Program(
        name,
        list(in_buffers.values()) + list(out_buffers.values()),
        [Kernel(name, [Loop(i, 0, size, stores)])],
    )


def _every_op_program(dtype) -> Program:
    outputs = {}
    for scalar_op in O:
        spec = kir.OP_SPECS.get(scalar_op)
        if (
            scalar_op in (O.CAST, O.BITCAST, O.SELECT)
            or spec is None
            or kir.dtype_family(dtype) not in spec.families
            or not scalar_ops.op_supported(scalar_op, dtype)
        ):
            continue
        result = kir.check_op(scalar_op, [dtype] * spec.arity, None)
        outputs[scalar_op.value] = (
            result,
            lambda loads, o=scalar_op, n=spec.arity: kir.op(
                o, *[loads["a"], loads["b"], loads["c"]][:n]
            ),
        )
    return _one_loop(f"ops_{kir.short_name(dtype)}", {"a": dtype, "b": dtype, "c": dtype}, outputs)


def _every_cast_program(source) -> Program:
    outputs = {
        f"to_{kir.short_name(d)}": (d, lambda loads, d=d: kir.cast(loads["x"], d)) for d in DTYPES
    }
    return _one_loop(f"casts_{kir.short_name(source)}", {"x": source}, outputs)


def _object_for(program: Program, target_: target.Target) -> bytes:
    with target.compiling_for(target_):
        module = llvm.parse_assembly(str(emit.emit_program(program)))
    machine = target_.create_machine()
    target.optimize(module, machine)
    return machine.emit_object(module)


@pytest.mark.parametrize("cpu", CROSS_CPUS)
def test_no_target_calls_a_symbol_the_process_lacks(cpu):
    # Every scalar op and every cast, vectorized, as LLVM compiles them for each CPU: whatever
    # builtin it calls (compiler-rt style half conversions, libm) must resolve here.
    cross = target.make_target(cpu, runnable=False)
    needed = set()
    for dtype in DTYPES:
        for program in (_every_op_program(dtype), _every_cast_program(dtype)):
            data = _object_for(program, cross)
            assert engine.unresolved_symbols(data) == [], (cpu, program.name)
            needed.update(objects.undefined_symbols(data))
    # The process provides them all, libm's among them.
    assert all(llvm.address_of_symbol(name) for name in needed)


def test_double_to_half_is_emitted_without_a_builtin_call():
    for cpu in CROSS_CPUS:
        cross = target.make_target(cpu, runnable=False)
        data = _object_for(_every_cast_program(F64), cross)
        assert "__truncdfhf2" not in objects.undefined_symbols(data), cpu


# --- kiln's half-precision builtins -----------------------------------------------------------


def _builtin_caller(name: str, source, result) -> ir.Module:
    """void convert(src*, dst*, i64 n): dst[i] = builtin(src[i]) as LLVM lowers the conversion
    for a CPU without F16C, i.e. through a call to the builtin."""
    baseline = target.make_target(support.SUPPORT_CPU)
    module = ir.Module(name=f"call_{name}")
    module.triple, module.data_layout = baseline.triple, baseline.data_layout
    function = ir.Function(module, ir.FunctionType(T.VOID, [T.PTR, T.PTR, T.I64]), name="convert")
    src, dst, count = function.args
    entry = function.append_basic_block("entry")
    loop = function.append_basic_block("loop")
    done = function.append_basic_block("done")
    builder = ir.IRBuilder(entry)
    builder.cbranch(builder.icmp_signed(">", count, ir.Constant(T.I64, 0)), loop, done)
    builder.position_at_end(loop)
    index = builder.phi(T.I64)
    index.add_incoming(ir.Constant(T.I64, 0), entry)
    value = builder.load(builder.gep(src, [index], source_etype=source), typ=source)
    if isinstance(source, ir.HalfType):
        converted = builder.fpext(value, result)
    else:
        converted = builder.fptrunc(value, result)
    builder.store(converted, builder.gep(dst, [index], source_etype=result))
    following = builder.add(index, ir.Constant(T.I64, 1))
    index.add_incoming(following, loop)
    builder.cbranch(builder.icmp_signed("<", following, count), loop, done)
    builder.position_at_end(done)
    builder.ret_void()
    return module


def _run_builtin(name, source, result, values: np.ndarray, out_dtype) -> np.ndarray:
    baseline = target.make_target(support.SUPPORT_CPU)
    module = llvm.parse_assembly(str(_builtin_caller(name, source, result)))
    machine = baseline.create_machine()
    target.optimize(module, machine)
    data = machine.emit_object(module)
    assert name in objects.undefined_symbols(data)  # it really goes through the builtin
    library = engine.load_object(data, baseline, name)
    import ctypes

    convert = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        library.address("convert")
    )
    values = np.ascontiguousarray(values)
    out = np.empty(values.shape, out_dtype)
    convert(values.ctypes.data, out.ctypes.data, values.size)
    return out


def _same_floats(got, expected):
    got, expected = np.asarray(got), np.asarray(expected)
    with np.errstate(all="ignore"):
        nan = np.isnan(expected.astype(np.float64))
        assert np.array_equal(np.isnan(got.astype(np.float64)), nan)
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    np.testing.assert_array_equal(got[~nan].view(width), expected[~nan].view(width))


def _hard_cases(dtype, rng) -> np.ndarray:
    """Every float16 value, the midpoints between neighbours (ties) and just off them, the
    overflow and underflow thresholds, random bit patterns and the specials."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = halves[np.isfinite(halves)].astype(np.float64)
    finite = np.unique(finite)
    mids = (finite[:-1] + finite[1:]) / 2
    values = [
        finite,
        mids,
        np.nextafter(mids, np.inf),
        np.nextafter(mids, -np.inf),
        np.array(
            [
                65504.0,
                65519.99,
                65520.0,
                65536.0,
                2.0**-24,
                2.0**-25,
                2.0**-25 * 1.0000001,
                2.0**-26,
                1e-30,
                1e30,
                np.inf,
                -np.inf,
                np.nan,
                -np.nan,
                0.0,
                -0.0,
            ]
        ),
    ]
    bits = rng.integers(0, 1 << 63, 50_000, dtype=np.uint64)
    random = bits.view(np.float64) if dtype == F64 else bits.astype(np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        values = [v.astype(dtype) for v in values] + [random.astype(dtype)]
    return np.concatenate(values)


def test_truncdfhf2_and_truncsfhf2_round_as_numpy():
    rng = np.random.default_rng(0)
    for name, dtype, llvm_type in (("__truncdfhf2", F64, T.DOUBLE), ("__truncsfhf2", F32, T.FLOAT)):
        values = _hard_cases(dtype, rng)
        got = _run_builtin(name, llvm_type, T.HALF, values, F16)
        with np.errstate(all="ignore"):
            _same_floats(got, values.astype(F16))


def test_extendhfsf2_is_exact_on_every_half():
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = _run_builtin("__extendhfsf2", T.HALF, T.FLOAT, halves, F32)
    _same_floats(got, halves.astype(F32))


@pytest.mark.parametrize("name", CODEGEN_TARGETS + ("x86-64",))
def test_half_casts_in_kernels_round_as_numpy(name):
    # The inline conversions (integer IR where the CPU lacks F16C or AVX512-FP16).
    if name == "x86-64":
        context = _plain_x86_64()
    else:
        context = use_codegen_target(name)
    rng = np.random.default_rng(1)
    with context:
        for source in (F64, F32):
            values = _hard_cases(source, rng)
            program = _one_loop(
                f"to_half_{kir.short_name(source)}",
                {"x": source},
                {"y": (F16, lambda loads: kir.cast(loads["x"], F16))},
                size=len(values),
            )
            (got,) = engine.compile_program(program)(values)
            with np.errstate(all="ignore"):
                _same_floats(got, values.astype(F16))
        halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
        program = _one_loop(
            "from_half",
            {"x": F16},
            {
                "y": (F32, lambda loads: kir.cast(loads["x"], F32)),
                "z": (F16, lambda loads: kir.op(O.ADD, loads["x"], loads["x"])),
            },
            size=len(halves),
        )
        widened, doubled = engine.compile_program(program)(halves)
        _same_floats(widened, halves.astype(F32))
        with np.errstate(all="ignore"):
            _same_floats(doubled, (halves.astype(F32) * 2).astype(F16))


def _plain_x86_64():
    import contextlib

    import kiln

    @contextlib.contextmanager
    def pinned():
        saved = kiln.config.cpu, kiln.config.cpu_features
        kiln.config.update("kiln_cpu", "x86-64")
        kiln.config.update("kiln_cpu_features", "")
        try:
            yield
        finally:
            kiln.config.update("kiln_cpu", saved[0])
            kiln.config.update("kiln_cpu_features", saved[1])

    return pinned()


# --- unresolved symbols --------------------------------------------------------------------


def test_a_missing_symbol_is_an_error_naming_it():
    host = target.host_target()
    module = ir.Module(name="needs_missing")
    module.triple, module.data_layout = host.triple, host.data_layout
    missing = ir.Function(
        module, ir.FunctionType(T.DOUBLE, [T.DOUBLE]), name="kiln_test_no_such_symbol"
    )
    caller = ir.Function(module, ir.FunctionType(T.DOUBLE, [T.DOUBLE]), name="caller")
    builder = ir.IRBuilder(caller.append_basic_block("entry"))
    builder.ret(builder.call(missing, [caller.args[0]]))
    machine = host.create_machine()
    data = machine.emit_object(llvm.parse_assembly(str(module)))
    with pytest.raises(engine.UnresolvedSymbolError, match="kiln_test_no_such_symbol"):
        engine.load_object(data, host, "needs_missing")


def test_objects_linked_together_resolve_each_others_symbols():
    # An object calling a function that only another object defines loads when both are
    # linked into one instance (as a split program's entries and side kernels are), and is
    # refused alone.
    host = target.host_target()
    modules = []
    for name in ("provider", "user"):
        module = ir.Module(name=name)
        module.triple, module.data_layout = host.triple, host.data_layout
        modules.append(module)
    signature = ir.FunctionType(T.DOUBLE, [T.DOUBLE])
    provided = ir.Function(modules[0], signature, name="kiln_test_provided")
    builder = ir.IRBuilder(provided.append_basic_block("entry"))
    builder.ret(builder.fmul(provided.args[0], ir.Constant(T.DOUBLE, 3.0)))
    helper = ir.Function(modules[0], signature, name="kiln_test_internal_helper")
    helper.linkage = "internal"
    builder = ir.IRBuilder(helper.append_basic_block("entry"))
    builder.ret(helper.args[0])
    declared = ir.Function(modules[1], signature, name="kiln_test_provided")
    caller = ir.Function(modules[1], signature, name="kiln_test_caller")
    builder = ir.IRBuilder(caller.append_basic_block("entry"))
    builder.ret(builder.fadd(builder.call(declared, [caller.args[0]]), ir.Constant(T.DOUBLE, 1.0)))
    provider, user = (
        host.create_machine().emit_object(llvm.parse_assembly(str(m))) for m in modules
    )
    assert "kiln_test_provided" in objects.defined_symbols(provider)
    assert "kiln_test_internal_helper" not in objects.defined_symbols(provider)
    assert objects.undefined_symbols(user) == ["kiln_test_provided"]
    with pytest.raises(engine.UnresolvedSymbolError, match="kiln_test_provided"):
        engine.load_object(user, host, "alone")
    library = engine.load_object(user, host, "together", [provider])
    function = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(
        library.address("kiln_test_caller")
    )
    assert function(2.0) == 7.0
    assert not llvm.address_of_symbol("kiln_test_provided")  # (not made a process symbol)


def test_object_reader_rejects_garbage():
    with pytest.raises(objects.ObjectFormatError):
        objects.undefined_symbols(b"\x7fELF" + bytes(100))
    with pytest.raises(objects.ObjectFormatError):
        objects.undefined_symbols(os.urandom(300))


# --- the target override -------------------------------------------------------------------


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
    environment = dict(os.environ, **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )


def test_kiln_cpu_selects_the_target_of_generated_code():
    if not target.host_can_run("x86-64-v3"):
        pytest.skip("this CPU cannot run x86-64-v3 code")
    result = _run_python(
        """
        import numpy as np, kiln, kiln.numpy as jnp
        from kiln.codegen.llvm import target
        from kiln.runtime import engine
        x = np.linspace(-3, 3, 4096, dtype=np.float32)
        y = kiln.jit(lambda v: jnp.tanh(v) * 2 + v.astype(jnp.float16))(x)
        print(target.current_target().cpu_name, engine.engine().target.cpu_name)
        print(np.allclose(np.asarray(y, np.float32),
                          np.tanh(x) * 2 + x.astype(np.float16).astype(np.float32),
                          rtol=2e-3, atol=2e-3))
        """,
        KILN_CPU="x86-64-v3",
        KILN_CPU_FEATURES="",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["x86-64-v3", "x86-64-v3", "True"]


#: Suites whose results depend on the vector width (summation order, compensated blocks, fused
#: column sums), run whole for the AVX2 baseline: every test in them compiles through kiln.jit
#: for whatever KILN_CPU names, as on a machine without AVX-512.
WIDTH_SENSITIVE_SUITES = (
    "tests/test_accurate_reductions.py",
    "tests/test_accurate_dot.py",
    "tests/compiler/test_fusion_columns.py",
)


def test_the_width_sensitive_suites_pass_on_the_avx2_baseline():
    """On this host the suite runs AVX-512 code; these suites also run as an AVX2-only
    machine would run them (a long float32 sum's error bound failed there alone)."""
    if not target.host_can_run("x86-64-v3"):
        pytest.skip("this CPU cannot run x86-64-v3 code")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *WIDTH_SENSITIVE_SUITES],
        capture_output=True,
        text=True,
        cwd=root,
        env=dict(os.environ, KILN_CPU="x86-64-v3", KILN_CPU_FEATURES=""),
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_baseline_code_uses_only_its_features():
    if not target.host_can_run("x86-64-v3"):
        pytest.skip("this CPU cannot run x86-64-v3 code")
    size = 4096
    x, y = Buffer("x", F32, (size,)), Buffer("y", F32, (size,), "output")
    i = Var("i")
    program = Program(
        "scale", [x, y], [Kernel("scale", [Loop(i, 0, size, [Store(y, i, x[i] * 3.0 + 1.0)])])]
    )
    with use_codegen_target("x86-64-v3"):
        native = engine.compile_program(program)
        assert "ymm" in native.asm and "zmm" not in native.asm
        np.testing.assert_array_equal(native(np.ones(size, F32))[0], np.full(size, 4.0, F32))


def test_a_target_this_cpu_cannot_run_is_refused():
    lacking = [
        f
        for f in ("avx512fp16", "amx-tile", "avx10.2-512", "sha512", "avx512f")
        if f not in target.host_features()
    ]
    if not lacking:
        pytest.skip("this CPU has every candidate feature")
    with pytest.raises(ValueError, match=lacking[0]):
        target.make_target("host", f"+{lacking[0]}")
    # Only inspecting the code is allowed.
    assert target.make_target("host", f"+{lacking[0]}", runnable=False).features.endswith(
        f"+{lacking[0]}"
    )


def test_the_machine_that_found_the_data_layout_is_a_compile_machine():
    # _make_target keeps its probe as the target's first level-3 machine: it must make the
    # object a fresh level-3 machine makes (the JIT code model, the same level), once.
    host = target.host_target()
    made = target._make_target(host.triple, "x86-64-v3", "")
    spare = made.create_machine(3)
    assert made not in target._spare_machines and made.create_machine(3) is not spare
    module = _one_loop("spare", {"x": F32}, {"y": (F32, lambda v: v["x"] * 2.0 + 1.0)})
    with target.compiling_for(made):
        text = str(emit.emit_program(module))
    fresh = target.llvm_pipeline.create_machine(made.triple, made.cpu_name, made.features, 3)
    objects_made = [m.emit_object(llvm.parse_assembly(text)) for m in (spare, fresh)]
    assert objects_made[0] == objects_made[1]

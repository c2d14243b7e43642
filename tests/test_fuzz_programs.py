"""Differential fuzzing: random programs (tests/_program_gen.py) run natively, through the
interpreter and eagerly must agree: shapes and dtypes always, integer and bool values exactly,
float values bit for bit where every op on the way is exact and otherwise within each op's
stated accuracy (checked op by op on the native values, so rounding that later ops amplify is
not mistaken for a bug).

The default run is deterministic and short. `make fuzz` (KILN_FUZZ_EXAMPLES=<n>) runs the same
tests with many more examples; KILN_FUZZ_RANDOM=1 draws fresh examples instead of the fixed
sequence, and KILN_FUZZ_SHRINK=1 lets hypothesis shrink a failing case (slow).
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import kiln
import kiln.numpy as jnp
from kiln.codegen.llvm import vmath
from tests import _program_gen as gen
from tests._testing import x64_mode

#: Examples of the main test in the default run; KILN_FUZZ_EXAMPLES (`make fuzz`) replaces it,
#: and every other test's count scales with it.
DEFAULT_EXAMPLES = 100
FUZZ_EXAMPLES = int(os.environ.get("KILN_FUZZ_EXAMPLES", "0"))


def fuzz_settings(default: int, shrink: bool = True):
    """Deterministic (fixed seed, no example database) unless KILN_FUZZ_RANDOM is set.
    Hypothesis shrinks a failing program only under KILN_FUZZ_SHRINK=1 (it can take many
    minutes, each try compiling programs); failures print the program cut down to the ops the
    failing values depend on."""
    examples = max(1, default * FUZZ_EXAMPLES // DEFAULT_EXAMPLES) if FUZZ_EXAMPLES else default
    shrink = shrink and os.environ.get("KILN_FUZZ_SHRINK", "") == "1"
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=phases,
        derandomize=os.environ.get("KILN_FUZZ_RANDOM", "") != "1",
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


@pytest.fixture(autouse=True, scope="module")
def strict_native():
    """Backend errors fail the test instead of silently falling back to the interpreter."""
    previous = kiln.config.native_strict
    kiln.config.native_strict = True
    yield
    kiln.config.native_strict = previous


def leaves(result) -> list[np.ndarray]:
    """A program's outputs as NumPy arrays."""
    return [np.asarray(x) for x in result]


#: sin/cos/tan are accurate only below these magnitudes (see kiln/codegen/llvm/vmath.py).
TRIG_RANGE = {"float32": 4e5, "float64": 1e13}


def _excused(node, operands: list[np.ndarray], shape) -> np.ndarray:
    """Elements whose result the op leaves unspecified (large trig arguments)."""
    if node.op.name in ("sin", "cos", "tan"):
        x = np.asarray(operands[0])
        limit = TRIG_RANGE["float64" if x.dtype == gen.F64 else "float32"]
        return np.broadcast_to(np.abs(x.astype(np.float64)) > limit, shape)
    return np.zeros(shape, bool)


def local_failures(
    program: gen.Program, inputs: list, eager: bool = False
) -> list[tuple[int, str]]:
    """Every node's native value (eager: its eager value) against the reference op applied to
    the same values of its inputs, within the op's accuracy: (node id, why) for each that is
    outside. The reference is the op run eagerly for native values, through the interpreter
    for eager ones (which run native kernels on large arrays)."""
    op_ids = list(range(program.num_inputs, len(program.nodes)))
    if eager:
        with np.errstate(all="ignore"):
            values = [np.asarray(x) for x in inputs] + leaves(program.function(op_ids)(*inputs))
    else:
        compiled = kiln.jit(program.function(op_ids), backend="native")
        values = [np.asarray(x) for x in inputs] + leaves(compiled(*inputs))
    failures = []
    for node_id in op_ids:
        node = program.nodes[node_id]
        operands = [values[i] for i in node.inputs]

        def apply(*xs, node=node):
            return node.op.apply(node.params, *xs)

        with np.errstate(all="ignore"):
            arguments = [jnp.asarray(x) for x in operands]
            if eager:
                reference = np.asarray(kiln.jit(apply, backend="interpret")(*arguments))
            else:
                reference = np.asarray(apply(*arguments))
        got = values[node_id]
        if got.shape != reference.shape or got.dtype != reference.dtype:
            failures.append(
                (
                    node_id,
                    f"v{node_id} ({node.op.name}): {'eager' if eager else 'native'} {got.dtype}"
                    f"{list(got.shape)} vs reference {reference.dtype}"
                    f"{list(reference.shape)}",
                )
            )
            continue
        accuracy = node.op.accuracy(node.params, [program.nodes[i].type for i in node.inputs])
        bad = bad_elements(got, reference, accuracy, operands, node.params)
        bad &= ~_excused(node, operands, got.shape)
        if bad.any():
            failures.append(
                (
                    node_id,
                    f"v{node_id} = {node.op.name}({node.params!r}) on "
                    f"{[repr(program.nodes[i].type) for i in node.inputs]}: "
                    f"{describe(got, reference, bad)}; operands at that element: "
                    f"{_operands_at(operands, bad)}",
                )
            )
    return failures


def _operands_at(operands, bad) -> list:
    where = tuple(np.argwhere(bad)[0]) if bad.ndim else ()
    picked = []
    for x in operands:
        x = np.asarray(x)
        try:
            picked.append(np.broadcast_to(x, bad.shape)[where])
        except ValueError:
            picked.append(f"{x.dtype}{list(x.shape)}")
    return picked


def check_program(program: gen.Program) -> None:
    """Native and eager against the interpreter end to end, exactly where the cone is exact;
    any other difference sends every node to the local check (native values, or eager ones:
    on large arrays eager ops run native kernels, within each op's accuracy as jit's do)."""
    inputs = [jnp.asarray(v) for v in program.input_values()]
    function = program.function()
    with np.errstate(all="ignore"):
        native = leaves(kiln.jit(function, backend="native")(*inputs))
        interpreted = leaves(kiln.jit(function, backend="interpret")(*inputs))
        eager = leaves(function(*inputs))
    failures, differs, eager_differs = [], False, False
    for node_id, got, want, direct in zip(program.outputs, native, interpreted, eager):
        node = program.nodes[node_id]
        for name, value in (("native", got), ("eager", direct)):
            if value.shape != want.shape or value.dtype != want.dtype:
                failures.append(
                    (
                        node_id,
                        f"v{node_id}: {name} {value.dtype}"
                        f"{list(value.shape)} vs interpreter {want.dtype}"
                        f"{list(want.shape)}",
                    )
                )
        if failures:
            continue
        bad = ~_same_bits(direct, want)
        if bad.any():
            eager_differs = True
            if node.exact_cone:
                failures.append(
                    (
                        node_id,
                        f"v{node_id} (exact cone): eager vs interpreter "
                        f"{describe(direct, want, bad)}",
                    )
                )
        bad = ~_same_bits(got, want)
        if bad.any():
            differs = True
            if node.exact_cone:
                failures.append(
                    (
                        node_id,
                        f"v{node_id} (exact cone): native vs interpreter "
                        f"{describe(got, want, bad)}",
                    )
                )
    if differs:
        failures += local_failures(program, inputs)
    if eager_differs:
        failures += local_failures(program, inputs, eager=True)
    if failures:
        # The program cut down to the failing values and what they depend on.
        short = program.restricted(sorted({node_id for node_id, _ in failures}))
        raise AssertionError(f"{short!r}\n" + "\n".join(why for _, why in failures))


# ---------------------------------------------------------------------------------------------
# Comparison: when a native value agrees with the reference


def _ordered(values: np.ndarray) -> np.ndarray:
    """Float bit patterns mapped to integers in value order (+0 and -0 both to 0)."""
    bits = values.dtype.itemsize * 8
    signed = values.view(f"i{values.dtype.itemsize}").astype(np.int64)
    magnitude = signed & ((1 << (bits - 1)) - 1)
    return np.where(signed < 0, -magnitude, magnitude)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many representable values of their format lie between a and b (the largest finite
    value is one step from infinity), as float64; meaningless where either is NaN."""
    oa, ob = _ordered(a), _ordered(b)
    same_sign = (oa >= 0) == (ob >= 0)
    # Integer arithmetic throughout: float64 cannot hold float64 bit patterns exactly.
    within = np.abs(np.where(same_sign, oa - ob, 0)).astype(np.uint64)
    across = np.abs(oa).astype(np.uint64) + np.abs(ob).astype(np.uint64)
    return np.where(same_sign, within, across).astype(np.float64)


def _ulp_of(values: np.ndarray, dtype) -> np.ndarray:
    """The spacing of `dtype` at each of float64 `values`."""
    info = gen.finfo(dtype)
    magnitude = np.maximum(np.abs(values), float(info.tiny))
    exponent = np.floor(np.log2(np.where(np.isfinite(magnitude), magnitude, 1.0)))
    return np.exp2(exponent - info.nmant)


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == gen.BOOL or gen.is_int(a.dtype):
        return a == b
    nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    width = f"u{a.dtype.itemsize}"
    return nan | (a.view(width) == b.view(width))


def bad_elements(
    native: np.ndarray,
    reference: np.ndarray,
    accuracy,
    operands: list[np.ndarray] = (),
    params=None,
) -> np.ndarray:
    """A mask of the elements where `native` is outside `accuracy` of `reference` (an op with
    these operands and params)."""
    with np.errstate(all="ignore"):  # infinities and NaNs are compared on purpose
        return _bad_elements(native, reference, accuracy, operands, params)


def _bad_elements(native, reference, accuracy, operands, params) -> np.ndarray:
    if accuracy == gen.NAN_SIGN:
        return (native != reference) & ~np.isnan(np.asarray(operands[0]).astype(np.float64))
    if native.dtype == gen.BOOL or gen.is_int(native.dtype) or accuracy == gen.EXACT:
        return ~_same_bits(native, reference)
    a, b = native.astype(np.float64), reference.astype(np.float64)
    same = _same_bits(native, reference) | (a == b)
    if accuracy == gen.NOSIGN:
        return ~same
    both_finite = np.isfinite(a) & np.isfinite(b)
    info = gen.finfo(native.dtype)
    if isinstance(accuracy, tuple):
        neither_nan = ~np.isnan(a) & ~np.isnan(b)
        return ~same & ~(neither_nan & (ulp_distance(native, reference) <= accuracy[1]))
    if accuracy == gen.ADD:
        scale = np.abs(b)
        non_finite_operand = np.zeros(native.shape, bool)
        for x in operands:
            x64 = np.broadcast_to(np.asarray(x).astype(np.float64), native.shape)
            scale = np.maximum(scale, np.abs(np.where(np.isfinite(x64), x64, 0)))
            non_finite_operand |= ~np.isfinite(x64)
        tol = 2 * _ulp_of(scale, native.dtype)
        return ~same & ~(both_finite & (np.abs(a - b) <= tol)) & ~non_finite_operand
    if accuracy == gen.SUM:
        # Any summation order is allowed: the error bound of recursive summation over the
        # magnitudes (accumulating float16/bfloat16 in float32), plus the final rounding.
        count, magnitude = _sum_magnitude(operands, params, native.shape)
        eps = _accumulation_eps(native.dtype)
        tol = 2 * _ulp_of(b, native.dtype) + count * eps * magnitude
        overflow = ~np.isfinite(magnitude) | (magnitude > float(info.max) / 2)
        return ~same & ~(both_finite & (np.abs(a - b) <= tol)) & ~overflow
    if accuracy == gen.PROD:
        # Any multiplication order: relative error grows with the count; a partial product
        # may overflow or underflow in one order only, so results out of the normal range
        # (and NaNs from inf * 0 that such an order makes) are not compared.
        count = max(1, max((np.asarray(x).size for x in operands), default=1))
        eps = _accumulation_eps(native.dtype)
        normal = both_finite & (np.abs(a) >= float(info.tiny)) & (np.abs(b) >= float(info.tiny))
        close = np.abs(a - b) <= 4 * count * eps * np.abs(b) + 2 * _ulp_of(b, native.dtype)
        return ~same & normal & ~close
    raise ValueError(f"unknown accuracy {accuracy!r}")


def _accumulation_eps(dtype) -> float:
    """Machine epsilon of the type a reduction accumulates in (float32 for 16-bit floats)."""
    return float(gen.finfo(gen.F32 if dtype in (gen.F16, gen.BF16) else dtype).eps)


def _sum_magnitude(operands, params, shape):
    """(count, sum of |x|) bounding a summing op's rounding error at each output element."""
    magnitudes = [
        np.abs(np.where(np.isfinite(x64), x64, np.inf))
        for x64 in (np.asarray(x).astype(np.float64) for x in operands)
    ]
    if (
        isinstance(params, tuple)
        and len(params) == 2
        and (params[0] is None or isinstance(params[0], tuple))
    ):
        axes, keepdims = params  # sum/mean over axes
        x = magnitudes[0]
        total = np.sum(x, axis=axes, keepdims=keepdims)
        count = x.size // max(1, total.size) if x.size else 0
        return count, np.broadcast_to(total, shape)
    if isinstance(params, int) and len(magnitudes) == 1:  # cumsum along an axis
        x = magnitudes[0]
        return x.shape[params], np.broadcast_to(np.cumsum(x, axis=params), shape)
    count = sum(x.size for x in magnitudes)
    return count, np.full(shape, sum(float(np.sum(x)) for x in magnitudes))


def describe(native, reference, bad) -> str:
    where = tuple(np.argwhere(bad)[0]) if bad.ndim else ()
    return (
        f"at {where}: native {native[where]!r} vs reference {reference[where]!r} "
        f"({int(bad.sum())} of {bad.size} elements differ)"
    )


# ---------------------------------------------------------------------------------------------
# The main families


@fuzz_settings(DEFAULT_EXAMPLES)
@given(data=st.data())
def test_random_programs(data):
    program = data.draw(gen.programs(), label="program")
    check_program(program)


@fuzz_settings(DEFAULT_EXAMPLES // 2)
@given(data=st.data())
def test_random_programs_x64(data):
    with x64_mode(True):
        program = data.draw(gen.programs(dtypes_=gen.DTYPES_64), label="program")
        check_program(program)


@fuzz_settings(DEFAULT_EXAMPLES // 2)
@given(data=st.data())
def test_random_elementwise_programs(data):
    """Longer chains of elementwise ops only: everything fuses into one kernel."""
    program = data.draw(gen.programs(families=("elementwise",), max_ops=16), label="program")
    check_program(program)


@fuzz_settings(max(3, DEFAULT_EXAMPLES // 10))
@given(data=st.data())
def test_random_programs_on_large_arrays(data):
    """Arrays big enough that native kernels split their loops across threads, with odd
    sizes so that chunk boundaries fall between vector widths."""
    program = data.draw(
        gen.programs(
            families=("elementwise", "shape", "reduction"),
            max_ops=6,
            base_shapes=[(1_000_003,), (1031, 1013), (3, 517, 701)],
        ),
        label="program",
    )
    check_program(program)


# ---------------------------------------------------------------------------------------------
# Families aimed at the edges: scalars at dtype limits, long sums, large arguments, deep programs

SCALAR_FUNCTIONS = {
    "add": lambda x, c: x + c,
    "radd": lambda x, c: c + x,
    "sub": lambda x, c: x - c,
    "mul": lambda x, c: x * c,
    "max": lambda x, c: jnp.maximum(x, c),
    "eq": lambda x, c: x == c,
    "where": lambda x, c: jnp.where(x == x, c, x),
}


def _limit_scalars(dtype) -> list:
    """Python scalars at and just past the limits of `dtype`."""
    if gen.is_int(dtype):
        info = np.iinfo(dtype)
        return [info.max, info.min, info.max - 1, info.min + 1, 0, -1, info.max + 1, info.min - 1]
    info = gen.finfo(dtype)
    return [
        float(info.max),
        -float(info.max),
        float(info.tiny),
        float(info.smallest_subnormal),
        float(np.inf),
        -0.0,
        1e300,
        float("nan"),
    ]


@fuzz_settings(DEFAULT_EXAMPLES // 2)
@given(data=st.data())
def test_python_scalars_near_dtype_limits(data):
    x64 = data.draw(st.booleans(), label="x64")
    with x64_mode(x64):
        dtypes = [d for d in (gen.DTYPES_64 if x64 else gen.DTYPES_32) if d != gen.BOOL]
        dtype = data.draw(st.sampled_from(dtypes), label="dtype")
        scalar = data.draw(st.sampled_from(_limit_scalars(dtype)), label="scalar")
        name = data.draw(st.sampled_from(sorted(SCALAR_FUNCTIONS)), label="op")
        fn = SCALAR_FUNCTIONS[name]
        values = gen.random_values(gen.Type((5,), dtype), np.random.default_rng(0), 0.5)
        x = jnp.asarray(values)
        # As in JAX, a Python int must fit the default integer type (int32, int64 with x64);
        # one that does is then converted to the operand's dtype, wrapping if it must.
        default_int = np.iinfo(np.int64 if x64 else np.int32)
        in_range = isinstance(scalar, float) or default_int.min <= scalar <= default_int.max
        results = {}
        for mode in ("eager", "native", "interpret"):
            run = (
                (lambda x, c: fn(x, c))
                if mode == "eager"
                else kiln.jit(lambda x, c=scalar: fn(x, c), backend=mode)
            )
            try:
                with np.errstate(all="ignore"):
                    results[mode] = np.asarray(run(x, scalar) if mode == "eager" else run(x))
            except OverflowError:
                results[mode] = OverflowError
        if not in_range:
            assert all(r is OverflowError for r in results.values()), (name, dtype, scalar, results)
            return
        assert not any(r is OverflowError for r in results.values()), (name, dtype, scalar, results)
        reference = results["interpret"]
        for mode in ("eager", "native"):
            got = results[mode]
            assert got.dtype == reference.dtype and got.shape == reference.shape
            bad = ~_same_bits(got, reference)
            assert not bad.any(), (
                f"{name}({dtype.name} {values!r}, {scalar!r}) {mode}: "
                f"{describe(got, reference, bad)}"
            )


@pytest.mark.filterwarnings("ignore::kiln.transforms.jit.RecompilationWarning")
@fuzz_settings(max(4, DEFAULT_EXAMPLES // 10))
@given(data=st.data())
def test_long_float32_sums(data):
    size = data.draw(st.integers(100_000, 1_000_000), label="size")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    kind = data.draw(st.sampled_from(["positive", "offset"]), label="kind")
    rng = np.random.default_rng(seed)
    values = rng.random(size) + (1000.0 if kind == "offset" else 0.0)
    x = values.astype(np.float32)
    eps = float(np.finfo(np.float32).eps)
    # Pairwise (or blocked) summation keeps the error well under one rounding of the total
    # magnitude; lane-by-lane sequential accumulation over 1e5..1e6 elements does not.
    whole = jnp.asarray(x)
    got = float(kiln.jit(lambda a: jnp.sum(a), backend="native")(whole))
    exact = math.fsum(x.astype(np.float64).tolist())
    assert abs(got - exact) <= 0.5 * eps * float(np.sum(x, dtype=np.float64)), (
        size,
        kind,
        got,
        exact,
    )
    columns = x[: (size // 4) * 4].reshape(-1, 4)
    got = np.asarray(kiln.jit(lambda a: jnp.sum(a, axis=0), backend="native")(jnp.asarray(columns)))
    exact = np.array([math.fsum(c) for c in columns.astype(np.float64).T.tolist()])
    tol = 0.5 * eps * np.sum(columns, axis=0, dtype=np.float64)
    assert np.all(np.abs(got - exact) <= tol), (size, kind, got, exact, tol)


@fuzz_settings(max(6, DEFAULT_EXAMPLES // 6))
@given(data=st.data())
def test_sin_cos_of_large_arguments(data):
    x64 = data.draw(st.booleans(), label="x64")
    with x64_mode(x64):
        dtype = gen.F64 if x64 else gen.F32
        top = 300 if x64 else 38
        exponent = data.draw(st.floats(5, top), label="log10|x|")
        seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
        rng = np.random.default_rng(seed)
        values = (10.0 ** rng.uniform(5, exponent, 257)) * rng.choice([-1, 1], 257)
        x = values.astype(dtype)
        for name, fn, ref in (("sin", jnp.sin, np.sin), ("cos", jnp.cos, np.cos)):
            got = np.asarray(kiln.jit(fn, backend="native")(jnp.asarray(x)))
            if dtype == gen.F64:
                expected = np.asarray(ref(x.astype(np.longdouble))).astype(np.float64)
            else:
                expected = ref(x.astype(np.float64)).astype(np.float32)
            bound = vmath.MAX_ULP[(name, dtype.name)] + 0.5
            distance = ulp_distance(got, expected)
            worst = int(np.argmax(distance))
            assert distance[worst] <= bound, (
                name,
                dtype.name,
                x[worst],
                got[worst],
                expected[worst],
                distance[worst],
            )


#: Layers of a deep program; in each, the previous value feeds several consumers, some of them
#: through a reduction or a broadcast, which a fusion that copies a producer into each of its
#: consumers turns into work exponential in the depth.
DEEP_LAYERS = {
    "reduce": lambda a, b: a - jnp.mean(a) * 0.5 + b * 0.25,
    "outer": lambda a, b: jnp.mean(a[:, None] * 0.5 + a[None, :], axis=1) + b * 0.25,
    "mix": lambda a, b: jnp.sin(a) + jnp.maximum(a, b) * 0.5,
}


def deep_shared_program(layers: list):
    def program(x, y):
        values = [y, x]
        for name in layers:
            values.append(DEEP_LAYERS[name](values[-1], values[-2]))
        return values[-1], values[len(values) // 2]

    return program


@fuzz_settings(max(4, DEFAULT_EXAMPLES // 20), shrink=False)  # each failing try is slow
@given(data=st.data())
def test_deep_programs_with_shared_values(data):
    layers = data.draw(
        st.lists(st.sampled_from(["outer", "reduce", "outer", "mix"]), min_size=12, max_size=14),
        label="layers",
    )
    size = data.draw(st.sampled_from([1, 7, 33]), label="size")
    rng = np.random.default_rng(len(layers) * 100 + size)
    x, y = (jnp.asarray(rng.standard_normal(size).astype(np.float32)) for _ in range(2))
    program = deep_shared_program(layers)
    start = time.perf_counter()
    compiled = kiln.jit(program, backend="native").lower(x, y).compile()
    elapsed = time.perf_counter() - start
    # Not a timing test: only work exponential in the depth comes near this (12 layers took
    # 15 s when fusion copied shared producers into every consumer; they take well under 1 s).
    assert elapsed < 60.0, f"compiling {len(layers)} layers {layers} took {elapsed:.2f} s"
    got = leaves(compiled(x, y))
    want = leaves(kiln.jit(program, backend="interpret")(x, y))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)

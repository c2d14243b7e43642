"""Memory planning of native programs (kiln/runtime/memory_plan.py): slot assignment by
liveness, results unchanged by buffer reuse, compiled.memory_analysis() against sizes worked
out by hand, donated arguments, and concurrent calls of one executable."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.compiler import pipeline
from kiln.runtime import memory_plan
from tests import _program_gen as gen
from tests.test_fuzz_programs import fuzz_settings, leaves

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native

MB = 1 << 20


@pytest.fixture(autouse=True)
def strict_native():
    """Backend errors fail the test instead of silently falling back to the interpreter."""
    previous = kiln.config.native_strict
    kiln.config.native_strict = True
    yield
    kiln.config.native_strict = previous


@pytest.fixture(params=[1, 2], ids=["one-entry", "parallel"])
def threads(request):
    """Segments run as one native entry (temps passed in its table) or as parallel kernels
    (temps passed to the chunked run)."""
    previous = kiln.config.num_threads
    kiln.config.num_threads = request.param
    yield request.param
    kiln.config.num_threads = previous


def native(fn, *args, reuse: bool = True, strict: bool = True, arena: bool = True):
    """fn compiled by the native backend for these arguments, outside the jit cache (so that
    the same function can be built with and without reuse); strict: it must be native (a
    program with nothing native in it runs through the interpreter); arena: False allocates
    all scratch per call."""
    previous = memory_plan.REUSE_BUFFERS, memory_plan.ARENA_MAX_BYTES
    memory_plan.REUSE_BUFFERS = reuse
    memory_plan.ARENA_MAX_BYTES = previous[1] if arena else 0
    try:
        closed = kiln.make_jaxpr(fn)(*args)
        optimized = pipeline.optimize(closed, "program")
        executable = pipeline.compile(optimized, "native", "program")
    finally:
        memory_plan.REUSE_BUFFERS, memory_plan.ARENA_MAX_BYTES = previous
    assert executable.backend == "native" or not strict
    return executable


def run(executable, *args) -> list[np.ndarray]:
    return [np.array(out) for out in executable.execute([jnp.asarray(a) for a in args])]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# --- slot assignment ----------------------------------------------------------------------------


def test_slots_of_a_chain_alternate_between_two():
    # Each value is written at step i and read at step i + 1: two slots suffice.
    intervals = [(f"v{i}", 1024, i, i + 1) for i in range(6)]
    slot_of, sizes = memory_plan.assign_slots(intervals)
    assert sizes == [1024, 1024]
    assert [slot_of[f"v{i}"] for i in range(6)] == [0, 1, 0, 1, 0, 1]
    slot_of, sizes = memory_plan.assign_slots(intervals, reuse=False)
    assert sizes == [1024] * 6


def test_a_slot_grows_for_a_larger_later_value():
    slot_of, sizes = memory_plan.assign_slots([("a", 64, 0, 1), ("b", 256, 2, 3)])
    assert slot_of == {"a": 0, "b": 0} and sizes == [256]


def test_a_small_value_takes_the_smallest_free_slot_that_fits():
    intervals = [("big", 4096, 0, 1), ("small", 128, 0, 1), ("next", 100, 2, 2)]
    slot_of, sizes = memory_plan.assign_slots(intervals)
    assert slot_of["next"] == slot_of["small"] and sizes == [4096, 128]


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 5000), st.integers(0, 20), st.integers(0, 6)),
        min_size=1,
        max_size=25,
    )
)
def test_values_sharing_a_slot_are_never_live_together(raw):
    intervals = [(n, size, start, start + length) for n, (size, start, length) in enumerate(raw)]
    slot_of, sizes = memory_plan.assign_slots(intervals)
    for key, size, start, end in intervals:
        assert sizes[slot_of[key]] >= size
        for other, _, other_start, other_end in intervals:
            if other != key and slot_of[other] == slot_of[key]:
                assert end < other_start or other_end < start
    assert sum(sizes) <= sum(size for _, size, _, _ in intervals)


def test_liveness_follows_views_and_escapes():
    live = memory_plan.Liveness()
    live.define("a", 1000, 0, planned=True)
    live.define("view", 1000, 1, planned=False)  # an impl's result that may be a view of a
    live.alias("view", "a")
    live.read("a", 1)
    live.read("view", 5)
    live.define("b", 1000, 3, planned=True)  # written while the view of a is still read
    live.define("c", 1000, 6, planned=True)
    live.read("c", 7)
    live.define("out", 1000, 8, planned=True)
    live.escape("out")
    plan = live.plan()
    assert plan.slot_of["a"] != plan.slot_of["b"]  # a lives on through its view
    assert plan.slot_of["c"] == plan.slot_of["a"]
    assert "out" not in plan.slot_of and plan.fresh == ["out"]
    assert live.last_use("a") == (5, False)


@pytest.mark.parametrize(
    "make",
    [
        lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))),
        lambda a, b: lax.dot_general(a[:0], b, (((1,), (0,)), ((), ()))),
        lambda a, b: lax.dot_general(a[:, :1], b[:1], (((1,), (0,)), ((), ()))),
        lambda a, b: lax.cumsum(a, axis=0),
        lambda a, b: lax.cumprod(a[:1], axis=1),
        lambda a, b: lax.cummax(a, axis=1, reverse=True),
        lambda a, b: lax.cummin(a[:, :0], axis=0),
        lambda a, b: lax.sort(a, dimension=0),
        lambda a, b: lax.sort(a[:0], dimension=1),
    ],
)
def test_impls_planned_as_fresh_never_return_views(make):
    # memory_plan.FRESH_RESULT_PRIMITIVES: their results cannot hold an operand's memory.
    a = jnp.asarray(np.random.default_rng(5).standard_normal((6, 6)).astype(np.float32))
    b = jnp.asarray(np.ones((6, 6), np.float32))
    out = np.asarray(make(a, b))
    for operand in (a, b):
        assert not np.shares_memory(out, np.asarray(operand))
    jaxpr = kiln.make_jaxpr(make)(a, b)
    names = {eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}
    assert names & memory_plan.FRESH_RESULT_PRIMITIVES


# --- results with and without reuse ------------------------------------------------------------


def mlp_step(params, x, y):
    def loss(params):
        h = x
        for w, b in params[:-1]:
            h = jnp.tanh(h @ w + b)
        w, b = params[-1]
        return jnp.mean((h @ w + b - y) ** 2)

    grads = kiln.grad(loss)(params)
    return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, grads)]


def layernorm_grad(x, scale):
    def loss(x, scale):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.var(x, axis=-1, keepdims=True)
        return jnp.sum(jnp.sin((x - mean) * lax.rsqrt(var + 1e-5) * scale))

    return kiln.grad(loss, argnums=(0, 1))(x, scale)


def scan_program(c, xs):
    def body(c, x):
        h = jnp.tanh(c @ jnp.ones((16, 16), jnp.float32) * 0.1 + x)
        return h, jnp.sort(h)

    c, ys = lax.scan(body, c, xs)
    return jnp.cumsum(ys, axis=0) * 2 + c.sum()


SEEN_BY_CALLBACK: list = []


def callback_program(x):
    def host(v):
        SEEN_BY_CALLBACK.append(v)  # kept after the call: its memory must not be reused
        return np.asarray(v) + 1

    a = jnp.sin(x) * 2
    b = kiln.pure_callback(host, kiln.ShapeDtypeStruct(x.shape, x.dtype), a)
    c = jnp.cos(b) + a
    return jnp.sort(c, axis=0) * jnp.exp(a)


def _programs():
    rng = np.random.default_rng(0)
    sizes = [64, 256, 256, 10]
    params = [
        ((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
        for m, n in zip(sizes, sizes[1:])
    ]
    x = rng.standard_normal((512, 64)).astype(np.float32)
    y = rng.standard_normal((512, 10)).astype(np.float32)
    return {
        "mlp": (mlp_step, (params, x, y)),
        "layernorm": (
            layernorm_grad,
            (rng.standard_normal((256, 512)).astype(np.float32), np.ones(512, np.float32)),
        ),
        "scan": (
            scan_program,
            (
                rng.standard_normal((8, 16)).astype(np.float32),
                rng.standard_normal((5, 8, 16)).astype(np.float32),
            ),
        ),
        "callback": (callback_program, (rng.standard_normal((300, 70)).astype(np.float32),)),
    }


@pytest.mark.parametrize("arena", [True, False], ids=["arena", "per-call"])
@pytest.mark.parametrize("name", list(_programs()))
def test_reuse_keeps_results_bit_for_bit(name, threads, arena):
    fn, args = _programs()[name]
    flat_fn, flat_args = _flat(fn, args)
    with_reuse = native(flat_fn, *flat_args, arena=arena)
    without = native(flat_fn, *flat_args, reuse=False)
    expected = [np.asarray(v) for v in kiln.tree_util.tree_leaves(fn(*args))]
    for _ in range(3):  # the arena is filled on the first call and reused by the next
        got, reference = run(with_reuse, *flat_args), run(without, *flat_args)
        assert all(same_bits(a, b) for a, b in zip(got, reference))
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
    if name == "mlp":  # a program with intermediates to share
        assert (
            with_reuse.memory_stats().temp_size_in_bytes < without.memory_stats().temp_size_in_bytes
        )


def _flat(fn, args):
    leaves_, tree = kiln.tree_util.tree_flatten(args)

    def flat_fn(*flat):
        return kiln.tree_util.tree_leaves(fn(*kiln.tree_util.tree_unflatten(tree, list(flat))))

    return flat_fn, [np.asarray(v) for v in leaves_]


@fuzz_settings(40)
@given(data=st.data())
def test_random_programs_agree_with_and_without_reuse(data):
    program = data.draw(
        gen.programs(families=("elementwise", "shape", "reduction", "indexing", "control")),
        label="program",
    )
    inputs = program.input_values()
    function = program.function()
    with np.errstate(all="ignore"):
        with_reuse = native(function, *inputs, strict=False)
        if with_reuse.backend != "native":
            return  # nothing native in it
        without = native(function, *inputs, reuse=False)
        for _ in range(2):
            got, reference = run(with_reuse, *inputs), run(without, *inputs)
            for a, b in zip(got, reference):
                assert same_bits(a, b), program
        eager = leaves(function(*[jnp.asarray(v) for v in inputs]))
        for a, b in zip(got, eager):
            assert a.shape == b.shape and a.dtype == b.dtype


@fuzz_settings(6)
@given(data=st.data())
def test_random_programs_on_large_arrays_agree_with_and_without_reuse(data):
    program = data.draw(
        gen.programs(
            families=("elementwise", "shape", "reduction"),
            max_ops=8,
            base_shapes=[(1031, 1013)],
        ),
        label="program",
    )
    inputs = program.input_values()
    function = program.function()
    with np.errstate(all="ignore"):
        with_reuse = native(function, *inputs, strict=False)
        if with_reuse.backend != "native":
            return
        without = native(function, *inputs, reuse=False)
        got, reference = run(with_reuse, *inputs), run(without, *inputs)
    for a, b in zip(got, reference):
        assert same_bits(a, b), program


def test_a_value_an_output_may_view_is_never_reused():
    # A branch that returns its operand unchanged hands back the native product a itself: a
    # must keep its own memory, or the next call would overwrite the first call's output.
    def f(x, flag):
        a = jnp.sin(x) * 2
        b = lax.cond(flag, lambda v: v * 1.5, lambda v: v, a)
        return b, jnp.cos(jnp.sort(b, axis=0)) * 3

    xv = np.random.default_rng(6).standard_normal((64, 64)).astype(np.float32)
    compiled = kiln.jit(f).lower(xv, False).compile()
    first, _ = compiled(xv, False)
    for flag in (False, True, False):
        compiled(xv + 1, flag)
    np.testing.assert_allclose(np.asarray(first), np.sin(xv) * 2, rtol=1e-6)


def test_values_handed_to_a_callback_are_never_reused():
    SEEN_BY_CALLBACK.clear()
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((300, 70)).astype(np.float32) for _ in range(3)]
    compiled = kiln.jit(callback_program).lower(inputs[0]).compile()
    for x in inputs:
        compiled(x)
    assert len(SEEN_BY_CALLBACK) == 3
    for seen, x in zip(SEEN_BY_CALLBACK, inputs):
        np.testing.assert_allclose(np.asarray(seen), np.sin(x) * 2, rtol=1e-6, atol=1e-6)
    SEEN_BY_CALLBACK.clear()


# --- memory_analysis --------------------------------------------------------------------------


def matmul_chain(x, w):
    for _ in range(5):
        x = x @ w  # each product is a kernel of its own: its result is a full temp
    return x


def test_memory_analysis_of_a_chain_counts_two_temps_after_reuse(threads):
    x = jnp.ones((512, 512), jnp.float32)  # 1 MiB
    compiled = kiln.jit(matmul_chain).lower(x, x).compile()
    stats = compiled.memory_analysis()
    # 4 intermediates of 1 MiB; each is dead once the next product is written, so two
    # slots hold them all.
    assert stats.argument_size_in_bytes == 2 * MB
    assert stats.output_size_in_bytes == MB
    assert stats.temp_size_in_bytes == 2 * MB
    assert stats.alias_size_in_bytes == 0
    assert stats.peak_memory_in_bytes == 5 * MB
    assert native(matmul_chain, x, x, reuse=False).memory_stats().temp_size_in_bytes == 4 * MB
    w = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32) / 23
    expected = np.asarray(x, np.float64)
    for _ in range(5):
        expected = expected @ w
    # (entries near zero after cancellation carry float32's absolute error of the sums)
    np.testing.assert_allclose(np.asarray(compiled(x, w)), expected, rtol=1e-4, atol=1e-5)


def sort_chain(x):
    a = jnp.sin(x)  # native
    b = jnp.sort(a, axis=0)  # reference impl: a new array
    c = jnp.sin(b)  # native: may take a's memory (a is dead)
    d = jnp.sort(c, axis=1)
    return jnp.sin(d)


def test_memory_analysis_counts_impl_intermediates_and_shares_native_ones():
    x = jnp.asarray(np.random.default_rng(2).standard_normal((512, 512)).astype(np.float32))
    compiled = kiln.jit(sort_chain).lower(x).compile()
    stats = compiled.memory_analysis()
    # a and c share one planned slot; b and d are allocated by NumPy: 3 MiB, not 4.
    assert stats.temp_size_in_bytes == 3 * MB
    assert native(sort_chain, x, reuse=False).memory_stats().temp_size_in_bytes == 4 * MB
    xv = np.asarray(x)
    expected = np.sin(np.sort(np.sin(np.sort(np.sin(xv), axis=0)), axis=1))
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(compiled(x)), expected, rtol=1e-6, atol=1e-6)


def test_memory_analysis_of_an_output_returned_twice_and_of_the_interpreter():
    def f(x):
        y = jnp.sin(x) + 1
        return y, y

    x = jnp.ones((100,), jnp.float32)
    stats = kiln.jit(f).lower(x).compile().memory_analysis()
    assert stats.argument_size_in_bytes == 400 and stats.output_size_in_bytes == 400
    assert stats.temp_size_in_bytes == 0 and stats.peak_memory_in_bytes == 800
    stats = kiln.jit(f, backend="interpreter").lower(x).compile().memory_analysis()
    # sin's result is an intermediate of its own there
    assert stats.temp_size_in_bytes == 400 and stats.output_size_in_bytes == 400
    assert "temp_size_in_bytes=400" in str(stats)


# --- donation ---------------------------------------------------------------------------------


def sgd(w, g):
    return w - 0.1 * g


def test_a_donated_argument_becomes_the_output():
    w = jnp.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    g = jnp.ones((3, 4), jnp.float32)
    step = kiln.jit(sgd, donate_argnums=0)
    stats = step.lower(w, g).compile().memory_analysis()
    assert stats.alias_size_in_bytes == 48 and stats.peak_memory_in_bytes == 96
    address = w.buffer_address()
    out = step(w, g)
    assert w.is_deleted() and not g.is_deleted()
    assert out.buffer_address() == address
    # The result can be donated in turn: a training loop updates one buffer.
    for _ in range(3):
        out = step(out, g)
    assert out.buffer_address() == address
    np.testing.assert_allclose(np.asarray(out), np.arange(12).reshape(3, 4) - 0.4, rtol=1e-6)
    # Now the caller holds a view of it (np.asarray): the next call leaves it alone.
    new = step(out, g)
    assert not out.is_deleted() and new.buffer_address() != address
    np.testing.assert_allclose(np.asarray(out), np.arange(12).reshape(3, 4) - 0.4, rtol=1e-6)
    for use in (lambda: w + 1, lambda: np.asarray(w), lambda: step(w, g), lambda: repr(w)):
        with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[3,4\]"):
            use()
    assert w.shape == (3, 4) and w.dtype == np.float32  # as in JAX


def test_donation_by_name_and_by_keyword():
    w = jnp.ones((64,), jnp.float32)
    g = jnp.full((64,), 2.0, jnp.float32)
    step = kiln.jit(sgd, donate_argnames="w")
    out = step(w=w, g=g)
    assert w.is_deleted()
    np.testing.assert_allclose(np.asarray(out), np.full(64, 0.8), rtol=1e-6)
    params = {"a": jnp.ones((8,), jnp.float32), "b": jnp.ones((8,), jnp.float32)}
    tree_step = kiln.jit(lambda p, g: {k: v - g for k, v in p.items()}, donate_argnums=0)
    out = tree_step(params, g[:8])
    assert params["a"].is_deleted() and params["b"].is_deleted()
    np.testing.assert_allclose(np.asarray(out["b"]), -np.ones(8))


def test_a_buffer_someone_else_sees_is_not_taken():
    w = jnp.ones((16,), jnp.float32)
    view = np.asarray(w)  # a read-only view the caller keeps: the data must not change
    out = kiln.jit(sgd, donate_argnums=0)(w, w)
    assert not w.is_deleted()
    np.testing.assert_array_equal(view, np.ones(16))
    np.testing.assert_allclose(np.asarray(out), np.full(16, 0.9), rtol=1e-6)
    x = jnp.ones((16,), jnp.float32)
    with pytest.warns(UserWarning, match="not usable"):  # one output for two donations
        out = kiln.jit(sgd, donate_argnums=(0, 1))(x, x)  # one buffer passed twice
    np.testing.assert_allclose(np.asarray(out), np.full(16, 0.9), rtol=1e-6)


def test_a_donated_argument_read_after_the_output_is_written_stays_valid():
    def f(x):
        y = x[::-1] + 1  # reads x at other positions than it writes: not in place
        return y

    x = jnp.asarray(np.arange(8, dtype=np.float32))
    with pytest.warns(UserWarning, match=r"Some donated buffers were not usable: f32\[8\]"):
        out = kiln.jit(f, donate_argnums=0)(x)
    assert not x.is_deleted()
    np.testing.assert_array_equal(np.asarray(out), np.arange(8)[::-1] + 1)


def test_a_donated_argument_dead_before_a_later_segment_is_reused():
    def f(x):
        y = jnp.sort(x * 2, axis=0)  # last read of x (the product), then a reference impl
        return jnp.cos(y)

    xv = np.random.default_rng(3).standard_normal((64, 32)).astype(np.float32)
    x = jnp.asarray(xv)
    compiled = kiln.jit(f, donate_argnums=0).lower(x).compile()
    assert compiled.memory_analysis().alias_size_in_bytes == xv.nbytes
    out = compiled(x)
    assert x.is_deleted()
    np.testing.assert_allclose(np.asarray(out), np.cos(np.sort(xv * 2, axis=0)), rtol=1e-6)


def test_a_donated_training_step_matches_the_plain_one(threads):
    fn, args = _programs()["mlp"]
    params, x, y = args
    plain = kiln.jit(fn)
    donating = kiln.jit(lambda p, x, y: fn(p, x, y), donate_argnums=0)
    expected = plain(params, x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (biases: their update holds a column reduction)
        stats = donating.lower(params, x, y).compile().memory_analysis()
        donated = kiln.tree_util.tree_map(jnp.asarray, params)
        got = donating(donated, x, y)
    weights = sum(w.nbytes for w, _ in params)
    assert stats.alias_size_in_bytes >= weights  # every weight matrix is updated in place
    assert all(w.is_deleted() for w, _ in donated)
    for a, b in zip(kiln.tree_util.tree_leaves(got), kiln.tree_util.tree_leaves(expected)):
        assert same_bits(np.asarray(a), np.asarray(b))


def test_a_column_reduction_is_not_written_over_its_donated_operand(threads):
    # The reduction's loop is rescheduled to accumulate in its output row: writing that row
    # into b's memory would change b before the update reads it.
    def update(b, g):
        return b - 0.5 * g.sum(axis=0)

    rng = np.random.default_rng(9)
    bv, gv = rng.standard_normal(300).astype(np.float32), rng.standard_normal((64, 300))
    gv = gv.astype(np.float32)
    expected = np.asarray(kiln.jit(update)(bv, gv))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = kiln.jit(update, donate_argnums=0)(jnp.asarray(bv), gv)
    assert same_bits(np.asarray(out), expected)


@fuzz_settings(30)
@given(data=st.data())
def test_random_programs_agree_with_their_first_input_donated(data):
    program = data.draw(gen.programs(families=("elementwise", "shape", "reduction")))
    inputs = program.input_values()
    function = program.function()
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = leaves(kiln.jit(function)(*[jnp.asarray(v) for v in inputs]))
        donated = [jnp.asarray(v) for v in inputs]
        got = leaves(kiln.jit(lambda *a: function(*a), donate_argnums=0)(*donated))
    for a, b in zip(got, expected):
        assert same_bits(a, b), program


def test_unusable_donations_warn_and_leave_the_argument():
    z = jnp.ones((3,), jnp.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = kiln.jit(lambda z: z.sum(), donate_argnums=0)(z)
    assert float(out) == 3.0 and not z.is_deleted()
    assert any("Some donated buffers were not usable: f32[3]" in str(w.message) for w in caught)


def test_delete_and_is_deleted():
    x = jnp.ones((2, 5))
    assert not x.is_deleted()
    x.delete()
    assert x.is_deleted() and x.shape == (2, 5)
    with pytest.raises(RuntimeError, match=r"shape=float32\[2,5\]"):
        kiln.jit(lambda v: v * 2)(x)


# --- the arenas ---------------------------------------------------------------------------------


def test_arenas_stay_within_the_process_budget(monkeypatch):
    import gc

    monkeypatch.setattr(memory_plan, "ARENAS_MAX_BYTES", 3 * MB)
    x = np.random.default_rng(8).standard_normal((512, 512)).astype(np.float32)
    w = np.eye(512, dtype=np.float32) * 0.5
    first = native(matmul_chain, x, w)  # keeps 2 MiB of scratch once called
    second = native(lambda x, w: matmul_chain(x, w) + 1, x, w)
    before = memory_plan.kept_bytes()
    for _ in range(3):  # each fill drops the other's arena: 4 MiB do not fit in 3
        (a,) = run(first, x, w)
        assert memory_plan.kept_bytes() - before <= 2 * MB
        (b,) = run(second, x, w)
        np.testing.assert_allclose(a, x / 32, rtol=1e-6)
        np.testing.assert_allclose(b, x / 32 + 1, rtol=1e-6)
    assert memory_plan.kept_bytes() <= 3 * MB
    kept = memory_plan.kept_bytes()
    del second
    gc.collect()
    assert memory_plan.kept_bytes() == kept - 2 * MB  # freed with its executable


# --- concurrency --------------------------------------------------------------------------------


def test_two_threads_calling_one_executable_get_their_own_scratch(threads):
    def f(x, w):
        h = jnp.tanh(x @ w)
        h = jnp.tanh(h @ w) + h
        return jnp.sort(h, axis=1) @ w

    rng = np.random.default_rng(4)
    w = rng.standard_normal((256, 256)).astype(np.float32) / 16
    inputs = [rng.standard_normal((256, 256)).astype(np.float32) for _ in range(4)]
    compiled = kiln.jit(f).lower(inputs[0], w).compile()
    assert compiled.memory_analysis().temp_size_in_bytes > 0
    expected = [np.asarray(compiled(x, w)) for x in inputs]
    errors = []

    def worker(offset):
        try:
            for n in range(40):
                k = (n + offset) % len(inputs)
                got = np.asarray(compiled(inputs[k], w))
                if not np.array_equal(got, expected[k]):
                    errors.append(k)
        except Exception as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []


@pytest.mark.parametrize("huge", [True, False], ids=["huge-pages", "mapped-ahead"])
def test_large_scratch_from_either_kind_of_memory_gives_the_same_results(monkeypatch, huge):
    """Large kept scratch comes from NumPy allocations that the kernels fault in (huge pages)
    or from one mapping populated ahead: slots are disjoint views either way, and the
    results match a NumPy reference."""
    monkeypatch.setattr(memory_plan, "_HUGE_PAGES", [huge])
    assert (memory_plan.large_region(8 * MB) is None) == huge
    assert memory_plan.large_region(memory_plan.PREFAULT_MIN_BYTES - 1) is None
    sizes = [3 * MB, 2 * MB + 64, 5 * MB]
    slots = memory_plan._allocate(sizes, prefault=True)
    assert [s.nbytes for s in slots] == sizes
    for k, slot in enumerate(slots):
        slot[:] = k + 1
    assert [int(s[0]) for s in slots] == [1, 2, 3] and all((s == s[0]).all() for s in slots)

    def chain(x, w):
        for _ in range(4):
            x = jnp.tanh(x @ w)  # 4 MiB intermediates: kept scratch of 8 MiB
        return x

    rng = np.random.default_rng(3)
    x = rng.standard_normal((1024, 1024)).astype(np.float32)
    w = (rng.standard_normal((1024, 1024)) / 32).astype(np.float32)
    compiled = kiln.jit(chain).lower(x, w).compile()
    assert compiled.memory_analysis().temp_size_in_bytes >= memory_plan.PREFAULT_MIN_BYTES
    expected = x.astype(np.float64)
    for _ in range(4):
        expected = np.tanh(expected @ w)
    for _ in range(2):  # (the first call allocates the arena, the second reuses it)
        np.testing.assert_allclose(np.asarray(compiled(x, w)), expected, rtol=2e-4, atol=2e-5)

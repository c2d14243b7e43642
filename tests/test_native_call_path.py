"""The generated call path of native executables: small outputs taken from pooled blocks
(distinct buffers across many calls, 0-d outputs, threads) and their signatures."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.core.avals import ShapedArray
from kiln.runtime import cache
from kiln.runtime.native_call import FirstCallOutputs, SmallOutputs, data_address

# (the native backend's workings: run on it whatever KILN_BACKEND says; tests/conftest.py)
pytestmark = pytest.mark.native


def _run_threads(target, count: int) -> None:
    """target(0), ..., target(count - 1), each on a thread of its own, all started at once."""
    threads = [threading.Thread(target=target, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_many_small_outputs_keep_their_own_values():
    f = kiln.jit(lambda x, k: (x * k, jnp.sum(x) * k))
    x = jnp.arange(4.0)
    kept = [f(x, jnp.float32(k)) for k in range(3 * SmallOutputs.BATCH + 5)]
    for k, (vec, total) in enumerate(kept):
        np.testing.assert_array_equal(np.asarray(vec), np.arange(4.0, dtype=np.float32) * k)
        assert total.shape == () and float(total) == 6.0 * k
    addresses = {data_address(vec._value) for vec, _ in kept}
    assert len(addresses) == len(kept)  # no two live outputs share memory


def test_pooled_outputs_carry_their_signature():
    f = kiln.jit(lambda x: x + 1)
    out = f(jnp.ones(3))
    assert out._sig is cache.intern_signature(((3,), np.dtype(np.float32), False))
    weak = kiln.jit(lambda: 2.0)()
    assert weak.weak_type


def test_pool_refill_rows_and_addresses():
    pool = SmallOutputs((2, 3), np.float32)
    first, address = pool.refill()
    assert first.shape == (2, 3) and first.dtype == np.float32 and first.flags.c_contiguous
    assert data_address(first) == address
    assert len(pool.ready) == SmallOutputs.BATCH - 1
    for row, addr in pool.ready:
        assert data_address(row) == addr
    scalar_pool = SmallOutputs((), np.int32)
    value, address = scalar_pool.refill()
    assert isinstance(value, np.ndarray) and value.shape == () and data_address(value) == address
    assert not SmallOutputs.fits((1024,), np.float32) and not SmallOutputs.fits((0,), np.float32)


def test_threads_calling_at_once_get_distinct_outputs():
    f = kiln.jit(lambda x, k: x * k)
    x = jnp.ones(8)
    results: dict = {}

    def worker(t):
        results[t] = [(k, f(x, jnp.float32(100 * t + k))) for k in range(200)]

    _run_threads(worker, 4)
    for t, outs in results.items():
        for k, out in outs:
            np.testing.assert_array_equal(np.asarray(out), np.full(8, 100 * t + k, np.float32))


@pytest.mark.parametrize("size", [SmallOutputs.MAX_BYTES // 4, SmallOutputs.MAX_BYTES // 4 + 1])
def test_donating_a_pooled_or_allocated_output_stays_correct(size):
    step = kiln.jit(lambda x: x * 2 + 1, donate_argnums=0)
    x = kiln.jit(lambda: jnp.zeros(size))()
    for _ in range(5):
        x = step(x)
    np.testing.assert_array_equal(np.asarray(x), np.full(size, 31.0, np.float32))


def test_small_outputs_next_to_reference_impl_equations():
    # Equations run through reference impls bind their parameters as globals of the call
    # path; the small outputs' address locals must not shadow them.
    a = np.array([[2.5 - 0.3j, -0.1 + 0.2j], [0.3 + 0.6j, 2.6 + 0.5j]], np.complex64)
    sign, logdet = kiln.jit(jnp.linalg.slogdet)(jnp.asarray(a))
    want_sign, want_logdet = np.linalg.slogdet(a.astype(np.complex128))
    np.testing.assert_allclose(complex(sign), want_sign, rtol=1e-5)
    np.testing.assert_allclose(float(logdet), want_logdet, rtol=1e-5)


# --- large NumPy arguments are read in place -------------------------------------------------


@pytest.mark.parametrize("backend", [None, "interpret"])
def test_outputs_never_share_a_borrowed_numpy_buffer(backend):
    # A large NumPy argument is read in place; an output that is the argument itself, or a view
    # of it (an interpreted reshape or slice), must still not change when the caller writes
    # its array after the call.
    options = {} if backend is None else {"backend": backend}
    x = np.arange(1 << 16, dtype=np.float32)
    reference = x.copy()
    same = kiln.jit(lambda a: a, **options)
    reshaped = kiln.jit(lambda a: a.reshape(256, 256), **options)
    several = kiln.jit(lambda a: (a, a * 2.0, a[:10]), **options)
    outputs = [same(x), reshaped(x), *several(x)]
    x[:] = -1.0
    np.testing.assert_array_equal(np.asarray(outputs[0]), reference)
    np.testing.assert_array_equal(np.asarray(outputs[1]), reference.reshape(256, 256))
    np.testing.assert_array_equal(np.asarray(outputs[2]), reference)
    np.testing.assert_array_equal(np.asarray(outputs[3]), reference * 2.0)
    np.testing.assert_array_equal(np.asarray(outputs[4]), reference[:10])


def test_a_donated_numpy_argument_is_never_written():
    x = np.linspace(-1.0, 1.0, 1 << 16, dtype=np.float32)
    reference = x.copy()
    out = kiln.jit(lambda a: a * 3.0 + 1.0, donate_argnums=0)(x)
    np.testing.assert_array_equal(x, reference)
    np.testing.assert_allclose(np.asarray(out), reference * 3.0 + 1.0, rtol=1e-6, atol=1e-6)


def test_a_large_numpy_argument_is_not_copied():
    import tracemalloc

    x = np.ones((512, 512), np.float32)
    f = kiln.jit(lambda a: jnp.sum(a * 2.0, axis=1))
    np.testing.assert_array_equal(np.asarray(f(x)), np.full(512, 1024.0, np.float32))
    tracemalloc.start()
    try:
        f(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < x.nbytes // 2  # a copy of x would be x.nbytes
    # A mistyped or strided array is still converted (and the result is the same).
    np.testing.assert_array_equal(np.asarray(f(x.astype(np.float64))), np.asarray(f(x)))
    strided = np.ones((512, 1024), np.float32)[:, ::2]
    np.testing.assert_array_equal(np.asarray(f(strided)), np.asarray(f(x)))


# --- the first call's large outputs, faulted in while the program compiles ----------------


def test_first_call_outputs_are_prepared_then_handed_out_once():
    rows = FirstCallOutputs.ARRAY_BYTES // 4  # (two float32 outputs of 4 such rows each)
    f = kiln.jit(lambda x: (x * 2.0, x + 1.0))
    x = np.arange(4 * rows, dtype=np.float32).reshape(4, rows)
    first = f(x)
    second = f(x + 10.0)  # must not write into the first call's outputs
    third = f(x - 1.0)
    for out, shift in ((first, 0.0), (second, 10.0), (third, -1.0)):
        np.testing.assert_array_equal(np.asarray(out[0]), (x + shift) * 2.0)
        np.testing.assert_array_equal(np.asarray(out[1]), (x + shift) + 1.0)
    outs = [o._value for call in (first, second, third) for o in call]
    assert len({data_address(o) for o in outs}) == len(outs)


def test_first_call_outputs_install_only_what_a_call_allocates():
    namespace = {"empty": np.empty}
    small = ShapedArray((4,), np.dtype(np.float32))
    assert FirstCallOutputs.prepare([small]) is None  # (too small: nothing prepared)
    FirstCallOutputs.install(namespace, [small], None)
    assert namespace["empty"] is np.empty
    big = ShapedArray((FirstCallOutputs.MIN_BYTES // 8,), np.dtype(np.float64))
    FirstCallOutputs.install(namespace, [big], FirstCallOutputs.prepare([big]))
    assert namespace["empty"] is not np.empty
    out = namespace["empty"]((FirstCallOutputs.MIN_BYTES // 8,), np.dtype(np.float64))
    assert out.shape == (FirstCallOutputs.MIN_BYTES // 8,) and not out.any()  # (touched: zeros)
    assert namespace["empty"] is np.empty  # (none left: plain np.empty from now on)
    FirstCallOutputs.install(namespace, [small, big], FirstCallOutputs.prepare([small, big]))
    other = namespace["empty"]((4,), np.dtype(np.float32))  # not prepared: np.empty's, and
    assert other.shape == (4,) and namespace["empty"] is not np.empty  # the big one stays
    out = namespace["empty"]((FirstCallOutputs.MIN_BYTES // 8,), np.dtype(np.float64))
    assert not out.any() and namespace["empty"] is np.empty


def test_a_small_output_allocated_first_leaves_the_large_one_prepared(monkeypatch):
    # The call path allocates the small output first; the large one is still the buffer
    # faulted in during the build, not a fresh one faulted in while the kernels run.
    addresses = []  # of the buffers prepared
    original = FirstCallOutputs.prepare.__func__

    def prepare(cls, avals):
        prepared = original(cls, avals)
        if prepared is not None:
            addresses.extend(a.ctypes.data for b in prepared._buffers.values() for a in b)
        return prepared

    monkeypatch.setattr(FirstCallOutputs, "prepare", classmethod(prepare))
    rows = 2 * FirstCallOutputs.MIN_BYTES // (4 * 256)
    f = kiln.jit(lambda x: (x[0] * 3.0, x * 2.0))
    x = np.arange(rows * 256, dtype=np.float32).reshape(rows, 256)
    small, large = f(x)
    assert len(addresses) == 1
    np.testing.assert_array_equal(np.asarray(small), x[0] * 3.0)
    np.testing.assert_array_equal(np.asarray(large), x * 2.0)
    assert data_address(large._value) == addresses[0]


def test_a_large_arena_is_made_and_faulted_in_while_the_program_compiles():
    # The kept scratch the first call would allocate (here the 4 MB between the two
    # products) is allocated and faulted in during the build; the calls then use those views.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 512)).astype(np.float32)
    w = (rng.standard_normal((512, 512)) / 32).astype(np.float32)
    compiled = kiln.jit(lambda x, w: jnp.tanh(x @ w) @ w).lower(x, w).compile()
    arena = compiled._entry.executable.execute.__globals__["arena"]
    views = arena.views
    assert views is not None and sum(v.nbytes for v in views) >= FirstCallOutputs.MIN_BYTES
    assert not any(v.any() for v in views)  # (zeroed as they were faulted in)
    expected = np.tanh(x.astype(np.float64) @ w) @ w
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(compiled(x, w)), expected, rtol=1e-4, atol=1e-4)
        assert arena.views is views
    # Below FirstCallOutputs.MIN_BYTES of scratch, the first call allocates it.
    small = kiln.jit(lambda x, w: jnp.tanh(x @ w) @ w).lower(x[:8, :8], w[:8, :8]).compile()
    assert small._entry.executable.execute.__globals__["arena"].views is None


def test_outputs_prepared_early_keep_only_what_the_call_path_allocates():
    """prepare() runs before the program is planned, from every output of the jaxpr; install()
    later keeps only those the generated code allocates and drops the rest."""
    for earlier, _ in list(FirstCallOutputs._pending.values()):  # (other tests' programs)
        earlier.release()
    n = FirstCallOutputs.MIN_BYTES // 4
    taken = ShapedArray((n,), np.dtype(np.float32))
    scratch = ShapedArray((2 * n,), np.dtype(np.float32))  # (say, an output a slot holds)
    prepared = FirstCallOutputs.prepare([taken, scratch])
    assert FirstCallOutputs._pending_bytes == 3 * n * 4
    namespace = {"empty": np.empty}
    FirstCallOutputs.install(namespace, [taken], prepared)
    assert FirstCallOutputs._pending_bytes == n * 4
    out = namespace["empty"]((n,), np.dtype(np.float32))
    assert out.shape == (n,) and not out.any()  # (touched: zeros)
    assert namespace["empty"] is np.empty and not FirstCallOutputs._pending
    # Nothing left worth keeping: the namespace allocates as usual from the start.
    prepared = FirstCallOutputs.prepare([taken])
    namespace = {"empty": np.empty}
    FirstCallOutputs.install(namespace, [scratch], prepared)
    assert namespace["empty"] is np.empty and FirstCallOutputs._pending_bytes == 0


def test_a_build_that_fails_drops_its_prepared_outputs(monkeypatch):
    """A native build that fails after preparing its first call's outputs (the program then
    runs through the interpreter) leaves no prepared buffers behind."""
    from kiln.runtime import native

    for earlier, _ in list(FirstCallOutputs._pending.values()):
        earlier.release()

    seen = []

    def broken(self):
        seen.append(FirstCallOutputs._pending_bytes)  # (prepared before the planner ran)
        raise RuntimeError("a bug in the call path generator")

    monkeypatch.setattr(native.NativeExecutable, "_generate", broken)
    monkeypatch.setattr(kiln.config, "native_strict", False)
    n = FirstCallOutputs.MIN_BYTES // 4
    x = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    out = kiln.jit(lambda v: jnp.tanh(v) * 3.0 + 1.0)(x)
    np.testing.assert_allclose(np.asarray(out), np.tanh(x) * 3.0 + 1.0, rtol=1e-6, atol=1e-6)
    assert seen == [n * 4]
    assert not FirstCallOutputs._pending and FirstCallOutputs._pending_bytes == 0


def test_first_calls_from_threads_at_once_get_their_own_outputs():
    n = FirstCallOutputs.MIN_BYTES // 4
    f = kiln.jit(lambda x, k: x * k)
    x = np.ones(n, np.float32)
    results = {}

    def call(k):
        results[k] = f(x, np.float32(k))

    _run_threads(call, 4)
    for k, out in results.items():
        np.testing.assert_array_equal(np.asarray(out), np.full(n, k, np.float32))
    assert len({data_address(out._value) for out in results.values()}) == 4


def test_prepared_first_call_outputs_that_no_call_takes_are_bounded(monkeypatch):
    """Programs compiled ahead and never called hold at most MAX_BYTES of prepared outputs:
    preparing more drops the oldest, whose calls then allocate as usual."""
    for earlier, _ in list(FirstCallOutputs._pending.values()):  # (other tests' programs)
        earlier.release()
    size = FirstCallOutputs.MIN_BYTES // 4
    monkeypatch.setattr(FirstCallOutputs, "MAX_BYTES", 3 * FirstCallOutputs.MIN_BYTES)
    aval = ShapedArray((size,), np.dtype(np.float32))
    namespaces = [{"empty": np.empty} for _ in range(5)]
    for namespace in namespaces:
        FirstCallOutputs.install(namespace, [aval], FirstCallOutputs.prepare([aval]))
    prepared = [ns["empty"] is not np.empty for ns in namespaces]
    assert prepared == [False, False, True, True, True]
    assert FirstCallOutputs._pending_bytes <= FirstCallOutputs.MAX_BYTES
    for namespace in namespaces:  # every namespace still allocates what it asks for
        out = namespace["empty"]((size,), np.dtype(np.float32))
        assert out.shape == (size,) and namespace["empty"] is np.empty
    assert FirstCallOutputs._pending_bytes == 0 and not FirstCallOutputs._pending

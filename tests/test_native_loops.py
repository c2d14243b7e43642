"""Loops and branches in the native backend: while, fori_loop, scan and cond run their bodies as
compiled programs (and whole loops as one native call where the bodies allow it). Every case is
checked against the interpreter backend and against a NumPy or plain Python loop.
"""

from __future__ import annotations

import numpy as np
import optree
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


@pytest.fixture(autouse=True)
def strict_native(monkeypatch):
    """Backend errors fail the test instead of silently falling back to the interpreter."""
    monkeypatch.setattr(kiln.config, "native_strict", True)


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in optree.tree_leaves(tree, namespace="kiln")]


def check(fn, *args, expected=None, rtol=1e-5, atol=1e-6):
    """fn jitted natively agrees with the interpreter backend and with `expected` (a pytree of
    NumPy values); returns the native executable's text."""
    compiled = kiln.jit(fn, backend="native").lower(*args).compile()
    native = leaves(compiled(*args))
    reference = leaves(kiln.jit(fn, backend="interpret")(*args))
    assert len(native) == len(reference)
    for a, b in zip(native, reference):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    if expected is not None:
        wanted = leaves(expected)
        assert len(wanted) == len(native)
        for a, e in zip(native, wanted):
            assert a.shape == np.shape(e)
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
    text = compiled.as_text()
    assert compiled.as_text().splitlines()[0].endswith("backend=native")
    return text


def _logistic_steps(x, n):
    for _ in range(n):
        x = x * 0.999 + 0.001 * x * x
    return x


# --- while --------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [0.0, 1.0, 300.0])
def test_while_data_dependent_trip_count(limit):
    def f(x, limit):
        return lax.while_loop(
            lambda c: c[0] < limit, lambda c: (c[0] + c[1], c[1] * 1.01), (x, jnp.float32(1.5))
        )

    total, step = np.float32(0.5), np.float32(1.5)
    while total < limit:
        total, step = np.float32(total + step), np.float32(step * np.float32(1.01))
    text = check(f, jnp.float32(0.5), jnp.float32(limit), expected=(total, step), rtol=1e-4)
    assert "compiled while" in text


def test_while_zero_iterations_returns_init():
    def f(x):
        return lax.while_loop(lambda c: jnp.sum(c) > 100.0, lambda c: c * 2.0, x)

    x = np.arange(4, dtype=np.float32)
    check(f, x, expected=x)


def test_while_carries_of_several_dtypes_and_shapes():
    def f(v, m):
        def cond(c):
            i, _, _, _ = c
            return i < 7

        def body(c):
            i, v, m, flag = c
            return i + 1, v * 1.5 + m.sum(0), m + i.astype(jnp.float32), jnp.logical_not(flag)

        return lax.while_loop(cond, body, (jnp.int32(0), v, m, jnp.bool_(True)))

    v = np.linspace(0, 1, 3).astype(np.float32)
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    i, ev, em, flag = 0, v.copy(), m.copy(), True
    while i < 7:
        i, ev, em, flag = i + 1, ev * 1.5 + em.sum(0), em + np.float32(i), not flag
    check(f, v, m, expected=(np.int32(i), ev, em, np.bool_(flag)), rtol=1e-5)


def test_while_with_consts_in_cond_and_body():
    w = np.float32([0.5, 0.25, 2.0])

    def f(x, limit):
        scale = jnp.asarray(w)
        return lax.while_loop(lambda c: jnp.max(c) < limit, lambda c: c * scale + 1.0, x)

    x = np.float32([1.0, 2.0, 3.0])
    expected = x.copy()
    while expected.max() < 50.0:
        expected = expected * w + 1.0
    check(f, x, np.float32(50.0), expected=expected)


# --- fori_loop ----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [2, 256])
def test_fori_loop_static_bounds(size):
    f = lambda x: lax.fori_loop(0, 1000, lambda i, c: c * 0.999 + 0.001 * c * c, x)  # noqa: E731
    x = np.linspace(0.1, 0.9, size).astype(np.float32)
    check(f, x, expected=_logistic_steps(x, 1000), rtol=1e-4)


@pytest.mark.parametrize("n", [0, 1, 37])
def test_fori_loop_traced_bounds(n):
    def f(x, n):
        return lax.fori_loop(0, n, lambda i, c: c * 0.5 + i.astype(jnp.float32), x)

    x = np.float32([1.0, -2.0])
    expected = x.copy()
    for i in range(n):
        expected = expected * np.float32(0.5) + np.float32(i)
    check(f, x, np.int32(n), expected=expected)


def test_fori_loop_integer_carry():
    f = lambda n: lax.fori_loop(0, n, lambda i, c: c + i * i, jnp.int32(0))  # noqa: E731
    check(f, np.int32(50), expected=np.int32(sum(i * i for i in range(50))))


# --- scan ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_cumulative_with_ys(reverse):
    def f(xs):
        def body(c, x):
            c = c * 0.5 + x
            return c, (c, c.sum())

        return lax.scan(body, jnp.zeros(3, jnp.float32), xs, reverse=reverse)

    xs = np.arange(15, dtype=np.float32).reshape(5, 3)
    c, ys, sums = np.zeros(3, np.float32), np.zeros((5, 3), np.float32), np.zeros(5, np.float32)
    for i in range(4, -1, -1) if reverse else range(5):
        c = c * np.float32(0.5) + xs[i]
        ys[i], sums[i] = c, c.sum()
    check(f, xs, expected=(c, (ys, sums)))


def test_scan_pytrees_of_xs_and_ys_and_several_carries():
    def f(a, b, xs):
        def body(carry, x):
            total, count = carry
            total = total + x["u"] * x["v"][0]
            return (total, count + 1), {"t": total, "k": count}

        return lax.scan(body, (a, b), xs)

    xs = {
        "u": np.arange(8, dtype=np.float32).reshape(4, 2),
        "v": np.arange(12, dtype=np.float32).reshape(4, 3),
    }
    a, b = np.float32([1.0, 2.0]), np.int32(3)
    total, count, ts, ks = a.copy(), b, [], []
    for i in range(4):
        total = total + xs["u"][i] * xs["v"][i][0]
        ts.append(total)
        ks.append(count)
        count = count + 1
    check(f, a, b, xs, expected=((total, np.int32(count)), {"k": np.int32(ks), "t": np.stack(ts)}))


def test_scan_length_zero():
    def f(c, xs):
        return lax.scan(lambda c, x: (c + x, c * x), c, xs)

    c, xs = np.float32([1.0, 2.0]), np.zeros((0, 2), np.float32)
    check(f, c, xs, expected=(c, np.zeros((0, 2), np.float32)))


def test_scan_with_consts_and_passthrough_carry():
    w = np.float32([[1.0, 2.0], [3.0, 4.0]]) / 10

    def f(h, scale, xs):
        def body(c, x):
            h, s = c
            return (jnp.tanh(h @ jnp.asarray(w) + x) * s, s), h

        return lax.scan(body, (h, scale), xs)

    h, scale = np.float32([0.1, -0.2]), np.float32(0.9)
    xs = np.linspace(-1, 1, 12).astype(np.float32).reshape(6, 2)
    eh, hs = h.copy(), []
    for x in xs:
        hs.append(eh)
        eh = np.tanh(eh @ w + x) * scale
    check(f, h, scale, xs, expected=((eh, scale), np.stack(hs)), rtol=1e-5)


def test_scan_y_is_input_and_literal():
    def f(xs):
        return lax.scan(lambda c, x: (c + 1, (x, c, jnp.float32(2.0))), jnp.int32(0), xs)

    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    check(
        f,
        xs,
        expected=(np.int32(3), (xs, np.arange(3, dtype=np.int32), np.full(3, 2.0, np.float32))),
    )


# --- cond inside loops, loops inside cond, nesting -----------------------------------------------


def test_cond_and_switch_inside_a_loop_body():
    def f(x):
        def body(i, c):
            c = lax.cond(i % 2 == 0, lambda v: v + 1.0, lambda v: v * 2.0, c)
            return lax.switch(i % 3, [lambda v: v, lambda v: v - 0.5, jnp.sin], c)

        return lax.fori_loop(0, 10, body, x)

    x = np.float32([0.1, 0.2])
    e = x.copy()
    for i in range(10):
        e = e + np.float32(1.0) if i % 2 == 0 else e * np.float32(2.0)
        e = [e, e - np.float32(0.5), np.sin(e)][i % 3]
    text = check(f, x, expected=e, rtol=1e-5)
    assert "compiled scan" in text or "compiled while" in text


def test_loop_inside_cond_branches():
    def f(p, x):
        return lax.cond(
            p,
            lambda v: lax.fori_loop(0, 5, lambda i, c: c * 2.0, v),
            lambda v: lax.while_loop(lambda c: c[0] < 10.0, lambda c: c + 3.0, v),
            x,
        )

    x = np.float32([1.0, 0.0])
    check(f, True, x, expected=x * 32)
    check(f, False, x, expected=x + 9.0)


def test_nested_loops():
    def f(x):
        def outer(i, c):
            inner = lax.fori_loop(0, i, lambda j, d: d + j.astype(jnp.float32), c[1])
            return c[0] + inner.sum(), inner * 0.5

        return lax.fori_loop(0, 6, outer, (jnp.float32(0.0), x))

    x = np.float32([1.0, 2.0, 3.0])
    total, v = np.float32(0.0), x.copy()
    for i in range(6):
        inner = v.copy()
        for j in range(i):
            inner = inner + np.float32(j)
        total, v = total + inner.sum(), inner * np.float32(0.5)
    check(f, x, expected=(total, v))


def test_scan_inside_while():
    def f(xs):
        def body(c):
            k, acc = c
            s, _ = lax.scan(lambda a, x: (a + x * k, None), acc, xs)
            return k + 1.0, s

        return lax.while_loop(lambda c: c[0] < 4.0, body, (jnp.float32(1.0), jnp.zeros(2)))

    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    k, acc = 1.0, np.zeros(2, np.float32)
    while k < 4.0:
        acc = acc + xs.sum(0) * np.float32(k)
        k += 1.0
    check(f, xs, expected=(np.float32(k), acc))


# --- transformations ----------------------------------------------------------------------------


def _rnn_loss(W, U, b, xs, h0):
    def cell(h, x_t):
        return jnp.tanh(h @ W + x_t @ U + b), None

    h, _ = lax.scan(cell, h0, xs)
    return jnp.sum(h)


def test_grad_of_scan_rnn_matches_numpy():
    rng = np.random.default_rng(0)
    T, B, H = 5, 3, 4
    W, U = (rng.standard_normal((H, H), dtype=np.float32) * 0.3 for _ in range(2))
    b = rng.standard_normal(H, dtype=np.float32) * 0.1
    xs = rng.standard_normal((T, B, H), dtype=np.float32)
    h0 = np.zeros((B, H), np.float32)
    # forward and backward by hand
    hs = [h0]
    for t in range(T):
        hs.append(np.tanh(hs[-1] @ W + xs[t] @ U + b))
    gh = np.ones((B, H), np.float32)
    gW, gU, gb = np.zeros_like(W), np.zeros_like(U), np.zeros_like(b)
    for t in range(T - 1, -1, -1):
        gz = gh * (1 - hs[t + 1] ** 2)
        gW += hs[t].T @ gz
        gU += xs[t].T @ gz
        gb += gz.sum(0)
        gh = gz @ W.T
    f = kiln.value_and_grad(_rnn_loss, argnums=(0, 1, 2))
    check(f, W, U, b, xs, h0, expected=(hs[-1].sum(), (gW, gU, gb)), rtol=1e-4, atol=1e-5)


def test_vmap_of_while_with_batched_predicate():
    def count_steps(x):
        return lax.while_loop(
            lambda c: c[0] < 10.0, lambda c: (c[0] * 2.0 + 1.0, c[1] + 1), (x, jnp.int32(0))
        )

    xs = np.float32([0.0, 3.0, 20.0, 9.0])
    expected_v, expected_n = [], []
    for x in xs:
        n = 0
        while x < 10.0:
            x, n = x * 2.0 + 1.0, n + 1
        expected_v.append(x)
        expected_n.append(n)
    check(kiln.vmap(count_steps), xs, expected=(np.float32(expected_v), np.int32(expected_n)))


def test_repeated_calls_do_not_share_result_buffers():
    f = kiln.jit(lambda x: lax.fori_loop(0, 3, lambda i, c: c + 1.0, x))
    first = f(np.float32([0.0, 1.0]))
    second = f(np.float32([10.0, 10.0]))
    np.testing.assert_array_equal(np.asarray(first), [3.0, 4.0])
    np.testing.assert_array_equal(np.asarray(second), [13.0, 13.0])


# --- which path runs ----------------------------------------------------------------------------


def compiled_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("compiled ")]


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_with_a_fused_body_is_one_native_call(reverse):
    def f(c0, rows, others, never_read):
        def body(c, x):
            a, k = c
            row, other, _ = x
            a = a * 0.5 + row * other[0]
            return (a, k + 1), (a * 2.0, k.astype(jnp.float32) + other.sum())

        return lax.scan(body, (c0, jnp.int32(0)), (rows, others, never_read), reverse=reverse)

    c0 = np.float32([1.0, -1.0, 0.5])
    rows = np.arange(21, dtype=np.float32).reshape(7, 3) / 10
    others = np.linspace(0, 1, 28).astype(np.float32).reshape(7, 4)
    never_read = np.ones((7, 2), np.float32)
    a, k = c0.copy(), 0
    ys, ks = np.zeros((7, 3), np.float32), np.zeros(7, np.float32)
    for i in range(6, -1, -1) if reverse else range(7):
        a = a * np.float32(0.5) + rows[i] * others[i][0]
        ys[i], ks[i] = a * 2, k + others[i].sum()
        k += 1
    text = check(f, c0, rows, others, never_read, expected=((a, np.int32(k)), (ys, ks)))
    assert any("one native call" in line for line in compiled_lines(text))


def test_while_with_passthrough_and_unread_carries_is_one_native_call():
    def f(x, n, extra):
        def body(c):
            i, n, v, e = c
            return i + 1, n, v * 1.25 - 0.1, e

        return lax.while_loop(lambda c: c[0] < c[1], body, (jnp.int32(0), n, x, extra))

    x, extra = np.float32([0.5, 2.0]), np.float32(3.0)
    v = x.copy()
    for _ in range(9):
        v = v * np.float32(1.25) - np.float32(0.1)
    text = check(f, x, np.int32(9), extra, expected=(np.int32(9), np.int32(9), v, extra))
    assert any("one native call" in line for line in compiled_lines(text))


def test_rnn_body_with_products_runs_compiled_body():
    rng = np.random.default_rng(1)
    W, U = (rng.standard_normal((4, 4), dtype=np.float32) * 0.3 for _ in range(2))
    b = np.float32([0.1, 0.0, -0.1, 0.2])
    xs = rng.standard_normal((6, 2, 4), dtype=np.float32)
    h0 = np.zeros((2, 4), np.float32)
    h = h0
    for t in range(6):
        h = np.tanh(h @ W + xs[t] @ U + b)
    text = check(_rnn_loss, W, U, b, xs, h0, expected=h.sum(), rtol=1e-5)
    (line,) = compiled_lines(text)
    # 4x4 products are inline sums: the whole body is one native call
    assert "compiled scan" in line and "one native call" in line


def test_rnn_body_with_blas_products_hoists_the_row_invariant_one():
    rng = np.random.default_rng(1)
    W, U = (rng.standard_normal((64, 64), dtype=np.float32) * 0.1 for _ in range(2))
    b = np.linspace(-0.1, 0.1, 64, dtype=np.float32)
    xs = rng.standard_normal((5, 8, 64), dtype=np.float32)
    h0 = np.zeros((8, 64), np.float32)
    h = h0.astype(np.float64)
    for t in range(5):
        h = np.tanh(h @ W + xs[t] @ U + b)
    text = check(_rnn_loss, W, U, b, xs, h0, expected=h.sum(), rtol=1e-4)
    (line,) = compiled_lines(text)
    assert "compiled scan" in line and "row-invariant products hoisted" in line


def test_loop_only_program_compiles_natively():
    f = kiln.jit(lambda x: lax.fori_loop(0, 4, lambda i, c: c * 3, x), backend="native")
    compiled = f.lower(np.int32(2)).compile()
    assert compiled.as_text().splitlines()[0].endswith("backend=native")
    assert int(np.asarray(compiled(np.int32(2)))) == 2 * 81


def test_threads_calling_one_loop_agree():
    from tests._testing import results_in_threads

    f = kiln.jit(lambda x: lax.fori_loop(0, 200, lambda i, c: c * 0.99 + 1.0, x))
    inputs = [np.full(64, float(k), np.float32) for k in range(8)]
    expected = [np.asarray(f(x)) for x in inputs]
    results = results_in_threads(lambda x: np.asarray(f(x)), [(x,) for x in inputs], repeats=20)
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


def test_scan_and_while_whose_outputs_come_from_reference_impls():
    m = np.float32([[0.5, 0.1], [-0.2, 0.9]])

    def f(v, xs):
        def body(c, x):
            p = jnp.cumsum(c) @ jnp.asarray(m)  # (cumsum runs through its impl)
            return p + x, (p, jnp.cumsum(x) @ jnp.asarray(m))

        carry, ys = lax.scan(body, v, xs)
        w = lax.while_loop(
            lambda c: jnp.abs(c).sum() < 50.0, lambda c: jnp.cumsum(c) @ jnp.asarray(m) * 3.0, carry
        )
        return carry, ys, w

    v, xs = np.float32([1.0, 2.0]), np.linspace(-1, 1, 10).astype(np.float32).reshape(5, 2)
    c, ps, qs = v.copy(), [], []
    for x in xs:
        p = np.cumsum(c) @ m
        ps.append(p)
        qs.append(np.cumsum(x) @ m)
        c = p + x
    w = c.copy()
    while np.abs(w).sum() < 50.0:
        w = np.cumsum(w) @ m * np.float32(3.0)
    text = check(f, v, xs, expected=(c, (np.stack(ps), np.stack(qs)), w), rtol=1e-5)
    assert sum("compiled body" in line for line in compiled_lines(text)) == 2


def test_body_with_a_large_kernel_split_across_threads():
    def f(x):
        return lax.fori_loop(0, 3, lambda i, c: jnp.exp(-c) * 0.5 + c * 0.25, x)

    x = np.linspace(0, 1, 1 << 20).astype(np.float32)
    e = x.copy()
    for _ in range(3):
        e = np.exp(-e) * np.float32(0.5) + e * np.float32(0.25)
    check(f, x, expected=e, rtol=1e-5)


def test_threads_calling_a_compiled_body_agree():
    import threading

    m = np.eye(16, dtype=np.float32) * 0.5
    f = kiln.jit(lambda x: lax.fori_loop(0, 50, lambda i, c: c @ jnp.asarray(m) + 1.0, x))
    inputs = [np.full((4, 16), float(k), np.float32) for k in range(6)]
    expected = [np.asarray(f(x)) for x in inputs]
    results = [None] * 6

    def work(k):
        for _ in range(10):
            results[k] = np.asarray(f(inputs[k]))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reverse", [False, True])
def test_hoisted_row_products_feed_ys_and_the_carry(reverse):
    # (large enough to be a BLAS call: a tiny product would be an inline sum in the body)
    u = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32) * 0.1

    def f(c, xs):
        def body(c, x):
            p = jnp.sin(x) @ jnp.asarray(u)  # reads only the row: computed before the loop
            return c * 0.5 + p, (p, c)

        return lax.scan(body, c, xs, reverse=reverse)

    c = np.linspace(0.1, 0.3, 8 * 48).astype(np.float32).reshape(8, 48)
    xs = np.linspace(-2, 2, 4 * 8 * 64).astype(np.float32).reshape(4, 8, 64)
    ps, cs, e = np.zeros((4, 8, 48), np.float32), np.zeros((4, 8, 48), np.float32), c.copy()
    for i in range(3, -1, -1) if reverse else range(4):
        p = np.sin(xs[i]) @ u
        ps[i], cs[i] = p, e
        e = e * np.float32(0.5) + p
    text = check(f, c, xs, expected=(e, (ps, cs)), rtol=1e-4, atol=1e-5)
    (line,) = compiled_lines(text)
    assert "row-invariant products hoisted" in line and "one native call" in line


@pytest.mark.native
def test_loop_bodies_compile_with_the_vectorizing_pipeline(monkeypatch):
    from kiln.runtime import native_segment

    chosen = []
    original = native_segment._pipeline
    monkeypatch.setattr(
        native_segment,
        "_pipeline",
        lambda work, products=False: chosen.append(original(work, products)) or chosen[-1],
    )
    assert original(10) == "quick"  # a small kernel that runs once
    f = kiln.jit(lambda x: lax.fori_loop(0, 50, lambda i, c: c * 0.5 + 1.0, x) * 2.0)
    x = np.arange(8, dtype=np.float32)
    expected = x.copy()
    for _ in range(50):
        expected = expected * np.float32(0.5) + np.float32(1.0)
    np.testing.assert_allclose(np.asarray(f(x)), expected * 2, rtol=1e-6)
    # the body's 8-element kernel runs 50 times: vectorized; the 8-element epilogue: quick
    assert "lean" in chosen and "quick" in chosen

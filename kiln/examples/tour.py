"""A tour of kiln through the examples of the two documents users learn JAX from.

Each section runs one example with `import kiln as jax; import kiln.numpy as jnp` and prints
what it prints. Sections whose output is deterministic carry the text the document (or JAX,
for the vmap example the document only describes) shows, and fail when kiln prints anything
else. Sections that need a capability kiln does not have say so and are skipped.
Run with `make tour` or `python -m kiln.examples.tour`.
"""

from __future__ import annotations

import contextlib
import io
import pprint
import sys
import time
import traceback
from functools import partial

import numpy as np

import kiln as jax
import kiln.numpy as jnp

SECTIONS = []


def section(title: str, needs: tuple[str, ...] = (), expected: str | None = None):
    """Register a tour section; `expected` is the exact text it must print, where known."""

    def register(fn):
        SECTIONS.append((title, needs, expected, fn))
        return fn

    return register


def _has(path: str) -> bool:
    obj = jax
    for part in path.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def show_error(fn):
    """Run fn and print the error it raises as an interactive session would."""
    try:
        fn()
    except Exception as err:  # the point is to show the user-facing error
        print(f"{type(err).__name__}: {err}")
    else:
        print("(no error)")


# --- Part 1: How JAX transformations work ------------------------------------------------------


@section("make_jaxpr of log2 (the side effect is not in the jaxpr)")
def _():
    global_list = []

    def log2(x):
        global_list.append(x)
        ln_x = jnp.log(x)
        ln_2 = jnp.log(2.0)
        return ln_x / ln_2

    print(jax.make_jaxpr(log2)(3.0))


@section("print() runs at trace time and shows a tracer")
def _():
    def log2_with_print(x):
        print("printed x:", x)
        ln_x = jnp.log(x)
        ln_2 = jnp.log(2.0)
        return ln_x / ln_2

    print(jax.make_jaxpr(log2_with_print)(3.0))


@section("a Python conditional on a static attribute")
def _():
    def log2_if_rank_2(x):
        if x.ndim == 2:
            ln_x = jnp.log(x)
            ln_2 = jnp.log(2.0)
            return ln_x / ln_2
        else:
            return x

    print(jax.make_jaxpr(log2_if_rank_2)(jax.numpy.array([1, 2, 3])))


def selu(x, alpha=1.67, lambda_=1.05):
    return lambda_ * jnp.where(x > 0, x, alpha * jnp.exp(x) - alpha)


def _timeit(fn, number=None) -> str:
    fn()
    if number is None:
        start = time.perf_counter()
        fn()
        once = time.perf_counter() - start
        number = max(1, min(1000, int(0.2 / max(once, 1e-7))))
    start = time.perf_counter()
    for _ in range(number):
        fn()
    per = (time.perf_counter() - start) / number
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if per >= scale:
            return f"{per / scale:.3g} {unit} per loop ({number} loops)"
    return f"{per * 1e9:.3g} ns per loop"


@section("selu eagerly and under jit", needs=("jit",))
def _():
    x = jnp.arange(1000000)
    print("eager:", _timeit(lambda: selu(x).block_until_ready(), 5))
    selu_jit = jax.jit(selu)
    selu_jit(x).block_until_ready()
    print("jit:  ", _timeit(lambda: selu_jit(x).block_until_ready()))


@section("jit of value-dependent Python control flow raises", needs=("jit",))
def _():
    def f(x):
        if x > 0:
            return x
        else:
            return 2 * x

    show_error(lambda: jax.jit(f)(10))

    def g(x, n):
        i = 0
        while i < n:
            i += 1
        return x + i

    show_error(lambda: jax.jit(g)(10, 20))


@section("jitting only the loop body", needs=("jit",))
def _():
    @jax.jit
    def loop_body(prev_i):
        return prev_i + 1

    def g_inner_jitted(x, n):
        i = 0
        while i < n:
            i = loop_body(i)
        return x + i

    print(repr(g_inner_jitted(10, 20)))


@section("static_argnums and static_argnames", needs=("jit",))
def _():
    def f(x):
        if x > 0:
            return x
        else:
            return 2 * x

    def g(x, n):
        i = 0
        while i < n:
            i += 1
        return x + i

    f_jit_correct = jax.jit(f, static_argnums=0)
    print(f_jit_correct(10))
    g_jit_correct = jax.jit(g, static_argnames=["n"])
    print(g_jit_correct(10, 20))

    @partial(jax.jit, static_argnames=["n"])
    def g_jit_decorated(x, n):
        i = 0
        while i < n:
            i += 1
        return x + i

    print(g_jit_decorated(10, 20))


@section("jit in a loop: partial, lambda and a named function", needs=("jit",))
def _():
    def unjitted_loop_body(prev_i):
        return prev_i + 1

    def g_inner_jitted_partial(x, n):
        i = 0
        while i < n:
            i = jax.jit(partial(unjitted_loop_body))(i)
        return x + i

    def g_inner_jitted_lambda(x, n):
        i = 0
        while i < n:
            i = jax.jit(lambda x: unjitted_loop_body(x))(i)
        return x + i

    def g_inner_jitted_normal(x, n):
        i = 0
        while i < n:
            i = jax.jit(unjitted_loop_body)(i)
        return x + i

    print("jit called in a loop with partials:")
    print(_timeit(lambda: g_inner_jitted_partial(10, 20).block_until_ready()))
    print("jit called in a loop with lambdas:")
    print(_timeit(lambda: g_inner_jitted_lambda(10, 20).block_until_ready()))
    print("jit called in a loop with caching:")
    print(_timeit(lambda: g_inner_jitted_normal(10, 20).block_until_ready()))


# --- Part 2: On learning JAX --------------------------------------------------------------------


@section("arrays like NumPy")
def _():
    L = [0, 1, 2, 3]
    x_np = np.array(L, dtype=np.int32)
    x_jnp = jnp.array(L, dtype=jnp.int32)
    print((x_np, x_jnp))
    x1 = x_jnp * 2
    x2 = x_jnp + 1
    x3 = x1 + x2
    print((x1, x2, x3))
    print((jnp.dot(x1, x2), jnp.outer(x1, x2)))


@section("stateless randomness: keys are split, never reused", needs=("random",))
def _():
    seed = 0x123456789  # some integer seed. In hexadecimal just to be fancy
    key = jax.random.PRNGKey(seed)
    key, subkey = jax.random.split(key)
    random_jnp = jax.random.uniform(subkey, (5,))
    print(repr(random_jnp))
    print((jax.random.normal(key, (2,)), jax.random.normal(key, (2,))))
    # The document's notebook ran the next cell twice before printing; so does the tour.
    for _ in range(2):
        key, *subkeys = jax.random.split(key, 5)
    print([jax.random.normal(s, (2, 2)) for s in subkeys])


@section("arrays are immutable; .at updates; out-of-bounds indexing")
def _():
    x1 = jnp.array([0, 1, 2, 3], dtype=jnp.int32) * 2

    def assign():
        x1[0] = 5

    show_error(assign)
    x1_p999 = x1.at[0].add(999)
    print((x1, x1_p999))
    print((x1[0], x1[-1], x1[10000]))
    x1 = x1.at[10000].set(999)
    print(repr(x1))


@section("functions reject Python lists")
def _():
    show_error(lambda: jnp.sum([1, 2, 3]))


@section("x @ W + b: make_jaxpr and the compiled program", needs=("jit",))
def _():
    def fn(W, b, x):
        return x @ W + b

    W = jnp.ones((4, 2))
    b = jnp.ones((2,))
    x = jnp.ones((4,))
    print(jax.make_jaxpr(fn)(W, b, x))
    jit_fn = jax.jit(fn)
    print("fn time:    ", _timeit(lambda: fn(W, b, x).block_until_ready()))
    jit_fn(W, b, x).block_until_ready()
    print("jit_fn time:", _timeit(lambda: jit_fn(W, b, x).block_until_ready()))
    print(jax.jit(fn).lower(W, b, x).compile().as_text())


@section("stupid_fn: 1000 dead multiplications compile away", needs=("jit",))
def _():
    def stupid_fn(x):
        y = jnp.copy(x)
        for _ in range(1000):
            x = x * x
        return y

    x = jnp.array([1.1, -1.1, 0.5, 2.0])
    print("stupid_fn time:    ", _timeit(lambda: stupid_fn(x).block_until_ready(), 3))
    jit_stupid_fn = jax.jit(stupid_fn)
    start = time.perf_counter()
    jit_stupid_fn(x).block_until_ready()
    print(f"jit_stupid_fn first call: {time.perf_counter() - start:.3f} s")
    print("jit_stupid_fn time:", _timeit(lambda: jit_stupid_fn(x).block_until_ready()))
    text = str(jax.make_jaxpr(stupid_fn)(x)).splitlines()
    print("\n".join(text[:6] + ["    ..."] + text[-5:]))
    print(jax.jit(stupid_fn).lower(x).compile().as_text())


@section("JIT needs static shapes", needs=("jit",))
def _():
    def create_filled(val, length):
        return jnp.full((length,), val)

    print(create_filled(1.0, 5))
    print(create_filled(2, 2))
    jit_create_filled = jax.jit(create_filled)
    show_error(lambda: jit_create_filled(2, 5))
    jit_create_filled = jax.jit(create_filled, static_argnums=(1,))
    print(jit_create_filled(2, 5))
    print(jit_create_filled(1.0, 10))
    print(jax.make_jaxpr(create_filled, static_argnums=(1,))(2, 5))
    print(jax.make_jaxpr(create_filled, static_argnums=(1,))(1.6, 10))


@section("boolean masks must be concrete under jit", needs=("jit",))
def _():
    def mask_tensor(x, mask):
        x = x.at[mask].set(-100.0)
        return x

    x = jnp.array(np.linspace(-2, 2, 16, dtype=np.float32).reshape(4, 4))
    mask = jnp.array(np.arange(16).reshape(4, 4) % 3 == 0)
    print("calling eager function")
    print(mask_tensor(x, mask))
    print("calling compiled function")
    show_error(lambda: jax.jit(mask_tensor)(x, mask))

    def mask_tensor2(x, mask):
        x = ~mask * x - mask * 100.0
        return x

    print("calling eager function")
    print(mask_tensor2(x, mask))
    print("calling compiled function")
    print(jax.jit(mask_tensor2)(x, mask))


@section("impure functions: a global read at trace time", needs=("jit",))
def _():
    import warnings

    ns = {"jnp": jnp, "jax": jax}
    exec("shift = -1.0\ndef fn(x):\n    return x + shift\n", ns)
    x1 = jnp.array([0, 1, 2])
    x2 = jnp.array([0, -1, 0])
    x3 = jnp.array([0, 1, 2, 3])
    fn = ns["fn"]
    print(fn(x1))
    ns["shift"] = 1.0
    print(fn(x2))
    print(fn(x3))
    ns["shift"] = -1.0
    jit_fn = jax.jit(fn)
    print(jit_fn(x1))
    ns["shift"] = 1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        print(jit_fn(x2))
    for w in caught:
        print(f"(kiln warned: {w.message})")
    print(jit_fn(x3))


@section("print inside jit runs at trace time only", needs=("jit",))
def _():
    def fn(x):
        print("called identity function")
        return x

    jit_fn = jax.jit(fn)
    print("called `jit_fn(0.5)`")
    _ = jit_fn(0.5)
    print("called `jit_fn(1.0)`")
    _ = jit_fn(1.0)
    print("called `jit_fn([-1, 1])`")
    _ = jit_fn(jnp.array([-1, 1]))


@section("a global array becomes an implicit argument", needs=("jit",))
def _():
    ns = {"jnp": jnp}
    exec("b = jnp.array([1,2,3])\ndef fn(x):\n    return x + b\n", ns)
    jit_fn = jax.jit(ns["fn"], on_stale_capture="ignore")
    x = jnp.array([1, 2, 3])
    print(jit_fn(x))
    ns["b"] = jnp.array([0, 0, 0])
    print(jit_fn(x))


@section("configuration read at trace time", needs=("jit",))
def _():
    config = dict(relu=False)

    @jax.jit
    def fn(W, x):
        y = x @ W
        if config["relu"]:
            y = jax.nn.relu(y)
        return y

    W, x = jnp.ones((2, 2)), jnp.ones((2,))
    print(jax.make_jaxpr(fn)(W, x))


@section(
    "loops as primitives: fori_loop becomes scan, and dead loops compile away",
    needs=("jit", "lax.fori_loop"),
)
def _():
    def less_stupid_fn(x):
        y = jnp.copy(x)
        x = jax.lax.fori_loop(start=0, stop=1000, body_fun=lambda i, x: x * x, init_val=x)
        return y

    print(jax.make_jaxpr(less_stupid_fn)(jnp.array([1.1, -1.1])))
    x = jnp.array([1.1, -1.1])
    print(jax.jit(less_stupid_fn).lower(x).compile().as_text())

    def less_stupid_while(x):
        y = jnp.copy(x)
        x = jax.lax.while_loop(
            cond_fun=lambda ix: ix[0] < 1000,
            body_fun=lambda ix: (ix[0] + 1, ix[1] * ix[1]),
            init_val=(0, x),
        )
        return y

    print(jax.make_jaxpr(less_stupid_while)(jnp.array([1.1, -1.1])))


@section("lax.cond and lax.switch under jit", needs=("jit", "lax.cond"))
def _():
    @jax.jit
    def cond_fn(x):
        pred = jnp.abs(x.max() - x.min()) <= 1.0
        return jax.lax.cond(pred, lambda x: x, lambda x: x / 2, x)

    print(cond_fn(jnp.array([0.1, 0.2])))
    print(cond_fn(jnp.array([-0.5, 0.5])))
    print(cond_fn(jnp.array([1.0, -1.0])))
    print(jax.make_jaxpr(cond_fn)(jnp.array([1.0, -1.0])))

    @jax.jit
    def is_even_fast(x):
        return jax.lax.switch(
            x, [(lambda: True) if i % 2 == 0 else (lambda: False) for i in range(1001)]
        )

    print(repr(is_even_fast(123512)))


def _mlp_params(key):
    """The document's MLP parameters: a list of {'W', 'b'} dicts for layers 784 -> 64 -> 10."""
    dims = [784, 64, 10]
    key, *subkeys = jax.random.split(key, len(dims))
    params = [
        {"W": jax.random.normal(w_key, (out_dim, in_dim)), "b": jnp.zeros((out_dim,))}
        for w_key, in_dim, out_dim in zip(subkeys, dims[:-1], dims[1:])
    ]
    return key, dims, params


@jax.jit
def feed_forward(params, x):
    for p in params:
        x = jax.nn.tanh(p["W"] @ x + p["b"])
    return x


@section("pytrees: an MLP's parameters as a list of dicts", needs=("random", "jit"))
def _():
    key, dims, params = _mlp_params(jax.random.PRNGKey(0))
    print(
        (
            jax.tree_util.tree_structure(params),
            jax.tree_util.tree_map(lambda l: str(l.shape), params),
        )
    )
    key, x_key = jax.random.split(key)
    print(repr(feed_forward(params, jax.random.normal(x_key, (dims[0],)))))


@section(
    "grad and value_and_grad",
    needs=("grad", "value_and_grad"),
    expected="""\
10.0
2.0
(Array(10., dtype=float32, weak_type=True), Array(2., dtype=float32, weak_type=True))
""",
)
def _():
    def fn(x):
        return 2 * x  # derivative is 2 everywhere

    print(fn(5.0))
    print(jax.grad(fn)(5.0))
    print(jax.value_and_grad(fn)(5.0))


@section(
    "grad of a loss with respect to a pytree of parameters",
    needs=("random", "jit", "grad"),
    expected="PyTreeDef([{'W': *, 'b': *}, {'W': *, 'b': *}])\n",
)
def _():
    _, dims, params = _mlp_params(jax.random.PRNGKey(0))

    def dummy_loss_fn(params, x):
        y = feed_forward(params, x)
        return y.sum()

    grad_loss_fn = jax.grad(dummy_loss_fn)
    grads = grad_loss_fn(params, jnp.zeros(dims[0]))
    print(jax.tree_util.tree_structure(grads))


@section(
    "second derivative: grad of grad", needs=("grad",), expected="d0x: 2.0, d1x: 6.0, d2x: 12.0\n"
)
def _():
    def fn(x):
        return 2 * x**3

    x = 1.0
    grad_fn = jax.grad(fn)
    grad_grad_fn = jax.grad(grad_fn)
    print(f"d0x: {fn(x)}, d1x: {grad_fn(x)}, d2x: {grad_grad_fn(x)}")


@section(
    "value_and_grad with has_aux",
    needs=("random", "jit", "value_and_grad"),
    expected="""\
((Array(0., dtype=float32),
  Array([0., 0., 0., 0., 0., 0., 0., 0., 0., 0.], dtype=float32)),
 PyTreeDef([{'W': *, 'b': *}, {'W': *, 'b': *}]))
""",
)
def _():
    _, dims, params = _mlp_params(jax.random.PRNGKey(0))

    def dummy_loss_fn(params, x):
        y = feed_forward(params, x)
        return y.sum(), y

    grad_loss_fn = jax.value_and_grad(dummy_loss_fn, has_aux=True)
    values, grads = grad_loss_fn(params, jnp.zeros(dims[0]))
    # The document's notebook displayed the cell's value with IPython's pretty printer;
    # pprint wraps it the same way.
    pprint.pprint((values, jax.tree_util.tree_structure(grads)))


# What JAX 0.10.2 prints for the vmap section (the random MLP's values are not printed: kiln's
# random bits are its own, so only their shape and the batched-vs-looped agreement are).
VMAP_EXPECTED = """\
[ 1.  5. 25.]
[[-2.  0.]
 [ 2.  4.]
 [ 6.  8.]]
(4, 10)
same as one at a time: True
"""


@section(
    "vmap: a per-example function made batched",
    needs=("random", "jit", "vmap"),
    expected=VMAP_EXPECTED,
)
def _():
    def squared_distance(x, y):
        return jnp.sum((x - y) ** 2)  # written for one pair of vectors

    xs = jnp.arange(6.0).reshape(3, 2)
    origin = jnp.array([1.0, 1.0])
    print(jax.vmap(squared_distance, in_axes=(0, None))(xs, origin))
    # Per-example gradients: vmap of grad.
    print(jax.vmap(jax.grad(squared_distance), in_axes=(0, None))(xs, origin))

    key, dims, params = _mlp_params(jax.random.PRNGKey(0))
    batch = jax.random.normal(key, (4, dims[0]))
    batched_feed_forward = jax.vmap(feed_forward, in_axes=(None, 0))
    out = batched_feed_forward(params, batch)
    print(out.shape)
    one_by_one = jnp.stack([feed_forward(params, x) for x in batch])
    # Equal up to float32 rounding: the batched matmul may sum in another order.
    print("same as one at a time:", bool(jnp.allclose(out, one_by_one, atol=1e-5)))


def run_section(fn, expected: str | None) -> bool:
    """Run one section, printing its output; False when it raised or printed something other
    than `expected`."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            fn()
    except Exception:
        print(captured.getvalue(), end="")
        traceback.print_exc(file=sys.stdout)
        return False
    output = captured.getvalue()
    print(output, end="")
    if expected is not None and output != expected:
        print("(output differs from the document; expected:)")
        print(expected, end="")
        return False
    if expected is not None:
        print("(matches the document)")
    return True


def main() -> int:
    failures = skipped = 0
    for title, needs, expected, fn in SECTIONS:
        print(f"\n=== {title} ===")
        missing = [n for n in needs if not _has(n)]
        if missing:
            skipped += 1
            print(f"(skipped: needs {', '.join(missing)}, not available yet)")
            continue
        if not run_section(fn, expected):
            failures += 1
    checked = sum(1 for _, _, expected, _ in SECTIONS if expected is not None)
    print(
        f"\n{len(SECTIONS)} sections ({checked} checked against the document's output), "
        f"{failures} failed, {skipped} skipped"
    )
    return 1 if failures or skipped else 0


if __name__ == "__main__":
    sys.exit(main())

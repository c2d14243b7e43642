"""Where the first call of a new program goes: kiln next to JAX on CPU, with kiln's time split
into its phases (figures, no asserts).

Run: .venv/bin/python benchmarks/bench_first_call.py [--repeat N] [--before PATH] [--warm]
     [--later] [--renamed] [--only WORKLOAD,...]
JAX runs in a separate interpreter: this one if it imports jax, else $KILN_BENCH_JAX_PYTHON
(e.g. /tmp/jaxvenv/bin/python), else it is left out. --before PATH also measures the kiln
checkout at PATH (say, a copy of the tree without a change), so that before/after ratios come
from one run; the two checkouts' processes alternate, so that the machine's drift does not
land on one of them. --warm adds warm starts: each system first fills a fresh persistent cache
(kiln: KILN_CACHE_DIR; JAX: jax_compilation_cache_dir, every entry kept) in one process, then
the first call is timed in fresh processes that find every program there. --later (on in the
combined report) adds each workload as a later program: the process first compiles and runs
two small programs of its own (a gradient through a product, an elementwise program with
reductions), so that the figure is one new program's compile, without what a process pays
once (the compiler's imports, LLVM's and JAX's first-use set-up, BLAS loading). --renamed
(on in the combined report) adds each workload jitted again under another function's name in
the process that has just compiled it (a wrapper that calls the same function): the same
computation as a new program, which kiln's engine finds loaded by its kernel IR (trace and
fusion remain), where JAX compiles it again.

Each figure is one first call of a freshly jitted function (trace, optimize, compile, run) in
a fresh process, the median of --repeat processes (default 5: with 3, one slow process moved
a ratio by a fifth); the `import` row is the package's own import in those processes (kiln,
kiln.numpy / jax, jax.numpy), the rest of a new process's time to its first result. The
workloads:
  * layernorm + softmax on 4096x1024 float32, forward: softmax(layernorm(x) * g + b);
  * its gradient: jit(grad(sum(softmax(layernorm(x) * g + b) * t), argnums=(0, 1, 2)));
  * an MLP 784-512-512-10 on a batch of 128: value_and_grad of softmax cross-entropy and an
    SGD update in one jit;
  * one transformer block (d_model 64, 4 heads, seq 64, batch 8, causal attention, pre-layernorm,
    gelu MLP of width 256): jit(value_and_grad) of the mean square of its output w.r.t. every
    parameter;
  * the seed document's `stupid_fn` made live: x = x * x a thousand times on a float32[4],
    returning x rather than a copy of the input (a long chain of tiny equations: the cost is
    tracing and compiling, not running).
kiln's phases, timed by wrapping the functions that do them: imports (the compiler's modules
that `import kiln` has not loaded: none since kiln's import loads its compiler, as JAX's
loads XLA's; a checkout from before that imported them on its first compile, and the
wrappers need them imported ahead, so their import time is added to the first call), trace
(jaxpr staging), passes (the jaxpr pipeline),
fusion (partition, lowering to kernel IR, fusion planning), emit (kernel IR verification,
scheduling and emission as LLVM IR, and the IR's text), llvm (LLVM's optimization and code
generation, the wall time left after emission: a program's modules compile on two threads,
starting as they are emitted), load (symbol check and linking); "run + rest" is the
remainder: the first run (fresh memory faulted in), argument conversion, the generated call
path and the rest of the build.
The machine is shared and noisy: compare figures from one run.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _harness import result_row  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKLOADS = (
    "layernorm_softmax",
    "layernorm_softmax_grad",
    "mlp_step",
    "transformer_block",
    "seed_multiplies",
)
TITLES = {
    "layernorm_softmax": "layernorm+softmax 4096x1024",
    "layernorm_softmax_grad": "layernorm+softmax grad 4096x1024",
    "mlp_step": "MLP 784-512-512-10 b128 v&g+SGD",
    "transformer_block": "transformer block d64 T64 B8 v&g",
    "seed_multiplies": "1000 multiplies, live, f32[4]",
}
PHASES = ("imports", "trace", "passes", "fusion", "emit", "llvm", "load")

# The programs, written once against numpy-like namespaces, the phase timers and the timed call.
_PROGRAM = r"""
import collections, json, math, sys, time
import numpy as np

system, workload = sys.argv[1], sys.argv[2]
cache_dir = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
mode = sys.argv[4] if len(sys.argv) > 4 else "cold"
later, renamed = mode == "later", mode == "renamed"
phases = collections.Counter()

def timed(owner, name, phase):
    original = getattr(owner, name, None)
    if original is None:
        return
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            phases[phase] += time.perf_counter() - start
    setattr(owner, name, wrapper)

if system == "kiln":
    started = time.perf_counter()
    import kiln, kiln.numpy as jnp
    import_seconds = time.perf_counter() - started
    if cache_dir:
        kiln.config.update("jax_compilation_cache_dir", cache_dir)
    # The compiler's modules, which kiln's import loads (an older checkout imported them
    # during the first call), are imported here to wrap the phase timers; what that still
    # imports is the "imports" phase, counted in the first call as it would be without them.
    started = time.perf_counter()
    from kiln import lax
    from kiln.codegen.llvm import emit, llvm_pipeline
    from kiln.compiler import fusion, pipeline
    from kiln.runtime import engine, native
    from kiln.transforms import jit as jit_module
    timed(jit_module, "trace_to_jaxpr", "trace")
    timed(pipeline, "optimize", "passes")
    timed(fusion, "partition", "fusion")
    timed(fusion, "plan_segment", "fusion")
    from kiln.compiler import kir
    timed(kir, "verify_program", "emit")
    timed(emit, "emit_program", "emit")
    timed(emit, "emit_kernels", "emit")
    timed(emit, "emit_row_part", "emit")  # (the row part of a program cut in two)
    from kiln.codegen.llvm import ir_text
    timed(ir_text, "module_text", "emit")  # (an emitted module's text)
    # LLVM's wall time after emission: one module in this thread, or the rest of a stream
    # of modules that two threads compile as they are emitted.
    timed(engine._optimizer, "optimize", "llvm")
    try:
        from kiln.runtime import llvm_threads
        timed(llvm_threads.Stream, "finish", "llvm")
    except ImportError:  # (a checkout from before the stream: --before)
        timed(engine._optimizer, "optimize_many", "llvm")
    timed(engine, "load_object", "load")
    phases["imports"] = time.perf_counter() - started
    jit, grad, value_and_grad = kiln.jit, kiln.grad, kiln.value_and_grad
    block = kiln.block_until_ready
    tree_map, stop_gradient = kiln.tree_util.tree_map, lax.stop_gradient
else:
    started = time.perf_counter()
    import jax, jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    import_seconds = time.perf_counter() - started
    if cache_dir:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jit, grad, value_and_grad, block = jax.jit, jax.grad, jax.value_and_grad, jax.block_until_ready
    tree_map, stop_gradient, lax = jax.tree_util.tree_map, jax.lax.stop_gradient, jax.lax

def softmax(z):
    z = z - stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    e = jnp.exp(z)
    return e / jnp.sum(e, axis=-1, keepdims=True)

def log_softmax(z):
    z = z - stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    return z - jnp.log(jnp.sum(jnp.exp(z), axis=-1, keepdims=True))

def layernorm(x, g=1.0, b=0.0, eps=1e-5):
    c = x - jnp.mean(x, axis=-1, keepdims=True)
    return c * lax.rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + eps) * g + b

def gelu(x):
    return 0.5 * x * (1.0 + jnp.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

rng = np.random.default_rng(0)

def normal(*shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)

def layernorm_softmax():
    def forward(x, g, b):
        return softmax(layernorm(x) * g + b)
    x = normal(4096, 1024)
    return jit(forward), (x, 1.0 + normal(1024, scale=0.1), normal(1024, scale=0.1))

def layernorm_softmax_grad():
    def loss(x, g, b, t):
        return jnp.sum(softmax(layernorm(x) * g + b) * t)
    args = (normal(4096, 1024), 1.0 + normal(1024, scale=0.1), normal(1024, scale=0.1),
            normal(4096, 1024))
    return jit(grad(loss, argnums=(0, 1, 2))), args

def mlp_step():
    sizes = (784, 512, 512, 10)
    params = [(normal(m, n, scale=1 / math.sqrt(m)), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    def loss(params, x, y):
        for w, b in params[:-1]:
            x = jnp.maximum(x @ w + b, 0.0)
        w, b = params[-1]
        return -jnp.mean(jnp.sum(log_softmax(x @ w + b) * y, axis=-1))
    def step(params, x, y):
        value, grads = value_and_grad(loss)(params, x, y)
        return value, tree_map(lambda p, g: p - 0.01 * g, params, grads)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
    return jit(step), (params, normal(128, 784), y)

def transformer_block(heads=4, d=64, t=64, batch=8):
    def block(p, x):
        size = d // heads
        h = layernorm(x, p["g1"], p["b1"])
        qkv = h @ p["wqkv"]
        def split(z):
            return jnp.transpose(jnp.reshape(z, (batch, t, heads, size)), (0, 2, 1, 3))
        q, k, v = split(qkv[..., :d]), split(qkv[..., d:2 * d]), split(qkv[..., 2 * d:])
        s = (q @ jnp.swapaxes(k, -1, -2)) / math.sqrt(size)
        s = jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), s, -1e9)
        o = jnp.reshape(jnp.transpose(softmax(s) @ v, (0, 2, 1, 3)), (batch, t, d))
        x = x + o @ p["wo"]
        h = layernorm(x, p["g2"], p["b2"])
        return x + gelu(h @ p["w1"] + p["c1"]) @ p["w2"] + p["c2"]
    def loss(p, x):
        return jnp.mean(block(p, x) ** 2)
    p = {"g1": np.ones(d, np.float32), "b1": np.zeros(d, np.float32),
         "g2": np.ones(d, np.float32), "b2": np.zeros(d, np.float32),
         "wqkv": normal(d, 3 * d, scale=d ** -0.5), "wo": normal(d, d, scale=d ** -0.5),
         "w1": normal(d, 4 * d, scale=d ** -0.5), "c1": np.zeros(4 * d, np.float32),
         "w2": normal(4 * d, d, scale=(4 * d) ** -0.5), "c2": np.zeros(d, np.float32)}
    return jit(value_and_grad(loss)), (p, normal(batch, t, d))

def seed_multiplies():
    def live_fn(x):
        for _ in range(1000):
            x = x * x
        return x
    return jit(live_fn), (np.array([1.0, 0.999, -1.0001, 0.5], np.float32),)

def other_programs():
    # What a process that has compiled before has done: two other programs, one with a
    # gradient and a product, one elementwise with reductions, on other shapes.
    w, x = normal(48, 24), normal(16, 48)
    block(jit(grad(lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2)))(w, x))
    block(jit(lambda x: jnp.exp(x).max(axis=0) - jnp.sum(x * 2.0, axis=0))(normal(96, 40)))

modules_before = 0
if later:
    other_programs()
    phases.clear()  # (only the timed program's phases; its imports were done)
    if system == "kiln" and getattr(engine, "compile_stats", None):
        modules_before = engine.compile_stats()["modules"]
fn, args = globals()[workload]()
if renamed:
    # The same computation jitted again under another function's name, once the process has
    # compiled it: a new program to the jit cache, with the kernels of one compiled already.
    block(fn(*args))
    inner = fn.__wrapped__

    def renamed_program(*a):
        return inner(*a)

    fn = jit(renamed_program)
    phases.clear()
    if system == "kiln" and getattr(engine, "compile_stats", None):
        modules_before = engine.compile_stats()["modules"]
start = time.perf_counter()
block(fn(*args))
first = time.perf_counter() - start + phases["imports"]
start = time.perf_counter()
block(fn(*args))
second = time.perf_counter() - start
result = {"first": first, "second": second, "import": import_seconds}
if system == "kiln":
    result["phases"] = dict(phases)
    stats = getattr(engine, "compile_stats", None)
    result["modules"] = stats()["modules"] - modules_before if stats else None
print(json.dumps(result))
"""


def jax_python() -> str | None:
    if importlib.util.find_spec("jax") is not None:
        return sys.executable
    candidate = os.environ.get("KILN_BENCH_JAX_PYTHON")
    return candidate if candidate and pathlib.Path(candidate).exists() else None


def run_one(
    python: str,
    system: str,
    workload: str,
    root: pathlib.Path,
    cache: str | None = None,
    mode: str = "cold",
) -> dict | None:
    """One first call in a fresh interpreter (with a persistent cache at `cache`, if given;
    mode "later": after the process has compiled two other programs, "renamed": the workload
    jitted again under another name after its own first call); None if it failed."""
    inherited = os.environ.get("PYTHONPATH", "")
    path = os.pathsep.join(filter(None, [str(root), inherited])) if system == "kiln" else inherited
    env = dict(os.environ, PYTHONPATH=path)
    try:
        done = subprocess.run(
            [python, "-c", _PROGRAM, system, workload, cache or "-", mode],
            env=env,
            cwd=str(root),
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        print(f"  ({system} {workload} failed: {done.stderr.strip().splitlines()[-1:]})")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_runs(
    python: str,
    system: str,
    workload: str,
    roots: list[pathlib.Path],
    repeat: int,
    warm: bool = False,
    mode: str = "cold",
) -> list:
    """For each checkout in `roots`, the run with the median first call of `repeat` fresh
    processes (None if every one failed); the checkouts' processes alternate, so that drift
    in the machine's load lands on all of them alike. `warm`: each process finds the program
    in a persistent cache (one per checkout) that one earlier process filled. `mode`: see
    run_one."""
    with contextlib.ExitStack() as stack:
        caches: list = [None] * len(roots)
        if warm:
            for n, root in enumerate(roots):
                scratch = stack.enter_context(
                    tempfile.TemporaryDirectory(prefix=f"first_call_{system}_")
                )
                caches[n] = os.path.join(scratch, "cache")
                if run_one(python, system, workload, root, caches[n]) is None:
                    caches[n] = False  # (the filling process failed: no runs)
        runs: list[list] = [[] for _ in roots]
        for _ in range(repeat):
            for n, root in enumerate(roots):
                if caches[n] is False:
                    continue
                run = run_one(python, system, workload, root, caches[n], mode)
                if run:
                    runs[n].append(run)
    return [_median_of(found) for found in runs]


def _median_of(runs: list) -> dict | None:
    if not runs:
        return None
    imports = sorted(r.get("import", 0.0) for r in runs)
    runs.sort(key=lambda r: r["first"])
    chosen = runs[(len(runs) - 1) // 2]
    chosen["import_median"] = imports[(len(imports) - 1) // 2]
    return chosen


def _seconds(value: float | None) -> str:
    return f"{value:8.3f} s" if value is not None else f"{'n/a':>10s}"


def _median(values: list) -> float | None:
    values = sorted(v for v in values if v is not None)
    return values[(len(values) - 1) // 2] if values else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:8.2f}x" if a and b else f"{'n/a':>9s}"


def main(
    quick: bool = False,
    repeat: int | None = None,
    before: str | None = None,
    warm: bool = False,
    workloads: tuple[str, ...] = WORKLOADS,
    later: bool = False,
    renamed: bool = False,
) -> list[dict]:
    repeat = repeat or (1 if quick else 5)
    jax_py = jax_python()
    before_root = pathlib.Path(before).resolve() if before else None
    for root in filter(None, (ROOT, before_root)):
        # Both systems start from bytecode, as an installed package does (JAX's was written
        # when pip installed it): without it every module the first call imports lazily
        # would be compiled from source inside the timed call. kiln's kernel library is built
        # ahead too (make does both), as jaxlib ships its compiled runtime.
        compileall.compile_dir(str(root / "kiln"), quiet=1)
        if (root / "kiln" / "runtime" / "kernel_library.py").exists():
            subprocess.run(
                [sys.executable, "-m", "kiln.runtime.kernel_library"], cwd=root, check=True
            )
    print(f"first call of a fresh jit (trace + compile + run), median of {repeat} processes")
    if jax_py is None:
        print("(JAX not available: set KILN_BENCH_JAX_PYTHON)")
    modes = ("cold",) + (("warm",) if warm else ()) + (("later",) if later else ())
    modes += ("renamed",) if renamed else ()
    results = {}
    for workload in workloads:
        for mode in modes:
            # kiln's runs first, then JAX's, so that their worker threads never compete.
            hot, run_mode = mode == "warm", "cold" if mode == "warm" else mode
            roots = [ROOT, before_root] if before_root else [ROOT]
            kiln_run, *before = median_runs(
                sys.executable, "kiln", workload, roots, repeat, hot, run_mode
            )
            before_run = before[0] if before else None
            jax_run = (
                median_runs(jax_py, "jax", workload, [ROOT], repeat, hot, run_mode)[0]
                if jax_py
                else None
            )
            results[workload, mode] = (kiln_run, before_run, jax_run)

    header = f"{'workload':42s}{'kiln':>10s}{'jax':>10s}{'kiln/jax':>9s}"
    if before_root:
        header += f"{'before':>10s}{'before/jax':>11s}{'after/before':>13s}"
    if warm:
        header += f"{'kiln warm/cold':>15s}"
    print("\n" + header)
    print("-" * len(header))
    report = []
    for (workload, mode), (kiln_run, before_run, jax_run) in results.items():
        k = kiln_run and kiln_run["first"]
        j = jax_run and jax_run["first"]
        title = TITLES[workload] + (f" ({mode})" if warm or mode != "cold" else "")
        line = f"{title:42s}{_seconds(k)}{_seconds(j)}{_ratio(k, j)}"
        b = before_run and before_run["first"]
        if before_root:
            line += f"{_seconds(b)}  {_ratio(b, j)}    {_ratio(k, b)}"
        if warm and mode == "warm":
            cold = results[workload, "cold"][0]
            line += f"    {_ratio(k, cold and cold['first'])}"
        print(line)
        note = ""
        if kiln_run:
            phases = kiln_run["phases"]
            note = ", ".join(f"{name} {phases.get(name, 0.0) * 1e3:.0f} ms" for name in PHASES)
        report.append(result_row(f"first call: {title}", k, None, j, note=note))

    # The package's own import, before any of that (kiln, kiln.numpy / jax, jax.numpy), in
    # the same fresh processes: the rest of a new process's time to its first result.
    cold = [runs for (_, mode), runs in results.items() if mode == "cold"]
    k_import = _median([r[0]["import_median"] for r in cold if r[0]])
    j_import = _median([r[2]["import_median"] for r in cold if r[2]])
    line = f"{'import (fresh process)':42s}{_seconds(k_import)}{_seconds(j_import)}"
    line += _ratio(k_import, j_import)
    if before_root:
        b_import = _median([r[1]["import_median"] for r in cold if r[1]])
        line += f"{_seconds(b_import)}  {_ratio(b_import, j_import)}"
        line += f"    {_ratio(k_import, b_import)}"
    print(line)
    report.append(result_row("first call: import kiln / jax", k_import, None, j_import))

    print("\nkiln's first call by phase (ms; 'run + rest' = first call - phases)")
    header = f"{'workload':42s}" + "".join(f"{p:>9s}" for p in PHASES) + f"{'run+rest':>10s}"
    header += f"{'modules':>9s}"
    print(header)
    print("-" * len(header))
    for (workload, mode), runs in results.items():
        for label, run in (("", runs[0]), (" (before)", runs[1])):
            if not run:
                continue
            phases = run["phases"]
            rest = run["first"] - sum(phases.values())
            title = TITLES[workload] + (f" {mode}" if warm or mode != "cold" else "") + label
            line = f"{title[:42]:42s}"
            line += "".join(f"{phases.get(p, 0.0) * 1e3:9.0f}" for p in PHASES)
            modules = run.get("modules")
            line += f"{rest * 1e3:10.0f}{modules if modules is not None else '?':>9}"
            print(line)
    return report


def report_rows(quick: bool = False) -> list[dict]:
    """The measured rows in the combined report's format (first programs of fresh processes,
    then each workload as a later program and jitted again under another name); `quick` runs
    each process once."""
    return main(quick, later=True, renamed=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=None, help="fresh processes per figure (default 5)"
    )
    parser.add_argument("--before", default=None, help="another kiln checkout to measure too")
    parser.add_argument(
        "--warm", action="store_true", help="also time warm starts (programs in the disk cache)"
    )
    parser.add_argument(
        "--later",
        action="store_true",
        help="also time each workload as a later program (the process compiled two first)",
    )
    parser.add_argument(
        "--renamed",
        action="store_true",
        help="also time each workload jitted again under another name (after its first call)",
    )
    parser.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"comma-separated workloads (default: all of {', '.join(WORKLOADS)})",
    )
    options = parser.parse_args()
    chosen = tuple(name for name in options.only.split(",") if name)
    unknown = [name for name in chosen if name not in WORKLOADS]
    if unknown:
        parser.error(
            f"--only: unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}"
        )
    main(
        repeat=options.repeat,
        before=options.before,
        warm=options.warm,
        workloads=chosen,
        later=options.later,
        renamed=options.renamed,
    )

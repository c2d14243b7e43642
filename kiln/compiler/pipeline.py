"""The compiler's front half: the named, ordered pass list, `optimize`, and `compile`, which
hands the optimized jaxpr to a backend and returns an Executable.

`KILN_DUMP=jaxpr` (or config.update("kiln_dump", "jaxpr")) prints the jaxpr after each pass to
stderr. Backends register themselves with `register_backend`; the interpreter is always there,
and "native" (the LLVM backend) is looked up in kiln.runtime.native the first time it is asked
for. A backend that cannot compile a program raises NotImplementedError and the interpreter
runs it instead.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from typing import Callable, Sequence

from kiln.compiler.passes import (
    cse,
    dce,
    fold_constants,
    hoist_scan_accumulators,
    inline_calls,
    simplify,
)
from kiln.config import config
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr
from kiln.runtime.executable import Executable, InterpretedExecutable

logger = logging.getLogger("kiln")

#: The optimization passes, in the order they run. DCE runs first so that long dead chains
#: (the seed's stupid_fn) cost nothing in the later passes, and last to sweep up what folding,
#: simplification and CSE left unused.
PASSES: list[tuple[str, Callable[[ClosedJaxpr], ClosedJaxpr]]] = [
    ("inline", inline_calls),
    ("dce", dce),
    ("fold", fold_constants),
    ("simplify", simplify),
    ("scan_accumulators", hoist_scan_accumulators),
    ("cse", cse),
    ("dce", dce),
]

#: Constants larger than this many bytes are never baked into code: the executable receives
#: them as hidden arguments, bound by reference on every call.
LARGE_CONST_BYTES = 1 << 20


def optimize(
    closed: ClosedJaxpr, name: str = "fn", passes: Sequence[tuple[str, Callable]] | None = None
) -> ClosedJaxpr:
    """Run the pass list over `closed` and return the optimized ClosedJaxpr."""
    dump = "jaxpr" in config.dump
    if dump:
        _dump(name, "staged", closed)
    for pass_name, run_pass in PASSES if passes is None else passes:
        closed = run_pass(closed)
        if dump:
            _dump(name, pass_name, closed)
    return closed


def _dump(name: str, stage: str, closed: ClosedJaxpr) -> None:
    print(f"--- kiln: {name} after {stage} ---\n{closed.pretty_print()}", file=sys.stderr)


def split_hidden_consts(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """Turn constants larger than LARGE_CONST_BYTES into leading invars (hidden arguments).

    Returns the program (invars: hidden arguments, then the user's arguments; consts: the
    small constants a backend may bake into code) and the hidden argument values."""
    jaxpr = closed.jaxpr
    small, large = [], []
    for var, value in zip(jaxpr.constvars, closed.consts):
        nbytes = getattr(value, "nbytes", 0)
        (large if nbytes > LARGE_CONST_BYTES else small).append((var, value))
    if not large:
        return closed, []
    program = Jaxpr(
        [v for v, _ in small],
        [v for v, _ in large] + list(jaxpr.invars),
        jaxpr.outvars,
        jaxpr.eqns,
        jaxpr.effects,
    )
    return ClosedJaxpr(program, [c for _, c in small]), [c for _, c in large]


# --- backends --------------------------------------------------------------------------------

BackendFactory = Callable[[ClosedJaxpr, list, str], Executable]

_backends: dict[str, BackendFactory] = {"interpreter": InterpretedExecutable}
_probed: set[str] = set()
_probe_lock = threading.Lock()
_BACKEND_MODULES = {"native": "kiln.runtime.native"}
#: Other spellings of backend names ("interpret" is what KILN_BACKEND and jit(backend=) take).
_BACKEND_ALIASES = {"interpret": "interpreter"}


#: The modules a backend's compile imports inside functions, which preload imports with the
#: package after the backend's own module: for the native backend, the row cut's emitter, the
#: vector math library with exp and log (the transcendentals most programs use), kernel IR
#: verification and fusion's column-sum folding.
_PRELOADED_MODULES = {
    "native": (
        "kiln.codegen.llvm.emit_rows",
        "kiln.codegen.llvm.vmath",
        "kiln.codegen.llvm.vmath_exp_log",
        "kiln.compiler.kir_verify",
        "kiln.compiler.fusion_columns",
    ),
}


def preload() -> None:
    """Import the configured backend's compiler now (kiln's own import calls this, as
    `import jax` loads XLA's compiler): the backend's module (_backend_factory, as a first
    compile does) and its _PRELOADED_MODULES. The first call of a program then pays for
    tracing, compiling and running it, not for loading the compiler's Python (~8 ms on the
    native backend). Then the backend's _PREPARE_HOOKS entry starts its own set-up in the
    background (the native backend's LLVM). A backend that does not import, or an unknown
    KILN_BACKEND, is left for the first compile to handle and report, as before."""
    try:
        backend = resolve_backend(None)
    except ValueError:
        return
    if _backend_factory(backend) is None:
        return
    for module in _PRELOADED_MODULES.get(backend, ()):
        try:
            importlib.import_module(module)
        except Exception as err:  # (each is imported again, and reports, where it is used)
            logger.debug("kiln: could not preload %s (%s)", module, err)
    hook = _PREPARE_HOOKS.get(backend)
    if hook is not None:
        module, function = hook
        try:
            getattr(importlib.import_module(module), function)()
        except Exception as err:  # (the first compile makes what it needs, and reports)
            logger.debug("kiln: could not prepare the %s backend (%s)", backend, err)


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make `factory(program, hidden_args, name) -> Executable` available as backend `name`."""
    _backends[name] = factory


def known_backends() -> list[str]:
    return sorted(set(_backends) | set(_BACKEND_MODULES) | set(_BACKEND_ALIASES) | {"cpu"})


#: What preload then starts for a backend, as (module, function): for the native backend,
#: LLVM's set-up on its helper thread (runtime/llvm_prepare.py).
_PREPARE_HOOKS = {"native": ("kiln.runtime.llvm_prepare", "prepare_soon")}


def resolve_backend(backend: str | None) -> str:
    """The backend a request means: None and "cpu" mean the configured default."""
    if backend is None or backend == "cpu":
        backend = config.backend
    backend = _BACKEND_ALIASES.get(backend, backend)
    if backend == "cpu":  # KILN_BACKEND=cpu: the default native backend
        backend = "native"
    if backend not in _backends and backend not in _BACKEND_MODULES:
        raise ValueError(f"Unknown backend {backend!r}; kiln knows {', '.join(known_backends())}.")
    return backend


def _backend_factory(backend: str) -> BackendFactory | None:
    factory = _backends.get(backend)
    if factory is None and backend in _BACKEND_MODULES:
        with _probe_lock:
            if backend not in _probed:
                _probed.add(backend)
                try:
                    importlib.import_module(_BACKEND_MODULES[backend])
                except Exception as err:  # a missing or broken backend must not break jit
                    logger.debug(
                        "kiln: backend %r unavailable (%s); using the interpreter", backend, err
                    )
        factory = _backends.get(backend)
    return factory


def compile(
    closed: ClosedJaxpr,
    backend: str | None = None,  # noqa: A001 (the natural name)
    name: str = "fn",
) -> Executable:
    """Compile an optimized ClosedJaxpr for `backend` (default: config.backend)."""
    backend = resolve_backend(backend)
    program, hidden = split_hidden_consts(closed)
    factory = _backend_factory(backend)
    if factory is not None and factory is not InterpretedExecutable:
        try:
            return _build(factory, backend, program, hidden, name)
        except NotImplementedError as err:
            logger.debug(
                "kiln: backend %r cannot compile %s (%s); using the interpreter", backend, name, err
            )
    return InterpretedExecutable(program, hidden, name)


def _build(factory, backend: str, program: ClosedJaxpr, hidden: list, name: str) -> Executable:
    """factory(program, hidden, name); the native backend's build records or replays its
    plans through the disk cache (kiln.runtime.program_cache), and a build that fails while
    replaying is done again from scratch (its records then replace the entry)."""
    if backend != "native" or not config.cache_dir:
        return factory(program, hidden, name)
    from kiln.runtime import program_cache

    session = None
    try:
        with program_cache.session(program, hidden, name) as session:
            return factory(program, hidden, name)
    except Exception:
        if session is None or not session.replaying:
            raise
        logger.warning("kiln: the cached build of %s did not work; building it afresh", name)
    with program_cache.session(program, hidden, name, replay=False):
        return factory(program, hidden, name)

"""Process-wide flags of kiln, read from the environment at import and changed with `update`.

Every flag that changes what tracing produces (x64) is part of the compile-cache key; see
`trace_context()`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable, Iterator


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """The process environment with `values` set within the block, then as it was: for a
    native library whose initializers read it (kiln/primitives/blas.py loads scipy's
    OpenBLAS with one thread so that it starts no spinning workers)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def _thread_count(value) -> int | None:
    """kiln_num_threads as stored: None (one thread per core) or a positive int."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(
            f"kiln_num_threads must be a positive int or None (one thread per core), got {value!r}"
        )
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(
            f"kiln_num_threads must be a positive int or None (one thread per core), got {value!r}"
        )
    return count


def _keyed(name: str, convert: Callable) -> property:
    """A Config property that stores convert(value) and refreshes the compile-cache key."""
    private = f"_{name}"

    def get(self):
        return getattr(self, private)

    def set(self, value) -> None:
        setattr(self, private, convert(value))
        self._key_changed()

    return property(get, set)


class Config:
    """Holds kiln's flags; `kiln.config.update(name, value)` changes one."""

    _aliases = {
        "jax_enable_x64": "enable_x64",
        "jax_log_compiles": "log_compiles",
        "jax_explain_cache_misses": "explain_cache_misses",
        "jax_disable_jit": "disable_jit",
        "jax_threefry_partitionable": "threefry_partitionable",
        "jax_compilation_cache_dir": "cache_dir",
        "jax_debug_nans": "debug_nans",
        "jax_debug_infs": "debug_infs",
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._enable_x64 = self._threefry_partitionable = False
        self._cpu, self._cpu_features = "host", ""
        self._vector_loops, self._num_threads = True, None
        self.trace_key = (False, False, "host", "", True, None)
        self.enable_x64 = _env_bool("KILN_ENABLE_X64")
        self.log_compiles = _env_bool("KILN_LOG_COMPILES")
        self.explain_cache_misses = _env_bool("KILN_EXPLAIN_CACHE_MISSES")
        self.disable_jit = _env_bool("KILN_DISABLE_JIT")
        # kiln.random's counter layout. Off by default: the layout of the JAX releases the
        # seed documents were written with (JAX 0.10.2 itself defaults to on).
        self.threefry_partitionable = _env_bool("KILN_THREEFRY_PARTITIONABLE")
        self.backend = os.environ.get("KILN_BACKEND", "native")
        self.dump = frozenset(
            part.strip() for part in os.environ.get("KILN_DUMP", "").split(",") if part.strip()
        )
        # Compiled signatures kept (all jitted functions together, least recently used out
        # first); each holds its native code, on the order of 100 KB.
        self.compile_cache_size = int(os.environ.get("KILN_COMPILE_CACHE_SIZE", "1024"))
        # The CPU native code is generated for: "host", or an LLVM CPU name such as
        # "x86-64-v3"; cpu_features adds +/- LLVM features after the CPU's own.
        self.cpu = os.environ.get("KILN_CPU", "host").strip() or "host"
        self.cpu_features = os.environ.get("KILN_CPU_FEATURES", "").strip()
        # Modules of LLVM's default pipelines optimized inside this process before the rest go
        # to a worker process (building such a pipeline leaks ~100 KB; the short pipeline of
        # vector-loop modules, built once per thread, does not and always stays here: see
        # runtime/llvm_threads.py).
        self.llvm_in_process_compiles = int(os.environ.get("KILN_LLVM_IN_PROCESS_COMPILES", "256"))
        # The persistent object cache's directory (None: no disk cache).
        self.cache_dir = os.environ.get("KILN_CACHE_DIR") or None
        # Raise native-backend errors instead of falling back to the interpreter (the tests
        # turn it on; KILN_NATIVE_STRICT=1 does too).
        self.native_strict = os.environ.get("KILN_NATIVE_STRICT", "") == "1"
        # Threads a large native kernel is split across (None: one per core).
        self.num_threads = _env_int("KILN_NUM_THREADS")
        # Freeze the cycle collector's heap before the process's first native compile (see
        # kiln/runtime/native.py, freeze_heap_once); KILN_FREEZE_HEAP=0 leaves it alone.
        self.freeze_heap = _env_bool("KILN_FREEZE_HEAP", True)
        # Make LLVM ready (the host target, the helper thread's machine and passes, a first
        # small compile) on LLVM's helper thread after import, off the first compile's path
        # (see kiln/runtime/llvm_prepare.py); KILN_PREPARE_LLVM=0 leaves it to that compile.
        self.prepare_llvm = _env_bool("KILN_PREPARE_LLVM", True)
        # Emit kernels' loops as explicit vector code, compiled with a short LLVM pipeline (see
        # kiln/codegen/llvm/emit_vector.py); KILN_VECTOR_LOOPS=0 leaves them to LLVM's loop
        # vectorizer.
        self.vector_loops = _env_bool("KILN_VECTOR_LOOPS", True)
        # Raise FloatingPointError when an operation produces a NaN (an infinity); see
        # kiln/core/debug_checks.py. check_special is True while either is on.
        self._special_listeners: list[Callable[[], None]] = []
        self._debug_nans = self._debug_infs = self.check_special = False
        self.debug_nans = _env_bool("KILN_DEBUG_NANS") or _env_bool("JAX_DEBUG_NANS")
        self.debug_infs = _env_bool("KILN_DEBUG_INFS") or _env_bool("JAX_DEBUG_INFS")

    # enable_x64 and threefry_partitionable change what tracing produces, cpu, cpu_features and
    # vector_loops the machine code compiled from it, num_threads how its kernels are split
    # across threads (fixed when a program is built): they are properties (_keyed) that keep
    # `trace_key`, the compile-cache key part made of them, current (jit's call path reads it
    # on every call), so that a function jitted before one of them changes compiles again
    # after.
    _KEYED = (
        "enable_x64",
        "threefry_partitionable",
        "cpu",
        "cpu_features",
        "vector_loops",
        "num_threads",
    )

    def _key_changed(self) -> None:
        self.trace_key = tuple(getattr(self, f"_{name}") for name in self._KEYED)

    enable_x64 = _keyed("enable_x64", bool)
    threefry_partitionable = _keyed("threefry_partitionable", bool)
    cpu = _keyed("cpu", str)
    cpu_features = _keyed("cpu_features", str)
    vector_loops = _keyed("vector_loops", bool)
    num_threads = _keyed("num_threads", lambda value: _thread_count(value))

    # debug_nans and debug_infs are properties, so that check_special and the listeners follow
    # every change, through update() or plain assignment alike.
    @property
    def debug_nans(self) -> bool:
        return self._debug_nans

    @debug_nans.setter
    def debug_nans(self, value: bool) -> None:
        self._debug_nans = bool(value)
        self._special_changed()

    @property
    def debug_infs(self) -> bool:
        return self._debug_infs

    @debug_infs.setter
    def debug_infs(self, value: bool) -> None:
        self._debug_infs = bool(value)
        self._special_changed()

    def _special_changed(self) -> None:
        self.check_special = self._debug_nans or self._debug_infs
        for callback in self._special_listeners:
            callback()

    def on_special_change(self, callback: Callable[[], None]) -> None:
        """Call `callback()` after each change of debug_nans or debug_infs."""
        self._special_listeners.append(callback)

    def _canonical_name(self, name: str) -> str:
        name = self._aliases.get(name, name)
        if name.startswith("kiln_"):
            name = name[len("kiln_") :]
        if name.startswith("_") or not hasattr(self, name):
            raise AttributeError(f"Unrecognized config option: {name!r}")
        return name

    def update(self, name: str, value: Any) -> None:
        """Set a flag, e.g. `config.update("jax_enable_x64", True)`."""
        attr = self._canonical_name(name)
        if attr == "check_special":
            raise AttributeError("check_special follows debug_nans and debug_infs; set those")
        if attr == "dump":
            value = frozenset(value.split(",")) if isinstance(value, str) else frozenset(value)
        with self._lock:
            setattr(self, attr, value)

    def read(self, name: str) -> Any:
        return getattr(self, self._canonical_name(name))

    def trace_context(self) -> tuple:
        """The flags that change tracing or the machine code compiled from it; they form part
        of every compile-cache key."""
        return self.trace_key

    def __repr__(self) -> str:
        return (
            f"Config(enable_x64={self.enable_x64}, log_compiles={self.log_compiles}, "
            f"backend={self.backend!r})"
        )


config = Config()
update = config.update


class _FlagState:
    """A boolean flag as JAX exposes it at top level: `.value` reads it, and calling it gives
    a context manager that sets it for a block (`with kiln.debug_nans(True): ...`)."""

    def __init__(self, attr: str, doc: str):
        self._attr = attr
        self.__doc__ = doc

    @property
    def value(self) -> bool:
        return getattr(config, self._attr)

    @contextlib.contextmanager
    def __call__(self, value: bool = True) -> Iterator[None]:
        previous = getattr(config, self._attr)
        config.update(self._attr, value)
        try:
            yield
        finally:
            config.update(self._attr, previous)

    def __repr__(self) -> str:
        return f"<kiln flag {self._attr}={self.value}>"


debug_nans = _FlagState(
    "debug_nans",
    "Inside `with debug_nans(True):`, an operation that produces a NaN raises "
    "FloatingPointError naming it (as `config.update('jax_debug_nans', True)` does).",
)
debug_infs = _FlagState(
    "debug_infs",
    "Inside `with debug_infs(True):`, an operation that produces an infinity raises "
    "FloatingPointError naming it (as `config.update('jax_debug_infs', True)` does).",
)

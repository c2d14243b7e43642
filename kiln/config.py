"""Process-wide flags of kiln, read from the environment at import and changed with `update`.

Every flag that changes what tracing produces (x64) is part of the compile-cache key; see
`trace_context()`.
"""

from __future__ import annotations

import os
import threading
from typing import Any


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


class Config:
    """Holds kiln's flags; `kiln.config.update(name, value)` changes one."""

    _aliases = {
        "jax_enable_x64": "enable_x64",
        "jax_log_compiles": "log_compiles",
        "jax_explain_cache_misses": "explain_cache_misses",
        "jax_disable_jit": "disable_jit",
        "jax_threefry_partitionable": "threefry_partitionable",
        "jax_compilation_cache_dir": "cache_dir",
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
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
        # Modules optimized inside this process before the rest go to a worker process
        # (LLVM's pipeline leaks a little per module; see codegen/llvm/llvm_worker.py).
        self.llvm_in_process_compiles = int(os.environ.get("KILN_LLVM_IN_PROCESS_COMPILES", "256"))
        # The persistent object cache's directory (None: no disk cache).
        self.cache_dir = os.environ.get("KILN_CACHE_DIR") or None
        # Raise native-backend errors instead of falling back to the interpreter (the tests
        # turn it on; KILN_NATIVE_STRICT=1 does too).
        self.native_strict = os.environ.get("KILN_NATIVE_STRICT", "") == "1"
        # Threads a large native kernel is split across (None: one per core).
        self.num_threads = _env_int("KILN_NUM_THREADS")

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
        if attr == "dump":
            value = frozenset(value.split(",")) if isinstance(value, str) else frozenset(value)
        with self._lock:
            setattr(self, attr, value)

    def read(self, name: str) -> Any:
        return getattr(self, self._canonical_name(name))

    def trace_context(self) -> tuple:
        """The flags that change tracing; they form part of every compile-cache key."""
        return (self.enable_x64, self.threefry_partitionable)

    def __repr__(self) -> str:
        return (
            f"Config(enable_x64={self.enable_x64}, log_compiles={self.log_compiles}, "
            f"backend={self.backend!r})"
        )


config = Config()
update = config.update

"""The compile cache of kiln.jit: content keys for functions, per-function entry tables, one
process-wide LRU bound, compile-once under threads, statistics, and the captured-global guard.

A cache key is (function content key, jit options) -> FunctionCache, then inside it
(argument structure, each leaf's (shape, dtype, weak_type), config.trace_context(), backend,
typed static values) -> Entry. The argument structure is the argument count when the call's
arguments are a flat tuple of arrays/scalars (so the hot path never flattens), else the pytree
treedef. Static values are keyed with their type (1, 1.0 and True differ). Functions are keyed
by *content*: two function objects with the same code, closure values, defaults and globals
dict share entries, so `jit(lambda x: body(x))` written inside a loop hits the cache.
"""
from __future__ import annotations

import dis
import functools
import itertools
import math
import threading
import types
import weakref
from typing import Any, Callable

import numpy as np

from kiln.config import config

# --- content keys of functions -----------------------------------------------------------------


class Identity:
    """A key part compared by identity. It holds a strong reference, so the id of a live key can
    never be reused by another object."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other) -> bool:
        return type(other) is Identity and other.obj is self.obj


_MAX_DEPTH = 4
_EMPTY_CELL = ("<empty cell>",)


def _value_key(value: Any, depth: int) -> Any:
    """Closure values, defaults and partial arguments: hashable scalars, strings and tuples of
    them compare by value (floats by their bits, so -0.0 != 0.0); functions by content;
    everything else by identity."""
    t = type(value)
    if t is float:
        return (float, value.hex() if math.isfinite(value) else repr(value))
    if t is complex:
        return (complex, _value_key(value.real, depth), _value_key(value.imag, depth))
    if t in (int, bool, str, bytes, type(None)):
        return (t, value)
    if t is tuple:
        return (tuple, tuple(_value_key(v, depth) for v in value))
    if isinstance(value, np.generic):
        return (t, value.tobytes())
    if depth < _MAX_DEPTH and t in (types.FunctionType, functools.partial, types.MethodType):
        return function_key(value, depth + 1)
    return Identity(value)


def function_key(fun: Callable, depth: int = 0) -> Any:
    """A hashable key equal for functions that compute the same thing: code object, closure
    cell contents, defaults, kwdefaults and the identity of the globals dict; for
    functools.partial the key of its func plus its arguments; anything else by identity."""
    t = type(fun)
    if t is types.FunctionType:
        closure = fun.__closure__
        cells = () if closure is None else tuple(
            _value_key(_cell_value(c), depth) for c in closure)
        kwdefaults = fun.__kwdefaults__
        return ("function", fun.__code__, Identity(fun.__globals__),
                _value_key(fun.__defaults__, depth),
                None if not kwdefaults else tuple(sorted(
                    (k, _value_key(v, depth)) for k, v in kwdefaults.items())),
                cells)
    if t is functools.partial:
        return ("partial", function_key(fun.func, depth),
                tuple(_value_key(a, depth) for a in fun.args),
                tuple(sorted((k, _value_key(v, depth)) for k, v in fun.keywords.items())))
    if t is types.MethodType:
        return ("method", function_key(fun.__func__, depth), Identity(fun.__self__))
    return Identity(fun)


def _cell_value(cell) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return _EMPTY_CELL


# --- entries and per-function tables --------------------------------------------------------

class Traced:
    """One trace of a function for one signature."""

    __slots__ = ("jaxpr", "out_tree", "in_avals", "arg_names", "static_names", "guards",
                 "trace_seconds")

    def __init__(self, jaxpr, out_tree, in_avals, arg_names, static_names, guards,
                 trace_seconds):
        self.jaxpr = jaxpr
        self.out_tree = out_tree
        self.in_avals = in_avals
        self.arg_names = arg_names
        self.static_names = static_names
        self.guards = guards
        self.trace_seconds = trace_seconds


class Entry:
    """A cache entry: the trace and, once compiled, the executable. `fast` is True when a hit
    needs no check (compiled, and no captured globals to watch)."""

    __slots__ = ("key", "fc", "traced", "executable", "execute", "fast", "stamp", "in_avals",
                 "out_tree", "single_output", "guards")

    def __init__(self, key, fc: "FunctionCache", traced: Traced):
        self.key = key
        self.fc = fc
        self.traced = traced
        self.executable = None
        self.execute = None
        self.in_avals = traced.in_avals
        self.out_tree = traced.out_tree
        self.single_output = traced.out_tree.num_nodes == 1 and traced.out_tree.num_leaves == 1
        self.guards = traced.guards
        self.fast = False
        self.stamp = 0

    def set_executable(self, executable) -> None:
        self.executable = executable
        self.execute = executable.execute
        self.fast = not self.guards


class _Pending:
    """A compilation in progress; other threads wanting the same key wait for it."""

    __slots__ = ("thread", "event", "error")

    def __init__(self):
        self.thread = threading.get_ident()
        self.event = threading.Event()
        self.error: BaseException | None = None


class FunctionCache:
    """The entries of one function (by content) under one set of jit options."""

    __slots__ = ("name", "source", "entries", "pending", "hits", "misses", "traces",
                 "compiles", "warned_recompiles", "warned_stale", "seen_keys", "__weakref__")

    def __init__(self, name: str, source: str | None):
        self.name = name
        self.source = source
        self.entries: dict = {}
        self.pending: dict = {}
        self.hits = 0
        self.misses = 0
        self.traces = 0
        self.compiles = 0
        self.warned_recompiles = False
        self.warned_stale: set = set()
        # Keys of signatures seen before (even if evicted since), for miss explanations.
        self.seen_keys: list = []

    def clear(self) -> None:
        with _lock:
            for entry in self.entries.values():
                _all_entries.pop(id(entry), None)
            self.entries.clear()


_lock = threading.RLock()
_registry: "weakref.WeakValueDictionary[Any, FunctionCache]" = weakref.WeakValueDictionary()
_all_entries: dict[int, Entry] = {}
_clock = itertools.count(1)


class _Stats:
    __slots__ = ("hits", "misses", "traces", "compiles", "evictions")

    def __init__(self):
        self.hits = self.misses = self.traces = self.compiles = self.evictions = 0


stats = _Stats()


def function_cache(key: Any, name: str, source: str | None) -> FunctionCache:
    """The shared FunctionCache for a function content key plus jit options."""
    fc = _registry.get(key)
    if fc is None:
        with _lock:
            fc = _registry.get(key)
            if fc is None:
                fc = FunctionCache(name, source)
                _registry[key] = fc
    return fc


def insert(fc: FunctionCache, key, entry: Entry) -> None:
    """Add (or replace) an entry and evict least-recently-used entries beyond the bound."""
    with _lock:
        old = fc.entries.get(key)
        if old is not None:
            _all_entries.pop(id(old), None)
        fc.entries[key] = entry
        entry.stamp = next(_clock)
        _all_entries[id(entry)] = entry
        capacity = max(int(config.compile_cache_size), 1)
        while len(_all_entries) > capacity:
            victim = min(_all_entries.values(), key=lambda e: e.stamp)
            _all_entries.pop(id(victim))
            victim.fc.entries.pop(victim.key, None)
            stats.evictions += 1


def lookup_or_build(fc: FunctionCache, key, trace: Callable[[], Traced],
                    compile_traced: Callable[[Traced], Any] | None,
                    retrace: bool = False, on_miss: Callable[[], None] | None = None) -> Entry:
    """The entry for `key`, tracing (and compiling, when `compile_traced` is given) on a miss.

    Concurrent callers of one key trace and compile once: the first becomes the owner, the
    others wait for its result (or its exception). A failed trace or compile leaves nothing
    behind. `retrace` forces a new trace even if an entry exists."""
    while True:
        with _lock:
            entry = fc.entries.get(key)
            ready = entry is not None and not retrace and (
                compile_traced is None or entry.executable is not None)
            if ready:
                return entry
            pending = fc.pending.get(key)
            owner = pending is None
            if owner:
                pending = fc.pending[key] = _Pending()
        if owner:
            break
        if pending.thread == threading.get_ident():
            raise RuntimeError(f"kiln.jit: {fc.name} was called with the same signature while "
                               "it was being compiled in the same thread (recursion?).")
        pending.event.wait()
        if pending.error is not None:
            raise pending.error
        retrace = False  # another thread just did the retrace this caller asked for
    try:
        if entry is None or retrace:
            if on_miss is not None:
                on_miss()
            fc.misses += 1
            stats.misses += 1
            traced = trace()
            fc.traces += 1
            stats.traces += 1
            entry = Entry(key, fc, traced)
            with _lock:
                fc.seen_keys.append(key)
                if len(fc.seen_keys) > 64:
                    del fc.seen_keys[:-64]
        if compile_traced is not None:
            executable = compile_traced(entry.traced)
            fc.compiles += 1
            stats.compiles += 1
            entry.set_executable(executable)
        insert(fc, key, entry)
        return entry
    except BaseException as err:
        pending.error = err
        raise
    finally:
        with _lock:
            fc.pending.pop(key, None)
        pending.event.set()


def add_traced(fc: FunctionCache, key, traced: Traced) -> Entry:
    """Record a trace made under an outer transformation (no executable yet)."""
    with _lock:
        entry = fc.entries.get(key)
        if entry is None:
            fc.traces += 1
            stats.traces += 1
            entry = Entry(key, fc, traced)
            insert(fc, key, entry)
        return entry


def cache_stats() -> dict:
    """Process-wide jit cache statistics."""
    with _lock:
        return {"hits": stats.hits, "misses": stats.misses, "traces": stats.traces,
                "compiles": stats.compiles, "evictions": stats.evictions,
                "entries": len(_all_entries), "capacity": int(config.compile_cache_size)}


def clear_all() -> None:
    """Drop every cached entry (statistics are kept)."""
    with _lock:
        for entry in list(_all_entries.values()):
            entry.fc.entries.pop(entry.key, None)
        _all_entries.clear()


# --- the captured-global guard -------------------------------------------------------------------

_DATA_TYPES: tuple = (np.ndarray, np.generic, bool, int, float, complex)


def _is_data(value: Any) -> bool:
    from kiln.runtime.array import Array
    return isinstance(value, (Array,) + _DATA_TYPES)


@functools.lru_cache(maxsize=4096)
def _global_loads(code: types.CodeType) -> tuple[str, ...]:
    """Names a code object (and the code objects nested in it) loads as globals."""
    names = []
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            names.append(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_global_loads(const))
    return tuple(dict.fromkeys(names))


class Guard:
    """A global variable or closure cell read at trace time that held data."""

    __slots__ = ("kind", "container", "name", "value")

    def __init__(self, kind: str, container: Any, name: str, value: Any):
        self.kind = kind            # "global" or "closure"
        self.container = container  # the globals dict, or the cell
        self.name = name
        self.value = value

    def current(self) -> Any:
        if self.kind == "global":
            return self.container.get(self.name, _EMPTY_CELL)
        return _cell_value(self.container)

    def is_stale(self) -> bool:
        now = self.current()
        if now is self.value:
            return False
        # Rebinding a scalar to an equal scalar of the same type changes nothing.
        if type(now) is type(self.value) and isinstance(now, (bool, int, float, complex, str)):
            if _value_key(now, 0) == _value_key(self.value, 0):
                self.value = now
                return False
        return True


def record_captures(fun: Callable) -> tuple[Guard, ...]:
    """The data-holding globals and closure cells `fun` reads (directly, or through plain
    Python functions it references from the same module, a few levels deep)."""
    guards: dict = {}
    _collect(fun, guards, set(), 0)
    return tuple(guards.values())


def _collect(fun: Any, guards: dict, seen: set, depth: int) -> None:
    if depth > 3 or id(fun) in seen:
        return
    seen.add(id(fun))
    if isinstance(fun, functools.partial):
        _collect(fun.func, guards, seen, depth)
        return
    if isinstance(fun, types.MethodType):
        _collect(fun.__func__, guards, seen, depth)
        return
    if type(fun) is not types.FunctionType:
        return
    code, glob = fun.__code__, fun.__globals__
    for name in _global_loads(code):
        if name not in glob:
            continue
        value = glob[name]
        if _is_data(value):
            guards.setdefault(("global", id(glob), name), Guard("global", glob, name, value))
        elif type(value) is types.FunctionType and value.__globals__ is glob:
            _collect(value, guards, seen, depth + 1)
    for name, cell in zip(code.co_freevars, fun.__closure__ or ()):
        value = _cell_value(cell)
        if _is_data(value):
            guards.setdefault(("closure", id(cell)), Guard("closure", cell, name, value))
        elif type(value) in (types.FunctionType, functools.partial):
            _collect(value, guards, seen, depth + 1)


def stale_guards(entry: Entry) -> list[Guard]:
    return [g for g in entry.guards if g.is_stale()]


# --- cache-miss explanations ------------------------------------------------------------------

def describe_value(value: Any) -> str:
    """A short description of a captured value for warnings."""
    aval = getattr(value, "aval", None)
    if aval is not None or isinstance(value, np.ndarray):
        shape = np.shape(value)
        dtype = getattr(value, "dtype", "")
        return f"an array of shape {shape} and dtype {dtype}"
    return repr(value)


def explain_miss(key, previous: list, names: list[str], static_names) -> str:
    """Why the entry key `key` differs from the closest previously seen key, in words
    (`names`: the argument leaves' names; `static_names`: (name, value) of static args)."""
    in_tree, sig, context, backend, static = key

    def distance(other) -> int:
        o_tree, o_sig, o_context, o_backend, o_static = other
        if o_tree != in_tree or len(o_sig) != len(sig):
            return 1000
        return sum(a != b for a, b in zip(sig, o_sig)) + (o_static != static) * 100 + \
            (o_context != context) + (o_backend != backend)

    closest = min(previous, key=distance)
    o_tree, o_sig, o_context, o_backend, o_static = closest
    reasons = []
    if o_tree != in_tree:
        reasons.append(f"the pytree structure of the arguments changed from "
                       f"{_describe_tree(o_tree)} to {_describe_tree(in_tree)}")
    else:
        for name, now, before in zip(names, sig, o_sig):
            if now == before:
                continue
            if len(now) != 3 or len(before) != 3:  # a value that is not an array
                reasons.append(f"argument {name}: the type of the value changed")
                continue
            (shape, dtype, weak), (o_shape, o_dtype, o_weak) = now, before
            changes = []
            if shape != o_shape:
                changes.append(f"shape {o_shape} -> {shape}")
            if dtype != o_dtype:
                changes.append(f"dtype {o_dtype} -> {dtype}")
            if weak != o_weak:
                changes.append(f"weak_type {o_weak} -> {weak}")
            reasons.append(f"argument {name}: {', '.join(changes)}")
    if o_static != static:
        old = dict(_flatten_static(o_static))
        for (label, _), (position, typed) in zip(static_names, _flatten_static(static)):
            before = old.get(position)
            if before != typed:
                was = "not passed" if before is None else repr(before[1])
                reasons.append(f"static argument {label}: {was} -> {typed[1]!r}")
    if o_context != context:
        reasons.append(f"config flags that affect tracing changed: {o_context} -> {context}")
    if o_backend != backend:
        reasons.append(f"backend changed: {o_backend} -> {backend}")
    if not reasons:
        reasons.append("this signature was compiled before, but its entry was evicted or "
                       "cleared")
    return "; ".join(reasons)


def _describe_tree(tree) -> str:
    return f"{tree} array arguments" if isinstance(tree, int) else str(tree)


def _flatten_static(static) -> list:
    if not static:
        return []
    static_args, static_kwargs = static
    return [(i, (t, v)) for i, t, v in static_args] + [(k, (t, v)) for k, t, v in static_kwargs]

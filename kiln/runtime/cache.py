"""The compile cache of kiln.jit: content keys for functions, per-function entry tables, one
process-wide LRU bound, compile-once under threads, statistics, and the captured-value guards.

A cache key is (function content key, jit options) -> FunctionCache, then inside it
(argument structure, each leaf's (shape, dtype, weak_type), config.trace_context(), backend,
typed static values) -> Entry. The argument structure is the argument count when the call's
arguments are a flat tuple of arrays/scalars (so the hot path never flattens), else the pytree
treedef. Static values are keyed with their type (1, 1.0 and True differ). Functions are keyed
by *content*: two function objects with the same code, closure values, defaults and globals
dict share entries, so `jit(lambda x: body(x))` written inside a loop hits the cache.

Sharing by content is only sound while the globals, closure cells and attributes the function
read at trace time still hold the same values, so every entry records them (Guard). Each jitted
object looks entries up in its own AdoptedTable: an entry it traced, or one it adopted after
checking that every guard is still current. An entry whose guards went stale keeps serving the
objects that already use it (a jitted function keeps its trace-time values, as in JAX), while a
new object moves to a fresh FunctionCache (`successor`) and traces with today's values.
The content keys and the guards live in capture_guards.py and are re-exported here.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Callable

from kiln.config import config
from kiln.runtime.capture_guards import (  # noqa: F401  (re-exported: moved to capture_guards.py)
    Identity,
    _MAX_DEPTH,
    _EMPTY_CELL,
    _value_key,
    function_key,
    _cell_value,
    _SCALAR_TYPES,
    _CONTAINER_TYPES,
    _MAX_CONTAINER_ITEMS,
    _WATCHED_TYPES,
    _is_array,
    _is_data,
    _container_items,
    _capture_key,
    Guard,
    stale_guards,
    record_captures,
    _collect,
    _add,
    _add_bound,
    _collect_attributes,
    _global_loads,
    _attribute_loads_after,
    _module_attribute_loads,
    _self_attribute_loads,
    _KILN_DIR,
    _LIBRARY_DIRS,
    _is_user_file,
    _is_user_code,
    _is_user_module,
    describe_value,
)

# --- entries and per-function tables --------------------------------------------------------


class Traced:
    """One trace of a function for one signature."""

    __slots__ = (
        "jaxpr",
        "out_tree",
        "in_avals",
        "arg_names",
        "static_names",
        "guards",
        "trace_seconds",
    )

    def __init__(self, jaxpr, out_tree, in_avals, arg_names, static_names, guards, trace_seconds):
        self.jaxpr = jaxpr
        self.out_tree = out_tree
        self.in_avals = in_avals
        self.arg_names = arg_names
        self.static_names = static_names
        self.guards = guards
        self.trace_seconds = trace_seconds


class Entry:
    """A cache entry: the trace and, once compiled, the executable.

    `guards` are the captured values at trace time (checked before a new jitted object adopts
    the entry); `watched` are those its users still check on each call, to warn or retrace
    when one is rebound. `fast` is True when a hit needs no check (compiled, nothing watched).
    `tables` are the AdoptedTables holding the entry, emptied when it is evicted."""

    __slots__ = (
        "key",
        "fc",
        "traced",
        "executable",
        "execute",
        "fast",
        "stamp",
        "in_avals",
        "out_tree",
        "single_output",
        "guards",
        "watched",
        "tables",
    )

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
        self.watched = tuple(g for g in traced.guards if g.watched) if fc.watch_captures else ()
        self.tables: weakref.WeakSet = weakref.WeakSet()
        self.fast = False
        self.stamp = 0

    def set_executable(self, executable) -> None:
        self.executable = executable
        self.execute = executable.execute
        self.fast = not self.watched

    def unwatch(self, guards) -> None:
        """Stop checking `guards` on each call (their users were warned once)."""
        self.watched = tuple(g for g in self.watched if g not in guards)
        self.fast = self.executable is not None and not self.watched


class AdoptedTable(dict):
    """The entries one jitted object may use without checking its captured values again, by
    entry key: those it traced and those it adopted. Its hot path is one lookup here.
    Tables compare by identity, so that entries can keep a weak set of them."""

    __slots__ = ("__weakref__", "last")
    __hash__ = object.__hash__

    def __init__(self):
        super().__init__()
        #: The last plain call's (argument signatures, trace key, backend, entry): a call with
        #: the same signature objects (interned, see intern_signature) skips the lookup.
        #: Dropped whenever an entry leaves the table.
        self.last = None

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return self is not other

    def __delitem__(self, key) -> None:
        self.last = None
        super().__delitem__(key)

    def clear(self) -> None:
        self.last = None
        super().clear()

    def pop(self, *args):
        self.last = None
        return super().pop(*args)


_SIGNATURES: dict = {}


def intern_signature(signature: tuple) -> tuple:
    """The one (shape, dtype, weak_type) tuple for its value, so that a cached signature can
    be compared by identity."""
    found = _SIGNATURES.get(signature)
    if found is None:
        if len(_SIGNATURES) > 4096:  # (bounded: shapes of a long session come and go)
            _SIGNATURES.clear()
        found = _SIGNATURES[signature] = signature
    return found


class _Pending:
    """A compilation in progress; other threads wanting the same key wait for it."""

    __slots__ = ("thread", "event", "error")

    def __init__(self):
        self.thread = threading.get_ident()
        self.event = threading.Event()
        self.error: BaseException | None = None


class FunctionCache:
    """The entries of one function (by content) under one set of jit options.

    `watch_captures` is False when its users asked not to be told about rebound captures
    (their entries still record guards, so that new function objects never reuse stale
    traces)."""

    __slots__ = (
        "name",
        "source",
        "watch_captures",
        "entries",
        "pending",
        "hits",
        "misses",
        "traces",
        "compiles",
        "warned_recompiles",
        "warned_stale",
        "seen_keys",
        "__weakref__",
    )

    def __init__(self, name: str, source: str | None, watch_captures: bool = True):
        self.name = name
        self.source = source
        self.watch_captures = watch_captures
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
            for entry in list(self.entries.values()):
                forget(entry)


_lock = threading.RLock()
_registry: "weakref.WeakValueDictionary[Any, FunctionCache]" = weakref.WeakValueDictionary()
_all_entries: dict[int, Entry] = {}
_clock = itertools.count(1)


class _Stats:
    __slots__ = ("hits", "misses", "traces", "compiles", "evictions")

    def __init__(self):
        self.hits = self.misses = self.traces = self.compiles = self.evictions = 0


stats = _Stats()


def function_cache(
    key: Any, name: str, source: str | None, watch_captures: bool = True
) -> FunctionCache:
    """The shared FunctionCache for a function content key plus jit options."""
    fc = _registry.get(key)
    if fc is None:
        with _lock:
            fc = _registry.get(key)
            if fc is None:
                fc = FunctionCache(name, source, watch_captures)
                _registry[key] = fc
    return fc


def successor(key: Any, stale: FunctionCache) -> FunctionCache:
    """The FunctionCache that replaces `stale` for new jitted objects of content key `key`.

    Called when an entry of `stale` was traced with captured values that have changed since:
    the objects using that entry keep it (and `stale`), newer objects share a fresh table."""
    with _lock:
        fc = _registry.get(key)
        if fc is None or fc is stale:
            fc = FunctionCache(stale.name, stale.source, stale.watch_captures)
            _registry[key] = fc
        return fc


def adopt(table: AdoptedTable, entry: Entry) -> None:
    """Let the jitted object owning `table` use `entry` from now on (unless it was evicted)."""
    with _lock:
        if entry.fc.entries.get(entry.key) is entry:
            table[entry.key] = entry
            entry.tables.add(table)


def forget(entry: Entry) -> None:
    """Drop `entry` from its FunctionCache, the LRU order and every table that adopted it."""
    with _lock:
        _all_entries.pop(id(entry), None)
        if entry.fc.entries.get(entry.key) is entry:
            del entry.fc.entries[entry.key]
        for table in list(entry.tables):
            if table.get(entry.key) is entry:
                del table[entry.key]
        entry.tables.clear()


def insert(fc: FunctionCache, key, entry: Entry) -> None:
    """Add (or replace) an entry and evict least-recently-used entries beyond the bound."""
    with _lock:
        old = fc.entries.get(key)
        if old is not None and old is not entry:
            forget(old)
        fc.entries[key] = entry
        entry.stamp = next(_clock)
        _all_entries[id(entry)] = entry
        capacity = max(int(config.compile_cache_size), 1)
        while len(_all_entries) > capacity:
            forget(min(_all_entries.values(), key=lambda e: e.stamp))
            stats.evictions += 1


def lookup_or_build(
    fc: FunctionCache,
    key,
    trace: Callable[[], Traced],
    compile_traced: Callable[[Traced], Any] | None,
    retrace: bool = False,
    on_miss: Callable[[], None] | None = None,
) -> Entry:
    """The entry for `key`, tracing (and compiling, when `compile_traced` is given) on a miss.

    Concurrent callers of one key trace and compile once: the first becomes the owner, the
    others wait for its result (or its exception). A failed trace or compile leaves nothing
    behind. `retrace` forces a new trace even if an entry exists."""
    while True:
        with _lock:
            entry = fc.entries.get(key)
            ready = (
                entry is not None
                and not retrace
                and (compile_traced is None or entry.executable is not None)
            )
            if ready:
                return entry
            pending = fc.pending.get(key)
            owner = pending is None
            if owner:
                pending = fc.pending[key] = _Pending()
        if owner:
            break
        if pending.thread == threading.get_ident():
            raise RuntimeError(
                f"kiln.jit: {fc.name} was called with the same signature while "
                "it was being compiled in the same thread (recursion?)."
            )
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
        return {
            "hits": stats.hits,
            "misses": stats.misses,
            "traces": stats.traces,
            "compiles": stats.compiles,
            "evictions": stats.evictions,
            "entries": len(_all_entries),
            "capacity": int(config.compile_cache_size),
        }


def clear_all() -> None:
    """Drop every cached entry (statistics are kept)."""
    with _lock:
        for entry in list(_all_entries.values()):
            forget(entry)


# --- cache-miss explanations ------------------------------------------------------------------


def explain_miss(key, previous: list, names: list[str], static_names) -> str:
    """Why the entry key `key` differs from the closest previously seen key, in words
    (`names`: the argument leaves' names; `static_names`: (name, value) of static args)."""
    in_tree, sig, context, backend, static = key

    def distance(other) -> int:
        o_tree, o_sig, o_context, o_backend, o_static = other
        if o_tree != in_tree or len(o_sig) != len(sig):
            return 1000
        return (
            sum(a != b for a, b in zip(sig, o_sig))
            + (o_static != static) * 100
            + (o_context != context)
            + (o_backend != backend)
        )

    closest = min(previous, key=distance)
    o_tree, o_sig, o_context, o_backend, o_static = closest
    reasons = []
    if o_tree != in_tree:
        reasons.append(
            f"the pytree structure of the arguments changed from "
            f"{_describe_tree(o_tree)} to {_describe_tree(in_tree)}"
        )
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
        reasons.append(
            f"config flags that affect tracing or code generation changed: {o_context} -> {context}"
        )
    if o_backend != backend:
        reasons.append(f"backend changed: {o_backend} -> {backend}")
    if not reasons:
        reasons.append("this signature was compiled before, but its entry was evicted or cleared")
    return "; ".join(reasons)


def _describe_tree(tree) -> str:
    return f"{tree} array arguments" if isinstance(tree, int) else str(tree)


def _flatten_static(static) -> list:
    if not static:
        return []
    static_args, static_kwargs = static
    return [(i, (t, v)) for i, t, v in static_args] + [(k, (t, v)) for k, t, v in static_kwargs]

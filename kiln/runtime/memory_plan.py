"""Memory planning for native programs: which intermediate buffers of one call can share
memory, decided once per executable from the liveness of the program's values.

A program runs as a sequence of steps (a native segment's kernels, a reference impl, a compiled
loop). The native backend (kiln/runtime/native.py) tells a `Liveness` which values each step
defines and reads, which values may be views of others (an impl may return a view of its
input) and which values escape the call (program outputs, values handed to host callbacks).
`Liveness.plan` then gives every value whose buffer kiln allocates, and that does not escape,
a slot: values whose live ranges do not overlap share one. The result is also what
`compiled.memory_analysis()` reports (`MemoryStats`).
"""

from __future__ import annotations

import math
import mmap
import threading
import weakref
from typing import Any, Callable, Hashable, Iterable

import numpy as np

__all__ = ["Liveness", "MemoryPlan", "MemoryStats", "REUSE_BUFFERS", "ARENA_MAX_BYTES"]

#: Whether dead intermediates hand their memory on to later ones (off: every planned value
#: gets its own slot; the results must not change, which the tests check).
REUSE_BUFFERS = True
#: Slots start at a multiple of this many bytes (whole cache lines).
SLOT_ALIGN = 64
#: An executable keeps its scratch slots between calls (allocated on its first call) up to this
#: many bytes in all; the slots beyond it (the largest first) are allocated by each call and
#: freed when it returns, so that an idle executable never holds more than this.
ARENA_MAX_BYTES = 64 << 20
#: All executables together keep at most this many bytes of scratch: filling one arena beyond
#: it empties those filled longest ago (see `fill`).
ARENAS_MAX_BYTES = 512 << 20
#: Kept scratch (arenas, segment temps) totalling at least this many bytes comes from
#: large_region.
PREFAULT_MIN_BYTES = 1 << 22

#: Primitives whose reference impl always returns new arrays, never a view of an operand
#: (their results cannot keep an operand's buffer alive). Any other impl is assumed to.
FRESH_RESULT_PRIMITIVES = frozenset(
    {"dot_general", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp", "sort"}
)


def keeps_operands(eqn) -> bool:
    """Whether an equation may hand its operands to user code that can keep them (a host
    callback, or a loop or branch whose body has one): those operands escape the call."""
    if eqn.effects or "callback" in eqn.primitive.name:
        return True
    return any(_has_callback(jaxpr) for jaxpr in _sub_jaxprs(eqn.params.values()))


def _sub_jaxprs(values: Iterable) -> Iterable:
    for value in values:
        if hasattr(value, "eqns"):
            yield value
        elif hasattr(getattr(value, "jaxpr", None), "eqns"):
            yield value.jaxpr  # a ClosedJaxpr
        elif isinstance(value, (tuple, list)):
            yield from _sub_jaxprs(value)


def _has_callback(jaxpr) -> bool:
    return any(keeps_operands(eqn) for eqn in jaxpr.eqns)


def aligned(nbytes: int) -> int:
    """`nbytes` rounded up to whole slot alignment units (at least one)."""
    return max(SLOT_ALIGN, -(-nbytes // SLOT_ALIGN) * SLOT_ALIGN)


# --- liveness ---------------------------------------------------------------------------------


class _Value:
    __slots__ = ("nbytes", "start", "planned", "last", "temp")

    def __init__(self, nbytes: int, start: int, planned: bool, last: int = -1, temp=True):
        self.nbytes, self.start, self.planned, self.last, self.temp = (
            nbytes, start, planned, last, temp
        )  # fmt: skip


class Liveness:
    """Collects, step by step, what a program's values do; `plan()` assigns the slots.

    Keys are any hashable (jaxpr variables, or (segment, buffer) pairs for segment temps).
    Reads of keys never defined (arguments, constants) are ignored."""

    def __init__(self):
        self._values: dict[Hashable, _Value] = {}
        self._parent: dict[Hashable, Hashable] = {}
        self._escaping: set = set()

    def define(
        self, key: Hashable, nbytes: int, step: int, planned: bool, temp: bool = True
    ) -> None:
        """`key` is written at `step`; planned: its buffer is kiln's to place; temp: an
        unplanned value that counts as temp memory unless it escapes (not an argument)."""
        self._values[key] = _Value(int(nbytes), step, planned and nbytes > 0, step, temp)

    def read(self, key: Hashable, step: int) -> None:
        value = self._values.get(key)
        if value is not None and step > value.last:
            value.last = step

    def alias(self, key: Hashable, other: Hashable) -> None:
        """`key` may share memory with `other` (a view of it): both live as long as either."""
        if key in self._values and other in self._values:
            root, other_root = self._root(key), self._root(other)
            if root != other_root:
                self._parent[root] = other_root

    def escape(self, key: Hashable) -> None:
        """`key` outlives the call (or is seen by user code): its memory is never reused."""
        if key in self._values:
            self._escaping.add(key)

    def _root(self, key: Hashable) -> Hashable:
        while key in self._parent:
            key = self._parent[key]
        return key

    def classes(self) -> dict:
        """root -> (last step any member is read or written, whether any member escapes)."""
        out: dict = {}
        for key, value in self._values.items():
            root = self._root(key)
            last, escapes = out.get(root, (-1, False))
            out[root] = (max(last, value.last, value.start), escapes or key in self._escaping)
        return out

    def last_use(self, key: Hashable) -> tuple[int, bool]:
        """(last step that key or anything that may alias it is used, whether that escapes)."""
        return self.classes()[self._root(key)]

    def alone(self, key: Hashable) -> bool:
        """Whether nothing else may share memory with `key`."""
        root = self._root(key)
        return not any(self._root(k) == root for k in self._values if k != key)

    def plan(self, reuse: bool | None = None) -> "MemoryPlan":
        """Slots for every planned value that does not escape (see the module docstring)."""
        reuse = REUSE_BUFFERS if reuse is None else reuse
        classes = self.classes()
        intervals = []
        fresh = []
        for key, value in self._values.items():
            if not value.planned:
                continue
            end, escapes = classes[self._root(key)]
            if escapes:
                fresh.append(key)
            else:
                intervals.append((key, aligned(value.nbytes), value.start, end))
        slot_of, sizes = assign_slots(intervals, reuse)
        unplanned = sum(
            v.nbytes
            for k, v in self._values.items()
            if not v.planned and v.temp and not classes[self._root(k)][1]
        )
        return MemoryPlan(slot_of, sizes, fresh, unplanned)


def assign_slots(intervals: list, reuse: bool = True) -> tuple[dict, list[int]]:
    """Give each (key, nbytes, start, end) a slot so that two values share one only when their
    step ranges [start, end] do not overlap; returns ({key: slot}, slot sizes).

    Values are placed in order of their first step (larger first on ties); each takes the
    smallest free slot that holds it, or else grows the largest free one, or else a new slot."""
    order = sorted(intervals, key=lambda i: (i[2], -i[1]))
    sizes: list[int] = []
    busy_until: list[int] = []
    slot_of: dict = {}
    for key, nbytes, start, end in order:
        free = [s for s in range(len(sizes)) if busy_until[s] < start] if reuse else []
        fitting = [s for s in free if sizes[s] >= nbytes]
        if fitting:
            slot = min(fitting, key=lambda s: sizes[s])
        elif free:
            slot = max(free, key=lambda s: sizes[s])
            sizes[slot] = nbytes
        else:
            slot = len(sizes)
            sizes.append(nbytes)
            busy_until.append(end)
        busy_until[slot] = end
        slot_of[key] = slot
    return slot_of, sizes


class MemoryPlan:
    """Where a call's planned values live.

    slot_of: planned key -> slot; sizes: bytes of each slot; fresh: planned keys that escape
    (each call allocates them anew); unplanned_bytes: intermediates allocated elsewhere (by
    reference impls, NumPy) that stay within the call; kept: whether each slot stays in the
    executable's arena between calls."""

    def __init__(self, slot_of: dict, sizes: list[int], fresh: list, unplanned_bytes: int):
        self.slot_of, self.sizes, self.fresh = slot_of, sizes, fresh
        self.unplanned_bytes = unplanned_bytes
        # The arena keeps the small slots first: a large one gains the least from being kept
        # (its allocation is cheap next to the work on it) and costs the most while idle.
        self.kept = [False] * len(self.sizes)
        total = 0
        for slot in sorted(range(len(self.sizes)), key=lambda s: self.sizes[s]):
            if total + self.sizes[slot] > ARENA_MAX_BYTES:
                break
            total += self.sizes[slot]
            self.kept[slot] = True

    @property
    def scratch_bytes(self) -> int:
        return sum(self.sizes)


# --- arenas: the scratch executables keep between calls ---------------------------------------


class Arena:
    """An executable's kept scratch: `views`, the tuple its call path unpacks, set by its first
    call (and again after `fill` dropped it to stay within ARENAS_MAX_BYTES); None until then.
    A call reads the attribute once, so a concurrent drop never takes views from under it."""

    __slots__ = ("views", "__weakref__")

    def __init__(self):
        self.views: tuple | None = None


_arenas: dict = {}  # id -> (weak reference, bytes), in the order they were filled
_arenas_bytes = 0
_arenas_lock = threading.RLock()  # (re-entered when a collection runs _forget inside fill)


def fill(arena: Arena, make: Callable[[], list], nbytes: int) -> tuple:
    """Set `arena`'s views to make()'s and return them; first drop the views of the arenas
    filled longest ago while the total kept would pass ARENAS_MAX_BYTES. Dropped memory is
    freed once no call uses it (a running call holds its views), and its executable fills
    its arena again when next called."""
    global _arenas_bytes
    with _arenas_lock:
        while _arenas and _arenas_bytes + nbytes > ARENAS_MAX_BYTES:
            ref, size = _arenas.pop(next(iter(_arenas)))
            _arenas_bytes -= size
            evicted = ref()
            if evicted is not None:
                evicted.views = None
        views = arena.views = tuple(make())
        _arenas[id(arena)] = (weakref.ref(arena, lambda _, key=id(arena): _forget(key)), nbytes)
        _arenas_bytes += nbytes
    return views


def _forget(key: int) -> None:
    """An arena was collected with its executable."""
    global _arenas_bytes
    with _arenas_lock:
        entry = _arenas.pop(key, None)
        if entry is not None:
            _arenas_bytes -= entry[1]


def kept_bytes() -> int:
    """Bytes of scratch all executables keep now."""
    return _arenas_bytes


# --- the buffers ----------------------------------------------------------------------------


def scratch_maker(plan: MemoryPlan, entries: list, kept: bool) -> Callable[[], list]:
    """A function that allocates the slots of `entries` ((key, shape, dtype) of planned
    values) that the arena keeps (kept=True) or that each call allocates (kept=False), and
    returns one array per entry: a view of the entry's slot."""
    chosen = [e for e in entries if plan.kept[plan.slot_of[e[0]]] == kept]
    slots = sorted({plan.slot_of[key] for key, _, _ in chosen})

    def make() -> list:
        memory = dict(zip(slots, _allocate([plan.sizes[s] for s in slots], prefault=kept)))
        views = []
        for key, shape, dtype in chosen:
            dtype = np.dtype(dtype)
            count = math.prod(shape)
            base = memory[plan.slot_of[key]]
            views.append(base[: count * dtype.itemsize].view(dtype).reshape(shape))
        return views

    return make


def _allocate(sizes: list[int], prefault: bool) -> list[np.ndarray]:
    """Byte arrays of these sizes; slots kept between calls come from one region (see
    large_region) when they are large."""
    region = large_region(sum(sizes)) if prefault else None
    if region is None:
        return [np.empty(size, np.uint8) for size in sizes]
    arrays, offset = [], 0
    for size in sizes:
        arrays.append(np.frombuffer(region, np.uint8, size, offset))
        offset += size
    return arrays


def large_region(nbytes: int) -> mmap.mmap | None:
    """A fresh mapping for buffers of nbytes in all that kernels write soon, its 4 KiB pages
    mapped in advance (MAP_POPULATE): one page fault per 4 KiB costs a first run about as
    much as its work. None below PREFAULT_MIN_BYTES, where mappings are unavailable, and
    where transparent huge pages can back NumPy's own allocations (which NumPy advises to
    use them): the kernels then fault the buffers in as they write, 2 MiB at a time and on
    all their threads, which beat mapping in advance. (On a 2-core VM, the first call of the
    layernorm+softmax gradient, 34 MB of scratch, median of paired runs: 141 -> 125 ms and
    155 -> 149 ms against MAP_POPULATE, 4 ms better than one advised mapping; with NumPy's
    advice off, faulting 4 KiB pages in the kernels was 6 ms slower.)"""
    if nbytes < PREFAULT_MIN_BYTES or _huge_pages():
        return None
    populate = getattr(mmap, "MAP_POPULATE", None)
    if populate is None:
        return None
    try:
        return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    except (OSError, ValueError):
        return None


_HUGE_PAGES: list = []  # [whether transparent huge pages can back a region], once known


def _huge_pages() -> bool:
    """Whether large NumPy allocations get transparent huge pages: the kernel offers them
    (not "[never]") and NumPy advises them (its default on Linux)."""
    if not _HUGE_PAGES:
        try:
            with open("/sys/kernel/mm/transparent_hugepage/enabled") as mode:
                enabled = "[never]" not in mode.read()
        except OSError:
            enabled = False
        core = getattr(np, "_core", None) or getattr(np, "core", None)
        advise = getattr(getattr(core, "multiarray", None), "_get_madvise_hugepage", None)
        _HUGE_PAGES.append(enabled and (advise is None or bool(advise())))
    return _HUGE_PAGES[0]


# --- what compiled.memory_analysis() returns ------------------------------------------------


class MemoryStats:
    """Sizes in bytes of a compiled program's memory, as `compiled.memory_analysis()` gives
    them (JAX's field names; the host_* fields are zero: kiln's device is the host).

    argument_size_in_bytes: the user's arguments (captured constants are part of the program,
    as in JAX); output_size_in_bytes: the outputs (an output returned twice counts once);
    alias_size_in_bytes: the part of the outputs written into donated arguments' buffers;
    temp_size_in_bytes: memory a call needs besides arguments and outputs (the planned scratch
    after reuse, the temps native code allocates itself, and the intermediates reference impls
    compute, which NumPy allocates); generated_code_size_in_bytes: zero, as JAX reports on the
    CPU (the machine code is not measured); peak_memory_in_bytes: an upper bound of what a
    call holds at once (arguments + outputs - aliased + temps)."""

    __slots__ = _STATS_FIELDS = (
        "generated_code_size_in_bytes",
        "argument_size_in_bytes",
        "output_size_in_bytes",
        "alias_size_in_bytes",
        "temp_size_in_bytes",
        "peak_memory_in_bytes",
        "host_generated_code_size_in_bytes",
        "host_argument_size_in_bytes",
        "host_output_size_in_bytes",
        "host_alias_size_in_bytes",
        "host_temp_size_in_bytes",
    )

    def __init__(self, **sizes: int):
        unknown = set(sizes) - set(self._STATS_FIELDS)
        if unknown:
            raise TypeError(f"MemoryStats has no field {sorted(unknown)[0]!r}")
        for name in self._STATS_FIELDS:
            object.__setattr__(self, name, sizes.get(name, 0))

    def __setattr__(self, name, value):
        raise AttributeError(f"MemoryStats is immutable: cannot set {name!r}")

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self._STATS_FIELDS)

    def __eq__(self, other):
        return self._values() == other._values() if type(other) is MemoryStats else NotImplemented

    def __hash__(self):
        return hash(self._values())

    def __str__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)}" for k in self._STATS_FIELDS)
        return f"CompiledMemoryStats({fields})"

    __repr__ = __str__


def make_stats(arguments: int, outputs: int, alias: int, temps: int, code: int = 0) -> MemoryStats:
    """MemoryStats with the peak worked out from the other sizes."""
    return MemoryStats(
        generated_code_size_in_bytes=code,
        argument_size_in_bytes=arguments,
        output_size_in_bytes=outputs,
        alias_size_in_bytes=alias,
        temp_size_in_bytes=temps,
        peak_memory_in_bytes=arguments + outputs - alias + temps,
    )


def distinct_outputs(outvars) -> list:
    """A program's outputs with a variable returned twice counted once (one buffer)."""
    seen, out = set(), []
    for var in outvars:
        if type(var).__name__ != "Literal":
            if var in seen:
                continue
            seen.add(var)
        out.append(var)
    return out


def nbytes_of(aval: Any) -> int:
    """Bytes of an abstract value's dense buffer."""
    size = 1
    for d in aval.shape:
        size *= int(d)
    return size * aval.dtype.itemsize

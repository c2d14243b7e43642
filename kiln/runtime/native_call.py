"""The per-call side of the native backend: the data addresses of the buffers compiled code
reads and writes, and the small persistent thread pool that runs a large kernel's chunks.

Both sit on the hot path of every native call (kiln/runtime/native.py generates code that uses
them; kiln/runtime/native_segment.py runs its parallel kernels through them), so they are kept
to a few field reads and queue operations.
"""

from __future__ import annotations

import _thread
import atexit
import ctypes
import itertools
import os
import queue
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any, Sequence

import numpy as np

from kiln.core.array import Array

__all__ = [
    "FirstCallOutputs",
    "SmallOutputs",
    "data_address",
    "donated_buffer",
    "held_address",
    "host_buffer",
    "memory_thread",
    "single_thread",
    "thread_pool",
]


# --- buffer addresses ------------------------------------------------------------------------

from_address = ctypes.c_void_p.from_address
#: Offset of the data pointer in NumPy's array object (right after the object header);
#: verified below, else addresses come from __array_interface__.
DATA_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)


def _interface_address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _probe_data_offset() -> bool:
    try:
        probes = [
            np.empty(n, dtype) for n, dtype in ((4, np.float32), (0, np.int8), (1000, np.float64))
        ]
        return all(
            from_address(id(a) + DATA_OFFSET).value == _interface_address(a) or (a.size == 0)
            for a in probes
        )
    except Exception:  # noqa: BLE001 - any surprise means: use the documented interface
        return False


FAST_ADDRESS = _probe_data_offset()


def data_address(array: np.ndarray) -> int:
    """The data address of a NumPy array (a field read, ~10x cheaper than .ctypes.data)."""
    if FAST_ADDRESS:
        return from_address(id(array) + DATA_OFFSET).value or 0
    return _interface_address(array)


def _usable(array: np.ndarray, dtype: np.dtype) -> bool:
    return (
        type(array) is np.ndarray
        and array.flags.c_contiguous
        and array.dtype == dtype
        and data_address(array) % max(dtype.itemsize, 1) == 0
    )


class FirstCallOutputs:
    """The large outputs of a new executable's first call, allocated as its build starts and
    faulted in on memory_thread() while the program is planned and compiled: the first call of
    a program writing 16 MB spent ~3 ms of its run faulting fresh pages in on the calling
    thread. Prepared before the fusion planner runs (NativeExecutable._build), the faulting
    overlaps single-threaded Python rather than the two threads that compile LLVM modules.

    `prepare(avals)` allocates and starts faulting the large ones among the outputs a build
    may allocate; `install(namespace, avals, prepared)` then keeps those the generated call
    path does allocate (the native outputs that are neither scratch nor donated) and drops
    the rest.
    `empty(shape, dtype)` stands in for np.empty in the generated code's namespace: it hands
    out a prepared buffer of that shape and dtype (np.empty's for one that was not prepared,
    such as a small output the call allocates before a large one), and rebinds the
    namespace's `empty` to np.empty once none is left. Prepared buffers
    that no call took yet (programs compiled ahead, `.lower().compile()`, and not called) hold
    at most MAX_BYTES in all: preparing more drops those prepared longest ago."""

    #: Outputs at least this large are prepared, when they add up to MIN_BYTES..MAX_BYTES.
    ARRAY_BYTES = 1 << 18
    MIN_BYTES = 1 << 20
    MAX_BYTES = 1 << 28

    _pending: dict = {}  # id -> (FirstCallOutputs, bytes), oldest first
    _pending_bytes = 0
    _lock = threading.Lock()

    def __init__(self, buffers: dict, touched):
        self._namespace: dict | None = None  # (set by install)
        self._buffers = buffers  # (shape, dtype) -> [arrays]
        self._touched = touched  # the helper's future

    @classmethod
    def _wanted(cls, avals: Sequence) -> list[tuple[tuple, np.dtype]]:
        return [
            (tuple(a.shape), np.dtype(a.dtype))
            for a in avals
            if np.prod(a.shape, dtype=np.int64) * np.dtype(a.dtype).itemsize >= cls.ARRAY_BYTES
        ]

    @staticmethod
    def _bytes(wanted: list) -> int:
        return sum(int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in wanted)

    @classmethod
    def prepare(cls, avals: Sequence) -> "FirstCallOutputs | None":
        """Allocate the large ones among outputs of these avals and start faulting them in;
        None when they are too few or too many bytes to be worth it."""
        wanted = cls._wanted(avals)
        total = cls._bytes(wanted)
        if not cls.MIN_BYTES <= total <= cls.MAX_BYTES:
            return None
        buffers: dict = {}
        arrays = []
        for shape, dtype in wanted:
            array = np.empty(shape, dtype)
            buffers.setdefault((shape, dtype), []).append(array)
            arrays.append(array)  # (the job holds them: dropped buffers stay valid till done)
        prepared = cls(buffers, touch_soon(arrays))
        with cls._lock:
            while cls._pending and cls._pending_bytes + total > cls.MAX_BYTES:
                oldest, _ = cls._pending[next(iter(cls._pending))]
                oldest._release_locked()
            cls._pending[id(prepared)] = (prepared, total)
            cls._pending_bytes += total
        return prepared

    @classmethod
    def install(cls, namespace: dict, avals: Sequence, prepared: "FirstCallOutputs | None"):
        """Have `namespace`'s first call take the outputs of these avals that `prepared` (made
        by prepare, earlier in the build; None: nothing prepared) holds; the rest is dropped."""
        if prepared is not None and prepared._keep(cls._wanted(avals)):
            prepared._namespace = namespace
            namespace["empty"] = prepared.empty

    def _keep(self, wanted: list) -> bool:
        """Keep only the buffers `wanted` asks for (a list of (shape, dtype), repeats
        counted); False, with nothing kept, if none of them is prepared or too few bytes
        remain."""
        count: dict = {}
        for key in wanted:
            count[key] = count.get(key, 0) + 1
        with self._lock:
            if id(self) not in FirstCallOutputs._pending:  # (dropped for newer ones)
                return False
            kept = {}
            for key, arrays in self._buffers.items():
                if count.get(key):
                    kept[key] = arrays[: count[key]]
            self._buffers = kept
            total = self._bytes([key for key, arrays in kept.items() for _ in arrays])
            if total < self.MIN_BYTES:
                self._release_locked()
                return False
            _, before = FirstCallOutputs._pending[id(self)]
            FirstCallOutputs._pending[id(self)] = (self, total)
            FirstCallOutputs._pending_bytes += total - before
            return True

    def empty(self, shape, dtype):
        stack = self._buffers.get((shape, dtype))
        array = None
        if stack:
            try:
                array = stack.pop()
            except IndexError:  # (another thread took the last one)
                pass
        if array is None:
            # Not prepared (too small, say): the others stay for the outputs still to come.
            # (A call that took a layernorm gradient's small outputs first had dropped the
            # prepared 16 MB one and faulted it in while its kernels ran.)
            return np.empty(shape, dtype)
        self._touched.result()  # (done long before, unless the call came first)
        if not any(self._buffers.values()):
            self.release()
        return array

    def release(self) -> None:
        """Drop what is left: the namespace (if installed) allocates with np.empty from now
        on."""
        with self._lock:
            self._release_locked()

    def _release_locked(self) -> None:
        if self._namespace is not None:
            self._namespace["empty"] = np.empty
        self._buffers = {}
        entry = FirstCallOutputs._pending.pop(id(self), None)
        if entry is not None:
            FirstCallOutputs._pending_bytes -= entry[1]


_executors: dict = {}  # name -> (executor, the process id that made it)
_executors_lock = threading.Lock()


def start_thread(run) -> None:
    """Run `run()` on a new thread, returning at once. threading.Thread.start waits until the
    new thread has run (a GIL hand-off each way: ~0.2 ms, and a first ThreadPoolExecutor
    ~0.5 ms), and a process's first call started three threads (the memory thread, LLVM's
    helper, the pool's worker) on its critical path."""
    _thread.start_new_thread(run, ())


class OneThread:
    """A thread that runs the jobs submitted to it one after another (concurrent.futures'
    submit and Future), started without waiting for it (start_thread). At the process's exit
    the job it is running, if any, finishes first: an LLVM compile must not run on while
    the process tears LLVM down."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._ended = threading.Lock()
        self._ended.acquire()  # (released by the thread as it ends)
        self._pid = os.getpid()
        start_thread(self._run)
        atexit.register(self.shutdown)

    def submit(self, function, *args, **kwargs) -> Future:
        future: Future = Future()
        self._jobs.put((future, function, args, kwargs))
        return future

    def _run(self) -> None:
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                future, function, args, kwargs = job
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = function(*args, **kwargs)
                except BaseException as err:  # (the future's owner meets it)
                    future.set_exception(err)
                else:
                    future.set_result(result)
        finally:
            self._ended.release()

    def shutdown(self) -> None:
        """Stop once the jobs queued so far are done, and wait for that (a forked child's
        copy, whose thread does not exist there, returns at once)."""
        if os.getpid() != self._pid:
            return
        self._jobs.put(None)
        with self._ended:
            pass


def single_thread(name: str) -> OneThread:
    """A process-wide executor of one thread for `name` ("llvm", "memory"), made on first use.
    A forked child makes its own: the parent's thread does not exist there."""
    with _executors_lock:
        found = _executors.get(name)
        if found is None or found[1] != os.getpid():
            found = _executors[name] = (OneThread(), os.getpid())
        return found[0]


def memory_thread():
    """The thread that faults in a new executable's first-call memory while it compiles (its
    own, not LLVM's helper, which it must not hold up)."""
    return single_thread("memory")


def _touch(arrays) -> None:
    """Fault memory in: memset releases the GIL, so this runs next to the compiling thread."""
    for array in arrays:
        ctypes.memset(array.ctypes.data, 0, array.nbytes)


def touch_soon(arrays: list):
    """Fault these arrays' memory in on memory_thread() (zeroing it); returns the job's
    future, which must be done before anything else writes them."""
    job = memory_thread().submit(_touch, arrays)
    time.sleep(0)  # (the GIL to the memory thread, which then releases it in memset)
    return job


class SmallOutputs:
    """Buffers for one small output of an executable (at most MAX_BYTES), made BATCH at a
    time as the rows of one block: a call pops an (array, address) pair instead of allocating
    an array and reading its data pointer (~0.3 us of a microsecond call). A live output keeps
    its block (BATCH * MAX_BYTES at most) alive; such views are never donated in place."""

    BATCH = 64
    MAX_BYTES = 256

    __slots__ = ("shape", "dtype", "nbytes", "ready")

    def __init__(self, shape: tuple, dtype: np.dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        #: (array, address) pairs; generated code pops from it directly
        self.ready: list = []

    @classmethod
    def fits(cls, shape: tuple, dtype: np.dtype) -> bool:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return FAST_ADDRESS and 0 < nbytes <= cls.MAX_BYTES

    def refill(self) -> tuple:
        """A fresh block's rows: one is returned, the others wait in `ready`."""
        block = np.empty((self.BATCH,) + self.shape, self.dtype)
        if self.shape:
            rows = list(block)
        else:  # (iterating would give NumPy scalars, not 0-d arrays)
            rows = [block[i, ...] for i in range(self.BATCH)]
        base = data_address(block)
        pairs = list(zip(rows, range(base, base + self.BATCH * self.nbytes, self.nbytes)))
        first = pairs.pop()
        self.ready.extend(pairs)
        return first


def held_address(arr: Array) -> tuple[int, np.ndarray | None]:
    """(address, copy): a kiln Array's buffer address for compiled code, cached on the Array.
    A buffer compiled code cannot read as is (a strided view, a NumPy scalar) is copied; the
    caller keeps `copy` (None when the Array's own buffer is used) alive until compiled code
    is done with the address."""
    value = arr._value
    if _usable(value, value.dtype):
        return arr.buffer_address(), None
    copy = np.array(value, order="C")
    return data_address(copy), copy


def donated_buffer(arr: Array, args: Sequence) -> np.ndarray | None:
    """The buffer of a donated argument, for an output to be written into; None when anything
    else may see it: another reference to the NumPy array (a view of it, a read-only view
    handed out by np.asarray, another Array wrapping it, a captured constant), the same Array
    passed twice, or a buffer kiln did not allocate (a view, a read-only or strided one)."""
    value = arr._value
    if (
        type(value) is not np.ndarray
        or value.base is not None
        or not value.flags.writeable
        or not value.flags.c_contiguous
        or arr._readonly is not None
        # references: the Array's slot, `value` here, and getrefcount's own argument
        or sys.getrefcount(value) > 3
        or sum(a is arr for a in args) != 1
    ):
        return None
    return value


def host_buffer(value: Any, dtype: np.dtype) -> np.ndarray:
    """A value an impl returned, as a dense array of `dtype` native code can read."""
    array = np.asarray(value)
    if not _usable(array, dtype):
        array = np.ascontiguousarray(array, dtype=dtype)
        if array.ndim == 0 and np.asarray(value).ndim == 0:
            array = array.reshape(())
    return array


# --- a small persistent thread pool --------------------------------------------------------------


class _Pool:
    """Worker threads that help run a kernel's chunks (ctypes calls release the GIL, so native
    chunks run in parallel with the calling thread).

    Chunks are claimed from a shared counter by whoever is free, the calling thread included:
    when the other cores are busy, the caller simply runs every chunk itself and pays no more
    than the handoff; when they are free, the work spreads evenly."""

    #: Each worker's stack, whatever the platform's default for new threads: kernels keep
    #: buffers there (packed_gemm's panel of b, up to 512 KiB, probed as it grows).
    STACK_BYTES = 8 << 20

    def __init__(self, workers: int):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        previous = threading.stack_size(self.STACK_BYTES)
        try:
            self.threads = workers  # (each waits for jobs until the process exits)
            for _ in range(workers):
                start_thread(self._work)
        finally:
            threading.stack_size(previous)

    def _work(self) -> None:
        while True:
            tasks, counter, done = self.jobs.get()
            while True:
                claimed = next(counter)  # itertools.count: atomic under the GIL
                if claimed >= len(tasks):
                    break
                entry, table = tasks[claimed]
                try:
                    entry(table)
                finally:
                    done.put(None)

    def run(self, tasks: Sequence) -> None:
        """Run every (entry, table address) task; returns when all have finished."""
        counter = itertools.count()
        done: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(min(self.threads, len(tasks) - 1)):
            self.jobs.put((tasks, counter, done))
        mine = 0
        while True:
            claimed = next(counter)
            if claimed >= len(tasks):
                break
            entry, table = tasks[claimed]
            entry(table)
            mine += 1
        for _ in range(len(tasks) - mine):
            done.get()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def thread_pool(threads: int) -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.threads < threads - 1:
            _POOL = _Pool(threads - 1)
        return _POOL

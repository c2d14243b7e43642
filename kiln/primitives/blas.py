"""Running NumPy's BLAS without fighting kiln's own threads.

NumPy's OpenBLAS keeps its worker threads spinning for a while after each call; when a compiled
kiln program alternates BLAS products with its own multi-threaded kernels, those spinning
threads take the cores the kernels need, and the kernels' threads slow the next product. On a
2-core machine an MLP training step ran 11x slower than with one BLAS thread.

So kiln owns the cores: every product runs with NumPy's BLAS pinned to the calling thread, and
a large product is split by rows across kiln's threads, each chunk one single-threaded BLAS call
(NumPy releases the GIL inside matmul). The user's own NumPy calls are unaffected: the previous
BLAS thread count is restored after each product.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from kiln.config import environment

_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)
_GETTERS = (
    "scipy_openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads",
    "openblas_get_num_threads64_",
    "openblas_get_num_threads",
)


def _find_openblas():
    """(set, get) of the OpenBLAS that NumPy uses, or None when it is another library."""
    libs_dir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs_dir, "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
        getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
        if setter is not None and getter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            getter.argtypes, getter.restype = [], ctypes.c_int
            return setter, getter
    return None


_OPENBLAS = _find_openblas()
_SCIPY_OPENBLAS: list = []  # [handle or None] once looked for


def scipy_openblas():
    """SciPy's bundled OpenBLAS (a ctypes handle, the library scipy.linalg calls), or None when
    SciPy uses another BLAS. kiln's compiled products and batched LAPACK impls call it."""
    if not _SCIPY_OPENBLAS:
        # Found without importing scipy (~12 ms): its wheel keeps the library next to it.
        import importlib.util

        spec = importlib.util.find_spec("scipy")
        found = None
        if spec is None or not spec.submodule_search_locations:
            _SCIPY_OPENBLAS.append(None)
            return None
        package = list(spec.submodule_search_locations)[0]
        libs_dir = os.path.join(os.path.dirname(package), "scipy.libs")
        for path in sorted(glob.glob(os.path.join(libs_dir, "*openblas*"))):
            # One thread from the start: OpenBLAS reads this as it loads, and otherwise starts
            # a worker per core that spins for ~0.2 s (kiln pins it to one thread anyway),
            # taking a core from the compile that asked for it.
            try:
                with environment({"OPENBLAS_NUM_THREADS": "1"}):
                    found = ctypes.CDLL(path)
                break
            except OSError:
                continue
        _SCIPY_OPENBLAS.append(found)
    return _SCIPY_OPENBLAS[0]


def pin_scipy_openblas() -> None:
    """Set SciPy's OpenBLAS to one thread, for good: kiln's threads call it concurrently, and
    its own spinning workers would compete with them for the cores."""
    lib = scipy_openblas()
    if lib is None:
        return
    for name in ("scipy_openblas_set_num_threads", "openblas_set_num_threads"):
        setter = getattr(lib, name, None)
        if setter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            setter(1)
            return


_LOCK = threading.Lock()
_depth = 0
_saved = 1


@contextmanager
def blas_on_calling_thread():
    """Within the block, NumPy's BLAS runs on the calling thread only."""
    global _depth, _saved
    if _OPENBLAS is None:
        yield
        return
    setter, getter = _OPENBLAS
    with _LOCK:
        if _depth == 0:
            _saved = getter()
            if _saved != 1:
                setter(1)
        _depth += 1
    try:
        yield
    finally:
        with _LOCK:
            _depth -= 1
            if _depth == 0 and _saved != 1:
                setter(_saved)


# Products below this many multiply-adds run on one thread: splitting costs more than it saves.
_PARALLEL_MIN_WORK = 1 << 22
# Products below this many multiply-adds are left to BLAS as they are (it does not thread them).
_SMALL_WORK = 1 << 15
_CORES = max(1, os.cpu_count() or 1)  # (os.cpu_count costs microseconds: read it once)
_POOLS: dict = {}  # name -> (ThreadPoolExecutor, its thread count)
_POOLS_LOCK = threading.Lock()


def num_threads() -> int:
    """The threads kiln's impls may use: KILN_NUM_THREADS (config.num_threads), else every core."""
    from kiln.config import config

    if config.num_threads is not None:
        return max(1, config.num_threads)
    return _CORES


def worker_pool(name: str, threads: int) -> ThreadPoolExecutor:
    """A pool of at least `threads` threads for one kind of work (products, convolutions,
    LAPACK batches): each kind has its own, so work queued from inside a pool thread never
    waits behind itself."""
    with _POOLS_LOCK:
        pool, size = _POOLS.get(name, (None, 0))
        if pool is None or size < threads:
            pool = ThreadPoolExecutor(threads, thread_name_prefix=f"kiln-{name}")
            _POOLS[name] = (pool, threads)
        return pool


_threads = num_threads


def _pool(threads: int) -> ThreadPoolExecutor:
    return worker_pool("blas", threads)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul(a, b) with single-threaded BLAS, split by rows of `a` (or by batch) across
    kiln's threads when the product is large. Small products call BLAS directly: OpenBLAS runs
    them on the calling thread anyway, and pinning costs more than they do."""
    *batch, m, k = a.shape
    n = b.shape[-1]
    work = m * n * k
    for size in batch:
        work *= size
    if work < _SMALL_WORK:
        return np.matmul(a, b)
    threads = _threads()
    with blas_on_calling_thread():
        if threads == 1 or work < _PARALLEL_MIN_WORK or a.dtype.kind not in "fc":
            return np.matmul(a, b)
        out_shape = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])) + (m, n)
        out = np.empty(out_shape, np.result_type(a.dtype, b.dtype))
        if m >= threads * 8:
            bounds = np.linspace(0, m, threads + 1).astype(int)
            futures = [
                _pool(threads).submit(_rows, a, b, out, lo, hi)
                for lo, hi in zip(bounds[:-1], bounds[1:])
                if hi > lo
            ]
        else:  # few rows: split the columns of b instead
            bounds = np.linspace(0, n, threads + 1).astype(int)
            futures = [
                _pool(threads).submit(_columns, a, b, out, lo, hi)
                for lo, hi in zip(bounds[:-1], bounds[1:])
                if hi > lo
            ]
        for f in futures:
            f.result()
        return out


def _rows(a, b, out, lo, hi):
    with blas_on_calling_thread():
        np.matmul(a[..., lo:hi, :], b, out=out[..., lo:hi, :])


def _columns(a, b, out, lo, hi):
    with blas_on_calling_thread():
        np.matmul(a, b[..., :, lo:hi], out=out[..., :, lo:hi])

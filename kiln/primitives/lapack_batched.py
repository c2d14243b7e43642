"""LAPACK and BLAS routines over a batch of matrices in one native loop.

SciPy exports its Fortran LAPACK and BLAS through scipy.linalg.cython_lapack / cython_blas as
C functions whose every argument is a pointer (characters, sizes, scalars and arrays alike).
So one small generated function per argument count calls any of them for a whole batch:

    for i in range(count): routine(base[0] + i * stride[0], ..., base[k-1] + i * stride[k-1])

with stride 0 for the arguments shared by every call (the options, sizes, workspaces) and the
byte size of one item for the per-matrix ones (the matrices, pivots, info). The loop is plain
LLVM IR compiled for the generic CPU of the host's architecture (no host features), once per
argument count and process.

All routines here take column-major (Fortran) matrices: a C-ordered matrix is its transpose in
that order, which the callers use to avoid copies where they can.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import queue
import threading
from contextlib import contextmanager

import numpy as np

from kiln.primitives import blas

__all__ = [
    "Arg",
    "batched_call",
    "routine_address",
    "available",
    "lapack_on_calling_thread",
]

_PREFIX = {
    np.dtype(np.float32): "s",
    np.dtype(np.float64): "d",
    np.dtype(np.complex64): "c",
    np.dtype(np.complex128): "z",
}
_lock = threading.Lock()


def prefix(dtype) -> str:
    """LAPACK's type letter for a float32/float64/complex64/complex128 dtype."""
    return _PREFIX[np.dtype(dtype)]


@functools.cache
def routine_address(name: str) -> int:
    """The address of SciPy's exported LAPACK (or BLAS) routine `name` (e.g. "dpotrf")."""
    from scipy.linalg import cython_blas, cython_lapack

    table = cython_lapack.__pyx_capi__
    if name not in table:
        table = cython_blas.__pyx_capi__
    capsule = table[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.argtypes, get_name.restype = [ctypes.py_object], ctypes.c_char_p
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.argtypes, get_pointer.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
    return int(get_pointer(capsule, get_name(capsule)))


_SCIPY_OPENBLAS: list = []  # [True] once SciPy's OpenBLAS is pinned
_SCIPY_LOCK = threading.Lock()


@contextmanager
def lapack_on_calling_thread():
    """Within the block, the BLAS behind NumPy and SciPy runs on the calling thread: the small
    per-matrix calls of these impls lose far more to waking OpenBLAS's threads than they gain
    (and those threads would compete with kiln's own kernels; see primitives/blas.py).

    SciPy's copy of OpenBLAS stays on one thread from then on, as it does once compiled code
    calls BLAS (kiln/codegen/llvm/blas_calls.py): restoring its count here could hand two
    threads back to a library that kiln's threads call concurrently."""
    with blas.blas_on_calling_thread():
        if not _SCIPY_OPENBLAS:
            with _SCIPY_LOCK:
                if not _SCIPY_OPENBLAS:
                    blas.pin_scipy_openblas()
                    _SCIPY_OPENBLAS.append(True)
        yield


class _LoopLibrary:
    """The compiled batch loops, one function per argument count, in one MCJIT instance."""

    def __init__(self):
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        triple = llvm.get_process_triple()
        # The architecture's generic CPU: the loop makes no use of the host's features.
        self._machine = llvm.Target.from_triple(triple).create_target_machine(
            cpu="", features="", opt=2, codemodel="jitdefault"
        )
        self._triple = triple
        empty = llvm.parse_assembly(f'target triple = "{triple}"\n')
        self._engine = llvm.create_mcjit_compiler(empty, self._machine)
        self._functions: dict[int, object] = {}
        self._modules: list = []

    def function(self, arity: int):
        fn = self._functions.get(arity)
        if fn is not None:
            return fn
        with _lock:
            return self._compile(arity)

    def _compile(self, arity: int):
        fn = self._functions.get(arity)
        if fn is None:
            import llvmlite.binding as llvm

            module = llvm.parse_assembly(_loop_ir(arity))
            module.triple = self._triple
            module.data_layout = str(self._machine.target_data)
            module.verify()
            self._engine.add_module(module)
            self._engine.finalize_object()
            self._modules.append(module)
            address = self._engine.get_function_address(f"kiln_batched_call_{arity}")
            prototype = ctypes.CFUNCTYPE(
                None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p
            )
            fn = self._functions[arity] = prototype(address)
        return fn


def _loop_ir(arity: int) -> str:
    """LLVM IR of `void kiln_batched_call_<arity>(ptr fn, i64 count, ptr bases, ptr strides)`."""
    from llvmlite import ir

    i8p = ir.IntType(8).as_pointer()
    i64 = ir.IntType(64)
    callee_type = ir.FunctionType(ir.VoidType(), [i8p] * arity)
    module = ir.Module(name=f"kiln_batched_call_{arity}")
    fn_type = ir.FunctionType(ir.VoidType(), [i8p, i64, i8p.as_pointer(), i64.as_pointer()])
    fn = ir.Function(module, fn_type, name=f"kiln_batched_call_{arity}")
    target_fn, count, bases, strides = fn.args
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    builder = ir.IRBuilder(entry)
    callee = builder.bitcast(target_fn, callee_type.as_pointer())
    base_values = [builder.load(builder.gep(bases, [ir.Constant(i64, j)])) for j in range(arity)]
    stride_values = [
        builder.load(builder.gep(strides, [ir.Constant(i64, j)])) for j in range(arity)
    ]
    builder.cbranch(builder.icmp_signed(">", count, ir.Constant(i64, 0)), loop, done)
    builder.position_at_end(loop)
    index = builder.phi(i64)
    index.add_incoming(ir.Constant(i64, 0), entry)
    call_args = [
        builder.gep(base, [builder.mul(index, stride)])
        for base, stride in zip(base_values, stride_values)
    ]
    builder.call(callee, call_args)
    following = builder.add(index, ir.Constant(i64, 1))
    index.add_incoming(following, loop)
    builder.cbranch(builder.icmp_signed("<", following, count), loop, done)
    builder.position_at_end(done)
    builder.ret_void()
    return str(module)


_LIBRARY: list = []


def _library() -> _LoopLibrary:
    with _lock:
        if not _LIBRARY:
            _LIBRARY.append(_LoopLibrary())
        return _LIBRARY[0]


@functools.cache
def available() -> bool:
    """Whether the batch loops can be built in this process (llvmlite and SciPy's exports)."""
    try:
        routine_address("dpotrf")
        _library().function(1)
    except Exception:  # noqa: BLE001 - any failure means the per-matrix fallback
        return False
    return True


class Arg:
    """One argument of a batched call: `array`, advanced by `stride` bytes per batch item
    (0: the same for every call). Scalars are one-element arrays."""

    __slots__ = ("array", "stride", "offset")

    def __init__(self, array: np.ndarray, stride: int, offset: int = 0):
        self.array = array
        self.stride = stride
        self.offset = offset  # bytes from the start of the array to the first call's argument

    @classmethod
    def shared(cls, value, dtype) -> Arg:
        return cls(np.array([value], dtype=dtype), 0)

    @classmethod
    def char(cls, letter: str) -> Arg:
        return cls(np.frombuffer(letter.encode("ascii"), np.uint8).copy(), 0)

    @classmethod
    def int32(cls, value: int) -> Arg:
        return cls.shared(value, np.int32)

    @classmethod
    def per_item(cls, array: np.ndarray, offset: int = 0) -> Arg:
        """An array whose leading axis is the batch (each item contiguous), starting `offset`
        elements into each item."""
        if not array.flags.c_contiguous:
            raise ValueError("batched LAPACK arguments must be C-contiguous")
        stride = array.strides[0] if array.ndim and array.shape[0] > 1 else 0
        return cls(array, stride, offset * array.itemsize)


# Below this many flops (estimated) a batch runs on the calling thread only.
_PARALLEL_MIN_WORK = 1 << 21
# Pieces per thread a parallel batch is cut into, claimed by whichever thread is free.
_PIECES_PER_THREAD = 4


def _pool(threads: int):
    return blas.worker_pool("lapack", threads)


def _run_claimed(jobs: list, helpers: int) -> None:
    """Run every job: the calling thread and up to `helpers` pool threads claim them in turn,
    so that on a busy machine the caller does them all rather than waiting for a helper."""
    counter = itertools.count()
    done: queue.SimpleQueue = queue.SimpleQueue()

    def claim(helper: bool) -> int:
        ran = 0
        while (index := next(counter)) < len(jobs):  # next() is atomic under the GIL
            try:
                jobs[index]()
            finally:
                if helper:
                    done.put(None)
            ran += 1
        return ran

    pool = _pool(helpers)
    for _ in range(helpers):
        pool.submit(claim, True)
    ran = claim(False)
    for _ in range(len(jobs) - ran):
        done.get()


def batched_call(routine: str, count: int, args: list[Arg], work: float = 0.0) -> None:
    """Call LAPACK/BLAS `routine` (e.g. "spotrf") `count` times, the arguments advanced by
    their strides between calls. Arrays are written in place, as the routine does.

    `work` estimates the flops of one call: a large batch is cut into runs of items that
    threads share (the ctypes call releases the GIL). Every argument written must then be
    per item; callers that share a workspace between calls pass no work."""
    if count <= 0:
        return
    from kiln.primitives.blas import num_threads

    arity = len(args)
    strides = (ctypes.c_int64 * arity)(*(a.stride for a in args))
    loop = _library().function(arity)
    address = routine_address(routine)
    threads = min(num_threads(), count, max(1, int(work * count // _PARALLEL_MIN_WORK)))
    pieces = 1 if threads == 1 else min(count, threads * _PIECES_PER_THREAD)
    splits = [count * t // pieces for t in range(pieces + 1)]
    keep = []
    jobs = []
    for start, stop in zip(splits[:-1], splits[1:]):
        bases = (ctypes.c_void_p * arity)(
            *(a.array.ctypes.data + a.offset + start * a.stride for a in args)
        )
        keep.append(bases)
        jobs.append(
            functools.partial(
                loop, address, stop - start, ctypes.addressof(bases), ctypes.addressof(strides)
            )
        )
    if len(jobs) == 1:
        jobs[0]()
    else:
        _run_claimed(jobs, threads - 1)

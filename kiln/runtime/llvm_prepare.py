"""LLVM made ready on its helper thread once kiln is imported, off the first compile's path.

A process's first native compile used to pay for LLVM's set-up on its critical path:
  * the host target: initializing LLVM's x86 back end and asking the CPU's name and
    features (~1.4 ms, codegen/llvm/target.py's host_target);
  * the target machines and pass pipelines of the helper thread and of the compiling thread
    (llvm_threads.Stream._start, llvm_threads.thread_passes);
  * the cold start of LLVM's first module, in the optimizer and in the code generator: a
    machine's subtarget tables built for its first function, LLVM's code and a fresh heap
    faulted in page by page. A four-instruction module took ~7 ms to compile first and ~1.3 ms
    afterwards; the layernorm+softmax forward's first module took 16 ms against 8.

prepare_soon() (kiln's import calls it on the native backend: compiler.pipeline.preload)
queues that work on LLVM's helper thread (llvm_threads.side_thread), where the long calls run
without the GIL next to what the program does between its import and its first compile
(making its data, defining its model). Four jobs, in order:
  1. the host target, made once for the process (the first compile needs it);
  2. the helper's machine and passes for the vector pipeline, which the first compile's
     stream would otherwise build on the calling thread (llvm_threads._adopt);
  3. a first compile of a small vector loop (PREPARE_IR) with them, for its cold start;
  4. a second machine and passes, which compile PREPARE_IR once (their subtarget is built
     then) and are kept for the first thread that compiles without a machine of its own
     (llvm_threads.spare_passes): the thread of the first compile, which compiles one of
     its modules next to the helper.
Where a disk cache is configured (config.cache_dir), a job before them makes ready what a
warm start reads first (_disk_cache_ready). Jobs 3 and 4 only warm up: once a native build
has begun (compile_begins, called as one starts), those not started yet do nothing, and the
compile's own first modules warm LLVM as before, so that a program compiled right after
import never waits on the helper for a warm-up module. config.prepare_llvm
(KILN_PREPARE_LLVM=0) turns all of it off.

A process forked while the helper is inside LLVM would inherit locks held by a thread the
child does not have: os.fork first waits for the preparation (register_at_fork below). A
process that exits first drops the jobs not started yet (_drop_pending).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from concurrent.futures import Future

import llvmlite.binding as llvm

from kiln.codegen.llvm import llvm_pipeline
from kiln.codegen.llvm import target as target_module
from kiln.config import config
from kiln.runtime import llvm_threads

#: The pipeline whose machine and passes the helper gets (that of kiln's vector loops, which
#: most first compiles' modules use: runtime/engine.py's _VECTOR_VARIANTS).
PIPELINE = "vector"

#: A small module of the shape of kiln's kernels: one loop over float vectors of the target's
#: width (a load, a fused multiply-add, a compare and select, a store). {lanes} ({v}: the
#: vector type), {attrs} (the kernels' function attributes), {triple} and {layout} are the
#: target's.
PREPARE_IR = """\
target triple = "{triple}"
target datalayout = "{layout}"

declare {v} @llvm.fma.v{lanes}f32({v}, {v}, {v})

define void @kiln_prepare(ptr noalias align 4 %x, ptr noalias align 4 %y, i64 %n) nounwind{attrs} {{
entry:
  br label %header
header:
  %i = phi i64 [0, %entry], [%next, %body]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %exit
body:
  %at = getelementptr inbounds float, ptr %x, i64 %i
  %a = load {v}, ptr %at, align 4
  %b = call {v} @llvm.fma.v{lanes}f32({v} %a, {v} %a, {v} splat (float 5.0e-01))
  %low = fcmp olt {v} %b, zeroinitializer
  %kept = select <{lanes} x i1> %low, {v} zeroinitializer, {v} %b
  %to = getelementptr inbounds float, ptr %y, i64 %i
  store {v} %kept, ptr %to, align 4
  %next = add nsw i64 %i, {lanes}
  br label %header
exit:
  ret void
}}
"""

_lock = threading.Lock()
_jobs: list[Future] = []  # this process's preparation jobs, in order
_pid: list[int] = []  # the process that queued them
_compiling = threading.Event()  # set once a native build begins (see compile_begins)


def prepare_soon() -> bool:
    """Queue the preparation on LLVM's helper thread (once per process, unless
    config.prepare_llvm is off); whether it was queued."""
    if not config.prepare_llvm:
        return False
    with _lock:
        if _pid and _pid[0] == os.getpid():
            return False
        _pid[:] = [os.getpid()]
        _jobs.clear()
        _compiling.clear()
        helper = llvm_threads.side_thread()
        if config.cache_dir:
            _jobs.append(helper.submit(_disk_cache_ready))
        _jobs.append(helper.submit(_target_and_passes))
        _jobs.append(helper.submit(_first_compile))
        _jobs.append(helper.submit(_spare_compile))
        atexit.register(_drop_pending)  # (after the helper's own exit hook: runs before it)
    time.sleep(0)  # (the GIL to the helper, which then releases it inside LLVM)
    return True


def _drop_pending() -> None:
    """At exit: the warm-up jobs not started yet are dropped (the helper's exit waits only
    for the one it is running, if any)."""
    _compiling.set()
    for job in _jobs:
        job.cancel()


def compile_begins() -> None:
    """A native build is starting: the warm-up jobs not started yet do nothing."""
    _compiling.set()


def wait() -> None:
    """Wait for this process's preparation jobs to end (their errors are dropped: a
    compile that needs what failed makes it again, and reports)."""
    if not _pid or _pid[0] != os.getpid():
        return
    for job in list(_jobs):
        try:
            job.result()
        except BaseException:  # noqa: BLE001 - see the docstring
            pass


def _disk_cache_ready() -> None:
    """What a warm start reads before its first entry, where a disk cache is configured:
    kiln's source digest (a scan of ~225 files, ~2 ms) and the module entries' headers are
    parsed with (json, ~1.8 ms to import)."""
    import json  # noqa: F401

    from kiln.runtime import disk_cache

    disk_cache.source_digest()


def _target_and_passes() -> None:
    llvm_threads.helper_passes(target_module.current_target(), PIPELINE)


def _first_compile() -> bool:
    """Compile PREPARE_IR for the configured target on this (the helper) thread, unless a
    native build has begun; whether it did."""
    if _compiling.is_set():
        return False
    target = target_module.current_target()
    _compile(target, *llvm_threads.thread_passes(target, PIPELINE))
    return True


def _spare_compile() -> bool:
    """Make a second machine and passes, compile PREPARE_IR with them (which builds the
    machine's subtarget) and keep them for the thread of the first compile
    (llvm_threads.spare_passes), unless a native build has begun; whether it did."""
    if _compiling.is_set():
        return False
    target = target_module.current_target()
    machine = target.create_machine(llvm_pipeline.CODEGEN_LEVELS[PIPELINE])
    passes = llvm_pipeline.Passes(machine, PIPELINE)
    _compile(target, machine, passes)
    llvm_threads.spare_passes(target, PIPELINE, machine, passes)
    return True


def _compile(target, machine, passes) -> None:
    context = llvm.create_context()
    module = llvm.parse_assembly(prepare_ir(target), context=context)
    llvm_pipeline.compile_module_private(module, machine, PIPELINE, passes, text=False)
    del module  # (before its context)


def prepare_ir(target: target_module.Target) -> str:
    """PREPARE_IR for a target: vectors of its width, its kernels' function attributes."""
    with target_module.compiling_for(target):
        attributes = "".join(
            f' "{key}"="{value}"' for key, value in target_module.function_attributes().items()
        )
    lanes = max(target.vector_bytes // 4, 4)
    return PREPARE_IR.format(
        triple=target.triple,
        layout=target.data_layout,
        lanes=lanes,
        v=f"<{lanes} x float>",
        attrs=attributes,
    )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=wait)

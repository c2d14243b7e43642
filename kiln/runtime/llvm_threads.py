"""Where kiln's LLVM modules are optimized and turned into object files.

Building one of LLVM's default pass pipelines leaks memory that only the end of a process
returns (~100 KB a module for "lean" and "full"); kiln's own short pipelines
(llvm_pipeline.SHORT_PIPELINES, the modules of vector loops), built once per thread and
reused, leak nothing measurable (~0.1 KB a module). So modules of the short pipelines are
always compiled in this process, and those of the default pipelines are for their first
config.llvm_in_process_compiles, then in a worker process (llvm_worker.py) that is replaced
every WORKER_JOBS modules. The machine code does not depend on where it was made.

In this process, the modules of one compile are optimized by two threads at once: the calling
thread and one helper thread (side_thread). Each module is parsed into an LLVM context of its
own and gets a target machine of its own, and the long calls (the pass pipeline, code
generation) run without llvmlite's process-wide lock, with the GIL released by ctypes.

A Stream starts the modules of a compile as they are emitted: the helper compiles the first
ones while the caller, still holding the GIL for Python work, emits the next; when all are
emitted the caller compiles what is left next to the helper.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
from typing import Callable

import llvmlite.binding as llvm

from kiln.codegen.llvm import llvm_pipeline
from kiln.codegen.llvm import target as target_module
from kiln.config import config

#: The interpreter's switch interval (seconds) while a stream is open (see Stream).
SWITCH_INTERVAL = 0.0005


def side_thread():
    """The helper thread that compiles modules next to the compiling thread (one thread: the
    engine's lock lets one compile run at a time; native_call.single_thread)."""
    from kiln.runtime.native_call import single_thread

    return single_thread("llvm")


_local = threading.local()  # .machines: this thread's {(target, level): TargetMachine}


def thread_machine(target_: target_module.Target, level: int) -> llvm.TargetMachine:
    """This thread's target machine for a target and code generator level, made on the
    thread's first use. A machine builds its subtarget (instruction, register and lowering
    tables: ~0.7 ms) for the first function it compiles and keeps it, so a machine per thread
    pays that once rather than once per module; no machine is used by two threads at once
    (they are not thread-safe), and none is handed to a JIT (which would own it)."""
    machines = getattr(_local, "machines", None)
    if machines is None:
        machines = _local.machines = {}
    machine = machines.get((target_, level))
    if machine is None:
        machine = machines[target_, level] = target_.create_machine(level)
    return machine


def thread_passes(
    target_: target_module.Target, pipeline: str
) -> tuple[llvm.TargetMachine, llvm_pipeline.Passes]:
    """This thread's machine for a pipeline's code generator level and the pipeline built
    for it (llvm_pipeline.Passes), made on the thread's first use of the pair (or taken from
    the spares, see spare_passes)."""
    built = getattr(_local, "passes", None)
    if built is None:
        built = _local.passes = {}
    passes = built.get((target_, pipeline))
    if passes is None:
        spare = _take_spare(target_, pipeline)
        if spare is not None:
            return spare
    machine = thread_machine(target_, llvm_pipeline.CODEGEN_LEVELS[pipeline])
    if passes is None:
        passes = built[target_, pipeline] = llvm_pipeline.Passes(machine, pipeline)
    return machine, passes


#: {(target, pipeline): (machine, passes)} made by one thread for the first thread that
#: needs the pair and has no machine of its level yet (see spare_passes).
_spares: dict = {}
_spares_lock = threading.Lock()


def spare_passes(target_: target_module.Target, pipeline: str, machine, passes) -> None:
    """Keep a machine and the passes built for it, which no thread uses any more, for the
    next thread that needs the pair (runtime/llvm_prepare.py makes one, and compiles with
    it once, for the thread of a process's first compile)."""
    with _spares_lock:
        _spares.setdefault((target_, pipeline), (machine, passes))


def _take_spare(target_: target_module.Target, pipeline: str):
    """A spare (machine, passes) for the pair made this thread's own, if there is one and
    this thread has no machine of the pipeline's level (a machine of its own stays its)."""
    level = llvm_pipeline.CODEGEN_LEVELS[pipeline]
    machines = getattr(_local, "machines", None)
    if machines is None:
        machines = _local.machines = {}
    if (target_, level) in machines or not _spares:
        return None
    with _spares_lock:
        spare = _spares.pop((target_, pipeline), None)
    if spare is not None:
        _adopt(target_, pipeline, *spare)
    return spare


def _adopt(target_: target_module.Target, pipeline: str, machine, passes) -> None:
    """Make a machine and passes built on another thread this thread's own for the pair
    (see Stream._start), unless it has its own already."""
    level = llvm_pipeline.CODEGEN_LEVELS[pipeline]
    machines = getattr(_local, "machines", None)
    if machines is None:
        machines = _local.machines = {}
    if machines.setdefault((target_, level), machine) is machine:
        built = getattr(_local, "passes", None)
        if built is None:
            built = _local.passes = {}
        built.setdefault((target_, pipeline), passes)


#: The (process id, target, pipeline) triples whose machine and passes the helper thread
#: of that process has (its thread-local ones: thread_passes), which Stream._start then
#: does not build for it.
_helper_has: set = set()


def helper_passes(target_: target_module.Target, pipeline: str) -> None:
    """On the helper thread (side_thread): make its machine and passes for the pair now,
    so that no stream builds them for it (runtime/llvm_prepare.py, after import)."""
    key = (os.getpid(), target_, pipeline)
    if key not in _helper_has:
        thread_passes(target_, pipeline)
        _helper_has.add(key)


def _compile_private(
    built: tuple, target_: target_module.Target, pipeline: str, text: bool = True
) -> tuple[str | None, bytes]:
    """Compile a module built in a context of its own, (module, context), with this thread's
    machine and passes (`text`: see llvm_pipeline.optimize_module)."""
    module, context = built
    machine, passes = thread_passes(target_, pipeline)
    result = llvm_pipeline.compile_module_private(module, machine, pipeline, passes, text)
    del module, built  # (before the context)
    return result


class Optimizer:
    """Runs LLVM's pipeline on modules and emits their object files (see the module
    docstring): here, alone or streamed on two threads, or in the worker process."""

    WORKER_JOBS = 512

    def __init__(self):
        self._lock = threading.Lock()
        self.in_process = 0  # modules compiled here
        self.leaky = 0  # of those, the ones of a default pipeline (see the module docstring)
        self.in_worker = 0
        self.workers_started = 0
        self._worker = None  # (a subprocess.Popen)
        self._worker_jobs = 0

    def admit(self, pipeline: str) -> bool:
        """Whether a module of this pipeline is compiled in this process (else in the
        worker), counted either way."""
        with self._lock:
            return self._admit(pipeline)

    def _admit(self, pipeline: str) -> bool:
        if pipeline in llvm_pipeline.SHORT_PIPELINES:
            self.in_process += 1
            return True
        if self.leaky < config.llvm_in_process_compiles:
            self.leaky += 1
            self.in_process += 1
            return True
        self.in_worker += 1
        return False

    def optimize(
        self,
        module: llvm.ModuleRef,
        target_: target_module.Target,
        machine: llvm.TargetMachine,
        pipeline: str = "full",
        passes: llvm_pipeline.Passes | None = None,
        text: bool = True,
    ) -> tuple[str | None, bytes]:
        """(optimized IR, object file) of one module through one of llvm_pipeline.PIPELINES,
        on this thread (in place, with `passes` when given: built for this machine) or in
        the worker (`text=False`: no optimized IR, None, where it would be printed
        here)."""
        with self._lock:
            if self._admit(pipeline):
                return llvm_pipeline.optimize_module(module, machine, pipeline, passes, text)
            return self.in_worker_process(str(module), target_, pipeline)

    def stream(
        self, target_: target_module.Target, pipelines: tuple = (), text: bool = True
    ) -> "Stream":
        """A stream for a compile's modules: those admitted here (admit) on two threads,
        the others one after the other in the worker. The helper starts now, with a machine
        and passes for each of `pipelines` (those the modules are expected to use), made
        here for it where it has none yet (Stream._start)."""
        return Stream(self, target_, pipelines, text)

    def in_worker_process(
        self, ir_text: str, target_: target_module.Target, pipeline: str = "full"
    ) -> tuple[str, bytes]:
        """(optimized IR, object file) from the worker process (callers serialize)."""
        import subprocess  # (here: most processes never start the worker)

        from kiln.codegen.llvm import llvm_worker

        if self._worker is None or self._worker_jobs >= self.WORKER_JOBS:
            self._stop_worker()
            self._worker = subprocess.Popen(
                llvm_worker.command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            self._worker_jobs = 0
            self.workers_started += 1
        worker = self._worker
        self._worker_jobs += 1
        try:
            llvm_worker.write_frame(
                worker.stdin,
                (target_.triple, target_.cpu_name, target_.features, pipeline, ir_text),
            )
            reply = llvm_worker.read_frame(worker.stdout)
        except OSError:
            reply = None
        if reply is None:
            self._stop_worker()
            raise RuntimeError("kiln: the LLVM worker process exited while optimizing a module")
        if reply[0] != "ok":
            raise RuntimeError(f"kiln: LLVM could not compile a module: {reply[1]}")
        return reply[1], reply[2]

    def _stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        with contextlib.suppress(OSError):
            worker.stdin.close()
        import subprocess

        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()

    def close(self) -> None:
        with self._lock:
            self._stop_worker()


class Stream:
    """The modules of one compile, compiled as they are submitted.

    submit(name, build, pipeline) queues a module; build(context) parses it into the given
    LLVM context (on the submitting thread). The helper thread starts on the first submit and
    takes one module after another; finish() has the calling thread take what is left too,
    waits for the helper and returns {name: (optimized IR, object file)}, the IR None for
    the modules compiled here when the stream was made with text=False. Every stream must
    end in finish() or abort() (which drops what is not started): the helper waits for one or
    the other.

    While a stream is open the interpreter's switch interval is SWITCH_INTERVAL: after each
    llvmlite call the helper waits for the GIL, which the submitting thread holds while it
    emits, and a shorter interval hands it over sooner (the default 5 ms made the helper's
    modules take twice as long during emission)."""

    def __init__(
        self,
        optimizer: Optimizer,
        target_: target_module.Target,
        pipelines: tuple = (),
        text: bool = True,
    ):
        self._optimizer = optimizer
        self._target = target_
        self._text = text  # (print the optimized modules compiled here)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._helper = None
        self._results: dict = {}
        self._errors: list[BaseException] = []
        self._deferred: list = []  # (name, build, pipeline) for the worker process
        self._switch_interval: float | None = None  # (the interval to restore)
        if pipelines:
            self._start(tuple(pipelines))

    def _start(self, prepare: tuple = ()) -> None:
        """Start the helper (see _work) and shorten the switch interval. The machine and
        passes of the pipelines in `prepare` that the helper lacks are built here and
        handed to it: some twenty short llvmlite calls, each of which, made on the helper,
        waited for the GIL (held here for emission) and took it back from this thread; they
        took the helper ~3.5-5 ms in a process's first compile, against ~0.3 ms here."""
        built = []
        for pipeline in prepare:
            key = (os.getpid(), self._target, pipeline)
            if key not in _helper_has:
                machine = self._target.create_machine(llvm_pipeline.CODEGEN_LEVELS[pipeline])
                built.append((pipeline, machine, llvm_pipeline.Passes(machine, pipeline)))
                _helper_has.add(key)
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, SWITCH_INTERVAL))
        self._helper = side_thread().submit(self._work, built)

    def submit(self, name: str, build: Callable, pipeline: str) -> None:
        if not self._optimizer.admit(pipeline):
            self._deferred.append((name, build, pipeline))
            return
        # Built here, not by the helper: parsing and linking make many short llvmlite calls,
        # and after each the helper would wait for the GIL, which this thread holds while it
        # emits (it took the helper ~25 ms a module, against ~1 ms here).
        context = llvm.create_context()
        self._queue.put((name, (build(context), context), pipeline))
        if self._helper is None:
            self._start()
        # Hand the GIL to the helper, which wakes for the module and needs the GIL for a
        # few lines of Python before its long, GIL-free calls: without this it waited for
        # this thread's switch interval (0.7 ms, measured, on the forward's first module).
        time.sleep(0)

    def _work(self, built: list = ()) -> None:
        """Take the machines and passes `built` for this thread (the helper's, made by
        _start), then compile queued modules until the end marker (None), which stays
        queued for the other thread."""
        for pipeline, machine, passes in built:
            _adopt(self._target, pipeline, machine, passes)
        while True:
            task = self._queue.get()
            if task is None:
                self._queue.put(None)
                return
            name, built, pipeline = task
            if self._errors:
                continue  # (a module failed: the compile is lost, drain quickly)
            try:
                self._results[name] = _compile_private(built, self._target, pipeline, self._text)
            except BaseException as err:  # (re-raised by finish, on the calling thread)
                self._errors.append(err)

    def finish(self) -> dict[str, tuple[str, bytes]]:
        self._queue.put(None)
        try:
            self._work()
            if self._deferred and not self._errors:
                with self._optimizer._lock:
                    for name, build, pipeline in self._deferred:
                        text = str(build(llvm.create_context()))
                        self._results[name] = self._optimizer.in_worker_process(
                            text, self._target, pipeline
                        )
        finally:
            self._join()
        if self._errors:
            raise self._errors[0]
        return self._results

    def abort(self) -> None:
        """End the stream without its results (the caller failed while emitting)."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        self._queue.put(None)
        with contextlib.suppress(BaseException):
            self._join()

    def _join(self) -> None:
        """Wait for the helper (which has met the end marker or will), then restore the
        switch interval."""
        try:
            if self._helper is not None:
                self._helper.result()
        finally:
            if self._switch_interval is not None:
                sys.setswitchinterval(self._switch_interval)
                self._switch_interval = None

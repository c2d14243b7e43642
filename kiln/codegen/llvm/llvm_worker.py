"""A worker process that optimizes LLVM modules and returns their object files.

Each of LLVM's default pass pipelines built through llvmlite leaks its pass-instrumentation
callbacks (~100 KB per module, never freed; kiln's short pipelines are built once per thread
and reused, and stay in the parent). A process that compiles thousands of modules with the
default pipelines hands them to this worker after a while, and the worker is replaced every so
often, so the leak is bounded. Run by path with -P (`command()`): it imports llvmlite and the
sibling llvm_pipeline.py only, never the kiln package.

Protocol on stdin/stdout: frames of a 4-byte little-endian length and a pickle. A request is
(triple, cpu, features, pipeline, ir_text); the reply is ("ok", optimized_ir, object_bytes) or
("error", message). The worker runs the pipeline asked for, with the code generator level
the parent uses for it, and the parent's code generator options (llvm_pipeline.configure):
the same module gives the same machine code in either process (a vectorized reduction sums
in another order than a scalar one, so results would otherwise depend on how many modules
the process had compiled before).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import struct
import sys

_LENGTH = struct.Struct("<I")


def read_frame(stream):
    """One frame's object, or None at end of stream."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(head)
    body = stream.read(length)
    if len(body) < length:
        return None
    return pickle.loads(body)


def write_frame(stream, value) -> None:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(body)) + body)
    stream.flush()


def command() -> list[str]:
    """The command that starts a worker. -P keeps this file's directory off sys.path: run by
    path, Python puts the script's directory first on it, and there types.py shadows the
    standard library's `types`, which functools and enum import. The worker then failed at
    start-up (and every compile after config.llvm_in_process_compiles with it) unless
    something had imported `types` before the script ran, as an editable install's path hook
    does and an installed package's start-up need not."""
    return [sys.executable, "-P", os.path.abspath(__file__)]


def _load_pipeline():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llvm_pipeline.py")
    spec = importlib.util.spec_from_file_location("kiln_llvm_pipeline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve(requests, replies) -> None:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    pipeline = _load_pipeline()
    pipeline.configure()
    machines = {}
    while True:
        request = read_frame(requests)
        if request is None:
            return
        triple, cpu, features, name, ir_text = request
        try:
            opt = pipeline.CODEGEN_LEVELS[name]
            key = (triple, cpu, features, opt)
            if key not in machines:
                machines[key] = pipeline.create_machine(triple, cpu, features, opt)
            optimized, object_bytes = pipeline.optimize_to_object(ir_text, machines[key], name)
            write_frame(replies, ("ok", optimized, object_bytes))
        except Exception as err:  # noqa: BLE001 - reported to the parent, which raises it
            write_frame(replies, ("error", f"{type(err).__name__}: {err}"))


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)

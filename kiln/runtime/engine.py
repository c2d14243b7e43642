"""The process-wide JIT engine and the native programs it compiles.

One MCJIT engine owns the host TargetMachine and every compiled module for the life of the
process (freeing it would invalidate the machine). compile_program turns a kernel IR Program
into a NativeProgram: one native entry, called through ctypes (which releases the GIL) with one
packed array of buffer addresses. Objects can persist on disk under $KILN_CACHE_DIR.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import sys
import threading
from pathlib import Path
import llvmlite.binding as llvm
import numpy as np

from kiln.codegen.llvm import emit, target
from kiln.compiler import kir

#: The native entry's C signature: void entry(void **buffers).
ENTRY_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class NativeProgram:
    """A compiled Program: call run(addresses) with one address per input then output buffer.

    llvm_ir is the optimized module text (None when loaded from the object cache),
    unoptimized_ir what kiln emitted; asm is printed on first access.
    """

    def __init__(self, program: kir.Program, symbol: str, address: int,
                 unoptimized_ir: str, llvm_ir: str | None, engine: "Engine"):
        self.program = program
        self.symbol = symbol
        self.address = address
        self.unoptimized_ir = unoptimized_ir
        self.llvm_ir = llvm_ir
        self.arguments: tuple[kir.Buffer, ...] = program.arguments
        #: The raw ctypes entry: entry(address_of_pointer_array) -- the fastest way in.
        self.entry = ENTRY_SIGNATURE(address)
        self._engine = engine
        self._asm: str | None = None

    @property
    def asm(self) -> str:
        """Host assembly of the optimized module (generated lazily, then kept)."""
        if self._asm is None:
            self._asm = self._engine.assembly(self.llvm_ir or self.unoptimized_ir)
        return self._asm

    def run(self, pointers) -> None:
        """Run once. pointers: an int64/uint64 np.ndarray or ctypes array of buffer addresses
        (program.arguments order), or the address of such an array as an int.

        Each buffer must be contiguous, hold its Buffer's shape and dtype, and be aligned to its
        itemsize; an output must not overlap any other buffer (kernels take them noalias).
        """
        if isinstance(pointers, np.ndarray):
            if pointers.dtype.itemsize != 8 or pointers.shape != (len(self.arguments),):
                raise ValueError(f"{self.program.name}: expected {len(self.arguments)} 64-bit "
                                 f"addresses, got an array of {pointers.dtype} {pointers.shape}")
            self.entry(pointers.ctypes.data)
        elif isinstance(pointers, int):
            self.entry(pointers)
        else:
            self.entry(ctypes.addressof(pointers))

    def __call__(self, *inputs) -> tuple[np.ndarray, ...]:
        """Convenience for tests and tools: run on NumPy inputs, return fresh output arrays."""
        program = self.program
        if len(inputs) != len(program.inputs):
            raise TypeError(f"{program.name} takes {len(program.inputs)} inputs, "
                            f"got {len(inputs)}")
        arrays = [_as_buffer(x, b) for x, b in zip(inputs, program.inputs)]
        outputs = tuple(np.empty(b.shape, b.dtype) for b in program.outputs)
        pointers = np.array([a.ctypes.data for a in arrays + list(outputs)], dtype=np.uint64)
        self.run(pointers)
        return outputs

    def __repr__(self) -> str:
        return f"<NativeProgram {self.program.name} at {self.address:#x}>"


def _as_buffer(value, buffer: kir.Buffer) -> np.ndarray:
    array = np.asarray(value, dtype=buffer.dtype)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # (ascontiguousarray alone turns 0-d into 1-d)
    if array.shape != buffer.shape:
        raise ValueError(f"input {buffer.name!r} must have shape {buffer.shape}, "
                         f"got {array.shape}")
    return array


class Engine:
    """One MCJIT engine: compiles programs (serialized by a lock) and keeps them loaded."""

    def __init__(self, cache_dir: str | os.PathLike | None = None):
        self._lock = threading.RLock()
        self._host = target.host_target()
        empty = llvm.parse_assembly(
            f'target triple = "{self._host.triple}"\n'
            f'target datalayout = "{self._host.data_layout}"\n')
        # MCJIT owns this machine and frees it with the engine: it is never shared, and
        # optimizing and printing assembly go through it while the engine lives.
        self._machine = self._host.create_machine()
        self._engine = llvm.create_mcjit_compiler(empty, self._machine)
        self._engine.set_object_cache(self._on_object_compiled, lambda module: None)
        self._programs: dict[str, NativeProgram] = {}
        self._object_paths: dict[str, Path] = {}
        self._loaded_objects: list[llvm.ObjectFileRef] = []
        self._cache_dir = Path(cache_dir) if cache_dir else None
        if sys.platform.startswith("linux"):
            # Scalar libm fallbacks (expm1f, lgamma, ...) resolve from here.
            try:
                llvm.load_library_permanently("libm.so.6")
            except RuntimeError:
                pass

    def compile(self, program: kir.Program, verify: bool = True) -> NativeProgram:
        """Verify, emit, optimize and load a program; identical programs share one result."""
        if verify:
            kir.verify_program(program)
        unoptimized = str(emit.emit_program(program))
        key = hashlib.sha256((unoptimized + self._host.cache_tag).encode()).hexdigest()
        symbol = f"kiln_{program.name}_{key[:20]}"
        with self._lock:
            cached = self._programs.get(key)
            if cached is None:
                cached = (self._load_cached_object(program, key, symbol, unoptimized)
                          or self._compile_ir(program, key, symbol, unoptimized))
                self._programs[key] = cached
            return cached

    def _compile_ir(self, program, key, symbol, unoptimized) -> NativeProgram:
        module = llvm.parse_assembly(unoptimized)
        module.name = key
        for function in module.functions:
            if function.name == emit.ENTRY_NAME:
                function.name = symbol
            elif not function.is_declaration:
                function.linkage = "internal"  # helpers never clash across modules
        for variable in module.global_variables:
            if not variable.is_declaration:
                variable.linkage = "internal"
        module.verify()
        target.optimize(module, self._machine)
        optimized = str(module)
        if self._cache_dir is not None:
            self._object_paths[key] = self._cache_dir / f"{key}.o"
        self._engine.add_module(module)
        self._engine.finalize_object()
        address = self._engine.get_function_address(symbol)
        self._object_paths.pop(key, None)
        if self._cache_dir is not None:
            (self._cache_dir / f"{key}.ll").write_text(optimized)
        return NativeProgram(program, symbol, address, unoptimized, optimized, self)

    def _on_object_compiled(self, module: llvm.ModuleRef, data: bytes) -> None:
        path = self._object_paths.get(module.name)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_bytes(data)
            temporary.replace(path)  # atomic, so readers never see half an object
        except OSError:
            pass  # the cache is an optimization; compiling still succeeded

    def _load_cached_object(self, program, key, symbol, unoptimized) -> NativeProgram | None:
        if self._cache_dir is None:
            return None
        path = self._cache_dir / f"{key}.o"
        try:
            data = path.read_bytes()
        except OSError:
            return None
        object_file = llvm.ObjectFileRef.from_data(data)
        self._engine.add_object_file(object_file)
        self._loaded_objects.append(object_file)  # whatever MCJIT took, nothing is freed early
        self._engine.finalize_object()
        address = self._engine.get_function_address(symbol)
        if not address:
            return None
        ir_path = path.with_suffix(".ll")
        optimized = ir_path.read_text() if ir_path.exists() else None
        return NativeProgram(program, symbol, address, unoptimized, optimized, self)

    def assembly(self, llvm_ir: str) -> str:
        """Host assembly for a module's text."""
        with self._lock:
            return self._machine.emit_assembly(llvm.parse_assembly(llvm_ir))


_ENGINE: Engine | None = None
_ENGINE_LOCK = threading.Lock()


def engine() -> Engine:
    """The process-wide engine, created on first use ($KILN_CACHE_DIR enables the disk cache)."""
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = Engine(os.environ.get("KILN_CACHE_DIR") or None)
        return _ENGINE


def compile_program(program: kir.Program, verify: bool = True) -> NativeProgram:
    """Compile a kernel IR program to native code in the process-wide engine."""
    return engine().compile(program, verify=verify)


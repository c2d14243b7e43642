"""Compiling kernel IR programs to native code and loading it into the process.

One Engine per target (the host, or the CPU that KILN_CPU names) emits a program, optimizes it,
turns it into an object file and links that object into pages of its own (native_library), so
the machine code is freed when the last NativeProgram using it is. Before linking, every
external symbol the object needs must resolve (libm, libc, kiln's own builtins): a missing one
raises UnresolvedSymbolError naming it instead of binding it to address 0. Objects can persist
on disk (kiln.runtime.disk_cache) when KILN_CACHE_DIR is set.

A program is known by the fingerprint of its kernel IR (kiln.runtime.kir_codec): one found
loaded, or on disk, is linked without being verified or emitted as LLVM IR again.

The modules one compile needs (one per optimization pipeline; a group split into parts of a
few kernels each once the compile has many kernels) are optimized by the calling thread and a
helper thread at once, each in an LLVM context and with a target machine of its own; the
helper starts on each part as soon as it is emitted (llvm_threads.Stream). Each module is
emitted as one llvmlite module that its programs share: a kernel is an internal always-inline
function of the module that holds its program's entry (LLVM pays its cost per function once
per program), and external only where another part's entry calls it. A group's objects link
into one JIT instance, where the parts call each other's kernels.
Products call kiln's kernel library (kernel_library), compiled once per process and target.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import threading
import weakref
from typing import Callable, Iterator, Sequence

import llvmlite.binding as llvm
from llvmlite import ir
import numpy as np

from kiln.core import digest
from kiln.codegen.llvm import emit, ir_text, llvm_pipeline, objects, target
from kiln.compiler import kir
from kiln.config import config
from kiln.runtime import disk_cache, kir_codec, llvm_threads
from kiln.runtime.native_library import (  # noqa: F401  (also kiln's way in to these)
    Library,
    UnresolvedSymbolError,
    load_object,
    load_process_symbols,
    unresolved_symbols,
)

logger = logging.getLogger("kiln")

#: The source files (package-relative prefixes) that decide the machine code of a kernel IR
#: program: its disk cache entries are keyed by their digest.
CODEGEN_SOURCES = ("codegen/", "compiler/kir", "runtime/engine.py", "runtime/kir_codec.py")

#: The native entry's C signature: void entry(void **buffers).
ENTRY_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _module_pipeline(pipeline: str, module, linked: list) -> str:
    """The pipeline a module is optimized with: when the emitter made vector code of every
    loop in it (emit_vector: none left for LLVM's vectorizer, short strips unrolled, and no
    module emitted before linked in), "vector" in place of a vectorizing one and "quick
    vector" in place of "quick" (the short pass list either way: SHORT_PIPELINES in
    llvm_pipeline); else the one its programs asked for."""
    if module is not None and not linked and getattr(module, "scalar_loops", 1) == 0:
        return _VECTOR_VARIANTS.get(pipeline, pipeline)
    return pipeline


#: The pipeline a module of vector loops only is optimized with in place of each (see
#: _module_pipeline).
_VECTOR_VARIANTS = {"lean": "vector", "full": "vector", "quick": "quick vector"}


class _Unit:
    """A program on its way to machine code: its key names its content (the fingerprint of
    its kernel IR, else its emitted LLVM IR), `unoptimized` is its LLVM IR once emitted.
    `shared` keys the engine's table of loaded programs: the key without the program's name
    (which only names the entry symbol), so that the same computation jitted under another
    function's name runs the machine code loaded already; the disk cache, whose objects
    hold the symbol, stays keyed by `key`."""

    __slots__ = (
        "program", "key", "shared", "symbol", "unoptimized", "pipeline", "side", "parts", "rows"
    )  # fmt: skip

    def __init__(
        self, program, key: str, unoptimized: str | None, pipeline: str, shared: str | None = None
    ):
        self.program = program
        self.key = key
        self.shared = key if shared is None else shared
        self.symbol = f"kiln_{program.name}_{key[:20]}"
        self.unoptimized = unoptimized
        self.pipeline = pipeline
        #: {kernel position: external name} of its kernels when its group is split, and (part
        #: number, kernel positions) for each part it has kernels in (see
        #: Engine._assign_sides)
        self.side: dict[int, str] = {}
        self.parts: list[tuple[int, list[int]]] = []
        #: {kernel position: (name, emit_rows.RowCut)} of the kernel whose row part one module
        #: holds, the rest of the program the other: module 0 is the heavier, emitted first
        #: (see Engine._assign_rows)
        self.rows: dict = {}


def _linkage_is_right(module: ir.Module, kept: set) -> bool:
    """Whether Engine._linked would change nothing in an emitted module whose definitions
    `kept` stay external: every other function and global it defines is internal already
    (the emitters make them so). Its loop over the parsed module's functions and globals,
    some llvmlite calls each, took ~0.2 ms of a layernorm+softmax module."""
    for value in module.globals.values():
        if isinstance(value, ir.Function):
            if value.blocks and value.name not in kept and value.linkage != "internal":
                return False
        elif isinstance(value, ir.GlobalVariable):
            defined = value.initializer is not None or value.linkage not in ("", "external")
            if defined and not value.name.startswith("llvm.") and value.linkage != "internal":
                return False
    return True


def _group_key(keys: Sequence[str]) -> str:
    """The disk cache key of programs compiled together (a lone program's own key)."""
    if len(keys) == 1:
        return keys[0]
    return digest.hexdigest(" ".join(keys))


class _OptimizedText:
    """A compiled group's optimized IR, not printed by its compile: made from the modules'
    sources (Engine.optimized_text) once, when a program of the group first reads it."""

    def __init__(self, engine: "Engine", sources: list[tuple]):
        self._engine = engine
        self._sources = sources
        self._text: str | None = None

    def text(self) -> str:
        if self._text is None:
            self._text = self._engine.optimized_text(self._sources)
            self._sources = None
        return self._text


class NativeProgram:
    """A compiled Program: call run(addresses) with one address per input then output buffer.

    llvm_ir is the optimized module text (made when first read, unless the compile printed
    it for the disk cache; None when the disk cache had none),
    unoptimized_ir what kiln emits for the program (emitted on first access when the code
    came from a cache); asm is printed on first access. The machine code lives as long as
    this object or its `entry` (which refers back to it).
    """

    def __init__(
        self,
        program: kir.Program,
        symbol: str,
        library: Library,
        unoptimized_ir: str | None,
        llvm_ir: str | None,
        engine: "Engine",
        pipeline: str = "full",
    ):
        self.program = program
        #: the pipeline its modules were compiled with (their code generator level: the
        #: assembly shown is that of the code that runs)
        self.pipeline = pipeline
        self.symbol = symbol
        self._library = library
        self.address = library.address(symbol)
        if not self.address:
            raise UnresolvedSymbolError(
                f"kiln: the compiled object of {program.name} does not define its entry {symbol}"
            )
        self._unoptimized_ir = unoptimized_ir
        self._llvm_ir = llvm_ir
        self.arguments: tuple[kir.Buffer, ...] = program.arguments
        #: The raw ctypes entry: entry(address_of_pointer_array) -- the fastest way in.
        self.entry = ENTRY_SIGNATURE(self.address)
        self.entry.native_program = self  # whoever keeps the entry keeps the code
        self._engine = engine
        self._asm: str | None = None

    @property
    def llvm_ir(self) -> str | None:
        """The optimized module's text (a split group's modules joined by
        MODULE_SEPARATOR); made when first read where the compile did not print it."""
        if isinstance(self._llvm_ir, _OptimizedText):
            self._llvm_ir = self._llvm_ir.text()
        return self._llvm_ir

    @property
    def unoptimized_ir(self) -> str:
        """The LLVM IR kiln emits for this program, before optimization."""
        if self._unoptimized_ir is None:
            self._unoptimized_ir = self._engine.emit_ir(self.program)
        return self._unoptimized_ir

    @property
    def asm(self) -> str:
        """Assembly of the optimized module for its target (generated lazily, then kept)."""
        if self._asm is None:
            self._asm = self._engine.assembly(self.llvm_ir or self.unoptimized_ir, self.pipeline)
        return self._asm

    def run(self, pointers) -> None:
        """Run once. pointers: an int64/uint64 np.ndarray or ctypes array of buffer addresses
        (program.arguments order), or the address of such an array as an int.

        Each buffer must be contiguous, hold its Buffer's shape and dtype, and be aligned to its
        itemsize; an output must not overlap any other buffer (kernels take them noalias).
        """
        if isinstance(pointers, np.ndarray):
            if pointers.dtype.itemsize != 8 or pointers.shape != (len(self.arguments),):
                raise ValueError(
                    f"{self.program.name}: expected {len(self.arguments)} 64-bit "
                    f"addresses, got an array of {pointers.dtype} {pointers.shape}"
                )
            self.entry(pointers.ctypes.data)
        elif isinstance(pointers, int):
            self.entry(pointers)
        else:
            self.entry(ctypes.addressof(pointers))

    def __call__(self, *inputs) -> tuple[np.ndarray, ...]:
        """Convenience for tests and tools: run on NumPy inputs, return fresh output arrays."""
        program = self.program
        if len(inputs) != len(program.inputs):
            raise TypeError(f"{program.name} takes {len(program.inputs)} inputs, got {len(inputs)}")
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
        raise ValueError(f"input {buffer.name!r} must have shape {buffer.shape}, got {array.shape}")
    return array


# --- where modules are optimized ---------------------------------------------------------------

_optimizer = llvm_threads.Optimizer()
atexit.register(_optimizer.close)

#: A group is split when it has at least this many kernels (below, one module compiles about
#: as fast as parts on two threads); its kernels then go to parts (modules) of PART_KERNELS
#: kernels each, compiled as they are emitted.
SPLIT_KERNELS = 8
PART_KERNELS = 4
#: Between the modules' texts in a split group's llvm_ir (and their assembly).
MODULE_SEPARATOR = "\n; ---- kiln: the next module of this group ----\n"


# --- the engine --------------------------------------------------------------------------------


class Engine:
    """Compiles programs for one target; identical programs share one NativeProgram while it
    lives. Compilation is serialized by a lock (the optimizing machine is shared)."""

    def __init__(self, target_: target.Target, cache: disk_cache.DiskCache | None = None):
        load_process_symbols()
        self.target = target_
        self._lock = threading.RLock()
        # Used for printing assembly (never given to a JIT); made when first needed (modules
        # are compiled with their thread's machine: llvm_threads.thread_passes).
        self._machines: dict[int, llvm.TargetMachine] = {}
        self._programs: "weakref.WeakValueDictionary[str, NativeProgram]" = (
            weakref.WeakValueDictionary()
        )
        self.disk_cache = cache
        #: programs asked for, of which reused (loaded already); LLVM modules compiled
        self.stats = {"programs": 0, "reused": 0, "modules": 0}

    def _machine(self, pipeline: str) -> llvm.TargetMachine:
        """The engine's target machine for a pipeline's modules (one per code generator level,
        made when first needed); callers hold the engine's lock."""
        level = llvm_pipeline.CODEGEN_LEVELS[pipeline]
        machine = self._machines.get(level)
        if machine is None:
            machine = self._machines[level] = self.target.create_machine(level)
        return machine

    def compile(self, program: kir.Program, verify: bool = True) -> NativeProgram:
        """Verify, emit, optimize and load a program; identical programs share one result."""
        return self.compile_many([program], verify)[0]

    def compile_many(
        self,
        programs: Sequence[kir.Program],
        verify: bool = True,
        pipelines: Sequence[str] | None = None,
    ) -> list[NativeProgram]:
        """Compile several programs as one LLVM module with one entry each (one optimizer run,
        one object file, one load); a program compiled before and still loaded is reused, and
        identical programs share one result (programs that differ only in their names count
        as identical: see _Unit.shared). pipelines[i] names the optimization pipeline of
        programs[i] (llvm_pipeline.PIPELINES, default "full"): one module per pipeline.

        Programs are keyed by the fingerprint of their kernel IR, so one found loaded or in
        the disk cache is neither verified nor emitted again (it was when first compiled)."""
        pipelines = ["full"] * len(programs) if pipelines is None else list(pipelines)
        units = [self._unit(p, verify, q) for p, q in zip(programs, pipelines)]
        with self._lock:
            found = {unit.shared: self._programs.get(unit.shared) for unit in units}
            missing = list({u.shared: u for u in units if found[u.shared] is None}.values())
            pending = []  # groups to compile: (units, group key)
            kernels = sum(len(u.program.kernels) for u in missing if u.unoptimized is None)
            for pipeline in llvm_pipeline.PIPELINES:
                group_units = [unit for unit in missing if unit.pipeline == pipeline]
                if not group_units:
                    continue
                group = _group_key([unit.key for unit in group_units])
                if self._assign_sides(group_units, kernels):
                    group += " split"  # (other objects than the same programs unsplit)
                elif len(group_units) == 1 and self._assign_rows(group_units, missing):
                    group += " rows"
                natives = self._load_cached(group_units, group)
                if natives is None:
                    pending.append((group_units, group))
                    continue
                for unit, native in zip(group_units, natives):
                    found[unit.shared] = self._programs[unit.shared] = native
            if pending:
                for (group_units, _), natives in zip(pending, self._compile_fresh(pending, verify)):
                    for unit, native in zip(group_units, natives):
                        found[unit.shared] = self._programs[unit.shared] = native
            self.stats["programs"] += len(units)
            self.stats["reused"] += len(units) - len(missing)
            return [found[unit.shared] for unit in units]

    def _unit(self, program: kir.Program, verify: bool, pipeline: str = "full") -> "_Unit":
        """A program's unit, keyed by its kernel IR's fingerprint; a program the codec cannot
        serialize is verified and emitted now and keyed by its LLVM IR."""
        tag = self.target.cache_tag + ("" if pipeline == "full" else f" {pipeline}")
        if not emit.vector_loops():  # (other code for the same kernel IR)
            tag += " scalar loops"
        fingerprints = kir_codec.fingerprints(program)
        if fingerprints is not None:
            fingerprint, content = fingerprints
            key = digest.hexdigest(f"kir {fingerprint} {tag}")
            shared = digest.hexdigest(f"kir content {content} {tag}")
            return _Unit(program, key, None, pipeline, shared)
        if verify:
            kir.verify_program(program)
        unoptimized = self.emit_ir(program)
        key = digest.hexdigest(unoptimized + tag)
        return _Unit(program, key, unoptimized, pipeline)

    @staticmethod
    def _assign_sides(units: list["_Unit"], kernels: int) -> bool:
        """Whether the units' kernels are split: when they are two or more, the compile they
        are part of has SPLIT_KERNELS kernels or more (`kernels`, in all its groups: a group
        of a few costly kernels next to one of many cheap ones is split too) and kiln may use
        two threads. Each unit's kernels then go, PART_KERNELS at a time in order, to the
        group's parts under external names made from its unit's symbol, and its entry to the
        part of its last kernel; units emitted already (keyed by their LLVM IR) go whole to
        the part being filled. The choice depends only on the programs and the thread
        count, so a process finds in the disk cache what another made."""
        from kiln.runtime.native import num_threads

        own = sum(len(u.program.kernels) for u in units if u.unoptimized is None)
        if own < 2 or kernels < SPLIT_KERNELS or num_threads() < 2:
            return False
        count = 0
        for unit in units:
            if unit.unoptimized is not None:
                continue
            for position in range(len(unit.program.kernels)):
                unit.side[position] = f"{unit.symbol}.k{position}"
                part = count // PART_KERNELS
                if not unit.parts or unit.parts[-1][0] != part:
                    unit.parts.append((part, []))
                unit.parts[-1][1].append(position)
                count += 1
        return True

    @staticmethod
    def _assign_rows(units: list["_Unit"], missing: list["_Unit"]) -> bool:
        """Whether the lone program of a group, which would compile as one module, is cut in
        two along its heaviest kernel's row loop (see emit_rows): one module then holds that
        kernel's row part, the other the rest of the program (module 0, emitted first, is the
        heavier: RowCut.rest_first), and the two compile on two threads. Only when it
        outweighs the compile's other programs (`missing` holds them all) together: a large
        row kernel next to the small kernel that combines its folded column sums
        (fusion_columns) would otherwise keep one thread busy and the other idle, while
        programs of similar weight compile side by side already. Like _assign_sides, the
        choice depends only on the programs and the thread count."""
        from kiln.codegen.llvm import emit_rows
        from kiln.compiler.kir_schedule import schedule_kernel
        from kiln.runtime.native import num_threads

        (unit,) = units
        others = [u for u in missing if u is not unit]
        if unit.unoptimized is not None or num_threads() < 2:
            return False
        if any(u.unoptimized is not None for u in others):  # (their weight is unknown)
            return False

        def weight(program) -> int:
            return sum(emit_rows.kernel_weight(schedule_kernel(k)) for k in program.kernels)

        kernels = [schedule_kernel(kernel) for kernel in unit.program.kernels]
        weights = [emit_rows.kernel_weight(kernel) for kernel in kernels]
        if sum(weight(u.program) for u in others) >= sum(weights):
            return False
        heaviest = max(range(len(kernels)), key=weights.__getitem__, default=None)
        if heaviest is None:
            return False
        cut = emit_rows.split_point(kernels[heaviest], sum(weights) - weights[heaviest])
        if cut is None:
            return False
        unit.rows = {heaviest: (f"{unit.symbol}.k{heaviest}.rows0", cut)}
        return True

    @staticmethod
    def _module_names(units: list["_Unit"], group: str) -> list[str]:
        """The names (and disk cache groups) of a group's modules, in order: the group's own
        when it is whole, else one per part of a split group (two when cut along a row
        loop)."""
        count = 1 + max((part for u in units for part, _ in u.parts), default=-1)
        if any(u.rows for u in units):
            count = 2
        return [f"{group} part{i}" for i in range(count)] if count else [group]

    def _emit(
        self, unit: "_Unit", verify: bool, module_of: Callable, external: dict
    ) -> Iterator[int]:
        """Verify (if asked) and emit a unit's program into its group's modules, module_of(
        part) (part 0 for a group that is not split): its kernels into the parts that hold
        them, internal (to be inlined) except those another part calls, then its entry,
        under its symbol, into its last part; the names that stay external go to
        external[part]. Yields each part number as the unit starts emitting there.

        A row cut's program is verified once its first module is on its way (the caller
        submits a part when the next one starts): the helper compiles that module
        meanwhile, ~0.5 ms sooner, and nothing of the program runs before it is verified."""
        if verify and not unit.rows:
            kir.verify_program(unit.program)
        if unit.rows:
            ((position, (name, cut)),) = unit.rows.items()
            rows, rest = (1, 0) if cut.rest_first else (0, 1)
            with target.compiling_for(self.target):
                for part in (0, 1):
                    yield part
                    if verify and part == 1:
                        kir.verify_program(unit.program)
                    if part == rows:
                        external[rows].add(name)
                        emit.emit_row_part(unit.program, position, name, cut, module_of(rows))
                    else:
                        external[rest].add(unit.symbol)
                        emit.emit_program(
                            unit.program, unit.symbol, None, module_of(rest), unit.rows
                        )
            return
        last = unit.parts[-1][0] if unit.parts else 0
        with target.compiling_for(self.target):
            for part, positions in unit.parts:
                yield part
                names = {position: unit.side[position] for position in positions}
                exported = set(names.values()) if part != last else set()
                external[part] |= exported
                emit.emit_kernels(unit.program, names, module_of(part), exported)
            yield last
            external[last].add(unit.symbol)
            emit.emit_program(unit.program, unit.symbol, unit.side, module_of(last))

    def emit_ir(self, program: kir.Program) -> str:
        """The LLVM IR (text) kiln emits for a program on this engine's target."""
        with target.compiling_for(self.target):
            return ir_text.module_text(emit.emit_program(program))

    @staticmethod
    def _linked(texts: list[tuple[str, str | None, set | None]], name: str, context=None):
        """One module from module texts, each (text, symbol, kept): the text's entry (if any)
        renamed to the given symbol, its other definitions made internal (helpers never clash
        across modules) except those named in kept (None: a text whose names and linkage
        are right already, _linkage_is_right)."""
        module = None
        for text, symbol, kept in texts:
            part = llvm.parse_assembly(text, context=context)
            for function in part.functions if kept is not None else ():
                if symbol is not None and function.name == emit.ENTRY_NAME:
                    function.name = symbol
                elif not function.is_declaration and function.name not in kept:
                    function.linkage = "internal"
            for variable in part.global_variables if kept is not None else ():
                # (llvm.* globals such as llvm.compiler.used have fixed linkage)
                if not variable.is_declaration and not variable.name.startswith("llvm."):
                    variable.linkage = "internal"
            if module is None:
                module = part
            else:
                module.link_in(part)  # (the linker renames clashing internal names)
        module.name = name
        return module

    def _compile_fresh(self, pending: list[tuple[list["_Unit"], str]], verify: bool) -> list:
        """Emit and compile the groups' modules and load them. Each module is emitted as one
        LLVM module that its programs share (their helpers defined once), apart from
        programs emitted already (keyed by their LLVM IR), which are linked in. A lone
        module is optimized here as it always was; several (groups of other pipelines, the
        parts of a split group) stream: each starts on the helper thread as soon as it is
        emitted. A split group's part holds a few kernels and the entries of the programs
        whose last kernels it holds."""
        modules = sum(len(self._module_names(units, group)) for units, group in pending)
        # The optimized IR is printed when the disk cache stores it; else it is made again
        # from each module's sources, {name: (build(context), pipeline)}, when first read.
        text = self.disk_cache is not None
        sources: dict[str, tuple] = {}
        stream = None
        if modules > 1:
            # (the helper builds its passes for the pipelines the modules are expected to
            # use, the vector ones when the emitter vectorizes every loop: _module_pipeline)
            expected = {
                _VECTOR_VARIANTS.get(units[0].pipeline, units[0].pipeline) for units, _ in pending
            }
            stream = _optimizer.stream(self.target, tuple(sorted(expected)), text)
        built: list = []  # (module name, build(context), pipeline), for a lone module
        try:
            for units, group in pending:
                names = self._module_names(units, group)
                shared: dict[int, object] = {}
                external: dict[int, set] = {part: set() for part in range(len(names))}
                others: dict[int, list] = {part: [] for part in range(len(names))}

                def module_of(part, shared=shared, names=names, pipeline=units[0].pipeline):
                    if part not in shared:
                        with target.compiling_for(self.target):
                            shared[part] = emit.new_module(names[part])
                        # (short vector loops unrolled where O3 would have unrolled them)
                        shared[part].unroll_strips = pipeline == "full"
                    return shared[part]

                def build(part, shared=shared, external=external, others=others, names=names):
                    texts = list(others[part])
                    if part in shared:
                        kept = external[part]
                        if _linkage_is_right(shared[part], kept):
                            kept = None  # (nothing for _linked to change)
                        texts.insert(0, (ir_text.module_text(shared[part]), None, kept))
                    return lambda context: self._linked(texts, names[part], context)

                def submit(part, names=names, pipeline=units[0].pipeline, build=build):
                    pipeline = _module_pipeline(pipeline, shared.get(part), others[part])
                    source = sources[names[part]] = (build(part), pipeline)
                    if stream is None:
                        built.append((names[part], *source))
                    else:
                        stream.submit(names[part], *source)

                open_part = 0  # the parts before it are complete and on their way
                for unit in units:
                    if unit.unoptimized is not None:  # (emitted already: linked in)
                        others[open_part].append((unit.unoptimized, unit.symbol, set()))
                        continue
                    for part in self._emit(unit, verify, module_of, external):
                        for done in range(open_part, part):
                            submit(done)
                        open_part = max(open_part, part)
                for part in range(open_part, len(names)):
                    submit(part)
        except BaseException:
            if stream is not None:
                stream.abort()
            raise
        if stream is None:
            ((name, build_module, pipeline),) = built
            # (this thread's machine and pipeline, built once: llvm_threads.thread_passes)
            machine, passes = llvm_threads.thread_passes(self.target, pipeline)
            module = build_module(None)
            results = {
                name: _optimizer.optimize(module, self.target, machine, pipeline, passes, text)
            }
        else:
            results = stream.finish()
        self.stats["modules"] += modules
        loaded = []
        for units, group in pending:
            names = self._module_names(units, group)
            compiled = [results[name] for name in names]
            loaded.append(self._link(units, compiled, [sources[name] for name in names]))
            if self.disk_cache is not None:
                for name, (optimized, object_bytes) in zip(
                    self._module_names(units, group), compiled
                ):
                    self.disk_cache.store(self._disk_key(name), object_bytes, optimized)
        return loaded

    @staticmethod
    def _disk_key(group: str) -> str:
        """A group's disk cache key: its key and the digest of the code that turns kernel IR
        into machine code."""
        sources = disk_cache.source_digest(CODEGEN_SOURCES)
        return digest.hexdigest(f"{group} {sources}")

    def _load_cached(self, units: list["_Unit"], group: str) -> list[NativeProgram] | None:
        if self.disk_cache is None:
            return None
        names = self._module_names(units, group)
        entries = [self.disk_cache.load(self._disk_key(name)) for name in names]
        if any(entry is None for entry in entries):
            return None  # (a part never loads without every other part)
        try:
            return self._link(units, [(optimized, data) for data, optimized in entries])
        except (UnresolvedSymbolError, objects.ObjectFormatError) as err:
            logger.warning(
                "kiln: the disk cache entry for %s did not load (%s); recompiling",
                ", ".join(unit.program.name for unit in units),
                err,
            )
            return None

    def _link(
        self, units: list["_Unit"], compiled: list[tuple], sources: list[tuple] | None = None
    ) -> list[NativeProgram]:
        """Load a group's objects, [(optimized IR or None, object bytes)], into one JIT
        instance, in which a split group's parts call each other's kernels (load_object
        checks that every one is defined). `sources`: each module's (build(context),
        pipeline), from which its optimized IR is made when first read, where it was not
        printed."""
        what = units[0].program.name + (f" and {len(units) - 1} more" if len(units) > 1 else "")
        *others, (_, object_bytes) = compiled
        library = load_object(object_bytes, self.target, what, [data for _, data in others])
        texts = [optimized for optimized, _ in compiled]
        if None not in texts:
            optimized = MODULE_SEPARATOR.join(texts)
        elif sources is not None:
            optimized = _OptimizedText(self, sources)
        else:
            optimized = None
        return [
            NativeProgram(
                unit.program, unit.symbol, library, unit.unoptimized, optimized, self, unit.pipeline
            )
            for unit in units
        ]

    def optimized_text(self, sources: list[tuple]) -> str:
        """The optimized IR of a group's modules, each (build(context), pipeline), optimized
        again as when they were compiled: the same passes on a machine of the same target
        and level give the text the compile would have printed."""
        with self._lock:
            texts = []
            for build, pipeline in sources:
                machine, passes = llvm_threads.thread_passes(self.target, pipeline)
                module = build(None)
                texts.append(_optimizer.optimize(module, self.target, machine, pipeline, passes)[0])
            return MODULE_SEPARATOR.join(texts)

    def assembly(self, llvm_ir: str, pipeline: str = "full") -> str:
        """Assembly of a module's text (or of a split group's, MODULE_SEPARATOR between
        them) for this engine's target, by the code generator level of the pipeline it was
        compiled with: a "quick" module's level-0 code is not the level-3 code of the same
        IR (it folds no load into the instruction that uses it, for one)."""
        with self._lock:
            return MODULE_SEPARATOR.join(
                self._machine(pipeline).emit_assembly(llvm.parse_assembly(text))
                for text in llvm_ir.split(MODULE_SEPARATOR)
            )

    def live_programs(self) -> int:
        """How many compiled programs are loaded now."""
        return len(self._programs)

    def clear(self) -> None:
        """Forget the sharing table (programs still referenced elsewhere stay loaded)."""
        with self._lock:
            self._programs.clear()


_ENGINES: dict[tuple, Engine] = {}
_ENGINE_LOCK = threading.Lock()
_disk_caches: dict[tuple, disk_cache.DiskCache | None] = {}


def _disk_cache_for(target_: target.Target) -> disk_cache.DiskCache | None:
    path = config.cache_dir
    if not path:
        return None
    key = (str(path), target_)
    if key not in _disk_caches:
        directory = disk_cache.usable_directory(path)
        _disk_caches[key] = (
            disk_cache.DiskCache(directory, disk_cache.identity(target_))
            if directory is not None
            else None
        )
    return _disk_caches[key]


def engine() -> Engine:
    """The engine for the current target (KILN_CPU / KILN_CPU_FEATURES, else the host), with
    the disk cache of KILN_CACHE_DIR when that is set and usable."""
    target_ = target.current_target()
    with _ENGINE_LOCK:
        cache = _disk_cache_for(target_)
        key = (target_, id(cache) if cache is not None else None)
        found = _ENGINES.get(key)
        if found is None:
            found = _ENGINES[key] = Engine(target_, cache)
        return found


def compile_program(program: kir.Program, verify: bool = True) -> NativeProgram:
    """Compile a kernel IR program to native code for the current target."""
    return engine().compile(program, verify=verify)


def compile_programs(
    programs: Sequence[kir.Program],
    verify: bool = True,
    pipelines: Sequence[str] | None = None,
) -> list[NativeProgram]:
    """Compile kernel IR programs together, as one LLVM module per pipeline with an entry for
    each program, for the current target (see Engine.compile_many)."""
    return engine().compile_many(programs, verify=verify, pipelines=pipelines)


def compile_stats() -> dict:
    """Counters of every engine in this process (summed): programs asked for, programs
    reused from earlier compilations, LLVM modules compiled."""
    total = {"programs": 0, "reused": 0, "modules": 0}
    with _ENGINE_LOCK:
        for found in _ENGINES.values():
            for name, value in found.stats.items():
                total[name] += value
    return total


def disk_cache_stats() -> dict:
    """Counters of every disk cache used in this process (summed)."""
    total: dict = {}
    for cache in _disk_caches.values():
        if cache is None:
            continue
        for name, value in cache.stats.as_dict().items():
            if isinstance(value, dict):
                merged = total.setdefault(name, {})
                for reason, count in value.items():
                    merged[reason] = merged.get(reason, 0) + count
            else:
                total[name] = total.get(name, 0) + value
    return total


def clear() -> None:
    """Drop every engine's sharing table (see kiln.clear_caches)."""
    with _ENGINE_LOCK:
        for found in _ENGINES.values():
            found.clear()

"""Linking kiln's object files into the process: the symbols they need, and the loader.

Every object is checked first: an external symbol that nothing provides (libm, libc, kiln's
builtins, BLAS, kiln's kernel library) raises UnresolvedSymbolError naming it instead of
being bound to address 0. Then `Library` maps the objects' sections into fresh pages of their
own, applies their relocations and protects the pages (code read and execute, constants read
only); freed with the Library. LLVM emits kiln's objects for the large code model, so they
hold only absolute 64-bit relocations to sections, to each other and to the process: this
loader does that in ~0.1 ms, where an MCJIT instance per program took ~1 ms (its own target
machine, a module, RuntimeDyld's finalization), on every first call's critical path. An
object with anything else (an unwind table, a section kind or relocation type not listed
below) goes to MCJIT as before, with the same result.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import threading
from typing import Container, Sequence

import llvmlite.binding as llvm

from kiln.codegen.llvm import objects, support, target


class UnresolvedSymbolError(RuntimeError):
    """Generated code needs a symbol that nothing in the process provides."""


# --- the process's symbols ---------------------------------------------------------------------

SYMBOLS_LOCK = threading.Lock()
_libraries_ready = False
_support_library: "Library | None" = None


def load_process_symbols() -> None:
    """Make libm/libc visible to the linker (once per process)."""
    global _libraries_ready
    with SYMBOLS_LOCK:
        if _libraries_ready:
            return
        if sys.platform.startswith("linux"):
            for name in ("m", "c"):
                # glibc's soname first: ctypes.util.find_library runs ldconfig in a
                # subprocess, which costs milliseconds of every process's first compile
                # (importing ctypes.util and subprocess alone costs ~4 ms).
                for path in (f"lib{name}.so.6", None):
                    try:
                        if path is None:
                            import ctypes.util

                            path = ctypes.util.find_library(name)
                        llvm.load_library_permanently(path)
                        break
                    except (RuntimeError, TypeError, AttributeError):  # (None: not found)
                        continue
        _libraries_ready = True


def _load_builtins() -> None:
    """Compile kiln's builtins and make them visible to the linker (once per process, when
    the first object that calls one is loaded: most programs call none, and compiling them
    took a tenth of a small program's first call)."""
    global _support_library
    load_process_symbols()
    with SYMBOLS_LOCK:
        if _support_library is not None:
            return
        baseline = target.make_target(support.SUPPORT_CPU)
        module = llvm.parse_assembly(
            str(support.support_module(baseline.triple, baseline.data_layout))
        )
        module.verify()
        machine = baseline.create_machine()
        target.optimize(module, machine)
        object_bytes = machine.emit_object(module)
        needed = objects.undefined_symbols(object_bytes)
        if needed:
            raise UnresolvedSymbolError(f"kiln's builtins themselves need {needed}")
        library = Library(object_bytes, baseline)  # (needs nothing: checked above)
        for name in support.BUILTINS:
            llvm.add_symbol(name, library.address(name))
        _support_library = library


def unresolved_symbols(
    object_bytes: bytes, defined: Container[str] = (), target_: target.Target | None = None
) -> list[str]:
    """The external symbols of an object that neither the process nor `defined` (the
    symbols of the objects it is linked with) provides; the kernel library's modules it
    calls are loaded first (for `target_`, the one it was compiled for)."""
    load_process_symbols()
    needed = [n for n in objects.undefined_symbols(object_bytes) if n not in defined]
    if any(name in support.BUILTINS for name in needed):
        _load_builtins()
    missing = [name for name in needed if not llvm.address_of_symbol(name)]
    if missing:  # (BLAS and kiln's gemm library: imported and loaded when first needed)
        from kiln.codegen.llvm import blas_calls
        from kiln.runtime import kernel_library

        if any(name in blas_calls.SYMBOLS for name in missing) and blas_calls.available():
            blas_calls.register()
        kernel_library.ensure(missing, target_)
        missing = [name for name in missing if not llvm.address_of_symbol(name)]
    return missing


def load_object(object_bytes: bytes, target_: target.Target, what: str = "an object", more=()):
    """Link an object file (and `more` objects, linked with it) into the process after
    checking that every symbol they need resolves; the result's .address(name) finds their
    functions, valid while it lives."""
    everything = [*more, object_bytes]
    defined = {name for data in everything for name in objects.defined_symbols(data)}
    missing = sorted(
        {name for data in everything for name in unresolved_symbols(data, defined, target_)}
    )
    if missing:
        raise UnresolvedSymbolError(
            f"kiln: the native code of {what} (target {target_.describe()}) calls "
            f"{', '.join(missing)}, which nothing in this process provides; running it would "
            "jump to address 0. This is a bug in kiln's code generation: please report it; "
            "jit(..., backend='interpret') avoids native code meanwhile."
        )
    return Library(object_bytes, target_, more)


# --- the loader ----------------------------------------------------------------------------------


class Library:
    """Objects linked together into the process (they resolve each other's symbols first: a
    split program's entry calls the kernels of its side objects), by kiln's loader
    (_LoadedImage) or, for an object it does not handle, by an MCJIT instance; `kind` says
    which. Its code is freed with it."""

    def __init__(self, object_bytes: bytes, target_: target.Target, more: Sequence[bytes] = ()):
        everything = [*more, object_bytes]
        try:
            self._image = _LoadedImage(everything)
            self.kind = "elf"
        except _Unsupported:
            self._image = _McjitImage(everything, target_)
            self.kind = "mcjit"

    def address(self, symbol: str) -> int:
        """The address of a function the objects define (0 if none does)."""
        return self._image.address(symbol)

    def close(self) -> None:
        image = self.__dict__.pop("_image", None)
        if image is not None:
            image.close()

    def __del__(self):
        self.close()


class _McjitImage:
    """One MCJIT instance holding the objects' machine code."""

    def __init__(self, everything: list[bytes], target_: target.Target):
        empty = llvm.parse_assembly(
            f'target triple = "{target_.triple}"\ntarget datalayout = "{target_.data_layout}"\n'
        )
        # MCJIT owns (and frees) the machine it is given: each instance gets a fresh one.
        self.jit = llvm.create_mcjit_compiler(empty, target_.create_machine())
        self.object_files = [llvm.ObjectFileRef.from_data(b) for b in everything]
        for object_file in self.object_files:
            self.jit.add_object_file(object_file)
        self.jit.finalize_object()

    def address(self, symbol: str) -> int:
        return self.jit.get_function_address(symbol)

    def close(self) -> None:
        # The engine first: it owns the code the object file's buffers were moved into.
        self.__dict__.pop("jit", None)
        self.__dict__.pop("object_files", None)


class _Unsupported(Exception):
    """An object holds something _LoadedImage does not load (MCJIT does)."""


_RELA = struct.Struct("<QQq")
_ET_REL, _EM_X86_64 = 1, 62
_SHT_PROGBITS, _SHT_RELA, _SHT_NOBITS = 1, 4, 8
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 0x1, 0x2, 0x4
_SHN_UNDEF, _SHN_ABS = 0, 0xFFF1
_STB_LOCAL = 0
#: Relocation types: R_X86_64_64 and PC64 (what the large code model uses), and the 32-bit
#: ones a small code model object holds, checked to fit.
_R_64, _R_PC32, _R_PLT32, _R_32, _R_32S, _R_PC64 = 1, 2, 4, 10, 11, 24
_PAGE = 4096
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS = 0x02, 0x20

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = (
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long
)  # fmt: skip
_mprotect = _libc.mprotect
_mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_munmap = _libc.munmap
_munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Object:
    """One relocatable ELF64 x86-64 object, parsed (kiln.codegen.llvm.objects reads its
    section headers and symbol table): the sections to load and the relocation sections that
    apply to them."""

    def __init__(self, data: bytes):
        self.sections = objects.sections(data)  # (ObjectFormatError if not ELF64 LE)
        kind, machine = struct.unpack_from("<HH", data, 16)
        if kind != _ET_REL or machine != _EM_X86_64:
            raise _Unsupported("not a relocatable x86-64 object")
        self.data = data
        self.symbols = objects.symbol_table(data, self.sections)
        for name, _, section, _ in self.symbols:
            if section >= 0xFF00 and section != _SHN_ABS:  # (common symbols, say)
                raise _Unsupported(f"symbol {name!r} in special section {section:#x}")
        self.loaded: list[int] = []  # indices of the sections to load
        relocations = []  # indices of the RELA sections
        for index, header in enumerate(self.sections):
            kind, flags, size = header[1], header[2], header[5]
            if flags & _SHF_ALLOC:
                if kind not in (_SHT_PROGBITS, _SHT_NOBITS):
                    raise _Unsupported(f"section type {kind:#x}")  # (an unwind table, say)
                if size:
                    self.loaded.append(index)
            elif kind == _SHT_RELA:
                relocations.append(index)
        loaded = set(self.loaded)  # (relocations of sections not loaded, such as notes, go)
        self.relocations = [i for i in relocations if self.sections[i][7] in loaded]


class _LoadedImage:
    """Objects mapped into pages of their own: one region per protection (code, read-only
    data, writable data), each page-aligned, their sections placed at their alignments; the
    relocations applied before the code pages become executable (and never writable again)."""

    def __init__(self, everything: list[bytes]):
        parsed = [_Object(data) for data in everything]
        # Place every section: (object, section index) -> offset in the image.
        regions: dict[int, list] = {}
        for number, obj in enumerate(parsed):
            for index in obj.loaded:
                flags = obj.sections[index][2]
                protection = (
                    _PROT_READ | _PROT_EXEC
                    if flags & _SHF_EXECINSTR
                    else _PROT_READ | _PROT_WRITE
                    if flags & _SHF_WRITE
                    else _PROT_READ
                )
                regions.setdefault(protection, []).append((number, index))
        placed: dict[tuple, int] = {}
        spans = []  # (offset, size, protection)
        size = 0
        for protection, members in regions.items():
            start = size
            for key in members:
                header = parsed[key[0]].sections[key[1]]
                align = max(header[8], 1)
                size = -(-size // align) * align
                placed[key] = size
                size += header[5]
            size = -(-size // _PAGE) * _PAGE
            spans.append((start, size - start, protection))
        self.size = max(size, _PAGE)
        flags = _MAP_PRIVATE | _MAP_ANONYMOUS
        base = _mmap(None, self.size, _PROT_READ | _PROT_WRITE, flags, -1, 0)
        if base in (None, _MAP_FAILED):
            raise MemoryError(f"kiln: could not map {self.size} bytes for native code")
        self.base = base
        try:
            self._fill(parsed, placed, base)
            for start, length, protection in spans:
                if _mprotect(base + start, length, protection) != 0:
                    raise OSError(ctypes.get_errno(), "kiln: mprotect of native code failed")
        except BaseException:
            self.close()
            raise

    def _fill(self, parsed: list[_Object], placed: dict, base: int) -> None:
        image = bytearray(self.size)  # (NOBITS sections stay zero)
        for (number, index), offset in placed.items():
            header = parsed[number].sections[index]
            if header[1] == _SHT_PROGBITS:
                start = header[4]
                image[offset : offset + header[5]] = parsed[number].data[start : start + header[5]]
        # Global symbols first across the objects (they call each other), then the process.
        defined: dict[str, int] = {}
        for number, obj in enumerate(parsed):
            for name, binding, section, value in obj.symbols:
                if binding != _STB_LOCAL and section != _SHN_UNDEF:
                    defined[name] = self._value(placed, number, section, value, base)
        self.symbols = defined
        for number, obj in enumerate(parsed):
            for index in obj.relocations:
                self._relocate(image, obj, number, obj.sections[index], placed, base)
        ctypes.memmove(base, bytes(image), self.size)

    @staticmethod
    def _value(placed: dict, number: int, section: int, value: int, base: int) -> int:
        if section == _SHN_ABS:
            return value
        offset = placed.get((number, section))
        if offset is None:  # (a symbol in a section that is not loaded)
            raise _Unsupported(f"symbol in unloaded section {section}")
        return base + offset + value

    def _relocate(self, image, obj: _Object, number: int, header, placed, base) -> None:
        applies_to = header[7]
        target_offset = placed[(number, applies_to)]
        offset, size = header[4], header[5]
        for position in range(offset, offset + size, _RELA.size):
            where, info, addend = _RELA.unpack_from(obj.data, position)
            kind, symbol = info & 0xFFFFFFFF, info >> 32
            name, binding, section, value = obj.symbols[symbol]
            if section == _SHN_UNDEF:
                resolved = self.symbols.get(name) or llvm.address_of_symbol(name) or 0
                if not resolved and binding != 2:  # (a weak reference may stay 0)
                    raise UnresolvedSymbolError(f"kiln: nothing provides {name!r}")
            else:
                resolved = self._value(placed, number, section, value, base)
            at = target_offset + where
            place = base + at
            if kind == _R_64:
                struct.pack_into("<Q", image, at, (resolved + addend) & (2**64 - 1))
            elif kind == _R_PC64:
                struct.pack_into("<Q", image, at, (resolved + addend - place) & (2**64 - 1))
            elif kind in (_R_PC32, _R_PLT32):
                _pack32(image, at, resolved + addend - place, signed=True)
            elif kind == _R_32:
                _pack32(image, at, resolved + addend, signed=False)
            elif kind == _R_32S:
                _pack32(image, at, resolved + addend, signed=True)
            else:
                raise _Unsupported(f"relocation type {kind}")

    def address(self, symbol: str) -> int:
        return self.symbols.get(symbol, 0)

    def close(self) -> None:
        base = self.__dict__.pop("base", None)
        if base is not None:
            _munmap(base, self.size)


def _pack32(image, at: int, value: int, signed: bool) -> None:
    low, high = (-(2**31), 2**31 - 1) if signed else (0, 2**32 - 1)
    if not low <= value <= high:  # (a small code model object placed too far from a symbol)
        raise _Unsupported("32-bit relocation out of range")
    struct.pack_into("<i" if signed else "<I", image, at, value)

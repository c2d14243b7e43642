"""Reading the object files LLVM emits: which external symbols an object needs.

The JIT engine links an object against the process; a symbol that nothing provides would be
bound to address 0 and the first call through it would crash. Reading the object's symbol
table first turns that into an error that names the symbol. Only what that needs is parsed:
the ELF64 little-endian section headers and the symbol table.
"""

from __future__ import annotations

import struct

_ELF_MAGIC = b"\x7fELF"
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_SHT_SYMTAB = 2
_SHN_UNDEF = 0
_STB_GLOBAL = 1
_STB_WEAK = 2


class ObjectFormatError(ValueError):
    """The bytes are not an ELF64 little-endian object this reader understands."""


def _c_string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise ObjectFormatError("symbol name outside the string table")
    return data[offset:end].decode("ascii", "replace")


def sections(data: bytes) -> list[tuple]:
    """An ELF64 little-endian object's section headers, as struct tuples (name, type, flags,
    address, offset, size, link, info, alignment, entry size)."""
    if len(data) < 64 or data[:4] != _ELF_MAGIC or data[4] != 2 or data[5] != 1:
        raise ObjectFormatError("not an ELF64 little-endian object")
    (section_offset,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count = struct.unpack_from("<HH", data, 0x3A)
    if entry_size != _SECTION_HEADER.size or section_offset + count * entry_size > len(data):
        raise ObjectFormatError("section headers outside the object")
    return [
        _SECTION_HEADER.unpack_from(data, section_offset + i * entry_size) for i in range(count)
    ]


def undefined_symbols(data: bytes, include_weak: bool = False) -> list[str]:
    """The names of the symbols an ELF64 object references but does not define, sorted.

    Weak undefined references resolve to 0 by design and are left out unless include_weak.
    """
    return sorted(_symbols(data, undefined=True, include_weak=include_weak))


def defined_symbols(data: bytes) -> list[str]:
    """The names of the global (or weak) symbols an ELF64 object defines, sorted."""
    return sorted(_symbols(data, undefined=False))


def symbol_table(data: bytes, headers: list[tuple] | None = None) -> list[tuple]:
    """An ELF64 object's symbol table, every entry in order (relocations refer to them by
    position; the first is the null symbol): (name, binding, section index, value).
    `headers`: its sections(), when read already."""
    headers = sections(data) if headers is None else headers
    table: list[tuple] = []
    for header in headers:
        kind, offset, size, link, entry_size = header[1], header[4], header[5], header[6], header[9]
        if kind != _SHT_SYMTAB:
            continue
        if entry_size != _SYMBOL.size or offset + size > len(data) or link >= len(headers):
            raise ObjectFormatError("malformed symbol table")
        strings_offset, strings_size = headers[link][4], headers[link][5]
        strings = data[strings_offset : strings_offset + strings_size]
        for position in range(offset, offset + size, entry_size):
            name_offset, info, _, section_index, value, _ = _SYMBOL.unpack_from(data, position)
            name = _c_string(strings, name_offset) if name_offset else ""
            table.append((name, info >> 4, section_index, value))
    return table


def _symbols(data: bytes, undefined: bool, include_weak: bool = True) -> set[str]:
    names: set[str] = set()
    for name, binding, section_index, _ in symbol_table(data):
        if (section_index == _SHN_UNDEF) != undefined or not name:
            continue
        if undefined and binding == _STB_WEAK and not include_weak:
            continue
        if not undefined and binding not in (_STB_GLOBAL, _STB_WEAK):
            continue
        names.add(name)
    return names

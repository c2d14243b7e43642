"""The text of an llvmlite IR module, written in one pass.

`str(module)` formats each value through several layers of llvmlite's methods (a descr per
instruction, `str.format` per operand, metadata and type strings looked up through method
calls); for kiln's modules that was a fifth of a small program's first compile. module_text
writes the same text (character for character: tests/codegen/test_ir_text.py compares the two
on every kind of module kiln emits) with one function per instruction class kiln uses and
the operands' and types' strings cached for the module. Instructions of any other class, and
whatever has attributes or metadata these writers do not spell out, are written by llvmlite.
"""

from __future__ import annotations

from llvmlite import ir
from llvmlite.ir import instructions as _instr
from llvmlite.ir import values as _values


class _Writer:
    """Formats one module's values, caching each type's and operand's string by identity (the
    module keeps every object alive while it is written)."""

    __slots__ = ("_types", "_refs", "_constants")

    def __init__(self):
        self._types: dict[int, str] = {}
        self._refs: dict[int, str] = {}
        self._constants: dict[tuple, str] = {}

    def type_(self, typ) -> str:
        text = self._types.get(id(typ))
        if text is None:
            text = self._types[id(typ)] = str(typ)
        return text

    def ref(self, value) -> str:
        text = self._refs.get(id(value))
        if text is None:
            kind = type(value)
            if kind is ir.Constant:
                text = self._constant(value)
            elif _plain_name(kind) and "\\" not in value._name and '"' not in value._name:
                text = f'{value.name_prefix}"{value._name}"'  # (NamedValue._get_reference)
            else:
                text = value.get_reference()
            self._refs[id(value)] = text
        return text

    def _constant(self, value) -> str:
        """A constant's reference: scalars by (type, value), since the emitters make a new
        Constant for each use (llvmlite keeps one instance per scalar type); vectors lane by
        lane, a vector of one repeated lane as its type prints it (types.vector's splat)."""
        constant = value.constant
        kind = type(constant)
        if kind is int or kind is bool or (kind is float and constant == constant):
            # (floats by their bits' hex: -0.0 is not 0.0 here; NaNs, whose payloads the
            # text keeps, are not cached)
            key = (id(value.type), kind, constant.hex() if kind is float else constant)
            text = self._constants.get(key)
            if text is None:
                text = self._constants[key] = value.get_reference()
            return text
        if (kind is list or kind is tuple) and constant:
            vector_kind = type(value.type)
            splat = getattr(vector_kind, "prints_splat", False)
            if splat or vector_kind is ir.VectorType:
                first = constant[0]
                if splat and all(lane is first for lane in constant):
                    return f"splat ({self.type_(first.type)} {self.ref(first)})"
                return f"<{', '.join([self.typed(lane) for lane in constant])}>"
        return value.get_reference()

    def typed(self, value) -> str:
        return f"{self.type_(value.type)} {self.ref(value)}"

    def function(self, function: ir.Function) -> str:
        buf: list[str] = []
        function.descr_prototype(buf)
        buf.append("{\n")
        writers = _WRITERS
        for block in function.blocks:
            buf.append(f"{block._format_name()}:\n")
            for instr in block.instructions:
                write = writers.get(type(instr))
                line = None if write is None or instr.metadata else write(self, instr)
                if line is None:
                    line = str(instr)
                elif not isinstance(instr.type, ir.VoidType):
                    line = f"{self.ref(instr)} = {line}".rstrip()
                else:
                    line = line.rstrip()
                buf.append(f"  {line}\n")
        buf.append("}\n")
        return "".join(buf)


_PLAIN: dict[type, bool] = {}


def _plain_name(kind: type) -> bool:
    """Whether values of this class are referred to by NamedValue's own rule (% or @, the
    name quoted), which ref() then applies without llvmlite's calls."""
    plain = _PLAIN.get(kind)
    if plain is None:
        plain = _PLAIN[kind] = (
            issubclass(kind, _values.NamedValue)
            and kind._get_reference is _values.NamedValue._get_reference
            and kind.get_reference is _values.NamedValue.get_reference
        )
    return plain


# Each writer returns what llvmlite's descr of that class appends (before the rstrip that
# NamedValue._to_string applies), or None to leave the instruction to llvmlite.


def _generic(w: _Writer, instr) -> str:
    opname = " ".join([instr.opname, *instr.flags]) if instr.flags else instr.opname
    operands = ", ".join([w.ref(op) for op in instr.operands])
    return f"{opname} {w.type_(instr.type)} {operands}"


def _cast(w: _Writer, instr) -> str:
    (value,) = instr.operands
    return f"{instr.opname} {w.typed(value)} to {w.type_(instr.type)} "


def _load(w: _Writer, instr) -> str:
    (pointer,) = instr.operands
    align = "" if instr.align is None else f", align {instr.align}"
    return f"load {w.type_(instr.type)}, {w.typed(pointer)}{align}"


def _store(w: _Writer, instr) -> str:
    value, pointer = instr.operands
    align = "" if instr.align is None else f", align {instr.align}"
    return f"store {w.typed(value)}, {w.typed(pointer)}{align}"


def _gep(w: _Writer, instr) -> str:
    op = "getelementptr inbounds" if instr.inbounds else "getelementptr"
    indices = ", ".join([w.typed(index) for index in instr.indices])
    return f"{op} {w.type_(instr.source_etype)}, {w.typed(instr.pointer)}, {indices} "


def _phi(w: _Writer, instr) -> str:
    incoming = ", ".join([f"[{w.ref(v)}, {w.ref(b)}]" for v, b in instr.incomings])
    return f"phi {' '.join(instr.flags)} {w.type_(instr.type)} {incoming} "


def _select(w: _Writer, instr) -> str:
    cond, lhs, rhs = instr.operands
    return f"select {' '.join(instr.flags)} {w.typed(cond)}, {w.typed(lhs)}, {w.typed(rhs)} "


def _compare(w: _Writer, instr) -> str:
    flags = "".join([" " + flag for flag in instr.flags])
    lhs, rhs = instr.operands
    return f"{instr.opname}{flags} {instr.op} {w.type_(lhs.type)} {w.ref(lhs)}, {w.ref(rhs)} "


def _terminator(w: _Writer, instr) -> str:
    return f"{instr.opname} {', '.join([w.typed(op) for op in instr.operands])}"


def _ret(w: _Writer, instr) -> str:
    if instr.operands:
        return f"{instr.opname} {w.typed(instr.operands[0])}"
    return instr.opname


def _alloca(w: _Writer, instr) -> str:
    text = f"{instr.opname} {w.type_(instr.allocated_type)}"
    if instr.operands:
        text += f", {w.typed(instr.operands[0])}"
    if instr.align is not None:
        text += f", align {instr.align}"
    return text


def _elements(w: _Writer, instr) -> str:
    return f"{instr.opname} {', '.join([w.typed(op) for op in instr.operands])}"


def _shuffle(w: _Writer, instr) -> str:
    return f"shufflevector {', '.join([w.typed(op) for op in instr.operands])} "


def _call(w: _Writer, instr) -> str | None:
    if instr.arg_attributes or instr.cconv:
        return None
    callee = instr.callee
    ftype = callee.function_type
    if ftype.var_arg:
        return None
    args = ", ".join([w.typed(arg) for arg in instr.operands[1:]])
    tail = f"{instr.tail} " if instr.tail else ""
    ret = ftype.return_type
    fastmath = " " + " ".join(instr.fastmath._to_list(ret)) if instr.fastmath else ""
    attrs = " " + " ".join(instr.attributes._to_list(ret)) if instr.attributes else ""
    return f"{tail}call{fastmath} {w.type_(ret)} {w.ref(callee)}({args}){attrs}"


_WRITERS = {
    _instr.Instruction: _generic,
    _instr.CastInstr: _cast,
    _instr.LoadInstr: _load,
    _instr.StoreInstr: _store,
    _instr.GEPInstr: _gep,
    _instr.PhiInstr: _phi,
    _instr.SelectInstr: _select,
    _instr.ICMPInstr: _compare,
    _instr.FCMPInstr: _compare,
    _instr.Branch: _terminator,
    _instr.ConditionalBranch: _terminator,
    _instr.Ret: _ret,
    _instr.AllocaInstr: _alloca,
    _instr.ExtractElement: _elements,
    _instr.InsertElement: _elements,
    _instr.ShuffleVector: _shuffle,
    _instr.CallInstr: _call,
}


def module_text(module: ir.Module) -> str:
    """str(module), written faster (see the module docstring)."""
    writer = _Writer()
    lines = [
        f'; ModuleID = "{module.name}"',
        f'target triple = "{module.triple}"',
        f'target datalayout = "{module.data_layout}"',
        "",
    ]
    lines += [it.get_declaration() for it in module.get_identified_types().values()]
    for value in module.globals.values():
        if type(value) is _values.Function and value.blocks:
            lines.append(writer.function(value))
        else:
            lines.append(str(value))
    lines += module._get_metadata_lines()
    return "\n".join(lines)

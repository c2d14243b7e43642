"""Whole loops in one native call: when a loop's body (and a while loop's condition) compiled
to a single native segment, the iteration itself runs in machine code.

One small driver function, compiled once per process, takes a descriptor of int64 words: the
condition's and the body's entries (function pointers) with two address tables each, one per
parity of the iteration count. Table 0 reads the carry from buffer set 0 and stores into set
1, table 1 the other way round, so swapping the carry is choosing the other table. A while
loop calls the condition's entry and tests the boolean it stored; a scan writes its row's
addresses (base + row * stride) into the current table's xs and ys slots before each call.
The driver reports the iteration count, whose parity says which set holds the final carry.
"""

from __future__ import annotations

import threading

import numpy as np
from llvmlite import ir

from kiln.codegen.llvm import support, target
from kiln.codegen.llvm import types as T
from kiln.codegen.llvm.loops import for_range
from kiln.runtime import engine
from kiln.runtime.native_call import data_address

__all__ = ["native_while", "native_scan"]

# Descriptor layout (int64 words).
COND_ENTRY, COND_TABLE0, COND_TABLE1, PREDICATE = 0, 1, 2, 3
BODY_ENTRY, BODY_TABLE0, BODY_TABLE1 = 4, 5, 6
LENGTH, REVERSE, STRIDED, COUNT = 7, 8, 9, 10
#: Then one (table slot, base address, stride in bytes) triple per strided slot.
FIRST_STRIDED = 11

_DRIVER_NAME = "kiln_loop_driver"
_driver = None
_driver_lock = threading.Lock()


class _Callee:
    """A function pointer as llvmlite's call instruction wants it (it reads the function type
    from its callee, which an opaque pointer does not carry)."""

    def __init__(self, value: ir.Value, function_type: ir.FunctionType):
        self.value, self.function_type = value, function_type

    @property
    def type(self):
        return self.value.type

    def get_reference(self) -> str:
        return self.value.get_reference()


def _driver_module(triple: str, data_layout: str) -> ir.Module:
    module = ir.Module(name="kiln_loop_driver")
    module.triple, module.data_layout = triple, data_layout
    entry_type = ir.FunctionType(T.VOID, [T.PTR])
    function = ir.Function(module, entry_type, name=_DRIVER_NAME)
    descriptor = function.args[0]
    builder = ir.IRBuilder(function.append_basic_block("entry"))

    def word(position, value=None):
        slot = builder.gep(
            descriptor, [ir.Constant(T.I64, position)], inbounds=True, source_etype=T.I64
        )
        if value is not None:
            return builder.store(value, slot)
        return builder.load(slot, typ=T.I64)

    def pointer(position):
        return builder.inttoptr(word(position), T.PTR)

    cond_entry = _Callee(pointer(COND_ENTRY), entry_type)
    body_entry = _Callee(pointer(BODY_ENTRY), entry_type)
    cond_tables = (pointer(COND_TABLE0), pointer(COND_TABLE1))
    body_tables = (pointer(BODY_TABLE0), pointer(BODY_TABLE1))
    predicate = pointer(PREDICATE)
    length, reverse, strided = word(LENGTH), word(REVERSE), word(STRIDED)
    is_scan = builder.icmp_signed(">=", length, ir.Constant(T.I64, 0))
    start = builder.block

    header = function.append_basic_block("iteration")
    scan_check = function.append_basic_block("scan.check")
    scan_rows = function.append_basic_block("scan.rows")
    while_check = function.append_basic_block("while.check")
    body_block = function.append_basic_block("body")
    exit_block = function.append_basic_block("exit")
    builder.branch(header)

    builder.position_at_end(header)
    count = builder.phi(T.I64, name="count")
    count.add_incoming(ir.Constant(T.I64, 0), start)
    odd = builder.trunc(builder.and_(count, ir.Constant(T.I64, 1)), T.I1)
    body_table = builder.select(odd, body_tables[1], body_tables[0])
    builder.cbranch(is_scan, scan_check, while_check)

    builder.position_at_end(scan_check)
    builder.cbranch(builder.icmp_signed("<", count, length), scan_rows, exit_block)
    builder.position_at_end(scan_rows)
    last = builder.sub(length, ir.Constant(T.I64, 1))
    row = builder.select(builder.trunc(reverse, T.I1), builder.sub(last, count), count)
    with for_range(builder, ir.Constant(T.I64, 0), strided, "slot", unroll=False) as k:
        at = builder.add(builder.mul(k, ir.Constant(T.I64, 3)), ir.Constant(T.I64, FIRST_STRIDED))
        slot = builder.load(builder.gep(descriptor, [at], source_etype=T.I64), typ=T.I64)
        base = builder.load(
            builder.gep(descriptor, [builder.add(at, ir.Constant(T.I64, 1))], source_etype=T.I64),
            typ=T.I64,
        )
        stride = builder.load(
            builder.gep(descriptor, [builder.add(at, ir.Constant(T.I64, 2))], source_etype=T.I64),
            typ=T.I64,
        )
        builder.store(
            builder.add(base, builder.mul(row, stride)),
            builder.gep(body_table, [slot], source_etype=T.I64),
        )
    builder.branch(body_block)

    builder.position_at_end(while_check)
    builder.call(cond_entry, [builder.select(odd, cond_tables[1], cond_tables[0])])
    flag = builder.load(predicate, typ=T.I8)
    builder.cbranch(builder.icmp_unsigned("!=", flag, ir.Constant(T.I8, 0)), body_block, exit_block)

    builder.position_at_end(body_block)
    builder.call(body_entry, [body_table])
    count.add_incoming(builder.add(count, ir.Constant(T.I64, 1)), builder.block)
    builder.branch(header)

    builder.position_at_end(exit_block)
    word(COUNT, count)
    builder.ret_void()
    return module


def _driver_entry():
    """The driver's ctypes entry, compiled for the baseline CPU on first use."""
    global _driver
    with _driver_lock:
        if _driver is None:
            import llvmlite.binding as llvm

            baseline = target.make_target(support.SUPPORT_CPU)
            module = llvm.parse_assembly(str(_driver_module(baseline.triple, baseline.data_layout)))
            module.verify()
            machine = baseline.create_machine()
            target.optimize(module, machine)
            library = engine.load_object(machine.emit_object(module), baseline, "the loop driver")
            entry = engine.ENTRY_SIGNATURE(library.address(_DRIVER_NAME))
            entry.library = library  # the code lives as long as the entry
            _driver = entry
        return _driver


# --- which loops qualify, and their tables -----------------------------------------------------


class _Single:
    """A sub-program that is exactly one native segment (no reference-impl stages, no
    parallel kernels): its entry address, the template of its address table, and the table
    slot of each of its jaxpr's inputs and outputs (None where the segment does not use one)."""

    def __init__(self, sub):
        executable = sub.executable
        self.ok = False
        if executable is None or executable.loops:
            return
        segments = [s for s in executable.segments if s is not None]
        if len(segments) != 1 or segments[0].parallel:
            return
        if any(not stage.native and stage.eqns for stage in executable.stages):
            return
        segment = segments[0]
        jaxpr = executable.program.jaxpr
        invars = jaxpr.invars[len(executable.hidden_args) :]
        slot_of = {
            var: segment.slots[segment.plan.buffers[var]]
            for var in list(segment.inputs) + list(segment.outputs)
        }
        self.in_slots = [slot_of.get(v) for v in invars]
        self.invars = list(invars)
        self.outvars = list(jaxpr.outvars)
        self.produced = set(segment.outputs)
        self.out_slots = [slot_of.get(v) if v in self.produced else None for v in jaxpr.outvars]
        self.entry_address = segment.native.address
        self.template = list(segment.table)  # its fixed inputs' addresses are set
        self.keep = segment  # the entry's code and the fixed inputs' buffers
        self.ok = True

    def passthrough(self, position: int, carry_start: int) -> bool:
        """Whether output `position` is the input at carry_start + position (a carry the
        loop never changes)."""
        out = self.outvars[position]
        return out is self.invars[carry_start + position]


def _carry_plan(body: _Single, carry_start: int, num_carry: int):
    """Per carry: True if the body stores it (a distinct segment output), False if it passes
    through unchanged; None when the carry's outputs need the general path."""
    seen, plan = set(), []
    for j in range(num_carry):
        out = body.outvars[j]
        if body.passthrough(j, carry_start):
            plan.append(False)
        elif out in body.produced and out not in seen:
            seen.add(out)
            plan.append(True)
        else:
            return None
    return plan, seen


def _has_empty(avals) -> bool:
    return any(0 in a.shape for a in avals)


def _carry_sets(carry, stored) -> tuple[list, list]:
    """The two carry buffer sets: set 0 starts as a copy of the initial carry, set 1 is
    empty; a carry the loop never changes is its initial buffer in both."""
    first = [np.array(c, copy=True) if s else c for c, s in zip(carry, stored)]
    second = [np.empty_like(c) if s else c for c, s in zip(carry, stored)]
    return first, second


def _table(template: list, slots, arrays, more_slots=(), more_arrays=()) -> list:
    table = list(template)
    for slot, array in zip(slots, arrays):
        if slot is not None:
            table[slot] = data_address(array)
    for slot, array in zip(more_slots, more_arrays):
        if slot is not None:
            table[slot] = data_address(array)
    return table


def _launch(driver, words: list, tables: list, table_words: tuple) -> int:
    """Lay the descriptor and the tables out in one int64 array, point the descriptor's
    table words at them, run the driver; returns the iteration count."""
    layout = list(words)
    offsets = []
    for table in tables:
        offsets.append(len(layout))
        layout += table
    buffer = np.array(layout, np.int64)
    base = data_address(buffer)
    for word, offset in zip(table_words, offsets):
        buffer[word] = base + 8 * offset
    driver(base)
    return int(buffer[COUNT])


class NativeWhile:
    """A while loop whose condition and body are single native segments."""

    def __init__(self, runner, cond: _Single, body: _Single, stored: list):
        self.runner, self.cond, self.body, self.stored = runner, cond, body, stored
        self.driver = _driver_entry()

    def run(self, cond_consts, body_consts, carry) -> list[np.ndarray]:
        cond, body = self.cond, self.body
        sets = _carry_sets(carry, self.stored)
        predicate = np.zeros((), np.bool_)
        cond_tables, body_tables = [], []
        for parity in (0, 1):
            reads, writes = sets[parity], sets[1 - parity]
            cond_tables.append(
                _table(
                    cond.template, cond.in_slots, cond_consts + reads, cond.out_slots, [predicate]
                )
            )
            body_tables.append(
                _table(body.template, body.in_slots, body_consts + reads, body.out_slots, writes)
            )
        words = [0] * FIRST_STRIDED
        words[COND_ENTRY], words[BODY_ENTRY] = cond.entry_address, body.entry_address
        words[PREDICATE] = data_address(predicate)
        words[LENGTH] = -1
        count = _launch(
            self.driver,
            words,
            cond_tables + body_tables,
            (COND_TABLE0, COND_TABLE1, BODY_TABLE0, BODY_TABLE1),
        )
        return list(sets[count & 1])


class NativeScan:
    """A scan whose body is a single native segment."""

    def __init__(self, runner, body: _Single, stored: list):
        self.runner, self.body, self.stored = runner, body, stored
        self.driver = _driver_entry()
        self.fixed = runner.num_consts + runner.num_carry

    def run(self, consts, carry, xs, ys) -> list[np.ndarray]:
        body, runner, num_carry = self.body, self.runner, len(carry)
        sets = _carry_sets(carry, self.stored)
        tables = [
            _table(
                body.template,
                body.in_slots[: self.fixed],
                consts + sets[parity],
                body.out_slots[:num_carry],
                sets[1 - parity],
            )
            for parity in (0, 1)
        ]
        strided = []
        for slot, x in zip(body.in_slots[self.fixed :], xs):
            if slot is not None:
                strided += [slot, data_address(x), x.strides[0]]
        for slot, y in zip(body.out_slots[num_carry:], ys):
            strided += [slot, data_address(y), y.strides[0]]
        words = [0] * FIRST_STRIDED
        words[BODY_ENTRY] = body.entry_address
        words[LENGTH], words[REVERSE] = runner.length, int(runner.reverse)
        words[STRIDED] = len(strided) // 3
        count = _launch(self.driver, words + strided, tables, (BODY_TABLE0, BODY_TABLE1))
        return list(sets[count & 1]) + ys


def native_while(runner) -> NativeWhile | None:
    """The one-call form of a while runner (kiln/runtime/native_loops.py), or None when its
    condition or body needs the general path."""
    cond, body = _Single(runner.cond), _Single(runner.body)
    if not (cond.ok and body.ok) or cond.out_slots[0] is None:
        return None
    if _has_empty(runner.in_avals):
        return None
    plan = _carry_plan(body, runner.body_nconsts, len(runner.body.out_avals))
    if plan is None:
        return None
    return NativeWhile(runner, cond, body, plan[0])


def native_scan(runner) -> NativeScan | None:
    """The one-call form of a scan runner, or None when its body needs the general path."""
    body = _Single(runner.body)
    if not body.ok or _has_empty(runner.in_avals) or _has_empty(runner.y_avals):
        return None
    plan = _carry_plan(body, runner.num_consts, runner.num_carry)
    if plan is None:
        return None
    stored, carried = plan
    ys = body.outvars[runner.num_carry :]
    if len(set(ys)) != len(ys) or any(y not in body.produced or y in carried for y in ys):
        return None
    return NativeScan(runner, body, stored)

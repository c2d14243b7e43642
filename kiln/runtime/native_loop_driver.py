"""Whole loops in one native call: when a loop's body (and a while loop's condition) compiled
to a single native segment, the iteration itself runs in machine code.

One small driver function, compiled once per process, reads a loop's descriptor: an int64
array built once per loop that holds the condition's and the body's entries, three address
tables for each (the first iteration's, and one per parity of the later ones), the strided
slots of a scan and a list of patches. Per call, a small Python function generated for the
loop only writes the call's arrays into the descriptor's argument words (their object
addresses, where NumPy's layout lets the driver read the data pointer itself); the driver
copies each into the table slots that read or store it (the patches), so a call costs one
word write per array whatever the number of slots.

The carry lives in two buffer sets: the first iteration reads the initial carry and stores
into set 1, odd iterations read set 1 and store into set 0, even ones the other way round, so
swapping the carry is choosing the other table and the initial carry is never copied. A while
loop calls the condition's entry and tests the boolean it stored; a scan writes its row's
addresses (base + row * stride) into the current table's xs and ys slots before each call.
The driver reports the iteration count, which says where the final carry is. A scan compiled
with its loop as one kernel (kiln/runtime/native_loop_kernel.py) runs through the same call,
as a loop of one iteration that stores the final carry.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading

import numpy as np
from llvmlite import ir

from kiln.codegen.llvm import support, target
from kiln.codegen.llvm import types as T
from kiln.codegen.llvm.loops import for_range
from kiln.config import config
from kiln.runtime import engine, native_library, native_loop_kernel
from kiln.runtime.native_call import DATA_OFFSET, FAST_ADDRESS, data_address, host_buffer

__all__ = ["native_while", "native_scan", "dense_operands"]

# Descriptor layout: header words (int64). Positions of areas are word offsets from the
# descriptor's start, so that a copy of a descriptor (for a concurrent call) is complete.
COND_ENTRY = 0
COND_TABLES = 1  # three words: the first, odd and even iterations' tables
BODY_ENTRY = 4
BODY_TABLES = 5  # three words, as for the condition
LENGTH, REVERSE = 8, 9  # LENGTH < 0: a while loop
STRIDED, STRIDED_AT = 10, 11  # (table slot, base address, stride in bytes) triples
PATCHES, PATCHES_AT = 12, 13  # (destination word, source) pairs
ARGUMENTS_AT = 14
#: Byte offset of the data pointer inside a NumPy array object when the arguments are the
#: arrays' object addresses (id), or -1 when they are data addresses already.
DATA_FIELD = 15
COUNT = 16  # out: the number of iterations run
PREDICATE = 17  # the word a while loop's condition stores its boolean into
HEADER = 18

logger = logging.getLogger("kiln")

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
    function.attributes.add("nounwind")  # (no unwind table: native_library loads it)
    descriptor = function.args[0]
    builder = ir.IRBuilder(function.append_basic_block("entry"))

    def at(position) -> ir.Value:
        if isinstance(position, int):
            position = ir.Constant(T.I64, position)
        return builder.gep(descriptor, [position], source_etype=T.I64)

    def word(position) -> ir.Value:
        return builder.load(at(position), typ=T.I64)

    def i64(value: int) -> ir.Constant:
        return ir.Constant(T.I64, value)

    # The patches: each destination word gets an argument (its data address, read from the
    # array object when the arguments are objects) or the address of a descriptor word.
    arguments, field = word(ARGUMENTS_AT), word(DATA_FIELD)
    patches_at = word(PATCHES_AT)
    with for_range(builder, i64(0), word(PATCHES), "patch", unroll=False) as k:
        pair = builder.add(patches_at, builder.mul(k, i64(2)))
        destination = at(word(pair))
        source = word(builder.add(pair, i64(1)))
        from_argument = function.append_basic_block("patch.argument")
        from_object = function.append_basic_block("patch.object")
        internal = function.append_basic_block("patch.internal")
        done = function.append_basic_block("patch.done")
        builder.cbranch(builder.icmp_signed(">=", source, i64(0)), from_argument, internal)
        builder.position_at_end(from_argument)
        value = word(builder.add(arguments, source))
        builder.cbranch(builder.icmp_signed(">=", field, i64(0)), from_object, done)
        builder.position_at_end(from_object)
        held = builder.load(builder.inttoptr(builder.add(value, field), T.PTR), typ=T.I64)
        builder.branch(done)
        builder.position_at_end(internal)
        inside = builder.ptrtoint(at(builder.sub(i64(-1), source)), T.I64)
        builder.branch(done)
        builder.position_at_end(done)
        patched = builder.phi(T.I64)
        patched.add_incoming(value, from_argument)
        patched.add_incoming(held, from_object)
        patched.add_incoming(inside, internal)
        builder.store(patched, destination)

    def pointer(position):
        return builder.inttoptr(word(position), T.PTR)

    cond_entry = _Callee(pointer(COND_ENTRY), entry_type)
    body_entry = _Callee(pointer(BODY_ENTRY), entry_type)
    cond_tables = [at(word(COND_TABLES + n)) for n in range(3)]
    body_tables = [at(word(BODY_TABLES + n)) for n in range(3)]
    predicate = at(PREDICATE)
    length, reverse = word(LENGTH), word(REVERSE)
    strided, strided_at = word(STRIDED), word(STRIDED_AT)
    is_scan = builder.icmp_signed(">=", length, i64(0))
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
    count.add_incoming(i64(0), start)
    first = builder.icmp_signed("==", count, i64(0))
    odd = builder.trunc(builder.and_(count, i64(1)), T.I1)

    def table(tables):
        later = builder.select(odd, tables[1], tables[2])
        return builder.select(first, tables[0], later)

    body_table = table(body_tables)
    builder.cbranch(is_scan, scan_check, while_check)

    builder.position_at_end(scan_check)
    builder.cbranch(builder.icmp_signed("<", count, length), scan_rows, exit_block)
    builder.position_at_end(scan_rows)
    last = builder.sub(length, i64(1))
    row = builder.select(builder.trunc(reverse, T.I1), builder.sub(last, count), count)
    with for_range(builder, i64(0), strided, "slot", unroll=False) as k:
        triple = builder.add(strided_at, builder.mul(k, i64(3)))
        slot = word(triple)
        base = word(builder.add(triple, i64(1)))
        stride = word(builder.add(triple, i64(2)))
        builder.store(
            builder.add(base, builder.mul(row, stride)),
            builder.gep(body_table, [slot], source_etype=T.I64),
        )
    builder.branch(body_block)

    builder.position_at_end(while_check)
    builder.call(cond_entry, [table(cond_tables)])
    flag = builder.load(predicate, typ=T.I8)
    builder.cbranch(builder.icmp_unsigned("!=", flag, ir.Constant(T.I8, 0)), body_block, exit_block)

    builder.position_at_end(body_block)
    builder.call(body_entry, [body_table])
    count.add_incoming(builder.add(count, i64(1)), builder.block)
    builder.branch(header)

    builder.position_at_end(exit_block)
    builder.store(count, at(COUNT))
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
            library = native_library.load_object(
                machine.emit_object(module), baseline, "the loop driver"
            )
            entry = engine.ENTRY_SIGNATURE(library.address(_DRIVER_NAME))
            entry.library = library  # the code lives as long as the entry
            _driver = entry
        return _driver


# --- which loops qualify, and their descriptors ------------------------------------------------


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
        self.program = segment.program
        #: the program's buffer of each input and output (None where it has none)
        self.in_buffers = [
            segment.plan.buffers[v] if s is not None else None
            for v, s in zip(invars, self.in_slots)
        ]
        self.out_buffers = [
            segment.plan.buffers[v] if s is not None else None
            for v, s in zip(self.outvars, self.out_slots)
        ]
        #: (buffer, fixed address) of each input that is not one of the jaxpr's visible
        #: inputs (a constant the segment holds)
        visible = set(invars)
        self.hidden = [
            (segment.plan.buffers[v], self.template[slot_of[v]])
            for v in segment.inputs
            if v not in visible
        ]
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


def dense_operands(values, dtypes) -> list[np.ndarray]:
    """The values as arrays native code can read: an aligned, C-contiguous NumPy array of
    the expected dtype passes as it is (the common case, checked in a few field reads), any
    other value is converted."""
    dense = []
    for value, dtype in zip(values, dtypes):
        if type(value) is not np.ndarray or value.dtype is not dtype:
            value = host_buffer(value, dtype)
        else:
            flags = value.flags
            if not (flags.c_contiguous and flags.aligned):
                value = host_buffer(value, dtype)
        dense.append(value)
    return dense


class _Carry:
    """Where each carry is read and stored, by argument number: the loop's arguments are its
    operands (`first` is the first carry's), then (from `sets_at`) set 0 and set 1 of the
    stored carries."""

    def __init__(self, first: int, stored: list[bool], avals: list, sets_at: int):
        self.stored, self.avals = stored, avals
        self.count = sum(stored)
        self.rank = {}  # carry -> its place among the stored ones
        for j, s in enumerate(stored):
            if s:
                self.rank[j] = len(self.rank)
        self.first = first
        self.sets_at = sets_at

    def initial(self, j: int) -> int:
        return self.first + j

    def in_set(self, which: int, j: int) -> int:
        return self.sets_at + which * self.count + self.rank[j]

    def reads(self, table: int, j: int) -> int:
        """The argument that iteration kind `table` (0 first, 1 odd, 2 even) reads carry j
        from."""
        if not self.stored[j] or table == 0:
            return self.initial(j)
        return self.in_set(1 if table == 1 else 0, j)

    def writes(self, table: int, j: int) -> int | None:
        """The argument that iteration kind `table` stores carry j into (None: not stored)."""
        return self.in_set(0 if table == 1 else 1, j) if self.stored[j] else None


class _Descriptor:
    """The int64 words of one loop's descriptor as they are laid out, then (finish) the
    descriptor itself, a ctypes array that every call of the loop reuses."""

    def __init__(self):
        self.words = [0] * HEADER
        self.patches: list[tuple[int, int]] = []

    def area(self, values) -> int:
        start = len(self.words)
        self.words += list(values)
        return start

    def table(self, single: _Single, slots: list, sources: list) -> int:
        """A copy of single's table template whose slots get the given arguments (a source
        below 0 names a descriptor word whose address the slot gets)."""
        start = self.area(single.template)
        for slot, source in zip(slots, sources):
            if slot is not None:
                self.patches.append((start + slot, source))
        return start

    def finish(self, operand_dtypes: list, carry: _Carry, ys: list, sets: int = 2) -> "_Call":
        """The loop's call: its arguments are the operands, the carry's buffer sets (two, or
        one that receives the final carry of a loop run as a single call) and the ys
        ((shape, dtype) each)."""
        set_shapes = [(a.shape, a.dtype) for j, a in enumerate(carry.avals) if carry.stored[j]]
        arguments = len(operand_dtypes) + sets * len(set_shapes) + len(ys)
        words = self.words
        words[ARGUMENTS_AT] = len(words)
        words += [0] * max(arguments, 1)
        words[PATCHES], words[PATCHES_AT] = len(self.patches), len(words)
        for pair in self.patches:
            words += pair
        words[DATA_FIELD] = DATA_OFFSET if FAST_ADDRESS else -1
        return _Call(words, operand_dtypes, carry, set_shapes, ys, sets)


class _Call:
    """One loop's descriptor and its call: write the arguments' addresses, run the driver.

    `run(*operands)` is generated per loop (as the native backend's call paths are): it
    checks that the operands are arrays native code reads as they are, allocates the carry's
    buffer sets and the ys, writes each argument's address into its descriptor word, runs the
    driver and picks the final carry from the count, with no loop over the arguments."""

    def __init__(
        self, words: list[int], operand_dtypes: list, carry: _Carry, set_shapes, ys, sets: int
    ):
        self.descriptor = (ctypes.c_int64 * len(words))(*words)
        self.address = ctypes.addressof(self.descriptor)
        self.lock = threading.Lock()
        self.driver = _driver_entry()
        self.start = words[ARGUMENTS_AT]
        self.run = self._generate(operand_dtypes, carry, set_shapes, ys, sets)

    def contended(self, arrays: tuple) -> int:
        """A call while another thread runs the loop (the driver runs without the GIL): the
        same on a private copy of the descriptor."""
        descriptor = type(self.descriptor).from_buffer_copy(self.descriptor)
        for n, array in enumerate(arrays):
            descriptor[self.start + n] = id(array) if FAST_ADDRESS else data_address(array)
        self.driver(ctypes.addressof(descriptor))
        return descriptor[COUNT]

    def _generate(self, operand_dtypes: list, carry: _Carry, set_shapes, ys, sets: int):
        namespace = {
            "ndarray": np.ndarray,
            "empty": np.empty,
            "copy": np.array,
            "host_buffer": host_buffer,
            "address_of": id if FAST_ADDRESS else data_address,
            "lock": self.lock,
            "driver": self.driver,
            "D": self.descriptor,
            "ADDRESS": self.address,
            "contended": self.contended,
        }

        def constant(prefix: str, value) -> str:
            name = f"{prefix}{len(namespace)}"
            namespace[name] = value
            return name

        operands = [f"a{n}" for n in range(len(operand_dtypes))]
        lines = [f"def run({', '.join(operands)}):"]
        for name, dtype in zip(operands, operand_dtypes):
            d = constant("d", dtype)
            lines += [
                f"    if type({name}) is not ndarray or {name}.dtype is not {d} "
                f"or not {name}.flags.c_contiguous or not {name}.flags.aligned:",
                f"        {name} = host_buffer({name}, {d})",
            ]
        sets = [[f"s{which}_{r}" for r in range(carry.count)] for which in range(sets)]
        outs = [f"y{k}" for k in range(len(ys))]
        for names, shapes in [(names, set_shapes) for names in sets] + [(outs, ys)]:
            for name, (shape, dtype) in zip(names, shapes):
                lines.append(f"    {name} = empty({constant('s', shape)}, {constant('d', dtype)})")
        arguments = operands + [name for names in sets for name in names] + outs
        lines += ["    if lock.acquire(False):", "        try:"]
        start = self.start
        lines += [f"            D[{start + n}] = address_of({a})" for n, a in enumerate(arguments)]
        lines += [
            "            driver(ADDRESS)",
            f"            count = D[{COUNT}]",
            "        finally:",
            "            lock.release()",
            "    else:",
            f"        count = contended(({''.join(a + ', ' for a in arguments)}))",
        ]
        initial = [operands[carry.initial(j)] for j in range(len(carry.stored))]

        def results(pick) -> str:
            carries = [pick(j) if j in carry.rank else initial[j] for j in range(len(initial))]
            return f"[{', '.join(carries + outs)}]"

        if len(sets) == 1:  # the loop ran as one call, which stored the final carry
            lines.append(f"    return {results(lambda j: sets[0][carry.rank[j]])}")
            return self._compile(lines, namespace)
        lines += [
            "    if count & 1:",
            f"        return {results(lambda j: sets[1][carry.rank[j]])}",
            "    if count:",
            f"        return {results(lambda j: sets[0][carry.rank[j]])}",
            f"    return {results(lambda j: f'copy({initial[j]}, copy=True)')}",
        ]
        return self._compile(lines, namespace)

    def _compile(self, lines: list[str], namespace: dict):
        self.source = "\n".join(lines) + "\n"
        exec(compile(self.source, "<kiln loop call>", "exec"), namespace)
        return namespace["run"]


class NativeWhile:
    """A while loop whose condition and body are single native segments: `run(*operands)`
    (cond consts, body consts, the initial carry) returns the final carry."""

    def __init__(self, runner, cond: _Single, body: _Single, stored: list):
        self.runner, self.cond, self.body = runner, cond, body
        cond_nconsts, body_nconsts = runner.cond_nconsts, runner.body_nconsts
        num_carry = len(stored)
        # arguments: cond consts, body consts, the initial carry, set 0, set 1
        first = cond_nconsts + body_nconsts
        carry = _Carry(first, stored, runner.body.in_avals[body_nconsts:], first + num_carry)
        cond_consts = list(range(cond_nconsts))
        body_consts = list(range(cond_nconsts, cond_nconsts + body_nconsts))
        layout = _Descriptor()
        for kind in range(3):
            reads = [carry.reads(kind, j) for j in range(num_carry)]
            layout.words[COND_TABLES + kind] = layout.table(
                cond, cond.in_slots + cond.out_slots, cond_consts + reads + [-PREDICATE - 1]
            )
            writes = [carry.writes(kind, j) for j in range(num_carry)]
            layout.words[BODY_TABLES + kind] = layout.table(
                body, body.in_slots + body.out_slots, body_consts + reads + writes
            )
        layout.words[COND_ENTRY], layout.words[BODY_ENTRY] = cond.entry_address, body.entry_address
        layout.words[LENGTH] = -1
        self.call = layout.finish([a.dtype for a in runner.in_avals], carry, [])
        self.run = self.call.run


class NativeScan:
    """A scan whose body is a single native segment: `run(*operands)` (consts, the initial
    carry, xs with the hoisted products' rows last) returns the final carry and the stacked
    ys."""

    def __init__(self, runner, body: _Single, stored: list):
        self.runner, self.body = runner, body
        num_consts, num_carry = runner.num_consts, runner.num_carry
        fixed = num_consts + num_carry
        # arguments: consts, the initial carry, xs, set 0, set 1, ys
        avals = runner.in_avals[num_consts:fixed]
        carry = _Carry(num_consts, stored, avals, fixed + len(runner.x_avals))
        operand_dtypes = [a.dtype for a in runner.in_avals]
        ys = [((runner.length,) + a.shape, a.dtype) for a in runner.y_avals]
        self.kernel = _scan_kernel(runner, body, stored)
        if self.kernel is not None:
            self.call = _one_kernel_call(self.kernel, carry, operand_dtypes, ys)
            self.run = self.call.run
            return
        ys_at = fixed + len(runner.x_avals) + 2 * carry.count
        layout = _Descriptor()
        for kind in range(3):
            reads = [carry.reads(kind, j) for j in range(num_carry)]
            writes = [carry.writes(kind, j) for j in range(num_carry)]
            layout.words[BODY_TABLES + kind] = layout.table(
                body,
                body.in_slots[:fixed] + body.out_slots[:num_carry],
                list(range(num_consts)) + reads + writes,
            )
        strided = []  # (slot, argument, row stride in bytes)
        for k, (slot, aval) in enumerate(zip(body.in_slots[fixed:], runner.x_avals)):
            if slot is not None:
                strided.append((slot, fixed + k, aval.size * aval.dtype.itemsize))
        for k, (slot, aval) in enumerate(zip(body.out_slots[num_carry:], runner.y_avals)):
            strided.append((slot, ys_at + k, aval.size * aval.dtype.itemsize))
        start = layout.area([word for slot, _, stride in strided for word in (slot, 0, stride)])
        for n, (_, argument, _) in enumerate(strided):
            layout.patches.append((start + 3 * n + 1, argument))
        layout.words[STRIDED], layout.words[STRIDED_AT] = len(strided), start
        layout.words[BODY_ENTRY] = body.entry_address
        layout.words[LENGTH], layout.words[REVERSE] = runner.length, int(runner.reverse)
        self.call = layout.finish(operand_dtypes, carry, ys)
        self.run = self.call.run


def _scan_kernel(runner, body: _Single, stored: list):
    """The scan's loop and body compiled as one kernel (kiln/runtime/native_loop_kernel.py),
    or None when it does not qualify."""
    num_consts, num_carry = runner.num_consts, runner.num_carry
    fixed = num_consts + num_carry
    carry_in = body.in_buffers[num_consts:fixed]
    carry_out = [b if s else None for b, s in zip(body.out_buffers[:num_carry], stored)]
    try:
        found = _compiled_scan_kernel(runner, body, carry_in, carry_out)
    except Exception as err:  # noqa: BLE001 - the per-row call still runs the loop
        if config.native_strict:
            raise
        logger.warning(
            "kiln: %s runs one call per row (%s: %s)", body.program.name, type(err).__name__, err
        )
        return None
    return found


def _compiled_scan_kernel(runner, body: _Single, carry_in: list, carry_out: list):
    num_consts, num_carry = runner.num_consts, runner.num_carry
    fixed = num_consts + num_carry
    found = native_loop_kernel.scan_kernel(
        f"{body.program.name}_scan",
        body.program,
        [b for b, _ in body.hidden],
        body.in_buffers[:num_consts],
        carry_in,
        carry_out,
        body.in_buffers[fixed:],
        body.out_buffers[num_carry:],
        runner.length,
        runner.reverse,
    )
    if found is None:
        return None
    (found.native,) = engine.compile_programs([found.program], pipelines=["full"])
    _dump(found.program, found.native)
    found.hidden_addresses = [address for _, address in body.hidden]
    return found


def _dump(program, native) -> None:
    """Print what KILN_DUMP asks for, as for every other compiled program."""
    if "kir" in config.dump:
        print(f"--- kiln: kernel IR of {program.name} ---\n{program}", file=sys.stderr)
    if "llvm" in config.dump:
        text = native.llvm_ir or native.unoptimized_ir
        print(f"--- kiln: LLVM IR of {program.name} ---\n{text}", file=sys.stderr)
    if "asm" in config.dump:
        print(f"--- kiln: assembly of {program.name} ---\n{native.asm}", file=sys.stderr)


def _one_kernel_call(kernel, carry: _Carry, operand_dtypes: list, ys: list) -> _Call:
    """The call of a scan compiled as one kernel: the driver runs its entry once, with one
    table (the three iteration kinds share it); the carry's one buffer set receives the final
    carry."""
    layout = _Descriptor()
    template = [0] * max(len(kernel.program.arguments), 1)
    hidden = kernel.hidden_addresses
    xs_at = carry.first + len(carry.stored)
    ys_at = carry.sets_at + carry.count
    start = layout.area(template)
    for n, (kind, index) in enumerate(kernel.sources):
        if kind == "hidden":
            layout.words[start + n] = hidden[index]
            continue
        if kind == "const":
            source = index
        elif kind == "initial":
            source = carry.initial(index)
        elif kind == "xs":
            source = xs_at + index
        elif kind == "final":
            source = carry.in_set(0, index)
        else:
            source = ys_at + index
        layout.patches.append((start + n, source))
    for kind in range(3):
        layout.words[BODY_TABLES + kind] = start
    layout.words[BODY_ENTRY] = kernel.native.address
    layout.words[LENGTH] = 1
    return layout.finish(operand_dtypes, carry, ys, sets=1)


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

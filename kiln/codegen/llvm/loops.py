"""Control-flow helpers for building LLVM IR: counted loops, conditionals, entry-block allocas.

Context managers in the manner of numba's cgutils, so the emitter reads as the loop nest it
builds rather than as block bookkeeping.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from llvmlite import ir

from kiln.codegen.llvm.types import I64


@contextlib.contextmanager
def for_range(
    builder: ir.IRBuilder,
    start: ir.Value,
    stop: ir.Value,
    name: str = "i",
    step: int = 1,
    unroll: bool = True,
) -> Iterator[ir.Value]:
    """for (i = start; i < stop; i += step): yields the i64 induction variable inside the body.

    The increment is `add nsw`: indices stay far below 2**63 - step, so it can never wrap.
    unroll=False asks LLVM to keep the loop rolled (see no_unroll_metadata).
    """
    function = builder.function
    preheader = builder.block
    header = function.append_basic_block(f"{name}.header")
    body = function.append_basic_block(f"{name}.body")
    exit_block = function.append_basic_block(f"{name}.exit")
    builder.branch(header)

    builder.position_at_end(header)
    index = builder.phi(I64, name=name)
    index.add_incoming(start, preheader)
    builder.cbranch(builder.icmp_signed("<", index, stop), body, exit_block)

    builder.position_at_end(body)
    yield index
    # The body may have opened blocks of its own; whichever is current is the latch.
    following = builder.add(index, ir.Constant(I64, step), name=f"{name}.next", flags=("nsw",))
    index.add_incoming(following, builder.block)
    latch = builder.branch(header)
    if not unroll:
        latch.set_metadata("llvm.loop", no_unroll_metadata(builder.module))
    builder.position_at_end(exit_block)


def no_unroll_metadata(module: ir.Module) -> ir.MDValue:
    """A fresh loop id carrying llvm.loop.unroll.disable. A loop id must be distinct, hence
    self-referential: it is made with a unique placeholder operand, then pointed at itself."""
    disable = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    placeholder = ir.MetaDataString(module, f"kiln.loop.{len(module.metadata)}")
    loop_id = module.add_metadata([placeholder, disable])
    loop_id.operands = (loop_id, disable)
    return loop_id


@contextlib.contextmanager
def if_then(builder: ir.IRBuilder, condition: ir.Value, name: str = "if") -> Iterator[None]:
    """Run the body only when the i1 condition holds."""
    function = builder.function
    then_block = function.append_basic_block(f"{name}.then")
    merge_block = function.append_basic_block(f"{name}.end")
    builder.cbranch(condition, then_block, merge_block)
    builder.position_at_end(then_block)
    yield
    builder.branch(merge_block)
    builder.position_at_end(merge_block)


def entry_alloca(
    builder: ir.IRBuilder, ty: ir.Type, name: str = "", align: int | None = None
) -> ir.AllocaInstr:
    """A stack slot in the function's entry block, where SROA promotes it to a register (an
    alloca inside a loop would grow the stack every iteration). The builder's position is
    kept."""
    with builder.goto_entry_block():
        slot = builder.alloca(ty, name=name)
    if align:
        slot.align = align
    return slot

"""A packed, cache-blocked matrix product c = a @ b of any extents, emitted as LLVM IR.

small_gemm reads b in place, which pays while b stays in the second-level cache and its rows
are less than a page apart. Beyond that, this kernel copies b a panel at a time (KC rows by
NC columns) into a contiguous buffer that stays in the second-level cache, laid out as column
slivers of the register block's width ([KC][width] per sliver) so the inner loop streams it.
Every block of a's rows then sweeps the panel: the block's rows are read in place (KC
elements each, read again for each sliver from a near cache), and a tile of c (rows x width)
stays in registers while the loop walks the panel's depth, as in small_gemm. Where
small_gemm's conditions hold (b small, rows close), the whole slivers are read from b in place
instead and only a partial last sliver is copied (copying b cost 5% on 128x512x512), and this
kernel runs within a few percent of small_gemm.

Order of the sums: the panels along the contracted dimension are taken in order and each
continues the fused multiply-add chains of the last (the accumulators start from c), so every
result element is one in-order chain over the whole contraction; only the first panel starts
from zero, so c is overwritten, never read before it is written.

Tails: a partial block of rows reads its last row again for the missing ones and stores only
the real rows; a partial sliver is zero-padded when copied and its columns of c are read and
written with masked loads and stores; a short panel of the contraction just has fewer steps.

The packing buffer is a stack slot sized to the product, at most KC x NC (512 KiB), rather
than a caller's workspace: the function keeps BLAS's signature, no caller has to size or keep a
buffer, and kiln's threads have 8 MiB stacks. The stack is probed as it grows ("probe-stack"),
so the slot can never step over a guard page. The code is plain LLVM vectors, llvm.fmuladd and
LLVM's masked load/store and prefetch intrinsics: it calls nothing else and compiles for every
target.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from kiln.codegen.llvm import types as T
from kiln.codegen.llvm.loops import entry_alloca, for_range, if_then
from kiln.codegen.llvm.small_gemm import (
    MAX_RHS_BYTES,
    MAX_RHS_STRIDE,
    _layout,
)

__all__ = ["KC", "NC", "define"]

#: Depth of a panel (rows of b, columns of a), by element size: a register block's rows of a
#: are then 2 KiB each (16 KiB in all, read again for every sliver from a near cache). Each
#: block loads and stores its tile of c once per panel, so deeper panels also mean fewer passes
#: over c. Measured on Zen 4 for float32 against 256: as fast on 1024^3, 3-8% faster on
#: 2048x1024x1024 and on a tall product (4096x256x1024). For float64, 128 was slower and 512
#: no faster than 256.
KC = {4: 512, 8: 256}
#: Columns of a panel: a packed panel is then KC * NC * itemsize = 512 KiB, half of Zen 4's
#: 1 MiB second-level cache, so it stays there next to the rows of a and the tiles of c that
#: stream past it. A panel twice as wide (the whole cache, and 1 MiB of stack) was at most 2%
#: faster for float32.
NC = 256
#: Vectors of columns per register block (the sliver's width is VECTORS * lanes). Three (24
#: accumulators with AVX-512) were 3-5% slower than two on Zen 4; without AVX-512, 2 x 6 rows
#: already take 12 of the 16 vector registers. A last sliver of at most one vector's columns
#: runs a block one vector wide instead.
VECTORS = 2
# There is no third block size (BLAS's mc, the rows of a packed block of a): a is read in
# place, one register block of rows (8 or 6) at a time, and each row of c is visited once per
# panel. Copying a's rows into a contiguous block first (in a scalar loop) was 1-9% slower.

# llvm.prefetch's arguments: for writing, into the nearest cache, data.
_WRITE, _KEEP_CLOSE, _DATA_CACHE = 1, 3, 1


def _name(dtype: np.dtype) -> str:
    return f"kiln_packed_gemm_f{dtype.itemsize * 8}x{_layout(dtype)[0]}"


def define(module: ir.Module, dtype, name: str | None = None, trans_a: bool = False) -> ir.Function:
    """Add to `module` (once; later calls return the same function) the external function

        void <name>(i64 m, i64 n, i64 k, ptr a, i64 lda, ptr b, i64 ldb, ptr c, i64 ldc)

    computing c = a @ b for row-major float32 or float64 matrices, m, n, k >= 1 (row strides
    in elements, at least the row lengths); with trans_a, c = aᵀ @ b for a stored k x m (a
    weight gradient's xᵀ @ g: the block's rows of aᵀ are then side by side in memory, read in
    place as well). c does not overlap a or b. The name defaults to
    kiln_packed_gemm_f{bits}x{lanes}[_ta]; kiln's kernel library (gemm_library) gives its own."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"packed_gemm: only float32 and float64 products, got {dtype.name}")
    name = name or _name(dtype) + ("_ta" if trans_a else "")
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return _Emitter(module, dtype, name, trans_a).product()


def _index(value: int) -> ir.Constant:
    return ir.Constant(T.I64, value)


def _i32(value: int) -> ir.Constant:
    return ir.Constant(T.I32, value)


class _Emitter:
    """The product and its two helpers (the register block and the panel copy) for one dtype
    on the current target."""

    def __init__(self, module: ir.Module, dtype: np.dtype, name: str, trans_a: bool = False):
        self.module = module
        self.dtype = dtype
        self.name = name
        self.trans_a = trans_a
        self.lanes, self.rows = _layout(dtype)
        self.width = VECTORS * self.lanes
        self.kc = KC[dtype.itemsize]
        self.nc = NC - NC % self.width
        self.scalar = T.FLOAT if dtype == np.float32 else T.DOUBLE
        self.vector = ir.VectorType(self.scalar, self.lanes)
        self.masks = ir.VectorType(T.I1, self.lanes)
        self.suffix = f"v{self.lanes}f{dtype.itemsize * 8}"
        self.align = dtype.itemsize

    # -- small pieces ------------------------------------------------------------------------
    def _intrinsic(self, name: str, result: ir.Type, arguments: list) -> ir.Function:
        function = self.module.globals.get(name)
        if function is None:
            function = ir.Function(self.module, ir.FunctionType(result, arguments), name)
        return function

    def _function(self, suffix: str, arguments: list, internal: bool = True) -> ir.Function:
        from kiln.codegen.llvm.target import kernel_attributes

        function = ir.Function(self.module, ir.FunctionType(T.VOID, arguments), self.name + suffix)
        function.attributes = kernel_attributes()
        function.attributes.add("nounwind")
        if internal:
            function.linkage = "internal"
            # Kept out of line: the register block's loop then gets the registers to itself.
            function.attributes.add("noinline")
        return function

    def _zero(self) -> ir.Constant:
        return ir.Constant(self.vector, [ir.Constant(self.scalar, 0.0)] * self.lanes)

    def _gep(self, builder: ir.IRBuilder, pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return builder.gep(pointer, [offset], source_etype=self.scalar)

    def _column_mask(self, builder: ir.IRBuilder, columns: ir.Value, first: int) -> ir.Value:
        """Lane i is on when first + i < columns."""
        indices = ir.VectorType(T.I64, self.lanes)
        ramp = ir.Constant(indices, [first + i for i in range(self.lanes)])
        return builder.icmp_signed("<", ramp, T.splat(builder, columns, self.lanes))

    def _masked_load(self, builder, pointer, mask):
        """Lanes under the mask from memory, zero elsewhere (other lanes are not read)."""
        load = self._intrinsic(
            f"llvm.masked.load.{self.suffix}.p0",
            self.vector,
            [T.PTR, T.I32, self.masks, self.vector],
        )
        return builder.call(load, [pointer, _i32(self.align), mask, self._zero()])

    def _masked_store(self, builder, value, pointer, mask) -> None:
        store = self._intrinsic(
            f"llvm.masked.store.{self.suffix}.p0",
            T.VOID,
            [self.vector, T.PTR, T.I32, self.masks],
        )
        builder.call(store, [value, pointer, _i32(self.align), mask])

    def _prefetch_for_writing(self, builder, pointer) -> None:
        prefetch = self._intrinsic("llvm.prefetch.p0", T.VOID, [T.PTR, T.I32, T.I32, T.I32])
        builder.call(prefetch, [pointer, _i32(_WRITE), _i32(_KEEP_CLOSE), _i32(_DATA_CACHE)])

    def _min(self, builder, x, y):
        return builder.select(builder.icmp_signed("<", x, y), x, y)

    # -- the register block ------------------------------------------------------------------
    def _block(self, vectors: int) -> ir.Function:
        """block(depth, a, lda, rows, sliver, stride, c, ldc, columns, first):
        c[:rows, :columns] = (first ? 0 : c[:rows, :columns]) + a[:rows, :depth] @ sliver,
        the sliver's rows `stride` elements apart, `vectors` vectors wide (zero past
        `columns`)."""
        arguments = [T.I64, T.PTR, T.I64, T.I64, T.PTR, T.I64, T.PTR, T.I64, T.I64, T.I1]
        function = self._function(f"_block{vectors}", arguments)
        depth, a, lda, rows, sliver, stride, c, ldc, columns, first = function.args
        for argument in (a, sliver, c):
            argument.add_attribute("noalias")
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        lanes = self.lanes
        slots = [
            [entry_alloca(builder, self.vector, f"acc{r}_{v}") for v in range(vectors)]
            for r in range(self.rows)
        ]
        # Missing rows read the last real row again (never past a), and are not stored. Row
        # r's element kk is at a + r * lda + kk, or with trans_a (a stored transposed) at
        # a + r + kk * lda.
        last = builder.sub(rows, _index(1))
        row_stride, depth_stride = (_index(1), lda) if self.trans_a else (lda, _index(1))
        a_rows = [
            self._gep(builder, a, builder.mul(self._min(builder, _index(r), last), row_stride))
            for r in range(self.rows)
        ]
        c_tiles = [
            [
                self._gep(builder, c, builder.add(builder.mul(_index(r), ldc), _index(v * lanes)))
                for v in range(vectors)
            ]
            for r in range(self.rows)
        ]
        whole = builder.and_(
            builder.icmp_signed("==", rows, _index(self.rows)),
            builder.icmp_signed("==", columns, _index(vectors * lanes)),
        )

        def masks():
            """The lanes of each tile that are inside c[:rows, :columns]."""
            column_masks = [self._column_mask(builder, columns, v * lanes) for v in range(vectors)]
            for r in range(self.rows):
                live = T.splat(builder, builder.icmp_signed("<", _index(r), rows), self.lanes)
                yield r, [builder.and_(mask, live) for mask in column_masks]

        with builder.if_else(first) as (from_zero, from_c):
            with from_zero:
                for row in slots:
                    for slot in row:
                        builder.store(self._zero(), slot)
            with from_c:
                with builder.if_else(whole) as (full, partial):
                    with full:
                        for r, row in enumerate(slots):
                            for v, slot in enumerate(row):
                                tile = builder.load(
                                    c_tiles[r][v], typ=self.vector, align=self.align
                                )
                                builder.store(tile, slot)
                    with partial:
                        for r, row_masks in masks():
                            for v, mask in enumerate(row_masks):
                                tile = self._masked_load(builder, c_tiles[r][v], mask)
                                builder.store(tile, slots[r][v])
        # The next block along the row is c's next tile: ask for it now, so that its first
        # multiply-adds do not wait for it.
        for row in c_tiles:
            for tile in row:
                self._prefetch_for_writing(builder, self._gep(builder, tile, _index(self.width)))
        fmuladd = self._intrinsic(f"llvm.fmuladd.{self.suffix}", self.vector, [self.vector] * 3)
        with for_range(builder, _index(0), depth, "kk") as kk:
            b_row = self._gep(builder, sliver, builder.mul(kk, stride))
            b_vectors = [
                builder.load(
                    self._gep(builder, b_row, _index(v * lanes)), typ=self.vector, align=self.align
                )
                for v in range(vectors)
            ]
            a_offset = kk if not self.trans_a else builder.mul(kk, depth_stride)
            for r in range(self.rows):
                element = builder.load(
                    self._gep(builder, a_rows[r], a_offset), typ=self.scalar, align=self.align
                )
                element = T.splat(builder, element, self.lanes)
                for v in range(vectors):
                    total = builder.load(slots[r][v], typ=self.vector)
                    total = builder.call(fmuladd, [element, b_vectors[v], total])
                    builder.store(total, slots[r][v])
        with builder.if_else(whole) as (full, partial):
            with full:
                for r, row in enumerate(slots):
                    for v, slot in enumerate(row):
                        tile = builder.load(slot, typ=self.vector)
                        builder.store(tile, c_tiles[r][v], align=self.align)
            with partial:
                for r, row_masks in masks():
                    for v, mask in enumerate(row_masks):
                        tile = builder.load(slots[r][v], typ=self.vector)
                        self._masked_store(builder, tile, c_tiles[r][v], mask)
        builder.ret_void()
        return function

    # -- the panel copy ----------------------------------------------------------------------
    def _pack(self) -> ir.Function:
        """pack(depth, columns, start, b, ldb, panel, size): copy the slivers from `start` on
        of b[:depth, :columns] to panel + (sliver - start) * size, [depth][width] each, zero
        past `columns`."""
        function = self._function("_pack", [T.I64, T.I64, T.I64, T.PTR, T.I64, T.PTR, T.I64])
        depth, columns, start, b, ldb, panel, size = function.args
        for argument in (b, panel):
            argument.add_attribute("noalias")
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        width, lanes = self.width, self.lanes
        whole = builder.sdiv(columns, _index(width))
        rest = builder.srem(columns, _index(width))
        with for_range(builder, _index(0), depth, "kk") as kk:
            source = self._gep(builder, b, builder.mul(kk, ldb))
            target = self._gep(builder, panel, builder.mul(kk, _index(width)))

            def sliver(s):
                """(the sliver's row kk in b, its row in the panel)"""
                return (
                    self._gep(builder, source, builder.mul(s, _index(width))),
                    self._gep(builder, target, builder.mul(builder.sub(s, start), size)),
                )

            with for_range(builder, start, whole, "s") as s:
                read, write = sliver(s)
                for v in range(VECTORS):
                    offset = _index(v * lanes)
                    value = builder.load(
                        self._gep(builder, read, offset), typ=self.vector, align=self.align
                    )
                    builder.store(value, self._gep(builder, write, offset), align=64)
            with if_then(builder, builder.icmp_signed(">", rest, _index(0))):
                read, write = sliver(whole)
                for v in range(VECTORS):
                    offset = _index(v * lanes)
                    mask = self._column_mask(builder, rest, v * lanes)
                    value = self._masked_load(builder, self._gep(builder, read, offset), mask)
                    builder.store(value, self._gep(builder, write, offset), align=64)
        builder.ret_void()
        return function

    # -- the product -------------------------------------------------------------------------
    def product(self) -> ir.Function:
        block, narrow, pack = self._block(VECTORS), self._block(1), self._pack()
        arguments = [T.I64, T.I64, T.I64, T.PTR, T.I64, T.PTR, T.I64, T.PTR, T.I64]
        function = self._function("", arguments, internal=False)
        function.attributes.strings["probe-stack"] = "inline-asm"
        m, n, k, a, lda, b, ldb, c, ldc = function.args
        for argument in (a, b, c):
            argument.add_attribute("noalias")
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        # small_gemm's conditions: b is read in place, only a partial last sliver copied.
        itemsize = _index(self.dtype.itemsize)
        in_place = builder.and_(
            builder.icmp_signed("<", builder.mul(ldb, itemsize), _index(MAX_RHS_STRIDE)),
            builder.icmp_signed(
                "<=", builder.mul(builder.mul(k, n), itemsize), _index(MAX_RHS_BYTES)
            ),
        )
        width = _index(self.width)
        # The panel buffer, no larger than the product needs (at most KC x NC, 512 KiB): every
        # page of it is touched (probed) on each call.
        padded = builder.mul(builder.sdiv(builder.add(n, _index(self.width - 1)), width), width)
        panel_columns = builder.select(in_place, width, self._min(builder, padded, _index(self.nc)))
        sliver_size = builder.mul(self._min(builder, k, _index(self.kc)), width)
        panel_size = builder.mul(sliver_size, builder.sdiv(panel_columns, width))
        panel = builder.alloca(self.scalar, size=panel_size, name="panel")
        panel.align = 64
        with for_range(builder, _index(0), n, "jc", step=self.nc) as jc:
            columns = self._min(builder, _index(self.nc), builder.sub(n, jc))
            whole_columns = builder.mul(builder.sdiv(columns, width), width)
            copied_from = builder.select(in_place, builder.sdiv(columns, width), _index(0))
            slivers = builder.sdiv(builder.add(columns, _index(self.width - 1)), width)
            with for_range(builder, _index(0), k, "pc", step=self.kc) as pc:
                depth = self._min(builder, _index(self.kc), builder.sub(k, pc))
                b_panel = self._gep(builder, b, builder.add(builder.mul(pc, ldb), jc))
                with if_then(builder, builder.icmp_signed("<", copied_from, slivers)):
                    arguments = [depth, columns, copied_from, b_panel, ldb, panel, sliver_size]
                    builder.call(pack, arguments)
                first = builder.icmp_signed("==", pc, _index(0))
                with for_range(builder, _index(0), m, "i0", step=self.rows) as i0:
                    rows = self._min(builder, _index(self.rows), builder.sub(m, i0))
                    if self.trans_a:  # (a's element (i0, pc) is at pc * lda + i0)
                        a_start = builder.add(builder.mul(pc, lda), i0)
                    else:
                        a_start = builder.add(builder.mul(i0, lda), pc)
                    a_block = self._gep(builder, a, a_start)
                    c_block = self._gep(builder, c, builder.add(builder.mul(i0, ldc), jc))
                    with for_range(builder, _index(0), columns, "j0", step=self.width) as j0:
                        read = builder.and_(in_place, builder.icmp_signed("<", j0, whole_columns))
                        copied = builder.sub(builder.sdiv(j0, width), copied_from)
                        sliver = builder.select(
                            read,
                            self._gep(builder, b_panel, j0),
                            self._gep(builder, panel, builder.mul(copied, sliver_size)),
                        )
                        stride = builder.select(read, ldb, width)
                        block_columns = self._min(builder, width, builder.sub(columns, j0))
                        c_tile = self._gep(builder, c_block, j0)
                        # A last sliver of at most one vector's columns: a narrower block.
                        arguments = [depth, a_block, lda, rows, sliver, stride, c_tile, ldc]
                        arguments += [block_columns, first]
                        one = builder.icmp_signed("<=", block_columns, _index(self.lanes))
                        with builder.if_else(one) as (single, wide):
                            with single:
                                builder.call(narrow, arguments)
                            with wide:
                                builder.call(block, arguments)
        builder.ret_void()
        return function

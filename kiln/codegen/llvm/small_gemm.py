"""Register-blocked matrix products with a small right-hand matrix, emitted as LLVM IR.

With few rows (a batch of hidden states times a weight matrix, say 32 x 256 x 256) BLAS does
not amortize its work: each call packs the whole right-hand matrix into panels before
multiplying, and that copy costs about as much as the arithmetic. Here the right-hand matrix
(at most 1 MiB, so it stays in the second-level cache) is read in place instead: a block of
rows of the result by two vectors of columns stays in registers while the loop walks the
contracted dimension, broadcasting one element of each lhs row into a multiply-add with the
loaded rhs vectors. The same loop also beats the packing BLAS on many rows (the chunks of a
split product) while the rhs is that small. The kernel takes every extent and stride at run
time and lives in kiln's kernel library (gemm_library: compiled once per target and dtype);
blas_calls.emit_gemm calls it for the shapes `fits` accepts.

The code is plain LLVM vectors and llvm.fmuladd, so it compiles for every target; the vector
width and the block's rows follow the target (_layout) so the accumulators fit its registers.
Each result element is one in-order fused multiply-add chain over the contracted dimension.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from kiln.codegen.llvm import types as T
from kiln.codegen.llvm.loops import entry_alloca, for_range

#: Longest contraction: each result element is one in-order chain of fused multiply-adds,
#: whose rounding error grows with its length (the limit of inline sums, lowering_linalg's
#: INLINE_MAX_DEPTH; BLAS adds longer ones in blocks).
MAX_DEPTH = 512
#: Largest rhs (bytes): it is read once per block of rows, and must stay in the second-level
#: cache meanwhile.
MAX_RHS_BYTES = 1 << 20
#: Largest rhs row stride (bytes): the contracted loop steps through rhs rows, and once each
#: row starts a new page the hardware prefetchers stop following it (half the speed).
MAX_RHS_STRIDE = 4096


def _layout(dtype: np.dtype) -> tuple[int, int]:
    """(vector lanes, rows per block) for the target: 2 * rows accumulators plus the two rhs
    vectors and a broadcast must fit its vector registers (32 with AVX-512, else 16)."""
    from kiln.codegen.llvm.target import current_target

    if current_target().has_avx512:
        return 64 // dtype.itemsize, 8
    return 32 // dtype.itemsize, 6


def fits(dtype, trans_a: bool, trans_b: bool, m, n, k, ldb=None) -> bool:
    """Whether a row-major product c = a @ b runs here: a and b not transposed, n and k static
    (ints), m static or known only at run time (None; a chunk of a split product); ldb, b's
    row stride, defaults to n."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or trans_a or trans_b:
        return False
    if not all(isinstance(extent, int) and extent > 1 for extent in (n, k)):
        return False
    if m is not None and not (isinstance(m, int) and m > 1):
        return False
    ldb = n if ldb is None else ldb
    return (
        k <= MAX_DEPTH
        and k * n * dtype.itemsize <= MAX_RHS_BYTES
        and ldb * dtype.itemsize < MAX_RHS_STRIDE
        and n % _layout(dtype)[0] == 0
    )


def define(module: ir.Module, name: str, dtype) -> ir.Function:
    """Add the kernel `name`(a, b, c, m, n, k, lda, ldb, ldc) computing c = a @ b for extents
    and row strides (i64, in elements) given at run time: n a multiple of the vector width
    (fits checks it). It lives in kiln's kernel library (gemm_library), compiled once per target
    and called by every product that fits, rather than specialized per shape: one kernel for
    all shapes compiles once, where one per shape added LLVM time to every new program."""
    from kiln.codegen.llvm.target import kernel_attributes

    dtype = np.dtype(dtype)
    lanes, rows = _layout(dtype)
    scalar = T.FLOAT if dtype == np.float32 else T.DOUBLE
    vector = ir.VectorType(scalar, lanes)
    function = ir.Function(module, ir.FunctionType(T.VOID, [T.PTR] * 3 + [T.I64] * 6), name=name)
    function.attributes = kernel_attributes()
    function.attributes.add("nounwind")
    for argument in function.args[:3]:
        argument.add_attribute("noalias")
    a, b, c, m, n, k, lda, ldb, ldc = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    fmuladd_name = f"llvm.fmuladd.v{lanes}f{dtype.itemsize * 8}"
    fmuladd = module.globals.get(fmuladd_name) or ir.Function(
        module, ir.FunctionType(vector, [vector] * 3), fmuladd_name
    )
    align = dtype.itemsize

    def index(value: int) -> ir.Constant:
        return ir.Constant(T.I64, value)

    def block(row0, count: int, col0, per_block: int) -> None:
        """c[row0 : row0 + count, col0 : col0 + per_block * lanes] = a[those rows] @ b[:, those
        columns], accumulated in registers (allocas that LLVM promotes)."""
        slots = [
            [entry_alloca(builder, vector, f"acc{r}_{v}") for v in range(per_block)]
            for r in range(count)
        ]
        zero = ir.Constant(vector, [ir.Constant(scalar, 0.0)] * lanes)
        for row in slots:
            for slot in row:
                builder.store(zero, slot)
        a_rows = [builder.mul(builder.add(row0, index(r)), lda) for r in range(count)]
        with for_range(builder, index(0), k, "kk") as kk:
            b_row = builder.add(builder.mul(kk, ldb), col0)
            columns = [
                builder.load(
                    builder.gep(b, [builder.add(b_row, index(v * lanes))], source_etype=scalar),
                    typ=vector,
                    align=align,
                )
                for v in range(per_block)
            ]
            for r in range(count):
                pointer = builder.gep(a, [builder.add(a_rows[r], kk)], source_etype=scalar)
                element = builder.load(pointer, typ=scalar, align=align)
                splat = T.splat(builder, element, lanes)
                for v in range(per_block):
                    total = builder.load(slots[r][v], typ=vector)
                    builder.store(builder.call(fmuladd, [splat, columns[v], total]), slots[r][v])
        for r in range(count):
            c_row = builder.add(builder.mul(builder.add(row0, index(r)), ldc), col0)
            for v in range(per_block):
                pointer = builder.gep(
                    c, [builder.add(c_row, index(v * lanes))], source_etype=scalar
                )
                builder.store(builder.load(slots[r][v], typ=vector), pointer, align=align)

    def columns(col0, per_block: int) -> None:
        """Every row of the column block at col0: whole blocks of rows, then one at a time."""
        with for_range(builder, index(0), full_rows, "i0", step=rows) as row0:
            block(row0, rows, col0, per_block)
        with for_range(builder, full_rows, m, "i1") as row0:
            block(row0, 1, col0, per_block)

    # Two vectors of columns per block, then (n an odd number of vectors) one.
    full_rows = builder.sub(m, builder.srem(m, index(rows)))
    pairs = builder.sub(n, builder.srem(n, index(2 * lanes)))
    with for_range(builder, index(0), pairs, "j0", step=2 * lanes) as col0:
        columns(col0, 2)
    with builder.if_then(builder.icmp_signed("<", pairs, n)):
        columns(pairs, 1)
    builder.ret_void()
    return function

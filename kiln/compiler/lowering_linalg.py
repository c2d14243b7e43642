"""Lowering rules of the contraction primitive.

* A dot_general that contracts nothing (the outer products of per-example gradients,
  `x[:, None] * y[None, :]` written as a product) is one multiplication per output element, so
  it fuses into its neighbours' loop nests like any other elementwise op.
* A small contraction (at most INLINE_MAX_WORK multiply-adds in all, at most INLINE_MAX_DEPTH
  along the contracted axes) is a sum reduction per output element: `x @ W + b` on a few
  features becomes one loop nest with the bias add, no call out of the kernel at all. Half
  precision accumulates in float32 and rounds once, as the reference impl does.
* Larger products are BLAS calls (see kiln/compiler/fusion.py's product kernels).
"""

from __future__ import annotations

import math

import numpy as np

from kiln.compiler import kir
from kiln.compiler.kir import Reduce, ReduceKind, ScalarOp
from kiln.compiler.lower import NotLowerable, register_lowering
from kiln.core import dtypes
from kiln.primitives.linalg import dot_general_p

#: The largest contraction emitted inline, in multiply-adds over the whole output. Below it a
#: product costs less than the call into BLAS (argument checks, packing) would.
INLINE_MAX_WORK = 1 << 14
#: The longest contracted extent emitted inline: longer float sums go through BLAS (and past
#: 4096, through its blocked accumulation) for accuracy.
INLINE_MAX_DEPTH = 512

_F32 = np.dtype(np.float32)
_NARROW = frozenset({np.dtype(np.float16), dtypes.bfloat16})


def contraction_extents(lhs_shape, rhs_shape, dimension_numbers) -> tuple[int, int]:
    """(multiply-adds of the whole product, length of one contraction)."""
    (lc, _), (lb, _) = dimension_numbers
    depth = math.prod(lhs_shape[d] for d in lc)
    lhs_rest = math.prod(lhs_shape[d] for d in range(len(lhs_shape)) if d not in lc)
    rhs_free = math.prod(rhs_shape) // max(1, depth * math.prod(lhs_shape[d] for d in lb))
    return lhs_rest * rhs_free * depth, depth


def inlinable(lhs_shape, rhs_shape, dimension_numbers) -> bool:
    work, depth = contraction_extents(lhs_shape, rhs_shape, dimension_numbers)
    return work <= INLINE_MAX_WORK and depth <= INLINE_MAX_DEPTH


@register_lowering(dot_general_p)
def _dot_general_lowering_rule(
    ctx, index, lhs, rhs, *, dimension_numbers, precision=None, preferred_element_type=None
):
    (lc, rc), (lb, rb) = dimension_numbers
    out_dtype = ctx.eqn.outvars[0].aval.dtype
    if lhs.dtype != out_dtype or rhs.dtype != out_dtype or out_dtype.kind not in "fiu":
        raise NotLowerable("mixed or complex dtypes: the reference impl converts them")
    if (lc or rc) and not inlinable(lhs.shape, rhs.shape, dimension_numbers):
        raise NotLowerable("a large contraction runs through BLAS")
    # Output dims: batch dims, then lhs's free dims in order, then rhs's free dims in order.
    lhs_free = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rhs_free = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    nb = len(lb)
    lhs_index: list = [None] * lhs.ndim
    rhs_index: list = [None] * rhs.ndim
    for position, (dl, dr) in enumerate(zip(lb, rb)):
        lhs_index[dl] = index[position]
        rhs_index[dr] = index[position]
    for offset, d in enumerate(lhs_free):
        lhs_index[d] = index[nb + offset]
    for offset, d in enumerate(rhs_free):
        rhs_index[d] = index[nb + len(lhs_free) + offset]
    contracted = [ctx.fresh("k") for _ in lc]
    for var, dl, dr in zip(contracted, lc, rc):
        lhs_index[dl] = var
        rhs_index[dr] = var
    a, b = lhs.read(lhs_index), rhs.read(rhs_index)
    if not lc:
        return kir.op(ScalarOp.MUL, a, b)
    widen = out_dtype in _NARROW
    if widen:
        a, b = kir.cast(a, _F32), kir.cast(b, _F32)
    value = kir.op(ScalarOp.MUL, a, b)
    # The last contracted axis innermost: it is the contiguous one of a row-major lhs.
    for var, dl in reversed(list(zip(contracted, lc))):
        value = Reduce(ReduceKind.SUM, var, 0, lhs.shape[dl], value)
    return kir.cast(value, out_dtype) if widen else value


# --- products through BLAS ---------------------------------------------------------------------

_BLAS_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
#: float32 contractions longer than this accumulate in blocks with float64 sums (the impl's
#: accuracy rule, see kiln/primitives/linalg.py): those stay with the impl.
_LONG_FLOAT32 = 4096


class Product:
    """How a dot_general runs as BLAS calls.

    Each operand is read in place when its buffer already holds row-major matrices after the
    batch dims (transposed or not); otherwise `permutation` names the transpose that fusion
    stores it through first (its batch, free and contracted dims in canonical order). The
    product of batch entry b is op(a_b) @ op(b_b), m x n with depth k."""

    __slots__ = ("eqn", "batch", "m_dims", "n_dims", "m", "n", "k", "operands")

    def __init__(self, eqn, batch, m_dims, n_dims, operands):
        self.eqn = eqn
        self.batch = batch  # batch extents
        self.m_dims = m_dims  # lhs free extents (rows of the result)
        self.n_dims = n_dims  # rhs free extents (columns)
        self.m, self.n = math.prod(m_dims), math.prod(n_dims)
        lhs = eqn.invars[0].aval.shape
        (lc, _), _ = eqn.params["dimension_numbers"]
        self.k = math.prod(lhs[d] for d in lc)
        #: per operand: (transposed, permutation or None)
        self.operands = operands

    @property
    def work(self) -> int:
        return math.prod(self.batch) * self.m * self.n * self.k


def _layout(ndim: int, batch, first, second):
    """True/False when the operand's dims are batch + first + second (False: not transposed)
    or batch + second + first (True), with each group in the given order; None otherwise."""
    batch, first, second = list(batch), list(first), list(second)
    nb = len(batch)
    if batch != list(range(nb)):
        return None
    if first + second == list(range(nb, ndim)):
        return False
    if second + first == list(range(nb, ndim)):
        return True
    return None


def blas_product(eqn) -> Product | None:
    """The BLAS plan of a dot_general that should run as gemm calls, or None."""
    if eqn.primitive is not dot_general_p or len(eqn.invars) != 2:
        return None
    from kiln.core.jaxpr import Literal

    lhs, rhs = eqn.invars
    if type(lhs) is Literal or type(rhs) is Literal:
        return None
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    out = eqn.outvars[0].aval
    dtype = out.dtype
    if not lc or dtype not in _BLAS_DTYPES or lhs.aval.dtype != dtype or rhs.aval.dtype != dtype:
        return None
    ls, rs = lhs.aval.shape, rhs.aval.shape
    work, depth = contraction_extents(ls, rs, eqn.params["dimension_numbers"])
    if work == 0 or inlinable(ls, rs, eqn.params["dimension_numbers"]):
        return None
    if dtype == np.float32 and depth > _LONG_FLOAT32:
        return None
    if max(ls + rs) >= 1 << 31 or math.prod(out.shape) >= 1 << 31:
        return None
    from kiln.codegen.llvm import blas_calls

    if not blas_calls.available():
        return None
    lf = [d for d in range(len(ls)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rs)) if d not in rb and d not in rc]
    lhs_layout = _layout(len(ls), lb, lf, lc)
    rhs_layout = _layout(len(rs), rb, rc, rf)
    operands = (
        (bool(lhs_layout), None if lhs_layout is not None else (*lb, *lf, *lc)),
        (bool(rhs_layout), None if rhs_layout is not None else (*rb, *rc, *rf)),
    )
    return Product(
        eqn,
        tuple(ls[d] for d in lb),
        tuple(ls[d] for d in lf),
        tuple(rs[d] for d in rf),
        operands,
    )


def canonical_product(product: Product, new_var):
    """(transpose equations, the product equation reading their results) for a product with
    operands to permute first: fusion stores each permuted operand, and the new product reads
    it in canonical order (batch, free, contracted / batch, contracted, free)."""
    from kiln.core.jaxpr import JaxprEqn
    from kiln.primitives.shape import transpose_p

    eqn = product.eqn
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    invars = list(eqn.invars)
    extra = []
    numbers = [[lc, rc], [lb, rb]]
    for side, (_, permutation) in enumerate(product.operands):
        if permutation is None:
            continue
        operand = invars[side]
        shape = tuple(operand.aval.shape[d] for d in permutation)
        permuted = new_var(operand.aval.update(shape=shape, weak_type=False))
        extra.append(JaxprEqn(transpose_p, [operand], [permuted], {"permutation": permutation}))
        invars[side] = permuted
        contracted = (lc, rc)[side]
        nb, ncontract = len(lb), len(contracted)
        nfree = len(shape) - nb - ncontract
        if side == 0:  # batch, free, contracted
            numbers[0][0] = tuple(range(nb + nfree, len(shape)))
        else:  # batch, contracted, free
            numbers[0][1] = tuple(range(nb, nb + ncontract))
        numbers[1][side] = tuple(range(nb))
    params = dict(eqn.params)
    params["dimension_numbers"] = (tuple(numbers[0]), tuple(numbers[1]))
    return extra, eqn.replace(invars=invars, params=params)


def fold_transposed_products(eqns, outputs, is_call) -> list:
    """eqns with `transpose(dot_general(a, b))` that swaps the product's lhs-free and rhs-free
    dims (no batch dims) written as `dot_general(b, a)`, when the transpose is the product's
    only reader. The swapped product runs as the same BLAS call with its operands exchanged."""
    from kiln.core.jaxpr import Literal
    from kiln.primitives.shape import transpose_p

    readers: dict = {}
    for eqn in eqns:
        for atom in eqn.invars:
            if type(atom) is not Literal:
                readers.setdefault(atom, []).append(eqn)
    exported = set(outputs)
    replaced: dict = {}  # id(transpose eqn) -> None (dropped)
    result = []
    for eqn in eqns:
        if id(eqn) in replaced:
            continue
        out = eqn.outvars[0] if len(eqn.outvars) == 1 else None
        users = readers.get(out, []) if out is not None else []
        if (
            eqn.primitive is dot_general_p
            and out not in exported
            and len(users) == 1
            and users[0].primitive is transpose_p
            and is_call(eqn)
        ):
            (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
            lhs, rhs = eqn.invars
            nl = lhs.aval.ndim - len(lc) - len(lb)
            nr = rhs.aval.ndim - len(rc) - len(rb)
            swap = tuple(range(nl, nl + nr)) + tuple(range(nl))
            transpose = users[0]
            if not lb and tuple(transpose.params.get("permutation") or ()) == swap:
                params = dict(eqn.params)
                params["dimension_numbers"] = ((tuple(rc), tuple(lc)), ((), ()))
                swapped = eqn.replace(
                    invars=[rhs, lhs], outvars=list(transpose.outvars), params=params
                )
                if is_call(swapped):
                    replaced[id(transpose)] = None
                    result.append(swapped)
                    continue
        result.append(eqn)
    return result


def product_body(product: Product, c, a, b, bounds: dict | None = None) -> list:
    """The statements of a product kernel: loops over the batch, one MatMul per batch entry,
    restricted to `bounds` ({output dim: (start, stop)}) when the kernel runs in chunks: on a
    batch dim, or on a row (column) dim whose earlier row (column) dims have extent 1, as
    product_split and native_segment._split choose them."""
    bounds = bounds or {}
    (ta, _), (tb, _) = product.operands
    m, n, k = product.m, product.n, product.k
    nb, nm = len(product.batch), len(product.m_dims)
    row_lo, row_hi, col_lo, col_hi = 0, m, 0, n
    for dim, (lo, hi) in bounds.items():
        if dim < nb:
            continue
        if dim < nb + nm:
            below = math.prod(product.m_dims[dim - nb + 1 :])
            row_lo, row_hi = kir.index_mul(lo, below), kir.index_mul(hi, below)
        else:
            below = math.prod(product.n_dims[dim - nb - nm + 1 :])
            col_lo, col_hi = kir.index_mul(lo, below), kir.index_mul(hi, below)
    batch_vars = [kir.Var(f"i{d}") for d in range(nb)]
    flat = kir.flat_index(product.batch, batch_vars) if nb else kir.as_index(0)
    a_base, b_base, c_base = (kir.index_mul(flat, size) for size in (m * k, k * n, m * n))
    lda, ldb = (m if ta else k), (k if tb else n)
    a_offset = kir.index_add(a_base, row_lo if ta else kir.index_mul(row_lo, lda))
    b_offset = kir.index_add(b_base, kir.index_mul(col_lo, ldb) if tb else col_lo)
    c_offset = kir.index_add(c_base, kir.index_add(kir.index_mul(row_lo, n), col_lo))
    call = kir.MatMul(
        c, a, b, kir.index_sub(row_hi, row_lo), kir.index_sub(col_hi, col_lo), k,
        trans_a=ta, trans_b=tb, lda=max(lda, 1), ldb=max(ldb, 1), ldc=max(n, 1),
        a_offset=a_offset, b_offset=b_offset, c_offset=c_offset,
    )  # fmt: skip
    _expect_library(product)
    stmts = [call]
    for d in range(nb - 1, -1, -1):
        lo, hi = bounds.get(d, (0, product.batch[d]))
        stmts = [kir.Loop(batch_vars[d], lo, hi, stmts)]
    return stmts


def _expect_library(product: Product) -> None:
    """Tell kiln's kernel library when this product will run as one of its kernels (the
    checks blas_calls.emit_gemm makes), so that it compiles meanwhile."""
    from kiln.codegen.llvm import blas_calls, gemm_library, small_gemm

    (ta, _), (tb, _) = product.operands
    dtype = product.eqn.outvars[0].aval.dtype
    ldb = product.k if tb else product.n
    if small_gemm.fits(dtype, ta, tb, product.m, product.n, product.k, ldb):
        gemm_library.expect("small_gemm", dtype)
    elif blas_calls.packed_fits(dtype, ta, tb, product.m, product.n):
        gemm_library.expect(blas_calls.packed_kernel(ta), dtype)


#: Column chunks of a split product start on multiples of this many columns (cache lines).
_COLUMN_ALIGN = 16


def product_split(product: Product, threads: int):
    """(output dim, chunk count, alignment) to run a large product on `threads` threads, or
    None.

    One chunk per thread: each chunk is one BLAS call that packs its own panels of both
    operands, so more chunks would pack more. A batch of products splits over the batch;
    one product splits its rows when it has more rows than columns, else its columns (each
    thread then packs only its columns of b). product_body takes the bounds on that dim."""
    nb, nm = len(product.batch), len(product.m_dims)

    def first_wide(dims, base):
        for offset, extent in enumerate(dims):
            if extent > 1:
                return base + offset, extent
        return None

    choice = None
    if math.prod(product.batch) >= threads:
        choice = first_wide(product.batch, 0)
    if choice is None:
        rows, columns = first_wide(product.m_dims, nb), first_wide(product.n_dims, nb + nm)
        if rows is not None and (columns is None or product.m > product.n):
            choice = rows
        else:
            choice = columns
    if choice is None:
        return None
    dim, extent = choice
    count = min(threads, extent)
    if count < 2:
        return None
    align = _COLUMN_ALIGN if dim == nb + nm + len(product.n_dims) - 1 else 1
    return dim, count, align


def _register_call() -> None:
    from kiln.compiler import lower

    lower.kernel_calls[dot_general_p] = lambda eqn: blas_product(eqn) is not None


_register_call()

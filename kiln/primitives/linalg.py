"""dot_general: the one contraction primitive (matmul, dot, einsum and tensordot lower to it)."""

from __future__ import annotations

import numpy as np

from kiln.core import dtypes
from kiln.core.ad_util import is_undefined_primal
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives import blas
from kiln.primitives.base import check_dtype, lax_operands, NUMBER, BOOL
from kiln.primitives.elementwise import add_any, convert_element_type
from kiln.primitives.shape import transpose

__all__ = ["dot_general", "dot", "batch_matmul"]


class _DotGeneral(Primitive):
    def params_for_printing(self, params: dict) -> dict:
        # The seed's spelling: dimension_numbers=(([0], [0]), ([], [])), and no None params.
        (lc, rc), (lb, rb) = params["dimension_numbers"]
        dims = f"(({list(lc)}, {list(rc)}), ({list(lb)}, {list(rb)}))"
        shown = {"dimension_numbers": dims}
        if params.get("preferred_element_type") is not None:
            shown["preferred_element_type"] = params["preferred_element_type"]
        return shown


dot_general_p = _DotGeneral("dot_general")


def _free_dims(ndim: int, contract, batch) -> list[int]:
    used = set(contract) | set(batch)
    return [d for d in range(ndim) if d not in used]


# Long float32 contractions are split into blocks: BLAS contracts each block with float32
# accumulators, and the block results are summed in float64 and rounded once, so the rounding
# error grows with the block length rather than with the contraction length (BLAS's float32 dot
# of 10M tenths with ones is off by 1.5e-3; blocks of 1024 are off by 2e-7).
_LONG_CONTRACTION = 4096
# Vector-like products are memory-bound, so short blocks cost nothing; matrix products run near
# peak inside BLAS, where the per-block float64 combine must stay small next to the block's work.
# Dots spread a block over many vector lanes, gemv and small gemm kernels over few, hence the
# shorter block for the latter.
_DOT_BLOCK = 1024
_VECTOR_BLOCK = 256
_MATRIX_BLOCK = 4096
_MATRIX_MIN_SIDE = 32
# The float32 block results held at once, in elements (16 MiB).
_PARTIALS_LIMIT = 1 << 22
_WIDE_ACCUMULATOR = {
    np.dtype(np.float32): np.dtype(np.float64),
    np.dtype(np.complex64): np.dtype(np.complex128),
}


def _accumulates_in_blocks(compute: np.dtype, contracted: int) -> bool:
    return contracted > _LONG_CONTRACTION and np.dtype(compute) in _WIDE_ACCUMULATOR


@dot_general_p.def_impl
def _dot_general_impl(lhs, rhs, *, dimension_numbers, precision=None, preferred_element_type=None):
    (lc, rc), (lb, rb) = dimension_numbers
    out_dtype = preferred_element_type or lhs.dtype
    if (
        not lb
        and lhs.dtype == rhs.dtype == out_dtype
        and out_dtype.kind in "fiuc"
        and out_dtype.itemsize >= 4
        and lhs.ndim <= 2
        and rhs.ndim <= 2
        and lc == (lhs.ndim - 1,)
        and rc == (0,)
        and not _accumulates_in_blocks(out_dtype, lhs.shape[-1])
    ):
        # The common vector/matrix products: np.dot is the reference and costs ~1 µs.
        with np.errstate(all="ignore"):
            if lhs.ndim == 2 and rhs.ndim == 2:
                return blas.matmul(lhs, rhs)
            with blas.blas_on_calling_thread():
                return np.asarray(np.dot(lhs, rhs))
    lf, rf = _free_dims(lhs.ndim, lc, lb), _free_dims(rhs.ndim, rc, rb)
    # Bring both operands to (batch, free, contract) / (batch, contract, free) and use matmul.
    lhs_t = np.transpose(lhs, list(lb) + lf + list(lc))
    rhs_t = np.transpose(rhs, list(rb) + list(rc) + rf)
    batch_shape = tuple(lhs.shape[d] for d in lb)
    lf_shape = tuple(lhs.shape[d] for d in lf)
    rf_shape = tuple(rhs.shape[d] for d in rf)
    k = int(np.prod([lhs.shape[d] for d in lc], dtype=np.int64))
    m = int(np.prod(lf_shape, dtype=np.int64))
    n = int(np.prod(rf_shape, dtype=np.int64))
    compute = _compute_dtype(np.result_type(lhs.dtype, rhs.dtype), out_dtype)
    a = lhs_t.reshape(batch_shape + (m, k)).astype(compute, copy=False)
    b = rhs_t.reshape(batch_shape + (k, n)).astype(compute, copy=False)
    with np.errstate(all="ignore"):
        if _accumulates_in_blocks(compute, k):
            out = _blocked_matmul(a, b)
        elif compute == np.bool_:
            out = np.matmul(a.astype(np.int32), b.astype(np.int32)) != 0
        else:
            out = blas.matmul(a, b)
        # One rounding from the accumulator to the result type.
        out = np.asarray(out).astype(out_dtype, copy=False)
    return out.reshape(batch_shape + lf_shape + rf_shape)


def _blocked_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b for (..., m, k) @ (..., k, n) with a long k, returned in the wide dtype: blocks of
    k contracted by BLAS in a's precision, their results summed in float64 (complex128)."""
    wide = _WIDE_ACCUMULATOR[a.dtype]
    *batch, m, k = a.shape
    batch = tuple(batch)
    n = b.shape[-1]
    # Matrix-vector with rows in memory order: one BLAS dot per row and block.
    row_dots = n == 1 and a.strides[-1] == a.itemsize
    if row_dots:
        block = _DOT_BLOCK
    else:
        block = _MATRIX_BLOCK if min(m, n) >= _MATRIX_MIN_SIDE else _VECTOR_BLOCK
    count = k // block
    main = count * block
    # Views, not copies: splitting the contracted axis keeps each block a strided BLAS operand.
    if row_dots:
        a_blocks = a[..., :main].reshape(batch + (m, count, 1, block))
        b_blocks = b[..., :main, :].reshape(batch + (1, count, block, 1))
    else:
        a_blocks = np.swapaxes(a[..., :main].reshape(batch + (m, count, block)), -3, -2)
        b_blocks = b[..., :main, :].reshape(batch + (count, block, n))
    # Either way the block index is the third axis from the end; at most _PARTIALS_LIMIT
    # block results exist at once.
    out = np.zeros(batch + (m, n), wide)
    step = max(1, _PARTIALS_LIMIT // max(1, out.size))
    with blas.blas_on_calling_thread():
        return _sum_blocks(a, b, a_blocks, b_blocks, out, count, step, main, k, wide)


def _sum_blocks(a, b, a_blocks, b_blocks, out, count, step, main, k, wide):
    for start in range(0, count, step):
        chunk = (Ellipsis, slice(start, start + step), slice(None), slice(None))
        partial = np.matmul(a_blocks[chunk], b_blocks[chunk])
        out += partial.sum(axis=-3, dtype=wide).reshape(out.shape)
    if main < k:
        out += np.matmul(a[..., main:], b[..., main:, :])
    return out


def _compute_dtype(in_dtype: np.dtype, out_dtype: np.dtype) -> np.dtype:
    """Half-precision floats accumulate in float32, as XLA does on CPU."""
    widest = np.promote_types(in_dtype, out_dtype) if out_dtype != dtypes.bfloat16 else in_dtype
    if in_dtype in (dtypes.float16, dtypes.bfloat16) or out_dtype in (
        dtypes.float16,
        dtypes.bfloat16,
    ):
        return np.dtype(np.float32) if widest.itemsize <= 4 else widest
    return np.dtype(out_dtype) if out_dtype.kind in "iu" else widest


@dot_general_p.def_abstract_eval
def _dot_general_abstract_eval(
    lhs: ShapedArray,
    rhs: ShapedArray,
    *,
    dimension_numbers,
    precision=None,
    preferred_element_type=None,
):
    (lc, rc), (lb, rb) = dimension_numbers
    if lhs.dtype != rhs.dtype and preferred_element_type is None:
        raise TypeError(
            f"dot_general requires operands of the same dtype, got "
            f"{lhs.dtype.name} and {rhs.dtype.name}; promote them first "
            "(kiln.numpy.matmul does)."
        )
    check_dtype("dot_general", lhs.dtype, NUMBER + (BOOL,))
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise TypeError(
            f"dot_general dimension_numbers {dimension_numbers} must pair up "
            "contracting and batch dimensions"
        )
    for name, dims, aval in (
        ("lhs contracting", lc, lhs),
        ("rhs contracting", rc, rhs),
        ("lhs batch", lb, lhs),
        ("rhs batch", rb, rhs),
    ):
        if any(not 0 <= d < aval.ndim for d in dims) or len(set(dims)) != len(dims):
            raise TypeError(
                f"dot_general {name} dimensions {dims} are invalid for an operand "
                f"of shape {aval.shape}"
            )
    if set(lc) & set(lb) or set(rc) & set(rb):
        raise TypeError("dot_general dimensions cannot be both batch and contracting")
    for a, b in zip(lc, rc):
        if lhs.shape[a] != rhs.shape[b]:
            raise TypeError(
                f"dot_general requires contracting dimensions to have the same "
                f"shape, got {lhs.shape[a]} and {rhs.shape[b]} (lhs shape "
                f"{lhs.shape}, rhs shape {rhs.shape})."
            )
    for a, b in zip(lb, rb):
        if lhs.shape[a] != rhs.shape[b]:
            raise TypeError(
                f"dot_general requires batch dimensions to have the same shape, "
                f"got {lhs.shape[a]} and {rhs.shape[b]}."
            )
    shape = (
        tuple(lhs.shape[d] for d in lb)
        + tuple(lhs.shape[d] for d in _free_dims(lhs.ndim, lc, lb))
        + tuple(rhs.shape[d] for d in _free_dims(rhs.ndim, rc, rb))
    )
    dtype = preferred_element_type or lhs.dtype
    return ShapedArray(shape, dtype, lhs.weak_type and rhs.weak_type)


# --- derivative and batching rules -----------------------------------------------------------
# dot_general is bilinear: its tangent is the sum of the products with one tangent each, and
# its transpose with respect to one operand contracts the cotangent with the other operand over
# the dimensions the result got from that other one.


@dot_general_p.def_jvp
def _dot_general_jvp_rule(primals, tangents, **params):
    (lhs, rhs), (lhs_tangent, rhs_tangent) = primals, tangents
    out = dot_general_p.bind(lhs, rhs, **params)
    out_tangent = None
    if lhs_tangent is not None:
        out_tangent = dot_general_p.bind(lhs_tangent, rhs, **params)
    if rhs_tangent is not None:
        term = dot_general_p.bind(lhs, rhs_tangent, **params)
        out_tangent = term if out_tangent is None else add_any(out_tangent, term)
    return out, out_tangent


def _dot_general_operand_cotangent(
    cotangent,
    aval: ShapedArray,
    other,
    contract,
    other_contract,
    batch,
    other_batch,
    precision,
    preferred_element_type,
    operand_is_lhs: bool,
):
    """The cotangent of one operand (of `aval`) of a dot_general whose other operand is
    `other`; `contract`/`batch` are the operand's dimension numbers, `other_*` the other's."""
    free = _free_dims(len(aval.shape), contract, batch)
    other_free = _free_dims(len(other.shape), other_contract, other_batch)
    # The cotangent's dimensions: batch, then lhs free, then rhs free.
    n_batch = len(batch)
    first_other = n_batch + (len(free) if operand_is_lhs else 0)
    cotangent_other_free = tuple(range(first_other, first_other + len(other_free)))
    dims = ((cotangent_other_free, tuple(other_free)), (tuple(range(n_batch)), tuple(other_batch)))
    product = dot_general_p.bind(
        cotangent,
        other,
        dimension_numbers=dims,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )
    # The product's dimensions are the operand's batch, free, then contracting dimensions, the
    # last in the order of the other operand's matching (uncontracted, so ascending) ones.
    by_other = sorted(range(len(contract)), key=lambda i: other_contract[i])
    produced = list(batch) + free + [contract[i] for i in by_other]
    result = transpose(product, tuple(int(i) for i in np.argsort(produced)))
    if result.dtype != aval.dtype:
        result = convert_element_type(result, aval.dtype, aval.weak_type)
    return result


@dot_general_p.def_transpose
def _dot_general_transpose_rule(
    cotangent, lhs, rhs, *, dimension_numbers, precision=None, preferred_element_type=None
):
    (lc, rc), (lb, rb) = dimension_numbers
    lhs_cotangent = rhs_cotangent = None
    if is_undefined_primal(lhs):
        lhs_cotangent = _dot_general_operand_cotangent(
            cotangent,
            lhs.aval,
            rhs,
            lc,
            rc,
            lb,
            rb,
            precision,
            preferred_element_type,
            operand_is_lhs=True,
        )
    if is_undefined_primal(rhs):
        rhs_cotangent = _dot_general_operand_cotangent(
            cotangent,
            rhs.aval,
            lhs,
            rc,
            lc,
            rb,
            lb,
            precision,
            preferred_element_type,
            operand_is_lhs=False,
        )
    return [lhs_cotangent, rhs_cotangent]


def _batched_dimension_numbers(ndims: tuple, bdims: tuple, dimension_numbers):
    """The dimension numbers of one dot_general over batched operands, and the result's batch
    dimension: two batched operands pair their batch dimensions as a new leading batch
    dimension of the product; one batched operand keeps it as one of its free dimensions."""
    (lc, rc), (lb, rb) = dimension_numbers
    lbd, rbd = bdims

    def shifted(dims, bdim):
        return tuple(d + (d >= bdim) for d in dims)

    if lbd is not None and rbd is not None:
        new = (
            (shifted(lc, lbd), shifted(rc, rbd)),
            ((lbd,) + shifted(lb, lbd), (rbd,) + shifted(rb, rbd)),
        )
        return new, 0
    if lbd is not None:
        lhs_free = _free_dims(ndims[0] - 1, lc, lb)
        out_dim = len(lb) + sum(d < lbd for d in lhs_free)
        return ((shifted(lc, lbd), rc), (shifted(lb, lbd), rb)), out_dim
    rhs_free = _free_dims(ndims[1] - 1, rc, rb)
    lhs_free = _free_dims(ndims[0], lc, lb)
    out_dim = len(lb) + len(lhs_free) + sum(d < rbd for d in rhs_free)
    return ((lc, shifted(rc, rbd)), (lb, shifted(rb, rbd))), out_dim


@dot_general_p.def_batching
def _dot_general_batching_rule(args, dims, *, dimension_numbers, **params):
    lhs, rhs = args
    new_numbers, out_dim = _batched_dimension_numbers(
        (len(lhs.shape), len(rhs.shape)), tuple(dims), dimension_numbers
    )
    return dot_general_p.bind(lhs, rhs, dimension_numbers=new_numbers, **params), out_dim


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """General contraction: `dimension_numbers = ((lhs_contract, rhs_contract),
    (lhs_batch, rhs_batch))`. Result dims: batch, lhs free, rhs free."""
    (lc, rc), (lb, rb) = dimension_numbers
    dims = (
        (tuple(int(d) for d in lc), tuple(int(d) for d in rc)),
        (tuple(int(d) for d in lb), tuple(int(d) for d in rb)),
    )
    if preferred_element_type is not None:
        preferred_element_type = dtypes.canonicalize(preferred_element_type)
    lhs, rhs = lax_operands(lhs, rhs)
    return dot_general_p.bind(
        lhs,
        rhs,
        dimension_numbers=dims,
        precision=None,
        preferred_element_type=preferred_element_type,
    )


def dot(lhs, rhs, precision=None, preferred_element_type=None):
    """lax.dot: vector·vector, matrix·vector or matrix·matrix."""
    if lhs.ndim not in (1, 2) or rhs.ndim not in (1, 2):
        raise TypeError(
            f"lax.dot takes 1-D or 2-D operands, got shapes {lhs.shape} and "
            f"{rhs.shape}; use dot_general for higher ranks."
        )
    return dot_general(
        lhs, rhs, (((lhs.ndim - 1,), (0,)), ((), ())), preferred_element_type=preferred_element_type
    )


def batch_matmul(lhs, rhs, precision=None):
    """Matrix products over matching leading batch dimensions."""
    batch = tuple(range(lhs.ndim - 2))
    return dot_general(lhs, rhs, (((lhs.ndim - 1,), (rhs.ndim - 2,)), (batch, batch)))

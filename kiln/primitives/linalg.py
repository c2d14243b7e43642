"""dot_general: the one contraction primitive (matmul, dot, einsum and tensordot lower to it)."""
from __future__ import annotations

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import check_dtype, lax_operands, NUMBER, BOOL

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


@dot_general_p.def_impl
def _dot_general_impl(lhs, rhs, *, dimension_numbers, precision=None,
                      preferred_element_type=None):
    (lc, rc), (lb, rb) = dimension_numbers
    out_dtype = preferred_element_type or lhs.dtype
    if (not lb and lhs.dtype == rhs.dtype == out_dtype and out_dtype.kind in "fiuc"
            and out_dtype.itemsize >= 4 and lhs.ndim <= 2 and rhs.ndim <= 2
            and lc == (lhs.ndim - 1,) and rc == (0,)):
        # The common vector/matrix products: np.dot is the reference and costs ~1 µs.
        with np.errstate(all="ignore"):
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
        out = np.matmul(a, b) if compute != np.bool_ else (
            np.matmul(a.astype(np.int32), b.astype(np.int32)) != 0)
    return np.asarray(out).astype(out_dtype, copy=False).reshape(
        batch_shape + lf_shape + rf_shape)


def _compute_dtype(in_dtype: np.dtype, out_dtype: np.dtype) -> np.dtype:
    """Half-precision floats accumulate in float32, as XLA does on CPU."""
    widest = np.promote_types(in_dtype, out_dtype) if out_dtype != dtypes.bfloat16 else in_dtype
    if in_dtype in (dtypes.float16, dtypes.bfloat16) or out_dtype in (dtypes.float16,
                                                                       dtypes.bfloat16):
        return np.dtype(np.float32) if widest.itemsize <= 4 else widest
    return np.dtype(out_dtype) if out_dtype.kind in "iu" else widest


@dot_general_p.def_abstract_eval
def _dot_general_abstract_eval(lhs: ShapedArray, rhs: ShapedArray, *, dimension_numbers,
                               precision=None, preferred_element_type=None):
    (lc, rc), (lb, rb) = dimension_numbers
    if lhs.dtype != rhs.dtype and preferred_element_type is None:
        raise TypeError(f"dot_general requires operands of the same dtype, got "
                        f"{lhs.dtype.name} and {rhs.dtype.name}; promote them first "
                        "(kiln.numpy.matmul does).")
    check_dtype("dot_general", lhs.dtype, NUMBER + (BOOL,))
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise TypeError(f"dot_general dimension_numbers {dimension_numbers} must pair up "
                        "contracting and batch dimensions")
    for name, dims, aval in (("lhs contracting", lc, lhs), ("rhs contracting", rc, rhs),
                             ("lhs batch", lb, lhs), ("rhs batch", rb, rhs)):
        if any(not 0 <= d < aval.ndim for d in dims) or len(set(dims)) != len(dims):
            raise TypeError(f"dot_general {name} dimensions {dims} are invalid for an operand "
                            f"of shape {aval.shape}")
    if set(lc) & set(lb) or set(rc) & set(rb):
        raise TypeError("dot_general dimensions cannot be both batch and contracting")
    for a, b in zip(lc, rc):
        if lhs.shape[a] != rhs.shape[b]:
            raise TypeError(f"dot_general requires contracting dimensions to have the same "
                            f"shape, got {lhs.shape[a]} and {rhs.shape[b]} (lhs shape "
                            f"{lhs.shape}, rhs shape {rhs.shape}).")
    for a, b in zip(lb, rb):
        if lhs.shape[a] != rhs.shape[b]:
            raise TypeError(f"dot_general requires batch dimensions to have the same shape, "
                            f"got {lhs.shape[a]} and {rhs.shape[b]}.")
    shape = (tuple(lhs.shape[d] for d in lb)
             + tuple(lhs.shape[d] for d in _free_dims(lhs.ndim, lc, lb))
             + tuple(rhs.shape[d] for d in _free_dims(rhs.ndim, rc, rb)))
    dtype = preferred_element_type or lhs.dtype
    return ShapedArray(shape, dtype, lhs.weak_type and rhs.weak_type)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """General contraction: `dimension_numbers = ((lhs_contract, rhs_contract),
    (lhs_batch, rhs_batch))`. Result dims: batch, lhs free, rhs free."""
    (lc, rc), (lb, rb) = dimension_numbers
    dims = ((tuple(int(d) for d in lc), tuple(int(d) for d in rc)),
            (tuple(int(d) for d in lb), tuple(int(d) for d in rb)))
    if preferred_element_type is not None:
        preferred_element_type = dtypes.canonicalize(preferred_element_type)
    lhs, rhs = lax_operands(lhs, rhs)
    return dot_general_p.bind(lhs, rhs, dimension_numbers=dims, precision=None,
                              preferred_element_type=preferred_element_type)


def dot(lhs, rhs, precision=None, preferred_element_type=None):
    """lax.dot: vector·vector, matrix·vector or matrix·matrix."""
    if lhs.ndim not in (1, 2) or rhs.ndim not in (1, 2):
        raise TypeError(f"lax.dot takes 1-D or 2-D operands, got shapes {lhs.shape} and "
                        f"{rhs.shape}; use dot_general for higher ranks.")
    return dot_general(lhs, rhs, (((lhs.ndim - 1,), (0,)), ((), ())),
                       preferred_element_type=preferred_element_type)


def batch_matmul(lhs, rhs, precision=None):
    """Matrix products over matching leading batch dimensions."""
    batch = tuple(range(lhs.ndim - 2))
    return dot_general(lhs, rhs, (((lhs.ndim - 1,), (rhs.ndim - 2,)), (batch, batch)))

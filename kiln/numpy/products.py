"""Products: matmul, dot, vdot, inner, outer, tensordot, einsum, kron — all lowered to
lax.dot_general (plus elementwise multiply and reshapes where no contraction happens)."""

from __future__ import annotations

import string
from typing import Any, Sequence

import numpy as np

from kiln import lax
from kiln.numpy.util import check_arraylike, promote_dtypes, shape as _shape

__all__ = [
    "matmul",
    "dot",
    "vdot",
    "vecdot",
    "inner",
    "outer",
    "tensordot",
    "einsum",
    "kron",
    "matrix_transpose",
]


def _promoted(name: str, a, b):
    check_arraylike(name, a, b)
    return promote_dtypes(a, b)


def matmul(a, b, *, precision=None, preferred_element_type=None):
    """Matrix product with NumPy's rules: 1-D operands are vectors, leading dims broadcast."""
    a, b = _promoted("matmul", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"matmul: operands must not be scalars, got shapes {a.shape} and "
            f"{b.shape}; use * for scalar multiplication."
        )
    # One dot_general, as JAX writes it: a leading dim both operands have (and agree on) is
    # a batch dim; one that only one operand has, or where the other has size 1 (squeezed
    # away), is a free dim of that operand, so nothing is broadcast or copied; a transpose
    # then puts the result's dims in NumPy's order.
    a_mat, b_mat = a.ndim > 1, b.ndim > 1
    a_lead = a.shape[:-2] if a_mat else ()
    b_lead = b.shape[:-2] if b_mat else ()
    width = max(len(a_lead), len(b_lead))
    a_lead = (None,) * (width - len(a_lead)) + tuple(a_lead)
    b_lead = (None,) * (width - len(b_lead)) + tuple(b_lead)
    a_squeeze, b_squeeze, a_batch, b_batch = [], [], [], []
    # Output positions of the dot's result dims: batch dims, then a's free dims, then b's.
    at_batch, at_a, at_b = [], [], []
    for i, (da, db) in enumerate(zip(a_lead, b_lead)):
        if da is None:
            at_b.append(i)
        elif db is None:
            at_a.append(i)
        elif da == 1:
            at_b.append(i)
            a_squeeze.append(len(at_batch) + len(at_a) + len(a_squeeze))
        elif db == 1:
            at_a.append(i)
            b_squeeze.append(len(at_batch) + len(at_b) + len(b_squeeze))
        elif da == db:
            a_batch.append(len(at_batch) + len(at_a))
            b_batch.append(len(at_batch) + len(at_b))
            at_batch.append(i)
        else:
            raise ValueError(
                f"Incompatible shapes for matmul arguments: {a.shape} and {b.shape}; their "
                "leading (batch) dimensions must be equal or 1."
            )
    if a_mat:
        at_a.append(width)
    if b_mat:
        at_b.append(width + a_mat)
    if a_squeeze:
        a = lax.squeeze(a, tuple(a_squeeze))
    if b_squeeze:
        b = lax.squeeze(b, tuple(b_squeeze))
    out = lax.dot_general(
        a,
        b,
        (((a.ndim - 1,), (b.ndim - 1 - b_mat,)), (tuple(a_batch), tuple(b_batch))),
        preferred_element_type=preferred_element_type,
    )
    permutation = tuple(int(p) for p in np.argsort(at_batch + at_a + at_b))
    if permutation != tuple(range(len(permutation))):
        out = lax.transpose(out, permutation)
    return out


def dot(a, b, *, precision=None, preferred_element_type=None):
    """NumPy's dot: scalars multiply; otherwise contract a's last axis with b's
    second-to-last (or only) axis."""
    a, b = _promoted("dot", a, b)
    if a.ndim == 0 or b.ndim == 0:
        return lax.mul(*_broadcast_pair(a, b))
    contract_b = 0 if b.ndim == 1 else b.ndim - 2
    return lax.dot_general(
        a,
        b,
        (((a.ndim - 1,), (contract_b,)), ((), ())),
        preferred_element_type=preferred_element_type,
    )


def _broadcast_pair(a, b):
    from kiln.numpy.util import broadcast_arrays_for_lax

    return broadcast_arrays_for_lax(a, b)


def vdot(a, b, *, precision=None):
    """Dot product of the flattened operands, conjugating the first."""
    a, b = _promoted("vdot", a, b)
    if np.dtype(a.dtype).kind == "c":
        a = lax.conj(a)
    return dot(lax.reshape(a, (a.size,)), lax.reshape(b, (b.size,)))


def vecdot(x1, x2, /, *, axis: int = -1):
    """Vector dot product along `axis` (conjugating x1), broadcasting the other dims."""
    from kiln.numpy.manipulation import moveaxis
    from kiln.numpy.reductions import sum as _sum

    x1, x2 = _promoted("vecdot", x1, x2)
    if np.dtype(x1.dtype).kind == "c":
        x1 = lax.conj(x1)
    from kiln.numpy.ufuncs import multiply

    return _sum(multiply(moveaxis(x1, axis, -1), moveaxis(x2, axis, -1)), axis=-1)


def inner(a, b, *, precision=None):
    """Contract the last axes of a and b."""
    a, b = _promoted("inner", a, b)
    if a.ndim == 0 or b.ndim == 0:
        return lax.mul(*_broadcast_pair(a, b))
    return lax.dot_general(a, b, (((a.ndim - 1,), (b.ndim - 1,)), ((), ())))


def outer(a, b):
    """The outer product of the flattened operands."""
    a, b = _promoted("outer", a, b)
    a = lax.reshape(a, (a.size,))
    b = lax.reshape(b, (b.size,))
    return lax.dot_general(a, b, (((), ()), ((), ())))


def tensordot(a, b, axes: int | Sequence = 2, *, precision=None):
    """Contract `axes` (an int: the last N of a with the first N of b; or a pair of lists)."""
    a, b = _promoted("tensordot", a, b)
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0 or n > min(a.ndim, b.ndim):
            raise ValueError(
                f"tensordot: axes={n} is out of range for shapes {a.shape} and {b.shape}"
            )
        ca, cb = tuple(range(a.ndim - n, a.ndim)), tuple(range(n))
    else:
        if len(axes) != 2:
            raise TypeError(f"tensordot axes must be an int or a pair of sequences, got {axes}")
        ca, cb = axes
        ca = (ca,) if isinstance(ca, (int, np.integer)) else tuple(ca)
        cb = (cb,) if isinstance(cb, (int, np.integer)) else tuple(cb)
        if len(ca) != len(cb):
            raise TypeError(f"tensordot requires axes lists of equal length, got {axes}")
        ca = tuple(int(d) % a.ndim for d in ca)
        cb = tuple(int(d) % b.ndim for d in cb)
    return lax.dot_general(a, b, ((ca, cb), ((), ())))


def kron(a, b):
    """Kronecker product."""
    a, b = _promoted("kron", a, b)
    nd = max(a.ndim, b.ndim)
    a = lax.reshape(a, (1,) * (nd - a.ndim) + a.shape)
    b = lax.reshape(b, (1,) * (nd - b.ndim) + b.shape)
    # out[i0, j0, i1, j1, ...] = a[i0, i1, ...] * b[j0, j1, ...], then merge pairs.
    shape = tuple(d for pair in zip(a.shape, b.shape) for d in pair)
    a_b = lax.broadcast_in_dim(a, shape, tuple(range(0, 2 * nd, 2)))
    b_b = lax.broadcast_in_dim(b, shape, tuple(range(1, 2 * nd, 2)))
    return lax.reshape(lax.mul(a_b, b_b), tuple(x * y for x, y in zip(a.shape, b.shape)))


def matrix_transpose(x, /):
    """Swap the last two axes."""
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return lax.transpose(x, perm)


# --- einsum ----------------------------------------------------------------------------------


def _parse_einsum(subscripts: str, operands: Sequence[Any]) -> tuple[list[str], str]:
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        inputs, output = subscripts.split("->")
        explicit = True
    else:
        inputs, output, explicit = subscripts, "", False
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: {len(terms)} subscript terms for {len(operands)} operands")
    used = set("".join(terms).replace(".", ""))
    spare = [c for c in string.ascii_letters if c not in used]
    ell_ndim = 0
    for term, op in zip(terms, operands):
        if "..." in term:
            ell_ndim = max(ell_ndim, len(_shape(op)) - (len(term) - 3))
    ell = "".join(spare[:ell_ndim])
    expanded = []
    for term, op in zip(terms, operands):
        if "..." in term:
            n = len(_shape(op)) - (len(term) - 3)
            term = term.replace("...", ell[ell_ndim - n :] if n else "")
        if len(term) != len(_shape(op)):
            raise ValueError(
                f"einsum: subscript '{term}' has {len(term)} labels for an "
                f"operand of rank {len(_shape(op))}"
            )
        expanded.append(term)
    if explicit:
        output = output.replace("...", ell)
    else:
        counts = {}
        for c in "".join(expanded):
            counts[c] = counts.get(c, 0) + 1
        output = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return expanded, output


def _einsum_diagonal(x, term: str):
    """Take the diagonal over repeated labels in one operand's term (e.g. 'ii' -> 'i')."""
    while len(set(term)) != len(term):
        for i, c in enumerate(term):
            j = term.find(c, i + 1)
            if j >= 0:
                break
        n = x.shape[i]
        if x.shape[j] != n:
            raise ValueError(
                f"einsum: repeated label '{c}' has sizes {x.shape[i]} and {x.shape[j]}"
            )
        eye = lax.eq(
            lax.broadcasted_iota(np.int32, (n, n), 0), lax.broadcasted_iota(np.int32, (n, n), 1)
        )
        mask = lax.broadcast_in_dim(eye, x.shape, (i, j))
        x = lax.select(mask, x, lax.full(x.shape, 0, x.dtype))
        x = lax.reduce_sum(x, (j,))
        term = term[:j] + term[j + 1 :]
    return x, term


def _sum_labels(x, term: str, keep: set):
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if axes:
        x = lax.reduce_sum(x, axes)
        term = "".join(c for c in term if c in keep)
    return x, term


def einsum(subscripts: str, *operands, optimize=None, precision=None, preferred_element_type=None):
    """Einstein summation, contracted pairwise left to right with dot_general."""
    if not isinstance(subscripts, str):
        raise TypeError("einsum: only the subscripts-string form is supported")
    check_arraylike("einsum", *operands)
    operands = promote_dtypes(*operands)
    terms, output = _parse_einsum(subscripts, operands)
    work = []
    for op, term in zip(operands, terms):
        op, term = _einsum_diagonal(op, term)
        work.append((op, term))
    for k in range(len(work)):
        op, term = work[k]
        elsewhere = set(output) | {c for j, (_, t) in enumerate(work) if j != k for c in t}
        work[k] = _sum_labels(op, term, elsewhere)
    x, xt = work[0]
    for idx in range(1, len(work)):
        y, yt = work[idx]
        later = set(output) | {c for _, t in work[idx + 1 :] for c in t}
        shared = [c for c in xt if c in yt]
        batch = [c for c in shared if c in later]
        contract = [c for c in shared if c not in later]
        dims = (
            (tuple(xt.index(c) for c in contract), tuple(yt.index(c) for c in contract)),
            (tuple(xt.index(c) for c in batch), tuple(yt.index(c) for c in batch)),
        )
        for c in shared:
            if x.shape[xt.index(c)] != y.shape[yt.index(c)]:
                raise ValueError(
                    f"einsum: label '{c}' has sizes {x.shape[xt.index(c)]} and "
                    f"{y.shape[yt.index(c)]}"
                )
        x = lax.dot_general(x, y, dims, preferred_element_type=preferred_element_type)
        xt = (
            "".join(batch)
            + "".join(c for c in xt if c not in shared)
            + "".join(c for c in yt if c not in shared)
        )
        x, xt = _sum_labels(x, xt, set(output) | {c for _, t in work[idx + 1 :] for c in t})
    x, xt = _sum_labels(x, xt, set(output))
    if sorted(xt) != sorted(output):
        missing = set(output) - set(xt)
        raise ValueError(f"einsum: output labels {sorted(missing)} do not appear in the inputs")
    perm = tuple(xt.index(c) for c in output)
    if perm != tuple(range(len(perm))):
        x = lax.transpose(x, perm)
    return x

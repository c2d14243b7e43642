"""Orthogonal and spectral decompositions: qr, eigh, svd and eig (kiln.lax.linalg), batched over
leading dimensions, through NumPy's and SciPy's LAPACK drivers. The derivative rules follow
the classical perturbation formulas; the matrix helpers are those of linalg_decomp.py.
"""

from __future__ import annotations

import enum
import warnings

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import real_dtype, scalar_to_array
from kiln.primitives.elementwise import (
    add,
    conj,
    convert_element_type,
    div,
    eq,
    mul,
    real,
    select,
    sub,
)
from kiln.primitives.lapack_batched import Arg, batched_call, prefix
from kiln.primitives.linalg_decomp import (
    adjoint,
    lapack_on_calling_thread,
    permute_rows,
    swap_last,
    batched_over_front,
    check_linalg_dtype,
    check_matrix,
    diagonal,
    eye,
    is_complex,
    lu_p,
    lu_solve,
    matmul,
    mirror_triangle,
    slice_last_two,
    symmetrize,
    triangular_solve_p,
    tril,
    zeros_of,
)
from kiln.primitives.shape import broadcast_in_dim
from kiln.primitives.shape_slice import broadcasted_iota, concatenate

__all__ = [
    "qr",
    "qr_p",
    "eigh",
    "eigh_p",
    "svd",
    "svd_p",
    "eig",
    "eig_p",
    "EigImplementation",
    "EighImplementation",
    "SvdAlgorithm",
]


class EigImplementation(enum.Enum):
    """Which library computes eig: only LAPACK exists on the CPU."""

    CUSOLVER = "cusolver"
    MAGMA = "magma"
    LAPACK = "lapack"


class EighImplementation(enum.Enum):
    """Which algorithm computes eigh: QR (LAPACK's) on the CPU."""

    QR = "qr"
    JACOBI = "jacobi"
    QDWH = "qdwh"


class SvdAlgorithm(enum.Enum):
    """Which algorithm computes svd: DEFAULT and DIVIDE_AND_CONQUER (LAPACK's gesdd) or QR
    (gesvd) on the CPU."""

    DEFAULT = "default"
    QR = "QR"
    JACOBI = "Jacobi"
    POLAR = "polar"
    DIVIDE_AND_CONQUER = "divide_and_conquer"


def _nan_on_failure(fn, x: np.ndarray, outputs: int):
    """fn on the whole batch; if LAPACK fails to converge (NaN or inf input), fn per matrix,
    the failing ones giving NaNs."""
    try:
        return fn(x)
    except np.linalg.LinAlgError:
        pass
    batch = x.shape[:-2]
    flat = x.reshape((-1,) + x.shape[-2:])
    template = fn(np.zeros_like(flat[:1]))
    results = []
    for matrix in flat:
        try:
            results.append(fn(matrix[None]))
        except np.linalg.LinAlgError:
            results.append(tuple(np.full_like(t, np.nan) for t in template))
    return tuple(
        np.concatenate([r[i] for r in results]).reshape(batch + template[i].shape[1:])
        for i in range(outputs)
    )


def _right_solve(r, x):
    """x r^-1 for upper-triangular r."""
    return triangular_solve_p.bind(
        r,
        x,
        left_side=False,
        lower=False,
        transpose_a=False,
        conjugate_a=False,
        unit_diagonal=False,
    )


# --- qr --------------------------------------------------------------------------------------
qr_p = Primitive("qr", multiple_results=True)


def _pivoted_qr(x: np.ndarray, full_matrices: bool):
    """(q, r, p) of column-pivoted QR decompositions, x[..., p] = q r, for a (count, m, n)
    batch: LAPACK's geqp3, then orgqr/ungqr for q."""
    count, m, n = x.shape
    k = min(m, n)
    cols = m if full_matrices else k
    complex_ = np.dtype(x.dtype).kind == "c"
    packed = np.array(np.swapaxes(x, -1, -2), order="C")  # column-major items
    pivots = np.zeros((count, n), np.int32)  # 0: every column free to move
    taus = np.zeros((count, max(k, 1)), x.dtype)
    info = np.zeros(count, np.int32)
    args = [Arg.int32(m), Arg.int32(n), Arg.per_item(packed), Arg.int32(max(m, 1))]
    args += [Arg.per_item(pivots), Arg.per_item(taus), None, None]
    if complex_:
        args.append(Arg(np.zeros(2 * n, real_dtype(x.dtype)), 0))
    args.append(Arg.per_item(info))
    routine = prefix(x.dtype) + "geqp3"
    with lapack_on_calling_thread():
        _with_workspace(routine, count, args, 7, x.dtype)
        r = np.triu(np.swapaxes(packed, -1, -2)[:, :cols, :])
        q = np.zeros((count, cols, m), x.dtype)  # column-major m x cols
        q[:, :k, :] = packed[:, :k, :]
        args = [Arg.int32(m), Arg.int32(cols), Arg.int32(k), Arg.per_item(q)]
        args += [Arg.int32(max(m, 1)), Arg.per_item(taus), None, None, Arg.per_item(info)]
        _with_workspace(
            prefix(x.dtype) + ("ungqr" if complex_ else "orgqr"), count, args, 7, x.dtype
        )
    return np.swapaxes(q, -1, -2), r, pivots - 1


def _with_workspace(routine: str, count: int, args: list, lwork_index: int, dtype) -> None:
    """Call `routine` over the batch after LAPACK's workspace query (lwork = -1) sized the
    workspace at args[lwork_index - 1] (shared by the calls, so they run on one thread)."""
    query = np.zeros(1, dtype)
    probe = list(args)
    probe[lwork_index - 1], probe[lwork_index] = Arg(query, 0), Arg.int32(-1)
    batched_call(routine, 1, probe)
    size = max(1, int(np.real(query[0])))
    args[lwork_index - 1], args[lwork_index] = Arg(np.zeros(size, dtype), 0), Arg.int32(size)
    batched_call(routine, count, args)


@qr_p.def_impl
def _qr_impl(x: np.ndarray, *, pivoting, full_matrices):
    m, n = x.shape[-2:]
    k = m if full_matrices else min(m, n)
    batch = x.shape[:-2]
    if x.size == 0:
        q = np.broadcast_to(np.eye(m, k, dtype=x.dtype), batch + (m, k)).copy()
        outs = [q, np.zeros(batch + (k, n), x.dtype)]
        if pivoting:
            outs.append(np.broadcast_to(np.arange(n, dtype=np.int32), batch + (n,)).copy())
        return outs
    with lapack_on_calling_thread():
        if pivoting:
            q, r, p = _pivoted_qr(x.reshape((-1, m, n)), full_matrices)
            q, r = q.reshape(batch + q.shape[1:]), r.reshape(batch + r.shape[1:])
            p = p.reshape(batch + (n,))
        else:
            q, r = np.linalg.qr(x, mode="complete" if full_matrices else "reduced")
    outs = [q.astype(x.dtype, copy=False), r.astype(x.dtype, copy=False)]
    return outs + [p] if pivoting else outs


@qr_p.def_abstract_eval
def _qr_abstract_eval(x: ShapedArray, *, pivoting, full_matrices):
    check_linalg_dtype("qr", x.dtype)
    check_matrix("qr", x)
    m, n = x.shape[-2:]
    k = m if full_matrices else min(m, n)
    batch = x.shape[:-2]
    outs = [
        ShapedArray(batch + (m, k), x.dtype, x.weak_type),
        ShapedArray(batch + (k, n), x.dtype, x.weak_type),
    ]
    if pivoting:
        outs.append(ShapedArray(batch + (n,), dtypes.int32, False))
    return outs


def qr(x, *, pivoting: bool = False, full_matrices: bool = True, use_magma: bool | None = None):
    """QR decomposition x = q r: q (..., m, k) with orthonormal columns and r (..., k, n)
    upper triangular, k = m (full_matrices) or min(m, n). With pivoting, the columns are
    permuted so that r's diagonal does not increase in magnitude: x[..., p] = q r, and
    (q, r, p) is returned. use_magma only matters on GPUs."""
    del use_magma
    outs = qr_p.bind(x, pivoting=bool(pivoting), full_matrices=bool(full_matrices))
    return tuple(outs)


def _permute_columns(x, permutation):
    return swap_last(permute_rows(swap_last(x), permutation))


def _thin_qr_jvp(q, r, x_dot):
    """Tangents of q (m x n) and r (n x n) of x = q r for m >= n (the rule of
    j-towns.github.io/papers/qr-derivative.pdf)."""
    x_dot_rinv = _right_solve(r, x_dot)
    projected = matmul(adjoint(q), x_dot_rinv)
    strictly_lower = tril(projected, -1)
    omega = sub(strictly_lower, adjoint(strictly_lower))
    if is_complex(projected):
        # The imaginary part of the diagonal, which fixes r's diagonal to stay real.
        n = r.shape[-1]
        identity = eye(tuple(projected.shape[:-2]) + (n, n), projected.dtype)
        imaginary = sub(projected, convert_element_type(real(projected), projected.dtype))
        omega = add(omega, mul(identity, imaginary))
    q_dot = add(matmul(q, sub(omega, projected)), x_dot_rinv)
    r_dot = matmul(sub(projected, omega), r)
    return q_dot, r_dot


@qr_p.def_jvp
def _qr_jvp_rule(primals, tangents, *, pivoting, full_matrices):
    (x,), (x_dot,) = primals, tangents
    q, r, *p = qr_p.bind(x, pivoting=pivoting, full_matrices=full_matrices)
    if pivoting:
        # The pivots are piecewise constant: differentiate x[..., p] = q r with p fixed.
        x, x_dot = _permute_columns(x, p[0]), _permute_columns(x_dot, p[0])
    q_dot, r_dot = _qr_tangents(x, x_dot, q, r, full_matrices)
    return [q, r, *p], [q_dot, r_dot] + [None] * len(p)


def _qr_tangents(x, x_dot, q, r, full_matrices):
    shape = tuple(x.shape)
    batch, (m, n) = shape[:-2], shape[-2:]
    nd = len(shape)
    if m < n:
        # x = [x1 x2] with x1 square: x1 = q r1 is a square QR, and r2 = q^H x2.
        r1 = slice_last_two(r, (0, m), (0, m))
        x2 = slice_last_two(x, (0, m), (m, n))
        q_dot, r1_dot = _thin_qr_jvp(q, r1, slice_last_two(x_dot, (0, m), (0, m)))
        x2_dot = slice_last_two(x_dot, (0, m), (m, n))
        r2_dot = add(matmul(adjoint(q_dot), x2), matmul(adjoint(q), x2_dot))
        return q_dot, concatenate([r1_dot, r2_dot], nd - 1)
    q_thin = slice_last_two(q, (0, m), (0, n)) if full_matrices else q
    r_square = slice_last_two(r, (0, n), (0, n)) if full_matrices else r
    q_dot, r_dot = _thin_qr_jvp(q_thin, r_square, x_dot)
    if not full_matrices or m == n:
        return q_dot, r_dot
    # The trailing m - n columns of a complete q (arXiv:2409.13374, eqs. 32-33).
    q_top = slice_last_two(q_thin, (0, n), (0, n))
    q_bottom = slice_last_two(q_thin, (n, m), (0, n))
    q_rest = slice_last_two(q, (0, m), (n, m))
    q_dot_top = slice_last_two(q_dot, (0, n), (0, n))
    q_dot_bottom = slice_last_two(q_dot, (n, m), (0, n))
    factors, _, permutation = lu_p.bind(sub(q_top, eye(batch + (n, n), q.dtype)))
    z_adjoint = lu_solve(factors, permutation, adjoint(q_bottom), trans=2)
    z = adjoint(z_adjoint)
    q_dot_rest = sub(
        matmul(q_dot, z_adjoint),
        matmul(add(q_thin, matmul(q_rest, z)), adjoint(sub(q_dot_bottom, matmul(z, q_dot_top)))),
    )
    q_dot = concatenate([q_dot, q_dot_rest], nd - 1)
    r_dot = concatenate([r_dot, zeros_of(batch + (m - n, n), r.dtype)], nd - 2)
    return q_dot, r_dot


batched_over_front(qr_p)


# --- eigh ------------------------------------------------------------------------------------
eigh_p = Primitive("eigh", multiple_results=True)


@eigh_p.def_impl
def _eigh_impl(x: np.ndarray, *, lower, sort_eigenvalues, subset_by_index):
    n = x.shape[-1]
    if x.size == 0:
        w = np.zeros(x.shape[:-1], real_dtype(x.dtype))
        v = np.array(x)
    else:

        def decompose(a):
            return np.linalg.eigh(a, UPLO="L" if lower else "U")

        w, v = _nan_on_failure(decompose, x, 2)
    if subset_by_index is not None and tuple(subset_by_index) != (0, n):
        start, end = subset_by_index
        w, v = w[..., start:end], v[..., :, start:end]
    return [v.astype(x.dtype, copy=False), w.astype(real_dtype(x.dtype), copy=False)]


@eigh_p.def_abstract_eval
def _eigh_abstract_eval(x: ShapedArray, *, lower, sort_eigenvalues, subset_by_index):
    check_linalg_dtype("eigh", x.dtype)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(
            "Argument to symmetric eigendecomposition must have shape [..., n, n], "
            f"got shape {x.shape}"
        )
    n = x.shape[-1]
    d = n
    if subset_by_index is not None:
        start, end = subset_by_index
        if not 0 <= start <= end <= n:
            raise ValueError(f"eigh subset_by_index {subset_by_index} is out of range for n={n}")
        d = end - start
    batch = x.shape[:-2]
    return [
        ShapedArray(batch + (n, d), x.dtype, x.weak_type),
        ShapedArray(batch + (d,), real_dtype(x.dtype), x.weak_type),
    ]


def eigh(
    x,
    *,
    lower: bool = True,
    symmetrize_input: bool = True,
    sort_eigenvalues: bool = True,
    subset_by_index: tuple[int, int] | None = None,
    implementation: EighImplementation | None = None,
):
    """Eigendecomposition of Hermitian matrices: (v, w), w ascending (real) and v[..., :, i]
    the unit eigenvector of w[..., i]. Without symmetrize_input only the `lower` (or upper)
    triangle is read. The CPU has only the QR implementation."""
    if implementation == EighImplementation.QDWH:
        raise NotImplementedError("QDWH implementation is only supported on TPU")
    if implementation == EighImplementation.JACOBI:
        raise NotImplementedError("Jacobi implementation is not supported on CPU")
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(
            "Argument to symmetric eigendecomposition must have shape [..., n, n], "
            f"got shape {x.shape}"
        )
    if symmetrize_input:
        x = symmetrize(x)
    if subset_by_index is not None:
        subset_by_index = tuple(int(i) for i in subset_by_index)
    v, w = eigh_p.bind(
        x,
        lower=bool(lower),
        sort_eigenvalues=bool(sort_eigenvalues),
        subset_by_index=subset_by_index,
    )
    return v, w


def _reciprocal_differences(w, dtype):
    """F[i, j] = 1 / (w[j] - w[i]) off the diagonal and 0 on it, as JAX computes it
    (1 / (I + w[j] - w[i]) - I): exactly repeated eigenvalues, whose eigenvectors are not
    unique, give infinite entries, and the eigenvector tangents there are not finite."""
    shape = tuple(w.shape) + (w.shape[-1],)
    nd = len(shape)
    column = broadcast_in_dim(w, shape, tuple(range(nd - 2)) + (nd - 1,))
    row = broadcast_in_dim(w, shape, tuple(range(nd - 1)))
    n = shape[-1]
    eye = broadcast_in_dim(
        convert_element_type(scalar_to_array(np.eye(n), w.dtype, False), w.dtype),
        shape,
        (nd - 2, nd - 1),
    )
    ones = broadcast_in_dim(scalar_to_array(1, w.dtype, False), shape, ())
    reciprocal = sub(div(ones, add(eye, sub(column, row))), eye)
    return convert_element_type(reciprocal, dtype)


# Nondegenerate perturbation theory: with V^H A' V = P, w' = diag(P) and V' = V (F * P).
@eigh_p.def_jvp
def _eigh_jvp_rule(primals, tangents, *, lower, sort_eigenvalues, subset_by_index):
    (x,), (x_dot,) = primals, tangents
    n = x.shape[-1]
    if subset_by_index is not None and tuple(subset_by_index) != (0, n):
        raise NotImplementedError("Derivatives not defined for partial eigen decomposition.")
    v, w = eigh_p.bind(
        x, lower=lower, sort_eigenvalues=sort_eigenvalues, subset_by_index=subset_by_index
    )
    x_dot = mirror_triangle(x_dot, lower)
    projected = matmul(matmul(adjoint(v), x_dot), v)
    v_dot = matmul(v, mul(_reciprocal_differences(w, x.dtype), projected))
    diag = diagonal(projected)
    w_dot = real(diag) if is_complex(diag) else diag
    return [v, w], [v_dot, w_dot]


batched_over_front(eigh_p)


# --- svd -------------------------------------------------------------------------------------
svd_p = Primitive("svd", multiple_results=True)


def _empty_svd(x: np.ndarray, full_matrices: bool, compute_uv: bool):
    batch = x.shape[:-2]
    m, n = x.shape[-2:]
    s = np.zeros(batch + (0,), real_dtype(x.dtype))
    if not compute_uv:
        return [s]
    u_cols = m if full_matrices else 0
    vt_rows = n if full_matrices else 0
    u = np.broadcast_to(np.eye(m, u_cols, dtype=x.dtype), batch + (m, u_cols)).copy()
    vt = np.broadcast_to(np.eye(vt_rows, n, dtype=x.dtype), batch + (vt_rows, n)).copy()
    return [s, u, vt]


@svd_p.def_impl
def _svd_impl(x: np.ndarray, *, full_matrices, compute_uv, subset_by_index):
    if x.size == 0:
        return _empty_svd(x, full_matrices, compute_uv)
    rdtype = real_dtype(x.dtype)
    if compute_uv:

        def decompose(a):
            return np.linalg.svd(a, full_matrices=full_matrices)

        u, s, vt = _nan_on_failure(decompose, x, 3)
    else:
        (s,) = _nan_on_failure(lambda a: (np.linalg.svd(a, compute_uv=False),), x, 1)
    k = min(x.shape[-2:])
    if subset_by_index is not None and tuple(subset_by_index) != (0, k):
        start, end = subset_by_index
        s = s[..., start:end]
        if compute_uv:
            u, vt = u[..., :, start:end], vt[..., start:end, :]
    s = s.astype(rdtype, copy=False)
    if not compute_uv:
        return [s]
    return [s, u.astype(x.dtype, copy=False), vt.astype(x.dtype, copy=False)]


@svd_p.def_abstract_eval
def _svd_abstract_eval(x: ShapedArray, *, full_matrices, compute_uv, subset_by_index):
    check_linalg_dtype("svd", x.dtype)
    check_matrix("svd", x)
    m, n = x.shape[-2:]
    rank = min(m, n)
    if subset_by_index is not None:
        start, end = subset_by_index
        if full_matrices and (start, end) != (0, rank):
            raise ValueError("full_matrices and subset_by_index cannot both be set")
        if not 0 <= start <= end:
            raise ValueError(f"svd subset_by_index {subset_by_index} is invalid")
        rank = min(rank, end - start)
    batch = x.shape[:-2]
    s = ShapedArray(batch + (rank,), real_dtype(x.dtype), x.weak_type)
    if not compute_uv:
        return [s]
    return [
        s,
        ShapedArray(batch + (m, m if full_matrices else rank), x.dtype, x.weak_type),
        ShapedArray(batch + (n if full_matrices else rank, n), x.dtype, x.weak_type),
    ]


def svd(
    x,
    *,
    full_matrices: bool = True,
    compute_uv: bool = True,
    subset_by_index: tuple[int, int] | None = None,
    algorithm: SvdAlgorithm | None = None,
):
    """Singular value decomposition x = u diag(s) vh: returns (u, s, vh) (s descending), or s
    alone without compute_uv. The CPU offers the DEFAULT, QR and DIVIDE_AND_CONQUER
    algorithms, which agree up to rounding."""
    if algorithm is not None and algorithm not in (
        SvdAlgorithm.DEFAULT,
        SvdAlgorithm.QR,
        SvdAlgorithm.DIVIDE_AND_CONQUER,
    ):
        raise NotImplementedError("The SVD Jacobi and Polar algorithms are not implemented on CPU.")
    if subset_by_index is not None:
        subset_by_index = tuple(int(i) for i in subset_by_index)
    out = svd_p.bind(
        x,
        full_matrices=bool(full_matrices),
        compute_uv=bool(compute_uv),
        subset_by_index=subset_by_index,
    )
    if compute_uv:
        s, u, vt = out
        return u, s, vt
    return out[0]


def _scale_columns(x, s):
    nd = len(x.shape)
    return mul(x, broadcast_in_dim(s, tuple(x.shape), tuple(range(nd - 2)) + (nd - 1,)))


def _scale_rows(x, s):
    nd = len(x.shape)
    return mul(x, broadcast_in_dim(s, tuple(x.shape), tuple(range(nd - 1))))


def _safe_reciprocal(s):
    """1 / s, and 0 where s is 0."""
    zero = eq(s, zeros_of(tuple(s.shape), s.dtype))
    ones = broadcast_in_dim(scalar_to_array(1, s.dtype, False), tuple(s.shape), ())
    return select(zero, zeros_of(tuple(s.shape), s.dtype), div(ones, select(zero, ones, s)))


# With dS = U^H A' V: s' = Re diag(dS); U' and V' from the antisymmetric parts of dS weighted by
# F[i, j] = 1 / (s_j^2 - s_i^2) (zero where equal), plus the components of A' outside the
# column spaces for non-square matrices. Derivatives use the thin decomposition.
@svd_p.def_jvp
def _svd_jvp_rule(primals, tangents, *, full_matrices, compute_uv, subset_by_index):
    (x,), (x_dot,) = primals, tangents
    m, n = x.shape[-2:]
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError(
            "Singular value decomposition JVP not implemented for full matrices"
        )
    s, u, vt = svd_p.bind(x, full_matrices=False, compute_uv=True, subset_by_index=subset_by_index)
    v = adjoint(vt)
    projected = matmul(matmul(adjoint(u), x_dot), v)
    diag = diagonal(projected)
    s_dot = real(diag) if is_complex(diag) else diag
    if not compute_uv:
        return [s], [s_dot]
    dtype = x.dtype
    squares = mul(s, s)
    f = _reciprocal_differences(squares, dtype)
    scaled_cols = _scale_columns(projected, convert_element_type(s, dtype))  # dS diag(s)
    scaled_rows = _scale_rows(projected, convert_element_type(s, dtype))  # diag(s) dS
    s_inv = _safe_reciprocal(s)
    k = s.shape[-1]
    skew = sub(projected, adjoint(projected))
    half_inv = mul(convert_element_type(s_inv, dtype), scalar_to_array(0.5, dtype, False))
    diag_term = mul(eye(tuple(projected.shape[:-2]) + (k, k), dtype), _scale_rows(skew, half_inv))
    u_dot = matmul(u, add(mul(f, add(scaled_cols, adjoint(scaled_cols))), diag_term))
    v_dot = matmul(v, mul(f, add(scaled_rows, adjoint(scaled_rows))))
    if m > n:
        x_dot_v = matmul(x_dot, v)
        outside = sub(x_dot_v, matmul(u, matmul(adjoint(u), x_dot_v)))
        u_dot = add(u_dot, _scale_columns(outside, convert_element_type(s_inv, dtype)))
    if n > m:
        x_dot_h_u = matmul(adjoint(x_dot), u)
        outside = sub(x_dot_h_u, matmul(v, matmul(vt, x_dot_h_u)))
        v_dot = add(v_dot, _scale_columns(outside, convert_element_type(s_inv, dtype)))
    return [s, u, vt], [s_dot, u_dot, adjoint(v_dot)]


batched_over_front(svd_p)


# --- eig -------------------------------------------------------------------------------------
eig_p = Primitive("eig", multiple_results=True)


def _complex_of(dtype) -> np.dtype:
    wide = np.dtype(dtype) in (np.dtype(np.float64), np.dtype(np.complex128))
    return np.dtype(np.complex128 if wide else np.complex64)


def _unpack_real_eigenvectors(v: np.ndarray, wi: np.ndarray) -> np.ndarray:
    """geev's real eigenvectors as complex ones: a complex pair (wi[j] > 0 and wi[j+1] < 0)
    stores v_j = v[:, j] + i v[:, j+1] and v_{j+1} = conj(v_j) in columns j and j+1."""
    out = v.astype(_complex_of(v.dtype))
    first = wi > 0
    second = np.zeros_like(first)
    second[..., 1:] = first[..., :-1]
    following = np.zeros_like(v)
    following[..., :, :-1] = v[..., :, 1:]
    preceding = np.zeros_like(v)
    preceding[..., :, 1:] = v[..., :, :-1]
    out = np.where(first[..., None, :], v + 1j * following, out)
    return np.where(second[..., None, :], preceding - 1j * v, out)


def _geev(x: np.ndarray, left: bool, right: bool):
    """(w, vl, vr) of every matrix of a (count, n, n) batch (LAPACK's geev); matrices that are
    not finite, or where geev fails, give NaNs."""
    count, n = x.shape[0], x.shape[-1]
    out_dtype = _complex_of(x.dtype)
    finite = np.isfinite(x).all(axis=(-2, -1))
    work = np.array(np.swapaxes(np.where(finite[:, None, None], x, 0), -1, -2), order="C")
    complex_ = np.dtype(x.dtype).kind == "c"
    vl, vr = np.zeros_like(work), np.zeros_like(work)
    info = np.zeros(count, np.int32)
    args = [Arg.char("V" if left else "N"), Arg.char("V" if right else "N"), Arg.int32(n)]
    args += [Arg.per_item(work), Arg.int32(n)]
    if complex_:
        w = np.zeros((count, n), x.dtype)
        args.append(Arg.per_item(w))
    else:
        wr, wi = np.zeros((count, n), x.dtype), np.zeros((count, n), x.dtype)
        args += [Arg.per_item(wr), Arg.per_item(wi)]
    args += [Arg.per_item(vl), Arg.int32(n), Arg.per_item(vr), Arg.int32(n), None, None]
    lwork_index = len(args) - 1
    if complex_:
        args.append(Arg(np.zeros(2 * n, real_dtype(x.dtype)), 0))
    args.append(Arg.per_item(info))
    routine = prefix(x.dtype) + "geev"
    with lapack_on_calling_thread(), np.errstate(all="ignore"):
        _with_workspace(routine, count, args, lwork_index, x.dtype)
    vl, vr = np.swapaxes(vl, -1, -2), np.swapaxes(vr, -1, -2)
    if complex_:
        w = w.astype(out_dtype)
    else:
        w = (wr + 1j * wi).astype(out_dtype)
        vl, vr = _unpack_real_eigenvectors(vl, wi), _unpack_real_eigenvectors(vr, wi)
    bad = ~finite | (info != 0)
    outs = [w, vl.astype(out_dtype), vr.astype(out_dtype)]
    for out in outs:
        out[bad] = np.nan
    return outs


@eig_p.def_impl
def _eig_impl(
    x: np.ndarray,
    *,
    compute_left_eigenvectors,
    compute_right_eigenvectors,
    enable_eigvec_derivs,
    implementation,
):
    out_dtype = _complex_of(x.dtype)
    batch, n = x.shape[:-2], x.shape[-1]
    if x.size == 0:
        w = np.zeros(batch + (n,), out_dtype)
        vl = vr = np.zeros(x.shape, out_dtype)
    else:
        w, vl, vr = _geev(
            x.reshape((-1, n, n)), compute_left_eigenvectors, compute_right_eigenvectors
        )
        w, vl, vr = w.reshape(batch + (n,)), vl.reshape(x.shape), vr.reshape(x.shape)
    outs = [w]
    if compute_left_eigenvectors:
        outs.append(vl)
    if compute_right_eigenvectors:
        outs.append(vr)
    return outs


@eig_p.def_abstract_eval
def _eig_abstract_eval(
    x: ShapedArray, *, compute_left_eigenvectors, compute_right_eigenvectors, **_
):
    check_linalg_dtype("eig", x.dtype)
    check_matrix("eig", x, square=True)
    out_dtype = _complex_of(x.dtype)
    outs = [ShapedArray(x.shape[:-1], out_dtype, False)]
    outs += [ShapedArray(x.shape, out_dtype, False)] * (
        int(compute_left_eigenvectors) + int(compute_right_eigenvectors)
    )
    return outs


def eig(
    x,
    *,
    compute_left_eigenvectors: bool = True,
    compute_right_eigenvectors: bool = True,
    enable_eigvec_derivs: bool = False,
    implementation: EigImplementation | None = None,
    use_magma: bool | None = None,
):
    """Eigendecomposition of general square matrices: [w, vl, vr] (complex), omitting the
    eigenvectors not asked for. Left eigenvectors satisfy vl^H x = w vl^H; each eigenvector
    has unit norm and a real largest component (LAPACK's geev). Eigenvalues can be
    differentiated; eigenvectors only with enable_eigvec_derivs, which assumes distinct
    eigenvalues and differentiates through geev's normalization."""
    if use_magma is not None:
        warnings.warn(
            "use_magma is deprecated, please use implementation=EigImplementation.MAGMA instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        implementation = EigImplementation.MAGMA if use_magma else EigImplementation.LAPACK
    if implementation is not None and implementation != EigImplementation.LAPACK:
        raise ValueError("Only the lapack implementation is supported on CPU.")
    return eig_p.bind(
        x,
        compute_left_eigenvectors=bool(compute_left_eigenvectors),
        compute_right_eigenvectors=bool(compute_right_eigenvectors),
        enable_eigvec_derivs=bool(enable_eigvec_derivs),
        implementation=implementation,
    )


def _solve_square(a, b):
    """a^-1 b for square matrices a (with the same leading dimensions as b)."""
    factors, _, permutation = lu_p.bind(a)
    return lu_solve(factors, permutation, b)


def _eigenvector_tangents(w, v, x_dot):
    """Tangents of the eigenvalues w and the eigenvectors v (columns) of x for tangent x_dot,
    by nondegenerate perturbation theory, with the free multiple of each v_j's tangent fixed
    by geev's normalization (unit norm, real largest component)."""
    from kiln.primitives.elementwise import abs as abs_, complex as complex_, imag, neg
    from kiln.primitives.reductions import argmax_p, reduce_sum

    nd = len(v.shape)
    projected = matmul(_solve_square(v, x_dot), v)
    w_dot = diagonal(projected)
    u = matmul(v, mul(_reciprocal_differences(w, v.dtype), projected))
    largest = argmax_p.bind(abs_(v), axes=(nd - 2,), index_dtype=np.dtype(np.int32))
    rows = broadcasted_iota(np.int32, tuple(v.shape), nd - 2)
    mask = convert_element_type(
        eq(rows, broadcast_in_dim(largest, tuple(v.shape), tuple(range(nd - 2)) + (nd - 1,))),
        v.dtype,
    )
    along_v = real(reduce_sum(mul(conj(v), u), (nd - 2,)))
    at_largest = div(
        imag(reduce_sum(mul(mask, u), (nd - 2,))), real(reduce_sum(mul(mask, v), (nd - 2,)))
    )
    c = complex_(neg(along_v), neg(at_largest))
    shift = broadcast_in_dim(c, tuple(v.shape), tuple(range(nd - 2)) + (nd - 1,))
    return w_dot, add(u, mul(v, shift))


@eig_p.def_jvp
def _eig_jvp_rule(
    primals,
    tangents,
    *,
    compute_left_eigenvectors,
    compute_right_eigenvectors,
    enable_eigvec_derivs,
    implementation,
):
    from kiln.primitives.reductions import reduce_sum

    (x,), (x_dot,) = primals, tangents
    if (compute_left_eigenvectors or compute_right_eigenvectors) and not enable_eigvec_derivs:
        raise NotImplementedError(
            "Derivatives of non-symmetric eigenvectors are only valid under assumptions on "
            "the input that kiln cannot check (see the enable_eigvec_derivs argument to "
            "kiln.lax.linalg.eig). Pass enable_eigvec_derivs=True to kiln.lax.linalg.eig to "
            "opt in."
        )
    outs = eig_p.bind(
        x,
        compute_left_eigenvectors=compute_left_eigenvectors,
        compute_right_eigenvectors=True,
        enable_eigvec_derivs=enable_eigvec_derivs,
        implementation=implementation,
    )
    w, vr = outs[0], outs[-1]
    x_dot = convert_element_type(x_dot, vr.dtype)
    nd = len(vr.shape)
    if not (compute_left_eigenvectors or compute_right_eigenvectors):
        w_dot = reduce_sum(mul(_solve_square(vr, x_dot), swap_last(vr)), (nd - 1,))
        return [w], [w_dot]
    w_dot, vr_dot = _eigenvector_tangents(w, vr, x_dot)
    primal_out, tangent_out = [w], [w_dot]
    if compute_left_eigenvectors:
        _, vl_dot = _eigenvector_tangents(conj(w), outs[1], adjoint(x_dot))
        primal_out.append(outs[1])
        tangent_out.append(vl_dot)
    if compute_right_eigenvectors:
        primal_out.append(vr)
        tangent_out.append(vr_dot)
    return primal_out, tangent_out


batched_over_front(eig_p)

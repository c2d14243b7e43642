"""Householder reductions and their products: hessenberg, tridiagonal, householder_product,
ormqr and schur (kiln.lax.linalg), batched over leading dimensions, each one LAPACK routine
called over the batch in a native loop (kiln.primitives.lapack_batched). Also
cholesky_update and symmetric_product, which JAX builds from lax ops.

JAX defines no derivatives for any of these (differentiating raises NotImplementedError, as
JAX's does); cholesky_update has no batching rule in JAX either.
"""

from __future__ import annotations

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import real_dtype
from kiln.primitives.lapack_batched import Arg, batched_call, prefix
from kiln.primitives.linalg_decomp import (
    batched_over_front,
    check_linalg_dtype,
    lapack_on_calling_thread,
)

__all__ = [
    "hessenberg",
    "hessenberg_p",
    "householder_product",
    "householder_product_p",
    "ormqr",
    "ormqr_p",
    "schur",
    "schur_p",
    "tridiagonal",
    "tridiagonal_p",
    "cholesky_update",
    "cholesky_update_p",
    "symmetric_product",
    "symmetric_product_p",
]


def _no_derivative(prim: Primitive) -> None:
    """JAX has no derivative rule for `prim`: differentiating it raises the error JAX gives."""
    prim.non_differentiable_reason = (
        f"JAX defines no derivative for {prim.name}, and neither does kiln"
    )

    def jvp_rule(primals, tangents, **params):
        raise NotImplementedError(f"Differentiation rule for '{prim.name}' not implemented")

    prim.def_jvp(jvp_rule)


def _column_major(x: np.ndarray) -> np.ndarray:
    """A fresh C-ordered array of the transposes of x's matrices, flattened to one batch
    dimension: each item is the matrix in column-major (Fortran) order."""
    flat = x.reshape((-1,) + x.shape[-2:])
    return np.array(np.swapaxes(flat, -1, -2), order="C")


def _row_major(buffer: np.ndarray, shape: tuple) -> np.ndarray:
    """The inverse of _column_major, reshaped to `shape`."""
    return np.ascontiguousarray(np.swapaxes(buffer, -1, -2)).reshape(shape)


def _workspace(routine: str, args: list[Arg], lwork_index: int, dtype) -> tuple:
    """LAPACK's workspace query: the routine once with lwork = -1, then a workspace of the
    size it asks for. Returns (work Arg, lwork Arg) to put in place of the query's."""
    query = np.zeros(1, dtype)
    args = list(args)
    args[lwork_index - 1] = Arg(query, 0)
    args[lwork_index] = Arg.int32(-1)
    batched_call(routine, 1, args)
    size = max(1, int(np.real(query[0])))
    return Arg(np.zeros(size, dtype), 0), Arg.int32(size)


def _nan_where_failed(info: np.ndarray, *outputs: np.ndarray) -> None:
    failed = info != 0
    if failed.any():
        for out in outputs:
            out[failed] = np.nan


def _square(name: str, x: ShapedArray, message: str) -> None:
    check_linalg_dtype(name, x.dtype)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(message.format(shape=x.shape))


# --- hessenberg ------------------------------------------------------------------------------
hessenberg_p = Primitive("hessenberg", multiple_results=True)


@hessenberg_p.def_impl
def _hessenberg_impl(a: np.ndarray):
    n = a.shape[-1]
    batch = a.shape[:-2]
    taus = np.zeros(batch + (max(n - 1, 0),), a.dtype)
    if a.size == 0 or n == 1:
        return [np.array(a), taus]
    work = _column_major(a)
    count = work.shape[0]
    flat_taus = taus.reshape(count, n - 1)
    info = np.zeros(count, np.int32)
    args = [Arg.int32(n), Arg.int32(1), Arg.int32(n), Arg.per_item(work), Arg.int32(n)]
    args += [Arg.per_item(flat_taus), None, None, Arg.per_item(info)]
    routine = prefix(a.dtype) + "gehrd"
    with lapack_on_calling_thread():
        args[6], args[7] = _workspace(routine, args, 7, a.dtype)
        batched_call(routine, count, args)
    out = _row_major(work, a.shape)
    _nan_where_failed(info.reshape(batch), out, taus)
    return [out, taus]


@hessenberg_p.def_abstract_eval
def _hessenberg_abstract_eval(a: ShapedArray):
    _square(
        "hessenberg",
        a,
        "Argument to Hessenberg reduction must have shape [..., n, n], got shape {shape}",
    )
    n = a.shape[-1]
    return [
        ShapedArray(a.shape, a.dtype, a.weak_type),
        ShapedArray(a.shape[:-2] + (max(n - 1, 0),), a.dtype, a.weak_type),
    ]


def hessenberg(a):
    """Reduce square matrices to upper Hessenberg form by Householder reflections: returns
    (a, taus), the Hessenberg matrix on and above the first subdiagonal of a, the reflectors'
    vectors below it and their scalar factors in taus (LAPACK's gehrd layout)."""
    return tuple(hessenberg_p.bind(a))


_no_derivative(hessenberg_p)
batched_over_front(hessenberg_p)


# --- tridiagonal -----------------------------------------------------------------------------
tridiagonal_p = Primitive("tridiagonal", multiple_results=True)


@tridiagonal_p.def_impl
def _tridiagonal_impl(a: np.ndarray, *, lower):
    n = a.shape[-1]
    batch = a.shape[:-2]
    real = real_dtype(a.dtype)
    d = np.zeros(batch + (n,), real)
    e = np.zeros(batch + (n - 1,), real)
    taus = np.zeros(batch + (n - 1,), a.dtype)
    if a.size == 0:
        return [np.array(a), d, e, taus]
    work = _column_major(a)
    count = work.shape[0]
    flat = [v.reshape(count, -1) for v in (d, e, taus)]
    info = np.zeros(count, np.int32)
    args = [Arg.char("L" if lower else "U"), Arg.int32(n), Arg.per_item(work), Arg.int32(n)]
    args += [Arg.per_item(v) for v in flat] + [None, None, Arg.per_item(info)]
    routine = prefix(a.dtype) + ("hetrd" if np.dtype(a.dtype).kind == "c" else "sytrd")
    with lapack_on_calling_thread():
        args[7], args[8] = _workspace(routine, args, 8, a.dtype)
        batched_call(routine, count, args)
    out = _row_major(work, a.shape)
    _nan_where_failed(info.reshape(batch), out, d, e, taus)
    return [out, d, e, taus]


@tridiagonal_p.def_abstract_eval
def _tridiagonal_abstract_eval(a: ShapedArray, *, lower):
    _square(
        "tridiagonal", a, "The input to tridiagonal must be a square matrix. Got shape {shape}."
    )
    n = a.shape[-1]
    if n == 0:
        raise ValueError(f"The input to tridiagonal must be a square matrix. Got shape {a.shape}.")
    batch = a.shape[:-2]
    real = real_dtype(a.dtype)
    return [
        ShapedArray(a.shape, a.dtype, a.weak_type),
        ShapedArray(batch + (n,), real, a.weak_type),
        ShapedArray(batch + (n - 1,), real, a.weak_type),
        ShapedArray(batch + (n - 1,), a.dtype, a.weak_type),
    ]


def tridiagonal(a, *, lower: bool = True):
    """Reduce Hermitian matrices to real symmetric tridiagonal form, reading only the `lower`
    (or upper) triangle: returns (a, d, e, taus) in LAPACK's sytrd/hetrd layout, d the
    diagonal and e the first sub- (or super-) diagonal of the tridiagonal matrix."""
    return tuple(tridiagonal_p.bind(a, lower=bool(lower)))


_no_derivative(tridiagonal_p)
batched_over_front(tridiagonal_p)


# --- householder_product ---------------------------------------------------------------------
householder_product_p = Primitive("householder_product")


@householder_product_p.def_impl
def _householder_product_impl(a: np.ndarray, taus: np.ndarray):
    m, n = a.shape[-2:]
    k = taus.shape[-1]
    if a.size == 0:
        return np.broadcast_to(np.eye(m, n, dtype=a.dtype), a.shape).copy()
    work = _column_major(a)
    count = work.shape[0]
    flat_taus = np.array(taus.reshape(count, k), order="C")
    if k == 0:
        flat_taus = np.zeros((count, 1), a.dtype)
    info = np.zeros(count, np.int32)
    args = [Arg.int32(m), Arg.int32(n), Arg.int32(k), Arg.per_item(work), Arg.int32(m)]
    args += [Arg.per_item(flat_taus), None, None, Arg.per_item(info)]
    routine = prefix(a.dtype) + ("ungqr" if np.dtype(a.dtype).kind == "c" else "orgqr")
    with lapack_on_calling_thread():
        args[6], args[7] = _workspace(routine, args, 7, a.dtype)
        batched_call(routine, count, args)
    return _row_major(work, a.shape)


@householder_product_p.def_abstract_eval
def _householder_product_abstract_eval(a: ShapedArray, taus: ShapedArray):
    check_linalg_dtype("householder_product", a.dtype)
    if a.dtype != taus.dtype:
        raise TypeError(
            "householder_product requires a and taus of the same dtype, got "
            f"{a.dtype.name} and {taus.dtype.name}"
        )
    if a.ndim < 2 or taus.ndim < 1 or a.shape[:-2] != taus.shape[:-1]:
        raise ValueError(
            "householder_product takes a of shape [..., m, n] and taus of shape [..., k], got "
            f"{a.shape} and {taus.shape}"
        )
    m, n = a.shape[-2:]
    if m < n:
        raise ValueError(
            "The first argument to householder_product must have at least as many rows as "
            f"columns, got shape {a.shape}"
        )
    if taus.shape[-1] > min(m, n):
        raise ValueError(
            "The second argument to householder_product must not have more rows than the "
            "minimum of the first argument's rows and columns."
        )
    return ShapedArray(a.shape, a.dtype, a.weak_type)


def householder_product(a, taus):
    """The m x n matrix with orthonormal columns that is the product of the elementary
    Householder reflectors stored below the diagonal of a (unit diagonal implied), with
    scalar factors taus (LAPACK's orgqr/ungqr)."""
    return householder_product_p.bind(a, taus)


_no_derivative(householder_product_p)


@householder_product_p.def_batching
def _householder_product_batching_rule(args, dims):
    from kiln.primitives.base import bdim_at_front

    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    a, taus = (bdim_at_front(x, d, size) for x, d in zip(args, dims))
    return householder_product_p.bind(a, taus), 0


# --- ormqr -----------------------------------------------------------------------------------
ormqr_p = Primitive("ormqr")


@ormqr_p.def_impl
def _ormqr_impl(a: np.ndarray, taus: np.ndarray, c: np.ndarray, *, left, transpose):
    m = a.shape[-2]
    k = taus.shape[-1]
    rows, cols = c.shape[-2:]
    if c.size == 0 or k == 0:
        return np.array(c)
    reflectors = _column_major(a[..., :, :k])
    out = _column_major(c)
    count = out.shape[0]
    flat_taus = np.array(taus.reshape(count, k), order="C")
    info = np.zeros(count, np.int32)
    complex_ = np.dtype(a.dtype).kind == "c"
    trans = ("C" if complex_ else "T") if transpose else "N"
    args = [Arg.char("L" if left else "R"), Arg.char(trans), Arg.int32(rows), Arg.int32(cols)]
    args += [Arg.int32(k), Arg.per_item(reflectors), Arg.int32(m), Arg.per_item(flat_taus)]
    args += [Arg.per_item(out), Arg.int32(rows), None, None, Arg.per_item(info)]
    routine = prefix(a.dtype) + ("unmqr" if complex_ else "ormqr")
    with lapack_on_calling_thread():
        args[10], args[11] = _workspace(routine, args, 11, a.dtype)
        batched_call(routine, count, args)
    return _row_major(out, c.shape)


@ormqr_p.def_abstract_eval
def _ormqr_abstract_eval(a, taus, c, *, left, transpose):
    check_linalg_dtype("ormqr", a.dtype)
    if not a.dtype == taus.dtype == c.dtype:
        raise TypeError("ormqr requires a, taus and c of the same dtype")
    if a.ndim < 2 or c.ndim < 2 or taus.ndim < 1:
        raise ValueError(
            f"ormqr takes a [..., m, n], taus [..., k] and c [..., p, q], got {a.shape}, "
            f"{taus.shape} and {c.shape}"
        )
    if not a.shape[:-2] == taus.shape[:-1] == c.shape[:-2]:
        raise ValueError(
            "ormqr requires the same batch dimensions on every argument, got "
            f"{a.shape}, {taus.shape} and {c.shape}"
        )
    m, n = a.shape[-2:]
    if taus.shape[-1] > min(m, n):
        raise ValueError(
            f"ormqr takes at most min(m, n) = {min(m, n)} reflectors, got {taus.shape[-1]}"
        )
    if left and c.shape[-2] != m:
        raise ValueError(
            "ormqr with left=True expects c to have the same number of rows as the "
            f"Householder matrix a. Got a shape {a.shape[-2:]} and c shape {c.shape[-2:]}."
        )
    if not left and c.shape[-1] != m:
        raise ValueError(
            "ormqr with left=False expects c to have the same number of columns as the "
            f"Householder matrix a has rows. Got a shape {a.shape[-2:]} and c shape "
            f"{c.shape[-2:]}."
        )
    return ShapedArray(c.shape, c.dtype, c.weak_type)


def ormqr(a, taus, c, *, left: bool = True, transpose: bool = False):
    """Q c (left) or c Q, with Q^T (Q^H) for `transpose`, where Q is the product of the
    Householder reflectors below a's diagonal with factors taus (LAPACK's geqrf layout), without
    forming Q."""
    return ormqr_p.bind(a, taus, c, left=bool(left), transpose=bool(transpose))


_no_derivative(ormqr_p)


@ormqr_p.def_batching
def _ormqr_batching_rule(args, dims, **params):
    from kiln.primitives.base import bdim_at_front

    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    a, taus, c = (bdim_at_front(x, d, size) for x, d in zip(args, dims))
    return ormqr_p.bind(a, taus, c, **params), 0


# --- schur -----------------------------------------------------------------------------------
schur_p = Primitive("schur", multiple_results=True)


@schur_p.def_impl
def _schur_impl(x: np.ndarray, *, compute_schur_vectors, sort_eig_vals, select_callable):
    n = x.shape[-1]
    if x.size == 0:
        outs = [np.array(x), np.array(x)]
        return outs if compute_schur_vectors else outs[:1]
    work = _column_major(x)
    count = work.shape[0]
    complex_ = np.dtype(x.dtype).kind == "c"
    vectors = np.zeros_like(work)
    info = np.zeros(count, np.int32)
    sdim = np.zeros(count, np.int32)
    unused = np.zeros(1, np.int64)  # the eigenvalue selector, not called without sorting
    args = [Arg.char("V" if compute_schur_vectors else "N"), Arg.char("N"), Arg(unused, 0)]
    args += [Arg.int32(n), Arg.per_item(work), Arg.int32(n), Arg.per_item(sdim)]
    if complex_:
        args += [Arg.per_item(np.zeros((count, n), x.dtype))]
    else:
        args += [Arg.per_item(np.zeros((count, n), x.dtype)) for _ in range(2)]
    args += [Arg.per_item(vectors), Arg.int32(n), None, None]
    lwork_index = len(args) - 1
    if complex_:
        args.append(Arg(np.zeros(n, real_dtype(x.dtype)), 0))
    args += [Arg(np.zeros(1, np.int32), 0), Arg.per_item(info)]
    routine = prefix(x.dtype) + "gees"
    with lapack_on_calling_thread(), np.errstate(all="ignore"):
        args[lwork_index - 1], args[lwork_index] = _workspace(routine, args, lwork_index, x.dtype)
        batched_call(routine, count, args)
    batch = x.shape[:-2]
    outs = [_row_major(work, x.shape), _row_major(vectors, x.shape)]
    outs = outs if compute_schur_vectors else outs[:1]
    _nan_where_failed(info.reshape(batch), *outs)
    return outs


@schur_p.def_abstract_eval
def _schur_abstract_eval(x, *, compute_schur_vectors, sort_eig_vals, select_callable):
    _square("schur", x, "The input to schur must be a square matrix. Got shape {shape}.")
    out = ShapedArray(x.shape, x.dtype, x.weak_type)
    return [out, out] if compute_schur_vectors else [out]


def schur(
    x,
    *,
    compute_schur_vectors: bool = True,
    sort_eig_vals: bool = False,
    select_callable=None,
):
    """Schur decomposition x = q t q^H of square matrices: returns (t, q), t upper
    (quasi-)triangular (real Schur form, with 2 x 2 blocks, for real x) and q unitary; only t
    without compute_schur_vectors. Sorting the eigenvalues is not supported."""
    if sort_eig_vals:
        raise NotImplementedError("The sort feature of LAPACK's gees routine is not implemented.")
    outs = schur_p.bind(
        x,
        compute_schur_vectors=bool(compute_schur_vectors),
        sort_eig_vals=False,
        select_callable=None,
    )
    return tuple(outs) if compute_schur_vectors else outs[0]


_no_derivative(schur_p)
batched_over_front(schur_p)


# --- cholesky_update -------------------------------------------------------------------------
cholesky_update_p = Primitive("cholesky_update")


@cholesky_update_p.def_impl
def _cholesky_update_impl(r: np.ndarray, w: np.ndarray) -> np.ndarray:
    # Givens rotations that fold w into R row by row: [R; w^T] -> [R'; 0].
    r = np.array(r, copy=True)
    w = np.array(w, copy=True)
    with np.errstate(all="ignore"):
        for k in range(r.shape[0]):
            x, y = r[k, k], w[k]
            if y == 0:
                c, s = r.dtype.type(1), r.dtype.type(0)
            else:
                scale = max(abs(x), abs(y))
                x, y = x / scale, y / scale
                inverse = 1 / np.sqrt(x * x + y * y)
                c, s = x * inverse, -y * inverse
            row = r[k, :].copy()
            r[k, :] = c * row - s * w
            w = c * w + s * row
    return r


@cholesky_update_p.def_abstract_eval
def _cholesky_update_abstract_eval(r: ShapedArray, w: ShapedArray) -> ShapedArray:
    if r.dtype not in (dtypes.float32, dtypes.float64) or r.dtype != w.dtype:
        raise TypeError(
            "cholesky_update takes float32 or float64 arguments of one dtype, got "
            f"{r.dtype.name} and {w.dtype.name}"
        )
    if r.ndim != 2 or w.ndim != 1 or r.shape[0] != r.shape[1] or w.shape[0] != r.shape[1]:
        raise ValueError(
            "Rank-1 update to Cholesky decomposition takes a square matrix and a vector of "
            f"the same size as input. Got shapes {r.shape} and {w.shape} instead"
        )
    return ShapedArray(r.shape, r.dtype, r.weak_type)


def cholesky_update(r_matrix, w_vector):
    """The upper Cholesky factor of R^T R + w w^T, given the upper factor R of a matrix and
    a vector w, in O(n^2) by Givens rotations."""
    return cholesky_update_p.bind(r_matrix, w_vector)


_no_derivative(cholesky_update_p)


@cholesky_update_p.def_batching
def _cholesky_update_batching_rule(args, dims):
    raise NotImplementedError("Batching rule for 'cholesky_update' not implemented")


# --- symmetric_product -----------------------------------------------------------------------
symmetric_product_p = Primitive("symmetric_product")


@symmetric_product_p.def_impl
def _symmetric_product_impl(a: np.ndarray, c: np.ndarray, *, alpha, beta) -> np.ndarray:
    product = np.matmul(a, np.swapaxes(a, -1, -2))
    return (alpha * product + beta * c).astype(c.dtype, copy=False)


@symmetric_product_p.def_abstract_eval
def _symmetric_product_abstract_eval(a: ShapedArray, c: ShapedArray, *, alpha, beta):
    if a.dtype not in (dtypes.float32, dtypes.float64) or a.dtype != c.dtype:
        raise TypeError(
            "symmetric_product takes float32 or float64 arguments of one dtype, got "
            f"{a.dtype.name} and {c.dtype.name}"
        )
    if (
        a.ndim < 2
        or c.ndim != a.ndim
        or a.shape[:-2] != c.shape[:-2]
        or a.shape[-2] != c.shape[-1]
        or c.shape[-2] != c.shape[-1]
    ):
        raise ValueError(
            "symmetric_update expects a rectangular matrix of shape (m, n) and a square "
            f"matrix of shape (n, n). Got shapes {a.shape} and {c.shape}."
        )
    return ShapedArray(c.shape, c.dtype, c.weak_type and a.weak_type)


def symmetric_product(
    a_matrix, c_matrix, *, alpha: float = 1.0, beta: float = 0.0, symmetrize_output: bool = False
):
    """alpha a a^T + beta c for matrices a (..., m, n) and symmetric c (..., m, m). Only the
    lower triangle is guaranteed on every platform; symmetrize_output mirrors it into the
    upper one (as this impl computes both, the result is the same)."""
    from kiln.primitives.elementwise import add
    from kiln.primitives.linalg_decomp import swap_last, tril

    out = symmetric_product_p.bind(a_matrix, c_matrix, alpha=float(alpha), beta=float(beta))
    if symmetrize_output:
        out = add(tril(out), swap_last(tril(out, -1)))
    return out


_no_derivative(symmetric_product_p)


@symmetric_product_p.def_batching
def _symmetric_product_batching_rule(args, dims, **params):
    from kiln.primitives.base import bdim_at_front

    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    a, c = (bdim_at_front(x, d, size) for x, d in zip(args, dims))
    return symmetric_product_p.bind(a, c, **params), 0

"""Triangular factorizations and solves: cholesky, triangular_solve, lu,
lu_pivots_to_permutation and tridiagonal_solve (kiln.lax.linalg), batched over leading
dimensions, and lu_solve, the solve with an LU factorization that kiln.numpy.linalg builds on.

The impls call SciPy's LAPACK and BLAS over the whole batch in one native loop
(kiln.primitives.lapack_batched), with OpenBLAS itself kept on one thread per call. The
derivative rules are written with lax ops and these primitives, so that they can be
differentiated again; the matrix helpers they share, at the top of this module,
serve the spectral decompositions in linalg_spectral.py too.
"""

from __future__ import annotations

import operator

import numpy as np

from kiln.core import dtypes
from kiln.core.ad_util import is_undefined_primal
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import bdim_at_front, defjvp_zero, move_bdim, scalar_to_array
from kiln.primitives.elementwise import (
    add,
    add_any,
    conj,
    convert_element_type,
    eq,
    ge,
    le,
    neg,
    select,
    sub,
)
from kiln.primitives.indexing_gather import GatherDimensionNumbers, gather
from kiln.primitives.lapack_batched import Arg, batched_call, lapack_on_calling_thread, prefix
from kiln.primitives.linalg import dot_general
from kiln.primitives.shape import broadcast_in_dim, expand_dims, reshape, transpose
from kiln.primitives.shape_slice import broadcasted_iota, concatenate, slice as slice_
from kiln.primitives.sorting import sort_key_val

__all__ = [
    "cholesky",
    "cholesky_p",
    "triangular_solve",
    "triangular_solve_p",
    "lu",
    "lu_p",
    "lu_pivots_to_permutation",
    "lu_pivots_to_permutation_p",
    "tridiagonal_solve",
    "tridiagonal_solve_p",
]

LINALG_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def check_linalg_dtype(name: str, dtype) -> None:
    if np.dtype(dtype) not in LINALG_DTYPES:
        raise TypeError(
            f"{name} does not accept dtype {np.dtype(dtype).name}; it accepts float32, float64, "
            "complex64 and complex128 arrays (kiln.numpy.linalg promotes other types)."
        )


def check_matrix(name: str, aval: ShapedArray, square: bool = False) -> None:
    if aval.ndim < 2:
        raise ValueError(
            f"{name} requires an operand of shape [..., m, n] (rank >= 2), got {aval.shape}"
        )
    if square and aval.shape[-1] != aval.shape[-2]:
        raise ValueError(f"{name} requires square matrices [..., n, n], got shape {aval.shape}")


def batched_over_front(prim: Primitive):
    """Declare the batching rule of a one-operand primitive that is already batched over its
    leading dimensions: the batch dimension moves to the front."""

    def batching_rule(args, dims, **params):
        (x,), (bdim,) = args, dims
        out = prim.bind(move_bdim(x, bdim, 0), **params)
        return (out, [0] * len(out)) if prim.multiple_results else (out, 0)

    return prim.def_batching(batching_rule)


# --- matrix helpers for the rules (lax ops on the last two dimensions) -------------------------


def is_complex(x) -> bool:
    return np.dtype(x.dtype).kind == "c"


def swap_last(x):
    """The transpose of each matrix."""
    nd = len(x.shape)
    return transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def conj_if_complex(x):
    return conj(x) if is_complex(x) else x


def adjoint(x):
    """The conjugate transpose of each matrix."""
    return conj_if_complex(swap_last(x))


def matmul(a, b):
    """Matrix products of two batches with the same leading dimensions."""
    batch = tuple(range(len(a.shape) - 2))
    return dot_general(a, b, (((len(a.shape) - 1,), (len(b.shape) - 2,)), (batch, batch)))


def band_mask(shape: tuple, lower: bool, k: int = 0):
    """True on and below diagonal k (lower) or on and above it (upper) of each matrix."""
    nd = len(shape)
    rows = broadcasted_iota(np.int32, shape, nd - 2)
    cols = broadcasted_iota(np.int32, shape, nd - 1)
    shifted = add(rows, scalar_to_array(k, np.int32, False)) if k else rows
    return ge(shifted, cols) if lower else le(shifted, cols)


def zeros_of(shape: tuple, dtype):
    return broadcast_in_dim(scalar_to_array(0, dtype, False), tuple(shape), ())


def tril(x, k: int = 0):
    return select(band_mask(tuple(x.shape), True, k), x, zeros_of(x.shape, x.dtype))


def triu(x, k: int = 0):
    return select(band_mask(tuple(x.shape), False, k), x, zeros_of(x.shape, x.dtype))


def eye(shape: tuple, dtype):
    """Identity matrices of `shape` (..., n, n)."""
    nd = len(shape)
    on_diagonal = eq(
        broadcasted_iota(np.int32, shape, nd - 2), broadcasted_iota(np.int32, shape, nd - 1)
    )
    return convert_element_type(on_diagonal, dtype)


def diagonal(x):
    """The diagonal of each square matrix, shape (..., n)."""
    from kiln.primitives.reductions import reduce_sum

    nd = len(x.shape)
    on_diagonal = eq(
        broadcasted_iota(np.int32, tuple(x.shape), nd - 2),
        broadcasted_iota(np.int32, tuple(x.shape), nd - 1),
    )
    return reduce_sum(select(on_diagonal, x, zeros_of(x.shape, x.dtype)), (nd - 1,))


def mirror_triangle(x, lower: bool):
    """The Hermitian matrix whose `lower` (or upper) triangle is that of x: what a primitive
    that reads one triangle sees, so its tangent is the tangent mirrored the same way."""
    kept = tril(x) if lower else triu(x)
    strict = tril(x, -1) if lower else triu(x, 1)
    return add(kept, adjoint(strict))


def symmetrize(x):
    """(x + x^H) / 2 of each matrix."""
    from kiln.primitives.elementwise import div

    return div(add(x, adjoint(x)), scalar_to_array(2, x.dtype, False))


def slice_last_two(x, rows: tuple, cols: tuple):
    """x[..., rows[0]:rows[1], cols[0]:cols[1]]."""
    nd = len(x.shape)
    start = (0,) * (nd - 2) + (rows[0], cols[0])
    limit = tuple(x.shape[:-2]) + (rows[1], cols[1])
    return slice_(x, start, limit)


def permute_rows(x, permutation):
    """x[..., permutation[..., i], :] for each row i: a gather of whole rows per matrix."""
    shape = tuple(x.shape)
    nd = len(shape)
    if 0 in shape:
        return x
    index = broadcast_in_dim(permutation, shape, tuple(range(nd - 1)))
    coordinates = [
        index if d == nd - 2 else broadcasted_iota(index.dtype, shape, d) for d in range(nd)
    ]
    index_vectors = concatenate([expand_dims(c, (nd,)) for c in coordinates], nd)
    dimension_numbers = GatherDimensionNumbers(
        offset_dims=(), collapsed_slice_dims=tuple(range(nd)), start_index_map=tuple(range(nd))
    )
    return gather(x, index_vectors, dimension_numbers, (1,) * nd)


# --- cholesky --------------------------------------------------------------------------------
cholesky_p = Primitive("cholesky")


_UNBLOCKED_CHOLESKY_MAX = 96


@cholesky_p.def_impl
def _cholesky_impl(x: np.ndarray) -> np.ndarray:
    # Only the lower triangle is read, as LAPACK's potrf does.
    if x.size == 0:
        return np.zeros(x.shape, x.dtype)
    n = x.shape[-1]
    # The C-ordered buffer of a is a^T (= conj(a)) in Fortran order, and the upper factor U of
    # its upper triangle, U^H U = conj(a), is a's lower factor as U^T: the same buffer again.
    factors = np.array(x.reshape((-1, n, n)), order="C")
    info = np.zeros(factors.shape[0], np.int32)
    args = [Arg.char("U"), Arg.int32(n), Arg.per_item(factors), Arg.int32(n), Arg.per_item(info)]
    with lapack_on_calling_thread():
        # OpenBLAS's blocked potrf only pays off above about a hundred rows.
        routine = "potf2" if n <= _UNBLOCKED_CHOLESKY_MAX else "potrf"
        batched_call(prefix(x.dtype) + routine, factors.shape[0], args, work=n**3 / 3)
        if n > 1:
            # Zeros over what is left of a above the factor: in Fortran order, the lower
            # triangle of the (n-1) x (n-1) block one row down.
            zero = Arg.shared(0, x.dtype)
            args = [Arg.char("L"), Arg.int32(n - 1), Arg.int32(n - 1), zero, zero]
            args += [Arg.per_item(factors, offset=1), Arg.int32(n)]
            batched_call(prefix(x.dtype) + "laset", factors.shape[0], args, work=n * n)
    factors[info != 0] = np.nan  # not positive definite (or NaN): NaNs, as XLA's Cholesky gives
    return factors.reshape(x.shape)


@cholesky_p.def_abstract_eval
def _cholesky_abstract_eval(x: ShapedArray) -> ShapedArray:
    check_linalg_dtype("cholesky", x.dtype)
    check_matrix("cholesky", x, square=True)
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def cholesky(x, *, symmetrize_input: bool = True):
    """The lower Cholesky factor L of each Hermitian positive-definite matrix (A = L L^H).
    With symmetrize_input the factored matrix is (x + x^H)/2; otherwise only the lower
    triangle of x is read. A matrix that is not positive definite gives NaNs."""
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"The input to cholesky must be a square matrix. Got shape {x.shape}.")
    if symmetrize_input:
        x = symmetrize(x)
    return cholesky_p.bind(x)


# Murray's forward rule (arXiv:1602.07527): L' = L phi(L^-1 A' L^-H), where phi keeps the lower
# triangle and halves the diagonal. The tangent is mirrored from its lower triangle, the one
# the primitive reads.
@cholesky_p.def_jvp
def _cholesky_jvp_rule(primals, tangents):
    from kiln.primitives.elementwise import mul

    (x,), (x_dot,) = primals, tangents
    factor = cholesky_p.bind(x)
    sigma_dot = mirror_triangle(x_dot, lower=True)
    right = triangular_solve(
        factor, sigma_dot, left_side=False, lower=True, transpose_a=True, conjugate_a=True
    )
    inner = triangular_solve(factor, right, left_side=True, lower=True)
    halves = sub(
        broadcast_in_dim(scalar_to_array(1, x.dtype, False), tuple(x.shape), ()),
        mul(eye(tuple(x.shape), x.dtype), scalar_to_array(0.5, x.dtype, False)),
    )
    phi = mul(tril(inner), halves)
    return factor, matmul(factor, phi)


batched_over_front(cholesky_p)


# --- triangular_solve ------------------------------------------------------------------------
triangular_solve_p = Primitive("triangular_solve")


@triangular_solve_p.def_impl
def _triangular_solve_impl(
    a: np.ndarray, b: np.ndarray, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal
) -> np.ndarray:
    if b.size == 0:
        return np.zeros(b.shape, b.dtype)
    n = a.shape[-1]
    rows, cols = b.shape[-2:]
    if cols == 1 or rows == 1:
        return _trsv(a, b, left_side, lower, transpose_a, conjugate_a, unit_diagonal)
    if conjugate_a and not transpose_a:
        a, trans = np.conj(a), "N"
    else:
        trans = "C" if conjugate_a else ("T" if transpose_a else "N")
    a = np.ascontiguousarray(a.reshape((-1, n, n)))
    x = np.array(b.reshape((-1, rows, cols)), order="C")
    # C-ordered matrices are their transposes in Fortran order, so the transposed problem
    # needs no copies: op(a) x = b is x^T op(a^T) = b^T, where a^T's triangle is the other
    # one. BLAS does no singularity check: a zero pivot gives infinities, as XLA's.
    args = [
        Arg.char("R" if left_side else "L"),
        Arg.char("U" if lower else "L"),
        Arg.char(trans),
        Arg.char("U" if unit_diagonal else "N"),
        Arg.int32(cols),
        Arg.int32(rows),
        Arg.shared(1, a.dtype),
        Arg.per_item(a),
        Arg.int32(max(n, 1)),
        Arg.per_item(x),
        Arg.int32(max(cols, 1)),
    ]
    with np.errstate(all="ignore"), lapack_on_calling_thread():
        batched_call(prefix(b.dtype) + "trsm", x.shape[0], args, work=n * n * cols)
    return x.reshape(b.shape)


def _trsv(a, b, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    """The triangular solve of one column (left side) or one row (right side) per matrix,
    with BLAS's matrix-vector solve."""
    n = a.shape[-1]
    if not left_side:
        # x op(a) = b is op(a)^T x^T = b^T, and a row is its transpose in memory.
        transpose_a = not transpose_a
    # The Fortran view of a's buffer is a^T (whose other triangle holds a's): op(a) = a is
    # that view transposed, a^T the view, conj(a) its conjugate transpose; a^H needs a's
    # conjugate, whose view is then op(a) itself.
    if transpose_a and conjugate_a:
        a, trans = np.conj(a), "N"
    elif transpose_a:
        trans = "N"
    else:
        trans = "C" if conjugate_a else "T"
    a = np.ascontiguousarray(a.reshape((-1, n, n)))
    x = np.array(b.reshape((-1, n)), order="C")
    args = [
        Arg.char("U" if lower else "L"),
        Arg.char(trans),
        Arg.char("U" if unit_diagonal else "N"),
        Arg.int32(n),
        Arg.per_item(a),
        Arg.int32(max(n, 1)),
        Arg.per_item(x),
        Arg.int32(1),
    ]
    with np.errstate(all="ignore"), lapack_on_calling_thread():
        batched_call(prefix(b.dtype) + "trsv", x.shape[0], args, work=n * n)
    return x.reshape(b.shape)


@triangular_solve_p.def_abstract_eval
def _triangular_solve_abstract_eval(
    a: ShapedArray, b: ShapedArray, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal
) -> ShapedArray:
    check_linalg_dtype("triangular_solve", a.dtype)
    if a.dtype != b.dtype:
        raise TypeError(
            "triangular_solve requires a and b of the same dtype, got "
            f"{a.dtype.name} and {b.dtype.name}"
        )
    check_matrix("triangular_solve", a, square=True)
    check_matrix("triangular_solve", b)
    common = b.shape[-2] if left_side else b.shape[-1]
    if a.shape[-1] != common or a.shape[:-2] != b.shape[:-2]:
        raise ValueError(
            f"Incompatible shapes for arguments to triangular_solve: {a.shape} and {b.shape}."
        )
    return ShapedArray(b.shape, b.dtype, b.weak_type)


def triangular_solve(
    a,
    b,
    *,
    left_side: bool = False,
    lower: bool = False,
    transpose_a: bool = False,
    conjugate_a: bool = False,
    unit_diagonal: bool = False,
):
    """Solve op(a) x = b (left_side) or x op(a) = b for x, where a is triangular (only the
    `lower` or upper triangle is read; with unit_diagonal not its diagonal either) and op
    transposes and/or conjugates it. A b of one rank less than a is a single vector."""
    conjugate_a = bool(conjugate_a) and np.dtype(a.dtype).kind == "c"
    single = len(b.shape) == len(a.shape) - 1
    if single:
        b = expand_dims(b, (len(b.shape) if left_side else len(b.shape) - 1,))
    out = triangular_solve_p.bind(
        a,
        b,
        left_side=bool(left_side),
        lower=bool(lower),
        transpose_a=bool(transpose_a),
        conjugate_a=conjugate_a,
        unit_diagonal=bool(unit_diagonal),
    )
    if single:
        shape = tuple(out.shape)
        out = reshape(out, shape[:-1] if left_side else shape[:-2] + shape[-1:])
    return out


def _triangular_solve_a_term(
    a_dot, out, a, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal
):
    """The tangent of x = op(a)^-1 b (or b op(a)^-1) due to a's tangent: -op(a)^-1 op(a') x
    (or -x op(a') op(a)^-1), with a' restricted to the triangle the solve reads."""
    if unit_diagonal:
        a_dot = tril(a_dot, -1) if lower else triu(a_dot, 1)
    else:
        a_dot = tril(a_dot) if lower else triu(a_dot)
    a_dot = neg(a_dot)
    if transpose_a:
        a_dot = swap_last(a_dot)
    if conjugate_a:
        a_dot = conj(a_dot)
    params = dict(
        left_side=left_side,
        lower=lower,
        transpose_a=transpose_a,
        conjugate_a=conjugate_a,
        unit_diagonal=unit_diagonal,
    )
    m, n = out.shape[-2:]
    # Solve against whichever of a' or x is the smaller matrix.
    if left_side:
        if m > n:
            return triangular_solve_p.bind(a, matmul(a_dot, out), **params)
        return matmul(triangular_solve_p.bind(a, a_dot, **params), out)
    if m < n:
        return triangular_solve_p.bind(a, matmul(out, a_dot), **params)
    return matmul(out, triangular_solve_p.bind(a, a_dot, **params))


@triangular_solve_p.def_jvp
def _triangular_solve_jvp_rule(primals, tangents, **params):
    (a, b), (a_dot, b_dot) = primals, tangents
    out = triangular_solve_p.bind(a, b, **params)
    out_dot = None if b_dot is None else triangular_solve_p.bind(a, b_dot, **params)
    if a_dot is not None:
        term = _triangular_solve_a_term(a_dot, out, a, **params)
        out_dot = term if out_dot is None else add_any(out_dot, term)
    return out, out_dot


# Linear in b (for a fixed a): the transpose solves with op(a) transposed.
@triangular_solve_p.def_transpose
def _triangular_solve_transpose_rule(ct, a, b, *, transpose_a, **params):
    if is_undefined_primal(a):
        raise TypeError("triangular_solve is not linear in its matrix operand a")
    return [None, triangular_solve_p.bind(a, ct, transpose_a=not transpose_a, **params)]


@triangular_solve_p.def_batching
def _triangular_solve_batching_rule(args, dims, *, left_side, **params):
    (a, b), (a_dim, b_dim) = args, dims
    if a_dim is None:
        # One matrix for the whole batch: the right-hand sides of every example become extra
        # columns (or rows) of one solve.
        nd = len(b.shape)
        axis = nd - 1 if left_side else nd - 2
        moved = move_bdim(b, b_dim, axis)
        shape = tuple(moved.shape)
        if left_side:
            flat = reshape(moved, shape[: nd - 3] + (shape[nd - 3], shape[nd - 2] * shape[nd - 1]))
        else:
            flat = reshape(moved, shape[: nd - 3] + (shape[nd - 3] * shape[nd - 2], shape[nd - 1]))
        out = triangular_solve_p.bind(a, flat, left_side=left_side, **params)
        return reshape(out, shape), axis
    size = a.shape[a_dim]
    a = bdim_at_front(a, a_dim, size)
    b = bdim_at_front(b, b_dim, size)
    return triangular_solve_p.bind(a, b, left_side=left_side, **params), 0


# --- lu --------------------------------------------------------------------------------------
lu_p = Primitive("lu", multiple_results=True)


def pivots_to_permutation(pivots: np.ndarray, size: int) -> np.ndarray:
    """The permutation that LAPACK's row swaps (row i with row pivots[i], in order) apply to
    0, 1, ..., size - 1, for every batch element."""
    batch = pivots.shape[:-1]
    swaps = pivots.reshape(int(np.prod(batch, dtype=np.int64)), pivots.shape[-1])
    permutation = np.tile(np.arange(size, dtype=np.int32), (swaps.shape[0], 1))
    rows = np.arange(swaps.shape[0])
    for i in range(swaps.shape[1]):
        j = swaps[:, i]
        held = permutation[rows, i].copy()
        permutation[rows, i] = permutation[rows, j]
        permutation[rows, j] = held
    return permutation.reshape(batch + (size,))


@lu_p.def_impl
def _lu_impl(x: np.ndarray):
    m, n = x.shape[-2:]
    k = min(m, n)
    batch = x.shape[:-2]
    if x.size == 0:
        pivots = np.zeros(batch + (k,), np.int32)
        return [np.array(x), pivots, pivots_to_permutation(pivots, m)]
    # getrf factors Fortran-ordered matrices: the C-ordered transposes.
    factors = np.array(
        np.swapaxes(x.reshape((-1, m, n)), -1, -2), order="C"
    )  # a copy: getrf overwrites it
    count = factors.shape[0]
    pivots = np.zeros((count, k), np.int32)
    info = np.zeros(count, np.int32)
    args = [
        Arg.int32(m),
        Arg.int32(n),
        Arg.per_item(factors),
        Arg.int32(max(m, 1)),
        Arg.per_item(pivots),
        Arg.per_item(info),
    ]
    with lapack_on_calling_thread():  # info > 0 (an exactly singular U) is not an error
        batched_call(prefix(x.dtype) + "getrf", count, args, work=m * n * k)
    factors = np.ascontiguousarray(np.swapaxes(factors, -1, -2)).reshape(x.shape)
    pivots = (pivots - 1).reshape(batch + (k,))
    return [factors, pivots, pivots_to_permutation(pivots, m)]


@lu_p.def_abstract_eval
def _lu_abstract_eval(x: ShapedArray):
    check_linalg_dtype("lu", x.dtype)
    check_matrix("lu", x)
    m, n = x.shape[-2:]
    batch = x.shape[:-2]
    return [
        ShapedArray(x.shape, x.dtype, x.weak_type),
        ShapedArray(batch + (min(m, n),), dtypes.int32, False),
        ShapedArray(batch + (m,), dtypes.int32, False),
    ]


def lu(x):
    """LU decomposition with partial pivoting, P x = L U: returns (lu, pivots, permutation),
    L below the diagonal of lu (unit diagonal implied) and U on and above it; pivots are
    LAPACK's 0-based row swaps and permutation the rows of x in the order of P x."""
    factors, pivots, permutation = lu_p.bind(x)
    return factors, pivots, permutation


def unpack_lu(factors):
    """L (m x m, unit diagonal) and U (n x n, identity below the k x n factor) from a packed
    m x n LU factorization, k = min(m, n)."""
    shape = tuple(factors.shape)
    batch, (m, n) = shape[:-2], shape[-2:]
    k = min(m, n)
    lower = tril(slice_last_two(factors, (0, m), (0, k)), -1)
    if m > k:
        lower = concatenate([lower, zeros_of(batch + (m, m - k), factors.dtype)], len(shape) - 1)
    lower = add(lower, eye(batch + (m, m), factors.dtype))
    upper = triu(slice_last_two(factors, (0, k), (0, n)))
    if n > k:
        upper = concatenate([upper, zeros_of(batch + (n - k, n), factors.dtype)], len(shape) - 2)
        # The identity on the rows below the factor, so that U stays invertible.
        square = batch + (n, n)
        rows = broadcasted_iota(np.int32, square, len(shape) - 2)
        below = ge(rows, broadcast_in_dim(scalar_to_array(k, np.int32, False), square, ()))
        trailing = select(below, eye(square, factors.dtype), zeros_of(square, factors.dtype))
        upper = add(upper, trailing)
    return lower, upper


# De Hoog, Anderssen and Lukas: with P A = L U, L^-1 P A' U^-1 = L^-1 L' + U' U^-1, whose
# strictly lower part gives L' = L tril(., -1) and upper part U' = triu(.) U.
@lu_p.def_jvp
def _lu_jvp_rule(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    factors, pivots, permutation = lu_p.bind(x)
    lower, upper = unpack_lu(factors)
    permuted = permute_rows(x_dot, permutation)
    left = triangular_solve_p.bind(
        lower,
        permuted,
        left_side=True,
        lower=True,
        transpose_a=False,
        conjugate_a=False,
        unit_diagonal=True,
    )
    middle = triangular_solve_p.bind(
        upper,
        left,
        left_side=False,
        lower=False,
        transpose_a=False,
        conjugate_a=False,
        unit_diagonal=False,
    )
    factors_dot = add(matmul(lower, tril(middle, -1)), matmul(triu(middle), upper))
    return [factors, pivots, permutation], [factors_dot, None, None]


batched_over_front(lu_p)


# --- lu_pivots_to_permutation ----------------------------------------------------------------
lu_pivots_to_permutation_p = Primitive("lu_pivots_to_permutation")


@lu_pivots_to_permutation_p.def_impl
def _lu_pivots_to_permutation_impl(pivots: np.ndarray, *, permutation_size) -> np.ndarray:
    return pivots_to_permutation(pivots.astype(np.int64), permutation_size)


@lu_pivots_to_permutation_p.def_abstract_eval
def _lu_pivots_to_permutation_abstract_eval(pivots: ShapedArray, *, permutation_size):
    if pivots.dtype != dtypes.int32:
        raise TypeError(f"lu_pivots_to_permutation takes int32 pivots, got {pivots.dtype.name}")
    if pivots.ndim < 1:
        raise ValueError("lu_pivots_to_permutation takes pivots of rank >= 1")
    if permutation_size < pivots.shape[-1]:
        raise ValueError(
            f"Output permutation size {permutation_size} has to exceed the trailing dimension "
            f"of the pivots. Got pivots size {pivots.shape[-1]}"
        )
    return ShapedArray(pivots.shape[:-1] + (permutation_size,), dtypes.int32, False)


def lu_pivots_to_permutation(pivots, permutation_size: int):
    """The permutation (int32, shape (..., permutation_size)) that the row swaps `pivots`
    (as returned by lu) apply to the identity ordering."""
    return lu_pivots_to_permutation_p.bind(
        pivots, permutation_size=operator.index(permutation_size)
    )


defjvp_zero(lu_pivots_to_permutation_p)
batched_over_front(lu_pivots_to_permutation_p)


# --- solving with an LU factorization --------------------------------------------------------


def lu_solve(factors, permutation, b, trans: int = 0):
    """Solve A x = b (trans 0), A^T x = b (1) or A^H x = b (2) for matrices b (..., n, k),
    given lu(A) = (factors, _, permutation) with the same leading dimensions as b."""
    params = dict(left_side=True, transpose_a=False, conjugate_a=False)
    if trans == 0:
        x = permute_rows(b, permutation)
        x = triangular_solve_p.bind(factors, x, lower=True, unit_diagonal=True, **params)
        return triangular_solve_p.bind(factors, x, lower=False, unit_diagonal=False, **params)
    if trans not in (1, 2):
        raise ValueError(f"'trans' value must be 0, 1, or 2, got {trans}")
    conjugate = trans == 2 and is_complex(factors)
    params.update(transpose_a=True, conjugate_a=conjugate)
    x = triangular_solve_p.bind(factors, b, lower=False, unit_diagonal=False, **params)
    x = triangular_solve_p.bind(factors, x, lower=True, unit_diagonal=True, **params)
    positions = broadcasted_iota(np.int32, tuple(permutation.shape), len(permutation.shape) - 1)
    _, inverse = sort_key_val(permutation, positions, dimension=len(permutation.shape) - 1)
    return permute_rows(x, inverse)


# --- tridiagonal_solve -----------------------------------------------------------------------
tridiagonal_solve_p = Primitive("tridiagonal_solve")


@tridiagonal_solve_p.def_impl
def _tridiagonal_solve_impl(dl, d, du, b, *, perturb_singular):
    if b.size == 0:
        return np.zeros(b.shape, b.dtype)
    m, k = b.shape[-2:]
    # gtsv overwrites all four operands; b goes in column-major (the C-ordered transpose).
    sub_diagonal = np.array(dl.reshape((-1, m))[:, 1:], order="C")
    diagonal = np.array(d.reshape((-1, m)), order="C")
    super_diagonal = np.array(du.reshape((-1, m))[:, :-1], order="C")
    x = np.array(
        np.swapaxes(b.reshape((-1, m, k)), -1, -2), order="C"
    )  # a copy: gtsv overwrites it
    count = x.shape[0]
    info = np.zeros(count, np.int32)
    if m == 1:  # no off-diagonals: give the routine a valid (unread) place for them
        sub_diagonal = super_diagonal = np.zeros((1, 1), b.dtype)
    args = [
        Arg.int32(m),
        Arg.int32(k),
        Arg.per_item(sub_diagonal),
        Arg.per_item(diagonal),
        Arg.per_item(super_diagonal),
        Arg.per_item(x),
        Arg.int32(m),
        Arg.per_item(info),
    ]
    with lapack_on_calling_thread(), np.errstate(all="ignore"):
        batched_call(prefix(b.dtype) + "gtsv", count, args, work=8 * m * k)
    x[info != 0] = np.nan  # an exactly singular system
    return np.ascontiguousarray(np.swapaxes(x, -1, -2)).reshape(b.shape)


@tridiagonal_solve_p.def_abstract_eval
def _tridiagonal_solve_abstract_eval(dl, d, du, b, *, perturb_singular):
    for name, aval in (("dl", dl), ("d", d), ("du", du), ("b", b)):
        check_linalg_dtype(f"tridiagonal_solve {name}", aval.dtype)
    if not dl.dtype == d.dtype == du.dtype == b.dtype:
        raise TypeError("tridiagonal_solve requires all arguments to have the same dtype")
    if dl.shape != d.shape or dl.shape != du.shape:
        raise TypeError(
            "tridiagonal_solve requires that all diagonal arguments have the same shape."
        )
    if b.ndim < 2 or dl.shape != b.shape[:-1]:
        raise TypeError(
            "tridiagonal_solve requires that the leading ndim-1 dimensions of b equal the "
            "dimensions of the diagonal arguments."
        )
    return ShapedArray(b.shape, b.dtype, b.weak_type)


def tridiagonal_solve(dl, d, du, b, *, perturb_singular: bool = False):
    """Solve A x = b for tridiagonal A given by its diagonals (..., m): dl[i] = A[i, i-1]
    (dl[0] ignored), d[i] = A[i, i], du[i] = A[i, i+1] (du[m-1] ignored); b is (..., m, n).
    An exactly singular system gives NaNs."""
    if perturb_singular:
        raise NotImplementedError("tridiagonal_solve(perturb_singular=True) is not supported")
    return tridiagonal_solve_p.bind(dl, d, du, b, perturb_singular=False)


def _shift_rows(x, down: bool):
    """x with its rows moved one place down (or up), a zero row coming in."""
    nd = len(x.shape)
    m = x.shape[-2]
    zero_row = zeros_of(tuple(x.shape[:-2]) + (1, x.shape[-1]), x.dtype)
    if down:
        return concatenate([zero_row, slice_last_two(x, (0, m - 1), (0, x.shape[-1]))], nd - 2)
    return concatenate([slice_last_two(x, (1, m), (0, x.shape[-1])), zero_row], nd - 2)


def _tridiagonal_product(dl, d, du, x):
    """A x for the tridiagonal A of (dl, d, du) (dl[0] and du[m-1] not read)."""
    from kiln.primitives.elementwise import mul

    nd = len(x.shape)

    def column(v):
        return broadcast_in_dim(v, tuple(x.shape), tuple(range(nd - 1)))

    out = mul(column(d), x)
    if x.shape[-2] > 1:
        out = add(out, mul(column(dl), _shift_rows(x, down=True)))
        out = add(out, mul(column(du), _shift_rows(x, down=False)))
    return out


@tridiagonal_solve_p.def_jvp
def _tridiagonal_solve_jvp_rule(primals, tangents, *, perturb_singular):
    from kiln.primitives.base import instantiate

    *diagonals, b = primals
    *diagonal_dots, b_dot = tangents
    out = tridiagonal_solve_p.bind(*primals, perturb_singular=perturb_singular)
    rhs = b_dot
    if any(t is not None for t in diagonal_dots):
        dots = [instantiate(t, p) for t, p in zip(diagonal_dots, diagonals)]
        change = neg(_tridiagonal_product(*dots, out))
        rhs = change if rhs is None else add_any(rhs, change)
    return out, tridiagonal_solve_p.bind(*diagonals, rhs, perturb_singular=perturb_singular)


# Linear in b: the transpose solves with the transposed matrix, whose lower diagonal is the
# upper one shifted down and whose upper diagonal is the lower one shifted up.
@tridiagonal_solve_p.def_transpose
def _tridiagonal_solve_transpose_rule(ct, dl, d, du, b, *, perturb_singular):
    if any(is_undefined_primal(v) for v in (dl, d, du)):
        raise TypeError("tridiagonal_solve is not linear in its diagonals")
    m = d.shape[-1]
    nd = len(d.shape)
    batch = tuple(d.shape[:-1])
    zero = zeros_of(batch + (1,), d.dtype)
    start, stop = (0,) * nd, batch + (m - 1,)
    transposed_dl = concatenate([zero, slice_(du, start, stop)], nd - 1)
    transposed_du = concatenate([slice_(dl, (0,) * (nd - 1) + (1,), batch + (m,)), zero], nd - 1)
    out = tridiagonal_solve_p.bind(
        transposed_dl, d, transposed_du, ct, perturb_singular=perturb_singular
    )
    return [None, None, None, out]


@tridiagonal_solve_p.def_batching
def _tridiagonal_solve_batching_rule(args, dims, *, perturb_singular):
    size = next(x.shape[dim] for x, dim in zip(args, dims) if dim is not None)
    *diagonals, b = [bdim_at_front(x, dim, size) for x, dim in zip(args, dims)]
    return tridiagonal_solve_p.bind(*diagonals, b, perturb_singular=perturb_singular), 0

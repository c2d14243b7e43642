"""kiln.numpy.linalg: factorizations, solves, determinants and norms, built on kiln.lax.linalg
as jax.numpy.linalg builds them on jax.lax.linalg (batched over leading dimensions)."""

from __future__ import annotations

import operator
from typing import NamedTuple, Sequence

import numpy as np

from kiln import lax
from kiln import lax_linalg
from kiln.custom_derivatives import custom_jvp
from kiln.numpy.util import check_arraylike, promote_dtypes_inexact
from kiln.primitives.linalg_decomp import lu_solve

__all__ = [
    "cholesky",
    "cond",
    "cross",
    "det",
    "diagonal",
    "eig",
    "eigh",
    "eigvals",
    "eigvalsh",
    "inv",
    "lstsq",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "multi_dot",
    "norm",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "tensorinv",
    "tensorsolve",
    "trace",
    "vecdot",
    "vector_norm",
    "EighResult",
    "EigResult",
    "QRResult",
    "SlogdetResult",
    "SVDResult",
]


class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class EigResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class QRResult(NamedTuple):
    Q: object
    R: object


class SlogdetResult(NamedTuple):
    sign: object
    logabsdet: object


class SVDResult(NamedTuple):
    U: object
    S: object
    Vh: object


def _inexact(name: str, *args):
    check_arraylike(name, *args)
    return promote_dtypes_inexact(*args)


def _check_square(name: str, a) -> None:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Argument to {name}() must have shape [..., n, n], got {a.shape}")


def _adjoint(x):
    import kiln.numpy as jnp

    return jnp.conj(jnp.swapaxes(x, -1, -2)) if jnp.iscomplexobj(x) else jnp.swapaxes(x, -1, -2)


# --- factorizations --------------------------------------------------------------------------


def cholesky(a, *, upper: bool = False, symmetrize_input: bool = True):
    """The Cholesky factor of Hermitian positive-definite matrices: lower L with a = L L^H, or
    upper U = L^H with a = U^H U. Matrices that are not positive definite give NaNs."""
    (a,) = _inexact("jnp.linalg.cholesky", a)
    factor = lax_linalg.cholesky(a, symmetrize_input=symmetrize_input)
    return _adjoint(factor) if upper else factor


def qr(a, mode: str = "reduced"):
    """QR decomposition: QRResult(Q, R) for mode 'reduced' or 'complete', R alone for 'r'."""
    (a,) = _inexact("jnp.linalg.qr", a)
    if a.ndim < 2:
        raise ValueError("Argument to QR decomposition must have ndims >= 2")
    if mode not in ("reduced", "complete", "r"):
        if mode == "raw":
            raise NotImplementedError("qr mode='raw' is not supported by kiln")
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    q, r = lax_linalg.qr(a, full_matrices=mode == "complete")
    return r if mode == "r" else QRResult(q, r)


def svd(
    a,
    full_matrices: bool = True,
    compute_uv: bool = True,
    hermitian: bool = False,
    subset_by_index: tuple[int, int] | None = None,
):
    """Singular value decomposition: SVDResult(U, S, Vh) with a = U diag(S) Vh and S
    descending, or S alone without compute_uv. hermitian uses the eigendecomposition."""
    import kiln.numpy as jnp

    (a,) = _inexact("jnp.linalg.svd", a)
    if hermitian:
        v, w = lax_linalg.eigh(a, subset_by_index=subset_by_index)
        s = jnp.abs(w)
        if not compute_uv:
            return lax.rev(lax.sort(s, dimension=-1), (s.ndim - 1,))
        sign = jnp.sign(w)
        positions = lax.broadcasted_iota(np.int32, s.shape, s.ndim - 1)
        s, positions, sign = lax.sort((s, positions, sign), dimension=-1, num_keys=1)
        s, positions, sign = (lax.rev(t, (s.ndim - 1,)) for t in (s, positions, sign))
        u = jnp.take_along_axis(v, positions[..., None, :], axis=-1)
        return SVDResult(u, s, _adjoint(u * sign[..., None, :].astype(u.dtype)))
    if compute_uv:
        u, s, vh = lax_linalg.svd(
            a, full_matrices=full_matrices, compute_uv=True, subset_by_index=subset_by_index
        )
        return SVDResult(u, s, vh)
    return lax_linalg.svd(
        a, full_matrices=full_matrices, compute_uv=False, subset_by_index=subset_by_index
    )


def svdvals(x, /):
    """The singular values of each matrix, descending."""
    return svd(x, compute_uv=False)


def eigh(a, UPLO: str | None = None, symmetrize_input: bool = True):  # noqa: N803 (NumPy's name)
    """Eigenvalues (ascending) and unit eigenvectors of Hermitian matrices: EighResult."""
    (a,) = _inexact("jnp.linalg.eigh", a)
    UPLO = "L" if UPLO is None else UPLO  # noqa: N806
    if UPLO not in ("L", "U"):
        raise ValueError(f"UPLO must be one of None, 'L', or 'U', got {UPLO}")
    v, w = lax_linalg.eigh(a, lower=UPLO == "L", symmetrize_input=symmetrize_input)
    return EighResult(w, v)


def eigvalsh(a, UPLO: str | None = "L", *, symmetrize_input: bool = True):  # noqa: N803
    """The eigenvalues of Hermitian matrices, ascending."""
    return eigh(a, UPLO, symmetrize_input).eigenvalues


def eig(a):
    """Eigenvalues and right eigenvectors of general square matrices (complex): EigResult.
    Differentiating the eigenvectors needs kiln.lax.linalg.eig(enable_eigvec_derivs=True)."""
    (a,) = _inexact("jnp.linalg.eig", a)
    _check_square("eig", a)
    w, v = lax_linalg.eig(a, compute_left_eigenvectors=False)
    return EigResult(w, v)


def eigvals(a):
    """The (complex) eigenvalues of general square matrices (differentiable: nondegenerate
    perturbation theory)."""
    (a,) = _inexact("jnp.linalg.eigvals", a)
    _check_square("eigvals", a)
    return lax_linalg.eig(a, compute_left_eigenvectors=False, compute_right_eigenvectors=False)[0]


# --- solves and inverses ---------------------------------------------------------------------


def _lu_solve_broadcast(a, b):
    """Solve a x = b for matrices b (..., n, k), broadcasting the leading dimensions."""
    import kiln.numpy as jnp

    factors, _, permutation = lax_linalg.lu(a)
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    n = a.shape[-1]
    factors = jnp.broadcast_to(factors, batch + (n, n))
    permutation = jnp.broadcast_to(permutation, batch + (n,))
    b = jnp.broadcast_to(b, batch + b.shape[-2:])
    return lu_solve(factors, permutation, b)


def solve(a, b):
    """Solve a x = b: b of shape (n,) is one vector, otherwise (..., n, k) matrices whose
    leading dimensions broadcast against a's. Singular matrices give infs or NaNs."""
    a, b = _inexact("jnp.linalg.solve", a, b)
    if a.ndim < 2:
        raise ValueError(f"left hand array must be at least two dimensional; got a.shape={a.shape}")
    _check_square("solve", a)
    if b.ndim > 1 and a.ndim == b.ndim + 1 and a.shape[-1] == b.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"Invalid shapes for solve: {a.shape}, {b.shape}. A batch of vectors is a batch of "
            "(n, 1) matrices: use solve(a, b[..., None])[..., 0]."
        )
    vector = b.ndim == 1
    if vector:
        b = b[:, None]
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ValueError(f"Incompatible shapes for solve: a {a.shape} and b {b.shape}")
    x = _lu_solve_broadcast(a, b)
    return x[..., 0] if vector else x


def inv(a):
    """The inverse of each square matrix (infs or NaNs for singular ones)."""
    import kiln.numpy as jnp

    (a,) = _inexact("jnp.linalg.inv", a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Argument to inv must have shape [..., n, n], got {a.shape}.")
    identity = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return _lu_solve_broadcast(a, identity)


def _lu_parity(pivots):
    """The number of row swaps of each LU factorization."""
    import kiln.numpy as jnp

    positions = jnp.arange(pivots.shape[-1], dtype=pivots.dtype)
    return jnp.count_nonzero(pivots != positions, axis=-1)


def _det_2x2(a):
    return a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]


def _det_3x3(a):
    return (
        a[..., 0, 0] * a[..., 1, 1] * a[..., 2, 2]
        + a[..., 0, 1] * a[..., 1, 2] * a[..., 2, 0]
        + a[..., 0, 2] * a[..., 1, 0] * a[..., 2, 1]
        - a[..., 0, 2] * a[..., 1, 1] * a[..., 2, 0]
        - a[..., 0, 0] * a[..., 1, 2] * a[..., 2, 1]
        - a[..., 0, 1] * a[..., 1, 0] * a[..., 2, 2]
    )


def _det_lu(a):
    import kiln.numpy as jnp

    factors, pivots, _ = lax_linalg.lu(a)
    diag = jnp.diagonal(factors, axis1=-2, axis2=-1)
    sign = (1 - 2 * (_lu_parity(pivots) % 2)).astype(a.dtype)
    return sign * jnp.prod(diag, axis=-1)


def _cofactor_solve(a, b):
    """det(a) and adj(a) b for matrices b like a, finite where a is singular: with P a = L U,
    adj(a) b = det(a) U^-1 L^-1 P b, whose last row needs only the product of U's other
    diagonal entries, so U's last entry is replaced by that product's inverse; a matrix of
    rank below n - 1 has adj(a) = 0 (JAX's derivative of det)."""
    import kiln.numpy as jnp

    n = a.shape[-1]
    if n == 1:
        return a[..., 0, 0], b
    factors, pivots, permutation = lax_linalg.lu(a)
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    x = jnp.broadcast_to(b, batch + b.shape[-2:])
    factors = jnp.broadcast_to(factors, batch + (n, n))
    permutation = jnp.broadcast_to(permutation, batch + (n,))
    diag = jnp.diagonal(factors, axis1=-2, axis2=-1)
    sign = (1 - 2 * (_lu_parity(pivots) % 2)).astype(a.dtype)
    partial_det = jnp.cumprod(diag, axis=-1) * sign[..., None]
    factors = factors.at[..., -1, -1].set(1 / partial_det[..., -2])
    probe = lax_linalg.triangular_solve(
        factors, jnp.ones(batch + (n,), a.dtype), left_side=True, lower=False
    )
    low_rank = jnp.any(jnp.isnan(probe) | jnp.isinf(probe), axis=-1)[..., None, None]
    x = jnp.where(low_rank, jnp.zeros_like(x), x)
    x = jnp.take_along_axis(x, permutation[..., None], axis=-2)
    x = lax_linalg.triangular_solve(factors, x, left_side=True, lower=True, unit_diagonal=True)
    x = jnp.concatenate([x[..., :-1, :] * partial_det[..., -1, None, None], x[..., -1:, :]], -2)
    x = lax_linalg.triangular_solve(factors, x, left_side=True, lower=False)
    return partial_det[..., -1], jnp.where(low_rank, jnp.zeros_like(x), x)


def _det_jvp(primals, tangents):
    import kiln.numpy as jnp

    (a,), (a_dot,) = primals, tangents
    value, adjugate_product = _cofactor_solve(a, a_dot)
    return value, jnp.trace(adjugate_product, axis1=-2, axis2=-1)


_det_general = custom_jvp(_det_lu)
_det_general.defjvp(_det_jvp)


def det(a):
    """The determinant of each square matrix (closed forms for 2x2 and 3x3, LU otherwise;
    its derivative, adj(a), stays finite for singular matrices)."""
    (a,) = _inexact("jnp.linalg.det", a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Argument to _det() must have shape [..., n, n], got {a.shape}")
    n = a.shape[-1]
    if n == 2:
        return _det_2x2(a)
    if n == 3:
        return _det_3x3(a)
    return _det_general(a)


def slogdet(a, *, method: str | None = None):
    """The sign (or phase) and the log of the absolute value of each determinant, from an LU
    factorization: SlogdetResult(sign, logabsdet); a singular matrix gives (0, -inf)."""
    import kiln.numpy as jnp

    (a,) = _inexact("jnp.linalg.slogdet", a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Argument to slogdet() must have shape [..., n, n], got {a.shape}")
    if method not in (None, "lu"):
        if method == "qr":
            raise NotImplementedError("slogdet method='qr' is not supported by kiln")
        raise ValueError(
            f"Unknown slogdet method '{method}'. Supported methods are 'lu' (`None`), and 'qr'."
        )
    factors, pivots, _ = lax_linalg.lu(a)
    diag = jnp.diagonal(factors, axis1=-2, axis2=-1)
    is_zero = jnp.any(diag == 0, axis=-1)
    parity = _lu_parity(pivots)
    if jnp.iscomplexobj(a):
        sign = jnp.prod(diag / jnp.abs(diag).astype(diag.dtype), axis=-1)
    else:
        sign = jnp.ones((), a.dtype)
        parity = parity + jnp.count_nonzero(diag < 0, axis=-1)
    sign = jnp.where(is_zero, jnp.zeros((), a.dtype), sign * (1 - 2 * (parity % 2)).astype(a.dtype))
    logdet = jnp.sum(jnp.log(jnp.abs(diag)), axis=-1)
    logdet = jnp.where(is_zero, jnp.array(-np.inf, logdet.dtype), logdet)
    return SlogdetResult(sign, logdet)


def lstsq(a, b, rcond: float | None = None, *, numpy_resid: bool = False):
    """The least-squares solution x of a x = b for a 2-D a, via the SVD: returns (x, resid,
    rank, s). resid is the squared residual norm of each column (NumPy's empty residuals with
    numpy_resid when a is rank-deficient or not tall)."""
    import kiln.numpy as jnp

    a, b = _inexact("jnp.linalg.lstsq", a, b)
    if a.shape[0] != b.shape[0]:
        raise ValueError("Leading dimensions of input arrays must match")
    vector = b.ndim == 1
    if vector:
        b = b[:, None]
    if a.ndim != 2:
        raise TypeError(f"{a.ndim}-dimensional array given. Array must be two-dimensional")
    if b.ndim != 2:
        raise TypeError(f"{b.ndim}-dimensional array given. Array must be one or two-dimensional")
    m, n = a.shape
    if a.size == 0:
        s = jnp.zeros((0,), a.dtype)
        rank = jnp.array(0, jnp.int32)
        x = jnp.zeros((n,) + b.shape[1:], a.dtype)
    else:
        eps = float(jnp.finfo(a.dtype).eps)
        if rcond is None:
            rcond = eps * max(n, m)
        else:
            rcond = jnp.where(jnp.asarray(rcond) < 0, eps, rcond)
        u, s, vt = svd(a, full_matrices=False)
        mask = (s > 0) & (s >= jnp.asarray(rcond, s.dtype) * s[0])
        rank = jnp.sum(mask).astype(jnp.int32)
        safe_s = jnp.where(mask, s, 1).astype(a.dtype)
        s_inv = jnp.where(mask, 1 / safe_s, 0)[:, None]
        x = _adjoint(vt) @ (s_inv * (_adjoint(u) @ b))
    if numpy_resid and (int(rank) < n or m <= n):
        resid = jnp.zeros((0,), s.dtype)
    else:
        residual = jnp.abs(b - a @ x)
        resid = jnp.sum(residual * residual, axis=0)
    if vector:
        x = x[:, 0]
    return x, resid, rank, s


def _pinv_impl(a, rtol, hermitian: bool):
    import kiln.numpy as jnp

    m, n = a.shape[-2:]
    if m == 0 or n == 0:
        return jnp.zeros(a.shape[:-2] + (n, m), a.dtype)
    conjugated = jnp.conj(a) if jnp.iscomplexobj(a) else a
    if rtol is None:
        rtol = 10.0 * max(m, n) * float(jnp.finfo(a.dtype).eps)
    rtol = jnp.asarray(rtol, dtype=jnp.real(jnp.zeros((), a.dtype)).dtype)
    u, s, vh = svd(conjugated, full_matrices=False, hermitian=hermitian)
    rtol = jnp.expand_dims(rtol[..., None], tuple(range(s.ndim - rtol.ndim - 1)))
    cutoff = rtol * s[..., 0:1]
    s = jnp.where(s > cutoff, s, np.inf).astype(u.dtype)
    return jnp.matmul(jnp.swapaxes(vh, -1, -2), jnp.swapaxes(u, -1, -2) / s[..., None])


def _pinv_jvp(rtol, hermitian, primals, tangents):
    # Golub and Pereyra (1973): the derivative of the pseudo-inverse, which holds where the
    # rank does not change.
    (a,), (a_dot,) = primals, tangents
    p = _pinv(a, rtol, hermitian)
    if hermitian:
        a, a_dot = (a + _adjoint(a)) / 2, (a_dot + _adjoint(a_dot)) / 2
    m, n = a.shape[-2:]
    if m >= n:
        s = (p @ _adjoint(p)) @ _adjoint(a_dot)
        t = (_adjoint(a_dot) @ _adjoint(p)) @ p
        p_dot = -(p @ a_dot) @ p + s - (s @ a) @ p + t - (p @ a) @ t
    else:
        s = p @ (_adjoint(p) @ _adjoint(a_dot))
        t = _adjoint(a_dot) @ (_adjoint(p) @ p)
        p_dot = -p @ (a_dot @ p) + s - s @ (a @ p) + t - p @ (a @ t)
    return p, p_dot


_pinv = custom_jvp(_pinv_impl, nondiff_argnums=(1, 2))
_pinv.defjvp(_pinv_jvp)


def pinv(a, rtol=None, hermitian: bool = False, *, rcond=None):
    """The Moore-Penrose pseudo-inverse of each matrix, via the SVD; singular values at most
    rtol times the largest count as zero (default 10 * max(m, n) * eps, as JAX's)."""
    if rcond is not None:
        if rtol is not None:
            raise ValueError("pinv: only one of rtol and rcond may be specified.")
        rtol = rcond
    (a,) = _inexact("jnp.linalg.pinv", a)
    return _pinv(a, rtol, bool(hermitian))


def matrix_rank(M, rtol=None, *, hermitian: bool = False, tol=None):  # noqa: N803
    """The number of singular values above rtol times the largest (default
    max(m, n) * eps)."""
    import kiln.numpy as jnp

    (M,) = _inexact("jnp.linalg.matrix_rank", M)  # noqa: N806
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
        rtol = tol
    if M.ndim < 2:
        return jnp.any(M != 0).astype(jnp.int32)
    s = svd(M, full_matrices=False, compute_uv=False, hermitian=hermitian)
    if rtol is None:
        rtol = jnp.max(s, axis=-1) * (max(M.shape[-2:]) * float(jnp.finfo(s.dtype).eps))
    rtol = jnp.expand_dims(jnp.asarray(rtol), -1)
    return jnp.sum(s > rtol, axis=-1).astype(jnp.int32)


def matrix_power(a, n: int):
    """a raised to the integer power n by repeated squaring (inverse first for n < 0)."""
    import kiln.numpy as jnp

    check_arraylike("jnp.linalg.matrix_power", a)
    a = jnp.asarray(a)
    if a.ndim < 2:
        raise TypeError(f"{a.ndim}-dimensional array given. Array must be at least two-dimensional")
    if a.shape[-2] != a.shape[-1]:
        raise TypeError("Last 2 dimensions of the array must be square")
    try:
        n = operator.index(n)
    except TypeError as err:
        raise TypeError(f"exponent must be an integer, got {n}") from err
    if n == 0:
        return jnp.broadcast_to(jnp.eye(a.shape[-2], dtype=a.dtype), a.shape)
    if n < 0:
        a, n = inv(a), -n
    result, power = None, None
    while n > 0:
        power = a if power is None else power @ power
        n, bit = divmod(n, 2)
        if bit:
            result = power if result is None else result @ power
    return result


def cond(x, p=None):
    """The condition number of each matrix in the norm `p` (None or 2: the ratio of the
    extreme singular values); inf for a singular matrix."""
    import kiln.numpy as jnp

    (x,) = _inexact("jnp.linalg.cond", x)
    if x.ndim < 2:
        raise ValueError(f"jnp.linalg.cond: input array must be at least 2D, got {x.shape}")
    if p is None or p == 2:
        s = svd(x, compute_uv=False)
        r = s[..., 0] / s[..., -1]
    elif p == -2:
        s = svd(x, compute_uv=False)
        r = s[..., -1] / s[..., 0]
    else:
        _check_square("cond", x)
        r = norm(x, ord=p, axis=(-2, -1)) * norm(inv(x), ord=p, axis=(-2, -1))
    # A singular matrix has an infinite condition number, unless its entries are NaN.
    return jnp.where(jnp.isnan(r) & ~jnp.any(jnp.isnan(x), axis=(-2, -1)), np.inf, r)


def multi_dot(arrays: Sequence, *, precision=None):
    """The product of a chain of matrices, multiplied in the cheapest order; the first and
    last may be vectors."""
    import kiln.numpy as jnp

    arrays = list(arrays)
    check_arraylike("jnp.linalg.multi_dot", *arrays)
    if len(arrays) < 2:
        raise ValueError(f"multi_dot requires at least two arrays, got {len(arrays)}")
    arrays = [jnp.asarray(x) for x in arrays]
    first_vector, last_vector = arrays[0].ndim == 1, arrays[-1].ndim == 1
    if first_vector:
        arrays[0] = arrays[0][None, :]
    if last_vector:
        arrays[-1] = arrays[-1][:, None]
    for x in arrays:
        if x.ndim != 2:
            raise ValueError("multi_dot: all arrays but the first and last must be 2-D")
    order = _chain_order([x.shape[0] for x in arrays] + [arrays[-1].shape[1]])
    out = _chain_product(arrays, order, 0, len(arrays) - 1)
    if first_vector:
        out = out[0]
    if last_vector:
        out = out[..., 0]
    return out


def _chain_order(dims: list[int]):
    """The split points of the cheapest parenthesization of a matrix chain (dynamic
    programming over subchains)."""
    count = len(dims) - 1
    cost = [[0] * count for _ in range(count)]
    split = [[0] * count for _ in range(count)]
    for length in range(1, count):
        for i in range(count - length):
            j = i + length
            cost[i][j] = None
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if cost[i][j] is None or c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def _chain_product(arrays, split, i: int, j: int):
    if i == j:
        return arrays[i]
    k = split[i][j]
    return _chain_product(arrays, split, i, k) @ _chain_product(arrays, split, k + 1, j)


def tensorinv(a, ind: int = 2):
    """The inverse of a tensor seen as a matrix of its first `ind` axes by the rest."""
    import kiln.numpy as jnp

    (a,) = _inexact("jnp.linalg.tensorinv", a)
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError(f"ind must be a positive integer; got {ind=}")
    rows, cols = a.shape[:ind], a.shape[ind:]
    flat_rows, flat_cols = int(np.prod(rows)), int(np.prod(cols))
    if flat_rows != flat_cols:
        raise ValueError(
            f"tensorinv: product of first {ind} dimensions {flat_rows} must equal the product "
            f"of the rest {flat_cols}; got shape {a.shape}."
        )
    return jnp.reshape(inv(jnp.reshape(a, (flat_rows, flat_cols))), cols + rows)


def tensorsolve(a, b, axes: tuple[int, ...] | None = None):
    """The tensor x with tensordot(a, x, x.ndim) == b."""
    import kiln.numpy as jnp

    a, b = _inexact("jnp.linalg.tensorsolve", a, b)
    if axes is not None:
        axes = [operator.index(ax) % a.ndim for ax in axes]
        a = jnp.moveaxis(a, axes, [a.ndim - len(axes) + i for i in range(len(axes))])
    out_shape = a.shape[b.ndim :]
    rows = int(np.prod(b.shape))
    cols = int(np.prod(out_shape))
    if rows != cols:
        raise ValueError(
            f"tensorsolve: the first {b.ndim} dimensions of a (size {rows}) must match the "
            f"size of the solution (size {cols}); got a.shape={a.shape}, b.shape={b.shape}"
        )
    x = solve(jnp.reshape(a, (rows, cols)), jnp.reshape(b, (rows,)))
    return jnp.reshape(x, out_shape)


# --- products and views (the Array API's linalg namespace) -----------------------------------


def matrix_transpose(x, /):
    import kiln.numpy as jnp

    return jnp.matrix_transpose(x)


def diagonal(x, /, *, offset: int = 0):
    import kiln.numpy as jnp

    return jnp.diagonal(x, offset=offset, axis1=-2, axis2=-1)


def trace(x, /, *, offset: int = 0, dtype=None):
    import kiln.numpy as jnp

    return jnp.trace(x, offset=offset, axis1=-2, axis2=-1, dtype=dtype)


def outer(x1, x2, /):
    import kiln.numpy as jnp

    if np.ndim(x1) != 1 or np.ndim(x2) != 1:
        raise ValueError(
            f"Input arrays must be one-dimensional, but they are {x1.ndim=} {x2.ndim=}"
        )
    return jnp.outer(x1, x2)


def vecdot(x1, x2, /, *, axis: int = -1):
    import kiln.numpy as jnp

    return jnp.vecdot(x1, x2, axis=axis)


def matmul(x1, x2, /):
    import kiln.numpy as jnp

    return jnp.matmul(x1, x2)


def tensordot(x1, x2, /, *, axes=2):
    import kiln.numpy as jnp

    return jnp.tensordot(x1, x2, axes=axes)


def cross(x1, x2, /, *, axis: int = -1):
    """The cross product of 3-vectors along `axis`."""
    import kiln.numpy as jnp

    x1, x2 = jnp.asarray(x1), jnp.asarray(x2)
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError(
            "Both input arrays must be (arrays of) 3-dimensional vectors, "
            f"but they have {x1.shape[axis]=} and {x2.shape[axis]=}"
        )
    a = jnp.moveaxis(x1, axis, -1)
    b = jnp.moveaxis(x2, axis, -1)
    out = jnp.stack(
        [
            a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
            a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
            a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0],
        ],
        axis=-1,
    )
    return jnp.moveaxis(out, -1, axis)


# --- norms -----------------------------------------------------------------------------------


def _abs(x):
    return lax.abs(x)


def vector_norm(x, /, *, axis=None, keepdims: bool = False, ord=2):
    """The vector p-norm over `axis` (all axes when None)."""
    import kiln.numpy as jnp

    check_arraylike("linalg.vector_norm", x)
    (x,) = promote_dtypes_inexact(x)
    if axis is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axis, (int, np.integer)):
        axes = (int(axis) % max(x.ndim, 1),)
    else:
        axes = tuple(int(a) % x.ndim for a in axis)
    a = jnp.abs(x)
    if ord is None or ord == 2:
        return jnp.sqrt(
            jnp.sum(
                jnp.real(x * jnp.conj(x)) if np.dtype(x.dtype).kind == "c" else x * x,
                axis=axes,
                keepdims=keepdims,
            )
        )
    if ord == np.inf:
        return jnp.max(a, axis=axes, keepdims=keepdims)
    if ord == -np.inf:
        return jnp.min(a, axis=axes, keepdims=keepdims)
    if ord == 0:
        return jnp.sum(a != 0, axis=axes, keepdims=keepdims).astype(a.dtype)
    if ord == 1:
        return jnp.sum(a, axis=axes, keepdims=keepdims)
    p = float(ord)
    return jnp.sum(a**p, axis=axes, keepdims=keepdims) ** (1.0 / p)


def matrix_norm(x, /, *, keepdims: bool = False, ord="fro"):
    """Matrix norms over the last two axes: 'fro', 1, -1, inf, -inf."""
    return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def norm(x, ord=None, axis=None, keepdims: bool = False):
    """Vector or matrix norm, as numpy.linalg.norm."""
    import kiln.numpy as jnp

    check_arraylike("linalg.norm", x)
    (x,) = promote_dtypes_inexact(x)
    if axis is None:
        if ord is None:
            return vector_norm(x, axis=None, keepdims=keepdims)
        axis = tuple(range(x.ndim))
    if isinstance(axis, (int, np.integer)):
        return vector_norm(x, axis=axis, keepdims=keepdims, ord=2 if ord is None else ord)
    axis = tuple(axis)
    if len(axis) == 1:
        return vector_norm(x, axis=axis, keepdims=keepdims, ord=2 if ord is None else ord)
    if len(axis) != 2:
        raise ValueError(f"norm: axis must name one or two axes, got {axis}")
    r, c = (a % x.ndim for a in axis)
    a = jnp.abs(x)
    if ord in (None, "fro"):
        return vector_norm(x, axis=(r, c), keepdims=keepdims)
    if ord in (1, -1):
        col_sums = jnp.sum(a, axis=r, keepdims=True)
        out = (jnp.max if ord == 1 else jnp.min)(col_sums, axis=c, keepdims=True)
    elif ord in (np.inf, -np.inf):
        row_sums = jnp.sum(a, axis=c, keepdims=True)
        out = (jnp.max if ord == np.inf else jnp.min)(row_sums, axis=r, keepdims=True)
    elif ord in (2, -2, "nuc"):
        moved = jnp.moveaxis(x, (r, c), (-2, -1))
        s = svd(moved, compute_uv=False)
        if ord == "nuc":
            out = jnp.sum(s, axis=-1)
        else:
            out = (jnp.max if ord == 2 else jnp.min)(s, axis=-1)
        if keepdims:
            out = jnp.expand_dims(out, tuple(sorted((r, c))))
        return out
    else:
        raise ValueError(f"Invalid order {ord!r} for matrix norm.")
    return out if keepdims else jnp.squeeze(out, axis=(r, c))

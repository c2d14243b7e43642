"""kiln.scipy.linalg: SciPy's names for the factorizations and solves of kiln.numpy.linalg and
kiln.lax.linalg (jax.scipy.linalg). The overwrite_* and check_finite arguments are accepted
for compatibility and ignored, as in JAX."""

from __future__ import annotations

from kiln import lax_linalg
from kiln import numpy as jnp
from kiln.numpy.util import promote_dtypes_inexact
from kiln.primitives.linalg_decomp import unpack_lu
from kiln.scipy.linalg_expm import block_diag, expm
from kiln.scipy.linalg_schur import funm, hessenberg, polar, rsf2csf, schur, sqrtm

__all__ = [
    "cholesky",
    "cho_factor",
    "cho_solve",
    "solve_triangular",
    "solve",
    "inv",
    "det",
    "lu",
    "lu_factor",
    "lu_solve",
    "qr",
    "eigh",
    "svd",
    "schur",
    "rsf2csf",
    "hessenberg",
    "sqrtm",
    "funm",
    "polar",
    "expm",
    "block_diag",
]


def _adjoint(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def cholesky(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """The Cholesky factor of a: upper U with a = U^H U (default), or lower L with a = L L^H."""
    del overwrite_a, check_finite
    return jnp.linalg.cholesky(a, upper=not lower)


def cho_factor(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """(factor, lower): the Cholesky factor in the form cho_solve takes."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b: bool = False, check_finite: bool = True):
    """Solve a x = b given cho_factor(a)."""
    del overwrite_b, check_finite
    c, lower = c_and_lower
    c, b = promote_dtypes_inexact(c, b)
    vector = b.ndim == c.ndim - 1
    b = b[..., None] if vector else b
    # a = L L^H: solve L y = b, then L^H x = y (with U = L^H when the factor is upper).
    y = lax_linalg.triangular_solve(
        c, b, left_side=True, lower=lower, transpose_a=not lower, conjugate_a=not lower
    )
    x = lax_linalg.triangular_solve(
        c, y, left_side=True, lower=lower, transpose_a=lower, conjugate_a=lower
    )
    return x[..., 0] if vector else x


_TRANS = {0: (False, False), 1: (True, False), 2: (True, True), "N": (False, False)}
_TRANS.update({"T": (True, False), "C": (True, True)})


def solve_triangular(
    a,
    b,
    trans=0,
    lower: bool = False,
    unit_diagonal: bool = False,
    overwrite_b: bool = False,
    debug=None,
    check_finite: bool = True,
):
    """Solve op(a) x = b for triangular a; trans 0/'N' (a), 1/'T' (a^T), 2/'C' (a^H)."""
    del overwrite_b, debug, check_finite
    if trans not in _TRANS:
        raise ValueError(f"Invalid 'trans' value {trans}")
    transpose_a, conjugate_a = _TRANS[trans]
    a, b = promote_dtypes_inexact(a, b)
    vector = b.ndim == a.ndim - 1
    b = b[..., None] if vector else b
    x = lax_linalg.triangular_solve(
        a,
        b,
        left_side=True,
        lower=lower,
        transpose_a=transpose_a,
        conjugate_a=conjugate_a,
        unit_diagonal=unit_diagonal,
    )
    return x[..., 0] if vector else x


def solve(
    a,
    b,
    lower: bool = False,
    overwrite_a: bool = False,
    overwrite_b: bool = False,
    debug: bool = False,
    check_finite: bool = True,
    assume_a: str = "gen",
):
    """Solve a x = b; assume_a 'pos' uses the Cholesky factorization, anything else LU."""
    del overwrite_a, overwrite_b, debug, check_finite
    valid = {"gen", "sym", "her", "pos"}
    if assume_a not in valid:
        raise ValueError(f"Expected assume_a to be one of {valid}; got {assume_a!r}")
    if assume_a == "pos":
        return cho_solve(cho_factor(a, lower=lower), b)
    return jnp.linalg.solve(a, b)


def inv(a, overwrite_a: bool = False, check_finite: bool = True):
    """The inverse of each square matrix."""
    del overwrite_a, check_finite
    return jnp.linalg.inv(a)


def det(a, overwrite_a: bool = False, check_finite: bool = True):
    """The determinant of each square matrix."""
    del overwrite_a, check_finite
    return jnp.linalg.det(a)


def lu_factor(a, overwrite_a: bool = False, check_finite: bool = True):
    """(lu, piv): packed LU factors and LAPACK's 0-based row swaps."""
    del overwrite_a, check_finite
    (a,) = promote_dtypes_inexact(a)
    factors, pivots, _ = lax_linalg.lu(a)
    return factors, pivots


def lu_solve(lu_and_piv, b, trans: int = 0, overwrite_b: bool = False, check_finite: bool = True):
    """Solve a x = b (trans 0), a^T x = b (1) or a^H x = b (2) given lu_factor(a)."""
    del overwrite_b, check_finite
    factors, pivots = lu_and_piv
    factors, b = promote_dtypes_inexact(factors, b)
    n = factors.shape[-1]
    permutation = lax_linalg.lu_pivots_to_permutation(pivots, n)
    vector = b.ndim == 1
    b = b[:, None] if vector else b
    if trans == 0:
        x = b[permutation, :]
        x = lax_linalg.triangular_solve(factors, x, left_side=True, lower=True, unit_diagonal=True)
        x = lax_linalg.triangular_solve(factors, x, left_side=True, lower=False)
    elif trans in (1, 2):
        conjugate = trans == 2
        x = lax_linalg.triangular_solve(
            factors, b, left_side=True, lower=False, transpose_a=True, conjugate_a=conjugate
        )
        x = lax_linalg.triangular_solve(
            factors,
            x,
            left_side=True,
            lower=True,
            transpose_a=True,
            conjugate_a=conjugate,
            unit_diagonal=True,
        )
        x = x[jnp.argsort(permutation), :]
    else:
        raise ValueError(f"'trans' value must be 0, 1, or 2, got {trans}")
    return x[:, 0] if vector else x


def lu(a, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """(p, l, u) with a = p l u, or (p l, u) with permute_l."""
    del overwrite_a, check_finite
    (a,) = promote_dtypes_inexact(a)
    factors, _, permutation = lax_linalg.lu(a)
    lower, upper = unpack_lu(factors)
    m = a.shape[-2]
    lower = lower[..., :, : min(a.shape[-2:])]
    upper = upper[..., : min(a.shape[-2:]), :]
    # P a = L U with P from `permutation`, so a = P^T L U.
    p = jnp.swapaxes(jnp.eye(m, dtype=a.dtype)[permutation], -1, -2)
    if permute_l:
        return jnp.matmul(p, lower), upper
    return p, lower, upper


def qr(
    a,
    overwrite_a: bool = False,
    lwork=None,
    mode: str = "full",
    pivoting: bool = False,
    check_finite: bool = True,
):
    """QR decomposition: (q, r) for mode 'full' or 'economic', (r,) for 'r'."""
    del overwrite_a, lwork, check_finite
    if pivoting:
        raise NotImplementedError("qr with pivoting=True is not supported by kiln")
    if mode not in ("full", "economic", "r"):
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    q, r = jnp.linalg.qr(a, mode="complete" if mode in ("full", "r") else "reduced")
    return (r,) if mode == "r" else (q, r)


def eigh(
    a,
    b=None,
    lower: bool = True,
    eigvals_only: bool = False,
    overwrite_a: bool = False,
    overwrite_b: bool = False,
    turbo: bool = True,
    eigvals=None,
    type: int = 1,  # noqa: A002 (SciPy's name)
    check_finite: bool = True,
):
    """Eigenvalues (ascending) and eigenvectors of Hermitian matrices: (w, v), or w alone."""
    del overwrite_a, overwrite_b, turbo, check_finite
    if b is not None:
        raise NotImplementedError("Only the b=None case of eigh is implemented")
    if type != 1:
        raise NotImplementedError("Only the type=1 case of eigh is implemented.")
    if eigvals is not None:
        raise NotImplementedError("Only the eigvals=None case of eigh is implemented.")
    w, v = jnp.linalg.eigh(a, UPLO="L" if lower else "U", symmetrize_input=False)
    return w if eigvals_only else (w, v)


def svd(
    a,
    full_matrices: bool = True,
    compute_uv: bool = True,
    overwrite_a: bool = False,
    check_finite: bool = True,
    lapack_driver: str = "gesdd",
):
    """Singular value decomposition: (u, s, vh) with s descending, or s alone."""
    del overwrite_a, check_finite, lapack_driver
    return jnp.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)

"""kiln.lax.linalg: matrix factorizations and solves, one per primitive, batched over leading
dimensions (float32, float64, complex64 and complex128 operands)."""

from kiln.primitives.linalg_decomp import (  # noqa: F401
    cholesky,
    cholesky_p,
    lu,
    lu_p,
    lu_pivots_to_permutation,
    lu_pivots_to_permutation_p,
    symmetrize,
    triangular_solve,
    triangular_solve_p,
    tridiagonal_solve,
    tridiagonal_solve_p,
)
from kiln.primitives.linalg_spectral import (  # noqa: F401
    eig,
    eig_p,
    eigh,
    eigh_p,
    qr,
    qr_p,
    svd,
    svd_p,
)

__all__ = [
    "cholesky",
    "cholesky_p",
    "eig",
    "eig_p",
    "eigh",
    "eigh_p",
    "lu",
    "lu_p",
    "lu_pivots_to_permutation",
    "lu_pivots_to_permutation_p",
    "qr",
    "qr_p",
    "svd",
    "svd_p",
    "symmetrize",
    "triangular_solve",
    "triangular_solve_p",
    "tridiagonal_solve",
    "tridiagonal_solve_p",
]

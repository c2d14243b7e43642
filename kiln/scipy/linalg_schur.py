"""kiln.scipy.linalg's Schur-based functions: schur, rsf2csf, hessenberg, sqrtm, funm and
polar (jax.scipy.linalg's), built on kiln.lax.linalg."""

from __future__ import annotations

from typing import Callable

import numpy as np

from kiln import lax, lax_linalg
from kiln import numpy as jnp
from kiln.numpy.vectorize import vectorize

__all__ = ["schur", "rsf2csf", "hessenberg", "sqrtm", "funm", "polar"]


def _complex_dtype(dtype):
    return jnp.result_type(dtype, jnp.complex64)


def _square(name: str, a):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name}: expected square array_like input, got shape {a.shape}")


def schur(a, output: str = "real"):
    """(T, Z) with a = Z T Z^H, Z unitary: T quasi upper triangular (2 x 2 blocks for complex
    eigenvalue pairs) for output="real" and real a, upper triangular for output="complex"."""
    a = jnp.asarray(a)
    if output not in ("real", "complex"):
        raise ValueError(f"output must be 'real' or 'complex', got {output!r}")
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        a = a.astype(jnp.float32)
    if output == "complex":
        a = a.astype(_complex_dtype(a.dtype))
    return lax_linalg.schur(a)


def _rsf2csf_matrix(t, z):
    """rsf2csf of one real Schur pair: Givens rotations that split each 2 x 2 diagonal block,
    from the bottom up."""
    dtype = _complex_dtype(jnp.result_type(t, z))
    t, z = t.astype(dtype), z.astype(dtype)
    n = t.shape[0]
    eps = float(jnp.finfo(dtype).eps)
    columns = jnp.arange(n)
    for m in range(n - 1, 0, -1):
        below = t[m, m - 1]
        split = jnp.abs(below) > eps * (jnp.abs(t[m - 1, m - 1]) + jnp.abs(t[m, m]))
        mu = jnp.linalg.eigvals(t[m - 1 : m + 1, m - 1 : m + 1])[0] - t[m, m]
        r = jnp.sqrt(jnp.abs(mu) ** 2 + jnp.abs(below) ** 2).astype(dtype)
        r = jnp.where(split, r, jnp.ones((), dtype))
        c, s = mu / r, below / r
        rotation = jnp.stack([jnp.stack([jnp.conj(c), s]), jnp.stack([-s, c])])
        rows = rotation @ jnp.where(columns >= m - 1, t[m - 1 : m + 1], 0)
        new_t = t.at[m - 1 : m + 1].set(jnp.where(columns >= m - 1, rows, t[m - 1 : m + 1]))
        upper_rows = (columns < m + 1)[:, None]
        cols = jnp.where(upper_rows, new_t[:, m - 1 : m + 1], 0) @ jnp.conj(rotation.T)
        new_t = new_t.at[:, m - 1 : m + 1].set(jnp.where(upper_rows, cols, new_t[:, m - 1 : m + 1]))
        new_z = z.at[:, m - 1 : m + 1].set(z[:, m - 1 : m + 1] @ jnp.conj(rotation.T))
        t = jnp.where(split, new_t, t).at[m, m - 1].set(0)
        z = jnp.where(split, new_z, z)
    return t, z


def rsf2csf(T, Z, check_finite: bool = True):  # noqa: N803 (SciPy's names)
    """The complex Schur form (T, Z) of a real Schur pair from schur(a): T upper triangular,
    a = Z T Z^H still."""
    del check_finite
    t, z = jnp.asarray(T), jnp.asarray(Z)
    if t.ndim < 2 or t.shape[-1] != t.shape[-2]:
        raise ValueError("Input 'T' must be square.")
    if z.ndim < 2 or z.shape[-1] != z.shape[-2]:
        raise ValueError("Input 'Z' must be square.")
    if t.shape[-1] != z.shape[-1]:
        raise ValueError(f"Input array shapes must match: Z: {z.shape} vs. T: {t.shape}")
    return vectorize(_rsf2csf_matrix, signature="(n,n),(n,n)->(n,n),(n,n)")(t, z)


def hessenberg(a, *, calc_q: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """The upper Hessenberg form H of a (zero below the first subdiagonal), a = Q H Q^H, and
    with calc_q the unitary Q as well: (H, Q)."""
    del overwrite_a, check_finite
    a = jnp.asarray(a)
    _square("hessenberg", a)
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        a = a.astype(jnp.float32)
    n = a.shape[-1]
    if n == 0:
        return (jnp.zeros_like(a), jnp.zeros_like(a)) if calc_q else jnp.zeros_like(a)
    packed, taus = lax_linalg.hessenberg(a)
    h = jnp.triu(packed, -1)
    if not calc_q:
        return h
    # Q = diag(1, Q'), Q' the product of the reflectors stored below the subdiagonal.
    inner = lax_linalg.householder_product(packed[..., 1:, :-1], taus)
    q = jnp.zeros_like(packed)
    q = q.at[..., 0, 0].set(1)
    q = q.at[..., 1:, 1:].set(inner)
    return h, q


def _triangular_sqrt(t):
    """The upper triangular square root of an upper triangular matrix (Björck and
    Hammarling's recurrence, one superdiagonal entry at a time)."""
    n = t.shape[0]
    d = jnp.sqrt(jnp.diagonal(t))
    positions = jnp.arange(n)

    def entry(step, state):
        j, u = state
        i = j - 1 - step
        between = (positions > i) & (positions < j)
        s = jnp.sum(jnp.where(between, u[i] * u[:, j], 0))
        value = jnp.where(t[i, j] == s, jnp.zeros((), t.dtype), (t[i, j] - s) / (d[i] + d[j]))
        return j, u.at[i, j].set(value)

    def column(j, u):
        return lax.fori_loop(0, j, entry, (j, u))[1]

    return lax.fori_loop(0, n, column, jnp.diag(d))


def sqrtm(A, blocksize: int = 1):  # noqa: N803 (SciPy's name)
    """The principal square root of a square matrix, through its complex Schur form (the
    result is complex)."""
    a = jnp.asarray(A)
    if blocksize > 1:
        raise NotImplementedError("Blocked version is not implemented yet.")
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"sqrtm expects a square matrix, got shape {a.shape}")
    t, z = schur(a, output="complex")
    root = _triangular_sqrt(t)
    return z @ root @ jnp.conj(z.T)


def _parlett(f, t):
    """Parlett's recurrence (Golub and Van Loan, Algorithm 11.1.1): f(T) for upper triangular
    T from its diagonal f, superdiagonal by superdiagonal; also the smallest |t_jj - t_ii|."""
    n = t.shape[0]
    positions = jnp.arange(n)

    def entry(i, state):
        p, f, smallest = state
        j = i + p
        between = (positions > i) & (positions < j)
        s = t[i, j] * (f[j, j] - f[i, i])
        s = s + jnp.sum(jnp.where(between, t[i] * f[:, j], 0))
        s = s - jnp.sum(jnp.where(between, f[i] * t[:, j], 0))
        gap = t[j, j] - t[i, i]
        s = jnp.where(gap != 0, s / jnp.where(gap != 0, gap, 1), s)
        return p, f.at[i, j].set(s), jnp.minimum(smallest, jnp.abs(gap))

    def diagonal(p, state):
        f, smallest = state
        _, f, smallest = lax.fori_loop(0, n - p, entry, (p, f, smallest))
        return f, smallest

    return lax.fori_loop(1, n, diagonal, (f, jnp.abs(t[0, 0])))


def funm(A, func: Callable, disp: bool = True):  # noqa: N803 (SciPy's name)
    """func applied to a square matrix through its Schur form (func maps a vector of
    eigenvalues elementwise). With disp=False also returns an estimate of the relative
    error, as SciPy does."""
    a = jnp.asarray(A)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError("expected square array_like input")
    t, z = schur(a)
    t, z = rsf2csf(t, z)
    f = jnp.diag(func(jnp.diagonal(t))).astype(t.dtype)
    f, smallest = _parlett(f, t)
    f = z @ f @ jnp.conj(z.T)
    if disp:
        return f
    tol = float(jnp.finfo(t.dtype).eps)
    smallest = jnp.where(smallest == 0, tol, smallest)
    estimate = jnp.minimum(
        1, jnp.maximum(tol, (tol / smallest) * jnp.linalg.norm(jnp.triu(t, 1), 1))
    )
    return f, jnp.where(jnp.any(jnp.isinf(f)), np.inf, estimate)


def _polar_matrix(a, side: str, method: str, eps, max_iterations):
    m, n = a.shape
    if method == "qdwh":
        if m >= n and side == "right":
            unitary, positive, _, _ = lax_linalg.qdwh(a, eps=eps, max_iterations=max_iterations)
        elif m < n and side == "left":
            unitary, positive, _, _ = lax_linalg.qdwh(
                jnp.conj(a.T), eps=eps, max_iterations=max_iterations
            )
            unitary, positive = jnp.conj(unitary.T), jnp.conj(positive.T)
        else:
            raise NotImplementedError(
                "method='qdwh' only supports mxn matrices where m < n where side='right' "
                f"and m >= n side='left', got {a.shape} with side={side!r}"
            )
        return unitary, positive
    if method == "svd":
        u, s, vh = lax_linalg.svd(a, full_matrices=False)
        s = s.astype(u.dtype)
        unitary = u @ vh
        if side == "right":
            return unitary, (jnp.conj(vh.T) * s[None, :]) @ vh
        return unitary, (u * s[None, :]) @ jnp.conj(u.T)
    raise ValueError(f"Unknown polar decomposition method {method}.")


def polar(
    a,
    side: str = "right",
    *,
    method: str = "qdwh",
    eps: float | None = None,
    max_iterations: int | None = None,
):
    """The polar decomposition a = u p (side="right", p n x n) or a = p u (side="left", p
    m x m): u with orthonormal columns (rows when n > m), p Hermitian positive semidefinite.
    method "qdwh" iterates (kiln.lax.linalg.qdwh), "svd" goes through the SVD."""
    a = jnp.asarray(a)
    if a.ndim < 2:
        raise ValueError("The input `a` must be at least a 2-D array.")
    if side not in ("right", "left"):
        raise ValueError("The argument `side` must be either 'right' or 'left'.")
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        a = a.astype(jnp.float32)
    signature = "(m,n)->(m,n),(n,n)" if side == "right" else "(m,n)->(m,n),(m,m)"

    def one(x):
        return _polar_matrix(x, side, method, eps, max_iterations)

    return vectorize(one, signature=signature)(a)

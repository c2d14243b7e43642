"""kiln.lax.linalg.qdwh: the polar decomposition x = u h by the QR-based dynamically weighted
Halley iteration (Nakatsukasa, Bai and Gygi, SIAM J. Matrix Anal. Appl. 31(5), 2010), built
from kiln.lax ops so that it runs under jit.

The weights of the iteration depend only on the dtype's epsilon, so they are computed here
in Python: the first steps (large weights) go through a QR decomposition, which stays
accurate for ill-conditioned iterates, the later ones through a cheaper Cholesky
factorization; Cholesky steps with the limiting weights then repeat until the iterate stops
moving or `max_iterations` is reached.
"""

from __future__ import annotations

import operator

__all__ = ["qdwh"]

# Steps whose weight c exceeds this use QR rather than Cholesky.
_CHOLESKY_CUTOFF = 100


def _weights(eps: float, max_iterations: int) -> list[tuple[float, float, float]]:
    """The (a, b, c) weights of each scheduled step, from the lower bound eps on the smallest
    singular value of the scaled matrix."""
    low = eps
    tolerance = 10.0 * eps / 2.0
    steps = []
    while low + tolerance < 1 and len(steps) < max_iterations:
        low2 = low * low
        dd = (4 * (1 / low2 - 1) / low2) ** (1 / 3)
        sqd = (1.0 + dd) ** 0.5
        a = sqd + (2 - dd + 2 * (2 - low2) / (low2 * sqd)) ** 0.5
        b = (a - 1) ** 2 / 4
        c = a + b - 1
        low = low * (a + b * low2) / (1 + c * low2)
        steps.append((a, b, c))
    return steps


def qdwh(
    x,
    *,
    is_hermitian: bool = False,
    max_iterations: int | None = None,
    eps: float | None = None,
    dynamic_shape: tuple[int, int] | None = None,
):
    """Polar decomposition of a full-rank m x n matrix x (m >= n): returns (u, h, num_iters,
    is_converged) with x = u h, u having orthonormal columns and h Hermitian positive
    semi-definite. Iteration stops once successive iterates differ by less than
    (5 eps)^(1/3) in Frobenius norm, or after max_iterations (default 10) steps.
    is_hermitian is accepted and unused; dynamic_shape must be None or x's own shape."""
    import kiln.numpy as jnp
    from kiln import lax

    del is_hermitian
    x = jnp.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"qdwh takes a matrix of shape M x N, got shape {x.shape}")
    rows, cols = x.shape
    if rows < cols:
        raise ValueError("The input matrix of shape M x N must have M >= N.")
    if dynamic_shape is not None and tuple(dynamic_shape) != (rows, cols):
        raise NotImplementedError("qdwh with a dynamic_shape smaller than x is not supported")
    max_iterations = 10 if max_iterations is None else operator.index(max_iterations)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.float32)
    if eps is None:
        eps = float(jnp.finfo(x.dtype).eps)
    dtype = x.dtype
    identity = jnp.eye(cols, dtype=dtype)

    def adjoint(m):
        return jnp.conj(m.T)

    def qr_step(u, a, b, c):
        e = b / c
        sqrt_c = c**0.5
        stacked = jnp.concatenate([sqrt_c * u, identity], axis=0)
        q, _ = lax.linalg.qr(stacked, full_matrices=False)
        return e * u + (a - e) / sqrt_c * (q[:rows] @ adjoint(q[rows:]))

    def cholesky_step(u, a, b, c):
        e = b / c
        gram = c * (adjoint(u) @ u) + identity
        factor = lax.linalg.cholesky(gram, symmetrize_input=False)
        z = lax.linalg.triangular_solve(
            factor, u.T, left_side=True, lower=True, conjugate_a=True
        ).conj()
        z = lax.linalg.triangular_solve(
            factor, z, left_side=True, lower=True, transpose_a=True, conjugate_a=True
        )
        return e * u + (a - e) * adjoint(z)

    one_norm = jnp.max(jnp.sum(jnp.abs(x), axis=0))
    inf_norm = jnp.max(jnp.sum(jnp.abs(x), axis=1))
    scale = jnp.where(one_norm == 0, 1, lax.rsqrt(one_norm) * lax.rsqrt(inf_norm))
    u = x * scale.astype(dtype)
    tolerance = (10.0 * eps / 2.0) ** (1 / 3)
    steps = _weights(eps, max_iterations)
    not_converged = jnp.asarray(True)
    for a, b, c in steps:
        if c > _CHOLESKY_CUTOFF:
            u = qr_step(u, a, b, c)
        else:
            previous = u
            u = cholesky_step(u, a, b, c)
            not_converged = jnp.linalg.norm(u - previous) > tolerance

    def cond_fun(state):
        k, _, going = state
        return jnp.logical_and(going, k < max_iterations)

    def body_fun(state):
        k, u, _ = state
        updated = cholesky_step(u, 3.0, 1.0, 3.0)
        return k + 1, updated, jnp.linalg.norm(updated - u) > tolerance

    num_iters, u, not_converged = lax.while_loop(
        cond_fun, body_fun, (jnp.asarray(len(steps), jnp.int32), u, not_converged)
    )
    u = 1.5 * u - 0.5 * u @ (adjoint(u) @ u)
    h = adjoint(u) @ x
    h = (h + adjoint(h)) / 2
    return u, h, num_iters, jnp.logical_not(not_converged)

"""kiln.scipy.linalg.expm and block_diag.

expm is the scaling-and-squaring method with Padé approximants (Higham, "The scaling and
squaring method for the matrix exponential revisited", 2005): A is scaled by 2**-s so that its
1-norm is below the threshold θ of the largest Padé degree used, r_m(A / 2**s) = q_m⁻¹ p_m is
computed for the lowest degree m whose θ_m bounds the norm, and the result is squared s times.
float64 uses degrees 3, 5, 7, 9 and 13; float32 stops at 7 (higher degrees gain nothing at its
precision). Everything is written with kiln.numpy and lax, so grad, vmap and jit go through
it; the degree is chosen with lax.switch and the squarings run in a scan, so the program is
the same for every input.
"""

from __future__ import annotations

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln.numpy.util import check_arraylike, promote_dtypes, promote_dtypes_inexact

__all__ = ["expm", "block_diag"]

#: Padé coefficients b_0..b_m of degree m.
_PADE = {
    3: (120.0, 60.0, 12.0, 1.0),
    5: (30240.0, 15120.0, 3360.0, 420.0, 30.0, 1.0),
    7: (17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0),
    9: (
        17643225600.0, 8821612800.0, 2075673600.0, 302702400.0, 30270240.0,
        2162160.0, 110880.0, 3960.0, 90.0, 1.0,
    ),
    13: (
        64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
        129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
        40840800.0, 960960.0, 16380.0, 182.0, 1.0,
    ),
}  # fmt: skip
#: Largest 1-norm each degree handles to unit roundoff: (degree, θ) in increasing order.
_THETAS = {
    "double": (
        (3, 1.495585217958292e-2),
        (5, 2.539398330063230e-1),
        (7, 9.504178996162932e-1),
        (9, 2.097847961257068),
        (13, 5.371920351148152),
    ),
    "single": ((3, 4.258730016922831e-1), (5, 1.880152677804762), (7, 3.925724783138660)),
}


def _dot(a, b):
    return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def _pade(m: int):
    """A -> (U, V): the odd and even parts of p_m(A) (p_m = V + U, q_m = V - U)."""
    b = _PADE[m]

    def terms(a):
        eye = jnp.eye(a.shape[0], dtype=a.dtype)
        a2 = _dot(a, a)
        if m == 13:  # Higham's evaluation: six products instead of twelve
            a4 = _dot(a2, a2)
            a6 = _dot(a4, a2)
            u = _dot(a6, b[13] * a6 + b[11] * a4 + b[9] * a2)
            u = _dot(a, u + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
            v = _dot(a6, b[12] * a6 + b[10] * a4 + b[8] * a2)
            v = v + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
            return u, v
        powers = [eye, a2]  # A^0, A^2, A^4, ...
        while len(powers) <= m // 2:
            powers.append(_dot(powers[-1], a2))
        odd = sum(b[2 * k + 1] * powers[k] for k in range(m // 2 + 1))
        even = sum(b[2 * k] * powers[k] for k in range(m // 2 + 1))
        return _dot(a, odd), even

    return terms


def expm(A, *, upper_triangular: bool = False, max_squarings: int = 16):
    """The matrix exponential of A, shape (..., N, N) (JAX's jax.scipy.linalg.expm). Where
    more than max_squarings squarings would be needed, the result is NaN."""
    check_arraylike("expm", A)
    (A,) = promote_dtypes_inexact(A)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"Expected A to be a (batched) square matrix, got A.shape={A.shape}.")
    if A.ndim > 2:
        return jnp.vectorize(
            lambda a: expm(a, upper_triangular=upper_triangular, max_squarings=max_squarings),
            signature="(n,n)->(n,n)",
        )(A)
    single = np.dtype(A.dtype) in (np.dtype(np.float32), np.dtype(np.complex64))
    thetas = _THETAS["single" if single else "double"]
    norm = jnp.max(jnp.sum(jnp.abs(A), axis=0))
    top = thetas[-1][1]
    # ceil, so that the scaled norm is at most θ of the top degree (JAX's floor can leave it
    # twice as large: exp(30) came out 3% off in float32 that way).
    squarings = jnp.maximum(0.0, jnp.ceil(jnp.log2(norm / top)))
    scaled = A / (2.0**squarings).astype(A.dtype)
    bounds = jnp.asarray([theta for _, theta in thetas[:-1]], dtype=norm.dtype)
    which = jnp.digitize(norm / 2.0**squarings, bounds)
    u, v = lax.switch(which, [_pade(m) for m, _ in thetas], scaled)
    p, q = v + u, v - u
    if upper_triangular:
        from kiln.scipy.linalg import solve_triangular

        r = solve_triangular(q, p)
    else:
        r = jnp.linalg.solve(q, p)

    def square(r, i):
        return lax.cond(i < squarings, lambda x: _dot(x, x), lambda x: x, r), None

    r, _ = lax.scan(square, r, jnp.arange(max_squarings, dtype=squarings.dtype))
    return jnp.where(squarings > max_squarings, jnp.full_like(r, np.nan), r)


def block_diag(*arrs):
    """A block-diagonal matrix of the arguments (each of rank 2 at most; a scalar is 1x1 and
    a vector one row), in their promoted dtype."""
    if not arrs:
        return jnp.zeros((1, 0))
    check_arraylike("block_diag", *arrs)
    arrs = promote_dtypes(*arrs)
    blocks = []
    for a in arrs:
        if a.ndim > 2:
            raise ValueError(
                "Arguments to jax.scipy.linalg.block_diag must have at most 2 dimensions, "
                f"got an array of shape {a.shape} at argument {len(blocks)}."
            )
        blocks.append(jnp.atleast_2d(a))
    rows = sum(b.shape[0] for b in blocks)
    cols = sum(b.shape[1] for b in blocks)
    out = jnp.zeros((rows, cols), blocks[0].dtype)
    r = c = 0
    for b in blocks:
        out = lax.dynamic_update_slice(out, b, (r, c)) if b.size else out
        r, c = r + b.shape[0], c + b.shape[1]
    return out

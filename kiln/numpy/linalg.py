"""kiln.numpy.linalg: norms (and, later, factorizations)."""

from __future__ import annotations

import numpy as np

from kiln import lax
from kiln.numpy.util import check_arraylike, promote_dtypes_inexact

__all__ = ["norm", "vector_norm", "matrix_norm"]


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
    """Vector or matrix norm, as numpy.linalg.norm (SVD-based orders are not supported yet)."""
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
    else:
        raise NotImplementedError(
            f"norm: matrix ord={ord!r} needs an SVD, which kiln does "
            "not provide yet; use 'fro', 1, -1, inf or -inf."
        )
    return out if keepdims else jnp.squeeze(out, axis=(r, c))

"""Polynomials as coefficient arrays, highest power first (NumPy's legacy poly* functions):
evaluation, arithmetic, derivatives and integrals, fitting and roots."""

from __future__ import annotations

import operator

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.errors import ConcretizationTypeError
from kiln.core.trace import Tracer
from kiln.numpy.creation import asarray, full, ones, zeros
from kiln.numpy.extras_math import convolve_1d as convolve, trim_zeros, vander
from kiln.numpy.indexing_functions import concrete_value
from kiln.numpy.manipulation_join import concatenate
from kiln.numpy.manipulation_shape import atleast_1d
from kiln.numpy.products import dot, outer
from kiln.numpy.reductions import sum as _sum
from kiln.numpy.ufuncs import sqrt
from kiln.numpy.util import check_arraylike, promote_dtypes, promote_dtypes_inexact

__all__ = [
    "polyval",
    "polyadd",
    "polysub",
    "polymul",
    "polydiv",
    "polyder",
    "polyint",
    "polyfit",
    "poly",
    "roots",
]


def _static_int(value, what: str) -> int:
    if isinstance(value, Tracer):
        raise ConcretizationTypeError(value, f"The '{what}' argument must be static.\n")
    return operator.index(value)


def polyval(p, x, *, unroll: int = 16):
    """The polynomial with coefficients p (along p's first axis) at x, by Horner's rule."""
    check_arraylike("polyval", p, x)
    p, x = promote_dtypes(p, x)
    shape = np.broadcast_shapes(tuple(p.shape[1:]), tuple(x.shape))
    y = zeros(shape, x.dtype)
    for k in range(p.shape[0]):
        y = y * x + p[k]
    return y


def _pad_front(a, length: int):
    if a.shape[0] == length:
        return a
    return concatenate([zeros((length - a.shape[0],), a.dtype), a])


def polyadd(a1, a2):
    """The sum of two polynomials."""
    check_arraylike("polyadd", a1, a2)
    a1, a2 = promote_dtypes(a1, a2)
    length = max(a1.shape[0], a2.shape[0])
    return _pad_front(a1, length) + _pad_front(a2, length)


def polysub(a1, a2):
    """The difference of two polynomials."""
    check_arraylike("polysub", a1, a2)
    a1, a2 = promote_dtypes(a1, a2)
    length = max(a1.shape[0], a2.shape[0])
    return _pad_front(a1, length) - _pad_front(a2, length)


def polymul(a1, a2, *, trim_leading_zeros: bool = False):
    """The product of two polynomials (a convolution of their coefficients)."""
    check_arraylike("polymul", a1, a2)
    a1, a2 = promote_dtypes_inexact(a1, a2)
    if trim_leading_zeros and (a1.shape[0] > 1 or a2.shape[0] > 1):
        a1, a2 = trim_zeros(a1, trim="f"), trim_zeros(a2, trim="f")
    if a1.shape[0] == 0:
        a1 = zeros((1,), a2.dtype)
    if a2.shape[0] == 0:
        a2 = zeros((1,), a1.dtype)
    return convolve(a1, a2, mode="full")


def polydiv(u, v, *, trim_leading_zeros: bool = False):
    """Quotient and remainder of polynomial division u / v (by long division)."""
    check_arraylike("polydiv", u, v)
    u, v = promote_dtypes_inexact(u, v)
    m, n = u.shape[0] - 1, v.shape[0] - 1
    scale = 1.0 / v[0]
    q = zeros((max(m - n + 1, 1),), u.dtype)
    r = u
    for k in range(0, m - n + 1):
        d = scale * r[k]
        q = q.at[k].set(d)
        r = r.at[k : k + n + 1].add(-d * v)
    if trim_leading_zeros:
        r = trim_zeros(r, trim="f")
    return q, r


def polyder(p, m: int = 1):
    """The m-th derivative of a polynomial."""
    check_arraylike("polyder", p)
    m = _static_int(m, "m")
    (p,) = promote_dtypes_inexact(p)
    if m < 0:
        raise ValueError("Order of derivative must be positive")
    if m == 0:
        return p
    n = p.shape[0]
    powers = np.arange(n - 1, -1, -1)[: max(n - m, 0)]
    # d^m/dx^m x^k = k (k-1) ... (k-m+1) x^(k-m)
    factors = np.prod([powers - j for j in range(m)], axis=0) if len(powers) else powers
    return p[: max(n - m, 0)] * asarray(np.asarray(factors).astype(p.dtype))


def polyint(p, m: int = 1, k=None):
    """The m-th antiderivative of a polynomial; k gives the integration constants (a scalar
    or one per integration, the first for the outermost)."""
    m = _static_int(m, "m")
    k = 0 if k is None else k
    check_arraylike("polyint", p, k)
    p, k = promote_dtypes_inexact(p, k)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    k = atleast_1d(k)
    if k.shape[0] == 1:
        k = full((m,), k[0], k.dtype)
    if k.shape != (m,):
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or m.")
    if m == 0:
        return p
    total = p.shape[0] + m
    grid = np.arange(total)[None, :] - np.arange(m)[:, None]
    divisors = np.prod(np.maximum(1, grid), axis=0)[::-1]
    return concatenate((p, k)) / asarray(divisors.astype(p.dtype))


def polyfit(x, y, deg: int, rcond=None, full: bool = False, w=None, cov: bool = False):
    """The least-squares polynomial of degree `deg` through the points (x, y) (y may hold
    several data sets as columns); optionally weighted, with fit diagnostics or the
    coefficients' covariance."""
    from kiln.numpy import linalg

    if w is None:
        check_arraylike("polyfit", x, y)
    else:
        check_arraylike("polyfit", x, y, w)
    deg = _static_int(deg, "deg")
    order = deg + 1
    if deg < 0:
        raise ValueError("expected deg >= 0")
    x, y = asarray(x), asarray(y)
    if x.ndim != 1:
        raise TypeError("expected 1D vector for x")
    if x.size == 0:
        raise TypeError("expected non-empty vector for x")
    if y.ndim < 1 or y.ndim > 2:
        raise TypeError("expected 1D or 2D array for y")
    if x.shape[0] != y.shape[0]:
        raise TypeError("expected x and y to have same length")
    x, y = promote_dtypes_inexact(x, y)
    if rcond is None:
        rcond = x.shape[0] * float(dtypes.finfo(x.dtype).eps)
    lhs = vander(x, order)
    rhs = y
    if w is not None:
        (w,) = promote_dtypes_inexact(w)
        if w.ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if w.shape[0] != y.shape[0]:
            raise TypeError("expected w and y to have the same length")
        lhs = lhs * w[:, None]
        rhs = rhs * (w[:, None] if rhs.ndim == 2 else w)
    # Scaling the columns improves the conditioning of the least-squares problem.
    scale = sqrt(_sum(lhs * lhs, axis=0))
    lhs = lhs / scale[None, :]
    c, resids, rank, s = linalg.lstsq(lhs, rhs, rcond)
    c = (c.T / scale[None, :]).T if c.ndim > 1 else c / scale
    if full:
        return c, resids, rank, s, asarray(rcond, dtype=x.dtype)
    if cov:
        base = linalg.inv(dot(lhs.T, lhs)) / outer(scale, scale)
        if cov == "unscaled":
            factor = asarray(1.0, dtype=x.dtype)
        else:
            if x.shape[0] <= order:
                raise ValueError(
                    "the number of data points must exceed order to scale the covariance matrix"
                )
            factor = resids / (x.shape[0] - order)
        if y.ndim == 1:
            return c, base * atleast_1d(factor)[None]
        return c, base[:, :, None] * atleast_1d(factor)[None, None, :]
    return c


def _roots_without_leading_zeros(p):
    """The roots of p (p[0] != 0): the eigenvalues of its companion matrix."""
    from kiln.numpy import linalg

    complex_dtype = (
        dtypes.complex128 if p.dtype in (dtypes.float64, dtypes.complex128) else (dtypes.complex64)
    )
    if p.shape[0] < 2:
        return zeros((0,), dtypes.canonicalize(complex_dtype))
    n = p.shape[0] - 1
    companion = zeros((n, n), p.dtype)
    if n > 1:
        companion = companion.at[np.arange(1, n), np.arange(n - 1)].set(ones((n - 1,), p.dtype))
    companion = companion.at[0, :].set(-p[1:] / p[0])
    return linalg.eigvals(companion)


def roots(p, *, strip_zeros: bool = True):
    """The roots of a polynomial, as complex numbers. Leading zero coefficients are stripped
    (they need concrete values); with strip_zeros=False they trace, and the roots they stand
    for come out as NaN."""
    check_arraylike("roots", p)
    (p,) = promote_dtypes_inexact(p)
    p = atleast_1d(p)
    if p.ndim != 1:
        raise ValueError("Input must be a rank-1 array.")
    complex_dtype = dtypes.canonicalize(
        dtypes.complex128 if p.dtype in (dtypes.float64, dtypes.complex128) else dtypes.complex64
    )
    if p.shape[0] < 2:
        return zeros((0,), complex_dtype)
    if strip_zeros:
        value = concrete_value(p)
        if value is None:
            raise ConcretizationTypeError(
                p,
                "The error occurred in the jnp.roots() function. To use this within a "
                "JIT-compiled context, pass strip_zeros=False, but be aware that leading "
                "zeros will result in some returned roots being set to NaN.\n",
            )
        nonzero = np.flatnonzero(value)
        leading = int(nonzero[0]) if nonzero.size else p.shape[0]
        return _roots_without_leading_zeros(p[leading:])
    is_zero = lax.convert_element_type(p == 0, dtypes.int32)
    # The count of leading zeros: where the running product of "is zero" stays 1.
    from kiln.numpy.reductions_cumulative import cumprod
    from kiln.numpy.ufuncs import where

    leading = _sum(cumprod(is_zero))
    all_zero = leading == p.shape[0]
    safe = where(all_zero, asarray(1.0, dtype=p.dtype), p)
    n = p.shape[0]
    rolled = safe[(asarray(np.arange(n)) + leading) % n]
    out = _roots_without_leading_zeros(rolled)
    # Each leading zero rolled to the end adds a root at 0: sort those last and mark them.
    _, out = lax.sort_key_val(lax.convert_element_type(out == 0, dtypes.int32), out)
    nan = asarray(complex(np.nan, np.nan), dtype=out.dtype)
    keep = asarray(np.arange(out.shape[0])) < out.shape[0] - leading
    return where(keep, out, nan)


def poly(seq_of_zeros):
    """The coefficients of the monic polynomial with the given roots (or with the
    eigenvalues of a square matrix as roots)."""
    check_arraylike("poly", seq_of_zeros)
    (zeros_,) = promote_dtypes_inexact(seq_of_zeros)
    zeros_ = atleast_1d(zeros_)
    shape = zeros_.shape
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] != 0:
        from kiln.numpy import linalg

        zeros_ = linalg.eigvals(zeros_)
    if zeros_.ndim != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    dtype = zeros_.dtype
    if zeros_.shape[0] == 0:
        return ones((), dtype)
    coefficients = ones((1,), dtype)
    for k in range(zeros_.shape[0]):
        factor = concatenate([ones((1,), dtype), -zeros_[k : k + 1]])
        coefficients = convolve(coefficients, factor, mode="full")
    return coefficients

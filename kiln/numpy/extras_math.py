"""Numerical kiln.numpy functions built from the others: statistics (cov, corrcoef),
interpolation and binning (interp, digitize), finite differences and integrals (gradient,
trapezoid, unwrap), products (cross, matvec, vecmat), window functions, bit
packing and functional updates (put_along_axis, fill_diagonal).

Each one composes lax and kiln.numpy operations, so it traces, and it is differentiable where
its value is a smooth function of float inputs.
"""

from __future__ import annotations

import operator
from typing import Callable

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.core.trace import Tracer
from kiln.numpy.creation import arange, asarray, full, zeros
from kiln.numpy.indexing_functions import concrete_value
from kiln.numpy.manipulation_join import concatenate, stack
from kiln.numpy.manipulation_shape import (
    atleast_2d,
    expand_dims,
    moveaxis,
    ravel,
    reshape,
    swapaxes,
)
from kiln.numpy.products import dot, matmul
from kiln.numpy.reductions import average, sum as _sum
from kiln.numpy.reductions_cumulative import cumsum, diff
from kiln.numpy.sorting import argsort, searchsorted
from kiln.numpy.ufuncs import (
    abs as _abs,
    clip,
    conjugate,
    cos,
    divide,
    imag,
    mod,
    power,
    real,
    sqrt,
    where,
)
from kiln.numpy.util import check_arraylike, normalize_axis, promote_dtypes_inexact, to_kiln

__all__ = [
    "cov",
    "corrcoef",
    "interp",
    "digitize",
    "gradient",
    "trapezoid",
    "cross",
    "vander",
    "matvec",
    "vecmat",
    "unwrap",
    "put_along_axis",
    "fill_diagonal",
    "packbits",
    "unpackbits",
    "bartlett",
    "blackman",
    "hamming",
    "hanning",
    "apply_along_axis",
    "apply_over_axes",
    "trim_zeros",
]


# --- statistics ---------------------------------------------------------------------------------
def cov(
    m,
    y=None,
    rowvar: bool = True,
    bias: bool = False,
    ddof=None,
    fweights=None,
    aweights=None,
    dtype=None,
):
    """The covariance matrix of the variables in the rows of `m` (columns unless `rowvar`),
    and of `y`'s; weighted by integer frequencies and/or observation weights."""
    if y is not None:
        check_arraylike("cov", m, y)
        m, y = promote_dtypes_inexact(m, y)
        if y.ndim > 2:
            raise ValueError("y has more than 2 dimensions")
    else:
        check_arraylike("cov", m)
        (m,) = promote_dtypes_inexact(m)
    if m.ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    if dtype is not None and not dtypes.is_inexact(dtypes.to_dtype(dtype)):
        raise ValueError(f"cov: dtype must be a subclass of float or complex; got dtype={dtype}")
    x = atleast_2d(m)
    if not rowvar and m.ndim != 1:
        x = x.T
    if x.shape[0] == 0:
        return reshape(asarray([], dtype=x.dtype), (0, 0))
    if y is not None:
        y2 = atleast_2d(y)
        if not rowvar and y2.shape[0] != 1:
            y2 = y2.T
        x = concatenate((x, y2), axis=0)
    if x.shape[1] == 0:
        shape = () if x.shape[0] == 1 else (x.shape[0], x.shape[0])
        return full(shape, np.nan, x.dtype)
    if ddof is None:
        ddof = 0 if bias else 1
    weights = None
    if fweights is not None:
        check_arraylike("cov", fweights)
        fweights = to_kiln(fweights)
        if fweights.ndim > 1:
            raise RuntimeError("cannot handle multidimensional fweights")
        if fweights.shape[0] != x.shape[1]:
            raise RuntimeError("incompatible numbers of samples and fweights")
        if not dtypes.is_integer(fweights.dtype):
            raise TypeError("fweights must be integer.")
        weights = _abs(fweights)
    if aweights is not None:
        check_arraylike("cov", aweights)
        aweights = to_kiln(aweights)
        if aweights.ndim > 1:
            raise RuntimeError("cannot handle multidimensional aweights")
        if aweights.shape[0] != x.shape[1]:
            raise RuntimeError("incompatible numbers of samples and aweights")
        aweights = _abs(aweights)
        weights = aweights if weights is None else weights * aweights
    if dtype is not None:
        x = x.astype(dtype)
        weights = None if weights is None else weights.astype(dtype)
    mean, weight_sum = average(x, axis=1, weights=weights, returned=True)
    weight_sum = weight_sum[0]
    if weights is None:
        norm = x.shape[1] - ddof
    elif ddof == 0:
        norm = weight_sum
    elif aweights is None:
        norm = weight_sum - ddof
    else:
        norm = weight_sum - ddof * _sum(weights * aweights) / weight_sum
    centered = x - mean[:, None]
    scaled = centered if weights is None else centered * weights[None, :]
    out = divide(dot(centered, conjugate(scaled).T), norm)
    return reshape(out, ()) if out.shape == (1, 1) else out


def corrcoef(x, y=None, rowvar: bool = True, dtype=None):
    """Pearson correlation coefficients: the covariance normalized by the standard
    deviations (clipped to [-1, 1])."""
    check_arraylike("corrcoef", x)
    if dtype is not None and not dtypes.is_inexact(dtypes.to_dtype(dtype)):
        raise ValueError(
            f"corrcoef: dtype must be a subclass of float or complex; got dtype={dtype}"
        )
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return divide(c, c)  # nan for 0/0, inf/inf and nan; 1 otherwise
    d = lax.convert_element_type(sqrt(real(c.diagonal())), c.dtype)
    c = c / d[:, None] / d[None, :]
    if dtypes.is_complex(c.dtype):
        return lax.complex(clip(real(c), -1, 1), clip(imag(c), -1, 1))
    return clip(c, -1, 1)


# --- interpolation and binning ------------------------------------------------------------------
def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the points (xp, fp) at x (xp increasing); `left` and
    `right` give the values outside [xp[0], xp[-1]] (default: the end values; "extrapolate"
    continues the end segments); with `period`, the points repeat periodically."""
    check_arraylike("interp", x, xp, fp)
    if np.ndim(xp) != 1 or np.ndim(fp) != 1:
        raise ValueError("xp and fp must be one-dimensional")
    if np.shape(xp)[0] != np.shape(fp)[0]:
        raise ValueError("xp and fp must be the same length")
    if np.shape(xp)[0] == 0:
        raise ValueError("xp and fp must be non-empty")
    for name, side in (("left", left), ("right", right)):
        if isinstance(side, str) and side != "extrapolate":
            raise ValueError(f"{name}={side!r} is not supported; use a value or 'extrapolate'")
    if period is not None and (isinstance(left, str) or isinstance(right, str)):
        raise ValueError("period cannot be combined with extrapolation")
    x, xp = promote_dtypes_inexact(x, xp)
    (fp,) = promote_dtypes_inexact(fp)
    if period is not None:
        if np.ndim(period) != 0:
            raise ValueError(f"period must be a scalar; got {period}")
        period = _abs(to_kiln(period, x.dtype))
        x, xp = mod(x, period), mod(xp, period)
        order = argsort(xp)
        xp, fp = xp[order], fp[order]
        xp = concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = concatenate([fp[-1:], fp, fp[:1]])
    n = xp.shape[0]
    if n == 1:
        return full(x.shape, fp[0], fp.dtype)
    i = clip(searchsorted(xp, x, side="right"), 1, n - 1)
    x0, x1, f0, f1 = xp[i - 1], xp[i], fp[i - 1], fp[i]
    dx = x1 - x0
    tiny = _abs(dx) <= 10 * dtypes.finfo(dx.dtype).eps
    slope_dx = where(tiny, lax.full((), 1, dx.dtype), dx)
    weight = (x - x0) / slope_dx
    weight = weight.astype(fp.dtype)
    out = where(tiny, f0, f0 + weight * (f1 - f0))
    if period is None:
        if not (isinstance(left, str)):
            out = where(x < xp[0], fp[0] if left is None else left, out)
        if not (isinstance(right, str)):
            out = where(x > xp[-1], fp[-1] if right is None else right, out)
    return out


def digitize(x, bins, right: bool = False, *, method: str | None = None):
    """The index of the bin each value of x falls in (bins increasing or decreasing)."""
    check_arraylike("digitize", x, bins)
    bins = to_kiln(bins)
    if isinstance(right, Tracer):
        raise TypeError("The right argument of digitize must be static")
    if bins.ndim != 1:
        raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins={bins}")
    x = to_kiln(x)
    if bins.shape[0] == 0:
        return zeros(x.shape, dtypes.int32)
    side = "left" if right else "right"
    kwargs = {} if method is None else {"method": method}
    increasing = searchsorted(bins, x, side=side, **kwargs)
    decreasing = bins.shape[0] - searchsorted(bins[::-1], x, side=side, **kwargs)
    return where(bins[-1] >= bins[0], increasing, decreasing)


# --- differences and integrals ------------------------------------------------------------------
def _slice(x, start, stop, axis: int):
    n = x.shape[axis]
    start = start % n if start is not None and start < 0 else (start or 0)
    stop = n if stop is None else (stop % n if stop < 0 else stop)
    return lax.slice_in_dim(x, start, stop, axis=axis)


def _gradient_along(a, h, axis: int):
    first = _slice(a, 1, 2, axis) - _slice(a, 0, 1, axis)
    last = _slice(a, -1, None, axis) - _slice(a, -2, -1, axis)
    if h.ndim == 0:
        inner = (_slice(a, 2, None, axis) - _slice(a, None, -2, axis)) * 0.5 / h
        return concatenate((first / h, inner, last / h), axis=axis)
    if h.ndim != 1:
        raise ValueError("Spacing arrays must be 1D arrays or scalars.")
    if h.shape[0] != a.shape[axis]:
        raise ValueError(
            "Spacing arrays must have the same length as the dimension along which the "
            "gradient is calculated."
        )
    shape = [1] * a.ndim
    shape[axis] = h.shape[0]
    h = reshape(h, tuple(shape))
    first = first / (_slice(h, 1, 2, axis) - _slice(h, 0, 1, axis))
    last = last / (_slice(h, -1, None, axis) - _slice(h, -2, -1, axis))
    dx1 = _slice(h, 1, -1, axis) - _slice(h, 0, -2, axis)
    dx2 = _slice(h, 2, None, axis) - _slice(h, 1, -1, axis)
    # Second-order accurate differences on a non-uniform grid (NumPy's formula).
    inner = (
        -dx2 / (dx1 * (dx1 + dx2)) * _slice(a, 0, -2, axis)
        + (dx2 - dx1) / (dx1 * dx2) * _slice(a, 1, -1, axis)
        + dx1 / (dx2 * (dx1 + dx2)) * _slice(a, 2, None, axis)
    )
    return concatenate((first, inner, last), axis=axis)


def gradient(f, *varargs, axis=None, edge_order=None):
    """The gradient of sampled values by central differences inside and one-sided ones at
    the edges; spacings are scalars or coordinate arrays, one per axis."""
    if edge_order is not None:
        raise NotImplementedError("The 'edge_order' argument to gradient is not supported.")
    check_arraylike("gradient", f, *varargs)
    a, *spacing = promote_dtypes_inexact(f, *varargs)
    if axis is None:
        axes = tuple(range(a.ndim))
    else:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(normalize_axis(ax, a.ndim) for ax in axes)
    if not axes:
        return []
    if min(a.shape[ax] for ax in axes) < 2:
        raise ValueError(
            "Shape of array too small to calculate a numerical gradient, at least 2 elements "
            "are required."
        )
    if not spacing:
        spacing = [lax.full((), 1, a.dtype)] * len(axes)
    elif len(spacing) == 1:
        spacing = spacing * len(axes)
    elif len(spacing) != len(axes):
        raise TypeError(f"Invalid number of spacing arguments {len(spacing)} for axis={axis}")
    out = [_gradient_along(a, h, ax) for ax, h in zip(axes, spacing)]
    return out[0] if len(axes) == 1 else out


def trapezoid(y, x=None, dx=1.0, axis: int = -1):
    """The integral of y by the trapezoidal rule along `axis`, at the sample points x (or a
    constant spacing dx)."""
    if x is None:
        check_arraylike("trapezoid", y)
        (y,) = promote_dtypes_inexact(y)
        spacing = to_kiln(dx)
        if spacing.ndim:
            spacing = moveaxis(
                reshape(spacing, (1,) * (y.ndim - spacing.ndim) + spacing.shape), axis, -1
            )
    else:
        check_arraylike("trapezoid", y, x)
        y, x = promote_dtypes_inexact(y, x)
        spacing = diff(x) if x.ndim == 1 else moveaxis(diff(x, axis=axis), axis, -1)
    y = moveaxis(y, axis, -1)
    return 0.5 * _sum(spacing * (y[..., 1:] + y[..., :-1]), axis=-1)


def unwrap(p, discont=None, axis: int = -1, period=2 * np.pi):
    """p with jumps between neighbours larger than max(discont, period / 2) corrected by
    multiples of `period`."""
    check_arraylike("unwrap", p)
    (p,) = promote_dtypes_inexact(p)
    if dtypes.is_complex(p.dtype):
        raise ValueError("jnp.unwrap does not support complex inputs.")
    axis = normalize_axis(axis, p.ndim)
    if p.shape[axis] < 2:
        return p
    if discont is None:
        discont = period / 2
    interval = period / 2
    step = diff(p, axis=axis)
    wrapped = mod(step + interval, period) - interval
    wrapped = where((wrapped == -interval) & (step > 0), interval, wrapped)
    correction = where(_abs(step) < discont, 0, wrapped - step)
    first = _slice(p, 0, 1, axis)
    return concatenate([first, _slice(p, 1, None, axis) + cumsum(correction, axis=axis)], axis=axis)


# --- products -----------------------------------------------------------------------------------
def cross(a, b, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis=None):
    """The cross product of 3-vectors (2-vectors count as having a zero third component; two
    2-vectors give the scalar z component)."""
    check_arraylike("cross", a, b)
    if axis is not None:
        axisa = axisb = axisc = axis
    a = moveaxis(to_kiln(a), axisa, -1)
    b = moveaxis(to_kiln(b), axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError("Dimension must be either 2 or 3 for cross product")
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    a0, a1 = a[..., 0], a[..., 1]
    b0, b1 = b[..., 0], b[..., 1]
    a2 = a[..., 2] if a.shape[-1] == 3 else a0 * 0
    b2 = b[..., 2] if b.shape[-1] == 3 else b0 * 0
    c = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])
    return moveaxis(c, 0, axisc)


def vander(x, N=None, increasing: bool = False):
    """The Vandermonde matrix of x: columns x**(N-1), ..., x**0 (increasing powers with
    `increasing`)."""
    check_arraylike("vander", x)
    x = to_kiln(x)
    if x.ndim != 1:
        raise ValueError("x must be a one-dimensional array")
    if isinstance(N, Tracer):
        raise TypeError("The 'N' argument of vander must be static")
    N = x.shape[0] if N is None else operator.index(N)
    if N < 0:
        raise ValueError("N must be nonnegative")
    powers = np.arange(N) if increasing else np.arange(N - 1, -1, -1)
    exponents = asarray(powers.astype(x.dtype if x.dtype != dtypes.bool_ else np.int32))
    return power(x[:, None], exponents[None, :])


def matvec(x1, x2, /):
    """Batched matrix-vector products: x1[..., i, j] x2[..., j]."""
    check_arraylike("matvec", x1, x2)
    return matmul(x1, to_kiln(x2)[..., None])[..., 0]


def vecmat(x1, x2, /):
    """Batched vector-matrix products with the vector conjugated: conj(x1[..., i]) x2[..., i, j]."""
    check_arraylike("vecmat", x1, x2)
    return matmul(conjugate(to_kiln(x1))[..., None, :], x2)[..., 0, :]


# --- convolution (for polynomial products) ---------------------------------------------------
def _full_convolution(a, v):
    """The full discrete convolution of 1-D a and v as one matrix product: out[k] =
    sum_j a[j] v[k - j], with the shifted copies of v gathered by static indices."""
    n, m = a.shape[0], v.shape[0]
    rows = np.arange(n + m - 1)[:, None] - np.arange(n)[None, :]
    valid = (rows >= 0) & (rows < m)
    toeplitz = where(asarray(valid), v[asarray(np.clip(rows, 0, m - 1))], 0)
    return matmul(toeplitz, a)


def convolve_1d(a, v, mode: str = "full"):
    """The discrete linear convolution of two 1-D arrays (polynomial products use it; the
    public kiln.numpy.convolve lives with the other convolutions)."""
    check_arraylike("convolve", a, v)
    a, v = promote_dtypes_inexact(a, v)
    if a.ndim != 1 or v.ndim != 1:
        raise ValueError("convolve() only support 1-dimensional inputs.")
    n, m = a.shape[0], v.shape[0]
    out = _full_convolution(a, v)
    shortest, longest = min(n, m), max(n, m)
    if mode == "same":
        out = out[(shortest - 1) // 2 : (shortest - 1) // 2 + longest]
    elif mode == "valid":
        out = out[shortest - 1 : longest]
    elif mode != "full":
        raise ValueError(f"mode must be one of ['full', 'same', 'valid'], got {mode!r}")
    return out


# --- functional updates -------------------------------------------------------------------------
def put_along_axis(arr, indices, values, axis, inplace: bool = True, *, mode=None):
    """arr with `values` written at `indices` along `axis` (positions matched as in
    take_along_axis); returns a new array, so `inplace=False` is required."""
    if inplace:
        raise ValueError(
            "kiln.numpy.put_along_axis cannot modify arrays in-place, because kiln arrays are "
            "immutable. Pass inplace=False to instead return an updated array."
        )
    check_arraylike("put_along_axis", arr, indices, values)
    arr, indices = to_kiln(arr), to_kiln(indices)
    original_shape = arr.shape
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = normalize_axis(axis, arr.ndim)
    if indices.ndim != arr.ndim:
        raise ValueError(
            "put_along_axis: indices and arr must have the same number of dimensions; "
            f"{indices.ndim} vs. {arr.ndim}"
        )
    shape = np.broadcast_shapes(
        tuple(1 if d == axis else n for d, n in enumerate(arr.shape)),
        tuple(1 if d == axis else n for d, n in enumerate(indices.shape)),
    )
    index_shape = tuple(indices.shape[axis] if d == axis else n for d, n in enumerate(shape))
    index = []
    for d in range(arr.ndim):
        if d == axis:
            index.append(
                lax.broadcast_in_dim(indices, index_shape, tuple(range(arr.ndim)))
                if indices.shape != index_shape
                else indices
            )
        else:
            grid = np.arange(arr.shape[d]).reshape([-1 if k == d else 1 for k in range(arr.ndim)])
            index.append(asarray(grid))
    out = arr.at[tuple(index)].set(values, mode=mode)
    return reshape(out, original_shape)


def fill_diagonal(a, val, wrap: bool = False, *, inplace: bool = True):
    """a with its main diagonal set to `val` (repeated cyclically); returns a new array, so
    `inplace=False` is required."""
    if inplace:
        raise ValueError(
            "kiln.numpy.fill_diagonal cannot modify arrays in-place, because kiln arrays are "
            "immutable. Pass inplace=False to instead return an updated array."
        )
    check_arraylike("fill_diagonal", a, val)
    a = to_kiln(a)
    if a.ndim < 2:
        raise ValueError("array must be at least 2-d")
    if a.ndim > 2 and len(set(a.shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    n = min(a.shape)
    if a.ndim == 2 and wrap and a.shape[0] > a.shape[1]:
        # NumPy's wrapped diagonal: restart after every block of columns + 1 rows.
        rows = np.arange(0, a.shape[0] * a.shape[1], a.shape[1] + 1) // a.shape[1]
        cols = np.arange(0, a.shape[0] * a.shape[1], a.shape[1] + 1) % a.shape[1]
    else:
        rows = cols = np.arange(n)
    count = len(rows)
    val = ravel(to_kiln(val))
    if val.shape[0] == 0:
        return a
    values = val[asarray(np.arange(count) % val.shape[0])]
    index = (asarray(rows), asarray(cols)) + (asarray(np.arange(n)),) * (a.ndim - 2)
    return a.at[index].set(values.astype(a.dtype))


# --- bits ---------------------------------------------------------------------------------------
def _check_bitorder(bitorder: str) -> None:
    if bitorder not in ("little", "big"):
        raise ValueError("'order' must be either 'little' or 'big'")


def packbits(a, axis=None, bitorder: str = "big"):
    """The elements of a (as bits: non-zero is 1) packed 8 to a uint8 along `axis`, padded
    with zero bits."""
    check_arraylike("packbits", a)
    a = to_kiln(a)
    if not (dtypes.is_integer(a.dtype) or a.dtype == dtypes.bool_):
        raise TypeError("Expected an input array of integer or boolean data type")
    _check_bitorder(bitorder)
    bits = lax.convert_element_type(a != 0, dtypes.uint8)
    if axis is None:
        bits, axis = ravel(bits), 0
    bits = swapaxes(bits, axis, -1)
    remainder = bits.shape[-1] % 8
    if remainder:
        widths = [(0, 0, 0)] * (bits.ndim - 1) + [(0, 8 - remainder, 0)]
        bits = lax.pad(bits, lax.full((), 0, dtypes.uint8), widths)
    bits = reshape(bits, bits.shape[:-1] + (bits.shape[-1] // 8, 8))
    shifts = np.arange(8, dtype=np.uint8)
    if bitorder == "big":
        shifts = shifts[::-1]
    packed = _sum(bits << asarray(shifts), axis=-1, dtype=dtypes.uint8)
    return swapaxes(packed, axis, -1)


def unpackbits(a, axis=None, count=None, bitorder: str = "big"):
    """The bits of uint8 elements as uint8 0/1 values, 8 per element along `axis`."""
    check_arraylike("unpackbits", a)
    a = to_kiln(a)
    if a.dtype != dtypes.uint8:
        raise TypeError("Expected an input array of unsigned byte data type")
    _check_bitorder(bitorder)
    masks = (1 << np.arange(8)).astype(np.uint8)
    if bitorder == "big":
        masks = masks[::-1]
    if axis is None:
        a, axis = ravel(a), 0
    a = swapaxes(a, axis, -1)
    bits = lax.convert_element_type((a[..., None] & asarray(masks)) > 0, dtypes.uint8)
    bits = reshape(bits, bits.shape[:-2] + (bits.shape[-2] * 8,))
    if count is not None:
        count = operator.index(count)
        if count > bits.shape[-1]:
            widths = [(0, 0, 0)] * (bits.ndim - 1) + [(0, count - bits.shape[-1], 0)]
            bits = lax.pad(bits, lax.full((), 0, dtypes.uint8), widths)
        else:
            bits = bits[..., : count if count >= 0 else bits.shape[-1] + count]
    return swapaxes(bits, axis, -1)


# --- windows ------------------------------------------------------------------------------------
def _window(name: str, M, formula: Callable):
    if isinstance(M, Tracer):
        raise TypeError(f"The M argument of {name} must be static")
    M = operator.index(M)
    dtype = dtypes.default_float()
    if M <= 0:
        return zeros((0,), dtype)
    if M == 1:
        return full((1,), 1, dtype)
    n = arange(M, dtype=dtype)
    return formula(n, M)


def bartlett(M: int):
    """The Bartlett (triangular) window of M points."""
    return _window("bartlett", M, lambda n, M: 1 - _abs(2 * n + 1 - M) / (M - 1))


def blackman(M: int):
    """The Blackman window of M points."""
    return _window(
        "blackman",
        M,
        lambda n, M: (
            0.42 - 0.5 * cos(2 * np.pi * n / (M - 1)) + 0.08 * cos(4 * np.pi * n / (M - 1))
        ),
    )


def hamming(M: int):
    """The Hamming window of M points."""
    return _window("hamming", M, lambda n, M: 0.54 - 0.46 * cos(2 * np.pi * n / (M - 1)))


def hanning(M: int):
    """The Hann window of M points."""
    return _window("hanning", M, lambda n, M: 0.5 - 0.5 * cos(2 * np.pi * n / (M - 1)))


# --- functional helpers -------------------------------------------------------------------------
def apply_along_axis(func1d: Callable, axis: int, arr, *args, **kwargs):
    """func1d applied to every 1-D slice of arr along `axis` (by vmap over the other axes);
    the slice's result takes the place of the axis."""
    from kiln.transforms.vmap import vmap

    check_arraylike("apply_along_axis", arr)
    arr = to_kiln(arr)
    axis = normalize_axis(axis, arr.ndim)
    fn = lambda x: func1d(x, *args, **kwargs)  # noqa: E731
    for _ in range(axis):
        fn = vmap(fn, in_axes=0, out_axes=0)
    for _ in range(arr.ndim - axis - 1):
        fn = vmap(fn, in_axes=-1, out_axes=-1)
    return fn(arr)


def apply_over_axes(func: Callable, a, axes):
    """func(a, axis) applied for each axis in turn, keeping the result's rank."""
    check_arraylike("apply_over_axes", a)
    a = to_kiln(a)
    for axis in [axes] if isinstance(axes, int) else axes:
        b = func(a, axis)
        if b.ndim == a.ndim:
            a = b
        elif b.ndim == a.ndim - 1:
            a = expand_dims(b, axis)
        else:
            raise ValueError("function is not returning an array of the correct shape")
    return a


def trim_zeros(filt, trim: str = "fb"):
    """filt (1-D, concrete) without its leading ('f') and/or trailing ('b') zeros."""
    check_arraylike("trim_zeros", filt)
    value = concrete_value(filt)
    if value is None:
        from kiln.core.errors import ConcretizationTypeError

        raise ConcretizationTypeError(
            filt, "The error arose in trim_zeros(): the result's length depends on the values.\n"
        )
    if value.ndim != 1:
        raise TypeError(f"trim_zeros requires a 1-D array; got shape {value.shape}")
    nonzero = np.flatnonzero(value)
    if nonzero.size == 0:
        return to_kiln(filt)[:0]
    start = nonzero[0] if "f" in trim.lower() else 0
    stop = nonzero[-1] + 1 if "b" in trim.lower() else value.shape[0]
    return to_kiln(filt)[int(start) : int(stop)]

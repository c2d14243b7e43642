"""kiln.numpy.fft: NumPy's discrete Fourier transforms, built on the `fft` primitive.

Every transform moves its axes to the end, pads or truncates them to the requested lengths,
applies one primitive (up to three axes at a time) and rescales for the `norm` mode.
"""

from __future__ import annotations

import math
import operator
from typing import Sequence

import numpy as np

from kiln import lax
from kiln.core import dtypes
from kiln.numpy.creation import arange, asarray
from kiln.numpy.manipulation_rearrange import pad, roll
from kiln.numpy.manipulation_shape import moveaxis
from kiln.numpy.ufuncs import conjugate
from kiln.numpy.util import check_arraylike, to_kiln
from kiln.primitives.fft import FftType, fft as _lax_fft

__all__ = [
    "fft",
    "ifft",
    "rfft",
    "irfft",
    "hfft",
    "ihfft",
    "fft2",
    "ifft2",
    "rfft2",
    "irfft2",
    "fftn",
    "ifftn",
    "rfftn",
    "irfftn",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
]


def _norm_factor(sizes: Sequence[int], func_name: str, norm: str | None) -> float | None:
    """The factor a result is multiplied by for `norm` (None: no rescaling)."""
    if norm is None or norm == "backward":
        return None
    total = math.prod(sizes)
    inverse = func_name.startswith("i")
    if norm == "ortho":
        root = math.sqrt(total)
        return root if inverse else (1.0 / root if total else 1.0)
    if norm == "forward":
        return float(total) if inverse else (1.0 / total if total else 1.0)
    raise ValueError(f'Invalid norm value {norm}; should be "backward","ortho" or "forward".')


def _transform_nd(x, fft_type: FftType, lengths: tuple):
    """The primitive over the last len(lengths) axes, at most three at a time (beyond three,
    the outer axes get complex transforms of their own, as a separable transform allows)."""
    if len(lengths) <= 3:
        return _lax_fft(x, fft_type, lengths)
    inner = 2 if len(lengths) == 4 else 3
    rank = len(x.shape)
    outer = tuple(range(rank - len(lengths), rank - inner))
    moved = tuple(range(rank - len(lengths) + inner, rank))
    if fft_type in (FftType.FFT, FftType.RFFT):
        x = _lax_fft(x, fft_type, lengths[-inner:])
        x = moveaxis(x, outer, moved)
        x = _transform_nd(x, FftType.FFT, lengths[:-inner])
        return moveaxis(x, moved, outer)
    x = moveaxis(x, outer, moved)
    x = _transform_nd(x, FftType.IFFT, lengths[:-inner])
    x = moveaxis(x, moved, outer)
    return _lax_fft(x, fft_type, lengths[-inner:])


def _fft_core(func_name: str, fft_type: FftType, a, s, axes, norm):
    full_name = f"kiln.numpy.fft.{func_name}"
    check_arraylike(full_name, a)
    arr = to_kiln(a)
    if s is not None:
        s = tuple(operator.index(n) for n in s)
        if any(n <= 0 for n in s):
            raise ValueError("Shape should be positive.")
    if s is not None and axes is not None and len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    given_axes = axes
    if axes is None:
        axes = tuple(range(arr.ndim)) if s is None else tuple(range(arr.ndim - len(s), arr.ndim))
    else:
        axes = tuple(operator.index(ax) for ax in axes)
        for ax in axes:
            if not -arr.ndim <= ax < arr.ndim:
                raise ValueError(f"axis {ax} is out of bounds for array of dimension {arr.ndim}")
        if len({ax % arr.ndim for ax in axes}) != len(axes):
            raise ValueError(f"{full_name} does not support repeated axes. Got axes {axes}.")
    if given_axes is not None:
        target = tuple(range(arr.ndim - len(axes), arr.ndim))
        arr = moveaxis(arr, axes, target)
        axes = target
    if s is not None:
        in_shape = list(arr.shape)
        for ax, n in zip(axes, s):
            in_shape[ax] = n
        if fft_type == FftType.IRFFT:
            in_shape[-1] = in_shape[-1] // 2 + 1
        arr = arr[tuple(slice(n) for n in in_shape)]
        widths = [(0, want - have) for want, have in zip(in_shape, arr.shape)]
        if any(w for _, w in widths):
            arr = pad(arr, widths)
    elif fft_type == FftType.IRFFT:
        s = tuple(arr.shape[ax] for ax in axes[:-1])
        if axes:
            s += (max(0, 2 * (arr.shape[axes[-1]] - 1)),)
    else:
        s = tuple(arr.shape[ax] for ax in axes)
    out = _transform_nd(arr, fft_type, tuple(s))
    factor = _norm_factor(s, func_name, norm)
    if factor is not None:
        out = lax.mul(out, lax.full((), factor, out.dtype))
    if given_axes is not None:
        out = moveaxis(out, axes, given_axes)
    return out


def _check_1d_axis(func_name: str, axis) -> None:
    if isinstance(axis, (list, tuple)):
        name = f"kiln.numpy.fft.{func_name}"
        raise ValueError(
            f"{name} does not support multiple axes. Please use {name}n. Got axis = {axis!r}."
        )


def _fft_core_1d(func_name: str, fft_type: FftType, a, n, axis, norm):
    _check_1d_axis(func_name, axis)
    return _fft_core(
        func_name, fft_type, a, None if n is None else [n], None if axis is None else [axis], norm
    )


def _fft_core_2d(func_name: str, fft_type: FftType, a, s, axes, norm):
    if len(axes) != 2:
        raise ValueError(f"kiln.numpy.fft.{func_name} only supports 2 axes. Got axes = {axes!r}.")
    return _fft_core(func_name, fft_type, a, s, axes, norm)


def fft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The one-dimensional discrete Fourier transform along `axis` (padded/cut to `n`)."""
    return _fft_core_1d("fft", FftType.FFT, a, n, axis, norm)


def ifft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The one-dimensional inverse discrete Fourier transform along `axis`."""
    return _fft_core_1d("ifft", FftType.IFFT, a, n, axis, norm)


def rfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The discrete Fourier transform of a real array: the n // 2 + 1 non-negative
    frequencies."""
    return _fft_core_1d("rfft", FftType.RFFT, a, n, axis, norm)


def irfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The inverse of rfft: a real array of length `n` (default 2 * (m - 1)) from a half
    spectrum of length m."""
    return _fft_core_1d("irfft", FftType.IRFFT, a, n, axis, norm)


def hfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The transform of a signal with Hermitian symmetry given by its half (a real result)."""
    check_arraylike("kiln.numpy.fft.hfft", a)
    _check_1d_axis("hfft", axis)
    conj_a = conjugate(a)
    length = (conj_a.shape[axis] - 1) * 2 if n is None else n
    out = _fft_core_1d("hfft", FftType.IRFFT, conj_a, n, axis, norm)
    return lax.mul(out, lax.full((), length, out.dtype))


def ihfft(a, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The inverse of hfft: the half spectrum of a real signal, conjugated and scaled."""
    check_arraylike("kiln.numpy.fft.ihfft", a)
    _check_1d_axis("ihfft", axis)
    arr = to_kiln(a)
    length = arr.shape[axis] if n is None else n
    out = conjugate(_fft_core_1d("ihfft", FftType.RFFT, arr, n, axis, norm))
    return lax.mul(out, lax.full((), 1.0 / length, out.dtype))


def fft2(a, s=None, axes: Sequence[int] = (-2, -1), norm: str | None = None):
    """The two-dimensional discrete Fourier transform over `axes`."""
    return _fft_core_2d("fft2", FftType.FFT, a, s, axes, norm)


def ifft2(a, s=None, axes: Sequence[int] = (-2, -1), norm: str | None = None):
    """The two-dimensional inverse discrete Fourier transform over `axes`."""
    return _fft_core_2d("ifft2", FftType.IFFT, a, s, axes, norm)


def rfft2(a, s=None, axes: Sequence[int] = (-2, -1), norm: str | None = None):
    """The two-dimensional transform of a real array (half spectrum on the last axis)."""
    return _fft_core_2d("rfft2", FftType.RFFT, a, s, axes, norm)


def irfft2(a, s=None, axes: Sequence[int] = (-2, -1), norm: str | None = None):
    """The inverse of rfft2."""
    return _fft_core_2d("irfft2", FftType.IRFFT, a, s, axes, norm)


def fftn(a, s=None, axes=None, norm: str | None = None):
    """The n-dimensional discrete Fourier transform over `axes` (default: all, or the last
    len(s))."""
    return _fft_core("fftn", FftType.FFT, a, s, axes, norm)


def ifftn(a, s=None, axes=None, norm: str | None = None):
    """The n-dimensional inverse discrete Fourier transform."""
    return _fft_core("ifftn", FftType.IFFT, a, s, axes, norm)


def rfftn(a, s=None, axes=None, norm: str | None = None):
    """The n-dimensional transform of a real array (half spectrum on the last axis)."""
    return _fft_core("rfftn", FftType.RFFT, a, s, axes, norm)


def irfftn(a, s=None, axes=None, norm: str | None = None):
    """The inverse of rfftn."""
    return _fft_core("irfftn", FftType.IRFFT, a, s, axes, norm)


def _check_freq_args(func_name: str, n, d) -> None:
    if isinstance(n, (list, tuple)):
        raise ValueError(
            f"The n argument of kiln.numpy.fft.{func_name} only takes an int. Got n = {list(n)}."
        )
    if isinstance(d, (list, tuple)):
        raise ValueError(
            f"The d argument of kiln.numpy.fft.{func_name} only takes a single value. "
            f"Got d = {list(d)}."
        )


def fftfreq(n: int, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of an n-point fft with sample spacing d: [0, 1, ..., -1] / (d n)."""
    _check_freq_args("fftfreq", n, d)
    n = operator.index(n)
    out_dtype = dtypes.canonicalize(dtype) if dtype is not None else dtypes.default_float()
    work = dtypes.to_inexact(out_dtype)
    index = arange(n, dtype=work)
    k = lax.sub(
        lax.rem(lax.add(index, lax.full((), n // 2, work)), lax.full((), n, work)),
        lax.full((), n // 2, work),
    )
    return lax.convert_element_type(lax.div(k, _denominator(d, n, work)), out_dtype)


def rfftfreq(n: int, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of an n-point rfft: [0, 1, ..., n // 2] / (d n)."""
    _check_freq_args("rfftfreq", n, d)
    n = operator.index(n)
    dtype = dtypes.canonicalize(dtype) if dtype is not None else dtypes.default_float()
    k = arange(0, n // 2 + 1, dtype=dtype)
    work = dtypes.to_inexact(dtype)
    return lax.div(lax.convert_element_type(k, work), _denominator(d, n, work))


def _denominator(d, n: int, dtype):
    """d * n as a rank-0 array of `dtype` (d may be traced)."""
    if isinstance(d, (int, float)):
        return lax.full((), d * n, dtype)
    d = asarray(d)
    if d.ndim:
        raise ValueError("The d argument of fftfreq must be a scalar.")
    return lax.mul(lax.convert_element_type(d, dtype), lax.full((), n, dtype))


def _shifts(x, axes, sign: int):
    if axes is None:
        axes = tuple(range(x.ndim))
        return [sign * (n // 2) for n in x.shape], axes
    if isinstance(axes, (int, np.integer)):
        return sign * (x.shape[axes] // 2), axes
    return [sign * (x.shape[ax] // 2) for ax in axes], tuple(axes)


def fftshift(x, axes=None):
    """Move the zero-frequency term to the centre of the spectrum along `axes` (default:
    all)."""
    check_arraylike("kiln.numpy.fft.fftshift", x)
    x = to_kiln(x)
    shift, axes = _shifts(x, axes, 1)
    return roll(x, shift, axes)


def ifftshift(x, axes=None):
    """The inverse of fftshift."""
    check_arraylike("kiln.numpy.fft.ifftshift", x)
    x = to_kiln(x)
    shift, axes = _shifts(x, axes, -1)
    return roll(x, shift, axes)

"""The fast Fourier transform primitive: complex-to-complex (FFT, IFFT), real-to-complex
(RFFT) and complex-to-real (IRFFT) transforms over the minor `len(fft_lengths)` dimensions.

All four are linear; the real/complex ones have transposes that account for the Hermitian
half-spectrum the RFFT keeps (the entries between DC and Nyquist stand for two). The NumPy
impl computes complex64 in complex64 and complex128 in complex128, as XLA does.
"""

from __future__ import annotations

import enum
import math
import operator

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import deflinear, move_bdim

__all__ = ["fft", "fft_p", "FftType"]


class FftType(enum.IntEnum):
    """Which transform `fft` computes."""

    FFT = 0  # forward, complex to complex
    IFFT = 1  # inverse, complex to complex
    RFFT = 2  # forward, real to complex (the non-negative frequencies of the last axis)
    IRFFT = 3  # inverse, complex (half spectrum) to real

    def __repr__(self) -> str:
        return f"FftType.{self.name}"

    __str__ = __repr__


_TYPE_NAMES = {name.lower(): member for name, member in FftType.__members__.items()}


def _fft_type(value) -> FftType:
    if isinstance(value, FftType):
        return value
    if isinstance(value, str):
        member = _TYPE_NAMES.get(value.lower()) if value in (value.lower(), value.upper()) else None
        if member is None:
            raise ValueError(f"Unknown FFT type '{value}'")
        return member
    raise TypeError(f"Unknown FFT type value '{value}'")


def _complex_of(dtype: np.dtype) -> np.dtype:
    return dtypes.complex128 if dtype in (dtypes.float64, dtypes.complex128) else dtypes.complex64


def _real_of(dtype: np.dtype) -> np.dtype:
    return dtypes.float64 if dtype == dtypes.complex128 else dtypes.float32


# --- fft -------------------------------------------------------------------------------------
fft_p = Primitive("fft")


@fft_p.def_impl
def _fft_impl(x: np.ndarray, *, fft_type, fft_lengths) -> np.ndarray:
    axes = tuple(range(x.ndim - len(fft_lengths), x.ndim))
    if x.size == 0 or 0 in fft_lengths:
        aval = _fft_abstract_eval(ShapedArray(x.shape, x.dtype), fft_type, fft_lengths)
        return np.zeros(aval.shape, aval.dtype)
    if fft_type == FftType.FFT:
        out = np.fft.fftn(x, axes=axes)
    elif fft_type == FftType.IFFT:
        out = np.fft.ifftn(x, axes=axes)
    elif fft_type == FftType.RFFT:
        out = np.fft.rfftn(x, axes=axes)
        return out.astype(_complex_of(x.dtype), copy=False)
    else:
        out = np.fft.irfftn(x, s=fft_lengths, axes=axes)
        return out.astype(_real_of(x.dtype), copy=False)
    return out.astype(x.dtype, copy=False)


@fft_p.def_abstract_eval
def _fft_abstract_eval(x: ShapedArray, fft_type, fft_lengths) -> ShapedArray:
    rank = len(fft_lengths)
    if rank > len(x.shape):
        raise ValueError(
            f"FFT input shape {x.shape} must have at least as many input dimensions as "
            f"fft_lengths {fft_lengths}."
        )
    minor = tuple(x.shape[len(x.shape) - rank :])
    if fft_type == FftType.RFFT:
        if x.dtype not in (dtypes.float32, dtypes.float64):
            raise ValueError(f"RFFT input must be float32 or float64, got {x.dtype}")
        if minor != fft_lengths:
            raise ValueError(
                f"RFFT input shape {x.shape} minor dimensions must be equal to "
                f"fft_lengths {fft_lengths}"
            )
        shape = x.shape[: len(x.shape) - rank] + fft_lengths[:-1] + (fft_lengths[-1] // 2 + 1,)
        return ShapedArray(shape, _complex_of(x.dtype), False)
    if not dtypes.is_complex(x.dtype):
        raise ValueError(f"{fft_type.name} input must be complex64 or complex128, got {x.dtype}")
    if fft_type == FftType.IRFFT:
        if minor[:-1] != fft_lengths[:-1]:
            raise ValueError(
                f"IRFFT input shape {x.shape} minor dimensions must be equal to all except "
                f"the last fft_length, got fft_lengths={fft_lengths}"
            )
        shape = x.shape[: len(x.shape) - rank] + fft_lengths
        return ShapedArray(shape, _real_of(x.dtype), False)
    if minor != fft_lengths:
        raise ValueError(
            f"FFT input shape {x.shape} minor dimensions must be equal to fft_lengths {fft_lengths}"
        )
    return ShapedArray(x.shape, x.dtype, False)


def _half_spectrum_weights(fft_lengths: tuple, dtype: np.dtype, rank: int, reciprocal: bool):
    """Per-entry weights of the half spectrum along the last axis: 1 for DC (and Nyquist for
    an even length), 2 for the entries that stand for a conjugate pair; shaped to broadcast
    against an array of `rank` dimensions. With `reciprocal`, their inverses."""
    from kiln.core.array import Array

    n = fft_lengths[-1]
    weights = np.full(n // 2 + 1, 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    if reciprocal:
        weights = 1.0 / weights
    return Array._wrap(weights.astype(dtype)), rank - 1


def _scale_last_axis(x, weights_and_axis):
    from kiln.primitives.elementwise import mul
    from kiln.primitives.shape import broadcast_in_dim

    weights, axis = weights_and_axis
    return mul(x, broadcast_in_dim(weights, tuple(x.shape), (axis,)))


# The transposes, in JAX's convention for complex linear maps (the plain transpose, no
# conjugation of the matrix). FFT and IFFT are symmetric matrices, so each is its own
# transpose. For RFFT (real x -> complex y = A x) the transpose is Re(A^T ct): an IRFFT of the
# conjugated cotangent, rescaled by N and by the half-spectrum weights, which the IRFFT counts
# twice. For IRFFT the transpose is the RFFT of the cotangent, weighted and scaled by 1/N, then
# conjugated.
def _fft_transpose_rule(ct, x, *, fft_type, fft_lengths):
    from kiln.primitives.elementwise import conj, mul
    from kiln.primitives.base import scalar_to_array

    size = math.prod(fft_lengths)
    rank = len(ct.shape)
    if fft_type == FftType.RFFT:
        weights = _half_spectrum_weights(fft_lengths, ct.dtype, rank, reciprocal=True)
        spectrum = _scale_last_axis(conj(ct), weights)
        out = fft_p.bind(spectrum, fft_type=FftType.IRFFT, fft_lengths=fft_lengths)
        out = mul(out, scalar_to_array(size, out.dtype))
    elif fft_type == FftType.IRFFT:
        spectrum = fft_p.bind(ct, fft_type=FftType.RFFT, fft_lengths=fft_lengths)
        weights = _half_spectrum_weights(fft_lengths, spectrum.dtype, rank, reciprocal=False)
        spectrum = _scale_last_axis(spectrum, weights)
        out = conj(mul(spectrum, scalar_to_array(1.0 / size, spectrum.dtype)))
    else:
        out = fft_p.bind(ct, fft_type=fft_type, fft_lengths=fft_lengths)
    return [out]


deflinear(fft_p, _fft_transpose_rule)


@fft_p.def_batching
def _fft_batching_rule(args, dims, *, fft_type, fft_lengths):
    # The transform acts on the minor dimensions, so a leading batch axis is one more
    # independent transform.
    (x,), (bdim,) = args, dims
    return fft_p.bind(move_bdim(x, bdim, 0), fft_type=fft_type, fft_lengths=fft_lengths), 0


def fft(x, fft_type, fft_lengths):
    """The `fft_type` transform of `x` over its last `len(fft_lengths)` dimensions.

    FFT/IFFT convert `x` to complex; RFFT takes a real `x` (converted to a float type) of minor
    shape `fft_lengths`; IRFFT takes the half spectrum and returns a real array whose minor
    shape is `fft_lengths`. Unnormalized forward, 1/N inverse (NumPy's "backward" norm)."""
    from kiln.primitives.elementwise import convert_element_type

    kind = _fft_type(fft_type)
    fft_lengths = tuple(operator.index(n) for n in fft_lengths)
    dtype = x.dtype if hasattr(x, "dtype") else dtypes.dtype_and_weak_of(x)[0]
    if kind == FftType.RFFT:
        if dtypes.is_complex(dtype):
            raise ValueError("only real valued inputs supported for rfft")
        # float16 and bfloat16 stay as they are, and the primitive rejects them (as XLA).
        target = dtypes.to_inexact(dtype)
    else:
        target = _complex_of(dtypes.to_inexact(dtype))
    x = convert_element_type(x, target, False)
    if not fft_lengths:
        return x
    return fft_p.bind(x, fft_type=kind, fft_lengths=fft_lengths)

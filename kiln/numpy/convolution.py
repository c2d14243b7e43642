"""kiln.numpy.convolve and correlate: one-dimensional convolutions as lax convolutions."""

from __future__ import annotations

from kiln.numpy.util import promote_dtypes, promote_dtypes_inexact
from kiln.primitives.conv import conv_general_dilated
from kiln.primitives.elementwise import conj
from kiln.primitives.shape import reshape, rev

__all__ = ["convolve", "correlate"]


def _convolve_1d(a, v, mode: str, op: str, precision, preferred_element_type):
    if len(getattr(a, "shape", ())) != 1 or len(getattr(v, "shape", ())) != 1:
        raise ValueError(f"{op}() only support 1-dimensional inputs.")
    if preferred_element_type is None:
        # Integers and bools promote to floats, as NumPy's convolutions do.
        a, v = promote_dtypes_inexact(a, v)
    else:
        a, v = promote_dtypes(a, v)
    if a.shape[0] == 0 or v.shape[0] == 0:
        raise ValueError(f"{op}: inputs cannot be empty, got shapes {a.shape} and {v.shape}.")
    reverse_output = False
    if op == "correlate":
        if v.dtype.kind == "c":
            v = conj(v)
        if a.shape[0] < v.shape[0]:
            a, v = v, a
            reverse_output = True
    else:
        if a.shape[0] < v.shape[0]:
            a, v = v, a
        v = rev(v, (0,))
    k = v.shape[0]
    if mode == "valid":
        padding = [(0, 0)]
    elif mode == "same":
        padding = [(k // 2, k - k // 2 - 1)]
    elif mode == "full":
        padding = [(k - 1, k - 1)]
    else:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    out = conv_general_dilated(
        reshape(a, (1, 1, a.shape[0])),
        reshape(v, (1, 1, k)),
        (1,),
        padding,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )
    out = reshape(out, (out.shape[2],))
    if reverse_output:
        out = rev(out, (0,))
    return out


def convolve(a, v, mode: str = "full", *, precision=None, preferred_element_type=None):
    """The discrete linear convolution of two 1-D arrays (NumPy's modes 'full', 'same',
    'valid'); integer inputs give a float result."""
    return _convolve_1d(a, v, mode, "convolve", precision, preferred_element_type)


def correlate(a, v, mode: str = "valid", *, precision=None, preferred_element_type=None):
    """The cross-correlation of two 1-D arrays, sum_n a[n + k] * conj(v[n]) (NumPy's modes)."""
    return _convolve_1d(a, v, mode, "correlate", precision, preferred_element_type)

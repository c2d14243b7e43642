"""Op-record rows of kiln.numpy.fft, checked against numpy.fft (see tests/op_records.py for
the table's conventions). Every transform is linear, normalization included; fftshift and
ifftshift are permutations, so linear too; the frequency grids take no array argument and are
tested in tests/test_fft.py."""

import numpy as np

import kiln.numpy as jnp
from tests._testing import OpRecord

F32, C64, I32 = np.dtype(np.float32), np.dtype(np.complex64), np.dtype(np.int32)
FFT_TOL = {F32: 1e-4, C64: 1e-4}

# name -> (real input allowed, complex input allowed)
_ONE_D = {
    "fft": (True, True),
    "ifft": (True, True),
    "rfft": (True, False),
    "irfft": (False, True),
    "hfft": (False, True),
    "ihfft": (True, False),
}
_N_D = {
    "fft2": (True, True),
    "ifft2": (True, True),
    "rfft2": (True, False),
    "irfft2": (False, True),
    "fftn": (True, True),
    "ifftn": (True, True),
    "rfftn": (True, False),
    "irfftn": (False, True),
}


def _dtypes(real: bool, complex_: bool) -> list:
    return ([F32, I32] if real else []) + ([C64] if complex_ else [])


def _row(name, shapes, dtypes, **kwargs):
    label = name + "".join(f"-{k}={v}" for k, v in kwargs.items())
    return OpRecord(
        f"fft.{label}",
        getattr(jnp.fft, name),
        getattr(np.fft, name),
        shapes,
        dtypes,
        tol=FFT_TOL,
        static_kwargs=kwargs,
    )


def _fft_rows() -> list:
    rows = []
    for name, kinds in _ONE_D.items():
        dtypes = _dtypes(*kinds)
        rows.append(_row(name, [((8,),), ((3, 5),), ((2, 3, 4),)], dtypes))
        rows.append(_row(name, [((4, 6),)], dtypes, n=5, axis=0))
        rows.append(_row(name, [((3, 4),)], dtypes, n=9))
        for norm in ("ortho", "forward"):
            rows.append(_row(name, [((6,),), ((3, 5),)], dtypes, norm=norm))
    for name, kinds in _N_D.items():
        dtypes = _dtypes(*kinds)
        rows.append(_row(name, [((4, 6),), ((2, 3, 4),)], dtypes))
        rows.append(_row(name, [((3, 4, 5),)], dtypes, axes=(0, 2)))
        rows.append(_row(name, [((3, 4, 5),)], dtypes, s=(4, 6), axes=(2, 0)))
        rows.append(_row(name, [((4, 6),)], dtypes, norm="ortho"))
    for name in ("fftn", "ifftn", "rfftn", "irfftn"):
        # more than three axes: the transform is split into several primitives
        rows.append(_row(name, [((2, 3, 2, 3, 2),)], _dtypes(*_N_D[name])))
    for name in ("fftshift", "ifftshift"):
        rows.append(_row(name, [((5,),), ((4, 7),)], [F32, I32, C64]))
        rows.append(_row(name, [((4, 7),)], [F32], axes=1))
        rows.append(_row(name, [((4, 7, 3),)], [F32], axes=(0, 2)))
    return rows


FFT_RECORDS = _fft_rows()
for _record in FFT_RECORDS:
    _record.family = "fft"
    _record.linear = True
    _record.differentiable = True

"""Op-record rows of the kiln.numpy functions added with the Array API names, statistics,
interpolation, finite differences, products and polynomials, checked against NumPy (see
tests/op_records.py for the table's conventions)."""

import numpy as np

import kiln.numpy as jnp
from tests._testing import OpRecord

F32, F16, C64 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.complex64)
I8, I32, U8 = np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.uint8)
BOOL = np.dtype(np.bool_)
TOL = {F32: 1e-4, C64: 1e-4, F16: 1e-2}


def _sorted(shape, dtype, rng):
    """Strictly increasing sample points."""
    steps = rng.uniform(0.5, 1.5, shape)
    return (np.cumsum(steps, axis=-1) - 2).astype(dtype)


def _bits(shape, dtype, rng):
    return rng.integers(0, 2, shape).astype(dtype)


def _row(name, fn, ref, shapes, dtypes, kind="normal", tol=TOL, **kwargs):
    return OpRecord(name, fn, ref, shapes, dtypes, kind=kind, tol=tol, static_kwargs=kwargs)


def _put_along_axis(a, values):
    indices = jnp.asarray(np.array([[2], [0], [1]]))
    return jnp.put_along_axis(a, indices, values, axis=1, inplace=False)


def _np_put_along_axis(a, values):
    out = np.array(a)
    np.put_along_axis(out, np.array([[2], [0], [1]]), values, axis=1)
    return out


def _interp_ref(x, xp, fp, **kwargs):
    return np.interp(x, xp, fp, **kwargs)


# name -> (differentiable, linear)
_FLAGS = {
    "acos": (True, False),
    "asin": (True, False),
    "atan": (True, False),
    "atan2": (True, False),
    "acosh": (True, False),
    "asinh": (True, False),
    "atanh": (True, False),
    "pow": (True, False),
    "bitwise_invert": (False, False),
    "bitwise_left_shift": (False, False),
    "bitwise_right_shift": (False, False),
    "bitwise_count": (False, False),
    "cov": (True, False),
    "corrcoef": (True, False),
    "interp": (True, False),
    "digitize": (False, False),
    "gradient": (True, True),
    "trapezoid": (True, True),
    "unwrap": (True, False),
    "cross": (True, True),
    "vander": (True, False),
    "matvec": (True, True),
    "vecmat": (True, True),
    "polyval": (True, False),
    "polyadd": (True, True),
    "polysub": (True, True),
    "polymul": (True, True),
    "polyder": (True, True),
    "polyint": (True, True),
    "poly": (True, False),
    "put_along_axis": (True, True),
    "isin": (False, False),
    "packbits": (False, False),
    "unpackbits": (False, False),
    "i0": (True, False),
    "spacing": (False, False),
    "histogram2d": (False, False),
    "histogramdd": (False, False),
}


def _histogram2d(x, y, **kwargs):
    return jnp.histogram2d(x, y, **kwargs)


def _np_histogram2d(x, y, **kwargs):
    hist, *edges = np.histogram2d(x, y, **kwargs)
    # Counts are int32, as in JAX (NumPy gives floats); densities stay floats.
    return (hist if kwargs.get("density") else hist.astype(np.int32), *edges)


def _np_histogramdd(sample, **kwargs):
    hist, edges = np.histogramdd(sample, **kwargs)
    return (hist.astype(np.int32), *edges)


def _histogramdd(sample, **kwargs):
    hist, edges = jnp.histogramdd(sample, **kwargs)
    return (hist, *edges)


def _rows() -> list:
    rows = [
        _row("acos", jnp.acos, np.arccos, [((5,),), ((3, 4),)], [F32], kind="unit"),
        _row("asin", jnp.asin, np.arcsin, [((5,),)], [F32], kind="unit"),
        _row("atan", jnp.atan, np.arctan, [((5,),)], [F32]),
        _row("atan2", jnp.atan2, np.arctan2, [((5,), (5,))], [F32], kind="nonzero"),
        _row("acosh", jnp.acosh, np.arccosh, [((5,),)], [F32], kind="ge1"),
        _row("asinh", jnp.asinh, np.arcsinh, [((5,),)], [F32]),
        _row("atanh", jnp.atanh, np.arctanh, [((5,),)], [F32], kind="unit"),
        _row("pow", jnp.pow, np.power, [((5,), (5,))], [F32], kind="positive"),
        _row("bitwise_invert", jnp.bitwise_invert, np.invert, [((5,),)], [I8, U8, BOOL]),
        _row(
            "bitwise_left_shift",
            jnp.bitwise_left_shift,
            np.left_shift,
            [((5,), (5,))],
            [I32],
            kind=("normal", "exponent"),
        ),
        _row(
            "bitwise_right_shift",
            jnp.bitwise_right_shift,
            np.right_shift,
            [((5,), (5,))],
            [I32],
            kind=("normal", "exponent"),
        ),
        _row(
            "bitwise_count",
            jnp.bitwise_count,
            np.bitwise_count,
            [((7,),), ((2, 3),)],
            [I8, U8, I32, BOOL],
        ),
        _row("cov", jnp.cov, np.cov, [((3, 6),), ((6,),)], [F32]),
        _row("cov", jnp.cov, np.cov, [((6, 3),)], [F32], rowvar=False, bias=True),
        _row("cov", jnp.cov, np.cov, [((3, 6),)], [F32], ddof=2),
        _row("cov", jnp.cov, np.cov, [((2, 5), (5,))], [F32]),
        _row("corrcoef", jnp.corrcoef, np.corrcoef, [((3, 6),), ((2, 5), (5,))], [F32]),
        _row(
            "interp",
            jnp.interp,
            _interp_ref,
            [((9,), (6,), (6,)), ((2, 3), (4,), (4,))],
            [F32],
            kind=(lambda s, d, r: r.uniform(-3, 5, s).astype(d), _sorted, "normal"),
        ),
        _row(
            "interp",
            jnp.interp,
            _interp_ref,
            [((9,), (6,), (6,))],
            [F32],
            kind=(lambda s, d, r: r.uniform(-3, 5, s).astype(d), _sorted, "normal"),
            left=-1.0,
            right=2.0,
        ),
        _row(
            "interp",
            jnp.interp,
            _interp_ref,
            [((9,), (6,), (6,))],
            [F32],
            kind=(lambda s, d, r: r.uniform(-3, 8, s).astype(d), _sorted, "normal"),
            period=4.0,
        ),
        _row(
            "digitize",
            jnp.digitize,
            np.digitize,
            [((9,), (4,))],
            [F32, I32],
            kind=("normal", _sorted),
        ),
        _row(
            "digitize",
            jnp.digitize,
            np.digitize,
            [((9,), (4,))],
            [F32],
            kind=("normal", _sorted),
            right=True,
        ),
        _row("gradient", jnp.gradient, np.gradient, [((7,),), ((4, 5),)], [F32]),
        _row("gradient", jnp.gradient, np.gradient, [((4, 5),)], [F32], axis=1),
        _row(
            "gradient", jnp.gradient, np.gradient, [((5,), (5,))], [F32], kind=("normal", _sorted)
        ),
        _row("trapezoid", jnp.trapezoid, np.trapezoid, [((7,),), ((4, 5),)], [F32]),
        _row(
            "trapezoid",
            jnp.trapezoid,
            np.trapezoid,
            [((4, 5), (5,))],
            [F32],
            kind=("normal", _sorted),
        ),
        _row("trapezoid", jnp.trapezoid, np.trapezoid, [((4, 5),)], [F32], dx=0.5, axis=0),
        _row(
            "unwrap",
            jnp.unwrap,
            np.unwrap,
            [((9,),), ((3, 6),)],
            [F32],
            kind=lambda s, d, r: np.cumsum(r.uniform(-2.5, 2.5, s), axis=-1).astype(d),
        ),
        _row(
            "cross",
            jnp.cross,
            np.cross,
            [((3,), (3,)), ((4, 3), (4, 3)), ((2, 3), (3,))],
            [F32, I32],
        ),
        _row("vander", jnp.vander, np.vander, [((4,),)], [F32, I32]),
        _row("vander", jnp.vander, np.vander, [((3,),)], [F32], N=5, increasing=True),
        _row("matvec", jnp.matvec, np.matvec, [((3, 4), (4,)), ((2, 3, 4), (2, 4))], [F32, C64]),
        _row("vecmat", jnp.vecmat, np.vecmat, [((3,), (3, 4)), ((2, 3), (2, 3, 4))], [F32, C64]),
        _row("polyval", jnp.polyval, np.polyval, [((4,), (6,)), ((3,), ())], [F32], kind="small"),
        _row("polyadd", jnp.polyadd, np.polyadd, [((4,), (2,)), ((2,), (5,))], [F32, I32]),
        _row("polysub", jnp.polysub, np.polysub, [((4,), (2,)), ((2,), (5,))], [F32, I32]),
        _row("polymul", jnp.polymul, np.polymul, [((4,), (2,)), ((1,), (3,))], [F32]),
        _row("polyder", jnp.polyder, np.polyder, [((5,),)], [F32]),
        _row("polyder", jnp.polyder, np.polyder, [((5,),)], [F32], m=2),
        _row("polyint", jnp.polyint, np.polyint, [((4,),)], [F32]),
        _row("polyint", jnp.polyint, np.polyint, [((4,),)], [F32], m=2, k=1.5),
        _row("poly", jnp.poly, np.poly, [((3,),)], [F32], kind="small"),
        _row("put_along_axis", _put_along_axis, _np_put_along_axis, [((3, 4), (3, 1))], [F32]),
        _row("isin", jnp.isin, np.isin, [((3, 4), (5,)), ((6,), ())], [I32, F32], kind="small"),
        _row("isin", jnp.isin, np.isin, [((3, 4), (5,))], [I32], kind="small", invert=True),
        _row(
            "packbits",
            jnp.packbits,
            np.packbits,
            [((11,),), ((3, 10),)],
            [BOOL, U8, I32],
            kind=_bits,
        ),
        _row(
            "packbits",
            jnp.packbits,
            np.packbits,
            [((3, 10),)],
            [BOOL],
            kind=_bits,
            axis=1,
            bitorder="little",
        ),
        _row("unpackbits", jnp.unpackbits, np.unpackbits, [((3,),), ((2, 3),)], [U8]),
        _row("unpackbits", jnp.unpackbits, np.unpackbits, [((2, 3),)], [U8], axis=1, count=20),
        _row("i0", jnp.i0, np.i0, [((7,),), ((2, 3),)], [F32]),
        _row("spacing", jnp.spacing, np.spacing, [((7,),)], [F32, F16]),
        _row("histogram2d", _histogram2d, _np_histogram2d, [((20,), (20,))], [F32], bins=4),
        _row(
            "histogram2d",
            _histogram2d,
            _np_histogram2d,
            [((20,), (20,))],
            [F32],
            bins=(3, 2),
            range=((-2, 2), (-1, 3)),
            density=True,
        ),
        _row("histogramdd", _histogramdd, _np_histogramdd, [((30, 3),)], [F32], bins=3),
    ]
    for row in rows:
        row.family = "numpy_extra"
        row.differentiable, row.linear = _FLAGS[row.name]
        row.differentiable = row.differentiable or row.linear
        suffix = "".join(f"-{k}={v}" for k, v in row.static_kwargs.items())
        row.label = f"extra.{row.name}{suffix}"
    return rows


NUMPY_EXTRA_RECORDS = _rows()

"""Op-record rows for convolutions and windowed reductions (pooling), checked against direct
NumPy references written here: a convolution as a loop over kernel taps of shifted slices
(float64, any layout, groups and dilations) and a windowed reduction as a loop over windows."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np

import kiln.numpy as jnp
from kiln import lax
from tests._testing import OpRecord

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
I32 = np.dtype(np.int32)
FLOATS = [F32, F16, BF16]
TOL = {F32: 2e-5, F16: 2e-2, BF16: 1e-1}


# --- references --------------------------------------------------------------------------------


def _canonical_perm(spec: str, pair: str, rhs_spec: str) -> list[int]:
    """(batch-or-out, feature-or-in, spatial... in rhs order) positions in `spec`."""
    spatial = [c for c in rhs_spec if c not in "OI"]
    return [spec.index(pair[0]), spec.index(pair[1])] + [spec.index(c) for c in spatial]


def _same_pads(sizes, extents, strides, lower=False):
    pads = []
    for n, k, s in zip(sizes, extents, strides):
        out = -(-n // s)
        total = max(0, (out - 1) * s + k - n)
        low = total - total // 2 if lower else total // 2
        pads.append((low, total - low))
    return pads


def _dilate_pad(x, dilation, padding, fill):
    """Dilate then pad (negative padding crops) every axis of x, one axis at a time."""
    for axis, (d, (lo, hi)) in enumerate(zip(dilation, padding)):
        if d > 1:
            shape = list(x.shape)
            shape[axis] = max(0, (x.shape[axis] - 1) * d + 1)
            y = np.full(shape, fill, x.dtype)
            index = [slice(None)] * x.ndim
            index[axis] = slice(None, None, d)
            y[tuple(index)] = x
            x = y
        widths = [(0, 0)] * x.ndim
        widths[axis] = (max(lo, 0), max(hi, 0))
        x = np.pad(x, widths, constant_values=fill)
        index = [slice(None)] * x.ndim
        index[axis] = slice(-min(lo, 0), x.shape[axis] + min(hi, 0))
        x = x[tuple(index)]
    return x


def conv_reference(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation=None,
    rhs_dilation=None,
    dimension_numbers=None,
    feature_group_count=1,
    batch_group_count=1,
):
    """XLA's convolution in float64: for every kernel tap, the strided slice of the dilated,
    padded input it meets, contracted with that tap of the kernel, summed over taps."""
    nsp = lhs.ndim - 2
    strides = window_strides
    if dimension_numbers is None:
        chars = "STUVWXYZ"[:nsp]
        dimension_numbers = ("NC" + chars, "OI" + chars, "NC" + chars)
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    wide = np.complex128 if lhs.dtype.kind == "c" else np.float64
    x = np.transpose(lhs, _canonical_perm(lhs_spec, "NC", rhs_spec)).astype(wide)
    w = np.transpose(rhs, _canonical_perm(rhs_spec, "OI", rhs_spec)).astype(wide)
    lhs_dilation = tuple(lhs_dilation or (1,) * nsp)
    rhs_dilation = tuple(rhs_dilation or (1,) * nsp)
    kernel = w.shape[2:]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, rhs_dilation)]
    if isinstance(padding, str):
        padding = (
            [(0, 0)] * nsp
            if padding == "VALID"
            else _same_pads(x.shape[2:], extents, strides, padding == "SAME_LOWER")
        )
    x = _dilate_pad(x, (1, 1) + lhs_dilation, [(0, 0), (0, 0)] + list(padding), 0)
    n, _ = x.shape[:2]
    o, i = w.shape[:2]
    out_spatial = [max(0, (size - e) // s + 1) for size, e, s in zip(x.shape[2:], extents, strides)]
    groups = feature_group_count * batch_group_count
    nb, og = n // batch_group_count, o // groups
    out = np.zeros([nb, o] + out_spatial, wide)
    if 0 not in out_spatial:
        for g in range(groups):
            xs = x[g * nb : (g + 1) * nb] if batch_group_count > 1 else x[:, g * i : (g + 1) * i]
            ws = w[g * og : (g + 1) * og]
            for tap in itertools.product(*(range(k) for k in kernel)):
                start = [t * d for t, d in zip(tap, rhs_dilation)]
                index = (slice(None), slice(None)) + tuple(
                    slice(b, b + (m - 1) * s + 1, s) for b, m, s in zip(start, out_spatial, strides)
                )
                tap_weights = ws[(slice(None), slice(None)) + tap]
                out[:, g * og : (g + 1) * og] += np.einsum(
                    "nc...,oc->no...", xs[index], tap_weights
                )
    return np.transpose(out, np.argsort(_canonical_perm(out_spec, "NC", rhs_spec)))


def reduce_window_reference(
    x, init, op, window, strides, padding, base_dilation=None, window_dilation=None
):
    """A windowed reduction as a loop over output positions and window taps, in float64."""
    ndim = x.ndim
    base_dilation = base_dilation or (1,) * ndim
    window_dilation = window_dilation or (1,) * ndim
    wide = x.astype(np.float64) if x.dtype.kind == "f" or x.dtype == BF16 else x
    if isinstance(padding, str):
        extents = [(w - 1) * d + 1 for w, d in zip(window, window_dilation)]
        padding = [(0, 0)] * ndim if padding == "VALID" else _same_pads(x.shape, extents, strides)
    xp = _dilate_pad(wide, base_dilation, padding, init)
    out_shape = [
        max(0, (xp.shape[i] - ((window[i] - 1) * window_dilation[i] + 1)) // strides[i] + 1)
        for i in range(ndim)
    ]
    out = np.full(out_shape, init, xp.dtype)
    for position in itertools.product(*(range(m) for m in out_shape)):
        acc = init
        for tap in itertools.product(*(range(w) for w in window)):
            acc = op(
                acc,
                xp[
                    tuple(
                        p * s + t * d for p, s, t, d in zip(position, strides, tap, window_dilation)
                    )
                ],
            )
        out[position] = acc
    return out


def patches_reference(x, filter_shape, strides, padding):
    """conv_general_dilated_patches in NCHW: feature c * taps + tap is channel c's tap."""
    taps = int(np.prod(filter_shape))
    channels = x.shape[1]
    kernel = np.zeros((channels * taps, 1) + tuple(filter_shape))
    for c in range(channels):
        for t, tap in enumerate(itertools.product(*(range(k) for k in filter_shape))):
            kernel[(c * taps + t, 0) + tap] = 1
    return conv_reference(x, kernel, strides, padding, feature_group_count=channels)


def conv_transpose_pads(kernel, strides, padding):
    """The forward-padding convention of conv_transpose for 'SAME' and 'VALID'."""
    pads = []
    for k, s in zip(kernel, strides):
        if padding == "SAME":
            total = k + s - 2
            before = k - 1 if s > k - 1 else -(-total // 2)
        else:
            total = k + s - 2 + max(k - s, 0)
            before = k - 1
        pads.append((before, total - before))
    return pads


# --- rows ------------------------------------------------------------------------------------


def _conv_row(name, shapes, dtypes=FLOATS, **conv_kwargs):
    """A conv_general_dilated row with fixed keyword arguments."""

    def fn(lhs, rhs):
        return lax.conv_general_dilated(lhs, rhs, **conv_kwargs)

    def ref(lhs, rhs):
        return conv_reference(lhs, rhs, **conv_kwargs)

    return OpRecord(name, fn, ref, [shapes], dtypes, tol=TOL)


def _conv_transpose_fn(lhs, rhs):
    return lax.conv_transpose(lhs, rhs, (2, 1), "SAME")


def _conv_transpose_ref(lhs, rhs):
    kernel = [rhs.shape[0], rhs.shape[1]]
    pads = conv_transpose_pads(kernel, (2, 1), "SAME")
    return conv_reference(
        lhs, rhs, (1, 1), pads, lhs_dilation=(2, 1), dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


CONV_ROWS = [
    _conv_row(
        "conv_nchw_same",
        ((2, 3, 6, 5), (4, 3, 3, 2)),
        window_strides=(1, 1),
        padding="SAME",
    ),
    _conv_row(
        "conv_strided_valid",
        ((2, 3, 7, 6), (4, 3, 3, 2)),
        window_strides=(2, 3),
        padding="VALID",
    ),
    _conv_row(
        "conv_same_lower",
        ((1, 2, 5, 6), (3, 2, 2, 3)),
        window_strides=(2, 1),
        padding="SAME_LOWER",
    ),
    _conv_row(
        "conv_dilated",
        ((2, 2, 5, 6), (3, 2, 2, 3)),
        window_strides=(1, 2),
        padding=((1, 2), (0, -1)),
        lhs_dilation=(2, 1),
        rhs_dilation=(1, 2),
    ),
    _conv_row(
        "conv_nhwc",
        ((2, 6, 5, 3), (3, 2, 3, 4)),
        window_strides=(2, 2),
        padding="SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    ),
    _conv_row(
        "conv_mixed_layout",
        ((2, 5, 4, 3), (3, 2, 3, 4)),
        window_strides=(1, 1),
        padding="SAME",
        dimension_numbers=("NWHC", "WHIO", "NCHW"),
    ),
    _conv_row(
        "conv_batch_innermost",
        ((5, 6, 4, 2), (3, 2, 5, 4)),
        window_strides=(1, 2),
        padding=((1, 0), (1, 1)),
        dimension_numbers=("CHWN", "HWIO", "NHWC"),
    ),
    _conv_row(
        "conv_kernel_larger_than_output",
        ((2, 7, 6, 3), (5, 5, 3, 2)),
        window_strides=(1, 1),
        padding="VALID",
        rhs_dilation=(1, 1),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    ),
    _conv_row(
        "conv_3d_channels_last",
        ((1, 4, 3, 5, 2), (2, 2, 3, 2, 3)),
        window_strides=(1, 1, 2),
        padding="SAME",
        dimension_numbers=("NDHWC", "DHWIO", "NDHWC"),
    ),
    _conv_row(
        "conv_feature_groups",
        ((2, 4, 5, 5), (6, 2, 3, 3)),
        window_strides=(1, 1),
        padding="SAME",
        feature_group_count=2,
    ),
    _conv_row(
        "conv_batch_groups",
        ((4, 3, 5, 4), (4, 3, 2, 2)),
        window_strides=(1, 2),
        padding="VALID",
        batch_group_count=2,
    ),
    _conv_row(
        "conv_1d_depthwise",
        ((2, 7, 3), (3, 1, 3)),
        window_strides=(2,),
        padding=((2, 2),),
        dimension_numbers=("NHC", "HIO", "NHC"),
        feature_group_count=3,
    ),
    _conv_row(
        "conv_3d",
        ((1, 2, 4, 3, 4), (2, 2, 2, 2, 2)),
        window_strides=(1, 1, 2),
        padding="SAME",
    ),
    _conv_row(
        "conv_int",
        ((1, 2, 4, 4), (2, 2, 2, 2)),
        dtypes=[I32],
        window_strides=(1, 1),
        padding="VALID",
    ),
    OpRecord(
        "conv_transpose",
        _conv_transpose_fn,
        _conv_transpose_ref,
        [((2, 4, 3, 2), (3, 2, 2, 3))],
        FLOATS,
        tol=TOL,
    ),
    OpRecord(
        "conv_general_dilated_patches",
        lambda x: lax.conv_general_dilated_patches(x, (2, 3), (1, 2), "SAME"),
        lambda x: patches_reference(x, (2, 3), (1, 2), "SAME"),
        [((2, 2, 4, 5),)],
        [F32],
        tol=TOL,
    ),
]

CONVOLVE_ROWS = [
    OpRecord(
        f"jnp.{name}-{mode}",
        lambda a, v, _fn=fn, _mode=mode: _fn(a, v, _mode),
        lambda a, v, _ref=ref, _mode=mode: _ref(a.astype(np.float64), v.astype(np.float64), _mode),
        [((7,), (3,)), ((3,), (5,))],
        [F32],
        tol=TOL,
        out_dtype=lambda d: d,
    )
    for name, fn, ref in (
        ("convolve", jnp.convolve, np.convolve),
        ("correlate", jnp.correlate, np.correlate),
    )
    for mode in ("full", "same", "valid")
]


def _pool_row(name, shape, init, op, ref_op, window, strides, padding, dtypes=FLOATS, **dilations):
    def fn(x):
        return lax.reduce_window(x, init, op, window, strides, padding, **dilations)

    def ref(x):
        return reduce_window_reference(x, init, ref_op, window, strides, padding, **dilations)

    return OpRecord(name, fn, ref, [(shape,)], dtypes, tol=TOL)


def _avg_pool(x):
    sums = lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")
    counts = lax.reduce_window(
        jnp.ones(x.shape, x.dtype), 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME"
    )
    return sums / counts


def _avg_pool_ref(x):
    sums = reduce_window_reference(x, 0.0, np.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")
    counts = reduce_window_reference(
        np.ones(x.shape), 0.0, np.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME"
    )
    return sums / counts


POOL_ROWS = [
    _pool_row(
        "max_pool", (2, 6, 6, 3), -np.inf, lax.max, np.maximum, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"
    ),
    _pool_row(
        "max_pool_same",
        (2, 5, 7, 2),
        -np.inf,
        lax.max,
        np.maximum,
        (1, 3, 3, 1),
        (1, 2, 2, 1),
        "SAME",
    ),
    _pool_row(
        "min_pool",
        (3, 7, 5),
        np.inf,
        lax.min,
        np.minimum,
        (1, 3, 2),
        (1, 2, 1),
        ((0, 0), (1, 1), (0, 1)),
    ),
    _pool_row("sum_pool", (2, 6, 5), 0.0, lax.add, np.add, (1, 3, 2), (1, 1, 2), "SAME"),
    _pool_row(
        "sum_pool_dilated",
        (3, 7, 6),
        0.0,
        lax.add,
        np.add,
        (1, 3, 2),
        (1, 2, 1),
        ((0, 0), (1, 2), (0, 1)),
        base_dilation=(1, 1, 2),
        window_dilation=(1, 2, 1),
    ),
    _pool_row(
        "max_pool_dilated",
        (3, 7, 6),
        -np.inf,
        lax.max,
        np.maximum,
        (1, 3, 2),
        (1, 2, 1),
        ((0, 0), (1, 2), (0, 1)),
        base_dilation=(1, 1, 2),
        window_dilation=(1, 2, 1),
    ),
    _pool_row(
        "max_pool_int",
        (2, 5, 4),
        np.iinfo(np.int32).min,
        lax.max,
        np.maximum,
        (1, 2, 2),
        (1, 1, 2),
        "VALID",
        dtypes=[I32],
    ),
    _pool_row(
        "prod_window",
        (2, 5, 4),
        1.0,
        lax.mul,
        np.multiply,
        (1, 2, 2),
        (1, 1, 2),
        "SAME",
        dtypes=[F32],
    ),
    OpRecord("avg_pool", _avg_pool, _avg_pool_ref, [((2, 5, 6, 3),)], FLOATS, tol=TOL),
]

_LINEAR = {r.name for r in CONV_ROWS + CONVOLVE_ROWS} | {"sum_pool", "sum_pool_dilated", "avg_pool"}
_LINEAR -= {"conv_int"}
# prod_window (a traced reducer) has a forward derivative only, as in JAX: tests/test_conv.py.
_DIFFERENTIABLE = _LINEAR | {"max_pool", "max_pool_same", "min_pool", "max_pool_dilated"}


def _same_dtype(dtype):
    return dtype


def _flagged(records):
    for record in records:
        record.family = "conv"
        # The references compute in float64: results keep the arguments' dtype.
        record.out_dtype = record.out_dtype or _same_dtype
        record.linear = record.name in _LINEAR
        record.differentiable = record.name in _DIFFERENTIABLE
    return list(records)


CONV_RECORDS = _flagged(CONV_ROWS + CONVOLVE_ROWS + POOL_ROWS)

"""Convolutions: conv_general_dilated (strides, padding, dilations of either operand, feature and
batch groups, any layout) and the functions built on it (conv, conv_transpose, patches).

The impl is conv_gemm.convolve (im2col fused with BLAS products, split over kiln's threads).
The derivative rules follow XLA's conventions as JAX states them: the transpose with respect to
either operand is again a convolution, with the kernel flipped or the roles of strides and
dilations swapped.
"""

from __future__ import annotations

import operator
from typing import NamedTuple, Sequence

import numpy as np

from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import FLOAT, COMPLEX, INT, check_dtype, check_same_dtypes
from kiln.primitives.base import zeros_like_aval
from kiln.primitives.conv_gemm import _dilate_dim, _dilate_shape, _stride_dim, convolve
from kiln.primitives.conv_gemm import dilate_and_pad  # noqa: F401  (windowed.py uses it)
from kiln.primitives.elementwise import add_any, convert_element_type, eq
from kiln.primitives.shape import broadcast_in_dim, reshape, rev, transpose
from kiln.primitives.shape_slice import broadcasted_iota

__all__ = [
    "ConvDimensionNumbers",
    "conv_dimension_numbers",
    "conv_general_permutations",
    "conv_general_shape_tuple",
    "conv_shape_tuple",
    "padtype_to_pads",
    "conv_general_dilated",
    "conv",
    "conv_with_general_padding",
    "conv_transpose",
    "conv_general_dilated_patches",
    "conv_general_dilated_p",
]


class ConvDimensionNumbers(NamedTuple):
    """Where batch, feature and spatial dimensions are: `lhs_spec` and `out_spec` list
    (batch, feature, spatial...), `rhs_spec` lists (out feature, in feature, spatial...)."""

    lhs_spec: tuple
    rhs_spec: tuple
    out_spec: tuple


# --- shapes and padding ----------------------------------------------------------------------


def padtype_to_pads(in_shape, window_shape, window_strides, padding) -> list[tuple[int, int]]:
    """(low, high) padding per spatial dimension for 'VALID', 'SAME' (the odd unit at the end)
    or 'SAME_LOWER' (at the start)."""
    mode = padding.upper() if isinstance(padding, str) else padding
    if mode not in ("VALID", "SAME", "SAME_LOWER"):
        raise RuntimeError(
            f"Unrecognized padding type: expected 'VALID', 'SAME', or 'SAME_LOWER', got {padding}."
        )
    if mode == "VALID":
        return [(0, 0)] * len(in_shape)
    pads = []
    for size, window, stride in zip(in_shape, window_shape, window_strides):
        out = -(-int(size) // int(stride))
        total = max(0, (out - 1) * int(stride) + int(window) - int(size))
        low = total // 2 if mode == "SAME" else total - total // 2
        pads.append((low, total - low))
    return pads


def conv_general_permutations(dimension_numbers) -> tuple[tuple, tuple, tuple]:
    """The (lhs, rhs, out) permutations that string specs such as ('NHWC', 'HWIO', 'NHWC')
    stand for; spatial dimensions are ordered as they appear in the rhs spec."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    pairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for i, (a, b) in enumerate(pairs):
        spec = dimension_numbers[i]
        if not spec.count(a) == spec.count(b) == 1:
            raise TypeError(
                f"convolution dimension_numbers[{i}] must contain the characters '{a}' and "
                f"'{b}' exactly once, got {spec}."
            )
        if len(spec) != len(set(spec)):
            raise TypeError(
                f"convolution dimension_numbers[{i}] cannot have duplicate characters, got {spec}."
            )
    if not (set(lhs_spec) - {"N", "C"} == set(rhs_spec) - {"O", "I"} == set(out_spec) - {"N", "C"}):
        raise TypeError(
            "convolution dimension_numbers elements must each have the same set of spatial "
            f"characters, got {tuple(dimension_numbers)}."
        )

    def permutation(spec, pair):
        spatial = [i for i, c in enumerate(spec) if c not in pair]
        if spec is not rhs_spec:
            spatial.sort(key=lambda i: rhs_spec.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1])) + tuple(spatial)

    return tuple(permutation(s, p) for s, p in zip(dimension_numbers, pairs))


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers) -> ConvDimensionNumbers:
    """`dimension_numbers` (None, string specs or ConvDimensionNumbers) as ConvDimensionNumbers;
    None means (batch, feature, spatial...) for every operand ('NCHW', 'OIHW', 'NCHW')."""
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return ConvDimensionNumbers(*(tuple(int(d) for d in s) for s in dimension_numbers))
    if len(lhs_shape) != len(rhs_shape):
        raise TypeError(
            "convolution requires lhs and rhs ndim to be equal, got "
            f"{len(lhs_shape)} and {len(rhs_shape)}."
        )
    if dimension_numbers is None:
        iota = tuple(range(len(lhs_shape)))
        return ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, (list, tuple)):
        if len(dimension_numbers) != 3:
            raise TypeError(
                "convolution dimension_numbers list/tuple must be length 3, got "
                f"{len(dimension_numbers)}."
            )
        if not all(isinstance(spec, str) for spec in dimension_numbers):
            raise TypeError(
                "convolution dimension_numbers elements must be strings, got "
                f"{tuple(type(spec) for spec in dimension_numbers)}."
            )
        for i, spec in enumerate(dimension_numbers):
            if len(spec) != len(lhs_shape):
                raise TypeError(
                    f"convolution dimension_numbers[{i}] must have len equal to the ndim of "
                    f"lhs and rhs, got {len(spec)} for lhs and rhs shapes "
                    f"{tuple(lhs_shape)} and {tuple(rhs_shape)}."
                )
        return ConvDimensionNumbers(*conv_general_permutations(tuple(dimension_numbers)))
    raise TypeError(
        f"convolution dimension_numbers must be tuple/list or None, got {type(dimension_numbers)}."
    )


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count: int = 1) -> tuple:
    """The output shape of a convolution of operands in the canonical layout."""
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(
            "Wrong number of explicit pads for convolution: expected "
            f"{len(lhs_shape) - 2}, got {len(pads)}."
        )
    padded = [s + lo + hi for s, (lo, hi) in zip(lhs_shape[2:], pads)]
    if any(p < 0 for p in padded):
        raise ValueError(
            "Negative padding is larger than the size of the corresponding dimension: "
            f"got padding={tuple(pads)} for lhs_shape[2:]={tuple(lhs_shape[2:])}"
        )
    spatial = tuple(_stride_dim(p, k, s) for p, k, s in zip(padded, rhs_shape[2:], strides))
    return (lhs_shape[0] // batch_group_count, rhs_shape[0]) + spatial


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """The output shape of conv_general_dilated without dilations."""
    dnums = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    lhs_t = tuple(lhs_shape[d] for d in dnums.lhs_spec)
    rhs_t = tuple(rhs_shape[d] for d in dnums.rhs_spec)
    out_t = conv_shape_tuple(lhs_t, rhs_t, window_strides, padding)
    return tuple(out_t[i] for i in np.argsort(dnums.out_spec))


# --- conv_general_dilated --------------------------------------------------------------------
conv_general_dilated_p = Primitive("conv_general_dilated")


@conv_general_dilated_p.def_impl
def _conv_general_dilated_impl(lhs, rhs, *, precision=None, **params):
    return convolve(lhs, rhs, **params)  # (precision: NumPy computes at full precision)


@conv_general_dilated_p.def_abstract_eval
def _conv_general_dilated_abstract_eval(
    lhs: ShapedArray,
    rhs: ShapedArray,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count,
    batch_group_count,
    precision=None,
    preferred_element_type=None,
):
    if preferred_element_type is None:
        check_same_dtypes("conv_general_dilated", lhs, rhs)
    check_dtype("conv_general_dilated", lhs.dtype, (INT, FLOAT, COMPLEX))
    check_dtype("conv_general_dilated", rhs.dtype, (INT, FLOAT, COMPLEX))
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    if lhs.ndim != rhs.ndim:
        raise ValueError(
            "conv_general_dilated lhs and rhs must have the same number of dimensions, "
            f"but got {lhs.shape} and {rhs.shape}."
        )
    if lhs.ndim < 2 or not len(lhs_spec) == len(rhs_spec) == len(out_spec) == lhs.ndim:
        raise ValueError(
            f"conv_general_dilated dimension_numbers {tuple(dimension_numbers)} do not fit "
            f"operands of rank {lhs.ndim}."
        )
    if not feature_group_count > 0:
        raise ValueError(
            "conv_general_dilated feature_group_count must be a positive integer, got "
            f"{feature_group_count}."
        )
    lhs_features = lhs.shape[lhs_spec[1]]
    quotient, remainder = divmod(lhs_features, feature_group_count)
    if remainder:
        raise ValueError(
            "conv_general_dilated feature_group_count must divide lhs feature dimension "
            f"size, but {feature_group_count} does not divide {lhs_features}."
        )
    if quotient != rhs.shape[rhs_spec[1]]:
        raise ValueError(
            "conv_general_dilated lhs feature dimension size divided by feature_group_count "
            "must equal the rhs input feature dimension size, but "
            f"{lhs_features} // {feature_group_count} != {rhs.shape[rhs_spec[1]]}."
        )
    if rhs.shape[rhs_spec[0]] % feature_group_count:
        raise ValueError(
            "conv_general_dilated rhs output feature dimension size must be a multiple of "
            f"feature_group_count, but {rhs.shape[rhs_spec[0]]} is not a multiple of "
            f"{feature_group_count}."
        )
    if not batch_group_count > 0:
        raise ValueError(
            "conv_general_dilated batch_group_count must be a positive integer, got "
            f"{batch_group_count}."
        )
    lhs_batch = lhs.shape[lhs_spec[0]]
    if batch_group_count > 1 and lhs_batch % batch_group_count:
        raise ValueError(
            "conv_general_dilated batch_group_count must divide lhs batch dimension size, "
            f"but {batch_group_count} does not divide {lhs_batch}."
        )
    if rhs.shape[rhs_spec[0]] % batch_group_count:
        raise ValueError(
            "conv_general_dilated rhs output feature dimension size must be a multiple of "
            f"batch_group_count, but {rhs.shape[rhs_spec[0]]} is not a multiple of "
            f"{batch_group_count}."
        )
    if batch_group_count > 1 and feature_group_count > 1:
        raise ValueError(
            "At most one of batch_group_count and feature_group_count may be > 1, got "
            f"batch_group_count={batch_group_count} and "
            f"feature_group_count={feature_group_count}"
        )
    nsp = lhs.ndim - 2
    for name, value in (
        ("window_strides", window_strides),
        ("lhs_dilation", lhs_dilation),
        ("rhs_dilation", rhs_dilation),
        ("padding", padding),
    ):
        if len(value) != nsp:
            raise ValueError(
                f"conv_general_dilated window and {name} must have the same number of "
                f"dimensions, but got {nsp} and {len(value)}"
            )
    if not all(s > 0 for s in window_strides):
        raise ValueError(
            f"conv_general_dilated window_strides must be positive, got {window_strides}"
        )
    lhs_t = _dilate_shape(tuple(lhs.shape[d] for d in lhs_spec), lhs_dilation)
    rhs_t = _dilate_shape(tuple(rhs.shape[d] for d in rhs_spec), rhs_dilation)
    out_t = conv_shape_tuple(lhs_t, rhs_t, window_strides, padding, batch_group_count)
    shape = tuple(out_t[i] for i in np.argsort(out_spec))
    dtype = preferred_element_type or lhs.dtype
    return ShapedArray(shape, dtype, lhs.weak_type and rhs.weak_type)


def _as_pairs(padding, what: str) -> tuple:
    try:
        return tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"padding argument to {what} should be a string or a sequence of (low, high) "
            f"pairs, got {padding}"
        ) from err


def conv_general_dilated(
    lhs,
    rhs,
    window_strides: Sequence[int],
    padding,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers=None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision=None,
    preferred_element_type=None,
):
    """A general n-dimensional convolution (cross-correlation, as XLA's Conv): `padding` is
    'SAME', 'SAME_LOWER', 'VALID' or (low, high) pairs; `lhs_dilation` dilates the input (a
    transposed convolution), `rhs_dilation` the kernel (an atrous one); `dimension_numbers`
    gives the layouts, as ConvDimensionNumbers or string specs like ('NHWC', 'HWIO', 'NHWC')."""
    dnums = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    nsp = len(lhs.shape) - 2
    if lhs_dilation is None:
        lhs_dilation = (1,) * nsp
    elif isinstance(padding, str) and any(d != 1 for d in lhs_dilation):
        raise ValueError(
            "String padding is not implemented for transposed convolution using this op. "
            "Please either exactly specify the required padding or use conv_transpose."
        )
    if rhs_dilation is None:
        rhs_dilation = (1,) * nsp
    window_strides = tuple(operator.index(s) for s in window_strides)
    if isinstance(padding, str):
        kernel = [rhs.shape[d] for d in dnums.rhs_spec[2:]]
        extent = [_dilate_dim(k, r) for k, r in zip(kernel, rhs_dilation)]
        in_spatial = [lhs.shape[d] for d in dnums.lhs_spec[2:]]
        padding = padtype_to_pads(in_spatial, extent, window_strides, padding)
    padding = _as_pairs(padding, "conv_general_dilated")
    if preferred_element_type is not None:
        preferred_element_type = dtypes.canonicalize(preferred_element_type)
    return conv_general_dilated_p.bind(
        lhs,
        rhs,
        window_strides=window_strides,
        padding=padding,
        lhs_dilation=tuple(operator.index(d) for d in lhs_dilation),
        rhs_dilation=tuple(operator.index(d) for d in rhs_dilation),
        dimension_numbers=dnums,
        feature_group_count=operator.index(feature_group_count),
        batch_group_count=operator.index(batch_group_count),
        precision=None,
        preferred_element_type=preferred_element_type,
    )


# --- derivative rules --------------------------------------------------------------------------
# The convolution is bilinear. Ignoring space, it contracts [batch, in] with [in, out]; its
# transposes are those of a matrix product: for the lhs, the cotangent [batch, out] times the
# kernel with in/out swapped (and flipped in space); for the rhs, the input with batch and
# feature swapped times the cotangent. Feature groups of one become batch groups of the other.


@conv_general_dilated_p.def_jvp
def _conv_general_dilated_jvp_rule(primals, tangents, **params):
    (lhs, rhs), (lhs_tangent, rhs_tangent) = primals, tangents
    out = conv_general_dilated_p.bind(lhs, rhs, **params)
    out_tangent = None
    if lhs_tangent is not None:
        out_tangent = conv_general_dilated_p.bind(lhs_tangent, rhs, **params)
    if rhs_tangent is not None:
        term = conv_general_dilated_p.bind(lhs, rhs_tangent, **params)
        out_tangent = term if out_tangent is None else add_any(out_tangent, term)
    return out, out_tangent


def _swap_spec(spec) -> tuple:
    return (spec[1], spec[0]) + tuple(spec[2:])


def _reshape_axis_into(src: int, dst: int, x):
    """Merge axis `src` into axis `dst` (numbered with `src` removed), `src` the major part."""
    perm = [d for d in range(len(x.shape)) if d != src]
    perm.insert(dst, src)
    shape = [s for d, s in enumerate(x.shape) if d != src]
    shape[dst] *= x.shape[src]
    return reshape(x, tuple(shape), tuple(perm))


def _reshape_axis_out_of(src: int, size: int, x):
    """Split axis `src` into (size, rest)."""
    shape = list(x.shape)
    shape[src : src + 1] = [size, shape[src] // size]
    return reshape(x, tuple(shape))


def _vjp_lhs_padding(in_shape, kernel, strides, out_shape, padding, lhs_dilation, rhs_dilation):
    lhs_d = _dilate_shape(in_shape, lhs_dilation)
    rhs_d = _dilate_shape(kernel, rhs_dilation)
    out_d = _dilate_shape(out_shape, strides)
    before = [r - lo - 1 for r, (lo, _) in zip(rhs_d, padding)]
    after = [ld + r - 1 - od - b for ld, r, od, b in zip(lhs_d, rhs_d, out_d, before)]
    return tuple(zip(before, after))


def _vjp_rhs_padding(in_shape, kernel, strides, out_shape, padding, lhs_dilation, rhs_dilation):
    if not in_shape:
        return ()
    lhs_d = _dilate_shape(in_shape, lhs_dilation)
    rhs_d = _dilate_shape(kernel, rhs_dilation)
    out_d = _dilate_shape(out_shape, strides)
    lows = [lo for lo, _ in padding]
    highs = [od - ld + r - lo - 1 for od, ld, r, lo in zip(out_d, lhs_d, rhs_d, lows)]
    return tuple(zip(lows, highs))


def _transpose_lhs(ct, lhs_aval, rhs, params):
    dnums = params["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = dnums
    feature_groups, batch_groups = params["feature_group_count"], params["batch_group_count"]
    kernel_shape = tuple(rhs.shape)
    if feature_groups > 1 or batch_groups > 1:
        # The group index moves from the kernel's output features to its input features.
        groups = max(feature_groups, batch_groups)
        rhs = _reshape_axis_out_of(rhs_spec[0], groups, rhs)
        rhs = _reshape_axis_into(rhs_spec[0], rhs_spec[1], rhs)
        feature_groups = groups
    padding = _vjp_lhs_padding(
        tuple(lhs_aval.shape[d] for d in lhs_spec[2:]),
        tuple(kernel_shape[d] for d in rhs_spec[2:]),
        params["window_strides"],
        tuple(ct.shape[d] for d in out_spec[2:]),
        params["padding"],
        params["lhs_dilation"],
        params["rhs_dilation"],
    )
    flipped = rev(rhs, tuple(rhs_spec[2:]))
    if flipped.dtype != ct.dtype:
        flipped = convert_element_type(flipped, ct.dtype)
    out = conv_general_dilated_p.bind(
        ct,
        flipped,
        window_strides=params["lhs_dilation"],
        padding=padding,
        lhs_dilation=params["window_strides"],
        rhs_dilation=params["rhs_dilation"],
        dimension_numbers=ConvDimensionNumbers(out_spec, _swap_spec(rhs_spec), lhs_spec),
        feature_group_count=feature_groups,
        batch_group_count=1,
        precision=None,
        preferred_element_type=params["preferred_element_type"],
    )
    if out.dtype != lhs_aval.dtype:
        out = convert_element_type(out, lhs_aval.dtype)
    if batch_groups > 1:
        out = _reshape_axis_out_of(lhs_spec[1], batch_groups, out)
        out = _reshape_axis_into(lhs_spec[1], lhs_spec[0], out)
    return out


def _transpose_rhs(ct, lhs, rhs_aval, params):
    if 0 in tuple(ct.shape):
        return zeros_like_aval(rhs_aval)
    dnums = params["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = dnums
    feature_groups, batch_groups = params["feature_group_count"], params["batch_group_count"]
    # Feature groups of the forward convolution are batch groups of this one, and vice versa.
    feature_groups, batch_groups = batch_groups, feature_groups
    padding = _vjp_rhs_padding(
        tuple(lhs.shape[d] for d in lhs_spec[2:]),
        tuple(rhs_aval.shape[d] for d in rhs_spec[2:]),
        params["window_strides"],
        tuple(ct.shape[d] for d in out_spec[2:]),
        params["padding"],
        params["lhs_dilation"],
        params["rhs_dilation"],
    )
    if lhs.dtype != ct.dtype:
        lhs = convert_element_type(lhs, ct.dtype)
    out = conv_general_dilated_p.bind(
        lhs,
        ct,
        window_strides=params["rhs_dilation"],
        padding=padding,
        lhs_dilation=params["lhs_dilation"],
        rhs_dilation=params["window_strides"],
        dimension_numbers=ConvDimensionNumbers(
            _swap_spec(lhs_spec), _swap_spec(out_spec), _swap_spec(rhs_spec)
        ),
        feature_group_count=feature_groups,
        batch_group_count=batch_groups,
        precision=None,
        preferred_element_type=params["preferred_element_type"],
    )
    if out.dtype != rhs_aval.dtype:
        out = convert_element_type(out, rhs_aval.dtype)
    return out


@conv_general_dilated_p.def_transpose
def _conv_general_dilated_transpose_rule(ct, lhs, rhs, **params):
    from kiln.core.ad_util import UndefinedPrimal

    if isinstance(lhs, UndefinedPrimal):
        return [_transpose_lhs(ct, lhs.aval, rhs, params), None]
    return [None, _transpose_rhs(ct, lhs, rhs.aval, params)]


@conv_general_dilated_p.def_batching
def _conv_general_dilated_batching_rule(args, dims, **params):
    # The batch axis folds into the lhs batch (lhs batched), the kernel's output features
    # (rhs batched), or, with both batched, into feature groups: one group per example.
    (lhs, rhs), (lhs_bdim, rhs_bdim) = args, dims
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    feature_groups, batch_groups = params["feature_group_count"], params["batch_group_count"]
    size = lhs.shape[lhs_bdim] if lhs_bdim is not None else rhs.shape[rhs_bdim]
    if size == 0:
        lhs_aval = ShapedArray(
            tuple(s for d, s in enumerate(lhs.shape) if d != lhs_bdim), lhs.dtype
        )
        rhs_aval = ShapedArray(
            tuple(s for d, s in enumerate(rhs.shape) if d != rhs_bdim), rhs.dtype
        )
        out = _conv_general_dilated_abstract_eval(lhs_aval, rhs_aval, **params)
        return zeros_like_aval(ShapedArray((0,) + out.shape, out.dtype)), 0

    def bind(new_lhs, new_rhs, **changes):
        return conv_general_dilated_p.bind(new_lhs, new_rhs, **{**params, **changes})

    if lhs_bdim is not None and rhs_bdim is not None:
        if batch_groups > 1:
            new_lhs = _reshape_axis_into(lhs_bdim, lhs_spec[0], lhs)
            changes = {"batch_group_count": batch_groups * size}
        else:
            new_lhs = _reshape_axis_into(lhs_bdim, lhs_spec[1], lhs)
            changes = {"feature_group_count": feature_groups * size}
        new_rhs = _reshape_axis_into(rhs_bdim, rhs_spec[0], rhs)
        out = bind(new_lhs, new_rhs, **changes)
        return _reshape_axis_out_of(out_spec[1], size, out), out_spec[1]
    if lhs_bdim is not None:
        if batch_groups == 1:
            out = bind(_reshape_axis_into(lhs_bdim, lhs_spec[0], lhs), rhs)
            return _reshape_axis_out_of(out_spec[0], size, out), out_spec[0]
        # The batch groups must stay outermost in the lhs batch dimension.
        new_lhs = _reshape_axis_out_of(
            lhs_spec[0] + int(lhs_bdim <= lhs_spec[0]), batch_groups, lhs
        )
        new_lhs = _reshape_axis_into(
            lhs_bdim + int(lhs_spec[0] < lhs_bdim), lhs_spec[0] + 1, new_lhs
        )
        new_lhs = _reshape_axis_into(lhs_spec[0], lhs_spec[0], new_lhs)
        out = bind(new_lhs, rhs)
        return _reshape_axis_out_of(out_spec[0], size, out), out_spec[0]
    if feature_groups == 1 and batch_groups == 1:
        out = bind(lhs, _reshape_axis_into(rhs_bdim, rhs_spec[0], rhs))
        return _reshape_axis_out_of(out_spec[1], size, out), out_spec[1]
    # Groups stay outermost in the kernel's output features: (group, example, features).
    groups = feature_groups if feature_groups > 1 else batch_groups
    new_rhs = _reshape_axis_out_of(rhs_spec[0] + int(rhs_bdim <= rhs_spec[0]), groups, rhs)
    new_rhs = _reshape_axis_into(rhs_bdim + int(rhs_spec[0] < rhs_bdim), rhs_spec[0] + 1, new_rhs)
    new_rhs = _reshape_axis_into(rhs_spec[0], rhs_spec[0], new_rhs)
    out = bind(lhs, new_rhs)
    out = _reshape_axis_out_of(out_spec[1], groups, out)
    out = _reshape_axis_out_of(out_spec[1] + 1, size, out)
    out = _reshape_axis_into(out_spec[1], out_spec[1] + 1, out)
    return out, out_spec[1]


# --- functions built on conv_general_dilated -----------------------------------------------


def conv(
    lhs, rhs, window_strides: Sequence[int], padding, precision=None, preferred_element_type=None
):
    """conv_general_dilated in the NCHW/OIHW layout without dilations."""
    return conv_general_dilated(
        lhs,
        rhs,
        window_strides,
        padding,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def conv_with_general_padding(
    lhs,
    rhs,
    window_strides: Sequence[int],
    padding,
    lhs_dilation: Sequence[int] | None,
    rhs_dilation: Sequence[int] | None,
    precision=None,
    preferred_element_type=None,
):
    """conv_general_dilated in the NCHW/OIHW layout."""
    return conv_general_dilated(
        lhs,
        rhs,
        window_strides,
        padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def _conv_transpose_padding(kernel: int, stride: int, padding) -> tuple[int, int]:
    """The padding of the fractionally strided convolution that transposes a forward one."""
    if padding == "SAME":
        total = kernel + stride - 2
        before = kernel - 1 if stride > kernel - 1 else -(-total // 2)
    elif padding == "VALID":
        total = kernel + stride - 2 + max(kernel - stride, 0)
        before = kernel - 1
    elif isinstance(padding, tuple):
        pads = tuple(kernel - p - 1 for p in padding)
        before, total = pads[0], sum(pads)
    else:
        raise ValueError(f"Invalid padding mode: {padding}")
    return before, total - before


def conv_transpose(
    lhs,
    rhs,
    strides: Sequence[int],
    padding,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers=None,
    transpose_kernel: bool = False,
    precision=None,
    preferred_element_type=None,
    use_consistent_padding: bool = False,
):
    """A fractionally strided (transposed) convolution: the input dilated by `strides`.

    'SAME' and 'VALID' name the padding of the forward convolution this one transposes; pairs
    are this convolution's own padding unless `use_consistent_padding`, when they too are the
    forward one's. The layout defaults to TensorFlow's (NHWC, HWIO, NHWC); `transpose_kernel`
    flips the kernel in space and swaps its feature axes (Keras' Conv2DTranspose)."""
    ndim = len(lhs.shape)
    if len(rhs.shape) != ndim or ndim < 2:
        raise ValueError("conv_transpose needs lhs and rhs of the same rank, at least 2.")
    if dimension_numbers is None:
        defaults = {
            2: ("NC", "IO", "NC"),
            3: ("NHC", "HIO", "NHC"),
            4: ("NHWC", "HWIO", "NHWC"),
            5: ("NHWDC", "HWDIO", "NHWDC"),
        }
        if ndim not in defaults:
            raise ValueError("No 4+ dimensional dimension_number defaults.")
        dimension_numbers = defaults[ndim]
    dnums = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    kernel = [rhs.shape[d] for d in dnums.rhs_spec[2:]]
    if rhs_dilation is None:
        rhs_dilation = (1,) * (ndim - 2)
    if use_consistent_padding or (isinstance(padding, str) and padding in ("SAME", "VALID")):
        per_dim = [padding] * len(strides) if isinstance(padding, str) else list(padding)
        pads = tuple(
            _conv_transpose_padding(_dilate_dim(k, r), s, tuple(p) if not isinstance(p, str) else p)
            for k, r, s, p in zip(kernel, rhs_dilation, strides, per_dim)
        )
    else:
        pads = padding
    if transpose_kernel:
        rhs = rev(rhs, tuple(dnums.rhs_spec[2:]))
        perm = list(range(ndim))
        o, i = dnums.rhs_spec[0], dnums.rhs_spec[1]
        perm[o], perm[i] = perm[i], perm[o]
        rhs = transpose(rhs, tuple(perm))
    return conv_general_dilated(
        lhs,
        rhs,
        (1,) * (ndim - 2),
        pads,
        strides,
        rhs_dilation,
        dnums,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def conv_general_dilated_patches(
    lhs,
    filter_shape: Sequence[int],
    window_strides: Sequence[int],
    padding,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers=None,
    precision=None,
    preferred_element_type=None,
):
    """The patches a convolution with a kernel of `filter_shape` would see, as features: the
    output's feature dimension holds, per input channel, the flattened window (channel-major),
    laid out as the output spec says."""
    filter_shape = tuple(operator.index(k) for k in filter_shape)
    dnums = conv_dimension_numbers(lhs.shape, (1, 1) + filter_shape, dimension_numbers)
    lhs_spec, rhs_spec, _ = dnums
    taps = int(np.prod(filter_shape, dtype=np.int64))
    channels = lhs.shape[lhs_spec[1]]
    # A one-hot kernel per (channel, tap), applied one channel per group.
    eye = eq(
        broadcasted_iota(dtypes.int32, (taps, taps), 0),
        broadcasted_iota(dtypes.int32, (taps, taps), 1),
    )
    eye = convert_element_type(eye, lhs.dtype)
    kernel = broadcast_in_dim(eye, (channels, taps, taps), (1, 2))
    kernel = reshape(kernel, (channels * taps, 1) + filter_shape)
    # Move the output and input feature axes where the rhs spec has them; the spatial axes
    # keep their order.
    out_axis, in_axis = rhs_spec[0], rhs_spec[1]
    rest = iter(range(2, len(kernel.shape)))
    perm = [
        0 if d == out_axis else 1 if d == in_axis else next(rest) for d in range(len(kernel.shape))
    ]
    kernel = transpose(kernel, tuple(perm))
    return conv_general_dilated(
        lhs,
        kernel,
        window_strides,
        padding,
        lhs_dilation,
        rhs_dilation,
        dnums,
        feature_group_count=channels,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )

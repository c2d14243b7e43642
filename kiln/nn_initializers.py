"""kiln.nn.initializers: factories of weight initializers with JAX's signatures.

Each factory returns ``init(key, shape, dtype=...)``; with the same key the values equal JAX's
(kiln.random draws the same bits as JAX's threefry PRNG). Real floating dtypes only: complex
variance scaling is not provided.
"""

from __future__ import annotations

import math
import operator

import numpy as np

import kiln.numpy as jnp
from kiln import random
from kiln.core import dtypes
from kiln.core.shapes import canonicalize_shape

__all__ = [
    "zeros",
    "ones",
    "constant",
    "uniform",
    "normal",
    "truncated_normal",
    "variance_scaling",
    "glorot_uniform",
    "glorot_normal",
    "xavier_uniform",
    "xavier_normal",
    "lecun_uniform",
    "lecun_normal",
    "he_uniform",
    "he_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "orthogonal",
    "delta_orthogonal",
]


def _dtype(dtype) -> np.dtype:
    return dtypes.default_float() if dtype is None else dtypes.canonicalize(dtype)


def _real_float(name: str, dtype: np.dtype) -> None:
    if not np.issubdtype(dtype, np.floating):
        raise NotImplementedError(
            f"kiln.nn.initializers.{name} supports real floating dtypes, got {dtype}"
        )


def zeros(key, shape, dtype=None):
    """An array of zeros; the key is ignored."""
    return jnp.zeros(canonicalize_shape(shape), _dtype(dtype))


def ones(key, shape, dtype=None):
    """An array of ones; the key is ignored."""
    return jnp.ones(canonicalize_shape(shape), _dtype(dtype))


def constant(value, dtype=None):
    """An initializer filling every element with ``value``."""

    def init(key, shape, dtype=dtype):
        return jnp.full(canonicalize_shape(shape), value, dtype=_dtype(dtype))

    return init


def uniform(scale=1e-2, dtype=None):
    """An initializer drawing uniformly from [0, scale)."""

    def init(key, shape, dtype=dtype):
        dtype = _dtype(dtype)
        return random.uniform(key, canonicalize_shape(shape), dtype) * jnp.array(scale, dtype)

    return init


def normal(stddev=1e-2, dtype=None):
    """An initializer drawing from a centred normal of standard deviation ``stddev``."""

    def init(key, shape, dtype=dtype):
        dtype = _dtype(dtype)
        return random.normal(key, canonicalize_shape(shape), dtype) * jnp.array(stddev, dtype)

    return init


def truncated_normal(stddev=1e-2, dtype=None, lower=-2.0, upper=2.0):
    """An initializer drawing a standard normal truncated to [lower, upper], times ``stddev``
    (the truncation is in units of the untruncated standard deviation)."""

    def init(key, shape, dtype=dtype):
        dtype = _dtype(dtype)
        sample = random.truncated_normal(key, lower, upper, canonicalize_shape(shape), dtype)
        return sample * jnp.array(stddev, dtype)

    return init


def _axis_size(shape: tuple, axis) -> int:
    if isinstance(axis, int):
        return shape[axis]
    return math.prod(shape[i] for i in axis)


def _compute_fans(shape: tuple, in_axis, out_axis, batch_axis) -> tuple[float, float]:
    """fan_in and fan_out of a weight: the in/out axis sizes times the receptive field (the
    product of the axes that are neither input, output nor batch)."""
    if isinstance(in_axis, int) and in_axis == -2 and len(shape) <= 1:
        raise ValueError(
            f"Can't compute input and output sizes of a {len(shape)}-dimensional"
            " weights tensor with default in_axis. Must be at least 2D or specify"
            " in_axis explicitly."
        )
    in_size = _axis_size(shape, in_axis)
    out_size = _axis_size(shape, out_axis)
    batch_size = _axis_size(shape, batch_axis)
    receptive_field = math.prod(shape) / in_size / out_size / batch_size
    return in_size * receptive_field, out_size * receptive_field


# Standard deviation of a standard normal truncated to (-2, 2).
_TRUNCATED_STDDEV = 0.87962566103423978


def variance_scaling(
    scale, mode: str, distribution: str, in_axis=-2, out_axis=-1, batch_axis=(), dtype=None
):
    """An initializer with variance ``scale / n``, n the fan chosen by ``mode`` (fan_in,
    fan_out, fan_avg or fan_geo_avg), drawn from ``distribution`` (truncated_normal, normal or
    uniform)."""

    def init(key, shape, dtype=dtype):
        shape = canonicalize_shape(shape)
        dtype = _dtype(dtype)
        fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
        if mode == "fan_in":
            denominator = fan_in
        elif mode == "fan_out":
            denominator = fan_out
        elif mode == "fan_avg":
            denominator = (fan_in + fan_out) / 2
        elif mode == "fan_geo_avg":
            denominator = (fan_in * fan_out) ** 0.5
        else:
            raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
        variance = jnp.array(scale / denominator, dtype=dtype)
        if distribution == "truncated_normal":
            _real_float("variance_scaling", dtype)
            stddev = jnp.sqrt(variance) / jnp.array(_TRUNCATED_STDDEV, dtype)
            return random.truncated_normal(key, -2, 2, shape, dtype) * stddev
        if distribution == "normal":
            _real_float("variance_scaling", dtype)
            return random.normal(key, shape, dtype) * jnp.sqrt(variance)
        if distribution == "uniform":
            _real_float("variance_scaling", dtype)
            return random.uniform(key, shape, dtype, -1) * jnp.sqrt(3 * variance)
        raise ValueError(f"invalid distribution for variance scaling initializer: {distribution}")

    return init


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """Glorot (Xavier) uniform: variance_scaling(1, "fan_avg", "uniform")."""
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """Glorot (Xavier) normal: variance_scaling(1, "fan_avg", "truncated_normal")."""
    return variance_scaling(
        1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis, dtype
    )


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """LeCun uniform: variance_scaling(1, "fan_in", "uniform")."""
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """LeCun normal: variance_scaling(1, "fan_in", "truncated_normal")."""
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """He (Kaiming) uniform: variance_scaling(2, "fan_in", "uniform")."""
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """He (Kaiming) normal: variance_scaling(2, "fan_in", "truncated_normal")."""
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


xavier_uniform = glorot_uniform
xavier_normal = glorot_normal
kaiming_uniform = he_uniform
kaiming_normal = he_normal


def orthogonal(scale=1.0, column_axis: int = -1, dtype=None):
    """An initializer of (semi-)orthogonal matrices: the weight, flattened to
    (prod of the other axes, shape[column_axis]), has orthonormal rows or columns."""

    def init(key, shape, dtype=dtype):
        dtype = _dtype(dtype)
        shape = canonicalize_shape(shape)
        if len(shape) < 2:
            raise ValueError("orthogonal initializer requires at least a 2D shape")
        if any(d == 0 for d in shape):
            return jnp.zeros(shape, dtype=dtype)
        col = operator.index(column_axis)
        n_cols = shape[col]
        n_rows = math.prod(shape) // n_cols
        q = random.orthogonal(key, n_rows, (), dtype, n_cols)
        others = tuple(np.delete(np.array(shape), col).tolist())
        q = jnp.moveaxis(jnp.reshape(q, (*others, n_cols)), -1, col)
        return jnp.array(scale, dtype) * q

    return init


def delta_orthogonal(scale=1.0, column_axis: int = -1, dtype=None):
    """An initializer of delta-orthogonal convolution kernels (3D, 4D or 5D): zero except an
    orthogonal matrix at the spatial centre."""

    def init(key, shape, dtype=dtype):
        dtype = _dtype(dtype)
        shape = canonicalize_shape(shape)
        if len(shape) not in (3, 4, 5):
            raise ValueError("Delta orthogonal initializer requires a 3D, 4D or 5D shape.")
        if shape[-1] < shape[-2]:
            raise ValueError("`fan_in` must be less or equal than `fan_out`. ")
        matrix = orthogonal(scale=scale, column_axis=column_axis, dtype=dtype)(key, shape[-2:])
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        return jnp.zeros(shape, dtype=dtype).at[centre].set(matrix)

    return init

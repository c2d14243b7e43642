"""Stax: neural-network layers as `(init_fun, apply_fun)` pairs, with the interface of JAX's
`jax.example_libraries.stax`, and the weight initializers they use.

    output_shape, params = init_fun(rng, input_shape)
    outputs = apply_fun(params, inputs, rng=key)

`init_fun` works on shapes alone, so a network's parameter shapes are known before any data
is seen; `apply_fun` is a pure function of the parameters and inputs. Combinators (`serial`,
`parallel`) build a layer from layers. A few layers are pairs already (`Relu`, `Flatten`,
`FanInSum`, ...); the others are constructors that take hyperparameters (`Dense(10)`).

Convolutions (GeneralConv, Conv) run on lax.conv_general_dilated and pooling (MaxPool,
SumPool, AvgPool) on lax.reduce_window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import kiln.numpy as jnp
from kiln import lax, nn, random

__all__ = [
    "variance_scaling",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "he_uniform",
    "lecun_normal",
    "normal",
    "uniform",
    "zeros",
    "ones",
    "glorot",
    "randn",
    "Dense",
    "BatchNorm",
    "GeneralConv",
    "Conv",
    "MaxPool",
    "SumPool",
    "AvgPool",
    "elementwise",
    "Tanh",
    "Relu",
    "Exp",
    "LogSoftmax",
    "logsoftmax",
    "Softmax",
    "Softplus",
    "Sigmoid",
    "Elu",
    "LeakyRelu",
    "Selu",
    "Gelu",
    "Flatten",
    "Identity",
    "FanOut",
    "FanInSum",
    "FanInConcat",
    "Dropout",
    "serial",
    "parallel",
    "shape_dependent",
]

Shape = tuple
Initializer = Callable[..., Any]  # (key, shape, dtype=None) -> array
Layer = tuple  # (init_fun, apply_fun)


# --- initializers ----------------------------------------------------------------------------
# Each is JAX's `jax.nn.initializers` function of the same name: `init(key, shape, dtype)`.
# dtype=None means kiln's default float type.

# The standard deviation of a unit normal truncated to [-2, 2]; dividing by it restores the
# requested variance after truncation.
_TRUNCATED_NORMAL_STDDEV = 0.87962566103423978


def _axis_size(shape: Sequence[int], axes: int | Sequence[int]) -> int:
    if isinstance(axes, int):
        return shape[axes]
    return math.prod(shape[axis] for axis in axes)


def _fans(shape: Sequence[int], in_axis, out_axis, batch_axis) -> tuple[float, float]:
    """(fan_in, fan_out): the input and output sizes times the receptive field (the product
    of the axes that are neither input, output nor batch)."""
    if isinstance(in_axis, int) and in_axis == -2 and len(shape) < 2:
        raise ValueError(
            f"cannot tell the input and output sizes of a {len(shape)}-D weight "
            f"of shape {tuple(shape)} with the default in_axis=-2; pass in_axis "
            "and out_axis explicitly."
        )
    in_size = _axis_size(shape, in_axis)
    out_size = _axis_size(shape, out_axis)
    batch_size = _axis_size(shape, batch_axis)
    receptive_field = math.prod(shape) / in_size / out_size / batch_size
    return in_size * receptive_field, out_size * receptive_field


def variance_scaling(
    scale: float,
    mode: str,
    distribution: str,
    in_axis: int | Sequence[int] = -2,
    out_axis: int | Sequence[int] = -1,
    batch_axis: int | Sequence[int] = (),
    dtype=None,
) -> Initializer:
    """An initializer drawing from a distribution of variance `scale / n`, where n is
    fan_in, fan_out, their mean ("fan_avg") or their geometric mean ("fan_geo_avg").

    Args:
      scale: the variance numerator.
      mode: "fan_in", "fan_out", "fan_avg" or "fan_geo_avg".
      distribution: "truncated_normal" (truncated at two standard deviations, rescaled to the
        requested variance), "normal" or "uniform".
      in_axis, out_axis, batch_axis: the weight's input, output and batch axes.
      dtype: the default dtype of the arrays made.

    Raises:
      ValueError: for an unknown `mode` or `distribution`.
    """
    if mode not in ("fan_in", "fan_out", "fan_avg", "fan_geo_avg"):
        raise ValueError(
            f"variance_scaling: unknown mode {mode!r}; use 'fan_in', 'fan_out', "
            "'fan_avg' or 'fan_geo_avg'."
        )
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(
            f"variance_scaling: unknown distribution {distribution!r}; use "
            "'truncated_normal', 'normal' or 'uniform'."
        )
    default_dtype = dtype

    def init(key, shape: Sequence[int], dtype=default_dtype):
        shape = tuple(shape)
        fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
        denominator = {
            "fan_in": fan_in,
            "fan_out": fan_out,
            "fan_avg": (fan_in + fan_out) / 2,
            "fan_geo_avg": math.sqrt(fan_in * fan_out),
        }[mode]
        variance = scale / denominator
        if distribution == "truncated_normal":
            stddev = math.sqrt(variance) / _TRUNCATED_NORMAL_STDDEV
            return random.truncated_normal(key, -2, 2, shape, dtype) * stddev
        if distribution == "normal":
            return random.normal(key, shape, dtype) * math.sqrt(variance)
        return random.uniform(key, shape, dtype, -1) * math.sqrt(3 * variance)

    return init


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """Glorot (Xavier) normal: truncated normal of variance 2 / (fan_in + fan_out)."""
    return variance_scaling(
        1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis, dtype
    )


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """Glorot (Xavier) uniform: uniform of variance 2 / (fan_in + fan_out)."""
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """He (Kaiming) normal: truncated normal of variance 2 / fan_in, suited to ReLU nets."""
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """He (Kaiming) uniform: uniform of variance 2 / fan_in."""
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """LeCun normal: truncated normal of variance 1 / fan_in."""
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def normal(stddev: float = 1e-2, dtype=None) -> Initializer:
    """An initializer drawing from a normal distribution of mean 0 and deviation `stddev`."""
    default_dtype = dtype

    def init(key, shape: Sequence[int], dtype=default_dtype):
        return random.normal(key, tuple(shape), dtype) * stddev

    return init


def uniform(scale: float = 1e-2, dtype=None) -> Initializer:
    """An initializer drawing uniformly from [0, scale)."""
    default_dtype = dtype

    def init(key, shape: Sequence[int], dtype=default_dtype):
        return random.uniform(key, tuple(shape), dtype) * scale

    return init


def zeros(key, shape: Sequence[int], dtype=None):
    """An initializer: an array of zeros (the key is unused)."""
    return jnp.zeros(tuple(shape), dtype)


def ones(key, shape: Sequence[int], dtype=None):
    """An initializer: an array of ones (the key is unused)."""
    return jnp.ones(tuple(shape), dtype)


glorot = glorot_normal
randn = normal


# --- layers with parameters ------------------------------------------------------------------


def Dense(
    out_dim: int, W_init: Initializer = glorot_normal(), b_init: Initializer = normal()
) -> Layer:
    """A fully connected layer: inputs @ W + b, with W of shape (in_dim, out_dim) acting on
    the last axis of the inputs."""

    def init_fun(rng, input_shape: Shape):
        output_shape = tuple(input_shape[:-1]) + (out_dim,)
        w_key, b_key = random.split(rng)
        return output_shape, (W_init(w_key, (input_shape[-1], out_dim)), b_init(b_key, (out_dim,)))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return jnp.dot(inputs, W) + b

    return init_fun, apply_fun


def BatchNorm(
    axis: int | Sequence[int] = (0, 1, 2),
    epsilon: float = 1e-5,
    center: bool = True,
    scale: bool = True,
    beta_init: Initializer = zeros,
    gamma_init: Initializer = ones,
) -> Layer:
    """Batch normalization: standardize over `axis` (the batch statistics of the inputs),
    then scale by gamma and shift by beta, both shaped like the axes not normalized.

    The default axis (0, 1, 2) suits NHWC images; use axis=0 for (batch, features) inputs.
    There are no running averages: each call normalizes with its own batch."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)

    def init_fun(rng, input_shape: Shape):
        kept_shape = tuple(d for i, d in enumerate(input_shape) if i not in axes)
        beta_key, gamma_key = random.split(rng)
        beta = beta_init(beta_key, kept_shape) if center else ()
        gamma = gamma_init(gamma_key, kept_shape) if scale else ()
        return input_shape, (beta, gamma)

    def apply_fun(params, x, **kwargs):
        beta, gamma = params
        # beta and gamma lack the normalized axes; give them size-1 axes there to broadcast.
        broadcast_shape = tuple(1 if i in axes else d for i, d in enumerate(jnp.shape(x)))
        z = nn.standardize(x, axes, epsilon=epsilon)
        if scale:
            z = jnp.reshape(gamma, broadcast_shape) * z
        if center:
            z = z + jnp.reshape(beta, broadcast_shape)
        return z

    return init_fun, apply_fun


# --- convolution and pooling layers --------------------------------------------------------


def GeneralConv(
    dimension_numbers: tuple[str, str, str],
    out_chan: int,
    filter_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
    W_init: Initializer | None = None,
    b_init: Initializer = normal(1e-6),
) -> Layer:
    """A convolution with layouts given as string specs, e.g. ('NHWC', 'HWIO', 'NHWC'):
    `out_chan` output features, a kernel of spatial `filter_shape` (in the order of the
    kernel spec's spatial letters), and a bias per output feature."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    one = (1,) * len(filter_shape)
    strides = tuple(strides) if strides else one
    W_init = W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape: Shape):
        spatial = iter(filter_shape)
        kernel_shape = tuple(
            out_chan
            if c == "O"
            else input_shape[lhs_spec.index("C")]
            if c == "I"
            else next(spatial)
            for c in rhs_spec
        )
        output_shape = lax.conv_general_shape_tuple(
            input_shape, kernel_shape, strides, padding, dimension_numbers
        )
        bias_shape = tuple(out_chan if c == "C" else 1 for c in out_spec)
        w_key, b_key = random.split(rng)
        return output_shape, (W_init(w_key, kernel_shape), b_init(b_key, bias_shape))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        out = lax.conv_general_dilated(
            inputs, W, strides, padding, one, one, dimension_numbers=dimension_numbers
        )
        return out + b

    return init_fun, apply_fun


def Conv(
    out_chan: int,
    filter_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
    W_init: Initializer | None = None,
    b_init: Initializer = normal(1e-6),
) -> Layer:
    """A 2-D convolution on NHWC images with an HWIO kernel (GeneralConv in that layout)."""
    return GeneralConv(
        ("NHWC", "HWIO", "NHWC"), out_chan, filter_shape, strides, padding, W_init, b_init
    )


def _pooling_layer(reducer: Callable, init_value: float, rescaler: Callable | None = None):
    """A pooling layer constructor: `reducer` over windows of `window_shape` of the spatial
    axes; the batch and feature axes are those of `spec` (default: first and last)."""

    def PoolingLayer(
        window_shape: Sequence[int],
        strides: Sequence[int] | None = None,
        padding: str = "VALID",
        spec: str | None = None,
    ) -> Layer:
        window_shape = tuple(window_shape)
        strides = tuple(strides) if strides else (1,) * len(window_shape)
        rescale = rescaler(window_shape, strides, padding) if rescaler else None
        if spec is None:
            non_spatial_axes = (0, len(window_shape) + 1)
        else:
            non_spatial_axes = (spec.index("N"), spec.index("C"))
        dims, steps = window_shape, strides
        for axis in sorted(non_spatial_axes):
            dims = dims[:axis] + (1,) + dims[axis:]
            steps = steps[:axis] + (1,) + steps[axis:]

        def init_fun(rng, input_shape: Shape):
            pads = lax.padtype_to_pads(input_shape, dims, steps, padding)
            return lax.reduce_window_shape_tuple(input_shape, dims, steps, pads), ()

        def apply_fun(params, inputs, **kwargs):
            out = lax.reduce_window(inputs, init_value, reducer, dims, steps, padding)
            return rescale(out, inputs, spec) if rescale else out

        return init_fun, apply_fun

    return PoolingLayer


def _normalize_by_window_size(window_shape, strides, padding):
    """Divide pooled sums by the number of inputs (not padding) each window covered."""

    def rescale(outputs, inputs, spec):
        ndim = len(jnp.shape(inputs))
        if spec is None:
            non_spatial_axes = (0, ndim - 1)
        else:
            non_spatial_axes = (spec.index("N"), spec.index("C"))
        spatial_shape = tuple(
            d for i, d in enumerate(jnp.shape(inputs)) if i not in non_spatial_axes
        )
        ones = jnp.ones(spatial_shape, dtype=inputs.dtype)
        window_sizes = lax.reduce_window(ones, 0.0, lax.add, window_shape, strides, padding)
        for axis in sorted(non_spatial_axes):
            window_sizes = jnp.expand_dims(window_sizes, axis)
        return outputs / window_sizes

    return rescale


MaxPool = _pooling_layer(lax.max, -float("inf"))
SumPool = _pooling_layer(lax.add, 0.0)
AvgPool = _pooling_layer(lax.add, 0.0, _normalize_by_window_size)


# --- elementwise and shape layers ------------------------------------------------------------


def elementwise(fun: Callable, **fun_kwargs) -> Layer:
    """A parameterless layer applying `fun(inputs, **fun_kwargs)`; the shape is unchanged."""

    def init_fun(rng, input_shape: Shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        return fun(inputs, **fun_kwargs)

    return init_fun, apply_fun


Tanh = elementwise(jnp.tanh)
Relu = elementwise(nn.relu)
Exp = elementwise(jnp.exp)
LogSoftmax = elementwise(nn.log_softmax, axis=-1)
logsoftmax = LogSoftmax
Softmax = elementwise(nn.softmax, axis=-1)
Softplus = elementwise(nn.softplus)
Sigmoid = elementwise(nn.sigmoid)
Elu = elementwise(nn.elu)
LeakyRelu = elementwise(nn.leaky_relu)
Selu = elementwise(nn.selu)
Gelu = elementwise(nn.gelu)


def _flatten_init(rng, input_shape: Shape):
    return (input_shape[0], math.prod(input_shape[1:])), ()


def _flatten_apply(params, inputs, **kwargs):
    return jnp.reshape(inputs, (jnp.shape(inputs)[0], -1))


# Flatten keeps the leading (batch) axis and flattens the rest.
Flatten = (_flatten_init, _flatten_apply)

Identity = elementwise(lambda inputs: inputs)


def FanOut(num: int) -> Layer:
    """A layer that passes its input on as a list of `num` copies, for `parallel`."""

    def init_fun(rng, input_shape: Shape):
        return [input_shape] * num, ()

    def apply_fun(params, inputs, **kwargs):
        return [inputs] * num

    return init_fun, apply_fun


def _fan_in_sum_init(rng, input_shapes: Sequence[Shape]):
    return input_shapes[0], ()


def _fan_in_sum_apply(params, inputs, **kwargs):
    total = inputs[0]
    for x in inputs[1:]:
        total = total + x
    return total


# FanInSum adds a list of inputs of one shape, the output of `parallel`.
FanInSum = (_fan_in_sum_init, _fan_in_sum_apply)


def FanInConcat(axis: int = -1) -> Layer:
    """A layer that concatenates a list of inputs along `axis`."""

    def init_fun(rng, input_shapes: Sequence[Shape]):
        first = tuple(input_shapes[0])
        concat_axis = axis % len(first)
        concat_size = sum(shape[concat_axis] for shape in input_shapes)
        return first[:concat_axis] + (concat_size,) + first[concat_axis + 1 :], ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.concatenate(inputs, axis)

    return init_fun, apply_fun


def Dropout(rate: float, mode: str = "train") -> Layer:
    """Dropout, with JAX's stax convention: `rate` is the probability of *keeping* an entry. In
    "train" mode each entry is kept with probability `rate` and scaled by 1 / rate (the others
    are zeroed), so the expected output equals the input; in "test" mode the layer is the
    identity. The apply function needs a key: `apply_fun(params, x, rng=key)`.

    Raises:
      ValueError: if `rate` is outside [0, 1] or `mode` is neither "train" nor "test".
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(
            f"Dropout: rate is the probability of keeping an entry (JAX's stax "
            f"convention) and must lie in [0, 1]; got {rate}."
        )
    if mode not in ("train", "test"):
        raise ValueError(f"Dropout: mode must be 'train' or 'test'; got {mode!r}.")
    keep_rate = rate

    def init_fun(rng, input_shape: Shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        if mode == "test":
            return inputs
        rng = kwargs.get("rng")
        if rng is None:
            raise ValueError(
                "Dropout in 'train' mode needs a PRNG key: call "
                "apply_fun(params, inputs, rng=key) with a key from "
                "kiln.random.PRNGKey, or build the layer with mode='test'."
            )
        if keep_rate == 0.0:
            return jnp.zeros_like(inputs)
        keep = random.bernoulli(rng, keep_rate, jnp.shape(inputs))
        return jnp.where(keep, inputs / keep_rate, 0)

    return init_fun, apply_fun


# --- combinators -----------------------------------------------------------------------------


def _layer_keys(rng, count: int) -> list:
    """One key per sub-layer from `rng`, or None for each when no key was given."""
    if rng is None:
        return [None] * count
    return list(random.split(rng, count))


def serial(*layers: Layer) -> Layer:
    """Compose layers in sequence: the output of each is the input of the next.

    The parameters are a list with one entry per layer. A key given to apply_fun is split
    into one key per layer."""
    init_funs = [init_fun for init_fun, _ in layers]
    apply_funs = [apply_fun for _, apply_fun in layers]

    def init_fun(rng, input_shape: Shape):
        params = []
        shape = input_shape
        for layer_init in init_funs:
            rng, layer_rng = random.split(rng)
            shape, layer_params = layer_init(layer_rng, shape)
            params.append(layer_params)
        return shape, params

    def apply_fun(params, inputs, **kwargs):
        keys = _layer_keys(kwargs.pop("rng", None), len(apply_funs))
        for layer_apply, layer_params, key in zip(apply_funs, params, keys):
            inputs = layer_apply(layer_params, inputs, rng=key, **kwargs)
        return inputs

    return init_fun, apply_fun


def parallel(*layers: Layer) -> Layer:
    """Apply layers side by side: the k-th layer takes the k-th of a list of inputs (and
    input shapes) and gives the k-th output. Use with FanOut and FanInSum/FanInConcat."""
    init_funs = [init_fun for init_fun, _ in layers]
    apply_funs = [apply_fun for _, apply_fun in layers]

    def init_fun(rng, input_shapes: Sequence[Shape]):
        keys = random.split(rng, len(init_funs))
        results = [
            layer_init(key, shape) for layer_init, key, shape in zip(init_funs, keys, input_shapes)
        ]
        return [shape for shape, _ in results], [params for _, params in results]

    def apply_fun(params, inputs, **kwargs):
        keys = _layer_keys(kwargs.pop("rng", None), len(apply_funs))
        return [
            layer_apply(layer_params, x, rng=key, **kwargs)
            for layer_apply, layer_params, x, key in zip(apply_funs, params, inputs, keys)
        ]

    return init_fun, apply_fun


def shape_dependent(make_layer: Callable[[Shape], Layer]) -> Layer:
    """A layer built by `make_layer(input_shape)` once the input shape is known."""

    def init_fun(rng, input_shape: Shape):
        return make_layer(input_shape)[0](rng, input_shape)

    def apply_fun(params, inputs, **kwargs):
        return make_layer(jnp.shape(inputs))[1](params, inputs, **kwargs)

    return init_fun, apply_fun

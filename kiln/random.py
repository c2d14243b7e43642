"""kiln.random: a stateless, splittable PRNG that draws the same numbers as JAX's default.

A key is two uint32 words (legacy raw keys: a uint32[2] array; `key()` makes a typed scalar
key around the same words). Every draw hashes counters with Threefry-2x32 under the key, so
the same key always gives the same numbers and `split`/`fold_in` derive independent keys.
The samplers follow JAX's algorithms step by step, including the way XLA:CPU evaluates
their float arithmetic (see kiln.primitives.random_bits), so their outputs match those of JAX
0.10.2 on an x86 CPU with FMA bit for bit, in every float dtype.

The counter layout depends on `jax_threefry_partitionable` (`kiln.config`). kiln defaults to
False, the layout of the JAX releases the seed documents were written with; JAX 0.10.2 itself
defaults to True. Both layouts are implemented.

The keys (typed and raw, seeding, split, fold_in, bits) live in random_keys.py and the further
samplers in random_samplers.py; both are re-exported here.
"""

from __future__ import annotations

import math
import operator
from typing import Sequence

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln.core import dtypes
from kiln.core.shapes import canonicalize_shape
from kiln.core.trace import Tracer
from kiln.primitives.random_bits import (
    fma,
    threefry_random_bits,
    threefry_split,
    xla_erf,
    xla_erf_inv,
    xla_log,
    xla_log1p,
)
from kiln.random_keys import (  # noqa: F401  (re-exported: moved to random_keys.py)
    _UINT32,
    _UINT_DTYPES,
    _IMPL_NAME,
    _KeyDType,
    KEY_DTYPE,
    PRNGKeyArray,
    _register_key_pytree,
    _check_key,
    _wrap_result,
    _seed_words,
    PRNGKey,
    key,
    _check_impl,
    key_data,
    wrap_key_data,
    key_impl,
    clone,
    split,
    fold_in,
    bits,
)

__all__ = [
    "PRNGKey",
    "key",
    "key_data",
    "wrap_key_data",
    "key_impl",
    "split",
    "fold_in",
    "clone",
    "bits",
    "uniform",
    "normal",
    "randint",
    "bernoulli",
    "choice",
    "permutation",
    "shuffle",
    "categorical",
    "gumbel",
    "truncated_normal",
    "exponential",
    "laplace",
    "logistic",
    "rademacher",
    "PRNGKeyArray",
]


# --- shared checks -----------------------------------------------------------------------------


def _float_dtype(name: str, dtype, allow_complex: bool = False) -> np.dtype:
    dtype = dtypes.default_float() if dtype is None else dtypes.canonicalize(dtype)
    if dtypes.is_floating(dtype) or (allow_complex and dtypes.is_complex(dtype)):
        return dtype
    kind = "a float or complex" if allow_complex else "a float"
    raise ValueError(f"dtype argument to `{name}` must be {kind} dtype, got {dtype.name}")


def _shape_of(x) -> tuple:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def _broadcast_shapes(*shapes) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(
            f"Incompatible shapes for broadcasting: shapes={[tuple(s) for s in shapes]}"
        ) from None


def _check_shape(name: str, shape: tuple, *param_shapes) -> None:
    """Parameters must broadcast to exactly `shape` (they may not enlarge it)."""
    if not param_shapes:
        return
    result = _broadcast_shapes(shape, *param_shapes)
    if result != shape:
        raise ValueError(
            f"{name} parameter shapes must be broadcast-compatible with shape "
            "argument, and the result of broadcasting the shapes must equal the "
            f"shape argument, but got result {result} for shape argument "
            f"{shape}."
        )


def _to_dtype_array(x, dtype):
    """`x` (array, tracer or scalar) converted to `dtype`, not weakly typed."""
    if isinstance(x, (list, tuple)):
        raise TypeError(
            f"kiln.random parameters must be arrays or scalars, got {type(x)}; "
            "convert lists with kiln.numpy.array first."
        )
    return lax.convert_element_type(x, dtype)


def _broadcast(x, shape: tuple):
    return x if tuple(x.shape) == shape else jnp.broadcast_to(x, shape)


# --- uniform and friends -----------------------------------------------------------------------


def _uniform(data, shape: tuple, dtype: np.dtype, minval, maxval):
    """JAX's mantissa trick: random bits fill the mantissa of a float in [1, 2); subtracting 1
    gives [0, 1), which is scaled to [minval, maxval)."""
    minval_value, maxval_value = minval, maxval
    minval = _to_dtype_array(minval, dtype)
    maxval = _to_dtype_array(maxval, dtype)
    # The affine map runs on arrays of the full shape (the parameters broadcast into it).
    out_shape = _broadcast_shapes(shape, minval.shape, maxval.shape)
    if out_shape != shape:
        raise ValueError(
            f"uniform: minval and maxval of shapes {tuple(minval.shape)} and "
            f"{tuple(maxval.shape)} do not broadcast to shape {shape}."
        )
    info = dtypes.finfo(dtype)
    nbits, nmant = info.bits, info.nmant
    rng_bits = 8 if nmant < 8 else nbits
    uint_dtype = _UINT_DTYPES[nbits]
    raw = threefry_random_bits(data, rng_bits, shape)
    if rng_bits != nbits:
        raw = lax.convert_element_type(raw, uint_dtype)
    one_bits = int(np.array(1.0, dtype).view(uint_dtype))
    float_bits = lax.bitwise_or(lax.shift_right_logical(raw, rng_bits - nmant), one_bits)
    one_to_two = lax.bitcast_convert_type(float_bits, dtype)
    low = _broadcast(minval, shape)
    if dtype == dtypes.float16 and _unit_constant_span(minval_value, maxval_value, dtype):
        # XLA folds (x - 1) * 1 + c into x + (c - 1), which rounds differently in float16.
        shift = float(np.array(minval_value, dtype) - np.array(1.0, dtype))
        return lax.max(low, lax.add(one_to_two, shift))
    floats = lax.sub(one_to_two, 1.0)
    span = _broadcast(lax.sub(maxval, minval), shape)
    if dtype == dtypes.bfloat16:
        # XLA:CPU rounds every bfloat16 operation, so nothing is fused here.
        scaled = lax.add(lax.mul(floats, span), low)
    else:
        # A multiply feeding an add becomes one fused multiply-add in XLA:CPU (float16 ones
        # in float32, rounded to float16 once).
        scaled = fma(floats, span, low)
    return lax.max(low, scaled)


def _unit_constant_span(minval, maxval, dtype: np.dtype) -> bool:
    if not all(isinstance(v, (int, float)) for v in (minval, maxval)):
        return False
    return float(np.array(maxval, dtype) - np.array(minval, dtype)) == 1.0


def uniform(key, shape: Sequence[int] = (), dtype=None, minval=0.0, maxval=1.0):
    """Uniform floats in [minval, maxval) (default float32, float64 with x64 on)."""
    data, _ = _check_key("uniform", key)
    dtype = _float_dtype("uniform", dtype)
    shape = canonicalize_shape(shape)
    return _uniform(data, shape, dtype, minval, maxval)


def _normal_real(data, shape: tuple, dtype: np.dtype):
    lowest = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype), dtype=dtype)
    u = _uniform(data, shape, dtype, lowest, 1.0)
    return lax.mul(xla_erf_inv(u), np.array(np.sqrt(2), dtype))


def normal(key, shape: Sequence[int] = (), dtype=None):
    """Standard normal samples: sqrt(2) * erf_inv(u) for u uniform in (-1, 1). A complex
    dtype gives independent real and imaginary parts, each of variance 1/2."""
    data, _ = _check_key("normal", key)
    dtype = _float_dtype("normal", dtype, allow_complex=True)
    shape = canonicalize_shape(shape)
    if dtypes.is_complex(dtype):
        real_dtype = np.dtype(np.float64) if dtype == np.complex128 else dtypes.float32
        key_re, key_im = _split_pair(data)
        re = _normal_real(key_re, shape, real_dtype)
        im = _normal_real(key_im, shape, real_dtype)
        # (re + i im) / sqrt(2), which XLA computes as a product with the rounded 1/sqrt(2).
        scale = np.array(1, real_dtype) / np.array(np.sqrt(2), real_dtype)
        return lax.complex(lax.mul(re, scale), lax.mul(im, scale))
    return _normal_real(data, shape, dtype)


def _split_pair(data):
    pair = threefry_split(data, (2,))
    return pair[0], pair[1]


def truncated_normal(key, lower, upper, shape: Sequence[int] | None = None, dtype=None):
    """Normal samples conditioned on lower < x < upper (by inverting the normal CDF between
    the bounds); the result lies strictly inside the interval."""
    data, _ = _check_key("truncated_normal", key)
    dtype = _float_dtype("truncated_normal", dtype)
    if shape is None:
        shape = _broadcast_shapes(_shape_of(lower), _shape_of(upper))
    else:
        shape = canonicalize_shape(shape)
        _check_shape("truncated_normal", shape, _shape_of(lower), _shape_of(upper))
    sqrt2 = np.array(np.sqrt(2), dtype)
    lower = _to_dtype_array(lower, dtype)
    upper = _to_dtype_array(upper, dtype)
    # XLA:CPU divides by a constant by multiplying with its (rounded) reciprocal.
    inverse_sqrt2 = np.array(1, dtype) / sqrt2
    a = xla_erf(lax.mul(lower, inverse_sqrt2))
    b = xla_erf(lax.mul(upper, inverse_sqrt2))
    u = _uniform(data, shape, dtype, a, b)
    out = lax.mul(xla_erf_inv(u), sqrt2)
    # The clip only keeps rounding inside the open interval: the bounds' derivatives reach the
    # samples through erf alone (nextafter has none), as in JAX.
    above = lax.nextafter(lax.stop_gradient(lower), np.array(np.inf, dtype))
    below = lax.nextafter(lax.stop_gradient(upper), np.array(-np.inf, dtype))
    return jnp.clip(out, above, below)


def exponential(key, shape: Sequence[int] = (), dtype=None):
    """Exponential samples with rate 1: -log(1 - u)."""
    data, _ = _check_key("exponential", key)
    dtype = _float_dtype("exponential", dtype)
    shape = canonicalize_shape(shape)
    u = _uniform(data, shape, dtype, 0.0, 1.0)
    return lax.neg(xla_log1p(lax.neg(u)))


def laplace(key, shape: Sequence[int] = (), dtype=None):
    """Laplace samples (density exp(-|x|) / 2): sign(u) * log(1 - |u|), u in (-1, 1)."""
    data, _ = _check_key("laplace", key)
    dtype = _float_dtype("laplace", dtype)
    shape = canonicalize_shape(shape)
    u = _uniform(data, shape, dtype, -1.0 + float(dtypes.finfo(dtype).epsneg), 1.0)
    return lax.mul(lax.sign(u), xla_log1p(lax.neg(lax.abs(u))))


def logistic(key, shape: Sequence[int] = (), dtype=None):
    """Logistic samples: log(u) - log(1 - u), u in (0, 1)."""
    data, _ = _check_key("logistic", key)
    dtype = _float_dtype("logistic", dtype)
    shape = canonicalize_shape(shape)
    x = _uniform(data, shape, dtype, float(dtypes.finfo(dtype).tiny), 1.0)
    return lax.sub(xla_log(x), xla_log1p(lax.neg(x)))


def gumbel(key, shape: Sequence[int] = (), dtype=None, mode: str | None = None):
    """Gumbel samples: -log(-log(u)). mode "high" (or "highest" for float32) spends more bits
    to reach further into the upper tail."""
    data, _ = _check_key("gumbel", key)
    dtype = _float_dtype("gumbel", dtype)
    shape = canonicalize_shape(shape)
    mode = "low" if mode is None else mode
    if mode not in ("highest", "high", "low"):
        raise ValueError(f"Must provide valid mode for gumbel got: {mode}")
    return _gumbel(data, shape, dtype, mode)


def _gumbel(data, shape: tuple, dtype: np.dtype, mode: str):
    info = dtypes.finfo(dtype)
    if mode == "highest" and dtype == dtypes.float32:
        return _gumbel_highest(data, shape)
    if mode in ("high", "highest"):
        both = _uniform(data, (2, *shape), dtype, 0.0, 1.0)
        high, low = both[0], both[1]
        refined = lax.add(lax.add(high, lax.mul(low, float(2.0**-info.nmant))), float(info.tiny))
        x = lax.select(lax.ge(high, 0.5), high, refined)
        return lax.neg(xla_log(lax.neg(xla_log1p(lax.neg(x)))))
    u = _uniform(data, shape, dtype, float(info.tiny), 1.0)
    return lax.neg(xla_log(lax.neg(xla_log(u))))


def _bits_to_unit_float32(high, low):
    """A float32 in (0, 1) from 64 random bits (high, low), keeping full precision near 0."""
    info = dtypes.finfo(dtypes.float32)
    high_zeros = lax.clz(high)
    low_zeros = lax.clz(low)
    high_is_zero = lax.eq(high_zeros, 32)
    mantissa = lax.bitwise_or(
        lax.shift_left(high, high_zeros),
        lax.select(
            high_is_zero,
            lax.shift_left(low, low_zeros),
            lax.shift_right_logical(low, lax.sub(lax.full_like(high_zeros, 32), high_zeros)),
        ),
    )
    mantissa = lax.shift_right_logical(mantissa, info.bits - info.nmant - 1)
    mantissa = lax.bitwise_and(mantissa, (1 << info.nmant) - 1)
    zeros = lax.select(high_is_zero, lax.add(low_zeros, 32), high_zeros)
    exponent = lax.shift_left(lax.sub(lax.full_like(zeros, -info.minexp), zeros), info.nmant)
    exponent = lax.bitwise_and(exponent, (1 << (info.bits - 2)) - (1 << (info.nmant - 1)))
    return lax.bitcast_convert_type(lax.bitwise_or(exponent, mantissa), dtypes.float32)


def _gumbel_highest(data, shape: tuple):
    raw = threefry_random_bits(data, 32, (2, *shape))
    inverted = lax.bitwise_not(raw)
    low_inverted = inverted[1]
    carry = lax.convert_element_type(lax.eq(low_inverted, 0xFFFFFFFF), _UINT32)
    # 1 - bits as a 64-bit fixed-point number: add one to the low word, carrying into high.
    increment = lax.concatenate(
        [lax.expand_dims(carry, (0,)), lax.full((1, *shape), 1, _UINT32)], 0
    )
    inverted = lax.add(inverted, increment)
    flip = lax.lt(raw[0], 1 << 31)
    chosen = lax.select(
        lax.broadcast_in_dim(flip, (2, *shape), tuple(range(1, len(shape) + 1))), raw, inverted
    )
    x = _bits_to_unit_float32(chosen[0], chosen[1])
    small = lax.neg(xla_log(lax.neg(xla_log1p(lax.neg(x)))))
    large = lax.neg(xla_log(lax.neg(xla_log(x))))
    return lax.select(flip, small, large)


def bernoulli(key, p=0.5, shape: Sequence[int] | None = None, mode: str = "low"):
    """Booleans that are True with probability p (u < p for u uniform in [0, 1))."""
    if mode not in ("high", "low"):
        raise ValueError(f"got mode={mode!r}, expected 'high' or 'low'")
    data, _ = _check_key("bernoulli", key)
    if isinstance(p, (list, tuple)):
        raise TypeError(
            "bernoulli requires p to be an array or scalar, got a "
            f"{type(p).__name__}; convert it with kiln.numpy.array first."
        )
    dtype = dtypes.canonicalize(dtypes.dtype_and_weak_of(p)[0])
    if not dtypes.is_floating(dtype):
        raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {dtype.name}.")
    p = _to_dtype_array(p, dtype)
    if shape is None:
        shape = tuple(p.shape)
    else:
        shape = canonicalize_shape(shape)
        _check_shape("bernoulli", shape, tuple(p.shape))
    p = _broadcast(p, shape)
    if mode == "high":
        both = _uniform(data, (2, *shape), dtype, 0.0, 1.0)
        fine = lax.mul(both[1], float(2.0 ** -dtypes.finfo(dtype).nmant))
        return lax.lt(fine, lax.sub(p, both[0]))
    return lax.lt(_uniform(data, shape, dtype, 0.0, 1.0), p)


def rademacher(key, shape: Sequence[int] = (), dtype=None):
    """-1 or +1 with equal probability (default int32, int64 with x64 on)."""
    data, _ = _check_key("rademacher", key)
    dtype = dtypes.default_int() if dtype is None else dtypes.canonicalize(dtype)
    shape = canonicalize_shape(shape)
    heads = lax.lt(_uniform(data, shape, dtypes.float32, 0.0, 1.0), np.float32(0.5))
    return lax.convert_element_type(
        lax.sub(lax.mul(lax.convert_element_type(heads, dtype), 2), 1), dtype
    )


# --- integers, choices, permutations ----------------------------------------------------------


def _convert_and_clip_integer(x, dtype: np.dtype):
    """An integer array converted to `dtype`, clipped to the values both types can hold."""
    source = np.dtype(x.dtype)
    low = max(int(np.iinfo(dtype).min), int(np.iinfo(source).min))
    high = min(int(np.iinfo(dtype).max), int(np.iinfo(source).max))
    if source != dtype:
        x = lax.clamp(np.array(low, source), x, np.array(high, source))
    return lax.convert_element_type(x, dtype)


def _as_integer_array(x):
    x = jnp.asarray(x)
    if not dtypes.is_integer(x.dtype):
        x = x.astype(dtypes.default_int())
    return x


def randint(key, shape: Sequence[int], minval, maxval, dtype=None):
    """Uniform integers in [minval, maxval) (default int32, int64 with x64 on), by JAX's
    modulus method over twice the dtype's bits; maxval <= minval gives minval."""
    data, _ = _check_key("randint", key)
    dtype = dtypes.default_int() if dtype is None else dtypes.canonicalize(dtype)
    if not dtypes.is_integer(dtype):
        raise TypeError(f"randint only accepts integer dtypes, got {dtype.name}")
    shape = canonicalize_shape(shape)
    for name, value in (("minval", minval), ("maxval", maxval)):
        if isinstance(value, (list, tuple)):
            raise TypeError(
                f"randint requires {name} to be an array or scalar, got a "
                f"{type(value).__name__}; convert it with kiln.numpy.array first."
            )
    info = np.iinfo(dtype)
    sample_dtype = dtype
    if info.bits < 32:
        # Narrow types are drawn as int32 and converted, which keeps the modulus bias small.
        sample_dtype = dtypes.int32
        minval = jnp.clip(jnp.asarray(minval).astype(dtypes.int32), int(info.min), int(info.max))
        maxval = jnp.clip(
            jnp.asarray(maxval).astype(dtypes.int32), int(info.min), int(info.max) + 1
        )
    out = _randint(data, shape, minval, maxval, sample_dtype)
    return out if sample_dtype == dtype else lax.convert_element_type(out, dtype)


def _randint(data, shape: tuple, minval, maxval, dtype: np.dtype):
    _check_shape("randint", shape, _shape_of(minval), _shape_of(maxval))
    minval = _as_integer_array(minval)
    maxval = _as_integer_array(maxval)
    # maxval beyond the dtype's range (randint(k, s, 0, 256, uint8)) widens the span by one.
    top = _convert_and_clip_integer(
        jnp.asarray(np.array(np.iinfo(dtype).max, dtype)), np.dtype(maxval.dtype)
    )
    maxval_out_of_range = _broadcast(lax.gt(maxval, top), shape)
    minval = _broadcast(_convert_and_clip_integer(minval, dtype), shape)
    maxval = _broadcast(_convert_and_clip_integer(maxval, dtype), shape)
    nbits = np.iinfo(dtype).bits
    k1, k2 = _split_pair(data)
    higher_bits = threefry_random_bits(k1, nbits, shape)
    lower_bits = threefry_random_bits(k2, nbits, shape)
    unsigned = _UINT_DTYPES[nbits]
    span = lax.convert_element_type(lax.sub(maxval, minval), unsigned)
    span = lax.select(lax.le(maxval, minval), lax.full_like(span, 1), span)
    span = lax.select(
        lax.bitwise_and(maxval_out_of_range, lax.gt(maxval, minval)), lax.add(span, 1), span
    )
    # (high * 2**nbits + low) mod span, without 2*nbits-bit arithmetic: 2**nbits mod span is
    # (2**(nbits/2) mod span)**2 mod span (JAX's formula, unsigned overflow included).
    multiplier = lax.rem(lax.full_like(span, 2 ** (nbits // 2)), span)
    multiplier = lax.rem(lax.mul(multiplier, multiplier), span)
    offset = lax.add(lax.mul(lax.rem(higher_bits, span), multiplier), lax.rem(lower_bits, span))
    offset = lax.rem(offset, span)
    return lax.add(minval, lax.convert_element_type(offset, dtype))


def _shuffle(data, x, axis: int):
    """Sort by fresh random 32-bit keys, enough rounds that ties are unlikely (JAX's
    rule: ceil(3 * ln(n) / ln(2**32 - 1)) rounds)."""
    size = math.prod(x.shape)
    rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        pair = threefry_split(data, (2,))
        data, subkey = pair[0], pair[1]
        sort_keys = threefry_random_bits(subkey, 32, tuple(x.shape))
        _, x = lax.sort_key_val(sort_keys, x, axis)
    return x


def _normalize_axis(axis: int, ndim: int) -> int:
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


def permutation(key, x, axis: int = 0, independent: bool = False):
    """A random permutation of arange(x) for an integer x, or of x along `axis` (each slice
    shuffled separately when `independent`)."""
    data, _ = _check_key("permutation", key)
    if isinstance(x, (list, tuple)):
        raise TypeError(
            "permutation requires ndarray or scalar arguments, got "
            f"{type(x)}; convert it with kiln.numpy.array first."
        )
    ndim = x.ndim if hasattr(x, "ndim") else np.ndim(x)
    axis = _normalize_axis(axis, ndim or 1)
    if not ndim:
        dtype = np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype
        if dtype.kind not in "iu":
            raise TypeError("x must be an integer or at least 1-dimensional")
        if isinstance(x, Tracer):
            raise TypeError(
                "permutation of an integer needs a concrete value (it is the "
                "length of the result); pass it as a static argument."
            )
        return _shuffle(data, jnp.arange(int(x)), axis)
    x = jnp.asarray(x)
    if independent or ndim == 1:
        return _shuffle(data, x, axis)
    order = _shuffle(data, jnp.arange(x.shape[axis]), 0)
    return jnp.take(x, order, axis, unique_indices=True)


def shuffle(key, x, axis: int = 0):
    """Shuffle every slice along `axis` independently (JAX's removed `shuffle`; prefer
    `permutation(key, x, axis, independent=True)`)."""
    data, _ = _check_key("shuffle", key)
    x = jnp.asarray(x)
    return _shuffle(data, x, _normalize_axis(axis, x.ndim))


def choice(
    key,
    a,
    shape: Sequence[int] = (),
    replace: bool = True,
    p=None,
    axis: int = 0,
    mode: str | None = None,
):
    """Draw from the entries of `a` along `axis` (or from arange(a) for an integer a), with or
    without replacement, uniformly or with probabilities `p`."""
    data, _ = _check_key("choice", key)
    if not isinstance(shape, Sequence):
        raise TypeError(f"shape argument of jax.random.choice must be a sequence, got {shape}")
    if isinstance(a, (list, tuple)):
        raise TypeError(
            "choice requires ndarray or scalar arguments, got "
            f"{type(a)}; convert it with kiln.numpy.array first."
        )
    shape = canonicalize_shape(shape)
    arr = jnp.asarray(a)
    if arr.ndim == 0:
        if isinstance(a, Tracer):
            raise TypeError(
                "choice of an integer population needs a concrete value; pass "
                "it as a static argument."
            )
        n_inputs = int(a)
    else:
        axis = _normalize_axis(axis, arr.ndim)
        n_inputs = arr.shape[axis]
    n_draws = math.prod(shape)
    if n_draws == 0:
        return jnp.zeros(shape, dtype=arr.dtype)
    if n_inputs <= 0:
        raise ValueError("a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(
            f"Cannot take a larger sample (size {n_draws}) than population "
            f"(size {n_inputs}) when 'replace=False'"
        )
    if p is None:
        if replace:
            index = randint(data, shape, 0, n_inputs)
            result = index if arr.ndim == 0 else jnp.take(arr, index, axis)
        else:
            shuffled = permutation(data, n_inputs if arr.ndim == 0 else arr, axis)
            result = lax.slice_in_dim(shuffled, 0, n_draws, axis=axis)
    else:
        if isinstance(p, (list, tuple)):
            raise TypeError(
                "choice requires p to be an array, got a "
                f"{type(p).__name__}; convert it with kiln.numpy.array first."
            )
        p_arr = jnp.asarray(p)
        if not dtypes.is_inexact(p_arr.dtype):
            p_arr = p_arr.astype(dtypes.default_float())
        if tuple(p_arr.shape) != (n_inputs,):
            raise ValueError(
                "p must be None or a 1D vector with the same size as "
                f"a.shape[axis]. p has shape {tuple(p_arr.shape)} and "
                f"a.shape[axis] is {n_inputs}."
            )
        if replace:
            cumulative = jnp.cumsum(p_arr)
            u = _uniform(data, shape, np.dtype(cumulative.dtype), 0.0, 1.0)
            r = lax.mul(cumulative[-1], lax.sub(lax.full_like(u, 1), u))
            index = jnp.searchsorted(cumulative, r).astype(dtypes.default_int())
        else:
            g = lax.add(
                _gumbel(data, (n_inputs,), np.dtype(p_arr.dtype), mode or "low"), xla_log(p_arr)
            )
            index = lax.top_k(g, n_draws)[1].astype(dtypes.default_int())
        result = index if arr.ndim == 0 else jnp.take(arr, index, axis)
    out_shape = shape if arr.ndim == 0 else (*arr.shape[:axis], *shape, *arr.shape[axis + 1 :])
    return result.reshape(out_shape)


def categorical(
    key,
    logits,
    axis: int = -1,
    shape: Sequence[int] | None = None,
    replace: bool = True,
    mode: str | None = None,
):
    """Indices drawn from softmax(logits) along `axis` (the Gumbel-max trick; without
    replacement, the Gumbel top-k trick)."""
    data, _ = _check_key("categorical", key)
    if isinstance(logits, (list, tuple)):
        raise TypeError(
            "categorical requires ndarray or scalar arguments, got "
            f"{type(logits)}; convert it with kiln.numpy.array first."
        )
    logits = jnp.asarray(logits)
    axis = operator.index(axis)
    _normalize_axis(axis, logits.ndim)
    batch_shape = tuple(np.delete(np.array(logits.shape, dtype=np.int64), axis).tolist())
    if shape is None:
        shape = batch_shape
    else:
        shape = canonicalize_shape(shape)
        _check_shape("categorical", shape, batch_shape)
    mode = "low" if mode is None else mode
    if mode not in ("highest", "high", "low"):
        raise ValueError(f"Must provide valid mode for gumbel got: {mode}")
    dtype = np.dtype(logits.dtype)
    if not dtypes.is_floating(dtype):
        raise ValueError(f"categorical requires floating logits, got {dtype.name}")
    prefix = shape[: len(shape) - len(batch_shape)]
    if replace:
        if axis >= 0:
            axis -= logits.ndim
        noise_shape = list(shape[len(shape) - len(batch_shape) :])
        noise_shape.insert(axis % logits.ndim, logits.shape[axis])
        noise = _gumbel(data, (*prefix, *noise_shape), dtype, mode)
        expanded = lax.expand_dims(logits, tuple(range(len(prefix))))
        return jnp.argmax(lax.add(noise, _broadcast(expanded, tuple(noise.shape))), axis=axis)
    perturbed = lax.add(logits, _gumbel(data, tuple(logits.shape), dtype, mode))
    k = math.prod(prefix)
    if k > logits.shape[axis]:
        raise ValueError(
            f"Number of samples without replacement ({k}) cannot exceed number "
            f"of categories ({logits.shape[axis]})."
        )
    _, indices = lax.top_k(jnp.moveaxis(perturbed, axis, -1), k)
    # indices has shape batch_shape + (k,); the samples go first in the result.
    return lax.reshape(indices, shape, (indices.ndim - 1, *range(indices.ndim - 1)))


# The samplers built on the ones above live in their own module; they are part of this namespace.
from kiln.random_samplers import *  # noqa: E402,F401,F403
from kiln.random_samplers import __all__ as _SAMPLERS  # noqa: E402

__all__ += _SAMPLERS

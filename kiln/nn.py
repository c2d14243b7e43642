"""kiln.nn: activation functions and the numerically careful helpers of neural networks
(softmax, log_softmax, logsumexp, one_hot, standardize), written with kiln.numpy and lax.

Dtypes follow JAX: integer inputs are promoted to the default float where the formula needs a
float, and Python-scalar (weakly typed) inputs stay weakly typed where JAX keeps them so.
"""

from __future__ import annotations

import functools
import operator

import numpy as np

import kiln.numpy as jnp
from kiln import lax
from kiln.custom_derivatives import custom_jvp
from kiln.core import dtypes
from kiln.core.errors import ConcretizationTypeError
from kiln.core.trace import Tracer
from kiln.numpy.reductions import reduction_axes
from kiln.numpy.util import check_arraylike, promote_dtypes_inexact, to_kiln
from kiln.transforms.jit import jit

__all__ = [
    "relu",
    "relu6",
    "gelu",
    "sigmoid",
    "log_sigmoid",
    "tanh",
    "softmax",
    "log_softmax",
    "logsumexp",
    "one_hot",
    "silu",
    "swish",
    "softplus",
    "soft_sign",
    "elu",
    "celu",
    "selu",
    "leaky_relu",
    "hard_tanh",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "glu",
    "squareplus",
    "mish",
    "identity",
    "log1mexp",
    "standardize",
    "normalize",
]

tanh = jnp.tanh  # the same function as kiln.numpy.tanh, as in JAX

# SELU's constants (Klambauer et al., 2017), to the precision JAX uses.
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _jitted(name: str, static_argnames=()):
    """Compile the decorated implementation as one program named `name`, as JAX jits its
    activations: an eager call on a large array runs one fused kernel instead of one pass per
    operation, and a trace records a `pjit[name=...]` equation. The public function checks its
    arguments first, so a mistake raises the same error outside any trace."""

    def wrap(impl):
        impl.__name__ = impl.__qualname__ = name
        compiled = jit(impl, static_argnames=static_argnames or None)
        compiled._warn_recompiles = False
        return compiled

    return wrap


def _inexact(name: str, x):
    check_arraylike(name, x)
    (x,) = promote_dtypes_inexact(x)
    return x


def _float_only(name: str, x):
    """sigmoid and friends call lax.logistic directly in JAX: integer input is a TypeError."""
    check_arraylike(name, x)
    x = to_kiln(x)
    if not dtypes.is_inexact(x.dtype):
        raise TypeError(
            f"{name} does not accept dtype {x.dtype.name}; it accepts floating "
            "and complex arrays. Convert with x.astype(jnp.float32) first."
        )
    return x


# --- rectifiers ------------------------------------------------------------------------------


@custom_jvp
def _relu(x):
    return jnp.maximum(x, 0)


# The derivative at 0 is 0 (a subgradient), not the 1/2 that maximum's tie rule would give;
# this is JAX's choice too (see https://dl.acm.org/doi/10.5555/3540261.3540297).
_relu.defjvps(lambda g, ans, x: lax.select(x > 0, g, lax.full_like(g, 0)))


def relu(x):
    """max(x, 0), elementwise; its derivative at 0 is 0."""
    check_arraylike("relu", x)
    return _relu(x)


@custom_jvp
def _relu6(x):
    return jnp.minimum(jnp.maximum(x, 0), 6.0)


# Zero derivative at both kinks (0 and 6), as in JAX.
_relu6.defjvps(lambda g, ans, x: lax.select((x > 0) & (x < 6), g, lax.full_like(g, 0)))


def relu6(x):
    """min(max(x, 0), 6), elementwise; its derivative at 0 and at 6 is 0."""
    check_arraylike("relu6", x)
    return _relu6(x)


@_jitted("leaky_relu")
def _leaky_relu(x, negative_slope):
    return jnp.where(x >= 0, x, negative_slope * x)


def leaky_relu(x, negative_slope=0.01):
    """x where x >= 0, else negative_slope * x."""
    return _leaky_relu(_inexact("leaky_relu", x), negative_slope)


@_jitted("elu")
def _elu(x, alpha):
    positive = x > 0
    # The inner where keeps expm1 away from large positive x (no overflow, finite gradients).
    return jnp.where(positive, x, alpha * lax.expm1(jnp.where(positive, 0.0, x)))


def elu(x, alpha=1.0):
    """x where x > 0, else alpha * (exp(x) - 1)."""
    return _elu(_inexact("elu", x), alpha)


@_jitted("celu")
def _celu(x, alpha):
    return jnp.maximum(x, 0.0) + alpha * lax.expm1(jnp.minimum(x, 0.0) / alpha)


def celu(x, alpha=1.0):
    """Continuously differentiable ELU: max(x, 0) + alpha * expm1(min(x, 0) / alpha)."""
    return _celu(_inexact("celu", x), alpha)


@_jitted("selu")
def _selu(x):
    return _SELU_SCALE * _elu(x, _SELU_ALPHA)


def selu(x):
    """Scaled ELU with the self-normalizing constants alpha=1.67326..., scale=1.05070..."""
    return _selu(_inexact("selu", x))


def gelu(x, approximate: bool = True):
    """Gaussian error linear unit: x * Phi(x). approximate=True (the default, as in JAX) uses
    the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); False uses erf exactly."""
    x = _inexact("gelu", x)
    # The constants are strongly typed (as JAX's NumPy-scalar constants are), so the result is
    # too, even for a Python-scalar x.
    if approximate:
        sqrt_2_over_pi = np.asarray(np.sqrt(2 / np.pi), dtype=x.dtype)
        cdf = 0.5 * (1.0 + lax.tanh(sqrt_2_over_pi * (x + 0.044715 * (x**3))))
        return x * cdf
    # erfc(-x / sqrt(2)) / 2 keeps precision for very negative x, where 1 + erf would cancel.
    return 0.5 * x * lax.erfc(-x * np.asarray(np.sqrt(0.5), dtype=x.dtype))


# --- sigmoids and softplus -------------------------------------------------------------------


def sigmoid(x):
    """The logistic function 1 / (1 + exp(-x))."""
    return lax.logistic(_float_only("sigmoid", x))


@_jitted("silu")
def _silu(x):
    return x * lax.logistic(x)


def silu(x):
    """x * sigmoid(x) (also known as swish)."""
    return _silu(_float_only("silu", x))


swish = silu


@custom_jvp
def _softplus(x):
    # NaN stays NaN and +inf stays +inf (where max(x, 0) + log1p(exp(-|x|)) would also do,
    # but the select keeps the formula JAX's logaddexp(x, 0) uses, value for value).
    return lax.select(
        lax.ne(x, x), x, lax.max(x, lax.full_like(x, 0)) + lax.log1p(lax.exp(-lax.abs(x)))
    )


def _finite_or_zero_at_inf(x):
    return lax.select(lax.eq(x, lax.full_like(x, np.inf)), lax.full_like(x, 0), x)


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    # softplus'(x) = exp(x - softplus(x)), with +inf replaced by 0 on both sides so that the
    # derivative at +inf is exp(0) = 1 instead of exp(inf - inf) = NaN (JAX's logaddexp rule).
    (x,), (x_dot,) = primals, tangents
    out = _softplus(x)
    return out, x_dot * lax.exp(_finite_or_zero_at_inf(x) - _finite_or_zero_at_inf(out))


_softplus_jit = _jitted("softplus")(lambda x: _softplus(x))


def softplus(x):
    """log(1 + exp(x)), computed without overflow as max(x, 0) + log1p(exp(-|x|)); its
    derivative is exp(x - softplus(x)), which is 1 at +inf."""
    return _softplus_jit(_inexact("softplus", x))


@_jitted("squareplus")
def _squareplus(x, b):
    x, b = promote_dtypes_inexact(x, b)
    return (x + jnp.sqrt(jnp.square(x) + b)) / 2


def squareplus(x, b=4):
    """(x + sqrt(x^2 + b)) / 2: a smooth, algebraic relative of softplus."""
    check_arraylike("squareplus", x, b)
    return _squareplus(x, b)


@_jitted("mish")
def _mish(x):
    return x * lax.tanh(_softplus_jit(x))


def mish(x):
    """x * tanh(softplus(x))."""
    return _mish(_inexact("mish", x))


_identity = _jitted("identity")(lambda x: x)


def identity(x):
    """The argument unchanged (an activation that does nothing, for configurable layers)."""
    check_arraylike("identity", x)
    return _identity(x)


@custom_jvp
def _log1mexp(x):
    # Mächler's split: -expm1(-x) keeps its digits for small x, 1 - exp(-x) for large x.
    return jnp.where(x < np.log(2.0), jnp.log(-jnp.expm1(-x)), jnp.log1p(-jnp.exp(-x)))


_log1mexp.defjvps(lambda g, ans, x: g / jnp.expm1(x))


def log1mexp(x):
    """log(1 - exp(-x)) for x >= 0 (NaN below), accurate both near 0 and for large x; its
    derivative is 1 / expm1(x)."""
    check_arraylike("log1mexp", x)
    (x,) = promote_dtypes_inexact(x)
    return _log1mexp(x)


@_jitted("log_sigmoid")
def _log_sigmoid(x):
    return -_softplus_jit(-x)


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), stable for large |x|."""
    return _log_sigmoid(_inexact("log_sigmoid", x))


@_jitted("soft_sign")
def _soft_sign(x):
    return x / (lax.abs(x) + 1)


def soft_sign(x):
    """x / (|x| + 1)."""
    return _soft_sign(_inexact("soft_sign", x))


@_jitted("hard_tanh")
def _hard_tanh(x):
    return jnp.where(x > 1, 1, jnp.where(x < -1, -1, x))


def hard_tanh(x):
    """x clipped to [-1, 1]."""
    check_arraylike("hard_tanh", x)
    return _hard_tanh(x)


@_jitted("hard_sigmoid")
def _hard_sigmoid(x):
    return _relu6(x + 3.0) / 6.0


def hard_sigmoid(x):
    """relu6(x + 3) / 6: a piecewise-linear sigmoid."""
    return _hard_sigmoid(_inexact("hard_sigmoid", x))


@_jitted("hard_silu")
def _hard_silu(x):
    return x * _hard_sigmoid(x)


def hard_silu(x):
    """x * hard_sigmoid(x) (also known as hard_swish)."""
    return _hard_silu(_inexact("hard_silu", x))


hard_swish = hard_silu


def glu(x, axis: int = -1):
    """Gated linear unit: split `x` in two halves along `axis`, return a * sigmoid(b)."""
    x = _float_only("glu", x)
    (axis,) = reduction_axes(axis, x.ndim)
    size = x.shape[axis]
    if size % 2:
        raise ValueError(f"glu needs an even size along axis {axis}, got {size}")
    first = lax.slice_in_dim(x, 0, size // 2, axis=axis)
    second = lax.slice_in_dim(x, size // 2, size, axis=axis)
    return first * lax.logistic(second)


# --- softmax and logsumexp -------------------------------------------------------------------


def logsumexp(a, axis=None, b=None, keepdims: bool = False, return_sign: bool = False, where=None):
    """log(sum(b * exp(a))) over `axis`, shifted by the maximum so that large values do not
    overflow. With `b`, negative sums give NaN unless `return_sign`, which returns
    (log|sum|, sign). All -inf gives -inf; any +inf gives +inf. The maximum carries no
    gradient, so the derivative is the softmax of `a` (weighted by `b`)."""
    if where is not None:
        # Masked-out entries must not reach exp even as zero-weighted NaN or inf.
        check_arraylike("logsumexp", a)
        a = jnp.where(where, a, 0)
    if b is not None:
        check_arraylike("logsumexp", a, b)
        a, b = promote_dtypes_inexact(a, b)
        a = jnp.where(b != 0, a, -np.inf)
    else:
        check_arraylike("logsumexp", a)
        (a,) = promote_dtypes_inexact(a)
    axes = reduction_axes(axis, a.ndim)
    real_a = lax.real(a) if dtypes.is_complex(a.dtype) else a
    amax = jnp.max(real_a, axis=axes, keepdims=keepdims, where=where, initial=-np.inf)
    # A non-finite maximum (all -inf, or an inf) must not be subtracted: inf - inf is NaN.
    amax = lax.stop_gradient(jnp.where(lax.is_finite(amax), amax, 0))
    amax_kept = amax if keepdims else lax.expand_dims(amax, axes)
    exp_a = lax.exp(a - lax.convert_element_type(amax_kept, a.dtype))
    if b is not None:
        exp_a = exp_a * b
    sumexp = jnp.sum(exp_a, axis=axes, keepdims=keepdims, where=where)
    sign = lax.sign(sumexp) if return_sign or b is not None else None
    if return_sign or not dtypes.is_complex(a.dtype):
        sumexp = lax.abs(sumexp)
    out = lax.log(sumexp) + lax.convert_element_type(amax, sumexp.dtype)
    if return_sign:
        return out, sign
    if b is not None and not dtypes.is_complex(out.dtype):
        out = jnp.where(sign < 0, np.nan, out)
    return out


def _softmax_value(x, axes, where):
    x_max = jnp.max(x, axis=axes, keepdims=True, where=where, initial=-np.inf)
    x_safe = x if where is None else jnp.where(where, x, -np.inf)
    unnormalized = lax.exp(x_safe - x_max)
    result = unnormalized / jnp.sum(unnormalized, axis=axes, keepdims=True, where=where)
    if where is not None:
        result = jnp.where(where, result, 0)
    return result


@functools.partial(custom_jvp, nondiff_argnums=(1,))
def _softmax(x, axes, where):
    return _softmax_value(x, axes, where)


@_softmax.defjvp
def _softmax_jvp(axes, primals, tangents):
    # y * (x_dot - sum(y * x_dot)): written in terms of the output only, so a -inf entry (y = 0)
    # contributes 0 instead of the NaN that differentiating exp(x - max) would produce there.
    (x, where), (x_dot, _) = primals, tangents
    y = _softmax(x, axes, where)
    return y, y * (x_dot - jnp.sum(y * x_dot, axis=axes, keepdims=True, where=where))


def softmax(x, axis=-1, where=None):
    """exp(x) / sum(exp(x)) along `axis`, computed from x - max(x) so large inputs do not
    overflow. Entries masked out by `where` are 0. The derivative is JAX's custom rule
    y * (dx - sum(y * dx)), finite where entries are -inf."""
    x = _inexact("softmax", x)
    axes = reduction_axes(axis, x.ndim)
    if where is not None:
        check_arraylike("softmax", where)
        where = to_kiln(where)
    return _softmax(x, axes, where)


def log_softmax(x, axis=-1, where=None):
    """x - logsumexp(x) along `axis`, computed stably."""
    x = _inexact("log_softmax", x)
    axes = reduction_axes(axis, x.ndim)
    x_max = jnp.max(x, axis=axes, keepdims=True, where=where, initial=-np.inf)
    x_safe = x if where is None else jnp.where(where, x, -np.inf)
    shifted = x_safe - lax.stop_gradient(x_max)
    shifted_logsumexp = lax.log(jnp.sum(lax.exp(shifted), axis=axes, keepdims=True, where=where))
    result = shifted - shifted_logsumexp
    if where is not None:
        result = jnp.where(where, result, -np.inf)
    return result


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
    """(x - mean) / sqrt(variance + epsilon) along `axis`; mean and variance are computed
    when not given."""
    x = _inexact("standardize", x)
    axes = reduction_axes(axis, x.ndim)
    if mean is None:
        mean = jnp.mean(x, axis=axes, keepdims=True, where=where)
    if variance is None:
        # E[x^2] - E[x]^2 needs one pass less than E[(x - mean)^2], as in JAX; rounding can
        # make it slightly negative, hence the clip at 0.
        variance = jnp.mean(jnp.square(x), axis=axes, keepdims=True, where=where)
        variance = jnp.clip(variance - jnp.square(mean), 0)
    return (x - mean) * lax.rsqrt(variance + epsilon)


normalize = standardize


# --- one_hot ---------------------------------------------------------------------------------


def one_hot(x, num_classes: int, *, dtype=None, axis: int = -1):
    """One-hot encode integer labels: out[..., c] = (x == c) for c < num_classes, as `dtype`
    (float32 by default). Out-of-range labels (negative or >= num_classes) give all zeros."""
    check_arraylike("one_hot", x)
    if isinstance(num_classes, Tracer):
        raise ConcretizationTypeError(
            num_classes,
            "The error arose in kiln.nn.one_hot: num_classes must be a static "
            "int (it sets the output shape). ",
        )
    num_classes = operator.index(num_classes)
    x = to_kiln(x)
    if x.dtype == np.bool_:
        raise TypeError(
            "one_hot expects integer (or float) labels, got a bool array; convert "
            "with x.astype(jnp.int32)."
        )
    dtype = dtypes.canonicalize(dtype) if dtype is not None else dtypes.default_float()
    out_ndim = x.ndim + 1
    axis = operator.index(axis)
    if not -out_ndim <= axis < out_ndim:
        raise np.exceptions.AxisError(axis, out_ndim)
    axis %= out_ndim
    labels = lax.expand_dims(x, (axis,))
    class_shape = [1] * out_ndim
    class_shape[axis] = num_classes
    classes = lax.broadcasted_iota(x.dtype, tuple(class_shape), axis)
    return lax.convert_element_type(jnp.equal(labels, classes), dtype)


from kiln import nn_initializers as initializers  # noqa: E402, F401
from kiln.nn_attention import dot_product_attention  # noqa: E402, F401

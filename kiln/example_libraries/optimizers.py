"""Optimizers as pure functions over pytrees, with the interface of JAX's
`jax.example_libraries.optimizers`, plus step-size schedules and gradient utilities.

An optimizer is a triple `(init_fun, update_fun, get_params)`:

    opt_state = init_fun(params)
    opt_state = update_fun(step, grads, opt_state)
    params = get_params(opt_state)

`opt_state` is an `OptimizerState`, a registered pytree whose leaves are arrays, so it passes
through `kiln.jit`, `kiln.grad` and `kiln.vmap` like any other argument. Each optimizer is
written for a single array and lifted to pytrees by the `optimizer` decorator.

A `step_size` argument is either a number or a schedule, a function from the step index
(possibly traced) to a number.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

import kiln.numpy as jnp
from kiln import tree_util
from kiln.tree_util import PyTreeDef

__all__ = [
    "OptimizerState",
    "Optimizer",
    "optimizer",
    "make_schedule",
    "sgd",
    "momentum",
    "nesterov",
    "adagrad",
    "rmsprop",
    "rmsprop_momentum",
    "adam",
    "adamw",
    "adamax",
    "sm3",
    "constant",
    "exponential_decay",
    "inverse_time_decay",
    "polynomial_decay",
    "piecewise_constant",
    "cosine_decay",
    "warmup_cosine_decay",
    "l2_norm",
    "clip_grads",
    "JoinPoint",
    "unpack_optimizer_state",
    "pack_optimizer_state",
]

Step = Any  # a Python int or a (possibly traced) integer scalar
Schedule = Callable[[Step], Any]
Params = Any  # a pytree of arrays


# --- the optimizer state and the lifting to pytrees ------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class OptimizerState:
    """The state of an optimizer over a pytree of parameters.

    The state of one parameter array is itself a small pytree (for adam, `(x, m, v)`). The
    state of the whole parameter pytree is stored partially flattened: `packed_state[k]` holds
    the leaves of the k-th parameter's state, `subtree_defs[k]` that state's structure, and
    `tree_def` the structure of the parameters. Only `packed_state` holds arrays; the two
    treedefs are static, so a jitted step is traced once per parameter structure.
    """

    packed_state: list
    tree_def: PyTreeDef
    subtree_defs: tuple

    def __iter__(self):
        # Unpacks like JAX's namedtuple: `packed_state, tree_def, subtree_defs = opt_state`.
        return iter((self.packed_state, self.tree_def, self.subtree_defs))


tree_util.register_pytree_node(
    OptimizerState,
    lambda state: ((state.packed_state,), (state.tree_def, state.subtree_defs)),
    lambda static, children: OptimizerState(children[0], static[0], static[1]),
)


class Optimizer(NamedTuple):
    """An `(init_fun, update_fun, get_params)` triple that works on pytrees."""

    init_fn: Callable[[Params], OptimizerState]
    update_fn: Callable[[Step, Params, OptimizerState], OptimizerState]
    params_fn: Callable[[OptimizerState], Params]


def optimizer(
    opt_maker: Callable[..., tuple[Callable, Callable, Callable]],
) -> Callable[..., Optimizer]:
    """Decorator: lift an optimizer written for one array to one that works on pytrees.

    Args:
      opt_maker: a function returning `(init, update, get_params)` where
        `init(x) -> state`, `update(step, g, state) -> state` and `get_params(state) -> x`
        handle a single array and `state` is any pytree of arrays.

    Returns:
      A function with `opt_maker`'s signature that returns an `Optimizer` whose functions
      accept any pytree of parameters and gradients and use `OptimizerState`.
    """

    @functools.wraps(opt_maker)
    def make_tree_optimizer(*args, **kwargs) -> Optimizer:
        init, update, get_params = opt_maker(*args, **kwargs)

        def tree_init(params: Params) -> OptimizerState:
            leaves, tree_def = tree_util.tree_flatten(params)
            flat_states = [tree_util.tree_flatten(init(leaf)) for leaf in leaves]
            packed = [state_leaves for state_leaves, _ in flat_states]
            subtree_defs = tuple(state_def for _, state_def in flat_states)
            return OptimizerState(packed, tree_def, subtree_defs)

        def tree_update(step: Step, grads: Params, opt_state: OptimizerState) -> OptimizerState:
            packed, tree_def, subtree_defs = opt_state
            grad_leaves, grad_def = tree_util.tree_flatten(grads)
            if grad_def != tree_def:
                raise TypeError(
                    "optimizer update_fun was given gradients whose tree structure differs "
                    f"from the parameters it was initialized with: parameters {tree_def}, "
                    f"gradients {grad_def}. Pass gradients of the same pytree as the "
                    "parameters, e.g. kiln.grad(loss)(get_params(opt_state))."
                )
            new_packed = []
            for grad, state_leaves, state_def in zip(grad_leaves, packed, subtree_defs):
                state = tree_util.tree_unflatten(state_def, state_leaves)
                new_leaves, new_def = tree_util.tree_flatten(update(step, grad, state))
                if new_def != state_def:
                    raise TypeError(
                        "optimizer update produced a state whose structure differs from its "
                        f"input: input {state_def}, output {new_def}."
                    )
                new_packed.append(new_leaves)
            return OptimizerState(new_packed, tree_def, subtree_defs)

        def tree_get_params(opt_state: OptimizerState) -> Params:
            packed, tree_def, subtree_defs = opt_state
            params = [
                get_params(tree_util.tree_unflatten(state_def, state_leaves))
                for state_leaves, state_def in zip(packed, subtree_defs)
            ]
            return tree_util.tree_unflatten(tree_def, params)

        functools.update_wrapper(tree_init, init)
        functools.update_wrapper(tree_update, update)
        functools.update_wrapper(tree_get_params, get_params)
        return Optimizer(tree_init, tree_update, tree_get_params)

    return make_tree_optimizer


# --- optimizers ------------------------------------------------------------------------------


@optimizer
def sgd(step_size: float | Schedule):
    """Stochastic gradient descent: x <- x - step_size(i) * g.

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        return x

    def update(i, g, x):
        return x - step_size(i) * g

    def get_params(x):
        return x

    return init, update, get_params


@optimizer
def momentum(step_size: float | Schedule, mass: float):
    """Gradient descent with heavy-ball momentum: v <- mass * v + g; x <- x - step_size * v.

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.
      mass: the momentum coefficient, in [0, 1).

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        return x, jnp.zeros_like(x)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * velocity, velocity

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def nesterov(step_size: float | Schedule, mass: float):
    """Gradient descent with Nesterov momentum: v <- mass * v + g;
    x <- x - step_size * (mass * v + g).

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.
      mass: the momentum coefficient, in [0, 1).

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        return x, jnp.zeros_like(x)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * (mass * velocity + g), velocity

    def get_params(state):
        return state[0]

    return init, update, get_params


def _inverse_sqrt_or_zero(accumulator):
    """1 / sqrt(a) where a > 0, else 0: a parameter that has never seen a gradient stays put."""
    positive = accumulator > 0
    safe = jnp.where(positive, accumulator, 1.0)
    return jnp.where(positive, 1.0 / jnp.sqrt(safe), 0.0)


@optimizer
def adagrad(step_size: float | Schedule, momentum: float = 0.9):
    """Adagrad (Duchi et al., 2011) with momentum on the normalized gradient, as JAX's
    example library defines it: s <- s + g^2; m <- (1 - momentum) * g / sqrt(s) + momentum * m;
    x <- x - step_size * m.

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.
      momentum: the momentum coefficient; 0 gives plain Adagrad.

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        return x, jnp.zeros_like(x), jnp.zeros_like(x)

    def update(i, g, state):
        x, sum_sq_grad, m = state
        sum_sq_grad = sum_sq_grad + jnp.square(g)
        m = (1.0 - momentum) * (g * _inverse_sqrt_or_zero(sum_sq_grad)) + momentum * m
        return x - step_size(i) * m, sum_sq_grad, m

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def rmsprop(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8):
    """RMSProp: a <- gamma * a + (1 - gamma) * g^2; x <- x - step_size * g / sqrt(a + eps).

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.
      gamma: the decay rate of the running mean of squared gradients.
      eps: added to the mean square before the square root, for stability.

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        return x, jnp.zeros_like(x)

    def update(i, g, state):
        x, avg_sq_grad = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1.0 - gamma)
        return x - step_size(i) * g / jnp.sqrt(avg_sq_grad + eps), avg_sq_grad

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def rmsprop_momentum(
    step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8, momentum: float = 0.9
):
    """RMSProp with momentum: a <- gamma * a + (1 - gamma) * g^2;
    m <- momentum * m + step_size * g / sqrt(a + eps); x <- x - m.

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.
      gamma: the decay rate of the running mean of squared gradients.
      eps: added to the mean square before the square root, for stability.
      momentum: the momentum coefficient.

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        return x, jnp.zeros_like(x), jnp.zeros_like(x)

    def update(i, g, state):
        x, avg_sq_grad, mom = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1.0 - gamma)
        mom = momentum * mom + step_size(i) * g / jnp.sqrt(avg_sq_grad + eps)
        return x - mom, avg_sq_grad, mom

    def get_params(state):
        return state[0]

    return init, update, get_params


def _adam_direction(i, g, m, v, b1, b2, eps):
    """Adam's moment updates and its bias-corrected direction m_hat / (sqrt(v_hat) + eps).

    Step i (counted from 0) is Adam's step t = i + 1 in the paper's notation."""
    m = (1 - b1) * g + b1 * m
    v = (1 - b2) * jnp.square(g) + b2 * v
    # The powers are taken in the moments' dtype so float32 state stays float32 under jit.
    m_hat = m / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))
    v_hat = v / (1 - jnp.asarray(b2, m.dtype) ** (i + 1))
    return m_hat / (jnp.sqrt(v_hat) + eps), m, v


@optimizer
def adam(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """Adam (Kingma and Ba, 2015): bias-corrected running means of g and g^2;
    x <- x - step_size * m_hat / (sqrt(v_hat) + eps).

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.
      b1: the decay rate of the first moment estimate.
      b2: the decay rate of the second moment estimate.
      eps: added to sqrt(v_hat), for stability.

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        return x, jnp.zeros_like(x), jnp.zeros_like(x)

    def update(i, g, state):
        x, m, v = state
        direction, m, v = _adam_direction(i, g, m, v, b1, b2, eps)
        return x - step_size(i) * direction, m, v

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def adamw(
    step_size: float | Schedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 1e-4,
):
    """Adam with decoupled weight decay (Loshchilov and Hutter, 2019), defined as optax's
    `adamw` defines it: x <- x - step_size * (m_hat / (sqrt(v_hat) + eps) + weight_decay * x).

    The decay uses the parameters before the step and is scaled by the step size, but not by
    Adam's normalization; it is not an L2 penalty added to the gradient. JAX's example library
    has no adamw; the defaults are optax's.

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.
      b1: the decay rate of the first moment estimate.
      b2: the decay rate of the second moment estimate.
      eps: added to sqrt(v_hat), for stability.
      weight_decay: the decoupled decay coefficient.

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        return x, jnp.zeros_like(x), jnp.zeros_like(x)

    def update(i, g, state):
        x, m, v = state
        direction, m, v = _adam_direction(i, g, m, v, b1, b2, eps)
        return x - step_size(i) * (direction + weight_decay * x), m, v

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def adamax(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """AdaMax, Adam's infinity-norm variant: m as in Adam; u <- max(b2 * u, |g|);
    x <- x - step_size / (1 - b1^(i+1)) * m / (u + eps).

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.
      b1: the decay rate of the first moment estimate.
      b2: the decay rate of the infinity-norm estimate.
      eps: added to u, for stability.

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        return x, jnp.zeros_like(x), jnp.zeros_like(x)

    def update(i, g, state):
        x, m, u = state
        m = (1 - b1) * g + b1 * m
        u = jnp.maximum(b2 * u, jnp.abs(g))
        corrected_step = step_size(i) / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))
        return x - corrected_step * m / (u + eps), m, u

    def get_params(state):
        return state[0]

    return init, update, get_params


def _along_axis(vector, axis: int, ndim: int):
    """Reshape a 1-D `vector` so it lies along `axis` of an `ndim`-dimensional array."""
    shape = [1] * ndim
    shape[axis] = vector.shape[0]
    return jnp.reshape(vector, shape)


@optimizer
def sm3(step_size: float | Schedule, momentum: float = 0.9):
    """SM3 (Anil et al., 2019): Adagrad whose accumulator is covered by one vector per axis,
    so its memory is the sum of the dimensions rather than their product.

    accum = min over axes of the per-axis accumulators (broadcast) + g^2;
    m <- (1 - momentum) * g / sqrt(accum) + momentum * m; x <- x - step_size * m;
    each axis' accumulator becomes the max of accum over the other axes.

    Args:
      step_size: a positive number, or a schedule mapping the step index to one.
      momentum: the momentum coefficient.

    Returns:
      An `(init_fun, update_fun, get_params)` triple.
    """
    step_size = make_schedule(step_size)

    def init(x):
        # A scalar is treated as a vector of one element, so it has one accumulator.
        covered = jnp.atleast_1d(x)
        accumulators = [jnp.zeros(size, dtype=covered.dtype) for size in covered.shape]
        return x, jnp.zeros_like(x), accumulators

    def update(i, g, state):
        x, m, accumulators = state
        g_nd = jnp.atleast_1d(g)
        ndim = g_nd.ndim
        covered = [_along_axis(a, axis, ndim) for axis, a in enumerate(accumulators)]
        accum = functools.reduce(jnp.minimum, covered) + jnp.square(g_nd)
        direction = jnp.reshape(g_nd * _inverse_sqrt_or_zero(accum), jnp.shape(g))
        m = (1.0 - momentum) * direction + momentum * m
        x = x - step_size(i) * m
        accumulators = [
            jnp.max(accum, axis=tuple(a for a in range(ndim) if a != axis)) for axis in range(ndim)
        ]
        return x, m, accumulators

    def get_params(state):
        return state[0]

    return init, update, get_params


# --- step-size schedules ---------------------------------------------------------------------
# Each schedule is a function of the step index that also accepts a traced integer, so it can
# run inside a jitted update.


def constant(step_size: float) -> Schedule:
    """The schedule that is `step_size` at every step."""

    def schedule(i):
        return step_size

    return schedule


def exponential_decay(step_size: float, decay_steps: float, decay_rate: float) -> Schedule:
    """step_size * decay_rate ** (i / decay_steps): multiplied by `decay_rate` every
    `decay_steps` steps, smoothly in between."""

    def schedule(i):
        return step_size * decay_rate ** (i / decay_steps)

    return schedule


def inverse_time_decay(
    step_size: float, decay_steps: float, decay_rate: float, staircase: bool = False
) -> Schedule:
    """step_size / (1 + decay_rate * i / decay_steps); with `staircase`, the ratio
    i / decay_steps is rounded down, so the step size changes every `decay_steps` steps."""

    def schedule(i):
        elapsed = i / decay_steps
        if staircase:
            elapsed = jnp.floor(elapsed)
        return step_size / (1 + decay_rate * elapsed)

    return schedule


def polynomial_decay(
    step_size: float, decay_steps: int, final_step_size: float, power: float = 1.0
) -> Schedule:
    """From `step_size` at step 0 to `final_step_size` at step `decay_steps` along
    (1 - i / decay_steps) ** power, then constant."""

    def schedule(i):
        fraction_left = 1 - jnp.minimum(i, decay_steps) / decay_steps
        return fraction_left**power * (step_size - final_step_size) + final_step_size

    return schedule


def piecewise_constant(boundaries: Sequence[float], values: Sequence[float]) -> Schedule:
    """values[0] up to and including step boundaries[0], values[1] up to boundaries[1], ...,
    and values[-1] after the last boundary.

    Raises:
      ValueError: if `boundaries` and `values` are not 1-D, or `values` is not one longer.
    """
    boundaries_np, values_np = np.asarray(boundaries), np.asarray(values)
    if boundaries_np.ndim != 1 or values_np.ndim != 1:
        raise ValueError(
            "piecewise_constant: boundaries and values must be 1-D sequences; "
            f"got shapes {boundaries_np.shape} and {values_np.shape}."
        )
    if values_np.shape[0] != boundaries_np.shape[0] + 1:
        raise ValueError(
            "piecewise_constant: values must be one longer than boundaries; got "
            f"{values_np.shape[0]} values for {boundaries_np.shape[0]} "
            "boundaries."
        )
    boundaries_array, values_array = jnp.asarray(boundaries_np), jnp.asarray(values_np)

    def schedule(i):
        return values_array[jnp.sum(i > boundaries_array)]

    return schedule


def cosine_decay(
    init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
) -> Schedule:
    """Cosine decay as optax's `cosine_decay_schedule` defines it:
    init_value * ((1 - alpha) * c ** exponent + alpha) with
    c = (1 + cos(pi * min(i, decay_steps) / decay_steps)) / 2, so it falls from `init_value`
    to `alpha * init_value` over `decay_steps` steps and stays there.

    Raises:
      ValueError: if `decay_steps` is not positive.
    """
    if decay_steps <= 0:
        raise ValueError(f"cosine_decay: decay_steps must be positive; got {decay_steps}.")

    def schedule(i):
        progress = jnp.minimum(i, decay_steps) / decay_steps
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * progress))
        return init_value * ((1 - alpha) * cosine**exponent + alpha)

    return schedule


def warmup_cosine_decay(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    end_value: float = 0.0,
    exponent: float = 1.0,
) -> Schedule:
    """Linear warm-up then cosine decay, as optax's `warmup_cosine_decay_schedule` defines
    it: from `init_value` to `peak_value` linearly over `warmup_steps` steps, then a cosine
    from `peak_value` to `end_value` reached at step `decay_steps` (which counts the warm-up).

    Raises:
      ValueError: if `decay_steps` is not larger than `warmup_steps`.
    """
    if decay_steps <= warmup_steps:
        raise ValueError(
            "warmup_cosine_decay: decay_steps counts the warm-up and must exceed "
            f"warmup_steps; got decay_steps={decay_steps}, "
            f"warmup_steps={warmup_steps}."
        )
    cosine_steps = decay_steps - warmup_steps

    def schedule(i):
        # max(., 1) keeps the warm-up branch finite when warmup_steps is 0; it is not selected.
        warmup = init_value + (peak_value - init_value) * i / max(warmup_steps, 1)
        progress = jnp.clip(i - warmup_steps, 0, cosine_steps) / cosine_steps
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * progress))
        decayed = end_value + (peak_value - end_value) * cosine**exponent
        return jnp.where(i < warmup_steps, warmup, decayed)

    return schedule


def make_schedule(scalar_or_schedule: float | Schedule) -> Schedule:
    """A schedule from a step-size argument: a callable is returned as is, a scalar becomes
    `constant(scalar)`.

    Raises:
      TypeError: if the argument is neither callable nor a scalar.
    """
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if jnp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(
        "step_size must be a scalar or a schedule (a function of the step index); "
        f"got {type(scalar_or_schedule).__name__} of shape "
        f"{jnp.shape(scalar_or_schedule)}."
    )


# --- utilities -------------------------------------------------------------------------------


def l2_norm(tree: Any):
    """The l2 norm of all the leaves of `tree` taken together, as one flat vector."""
    leaves = tree_util.tree_leaves(tree)
    return jnp.sqrt(sum((jnp.vdot(leaf, leaf) for leaf in leaves), start=0.0))


def clip_grads(grad_tree: Any, max_norm: float) -> Any:
    """Scale `grad_tree` so its `l2_norm` is at most `max_norm`; leave it alone if it is
    already within that norm."""
    norm = l2_norm(grad_tree)
    # The divisor is only selected when norm >= max_norm > 0, so it is never 0 where used.
    scale = jnp.where(norm < max_norm, 1.0, max_norm / jnp.maximum(norm, max_norm))
    return tree_util.tree_map(lambda g: g * scale.astype(jnp.result_type(g)), grad_tree)


# --- serialization ---------------------------------------------------------------------------


class JoinPoint:
    """A leaf of an unpacked optimizer state: it holds the state pytree of one parameter, so
    the two levels of the state (parameters, then each parameter's state) stay apart."""

    def __init__(self, subtree: Any):
        self.subtree = subtree

    def __repr__(self) -> str:
        return f"JoinPoint({self.subtree!r})"


def unpack_optimizer_state(opt_state: OptimizerState) -> Any:
    """Convert an `OptimizerState` to a pytree shaped like the parameters whose leaves are
    `JoinPoint`s holding each parameter's state; useful for saving a state to disk."""
    packed, tree_def, subtree_defs = opt_state
    subtrees = [
        tree_util.tree_unflatten(state_def, state_leaves)
        for state_leaves, state_def in zip(packed, subtree_defs)
    ]
    return tree_util.tree_unflatten(tree_def, [JoinPoint(subtree) for subtree in subtrees])


def pack_optimizer_state(marked_pytree: Any) -> OptimizerState:
    """The inverse of `unpack_optimizer_state`.

    Raises:
      TypeError: if a leaf of `marked_pytree` is not a `JoinPoint`.
    """
    join_points, tree_def = tree_util.tree_flatten(marked_pytree)
    for join_point in join_points:
        if not isinstance(join_point, JoinPoint):
            raise TypeError(
                "pack_optimizer_state expects the output of "
                "unpack_optimizer_state, whose leaves are JoinPoints; got a leaf "
                f"of type {type(join_point).__name__}."
            )
    flat_states = [tree_util.tree_flatten(join_point.subtree) for join_point in join_points]
    packed = [state_leaves for state_leaves, _ in flat_states]
    subtree_defs = tuple(state_def for _, state_def in flat_states)
    return OptimizerState(packed, tree_def, subtree_defs)

"""Differentially private SGD (Abadi et al., 2016) for a small MLP classifier.

Each step takes per-example gradients with vmap(grad(loss)), clips every example's gradient to
norm C, sums them, adds Gaussian noise of standard deviation sigma * C, averages, and applies an
optimizer step, all inside one kiln.jit. The data is the digits set when
kiln/examples/data/digits.npz is present, otherwise a synthetic two-class problem.

Run with `python -m kiln.examples.dp_sgd --help` for the options.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Callable, NamedTuple

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import nn, random, tree_util
from kiln.example_libraries import optimizers

DIGITS_PATH = os.path.join(os.path.dirname(__file__), "data", "digits.npz")


class Dataset(NamedTuple):
    """Features (float32, one row per example) and integer labels, split into train and test."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    name: str


def _first_present(archive, names: tuple[str, ...]) -> np.ndarray:
    for name in names:
        if name in archive.files:
            return archive[name]
    raise KeyError(f"{DIGITS_PATH} holds {archive.files}; expected one of {names}.")


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """The digits images (scaled to [0, 1], flattened) with a shuffled train/test split."""
    with np.load(DIGITS_PATH) as archive:
        features = _first_present(archive, ("x", "X", "images", "data", "inputs"))
        labels = _first_present(archive, ("y", "Y", "labels", "target", "targets"))
    features = features.reshape(len(features), -1).astype(np.float32)
    features /= max(float(features.max()), 1.0)
    labels = labels.astype(np.int32).reshape(-1)
    return _split(features, labels, int(labels.max()) + 1, "digits", test_fraction, seed)


def synthetic_two_class(
    num_examples: int = 2000, num_features: int = 16, test_fraction: float = 0.2, seed: int = 0
) -> Dataset:
    """Two overlapping Gaussian clouds, one per class."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=num_examples).astype(np.int32)
    centers = 0.3 * rng.normal(size=(2, num_features)).astype(np.float32)
    features = centers[labels] + rng.normal(size=(num_examples, num_features)).astype(np.float32)
    return _split(features, labels, 2, "synthetic two-class", test_fraction, seed)


def _split(features, labels, num_classes, name, test_fraction, seed) -> Dataset:
    order = np.random.default_rng(seed).permutation(len(labels))
    num_test = int(round(len(labels) * test_fraction))
    test, train = order[:num_test], order[num_test:]
    return Dataset(features[train], labels[train], features[test], labels[test], num_classes, name)


def init_mlp(key, layer_sizes: list[int]) -> list[dict]:
    """Weights (scaled normal) and zero biases for each dense layer of the MLP."""
    params = []
    keys = random.split(key, len(layer_sizes) - 1)
    for layer_key, fan_in, fan_out in zip(keys, layer_sizes[:-1], layer_sizes[1:]):
        weight = random.normal(layer_key, (fan_in, fan_out)) * np.sqrt(2.0 / fan_in)
        params.append({"w": weight, "b": jnp.zeros(fan_out)})
    return params


def mlp_logits(params: list[dict], x):
    """The MLP's logits: relu hidden layers, a linear last layer. `x` is one example or a batch."""
    for layer in params[:-1]:
        x = nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def example_loss(params, x, y, num_classes: int):
    """Cross-entropy of one example (x of shape (features,), y a scalar label)."""
    log_probabilities = nn.log_softmax(mlp_logits(params, x))
    return -jnp.sum(log_probabilities * nn.one_hot(y, num_classes))


def clipped_noisy_mean(per_example_grads, key, clip_norm: float, noise_multiplier: float):
    """The DP-SGD gradient: clip each example's gradient to clip_norm, sum, add noise, average.

    Args:
      per_example_grads: a pytree whose leaves have a leading batch axis.
      key: the PRNG key of this step's noise.
      clip_norm: C, the largest norm an example's whole gradient may keep.
      noise_multiplier: sigma; the noise has standard deviation sigma * C per coordinate.
    Returns:
      A pytree shaped like one example's gradient.
    """
    leaves, treedef = tree_util.tree_flatten(per_example_grads)
    batch_size = leaves[0].shape[0]
    squared_norms = sum(
        jnp.sum(jnp.reshape(leaf, (batch_size, -1)) ** 2, axis=1) for leaf in leaves
    )
    scale = jnp.minimum(1.0, clip_norm / (jnp.sqrt(squared_norms) + 1e-12))
    noise_keys = random.split(key, len(leaves))
    noisy_means = []
    for leaf, noise_key in zip(leaves, noise_keys):
        clipped_sum = jnp.tensordot(scale, leaf, axes=1)
        noise = random.normal(noise_key, clipped_sum.shape) * (noise_multiplier * clip_norm)
        noisy_means.append((clipped_sum + noise) / batch_size)
    return tree_util.tree_unflatten(treedef, noisy_means)


def make_optimizer(name: str, step_size: float):
    """The (init, update, get_params) triple of kiln.example_libraries.optimizers."""
    if name == "adam":
        return optimizers.adam(step_size)
    if name == "sgd":
        return optimizers.sgd(step_size)
    raise ValueError(f"unknown optimizer {name!r}; choose 'adam' or 'sgd'.")


def make_private_step(
    num_classes: int,
    clip_norm: float,
    noise_multiplier: float,
    opt_update: Callable,
    get_params: Callable,
):
    """A jitted DP-SGD step: (i, opt_state, key, x, y) -> (opt_state, key)."""

    def loss(params, x, y):
        return example_loss(params, x, y, num_classes)

    per_example_grad = kiln.vmap(kiln.grad(loss), in_axes=(None, 0, 0))

    @kiln.jit
    def step(i, opt_state, key, x, y):
        key, noise_key = random.split(key)
        grads = per_example_grad(get_params(opt_state), x, y)
        private_grads = clipped_noisy_mean(grads, noise_key, clip_norm, noise_multiplier)
        return opt_update(i, private_grads, opt_state), key

    return step


def make_evaluate(num_classes: int):
    """A jitted (params, x, y) -> (mean loss, accuracy) over a whole split."""

    @kiln.jit
    def evaluate(params, x, y):
        log_probabilities = nn.log_softmax(mlp_logits(params, x))
        loss = -jnp.mean(jnp.sum(log_probabilities * nn.one_hot(y, num_classes), axis=1))
        accuracy = jnp.mean((jnp.argmax(log_probabilities, axis=1) == y).astype(jnp.float32))
        return loss, accuracy

    return evaluate


def train(
    epochs: int = 20,
    batch_size: int = 64,
    hidden: int = 64,
    num_layers: int = 1,
    step_size: float = 5e-3,
    optimizer: str = "adam",
    clip_norm: float = 1.0,
    noise_multiplier: float = 1.0,
    dataset: str = "auto",
    seed: int = 0,
    verbose: bool = True,
) -> list[dict]:
    """Trains the MLP with DP-SGD and returns one record per epoch.

    Args:
      epochs: passes over the training split (the last incomplete batch of each is dropped).
      batch_size: examples per step (the "lot" of the DP-SGD paper).
      hidden: width of each hidden layer; num_layers: how many hidden layers.
      step_size, optimizer: the optimizer ('adam' or 'sgd') and its step size.
      clip_norm: C; noise_multiplier: sigma.
      dataset: 'digits', 'synthetic', or 'auto' (digits when its file exists).
      seed: seeds the initialization, the batch order and the noise.
      verbose: print a line per epoch.
    Returns:
      A list of dicts with keys epoch, train_loss, train_accuracy, test_accuracy, seconds;
      the first (epoch 0) describes the model before training.
    """
    if dataset == "auto":
        dataset = "digits" if os.path.exists(DIGITS_PATH) else "synthetic"
    data = load_digits(seed=seed) if dataset == "digits" else synthetic_two_class(seed=seed)
    if batch_size > len(data.train_y):
        raise ValueError(
            f"batch_size {batch_size} exceeds the {len(data.train_y)} training "
            "examples; pass a smaller batch_size."
        )
    layer_sizes = [data.train_x.shape[1]] + [hidden] * num_layers + [data.num_classes]

    key = random.PRNGKey(seed)
    init_key, key = random.split(key)
    opt_init, opt_update, get_params = make_optimizer(optimizer, step_size)
    opt_state = opt_init(init_mlp(init_key, layer_sizes))
    step = make_private_step(data.num_classes, clip_norm, noise_multiplier, opt_update, get_params)
    evaluate = make_evaluate(data.num_classes)

    if verbose:
        print(
            f"DP-SGD on {data.name}: {len(data.train_y)} train / {len(data.test_y)} test "
            f"examples, MLP {layer_sizes}, batch {batch_size}, C={clip_norm}, "
            f"sigma={noise_multiplier}, {optimizer} step size {step_size}"
        )
    rng = np.random.default_rng(seed)
    steps_per_epoch = len(data.train_y) // batch_size
    history = []
    iteration = 0
    start = time.perf_counter()
    # Epoch 0 is the untrained model, the reference the later losses are compared with.
    for epoch in range(0, epochs + 1):
        order = rng.permutation(len(data.train_y))
        for batch in range(steps_per_epoch if epoch > 0 else 0):
            indices = order[batch * batch_size : (batch + 1) * batch_size]
            opt_state, key = step(
                iteration, opt_state, key, data.train_x[indices], data.train_y[indices]
            )
            iteration += 1
        params = get_params(opt_state)
        train_loss, train_accuracy = evaluate(params, data.train_x, data.train_y)
        _, test_accuracy = evaluate(params, data.test_x, data.test_y)
        record = {
            "epoch": epoch,
            "train_loss": float(train_loss),
            "train_accuracy": float(train_accuracy),
            "test_accuracy": float(test_accuracy),
            "seconds": time.perf_counter() - start,
        }
        history.append(record)
        if verbose:
            print(
                f"epoch {epoch:3d}  loss {record['train_loss']:.4f}  "
                f"train acc {record['train_accuracy']:.3f}  "
                f"test acc {record['test_accuracy']:.3f}  ({record['seconds']:.1f} s)"
            )
    return history


def main(argv: list[str] | None = None) -> list[dict]:
    """Parses command-line options and trains."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64, help="examples per step")
    parser.add_argument("--hidden", type=int, default=64, help="width of each hidden layer")
    parser.add_argument("--layers", type=int, default=1, help="number of hidden layers")
    parser.add_argument("--step-size", type=float, default=5e-3)
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    parser.add_argument("--clip-norm", type=float, default=1.0, help="C")
    parser.add_argument("--noise-multiplier", type=float, default=1.0, help="sigma")
    parser.add_argument("--dataset", choices=("auto", "digits", "synthetic"), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return train(
        epochs=args.epochs,
        batch_size=args.batch,
        hidden=args.hidden,
        num_layers=args.layers,
        step_size=args.step_size,
        optimizer=args.optimizer,
        clip_norm=args.clip_norm,
        noise_multiplier=args.noise_multiplier,
        dataset=args.dataset,
        seed=args.seed,
    )


if __name__ == "__main__":
    main()

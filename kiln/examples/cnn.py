"""Train a small convolutional network with max-pooling on the 8x8 handwritten digits.

The images and their split are those of `kiln.examples.digits_mlp` (1,437 training and 360 test
images, normalized with training statistics), seen as 8x8x1 NHWC images. The network is built
from `kiln.example_libraries.stax`: two 3x3 convolutions with ReLU, each followed by a 2x2
max-pool, then a dense layer to the 10 classes. Adam (kiln.example_libraries.optimizers) trains
it through a `kiln.jit` step; the run prints the loss per epoch and the held-out accuracy.

    python -m kiln.examples.cnn [--epochs N] [--batch-size B] [--seed S]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import nn, random
from kiln.example_libraries import optimizers, stax
from kiln.examples.digits_mlp import NUM_CLASSES, epoch_batches, load_digits, split_digits

IMAGE_SHAPE = (8, 8, 1)


def make_network(width: int = 32) -> tuple[Callable, Callable]:
    """(init_fun, apply_fun) of the network: conv-relu-pool twice, then dense logits."""
    return stax.serial(
        stax.Conv(width, (3, 3), padding="SAME"),
        stax.Relu,
        stax.MaxPool((2, 2), strides=(2, 2)),
        stax.Conv(2 * width, (3, 3), padding="SAME"),
        stax.Relu,
        stax.MaxPool((2, 2), strides=(2, 2)),
        stax.Flatten,
        stax.Dense(NUM_CLASSES),
    )


def as_images(rows: np.ndarray) -> np.ndarray:
    """Flat 64-pixel rows as (N, 8, 8, 1) images."""
    return rows.reshape((len(rows),) + IMAGE_SHAPE)


def make_loss(apply_fun: Callable) -> Callable:
    """Mean softmax cross-entropy of a batch, as a function of the parameters."""

    def loss(params: Any, images: Any, labels: Any) -> kiln.Array:
        log_probs = nn.log_softmax(apply_fun(params, images))
        return -jnp.mean(jnp.sum(nn.one_hot(labels, NUM_CLASSES) * log_probs, axis=-1))

    return loss


def make_accuracy(apply_fun: Callable) -> Callable:
    """The fraction of images whose highest score is the true class."""

    def accuracy(params: Any, images: Any, labels: Any) -> kiln.Array:
        return jnp.mean(jnp.argmax(apply_fun(params, images), axis=-1) == labels)

    return accuracy


def train(
    epochs: int = 12,
    batch_size: int = 64,
    learning_rate: float = 2e-3,
    width: int = 32,
    seed: int = 0,
    train_limit: int | None = None,
    verbose: bool = True,
) -> dict:
    """Train the network and return its history.

    Args:
      epochs: passes over the training images.
      batch_size: images per Adam step.
      learning_rate: Adam's step size.
      width: features of the first convolution (the second has twice as many).
      seed: seeds the split, the weights and the order of minibatches.
      train_limit: use only the first this many training images (for quick runs).
      verbose: print one line per epoch.

    Returns:
      A dict with the per-epoch mean losses, the final test accuracy, the step count and the
      seconds spent training.
    """
    split_key, train_key = random.split(random.PRNGKey(seed))
    images, labels = load_digits()
    split = split_digits(images, labels, split_key)
    train_images, train_labels = as_images(split.train_images), split.train_labels
    if train_limit is not None:
        train_images, train_labels = train_images[:train_limit], train_labels[:train_limit]
    test_images, test_labels = as_images(split.test_images), split.test_labels

    init_key, shuffle_key = random.split(train_key)
    init_fun, apply_fun = make_network(width)
    _, params = init_fun(init_key, (batch_size,) + IMAGE_SHAPE)
    opt_init, opt_update, get_params = optimizers.adam(learning_rate)
    loss_fn = make_loss(apply_fun)

    @kiln.jit
    def train_step(step, opt_state, images, labels):
        loss, grads = kiln.value_and_grad(loss_fn)(get_params(opt_state), images, labels)
        return opt_update(step, grads, opt_state), loss

    test_accuracy = kiln.jit(make_accuracy(apply_fun))
    opt_state = opt_init(params)
    losses, step = [], 0
    start = time.perf_counter()
    for epoch in range(epochs):
        batches = epoch_batches(random.fold_in(shuffle_key, epoch), len(train_labels), batch_size)
        epoch_losses = []
        for rows in batches:
            opt_state, loss = train_step(step, opt_state, train_images[rows], train_labels[rows])
            epoch_losses.append(float(loss))
            step += 1
        losses.append(float(np.mean(epoch_losses)))
        if verbose:
            print(f"epoch {epoch + 1:>2}/{epochs}: mean training loss {losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    final = float(test_accuracy(get_params(opt_state), test_images, test_labels))
    return {
        "losses": losses,
        "test_accuracy": final,
        "steps": step,
        "seconds": seconds,
        "num_test": len(test_labels),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line's options; `argv` None reads sys.argv."""
    parser = argparse.ArgumentParser(
        prog="python -m kiln.examples.cnn",
        description="Train a small CNN with max-pooling on the 8x8 handwritten digits.",
    )
    parser.add_argument("--epochs", type=int, default=12, help="passes over the training set")
    parser.add_argument("--batch-size", type=int, default=64, help="images per Adam step")
    parser.add_argument("--learning-rate", type=float, default=2e-3, help="Adam's step size")
    parser.add_argument("--width", type=int, default=32, help="features of the first conv")
    parser.add_argument("--seed", type=int, default=0, help="seeds the split, weights, batches")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Train and report the held-out accuracy."""
    args = parse_args(argv)
    result = train(args.epochs, args.batch_size, args.learning_rate, args.width, args.seed)
    accuracy = result["test_accuracy"]
    print(
        f"trained {result['steps']} steps in {result['seconds']:.1f} s; training loss "
        f"{result['losses'][0]:.4f} -> {result['losses'][-1]:.4f}"
    )
    print(
        f"test accuracy: {100 * accuracy:.2f}% "
        f"({round(accuracy * result['num_test'])}/{result['num_test']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Train a small MLP on the 8x8 handwritten digits with kiln, end to end.

The digits ship with kiln (`kiln/examples/data/digits.npz`, 1,797 images of 10 classes). The
run splits them into 1,437 training and 360 test images, trains a 64-128-128-10 MLP with Adam
through `kiln.jit` of a step built on `kiln.value_and_grad`, shows a progress bar per epoch,
prints the held-out accuracy, writes a plot of the training loss and test accuracy per epoch,
and times an eager step against the jitted one.

    python -m kiln.examples.digits_mlp [--epochs N] [--out DIR] [--seed S]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import nn, random
from kiln.example_libraries import optimizers

DATA_PATH = pathlib.Path(__file__).resolve().parent / "data" / "digits.npz"
LAYER_SIZES = (64, 128, 128, 10)
NUM_CLASSES = 10
TEST_SIZE = 360
PLOT_NAME = "digits_mlp.png"


@dataclass
class DigitsSplit:
    """Normalized images (float32, one row of 64 pixels each) and int32 labels."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


@dataclass
class TrainResult:
    """What a training run produced: per-epoch history and the final parameters."""

    params: Any
    epoch_losses: list[float] = field(default_factory=list)
    test_accuracies: list[float] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0

    @property
    def final_accuracy(self) -> float:
        """Test accuracy after the last epoch."""
        return self.test_accuracies[-1]


def load_digits(path: pathlib.Path = DATA_PATH) -> tuple[np.ndarray, np.ndarray]:
    """The shipped data set: images as uint8 (1797, 8, 8) in 0..16 and uint8 labels 0..9."""
    with np.load(path) as data:
        return data["images"], data["labels"]


def split_digits(
    images: np.ndarray, labels: np.ndarray, key: kiln.Array, test_size: int = TEST_SIZE
) -> DigitsSplit:
    """Shuffle with `key`, hold out `test_size` images, and normalize with training statistics.

    Pixels are scaled to [0, 1], centered by the per-pixel training mean and divided by one
    overall training standard deviation: per-pixel scaling would blow up the corner pixels,
    which are zero in all but a handful of images.
    """
    order = np.asarray(random.permutation(key, len(labels)))
    flat = images.reshape(len(labels), -1).astype(np.float32) / 16.0
    test_rows, train_rows = order[:test_size], order[test_size:]
    mean = flat[train_rows].mean(axis=0)
    scale = (flat[train_rows] - mean).std()
    normalized = ((flat - mean) / scale).astype(np.float32)
    labels = labels.astype(np.int32)
    return DigitsSplit(
        normalized[train_rows], labels[train_rows], normalized[test_rows], labels[test_rows]
    )


def init_mlp(key: kiln.Array, sizes: Sequence[int] = LAYER_SIZES) -> list[tuple[Any, Any]]:
    """He-normal weights and zero biases, one (W, b) pair per layer."""
    keys = random.split(key, len(sizes) - 1)
    params = []
    for layer_key, fan_in, fan_out in zip(keys, sizes[:-1], sizes[1:]):
        weights = random.normal(layer_key, (fan_in, fan_out)) * np.sqrt(2.0 / fan_in)
        params.append((weights, jnp.zeros(fan_out)))
    return params


def mlp_logits(params: list[tuple[Any, Any]], images: Any) -> kiln.Array:
    """The MLP's unnormalized class scores: ReLU between layers, none after the last."""
    activations = images
    for weights, bias in params[:-1]:
        activations = nn.relu(activations @ weights + bias)
    weights, bias = params[-1]
    return activations @ weights + bias


def cross_entropy(params: list[tuple[Any, Any]], images: Any, labels: Any) -> kiln.Array:
    """Mean softmax cross-entropy of the batch."""
    log_probs = nn.log_softmax(mlp_logits(params, images))
    return -jnp.mean(jnp.sum(nn.one_hot(labels, NUM_CLASSES) * log_probs, axis=-1))


def accuracy(params: list[tuple[Any, Any]], images: Any, labels: Any) -> kiln.Array:
    """Fraction of images whose highest score is the true class."""
    return jnp.mean(jnp.argmax(mlp_logits(params, images), axis=-1) == labels)


def make_train_step(opt_update: Callable, get_params: Callable) -> Callable:
    """One Adam step on a minibatch: (step, opt_state, images, labels) -> (opt_state, loss)."""

    def train_step(step, opt_state, images, labels):
        loss, grads = kiln.value_and_grad(cross_entropy)(get_params(opt_state), images, labels)
        return opt_update(step, grads, opt_state), loss

    return train_step


def epoch_batches(key: kiln.Array, num_examples: int, batch_size: int) -> np.ndarray:
    """Row indices of one epoch's minibatches, (num_batches, batch_size).

    The last partial batch is dropped so every step has the same shapes and the jitted step
    compiles once.
    """
    order = np.asarray(random.permutation(key, num_examples))
    num_batches = num_examples // batch_size
    return order[: num_batches * batch_size].reshape(num_batches, batch_size)


def train(
    split: DigitsSplit,
    key: kiln.Array,
    epochs: int,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    progress: bool = True,
) -> TrainResult:
    """Train the MLP for `epochs` passes over the training images.

    Args:
      split: the normalized data.
      key: seeds the weights and the order of minibatches.
      epochs: passes over the training set.
      batch_size: images per Adam step.
      learning_rate: Adam's step size.
      progress: show a tqdm bar per epoch with the running loss.

    Returns:
      The per-epoch mean training loss and test accuracy, and the trained parameters.
    """
    # The demo extras are imported where they are used, so the model and data functions
    # stay importable without them.
    from tqdm import tqdm

    init_key, shuffle_key = random.split(key)
    opt_init, opt_update, get_params = optimizers.adam(learning_rate)
    opt_state = opt_init(init_mlp(init_key))
    train_step = kiln.jit(make_train_step(opt_update, get_params))
    test_accuracy = kiln.jit(accuracy)
    result = TrainResult(params=None)
    num_train = len(split.train_labels)
    start = time.perf_counter()
    for epoch in range(epochs):
        batches = epoch_batches(random.fold_in(shuffle_key, epoch), num_train, batch_size)
        losses = []
        bar = tqdm(
            total=len(batches),
            desc=f"epoch {epoch + 1:>2}/{epochs}",
            unit="step",
            disable=not progress,
            file=sys.stderr,
        )
        for rows in batches:
            opt_state, loss = train_step(
                result.steps, opt_state, split.train_images[rows], split.train_labels[rows]
            )
            result.steps += 1
            losses.append(float(loss))
            # tqdm redraws at its own pace; refreshing on every step would flood a log.
            bar.set_postfix(loss=f"{np.mean(losses):.4f}", refresh=False)
            bar.update()
        result.epoch_losses.append(float(np.mean(losses)))
        result.test_accuracies.append(
            float(test_accuracy(get_params(opt_state), split.test_images, split.test_labels))
        )
        bar.set_postfix(
            loss=f"{result.epoch_losses[-1]:.4f}",
            test_acc=f"{100 * result.test_accuracies[-1]:.1f}%",
        )
        bar.close()
    result.seconds = time.perf_counter() - start
    result.params = get_params(opt_state)
    return result


def time_steps(
    split: DigitsSplit,
    key: kiln.Array,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    repeats: int = 20,
) -> tuple[float, float]:
    """Median milliseconds per training step, eager and jitted, after one warm-up step each.

    The median of single steps rather than the mean of a run, so that a burst of load on a
    shared machine does not decide the ratio.
    """
    opt_init, opt_update, get_params = optimizers.adam(learning_rate)
    train_step = make_train_step(opt_update, get_params)
    images = split.train_images[:batch_size]
    labels = split.train_labels[:batch_size]
    medians = []
    for step_fn in (train_step, kiln.jit(train_step)):
        opt_state = opt_init(init_mlp(key))
        kiln.block_until_ready(step_fn(0, opt_state, images, labels))
        step_ms = []
        for step in range(1, repeats + 1):
            start = time.perf_counter()
            opt_state, loss = kiln.block_until_ready(step_fn(step, opt_state, images, labels))
            step_ms.append(1e3 * (time.perf_counter() - start))
        medians.append(float(np.median(step_ms)))
    return medians[0], medians[1]


def plot_history(result: TrainResult, path: pathlib.Path) -> pathlib.Path:
    """Write a two-panel PNG: mean training loss and test accuracy against the epoch."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    import matplotlib.pyplot as plt

    epochs = np.arange(1, len(result.epoch_losses) + 1)
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    loss_axes.plot(epochs, result.epoch_losses, marker="o", color="tab:blue")
    loss_axes.set_yscale("log")
    loss_axes.set_title("Training loss")
    loss_axes.set_xlabel("epoch")
    loss_axes.set_ylabel("mean softmax cross-entropy (log scale)")
    accuracy_axes.plot(
        epochs, [100 * a for a in result.test_accuracies], marker="o", color="tab:green"
    )
    accuracy_axes.set_title(f"Test accuracy (final {100 * result.final_accuracy:.1f}%)")
    accuracy_axes.set_xlabel("epoch")
    accuracy_axes.set_ylabel("accuracy on the held-out images (%)")
    for axes in (loss_axes, accuracy_axes):
        axes.grid(True, alpha=0.3)
        axes.xaxis.get_major_locator().set_params(integer=True)
    sizes = "-".join(str(size) for size in LAYER_SIZES)
    figure.suptitle(f"kiln: {sizes} MLP with Adam on the 8x8 handwritten digits")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line's options; `argv` None reads sys.argv."""
    parser = argparse.ArgumentParser(
        prog="python -m kiln.examples.digits_mlp",
        description="Train a 64-128-128-10 MLP on the 8x8 handwritten digits with kiln.",
    )
    parser.add_argument("--epochs", type=int, default=20, help="passes over the training set")
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path("out"),
        help="folder for the plot (default: ./out)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the split, weights, batches")
    parser.add_argument("--batch-size", type=int, default=64, help="images per Adam step")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam's step size")
    parser.add_argument(
        "--timing-steps",
        type=int,
        default=20,
        help="steps timed eagerly and jitted (0 skips the comparison)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Train, report the test accuracy, plot the history and compare step times."""
    args = parse_args(argv)
    split_key, train_key = random.split(random.PRNGKey(args.seed))
    images, labels = load_digits()
    split = split_digits(images, labels, split_key)
    print(
        f"digits: {len(split.train_labels)} training and {len(split.test_labels)} test "
        f"images of 8x8 pixels, {NUM_CLASSES} classes"
    )
    result = train(split, train_key, args.epochs, args.batch_size, args.learning_rate)
    print(
        f"trained {result.steps} steps in {result.seconds:.1f} s; training loss "
        f"{result.epoch_losses[0]:.4f} -> {result.epoch_losses[-1]:.4f}"
    )
    print(
        f"test accuracy: {100 * result.final_accuracy:.2f}% "
        f"({round(result.final_accuracy * len(split.test_labels))}/{len(split.test_labels)})"
    )
    plot_path = plot_history(result, args.out / PLOT_NAME)
    print(f"plot: {plot_path.resolve()}")
    if args.timing_steps > 0:
        eager_ms, jit_ms = time_steps(
            split, train_key, args.batch_size, args.learning_rate, args.timing_steps
        )
        print(f"\nstep time, batch of {args.batch_size} (median of {args.timing_steps} steps)")
        print(f"  {'mode':<8}{'ms/step':>10}")
        print(f"  {'eager':<8}{eager_ms:>10.2f}")
        print(f"  {'jit':<8}{jit_ms:>10.2f}")
        print(f"  jit is {eager_ms / jit_ms:.1f}x faster than eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())

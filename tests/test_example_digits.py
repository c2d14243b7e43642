"""kiln/examples/digits_mlp.py (what `make demo` runs): the shipped data are the ones their
README describes, the model's loss and accuracy agree with NumPy, training at reduced size
learns and is deterministic, and the command line shows a progress bar, prints the test
accuracy and the step-time table, and writes a PNG plot with both curves on it."""

import hashlib
import pathlib
import re
import struct
import subprocess
import sys

import numpy as np

from kiln import random
from kiln.examples import digits_mlp
from kiln.examples.__main__ import examples

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Images per class, as scikit-learn's load_digits reports them.
CLASS_COUNTS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def test_the_shipped_data_are_the_ones_the_readme_describes():
    readme = (digits_mlp.DATA_PATH.parent / "README.md").read_text()
    assert hashlib.sha256(digits_mlp.DATA_PATH.read_bytes()).hexdigest() in readme
    images, labels = digits_mlp.load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8
    assert labels.shape == (1797,) and labels.dtype == np.uint8
    assert images.min() == 0 and images.max() == 16
    assert np.bincount(labels).tolist() == CLASS_COUNTS


def test_the_split_holds_out_360_images_and_normalizes_with_training_statistics():
    images, labels = digits_mlp.load_digits()
    split = digits_mlp.split_digits(images, labels, random.PRNGKey(0))
    assert split.train_images.shape == (1437, 64) and split.test_images.shape == (360, 64)
    assert split.train_images.dtype == np.float32 and split.train_labels.dtype == np.int32
    np.testing.assert_array_equal(
        np.bincount(np.concatenate([split.train_labels, split.test_labels])), CLASS_COUNTS
    )
    np.testing.assert_allclose(split.train_images.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(split.train_images.std(), 1, rtol=1e-5)
    # One shared scale keeps every pixel on an evenly spaced grid, one step per count: undo
    # it and the rows are the original images, each used once.
    flat = images.reshape(1797, 64)
    normalized = np.concatenate([split.train_images, split.test_images]).astype(np.float64)
    step = min(
        np.diff(np.unique(column)).min() for column in normalized.T if len(np.unique(column)) > 1
    )
    restored = np.rint((normalized - normalized.min(axis=0)) / step + flat.min(axis=0)).astype(
        np.uint8
    )
    assert sorted(map(bytes, restored)) == sorted(map(bytes, flat))
    other = digits_mlp.split_digits(images, labels, random.PRNGKey(1))
    assert not np.array_equal(other.test_labels, split.test_labels)


def test_loss_and_accuracy_agree_with_numpy():
    params = digits_mlp.init_mlp(random.PRNGKey(3))
    assert [w.shape for w, _ in params] == [(64, 128), (128, 128), (128, 10)]
    np.testing.assert_allclose(np.std(params[0][0]), np.sqrt(2 / 64), rtol=0.05)
    rng = np.random.default_rng(0)
    images = rng.standard_normal((32, 64)).astype(np.float32)
    labels = rng.integers(0, 10, 32).astype(np.int32)
    activations = images.astype(np.float64)
    for weights, bias in params[:-1]:
        activations = np.maximum(activations @ np.asarray(weights) + np.asarray(bias), 0)
    logits = activations @ np.asarray(params[-1][0]) + np.asarray(params[-1][1])
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    expected_loss = -log_probs[np.arange(32), labels].mean()
    expected_accuracy = (logits.argmax(axis=1) == labels).mean()
    np.testing.assert_allclose(
        float(digits_mlp.cross_entropy(params, images, labels)), expected_loss, rtol=1e-5
    )
    assert float(digits_mlp.accuracy(params, images, labels)) == expected_accuracy


def test_training_on_a_subset_learns_and_is_deterministic():
    images, labels = digits_mlp.load_digits()
    split = digits_mlp.split_digits(images, labels, random.PRNGKey(0))
    split.train_images, split.train_labels = split.train_images[:512], split.train_labels[:512]
    runs = [digits_mlp.train(split, random.PRNGKey(7), epochs=3, progress=False) for _ in range(2)]
    first, second = runs
    assert first.steps == 3 * (512 // 64)
    assert first.epoch_losses[0] > first.epoch_losses[1] > first.epoch_losses[2]
    assert first.final_accuracy > 0.8
    assert first.epoch_losses == second.epoch_losses
    assert first.test_accuracies == second.test_accuracies
    for (w1, b1), (w2, b2) in zip(first.params, second.params):
        np.testing.assert_array_equal(w1, w2)
        np.testing.assert_array_equal(b1, b2)


def png_size_and_pixels(path: pathlib.Path) -> tuple[tuple[int, int], np.ndarray]:
    """(width, height) from the IHDR chunk, and the decoded RGB pixels."""
    import matplotlib.image

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    pixels = matplotlib.image.imread(path)
    return (width, height), np.rint(pixels[..., :3] * 255).astype(np.int32)


def count_color(pixels: np.ndarray, rgb: tuple[int, int, int]) -> int:
    return int(np.all(np.abs(pixels - np.array(rgb)) <= 8, axis=-1).sum())


def test_the_command_line_reports_accuracy_progress_timing_and_writes_the_plot(tmp_path):
    out = tmp_path / "plots"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kiln.examples.digits_mlp",
            "--epochs",
            "2",
            "--out",
            str(out),
            "--timing-steps",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    stdout, stderr = result.stdout, result.stderr

    losses = re.search(r"training loss (\d+\.\d+) -> (\d+\.\d+)", stdout)
    assert losses and float(losses[2]) < float(losses[1])
    accuracy = re.search(r"test accuracy: (\d+\.\d+)% \((\d+)/360\)", stdout)
    assert accuracy and float(accuracy[1]) >= 80
    assert abs(float(accuracy[1]) - 100 * int(accuracy[2]) / 360) < 0.01

    # One bar per epoch, finished, with the running loss and the epoch's test accuracy.
    for epoch in (1, 2):
        assert re.search(
            rf"epoch  {epoch}/2: 100%.*22/22 .*loss=\d\.\d{{4}}, test_acc="
            r"\d+\.\d%",
            stderr,
        ), stderr[-2000:]

    eager = re.search(r"eager\s+(\d+\.\d+)", stdout)
    jitted = re.search(r"jit\s+(\d+\.\d+)", stdout)
    ratio = re.search(r"jit is (\d+\.\d)x faster than eager", stdout)
    assert eager and jitted and ratio
    # The ratio of the times printed, within what their rounding allows (two decimals each,
    # one for the ratio: a jitted step of 0.20 ms is anything from 0.195 to 0.205).
    e, j, r = float(eager[1]), float(jitted[1]), float(ratio[1])
    assert j > 0.005
    assert (e - 0.005) / (j + 0.005) - 0.05 <= r <= (e + 0.005) / (j - 0.005) + 0.05

    plot = out / digits_mlp.PLOT_NAME
    assert f"plot: {plot.resolve()}" in stdout
    assert plot.stat().st_size > 10_000
    (width, height), pixels = png_size_and_pixels(plot)
    assert (width, height) == (1000, 400) == (pixels.shape[1], pixels.shape[0])
    # Both curves are drawn: the loss in matplotlib's blue, the accuracy in its green.
    assert count_color(pixels, (31, 119, 180)) > 100
    assert count_color(pixels, (44, 160, 44)) > 100
    blue_columns = np.nonzero(np.all(np.abs(pixels - (31, 119, 180)) <= 8, axis=-1))[1]
    green_columns = np.nonzero(np.all(np.abs(pixels - (44, 160, 44)) <= 8, axis=-1))[1]
    assert blue_columns.max() < width // 2 < green_columns.min()


def test_the_examples_are_listed():
    names = dict(examples())
    assert names["digits_mlp"].startswith("Train a small MLP on the 8x8 handwritten digits")
    assert "tour" in names

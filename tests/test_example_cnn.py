"""The CNN example at reduced size: the loss falls, and the command line reports accuracy."""

from __future__ import annotations

import numpy as np

from kiln.examples import cnn


def test_cnn_loss_falls_at_reduced_size():
    result = cnn.train(epochs=3, batch_size=32, width=16, train_limit=320, verbose=False)
    losses = result["losses"]
    assert len(losses) == 3
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0], losses
    # Better than chance (10%) on the held-out images after a few hundred images.
    assert result["test_accuracy"] > 0.3


def test_cnn_command_line_prints_accuracy(capsys):
    assert cnn.main(["--epochs", "1", "--width", "4", "--batch-size", "128"]) == 0
    out = capsys.readouterr().out
    assert "test accuracy:" in out
    assert "epoch  1/1" in out

"""The training examples (DP-SGD, char-RNN, transformer LM) at reduced size: each must lower its
loss clearly, and the language models must sample text of the requested length from their
vocabulary. The DP-SGD gradient and the text batching are checked against NumPy references."""

import os

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import random
from kiln.examples import _text, char_rnn, dp_sgd, transformer_lm


def _assert_loss_falls(losses, margin):
    first, last = losses[0], losses[-1]
    assert last < first - margin, f"loss went from {first:.4f} to {last:.4f}"
    assert np.all(np.isfinite(losses))


# --- text loading --------------------------------------------------------------------------


def test_vocabulary_round_trip_and_replacement():
    vocabulary = _text.CharVocabulary()
    assert vocabulary.size == 96
    text = "def f(x):\n    return x + 1  # ok ~"
    ids = vocabulary.encode(text)
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < vocabulary.size
    assert vocabulary.decode(ids) == text
    assert vocabulary.decode(vocabulary.encode("a\tb\u00e9")) == "a?b?"


def test_corpus_is_deterministic_standard_library_text():
    first = _text.load_corpus(num_files=3, max_chars=5000)
    assert first == _text.load_corpus(num_files=3, max_chars=5000)
    assert len(first) == 5000
    path = _text.standard_library_files(1)[0]
    with open(path, encoding="utf-8", errors="replace") as handle:
        assert first.startswith(handle.read()[:1000])


def test_sequential_windows_continue_each_stream():
    data = np.arange(1000, dtype=np.int32)
    windows = _text.SequentialWindows(data, batch_size=4, length=10)
    inputs, targets, starts_pass = windows.next()
    next_inputs, _, next_starts_pass = windows.next()
    assert starts_pass and not next_starts_pass
    np.testing.assert_array_equal(targets, inputs + 1)
    np.testing.assert_array_equal(next_inputs[:, 0], inputs[:, -1] + 1)
    np.testing.assert_array_equal(inputs[:, 0], np.arange(4) * (999 // 4))


def test_random_windows_targets_follow_inputs():
    data = np.arange(500, dtype=np.int32)
    inputs, targets = _text.random_windows(data, 8, 16, np.random.default_rng(0))
    assert inputs.shape == targets.shape == (8, 16)
    np.testing.assert_array_equal(targets, inputs + 1)
    np.testing.assert_array_equal(np.diff(inputs, axis=1), 1)


# --- DP-SGD -------------------------------------------------------------------------------


def test_clipped_noisy_mean_matches_numpy_without_noise():
    rng = np.random.default_rng(0)
    grads = {
        "w": rng.normal(size=(5, 3, 2)).astype(np.float32),
        "b": rng.normal(size=(5, 2)).astype(np.float32),
    }
    clip_norm = 1.5
    result = kiln.jit(lambda g, key: dp_sgd.clipped_noisy_mean(g, key, clip_norm, 0.0))(
        grads, random.PRNGKey(0)
    )
    expected_w = np.zeros((3, 2))
    expected_b = np.zeros(2)
    for example in range(5):
        norm = np.sqrt(np.sum(grads["w"][example] ** 2) + np.sum(grads["b"][example] ** 2))
        factor = min(1.0, clip_norm / norm)
        expected_w += grads["w"][example] * factor / 5
        expected_b += grads["b"][example] * factor / 5
    np.testing.assert_allclose(result["w"], expected_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result["b"], expected_b, rtol=1e-5, atol=1e-6)


def test_clipped_noisy_mean_noise_has_sigma_c_over_batch_scale():
    zeros = {"w": np.zeros((4, 100, 100), np.float32)}
    clip_norm, sigma = 2.0, 3.0
    result = dp_sgd.clipped_noisy_mean(zeros, random.PRNGKey(1), clip_norm, sigma)
    # With zero gradients only the noise remains: N(0, (sigma * C)^2) divided by the batch of 4.
    assert np.std(np.asarray(result["w"])) == pytest.approx(sigma * clip_norm / 4, rel=0.05)


def test_per_example_gradients_match_a_python_loop():
    params = dp_sgd.init_mlp(random.PRNGKey(0), [6, 5, 3])
    x = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    y = np.array([0, 2, 1, 2], np.int32)
    loss = lambda p, xi, yi: dp_sgd.example_loss(p, xi, yi, 3)  # noqa: E731
    batched = kiln.vmap(kiln.grad(loss), in_axes=(None, 0, 0))(params, x, y)
    for example in range(4):
        single = kiln.grad(loss)(params, x[example], y[example])
        np.testing.assert_allclose(batched[0]["w"][example], single[0]["w"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dataset", ["digits", "synthetic"])
def test_dp_sgd_training_lowers_the_loss(dataset):
    if dataset == "digits" and not os.path.exists(dp_sgd.DIGITS_PATH):
        pytest.skip("kiln/examples/data/digits.npz is not present")
    history = dp_sgd.train(epochs=4, batch_size=64, hidden=32, dataset=dataset, verbose=False)
    losses = [record["train_loss"] for record in history]
    _assert_loss_falls(losses, margin=0.05 if dataset == "synthetic" else 0.3)
    chance = 0.5 if dataset == "synthetic" else 0.1
    assert history[-1]["test_accuracy"] > chance + 0.15


# --- language models ----------------------------------------------------------------------


def _check_sampler(sampler, params, length):
    vocabulary = _text.CharVocabulary()
    prompt = jnp.asarray(vocabulary.encode("def "))
    ids = np.asarray(sampler(params, random.PRNGKey(3), prompt, length, 1.0))
    assert ids.shape == (length,)
    assert ids.min() >= 0 and ids.max() < vocabulary.size
    text = vocabulary.decode(ids)
    assert len(text) == length and set(text) <= set(_text.VOCABULARY)


def test_char_rnn_training_lowers_the_loss_and_samples():
    result = char_rnn.train(
        steps=150,
        batch_size=16,
        hidden=64,
        embedding=16,
        sequence_length=16,
        step_size=1e-2,
        max_chars=40_000,
        log_every=50,
        sample_length=20,
        verbose=False,
    )
    _assert_loss_falls([loss for _, loss in result["losses"]], margin=0.5)
    assert [step for step, _ in result["losses"]] == [50, 100, 150]
    assert all(len(text) == 20 for _, text in result["samples"])
    _check_sampler(char_rnn.make_sampler(64), result["params"], 37)
    assert len(result["sample"](11)) == 11


def test_transformer_lm_training_lowers_the_loss_and_samples():
    context = 24
    result = transformer_lm.train(
        steps=150,
        batch_size=16,
        sequence_length=context,
        d_model=32,
        num_layers=2,
        num_heads=4,
        step_size=1e-2,
        warmup_steps=20,
        max_chars=40_000,
        log_every=50,
        sample_length=20,
        verbose=False,
    )
    _assert_loss_falls([loss for _, loss in result["losses"]], margin=0.5)
    assert all(len(text) == 20 for _, text in result["samples"])
    # Longer than the context, so the sampler's sliding window is exercised too.
    _check_sampler(transformer_lm.make_sampler(context, 4), result["params"], context + 13)


def test_transformer_attention_is_causal():
    params = transformer_lm.init_params(random.PRNGKey(0), 96, 8, 16, 1)
    tokens = np.array([[5, 6, 7, 8, 9, 10, 11, 12]], np.int32)
    changed = tokens.copy()
    changed[0, 5:] = [40, 41, 42]
    before = np.asarray(transformer_lm.transformer_logits(params, tokens, 2))
    after = np.asarray(transformer_lm.transformer_logits(params, changed, 2))
    np.testing.assert_allclose(before[0, :5], after[0, :5], rtol=1e-5, atol=1e-6)
    assert not np.allclose(before[0, 5:], after[0, 5:])


def test_warmup_cosine_schedule_values():
    schedule = transformer_lm.warmup_cosine_schedule(
        1.0, warmup_steps=10, total_steps=110, final_fraction=0.1
    )
    assert float(schedule(0)) == pytest.approx(0.1)
    assert float(schedule(9)) == pytest.approx(1.0)
    assert float(schedule(10)) == pytest.approx(1.0)
    assert float(schedule(60)) == pytest.approx(0.1 + 0.9 * 0.5, rel=1e-5)
    assert float(schedule(110)) == pytest.approx(0.1, rel=1e-5)

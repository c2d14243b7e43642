"""A character-level GRU language model trained on Python's standard-library sources.

The recurrence runs with lax.scan over time. Training uses truncated backpropagation through
time: the text is cut into parallel streams, each step trains on the next window of every stream,
and the hidden state carries from one window to the next without gradients flowing back across
the boundary. Every few steps it prints the loss and a text snippet sampled with
kiln.random.categorical.

Run with `python -m kiln.examples.char_rnn --help` for the options.
"""

from __future__ import annotations

import argparse

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import lax, nn, random
from kiln.example_libraries import optimizers
from kiln.examples import _text


def init_params(key, vocabulary_size: int, hidden: int, embedding: int) -> dict:
    """An embedding table, the GRU's gate weights (update, reset, candidate) and a readout."""
    keys = random.split(key, 4)

    def dense(key, fan_in, fan_out):
        return random.normal(key, (fan_in, fan_out)) / np.sqrt(fan_in)

    return {
        "embedding": random.normal(keys[0], (vocabulary_size, embedding)) * 0.1,
        # The three gates' input and recurrent weights side by side: one matmul each per step.
        "input_weights": dense(keys[1], embedding, 3 * hidden),
        "hidden_weights": dense(keys[2], hidden, 3 * hidden),
        "gate_bias": jnp.zeros(3 * hidden),
        "output_weights": dense(keys[3], hidden, vocabulary_size),
        "output_bias": jnp.zeros(vocabulary_size),
    }


def gru_cell(params: dict, hidden_state, embedded):
    """One GRU step (Cho et al., 2014) on a batch: returns the new hidden state."""
    size = hidden_state.shape[-1]
    from_input = embedded @ params["input_weights"] + params["gate_bias"]
    from_hidden = hidden_state @ params["hidden_weights"]
    update = nn.sigmoid(from_input[..., :size] + from_hidden[..., :size])
    reset = nn.sigmoid(from_input[..., size : 2 * size] + from_hidden[..., size : 2 * size])
    candidate = jnp.tanh(from_input[..., 2 * size :] + reset * from_hidden[..., 2 * size :])
    return (1.0 - update) * hidden_state + update * candidate


def run_rnn(params: dict, hidden_state, inputs):
    """Runs the GRU over `inputs` (batch, time) of ids; returns (final state, logits)."""
    embedded = jnp.swapaxes(params["embedding"][inputs], 0, 1)  # time-major for scan

    def step(state, x):
        state = gru_cell(params, state, x)
        return state, state

    final_state, states = lax.scan(step, hidden_state, embedded)
    # The readout runs on rows (one per time step and stream) so the gradient of its bias
    # reduces over one axis, which kiln compiles much faster than a reduction over two.
    length, batch, size = states.shape
    logits = states.reshape(length * batch, size) @ params["output_weights"]
    logits = (logits + params["output_bias"]).reshape(length, batch, -1)
    return final_state, jnp.swapaxes(logits, 0, 1)


def sequence_loss(params: dict, hidden_state, inputs, targets):
    """Mean next-character cross-entropy over the window, and the final hidden state."""
    final_state, logits = run_rnn(params, hidden_state, inputs)
    vocabulary_size = logits.shape[-1]
    log_probabilities = nn.log_softmax(logits)
    loss = -jnp.mean(jnp.sum(log_probabilities * nn.one_hot(targets, vocabulary_size), axis=-1))
    return loss, final_state


def make_train_step(opt_update, get_params):
    """A jitted step: (i, opt_state, hidden_state, inputs, targets) -> (opt_state, state, loss)."""
    loss_and_grad = kiln.value_and_grad(sequence_loss, has_aux=True)

    @kiln.jit
    def train_step(i, opt_state, hidden_state, inputs, targets):
        (loss, final_state), grads = loss_and_grad(
            get_params(opt_state), hidden_state, inputs, targets
        )
        # Truncation: the next window starts from this state but sends no gradient back into it.
        return opt_update(i, grads, opt_state), lax.stop_gradient(final_state), loss

    return train_step


def make_sampler(hidden: int):
    """A jitted sampler: (params, key, prompt_ids, length, temperature) -> sampled ids.

    The prompt primes the hidden state; then each step feeds back the character just sampled.
    """

    def sample(params, key, prompt_ids, length: int, temperature):
        state = jnp.zeros((1, hidden))
        state, logits = run_rnn(params, state, prompt_ids[None, :])
        first_logits = logits[0, -1]

        def step(carry, step_key):
            state, logits = carry
            character = random.categorical(step_key, logits / temperature)
            state = gru_cell(params, state, params["embedding"][character][None, :])
            next_logits = (state @ params["output_weights"] + params["output_bias"])[0]
            return (state, next_logits), character

        _, characters = lax.scan(step, (state, first_logits), random.split(key, length))
        return characters

    return kiln.jit(sample, static_argnums=(3,))


def train(
    steps: int = 1500,
    batch_size: int = 32,
    hidden: int = 128,
    embedding: int = 32,
    sequence_length: int = 32,
    step_size: float = 3e-3,
    num_files: int = 20,
    max_chars: int = 200_000,
    log_every: int = 250,
    sample_length: int = 120,
    prompt: str = "def ",
    temperature: float = 0.8,
    seed: int = 0,
    verbose: bool = True,
) -> dict:
    """Trains the GRU and returns its loss log, samples and final parameters.

    Args:
      steps: optimizer steps (one window of every stream each).
      batch_size: parallel text streams; sequence_length: characters per window.
      hidden, embedding: the GRU's state width and the embedding width.
      step_size: adam's step size.
      num_files, max_chars: how much standard-library text to read.
      log_every: print the loss (averaged since the last print) and a sample this often.
      sample_length, prompt, temperature: the printed samples.
      seed: seeds the initialization and the sampling.
      verbose: print progress.
    Returns:
      A dict with 'losses' (a list of (step, mean loss)), 'samples' (a list of (step, text)),
      'params', 'vocabulary' and 'sample' (a function (length, seed) -> text).
    """
    if not prompt:
        raise ValueError("prompt must hold at least one character to condition the samples on.")
    vocabulary = _text.CharVocabulary()
    data = vocabulary.encode(_text.load_corpus(num_files, max_chars))
    windows = _text.SequentialWindows(data, batch_size, sequence_length)

    key = random.PRNGKey(seed)
    init_key, sample_key = random.split(key)
    opt_init, opt_update, get_params = optimizers.adam(step_size)
    opt_state = opt_init(init_params(init_key, vocabulary.size, hidden, embedding))
    train_step = make_train_step(opt_update, get_params)
    sampler = make_sampler(hidden)
    prompt_ids = jnp.asarray(vocabulary.encode(prompt))

    def sample(length: int, sample_seed: int = 0) -> str:
        ids = sampler(
            get_params(opt_state), random.PRNGKey(sample_seed), prompt_ids, length, temperature
        )
        return vocabulary.decode(ids)

    if verbose:
        print(
            f"char-RNN (GRU, hidden {hidden}) on {len(data)} characters of standard-library "
            f"source, vocabulary {vocabulary.size}, {batch_size} streams x windows of "
            f"{sequence_length}, adam step size {step_size}"
        )
    zero_state = jnp.zeros((batch_size, hidden))
    hidden_state = zero_state
    log = _text.TrainingLog(
        steps,
        log_every,
        lambda params, key: vocabulary.decode(
            sampler(params, key, prompt_ids, sample_length, temperature)
        ),
        prompt,
        sample_key,
        verbose,
    )
    for i in range(steps):
        inputs, targets, starts_pass = windows.next()
        if starts_pass:
            hidden_state = zero_state
        opt_state, hidden_state, loss = train_step(i, opt_state, hidden_state, inputs, targets)
        log.step(i, loss, lambda: get_params(opt_state))
    return {
        "losses": log.losses,
        "samples": log.samples,
        "params": get_params(opt_state),
        "vocabulary": vocabulary,
        "sample": sample,
    }


def main(argv: list[str] | None = None) -> dict:
    """Parses command-line options and trains."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=32, help="parallel text streams")
    parser.add_argument("--hidden", type=int, default=128, help="GRU state width")
    parser.add_argument("--embedding", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=32, help="characters per BPTT window")
    parser.add_argument("--step-size", type=float, default=3e-3)
    parser.add_argument("--files", type=int, default=20, help="standard-library files to read")
    parser.add_argument("--max-chars", type=int, default=200_000)
    parser.add_argument("--log-every", type=int, default=250)
    parser.add_argument("--sample-length", type=int, default=120)
    parser.add_argument("--prompt", default="def ")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return train(
        steps=args.steps,
        batch_size=args.batch,
        hidden=args.hidden,
        embedding=args.embedding,
        sequence_length=args.seq_len,
        step_size=args.step_size,
        num_files=args.files,
        max_chars=args.max_chars,
        log_every=args.log_every,
        sample_length=args.sample_length,
        prompt=args.prompt,
        temperature=args.temperature,
        seed=args.seed,
    )


if __name__ == "__main__":
    main()

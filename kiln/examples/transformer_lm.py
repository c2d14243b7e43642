"""A small decoder-only transformer, a character-level language model of standard-library code.

Token and learned position embeddings feed pre-layernorm blocks of causal multi-head
self-attention and a gelu MLP; adam runs with a linear warmup and a cosine decay of the step
size. It prints the loss as it trains and text sampled with kiln.random.categorical.

Run with `python -m kiln.examples.transformer_lm --help` for the options.
"""

from __future__ import annotations

import argparse
from typing import Callable

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import lax, nn, random
from kiln.example_libraries import optimizers
from kiln.examples import _text


def init_params(
    key, vocabulary_size: int, context: int, d_model: int, num_layers: int, mlp_ratio: int = 4
) -> dict:
    """Embeddings, the blocks' attention, MLP and layernorm parameters, and the final layernorm.

    The readout reuses the token embedding (tied weights), as GPT-2 does.
    """
    keys = iter(random.split(key, 2 + 4 * num_layers))

    def dense(fan_in, fan_out, scale=1.0):
        return random.normal(next(keys), (fan_in, fan_out)) * (scale / np.sqrt(fan_in))

    def layer_norm_params():
        return {"scale": jnp.ones(d_model), "bias": jnp.zeros(d_model)}

    # Residual projections start small so each block begins close to the identity.
    residual_scale = 1.0 / np.sqrt(2 * num_layers)
    blocks = []
    for _ in range(num_layers):
        blocks.append(
            {
                "attention_norm": layer_norm_params(),
                "qkv_weights": dense(d_model, 3 * d_model),
                "attention_output": dense(d_model, d_model, residual_scale),
                "mlp_norm": layer_norm_params(),
                "mlp_in": dense(d_model, mlp_ratio * d_model),
                "mlp_in_bias": jnp.zeros(mlp_ratio * d_model),
                "mlp_out": dense(mlp_ratio * d_model, d_model, residual_scale),
                "mlp_out_bias": jnp.zeros(d_model),
            }
        )
    return {
        "token_embedding": random.normal(next(keys), (vocabulary_size, d_model)) * 0.02,
        "position_embedding": random.normal(next(keys), (context, d_model)) * 0.02,
        "blocks": blocks,
        "final_norm": layer_norm_params(),
    }


def layer_norm(params: dict, x, epsilon: float = 1e-5):
    """Normalizes the last axis to zero mean and unit variance, then scales and shifts."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(variance + epsilon) * params["scale"] + params["bias"]


def causal_self_attention(block: dict, x, batch: int, num_heads: int):
    """Multi-head attention in which position t attends to positions 0..t only.

    `x` holds the activations of `batch` sequences as rows, shape (batch * length, d_model).
    """
    rows, d_model = x.shape
    length = rows // batch
    head_size = d_model // num_heads
    qkv = (x @ block["qkv_weights"]).reshape(batch, length, 3, num_heads, head_size)
    queries, keys, values = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", queries, keys) / np.sqrt(head_size)
    causal = jnp.tril(jnp.ones((length, length), dtype=bool))
    scores = jnp.where(causal, scores, -1e9)
    weights = nn.softmax(scores, axis=-1)
    attended = jnp.einsum("bhqk,bkhd->bqhd", weights, values).reshape(rows, d_model)
    return attended @ block["attention_output"]


def transformer_logits(params: dict, tokens, num_heads: int):
    """Next-token logits (batch, length, vocabulary) for token ids (batch, length)."""
    batch, length = tokens.shape
    x = params["token_embedding"][tokens] + params["position_embedding"][:length]
    # Outside attention the activations stay two-dimensional, one row per position: the
    # gradients of the per-feature parameters (layernorm scales, biases) then reduce over a
    # single axis, which kiln compiles much faster than a reduction over (batch, length).
    x = x.reshape(batch * length, -1)
    for block in params["blocks"]:
        x = x + causal_self_attention(
            block, layer_norm(block["attention_norm"], x), batch, num_heads
        )
        hidden = nn.gelu(layer_norm(block["mlp_norm"], x) @ block["mlp_in"] + block["mlp_in_bias"])
        x = x + hidden @ block["mlp_out"] + block["mlp_out_bias"]
    x = layer_norm(params["final_norm"], x)
    return (x @ params["token_embedding"].T).reshape(batch, length, -1)


def warmup_cosine_schedule(
    peak: float, warmup_steps: int, total_steps: int, final_fraction: float = 0.1
) -> Callable:
    """A step-size schedule: linear warmup to `peak`, then cosine decay to peak*final_fraction."""

    def schedule(i):
        i = jnp.asarray(i, dtype=jnp.float32)
        warmup = peak * (i + 1) / max(warmup_steps, 1)
        progress = jnp.clip((i - warmup_steps) / max(total_steps - warmup_steps, 1), 0.0, 1.0)
        cosine = 0.5 * (1.0 + jnp.cos(np.pi * progress))
        decayed = peak * (final_fraction + (1.0 - final_fraction) * cosine)
        return jnp.where(i < warmup_steps, warmup, decayed)

    return schedule


def make_train_step(opt_update, get_params, num_heads: int):
    """A jitted step: (i, opt_state, inputs, targets) -> (opt_state, loss)."""

    def loss_fn(params, inputs, targets):
        logits = transformer_logits(params, inputs, num_heads)
        log_probabilities = nn.log_softmax(logits)
        return -jnp.mean(
            jnp.sum(log_probabilities * nn.one_hot(targets, logits.shape[-1]), axis=-1)
        )

    @kiln.jit
    def train_step(i, opt_state, inputs, targets):
        loss, grads = kiln.value_and_grad(loss_fn)(get_params(opt_state), inputs, targets)
        return opt_update(i, grads, opt_state), loss

    return train_step


def make_sampler(context: int, num_heads: int):
    """A jitted sampler: (params, key, prompt_ids, length, temperature) -> sampled ids.

    The model sees a fixed buffer of `context` tokens: it fills from the left, and once full it
    slides by one token per step, so the positions seen never exceed those trained on.
    """

    def sample(params, key, prompt_ids, length: int, temperature):
        prompt_ids = prompt_ids[-context:]
        buffer = jnp.zeros((context,), dtype=jnp.int32)
        buffer = lax.dynamic_update_slice(buffer, prompt_ids.astype(jnp.int32), (0,))

        def step(carry, step_key):
            buffer, filled = carry
            logits = transformer_logits(params, buffer[None, :], num_heads)[0]
            last = lax.dynamic_index_in_dim(logits, filled - 1, keepdims=False)
            token = random.categorical(step_key, last / temperature).astype(jnp.int32)
            write_position = jnp.minimum(filled, context - 1)
            appended = lax.dynamic_update_slice(buffer, token[None], (write_position,))
            slid = jnp.concatenate([buffer[1:], token[None]])
            buffer = jnp.where(filled < context, appended, slid)
            return (buffer, jnp.minimum(filled + 1, context)), token

        start = (buffer, jnp.asarray(prompt_ids.shape[0], dtype=jnp.int32))
        _, tokens = lax.scan(step, start, random.split(key, length))
        return tokens

    return kiln.jit(sample, static_argnums=(3,))


def train(
    steps: int = 1200,
    batch_size: int = 32,
    sequence_length: int = 64,
    d_model: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    step_size: float = 3e-3,
    warmup_steps: int = 100,
    schedule: str = "cosine",
    num_files: int = 20,
    max_chars: int = 200_000,
    log_every: int = 200,
    sample_length: int = 120,
    prompt: str = "def ",
    temperature: float = 0.8,
    seed: int = 0,
    verbose: bool = True,
) -> dict:
    """Trains the transformer and returns its loss log, samples and final parameters.

    Args:
      steps: optimizer steps; batch_size: windows per step; sequence_length: the context.
      d_model, num_layers, num_heads: the model's width, depth and attention heads.
      step_size: adam's (peak) step size; schedule: 'cosine' (warmup then cosine decay) or
        'constant'; warmup_steps: the warmup's length.
      num_files, max_chars: how much standard-library text to read.
      log_every: print the loss (averaged since the last print) and a sample this often.
      sample_length, prompt, temperature: the printed samples.
      seed: seeds the initialization, the batches and the sampling.
      verbose: print progress.
    Returns:
      A dict with 'losses' (a list of (step, mean loss)), 'samples' (a list of (step, text)),
      'params', 'vocabulary' and 'sample' (a function (length, seed) -> text).
    """
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must be a multiple of num_heads ({num_heads}).")
    if not prompt:
        raise ValueError("prompt must hold at least one character to condition the samples on.")
    vocabulary = _text.CharVocabulary()
    data = vocabulary.encode(_text.load_corpus(num_files, max_chars))
    rng = np.random.default_rng(seed)

    key = random.PRNGKey(seed)
    init_key, sample_key = random.split(key)
    if schedule == "cosine":
        step_size_fn = warmup_cosine_schedule(step_size, warmup_steps, steps)
    elif schedule == "constant":
        step_size_fn = step_size
    else:
        raise ValueError(f"unknown schedule {schedule!r}; choose 'cosine' or 'constant'.")
    opt_init, opt_update, get_params = optimizers.adam(step_size_fn)
    opt_state = opt_init(
        init_params(init_key, vocabulary.size, sequence_length, d_model, num_layers)
    )
    train_step = make_train_step(opt_update, get_params, num_heads)
    sampler = make_sampler(sequence_length, num_heads)
    prompt_ids = jnp.asarray(vocabulary.encode(prompt))

    def sample(length: int, sample_seed: int = 0) -> str:
        ids = sampler(
            get_params(opt_state), random.PRNGKey(sample_seed), prompt_ids, length, temperature
        )
        return vocabulary.decode(ids)

    if verbose:
        print(
            f"transformer LM ({num_layers} layers, d_model {d_model}, {num_heads} heads, "
            f"context {sequence_length}) on {len(data)} characters of standard-library "
            f"source, vocabulary {vocabulary.size}, batch {batch_size}, adam peak step size "
            f"{step_size} ({schedule})"
        )
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
        inputs, targets = _text.random_windows(data, batch_size, sequence_length, rng)
        opt_state, loss = train_step(i, opt_state, inputs, targets)
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
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batch", type=int, default=32, help="windows per step")
    parser.add_argument("--seq-len", type=int, default=64, help="context length in characters")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--step-size", type=float, default=3e-3, help="adam's peak step size")
    parser.add_argument("--warmup", type=int, default=100, help="warmup steps")
    parser.add_argument("--schedule", choices=("cosine", "constant"), default="cosine")
    parser.add_argument("--files", type=int, default=20, help="standard-library files to read")
    parser.add_argument("--max-chars", type=int, default=200_000)
    parser.add_argument("--log-every", type=int, default=200)
    parser.add_argument("--sample-length", type=int, default=120)
    parser.add_argument("--prompt", default="def ")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return train(
        steps=args.steps,
        batch_size=args.batch,
        sequence_length=args.seq_len,
        d_model=args.d_model,
        num_layers=args.layers,
        num_heads=args.heads,
        step_size=args.step_size,
        warmup_steps=args.warmup,
        schedule=args.schedule,
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

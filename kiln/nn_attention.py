"""kiln.nn.dot_product_attention: scaled dot-product attention with JAX's signature and layout
(query BTNH, key/value BSKH with N a multiple of K for grouped-query attention), built from
einsum, where and softmax so that every transform applies to it."""

from __future__ import annotations

import numpy as np

import kiln.numpy as jnp
from kiln import lax
from kiln.core import dtypes

__all__ = ["dot_product_attention"]


def _ensure_4d(t):
    t = jnp.asarray(t)
    if t.ndim < 4:
        return jnp.expand_dims(t, tuple(range(4 - t.ndim)))
    return t


def _check(t, shape, dtype, name: str) -> None:
    if t is None:
        return
    if t.ndim != len(shape):
        raise ValueError(f"{name} ndim should be {len(shape)}, but got {t.ndim}")
    if dtype is not None and t.dtype != dtype:
        raise ValueError(f"{name} dtype should be {dtype}, but got {t.dtype}")
    for i in range(t.ndim):
        if shape[i] != -1 and t.shape[i] != shape[i]:
            raise ValueError(f"{name} shape should be {tuple(shape)}: but got {t.shape}")


def _grouped(t, K: int, G: int):
    """A (B|1, N|1, T|1, S|1) bias or mask as (B|1, K|1, G|1, T|1, S|1), to meet logits laid out
    as (B, K, G, T, S)."""
    if t is None:
        return None
    tb, tn, tt, ts = t.shape
    if tn == 1:
        return jnp.reshape(t, (tb, 1, 1, tt, ts))
    if tn != K * G:
        raise ValueError(f"bias/mask head dimension should be 1 or {K * G}, but got {tn}")
    return jnp.reshape(t, (tb, K, G, tt, ts))


def _large_negative(dtype) -> np.ndarray:
    big = min(float(dtypes.finfo(dtype).max), float(np.finfo(np.float32).max))
    return np.asarray(-0.7 * big, dtype=dtype)


def _attend(query, key, value, bias, mask, is_causal, scale, q_len, kv_len, window, residual):
    B, T, N, H = query.shape
    _, S, K, _ = key.shape
    G = N // K
    logits_dtype = jnp.promote_types(query.dtype, np.float32)
    q = jnp.reshape(query, (B, T, K, G, H))
    logits = jnp.einsum("BTKGH,BSKH->BKGTS", q, key, preferred_element_type=logits_dtype)
    logits = logits * jnp.array(scale, dtype=logits.dtype)
    if bias is not None:
        logits = (logits + _grouped(bias, K, G)).astype(logits.dtype)

    keep = None

    def both(a, b):
        return b if a is None else jnp.logical_and(a, b)

    if mask is not None:
        keep = both(keep, _grouped(mask, K, G))
    t_pos = lax.broadcasted_iota(np.int32, (T, S), 0)
    s_pos = lax.broadcasted_iota(np.int32, (T, S), 1)
    if is_causal:
        keep = both(keep, t_pos >= s_pos)
    if window is not None:
        left, right = window
        keep = both(keep, jnp.logical_and(t_pos <= s_pos + left, t_pos >= s_pos - right))
    if q_len is not None:
        q_keep = jnp.arange(T)[None, :, None] < q_len[:, None, None]
        keep = both(keep, q_keep[:, None, None])
    if kv_len is not None:
        kv_keep = jnp.arange(S)[None, None, :] < kv_len[:, None, None]
        keep = both(keep, kv_keep[:, None, None])
    if keep is not None:
        keep = jnp.broadcast_to(keep, logits.shape)
        logits = jnp.where(keep, logits, _large_negative(logits.dtype))

    logits = logits.astype(np.float32)
    probs = _softmax(logits).astype(key.dtype)
    out = jnp.einsum("BKGTS,BSKH->BTKGH", probs, value)
    out = jnp.reshape(out, (B, T, N, H))
    if q_len is not None:
        valid = jnp.arange(T)[None, :] < q_len[:, None]
        out = out * valid[:, :, None, None].astype(out.dtype)
    if residual:
        from kiln.nn import logsumexp

        lse = logsumexp(logits, axis=-1).astype(key.dtype)
        lse = jnp.reshape(jnp.transpose(lse, (0, 3, 1, 2)), (B, T, N))
        return out, lax.stop_gradient(lse)
    return out


def _softmax(x):
    from kiln.nn import softmax

    return softmax(x, axis=-1)


def dot_product_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    query_seq_lengths=None,
    key_value_seq_lengths=None,
    local_window_size: int | tuple[int, int] | None = None,
    implementation: str | None = None,
    return_residual: bool = False,
):
    """softmax(scale * Q K^T + bias, masked) V per head; query is (B, T, N, H) or (T, N, H),
    key and value (B, S, K, H) or (S, K, H) with N a multiple of K; bias and mask broadcast to
    (B, N, T, S). ``mask`` is boolean, True where attention is allowed. Only the 'xla'
    implementation (the composed reference) exists: 'cudnn' raises. With ``return_residual``
    also returns the logsumexp of the masked logits, shaped like query without H."""
    output_shape = jnp.asarray(query).shape
    q = _ensure_4d(query)
    k = _ensure_4d(key)
    v = _ensure_4d(value)
    bias = _ensure_4d(bias) if bias is not None else None
    mask = _ensure_4d(mask) if mask is not None else None
    if query_seq_lengths is not None:
        query_seq_lengths = jnp.asarray(query_seq_lengths)
    if key_value_seq_lengths is not None:
        key_value_seq_lengths = jnp.asarray(key_value_seq_lengths)
    if isinstance(local_window_size, int):
        local_window_size = (local_window_size, local_window_size)
    B, S, K, H = k.shape
    _check(v, [B, S, K, H], k.dtype, "value")
    _check(q, [B, -1, -1, H], k.dtype, "query")
    _check(mask, [-1] * 4, np.dtype(bool), "mask")
    _check(bias, [-1] * 4, None, "bias")
    _check(query_seq_lengths, [B], np.dtype("int32"), "query_seq_lengths")
    _check(key_value_seq_lengths, [B], np.dtype("int32"), "key_value_seq_lengths")
    if q.shape[-2] % K != 0:
        raise ValueError(
            "The number of query heads must be a multiple of key/value heads, "
            f"but got {q.shape[-2]} vs {K}"
        )
    if implementation == "cudnn":
        raise NotImplementedError("kiln has no cuDNN attention; use implementation=None or 'xla'")
    if implementation not in (None, "xla"):
        raise ValueError(f"Unsupported implementation option: {implementation}")
    scale_val = (1.0 / np.sqrt(H)) if scale is None else scale
    out = _attend(
        q,
        k,
        v,
        bias,
        mask,
        is_causal,
        scale_val,
        query_seq_lengths,
        key_value_seq_lengths,
        local_window_size,
        return_residual,
    )
    if return_residual:
        out, lse = out
        return jnp.reshape(out, output_shape), jnp.reshape(lse, output_shape[:-1])
    return jnp.reshape(out, output_shape)

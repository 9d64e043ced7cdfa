"""Float64 NumPy attention: the plain reference the tests compare the Keras layers to.

Written independently of the Keras layers and kept deliberately plain.
"""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)


def attention(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """softmax(q k^T / sqrt(d)) v in float64; mask is bool, True = may attend.

    A row with every key masked gets zero weights.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is None:
        weights = softmax(scores)
    else:
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), scores.shape)
        scores = np.where(mask, scores, -np.inf)
        row_max = np.where(mask.any(-1, keepdims=True), scores.max(-1, keepdims=True), 0.0)
        e = np.where(mask, np.exp(scores - row_max), 0.0)
        total = e.sum(-1, keepdims=True)
        weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return weights @ v, weights


def multi_head_attention(query, key, value, weights: dict, num_heads: int, mask=None):
    """Multi-head attention from plain matrices.

    Args:
        query, key, value: `(batch, length, features)`.
        weights: {"wq","bq","wk","bk","wv","bv","wo","bo"}; kernels `(in, out)`.
        num_heads: heads.
        mask: bool broadcastable to `(batch, heads, q_len, k_len)`.

    Returns:
        `(output (batch, q_len, d_model), weights (batch, heads, q_len, k_len))`.
    """
    w = {name: np.asarray(a, dtype=np.float64) for name, a in weights.items()}

    def heads(x):
        b, n, d = x.shape
        return x.reshape(b, n, num_heads, d // num_heads).transpose(0, 2, 1, 3)

    q = heads(np.asarray(query, np.float64) @ w["wq"] + w["bq"])
    k = heads(np.asarray(key, np.float64) @ w["wk"] + w["bk"])
    v = heads(np.asarray(value, np.float64) @ w["wv"] + w["bv"])
    out, attn = attention(q, k, v, mask)
    b, h, n, dh = out.shape
    merged = out.transpose(0, 2, 1, 3).reshape(b, n, h * dh)
    return merged @ w["wo"] + w["bo"], attn

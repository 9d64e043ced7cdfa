"""Attention masks, with one convention everywhere in mintransformer.

**A mask is boolean and True means "may attend".** This is the convention of
`keras.layers.MultiHeadAttention` and of PyTorch's boolean `attn_mask`. The
opposite one (float masks where 1 = blocked, added to the scores as
`mask * -1e9`) is common too; mixing the two silently attends to exactly the
wrong tokens. So float or integer masks are refused with an error that says
how to convert them (`from_blocked_mask`).

Masks broadcast against attention scores of shape
`(batch, num_heads, query_length, key_length)`:

- `padding_mask(ids)`       -> `(batch, 1, 1, length)`: keys that are real tokens.
- `look_ahead_mask(length)` -> `(1, 1, length, length)`: query t sees keys <= t.
- `combined_mask(ids)`      -> `(batch, 1, length, length)`: both at once, for
  decoder self-attention.
"""

from __future__ import annotations

from keras import ops

from mintransformer.core import checks


def padding_mask(token_ids, pad_id: int = 0):
    """Marks the keys that are real tokens.

    Args:
        token_ids: int tensor `(batch, length)`.
        pad_id: the padding token id.

    Returns:
        bool tensor `(batch, 1, 1, length)`, False at padding positions.
    """
    return token_mask(token_ids, pad_id)[:, None, None, :]


def token_mask(token_ids, pad_id: int = 0):
    """bool `(batch, length)`: True where `token_ids` is not `pad_id`."""
    return ops.not_equal(token_ids, pad_id)


def look_ahead_mask(length: int):
    """Causal mask: query position t may attend to key positions 0..t.

    Args:
        length: sequence length (int or scalar tensor).

    Returns:
        bool tensor `(1, 1, length, length)`, lower triangle (diagonal included) True.
    """
    positions = ops.arange(length)
    return (positions[None, :] <= positions[:, None])[None, None, :, :]


def combined_mask(target_ids, pad_id: int = 0):
    """Look-ahead and target padding masks together, for decoder self-attention.

    Args:
        target_ids: int tensor `(batch, length)`.
        pad_id: the padding token id.

    Returns:
        bool tensor `(batch, 1, length, length)`.
    """
    length = ops.shape(target_ids)[1]
    return ops.logical_and(look_ahead_mask(length), padding_mask(target_ids, pad_id))


def from_blocked_mask(mask):
    """Converts a "blocked" mask (1 = blocked, 0 = attend) to ours (True = attend)."""
    return ops.equal(mask, 0)


def check_attention_mask(mask, name: str = "attention_mask"):
    """Validates a mask for attention scores and returns it with rank 4.

    Accepts rank 3 `(batch, query_length, key_length)` (the Keras layout) or
    rank 4 `(batch | 1, num_heads | 1, query_length | 1, key_length)`.

    Raises:
        ValueError: if the mask is not boolean or has another rank.
    """
    dtype = checks.dtype_name(mask)
    if dtype != "bool":
        raise ValueError(
            f"`{name}` must be a boolean tensor where True means 'may attend', got dtype "
            f"{dtype}. A mask where 1 means 'blocked' converts with "
            "`mintransformer.masks.from_blocked_mask(mask)`; a 0/1 mask where 1 means "
            "'attend' converts with `keras.ops.cast(mask, 'bool')`."
        )
    rank = len(mask.shape)
    if rank == 3:
        return mask[:, None, :, :]
    if rank != 4:
        raise ValueError(
            f"`{name}` must have rank 3 (batch, query_length, key_length) or rank 4 "
            f"(batch, heads, query_length, key_length), got shape {tuple(mask.shape)}."
        )
    return mask


def check_padding_mask(mask, token_ids, name: str):
    """Validates a `(batch, length)` boolean padding mask against its token ids.

    Dimensions unknown while tracing (None) match any size.

    Raises:
        ValueError: naming `name`, if the mask is not boolean or its shape is
            not that of `token_ids`.
    """
    dtype = checks.dtype_name(mask)
    if dtype != "bool":
        raise ValueError(
            f"`{name}` must be a boolean tensor (batch, length) with True at real tokens, "
            f"got dtype {dtype}."
        )
    shape, expected = tuple(mask.shape), tuple(token_ids.shape)
    if len(shape) != len(expected) or any(
        a is not None and b is not None and a != b for a, b in zip(shape, expected, strict=True)
    ):
        raise ValueError(
            f"`{name}` must have the shape of its token ids {tuple(token_ids.shape)}, "
            f"got {tuple(mask.shape)}."
        )
    return mask

"""What every Transformer block shares: Add & Norm, cached self-attention, block options.

Each sub-layer (attention or feed-forward) is wrapped in a residual connection
and layer normalisation (paper section 5.4):

    post-LN (the paper):  norm(x + dropout(sublayer(x)))
    pre-LN (norm_first):  x + dropout(sublayer(norm(x)))

Pre-LN trains more stably without learning-rate warm-up, and needs a final
LayerNorm after the last block (`Stack` adds it).
"""

from __future__ import annotations

from collections.abc import Callable

import keras
from keras import ops

from mintransformer.backend import kernels
from mintransformer.core import checks
from mintransformer.layers.arguments import config_with, stored_arguments
from mintransformer.layers.attention import MultiHeadAttention
from mintransformer.layers.dropout import Dropout
from mintransformer.layers.feedforward import FeedForward
from mintransformer.layers.layer_norm import LayerNorm


def residual(
    x,
    sublayer: Callable,
    norm: Callable,
    dropout: Callable,
    norm_first: bool,
    training: bool | None = None,
):
    """Add & Norm around `sublayer`, post-LN or pre-LN.

    Args:
        x: `(batch, length, d_model)`.
        sublayer: a callable of one `(batch, length, d_model)` tensor returning a
            tensor of that shape, or a tuple whose first item is that tensor.
        norm: the sub-layer's LayerNorm.
        dropout: the sub-layer's Dropout, applied to the sub-layer output.
        norm_first: pre-LN `x + dropout(sublayer(norm(x)))` instead of post-LN
            `norm(x + dropout(sublayer(x)))`.
        training: enables dropout.

    Returns:
        `(output (batch, length, d_model), extra)`: `extra` is the second item
        of a tuple returned by `sublayer` (attention weights), else None.
    """
    result = sublayer(norm(x) if norm_first else x)
    out, extra = result if isinstance(result, tuple) else (result, None)
    x = x + dropout(out, training=training)
    return (x if norm_first else norm(x)), extra


def cached_self_attention(
    x,
    index,
    cache,
    attention: MultiHeadAttention,
    norm: Callable,
    dropout: Callable,
    norm_first: bool,
    padding_mask=None,
    write: bool = True,
):
    """Add & Norm around causal self-attention of one position over a key/value cache.

    The inference path of `EncoderLayer.step` (a GPT block) and `DecoderLayer.step`:
    the query attends to the cache's slots `0..index-1` and to the new position's own
    key and value. With `write`, those are first written into slot `index` and the
    query attends to slots `0..index` of the written cache, which is returned: in a
    compiled loop the write is in place, and no step copies the cache. Without it the
    cache is only read (the new key and value are attended as one more slot after
    the cache's) and the new slot is returned for the caller to store: an exported
    step graph does this, so that it need not copy the cache in or out.

    Args:
        x: `(batch, 1, d_model)`, the input at position `index`.
        index: int scalar, the position being processed.
        cache: `(2, batch, heads, max_length, depth)` keys and values of
            positions `< index` (later slots are ignored).
        attention: the block's self-attention.
        norm: the sub-layer's LayerNorm.
        dropout: the sub-layer's Dropout (inactive here).
        norm_first: pre-LN instead of post-LN.
        padding_mask: optional bool `(batch, max_length)` over the cache slots,
            True at real tokens; ANDed with the causal visibility.
        write: write the new slot into the cache and return the cache.

    Returns:
        `(output (batch, 1, d_model), cache with slot index written)` with `write`,
        else `(output, new slot (2, batch, heads, 1, depth))`.
    """
    positions = ops.arange(ops.shape(cache)[3], dtype="int32")
    # The slots the query sees: those before `index`, and `index` itself once written.
    visible = ops.reshape(positions <= index if write else positions < index, (1, 1, 1, -1))
    if padding_mask is not None:
        visible = ops.logical_and(visible, padding_mask[:, None, None, :])
    if not write:  # the new position, attended as one more slot after the cache's
        current = ops.ones((1, 1, 1, 1), "bool")
        if padding_mask is not None:
            current = ops.reshape(ops.take(padding_mask, index, axis=1), (-1, 1, 1, 1))
        visible = ops.concatenate([visible, current], axis=-1)
    written = []

    # A closure so that `residual` applies the pre-LN norm before the keys are projected.
    def attend(h):
        key, value = attention.project_key_value(h)
        new_slot = ops.stack([ops.cast(key, cache.dtype), ops.cast(value, cache.dtype)])
        if write:
            written.append(write_slot(cache, new_slot, index))
            keys, values = written[0][0], written[0][1]
        else:
            written.append(new_slot)
            keys = ops.concatenate([cache[0], new_slot[0]], axis=2)
            values = ops.concatenate([cache[1], new_slot[1]], axis=2)
        return attention(h, attention_mask=visible, key_value=(keys, values))

    x, _ = residual(x, attend, norm, dropout, norm_first, False)
    return x, written[0]


def write_slot(cache, new_slot, index):
    """`cache` `(2, batch, heads, max_length, depth)` with slot `index` set to `new_slot`
    `(2, batch, heads, 1, depth)` (`kernels.write_position`)."""
    return kernels.write_position(cache, new_slot, index, axis=3)


class BlockOptions(keras.layers.Layer):
    """Arguments, sub-layer builders and config shared by `EncoderLayer` and `DecoderLayer`.

    Args:
        d_model: model width.
        num_heads: attention heads; must divide `d_model` unless `key_dim` is given.
        dff: feed-forward inner width.
        dropout_rate: dropout on sub-layer outputs (and attention weights, unless
            `attention_dropout_rate` is given).
        activation: feed-forward activation, "relu", "gelu" or "gelu_tanh".
        norm_first: pre-LN instead of the paper's post-LN.
        layer_norm_epsilon: LayerNorm epsilon.
        use_bias: biases in the attention and feed-forward projections.
        key_dim: per-head width; by default `d_model // num_heads`.
        attention_dropout_rate: dropout on the attention weights; None (the
            default) uses `dropout_rate`.
    """

    ARGUMENTS = (
        "d_model",
        "num_heads",
        "dff",
        "dropout_rate",
        "activation",
        "norm_first",
        "layer_norm_epsilon",
        "use_bias",
        "key_dim",
        "attention_dropout_rate",
    )

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dff: int,
        dropout_rate: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        use_bias: bool = True,
        key_dim: int | None = None,
        attention_dropout_rate: float | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if key_dim is None:
            checks.heads_divide(d_model, num_heads)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = checks.positive_int(dff, "dff")
        self.dropout_rate = checks.unit_interval(dropout_rate, "dropout_rate")
        self.activation = activation
        self.norm_first = bool(norm_first)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.use_bias = bool(use_bias)
        self.key_dim = key_dim
        self.attention_dropout_rate = (
            self.dropout_rate
            if attention_dropout_rate is None
            else checks.unit_interval(attention_dropout_rate, "attention_dropout_rate")
        )

    @classmethod
    def repeated(cls, count: int, **arguments) -> list[BlockOptions]:
        """`count` new blocks of this class, all with `arguments`, named after the class:
        "encoder_layer1", "encoder_layer2", ... for `EncoderLayer`."""
        kind = cls.__name__.replace("Layer", "").lower()
        return [cls(**arguments, name=f"{kind}_layer{i}") for i in range(1, count + 1)]

    def attention(self, name: str) -> MultiHeadAttention:
        """A new multi-head attention with these options."""
        return MultiHeadAttention(
            self.d_model,
            self.num_heads,
            self.attention_dropout_rate,
            self.use_bias,
            self.key_dim,
            dtype=self.dtype_policy,
            name=name,
        )

    def feed_forward(self, name: str = "feed_forward") -> FeedForward:
        """A new position-wise feed-forward network with these options."""
        arguments = stored_arguments(self, FeedForward.ARGUMENTS)
        return FeedForward(**arguments, dtype=self.dtype_policy, name=name)

    def norm(self, name: str) -> LayerNorm:
        """A new LayerNorm with `layer_norm_epsilon`."""
        return LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)

    def dropout(self) -> Dropout:
        """A new Dropout at `dropout_rate`."""
        return Dropout(self.dropout_rate, dtype=self.dtype_policy)

    # The three sub-layers every block runs. Subclasses create, in their own order (which
    # is the order of their weights), `self_attention`, `ffn` and, per sub-layer, a norm
    # and a dropout named after it: `self_attention_norm`, `ffn_dropout`, ...

    def self_attention_residual(
        self, x, attention_mask=None, training=None, return_attention_weights=False
    ):
        """Add & Norm around self-attention: `(output, weights or None)`."""
        return residual(
            x,
            lambda h: self.self_attention(
                h,
                attention_mask=attention_mask,
                training=training,
                return_attention_weights=return_attention_weights,
            ),
            self.self_attention_norm,
            self.self_attention_dropout,
            self.norm_first,
            training,
        )

    def cached_self_attention_residual(self, x, index, cache, padding_mask=None, write=True):
        """`cached_self_attention` with this block's sub-layers: `(output, written cache)`,
        or `(output, new slot)` without `write`."""
        return cached_self_attention(
            x,
            index,
            cache,
            self.self_attention,
            self.self_attention_norm,
            self.self_attention_dropout,
            self.norm_first,
            padding_mask,
            write,
        )

    def feed_forward_residual(self, x, training=None):
        """Add & Norm around the position-wise feed-forward network."""
        return residual(x, self.ffn, self.ffn_norm, self.ffn_dropout, self.norm_first, training)[0]

    def get_config(self):
        return config_with(super().get_config(), self, self.ARGUMENTS)

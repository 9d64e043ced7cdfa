"""The encoder (paper section 3.1): N identical layers of self-attention + feed-forward.

Each sub-layer is wrapped in a residual connection and layer normalisation:
post-LN `norm(x + dropout(sublayer(x)))` as in the paper (the default), or
pre-LN `x + dropout(sublayer(norm(x)))` with `norm_first=True`, which trains
more stably without warm-up and needs a final LayerNorm after the last layer.

Under a look-ahead mask an `EncoderLayer` is a GPT block; `EncoderLayer.step`
then processes one position at a time with a key/value cache, sharing
`cached_self_attention` with `DecoderLayer.step`.
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.layers import masks, validation
from mintransformer.layers.attention import MultiHeadAttention
from mintransformer.layers.embedding import TokenAndPositionEmbedding
from mintransformer.layers.feedforward import FeedForward


def residual(x, sublayer, norm, dropout, norm_first: bool, training):
    """Add & Norm around `sublayer` (a callable of one tensor), post-LN or pre-LN.

    Returns `(output, extra)` where `extra` is whatever `sublayer` returned after
    its main output (attention weights), or None.
    """
    result = sublayer(norm(x) if norm_first else x)
    out, extra = result if isinstance(result, tuple) else (result, None)
    x = x + dropout(out, training=training)
    return (x if norm_first else norm(x)), extra


def cached_self_attention(x, index, cache, attention, norm, dropout, norm_first: bool):
    """Add & Norm around causal self-attention of one position over a key/value cache.

    The shared inference path of `EncoderLayer.step` (a GPT block) and
    `DecoderLayer.step`: the new position's key and value are written into
    slot `index` of the cache, and the query attends to slots `0..index`.

    Args:
        x: `(batch, 1, d_model)`, the input at position `index`.
        index: int scalar, the position being processed.
        cache: `(2, batch, heads, max_length, depth)` keys and values of
            positions `< index` (later slots are ignored).
        attention: the layer's self-attention `MultiHeadAttention`.
        norm, dropout: the sub-layer's LayerNorm and Dropout.
        norm_first: pre-LN instead of post-LN.

    Returns:
        `(output (batch, 1, d_model), updated cache)`.
    """
    max_length = ops.shape(cache)[3]
    visible = (ops.arange(max_length) <= index)[None, None, None, :]
    updated = []

    # A closure so that `residual` applies the pre-LN norm before the keys are projected.
    def attend(h):
        key, value = attention.project_key_value(h)
        new = ops.cast(ops.stack([key, value]), cache.dtype)
        new = ops.slice_update(cache, (0, 0, 0, index, 0), new)
        updated.append(new)
        return attention(h, attention_mask=visible, key_value=(new[0], new[1]))

    x, _ = residual(x, attend, norm, dropout, norm_first, False)
    return x, updated[0]


class _LayerOptions(keras.layers.Layer):
    """Arguments and config shared by `EncoderLayer` and `DecoderLayer`."""

    def __init__(
        self,
        d_model,
        num_heads,
        dff,
        dropout_rate=0.1,
        activation="relu",
        norm_first=False,
        layer_norm_epsilon=1e-6,
        use_bias=True,
        key_dim=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if key_dim is None:
            validation.heads_divide(d_model, num_heads)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = validation.positive_int(dff, "dff")
        self.dropout_rate = validation.dropout_rate(dropout_rate)
        self.activation = activation
        self.norm_first = bool(norm_first)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.use_bias = use_bias
        self.key_dim = key_dim

    def attention(self, name):
        return MultiHeadAttention(
            self.d_model,
            self.num_heads,
            self.dropout_rate,
            self.use_bias,
            self.key_dim,
            dtype=self.dtype_policy,
            name=name,
        )

    def feed_forward(self):
        return FeedForward(
            self.d_model,
            self.dff,
            self.activation,
            self.use_bias,
            dtype=self.dtype_policy,
            name="feed_forward",
        )

    def norm(self, name):
        return keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def dropout(self):
        return keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            num_heads=self.num_heads,
            dff=self.dff,
            dropout_rate=self.dropout_rate,
            activation=self.activation,
            norm_first=self.norm_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
            use_bias=self.use_bias,
            key_dim=self.key_dim,
        )
        return config


@keras.saving.register_keras_serializable(package="mintransformer")
class EncoderLayer(_LayerOptions):
    """Self-attention then feed-forward, each with Add & Norm.

    Args:
        d_model: model width.
        num_heads: attention heads; must divide `d_model`.
        dff: feed-forward inner width.
        dropout_rate: dropout on sub-layer outputs and attention weights.
        activation: feed-forward activation, "relu" or "gelu".
        norm_first: pre-LN instead of the paper's post-LN.
        layer_norm_epsilon: LayerNorm epsilon.
        use_bias: biases in the attention and feed-forward projections.
        key_dim: per-head width; by default `d_model // num_heads`.

    Call arguments:
        x: `(batch, length, d_model)`.
        attention_mask: bool, broadcastable to `(batch, heads, length, length)`,
            True = may attend (usually `masks.padding_mask(source_ids)`).
        training: enables dropout.
        return_attention_weights: also return `(batch, heads, length, length)` weights.

    Returns:
        `(batch, length, d_model)`, or `(output, weights)`.
    """

    def __init__(self, d_model, num_heads, dff, **kwargs):
        super().__init__(d_model, num_heads, dff, **kwargs)
        self.self_attention = self.attention("self_attention")
        self.ffn = self.feed_forward()
        self.attention_norm = self.norm("attention_norm")
        self.ffn_norm = self.norm("ffn_norm")
        self.attention_dropout = self.dropout()
        self.ffn_dropout = self.dropout()

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.ffn.build(input_shape)
        self.attention_norm.build(input_shape)
        self.ffn_norm.build(input_shape)
        self.built = True

    def call(self, x, attention_mask=None, training=None, return_attention_weights=False):
        validation.rank(x, 3, "x", "(batch, length, d_model)")
        x, weights = residual(
            x,
            lambda h: self.self_attention(
                h,
                attention_mask=attention_mask,
                training=training,
                return_attention_weights=return_attention_weights,
            ),
            self.attention_norm,
            self.attention_dropout,
            self.norm_first,
            training,
        )
        x, _ = residual(x, self.ffn, self.ffn_norm, self.ffn_dropout, self.norm_first, training)
        return (x, weights) if return_attention_weights else x

    def step(self, x, index, cache):
        """Processes one position of a causal (GPT-style) stack with a key/value cache.

        Inference only; equals `call` at position `index` under a look-ahead mask.

        Args:
            x: `(batch, 1, d_model)`, the input at position `index`.
            index: int scalar, the position being processed.
            cache: `(2, batch, heads, max_length, depth)` keys and values of
                positions `< index` (later slots are ignored).

        Returns:
            `(output (batch, 1, d_model), updated cache)`.
        """
        x, cache = cached_self_attention(
            x,
            index,
            cache,
            self.self_attention,
            self.attention_norm,
            self.attention_dropout,
            self.norm_first,
        )
        x, _ = residual(x, self.ffn, self.ffn_norm, self.ffn_dropout, self.norm_first, False)
        return x, cache


class _Stack(keras.layers.Layer):
    """Embedding + N layers (+ final LayerNorm when pre-LN): shared by Encoder and Decoder."""

    layer_class: type

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        vocab_size,
        max_length,
        dropout_rate=0.1,
        pad_id=0,
        activation="relu",
        norm_first=False,
        position="sinusoidal",
        layer_norm_epsilon=1e-6,
        key_dim=None,
        ngram_buckets=0,
        ngram_dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_layers = validation.positive_int(num_layers, "num_layers")
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.dropout_rate = dropout_rate
        self.pad_id = pad_id
        self.activation = activation
        self.norm_first = norm_first
        self.position = position
        self.layer_norm_epsilon = layer_norm_epsilon
        self.key_dim = key_dim
        self.embedding = TokenAndPositionEmbedding(
            vocab_size,
            d_model,
            max_length,
            dropout_rate,
            position,
            ngram_buckets=ngram_buckets,
            ngram_dropout=ngram_dropout,
            dtype=self.dtype_policy,
            name="embedding",
        )
        prefix = self.layer_class.__name__.replace("Layer", "").lower()
        self.blocks = [
            self.layer_class(
                d_model,
                num_heads,
                dff,
                dropout_rate=dropout_rate,
                activation=activation,
                norm_first=norm_first,
                layer_norm_epsilon=layer_norm_epsilon,
                key_dim=key_dim,
                dtype=self.dtype_policy,
                name=f"{prefix}_layer{i + 1}",
            )
            for i in range(num_layers)
        ]
        self.final_norm = (
            keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="final_norm"
            )
            if norm_first
            else None
        )

    def build(self, input_shape):
        self.embedding.build(input_shape)
        hidden_shape = tuple(input_shape) + (self.d_model,)
        for block in self.blocks:
            block.build(hidden_shape)
        if self.final_norm is not None:
            self.final_norm.build(hidden_shape)
        self.built = True

    def finish(self, x):
        return x if self.final_norm is None else self.final_norm(x)

    def empty_cache(self, batch_size, max_length: int):
        """Per layer, zeros `(2, batch, heads, max_length, depth)` for cached `step`s."""
        depth = self.blocks[0].self_attention.depth
        shape = (2, batch_size, self.num_heads, max_length, depth)
        return tuple(ops.zeros(shape, dtype=self.compute_dtype) for _ in self.blocks)

    def padding_mask(self, token_ids, mask, name):
        """`(batch, length)` bool: the given mask (checked) or one built from `pad_id`."""
        validation.rank(token_ids, 2, "token_ids", "(batch, length)")
        if mask is None:
            return masks.token_mask(token_ids, self.pad_id)
        return masks.check_padding_mask(mask, token_ids, name)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            d_model=self.d_model,
            num_heads=self.num_heads,
            dff=self.dff,
            vocab_size=self.vocab_size,
            max_length=self.max_length,
            dropout_rate=self.dropout_rate,
            pad_id=self.pad_id,
            activation=self.activation,
            norm_first=self.norm_first,
            position=self.position,
            layer_norm_epsilon=self.layer_norm_epsilon,
            key_dim=self.key_dim,
            ngram_buckets=self.embedding.ngram_buckets,
            ngram_dropout=self.embedding.ngram_dropout,
        )
        return config


@keras.saving.register_keras_serializable(package="mintransformer")
class Encoder(_Stack):
    """Token ids -> contextual vectors: embedding, positions, `num_layers` EncoderLayers.

    Args:
        num_layers: number of EncoderLayers.
        d_model, num_heads, dff, dropout_rate, activation, norm_first,
            layer_norm_epsilon, key_dim: as `EncoderLayer`.
        vocab_size: source vocabulary size.
        max_length: longest source sequence (the seeds' `pe_input`).
        pad_id: padding id used to build the padding mask.
        position: "sinusoidal" or "learned".
        ngram_buckets, ngram_dropout: hashed bigram embedding added to each
            token's, as `TokenAndPositionEmbedding` (0 buckets: none).

    Call arguments:
        token_ids: int `(batch, length)`.
        padding_mask: optional bool `(batch, length)`, True at real tokens; by
            default `token_ids != pad_id`.
        training: enables dropout.
        return_attention_weights: also return {"encoder_layer{i}": weights}.

    Returns:
        `(batch, length, d_model)`, or `(output, weights_dict)`.
    """

    layer_class = EncoderLayer

    def call(self, token_ids, padding_mask=None, training=None, return_attention_weights=False):
        keep = self.padding_mask(token_ids, padding_mask, "padding_mask")
        attention_mask = keep[:, None, None, :]
        x = self.embedding(token_ids, training=training)
        all_weights = {}
        for i, block in enumerate(self.blocks, start=1):
            x = block(
                x,
                attention_mask=attention_mask,
                training=training,
                return_attention_weights=return_attention_weights,
            )
            if return_attention_weights:
                x, all_weights[f"encoder_layer{i}"] = x
        x = self.finish(x)
        return (x, all_weights) if return_attention_weights else x

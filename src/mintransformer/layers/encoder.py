"""The encoder (paper section 3.1): N identical blocks of self-attention + feed-forward.

Each sub-layer is wrapped in Add & Norm (`sublayer.residual`), post-LN as in the
paper or pre-LN with `norm_first=True`.

Under a look-ahead mask an `EncoderLayer` is a GPT block; `EncoderLayer.step`
then processes one position at a time with a key/value cache, sharing
`BlockOptions.cached_self_attention_residual` with `DecoderLayer.step`.
"""

from __future__ import annotations

import keras

from mintransformer.core import checks
from mintransformer.layers.layer_norm import LayerNorm
from mintransformer.layers.stack import Stack
from mintransformer.layers.sublayer import BlockOptions


@keras.saving.register_keras_serializable(package="mintransformer")
class EncoderLayer(BlockOptions):
    """Self-attention then feed-forward, each with Add & Norm.

    Args: as `BlockOptions` (`layers.sublayer`).

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
        self.self_attention_norm = self.norm("attention_norm")
        self.ffn_norm = self.norm("ffn_norm")
        self.self_attention_dropout = self.dropout()
        self.ffn_dropout = self.dropout()

    @property
    def attention_norm(self) -> LayerNorm:
        """The earlier name of `self_attention_norm`. `.keras` files store weights under
        attribute names, visited in sorted order, so this name keeps their layout."""
        return self.self_attention_norm

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.ffn.build(input_shape)
        self.self_attention_norm.build(input_shape)
        self.ffn_norm.build(input_shape)
        self.built = True

    def call(self, x, attention_mask=None, training=None, return_attention_weights=False):
        checks.rank(x, 3, "x", "(batch, length, d_model)")
        x, weights = self.self_attention_residual(
            x, attention_mask, training, return_attention_weights
        )
        x = self.feed_forward_residual(x, training)
        return (x, weights) if return_attention_weights else x

    def step(self, x, index, cache, padding_mask=None, write=True):
        """Processes one position of a causal (GPT-style) stack with a key/value cache.

        Inference only; equals `call` at position `index` under a look-ahead mask
        (ANDed with the same padding mask).

        Args:
            x: `(batch, 1, d_model)`, the input at position `index`.
            index: int scalar, the position being processed.
            cache: `(2, batch, heads, max_length, depth)` keys and values of
                positions `< index` (later slots are ignored).
            padding_mask: optional bool `(batch, max_length)` over the cache
                slots, True at real tokens.
            write: return the cache with position `index` written, rather than the
                position's keys and values alone (`cached_self_attention`).

        Returns:
            `(output (batch, 1, d_model), cache)` with `write`, else `(output, new slot
            (2, batch, heads, 1, depth))`.
        """
        x, cache = self.cached_self_attention_residual(x, index, cache, padding_mask, write)
        return self.feed_forward_residual(x), cache


@keras.saving.register_keras_serializable(package="mintransformer")
class Encoder(Stack):
    """Token ids -> contextual vectors: embedding, positions, `num_layers` EncoderLayers.

    Args:
        num_layers: number of EncoderLayers.
        d_model, num_heads, dff, dropout_rate, activation, norm_first,
            layer_norm_epsilon, key_dim, use_bias: as `EncoderLayer`.
        vocab_size: source vocabulary size.
        max_length: longest source sequence.
        pad_id: padding id used to build the padding mask; None: every token is real.
        position: "sinusoidal" or "learned".
        ngram_buckets, ngram_dropout: hashed bigram embedding added to each
            token's, as `TokenAndPositionEmbedding` (0 buckets: none).
        scale_embeddings: multiply token embeddings by sqrt(d_model) (the paper).

    Call arguments:
        token_ids: int `(batch, length)`.
        padding_mask: optional bool `(batch, length)`, True at real tokens; by
            default `token_ids != pad_id`.
        training: enables dropout.
        return_attention_weights: also return {"encoder_layer{i}": weights}.

    Returns:
        `(batch, length, d_model)`, or `(output, weights_dict)`.
    """

    block_class = EncoderLayer

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

    def call_with_mask(
        self, token_ids, padding_mask=None, mask_name: str = "padding_mask", **call_arguments
    ):
        """Calls the encoder; returns `(result of call, padding mask)`.

        The bool `(batch, length)` mask is the one the encoder used (checked, or
        built from `pad_id`), for the layers that read its output: cross-attention,
        pooling. `mask_name` is the argument name that errors report.
        """
        keep = self.padding_mask(token_ids, padding_mask, mask_name)
        return self(token_ids, padding_mask=keep, **call_arguments), keep

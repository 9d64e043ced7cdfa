"""The decoder (paper section 3.1): masked self-attention, cross-attention, feed-forward.

Cross-attention reads the encoder output and must use the *source* padding
mask: its keys are source positions. (Using the target mask there is a classic
bug that shapes hide whenever source and target have the same length.)

`DecoderLayer.step` and `Decoder.step` decode one position at a time with a key/
value cache: keys and values of past target positions are stored instead of
recomputed, and the cross-attention keys/values of the encoder output are
projected once per source (`Decoder.cross_key_values`).
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.core import checks
from mintransformer.layers import masks
from mintransformer.layers.stack import Stack
from mintransformer.layers.sublayer import BlockOptions, residual


@keras.saving.register_keras_serializable(package="mintransformer")
class DecoderLayer(BlockOptions):
    """Masked self-attention, cross-attention over the encoder output, feed-forward.

    Args: as `EncoderLayer`.

    Call arguments:
        x: `(batch, target_length, d_model)`.
        encoder_output: `(batch, source_length, d_model)`.
        self_attention_mask: bool, broadcastable to
            `(batch, heads, target_length, target_length)`; usually
            `masks.combined_mask(target_ids)`.
        cross_attention_mask: bool, broadcastable to
            `(batch, heads, target_length, source_length)`; usually
            `masks.padding_mask(source_ids)`.
        training: enables dropout.
        return_attention_weights: also return the self-attention weights
            `(batch, heads, target_length, target_length)` and the cross-attention
            weights `(batch, heads, target_length, source_length)`.

    Returns:
        `(batch, target_length, d_model)`, or
        `(output, self_attention_weights, cross_attention_weights)`.
    """

    def __init__(self, d_model, num_heads, dff, **kwargs):
        super().__init__(d_model, num_heads, dff, **kwargs)
        self.self_attention = self.attention("self_attention")
        self.cross_attention = self.attention("cross_attention")
        self.ffn = self.feed_forward()
        self.self_attention_norm = self.norm("self_attention_norm")
        self.cross_attention_norm = self.norm("cross_attention_norm")
        self.ffn_norm = self.norm("ffn_norm")
        self.self_attention_dropout = self.dropout()
        self.cross_attention_dropout = self.dropout()
        self.ffn_dropout = self.dropout()

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.cross_attention.build(input_shape)
        self.ffn.build(input_shape)
        for norm in (self.self_attention_norm, self.cross_attention_norm, self.ffn_norm):
            norm.build(input_shape)
        self.built = True

    def _cross_and_feed_forward(self, x, cross_attend, training):
        x, cross_weights = residual(
            x,
            cross_attend,
            self.cross_attention_norm,
            self.cross_attention_dropout,
            self.norm_first,
            training,
        )
        return self.feed_forward_residual(x, training), cross_weights

    def call(
        self,
        x,
        encoder_output,
        self_attention_mask=None,
        cross_attention_mask=None,
        training=None,
        return_attention_weights=False,
    ):
        checks.rank(x, 3, "x", "(batch, length, d_model)")
        checks.rank(encoder_output, 3, "encoder_output", "(batch, length, d_model)")
        x, self_weights = self.self_attention_residual(
            x, self_attention_mask, training, return_attention_weights
        )
        x, cross_weights = self._cross_and_feed_forward(
            x,
            lambda h: self.cross_attention(
                h,
                encoder_output,
                attention_mask=cross_attention_mask,
                training=training,
                return_attention_weights=return_attention_weights,
            ),
            training,
        )
        return (x, self_weights, cross_weights) if return_attention_weights else x

    def step(self, x, index, cache, cross_key_value, cross_attention_mask=None, write=True):
        """Decodes one position with a self-attention key/value cache (inference only).

        Args:
            x: `(batch, 1, d_model)`, the input at position `index`.
            index: int scalar, the position being decoded.
            cache: `(2, batch, heads, max_length, depth)` keys and values of
                positions `< index` (later slots are ignored).
            cross_key_value: `(keys, values)` of the encoder output from
                `cross_attention.project_key_value`.
            cross_attention_mask: bool, broadcastable to `(batch, heads, 1, source_length)`.
            write: return the cache with position `index` written, rather than the
                position's keys and values alone (`cached_self_attention`).

        Returns:
            `(output (batch, 1, d_model), cache)` with `write`, else `(output, new slot
            (2, batch, heads, 1, depth))`.
        """
        x, cache = self.cached_self_attention_residual(x, index, cache, write=write)
        x, _ = self._cross_and_feed_forward(
            x,
            lambda h: self.cross_attention(
                h, attention_mask=cross_attention_mask, key_value=cross_key_value
            ),
            False,
        )
        return x, cache


@keras.saving.register_keras_serializable(package="mintransformer")
class Decoder(Stack):
    """Target ids + encoder output -> vectors: embedding, positions, `num_layers` DecoderLayers.

    Args: as `Encoder`, with `vocab_size` the target vocabulary and `max_length`
    the longest target sequence.

    Call arguments:
        token_ids: int `(batch, target_length)`.
        encoder_output: `(batch, source_length, d_model)`.
        source_padding_mask: bool `(batch, source_length)`, True at real source
            tokens; masks the cross-attention keys. Required unless the source
            has no padding.
        target_padding_mask: optional bool `(batch, target_length)`; by default
            `token_ids != pad_id`. Combined with the look-ahead mask.
        training: enables dropout.
        return_attention_weights: also return the weights of every layer,
            {"decoder_layer{i}_self_attention": ..., "decoder_layer{i}_cross_attention": ...}.

    Returns:
        `(batch, target_length, d_model)`, or `(output, weights_dict)`.
    """

    block_class = DecoderLayer

    def call(
        self,
        token_ids,
        encoder_output,
        source_padding_mask=None,
        target_padding_mask=None,
        training=None,
        return_attention_weights=False,
    ):
        keep = self.padding_mask(token_ids, target_padding_mask, "target_padding_mask")
        length = ops.shape(token_ids)[1]
        self_mask = ops.logical_and(masks.look_ahead_mask(length), keep[:, None, None, :])
        cross_mask = None
        if source_padding_mask is not None:
            cross_mask = masks.check_padding_mask(
                source_padding_mask, encoder_output[..., 0], "source_padding_mask"
            )[:, None, None, :]
        x = self.embedding(token_ids, training=training)
        all_weights = {}
        for i, block in enumerate(self.blocks, start=1):
            x = block(
                x,
                encoder_output,
                self_attention_mask=self_mask,
                cross_attention_mask=cross_mask,
                training=training,
                return_attention_weights=return_attention_weights,
            )
            if return_attention_weights:
                (
                    x,
                    all_weights[f"decoder_layer{i}_self_attention"],
                    all_weights[f"decoder_layer{i}_cross_attention"],
                ) = x
        x = self.finish(x)
        return (x, all_weights) if return_attention_weights else x

    def cross_key_values(self, encoder_output):
        """Per layer, the cross-attention (keys, values) of `encoder_output`, computed once."""
        return [block.cross_attention.project_key_value(encoder_output) for block in self.blocks]

    def step(self, token_ids, index, cache, cross_key_values, source_padding_mask=None):
        """Runs one target position through every layer with the key/value cache.

        Args:
            token_ids: int `(batch, 1)`, the tokens at position `index`.
            index: int scalar position.
            cache: per-layer tuple from `empty_cache` or the previous step.
            cross_key_values: from `cross_key_values(encoder_output)`.
            source_padding_mask: optional bool `(batch, source_length)`, True at
                real source tokens.

        Returns:
            `(hidden (batch, 1, d_model), updated cache)`.

        Raises:
            ValueError: if `source_padding_mask` is not bool or does not match
                the source length of `cross_key_values`.
        """
        return self._step(token_ids, index, cache, cross_key_values, source_padding_mask)

    def step_new_slots(self, token_ids, index, cache, cross_key_values, source_padding_mask=None):
        """`step` without writing the cache: `(hidden, per-layer new slots (2, batch,
        heads, 1, depth))`. An exported step graph returns these, and its caller stores
        them."""
        return self._step(
            token_ids, index, cache, cross_key_values, source_padding_mask, write=False
        )

    def _step(self, token_ids, index, cache, cross_key_values, source_padding_mask, write=True):
        """`step` (`write`) or `step_new_slots`."""
        cross_mask = None
        if source_padding_mask is not None:
            source_keys = cross_key_values[0][0]  # (batch, heads, source_length, depth)
            cross_mask = masks.check_padding_mask(
                source_padding_mask, source_keys[:, 0, :, 0], "source_padding_mask"
            )[:, None, None, :]
        x = self.embedding(token_ids, start_index=index)
        per_layer = []
        for block, layer_cache, cross_kv in zip(self.blocks, cache, cross_key_values, strict=True):
            x, written = block.step(x, index, layer_cache, cross_kv, cross_mask, write)
            per_layer.append(written)
        return self.finish(x), tuple(per_layer)

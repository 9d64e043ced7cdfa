"""A decoder-only (GPT-style) language model built from our layers.

    logits = Embedding^T(FinalNorm(EncoderLayer_N(...EncoderLayer_1(Embedding(ids)))))

The blocks are `EncoderLayer`s under a causal + padding mask (no cross-attention),
so position t reads positions <= t only. The output projection is tied to the
token embedding. `step` runs one position through every block with the same
per-layer key/value cache layout as `Decoder.step` (`EncoderLayer.step`).
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.layers import masks
from mintransformer.layers.arguments import constructor_arguments
from mintransformer.layers.encoder import EncoderLayer
from mintransformer.layers.stack import Stack


class CausalStack(Stack):
    """Embedding + EncoderLayers under a look-ahead mask (+ final LayerNorm when pre-LN).

    Args: as `Stack`.

    Call arguments:
        token_ids: int `(batch, length)`.
        padding_mask: optional bool `(batch, length)`, True at real tokens; by
            default `token_ids != pad_id`. Combined with the look-ahead mask.
        training: enables dropout.

    Returns:
        `(batch, length, d_model)`.
    """

    block_class = EncoderLayer

    def call(self, token_ids, padding_mask=None, training=None):
        keep = self.padding_mask(token_ids, padding_mask, "padding_mask")
        length = ops.shape(token_ids)[1]
        attention_mask = ops.logical_and(masks.look_ahead_mask(length), keep[:, None, None, :])
        x = self.embedding(token_ids, training=training)
        for block in self.blocks:
            x = block(x, attention_mask=attention_mask, training=training)
        return self.finish(x)

    def step(self, token_ids, index, cache, padding_mask=None):
        """Runs one position through every block with the key/value cache (inference only).

        Args:
            token_ids: int `(batch, 1)`, the tokens at position `index`.
            index: int scalar position.
            cache: per-block tuple from `empty_cache` or the previous step.
            padding_mask: optional bool `(batch, cache_length)` over the cache
                slots, True at real tokens.

        Returns:
            `(hidden (batch, 1, d_model), updated cache)`.

        Raises:
            ValueError: if `padding_mask` is not bool or not `(batch, cache_length)`.
        """
        return self._step(token_ids, index, cache, padding_mask)

    def step_new_slots(self, token_ids, index, cache, padding_mask=None):
        """`step` without writing the cache: `(hidden, per-block new slots (2, batch,
        heads, 1, depth))`, as `Decoder.step_new_slots`."""
        return self._step(token_ids, index, cache, padding_mask, write=False)

    def _step(self, token_ids, index, cache, padding_mask, write=True):
        """`step` (`write`) or `step_new_slots`."""
        if padding_mask is not None:
            slots = cache[0][0, :, 0, :, 0]  # (batch, cache_length)
            padding_mask = masks.check_padding_mask(padding_mask, slots, "padding_mask")
        x = self.embedding(token_ids, start_index=index)
        per_block = []
        for block, layer_cache in zip(self.blocks, cache, strict=True):
            x, written = block.step(x, index, layer_cache, padding_mask, write)
            per_block.append(written)
        return self.finish(x), tuple(per_block)


@keras.saving.register_keras_serializable(package="mintransformer")
class LanguageModel(keras.Model):
    """Decoder-only Transformer language model with a tied output projection.

    Args:
        num_layers: number of blocks.
        d_model: model width.
        num_heads: attention heads; must divide `d_model`.
        dff: feed-forward inner width.
        vocab_size: vocabulary size.
        max_length: longest sequence (size of the position table).
        dropout_rate: dropout on embeddings, sub-layer outputs and attention weights.
        pad_id: padding token id; padded keys are masked. None: every token is
            real unless an explicit padding mask says otherwise.
        activation: feed-forward activation, "gelu" (GPT) or "relu".
        norm_first: pre-LN blocks plus a final LayerNorm (GPT-2) instead of post-LN.
        position: "learned" (GPT) or "sinusoidal".
        layer_norm_epsilon: LayerNorm epsilon.
        scale_embeddings: multiply token embeddings by sqrt(d_model) (the paper;
            GPT-2 does not).
        use_bias: biases in the attention and feed-forward projections.

    Call arguments:
        token_ids: int `(batch, length)`, `length <= max_length`.
        padding_mask: optional bool `(batch, length)`, True at real tokens; by
            default `token_ids != pad_id`.
        training: enables dropout.

    Returns:
        float32 logits `(batch, length, vocab_size)`; position t predicts token t + 1.
    """

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
        activation="gelu",
        norm_first=True,
        position="learned",
        layer_norm_epsilon=1e-5,
        scale_embeddings=True,
        use_bias=True,
        **kwargs,
    ):
        # Every argument above, by name: the stack's settings and the saved config.
        config = constructor_arguments(locals())
        super().__init__(**kwargs)
        self.config = config
        self.decoder = CausalStack(**config, dtype=self.dtype_policy, name="decoder")

    @property
    def max_length(self) -> int:
        """Longest sequence the model takes (its position table)."""
        return self.decoder.max_length

    @property
    def vocab_size(self) -> int:
        return self.decoder.vocab_size

    def build(self, input_shape):
        self.decoder.build(input_shape)
        self.built = True

    def project(self, hidden):
        """Hidden states `(..., d_model)` -> float32 vocabulary logits (tied embedding)."""
        return ops.cast(self.decoder.embedding.logits(hidden), "float32")

    def call(self, token_ids, padding_mask=None, training=None):
        return self.project(self.decoder(token_ids, padding_mask=padding_mask, training=training))

    def empty_cache(self, batch_size, max_length: int) -> tuple:
        """Per layer, zeros `(2, batch, heads, max_length, depth)` for `step`."""
        return self.decoder.empty_cache(batch_size, max_length)

    def step(self, token_ids, index, cache, padding_mask=None):
        """Runs one position through every block with the key/value cache (inference only).

        Equals `call` at position `index` (with the same padding mask).

        Args:
            token_ids: int `(batch, 1)`, the tokens at position `index`.
            index: int scalar position, `< max_length` and `<` the cache length.
            cache: per-layer tuple from `empty_cache` or the previous step.
            padding_mask: optional bool `(batch, cache_length)` over the cache
                slots, True at real tokens (e.g. False at a left-padded prompt's
                padding); slots after `index` are ignored.

        Returns:
            `(logits (batch, vocab_size) float32 predicting position index + 1, cache)`.
        """
        hidden, cache = self.decoder.step(token_ids, index, cache, padding_mask)
        return self.project(hidden)[:, 0], cache

    def get_config(self):
        return {**super().get_config(), **self.config}

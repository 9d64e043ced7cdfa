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

from mintransformer.layers import masks, validation
from mintransformer.layers.encoder import EncoderLayer, _Stack


class _CausalStack(_Stack):
    """Embedding + EncoderLayers under a look-ahead mask (+ final LayerNorm when pre-LN)."""

    layer_class = EncoderLayer

    def call(self, token_ids, training=None):
        validation.rank(token_ids, 2, "token_ids", "(batch, length)")
        attention_mask = masks.combined_mask(token_ids, self.pad_id)
        x = self.embedding(token_ids, training=training)
        for block in self.blocks:
            x = block(x, attention_mask=attention_mask, training=training)
        return self.finish(x)

    def step(self, token_ids, index, cache):
        x = self.embedding(token_ids, start_index=index)
        layer_caches = []
        for block, layer_cache in zip(self.blocks, cache, strict=True):
            x, layer_cache = block.step(x, index, layer_cache)
            layer_caches.append(layer_cache)
        return self.finish(x), tuple(layer_caches)


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
        pad_id: padding token id; padded keys are masked.
        activation: feed-forward activation, "gelu" (GPT) or "relu".
        norm_first: pre-LN blocks plus a final LayerNorm (GPT-2) instead of post-LN.
        position: "learned" (GPT) or "sinusoidal".
        layer_norm_epsilon: LayerNorm epsilon.

    Call arguments:
        token_ids: int `(batch, length)`, `length <= max_length`.
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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.config = dict(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            vocab_size=vocab_size,
            max_length=max_length,
            dropout_rate=dropout_rate,
            pad_id=pad_id,
            activation=activation,
            norm_first=norm_first,
            position=position,
            layer_norm_epsilon=layer_norm_epsilon,
        )
        self.decoder = _CausalStack(**self.config, dtype=self.dtype_policy, name="decoder")

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

    def call(self, token_ids, training=None):
        return self.project(self.decoder(token_ids, training=training))

    def empty_cache(self, batch_size, max_length: int):
        """Per layer, zeros `(2, batch, heads, max_length, depth)` for `step`."""
        return self.decoder.empty_cache(batch_size, max_length)

    def step(self, token_ids, index, cache):
        """Runs one position through every block with the key/value cache (inference only).

        Args:
            token_ids: int `(batch, 1)`, the tokens at position `index`.
            index: int scalar position, `< max_length` and `<` the cache length.
            cache: per-layer tuple from `empty_cache` or the previous step.

        Returns:
            `(logits (batch, vocab_size) float32 predicting position index + 1, cache)`.
        """
        hidden, cache = self.decoder.step(token_ids, index, cache)
        return self.project(hidden)[:, 0], cache

    def get_config(self):
        return {**super().get_config(), **self.config}

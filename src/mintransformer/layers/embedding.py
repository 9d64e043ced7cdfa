"""Token embedding scaled by sqrt(d_model), plus positions, plus dropout (paper 3.4, 3.5)."""

from __future__ import annotations

import math

import keras
from keras import ops

from mintransformer.layers import validation
from mintransformer.layers.positional import LearnedPositionalEmbedding, PositionalEncoding

POSITION_KINDS = {"sinusoidal": PositionalEncoding, "learned": LearnedPositionalEmbedding}


@keras.saving.register_keras_serializable(package="mintransformer")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """`dropout(embedding(ids) * sqrt(d_model) + positions)`.

    Args:
        vocab_size: number of token ids.
        d_model: model width.
        max_length: longest sequence the position table covers.
        dropout_rate: dropout on the sum, during training.
        position: "sinusoidal" (the paper) or "learned".

    Call arguments:
        token_ids: int `(batch, length)`.
        start_index: position of the first token (for cached decoding).
        training: enables dropout.

    Returns:
        `(batch, length, d_model)`.
    """

    def __init__(
        self, vocab_size, d_model, max_length, dropout_rate=0.0, position="sinusoidal", **kwargs
    ):
        super().__init__(**kwargs)
        self.vocab_size = validation.positive_int(vocab_size, "vocab_size")
        self.d_model = validation.positive_int(d_model, "d_model")
        self.max_length = validation.positive_int(max_length, "max_length")
        self.dropout_rate = validation.dropout_rate(dropout_rate)
        self.position = validation.one_of(position, POSITION_KINDS, "position")
        self.token_embedding = keras.layers.Embedding(
            vocab_size, d_model, dtype=self.dtype_policy, name="token_embedding"
        )
        self.position_embedding = POSITION_KINDS[position](
            max_length, d_model, dtype=self.dtype_policy, name="position_embedding"
        )
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        self.token_embedding.build(input_shape)
        self.position_embedding.build(tuple(input_shape) + (self.d_model,))
        self.built = True

    def call(self, token_ids, start_index=0, training=None):
        validation.rank(token_ids, 2, "token_ids", "(batch, length)")
        x = self.token_embedding(token_ids) * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
        x = self.position_embedding(x, start_index=start_index)
        return self.dropout(x, training=training)

    def logits(self, x):
        """Output projection tied to the embedding: `(batch, length, d_model)` -> vocab logits."""
        return ops.matmul(
            x,
            ops.transpose(
                ops.cast(ops.convert_to_tensor(self.token_embedding.embeddings), x.dtype)
            ),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            max_length=self.max_length,
            dropout_rate=self.dropout_rate,
            position=self.position,
        )
        return config

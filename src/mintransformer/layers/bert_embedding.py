"""BERT's input embedding: word + learned position + token type, then LayerNorm and dropout.

Unlike the paper's `TokenAndPositionEmbedding`, BERT does not scale the word
embeddings by sqrt(d_model), and it normalises the sum before the first layer:

    LayerNorm(word[ids] + position[0:length] + token_type[type_ids])
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.core import checks
from mintransformer.layers.arguments import config_with
from mintransformer.layers.dropout import Dropout
from mintransformer.layers.layer_norm import LayerNorm
from mintransformer.layers.positional import LearnedPositionalEmbedding


@keras.saving.register_keras_serializable(package="mintransformer")
class BertEmbedding(keras.layers.Layer):
    """`dropout(LayerNorm(word(ids) + positions + token_type(type_ids)))`, as in BERT.

    Args:
        vocab_size: number of word-piece ids.
        d_model: model width (BERT's `hidden_size`).
        max_length: number of learned positions (BERT's `max_position_embeddings`).
        type_vocab_size: number of token types (segments); BERT uses 2.
        layer_norm_epsilon: epsilon of the LayerNorm after the sum (BERT: 1e-12).
        dropout_rate: dropout on the normalised sum, during training.

    Call arguments:
        token_ids: int `(batch, length)`, `length <= max_length`.
        token_type_ids: optional int `(batch, length)` in `[0, type_vocab_size)`;
            all zeros (the first segment) by default.
        training: enables dropout.

    Returns:
        `(batch, length, d_model)`.
    """

    ARGUMENTS = (
        "vocab_size",
        "d_model",
        "max_length",
        "type_vocab_size",
        "layer_norm_epsilon",
        "dropout_rate",
    )

    def __init__(
        self,
        vocab_size,
        d_model,
        max_length,
        type_vocab_size=2,
        layer_norm_epsilon=1e-12,
        dropout_rate=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = checks.positive_int(vocab_size, "vocab_size")
        self.d_model = checks.positive_int(d_model, "d_model")
        self.max_length = checks.positive_int(max_length, "max_length")
        self.type_vocab_size = checks.positive_int(type_vocab_size, "type_vocab_size")
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.dropout_rate = checks.unit_interval(dropout_rate, "dropout_rate")
        self.word_embedding = keras.layers.Embedding(
            vocab_size, d_model, dtype=self.dtype_policy, name="word_embedding"
        )
        self.position_embedding = LearnedPositionalEmbedding(
            max_length, d_model, dtype=self.dtype_policy, name="position_embedding"
        )
        self.token_type_embedding = keras.layers.Embedding(
            type_vocab_size, d_model, dtype=self.dtype_policy, name="token_type_embedding"
        )
        self.norm = LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="norm")
        self.dropout = Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        hidden_shape = tuple(input_shape) + (self.d_model,)
        self.word_embedding.build(input_shape)
        self.position_embedding.build(hidden_shape)
        self.token_type_embedding.build(input_shape)
        self.norm.build(hidden_shape)
        self.built = True

    def call(self, token_ids, token_type_ids=None, training=None):
        checks.rank(token_ids, 2, "token_ids", "(batch, length)")
        x = self.position_embedding(self.word_embedding(token_ids))
        if token_type_ids is None:
            token_type_ids = ops.zeros_like(token_ids)
        else:
            checks.rank(token_type_ids, 2, "token_type_ids", "(batch, length)")
        x = x + self.token_type_embedding(token_type_ids)
        return self.dropout(self.norm(x), training=training)

    def get_config(self):
        return config_with(super().get_config(), self, self.ARGUMENTS)

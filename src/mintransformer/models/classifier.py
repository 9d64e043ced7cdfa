"""Encoder-only text classifier: the Transformer's encoder, pooled, then a linear head.

    token ids -> Encoder (embedding, positions, N EncoderLayers) -> pool over real
    tokens (mean, or the first token as a CLS vector) -> [Dense + ReLU] -> logits

Padding never leaks into the prediction: the encoder masks padded keys, and mean
pooling averages only the real tokens (a plain `GlobalAveragePooling1D` would
average the padding too).
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.core import checks
from mintransformer.layers.arguments import constructor_arguments
from mintransformer.layers.dropout import Dropout
from mintransformer.layers.encoder import Encoder

POOLINGS = ("mean", "cls")
# The constructor arguments that are the encoder's, saved from its own config.
ENCODER_SETTINGS = (
    "num_layers",
    "d_model",
    "num_heads",
    "dff",
    "vocab_size",
    "max_length",
    "dropout_rate",
    "pad_id",
    "activation",
    "norm_first",
    "position",
    "key_dim",
    "ngram_buckets",
    "ngram_dropout",
    "scale_embeddings",
    "use_bias",
    "attention_dropout_rate",
)


@keras.saving.register_keras_serializable(package="mintransformer")
class TextClassifier(keras.Model):
    """Token ids -> class logits.

    Args:
        num_layers, d_model, num_heads, dff: encoder size, as `Encoder`.
        vocab_size: input vocabulary size.
        max_length: longest input sequence.
        num_classes: number of classes (2 for binary sentiment).
        dropout_rate: dropout in the encoder and before the head.
        attention_dropout_rate: dropout on the attention weights; None (the
            default): `dropout_rate`.
        pad_id: padding id; padded positions are masked everywhere. None: every
            token is real unless an explicit padding mask says otherwise.
        pooling: "mean" over real tokens, or "cls" (the first token's vector).
        hidden_units: width of a ReLU layer before the output (0: none).
        activation, norm_first, position, key_dim: as `Encoder`.
        ngram_buckets: rows of a hashed bigram embedding added to each token's
            (fastText-style word-pair features; 0: none).
        ngram_dropout: rate at which whole bigram vectors are dropped in training.
        scale_embeddings: multiply token embeddings by sqrt(d_model) (the paper).
        use_bias: biases in the attention and feed-forward projections.

    Call arguments: as `Encoder` (`token_ids`, `padding_mask`, `training`,
        `return_attention_weights`).

    Returns:
        float32 logits `(batch, num_classes)`, or `(logits, weights_dict)`.
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        vocab_size,
        max_length,
        num_classes=2,
        dropout_rate=0.1,
        pad_id=0,
        pooling="mean",
        hidden_units=0,
        activation="relu",
        norm_first=False,
        position="sinusoidal",
        key_dim=None,
        ngram_buckets=0,
        ngram_dropout=0.0,
        scale_embeddings=True,
        use_bias=True,
        attention_dropout_rate=None,
        **kwargs,
    ):
        arguments = constructor_arguments(locals())
        super().__init__(**kwargs)
        self.num_classes = checks.positive_int(num_classes, "num_classes")
        if num_classes < 2:
            raise ValueError(f"`num_classes` must be at least 2, got {num_classes}.")
        self.pooling = checks.one_of(pooling, POOLINGS, "pooling")
        self.hidden_units = int(hidden_units)
        self.encoder = Encoder(
            **{name: arguments[name] for name in ENCODER_SETTINGS},
            dtype=self.dtype_policy,
            name="encoder",
        )
        self.hidden = (
            keras.layers.Dense(hidden_units, "relu", dtype=self.dtype_policy, name="hidden")
            if hidden_units
            else None
        )
        self.head_dropout = Dropout(dropout_rate, dtype=self.dtype_policy)
        # float32 logits even under mixed precision, for a stable softmax.
        self.head = keras.layers.Dense(num_classes, dtype="float32", name="head")

    def build(self, input_shape):
        self.encoder.build(input_shape)
        features = (input_shape[0], self.encoder.d_model)
        if self.hidden is not None:
            self.hidden.build(features)
            features = (input_shape[0], self.hidden_units)
        self.head.build(features)
        self.built = True

    def pool(self, hidden_states, keep):
        """`(batch, length, d_model)` -> `(batch, d_model)` over the tokens where `keep`."""
        if self.pooling == "cls":
            return hidden_states[:, 0, :]
        weights = ops.cast(keep, hidden_states.dtype)[:, :, None]
        total = ops.sum(hidden_states * weights, axis=1)
        count = ops.maximum(ops.sum(weights, axis=1), 1.0)
        return total / count

    def call(self, token_ids, padding_mask=None, training=None, return_attention_weights=False):
        encoded, keep = self.encoder.call_with_mask(
            token_ids,
            padding_mask,
            training=training,
            return_attention_weights=return_attention_weights,
        )
        hidden_states, weights = encoded if return_attention_weights else (encoded, None)
        x = self.pool(hidden_states, keep)
        if self.hidden is not None:
            x = self.hidden(self.head_dropout(x, training=training))
        logits = self.head(self.head_dropout(x, training=training))
        return (logits, weights) if return_attention_weights else logits

    def get_config(self):
        config = super().get_config()
        encoder_config = self.encoder.get_config()
        config.update({name: encoder_config[name] for name in ENCODER_SETTINGS})
        config.update(
            num_classes=self.num_classes, pooling=self.pooling, hidden_units=self.hidden_units
        )
        return config

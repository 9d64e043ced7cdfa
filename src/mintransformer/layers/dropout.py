"""Dropout (paper section 5.4) with the backend's cheapest random mask."""

from __future__ import annotations

import keras

from mintransformer.backend.kernels import dropout, dropout_mask


@keras.saving.register_keras_serializable(package="mintransformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments, seed generator and weights) drawing its mask
    through `backend.kernels.dropout`, which on TensorFlow needs half the random bits.

    Call arguments:
        inputs: any shape.
        training: enables dropout.

    Returns:
        `inputs`' shape and dtype.
    """

    def call(self, inputs, training=False):
        if training and self.rate > 0 and self.noise_shape is None:
            return dropout(inputs, self.rate, self.seed_generator)
        return super().call(inputs, training=training)

    def mask(self, shape, dtype):
        """The training-time factor `(shape)` of 0 and 1 / (1 - rate) this layer multiplies
        by, for a caller that applies it itself; draws from the layer's seed generator."""
        return dropout_mask(shape, dtype, self.rate, self.seed_generator)

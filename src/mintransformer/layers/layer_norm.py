"""Layer normalisation (Ba et al. 2016), the norm of every sub-layer's residual connection."""

from __future__ import annotations

import keras

from mintransformer.backend.kernels import layer_norm


@keras.saving.register_keras_serializable(package="mintransformer")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (same arguments and weights) whose training pass
    over the last axis goes through `backend.kernels.layer_norm`: on TensorFlow a
    closed-form gradient with half of Keras' ops. Inference, and any other axis or
    option, is Keras' own, so exported graphs keep the pattern ONNX fuses.

    Call arguments:
        inputs: `(..., features)`.
        training: whether this is a training pass.

    Returns:
        `inputs`' shape, in the compute dtype.
    """

    def call(self, inputs, training=None):
        last_axis = self.axis in ([-1], [len(inputs.shape) - 1])
        if training and last_axis and self.center and self.scale and not self.rms_scaling:
            return layer_norm(inputs, self.gamma, self.beta, self.epsilon)
        return super().call(inputs)

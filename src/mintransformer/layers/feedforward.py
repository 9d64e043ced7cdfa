"""Position-wise feed-forward network (paper section 3.3): Dense(dff) -> activation -> Dense."""

from __future__ import annotations

import keras

from mintransformer.backend.kernels import dense_rows
from mintransformer.core import checks
from mintransformer.layers.arguments import config_with
from mintransformer.layers.per_position import per_position

ACTIVATIONS = {
    "relu": keras.activations.relu,
    # The exact (erf) GELU, as in BERT.
    "gelu": lambda x: keras.activations.gelu(x, approximate=False),
    "gelu_tanh": lambda x: keras.activations.gelu(x, approximate=True),
    # x * sigmoid(x), also called swish (OPUS-MT's Marian models).
    "silu": keras.activations.silu,
}


@keras.saving.register_keras_serializable(package="mintransformer")
class FeedForward(keras.layers.Layer):
    """`Dense(d_model)(activation(Dense(dff)(x)))`, applied at every position.

    Args:
        d_model: input and output width.
        dff: inner width (the paper uses 4 * d_model).
        activation: "relu" (the paper), "gelu" (exact erf GELU), "gelu_tanh" or "silu".
        use_bias: whether both Dense layers have biases.

    Call arguments:
        x: `(batch, length, d_model)`.

    Returns:
        `(batch, length, d_model)`.
    """

    ARGUMENTS = ("d_model", "dff", "activation", "use_bias")

    def __init__(self, d_model, dff, activation="relu", use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.d_model = checks.positive_int(d_model, "d_model")
        self.dff = checks.positive_int(dff, "dff")
        self.activation = checks.one_of(activation, ACTIVATIONS, "activation")
        self.use_bias = use_bias
        self.inner = keras.layers.Dense(
            dff, use_bias=use_bias, dtype=self.dtype_policy, name="inner"
        )
        self.outer = keras.layers.Dense(
            d_model, use_bias=use_bias, dtype=self.dtype_policy, name="outer"
        )

    def build(self, input_shape):
        self.inner.build(input_shape)
        self.outer.build(tuple(input_shape[:-1]) + (self.dff,))
        self.built = True

    def call(self, x):
        return per_position(self.rows, x)

    def rows(self, rows):
        """The network on `(rows, d_model)` -> `(rows, d_model)`."""
        hidden = ACTIVATIONS[self.activation](dense_rows(self.inner, rows))
        return dense_rows(self.outer, hidden)

    def get_config(self):
        return config_with(super().get_config(), self, self.ARGUMENTS)

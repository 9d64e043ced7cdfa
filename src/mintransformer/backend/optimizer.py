"""Adam as the paper trains with it, summing an embedding's gradient slices on TensorFlow."""

from __future__ import annotations

import keras


def adam(learning_rate, **settings) -> keras.optimizers.Adam:
    """`keras.optimizers.Adam(learning_rate, **settings)`; on TensorFlow, `FusedAdam`.

    On TensorFlow an embedding's gradient arrives as slices, one per token looked up,
    and Keras' Adam squares them one by one: a token read k times in a batch gets a
    second moment about k times too small, and so a step about sqrt(k) times too
    large. `FusedAdam` sums the slices first, as Adam is defined and as the JAX and
    PyTorch backends (whose embedding gradients are dense) already do.
    """
    if keras.backend.backend() == "tensorflow":
        # Named as Keras' Adam: checkpoints store optimizer variables under the name.
        return FusedAdam(learning_rate, **{"name": "adam", **settings})
    return keras.optimizers.Adam(learning_rate, **settings)


class FusedAdam(keras.optimizers.Adam):
    """Adam on TensorFlow: the dense gradient, then one `ResourceApplyAdam` kernel per variable.

    The kernel does Keras' arithmetic (epsilon outside the square root) in one op
    instead of about fifteen; config A's train step was as fast as with Keras' update.
    """

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle,
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step),
            beta2_power=tf.pow(tf.cast(self.beta_2, dtype), step),
            lr=tf.cast(learning_rate, dtype),
            beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype),
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype),
        )

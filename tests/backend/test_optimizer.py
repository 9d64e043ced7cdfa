"""Adam against a float64 reference, and FusedAdam's sum of embedding gradient slices."""

import keras
import numpy as np
import pytest

from mintransformer.backend.optimizer import adam

pytestmark = pytest.mark.core


def numpy_adam(weights, gradients, learning_rate, beta_1=0.9, beta_2=0.98, epsilon=1e-9):
    """float64 Adam (Kingma & Ba, epsilon outside the square root) over a list of steps."""
    weights = weights.astype("float64")
    m = np.zeros_like(weights)
    v = np.zeros_like(weights)
    for step, gradient in enumerate(gradients, start=1):
        m = beta_1 * m + (1 - beta_1) * gradient
        v = beta_2 * v + (1 - beta_2) * gradient**2
        rate = learning_rate * np.sqrt(1 - beta_2**step) / (1 - beta_1**step)
        weights = weights - rate * m / (np.sqrt(v) + epsilon)
    return weights


def test_adam_matches_a_float64_reference():
    rng = np.random.default_rng(0)
    start = rng.normal(size=(4, 3)).astype("float32")
    gradients = [rng.normal(size=(4, 3)).astype("float32") * scale for scale in (1, 3, 0.1)]
    variable = keras.Variable(start)
    optimizer = adam(0.01, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    optimizer.build([variable])
    for gradient in gradients:
        optimizer.apply([keras.ops.convert_to_tensor(gradient)], [variable])
    expected = numpy_adam(start, gradients, 0.01)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="IndexedSlices: TensorFlow")
def test_adam_sums_repeated_rows_of_an_embedding_gradient_before_squaring():
    # An embedding's gradient arrives as slices, one per looked-up token: a token read
    # twice has two. Adam's second moment is that of their sum.
    import tensorflow as tf

    start = np.ones((3, 2), "float32")
    slices = tf.IndexedSlices(
        tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]]), tf.constant([1, 1, 2]), (3, 2)
    )
    dense = np.array([[0.0, 0.0], [4.0, 1.0], [0.5, 0.5]], "float32")
    variable = keras.Variable(start)
    optimizer = adam(0.1, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    optimizer.build([variable])
    for _ in range(2):
        optimizer.apply([slices], [variable])
    expected = numpy_adam(start, [dense, dense], 0.1)
    np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert type(optimizer).__name__ == "FusedAdam"
    # Checkpoints store optimizer variables under the optimizer's name, as Keras' Adam's.
    assert {v.path.split("/")[0] for v in optimizer.variables} == {"adam"}

import keras
import numpy as np
import pytest

from mintransformer.backend.kernels import layer_norm
from mintransformer.layers.layer_norm import LayerNorm
from tests.conftest import to_numpy, value_and_gradients

pytestmark = pytest.mark.core

EPSILON = 1e-6


def forward(x, gamma, beta):
    """LayerNorm over the last axis in float64."""
    x = x.astype("float64")
    normalized = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + EPSILON)
    return normalized * gamma.astype("float64") + beta.astype("float64")


def reference(x, gamma, beta, upstream):
    """The float64 output and, by central differences, the gradients of sum(output * upstream)."""
    inputs = [a.astype("float64") for a in (x, gamma, beta)]

    def weighted_sum(*values):
        return float((forward(*values) * upstream).sum())

    gradients = []
    for position, value in enumerate(inputs):
        gradient = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            shifted = [v.copy() for v in inputs]
            shifted[position][index] += 1e-6
            up = weighted_sum(*shifted)
            shifted[position][index] -= 2e-6
            gradient[index] = (up - weighted_sum(*shifted)) / 2e-6
        gradients.append(gradient)
    return forward(*inputs), gradients


def arrays(shape=(2, 3, 8), seed=0):
    rng = np.random.default_rng(seed)
    x = (3.0 + 2.0 * rng.normal(size=shape)).astype("float32")  # an offset, as residuals have
    gamma = rng.normal(size=shape[-1:]).astype("float32")
    beta = rng.normal(size=shape[-1:]).astype("float32")
    upstream = rng.normal(size=shape).astype("float32")
    return x, gamma, beta, upstream


def test_layer_norm_and_its_gradients_match_float64():
    x, gamma, beta, upstream = arrays()

    def weighted_sum(x, gamma, beta):
        return keras.ops.sum(
            layer_norm(x, gamma, beta, EPSILON) * keras.ops.convert_to_tensor(upstream)
        )

    _, gradients = value_and_gradients(weighted_sum, x, gamma, beta)
    want_output, want_gradients = reference(x, gamma, beta, upstream)
    np.testing.assert_allclose(
        to_numpy(layer_norm(x, gamma, beta, EPSILON)), want_output, rtol=1e-5, atol=1e-5
    )
    for got, want in zip(gradients, want_gradients, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("training", [True, False])
def test_layer_norm_layer_equals_keras_layer_normalization(training):
    x, gamma, beta, _ = arrays(seed=1)
    ours, theirs = LayerNorm(epsilon=EPSILON), keras.layers.LayerNormalization(epsilon=EPSILON)
    for layer in (ours, theirs):
        layer.build(x.shape)
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    np.testing.assert_allclose(
        to_numpy(ours(x, training=training)), to_numpy(theirs(x)), rtol=1e-5, atol=1e-5
    )


def test_layer_norm_layer_gives_its_variables_the_closed_form_gradients():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the hand-written gradient is TensorFlow's; other backends use Keras'")
    import tensorflow as tf

    x, gamma, beta, upstream = arrays(seed=2)
    layer = LayerNorm(epsilon=EPSILON)
    layer.build(x.shape)
    layer.gamma.assign(gamma)
    layer.beta.assign(beta)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x, training=True) * upstream)
    d_gamma, d_beta = tape.gradient(loss, [layer.gamma.value, layer.beta.value])
    _, (_, want_gamma, want_beta) = reference(x, gamma, beta, upstream)
    np.testing.assert_allclose(d_gamma.numpy(), want_gamma, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d_beta.numpy(), want_beta, rtol=1e-4, atol=1e-4)


def test_layer_norm_layer_keeps_bfloat16_under_mixed_precision():
    x, _, _, _ = arrays(seed=3)
    layer = LayerNorm(epsilon=EPSILON, dtype="mixed_bfloat16")
    output = layer(keras.ops.cast(x, "bfloat16"), training=True)
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
    want = forward(x, np.ones(8, "float32"), np.zeros(8, "float32"))
    np.testing.assert_allclose(to_numpy(keras.ops.cast(output, "float32")), want, atol=0.05)


def test_layer_norm_round_trips_through_its_config():
    layer = LayerNorm(epsilon=1e-5, name="norm")
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(restored, LayerNorm)
    assert (restored.epsilon, restored.name) == (1e-5, "norm")

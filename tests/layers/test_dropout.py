import keras
import numpy as np
import pytest

from mintransformer.backend import kernels
from mintransformer.layers.dropout import Dropout
from tests.conftest import to_numpy

pytestmark = pytest.mark.core


def kept_scale(rate: float) -> float:
    """What a kept element is multiplied by: 1 / keep probability (TensorFlow rounds the
    rate to 16-bit words)."""
    if keras.backend.backend() == "tensorflow":
        levels = kernels.RANDOM_WORD_LEVELS
        return levels / (levels - round(rate * levels))
    return 1.0 / (1.0 - rate)


@pytest.mark.parametrize("shape", [(64, 50, 64), (33, 41, 7)])  # odd last axis too
@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_dropout_zeroes_about_rate_of_the_elements_and_scales_the_rest(shape, rate):
    inputs = np.random.default_rng(0).uniform(1.0, 2.0, size=shape).astype("float32")
    outputs = to_numpy(Dropout(rate, seed=3)(inputs, training=True))
    assert outputs.shape == inputs.shape
    dropped = outputs == 0.0
    # Four standard deviations of a binomial count.
    tolerance = 4 * np.sqrt(rate * (1 - rate) / inputs.size)
    assert abs(dropped.mean() - rate) < tolerance
    np.testing.assert_allclose(outputs[~dropped], inputs[~dropped] * kept_scale(rate), rtol=1e-6)


def test_dropout_draws_a_new_mask_each_call_and_repeats_under_a_seed():
    inputs = np.ones((8, 16, 32), "float32")
    layer = Dropout(0.5, seed=7)
    first, second = (to_numpy(layer(inputs, training=True)) for _ in range(2))
    assert (first == 0).any() and not np.array_equal(first == 0, second == 0)
    again = to_numpy(Dropout(0.5, seed=7)(inputs, training=True))
    np.testing.assert_array_equal(first, again)


def test_dropout_passes_inputs_through_outside_training_and_at_rate_zero():
    inputs = np.random.default_rng(1).normal(size=(4, 5, 6)).astype("float32")
    np.testing.assert_array_equal(to_numpy(Dropout(0.4)(inputs, training=False)), inputs)
    np.testing.assert_array_equal(to_numpy(Dropout(0.0)(inputs, training=True)), inputs)


def test_dropout_keeps_the_dtype_under_mixed_precision():
    layer = Dropout(0.2, dtype="mixed_bfloat16")
    inputs = keras.ops.cast(np.ones((4, 6, 8), "float32"), "bfloat16")
    assert keras.backend.standardize_dtype(layer(inputs, training=True).dtype) == "bfloat16"


def test_dropout_round_trips_through_its_config():
    layer = Dropout(0.25, seed=5, name="drop")
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(restored, Dropout)
    assert (restored.rate, restored.seed, restored.name) == (0.25, 5, "drop")


def test_dropout_takes_shapes_known_only_at_run_time_on_tensorflow():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("graph tracing with unknown dimensions is TensorFlow's")
    import tensorflow as tf

    layer = Dropout(0.5, seed=2)
    traced = tf.function(
        lambda x: layer(x, training=True),
        input_signature=[tf.TensorSpec((None, None, None), tf.float32)],
    )
    for shape in [(2, 3, 5), (4, 6, 8)]:
        outputs = traced(tf.ones(shape)).numpy()
        assert outputs.shape == shape
        assert set(np.unique(outputs)) <= {0.0, np.float32(kept_scale(0.5))}


def test_dropout_draws_the_same_mask_in_a_step_compiled_with_xla_on_tensorflow():
    """The same seed gives the same mask whether the step runs as a graph or under XLA."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("XLA compilation of a TensorFlow function")
    import tensorflow as tf

    inputs = tf.ones((16, 9, 33))
    graph, compiled = Dropout(0.3, seed=4), Dropout(0.3, seed=4)
    expected = tf.function(lambda x: graph(x, training=True))(inputs)
    got = tf.function(lambda x: compiled(x, training=True), jit_compile=True)(inputs)
    np.testing.assert_array_equal(to_numpy(got), to_numpy(expected))
    assert 0.25 < np.mean(to_numpy(got) == 0) < 0.35


def test_mask_is_zero_or_the_kept_scale_at_about_rate_and_new_each_call():
    layer = Dropout(0.25, seed=5)
    first = to_numpy(layer.mask((16, 4, 30, 33), "float32"))  # odd last axis
    second = to_numpy(layer.mask((16, 4, 30, 33), "float32"))
    assert first.shape == (16, 4, 30, 33)
    assert set(np.unique(first)) == {0.0, np.float32(kept_scale(0.25))}
    tolerance = 4 * np.sqrt(0.25 * 0.75 / first.size)
    assert abs((first == 0).mean() - 0.25) < tolerance
    assert not np.array_equal(first, second)
    assert keras.backend.standardize_dtype(layer.mask((2, 3), "bfloat16").dtype) == "bfloat16"

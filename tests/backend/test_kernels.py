"""The loss's arg-max, the cache write and the dense rows kernels against NumPy (dropout,
LayerNorm and fused attention: tests/layers)."""

import keras
import numpy as np
import pytest

from mintransformer.backend.kernels import argmax_last_axis, dense_rows, write_position

pytestmark = pytest.mark.core


def test_argmax_last_axis_matches_numpy_on_logits_and_ids():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 40)).astype("float32")
    logits[0, 0] = 0.0  # a row of zeros: the first index wins, as in NumPy
    logits[1, 2, 7] = 100.0
    found = argmax_last_axis(keras.ops.convert_to_tensor(logits))
    assert keras.backend.standardize_dtype(found.dtype) == "int32"
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(found), logits.argmax(-1))
    ids = rng.integers(0, 9, size=(4, 6)).astype("int32")
    found = argmax_last_axis(keras.ops.convert_to_tensor(ids))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(found), ids.argmax(-1))


@pytest.mark.parametrize("axis", [0, 2, 3])
def test_write_position_sets_one_position_of_an_axis_as_numpy_does(axis):
    rng = np.random.default_rng(1)
    tensor = rng.normal(size=(2, 3, 5, 7, 4)).astype("float32")
    update_shape = list(tensor.shape)
    update_shape[axis] = 1
    update = rng.normal(size=update_shape).astype("float32")
    for index in (0, tensor.shape[axis] - 1, 1):
        expected = tensor.copy()
        slot = [slice(None)] * tensor.ndim
        slot[axis] = slice(index, index + 1)
        expected[tuple(slot)] = update
        found = write_position(
            keras.ops.convert_to_tensor(tensor),
            keras.ops.convert_to_tensor(update),
            keras.ops.convert_to_tensor(index, "int32"),
            axis=axis,
        )
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(found), expected)


@pytest.mark.parametrize("activation", [None, "relu"])
def test_dense_rows_is_the_dense_layer_in_float64_numpy(activation):
    rng = np.random.default_rng(2)
    layer = keras.layers.Dense(6, activation=activation, bias_initializer="random_normal")
    layer.build((None, 5))
    rows = rng.normal(size=(4, 5)).astype("float32")
    kernel, bias = (np.asarray(keras.ops.convert_to_numpy(w), "float64") for w in layer.weights)
    expected = rows.astype("float64") @ kernel + bias
    if activation == "relu":
        expected = np.maximum(expected, 0.0)
    found = keras.ops.convert_to_numpy(dense_rows(layer, keras.ops.convert_to_tensor(rows)))
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6)


def test_dense_rows_calls_what_is_not_a_dense_layer():
    rows = keras.ops.convert_to_tensor(np.arange(6, dtype="float32").reshape(2, 3))
    found = dense_rows(lambda x: x * 2.0 + 1.0, rows)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(found), np.arange(6).reshape(2, 3) * 2 + 1
    )

"""The loss's arg-max and the cache write kernels against NumPy (dropout and LayerNorm:
tests/layers)."""

import keras
import numpy as np
import pytest

from mintransformer.backend.kernels import argmax_last_axis, write_position

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

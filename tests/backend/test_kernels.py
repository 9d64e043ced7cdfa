"""The loss's arg-max kernel against NumPy (dropout and LayerNorm: tests/layers)."""

import keras
import numpy as np
import pytest

from mintransformer.backend.kernels import argmax_last_axis

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

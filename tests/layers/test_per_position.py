"""`per_position`: a layer on every position as one 2-D product, the same as on the 3-D input."""

import keras
import numpy as np
import pytest

from mintransformer.layers.feedforward import FeedForward
from mintransformer.layers.per_position import per_position
from tests.conftest import to_numpy

pytestmark = pytest.mark.core


def test_a_dense_layer_per_position_equals_it_on_the_3d_input(rng):
    dense = keras.layers.Dense(7, activation="relu")
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    got = to_numpy(per_position(dense, x))
    kernel, bias = to_numpy(dense.kernel), to_numpy(dense.bias)
    want = np.maximum(x.astype("float64") @ kernel + bias, 0.0)
    assert got.shape == (3, 5, 7)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, to_numpy(dense(x)), rtol=1e-6, atol=1e-6)


def test_per_position_keeps_unknown_batch_and_length_in_a_compiled_model(rng):
    layer = FeedForward(d_model=4, dff=8)
    inputs = keras.Input((None, 4))
    model = keras.Model(inputs, layer(inputs))
    for batch, length in ((2, 3), (1, 9)):
        x = rng.normal(size=(batch, length, 4)).astype("float32")
        got = model.predict(x, verbose=0)
        inner, inner_bias = to_numpy(layer.inner.kernel), to_numpy(layer.inner.bias)
        outer, outer_bias = to_numpy(layer.outer.kernel), to_numpy(layer.outer.bias)
        want = np.maximum(x @ inner + inner_bias, 0.0) @ outer + outer_bias
        assert got.shape == (batch, length, 4)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

import math

import numpy as np
import pytest

from mintransformer.layers.feedforward import FeedForward
from tests.conftest import to_numpy

pytestmark = pytest.mark.core


def reference_ffn(x, layer, activation):
    inner = x.astype("float64") @ to_numpy(layer.inner.kernel) + to_numpy(layer.inner.bias)
    return activation(inner) @ to_numpy(layer.outer.kernel) + to_numpy(layer.outer.bias)


def exact_gelu(x):
    return x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize(
    ("name", "activation"), [("relu", lambda x: np.maximum(x, 0)), ("gelu", exact_gelu)]
)
def test_feed_forward_matches_numpy(name, activation):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = FeedForward(8, 32, activation=name)
    out = to_numpy(layer(x))
    np.testing.assert_allclose(out, reference_ffn(x, layer, activation), rtol=1e-5, atol=1e-5)


def test_config_round_trip():
    layer = FeedForward(8, 16, activation="gelu", use_bias=False)
    assert FeedForward.from_config(layer.get_config()).get_config() == layer.get_config()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"d_model": 8, "dff": 0}, "dff"),
        ({"d_model": 8, "dff": 8, "activation": "tanh"}, "activation"),
    ],
)
def test_bad_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        FeedForward(**kwargs)

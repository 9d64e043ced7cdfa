import math

import keras
import numpy as np
import pytest

from mintransformer.layers.embedding import TokenAndPositionEmbedding
from mintransformer.layers.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    sinusoidal_table,
)
from tests.conftest import to_numpy

pytestmark = pytest.mark.core


def test_table_follows_the_paper_formula_entry_by_entry():
    length, d_model = 7, 6
    table = sinusoidal_table(length, d_model)
    for pos in range(length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)


def test_positional_encoding_adds_the_table_from_start_index():
    layer = PositionalEncoding(10, 4)
    x = np.ones((2, 3, 4), "float32")
    table = sinusoidal_table(10, 4)
    np.testing.assert_allclose(to_numpy(layer(x)), np.broadcast_to(1 + table[:3], x.shape))
    shifted = to_numpy(layer(x, start_index=5))
    np.testing.assert_allclose(shifted, np.broadcast_to(1 + table[5:8], x.shape))


def test_config_holds_numbers_only_and_round_trips():
    layer = PositionalEncoding(50, 8, name="pe")
    config = layer.get_config()
    assert config["max_length"] == 50 and config["d_model"] == 8
    for value in config.values():
        assert not hasattr(value, "shape"), "config must not store tensors"
    clone = PositionalEncoding.from_config(config)
    x = np.zeros((1, 5, 8), "float32")
    np.testing.assert_array_equal(to_numpy(clone(x)), to_numpy(layer(x)))


def test_learned_positions_are_trainable_weights_and_serialize(tmp_path):
    layer = LearnedPositionalEmbedding(12, 4)
    out = layer(np.zeros((2, 5, 4), "float32"))
    assert [tuple(w.shape) for w in layer.trainable_weights] == [(12, 4)]
    np.testing.assert_allclose(to_numpy(out)[0], to_numpy(layer.position_embeddings)[:5])
    inputs = keras.Input((5, 4))
    model = keras.Model(inputs, LearnedPositionalEmbedding(12, 4)(inputs))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype("float32")
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


@pytest.mark.parametrize("layer_class", [PositionalEncoding, LearnedPositionalEmbedding])
def test_sequence_longer_than_the_table_is_a_value_error(layer_class):
    with pytest.raises(ValueError, match="max_length"):
        layer_class(4, 8)(np.zeros((1, 5, 8), "float32"))


def test_embedding_scales_by_sqrt_of_the_real_d_model():
    layer = TokenAndPositionEmbedding(vocab_size=10, d_model=16, max_length=8)
    ids = np.array([[1, 2, 3]])
    out = to_numpy(layer(ids))
    table = to_numpy(layer.token_embedding.embeddings)
    expected = table[ids] * 4.0 + sinusoidal_table(8, 16)[None, :3]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"max_length": 0, "d_model": 4}, "max_length"),
        ({"max_length": 4, "d_model": -1}, "d_model"),
        ({"max_length": 2.5, "d_model": 4}, "max_length"),
    ],
)
def test_bad_sizes_are_value_errors_naming_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        PositionalEncoding(**kwargs)


def test_unknown_position_kind_is_rejected():
    with pytest.raises(ValueError, match="position"):
        TokenAndPositionEmbedding(10, 8, 8, position="rotary")


def test_embedding_config_round_trip():
    layer = TokenAndPositionEmbedding(50, 8, 16, dropout_rate=0.2, position="learned", name="e")
    clone = TokenAndPositionEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()

"""Properties that catch the classic mask mistakes, and cached decoding."""

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from mintransformer.layers.decoder import Decoder, DecoderLayer
from mintransformer.layers.encoder import Encoder, EncoderLayer
from tests.conftest import to_numpy

pytestmark = pytest.mark.core

VOCAB, D_MODEL = 23, 16


@pytest.fixture(scope="module")
def stacks():
    encoder = Encoder(2, D_MODEL, 4, 32, VOCAB, max_length=40, dropout_rate=0.1)
    decoder = Decoder(2, D_MODEL, 4, 32, VOCAB, max_length=40, dropout_rate=0.1)
    source = np.ones((1, 4), "int32")
    decoder(source, encoder(source))
    return encoder, decoder


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_changing_later_target_tokens_never_changes_earlier_outputs(stacks, data):
    encoder, decoder = stacks
    length = data.draw(st.integers(2, 9))
    t = data.draw(st.integers(0, length - 2))
    ids = st.lists(st.integers(1, VOCAB - 1), min_size=length, max_size=length)
    target = np.array([data.draw(ids)], "int32")
    changed = target.copy()
    changed[0, t + 1 :] = data.draw(ids)[t + 1 :]
    memory = to_numpy(encoder(np.array([data.draw(ids)], "int32")))
    before = to_numpy(decoder(target, memory))
    after = to_numpy(decoder(changed, memory))
    np.testing.assert_allclose(after[:, : t + 1], before[:, : t + 1], rtol=1e-5, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_changing_source_padding_tokens_never_changes_real_outputs(stacks, data):
    encoder, decoder = stacks
    length = data.draw(st.integers(2, 9))
    real = data.draw(st.integers(1, length - 1))
    ids = st.lists(st.integers(0, VOCAB - 1), min_size=length, max_size=length)
    source = np.array([data.draw(ids)], "int32")
    mask = np.arange(length)[None] < real
    changed = np.where(mask, source, np.array([data.draw(ids)], "int32"))
    target = np.array([data.draw(st.lists(st.integers(1, VOCAB - 1), min_size=3, max_size=3))])
    outputs = []
    for src in (source, changed):
        memory = encoder(src, padding_mask=mask)
        dec = decoder(target, memory, source_padding_mask=mask)
        outputs.append((to_numpy(memory)[:, :real], to_numpy(dec)))
    np.testing.assert_allclose(outputs[1][0], outputs[0][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outputs[1][1], outputs[0][1], rtol=1e-5, atol=1e-5)


def test_fully_padded_sequences_give_no_nan(stacks):
    encoder, decoder = stacks
    source = np.array([[0, 0, 0], [5, 0, 0]], "int32")
    target = np.array([[0, 0], [0, 0]], "int32")
    memory, weights = encoder(source, return_attention_weights=True)
    out, dec_weights = decoder(
        target, memory, source_padding_mask=source != 0, return_attention_weights=True
    )
    for array in (memory, out, *weights.values(), *dec_weights.values()):
        assert np.isfinite(to_numpy(array)).all()


def test_cross_attention_uses_the_source_mask(stacks):
    encoder, decoder = stacks
    source = np.array([[3, 4, 0, 0, 0]], "int32")
    memory = encoder(source)
    _, weights = decoder(
        np.array([[1, 2, 3]]),
        memory,
        source_padding_mask=source != 0,
        return_attention_weights=True,
    )
    cross = to_numpy(weights["decoder_layer1_cross_attention"])
    assert cross.shape == (1, 4, 3, 5)
    np.testing.assert_array_equal(cross[..., 2:], 0.0)
    np.testing.assert_allclose(cross.sum(-1), 1.0, rtol=1e-5)


def test_dropout_is_active_only_in_training(stacks):
    encoder, _ = stacks
    source = np.array([[3, 4, 5, 6]], "int32")
    np.testing.assert_array_equal(to_numpy(encoder(source)), to_numpy(encoder(source)))
    assert not np.allclose(
        to_numpy(encoder(source, training=True)), to_numpy(encoder(source, training=True))
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_step_equals_the_full_decoder(norm_first):
    encoder = Encoder(2, D_MODEL, 2, 32, VOCAB, max_length=16, norm_first=norm_first)
    decoder = Decoder(2, D_MODEL, 2, 32, VOCAB, max_length=16, norm_first=norm_first)
    source = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    target = np.array([[1, 4, 9, 2, 11], [1, 3, 3, 7, 6]], "int32")
    source_mask = source != 0
    memory = encoder(source)
    full = to_numpy(decoder(target, memory, source_padding_mask=source_mask))
    cache = decoder.empty_cache(2, 8)
    cross = decoder.cross_key_values(memory)
    for t in range(target.shape[1]):
        hidden, cache = decoder.step(target[:, t : t + 1], t, cache, cross, source_mask)
        np.testing.assert_allclose(to_numpy(hidden)[:, 0], full[:, t], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layer_class", [EncoderLayer, DecoderLayer])
def test_layer_config_round_trip(layer_class):
    layer = layer_class(
        16, 4, 64, dropout_rate=0.2, activation="gelu", norm_first=True, layer_norm_epsilon=1e-5
    )
    assert layer_class.from_config(layer.get_config()).get_config() == layer.get_config()


def test_wrong_rank_and_bad_masks_are_value_errors(stacks):
    encoder, decoder = stacks
    with pytest.raises(ValueError, match="token_ids"):
        encoder(np.ones((4,), "int32"))
    with pytest.raises(ValueError, match="padding_mask"):
        encoder(np.ones((1, 4), "int32"), padding_mask=np.ones((1, 4), "float32"))
    with pytest.raises(ValueError, match="source_padding_mask"):
        decoder(
            np.ones((1, 2), "int32"),
            np.zeros((1, 3, D_MODEL), "float32"),
            source_padding_mask=np.ones((1, 2), bool),
        )
    with pytest.raises(ValueError, match="num_layers"):
        Encoder(0, 16, 4, 32, VOCAB, 10)
    memory = encoder(np.ones((1, 3), "int32"))
    with pytest.raises(ValueError, match="source_padding_mask"):
        decoder.step(
            np.ones((1, 1), "int32"),
            0,
            decoder.empty_cache(1, 4),
            decoder.cross_key_values(memory),
            np.ones((1, 4), bool),
        )


def test_without_pad_id_token_0_is_real_unless_the_mask_says_otherwise():
    options = dict(dropout_rate=0.0)
    with_pad = Encoder(2, D_MODEL, 4, 32, VOCAB, 10, **options)
    without = Encoder(2, D_MODEL, 4, 32, VOCAB, 10, pad_id=None, **options)
    source = np.array([[5, 0, 7, 0], [0, 3, 0, 0]], "int32")
    with_pad(source)
    without(source)
    without.set_weights(with_pad.get_weights())
    np.testing.assert_allclose(
        to_numpy(without(source, padding_mask=source != 0)),
        to_numpy(with_pad(source)),
        rtol=1e-5,
        atol=1e-6,
    )
    everything = np.ones_like(source, bool)
    np.testing.assert_array_equal(
        to_numpy(without(source)), to_numpy(with_pad(source, padding_mask=everything))
    )
    assert not np.allclose(to_numpy(without(source)), to_numpy(with_pad(source)), atol=1e-4)


def test_encoder_layer_weights_file_keeps_the_attention_norm_layout(tmp_path):
    # `.keras` / `.weights.h5` files address weights by attribute name; files written
    # when the attribute was `attention_norm` must still load into `self_attention_norm`.
    h5py = pytest.importorskip("h5py")
    import keras

    def model_with_block():
        inputs = keras.Input((3, D_MODEL))
        return keras.Model(inputs, EncoderLayer(D_MODEL, 4, 32, name="block")(inputs))

    written = model_with_block()
    block = written.get_layer("block")
    gamma = np.random.default_rng(0).normal(size=(D_MODEL,)).astype("float32")
    block.self_attention_norm.gamma.assign(gamma)
    path = tmp_path / "block.weights.h5"
    written.save_weights(path)
    with h5py.File(path) as stored:
        names = []
        stored.visit(names.append)
    assert any(name.endswith("attention_norm/vars") for name in names), names
    assert not any("self_attention_norm" in name for name in names), names
    loaded = model_with_block()
    loaded.load_weights(path)
    np.testing.assert_array_equal(
        to_numpy(loaded.get_layer("block").self_attention_norm.gamma), gamma
    )

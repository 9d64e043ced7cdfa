"""The decoder-only language model: causality, cached steps, saving, config, arguments."""

import keras
import numpy as np
import pytest

from mintransformer import LanguageModel
from mintransformer.backend.compilation import compile_inference
from tests.conftest import to_numpy

VOCAB = 30


def small_model(**overrides):
    options = dict(num_layers=2, d_model=16, num_heads=2, dff=32, vocab_size=VOCAB, max_length=12)
    model = LanguageModel(**{**options, "dropout_rate": 0.0, **overrides})
    model(np.ones((1, 3), "int32"))
    return model


@pytest.mark.core
@pytest.mark.parametrize("norm_first", [True, False])
def test_later_tokens_never_change_earlier_logits(norm_first, rng):
    model = small_model(norm_first=norm_first)
    ids = rng.integers(1, VOCAB, size=(3, 10)).astype("int32")
    base = to_numpy(model(ids))
    for t in (0, 4, 8):
        for replacement in (rng.integers(1, VOCAB, size=(3, 9 - t)), 0):  # other tokens, padding
            changed = ids.copy()
            changed[:, t + 1 :] = replacement
            out = to_numpy(model(changed))
            np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], rtol=1e-5, atol=1e-6)
            assert not np.allclose(out[:, t + 1 :], base[:, t + 1 :], atol=1e-4)


@pytest.mark.core
@pytest.mark.parametrize("norm_first", [True, False])
def test_compiled_cached_steps_match_the_full_model(norm_first, rng):
    model = small_model(norm_first=norm_first, position="sinusoidal")
    ids = rng.integers(1, VOCAB, size=(2, 9)).astype("int32")
    full = to_numpy(model(ids))
    step = compile_inference(model.step, model.variables)
    cache = model.empty_cache(2, 12)
    assert len(cache) == 2 and tuple(cache[0].shape) == (2, 2, 2, 12, 8)
    for t in range(ids.shape[1]):
        logits, cache = step(
            keras.ops.convert_to_tensor(ids[:, t : t + 1]),
            keras.ops.convert_to_tensor(t, "int32"),
            cache,
        )
        assert keras.backend.standardize_dtype(logits.dtype) == "float32"
        np.testing.assert_allclose(to_numpy(logits), full[:, t], rtol=1e-4, atol=1e-4)


@pytest.mark.core
def test_an_explicit_padding_mask_equals_the_one_built_from_pad_id(rng):
    model = small_model()
    ids = rng.integers(1, VOCAB, size=(3, 8)).astype("int32")
    ids[0, 5:] = 0
    ids[1, :2] = 0  # left padding too
    np.testing.assert_array_equal(to_numpy(model(ids, padding_mask=ids != 0)), to_numpy(model(ids)))


@pytest.mark.core
def test_without_pad_id_token_0_is_real_unless_the_mask_says_otherwise(rng):
    model = small_model()
    without = small_model(pad_id=None)
    without.set_weights(model.get_weights())
    ids = rng.integers(0, 4, size=(2, 8)).astype("int32")  # many zeros
    assert (ids == 0).any()
    np.testing.assert_allclose(
        to_numpy(without(ids, padding_mask=ids != 0)), to_numpy(model(ids)), rtol=1e-5, atol=1e-6
    )
    everything = np.ones_like(ids, bool)
    np.testing.assert_array_equal(
        to_numpy(without(ids)), to_numpy(model(ids, padding_mask=everything))
    )
    assert not np.allclose(to_numpy(without(ids)), to_numpy(model(ids)), atol=1e-4)


@pytest.mark.core
@pytest.mark.parametrize("norm_first", [True, False])
def test_cached_steps_with_a_padding_mask_match_the_masked_full_model(norm_first, rng):
    model = small_model(norm_first=norm_first, pad_id=None)
    ids = rng.integers(0, VOCAB, size=(2, 7)).astype("int32")
    keep = np.ones((2, 7), bool)
    keep[0, :3] = False  # a left-padded prompt
    keep[1, 4] = False
    full = to_numpy(model(ids, padding_mask=keep))
    step = compile_inference(model.step, model.variables)
    cache = model.empty_cache(2, 9)
    slots = keras.ops.convert_to_tensor(np.pad(keep, ((0, 0), (0, 2)), constant_values=True))
    for t in range(ids.shape[1]):
        logits, cache = step(
            keras.ops.convert_to_tensor(ids[:, t : t + 1]),
            keras.ops.convert_to_tensor(t, "int32"),
            cache,
            slots,
        )
        np.testing.assert_allclose(to_numpy(logits), full[:, t], rtol=1e-4, atol=1e-4)


def test_wrong_padding_masks_are_value_errors_naming_the_argument():
    model = small_model()
    ids = np.ones((2, 4), "int32")
    with pytest.raises(ValueError, match="padding_mask"):
        model(ids, padding_mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match="padding_mask"):
        model(ids, padding_mask=np.ones((2, 4), "float32"))
    with pytest.raises(ValueError, match="padding_mask"):
        model.step(ids[:, :1], 0, model.empty_cache(2, 6), np.ones((2, 5), bool))


def test_gpt2_style_options_are_used_and_saved(tmp_path, rng):
    model = small_model(scale_embeddings=False, use_bias=False, pad_id=None)
    assert model.config["pad_id"] is None
    assert model.decoder.embedding.scale_embeddings is False
    assert not [w.path for w in model.weights if w.path.endswith("/bias")]
    ids = rng.integers(0, VOCAB, size=(2, 6)).astype("int32")
    model.save(tmp_path / "gpt2ish.keras")
    loaded = keras.models.load_model(tmp_path / "gpt2ish.keras")
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(to_numpy(loaded(ids)), to_numpy(model(ids)))


def test_logits_are_float32_over_the_vocabulary_with_a_tied_projection():
    model = small_model()
    logits = model(np.ones((2, 5), "int32"))
    assert tuple(logits.shape) == (2, 5, VOCAB)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    vocabulary_sized = [w.path for w in model.weights if VOCAB in tuple(w.shape)]
    assert vocabulary_sized == [model.decoder.embedding.token_embedding.embeddings.path]


def test_save_and_load_give_identical_logits(tmp_path, rng):
    model = small_model(activation="relu", layer_norm_epsilon=1e-6)
    ids = rng.integers(1, VOCAB, size=(2, 7)).astype("int32")
    model.save(tmp_path / "lm.keras")
    loaded = keras.models.load_model(tmp_path / "lm.keras")
    assert isinstance(loaded, LanguageModel)
    np.testing.assert_array_equal(to_numpy(loaded(ids)), to_numpy(model(ids)))


def test_config_round_trip():
    model = small_model(pad_id=3, activation="relu", norm_first=False, position="sinusoidal")
    config = model.get_config()
    assert config["pad_id"] == 3 and config["position"] == "sinusoidal"
    assert LanguageModel.from_config(config).get_config() == config


@pytest.mark.parametrize(
    ("overrides", "argument"),
    [
        ({"num_layers": 0}, "num_layers"),
        ({"d_model": 18, "num_heads": 4}, "d_model"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"max_length": 0}, "max_length"),
        ({"dropout_rate": 1.5}, "dropout_rate"),
        ({"position": "rotary"}, "position"),
    ],
)
def test_bad_arguments_are_value_errors_naming_the_argument(overrides, argument):
    with pytest.raises(ValueError, match=argument):
        small_model(**overrides)

import keras
import numpy as np
import pytest

from mintransformer.models.classifier import TextClassifier
from tests.conftest import to_numpy

pytestmark = pytest.mark.core


def small_classifier(**overrides) -> TextClassifier:
    options = dict(num_classes=3, dropout_rate=0.0, pooling="mean")
    options.update(overrides)
    model = TextClassifier(2, 16, 4, 32, vocab_size=50, max_length=24, **options)
    model(np.ones((1, 3), "int32"))
    return model


def token_batch(rng, lengths, width):
    ids = np.zeros((len(lengths), width), "int32")
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(1, 50, size=length)
    return ids


def test_logits_shape_and_dtype(rng):
    model = small_classifier(hidden_units=8)
    logits = model(token_batch(rng, [5, 9, 1], 9))
    assert tuple(logits.shape) == (3, 3)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"


@pytest.mark.parametrize(("pooling", "ngram_buckets"), [("mean", 0), ("cls", 0), ("mean", 31)])
def test_padding_does_not_change_the_prediction(rng, pooling, ngram_buckets):
    model = small_classifier(pooling=pooling, ngram_buckets=ngram_buckets)
    ids = token_batch(rng, [4, 7], 8)
    padded = np.concatenate([ids, np.zeros((2, 9), "int32")], axis=1)
    np.testing.assert_allclose(to_numpy(model(padded)), to_numpy(model(ids)), rtol=1e-5, atol=1e-5)


def test_mean_pooling_averages_only_real_tokens(rng):
    model = small_classifier()
    ids = token_batch(rng, [3, 6], 6)
    hidden = to_numpy(model.encoder(ids))
    keep = ids != 0
    expected = np.stack([hidden[b][keep[b]].mean(axis=0) for b in range(2)])
    pooled = to_numpy(
        model.pool(keras.ops.convert_to_tensor(hidden), keras.ops.convert_to_tensor(keep))
    )
    np.testing.assert_allclose(pooled, expected, rtol=1e-5, atol=1e-6)


def test_cls_pooling_takes_the_first_position(rng):
    model = small_classifier(pooling="cls")
    hidden = rng.normal(size=(2, 5, 16)).astype("float32")
    pooled = to_numpy(model.pool(hidden, np.ones((2, 5), bool)))
    np.testing.assert_array_equal(pooled, hidden[:, 0])


def test_one_token_inputs_give_finite_probabilities():
    model = small_classifier()
    logits = to_numpy(model(np.array([[1]], "int32")))
    assert np.isfinite(logits).all()


@pytest.mark.parametrize("ngram_buckets", [0, 31])
def test_saved_model_gives_identical_outputs(rng, tmp_path, ngram_buckets):
    model = small_classifier(
        key_dim=8, hidden_units=4, pooling="cls", ngram_buckets=ngram_buckets, ngram_dropout=0.2
    )
    ids = token_batch(rng, [5, 2], 5)
    path = tmp_path / "classifier.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    assert len(loaded.weights) == len(model.weights)
    np.testing.assert_allclose(to_numpy(loaded(ids)), to_numpy(model(ids)), rtol=1e-6)


@pytest.mark.parametrize(
    ("overrides", "argument"),
    [({"pooling": "max"}, "pooling"), ({"num_classes": 1}, "num_classes")],
)
def test_bad_arguments_are_named(overrides, argument):
    with pytest.raises(ValueError, match=argument):
        small_classifier(**overrides)


def test_padding_mask_of_the_wrong_shape_is_rejected(rng):
    model = small_classifier()
    with pytest.raises(ValueError, match="padding_mask"):
        model(token_batch(rng, [3], 4), padding_mask=np.ones((1, 5), bool))


def test_stack_options_are_passed_on_and_saved(rng):
    model = small_classifier(pad_id=None, scale_embeddings=False, use_bias=False)
    config = model.get_config()
    assert (config["pad_id"], config["scale_embeddings"], config["use_bias"]) == (
        None,
        False,
        False,
    )
    assert model.encoder.embedding.scale_embeddings is False
    assert all(not block.use_bias for block in model.encoder.blocks)
    assert TextClassifier.from_config(config).get_config() == config
    ids = token_batch(rng, [3, 5], 6)
    padded = small_classifier(use_bias=False, scale_embeddings=False)
    padded.set_weights(model.get_weights())
    np.testing.assert_allclose(
        to_numpy(model(ids, padding_mask=ids != 0)), to_numpy(padded(ids)), rtol=1e-5, atol=1e-6
    )


def test_attention_dropout_rate_reaches_the_attention_layers_and_the_config(rng):
    default = small_classifier(dropout_rate=0.2)
    assert default.encoder.blocks[0].self_attention.dropout_rate == 0.2
    model = small_classifier(dropout_rate=0.2, attention_dropout_rate=0.0)
    block = model.encoder.blocks[0]
    assert (block.self_attention.dropout_rate, block.ffn_dropout.rate) == (0.0, 0.2)
    config = model.get_config()
    assert config["attention_dropout_rate"] == 0.0
    assert TextClassifier.from_config(config).get_config() == config
    # Dropout only on the attention weights: a training pass differs from inference
    # with it on, and equals inference with it off.
    ids = token_batch(rng, [4, 6], 6)
    only_attention = small_classifier(attention_dropout_rate=0.5)
    without = small_classifier(attention_dropout_rate=0.0)
    without.set_weights(only_attention.get_weights())
    inference = to_numpy(only_attention(ids))
    assert not np.allclose(to_numpy(only_attention(ids, training=True)), inference)
    np.testing.assert_allclose(to_numpy(without(ids, training=True)), inference, rtol=1e-5)
    with pytest.raises(ValueError, match="attention_dropout_rate"):
        small_classifier(attention_dropout_rate=1.5)

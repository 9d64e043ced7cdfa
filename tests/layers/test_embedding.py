"""`TokenAndPositionEmbedding`: hashed bigrams, initialisers, shared token tables."""

import math

import keras
import numpy as np
import pytest

from mintransformer.layers.embedding import (
    MAX_NGRAM_VOCAB_SIZE,
    TokenAndPositionEmbedding,
    bigram_ids,
)
from mintransformer.layers.positional import sinusoidal_table
from tests.conftest import to_numpy

pytestmark = pytest.mark.core

VOCAB, D_MODEL, MAX_LENGTH, BUCKETS = 50, 8, 16, 37


def reference_bigram_ids(ids, vocab_size, buckets):
    previous = np.concatenate([np.zeros_like(ids[:, :1]), ids[:, :-1]], axis=1)
    return (previous.astype(np.int64) * vocab_size + ids) % buckets


def bigram_layer(**overrides):
    options = dict(ngram_buckets=BUCKETS, ngram_dropout=0.0)
    options.update(overrides)
    layer = TokenAndPositionEmbedding(VOCAB, D_MODEL, MAX_LENGTH, **options)
    layer.build((None, None))
    return layer


def test_bigram_ids_hash_the_previous_and_current_token(rng):
    ids = rng.integers(0, VOCAB, size=(3, 9)).astype("int32")
    expected = reference_bigram_ids(ids, VOCAB, BUCKETS)
    np.testing.assert_array_equal(to_numpy(bigram_ids(ids, VOCAB, BUCKETS)), expected)
    largest = np.full((1, 2), MAX_NGRAM_VOCAB_SIZE - 1, "int32")  # the hash's largest value
    got = to_numpy(bigram_ids(largest, MAX_NGRAM_VOCAB_SIZE, 2**31 - 1))
    np.testing.assert_array_equal(
        got, reference_bigram_ids(largest, MAX_NGRAM_VOCAB_SIZE, 2**31 - 1)
    )


def test_output_matches_a_float64_reference(rng):
    layer = bigram_layer()
    ids = rng.integers(0, VOCAB, size=(2, 7)).astype("int32")
    tokens = to_numpy(layer.token_embedding.embeddings).astype(np.float64)
    bigrams = to_numpy(layer.ngram_embedding.embeddings).astype(np.float64)
    expected = (tokens[ids] + bigrams[reference_bigram_ids(ids, VOCAB, BUCKETS)]) * math.sqrt(
        D_MODEL
    ) + sinusoidal_table(MAX_LENGTH, D_MODEL)[None, :7]
    np.testing.assert_allclose(to_numpy(layer(ids, training=False)), expected, rtol=1e-5, atol=1e-5)


def test_one_token_sequences_use_the_pad_id_as_previous_token():
    layer = bigram_layer()
    out = to_numpy(layer(np.array([[3]], "int32")))
    token = to_numpy(layer.token_embedding.embeddings)[3]
    bigram = to_numpy(layer.ngram_embedding.embeddings)[3 % BUCKETS]
    expected = (token + bigram) * math.sqrt(D_MODEL) + sinusoidal_table(MAX_LENGTH, D_MODEL)[0]
    np.testing.assert_allclose(out[0, 0], expected, rtol=1e-5, atol=1e-5)


def test_without_buckets_the_layer_is_unchanged(rng):
    options = dict(dropout_rate=0.1, position="learned", name="embedding")
    plain = TokenAndPositionEmbedding(VOCAB, D_MODEL, MAX_LENGTH, **options)
    off = TokenAndPositionEmbedding(VOCAB, D_MODEL, MAX_LENGTH, ngram_dropout=0.5, **options)
    ids = rng.integers(0, VOCAB, size=(2, 5)).astype("int32")
    plain(ids)
    off(ids)
    shapes = [(v.name, tuple(v.shape)) for v in plain.variables]
    assert [(v.name, tuple(v.shape)) for v in off.variables] == shapes
    assert [w.path for w in off.weights] == [w.path for w in plain.weights]
    assert off.ngram_embedding is None
    off.set_weights(plain.get_weights())
    np.testing.assert_array_equal(to_numpy(off(ids)), to_numpy(plain(ids)))
    assert len(shapes) == 3  # token and position tables, the dropout's seed


def test_ngram_dropout_drops_whole_vectors_in_training_only(rng):
    rate = 0.5
    layer = bigram_layer(ngram_dropout=rate)
    ids = rng.integers(1, VOCAB, size=(4, 12)).astype("int32")
    without = to_numpy(layer.token_embedding.embeddings)[ids] * math.sqrt(D_MODEL)
    without = without + sinusoidal_table(MAX_LENGTH, D_MODEL)[None, :12]
    bigrams = to_numpy(layer.ngram_embedding.embeddings)[reference_bigram_ids(ids, VOCAB, BUCKETS)]

    def bigram_part(training):
        return (to_numpy(layer(ids, training=training)) - without) / math.sqrt(D_MODEL)

    np.testing.assert_allclose(bigram_part(False), bigrams, atol=1e-5)
    part = bigram_part(True)
    dropped = np.all(np.abs(part) < 1e-5, axis=-1)
    kept = np.all(np.abs(part - bigrams / (1 - rate)) < 1e-5, axis=-1)
    assert np.all(dropped | kept), "each position keeps or drops its whole vector"
    assert dropped.any() and kept.any()


def test_cached_decoding_is_refused():
    with pytest.raises(ValueError, match="start_index"):
        bigram_layer()(np.array([[3]], "int32"), start_index=2)


def test_too_large_a_vocabulary_is_refused_naming_the_limit():
    TokenAndPositionEmbedding(MAX_NGRAM_VOCAB_SIZE, 4, 4, ngram_buckets=8)
    with pytest.raises(ValueError, match=f"overflow int32.*{MAX_NGRAM_VOCAB_SIZE}"):
        TokenAndPositionEmbedding(MAX_NGRAM_VOCAB_SIZE + 1, 4, 4, ngram_buckets=8)
    assert MAX_NGRAM_VOCAB_SIZE**2 < 2**31 <= (MAX_NGRAM_VOCAB_SIZE + 1) ** 2


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"ngram_buckets": -1}, "ngram_buckets"),
        ({"ngram_buckets": 2.0}, "ngram_buckets"),
        ({"ngram_dropout": 1.0}, "ngram_dropout"),
    ],
)
def test_bad_ngram_arguments_are_named(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        TokenAndPositionEmbedding(VOCAB, D_MODEL, MAX_LENGTH, **kwargs)


def test_config_round_trip_gives_the_same_layer(rng):
    layer = bigram_layer(ngram_dropout=0.25, name="e")
    clone = TokenAndPositionEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert clone.get_config()["ngram_buckets"] == BUCKETS
    ids = rng.integers(0, VOCAB, size=(2, 5)).astype("int32")
    clone.build((None, None))
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_numpy(clone(ids)), to_numpy(layer(ids)))


def test_unscaled_embeddings_are_the_table_rows_plus_positions(rng):
    layer = TokenAndPositionEmbedding(VOCAB, D_MODEL, MAX_LENGTH, scale_embeddings=False)
    ids = rng.integers(0, VOCAB, size=(2, 6)).astype("int32")
    out = to_numpy(layer(ids))
    expected = (
        to_numpy(layer.token_embedding.embeddings)[ids]
        + sinusoidal_table(MAX_LENGTH, D_MODEL)[None, :6]
    )
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    config = layer.get_config()
    assert config["scale_embeddings"] is False
    assert TokenAndPositionEmbedding.from_config(config).get_config() == config


def test_normal_init_has_stddev_one_over_sqrt_width_and_a_zero_pad_row():
    keras.utils.set_random_seed(0)
    layer = TokenAndPositionEmbedding(500, 64, 8, embedding_init="normal", pad_id=0)
    layer.build((1, 8))
    table = to_numpy(layer.token_embedding.embeddings)
    np.testing.assert_array_equal(table[0], 0.0)
    assert table[1:].std() == pytest.approx(64**-0.5, rel=0.05)
    assert abs(table[1:].mean()) < 0.01
    config = layer.get_config()
    assert (config["embedding_init"], config["pad_id"]) == ("normal", 0)
    with pytest.raises(ValueError, match="embedding_init"):
        TokenAndPositionEmbedding(50, 8, 8, embedding_init="xavier")


def test_a_shared_token_table_is_used_and_built_once():
    first = TokenAndPositionEmbedding(40, 8, 6)
    second = TokenAndPositionEmbedding(40, 8, 10, token_embedding=first.token_embedding)
    first.build((1, 6))
    second.build((1, 10))
    assert second.token_embedding.embeddings is first.token_embedding.embeddings
    assert len(first.weights) == len(second.weights) == 1
    with pytest.raises(ValueError, match="shared `token_embedding`"):
        TokenAndPositionEmbedding(41, 8, 6, token_embedding=first.token_embedding)

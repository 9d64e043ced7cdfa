"""The shared `Stack` base: blocks, final norm, caches, padding masks, options, config."""

import math

import keras
import numpy as np
import pytest

from mintransformer.layers.decoder import Decoder
from mintransformer.layers.encoder import Encoder, EncoderLayer
from mintransformer.layers.positional import sinusoidal_table
from mintransformer.layers.stack import Stack
from mintransformer.models.language_model import CausalStack
from tests.conftest import to_numpy

pytestmark = pytest.mark.core

VOCAB, D_MODEL, MAX_LENGTH = 20, 8, 10


class Unmasked(Stack):
    """The smallest subclass: blocks chained without masks."""

    block_class = EncoderLayer

    def call(self, token_ids):
        x = self.embedding(token_ids)
        for block in self.blocks:
            x = block(x)
        return self.finish(x)


def small_stack(cls=Unmasked, **overrides):
    options = dict(dropout_rate=0.0, **overrides)
    return cls(3, D_MODEL, 2, 16, VOCAB, MAX_LENGTH, **options)


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_subclass_builds_its_blocks_and_a_final_norm_only_when_pre_ln(norm_first):
    stack = small_stack(norm_first=norm_first)
    out = stack(np.ones((2, 4), "int32"))
    assert tuple(out.shape) == (2, 4, D_MODEL)
    assert [block.name for block in stack.blocks] == [f"encoder_layer{i}" for i in (1, 2, 3)]
    assert all(block.built and block.norm_first == norm_first for block in stack.blocks)
    assert (stack.final_norm is not None) == norm_first
    hidden = keras.ops.convert_to_tensor(np.ones((1, 2, D_MODEL), "float32"))
    finished = to_numpy(stack.finish(hidden))
    if norm_first:
        np.testing.assert_allclose(finished, 0.0, atol=1e-6)  # LayerNorm of a constant row
    else:
        np.testing.assert_array_equal(finished, to_numpy(hidden))


@pytest.mark.parametrize("cls", [Unmasked, Encoder, Decoder, CausalStack])
def test_config_round_trips_with_every_option(cls):
    stack = small_stack(
        cls,
        pad_id=None,
        position="learned",
        activation="gelu",
        norm_first=True,
        layer_norm_epsilon=1e-5,
        key_dim=6,
        scale_embeddings=False,
        use_bias=False,
    )
    config = stack.get_config()
    assert (config["pad_id"], config["scale_embeddings"], config["use_bias"]) == (
        None,
        False,
        False,
    )
    assert cls.from_config(config).get_config() == config


def test_empty_cache_has_one_zero_key_value_tensor_per_block():
    stack = small_stack(key_dim=5)
    cache = stack.empty_cache(4, 7)
    assert len(cache) == 3
    for layer_cache in cache:
        assert tuple(layer_cache.shape) == (2, 4, 2, 7, 5)
        assert keras.backend.standardize_dtype(layer_cache.dtype) == stack.compute_dtype
        assert not to_numpy(layer_cache).any()


def test_padding_mask_is_given_built_from_pad_id_or_all_true_without_one():
    ids = np.array([[4, 0, 3], [0, 0, 1]], "int32")
    np.testing.assert_array_equal(to_numpy(small_stack(pad_id=0).padding_mask(ids)), ids != 0)
    np.testing.assert_array_equal(to_numpy(small_stack(pad_id=3).padding_mask(ids)), ids != 3)
    without = small_stack(pad_id=None)
    np.testing.assert_array_equal(to_numpy(without.padding_mask(ids)), np.ones((2, 3), bool))
    given = np.array([[True, True, False], [True, False, False]])
    np.testing.assert_array_equal(to_numpy(without.padding_mask(ids, given)), given)
    with pytest.raises(ValueError, match="my_mask"):
        without.padding_mask(ids, np.ones((2, 4), bool), "my_mask")
    with pytest.raises(ValueError, match="my_mask"):
        without.padding_mask(ids, np.ones((2, 3), "int32"), "my_mask")
    with pytest.raises(ValueError, match="pad_id"):
        small_stack(pad_id=-1)


@pytest.mark.parametrize("scale_embeddings", [True, False])
def test_scale_embeddings_reaches_the_embedding(rng, scale_embeddings):
    stack = small_stack(scale_embeddings=scale_embeddings)
    ids = rng.integers(0, VOCAB, size=(2, 5)).astype("int32")
    stack(ids)
    table = to_numpy(stack.embedding.token_embedding.embeddings)
    scale = math.sqrt(D_MODEL) if scale_embeddings else 1.0
    expected = table[ids] * scale + sinusoidal_table(MAX_LENGTH, D_MODEL)[None, :5]
    np.testing.assert_allclose(to_numpy(stack.embedding(ids)), expected, rtol=1e-5, atol=1e-5)


def test_use_bias_reaches_every_block():
    stack = small_stack(use_bias=False)
    stack(np.ones((1, 3), "int32"))
    assert all(not block.use_bias for block in stack.blocks)
    names = [w.path for w in stack.weights]
    assert not [name for name in names if name.endswith("/bias")], names
    with_bias = small_stack()
    with_bias(np.ones((1, 3), "int32"))
    biases = [w.path for w in with_bias.weights if w.path.endswith("/bias")]
    assert len(biases) == 3 * 6  # per block: 4 attention and 2 feed-forward projections

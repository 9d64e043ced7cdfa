"""Add & Norm against NumPy, cached self-attention with a padding mask, block options."""

import keras
import numpy as np
import pytest

from mintransformer.layers import masks
from mintransformer.layers.attention import MultiHeadAttention
from mintransformer.layers.sublayer import (
    BlockOptions,
    cached_self_attention,
    residual,
    write_slot,
)
from tests.conftest import to_numpy

pytestmark = pytest.mark.core

D_MODEL, EPSILON = 8, 1e-5


def layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + EPSILON) * gamma + beta


@pytest.fixture
def norm_and_sublayer(rng):
    norm = keras.layers.LayerNormalization(epsilon=EPSILON)
    norm.build((None, None, D_MODEL))
    gamma, beta = rng.normal(size=(2, D_MODEL)).astype("float32")
    norm.set_weights([gamma, beta])
    kernel = rng.normal(size=(D_MODEL, D_MODEL)).astype("float32")
    sublayer = keras.layers.Dense(D_MODEL, use_bias=False)
    sublayer.build((None, None, D_MODEL))
    sublayer.set_weights([kernel])
    return norm, sublayer, (gamma, beta, kernel)


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_is_post_or_pre_layer_norm(rng, norm_and_sublayer, norm_first):
    norm, sublayer, (gamma, beta, kernel) = norm_and_sublayer
    x = rng.normal(size=(2, 5, D_MODEL)).astype("float32")
    out, extra = residual(
        keras.ops.convert_to_tensor(x), sublayer, norm, keras.layers.Dropout(0.5), norm_first, False
    )
    x64 = x.astype(np.float64)
    if norm_first:
        expected = x64 + layer_norm(x64, gamma, beta) @ kernel
    else:
        expected = layer_norm(x64 + x64 @ kernel, gamma, beta)
    assert extra is None
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-4, atol=1e-4)


def test_residual_passes_on_what_the_sublayer_returns_after_its_output(rng, norm_and_sublayer):
    norm, sublayer, _ = norm_and_sublayer
    x = keras.ops.convert_to_tensor(rng.normal(size=(1, 3, D_MODEL)).astype("float32"))
    plain, _ = residual(x, sublayer, norm, keras.layers.Dropout(0.0), False)
    out, extra = residual(
        x, lambda h: (sublayer(h), "weights"), norm, keras.layers.Dropout(0.0), False
    )
    assert extra == "weights"
    np.testing.assert_array_equal(to_numpy(out), to_numpy(plain))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("write", [False, True])
def test_cached_self_attention_with_a_padding_mask_equals_masked_attention(rng, norm_first, write):
    batch, length, heads = 2, 6, 2
    attention = MultiHeadAttention(D_MODEL, heads)
    norm = keras.layers.LayerNormalization(epsilon=EPSILON)
    dropout = keras.layers.Dropout(0.0)
    x = keras.ops.convert_to_tensor(rng.normal(size=(batch, length, D_MODEL)).astype("float32"))
    keep = np.array([[False, False, True, True, True, True], [True] * length])  # left padding
    full_mask = np.logical_and(to_numpy(masks.look_ahead_mask(length)), keep[:, None, None, :])
    full, _ = residual(
        x, lambda h: attention(h, attention_mask=full_mask), norm, dropout, norm_first
    )
    cache = keras.ops.zeros((2, batch, heads, length + 2, D_MODEL // heads))
    slots = np.pad(keep, ((0, 0), (0, 2)), constant_values=False)
    for t in range(length):
        before = to_numpy(cache)
        out, written = cached_self_attention(
            x[:, t : t + 1], t, cache, attention, norm, dropout, norm_first, slots, write
        )
        np.testing.assert_allclose(to_numpy(out)[:, 0], to_numpy(full)[:, t], atol=1e-5)
        # Without `write` the step returns the new slot, and the caller writes it.
        cache = written if write else write_slot(cache, written, t)
        # Only slot t changed, to the position's keys and values (computed independently).
        key, value = attention.project_key_value(
            norm(x[:, t : t + 1]) if norm_first else x[:, t : t + 1]
        )
        np.testing.assert_allclose(to_numpy(cache)[0, :, :, t], to_numpy(key)[:, :, 0], atol=1e-6)
        np.testing.assert_allclose(to_numpy(cache)[1, :, :, t], to_numpy(value)[:, :, 0], atol=1e-6)
        np.testing.assert_array_equal(
            np.delete(to_numpy(cache), t, axis=3), np.delete(before, t, axis=3)
        )


def test_block_options_build_sub_layers_with_the_options():
    options = BlockOptions(
        16, 2, 48, dropout_rate=0.2, activation="gelu", layer_norm_epsilon=1e-3, use_bias=False
    )
    attention, ffn = options.attention("a"), options.feed_forward()
    assert (attention.name, attention.num_heads, attention.dropout_rate) == ("a", 2, 0.2)
    assert not attention.use_bias and not ffn.use_bias
    assert (ffn.dff, ffn.activation) == (48, "gelu")
    assert options.norm("n").epsilon == 1e-3 and options.dropout().rate == 0.2
    config = options.get_config()
    assert config["use_bias"] is False and config["key_dim"] is None
    assert BlockOptions.from_config(config).get_config() == config


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"num_heads": 3}, "d_model"), ({"dff": 0}, "dff"), ({"dropout_rate": 1.0}, "dropout_rate")],
)
def test_bad_block_options_are_value_errors_naming_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        BlockOptions(**{"d_model": 16, "num_heads": 4, "dff": 32, **kwargs})


def test_attention_weights_can_have_their_own_dropout_rate():
    options = BlockOptions(16, 2, 48, dropout_rate=0.3, attention_dropout_rate=0.0)
    assert options.attention("a").dropout_rate == 0.0
    assert options.dropout().rate == 0.3
    config = options.get_config()
    assert config["attention_dropout_rate"] == 0.0
    assert BlockOptions.from_config(config).attention("a").dropout_rate == 0.0
    assert BlockOptions(16, 2, 48, dropout_rate=0.3).attention("a").dropout_rate == 0.3
    with pytest.raises(ValueError, match="attention_dropout_rate"):
        BlockOptions(16, 2, 48, attention_dropout_rate=1.5)

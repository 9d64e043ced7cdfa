import hypothesis.strategies as st
import keras
import numpy as np
import pytest
from hypothesis import given, settings

from mintransformer import reference
from mintransformer.layers.attention import (
    MultiHeadAttention,
    attend,
    scaled_dot_product_attention,
)
from tests.conftest import to_numpy, value_and_gradients

pytestmark = pytest.mark.core


def relative_error(actual, expected):
    return np.max(np.abs(actual - expected)) / max(np.max(np.abs(expected)), 1e-12)


shapes = st.tuples(
    st.integers(1, 3), st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.integers(1, 16)
)


@settings(max_examples=25, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16), masked=st.booleans())
def test_attention_matches_float64_reference(shape, seed, masked):
    batch, heads, q_len, k_len, depth = shape
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(batch, heads, q_len, depth)).astype("float32")
    k = rng.normal(size=(batch, heads, k_len, depth)).astype("float32")
    v = rng.normal(size=(batch, heads, k_len, depth)).astype("float32")
    mask = rng.random((batch, 1, q_len, k_len)) > 0.3 if masked else None
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_weights = reference.attention(q, k, v, mask)
    # The output is a convex combination of value rows, which can cancel to near 0:
    # its float32 error is bounded relative to the values, not to itself.
    assert np.max(np.abs(to_numpy(out) - ref_out)) <= 1e-5 * np.max(np.abs(v))
    assert relative_error(to_numpy(weights), ref_weights) <= 1e-5


def attend_reference(q, k, v, mask, kept, upstream):
    """`attend`'s output and the gradients of `sum(output * upstream)` for q, k and v, by
    the chain rule through the weights in float64 (the softmax's gradient from the full
    weight rows, not from the output as `attend` takes it)."""
    q, k, v, kept, upstream = (np.asarray(a, np.float64) for a in (q, k, v, kept, upstream))
    _, weights = reference.attention(q, k, v, mask)
    dropped = weights * kept
    d_weights = (upstream @ np.swapaxes(v, -1, -2)) * kept
    d_scores = weights * (d_weights - (d_weights * weights).sum(-1, keepdims=True))
    scale = 1.0 / np.sqrt(q.shape[-1])
    d_q = d_scores @ k * scale
    d_k = np.swapaxes(d_scores, -1, -2) @ q * scale
    d_v = np.swapaxes(dropped, -1, -2) @ upstream
    return dropped @ v, [d_q, d_k, d_v]


@pytest.mark.parametrize("with_dropout", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_attend_and_its_gradient_match_float64_chain_rule(masked, with_dropout):
    rng = np.random.default_rng(11)
    q = rng.normal(size=(2, 3, 5, 4)).astype("float32")
    k = rng.normal(size=(2, 3, 6, 4)).astype("float32")
    v = rng.normal(size=(2, 3, 6, 7)).astype("float32")
    upstream = rng.normal(size=(2, 3, 5, 7)).astype("float32")
    mask = None
    if masked:  # padding keys and a causal-like pattern; every row keeps a key
        mask = rng.random((2, 1, 5, 6)) > 0.4
        mask[..., 0] = True
    kept = np.ones((2, 3, 5, 6), "float32")
    if with_dropout:
        kept = np.where(rng.random(kept.shape) < 0.3, 0.0, 1 / 0.7).astype("float32")

    def weighted_sum(q, k, v):
        output = attend(q, k, v, mask, kept if with_dropout else None)
        return keras.ops.sum(output * keras.ops.convert_to_tensor(upstream))

    value, gradients = value_and_gradients(weighted_sum, q, k, v)
    want_output, want_gradients = attend_reference(q, k, v, mask, kept, upstream)
    terms = want_output * upstream
    assert float(value) == pytest.approx(terms.sum(), abs=1e-6 * np.abs(terms).sum())
    output = to_numpy(attend(q, k, v, mask, kept if with_dropout else None))
    assert relative_error(output, want_output) <= 1e-5
    for got, want in zip(gradients, want_gradients, strict=True):
        assert relative_error(got, want) <= 1e-5


def test_attend_in_bf16_is_close_to_float64_and_keeps_bf16():
    rng = np.random.default_rng(12)
    arrays = [rng.normal(size=(2, 2, 9, 8)).astype("float32") for _ in range(3)]
    upstream = rng.normal(size=(2, 2, 9, 8)).astype("float32")
    rounded = [to_numpy(keras.ops.cast(keras.ops.cast(a, "bfloat16"), "float32")) for a in arrays]

    def weighted_sum(q, k, v):
        q, k, v = (keras.ops.cast(x, "bfloat16") for x in (q, k, v))
        output = attend(q, k, v)
        assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
        weighted = keras.ops.cast(output, "float32") * keras.ops.convert_to_tensor(upstream)
        return keras.ops.sum(weighted)

    _, gradients = value_and_gradients(weighted_sum, *arrays)
    _, want_gradients = attend_reference(*rounded, None, np.ones((2, 2, 9, 9)), upstream)
    for got, want in zip(gradients, want_gradients, strict=True):
        assert relative_error(got, want) <= 3e-2


def test_attend_leaves_rows_with_no_key_finite_for_the_caller_to_zero():
    q, k, v = (np.ones((1, 1, 2, 4), "float32") for _ in range(3))
    mask = np.array([[[[True, True], [False, False]]]])
    output = to_numpy(attend(q, k, v, mask))
    assert np.isfinite(output).all()


def test_fully_masked_row_gives_zero_weights_and_no_nan():
    q = np.ones((1, 1, 2, 4), "float32")
    v = np.arange(12, dtype="float32").reshape(1, 1, 3, 4)
    mask = np.array([[[[True, False, True], [False, False, False]]]])
    out, weights = scaled_dot_product_attention(q, v, v, mask)
    out, weights = to_numpy(out), to_numpy(weights)
    assert np.isfinite(out).all() and np.isfinite(weights).all()
    np.testing.assert_allclose(weights[0, 0, 0].sum(), 1.0, rtol=1e-6)
    assert weights[0, 0, 0, 1] == 0.0
    np.testing.assert_array_equal(weights[0, 0, 1], 0.0)
    np.testing.assert_array_equal(out[0, 0, 1], 0.0)


def mha_weights(layer):
    """Our layer's kernels and biases, under the reference's names."""
    dense = {
        "q": layer.query_dense,
        "k": layer.key_dense,
        "v": layer.value_dense,
        "o": layer.output_dense,
    }
    weights = {}
    for name, d in dense.items():
        weights[f"w{name}"] = to_numpy(d.kernel)
        weights[f"b{name}"] = to_numpy(d.bias)
    return weights


@settings(max_examples=10, deadline=None)
@given(
    heads=st.sampled_from([1, 2, 4]),
    depth=st.integers(1, 8),
    q_len=st.integers(1, 7),
    k_len=st.integers(1, 7),
    seed=st.integers(0, 2**16),
)
def test_multi_head_attention_matches_float64_reference(heads, depth, q_len, k_len, seed):
    d_model = heads * depth
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(2, q_len, d_model)).astype("float32")
    memory = rng.normal(size=(2, k_len, d_model)).astype("float32")
    mask = rng.random((2, q_len, k_len)) > 0.25
    layer = MultiHeadAttention(d_model, heads)
    layer(query, memory)  # build
    for d in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense):
        d.bias.assign(rng.normal(size=d.bias.shape).astype("float32"))
    out, weights = layer(query, memory, attention_mask=mask, return_attention_weights=True)
    ref_out, ref_weights = reference.multi_head_attention(
        query, memory, memory, mha_weights(layer), heads, mask[:, None]
    )
    assert relative_error(to_numpy(out), ref_out) <= 1e-5
    assert relative_error(to_numpy(weights), ref_weights) <= 1e-5


@pytest.mark.parametrize("training", [False, True])
def test_rows_with_no_key_give_the_output_bias_alone_without_weights_returned(training):
    """Without weights returned, masked keys are added a bias and rows with no key are
    zeroed after the product with the values: same output as the weights path, and in
    training (dropout on the weights) still exactly the output bias for such rows."""
    rng = np.random.default_rng(2)
    query = rng.normal(size=(2, 4, 8)).astype("float32")
    memory = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = rng.random((2, 4, 5)) > 0.3
    mask[:, :, 1] = True
    mask[1, 2, :] = False  # a query with no key to attend to
    layer = MultiHeadAttention(8, 2, dropout_rate=0.5 if training else 0.0)
    layer(query, memory)
    layer.output_dense.bias.assign(rng.normal(size=(8,)).astype("float32"))
    output = to_numpy(layer(query, memory, attention_mask=mask, training=training))
    assert np.isfinite(output).all()
    np.testing.assert_allclose(output[1, 2], to_numpy(layer.output_dense.bias), rtol=1e-6)
    if not training:
        with_weights, _ = layer(query, memory, attention_mask=mask, return_attention_weights=True)
        np.testing.assert_allclose(output, to_numpy(with_weights), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("key_dim", [None, 8])
def test_multi_head_attention_matches_keras_multi_head_attention(key_dim):
    """The paper's d_model // heads per head, and a wider head set by `key_dim`."""
    rng = np.random.default_rng(0)
    d_model, heads = 16, 4
    query = rng.normal(size=(3, 5, d_model)).astype("float32")
    memory = rng.normal(size=(3, 7, d_model)).astype("float32")
    mask = rng.random((3, 5, 7)) > 0.3
    mask[:, :, 0] = True  # Keras gives fully masked rows uniform weights; we give zeros.
    ours = MultiHeadAttention(d_model, heads, key_dim=key_dim)
    ours(query, memory)
    theirs = keras.layers.MultiHeadAttention(heads, key_dim=key_dim or d_model // heads)
    theirs(query, memory, memory)
    copies = [
        (theirs._query_dense, ours.query_dense, (d_model, heads, -1), (heads, -1)),
        (theirs._key_dense, ours.key_dense, (d_model, heads, -1), (heads, -1)),
        (theirs._value_dense, ours.value_dense, (d_model, heads, -1), (heads, -1)),
        (theirs._output_dense, ours.output_dense, (heads, -1, d_model), (d_model,)),
    ]
    for their_dense, our_dense, kernel_shape, bias_shape in copies:
        our_dense.bias.assign(rng.normal(size=our_dense.bias.shape).astype("float32"))
        their_dense.kernel.assign(to_numpy(our_dense.kernel).reshape(kernel_shape))
        their_dense.bias.assign(to_numpy(our_dense.bias).reshape(bias_shape))
    out, weights = ours(query, memory, attention_mask=mask, return_attention_weights=True)
    ref_out, ref_weights = theirs(
        query, memory, memory, attention_mask=mask, return_attention_scores=True
    )
    np.testing.assert_allclose(to_numpy(out), to_numpy(ref_out), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), to_numpy(ref_weights), rtol=1e-5, atol=1e-6)


def test_precomputed_keys_and_values_give_the_same_output():
    rng = np.random.default_rng(1)
    query = rng.normal(size=(2, 3, 8)).astype("float32")
    memory = rng.normal(size=(2, 4, 8)).astype("float32")
    layer = MultiHeadAttention(8, 2)
    direct = layer(query, memory)
    cached = layer(query, key_value=layer.project_key_value(memory))
    np.testing.assert_allclose(to_numpy(cached), to_numpy(direct), rtol=1e-6, atol=1e-6)


def test_config_round_trip():
    layer = MultiHeadAttention(12, 3, dropout_rate=0.2, use_bias=False, key_dim=5, name="mha")
    clone = MultiHeadAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"d_model": 10, "num_heads": 3}, "d_model"),
        ({"d_model": 0, "num_heads": 1}, "d_model"),
        ({"d_model": 8, "num_heads": -2}, "num_heads"),
        ({"d_model": 8, "num_heads": 2, "dropout_rate": 1.0}, "dropout_rate"),
        ({"d_model": 8, "num_heads": 2, "dropout_rate": -0.1}, "dropout_rate"),
        ({"d_model": 8, "num_heads": 2, "key_dim": 0}, "key_dim"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        MultiHeadAttention(**kwargs)


def test_wrong_input_rank_is_rejected():
    with pytest.raises(ValueError, match="`query` must have rank 3"):
        MultiHeadAttention(8, 2)(np.zeros((2, 8), "float32"))


def test_float_mask_is_rejected():
    x = np.zeros((1, 2, 8), "float32")
    with pytest.raises(ValueError, match="boolean"):
        MultiHeadAttention(8, 2)(x, attention_mask=np.ones((1, 2, 2), "float32"))


def test_fused_attention_equals_the_written_out_attention(rng):
    from mintransformer.backend.kernels import fused_attention

    query = rng.normal(size=(2, 3, 5, 8)).astype("float32")
    key = rng.normal(size=(2, 3, 7, 8)).astype("float32")
    value = rng.normal(size=(2, 3, 7, 8)).astype("float32")
    mask = rng.random((2, 1, 5, 7)) > 0.4
    mask[1, 0, 2] = False  # a row with every key masked: zeros, as written out
    expected, _ = scaled_dot_product_attention(query, key, value, mask)
    for m, want in [(mask, expected), (None, scaled_dot_product_attention(query, key, value)[0])]:
        got = to_numpy(fused_attention(query, key, value, m))
        np.testing.assert_allclose(got, to_numpy(want), rtol=1e-5, atol=1e-6)
    assert not to_numpy(fused_attention(query, key, value, mask))[1, :, 2].any()

import keras
import numpy as np
import pytest
import torch

from mintransformer import MinTransformer, Transformer
from tests.conftest import to_numpy

pytestmark = pytest.mark.core


def small_model(**kwargs):
    options = dict(
        num_layers=2,
        d_model=16,
        num_heads=4,
        dff=32,
        input_vocab_size=30,
        target_vocab_size=25,
        pe_input=20,
        pe_target=20,
        dropout_rate=0.0,
    )
    return Transformer(**{**options, **kwargs})


def padded_batch(rng, batch, length, vocab, min_real=1):
    ids = rng.integers(1, vocab, size=(batch, length)).astype("int32")
    for row, real in enumerate(rng.integers(min_real, length + 1, size=batch)):
        ids[row, real:] = 0
    return ids


def test_paper_sized_forward_pass_shape():
    model = MinTransformer(4, 128, 8, 512, 8500, 8000, pe_input=1000, pe_target=1000)
    rng = np.random.default_rng(0)
    source = rng.integers(0, 8500, size=(64, 38))
    target = rng.integers(0, 8000, size=(64, 36))
    logits = model((source, target), training=False)
    assert tuple(logits.shape) == (64, 36, 8000)


def test_attention_weights_of_every_layer_are_returned_by_name():
    model = small_model(num_layers=3)
    rng = np.random.default_rng(1)
    source, target = padded_batch(rng, 2, 7, 30), padded_batch(rng, 2, 5, 25)
    _, weights = model((source, target), return_attention_weights=True)
    expected = {f"encoder_layer{i}" for i in (1, 2, 3)}
    expected |= {
        f"decoder_layer{i}_{kind}"
        for i in (1, 2, 3)
        for kind in ("self_attention", "cross_attention")
    }
    assert set(weights) == expected
    assert tuple(weights["encoder_layer2"].shape) == (2, 4, 7, 7)
    assert tuple(weights["decoder_layer3_self_attention"].shape) == (2, 4, 5, 5)
    assert tuple(weights["decoder_layer3_cross_attention"].shape) == (2, 4, 5, 7)


def test_rate_is_another_name_for_dropout_rate(tmp_path):
    sizes = (4, 128, 8, 512, 8500, 8000)
    model = MinTransformer(*sizes, pe_input=1000, pe_target=1000, rate=0.1, name="a")
    same = MinTransformer(*sizes, pe_input=1000, pe_target=1000, dropout_rate=0.1, name="a")
    assert model.get_config() == same.get_config()
    assert model.get_config()["dropout_rate"] == 0.1 and "rate" not in model.get_config()
    assert small_model(dropout_rate=None, rate=0.3).get_config()["dropout_rate"] == 0.3
    assert Transformer(2, 16, 4, 32, 30, 25, 20, 20).get_config()["dropout_rate"] == 0.1
    assert small_model(rate=0.0).get_config()["dropout_rate"] == 0.0
    with pytest.raises(ValueError, match="rate"):
        small_model(dropout_rate=0.2, rate=0.1)
    small = small_model(dropout_rate=None, rate=0.2)
    small((np.ones((1, 3), "int32"), np.ones((1, 3), "int32")))
    small.save(tmp_path / "rate.keras")
    assert keras.models.load_model(tmp_path / "rate.keras").get_config() == small.get_config()
    for stack in (small.encoder, small.decoder):
        assert stack.embedding.dropout.rate == 0.2
        assert all(block.ffn_dropout.rate == 0.2 for block in stack.blocks)
        assert all(block.self_attention.dropout_rate == 0.2 for block in stack.blocks)


def test_stack_options_reach_every_layer_and_the_config():
    model = small_model(scale_embeddings=False, use_bias=False, pad_id=None)
    model((np.ones((1, 3), "int32"), np.ones((1, 3), "int32")))
    config = model.get_config()
    assert config["scale_embeddings"] is False and config["use_bias"] is False
    assert config["pad_id"] is None
    for stack in (model.encoder, model.decoder):
        assert stack.embedding.scale_embeddings is False and stack.pad_id is None
    biases = [w.path for w in model.weights if w.path.endswith("/bias")]
    assert biases == [model.output_projection.bias.path]
    assert Transformer.from_config(config).get_config() == config


def test_without_pad_id_token_0_is_real_unless_a_mask_says_otherwise():
    model = small_model(pad_id=None)
    rng = np.random.default_rng(6)
    source, target = padded_batch(rng, 3, 6, 30), padded_batch(rng, 3, 5, 25)
    masked = model((source, target), source_mask=source != 0, target_mask=target != 0)
    padded = small_model(pad_id=0)
    padded((source, target))
    padded.set_weights(model.get_weights())
    np.testing.assert_allclose(
        to_numpy(masked), to_numpy(padded((source, target))), rtol=1e-5, atol=1e-6
    )
    unmasked = to_numpy(model((source, target)))
    all_real = dict(source_mask=np.ones_like(source, bool), target_mask=np.ones_like(target, bool))
    np.testing.assert_array_equal(unmasked, to_numpy(model((source, target), **all_real)))
    assert not np.allclose(unmasked, to_numpy(masked), atol=1e-4)


def test_wrong_shaped_masks_are_value_errors_naming_the_argument():
    model = small_model()
    source, target = np.ones((2, 4), "int32"), np.ones((2, 3), "int32")
    with pytest.raises(ValueError, match="source_mask"):
        model((source, target), source_mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match="target_mask"):
        model((source, target), target_mask=np.ones((2, 4), bool))


def test_explicit_masks_equal_masks_built_from_pad_id():
    model = small_model()
    rng = np.random.default_rng(2)
    source, target = padded_batch(rng, 3, 6, 30), padded_batch(rng, 3, 5, 25)
    implicit = model((source, target))
    explicit = model((source, target), source_mask=source != 0, target_mask=target != 0)
    np.testing.assert_array_equal(to_numpy(implicit), to_numpy(explicit))


def test_save_and_load_give_identical_outputs(tmp_path):
    model = small_model(norm_first=True, tie_embeddings=True, activation="gelu", pad_id=0)
    rng = np.random.default_rng(3)
    source, target = padded_batch(rng, 2, 6, 25), padded_batch(rng, 2, 4, 25)
    model((source, target))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(
        to_numpy(loaded((source, target))), to_numpy(model((source, target)))
    )


def test_tied_embeddings_share_the_output_matrix():
    model = small_model(input_vocab_size=25, tie_embeddings=True)
    model((np.ones((1, 3), "int32"), np.ones((1, 3), "int32")))
    untied = small_model(input_vocab_size=25)
    untied((np.ones((1, 3), "int32"), np.ones((1, 3), "int32")))
    assert untied.count_params() - model.count_params() == 16 * 25 + 25


def test_a_few_training_steps_reduce_the_loss():
    model = small_model(num_layers=1)
    model.compile(
        optimizer=keras.optimizers.Adam(5e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(4)
    source = rng.integers(3, 25, size=(32, 6)).astype("int32")
    target = np.concatenate([np.ones((32, 1), "int32"), source], axis=1)  # copy task
    history = model.fit((source, target[:, :-1]), target[:, 1:], epochs=50, verbose=0)
    assert history.history["loss"][-1] < 0.7 * history.history["loss"][0]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"d_model": 18, "num_heads": 4}, "d_model"),
        ({"num_layers": 0}, "num_layers"),
        ({"dff": -1}, "dff"),
        ({"dropout_rate": 1.5}, "dropout_rate"),
        ({"input_vocab_size": 0}, "input_vocab_size"),
        ({"pe_target": 0}, "pe_target"),
    ],
)
def test_bad_sizes_are_value_errors_naming_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        small_model(**kwargs)


def test_bad_inputs_are_value_errors():
    model = small_model()
    with pytest.raises(ValueError, match="pair"):
        model(np.ones((1, 3), "int32"))
    with pytest.raises(ValueError, match="source_ids"):
        model((np.ones((3,), "int32"), np.ones((1, 3), "int32")))
    with pytest.raises(ValueError, match="pe_input"):
        model((np.ones((1, 21), "int32"), np.ones((1, 3), "int32")))


# --- parity with torch.nn.Transformer, weights copied across -----------------------------


def _tensor(array):
    return torch.from_numpy(np.ascontiguousarray(to_numpy(array), dtype=np.float32))


def _copy_attention(ours, theirs):
    denses = (ours.query_dense, ours.key_dense, ours.value_dense)
    theirs.in_proj_weight.copy_(torch.cat([_tensor(d.kernel).T for d in denses]))
    theirs.in_proj_bias.copy_(torch.cat([_tensor(d.bias) for d in denses]))
    theirs.out_proj.weight.copy_(_tensor(ours.output_dense.kernel).T)
    theirs.out_proj.bias.copy_(_tensor(ours.output_dense.bias))


def _copy_norm(ours, theirs):
    theirs.weight.copy_(_tensor(ours.gamma))
    theirs.bias.copy_(_tensor(ours.beta))


def _copy_ffn(ours, theirs_layer):
    theirs_layer.linear1.weight.copy_(_tensor(ours.inner.kernel).T)
    theirs_layer.linear1.bias.copy_(_tensor(ours.inner.bias))
    theirs_layer.linear2.weight.copy_(_tensor(ours.outer.kernel).T)
    theirs_layer.linear2.bias.copy_(_tensor(ours.outer.bias))


def torch_twin(model, norm_first):
    config = model.get_config()
    twin = torch.nn.Transformer(
        d_model=config["d_model"],
        nhead=config["num_heads"],
        num_encoder_layers=config["num_layers"],
        num_decoder_layers=config["num_layers"],
        dim_feedforward=config["dff"],
        dropout=0.0,
        activation="relu",
        layer_norm_eps=config["layer_norm_epsilon"],
        batch_first=True,
        norm_first=norm_first,
    )
    with torch.no_grad():
        for ours, theirs in zip(model.encoder.blocks, twin.encoder.layers, strict=True):
            _copy_attention(ours.self_attention, theirs.self_attn)
            _copy_ffn(ours.ffn, theirs)
            _copy_norm(ours.self_attention_norm, theirs.norm1)
            _copy_norm(ours.ffn_norm, theirs.norm2)
        for ours, theirs in zip(model.decoder.blocks, twin.decoder.layers, strict=True):
            _copy_attention(ours.self_attention, theirs.self_attn)
            _copy_attention(ours.cross_attention, theirs.multihead_attn)
            _copy_ffn(ours.ffn, theirs)
            _copy_norm(ours.self_attention_norm, theirs.norm1)
            _copy_norm(ours.cross_attention_norm, theirs.norm2)
            _copy_norm(ours.ffn_norm, theirs.norm3)
        if norm_first:
            _copy_norm(model.encoder.final_norm, twin.encoder.norm)
            _copy_norm(model.decoder.final_norm, twin.decoder.norm)
    if not norm_first:
        # torch.nn.Transformer always ends each stack with a LayerNorm; the post-LN paper
        # model has none (its last layer already ends with one).
        twin.encoder.norm = torch.nn.Identity()
        twin.decoder.norm = torch.nn.Identity()
    # train() with dropout 0 avoids torch's eval fast path (nested tensors), same math.
    return twin.train()


@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_torch_nn_transformer_with_copied_weights(norm_first):
    model = small_model(num_layers=3, d_model=32, num_heads=4, dff=64, norm_first=norm_first)
    rng = np.random.default_rng(5)
    source, target = padded_batch(rng, 4, 9, 30), padded_batch(rng, 4, 7, 25, min_real=7)
    logits = to_numpy(model((source, target)))
    twin = torch_twin(model, norm_first)
    source_in = _tensor(model.encoder.embedding(source))
    target_in = _tensor(model.decoder.embedding(target))
    with torch.no_grad():
        hidden = (
            twin(
                source_in,
                target_in,
                tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(7),
                src_key_padding_mask=torch.from_numpy(source == 0),
                memory_key_padding_mask=torch.from_numpy(source == 0),
            )
            .double()
            .numpy()
        )
    projection = model.output_projection
    expected = hidden @ to_numpy(projection.kernel) + to_numpy(projection.bias)
    assert np.max(np.abs(logits - expected)) <= 1e-4


def test_shared_embeddings_are_one_matrix_three_ways():
    ids = np.ones((1, 3), "int32")
    shared = small_model(input_vocab_size=25, tie_embeddings=True, share_embeddings=True)
    shared((ids, ids))
    tied = small_model(input_vocab_size=25, tie_embeddings=True)
    tied((ids, ids))
    assert tied.count_params() - shared.count_params() == 25 * 16
    encoder_table = shared.encoder.embedding.token_embedding.embeddings
    assert encoder_table is shared.decoder.embedding.token_embedding.embeddings
    rebuilt = Transformer.from_config(shared.get_config())
    rebuilt((ids, ids))
    assert len(rebuilt.weights) == len(shared.weights)
    with pytest.raises(ValueError, match="share_embeddings"):
        small_model(share_embeddings=True)  # vocabularies 30 and 25


def test_recipe_options_reach_the_layers_and_the_config():
    model = small_model(attention_dropout_rate=0.0, dropout_rate=0.2, embedding_init="normal")
    block = model.decoder.blocks[0]
    assert (block.cross_attention.dropout_rate, block.ffn_dropout.rate) == (0.0, 0.2)
    assert model.encoder.embedding.embedding_init == "normal"
    config = model.get_config()
    assert config["attention_dropout_rate"] == 0.0 and config["embedding_init"] == "normal"


@pytest.mark.parametrize("pad_id", [0, 7, None])
def test_next_token_log_probs_are_the_log_softmax_with_the_pad_banned(pad_id):
    model = small_model(pad_id=pad_id, tie_embeddings=False)
    rng = np.random.default_rng(0)
    source = rng.integers(1, 30, size=(3, 6)).astype("int32")
    prefix = rng.integers(1, 25, size=(3, 4)).astype("int32")
    model((source, prefix))
    bias = np.zeros(25, "float32")
    if pad_id is not None:
        bias[pad_id] = 20.0  # the pad would win every argmax
    model.output_projection.bias.assign(bias)
    hidden = model.hidden_states((source, prefix))[:, -1:]
    log_probs = to_numpy(model.next_token_log_probs(hidden)).astype("float64")
    logits = to_numpy(model((source, prefix))[:, -1]).astype("float64")
    shifted = logits - logits.max(axis=1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    if pad_id is not None:
        assert np.all(log_probs[:, pad_id] == -np.inf)
        assert np.all(log_probs.argmax(axis=1) != pad_id)
        expected[:, pad_id] = -np.inf
    np.testing.assert_allclose(log_probs, expected, atol=1e-5)

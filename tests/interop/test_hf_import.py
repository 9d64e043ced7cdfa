"""`mintransformer import hf`: Marian checkpoints become runs computing what transformers does."""

import json

import numpy as np
import pytest

from mintransformer.cli import main
from mintransformer.data.lengths import pad_batch
from mintransformer.data.numbers import english_words
from mintransformer.inference.translator import Translator
from tests.interop.helpers import hf_logits, hf_tokens, our_logits, our_tokens
from tests.interop.marian import make_marian, marian_model

MAX_TOKENS = 16
SENTENCES = [english_words(n) for n in range(11, 1_000_000, 49_999)][:18]
SENTENCES += ["A man is riding a bike.", "Hello, world!"]
# The options that differ between published OPUS-MT checkpoints.
CASES = {
    "swish, shared, tied": dict(activation="swish", final_logits_bias=False),
    "gelu, final_logits_bias": dict(activation="gelu"),
    "relu, untied output": dict(activation="relu", tied=False),
    "separate decoder vocabulary": dict(separate_vocab=True),
}


@pytest.fixture(scope="module", params=list(CASES))
def imported(request, tmp_path_factory):
    """`(folder, run, translator, transformers model)` of one Marian case."""
    folder = make_marian(tmp_path_factory.mktemp("marian"), **CASES[request.param])
    run = tmp_path_factory.mktemp("run") / "run"
    assert main(["import", "hf", str(folder), "--run", str(run)]) == 0
    translator = Translator.from_run(run, max_output_length=MAX_TOKENS)
    return folder, run, translator, marian_model(folder)


def test_the_tokenizer_is_marians(imported):
    from transformers import MarianTokenizer

    folder, _, translator, _ = imported
    theirs = MarianTokenizer.from_pretrained(folder)
    assert theirs(SENTENCES)["input_ids"] == translator.encode_sources(SENTENCES)
    ids = theirs(text_target=SENTENCES[:5])["input_ids"]
    expected = theirs.batch_decode(ids, skip_special_tokens=True)
    assert translator.tokenizer.decode_batch(ids) == expected


def test_logits_match(imported):
    _, _, translator, model = imported
    tokenizer = translator.tokenizer
    sources = translator.encode_sources(SENTENCES)
    targets = [[tokenizer.start_id, *t] for t in our_tokens(translator, sources, 1)]
    source = pad_batch(sources, pad_id=tokenizer.pad_id)
    target = pad_batch(targets, pad_id=tokenizer.end_id)  # the start is the pad: pad with </s>
    ours = our_logits(translator.model, source, target, tokenizer.pad_id)
    theirs = hf_logits(model, source, target, tokenizer.pad_id)
    assert np.abs(ours - theirs).max() < 1e-4


@pytest.mark.parametrize("beam_size", [1, 5])
def test_our_search_returns_generates_tokens(imported, beam_size):
    _, _, translator, model = imported
    sources = translator.encode_sources(SENTENCES)
    ours = our_tokens(translator, sources, beam_size)
    theirs = hf_tokens(model, sources, translator.tokenizer, beam_size, MAX_TOKENS)
    assert ours == theirs


def test_tying_follows_what_transformers_runs(imported):
    import torch

    _, run, _, model = imported
    config = json.loads((run / "config.json").read_text())
    source = model.model.encoder.embed_tokens.weight
    target = model.model.decoder.embed_tokens.weight
    shared = source.shape == target.shape and torch.equal(source, target)
    tied = torch.equal(model.lm_head.weight, target) and not model.final_logits_bias.any()
    assert (config["share_embeddings"], config["tie_embeddings"]) == (shared, tied)
    if model.config.tie_word_embeddings and not model.final_logits_bias.any():
        assert shared and tied  # a tied checkpoint stays tied
    assert config["layer_norm_epsilon"] == 1e-5


@pytest.mark.parametrize("imported", ["swish, shared, tied"], indirect=True)
def test_every_command_uses_the_run(imported, tmp_path):
    _, run, translator, _ = imported
    (tmp_path / "src.txt").write_text("\n".join(SENTENCES[:4]) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(SENTENCES[:4]) + "\n")
    base = ["--run", str(run), "--verbose", "0"]
    assert main(["translate", *base, "--beam", "3", SENTENCES[0]]) == 0
    assert (
        main(
            [
                "evaluate",
                *base,
                "--src",
                str(tmp_path / "src.txt"),
                "--ref",
                str(tmp_path / "ref.txt"),
            ]
        )
        == 0
    )
    png = tmp_path / "cross.png"
    assert main(["attention", *base, SENTENCES[0], "--mean", "-o", str(png)]) == 0
    assert png.stat().st_size > 0
    onnx = tmp_path / "onnx"
    assert main(["export", *base, "-o", str(onnx)]) == 0
    keras_out = translator.translate(SENTENCES[:4])
    onnx_out = Translator.from_run(onnx, MAX_TOKENS, engine="onnx").translate(SENTENCES[:4])
    assert onnx_out == keras_out


@pytest.mark.parametrize(
    "setting, value",
    [("decoder_layers", 3), ("normalize_before", True), ("activation_function", "tanh")],
)
def test_an_option_we_do_not_support_is_refused(tmp_path, capsys, setting, value):
    folder = make_marian(tmp_path / "marian")
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, setting: value}))
    assert main(["import", "hf", str(folder), "--run", str(tmp_path / "run")]) == 2
    assert setting in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    return make_marian(tmp_path_factory.mktemp("marian") / "marian")


def _truncate(path, size=5000):
    path.write_bytes(path.read_bytes()[:size])


def _only_pickled_weights(folder):
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(np.random.default_rng(0).bytes(4096))


def _edit_config(folder, **changes):
    hf = json.loads((folder / "config.json").read_text())
    hf.update(changes)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in hf.items() if v is not None}))


DAMAGES = {
    "truncated safetensors": (lambda f: _truncate(f / "model.safetensors"), "model.safetensors"),
    "pytorch_model.bin of random bytes": (_only_pickled_weights, "pytorch_model.bin"),
    "source.spm not a SentencePiece model": (
        lambda f: (f / "source.spm").write_text("garbage"),
        "source.spm",
    ),
    "vocab.json not JSON": (lambda f: (f / "vocab.json").write_text("{bad"), "vocab.json"),
    "config.json not JSON": (lambda f: (f / "config.json").write_text("{bad"), "config.json"),
    "config.json without encoder_layers": (
        lambda f: _edit_config(f, encoder_layers=None),
        "encoder_layers",
    ),
    "weights of more layers than the config's": (
        lambda f: _edit_config(f, encoder_layers=1, decoder_layers=1),
        "model.decoder.layers.1.",
    ),
    "no target.spm": (lambda f: (f / "target.spm").unlink(), "target.spm"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_folder_is_refused_by_name_and_writes_no_run(
    marian_folder, tmp_path, capsys, damage
):
    import shutil

    folder = shutil.copytree(marian_folder, tmp_path / "marian")
    spoil, named = DAMAGES[damage]
    spoil(folder)
    assert main(["import", "hf", str(folder), "--run", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err, err
    assert not (tmp_path / "run").exists()

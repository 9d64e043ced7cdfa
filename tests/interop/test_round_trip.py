"""Ours -> transformers -> ours: the same weights and the same translations."""

import json

import numpy as np

from mintransformer.cli import main
from mintransformer.inference.translator import Translator
from mintransformer.runs import checkpoints
from tests.interop.test_hf_export import SENTENCES


def test_round_trip_keeps_weights_and_translations(trained_run, tmp_path):
    hf, back = tmp_path / "hf", tmp_path / "back"
    assert main(["export", "--format", "hf", "--run", str(trained_run), "-o", str(hf)]) == 0
    assert main(["import", "hf", str(hf), "--run", str(back)]) == 0
    before, _ = checkpoints.read_arrays(trained_run / "model.npz")
    after, _ = checkpoints.read_arrays(back / "model.npz")
    assert len(before) == len(after)
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    original = json.loads((trained_run / "config.json").read_text())
    imported = json.loads((back / "config.json").read_text())
    model_settings = ("num_layers", "d_model", "num_heads", "dff", "norm_first", "max_length")
    model_settings += ("tie_embeddings", "share_embeddings", "activation")
    assert {k: imported[k] for k in model_settings} == {k: original[k] for k in model_settings}
    assert (back / "tokenizer.json").is_file()
    for beam_size in (1, 5):
        ours = Translator.from_run(trained_run).translate(SENTENCES, beam_size=beam_size)
        again = Translator.from_run(back).translate(SENTENCES, beam_size=beam_size)
        assert again == ours

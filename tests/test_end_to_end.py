"""Bounded end-to-end runs: the demo recipe, real Multi30k data, SIGKILL then --resume.

Marked slow (a few minutes in all on two cores); CI runs them on the default backend.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from mintransformer.data.corpora import load_corpus, numbers_spec, parallel_spec
from mintransformer.run import RunDirectory, TranslationConfig
from mintransformer.training import checkpoints
from mintransformer.training.translation import build_model, train_translation
from mintransformer.translation import Translator, score
from tests.conftest import train_run

pytestmark = pytest.mark.slow


DEMO_SPEC = numbers_spec(num_train=12000, num_val=200, num_test=300)


@pytest.fixture(scope="module")
def demo_translator(tmp_path_factory):
    """The demo recipe (`PRESETS["numbers"]`) on a smaller corpus, trained once."""
    from mintransformer.cli import PRESETS

    settings = {**PRESETS["numbers"], "epochs": 5, "warmup_steps": 100}
    return train_run(tmp_path_factory.mktemp("demo") / "run", DEMO_SPEC, **settings)[0]


def test_demo_recipe_on_a_smaller_bounded_run(demo_translator):
    test = load_corpus(DEMO_SPEC)["test"]
    hypotheses = demo_translator.translate([s for s, _ in test])
    exact = np.mean([h == t for h, (_, t) in zip(hypotheses, test, strict=True)])
    assert exact >= EXACT_MATCH_FLOOR, f"exact match {exact:.3f}"


def test_cross_attention_of_the_demo_model_aligns_words(demo_translator):
    from mintransformer import viz
    from mintransformer.data.numbers import FRENCH_TO_ENGLISH

    test = load_corpus(DEMO_SPEC)["test"][:100]
    maps = [viz.attention_maps(demo_translator, source) for source, _ in test]
    last_layer = demo_translator.model.decoder.num_layers
    rate = viz.alignment_rate(maps, FRENCH_TO_ENGLISH, last_layer)
    assert rate >= ALIGNMENT_FLOOR, f"alignment {rate:.3f}"


ALIGNMENT_FLOOR = 0.75
EXACT_MATCH_FLOOR = 0.9


def test_small_model_on_real_multi30k_beats_an_untrained_one(tmp_path, shared_data_dir):
    data = shared_data_dir / "multi30k"
    spec = parallel_spec(str(data / "train"), str(data / "val"), "en", "fr")
    corpus = load_corpus(spec)
    small = {"train": corpus["train"][:10000], "val": corpus["val"][:200]}
    config = TranslationConfig(
        data=spec,
        num_layers=2,
        d_model=128,
        num_heads=4,
        dff=512,
        dropout_rate=0.1,
        vocab_size=2000,
        epochs=6,
        max_tokens=3000,
        warmup_steps=150,
        peak_learning_rate=2e-3,
        max_length=64,
        average_last=1,
    )
    run = RunDirectory.create(tmp_path / "run", config)
    model, tokenizer = train_translation(run, small, verbose=0)
    sources = [s for s, _ in corpus["val"][200:400]]
    references = [t for _, t in corpus["val"][200:400]]
    trained = score(Translator(model, tokenizer).translate(sources), references)
    untrained_model = build_model(config, tokenizer.vocab_size)
    untrained = score(Translator(untrained_model, tokenizer).translate(sources), references)
    assert untrained.bleu < 1.0
    assert trained.bleu >= BLEU_FLOOR, str(trained)


BLEU_FLOOR = 10.0

TINY_CLI = [
    "--layers",
    "1",
    "--d-model",
    "32",
    "--heads",
    "2",
    "--dff",
    "64",
    "--vocab-size",
    "200",
    "--max-tokens",
    "1500",
    "--warmup",
    "20",
    "--max-length",
    "48",
    "--average-last",
    "2",
    "--num-train",
    "3000",
    "--epochs",
    "4",
    "--report",
    "0",
    "--verbose",
    "0",
]


def cli(*args):
    return [sys.executable, "-m", "mintransformer.cli", "train", "translation", *args]


def test_resume_after_sigkill_reproduces_the_uninterrupted_run(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    subprocess.run(cli("--run", str(tmp_path / "a"), *TINY_CLI), check=True, env=env)

    victim = RunDirectory(tmp_path / "b")
    process = subprocess.Popen(cli("--run", str(victim.path), *TINY_CLI), env=env)
    deadline = time.monotonic() + 300
    while not victim.checkpoint_path(2).exists():
        assert process.poll() is None, "training ended before it could be killed"
        assert time.monotonic() < deadline, "no checkpoint after 300 s"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not victim.weights_path.exists()
    for checkpoint in victim.checkpoints():  # every file on disk is whole
        checkpoints.read_arrays(checkpoint)

    subprocess.run(cli("--run", str(victim.path), "--resume"), check=True, env=env)
    expected, _ = checkpoints.read_arrays(RunDirectory(tmp_path / "a").weights_path)
    resumed, _ = checkpoints.read_arrays(victim.weights_path)
    for got, want in zip(resumed, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

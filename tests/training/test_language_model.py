"""Language-model runs on a small generated text: learning, run directory, resume, CLI."""

import numpy as np
import pytest

from mintransformer import cli
from mintransformer.config import LanguageModelConfig, TranslationConfig
from mintransformer.data.text import read_text
from mintransformer.data.windows import WindowBatches
from mintransformer.runs.directory import RunDirectory
from mintransformer.runs.loading import build_model, load_trained
from mintransformer.training import language_model
from mintransformer.training.language_model import compile_model, split_windows
from tests.conftest import interrupt_after_epoch, to_numpy, train_in

SUBJECTS = ["the cat", "the dog", "a bird", "my friend", "the old man"]
VERBS = ["sees", "likes", "chases", "finds"]
OBJECTS = ["the ball", "a red apple", "the small house", "a blue car"]
TINY = dict(
    num_layers=1,
    d_model=32,
    num_heads=2,
    dff=64,
    dropout_rate=0.0,
    max_length=16,
    vocab_size=100,
    max_tokens=256,
    warmup_steps=20,
    peak_learning_rate=1e-2,
)
TINY_FLAGS = {
    "--layers": 1,
    "--d-model": 32,
    "--heads": 2,
    "--dff": 64,
    "--dropout": 0,
    "--max-length": 16,
    "--vocab-size": 100,
    "--max-tokens": 256,
    "--warmup": 20,
    "--lr": 1e-2,
    "--epochs": 6,
    "--verbose": 0,
}


def write_grammar(path, lines=400, seed=0):
    """Sentences "SUBJECT VERB OBJECT ." with every choice uniform: about 0.55 nats a token."""
    rng = np.random.default_rng(seed)
    text = "".join(
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} .\n"
        for _ in range(lines)
    )
    path.write_text(text)
    return path


def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    return write_grammar(tmp_path_factory.mktemp("text") / "grammar.txt")


@pytest.fixture(scope="module")
def trained_lm(tmp_path_factory, text_file):
    """A run trained through the CLI, once for this module."""
    run = tmp_path_factory.mktemp("runs") / "lm"
    flags = [str(part) for flag in TINY_FLAGS.items() for part in flag]
    assert cli.main(["train", "lm", "--run", str(run), "--text", str(text_file), *flags]) == 0
    return RunDirectory.open(run)


def validation_loss(model, tokenizer, config):
    _, val = split_windows(tokenizer, read_text(config.text), config)
    compile_model(model, config, steps_per_epoch=1)
    return model.evaluate(WindowBatches(val, 16, shuffle=False), verbose=0)[0]


def test_training_brings_the_validation_loss_far_below_an_untrained_models(trained_lm):
    model, tokenizer, config = load_trained(trained_lm, LanguageModelConfig)
    trained = validation_loss(model, tokenizer, config)
    untrained = validation_loss(build_model(config, tokenizer.vocab_size), tokenizer, config)
    assert trained < 0.5 * untrained, (trained, untrained)


def test_the_run_directory_holds_a_language_model_run(trained_lm):
    config = trained_lm.config()
    assert isinstance(config, LanguageModelConfig) and config.epochs == 6
    assert '"task": "language_model"' in trained_lm.config_path.read_text()
    assert len(trained_lm.log_path.read_text().strip().splitlines()) == 7  # header + 6 epochs
    with pytest.raises(ValueError, match="'language_model' run, not a 'translation' run"):
        trained_lm.config(TranslationConfig)


def test_generate_prints_continued_text(capsys, trained_lm):
    run = trained_lm.path
    code, out, _ = run_cli(capsys, "generate", "--run", run, "the cat", "--max-new-tokens", 12)
    assert code == 0
    assert out.startswith("the cat ") and len(out.split()) > 4
    greedy = ["generate", "--run", run, "a bird", "--temperature", 0, "--max-new-tokens", 6]
    code, out, _ = run_cli(capsys, *greedy)
    assert code == 0 and out.split()[2] in VERBS  # the grammar's next word, a verb
    assert run_cli(capsys, *greedy)[1] == out


def test_an_empty_text_file_is_refused_naming_it(capsys, tmp_path):
    for content in ("", "\n  \n\n"):
        (tmp_path / "empty.txt").write_text(content)
        argv = ["train", "lm", "--run", tmp_path / "run", "--text", tmp_path / "empty.txt"]
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and "empty.txt" in err and "no text" in err
        assert not (tmp_path / "run").exists()


def test_bad_lm_arguments_are_clear_errors(capsys, tmp_path, trained_lm):
    code, _, err = run_cli(capsys, "train", "lm", "--run", tmp_path / "run")
    assert code == 2 and "--text" in err
    code, _, err = run_cli(capsys, "translate", "--run", trained_lm.path, "hello")
    assert code == 2 and "language_model" in err
    code, _, err = run_cli(
        capsys, "generate", "--run", trained_lm.path, "x", "--max-new-tokens", 99
    )
    assert code == 2 and "max_length=16" in err
    (tmp_path / "short.txt").write_text("a b\n")
    run = RunDirectory.create(tmp_path / "short", short_config(tmp_path / "short.txt"))
    with pytest.raises(ValueError, match="short.txt"):
        train_in(language_model, run, read_text(tmp_path / "short.txt"))


def short_config(text, **overrides):
    return LanguageModelConfig(text=str(text), **{**TINY, "epochs": 2, **overrides})


def test_resume_after_an_interruption_reproduces_the_uninterrupted_run(tmp_path, text_file):
    lines = read_text(text_file)
    config = short_config(text_file, dropout_rate=0.2, average_last=2)
    uninterrupted, _ = train_in(language_model, RunDirectory.create(tmp_path / "a", config), lines)
    run = RunDirectory.create(tmp_path / "b", config)
    with interrupt_after_epoch(0):
        train_in(language_model, run, lines)
    resumed, _ = train_in(language_model, run, lines, resume=True)
    for a, b in zip(resumed.weights, uninterrupted.weights, strict=True):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-5, atol=1e-6)

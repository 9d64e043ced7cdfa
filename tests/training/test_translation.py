"""Training runs end to end on small generated data: run directory, resume, averaging."""

import numpy as np
import pytest

from mintransformer import checkpoints
from mintransformer.config import TranslationConfig
from mintransformer.data.corpora import load_corpus, numbers_spec
from mintransformer.loading import load_trained
from mintransformer.run import RunDirectory
from mintransformer.training import loop
from mintransformer.training.translation import train_translation
from tests.conftest import to_numpy

TINY = dict(
    num_layers=1,
    d_model=32,
    num_heads=2,
    dff=64,
    dropout_rate=0.1,
    vocab_size=200,
    max_tokens=1500,
    warmup_steps=20,
    peak_learning_rate=3e-3,
    max_length=48,
    average_last=2,
)


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(numbers_spec(num_train=1500, num_val=100, num_test=100))


def start(path, corpus_spec=None, **overrides):
    config = TranslationConfig(
        data=corpus_spec or numbers_spec(1500, 100, 100), **{**TINY, **overrides}
    )
    return RunDirectory.create(path, config)


class InterruptedRunError(Exception):
    pass


def weights_of(model):
    return [to_numpy(w) for w in model.weights]


def test_a_run_writes_its_directory_and_reloads(tmp_path, corpus):
    run = start(tmp_path / "run", epochs=2)
    model, _ = train_translation(run, corpus, verbose=0)
    for path in (run.config_path, run.tokenizer_path, run.weights_path, run.log_path):
        assert path.is_file(), path
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1, 2]
    assert len(run.log_path.read_text().strip().splitlines()) == 3  # header + 2 epochs
    loaded, tokenizer, config = load_trained(run.path, TranslationConfig)
    assert config == run.config()
    for a, b in zip(weights_of(loaded), weights_of(model), strict=True):
        np.testing.assert_array_equal(a, b)


def test_final_weights_are_the_average_of_the_last_checkpoints(tmp_path, corpus):
    run = start(tmp_path / "run", epochs=3, average_last=2)
    model, _ = train_translation(run, corpus, verbose=0)
    count = len(model.weights)
    expected = checkpoints.average_checkpoints(run.checkpoints()[-2:])[:count]
    for got, want in zip(weights_of(model), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_resume_after_an_interruption_reproduces_the_uninterrupted_run(
    tmp_path, corpus, monkeypatch
):
    uninterrupted, _ = train_translation(start(tmp_path / "a", epochs=3), corpus, verbose=0)

    run = start(tmp_path / "b", epochs=3)

    original = loop.EpochCheckpoint.on_epoch_end

    def stop_after_second_epoch(self, epoch, logs=None):
        original(self, epoch, logs)
        if epoch == 1:
            raise InterruptedRunError

    monkeypatch.setattr(loop.EpochCheckpoint, "on_epoch_end", stop_after_second_epoch)
    with pytest.raises(InterruptedRunError):
        train_translation(run, corpus, verbose=0)
    monkeypatch.setattr(loop.EpochCheckpoint, "on_epoch_end", original)
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1, 2]
    resumed, _ = train_translation(run, corpus, resume=True, verbose=0)
    for a, b in zip(weights_of(resumed), weights_of(uninterrupted), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_an_existing_run_is_never_overwritten_silently(tmp_path):
    start(tmp_path / "run")
    with pytest.raises(FileExistsError, match="--resume"):
        start(tmp_path / "run")


def test_incomplete_and_corrupt_run_directories_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        RunDirectory.open(tmp_path / "nothing")
    run = start(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        RunDirectory.open(run.path)
    run.config_path.write_text("{ not json")
    with pytest.raises(ValueError, match="config.json"):
        run.config()

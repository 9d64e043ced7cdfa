"""Training runs end to end on small generated data: run directory, resume, averaging."""

import csv

import numpy as np
import pytest

from mintransformer import cli
from mintransformer.config import TranslationConfig
from mintransformer.data.corpora import load_corpus, numbers_spec
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory
from mintransformer.runs.loading import load_trained
from mintransformer.training import translation
from mintransformer.training.callbacks import TrainingClock
from tests.conftest import interrupt_after_epoch, to_numpy, train_in

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


def weights_of(model):
    return [to_numpy(w) for w in model.weights]


def test_a_run_writes_its_directory_and_reloads(tmp_path, corpus):
    run = start(tmp_path / "run", epochs=2)
    model, _ = train_in(translation, run, corpus)
    for path in (run.config_path, run.tokenizer_path, run.weights_path, run.log_path):
        assert path.is_file(), path
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1, 2]
    assert len(run.log_path.read_text().strip().splitlines()) == 3  # header + 2 epochs
    loaded, tokenizer, config = load_trained(run.path, TranslationConfig)
    assert config == run.config()
    for a, b in zip(weights_of(loaded), weights_of(model), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_run_ends_by_naming_the_val_curve_s_lowest_epoch(tmp_path, corpus, capsys):
    from mintransformer.training.loop import val_curve

    run = start(tmp_path / "run", epochs=2)
    train_in(translation, run, corpus)
    losses = [row["val_loss"] for row in run.log()]
    with run.log_path.open(newline="") as file:  # the log, read independently
        assert losses == [float(row["val_loss"]) for row in csv.DictReader(file)]
    best = int(np.argmin(losses))
    printed = capsys.readouterr().out
    assert f"val loss: lowest {losses[best]:.4f} after epoch {best + 1} of 2" in printed
    rows = [{"val_loss": 2.0}, {"val_loss": 1.5}, {"val_loss": 1.5}, {"val_loss": 1.7}]
    assert val_curve(rows).startswith("val loss: lowest 1.5000 after epoch 2 of 4, last 1.7000")
    assert val_curve([{"loss": 2.0}]) is None and val_curve([]) is None


def test_training_with_a_beam_chooses_alpha_on_val_before_its_report(trained_run, capsys):
    model, tokenizer, config = load_trained(trained_run.path, TranslationConfig)
    splits = load_corpus(config.data)
    printed = translation.held_out_report(20, beam_size=2)(model, tokenizer, config, splits, 0)
    choice, report = printed.split("\n", 1)
    assert choice.startswith("alpha ") and "chosen on val (100 sentences, beam 2" in choice
    assert report.startswith("held-out (20 sentences)")
    assert translation.held_out_report(0, beam_size=1) is None


def test_final_weights_are_the_average_of_the_last_checkpoints(tmp_path, corpus):
    run = start(tmp_path / "run", epochs=3, average_last=2)
    model, _ = train_in(translation, run, corpus)
    count = len(model.weights)
    expected = checkpoints.average_checkpoints(run.checkpoints()[-2:])[:count]
    for got, want in zip(weights_of(model), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_resume_after_an_interruption_reproduces_the_uninterrupted_run(tmp_path, corpus):
    uninterrupted, _ = train_in(translation, start(tmp_path / "a", epochs=3), corpus)

    run = start(tmp_path / "b", epochs=3)
    with interrupt_after_epoch(1):
        train_in(translation, run, corpus)
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1, 2]
    resumed, _ = train_in(translation, run, corpus, resume=True)
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


def test_each_epoch_logs_real_tokens_per_second_padding_and_training_time(tmp_path, corpus):
    run = start(tmp_path / "run", epochs=2)
    train_in(translation, run, corpus)
    rows = list(csv.DictReader(run.log_path.read_text().splitlines()))
    assert len(rows) == 2
    for row in rows:
        assert float(row["tokens_per_s"]) > 0
        assert 0 <= float(row["padding"]) < 0.5
    first, second = (float(row["train_seconds"]) for row in rows)
    assert 0 < first < second
    meta = checkpoints.read_meta(run.checkpoint_path(2))
    assert meta["train_seconds"] == pytest.approx(second)


def test_a_time_budget_stops_training_early_and_still_averages(tmp_path, corpus, capsys):
    run = start(tmp_path / "run", epochs=50, minutes=1e-6)
    model, _ = train_in(translation, run, corpus)
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1]  # stopped in epoch 1
    assert run.weights_path.is_file()
    assert len(run.log_path.read_text().strip().splitlines()) == 2  # header + 1 epoch
    # Resuming a run whose budget is spent trains nothing and keeps its result.
    before = weights_of(model)
    resumed, _ = train_in(translation, run, corpus, resume=True)
    assert "nothing left to train" in capsys.readouterr().out
    for a, b in zip(weights_of(resumed), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_resumed_run_counts_the_training_time_already_spent(tmp_path, corpus):
    run = start(tmp_path / "run", epochs=2)
    with interrupt_after_epoch(0):
        train_in(translation, run, corpus)
    spent = checkpoints.read_meta(run.checkpoint_path(1))["train_seconds"]
    train_in(translation, run, corpus, resume=True)
    assert checkpoints.read_meta(run.checkpoint_path(2))["train_seconds"] > spent


class _Stream:
    def token_counts(self, epoch, batch):
        return 30, 40


class _Optimizer:
    iterations = np.int64(0)


class _Model:
    stop_training = False


@pytest.mark.parametrize(("spent", "stops"), [(0.0, False), (60.0, True)])
def test_the_training_clock_stops_once_the_budget_is_spent(spent, stops):
    clock = TrainingClock(_Stream(), budget_seconds=60.0, spent_seconds=spent)
    clock.set_model(_Model())
    clock.on_epoch_begin(0)
    logs = {}
    clock.on_train_batch_end(0, logs)
    assert clock.model.stop_training is stops
    assert logs["padding"] == pytest.approx(0.25)
    assert logs["tokens_per_s"] > 0


@pytest.mark.parametrize(("left", "stops"), [(0.5, True), (1.5, False)])
def test_an_epoch_ending_with_less_than_a_step_of_budget_left_is_the_last(left, stops):
    model = _Model()
    model.optimizer = _Optimizer()
    clock = TrainingClock(_Stream(), budget_seconds=10.0)
    clock.set_model(model)
    clock.on_train_begin()
    clock.on_epoch_begin(0)
    model.optimizer.iterations = np.int64(10)  # ten steps of about a second each
    clock.epoch_seconds = 10.0 - left
    clock.on_epoch_end(0, {})
    assert model.stop_training is stops


@pytest.mark.parametrize("empty", ["--train", "--val"])
def test_an_empty_split_is_refused_before_the_run_folder_is_written(tmp_path, capsys, empty):
    for prefix, lines in (("good", "one\ntwo\nthree\n"), ("blank", "\n\n")):
        for lang in ("en", "fr"):
            (tmp_path / f"{prefix}.{lang}").write_text(lines, encoding="utf-8")
    files = {"--train": tmp_path / "good", "--val": tmp_path / "good", empty: tmp_path / "blank"}
    run = tmp_path / "run"
    argv = ["train", "translation", "--run", str(run), "--src", "en", "--tgt", "fr"]
    argv += [arg for flag, prefix in files.items() for arg in (flag, str(prefix))]
    argv += ["--num-layers", "1", "--d-model", "16", "--heads", "2", "--dff", "32"]
    assert cli.main([*argv, "--epochs", "1", "--no-bf16", "--verbose", "0"]) == 2
    split = empty.removeprefix("--")
    assert f"error: the {split} split is empty: {tmp_path / 'blank'}.en" in capsys.readouterr().err
    assert not run.exists() or not any(run.iterdir())

"""Training a classifier end to end on a synthetic sentiment task, from the library and the CLI."""

import csv
import json

import numpy as np
import pytest

from mintransformer import cli
from mintransformer.config import ClassificationConfig, flag_overrides
from mintransformer.data.labelled import split_validation
from mintransformer.inference.classifier import Classifier
from mintransformer.runs.directory import RunDirectory
from mintransformer.runs.loading import build_model
from mintransformer.training import classification
from tests.conftest import train_in

NEUTRAL = ["the", "a", "film", "movie", "plot", "actor", "story", "scene", "it", "was", "and"]
POSITIVE = ["great", "wonderful", "superb", "moving"]
NEGATIVE = ["awful", "boring", "dreadful", "clumsy"]
TINY = dict(
    num_layers=1,
    d_model=32,
    num_heads=2,
    dff=64,
    dropout_rate=0.0,
    vocab_size=200,
    max_length=32,
    epochs=6,
    max_tokens=1024,
    warmup_steps=20,
    peak_learning_rate=3e-3,
)


def synthetic_reviews(count: int, seed: int) -> list[tuple[str, str]]:
    """Neutral words with one or two sentiment words; the label is their polarity."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        label = rng.integers(2)
        words = list(rng.choice(NEUTRAL, size=rng.integers(4, 20)))
        for _ in range(rng.integers(1, 3)):
            position = rng.integers(len(words) + 1)
            words.insert(position, rng.choice(POSITIVE if label else NEGATIVE))
        pairs.append((" ".join(words), "pos" if label else "neg"))
    return pairs


def write_csv(path, pairs):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(pairs)


def test_training_learns_what_an_untrained_model_cannot(tmp_path):
    train, val = split_validation(synthetic_reviews(600, seed=0), 0.1, seed=0)
    test = synthetic_reviews(200, seed=1)
    config = ClassificationConfig(labels=["neg", "pos"], **TINY)
    run = RunDirectory.create(tmp_path / "run", config)
    model, tokenizer = train_in(classification, run, {"train": train, "val": val})
    texts = [text for text, _ in test]
    labels = np.array([label == "pos" for _, label in test])

    trained = Classifier.from_model(model, tokenizer, config).probabilities(texts).argmax(-1)
    untrained_model = build_model(config, tokenizer.vocab_size)
    untrained = Classifier.from_model(untrained_model, tokenizer, config)
    untrained_accuracy = (untrained.probabilities(texts).argmax(-1) == labels).mean()
    assert (trained == labels).mean() >= 0.95
    assert untrained_accuracy <= 0.75
    reloaded = Classifier.from_run(run.path).probabilities(texts).argmax(-1)
    np.testing.assert_array_equal(reloaded, trained)


def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def csv_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reviews")
    write_csv(folder / "train.csv", synthetic_reviews(500, seed=2))
    write_csv(folder / "test.csv", synthetic_reviews(100, seed=3))
    return folder


def tiny_flags():
    names = {"num_layers": "layers", "num_heads": "heads", "dropout_rate": "dropout"}
    names |= {"warmup_steps": "warmup", "peak_learning_rate": "lr"}
    flags = []
    for field, value in TINY.items():
        flags += [f"--{names.get(field, field).replace('_', '-')}", value]
    return flags


def test_cli_trains_classifies_and_evaluates(capsys, monkeypatch, tmp_path, csv_data):
    run = tmp_path / "run"
    code, out, err = run_cli(
        capsys,
        "train",
        "classification",
        "--run",
        run,
        "--train",
        csv_data / "train.csv",
        "--test",
        csv_data / "test.csv",
        "--verbose",
        0,
        *tiny_flags(),
    )
    assert code == 0, err
    assert "classes ['neg', 'pos']" in out and "test: accuracy" in out

    code, out, _ = run_cli(capsys, "classify", "--run", run, "a superb film", "", "boring plot")
    labels = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and [label for label, _ in labels][0::2] == ["pos", "neg"]
    assert len(labels) == 3 and all(0.0 <= float(p) <= 1.0 for _, p in labels)
    (tmp_path / "in.txt").write_text("a superb film\n\nboring plot\n")
    with open(tmp_path / "in.txt") as stdin:
        monkeypatch.setattr("sys.stdin", stdin)
        _, from_stdin, _ = run_cli(capsys, "classify", "--run", run)
    assert from_stdin == out

    code, out, _ = run_cli(capsys, "evaluate", "--run", run, "--data", csv_data / "test.csv")
    assert code == 0 and float(out.split("%")[0].split()[-1]) >= 90.0


def test_cli_refuses_bad_labels_and_keeps_no_run(capsys, tmp_path, csv_data):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok", "label": 1}\n{"text": "hm", "label": [1]}\n')
    code, _, err = run_cli(
        capsys, "train", "classification", "--run", tmp_path / "r", "--train", bad
    )
    assert code == 2 and "bad.jsonl, line 2: label" in err
    assert not (tmp_path / "r").exists()


def test_configs_written_before_bigrams_and_schedules_still_load():
    config = ClassificationConfig(labels=["neg", "pos"], **TINY)
    old = json.loads(config.to_json())
    for key in ("ngram_buckets", "ngram_dropout", "schedule"):
        del old[key]
    loaded = ClassificationConfig.from_json(json.dumps(old))
    assert loaded == config
    assert (loaded.ngram_buckets, loaded.ngram_dropout, loaded.schedule) == (0, 0.0, "noam")


def test_an_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="`schedule` must be one of"):
        ClassificationConfig(schedule="cosine")
    text = ClassificationConfig().to_json().replace('"noam"', '"cosine"')
    with pytest.raises(ValueError, match="schedule"):
        ClassificationConfig.from_json(text)


def test_bigram_and_schedule_flags_reach_the_config_and_the_model():
    argv = ["train", "classification", "--run", "r", "--ngram-buckets", "64"]
    args = cli.build_parser().parse_args([*argv, "--ngram-dropout", "0.3", "--schedule", "linear"])
    overrides = flag_overrides(args, ClassificationConfig)
    assert overrides == {"ngram_buckets": 64, "ngram_dropout": 0.3, "schedule": "linear"}
    config = ClassificationConfig(labels=["neg", "pos"], **{**TINY, **overrides})
    embedding = build_model(config, vocab_size=200).encoder.embedding
    assert (embedding.ngram_buckets, embedding.ngram_dropout) == (64, 0.3)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([*argv, "--schedule", "cosine"])


def test_the_attention_dropout_flag_reaches_the_config_and_the_model():
    argv = ["train", "classification", "--run", "r", "--attention-dropout-rate", "0"]
    overrides = flag_overrides(cli.build_parser().parse_args(argv), ClassificationConfig)
    assert overrides == {"attention_dropout_rate": 0.0}
    config = ClassificationConfig(
        labels=["neg", "pos"], **{**TINY, "dropout_rate": 0.2, **overrides}
    )
    block = build_model(config, vocab_size=200).encoder.blocks[0]
    assert block.self_attention.dropout_rate == 0.0
    assert block.ffn_dropout.rate == 0.2
    older = json.loads(config.to_json())
    del older["attention_dropout_rate"]  # a run saved before the setting existed
    assert ClassificationConfig.from_json(json.dumps(older)).attention_dropout_rate is None


@pytest.mark.parametrize("split", ["--val", "--test"])
def test_cli_refuses_an_unknown_label_before_training(capsys, tmp_path, csv_data, split):
    typo = tmp_path / "typo.jsonl"
    typo.write_text('{"text": "great", "label": "Pos"}\n{"text": "awful", "label": "neg"}\n')
    argv = ["train", "classification", "--run", tmp_path / "r", "--train", csv_data / "train.csv"]
    code, _, err = run_cli(capsys, *argv, split, typo, *tiny_flags())
    assert code == 2 and "typo.jsonl has labels the model does not know: ['Pos']" in err
    assert not (tmp_path / "r").exists()

"""The command line: arguments to library calls, clear errors, nothing lost."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mintransformer import cli
from tests.conftest import file_contents


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_translate_arguments_file_and_stdin(capsys, monkeypatch, tmp_path, trained_run):
    code, out, _ = run_cli(capsys, "translate", "--run", str(trained_run.path), "five", "", "nine")
    assert code == 0
    lines = out.split("\n")[:3]
    assert lines[1] == "" and lines[0] and lines[2]
    (tmp_path / "in.txt").write_text("five\n\nnine\n")
    code, from_file, _ = run_cli(
        capsys, "translate", "--run", str(trained_run.path), "--input", str(tmp_path / "in.txt")
    )
    assert from_file == out
    with open(tmp_path / "in.txt") as stdin:
        monkeypatch.setattr("sys.stdin", stdin)
        code, from_stdin, _ = run_cli(capsys, "translate", "--run", str(trained_run.path))
    assert from_stdin == out


def test_missing_run_directory_is_a_clear_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "translate", "--run", str(tmp_path / "nope"), "hello")
    assert code == 2 and "run directory not found" in err


def test_corrupt_run_directory_is_a_clear_error(capsys, tmp_path, trained_run):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "model.npz"):
        (broken / name).write_bytes((trained_run.path / name).read_bytes())
    (broken / "model.npz").write_bytes(b"garbage")
    code, _, err = run_cli(capsys, "translate", "--run", str(broken), "five")
    assert code == 2 and "model.npz" in err and "corrupt" in err


def test_training_into_an_existing_run_is_refused_and_keeps_it(capsys, trained_run):
    before = trained_run.weights_path.read_bytes()
    code, _, err = run_cli(capsys, "train", "translation", "--run", str(trained_run.path))
    assert code == 2 and "--resume" in err
    assert trained_run.weights_path.read_bytes() == before


def test_mismatched_parallel_files_are_refused(capsys, tmp_path):
    (tmp_path / "c.en").write_text("a\nb\n")
    (tmp_path / "c.fr").write_text("a\n")
    code, _, err = run_cli(
        capsys,
        "train",
        "translation",
        "--run",
        str(tmp_path / "run"),
        "--train",
        str(tmp_path / "c"),
        "--val",
        str(tmp_path / "c"),
        "--src",
        "en",
        "--tgt",
        "fr",
    )
    assert code == 2 and "c.en" in err and "c.fr" in err
    assert not (tmp_path / "run").exists()


def test_evaluate_reports_scores(capsys, tmp_path, trained_run):
    (tmp_path / "s.txt").write_text("five\nnine\n")
    (tmp_path / "r.txt").write_text("cinq\nneuf\n")
    code, out, _ = run_cli(
        capsys,
        "evaluate",
        "--run",
        str(trained_run.path),
        "--src",
        str(tmp_path / "s.txt"),
        "--ref",
        str(tmp_path / "r.txt"),
        "--output",
        str(tmp_path / "h.txt"),
    )
    assert code == 0 and "BLEU" in out and "chrF" in out
    assert len((tmp_path / "h.txt").read_text().splitlines()) == 2


def test_evaluate_on_a_split_of_the_runs_own_corpus(capsys, tmp_path, trained_run):
    hypotheses = tmp_path / "h.txt"
    args = ["evaluate", "--run", str(trained_run.path), "--split", "test"]
    code, out, _ = run_cli(capsys, *args, "--output", str(hypotheses))
    assert code == 0 and "BLEU" in out
    assert len(hypotheses.read_text().splitlines()) == 100
    code, _, err = run_cli(capsys, "evaluate", "--run", str(trained_run.path))
    assert code == 2 and "--split" in err


def run_module(*argv):
    """`python -m mintransformer ARGV` in a fresh process: (exit code, stdout, stderr)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL")
    }
    result = subprocess.run(
        [sys.executable, "-m", "mintransformer", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return result.returncode, result.stdout, result.stderr


def test_python_dash_m_runs_the_command_line_on_the_chosen_backend(trained_run):
    code, out, err = run_module("--help")
    assert code == 0 and "translate" in out
    for backend in ("jax", "torch"):
        code, out, err = run_module(
            "translate", "--backend", backend, "--run", trained_run.path, "five", "nine"
        )
        assert code == 0, err
        assert out == translate_in_process(trained_run.path, "five", "nine")
    code, _, err = run_module("translate", "--backend", "theano", "--run", trained_run.path)
    assert code == 2 and "invalid choice: 'theano'" in err


def test_warnings_are_one_line_like_the_errors(trained_run):
    code, out, err = run_module("translate", "--run", trained_run.path, "five", "nine " * 200)
    assert code == 0 and len(out.splitlines()) == 2
    assert err.startswith("warning: 1 input sentence(s) longer than the model's")
    assert err.count("\n") == 1, err


def translate_in_process(run, *texts) -> str:
    from mintransformer.inference.translator import Translator

    return "".join(line + "\n" for line in Translator.from_run(run).translate(list(texts)))


def test_tensorflow_start_up_log_is_silenced_unless_verbose(trained_run):
    args = ["translate", "--backend", "tensorflow", "--run", trained_run.path, "five"]
    code, _, quiet = run_module(*args)
    assert code == 0 and "oneDNN" not in quiet and "I0000" not in quiet
    code, _, verbose = run_module(*args, "--verbose")
    assert code == 0 and "oneDNN" in verbose


def test_a_backend_cannot_change_once_keras_runs(capsys, trained_run):
    import keras

    other = next(b for b in cli.BACKENDS if b != keras.backend.backend())
    code, _, err = run_cli(capsys, "translate", "--backend", other, "--run", str(trained_run.path))
    assert code == 2 and "before Keras starts" in err


def test_importing_the_package_does_not_start_keras():
    code = "import sys, mintransformer, mintransformer.cli; print('keras' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def new_run(path, config=None, *extra_files: str):
    """A run directory holding `config` (default: a translation config) and `extra_files`."""
    from mintransformer.config import TranslationConfig
    from mintransformer.runs.directory import RunDirectory

    run = RunDirectory.create(path, config or TranslationConfig())
    for name in extra_files:
        (run.path / name).parent.mkdir(exist_ok=True)
        (run.path / name).write_bytes(b"weights")
    return run


def demo_run_config(num_train: int = 30_000):
    from mintransformer.config import make_config
    from mintransformer.data.corpora import numbers_spec

    return make_config("translation", "numbers", data=numbers_spec(num_train=num_train))


@pytest.fixture
def demo_trainings(monkeypatch):
    """The `loop.train` calls of the demo, each writing only the run's config."""
    from mintransformer.runs.directory import RunDirectory
    from mintransformer.training import demo

    calls = []

    def write_config(task, path, config, overwrite, verbose):
        calls.append((Path(path), overwrite))
        RunDirectory.create(path, config, overwrite=overwrite)

    monkeypatch.setattr(demo.loop, "train", write_config)
    return calls


def test_demo_twice_in_its_default_folder_replaces_its_own_run(
    capsys, monkeypatch, tmp_path, demo_trainings
):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert run_cli(capsys, "demo", "--verbose", "0")[0] == 0
    assert [path for path, _ in demo_trainings] == [Path("runs/numbers")] * 2
    (tmp_path / "empty").mkdir()
    new_run(tmp_path / "other-size", demo_run_config(num_train=500))
    # The demos of earlier releases: six epochs, then seven, both of LayerNorm epsilon 1e-6.
    for epochs in (6, 7):
        earlier = dataclasses.replace(demo_run_config(), epochs=epochs, layer_norm_epsilon=1e-6)
        new_run(tmp_path / f"earlier-release-{epochs}", earlier, "model.npz")
    for folder in ("empty", "other-size", "earlier-release-6", "earlier-release-7"):
        assert run_cli(capsys, "demo", "--run", folder, "--verbose", "0")[0] == 0


def test_demo_refuses_any_other_run_and_keeps_it(capsys, tmp_path, demo_trainings):
    from mintransformer.config import ClassificationConfig, make_config

    tuned = demo_run_config()
    tuned.epochs += 1
    runs = {
        "classification": new_run(tmp_path / "c", ClassificationConfig(labels=["a", "b"])),
        "tuned": new_run(tmp_path / "t", tuned, "checkpoints/epoch-0001.npz"),
        "base": new_run(tmp_path / "b", make_config("translation"), "model.npz"),
    }
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    for folder in [run.path for run in runs.values()] + [tmp_path / "notes"]:
        before = file_contents(folder)
        code, _, err = run_cli(capsys, "demo", "--run", str(folder))
        assert code == 2 and str(folder) in err and "--overwrite" in err, err
        assert file_contents(folder) == before
    code, _, err = run_cli(capsys, "demo", "--run", str(runs["classification"].path))
    assert "holds a classification run" in err
    assert demo_trainings == []
    assert run_cli(capsys, "demo", "--run", str(runs["base"].path), "--overwrite")[0] == 0
    assert demo_trainings == [(runs["base"].path, True)]


@pytest.mark.parametrize(
    "flags, named",
    [
        ("--epochs -3", "`--epochs` must be a positive integer, got -3"),
        ("--epochs 0", "`--epochs`"),
        ("--layers 0", "`--num-layers` (`--layers`)"),
        ("--d-model 0", "`--d-model`"),
        ("--heads 3", "divisible by `--num-heads`"),
        ("--dropout 1.5", "`--dropout-rate` (`--dropout`) must be a number in [0, 1)"),
        ("--label-smoothing 2", "`--label-smoothing`"),
        ("--lr nan", "`--peak-learning-rate` (`--lr`) must be a positive finite number"),
        ("--lr -1", "`--peak-learning-rate` (`--lr`)"),
        ("--max-tokens 0", "`--max-tokens`"),
        ("--warmup -5", "`--warmup-steps` (`--warmup`)"),
        ("--max-length 0", "`--max-length`"),
        ("--vocab-size 0", "`--vocab-size`"),
        ("--vocab-size 3", "`--vocab-size` must be at least 5"),
        ("--average-last -1", "`--average-last`"),
        ("--beam 0", "`--beam` must be a positive integer, got 0"),
        ("--report -4", "`--report`"),
        ("--verbose -3", "`--verbose`"),
        ("--num-train 0", "`--num-train`"),
    ],
)
def test_a_bad_training_flag_is_named_before_a_run_is_written(capsys, tmp_path, flags, named):
    run = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", "translation", "--run", str(run), *flags.split())
    assert code == 2 and named in err and err.count("\n") == 1, err
    assert not run.exists()


def test_bad_decoding_flags_are_refused_before_the_run_is_read(capsys, tmp_path):
    for command in ("translate", "evaluate"):
        for alpha in ("nan", "inf"):
            args = [command, "--run", str(tmp_path / "nope"), "--alpha", alpha]
            code, _, err = run_cli(capsys, *args)
            assert code == 2 and "`--alpha` must be a finite number" in err, err
    code, _, err = run_cli(capsys, "demo", "--run", str(tmp_path / "d"), "--beam", "0")
    assert code == 2 and "`--beam`" in err and not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    "command, setting, value, named",
    [
        (["train", "translation", "--resume"], "epochs", "5", "`epochs` must be a positive"),
        (["train", "translation", "--resume"], "data", None, "`data` must be a dict"),
        (["train", "translation", "--resume"], "tie_embeddings", "no", "true or false"),
        (["evaluate", "--split", "test"], "task", ["x"], "unknown task ['x']"),
    ],
)
def test_a_hand_edited_config_is_a_one_line_error_that_changes_nothing(
    capsys, tmp_path, command, setting, value, named
):
    run = new_run(tmp_path / "run", None, "tokenizer.json", "model.npz")
    edited = json.loads(run.config_path.read_text())
    edited[setting] = value
    run.config_path.write_text(json.dumps(edited))
    before = file_contents(run.path)
    code, _, err = run_cli(capsys, *command, "--run", str(run.path))
    assert code == 2 and "config.json" in err and named in err, err
    assert err.startswith("error: ") and err.count("\n") == 1
    after = file_contents(run.path)
    after.pop(".lock", None)
    assert after == before


def test_resume_refuses_the_flags_it_would_ignore(capsys, tmp_path):
    run = new_run(tmp_path / "run")
    before = file_contents(run.path)
    args = ["train", "translation", "--run", str(run.path), "--resume"]
    ignored = ["--epochs", "3", "--lr", "5", "--minutes", "2", "--train", "c", "--no-bf16"]
    code, _, err = run_cli(capsys, *args, *ignored)
    assert code == 2 and "would be ignored: --epochs, --peak-learning-rate, --minutes" in err
    assert "--bf16" in err and "--train" in err, err
    code, _, err = run_cli(capsys, *args, "--num-train", "30000", "--val-fraction=0.02")
    assert code == 2 and "would be ignored: --val-fraction, --num-train" in err, err
    code, _, err = run_cli(capsys, "train", "lm", "--run", str(run.path), "--resume", "--text", "t")
    assert code == 2 and "would be ignored: --text" in err
    assert file_contents(run.path) == before
    used = ["--verbose", "0", "--report", "5", "--beam", "2", "--alpha", "0.8"]
    missing = ["train", "translation", "--run", str(tmp_path / "none"), "--resume"]
    code, _, err = run_cli(capsys, *missing, *used)
    assert code == 2 and "nothing to resume" in err, err


def interrupt(args):
    raise KeyboardInterrupt


def interrupt_inside_a_context_manager(args):
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise AssertionError("Concurrent access?") from None  # what TensorFlow's tracing does


def test_ctrl_c_that_a_library_turns_into_another_error_is_still_an_interrupt(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.setattr(cli, "stream_command", interrupt_inside_a_context_manager)
    code, _, err = run_cli(capsys, "translate", "five", "--run", str(tmp_path / "run"))
    assert (code, err) == (130, "interrupted\n")


@pytest.mark.parametrize("command", ["train_translation_command", "stream_command"])
def test_ctrl_c_is_one_line_and_exit_status_130(capsys, monkeypatch, tmp_path, command):
    monkeypatch.setattr(cli, command, interrupt)
    run = tmp_path / "run"
    argv = ["train", "translation"] if command.startswith("train") else ["translate", "five"]
    code, _, err = run_cli(capsys, *argv, "--run", str(run))
    assert (code, err) == (130, "interrupted\n")
    new_run(run)
    code, _, err = run_cli(capsys, *argv, "--run", str(run))
    if command.startswith("train"):
        resume = f"mintransformer train translation --run {run} --resume"
        assert (code, err) == (130, f"interrupted; continue with `{resume}`\n")
    else:
        assert (code, err) == (130, "interrupted\n")


@pytest.mark.parametrize(
    "flags, named",
    [
        (
            "--val-fraction 2 --test-fraction -1",
            "--val-fraction, --test-fraction would be ignored: the built-in numbers corpus "
            "(no --train or --tsv) reads only --num-train",
        ),
        (
            "--tsv pairs.tsv --src en --num-train 5",
            "--src, --num-train would be ignored: a --tsv file reads only --tsv, "
            "--val-fraction, --test-fraction",
        ),
        (
            "--train c --val v --src en --tgt fr --test-fraction 0.1",
            "--test-fraction would be ignored: parallel files (--train) read only --train, --val",
        ),
        # Written at their default values, abbreviated or as --flag=value: still written.
        ("--val-fraction 0.02", "--val-fraction would be ignored: the built-in numbers"),
        ("--tsv pairs.tsv --num-train=30000", "--num-train would be ignored: a --tsv file"),
        ("--train c --src en --tgt fr --val-frac 0.02", "--val-fraction would be ignored"),
        (
            "--tsv pairs.tsv --val-fraction 1.5",
            "`--val-fraction` must be a number in [0, 1), got 1.5",
        ),
        ("--tsv pairs.tsv --val-fraction 0.5 --test-fraction 0.5", "must be less than 1"),
        ("--mix-ratio 1", "--mix-ratio would be ignored: it sets how much of --mix-tsv"),
        ("--mix-tsv pairs.tsv --mix-ratio -1", "`--mix-ratio` must be a non-negative number"),
        ("--mix-tsv pairs.tsv --mix-ratio nan", "`--mix-ratio` must be a non-negative number"),
    ],
)
def test_data_flags_the_corpus_would_ignore_or_refuse_are_named_before_a_run_is_written(
    capsys, tmp_path, flags, named
):
    run = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", "translation", "--run", str(run), *flags.split())
    assert code == 2 and named in err and err.count("\n") == 1, err
    assert not run.exists()


@pytest.mark.parametrize(
    "flags, named",
    [
        ("--val v.jsonl --val-fraction 0.3", "--val-fraction would be ignored: --val gives"),
        ("--val v.jsonl --val-fraction 0.1", "--val-fraction would be ignored: --val gives"),
        ("--val-fraction 1", "`--val-fraction` must be a number in (0, 1), got 1.0"),
    ],
)
def test_classification_validation_flags_are_checked_before_a_run_is_written(
    capsys, tmp_path, flags, named
):
    run = tmp_path / "run"
    args = ["train", "classification", "--run", str(run), "--train", "t.jsonl", *flags.split()]
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and named in err and err.count("\n") == 1, err
    assert not run.exists()


def test_translate_refuses_texts_given_twice(capsys, tmp_path):
    (tmp_path / "in.txt").write_text("five\n")
    args = ["translate", "--run", str(tmp_path / "nope"), "--input", str(tmp_path / "in.txt")]
    code, _, err = run_cli(capsys, *args, "nine")
    assert code == 2 and "give one or the other" in err, err


def test_a_run_trained_with_a_mixed_in_tsv_evaluates_on_its_held_out_pairs(capsys, tmp_path):
    from tests.data.test_corpora import mixture_files

    spec, tsv, _ = mixture_files(tmp_path)
    run = tmp_path / "run"
    tiny = "--layers 1 --d-model 16 --heads 2 --dff 32 --vocab-size 120 --epochs 2 --report 0"
    tiny += " --max-tokens 200 --warmup 2"
    data = ["--train", spec["train"], "--val", spec["val"], "--test", spec["test"]]
    data += ["--src", "en", "--tgt", "fr", "--mix-tsv", tsv, "--mix-ratio", "2"]
    code, _, err = run_cli(capsys, "train", "translation", "--run", str(run), *data,
                           *tiny.split(), "--verbose", "0")  # fmt: skip
    assert code == 0, err
    config = json.loads((run / "config.json").read_text())
    assert config["data"]["mix"]["path"] == tsv and config["data"]["mix_ratio"] == 2
    for split in ("mix_val", "mix_test"):
        code, out, err = run_cli(capsys, "evaluate", "--run", str(run), "--split", split)
        assert code == 0 and "BLEU" in out, err
    # alpha for the mixed-in test split is chosen on the mixed-in val split
    from mintransformer.data.corpora import load_corpus

    mix_val_sources = {source for source, _ in load_corpus(config["data"])["mix_val"]}
    assert len(mix_val_sources) > 1  # the run's own val has one sentence
    evaluate = ["evaluate", "--run", str(run), "--beam", "2", "--alpha", "val"]
    code, out, err = run_cli(capsys, *evaluate, "--split", "mix_test")
    assert code == 0 and f"chosen on val ({len(mix_val_sources)} sentences" in out, err

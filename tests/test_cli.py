"""The command line: arguments to library calls, clear errors, nothing lost."""

import os
import subprocess
import sys

from mintransformer import cli


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

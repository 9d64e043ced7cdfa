"""The command line: arguments to library calls, clear errors, nothing lost."""

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

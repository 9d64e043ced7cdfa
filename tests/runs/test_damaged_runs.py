"""Damaged or foreign run files: a one-line error naming the file and the remedy, nothing lost."""

import dataclasses
import json
import shutil

import keras
import numpy as np
import pytest

from mintransformer import cli
from mintransformer.config import FORMAT_VERSION, config_from_json
from mintransformer.core.errors import CorruptFileError
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import LOCK, RunDirectory
from mintransformer.runs.loading import build_model

REBUILD = "--resume"  # model.npz is rebuilt from the checkpoints
RETRAIN = "--overwrite"  # config.json and tokenizer.json cannot be rebuilt


def damage_truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def damage_empty(path):
    path.write_bytes(b"")


def damage_foreign(path):
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))


@pytest.fixture
def copied_run(tmp_path, trained_run):
    """A copy of the session's trained run, free to damage."""
    return RunDirectory(shutil.copytree(trained_run.path, tmp_path / "run"))


def translate_error(capsys, run):
    """Runs `translate` on `run`; returns its stderr after checking it failed in one line."""
    code = cli.main(["translate", "--run", str(run.path), "five"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


def snapshot(run):
    """Every file of the run and its bytes (the lock file, which holds a process id, aside)."""
    files = [p for p in run.path.rglob("*") if p.is_file() and p.name != LOCK]
    return {p.relative_to(run.path): p.read_bytes() for p in files}


@pytest.mark.parametrize("damage", [damage_truncate, damage_empty, damage_foreign])
@pytest.mark.parametrize(
    ("name", "remedy"),
    [("model.npz", REBUILD), ("tokenizer.json", RETRAIN), ("config.json", RETRAIN)],
)
def test_a_damaged_run_file_is_a_one_line_error_naming_it_and_the_remedy(
    capsys, copied_run, name, remedy, damage
):
    damage(copied_run.path / name)
    before = snapshot(copied_run)
    err = translate_error(capsys, copied_run)
    assert f"{name} is corrupt" in err and remedy in err
    assert snapshot(copied_run) == before


@pytest.mark.parametrize(
    ("name", "command"),
    [
        ("config.json", ["evaluate", "--split", "test"]),
        ("tokenizer.json", ["train", "translation", "--resume", "--report", "0"]),
    ],
)
def test_other_commands_give_the_remedy_too(capsys, copied_run, name, command):
    damage_truncate(copied_run.path / name)
    before = snapshot(copied_run)
    code = cli.main([*command, "--run", str(copied_run.path), "--verbose", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"{name} is corrupt" in err and RETRAIN in err
    assert snapshot(copied_run) == before


def test_the_suggested_rebuild_restores_the_final_weights(capsys, copied_run, trained_run):
    damage_truncate(copied_run.weights_path)
    err = translate_error(capsys, copied_run)
    command = err.split("`")[1].split()
    assert command[:3] == ["mintransformer", "train", "translation"]
    assert cli.main([*command[1:], "--report", "0", "--verbose", "0"]) == 0
    rebuilt, _ = checkpoints.read_arrays(copied_run.weights_path)
    original, _ = checkpoints.read_arrays(trained_run.weights_path)
    for got, want in zip(rebuilt, original, strict=True):
        np.testing.assert_array_equal(got, want)


def test_weights_of_a_model_of_another_size_are_refused(capsys, copied_run):
    config = copied_run.config()
    other_size = build_model(dataclasses.replace(config, d_model=16, dff=32), vocab_size=300)
    checkpoints.save_variables(copied_run.weights_path, other_size.weights)
    err = translate_error(capsys, copied_run)
    assert "model.npz" in err and "another size" in err


def test_a_config_from_a_newer_format_version_asks_for_an_upgrade(capsys, copied_run):
    values = json.loads(copied_run.config_path.read_text())
    assert values["format_version"] == FORMAT_VERSION
    values["format_version"] = FORMAT_VERSION + 1
    copied_run.config_path.write_text(json.dumps(values))
    err = translate_error(capsys, copied_run)
    assert "config.json has format version 2" in err and "upgrade mintransformer" in err


def test_a_config_with_a_bad_value_names_the_file(capsys, copied_run):
    values = json.loads(copied_run.config_path.read_text())
    values["num_layers"] = "two"
    copied_run.config_path.write_text(json.dumps(values))
    err = translate_error(capsys, copied_run)
    assert "config.json: `num_layers` must be a positive integer" in err


def test_configs_written_before_format_versions_still_load(copied_run):
    values = json.loads(copied_run.config_path.read_text())
    del values["format_version"]
    assert config_from_json(json.dumps(values)) == copied_run.config()


@pytest.mark.parametrize("damage", [damage_truncate, damage_empty, damage_foreign])
def test_a_damaged_checkpoint_is_a_corrupt_file_error(tmp_path, damage):
    path = tmp_path / "epoch-0001.npz"
    checkpoints.save_variables(path, [keras.Variable(np.ones((3, 4), "float32"))], {"a": 1})
    damage(path)
    for read in (checkpoints.read_arrays, checkpoints.read_meta):
        with pytest.raises(CorruptFileError, match="epoch-0001.npz is corrupt"):
            read(path)

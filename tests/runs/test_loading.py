"""From configs to models, from run directories to trained models; inference needs no training."""

import subprocess
import sys

import numpy as np
import pytest

from mintransformer.config import make_config
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory
from mintransformer.runs.loading import build_model, load_trained


def test_build_model_follows_the_config():
    translation = build_model(make_config("translation", "numbers", num_layers=1), 50)
    assert translation.get_config()["num_layers"] == 1
    assert translation.get_config()["pe_input"] == 64 and translation.built
    classifier = build_model(make_config("classification", labels=["a", "b", "c"]), 50)
    assert classifier.get_config()["num_classes"] == 3
    lm = build_model(make_config("language_model", max_length=12), 50)
    assert lm.max_length == 12 and lm.vocab_size == 50
    with pytest.raises(TypeError, match="not a run config"):
        build_model({"num_layers": 1}, 50)


def test_load_trained_restores_weights_and_refuses_another_kind_of_run(tmp_path):
    config = make_config("language_model", num_layers=1, d_model=16, dff=32, max_length=8)
    run = RunDirectory.create(tmp_path / "run", config)
    tokenizer = Tokenizer.train(["a b c d e f"] * 5, vocab_size=40)
    tokenizer.save(run.tokenizer_path)
    model = build_model(config, tokenizer.vocab_size)
    checkpoints.save_variables(run.weights_path, model.weights)
    loaded, loaded_tokenizer, loaded_config = load_trained(run.path)
    assert loaded_config == config and loaded_tokenizer.vocab_size == tokenizer.vocab_size
    for a, b in zip(loaded.weights, model.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a.numpy()), np.asarray(b.numpy()))
    with pytest.raises(ValueError, match="'language_model' run, not a 'translation' run"):
        load_trained(run.path, type(make_config("translation")))


def test_inference_modules_do_not_import_the_training_code():
    code = (
        "import sys\n"
        "import mintransformer.inference.translator, mintransformer.inference.classifier\n"
        "import mintransformer.inference.generator, mintransformer.runs.loading\n"
        "print(sorted(m for m in sys.modules if m.startswith('mintransformer.training')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_overwriting_a_run_deletes_its_results_so_an_early_stop_reads_unfinished(tmp_path):
    config = make_config("language_model", num_layers=1, d_model=16, dff=32, max_length=8)
    run = RunDirectory.create(tmp_path / "run", config)
    Tokenizer.train(["a b c d e f"] * 5, vocab_size=40).save(run.tokenizer_path)
    checkpoints.save_variables(run.weights_path, build_model(config, 40).weights)
    run.checkpoint_dir.mkdir()
    run.checkpoint_path(1).write_bytes(b"old")
    run.log_path.write_text("epoch\n1\n")
    (run.path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="already holds a run"):
        RunDirectory.create(run.path, config)
    # A new run that stopped right after its config: no old weights beside it.
    RunDirectory.create(run.path, make_config("language_model", max_length=8), overwrite=True)
    assert sorted(p.name for p in run.path.iterdir()) == ["config.json", "notes.txt"]
    with pytest.raises(FileNotFoundError, match="missing tokenizer.json, model.npz"):
        RunDirectory.open(run.path)


def test_a_run_path_that_cannot_be_a_folder_is_a_clear_error(tmp_path):
    from mintransformer.core.errors import USER_ERRORS

    (tmp_path / "afile").write_text("keep")
    config = make_config("language_model", max_length=8)
    with pytest.raises(FileExistsError, match="is a file, not a run directory"):
        RunDirectory.create(tmp_path / "afile", config)
    with pytest.raises(USER_ERRORS, match="could not write .*afile/sub: Not a directory"):
        RunDirectory.create(tmp_path / "afile" / "sub", config)
    with (
        pytest.raises(USER_ERRORS, match="choose another --run"),
        RunDirectory(tmp_path / "afile" / "sub").lock(),
    ):
        pass
    assert (tmp_path / "afile").read_text() == "keep"

"""Training under faults: damaged checkpoints, failed writes, a diverging loss."""

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from mintransformer import cli
from mintransformer.core import files
from mintransformer.core.errors import CorruptFileError, NonFiniteLossError
from mintransformer.data.corpora import load_corpus, numbers_spec
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory
from mintransformer.training import callbacks, translation
from tests.conftest import interrupt_after_epoch, train_in
from tests.training.test_translation import start, weights_of


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(numbers_spec(num_train=1500, num_val=100, num_test=100))


def test_resume_skips_a_truncated_checkpoint_and_says_so(tmp_path, corpus):
    uninterrupted, _ = train_in(translation, start(tmp_path / "a", epochs=3), corpus)

    run = start(tmp_path / "b", epochs=3)
    with interrupt_after_epoch(1):
        train_in(translation, run, corpus)
    newest = run.checkpoint_path(2)
    newest.write_bytes(newest.read_bytes()[:1000])
    with pytest.warns(
        UserWarning,
        match=r"skipped corrupt checkpoint .*epoch-0002\.npz .*resuming from epoch-0001",
    ):
        resumed, _ = train_in(translation, run, corpus, resume=True)
    assert (run.checkpoint_dir / "epoch-0002.npz.corrupt").is_file()
    assert [run.epoch_of(p) for p in run.checkpoints()] == [2, 3]
    for a, b in zip(weights_of(resumed), weights_of(uninterrupted), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_resume_with_no_intact_checkpoint_starts_again_and_says_so(tmp_path, corpus):
    run = start(tmp_path / "run", epochs=1)
    with interrupt_after_epoch(0):
        train_in(translation, run, corpus)
    run.checkpoint_path(1).write_bytes(b"")
    with pytest.warns(
        UserWarning, match="epoch-0001.npz .*no intact checkpoint, training starts from the first"
    ):
        train_in(translation, run, corpus, resume=True)
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1]
    assert run.weights_path.is_file()


def fail_writing(monkeypatch, name: str, error: OSError) -> None:
    """Makes the atomic write of any file called `name` fail with `error` half-way."""
    original = files.atomic_write

    def atomic_write(path, write):
        def half_then_fail(f):
            f.write(b"half a checkpoint")
            raise error

        original(path, half_then_fail if Path(path).name == name else write)

    monkeypatch.setattr(checkpoints, "atomic_write", atomic_write)


TINY_FLAGS = [
    "--num-train", "1000", "--layers", "1", "--d-model", "32", "--heads", "2", "--dff", "64",
    "--vocab-size", "200", "--max-tokens", "1500", "--warmup", "20", "--max-length", "48",
    "--epochs", "3", "--average-last", "2", "--report", "0", "--verbose", "0",
]  # fmt: skip


def test_a_full_disk_during_a_checkpoint_stops_training_cleanly_and_resumes(
    tmp_path, monkeypatch, capsys
):
    run = RunDirectory(tmp_path / "run")
    fail_writing(monkeypatch, "epoch-0002.npz", OSError(errno.ENOSPC, "No space left on device"))
    code = cli.main(["train", "translation", "--run", str(run.path), *TINY_FLAGS])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "error: could not write" in err and "epoch-0002.npz" in err
    assert "No space left on device" in err and "--resume" in err
    assert os.listdir(run.checkpoint_dir) == ["epoch-0001.npz"]  # no temporary left
    checkpoints.read_arrays(run.checkpoint_path(1))
    assert not run.weights_path.exists()

    monkeypatch.undo()
    resume = ["train", "translation", "--run", str(run.path), "--resume", "--verbose", "0"]
    assert cli.main([*resume, "--report", "0"]) == 0
    assert [run.epoch_of(p) for p in run.checkpoints()] == [2, 3]
    assert run.weights_path.is_file()


@pytest.mark.parametrize("loss", [float("nan"), float("inf")])
def test_a_non_finite_loss_raises_naming_the_epoch_and_batch(tmp_path, loss):
    stop = callbacks.StopOnNonFiniteLoss(RunDirectory(tmp_path))
    stop.on_epoch_begin(1)
    stop.on_train_batch_end(0, {"loss": np.float32(2.5)})
    with pytest.raises(NonFiniteLossError, match=r"epoch 2, batch 4: .*no checkpoint"):
        stop.on_train_batch_end(3, {"loss": np.float32(loss)})


def test_training_stops_at_the_first_nan_loss_and_keeps_the_last_good_checkpoint(
    tmp_path, corpus, monkeypatch
):
    checkpoint_then_poison = callbacks.EpochCheckpoint.on_epoch_end

    def poison_after_the_first_epoch(self, epoch, logs=None):
        checkpoint_then_poison(self, epoch, logs)
        if epoch == 0:
            weight = self.model.trainable_weights[0]
            weight.assign(np.full(weight.shape, np.nan, "float32"))

    monkeypatch.setattr(callbacks.EpochCheckpoint, "on_epoch_end", poison_after_the_first_epoch)
    run = start(tmp_path / "run", epochs=3)
    message = r"loss became nan at epoch 2, batch 1: .*epoch-0001\.npz, is kept"
    with pytest.raises(NonFiniteLossError, match=message):
        train_in(translation, run, corpus)
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1]
    arrays, _ = checkpoints.read_arrays(run.checkpoint_path(1))
    assert all(np.isfinite(a).all() for a in arrays if a.dtype.kind == "f")
    assert not run.weights_path.exists()


def test_a_corrupt_older_checkpoint_stops_the_averaging_with_a_remedy_that_works(tmp_path, corpus):
    run = start(tmp_path / "run", epochs=2, average_last=2)
    train_in(translation, run, corpus)
    run.weights_path.unlink()
    run.checkpoint_path(1).write_bytes(b"")
    remedy = r"epoch-0001\.npz is corrupt: empty .*; delete it .*then run again with --resume"
    with pytest.raises(CorruptFileError, match=remedy):
        train_in(translation, run, corpus, resume=True)
    assert not run.weights_path.exists()
    run.checkpoint_path(1).unlink()
    train_in(translation, run, corpus, resume=True)
    assert run.weights_path.is_file()


def test_settings_that_do_not_fit_the_data_leave_no_run_in_the_way(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "mine").mkdir(parents=True)  # a folder the user made: kept
    flags = [arg for arg in TINY_FLAGS if arg != "48"]  # every sentence longer than 2 tokens
    flags[flags.index("--max-length") + 1 : flags.index("--max-length") + 1] = ["2"]
    assert cli.main(["train", "translation", "--run", str(run), *flags]) == 2
    assert "no sentence pair left" in capsys.readouterr().err
    assert sorted(os.listdir(run)) == ["mine"]
    # The corrected command finds no run in its way.
    assert cli.main(["train", "translation", "--run", str(run), *TINY_FLAGS, "--epochs", "1"]) == 0
    assert RunDirectory.open(run).weights_path.is_file()

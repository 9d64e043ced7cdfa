"""One training process per run directory; a killed process leaves no stuck lock."""

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from mintransformer import cli
from mintransformer.config import make_config
from mintransformer.core import locking
from mintransformer.core.errors import RunInUseError
from mintransformer.runs.directory import LOCK, RunDirectory

HOLD_THE_LOCK = """
import sys, time
from mintransformer.runs.directory import RunDirectory
with RunDirectory(sys.argv[1]).lock():
    print("locked", flush=True)
    time.sleep(600)
"""


@contextlib.contextmanager
def held_by_another_process(run):
    """Within the block a separate process holds `run`'s lock (until the block ends or it
    is killed); yields the process."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(run.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline().strip() == "locked"
        yield process
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


def new_run(tmp_path):
    return RunDirectory.create(tmp_path / "run", make_config("translation", "numbers"))


@pytest.fixture
def holder(tmp_path):
    """A run directory, and a separate process that holds its lock until killed."""
    run = new_run(tmp_path)
    with held_by_another_process(run) as process:
        yield run, process


def test_a_second_training_process_is_refused_and_nothing_is_touched(holder, capsys):
    run, process = holder
    before = {p.name: p.read_bytes() for p in run.path.iterdir()}
    for how in ("--overwrite", "--resume"):
        code = cli.main(["train", "translation", "--run", str(run.path), how, "--verbose", "0"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1
        assert f"{run.path} is in use by another process (pid {process.pid})" in err
    assert {p.name: p.read_bytes() for p in run.path.iterdir()} == before
    with pytest.raises(RunInUseError), run.lock():
        pass


def test_a_killed_process_leaves_no_stuck_lock(holder):
    run, process = holder
    with pytest.raises(RunInUseError), run.lock():
        pass
    process.send_signal(signal.SIGKILL)
    process.wait()
    with run.lock():  # at once: the operating system dropped the lock with the process
        assert (run.path / LOCK).read_text() == str(os.getpid())


def test_the_lock_is_taken_once_and_released_after(tmp_path):
    run = new_run(tmp_path)
    with run.lock(), pytest.raises(RunInUseError, match=f"pid {os.getpid()}"), run.lock():
        pass
    with run.lock():
        pass
    with held_by_another_process(run) as process:
        assert process.poll() is None


def test_a_folder_made_only_for_the_lock_is_removed_again(tmp_path):
    run = RunDirectory(tmp_path / "new")
    with run.lock():
        assert run.path.is_dir()
    assert not run.path.exists()


def test_without_file_locks_the_run_goes_ahead_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(locking, "fcntl", None)
    run = new_run(tmp_path)
    with pytest.warns(UserWarning, match="file locks are not available"), run.lock():
        pass

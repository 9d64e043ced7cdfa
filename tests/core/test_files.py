"""Atomic writes: the old file or the new one, never half of one."""

import errno
import os
import stat

import pytest

from mintransformer.core.errors import FileWriteError
from mintransformer.core.files import atomic_write, replacing_folder


class WriteFailedError(Exception):
    pass


def test_a_write_replaces_the_file_readable_by_all(tmp_path):
    path = tmp_path / "sub" / "f.bin"
    atomic_write(path, lambda f: f.write(b"first"))
    atomic_write(path, lambda f: f.write(b"second"))
    assert path.read_bytes() == b"second"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(path.parent) == ["f.bin"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "f.bin"
    atomic_write(path, lambda f: f.write(b"good"))

    def fail(f):
        f.write(b"half")
        raise WriteFailedError

    with pytest.raises(WriteFailedError):
        atomic_write(path, fail)
    assert path.read_bytes() == b"good"
    assert os.listdir(tmp_path) == ["f.bin"]


@pytest.mark.parametrize(
    ("failing", "error"),
    [
        ("write", OSError(errno.ENOSPC, "No space left on device")),
        ("mkstemp", PermissionError(errno.EACCES, "Permission denied")),
        ("replace", OSError(errno.EROFS, "Read-only file system")),
    ],
)
def test_a_full_disk_or_read_only_folder_is_a_clear_error_and_keeps_the_old_file(
    tmp_path, monkeypatch, failing, error
):
    path = tmp_path / "f.bin"
    atomic_write(path, lambda f: f.write(b"good"))

    def fail(*args, **kwargs):
        raise error

    def write(f):
        f.write(b"half")
        if failing == "write":
            fail()

    if failing == "mkstemp":
        monkeypatch.setattr("mintransformer.core.files.tempfile.mkstemp", fail)
    elif failing == "replace":
        monkeypatch.setattr("mintransformer.core.files.os.replace", fail)
    with pytest.raises(FileWriteError) as raised:
        atomic_write(path, write)
    message = str(raised.value)
    assert str(path) in message and error.strerror in message and "\n" not in message
    assert raised.value.errno == error.errno
    assert path.read_bytes() == b"good"
    assert os.listdir(tmp_path) == ["f.bin"]


OWN = {"a.txt", "b.txt"}


def write_export(folder, names):
    for name in names:
        (folder / name).write_text(f"{name} of {folder.name}")


def test_a_folder_is_created_then_replaced_whole_by_the_next_export(tmp_path):
    out = tmp_path / "nested" / "export"
    with replacing_folder(out, OWN, "an export") as staging:
        assert staging.parent == out.parent and not out.exists()
        write_export(staging, ["a.txt", "b.txt"])
    assert sorted(os.listdir(out)) == ["a.txt", "b.txt"]
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o755
    with replacing_folder(out, OWN, "an export") as staging:
        write_export(staging, ["a.txt"])
    # The new export alone: a file only the earlier one had is gone, and nothing is left beside.
    assert (
        os.listdir(out) == ["a.txt"] and (out / "a.txt").read_text() == f"a.txt of {staging.name}"
    )
    assert os.listdir(out.parent) == ["export"]


def test_an_empty_folder_is_taken(tmp_path):
    with replacing_folder(tmp_path, OWN, "an export") as staging:
        write_export(staging, ["a.txt"])
    assert os.listdir(tmp_path) == ["a.txt"]


@pytest.mark.parametrize("foreign", ["model.npz", "checkpoints/"])
def test_a_folder_holding_anything_else_is_refused_untouched(tmp_path, foreign):
    out = tmp_path / "run"
    out.mkdir()
    write_export(out, ["a.txt"])
    if foreign.endswith("/"):
        (out / foreign).mkdir()
    else:
        (out / foreign).write_bytes(b"weights")
    before = sorted(os.listdir(out))
    refused = f"holds files that are not an export.*{foreign}"
    with pytest.raises(FileExistsError, match=refused), replacing_folder(out, OWN, "an export"):
        pytest.fail("the block must not run")
    assert sorted(os.listdir(out)) == before and os.listdir(tmp_path) == ["run"]


def test_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("keep")
    out = tmp_path / "out"
    with pytest.raises(FileExistsError, match="is a file"), replacing_folder(out, OWN, "export"):
        pytest.fail("the block must not run")
    assert (tmp_path / "out").read_text() == "keep"


def test_a_failed_export_keeps_the_earlier_one_and_leaves_nothing_beside(tmp_path):
    out = tmp_path / "export"
    with replacing_folder(out, OWN, "an export") as staging:
        write_export(staging, ["a.txt"])
    with pytest.raises(WriteFailedError), replacing_folder(out, OWN, "an export") as staging:
        write_export(staging, ["a.txt", "b.txt"])
        raise WriteFailedError
    assert os.listdir(out) == ["a.txt"] and os.listdir(tmp_path) == ["export"]

"""Atomic writes: the old file or the new one, never half of one."""

import errno
import os
import stat

import pytest

from mintransformer.core.errors import FileWriteError
from mintransformer.core.files import atomic_write


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

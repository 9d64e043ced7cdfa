"""Atomic writes: the old file or the new one, never half of one."""

import os
import stat

import pytest

from mintransformer.files import atomic_write


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

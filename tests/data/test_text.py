"""Tests for reading and normalising text."""

import gzip
from pathlib import Path

import pytest

from mintransformer.data.text import normalize_text, read_lines, read_text


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def test_read_lines_strips_only_the_newline(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.txt", "\ufeffone \n  two\r\n\nlast")
    assert read_lines(path) == ["one ", "  two", "", "last"]
    assert read_lines(_write(tmp_path / "empty.txt", "")) == []


def test_read_lines_reads_gzip(tmp_path: Path) -> None:
    path = tmp_path / "a.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("Salut\u202f!\nÇa va ?\n")
    assert read_lines(path) == ["Salut\u202f!", "Ça va ?"]
    assert read_lines(str(path)) == read_lines(path)


def test_read_lines_errors_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_lines(missing)
    with pytest.raises(ValueError, match="Not a file"):
        read_lines(tmp_path)
    bad_gzip = _write(tmp_path / "bad.gz", "not gzip\n")
    with pytest.raises(ValueError, match="bad.gz.*gzip"):
        read_lines(bad_gzip)


def test_read_lines_invalid_utf8_names_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("fine\nstill fine\ncafé\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt: line 3 is not valid UTF-8"):
        read_lines(path)


def test_normalize_text() -> None:
    assert normalize_text("Salut\u202f!") == "Salut !"
    assert normalize_text("Quoi\u00a0? Rien\u2007;") == "Quoi ? Rien ;"
    assert normalize_text("  a \t b\n\n c  ") == "a b c"
    assert normalize_text("Cafe\u0301") == "Café"  # Decomposed accent -> NFC.
    assert normalize_text("Cafe\u0301") == "Caf\u00e9"
    assert normalize_text(" \u00a0 ") == ""


def test_read_text_keeps_non_blank_normalised_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.txt", "  a\u00a0 b \n\n \t\nc\n")
    assert read_text(path) == ["a b", "c"]


def test_read_text_refuses_a_file_without_text(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds no text"):
        read_text(_write(tmp_path / "blank.txt", " \n\n"))

"""Reading and normalising text, for every task: UTF-8 (or gzip) lines, NFC, plain spaces."""

from __future__ import annotations

import gzip
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_NO_BREAK_SPACES = str.maketrans({"\u00a0": " ", "\u202f": " ", "\u2007": " "})


def read_lines(path: str | Path) -> list[str]:
    """Reads a UTF-8 text file, or a gzip of one if its name ends in ``.gz``.

    Args:
        path: The file to read.

    Returns:
        The lines, each without its trailing newline (``\\n`` or ``\\r\\n``) and otherwise
        unchanged. A byte order mark at the start of the file is dropped.

    Raises:
        FileNotFoundError: If there is no such file.
        ValueError: If ``path`` is not a file, is not valid gzip, or a line is not valid UTF-8.
    """
    return list(iter_lines(path))


def iter_lines(source: str | Path | BinaryIO, name: str | None = None) -> Iterator[str]:
    """The lines of a UTF-8 text file one at a time, as `read_lines` returns them.

    Lines are split at ``\\n`` only (not at characters such as U+2028), so a file of
    N newline-terminated lines gives N lines.

    Args:
        source: a path (a gzip file if it ends in ``.gz``) or an open binary file.
        name: what to call `source` in errors (default: its path).

    Raises:
        FileNotFoundError: If there is no such file (when the lines are first read).
        ValueError: If ``source`` is not a file, is not valid gzip, or a line is not
            valid UTF-8, naming the line.
    """
    if isinstance(source, str | Path):
        path = _existing_file(source)
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            yield from iter_lines(f, name or str(path))
        return
    name = name or getattr(source, "name", "input")
    try:
        for number, raw in enumerate(source, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{name}: line {number} is not valid UTF-8 ({error.reason})"
                ) from error
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield line.removesuffix("\n").removesuffix("\r")
    except (gzip.BadGzipFile, EOFError) as error:
        raise ValueError(f"{name}: not a valid gzip file ({error})") from error


def count_lines(path: str | Path) -> int:
    """The number of lines `iter_lines(path)` gives, counted without decoding them."""
    path = _existing_file(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    count, last = 0, b"\n"
    try:
        with opener(path, "rb") as f:
            while block := f.read(1 << 20):
                count += block.count(b"\n")
                last = block[-1:]
    except (gzip.BadGzipFile, EOFError) as error:
        raise ValueError(f"{path}: not a valid gzip file ({error})") from error
    return count + (last != b"\n")


def _existing_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No such file: {path}")
    if not path.is_file():
        raise ValueError(f"Not a file: {path}")
    return path


def normalize_text(text: str) -> str:
    """Normalises a sentence: Unicode NFC, plain spaces only, single spaces, no outer spaces.

    Args:
        text: The sentence.

    Returns:
        ``text`` in NFC form, with the no-break spaces U+00A0, U+202F and U+2007 made plain
        spaces, every run of whitespace made one space, and leading and trailing whitespace
        removed.
    """
    text = unicodedata.normalize("NFC", text).translate(_NO_BREAK_SPACES)
    return " ".join(text.split())


def read_text(path: str | Path) -> list[str]:
    """The non-blank lines of a UTF-8 text file, normalised (`normalize_text`).

    Raises:
        FileNotFoundError: if there is no such file.
        ValueError: if the file is not UTF-8 or holds no text, naming the file.
    """
    lines = [normalize_text(line) for line in read_lines(path)]
    lines = [line for line in lines if line]
    if not lines:
        raise ValueError(f"{path} holds no text: it is empty or has only blank lines.")
    return lines

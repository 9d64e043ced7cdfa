"""Reading and normalising text, for every task: UTF-8 (or gzip) lines, NFC, plain spaces."""

from __future__ import annotations

import gzip
import unicodedata
from pathlib import Path

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
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No such file: {path}")
    if not path.is_file():
        raise ValueError(f"Not a file: {path}")
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (gzip.BadGzipFile, EOFError) as error:
        raise ValueError(f"{path}: not a valid gzip file ({error})") from error
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ValueError(f"{path}: line {line} is not valid UTF-8 ({error.reason})") from error
    if not text:
        return []
    # split("\n"), not splitlines(): the latter also splits at characters such as U+2028.
    lines = text.removesuffix("\n").split("\n")
    return [line.removesuffix("\r") for line in lines]


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


def __getattr__(name: str):
    # The language-model stream helpers moved to `data.windows`; old imports keep working.
    if name in {"token_stream", "make_windows", "prompt_ids", "decode_text", "WindowBatches"}:
        from mintransformer.data import windows

        return getattr(windows, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

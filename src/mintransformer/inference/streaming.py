"""Processing many lines in chunks: output as it is made, in input order, memory flat.

`translate --input FILE` and `classify --input FILE` read their input a chunk
of lines at a time (`map_lines`), so the first results appear after the first
chunk and memory does not grow with the file. `write_lines` prints the results
as they come, or writes them to a temporary file beside `--output FILE` that is
renamed to it at the end: an interrupted run never leaves half a file under the
final name.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

from tqdm.auto import tqdm

from mintransformer.core.files import atomic_write
from mintransformer.data.text import count_lines, iter_lines

CHUNK_LINES = 256


def open_input(texts: Sequence[str], path: str | Path | None) -> tuple[Iterable[str], int | None]:
    """The input lines and their count (None when unknown, on standard input).

    Args:
        texts: lines given directly (command-line arguments); used when not empty.
        path: else a UTF-8 text file (`.gz` ok) read lazily; else standard input.

    Raises:
        ValueError: if both `texts` and `path` are given (one of them would be ignored).
    """
    if texts and path is not None:
        raise ValueError(
            f"texts given both as arguments ({len(texts)}) and as --input {path}: "
            "give one or the other"
        )
    if texts:
        return texts, len(texts)
    if path is not None:
        return iter_lines(path), count_lines(path)
    return iter_lines(sys.stdin.buffer, "standard input"), None


def map_lines(
    lines: Iterable[str],
    process: Callable[[list[str]], Sequence[str]],
    chunk_size: int = CHUNK_LINES,
    total: int | None = None,
    progress: bool = False,
    description: str = "lines",
) -> Iterator[str]:
    """`process` applied to `lines` a chunk at a time; yields one result per line, in order.

    Args:
        lines: the input; may be a one-shot iterator.
        process: maps a list of lines to as many results (strings without newlines).
        chunk_size: lines per call of `process`.
        total: the number of lines, for the progress bar (None: unknown).
        progress: show a progress bar (on standard error).
        description: the progress bar's label.
    """
    lines = iter(lines)
    with tqdm(total=total, disable=not progress, desc=description, unit="line") as bar:
        while chunk := list(islice(lines, chunk_size)):
            results = process(chunk)
            if len(results) != len(chunk):
                raise RuntimeError(f"{len(chunk)} lines gave {len(results)} results")
            yield from results
            bar.update(len(chunk))


def write_lines(lines: Iterable[str], output: str | Path | None = None) -> None:
    """Writes `lines` as they come: to standard output, or atomically to the file `output`."""
    if output is None:
        for line in lines:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        return

    def write(f):
        for line in lines:
            f.write((line + "\n").encode("utf-8"))

    atomic_write(output, write)

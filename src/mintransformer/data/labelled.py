"""Labelled texts for classification: JSONL, CSV, or an aclImdb-style folder of class folders.

    read_labelled("imdb/train.jsonl.gz")   # {"text": ..., "label": ...} per line
    read_labelled("reviews.csv")           # a header row naming `text` and `label`
    read_labelled("aclImdb/train")         # train/pos/*.txt, train/neg/*.txt (unsup ignored)

Every reader returns `(text, label)` pairs with `label` as a string, so integer and
named labels are handled alike; `LabelSet` maps them to class ids. HTML line breaks
(`<br />`, common in IMDB reviews) become spaces.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from mintransformer.core import checks
from mintransformer.data.text import iter_lines, read_lines

_LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
# aclImdb's folder of unlabelled reviews: not a class.
_UNLABELLED_FOLDERS = {"unsup"}


def clean_text(text: str) -> str:
    """Replaces HTML line breaks with spaces and collapses runs of whitespace."""
    return " ".join(_LINE_BREAK.sub(" ", text).split())


def _label(value, where: str) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, dict | list):
        raise ValueError(f"{where}: label must be a string or an integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{where}: label must be a string or an integer, got {value!r}")
        value = int(value)
    label = str(value).strip()
    if not label:
        raise ValueError(f"{where}: empty label")
    return label


def _read_jsonl(path: Path) -> list[tuple[str, str]]:
    """`(text, label)` per non-blank line; a bad line is refused with its number."""
    pairs = []
    for number, line in enumerate(iter_lines(path), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not valid JSON ({err})") from None
        if not isinstance(record, dict) or "text" not in record or "label" not in record:
            raise ValueError(f'{where}: expected an object with "text" and "label" fields')
        if not isinstance(record["text"], str):
            raise ValueError(f'{where}: "text" must be a string')
        pairs.append((clean_text(record["text"]), _label(record["label"], where)))
    return pairs


def _csv_lines(path: Path) -> Iterator[str]:
    """The lines of a CSV file for `csv.reader`, each ending in a newline.

    `iter_lines` decodes them (gzip, UTF-8, a byte order mark dropped), naming the
    file and line of a byte it cannot read. Lines end at "\\n", "\\r\\n" or a lone
    "\\r", as `csv` expects of a file opened with `newline=""`; the newline is put
    back so that a quoted text spanning lines keeps its line break.
    """
    for line in iter_lines(path):
        for part in line.split("\r"):
            yield part + "\n"


def _read_csv(path: Path) -> list[tuple[str, str]]:
    """`(text, label)` per row under a header naming them; a bad row is refused with its line."""
    reader = csv.DictReader(_csv_lines(path))
    try:
        fields = reader.fieldnames or []
        if "text" not in fields or "label" not in fields:
            raise ValueError(
                f"{path}: the first row must name the columns, including `text` and `label`; "
                f"got {fields}"
            )
        pairs = []
        for row in reader:
            where = f"{path}, line {reader.line_num}"
            _check_columns(row, len(fields), where)
            pairs.append((clean_text(row["text"]), _label(row["label"], where)))
    except csv.Error as err:
        line = reader.reader.line_num  # the line read when the error came
        raise ValueError(f"{path}, line {line}: not valid CSV ({err})") from None
    return pairs


def _check_columns(row: dict, num_fields: int, where: str) -> None:
    """Refuses a CSV row with more columns than the header, or without its text or label.

    `csv.DictReader` files surplus fields under the key None: an unquoted comma in a
    text would otherwise shift part of the text into the label.
    """
    if None in row:
        columns = num_fields + len(row[None])
        raise ValueError(
            f"{where}: {columns} columns, the header has {num_fields} "
            "(quote texts that contain commas)"
        )
    if row["text"] is None or row["label"] is None:
        columns = sum(value is not None for value in row.values())
        raise ValueError(
            f"{where}: {columns} columns, the header has {num_fields} "
            "(missing the text or label column)"
        )


def _read_folder(path: Path) -> list[tuple[str, str]]:
    """`(text, class folder name)` per `.txt` file; a file not in UTF-8 is refused by name."""
    classes = sorted(
        folder
        for folder in path.iterdir()
        if folder.is_dir() and folder.name not in _UNLABELLED_FOLDERS
    )
    if not classes:
        raise ValueError(
            f"{path}: expected one sub-folder of .txt files per class (e.g. pos/, neg/)"
        )
    pairs = []
    for folder in classes:
        for file in sorted(folder.glob("*.txt")):
            pairs.append((clean_text("\n".join(read_lines(file))), folder.name))
    return pairs


def read_labelled(path: str | Path) -> list[tuple[str, str]]:
    """Reads `(text, label)` pairs from a JSONL or CSV file (`.gz` ok) or a class-folder tree.

    Raises:
        FileNotFoundError: if `path` does not exist.
        ValueError: on an unknown format, a malformed record or label, a CSV row with
            more columns than its header, text that is not UTF-8 or a `.gz` that is not
            valid gzip (each with its file and line), or no example at all.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or folder: {path}")
    if path.is_dir():
        pairs = _read_folder(path)
    else:
        suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
        kind = suffixes[-1] if suffixes else ""
        if kind in (".jsonl", ".json"):
            pairs = _read_jsonl(path)
        elif kind == ".csv":
            pairs = _read_csv(path)
        else:
            raise ValueError(
                f"{path}: unknown format {kind or '(no suffix)'!r}; expected .jsonl, .csv "
                "(optionally .gz) or a folder of class folders"
            )
    if not pairs:
        raise ValueError(f"{path}: no labelled text found")
    return pairs


class LabelSet:
    """The classes of a task: label strings <-> ids 0..n-1 (sorted, numerically if all ints)."""

    def __init__(self, names: Sequence[str]):
        if len(names) < 2:
            raise ValueError(f"a classifier needs at least two classes, got {list(names)}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate class names in {list(names)}")
        self.names = list(names)
        self._ids = {name: i for i, name in enumerate(self.names)}

    @classmethod
    def from_labels(cls, labels: Sequence[str]) -> LabelSet:
        distinct = set(labels)
        numeric = all(label.lstrip("-").isdigit() for label in distinct)
        return cls(sorted(distinct, key=int if numeric else str))

    def ids(self, labels: Sequence[str], source: str = "data") -> np.ndarray:
        """int32 class ids; a ValueError names any label not seen in training."""
        unknown = sorted(set(labels) - set(self._ids))
        if unknown:
            raise ValueError(
                f"{source} has labels the model does not know: {unknown[:5]}; "
                f"its classes are {self.names}"
            )
        return np.array([self._ids[label] for label in labels], "int32")


def split_validation(
    pairs: list[tuple[str, str]], fraction: float, seed: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A seeded random `(train, val)` split, `fraction` of the examples going to val."""
    if not 0 < fraction < 1:
        raise ValueError(f"the validation fraction must be in (0, 1), got {fraction}")
    order = np.random.default_rng(seed).permutation(len(pairs))
    num_val = max(1, round(fraction * len(pairs)))
    if num_val >= len(pairs):
        raise ValueError(f"{len(pairs)} examples are too few to carve out a validation split")
    return [pairs[i] for i in order[num_val:]], [pairs[i] for i in order[:num_val]]


def truncate(ids: Sequence[int], max_length: int, mode: str) -> list[int]:
    """Cuts a token sequence to `max_length`.

    Modes: "head" keeps the start, "tail" the end (as Keras' `pad_sequences` does by
    default), "head_tail" the first quarter and the last three quarters of the budget
    (Sun et al. 2019 found this best for long reviews).
    """
    ids = list(ids)
    if len(ids) <= max_length:
        return ids
    if mode == "head":
        return ids[:max_length]
    if mode == "tail":
        return ids[len(ids) - max_length :]
    if mode == "head_tail":
        head = max_length // 4
        return ids[:head] + ids[len(ids) - (max_length - head) :]
    raise ValueError(f"unknown truncation {mode!r}: expected head, tail or head_tail")


def encode_texts(
    tokenizer, texts: Sequence[str], max_length: int, truncation: str
) -> list[list[int]]:
    """`<s>` + each text's tokens, cut by `truncation` to `max_length` tokens in all."""
    return [
        [tokenizer.start_id, *truncate(ids, max_length - 1, truncation)]
        for ids in tokenizer.encode_batch(list(texts))
    ]


def load_splits(data: dict, seed: int) -> dict[str, list[tuple[str, str]]]:
    """The train / val [/ test] splits a classification config's `data` names.

    `data` holds the paths "train", "val" and "test" (None where not given) and
    "val_fraction": without a "val" file, a seeded fraction of train becomes val.
    """
    train = read_labelled(data["train"])
    if data.get("val"):
        splits = {"train": train, "val": read_labelled(data["val"])}
    else:
        train, val = split_validation(train, data["val_fraction"], seed)
        splits = {"train": train, "val": val}
    if data.get("test"):
        splits["test"] = read_labelled(data["test"])
    return splits


def data_spec(
    train: str | Path,
    val: str | Path | None = None,
    test: str | Path | None = None,
    val_fraction: float = 0.1,
) -> dict:
    """A classification config's `data`: absolute paths of the splits, and `val_fraction`
    (the share of train carved out for validation when there is no `val` file; without
    one, a ValueError unless it is in (0, 1))."""
    if not val:
        checks.fraction(val_fraction, "val_fraction")
    paths = {"train": train, "val": val, "test": test}
    spec = {k: str(Path(v).expanduser().resolve()) if v else None for k, v in paths.items()}
    return {**spec, "val_fraction": val_fraction}

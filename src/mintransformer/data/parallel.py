"""Reading parallel text: sentence pairs from line-aligned files and from tab-separated files.

Two layouts are supported:

* Multi30k style: ``PREFIX.SRC`` and ``PREFIX.TGT``, where line *i* of one file translates line
  *i* of the other (:func:`read_parallel`).
* Tatoeba / Anki style: one ``SRC<TAB>TGT`` pair per line, maybe with more columns after
  (:func:`read_tsv_pairs`).

Every sentence goes through ``data.text.normalize_text``. Tatoeba's French puts no-break
spaces before ``! ? : ;``; without normalisation a tokenizer sees "Salut !" with two
different spaces as two different strings.

In Tatoeba one English sentence often has several French translations. A random split of the
pairs would then put "Go." -> "Va !" in train and "Go." -> "Marche." in test, and the test
score would measure memory. :func:`split_by_source` splits by source sentence instead.
"""

import random
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from mintransformer.core import checks
from mintransformer.data.text import normalize_text, read_lines


def read_parallel(prefix: str | Path, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
    """Reads line-aligned files ``PREFIX.SRC`` and ``PREFIX.TGT`` (the Multi30k layout).

    Args:
        prefix: The path of the files without the language suffix, e.g. ``data/multi30k/train``.
        src_lang: The source language suffix, e.g. ``"en"``.
        tgt_lang: The target language suffix, e.g. ``"fr"``.

    Returns:
        The normalised ``(source, target)`` pairs, in file order.

    Raises:
        FileNotFoundError: If a file is missing.
        ValueError: If a file cannot be read as UTF-8, or the two files have different
            numbers of lines.
    """
    src_path = Path(f"{prefix}.{src_lang}")
    tgt_path = Path(f"{prefix}.{tgt_lang}")
    src_lines = read_lines(src_path)
    tgt_lines = read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"Parallel files have different line counts: {src_path} has {len(src_lines)} "
            f"lines, {tgt_path} has {len(tgt_lines)}"
        )
    pairs = zip(src_lines, tgt_lines, strict=True)
    return [(normalize_text(src), normalize_text(tgt)) for src, tgt in pairs]


def read_tsv_pairs(path: str | Path) -> list[tuple[str, str]]:
    """Reads ``SRC<TAB>TGT`` lines (the Tatoeba / Anki ``fra.txt`` layout, or its ``.gz``).

    Columns after the second (e.g. the attribution in newer Anki files) are ignored. Blank
    lines are skipped.

    Args:
        path: The file to read.

    Returns:
        The normalised ``(source, target)`` pairs, in file order.

    Raises:
        FileNotFoundError: If there is no such file.
        ValueError: If the file cannot be read as UTF-8, or a line has no tab.
    """
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        columns = line.split("\t", 2)
        if len(columns) < 2:
            raise ValueError(f"{path}: line {number} has no tab between source and target")
        pairs.append((normalize_text(columns[0]), normalize_text(columns[1])))
    return pairs


def drop_empty_pairs(
    pairs: Iterable[tuple[str, str]],
) -> tuple[list[tuple[str, str]], int]:
    """Removes the pairs where either side is empty after :func:`normalize_text`.

    Args:
        pairs: ``(source, target)`` pairs.

    Returns:
        The kept pairs, unchanged and in order, and the number of pairs dropped.
    """
    kept = []
    dropped = 0
    for src, tgt in pairs:
        if normalize_text(src) and normalize_text(tgt):
            kept.append((src, tgt))
        else:
            dropped += 1
    return kept, dropped


def source_key(text: str) -> str:
    """The key that groups near-duplicate sources: "Go." and "go" give the same key."""
    key = normalize_text(text).casefold()
    end = len(key)
    while end and (unicodedata.category(key[end - 1]).startswith("P") or key[end - 1].isspace()):
        end -= 1
    return key[:end]


def check_split_fractions(val_fraction: float, test_fraction: float) -> None:
    """Raises ValueError unless both fractions are in [0, 1) and leave some pairs to train."""
    checks.unit_interval(val_fraction, "val_fraction")
    checks.unit_interval(test_fraction, "test_fraction")
    if val_fraction + test_fraction >= 1:
        raise ValueError(
            "`val_fraction` + `test_fraction` must be less than 1 so train is not empty, got "
            f"{val_fraction} + {test_fraction}."
        )


def split_by_source(
    pairs: Iterable[tuple[str, str]],
    *,
    val_fraction: float,
    test_fraction: float,
    seed: int = 0,
) -> dict[str, list[tuple[str, str]]]:
    """Splits pairs into train / validation / test so that no source sentence is in two splits.

    Pairs are grouped by their source sentence, compared after :func:`normalize_text`,
    case folding and removing trailing punctuation, so "Go." and "go" are one group. The
    groups are shuffled with ``seed`` and whole groups are dealt out: the first
    ``round(val_fraction * groups)`` to validation, the next ``round(test_fraction * groups)``
    to test, the rest to train. The fractions therefore count groups, not pairs.

    Args:
        pairs: ``(source, target)`` pairs.
        val_fraction: The fraction of source groups for validation, in ``[0, 1)``.
        test_fraction: The fraction of source groups for test, in ``[0, 1)``.
        seed: Seed of the shuffle; the same pairs and arguments always give the same split.

    Returns:
        ``{"train": pairs, "val": pairs, "test": pairs}``, each keeping the input order of its
        pairs. Shuffle the training pairs before batching.

    Raises:
        ValueError: If a fraction is outside ``[0, 1)`` or the two add up to 1 or more.
    """
    check_split_fractions(val_fraction, test_fraction)
    pairs = list(pairs)
    groups: dict[str, list[int]] = {}
    for index, (src, _) in enumerate(pairs):
        groups.setdefault(source_key(src), []).append(index)
    keys = list(groups)  # First-appearance order, so the shuffle below is reproducible.
    random.Random(seed).shuffle(keys)
    num_val = round(val_fraction * len(keys))
    num_test = round(test_fraction * len(keys))
    split_keys = {
        "train": keys[num_val + num_test :],
        "val": keys[:num_val],
        "test": keys[num_val : num_val + num_test],
    }
    return {
        name: [pairs[i] for i in sorted(i for key in names for i in groups[key])]
        for name, names in split_keys.items()
    }

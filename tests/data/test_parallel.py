"""Tests for reading and splitting parallel text."""

import gzip
from pathlib import Path

import pytest

from mintransformer.data.parallel import (
    drop_empty_pairs,
    read_parallel,
    read_tsv_pairs,
    split_by_source,
)


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def test_read_parallel(tmp_path: Path) -> None:
    _write(tmp_path / "train.en", "A dog runs.\nTwo  men.\n")
    _write(tmp_path / "train.fr", "Un chien court\u202f!\nDeux hommes.\n")
    expected = [("A dog runs.", "Un chien court !"), ("Two men.", "Deux hommes.")]
    assert read_parallel(tmp_path / "train", "en", "fr") == expected
    assert read_parallel(str(tmp_path / "train"), "fr", "en") == [(f, e) for e, f in expected]


def test_read_parallel_line_count_mismatch(tmp_path: Path) -> None:
    _write(tmp_path / "val.en", "one\ntwo\nthree\n")
    _write(tmp_path / "val.fr", "un\ndeux\n")
    with pytest.raises(ValueError) as error:
        read_parallel(tmp_path / "val", "en", "fr")
    message = str(error.value)
    assert "val.en" in message and "val.fr" in message
    assert "3" in message and "2" in message


def test_read_parallel_missing_file(tmp_path: Path) -> None:
    _write(tmp_path / "test.en", "one\n")
    with pytest.raises(FileNotFoundError, match="test.fr"):
        read_parallel(tmp_path / "test", "en", "fr")


def test_read_tsv_pairs(tmp_path: Path) -> None:
    text = "Go.\tVa\u202f!\nHi.\tSalut\u00a0!\tCC-BY 2.0 (France) Attribution\n\nRun!\tCours !\n"
    plain = _write(tmp_path / "fra.txt", text)
    packed = tmp_path / "fra.txt.gz"
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    expected = [("Go.", "Va !"), ("Hi.", "Salut !"), ("Run!", "Cours !")]
    assert read_tsv_pairs(plain) == expected
    assert read_tsv_pairs(packed) == expected


def test_read_tsv_pairs_missing_tab(tmp_path: Path) -> None:
    path = _write(tmp_path / "fra.txt", "Go.\tVa !\nHi. Salut !\n")
    with pytest.raises(ValueError, match=r"fra\.txt: line 2 has no tab"):
        read_tsv_pairs(path)


def test_drop_empty_pairs() -> None:
    pairs = [("a", "b"), ("", "x"), ("y", " \u202f "), ("c", "d")]
    assert drop_empty_pairs(pairs) == ([("a", "b"), ("c", "d")], 2)
    assert drop_empty_pairs([]) == ([], 0)


def _group(source: str) -> str:
    """The test's own source grouping: enough for the sentences written here."""
    return source.casefold().rstrip(".!? ").strip()


def _corpus(num_groups: int) -> list[tuple[str, str]]:
    """Groups of 1-3 translations each; some sources repeat with other case or punctuation."""
    pairs = []
    for g in range(num_groups):
        pairs.append((f"Sentence {g}.", f"Phrase {g}."))
        if g % 2:
            pairs.append((f"sentence {g}", f"La phrase {g}"))
        if g % 3 == 0:
            pairs.append((f"SENTENCE {g} !", f"Une phrase {g} !"))
    return pairs


def test_split_by_source_has_no_shared_source() -> None:
    go = [("Go.", "Va !"), ("go", "Marche."), (" GO !", "Bouge !"), ("Go on.", "Continue.")]
    pairs = go + _corpus(200)
    splits = split_by_source(pairs, val_fraction=0.2, test_fraction=0.2, seed=0)
    keys = {name: {_group(src) for src, _ in split} for name, split in splits.items()}
    assert not keys["train"] & keys["val"]
    assert not keys["train"] & keys["test"]
    assert not keys["val"] & keys["test"]
    assert sorted(p for split in splits.values() for p in split) == sorted(pairs)
    for seed in range(20):  # Wherever "Go." lands, its near-duplicates land with it.
        splits = split_by_source(pairs, val_fraction=0.3, test_fraction=0.3, seed=seed)
        [home] = [split for split in splits.values() if go[0] in split]
        assert go[1] in home and go[2] in home


def test_split_by_source_respects_fractions() -> None:
    splits = split_by_source(_corpus(1000), val_fraction=0.1, test_fraction=0.05, seed=1)
    groups = {name: len({_group(src) for src, _ in split}) for name, split in splits.items()}
    assert groups == {"train": 850, "val": 100, "test": 50}


def test_split_by_source_is_deterministic_and_keeps_order() -> None:
    pairs = _corpus(300)
    first = split_by_source(pairs, val_fraction=0.1, test_fraction=0.1, seed=5)
    assert split_by_source(iter(pairs), val_fraction=0.1, test_fraction=0.1, seed=5) == first
    assert split_by_source(pairs, val_fraction=0.1, test_fraction=0.1, seed=6) != first
    position = {pair: i for i, pair in enumerate(pairs)}
    for split in first.values():
        assert [position[p] for p in split] == sorted(position[p] for p in split)


def test_split_by_source_zero_fractions() -> None:
    pairs = _corpus(10)
    assert split_by_source(pairs, val_fraction=0, test_fraction=0) == {
        "train": pairs,
        "val": [],
        "test": [],
    }


@pytest.mark.parametrize(
    ("val_fraction", "test_fraction", "message"),
    [
        (-0.1, 0.1, "val_fraction"),
        (1.0, 0.0, "val_fraction"),
        (0.1, 1.5, "test_fraction"),
        (0.1, float("nan"), "test_fraction"),
        (0.5, 0.5, "less than 1"),
    ],
)
def test_split_by_source_rejects_bad_fractions(
    val_fraction: float, test_fraction: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        split_by_source(_corpus(10), val_fraction=val_fraction, test_fraction=test_fraction)


@pytest.mark.slow
def test_real_data(shared_data_dir: Path) -> None:
    if not (shared_data_dir / "multi30k").is_dir():
        pytest.skip(f"no multi30k folder in {shared_data_dir}")
    val = read_parallel(shared_data_dir / "multi30k" / "val", "en", "fr")
    assert len(val) == 1014
    assert all(src and tgt for src, tgt in val)
    tatoeba = read_tsv_pairs(shared_data_dir / "tatoeba-fra-eng" / "fra.txt.gz")
    assert len(tatoeba) == 167130
    assert tatoeba[0] == ("Go.", "Va !")
    assert not any("\u202f" in tgt or "\u00a0" in tgt for _, tgt in tatoeba)
    assert drop_empty_pairs(tatoeba)[1] == 0

"""Loading named corpora: every split a run needs must hold sentence pairs."""

import pytest

from mintransformer.data.corpora import load_corpus, parallel_spec, tsv_spec

PAIRS = [("one", "un"), ("two", "deux"), ("three", "trois"), ("four", "quatre")]


def write_parallel(prefix, pairs, src="en", tgt="fr"):
    """PREFIX.SRC and PREFIX.TGT holding `pairs`, one per line."""
    for lang, side in ((src, 0), (tgt, 1)):
        text = "".join(f"{pair[side]}\n" for pair in pairs)
        prefix.with_name(f"{prefix.name}.{lang}").write_text(text, encoding="utf-8")
    return str(prefix)


def write_tsv(path, pairs):
    path.write_text("".join(f"{src}\t{tgt}\n" for src, tgt in pairs), encoding="utf-8")
    return str(path)


def test_parallel_files_load_with_blank_pairs_dropped(tmp_path):
    train = write_parallel(tmp_path / "train", [*PAIRS, ("", "vide")])
    val = write_parallel(tmp_path / "val", PAIRS[:1])
    splits = load_corpus(parallel_spec(train, val, "en", "fr"))
    assert splits == {"train": PAIRS, "val": PAIRS[:1]}


@pytest.mark.parametrize(
    ("empty_split", "pairs", "message"),
    [
        ("val", [], r"the val split is empty: .*empty\.en and .*empty\.fr hold no sentence"),
        ("val", [("", ""), ("  ", "")], r"the val split is empty: .*\(2 with an empty side"),
        ("train", [("", "")], r"the train split is empty: .*empty\.en and .*empty\.fr"),
        ("test", [], r"the test split is empty: .*empty\.en"),
    ],
)
def test_an_empty_parallel_split_is_named_with_its_files(tmp_path, empty_split, pairs, message):
    files = {"train": PAIRS, "val": PAIRS, "test": PAIRS, empty_split: pairs}
    prefixes = {
        split: write_parallel(tmp_path / ("empty" if split == empty_split else split), pairs)
        for split, pairs in files.items()
    }
    spec = parallel_spec(prefixes["train"], prefixes["val"], "en", "fr", prefixes["test"])
    with pytest.raises(ValueError, match=message):
        load_corpus(spec)


def test_a_tsv_fraction_too_small_for_the_file_is_refused(tmp_path):
    path = write_tsv(tmp_path / "pairs.tsv", PAIRS)
    with pytest.raises(ValueError, match=r"the val split is empty: --val-fraction 0\.02 .*pairs"):
        load_corpus(tsv_spec(path, val_fraction=0.02, test_fraction=0.25))
    with pytest.raises(ValueError, match=r"the test split is empty: .*\(0: no test split\)"):
        load_corpus(tsv_spec(path, val_fraction=0.25, test_fraction=0.02))
    splits = load_corpus(tsv_spec(path, val_fraction=0.25, test_fraction=0))
    assert len(splits["val"]) == 1 and splits["test"] == []


def test_an_empty_tsv_file_is_refused(tmp_path):
    path = write_tsv(tmp_path / "pairs.tsv", [])
    with pytest.raises(ValueError, match=r"the train split is empty: .*pairs\.tsv holds no"):
        load_corpus(tsv_spec(path))

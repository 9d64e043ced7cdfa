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


def mixture_files(tmp_path):
    """A parallel corpus and a TSV corpus that shares sources with its held-out splits."""
    main_train = [(f"main {i}", f"principal {i}") for i in range(20)] + [("shared", "partagé")]
    train = write_parallel(tmp_path / "train", main_train)
    val = write_parallel(tmp_path / "val", [("main val", "val principal")])
    test = write_parallel(tmp_path / "test", [("Main test.", "test principal")])
    mix_pairs = [(f"extra {i}", f"en plus {i}") for i in range(200)]
    mix_pairs += [("main test", "un doublon du test"), ("main val!", "un doublon du val")]
    mix_pairs += [("shared", "partagé aussi")]
    tsv = write_tsv(tmp_path / "mix.tsv", mix_pairs)
    return parallel_spec(train, val, "en", "fr", test), tsv, main_train


def test_a_mixed_in_tsv_adds_its_training_pairs_and_none_a_held_out_split_has(tmp_path):
    from mintransformer.data.corpora import with_mix
    from mintransformer.data.parallel import source_key

    spec, tsv, main_train = mixture_files(tmp_path)
    alone = load_corpus(tsv_spec(tsv, 0.1, 0.1))
    splits = load_corpus(with_mix(spec, tsv, val_fraction=0.1, test_fraction=0.1))
    assert splits["val"] == [("main val", "val principal")]
    assert splits["mix_val"] == alone["val"] and splits["mix_test"] == alone["test"]
    held_out = {
        source_key(source)
        for name in ("val", "test", "mix_val", "mix_test")
        for source, _ in splits[name]
    }
    expected = [pair for pair in main_train + alone["train"] if source_key(pair[0]) not in held_out]
    assert splits["train"] == expected
    # the duplicates of the main corpus's val and test ("Main test." ~ "main test") are out
    assert not {"main test", "main val!"} & {source for source, _ in splits["train"]}
    assert len(expected) > len(main_train)


@pytest.mark.parametrize("ratio", [0, 0.5, 2, 100])
def test_a_mix_ratio_draws_at_most_that_many_pairs_per_training_pair(tmp_path, ratio):
    from mintransformer.data.corpora import with_mix

    spec, tsv, main_train = mixture_files(tmp_path)
    everything = load_corpus(with_mix(spec, tsv))
    main_part = [pair for pair in everything["train"] if pair in main_train]
    mixed_in = everything["train"][len(main_part) :]
    splits = load_corpus(with_mix(spec, tsv, ratio=ratio))
    assert splits["train"][: len(main_part)] == main_part
    drawn = splits["train"][len(main_part) :]
    assert len(drawn) == min(round(ratio * len(main_part)), len(mixed_in))
    assert set(drawn) <= set(mixed_in) and len(set(drawn)) == len(drawn)
    assert load_corpus(with_mix(spec, tsv, ratio=ratio)) == splits  # drawn once, by the seed
    assert splits["mix_test"] == everything["mix_test"]


def test_a_bad_mix_ratio_is_refused(tmp_path):
    from mintransformer.data.corpora import with_mix

    spec, tsv, _ = mixture_files(tmp_path)
    for ratio in (-0.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="`mix_ratio` must be a non-negative number"):
            with_mix(spec, tsv, ratio=ratio)

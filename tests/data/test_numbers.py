"""Tests for the generated EN->FR number corpus."""

import random

import pytest

from mintransformer.data.numbers import (
    MAX_NUMBER,
    english_words,
    french_words,
    number_corpus,
    number_pairs,
    split_numbers,
)

KNOWN = [
    (0, "zero", "zéro"),
    (1, "one", "un"),
    (7, "seven", "sept"),
    (10, "ten", "dix"),
    (11, "eleven", "onze"),
    (16, "sixteen", "seize"),
    (17, "seventeen", "dix-sept"),
    (19, "nineteen", "dix-neuf"),
    (20, "twenty", "vingt"),
    (21, "twenty-one", "vingt-et-un"),
    (22, "twenty-two", "vingt-deux"),
    (31, "thirty-one", "trente-et-un"),
    (41, "forty-one", "quarante-et-un"),
    (51, "fifty-one", "cinquante-et-un"),
    (60, "sixty", "soixante"),
    (61, "sixty-one", "soixante-et-un"),
    (70, "seventy", "soixante-dix"),
    (71, "seventy-one", "soixante-et-onze"),
    (72, "seventy-two", "soixante-douze"),
    (77, "seventy-seven", "soixante-dix-sept"),
    (80, "eighty", "quatre-vingts"),
    (81, "eighty-one", "quatre-vingt-un"),
    (88, "eighty-eight", "quatre-vingt-huit"),
    (90, "ninety", "quatre-vingt-dix"),
    (91, "ninety-one", "quatre-vingt-onze"),
    (97, "ninety-seven", "quatre-vingt-dix-sept"),
    (99, "ninety-nine", "quatre-vingt-dix-neuf"),
    (100, "one hundred", "cent"),
    (101, "one hundred one", "cent-un"),
    (105, "one hundred five", "cent-cinq"),
    (171, "one hundred seventy-one", "cent-soixante-et-onze"),
    (180, "one hundred eighty", "cent-quatre-vingts"),
    (200, "two hundred", "deux-cents"),
    (201, "two hundred one", "deux-cent-un"),
    (280, "two hundred eighty", "deux-cent-quatre-vingts"),
    (999, "nine hundred ninety-nine", "neuf-cent-quatre-vingt-dix-neuf"),
    (1000, "one thousand", "mille"),
    (1001, "one thousand one", "mille-un"),
    (1100, "one thousand one hundred", "mille-cent"),
    (1200, "one thousand two hundred", "mille-deux-cents"),
    (2000, "two thousand", "deux-mille"),
    (2080, "two thousand eighty", "deux-mille-quatre-vingts"),
    (21000, "twenty-one thousand", "vingt-et-un-mille"),
    (71000, "seventy-one thousand", "soixante-et-onze-mille"),
    (80000, "eighty thousand", "quatre-vingt-mille"),
    (81000, "eighty-one thousand", "quatre-vingt-un-mille"),
    (100000, "one hundred thousand", "cent-mille"),
    (101000, "one hundred one thousand", "cent-un-mille"),
    (200000, "two hundred thousand", "deux-cent-mille"),
    (200200, "two hundred thousand two hundred", "deux-cent-mille-deux-cents"),
    (280000, "two hundred eighty thousand", "deux-cent-quatre-vingt-mille"),
    (
        123456,
        "one hundred twenty-three thousand four hundred fifty-six",
        "cent-vingt-trois-mille-quatre-cent-cinquante-six",
    ),
    (
        999999,
        "nine hundred ninety-nine thousand nine hundred ninety-nine",
        "neuf-cent-quatre-vingt-dix-neuf-mille-neuf-cent-quatre-vingt-dix-neuf",
    ),
]

FRENCH_UNITS = (
    "zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix",
    "onze", "douze", "treize", "quatorze", "quinze", "seize",
)  # fmt: skip
FRENCH_TENS = {"vingt": 20, "trente": 30, "quarante": 40, "cinquante": 50, "soixante": 60}
FRENCH_VOCAB = {*FRENCH_UNITS, *FRENCH_TENS, "vingts", "cent", "cents", "mille", "et"}

ENGLISH_UNITS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
ENGLISH_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
ENGLISH_VOCAB = {*ENGLISH_UNITS, *ENGLISH_TENS, "hundred", "thousand"}

# Every number below 3000 and a seeded sample of the rest: covers every rule, runs in a blink.
SAMPLE = sorted(set(range(3000)) | set(random.Random(1).sample(range(MAX_NUMBER + 1), 20_000)))


def _parse_french(text: str) -> int:
    """An independent reader of French number words, to check the values round-trip."""
    values = {word: i for i, word in enumerate(FRENCH_UNITS)} | FRENCH_TENS
    total = current = 0
    words = text.split("-")
    for i, word in enumerate(words):
        if word == "mille":
            total, current = (current or 1) * 1000, 0
        elif word in ("cent", "cents"):
            current = (current or 1) * 100
        elif word in ("vingt", "vingts") and i and words[i - 1] == "quatre":
            current += 76  # "quatre-vingt" is 4 x 20, and the 4 is already counted.
        elif word != "et":
            current += values[word]
    return total + current


def _parse_english(text: str) -> int:
    values = {word: i for i, word in enumerate(ENGLISH_UNITS)}
    values |= {word: 10 * i for i, word in enumerate(ENGLISH_TENS, start=2)}
    total = current = 0
    for word in text.replace("-", " ").split():
        if word == "thousand":
            total, current = current * 1000, 0
        elif word == "hundred":
            current *= 100
        else:
            current += values[word]
    return total + current


@pytest.mark.parametrize(("n", "english", "french"), KNOWN)
def test_known_numbers(n: int, english: str, french: str) -> None:
    assert english_words(n) == english
    assert french_words(n) == french


def test_french_invariants() -> None:
    for n in SAMPLE:
        text = french_words(n)
        words = text.split("-")
        assert "" not in words, text  # No double, leading or trailing hyphen.
        assert set(words) <= FRENCH_VOCAB, text
        assert " " not in text, text
        assert not text.startswith(("un-cent", "un-mille")), text
        assert "un-cent" not in text, text
        assert "milles" not in text, text
        for plural in ("cents", "vingts"):
            assert plural not in words[:-1], text  # Plural only when it ends the number.
        for i, word in enumerate(words):
            if word == "et":
                assert words[i + 1] in ("un", "onze"), text
                assert words[i - 1] in ("vingt", "trente", "quarante", "cinquante", "soixante")
                assert words[i - 2 : i] != ["quatre", "vingt"], text
        assert _parse_french(text) == n, text


def test_english_invariants() -> None:
    for n in SAMPLE:
        text = english_words(n)
        assert text == text.strip() and "  " not in text and "," not in text, text
        assert "and" not in text.split(), text
        words = text.replace("-", " ").split()
        assert set(words) <= ENGLISH_VOCAB, text
        assert ("zero" in words) == (n == 0), text
        assert _parse_english(text) == n, text


def test_words_are_unique() -> None:
    assert len({french_words(n) for n in SAMPLE}) == len(SAMPLE)
    assert len({english_words(n) for n in SAMPLE}) == len(SAMPLE)


@pytest.mark.parametrize("bad", [-1, MAX_NUMBER + 1, 1.0, "3", None, True, False])
def test_bad_numbers_raise(bad: object) -> None:
    for spell in (english_words, french_words):
        with pytest.raises(ValueError, match=r"n must be an integer in \[0, 999999\]"):
            spell(bad)


def test_number_pairs() -> None:
    assert number_pairs([21, 80]) == [("twenty-one", "vingt-et-un"), ("eighty", "quatre-vingts")]
    assert number_pairs(iter([])) == []


def test_split_numbers_is_disjoint_and_sized() -> None:
    splits = split_numbers(10_000, num_train=5_000, num_val=300, num_test=200, seed=3)
    train, val, test = (set(splits[name]) for name in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (5_000, 300, 200)
    assert len(splits["train"]) == 5_000  # No duplicates inside a split either.
    assert not train & val and not train & test and not val & test
    assert set(range(21)) <= train
    assert all(0 <= n <= 10_000 for n in train | val | test)
    assert all(splits[name] == sorted(splits[name]) for name in splits)


def test_split_numbers_is_deterministic() -> None:
    kwargs = {"num_train": 100, "num_val": 50, "num_test": 50}
    assert split_numbers(5_000, **kwargs, seed=7) == split_numbers(5_000, **kwargs, seed=7)
    assert split_numbers(5_000, **kwargs, seed=7) != split_numbers(5_000, **kwargs, seed=8)


def test_split_numbers_can_use_the_whole_range() -> None:
    splits = split_numbers(30, num_train=25, num_val=3, num_test=3)
    assert sorted(splits["train"] + splits["val"] + splits["test"]) == list(range(31))
    small = split_numbers(5, num_train=6, num_val=0, num_test=0)
    assert small == {"train": [0, 1, 2, 3, 4, 5], "val": [], "test": []}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_train": 50, "num_val": 40, "num_test": 20}, "num_train \\+ num_val \\+ num_test"),
        ({"num_train": 30, "num_val": -1, "num_test": 0}, "num_val"),
        ({"num_train": 30, "num_val": 0, "num_test": -5}, "num_test"),
        ({"num_train": 10, "num_val": 0, "num_test": 0}, "num_train must be at least 21"),
        ({"num_train": 30.0, "num_val": 0, "num_test": 0}, "num_train"),
    ],
)
def test_split_numbers_rejects_bad_sizes(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_numbers(100, **kwargs)


@pytest.mark.parametrize("max_number", [-1, MAX_NUMBER + 1, 10.0, True])
def test_split_numbers_rejects_bad_max_number(max_number: object) -> None:
    with pytest.raises(ValueError, match="max_number"):
        split_numbers(max_number, num_train=1, num_val=0, num_test=0)


def test_number_corpus() -> None:
    corpus = number_corpus(max_number=2_000, num_train=500, num_val=50, num_test=40, seed=1)
    assert [len(corpus[name]) for name in ("train", "val", "test")] == [500, 50, 40]
    assert ("twenty", "vingt") in corpus["train"]
    english = [{en for en, _ in corpus[name]} for name in ("train", "val", "test")]
    assert not english[0] & english[1] and not english[0] & english[2]
    assert number_corpus(2_000, 500, 50, 40, 1) == corpus

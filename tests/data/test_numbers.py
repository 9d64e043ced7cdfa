"""Tests for the generated EN->FR number corpus."""

import random

import pytest

from mintransformer.data.corpora import load_corpus, number_splits, numbers_spec
from mintransformer.data.numbers import (
    ALWAYS_TRAIN,
    MAGNITUDE_NAMES,
    MAX_NUMBER,
    english_length,
    english_words,
    french_words,
    magnitude_of,
    magnitude_report,
    number_corpus,
    number_pairs,
    repeat_rare_numbers,
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
    assert set(ALWAYS_TRAIN) <= train
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
        ({"num_train": 10, "num_val": 0, "num_test": 0}, "num_train must be at least 29"),
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
    assert [len(corpus[name]) for name in ("val", "test")] == [50, 40]
    assert len(set(corpus["train"])) == 500  # Some training pairs are repeated (below).
    assert len(corpus["train"]) > 500
    assert ("twenty", "vingt") in corpus["train"]
    english = [{en for en, _ in corpus[name]} for name in ("train", "val", "test")]
    assert not english[0] & english[1] and not english[0] & english[2]
    assert number_corpus(2_000, 500, 50, 40, 1) == corpus


def test_magnitude_of() -> None:
    cases = {0: 0, 99: 0, 100: 1, 999: 1, 1_000: 2, 9_999: 2, 10_000: 3, 100_000: 4, MAX_NUMBER: 4}
    assert {n: magnitude_of(n) for n in cases} == cases
    assert len(MAGNITUDE_NAMES) == 5
    with pytest.raises(ValueError):
        magnitude_of(MAX_NUMBER + 1)


def test_english_length() -> None:
    assert [english_length(n) for n in (7, 21, 300, 21_000, 123_456)] == [1, 1, 2, 2, 7]


def test_held_out_splits_sample_every_magnitude_and_leave_most_small_numbers_to_train() -> None:
    splits = split_numbers(MAX_NUMBER, num_train=30_000, num_val=1_000, num_test=1_000)
    for name in ("val", "test"):
        counts = [sum(magnitude_of(n) == m for n in splits[name]) for m in range(5)]
        # At most a fifth of the 72 numbers below 100 (and of the 891 hundreds) that may be
        # held out; the rest spread evenly over the larger magnitudes.
        assert counts[:2] == [14, 178], name
        assert all(269 <= c <= 270 for c in counts[2:]) and sum(counts) == 1_000, name
    below_1000 = set(range(1000)) - set(splits["val"]) - set(splits["test"])
    assert below_1000 <= set(splits["train"])  # Every small number not held out trains.


def test_repeat_rare_numbers() -> None:
    train = [5, 7, 300, *range(1_000, 1_100)]  # 3% below 100, 2 two-word numbers
    repeated = repeat_rare_numbers(train, magnitude_share=0.1, length_share=0.05)
    assert repeated == sorted(repeated) and set(repeated) == set(train)
    counts = {n: repeated.count(n) for n in train}
    assert counts[5] == counts[7] == 6  # ceil(0.1 * 103 / 2): 0-99 reach a tenth of 103
    assert counts[300] == 11  # ceil(0.1 * 103 / 1) for the hundreds beats 0.05 * 103 for 2 words
    assert counts[1_000] == 3  # one thousand: ceil(0.05 * 103 / 2) as a two-word number
    assert counts[1_001] == 1
    assert repeat_rare_numbers([]) == []


def test_the_demo_corpus_gives_every_magnitude_and_length_a_share_the_model_learns_from() -> None:
    """The corpus `mintransformer demo` trains on (30,000 numbers; the CLI's default).

    Its earlier form drew numbers evenly over magnitudes and repeated those below 1000 a little:
    0-99 were 2.9% of the training pairs, 0-20 0.66% and two-word numbers ("three hundred",
    "five thousand") 0.10%. Its model got "one" -> "cent-huit" and 10 of 0-20 wrong: a short
    sentence is the start of far more common long ones ("one hundred ..."), and the model had
    barely seen it end. Repeating training numbers until each magnitude holds a tenth of the
    30,000 and each English length a twentieth gives 0-99 7.6% of the pairs, 0-20 2.2% and
    two-word numbers 3.8%, and the demo model then translated all of 0-999 exactly
    (docs/translation.md#the-demo; tests/test_end_to_end.py trains it and checks).
    """
    spec = numbers_spec(num_train=30_000)
    numbers = number_splits(spec)
    train = load_corpus(spec)["train"]
    assert len(train) == len(repeat_rare_numbers(numbers["train"])) == 39_905
    value = {english_words(n): n for n in numbers["train"]}
    trained = [value[english] for english, _ in train]
    assert set(ALWAYS_TRAIN) <= set(trained)

    def share(predicate) -> float:
        return sum(map(predicate, trained)) / len(trained)

    for m, name in enumerate(MAGNITUDE_NAMES):
        assert share(lambda n, m=m: magnitude_of(n) == m) >= 3_000 / 39_905, name
    for length in range(1, 8):
        assert share(lambda n, length=length: english_length(n) == length) >= 1_500 / 39_905
    assert share(lambda n: n <= 20) >= 0.02  # 0.66% before
    assert share(lambda n: english_length(n) == 2) >= 0.035  # 0.10% before
    assert share(lambda n: n < 100) >= 0.075  # 2.9% before


def test_magnitude_report() -> None:
    held_out = [23, 45, 150, 151, 152, 3_000, 40_000, 500_000, 600_000]
    french = {english_words(n): french_words(n) for n in [*held_out, *range(1000)]}
    asked = []

    def translate(sentences: list[str]) -> list[str]:
        asked.extend(sentences)
        return ["cent-huit" if s == "one" else french[s] for s in sentences]

    lines = magnitude_report(translate, held_out, train=[1, 2, 3], per_magnitude=2).splitlines()
    assert lines[1].split() == ["0-99", "2", "/", "2", "100.0%"]
    assert lines[2].split() == ["hundreds", "2", "/", "2", "100.0%"]  # 150 and 151 of the 3
    assert lines[3].split() == ["thousands", "1", "/", "1", "100.0%"]
    assert lines[5].split() == ["hundred", "thousands", "2", "/", "2", "100.0%"]
    assert "every number below 1000 (3 of them training numbers)" in lines[6]
    assert lines[7].split()[-4:] == ["999", "/", "1000", "99.9%"]
    assert lines[8] == "  wrong: one  ->  cent-huit"
    assert len(lines) == 9
    assert len(asked) == 8 + 1000

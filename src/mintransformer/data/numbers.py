"""A generated EN->FR parallel corpus: English number words to French number words.

Translating ``123456`` from "one hundred twenty-three thousand four hundred fifty-six" to
"cent-vingt-trois-mille-quatre-cent-cinquante-six" is a small task with real structure: word
order changes, one English word can become several French words, and some French forms depend
on what follows them. A Transformer has to learn all of this from examples, and every pair is
exactly right, so the corpus is a clean first test of a translation model.

English (American, as written out on a cheque): no "and", no commas, the tens and units joined
by a hyphen, e.g. 105 "one hundred five", 21 "twenty-one".

French, with the 1990 reformed spelling, where a hyphen joins *every* pair of numeral words:

* 0-16 have their own words (zéro, un, ... seize); 17-19 are "dix-sept", "dix-huit", "dix-neuf".
* A unit of 1 after vingt, trente, quarante, cinquante and soixante takes "et": 21 "vingt-et-un",
  and likewise 71 "soixante-et-onze".
* 70-79 count on from soixante (72 "soixante-douze"); 80 is "quatre-vingts" and 90-99 count on
  from it (91 "quatre-vingt-onze"), with no "et" (81 "quatre-vingt-un").
* "cent" takes no "un" (100 "cent", 101 "cent-un"), and "mille" neither (1000 "mille").
* "vingt" in quatre-vingts and a multiplied "cent" take a plural s only when they end the
  number: 80 "quatre-vingts" but 81 "quatre-vingt-un"; 200 "deux-cents" but 201 "deux-cent-un".
  "mille" is not a noun, so a number before it is not at the end: 80000 "quatre-vingt-mille",
  200000 "deux-cent-mille".
* "mille" itself never takes an s: 2000 "deux-mille".

:func:`number_corpus` samples disjoint train / validation / test sets of numbers, so a model is
evaluated only on numbers it has never seen.
"""

import math
import operator
import random
from collections.abc import Iterable

MAX_NUMBER = 999_999
"""The largest number both languages can be written for."""

_EN_UNITS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
_EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")

_FR_UNITS = (
    "zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix",
    "onze", "douze", "treize", "quatorze", "quinze", "seize",
)  # fmt: skip
_FR_TENS = ("", "dix", "vingt", "trente", "quarante", "cinquante", "soixante")


def _check_number(n: object) -> int:
    """Returns ``n`` as an int, or raises ValueError if it is not an int in range."""
    if not isinstance(n, bool):  # bool is an int subclass, but True is not a number to spell.
        try:
            value = operator.index(n)  # Accepts int and integer types such as numpy.int64.
        except TypeError:
            pass
        else:
            if 0 <= value <= MAX_NUMBER:
                return value
    raise ValueError(f"n must be an integer in [0, {MAX_NUMBER}], got {n!r}")


def _english_below_1000(n: int) -> list[str]:
    hundreds, rest = divmod(n, 100)
    words = [_EN_UNITS[hundreds], "hundred"] if hundreds else []
    if rest >= 20:
        tens, unit = divmod(rest, 10)
        words.append(f"{_EN_TENS[tens]}-{_EN_UNITS[unit]}" if unit else _EN_TENS[tens])
    elif rest or not words:
        words.append(_EN_UNITS[rest])
    return words


def english_words(n: int) -> str:
    """Writes a number in lowercase American English words.

    Args:
        n: An integer in ``[0, 999_999]``.

    Returns:
        The words, e.g. ``"one hundred twenty-three thousand four hundred fifty-six"``
        for 123456: no "and", no commas, hyphenated tens ("twenty-one").

    Raises:
        ValueError: If ``n`` is not an integer in range (``bool`` is rejected).
    """
    n = _check_number(n)
    thousands, rest = divmod(n, 1000)
    words = [*_english_below_1000(thousands), "thousand"] if thousands else []
    if rest or not words:
        words += _english_below_1000(rest)
    return " ".join(words)


def _french_below_100(n: int, *, final: bool) -> list[str]:
    """French words for 0 < n < 100; ``final`` says whether they end the whole number."""
    if n < len(_FR_UNITS):
        return [_FR_UNITS[n]]
    if n >= 80:  # 80-99 count on from quatre-vingts, and never take "et".
        rest = n - 80
        if rest == 0:
            return ["quatre", "vingts" if final else "vingt"]
        return ["quatre", "vingt", *_french_below_100(rest, final=final)]
    tens, rest = divmod(n, 10)
    if tens == 7:  # 70-79 count on from soixante: soixante-dix, soixante-et-onze, ...
        tens, rest = 6, n - 60
    base = [_FR_TENS[tens]]
    if rest == 0:
        return base
    if rest in (1, 11):
        base.append("et")
    return base + _french_below_100(rest, final=final)


def _french_below_1000(n: int, *, final: bool) -> list[str]:
    """French words for 0 < n < 1000; ``final`` says whether they end the whole number."""
    hundreds, rest = divmod(n, 100)
    words = []
    if hundreds > 1:
        words += [_FR_UNITS[hundreds], "cents" if rest == 0 and final else "cent"]
    elif hundreds == 1:
        words.append("cent")
    if rest:
        words += _french_below_100(rest, final=final)
    return words


def french_words(n: int) -> str:
    """Writes a number in French words, 1990 reformed spelling (hyphens everywhere).

    Args:
        n: An integer in ``[0, 999_999]``.

    Returns:
        The words joined by hyphens, e.g. ``"cent-vingt-trois-mille-quatre-cent-cinquante-six"``
        for 123456. See the module docstring for the rules.

    Raises:
        ValueError: If ``n`` is not an integer in range (``bool`` is rejected).
    """
    n = _check_number(n)
    if n == 0:
        return _FR_UNITS[0]
    thousands, rest = divmod(n, 1000)
    words = []
    if thousands > 1:
        words += [*_french_below_1000(thousands, final=False), "mille"]
    elif thousands == 1:
        words.append("mille")
    if rest:
        words += _french_below_1000(rest, final=True)
    return "-".join(words)


def number_pairs(numbers: Iterable[int]) -> list[tuple[str, str]]:
    """Writes each number in both languages.

    Args:
        numbers: Integers in ``[0, 999_999]``.

    Returns:
        One ``(english_words(n), french_words(n))`` pair per number, in the same order.

    Raises:
        ValueError: If a number is out of range.
    """
    return [(english_words(n), french_words(n)) for n in numbers]


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


_MAGNITUDES = ((0, 99), (100, 999), (1_000, 9_999), (10_000, 99_999), (100_000, 999_999))


def _draw_by_magnitude(low: int, high: int, count: int, rng: random.Random) -> list[int]:
    """`count` distinct numbers of `low..high`, shuffled, spread evenly over orders of magnitude.

    A uniform draw below a million is 90% six-digit numbers and almost never teaches the
    short ones; here each magnitude gets an equal share (a small one gives all it has).
    """
    buckets = [range(max(low, a), min(high, b) + 1) for a, b in _MAGNITUDES]
    buckets = [b for b in buckets if len(b)]
    quotas = [0] * len(buckets)
    remaining = count
    while remaining:
        open_buckets = [i for i, b in enumerate(buckets) if quotas[i] < len(b)]
        share = max(remaining // len(open_buckets), 1)
        for i in sorted(open_buckets, key=lambda i: len(buckets[i])):
            take = min(share, len(buckets[i]) - quotas[i], remaining)
            quotas[i] += take
            remaining -= take
    drawn = [
        n for bucket, quota in zip(buckets, quotas, strict=True) for n in rng.sample(bucket, quota)
    ]
    rng.shuffle(drawn)
    return drawn


def split_numbers(
    max_number: int, *, num_train: int, num_val: int, num_test: int, seed: int = 0
) -> dict[str, list[int]]:
    """Samples disjoint train / validation / test sets of numbers from ``0..max_number``.

    The numbers 0-20 (those up to ``max_number``) always go to train, so that every base word
    of both languages is seen in training; they count towards ``num_train``. The other numbers
    are drawn at random without replacement, spread evenly over orders of magnitude (as many
    3-digit as 6-digit numbers, where the range allows), so no validation or test number is
    ever a training number and all splits follow the same distribution.

    Args:
        max_number: The largest number that may be drawn, in ``[0, 999_999]``.
        num_train: How many training numbers, including the fixed 0-20.
        num_val: How many validation numbers.
        num_test: How many test numbers.
        seed: Seed of the random draw; the same arguments always give the same split.

    Returns:
        ``{"train": [...], "val": [...], "test": [...]}``, each list sorted ascending.
        Shuffle the training data before batching.

    Raises:
        ValueError: If ``max_number`` is out of range, a size is negative, ``num_train`` is
            smaller than the count of fixed numbers, or the sizes add up to more numbers than
            ``0..max_number`` holds.
    """
    if isinstance(max_number, bool) or not isinstance(max_number, int):
        raise ValueError(f"max_number must be an integer, got {max_number!r}")
    if not 0 <= max_number <= MAX_NUMBER:
        raise ValueError(f"max_number must be in [0, {MAX_NUMBER}], got {max_number}")
    num_train = _check_count("num_train", num_train)
    num_val = _check_count("num_val", num_val)
    num_test = _check_count("num_test", num_test)
    fixed = list(range(min(20, max_number) + 1))
    if num_train < len(fixed):
        raise ValueError(
            f"num_train must be at least {len(fixed)} (the numbers 0..{fixed[-1]} always go to "
            f"train), got {num_train}"
        )
    available = max_number + 1
    if num_train + num_val + num_test > available:
        raise ValueError(
            f"num_train + num_val + num_test = {num_train + num_val + num_test} is more than the "
            f"{available} numbers in 0..max_number={max_number}"
        )
    drawn = _draw_by_magnitude(
        len(fixed), max_number, num_val + num_test + num_train - len(fixed), random.Random(seed)
    )
    return {
        "train": fixed + sorted(drawn[num_val + num_test :]),
        "val": sorted(drawn[:num_val]),
        "test": sorted(drawn[num_val : num_val + num_test]),
    }


def number_corpus(
    max_number: int = MAX_NUMBER,
    num_train: int = 50_000,
    num_val: int = 1_000,
    num_test: int = 1_000,
    seed: int = 0,
) -> dict[str, list[tuple[str, str]]]:
    """Builds the EN->FR number corpus with disjoint train / validation / test splits.

    The defaults give 50,000 training pairs (5% of the numbers below a million, plenty for a
    small Transformer to learn the rules) and 1,000 pairs each to validate and test on.

    Args:
        max_number: The largest number in the corpus, at most 999,999.
        num_train: How many training pairs (the numbers 0-20 are always among them).
        num_val: How many validation pairs.
        num_test: How many test pairs.
        seed: Seed of the random draw of the numbers.

    Returns:
        ``{"train": pairs, "val": pairs, "test": pairs}`` with ``(english, french)`` pairs,
        ordered by number; training numbers of rare magnitudes (below 1000) appear several
        times. See :func:`split_numbers`.

    Raises:
        ValueError: As :func:`split_numbers`.
    """
    splits = split_numbers(
        max_number, num_train=num_train, num_val=num_val, num_test=num_test, seed=seed
    )
    splits["train"] = _repeat_rare_magnitudes(splits["train"])
    return {name: number_pairs(numbers) for name, numbers in splits.items()}


def _repeat_rare_magnitudes(train: list[int], most: int = 10) -> list[int]:
    """Repeats the numbers of magnitudes that hold few numbers (there are only 100 below 100).

    Each magnitude is brought up to a sixth of an even share, repeating a number at most
    `most` times; without this a model rarely sees a short number end and keeps going.
    """
    buckets = [[n for n in train if a <= n <= b] for a, b in _MAGNITUDES]
    buckets = [b for b in buckets if b]
    target = len(train) / len(buckets) / 6
    repeated = []
    for bucket in buckets:
        repeated += bucket * min(most, max(1, math.ceil(target / len(bucket))))
    return repeated


# French word -> the English words it can translate (for alignment checks). Compound rules
# make some words serve several: quatre-vingt-dix ("ninety") uses quatre, vingt and dix.
FRENCH_TO_ENGLISH: dict[str, set[str]] = {
    "un": {"one"},
    "deux": {"two"},
    "trois": {"three"},
    "quatre": {"four", "eighty", "ninety"},
    "cinq": {"five"},
    "six": {"six"},
    "sept": {"seven", "seventeen"},
    "huit": {"eight", "eighteen"},
    "neuf": {"nine", "nineteen"},
    "dix": {"ten", "seventeen", "eighteen", "nineteen", "seventy", "ninety"},
    "onze": {"eleven", "one"},
    "douze": {"twelve", "two"},
    "treize": {"thirteen", "three"},
    "quatorze": {"fourteen", "four"},
    "quinze": {"fifteen", "five"},
    "seize": {"sixteen", "six"},
    "vingt": {"twenty", "eighty", "ninety"},
    "vingts": {"eighty"},
    "trente": {"thirty"},
    "quarante": {"forty"},
    "cinquante": {"fifty"},
    "soixante": {"sixty", "seventy"},
    "cent": {"hundred"},
    "cents": {"hundred"},
    "mille": {"thousand"},
}

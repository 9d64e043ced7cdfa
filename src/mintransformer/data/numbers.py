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
from collections import Counter
from collections.abc import Callable, Iterable

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
MAGNITUDE_NAMES = ("0-99", "hundreds", "thousands", "ten thousands", "hundred thousands")
"""The orders of magnitude the corpus is drawn and scored by, smallest first."""

ALWAYS_TRAIN = (*range(21), 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900)
"""Numbers that always go to train: 0-20, the tens and the round hundreds, each the shortest
number of its form (one English word, or "X hundred"), so every base word of both languages,
and "cents", is seen on its own in training."""

HELD_OUT_SHARE = 5
"""The validation and the test split each take at most 1/HELD_OUT_SHARE of a magnitude's
numbers (beyond :data:`ALWAYS_TRAIN`), so most small numbers stay in training."""

MIN_MAGNITUDE_SHARE = 0.1
"""Training numbers are repeated until each magnitude holds at least this share of them..."""

MIN_LENGTH_SHARE = 0.05
"""... and each sentence length (in English words, 1 to 7) at least this share.

The demo's corpus before these rules had 0-99 at 2.9% of the training pairs (0-20 at 0.66%),
and its model got 10 of 0-20 wrong ("one" -> "cent-huit"): a short sentence is the start of
far more common long ones ("one hundred ..."), and the model had barely seen it end. With the
magnitude rule alone, two-word numbers were 0.2% of the pairs and the model still wrote
"trois-cent-trois" for "three hundred". With both (:func:`repeat_rare_numbers`) the demo model
translates every number below 1000."""


def english_length(n: int) -> int:
    """How many words ``english_words(n)`` has (a hyphenated "twenty-one" is one)."""
    return len(english_words(n).split())


def magnitude_of(n: int) -> int:
    """The index in :data:`MAGNITUDE_NAMES` of ``n``'s order of magnitude (0 for 0-99)."""
    n = _check_number(n)
    return next(i for i, (low, high) in enumerate(_MAGNITUDES) if low <= n <= high)


def _even_quotas(sizes: list[int], count: int) -> list[int]:
    """Splits `count` evenly over buckets of `sizes`; a small bucket gives all it has."""
    quotas = [0] * len(sizes)
    remaining = count
    while remaining:
        open_buckets = [i for i, size in enumerate(sizes) if quotas[i] < size]
        share = max(remaining // len(open_buckets), 1)
        for i in sorted(open_buckets, key=lambda i: sizes[i]):
            take = min(share, sizes[i] - quotas[i], remaining)
            quotas[i] += take
            remaining -= take
    return quotas


def _draw(buckets: list[list[int]], quotas: list[int], rng: random.Random) -> list[list[int]]:
    """Draws each bucket's quota from it (removing the drawn numbers); returns them by bucket."""
    drawn = []
    for bucket, quota in zip(buckets, quotas, strict=True):
        picked = set(rng.sample(bucket, quota))
        drawn.append(sorted(picked))
        bucket[:] = [n for n in bucket if n not in picked]
    return drawn


def split_numbers(
    max_number: int, *, num_train: int, num_val: int, num_test: int, seed: int = 0
) -> dict[str, list[int]]:
    """Samples disjoint train / validation / test sets of numbers from ``0..max_number``.

    The numbers of :data:`ALWAYS_TRAIN` (0-20, the tens and the round hundreds, those up to
    ``max_number``) always go to train, so every base word of both languages is seen on its own
    in training; they count towards ``num_train``. The other numbers are drawn at random
    without replacement, spread evenly over orders of magnitude (as many 3-digit as 6-digit
    numbers, where the range allows; a small magnitude gives all it has), so no validation or
    test number is ever a training number:

    * validation, then test, each take an even share of every magnitude, but at most a fifth
      (:data:`HELD_OUT_SHARE`) of its numbers, so that each magnitude can be scored on numbers
      never seen in training and most of the few small numbers still train (the demo's test
      split: 14 numbers below 100, 180 hundreds, 268-269 of each larger magnitude). Where the
      range is too small for that, they take what they need evenly.
    * train takes an even share of what is left: all of it for the small magnitudes.

    Args:
        max_number: The largest number that may be drawn, in ``[0, 999_999]``.
        num_train: How many training numbers, including those of :data:`ALWAYS_TRAIN`.
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
    fixed = [n for n in ALWAYS_TRAIN if n <= max_number]
    if num_train < len(fixed):
        raise ValueError(
            f"num_train must be at least {len(fixed)} (0-20, the tens and the round hundreds "
            f"up to {fixed[-1]} always go to train), got {num_train}"
        )
    available = max_number + 1
    if num_train + num_val + num_test > available:
        raise ValueError(
            f"num_train + num_val + num_test = {num_train + num_val + num_test} is more than the "
            f"{available} numbers in 0..max_number={max_number}"
        )
    rng = random.Random(seed)
    fixed_set = set(fixed)
    buckets = [
        [n for n in range(low, min(high, max_number) + 1) if n not in fixed_set]
        for low, high in _MAGNITUDES
        if low <= max_number
    ]
    caps = [len(bucket) // HELD_OUT_SHARE for bucket in buckets]
    splits = {}
    for name, count in (("val", num_val), ("test", num_test)):
        sizes = [len(bucket) for bucket in buckets]
        capped = [min(cap, size) for cap, size in zip(caps, sizes, strict=True)]
        quotas = _even_quotas(capped if sum(capped) >= count else sizes, count)
        splits[name] = sorted(n for part in _draw(buckets, quotas, rng) for n in part)
    quotas = _even_quotas([len(bucket) for bucket in buckets], num_train - len(fixed))
    splits["train"] = sorted(fixed + [n for part in _draw(buckets, quotas, rng) for n in part])
    return {name: splits[name] for name in ("train", "val", "test")}


def number_corpus(
    max_number: int = MAX_NUMBER,
    num_train: int = 50_000,
    num_val: int = 1_000,
    num_test: int = 1_000,
    seed: int = 0,
) -> dict[str, list[tuple[str, str]]]:
    """Builds the EN->FR number corpus with disjoint train / validation / test splits.

    The defaults give 50,000 training numbers (5% of the numbers below a million, plenty for a
    small Transformer to learn the rules) and 1,000 pairs each to validate and test on.

    Args:
        max_number: The largest number in the corpus, at most 999,999.
        num_train: How many training numbers (the one-word numbers are always among them).
        num_val: How many validation pairs.
        num_test: How many test pairs.
        seed: Seed of the random draw of the numbers.

    Returns:
        ``{"train": pairs, "val": pairs, "test": pairs}`` with ``(english, french)`` pairs,
        ordered by number. Training numbers of rare magnitudes (below 1000) and rare lengths
        (those ending in "hundred" or "thousand") are repeated, see
        :func:`repeat_rare_numbers`, so ``train`` holds more than ``num_train`` pairs.
        See :func:`split_numbers`.

    Raises:
        ValueError: As :func:`split_numbers`.
    """
    splits = split_numbers(
        max_number, num_train=num_train, num_val=num_val, num_test=num_test, seed=seed
    )
    splits["train"] = repeat_rare_numbers(splits["train"])
    return {name: number_pairs(numbers) for name, numbers in splits.items()}


def repeat_rare_numbers(
    train: list[int],
    magnitude_share: float = MIN_MAGNITUDE_SHARE,
    length_share: float = MIN_LENGTH_SHARE,
) -> list[int]:
    """Repeats training numbers so every magnitude and every sentence length has its share.

    There are only 100 numbers below 100 against 900,000 of six digits, and few numbers end in
    "hundred" or "thousand": drawn evenly, the short and the round numbers are a sliver of the
    training pairs, and a model that has barely seen them end keeps writing. Each number is
    repeated ``r`` times, the least ``r`` that gives its magnitude at least ``magnitude_share``
    of ``len(train)`` and its English length (:func:`english_length`) at least
    ``length_share`` (each number of a group the same number of times); the result stays
    sorted by number. The demo's 30,000 numbers become 39,905 pairs: 0-99 hold 7.6% of them
    (0-20: 2.2%), the hundreds 9.4%, two-word numbers 3.8%.
    """
    target_magnitude = magnitude_share * len(train)
    target_length = length_share * len(train)
    magnitudes = Counter(magnitude_of(n) for n in train)
    lengths = Counter(english_length(n) for n in train)
    repeated = []
    for n in train:
        repeats = max(
            1,
            math.ceil(target_magnitude / magnitudes[magnitude_of(n)]),
            math.ceil(target_length / lengths[english_length(n)]),
        )
        repeated += [n] * repeats
    return repeated


def _spread(numbers: list[int], count: int) -> list[int]:
    """At most `count` of the sorted `numbers`, evenly spaced over them."""
    if len(numbers) <= count:
        return numbers
    return [numbers[i * len(numbers) // count] for i in range(count)]


def magnitude_report(
    translate: Callable[[list[str]], list[str]],
    held_out: Iterable[int],
    train: Iterable[int] = (),
    per_magnitude: int | None = None,
    shown: int = 5,
) -> str:
    """Exact match by order of magnitude on held-out numbers, and on every number below 1000.

    Args:
        translate: English sentences -> French sentences, e.g. ``Translator(...).translate``.
        held_out: Numbers never seen in training (a corpus's test split).
        train: The training numbers, to say how many of 0-999 the model was trained on.
        per_magnitude: Score at most this many held-out numbers of each magnitude (spread
            evenly over it; None: all).
        shown: How many wrong translations to show.

    Returns:
        A table, one line per magnitude and one for 0-999, then up to `shown` errors.
    """
    by_magnitude = [[] for _ in _MAGNITUDES]
    for n in sorted(set(held_out)):
        by_magnitude[magnitude_of(n)].append(n)
    if per_magnitude is not None:
        by_magnitude = [_spread(group, per_magnitude) for group in by_magnitude]
    below_1000 = list(range(1000))
    trained = len(set(train) & set(below_1000))
    rows = list(zip(MAGNITUDE_NAMES, by_magnitude, strict=True))
    rows.append(("0-999, every one", below_1000))
    numbers = [n for _, group in rows for n in group]
    outputs = dict(zip(numbers, translate([english_words(n) for n in numbers]), strict=True))
    width = max(len(name) for name, _ in rows)
    lines = ["exact match by magnitude, on held-out numbers (never in training):"]
    for name, group in rows:
        if group is below_1000:
            lines.append(f"and on every number below 1000 ({trained} of them training numbers):")
        right = sum(outputs[n] == french_words(n) for n in group)
        rate = f"{100 * right / len(group):5.1f}%" if group else "    -"
        lines.append(f"  {name:<{width}}  {right:>4} / {len(group):<4}  {rate}")
    wrong = [n for n in dict.fromkeys(numbers) if outputs[n] != french_words(n)]
    lines += [f"  wrong: {english_words(n)}  ->  {outputs[n]}" for n in wrong[:shown]]
    if len(wrong) > shown:
        lines.append(f"  ... and {len(wrong) - shown} more wrong")
    return "\n".join(lines)


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

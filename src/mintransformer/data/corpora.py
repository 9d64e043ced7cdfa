"""Named corpora for translation runs: the generated numbers, parallel files, TSV pairs.

A corpus is described by a small dict (kept in the run's config.json, so a run
records where its data came from) and loads as {"train", "val"[, "test"]} lists
of (source, target) pairs. A corpus may have the training pairs of a TSV corpus mixed
in (`with_mix`); it then also has that corpus's held-out splits, "mix_val" and
"mix_test", and no training pair shares a source sentence with any held-out split.
"""

from __future__ import annotations

import random
from pathlib import Path

from mintransformer.core import checks
from mintransformer.data import numbers, parallel


def numbers_spec(
    num_train: int = 50_000,
    num_val: int = 1_000,
    num_test: int = 1_000,
    max_number: int = numbers.MAX_NUMBER,
    seed: int = 0,
) -> dict:
    """The embedded English -> French number-words corpus."""
    return dict(
        kind="numbers",
        num_train=num_train,
        num_val=num_val,
        num_test=num_test,
        max_number=max_number,
        seed=seed,
    )


def parallel_spec(train: str, val: str, src: str, tgt: str, test: str | None = None) -> dict:
    """Files PREFIX.SRC / PREFIX.TGT (the Multi30k layout), one prefix per split."""
    spec = dict(kind="parallel", train=_absolute(train), val=_absolute(val), src=src, tgt=tgt)
    if test:
        spec["test"] = _absolute(test)
    return spec


def tsv_spec(
    path: str, val_fraction: float = 0.02, test_fraction: float = 0.02, seed: int = 0
) -> dict:
    """SRC<TAB>TGT lines (Tatoeba/Anki), split by source sentence so none leaks across splits.
    A ValueError for fractions that `parallel.split_by_source` would refuse."""
    parallel.check_split_fractions(val_fraction, test_fraction)
    return dict(
        kind="tsv",
        path=_absolute(path),
        val_fraction=val_fraction,
        test_fraction=test_fraction,
        seed=seed,
    )


def with_mix(
    spec: dict,
    tsv: str,
    ratio: float | None = None,
    val_fraction: float = 0.02,
    test_fraction: float = 0.02,
    seed: int = 0,
) -> dict:
    """`spec` with the training pairs of the TSV corpus `tsv` (split as `tsv_spec` splits
    it) added to its own.

    Args:
        ratio: at most this many mixed-in pairs per training pair of `spec`, drawn once
            with `seed` (0: none, though its held-out splits still load); None: all.
    Raises:
        ValueError: a negative or non-finite `ratio`, or fractions `tsv_spec` refuses.
    """
    if ratio is not None:
        ratio = checks.non_negative_number(ratio, "mix_ratio")
    mix = tsv_spec(tsv, val_fraction, test_fraction, seed)
    return {**spec, "mix": mix, "mix_ratio": ratio}


def corpus_spec(
    *,
    train: str | None = None,
    val: str | None = None,
    test: str | None = None,
    src: str | None = None,
    tgt: str | None = None,
    tsv: str | None = None,
    val_fraction: float = 0.02,
    test_fraction: float = 0.02,
    seed: int = 0,
    num_train: int = 30_000,
) -> dict:
    """The corpus these options name: a TSV file, parallel files, else the numbers."""
    if tsv:
        return tsv_spec(tsv, val_fraction, test_fraction, seed)
    if train:
        if not (val and src and tgt):
            raise ValueError("training files (--train) need --val, --src and --tgt too")
        return parallel_spec(train, val, src, tgt, test)
    return numbers_spec(num_train=num_train)


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def number_splits(spec: dict) -> dict[str, list[int]]:
    """The numbers in each split of a numbers spec (before training numbers are repeated)."""
    return numbers.split_numbers(**{k: v for k, v in spec.items() if k != "kind"})


def load_corpus(spec: dict) -> dict[str, list[tuple[str, str]]]:
    """Loads the splits a spec describes; pairs with an empty side are dropped.

    Raises:
        FileNotFoundError: if a file is missing.
        ValueError: if a file cannot be read, or a split (train, val, or a test split
            the spec asks for) holds no pair once empty pairs are dropped, naming the
            split and its files.
    """
    kind = spec.get("kind")
    if kind == "numbers":
        options = {k: v for k, v in spec.items() if k != "kind"}
        splits = numbers.number_corpus(**options)
    elif kind == "parallel":
        splits = {
            split: parallel.read_parallel(spec[split], spec["src"], spec["tgt"])
            for split in ("train", "val", "test")
            if split in spec
        }
    elif kind == "tsv":
        pairs = parallel.read_tsv_pairs(spec["path"])
        splits = parallel.split_by_source(
            pairs,
            val_fraction=spec["val_fraction"],
            test_fraction=spec["test_fraction"],
            seed=spec["seed"],
        )
    else:
        raise ValueError(f"unknown corpus kind {kind!r}: expected numbers, parallel or tsv")
    total = sum(len(pairs) for pairs in splits.values())
    kept = {}
    for name, pairs in splits.items():
        kept[name], dropped = parallel.drop_empty_pairs(pairs)
        if not kept[name] and _asks_for(spec, name):
            reason = _empty_reason(spec, name, total, dropped)
            raise ValueError(f"the {name} split is empty: {reason}")
    if "mix" in spec:
        kept = _mix_in(kept, load_corpus(spec["mix"]), spec.get("mix_ratio"), spec["mix"]["seed"])
    return kept


def _mix_in(splits: dict, mix: dict, ratio: float | None, seed: int) -> dict:
    """`splits` with `mix`'s training pairs added (at most `ratio` per training pair of
    `splits`, drawn with `seed`) and its held-out splits as "mix_val" and "mix_test";
    training pairs whose source (`parallel.source_key`) is in a held-out split of
    either corpus are left out."""
    held_out = {
        parallel.source_key(source)
        for corpus in (splits, mix)
        for name in ("val", "test")
        for source, _ in corpus.get(name, ())
    }

    def unseen(pairs: list) -> list:
        return [pair for pair in pairs if parallel.source_key(pair[0]) not in held_out]

    train, mixed = unseen(splits["train"]), unseen(mix["train"])
    if not train:
        raise ValueError("no training pair is left once those in a held-out split are removed")
    if ratio is not None and round(ratio * len(train)) < len(mixed):
        chosen = random.Random(seed).sample(range(len(mixed)), round(ratio * len(train)))
        mixed = [mixed[i] for i in sorted(chosen)]
    held = {f"mix_{name}": mix[name] for name in ("val", "test") if name in mix}
    return {**splits, "train": train + mixed, **held}


def _asks_for(spec: dict, split: str) -> bool:
    """Whether `spec` needs `split` to hold pairs: train and val always, test if asked for."""
    if split != "test":
        return True
    return bool(spec.get("test") or spec.get("test_fraction") or spec.get("num_test"))


def _empty_reason(spec: dict, split: str, total: int, dropped: int) -> str:
    """Why `split` of `spec` holds no pair, naming the files it came from.

    `total` counts the pairs of the whole corpus, `dropped` those of the split that
    had an empty side.
    """
    if spec["kind"] == "parallel":
        files = f"{spec[split]}.{spec['src']} and {spec[split]}.{spec['tgt']}"
        blank = f" ({dropped} with an empty side dropped)" if dropped else ""
        return f"{files} hold no sentence pair{blank}; give --{split} files with text"
    if spec["kind"] == "tsv":
        return _empty_tsv_reason(spec, split, total, dropped)
    return f"the {spec['kind']} corpus gives none; ask for more"


def _empty_tsv_reason(spec: dict, split: str, total: int, dropped: int) -> str:
    """`_empty_reason` for a TSV file split by `parallel.split_by_source`."""
    path = spec["path"]
    if dropped:
        return f"the {dropped} pairs of {path} dealt to it all have an empty side"
    if not total:
        return f"{path} holds no sentence pair"
    if split == "train":
        return (
            f"the val and test fractions take all {total} pairs of {path}; "
            "lower --val-fraction or --test-fraction, or add pairs"
        )
    fraction = spec[f"{split}_fraction"]
    none_allowed = " (0: no test split)" if split == "test" else ""
    return (
        f"--{split}-fraction {fraction:g} of the source sentences of {path} ({total} pairs) "
        f"is less than one; raise --{split}-fraction{none_allowed} or add pairs"
    )

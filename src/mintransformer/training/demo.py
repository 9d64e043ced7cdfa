"""The demo: a small Transformer trained on the embedded English -> French number words.

Everything it needs is generated (`data.numbers`), so it runs with no download. After
training it reports exact match per order of magnitude on held-out numbers, and on
every number below 1000 (`data.numbers.magnitude_report`): BLEU says little here, as
most translations are one or two tokens after its tokenisation.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from mintransformer.config import make_config
from mintransformer.data.corpora import number_splits, numbers_spec
from mintransformer.data.numbers import magnitude_report
from mintransformer.inference.translator import Translator
from mintransformer.training import loop, translation


def run_demo(
    path: str | Path = "runs/numbers",
    num_train: int = 30_000,
    report: int = 200,
    beam_size: int = 1,
    alpha: float = 0.6,
    verbose: int = 1,
) -> loop.Trained:
    """Trains the `numbers` preset in `path` (replacing a run there), then prints exact
    match on up to `report` held-out numbers of each magnitude (0: no report) and on all of
    0-999, decoded with `beam_size` and `alpha`."""
    spec = numbers_spec(num_train=num_train)

    def by_magnitude(model, tokenizer, config, splits, verbose: int) -> str | None:
        if report <= 0:
            return None
        numbers = number_splits(spec)
        translator = Translator.from_model(model, tokenizer, config=config)
        translate = functools.partial(
            translator.translate, beam_size=beam_size, alpha=alpha, progress=verbose > 0
        )
        return magnitude_report(translate, numbers["test"], numbers["train"], report)

    task = dataclasses.replace(translation.TASK, held_out=by_magnitude)
    config = make_config("translation", "numbers", data=spec)
    return loop.train(task, path, config, overwrite=True, verbose=verbose)

"""The demo: a small Transformer trained on the embedded English -> French number words.

Everything it needs is generated (`data.numbers`), so it runs with no download.
"""

from __future__ import annotations

from pathlib import Path

from mintransformer.config import make_config
from mintransformer.data.corpora import numbers_spec
from mintransformer.training import translation


def run_demo(
    path: str | Path = "runs/numbers",
    num_train: int = 30_000,
    report: int = 1000,
    beam_size: int = 1,
    verbose: int = 1,
):
    """Trains the `numbers` preset in `path` (replacing a run there) and reports on
    `report` held-out numbers; returns what `translation.train` returns."""
    config = make_config("translation", "numbers", data=numbers_spec(num_train=num_train))
    return translation.train(
        path, config, overwrite=True, report=report, beam_size=beam_size, verbose=verbose
    )

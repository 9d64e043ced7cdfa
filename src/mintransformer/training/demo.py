"""The demo: a small Transformer trained on the embedded English -> French number words.

Everything it needs is generated (`data.numbers`), so it runs with no download. After
training it reports exact match per order of magnitude on held-out numbers, and on
every number below 1000 (`data.numbers.magnitude_report`): BLEU says little here, as
most translations are one or two tokens after its tokenisation.

The demo trains in a folder that is missing, empty, or holds an earlier demo run (a
translation run of the `numbers` preset on the numbers corpus, as `is_demo_run` tells),
and replaces that run; it refuses any other folder unless told to overwrite it.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from pathlib import Path

from mintransformer.config import TranslationConfig, make_config
from mintransformer.data.corpora import number_splits, numbers_spec
from mintransformer.data.numbers import magnitude_report
from mintransformer.inference.translator import Translator
from mintransformer.runs.directory import RunDirectory
from mintransformer.training import loop, translation

EARLIER_DEMO_SETTINGS = (
    {"epochs": 6, "layer_norm_epsilon": 1e-6},
    {"layer_norm_epsilon": 1e-6},
)
"""How the `numbers` preset differed in earlier releases: their demo runs are replaced too."""

# A sentence of every magnitude the demo reports, for the commands it suggests.
EXAMPLE = "three hundred twenty-one thousand four hundred fifty-six"


def is_demo_run(config: TranslationConfig) -> bool:
    """Whether `config` is one the demo writes, or wrote in an earlier release: the
    `numbers` preset, unchanged, on the numbers corpus."""
    if config.data.get("kind") != "numbers":
        return False
    demos = [{}, *EARLIER_DEMO_SETTINGS]
    return any(
        config == make_config("translation", "numbers", data=config.data, **settings)
        for settings in demos
    )


def check_replaceable(path: str | Path) -> None:
    """Raises FileExistsError unless `path` is missing, empty or holds an earlier demo run."""
    folder = Path(path)
    if not folder.exists() or (folder.is_dir() and not any(folder.iterdir())):
        return
    try:
        config = RunDirectory(folder).config()
    except (OSError, ValueError):
        what = "something other than a run"
    else:
        if isinstance(config, TranslationConfig) and is_demo_run(config):
            return
        what = f"a {config.task} run"
    raise FileExistsError(
        f"{folder} holds {what}, not an earlier demo run (the only kind the demo replaces): "
        "give another --run, or pass --overwrite to replace it (its checkpoints are then lost)."
    )


def next_commands(path: str | Path) -> list[list[str]]:
    """The commands that use the demo's run at `path` next: translate a sentence, plot its
    cross-attention, serve the run's page and API."""
    run = str(path)
    return [
        ["mintransformer", "translate", "--run", run, "--beam", "4", EXAMPLE],
        [
            "mintransformer",
            "attention",
            "--run",
            run,
            EXAMPLE,
            "--kind",
            "cross",
            "--mean",
            "-o",
            "cross.png",
        ],  # fmt: skip
        ["mintransformer", "serve", "--run", run],
    ]


def next_steps(path: str | Path) -> str:
    """What `run_demo` prints last: each of `next_commands`, under what it does."""
    what = [
        "translate a sentence of your own",
        "plot its cross-attention",
        "serve the run's page and JSON API (http://127.0.0.1:8000/)",
    ]
    lines = ["next, with the model just trained:"]
    for command, purpose in zip(next_commands(path), what, strict=True):
        lines += [f"  {purpose}:", f"    {shlex.join(command)}"]
    return "\n".join(lines)


def run_demo(
    path: str | Path = "runs/numbers",
    num_train: int = 30_000,
    report: int = 200,
    beam_size: int = 1,
    alpha: float = 0.6,
    verbose: int = 1,
    overwrite: bool = False,
) -> loop.Trained:
    """Trains the `numbers` preset in `path`, then prints exact match on up to `report`
    held-out numbers of each magnitude (0: no report) and on all of 0-999, decoded with
    `beam_size` and `alpha`, and the commands to run next (`next_steps`).

    `path` must be missing, empty or hold an earlier demo run, which is replaced; with
    `overwrite`, any run there is replaced.

    Raises:
        FileExistsError: if `path` holds something else and `overwrite` is False.
    """
    if not overwrite:
        check_replaceable(path)
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
    trained = loop.train(task, path, config, overwrite=True, verbose=verbose)
    print(next_steps(path))
    return trained

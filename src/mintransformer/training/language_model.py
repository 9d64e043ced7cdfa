"""Training a language model on a text file: lines -> tokenizer -> windows -> model -> loop.

`train` is what `mintransformer train lm` calls. The text's token stream
(`data.windows`) is cut into windows of `max_length + 1` tokens; the last
`val_fraction` of them (the end of the file) is held out for validation. The loop
(`training.loop.fit`) checkpoints, resumes and averages, as for translation.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mintransformer.config import LanguageModelConfig
from mintransformer.data.text import read_text
from mintransformer.data.token_stream import token_stream
from mintransformer.data.windows import WindowBatches, make_windows
from mintransformer.generation import generate_text  # noqa: F401  (it was defined here)
from mintransformer.models.language_model import LanguageModel
from mintransformer.run import RunDirectory
from mintransformer.tokenizer import Tokenizer
from mintransformer.training import loop
from mintransformer.training.data_parallel import DataParallel, shard


def split_windows(
    tokenizer: Tokenizer, lines: Sequence[str], config: LanguageModelConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Train and validation windows `(n, max_length + 1)`; validation is the text's end.

    Raises:
        ValueError: if the text gives fewer than two windows.
    """
    stream = token_stream(tokenizer, lines)
    windows = make_windows(stream, config.max_length)
    num_val = max(1, round(config.val_fraction * len(windows)))
    if len(windows) - num_val < 1:
        raise ValueError(
            f"{config.text} gives {len(stream)} tokens, too few for a training and a "
            f"validation window of max_length + 1 = {config.max_length + 1} tokens: give "
            "more text or a smaller --max-length."
        )
    return windows[:-num_val], windows[-num_val:]


def train_language_model(
    run: RunDirectory, lines: Sequence[str], resume: bool = False, verbose: int = 1
) -> tuple[LanguageModel, Tokenizer]:
    """Trains (or resumes) the run's language model on `lines` (from `data.text.read_text`).

    Returns:
        the model holding the final (averaged) weights, and the tokenizer.
    """
    config = loop.start(run, LanguageModelConfig)
    if not 0 < config.val_fraction < 1:
        raise ValueError(f"`val_fraction` must be in (0, 1), got {config.val_fraction}.")
    tokenizer = loop.prepare_tokenizer(run, lines, resume, vocab_size=config.vocab_size)
    train_windows, val_windows = split_windows(tokenizer, lines, config)
    batch_size = max(1, config.max_tokens // config.max_length)
    train = WindowBatches(train_windows, batch_size, shuffle=True, seed=config.seed)
    val = WindowBatches(val_windows, batch_size, shuffle=False)
    train, val = shard(train, val, tokenizer.pad_id)
    return loop.build_and_fit(run, config, tokenizer, train, val, resume, verbose), tokenizer


def _load_data(config: LanguageModelConfig):
    return read_text(config.text)


def train(
    path: str | Path,
    config: LanguageModelConfig | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    verbose: int = 1,
    data_parallel: DataParallel | None = None,
) -> tuple[LanguageModel, Tokenizer]:
    """Trains a new run in `path` on `config.text` (or resumes the run there).

    `data_parallel` trains on several devices (JAX; `training.data_parallel`).
    """
    with loop.open_run(
        path, config, LanguageModelConfig, resume, overwrite, _load_data, data_parallel
    ) as (run, config, lines):
        print(f"data: {len(lines):,} lines of {config.text}")
        return train_language_model(run, lines, resume=resume, verbose=verbose)

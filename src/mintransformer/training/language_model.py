"""Training a language model on a text file: lines -> tokenizer -> windows -> model -> loop.

`train` is what `mintransformer train lm` calls. The text's token stream
(`data.windows`) is cut into windows of `max_length + 1` tokens; the last
`val_fraction` of them (the end of the file) is held out for validation. The loop
(`training.loop.train`) does the rest, as for translation.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mintransformer.config import LanguageModelConfig
from mintransformer.data.text import read_text
from mintransformer.data.token_stream import token_stream
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.data.windows import WindowBatches, make_windows
from mintransformer.models.language_model import LanguageModel
from mintransformer.training import loop
from mintransformer.training.losses import MaskedAccuracy, MaskedLoss
from mintransformer.training.optimizer import compile_for_training


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


def make_batches(tokenizer: Tokenizer, lines: Sequence[str], config: LanguageModelConfig):
    """Training and validation `WindowBatches` of `max_tokens // max_length` windows each."""
    if not 0 < config.val_fraction < 1:
        raise ValueError(f"`val_fraction` must be in (0, 1), got {config.val_fraction}.")
    train_windows, val_windows = split_windows(tokenizer, lines, config)
    batch_size = max(1, config.max_tokens // config.max_length)
    train = WindowBatches(train_windows, batch_size, shuffle=True, seed=config.seed)
    return train, WindowBatches(val_windows, batch_size, shuffle=False)


def compile_model(model: LanguageModel, config: LanguageModelConfig, steps_per_epoch: int):
    """The warm-up Adam with the label-smoothed next-token loss and accuracy, padding ignored."""
    loss = MaskedLoss(config.label_smoothing, pad_id=Tokenizer.pad_id)
    metrics = [MaskedAccuracy(pad_id=Tokenizer.pad_id)]
    return compile_for_training(model, config, steps_per_epoch, loss, metrics)


TASK = loop.Task(
    config_class=LanguageModelConfig,
    load_data=lambda config: read_text(config.text),
    describe=lambda config, lines: f"data: {len(lines):,} lines of {config.text}",
    tokenizer_texts=lambda lines, config: lines,
    tokenizer_options=lambda config: {"vocab_size": config.vocab_size},
    make_batches=make_batches,
    compile=compile_model,
)


def train(
    path: str | Path, config: LanguageModelConfig | None = None, **options
) -> tuple[LanguageModel, Tokenizer]:
    """Trains a new run in `path` on `config.text` (or resumes the run there).

    `options` are `loop.train`'s (`resume`, `overwrite`, `verbose`, `data_parallel`).
    """
    trained = loop.train(TASK, path, config, **options)
    return trained.model, trained.tokenizer

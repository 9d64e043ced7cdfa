"""Training a language model on a text file: lines -> tokenizer -> windows -> fit -> run dir.

`train_language_model` is what `mintransformer train lm` calls. The text's token
stream (`data.text`) is cut into windows of `max_length + 1` tokens; the last
`val_fraction` of them (the end of the file) is held out for validation. Training,
checkpoints, exact resume and the final checkpoint averaging are those of
translation (`training.translation.fit_run`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import keras
import numpy as np

from mintransformer.data.text import (
    WindowBatches,
    decode_text,
    make_windows,
    prompt_ids,
    token_stream,
)
from mintransformer.decoding.sampling import generate
from mintransformer.models.language_model import LanguageModel
from mintransformer.run import LanguageModelConfig, RunDirectory
from mintransformer.tokenizer import Tokenizer
from mintransformer.training import checkpoints
from mintransformer.training.translation import compile_for_training, fit_run, model_variables


def build_model(config: LanguageModelConfig, vocab_size: int) -> LanguageModel:
    """The `LanguageModel` a config describes, built and ready."""
    model = LanguageModel(
        config.num_layers,
        config.d_model,
        config.num_heads,
        config.dff,
        vocab_size,
        config.max_length,
        dropout_rate=config.dropout_rate,
        pad_id=Tokenizer.pad_id,
    )
    model(np.ones((1, 2), "int32"))
    return model


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
    config = run.config(LanguageModelConfig)
    if not 0 < config.val_fraction < 1:
        raise ValueError(f"`val_fraction` must be in (0, 1), got {config.val_fraction}.")
    keras.utils.set_random_seed(config.seed)
    if resume and run.tokenizer_path.is_file():
        tokenizer = Tokenizer.load(run.tokenizer_path)
    else:
        tokenizer = Tokenizer.train(lines, vocab_size=config.vocab_size)
        tokenizer.save(run.tokenizer_path)
    train_windows, val_windows = split_windows(tokenizer, lines, config)
    batch_size = max(1, config.max_tokens // config.max_length)
    train = WindowBatches(train_windows, batch_size, shuffle=True, seed=config.seed)
    val = WindowBatches(val_windows, batch_size, shuffle=False)
    model = build_model(config, tokenizer.vocab_size)
    compile_for_training(model, config, len(train))
    fit_run(run, model, train, val, config, resume, verbose)
    return model, tokenizer


def load_trained_language_model(
    run: RunDirectory,
) -> tuple[LanguageModel, Tokenizer, LanguageModelConfig]:
    """The model (final weights), tokenizer and config of a finished language-model run."""
    config = run.config(LanguageModelConfig)
    tokenizer = Tokenizer.load(run.tokenizer_path)
    model = build_model(config, tokenizer.vocab_size)
    checkpoints.load_variables(run.weights_path, model_variables(model))
    return model, tokenizer, config


def generate_text(
    model: LanguageModel,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = 50,
    **options,
) -> list[str]:
    """Each prompt followed by its generated continuation, as text (</s> = line break).

    A prompt too long to leave room for `max_new_tokens` keeps its last tokens,
    with a warning. `options` are those of `decoding.sampling.generate`.
    """
    if max_new_tokens > model.max_length:
        raise ValueError(
            f"max_new_tokens ({max_new_tokens}) exceeds the model's context of "
            f"max_length={model.max_length} tokens."
        )
    room = model.max_length - max_new_tokens + 1
    encoded = [prompt_ids(tokenizer, text) for text in prompts]
    if any(len(ids) > room for ids in encoded):
        warnings.warn(
            f"prompts longer than {room} tokens keep only their last {room} to leave room "
            f"for {max_new_tokens} new tokens in the model's {model.max_length} positions.",
            stacklevel=2,
        )
        encoded = [ids[-room:] for ids in encoded]
    generated = generate(model, encoded, max_new_tokens=max_new_tokens, **options)
    return [decode_text(tokenizer, p + g) for p, g in zip(encoded, generated, strict=True)]

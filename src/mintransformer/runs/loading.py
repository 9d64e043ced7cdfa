"""From a config to a model, and from a run directory to a ready model.

`build_model` is the one place where config fields become model arguments, for
training and inference alike; `load_trained` opens a finished run. Nothing here
imports the training code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mintransformer.backend.precision import choose_precision
from mintransformer.config import (
    ClassificationConfig,
    LanguageModelConfig,
    RunConfig,
    TranslationConfig,
)
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory

# Config fields that are model arguments of the same name.
SIZE_FIELDS = ("num_layers", "d_model", "num_heads", "dff", "dropout_rate")
TRANSFORMER_FIELDS = (
    "norm_first",
    "tie_embeddings",
    "share_embeddings",
    "attention_dropout_rate",
    "embedding_init",
    "activation",
    "layer_norm_epsilon",
)
CLASSIFIER_FIELDS = (
    "max_length",
    "pooling",
    "hidden_units",
    "key_dim",
    "ngram_buckets",
    "ngram_dropout",
    "attention_dropout_rate",
)


def _fields(config: RunConfig, names: tuple[str, ...]) -> dict:
    return {name: getattr(config, name) for name in names}


def build_model(
    config: RunConfig,
    vocab_size: int,
    mixed_precision: bool = False,
    pad_id: int = Tokenizer.pad_id,
    target_vocab_size: int | None = None,
):
    """The built model a config describes: `Transformer`, `LanguageModel` or `TextClassifier`.

    Args:
        config: a run config.
        vocab_size: the tokenizer's vocabulary size (source and target share it).
        mixed_precision: build in bf16 mixed precision (the caller decides, once:
            `backend.precision.choose_precision`); the language model is always fp32.
        pad_id: the tokenizer's padding id (an imported tokenizer's may not be 0).
        target_vocab_size: a translation model's target vocabulary, where the
            tokenizer has one of its own; by default `vocab_size`.
    """
    dtype = "mixed_bfloat16" if mixed_precision else None
    if not isinstance(config, TranslationConfig | LanguageModelConfig | ClassificationConfig):
        raise TypeError(f"not a run config: {type(config).__name__}")
    size = {**_fields(config, SIZE_FIELDS), "pad_id": pad_id}
    dummy = np.ones((1, 2), "int32")
    if isinstance(config, TranslationConfig):
        from mintransformer.models.transformer import Transformer

        model = Transformer(
            **size,
            **_fields(config, TRANSFORMER_FIELDS),
            input_vocab_size=vocab_size,
            target_vocab_size=target_vocab_size or vocab_size,
            pe_input=config.max_length,
            pe_target=config.max_length,
            dtype=dtype,
        )
        model((dummy, dummy))
        return model
    if isinstance(config, LanguageModelConfig):
        from mintransformer.models.language_model import LanguageModel

        model = LanguageModel(**size, vocab_size=vocab_size, max_length=config.max_length)
    else:
        from mintransformer.models.classifier import TextClassifier

        model = TextClassifier(
            **size,
            **_fields(config, CLASSIFIER_FIELDS),
            vocab_size=vocab_size,
            num_classes=len(config.labels),
            dtype=dtype,
        )
    model(dummy)
    return model


def build_for_tokenizer(config: RunConfig, tokenizer, mixed_precision: bool = False):
    """`build_model` sized by `tokenizer`: its vocabulary (and separate target
    vocabulary, where it has one) and its pad id."""
    return build_model(
        config,
        tokenizer.vocab_size,
        mixed_precision,
        tokenizer.pad_id,
        getattr(tokenizer, "target_vocab_size", None),
    )


def load_trained(
    path: str | Path | RunDirectory,
    expected: type[RunConfig] | None = None,
    mixed_precision: bool | None = None,
):
    """The model (final weights), tokenizer and config of a finished run.

    Args:
        path: the run directory (or an opened `RunDirectory`).
        expected: the config class the run must have; a ValueError names the
            run's kind otherwise (e.g. a classification run given to `translate`).
        mixed_precision: build in bf16 (True) or fp32 (False); None: as the run's
            config asks, or as this machine pays for (`choose_precision`).

    Returns:
        `(model, tokenizer, config)`.
    """
    run = path if isinstance(path, RunDirectory) else RunDirectory.open(path)
    with run.explain_damage():
        config = run.config(expected)
        tokenizer = run.tokenizer()
        if mixed_precision is None:
            requested = getattr(config, "mixed_precision", False)
            mixed_precision = choose_precision(requested)[0]
        try:
            model = build_for_tokenizer(config, tokenizer, mixed_precision)
        except ValueError as err:  # a setting the model refuses
            raise ValueError(f"{run.config_path}: {err}") from None
        checkpoints.load_variables(run.weights_path, model.weights)
    return model, tokenizer, config

"""Training a translation model: corpus -> tokenizer -> batches -> model -> loop.

`train` is what `mintransformer train translation` calls. It follows the paper:
teacher forcing over length-bucketed batches, the Noam warm-up with Adam(0.9,
0.98, 1e-9) and label-smoothed cross-entropy that ignores padding (computed with
the output projection, `TeacherForcing`). The loop (`training.loop.train`) does
the rest: run directory, checkpoints, resume, averaging.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mintransformer.backend.runtime import batch_width_multiple
from mintransformer.config import TranslationConfig
from mintransformer.data.batching import TranslationBatches
from mintransformer.data.corpora import load_corpus
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.inference.translator import Translator
from mintransformer.models.transformer import Transformer
from mintransformer.training import loop
from mintransformer.training.optimizer import compile_for_training
from mintransformer.training.teacher_forcing import TeacherForcing

Pairs = list[tuple[str, str]]
Splits = dict[str, Pairs]


def describe(config: TranslationConfig, splits: Splits) -> str:
    return f"data: {', '.join(f'{k} {len(v):,} pairs' for k, v in splits.items())}"


def tokenizer_texts(splits: Splits, config: TranslationConfig) -> list[str]:
    return [text for pair in splits["train"] for text in pair]


def make_batches(
    tokenizer: Tokenizer, pairs: Pairs, config: TranslationConfig, shuffle: bool
) -> TranslationBatches:
    """Teacher-forcing batches of `pairs` under the config's token budget."""
    return TranslationBatches(
        tokenizer.encode_batch([source for source, _ in pairs]),
        tokenizer.encode_batch([target for _, target in pairs]),
        start_id=tokenizer.start_id,
        end_id=tokenizer.end_id,
        pad_id=tokenizer.pad_id,
        max_tokens=config.max_tokens,
        max_length=config.max_length,
        shuffle=shuffle,
        seed=config.seed,
        pad_multiple=batch_width_multiple(),
    )


def train_and_val_batches(tokenizer: Tokenizer, splits: Splits, config: TranslationConfig):
    return (
        make_batches(tokenizer, splits["train"], config, shuffle=True),
        make_batches(tokenizer, splits["val"], config, shuffle=False),
    )


def compile_model(
    model: Transformer, config: TranslationConfig, steps_per_epoch: int
) -> TeacherForcing:
    """`model` inside a `TeacherForcing` trainer, compiled with the warm-up Adam.

    Returns:
        the trainer, for `loop.fit`; its optimizer is built.
    """
    trainer = TeacherForcing(model, config.label_smoothing, model.config["pad_id"])
    return compile_for_training(trainer, config, steps_per_epoch)


def held_out_report(count: int, beam_size: int = 1):
    """A `Task.held_out` that, with beam search, chooses alpha on the validation pairs
    (`Translator.choose_alpha`), then translates the first `count` test (else validation)
    pairs with it and reports their scores; None for greedy search and `count` 0."""
    if count <= 0 and beam_size <= 1:
        return None

    def report(
        model: Transformer, tokenizer: Tokenizer, config: TranslationConfig, splits, verbose
    ):
        translator = Translator.from_model(model, tokenizer, config=config)
        lines, options = [], dict(beam_size=beam_size, progress=verbose > 0)
        if beam_size > 1:
            choice = translator.choose_alpha(splits["val"], **options)
            lines.append(str(choice))
            options["alpha"] = choice.alpha
        if count > 0:
            held_out = (splits.get("test") or splits["val"])[:count]
            lines.append(translator.report(held_out, **options))
        return "\n".join(lines)

    return report


TASK = loop.Task(
    config_class=TranslationConfig,
    load_data=lambda config: load_corpus(config.data),
    describe=describe,
    tokenizer_texts=tokenizer_texts,
    tokenizer_options=lambda config: {"vocab_size": config.vocab_size},
    make_batches=train_and_val_batches,
    compile=compile_model,
)


def train(
    path: str | Path,
    config: TranslationConfig | None = None,
    *,
    report: int = 0,
    beam_size: int = 1,
    **options,
) -> tuple[Transformer, Tokenizer, Splits]:
    """Trains a new run in `path` with `config`, or resumes the run there.

    Args:
        path, config, options: as `loop.train` (`resume`, `overwrite`, `verbose`,
            `data_parallel`).
        report: after training, translate this many held-out pairs and print their
            scores (0: none).
        beam_size: the beam of that report (1: greedy); above 1, the length penalty's
            alpha is first chosen on the validation pairs, and printed.

    Returns:
        the trained model, its tokenizer and the corpus splits it was trained on.
    """
    task = dataclasses.replace(TASK, held_out=held_out_report(report, beam_size))
    trained = loop.train(task, path, config, **options)
    return trained.model, trained.tokenizer, trained.data

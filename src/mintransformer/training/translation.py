"""Training a translation model: corpus -> tokenizer -> batches -> model -> loop.

`train` is what `mintransformer train translation` calls. It follows the paper:
teacher forcing over length-bucketed batches, the Noam warm-up with Adam(0.9,
0.98, 1e-9) and label-smoothed cross-entropy that ignores padding (computed with
the output projection, `TeacherForcing`); the loop
(`training.loop.fit`) checkpoints, resumes and averages.
"""

from __future__ import annotations

from pathlib import Path

from mintransformer.backend_adapter import batch_width_multiple
from mintransformer.config import TranslationConfig
from mintransformer.data.batching import TranslationBatches
from mintransformer.data.corpora import load_corpus
from mintransformer.models.transformer import Transformer
from mintransformer.run import RunDirectory
from mintransformer.tokenizer import Tokenizer
from mintransformer.training import loop
from mintransformer.training.data_parallel import DataParallel, shard
from mintransformer.training.teacher_forcing import TeacherForcing

Pairs = list[tuple[str, str]]


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


def compile_for_training(
    model: Transformer, config: TranslationConfig, steps_per_epoch: int
) -> TeacherForcing:
    """`model` inside a `TeacherForcing` trainer, compiled with `loop.warmup_adam`.

    Returns:
        the trainer, for `loop.fit`; its optimizer is built.
    """
    trainer = TeacherForcing(model, config.label_smoothing, Tokenizer.pad_id)
    trainer.compile(loop.warmup_adam(config, steps_per_epoch))
    trainer.optimizer.build(trainer.trainable_variables)
    return trainer


def train_translation(
    run: RunDirectory, splits: dict[str, Pairs], resume: bool = False, verbose: int = 1
) -> tuple[Transformer, Tokenizer]:
    """Trains (or resumes) the run's model on `splits["train"]`, validating on `splits["val"]`.

    Returns:
        the model holding the final (averaged) weights, and the tokenizer.
    """
    config = loop.start(run, TranslationConfig)
    texts = [text for pair in splits["train"] for text in pair]
    tokenizer = loop.prepare_tokenizer(run, texts, resume, vocab_size=config.vocab_size)
    train = make_batches(tokenizer, splits["train"], config, shuffle=True)
    val = make_batches(tokenizer, splits["val"], config, shuffle=False)
    train, val = shard(train, val, tokenizer.pad_id)
    model = loop.build_and_fit(
        run, config, tokenizer, train, val, resume, verbose, compile_for_training
    )
    return model, tokenizer


def _load_data(config: TranslationConfig):
    return load_corpus(config.data)


def train(
    path: str | Path,
    config: TranslationConfig | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    verbose: int = 1,
    data_parallel: DataParallel | None = None,
) -> tuple[Transformer, Tokenizer, dict[str, Pairs]]:
    """Trains a new run in `path` with `config`, or resumes the run there.

    `data_parallel` trains on several devices (JAX; `training.data_parallel`).

    Returns:
        the trained model, its tokenizer and the corpus splits it was trained on.
    """
    with loop.open_run(
        path, config, TranslationConfig, resume, overwrite, _load_data, data_parallel
    ) as (run, config, splits):
        print(f"data: {', '.join(f'{k} {len(v):,} pairs' for k, v in splits.items())}")
        model, tokenizer = train_translation(run, splits, resume=resume, verbose=verbose)
        return model, tokenizer, splits

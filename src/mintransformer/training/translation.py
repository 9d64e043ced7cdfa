"""Training a translation model end to end: corpus -> tokenizer -> batches -> fit -> run dir.

`train_translation` is what `mintransformer train translation` calls. It trains
with the paper's recipe (Noam warm-up, Adam(0.9, 0.98, 1e-9), label smoothing),
checkpoints every epoch, can resume an interrupted run exactly, and finishes by
averaging the last checkpoints into the run's final weights.
"""

from __future__ import annotations

import keras
import numpy as np

from mintransformer.data.batching import TranslationBatches
from mintransformer.models.transformer import Transformer
from mintransformer.run import RunConfig, RunDirectory, TranslationConfig
from mintransformer.tokenizer import Tokenizer
from mintransformer.training import checkpoints
from mintransformer.training.losses import MaskedAccuracy, MaskedLoss
from mintransformer.training.schedule import warmup_schedule


def build_model(config: TranslationConfig, vocab_size: int) -> Transformer:
    """The Transformer a config describes (joint vocabulary), built and ready."""
    model = Transformer(
        config.num_layers,
        config.d_model,
        config.num_heads,
        config.dff,
        vocab_size,
        vocab_size,
        config.max_length,
        config.max_length,
        dropout_rate=config.dropout_rate,
        pad_id=Tokenizer.pad_id,
        norm_first=config.norm_first,
        tie_embeddings=config.tie_embeddings,
        dtype="mixed_bfloat16" if config.mixed_precision else None,
    )
    dummy = np.ones((1, 2), "int32")
    model((dummy, dummy))
    return model


def model_variables(model) -> list:
    """The weights that define the model (no optimizer or dropout-seed state)."""
    return list(model.weights)


def training_state(model) -> list:
    """Everything needed to continue training exactly: weights, seeds, optimizer slots."""
    weights = {id(v) for v in model.weights}
    seeds = [v for v in model.variables if id(v) not in weights]
    return model_variables(model) + seeds + list(model.optimizer.variables)


class EpochCheckpoint(keras.callbacks.Callback):
    """Writes the full training state after every epoch; keeps the newest `keep`."""

    def __init__(self, run: RunDirectory, keep: int):
        super().__init__()
        self.run = run
        self.keep = max(keep, 1)

    def on_epoch_end(self, epoch, logs=None):
        checkpoints.save_variables(self.run.checkpoint_path(epoch + 1), training_state(self.model))
        for old in self.run.checkpoints()[: -self.keep]:
            old.unlink()


class EpochSeed(keras.callbacks.Callback):
    """Seeds every global random generator with `seed + epoch` as each epoch begins.

    Some randomness lives outside the model's variables (on PyTorch, unseeded dropout
    draws from torch's global generator), so a checkpoint cannot carry it; re-seeding
    per epoch makes each epoch's randomness depend only on its number, and a resumed
    run repeats the uninterrupted one.
    """

    def __init__(self, seed: int):
        super().__init__()
        self.seed = seed

    def on_epoch_begin(self, epoch, logs=None):
        keras.utils.set_random_seed(self.seed + epoch)


def encode_pairs(tokenizer: Tokenizer, pairs) -> tuple[list[list[int]], list[list[int]]]:
    sources = tokenizer.encode_batch([s for s, _ in pairs])
    targets = tokenizer.encode_batch([t for _, t in pairs])
    return sources, targets


def make_batches(tokenizer, pairs, config: TranslationConfig, shuffle: bool):
    sources, targets = encode_pairs(tokenizer, pairs)
    return TranslationBatches(
        sources,
        targets,
        start_id=tokenizer.start_id,
        end_id=tokenizer.end_id,
        pad_id=tokenizer.pad_id,
        max_tokens=config.max_tokens,
        max_length=config.max_length,
        shuffle=shuffle,
        seed=config.seed,
    )


def warmup_adam(config: RunConfig, steps_per_epoch: int) -> keras.optimizers.Adam:
    """The paper's optimizer, Adam(0.9, 0.98, 1e-9), on the config's `warmup_schedule`
    ("noam" unless the config has a `schedule`) peaking at `config.peak_learning_rate`
    after `config.warmup_steps`."""
    schedule = warmup_schedule(
        getattr(config, "schedule", "noam"),
        config.d_model,
        config.peak_learning_rate,
        config.warmup_steps,
        config.epochs * steps_per_epoch,
    )
    return keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def compile_for_training(model, config: RunConfig, steps_per_epoch: int) -> None:
    """`warmup_adam` with the label-smoothed masked loss and masked accuracy."""
    model.compile(
        optimizer=warmup_adam(config, steps_per_epoch),
        loss=MaskedLoss(config.label_smoothing, pad_id=Tokenizer.pad_id),
        metrics=[MaskedAccuracy(pad_id=Tokenizer.pad_id)],
    )
    model.optimizer.build(model.trainable_variables)


def train_translation(
    run: RunDirectory,
    splits: dict[str, list[tuple[str, str]]],
    resume: bool = False,
    verbose: int = 1,
) -> tuple[Transformer, Tokenizer]:
    """Trains (or resumes) the run's model on `splits["train"]`, validating on `splits["val"]`.

    Returns:
        the model holding the final (averaged) weights, and the tokenizer.
    """
    config = run.config(TranslationConfig)
    keras.utils.set_random_seed(config.seed)
    if resume and run.tokenizer_path.is_file():
        tokenizer = Tokenizer.load(run.tokenizer_path)
    else:
        texts = [text for pair in splits["train"] for text in pair]
        tokenizer = Tokenizer.train(texts, vocab_size=config.vocab_size)
        tokenizer.save(run.tokenizer_path)
    train = make_batches(tokenizer, splits["train"], config, shuffle=True)
    val = make_batches(tokenizer, splits["val"], config, shuffle=False)
    model = build_model(config, tokenizer.vocab_size)
    compile_for_training(model, config, len(train))
    fit_run(run, model, train, val, config, resume, verbose)
    return model, tokenizer


def fit_run(
    run: RunDirectory, model, train, val, config: RunConfig, resume: bool, verbose: int
) -> None:
    """`model.fit` with per-epoch checkpoints, exact resume, then `finish`.

    Args:
        run: the run directory (checkpoints, log, final weights).
        model: a compiled model whose optimizer is built.
        train, val: `PyDataset`s; `train.set_epoch(e)` draws epoch `e`'s batches.
        config: the run's config (`epochs`, `average_last`).
        resume: continue from the newest checkpoint instead of starting afresh.
        verbose: `model.fit` verbosity.
    """
    initial_epoch = 0
    saved = run.checkpoints() if resume else []
    if saved:
        checkpoints.load_variables(saved[-1], training_state(model))
        initial_epoch = run.epoch_of(saved[-1])
        train.set_epoch(initial_epoch)
    elif not resume:
        for old in run.checkpoints():
            old.unlink()
    if initial_epoch < config.epochs:
        model.fit(
            train,
            validation_data=val,
            epochs=config.epochs,
            initial_epoch=initial_epoch,
            shuffle=False,  # the datasets shuffle themselves, with a seed per epoch
            callbacks=[
                EpochSeed(config.seed),
                EpochCheckpoint(run, keep=config.average_last),
                keras.callbacks.CSVLogger(str(run.log_path), append=initial_epoch > 0),
            ],
            verbose=verbose,
        )
    finish(run, model, config.average_last)


def finish(run: RunDirectory, model, average_last: int) -> None:
    """Averages the newest `average_last` checkpoints into the run's final weights."""
    newest = run.checkpoints()[-max(average_last, 1) :]
    count = len(model_variables(model))
    arrays = checkpoints.average_checkpoints(newest)[:count]
    for variable, array in zip(model_variables(model), arrays, strict=True):
        variable.assign(array.astype(variable.dtype))
    checkpoints.save_variables(run.weights_path, model_variables(model))


def load_trained(run: RunDirectory) -> tuple[Transformer, Tokenizer, TranslationConfig]:
    """The model (final weights), tokenizer and config of a finished run."""
    config = run.config(TranslationConfig)
    tokenizer = Tokenizer.load(run.tokenizer_path)
    model = build_model(config, tokenizer.vocab_size)
    checkpoints.load_variables(run.weights_path, model_variables(model))
    return model, tokenizer, config

"""The one training loop: `train(task, path, config)` does, once, what every run needs.

    lock the run directory (new, or the one to resume), for the whole command
    set up the runtime and data parallelism, decide the precision
    load the data (task.load_data), then create the run directory
    seed, train (or reload) the tokenizer, build the batches (task.make_batches)
    build the model (runs.loading.build_for_tokenizer) and compile it (task.compile)
    fit: a checkpoint every epoch, exact resume, a time budget
    average the last checkpoints into the final weights
    report on held-out data (task.held_out)

A task module (`training.translation`, `.classification`, `.language_model`) says
only what differs between tasks, as a `Task`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras

from mintransformer.backend import distribution
from mintransformer.backend.precision import choose_precision
from mintransformer.backend.runtime import configure_runtime
from mintransformer.config import RunConfig
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory
from mintransformer.runs.loading import build_for_tokenizer
from mintransformer.training.callbacks import (
    EpochCheckpoint,
    EpochSeed,
    StopOnNonFiniteLoss,
    TrainingClock,
)
from mintransformer.training.checkpointing import (
    average_into_result,
    restore_newest_intact,
    training_state,
)
from mintransformer.training.data_parallel import shard
from mintransformer.training.optimizer import decay_end_step
from mintransformer.training.stream import EpochStream


@dataclass(frozen=True)
class Task:
    """What one kind of run needs from its module; `train` does the rest.

    Attributes:
        config_class: the config class of the run (`TranslationConfig`, ...).
        load_data: `config -> data`, the splits to train on; it may complete the
            config (class names) before the run directory is created.
        describe: `(config, data) -> str`, a line naming the data for the log.
        tokenizer_texts: `(data, config) -> texts` the tokenizer is trained on.
        tokenizer_options: `config -> dict`, keyword arguments of `Tokenizer.train`.
        make_batches: `(tokenizer, data, config) -> (train, val)` datasets.
        compile: `(model, config, steps_per_epoch) -> model to fit`, optimizer built.
        held_out: `(model, tokenizer, config, data, verbose) -> result`, a score on
            held-out data printed after training, or None.
        held_out_label: what the log calls that result ("test": "test: accuracy ...").
        weight_rows: padding rows of data-parallel batches get sample weight 0 (for a
            loss that does not skip padding targets itself).
    """

    config_class: type[RunConfig]
    load_data: Callable[[RunConfig], Any]
    describe: Callable[[RunConfig, Any], str]
    tokenizer_texts: Callable[[Any, RunConfig], Iterable[str]]
    tokenizer_options: Callable[[RunConfig], dict]
    make_batches: Callable[[Tokenizer, Any, RunConfig], tuple]
    compile: Callable[[keras.Model, RunConfig, int], keras.Model]
    held_out: Callable[[keras.Model, Tokenizer, RunConfig, Any, int], Any] | None = None
    held_out_label: str = ""
    weight_rows: bool = False


@dataclass
class Trained:
    """What `train` returns: the model with its final weights, and what it was made from."""

    model: keras.Model
    tokenizer: Tokenizer
    config: RunConfig
    data: Any
    held_out: Any = None


def train(
    task: Task,
    path: str | Path,
    config: RunConfig | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    verbose: int = 1,
    data_parallel: distribution.DataParallel | None = None,
    data: Any = None,
) -> Trained:
    """Trains a new run in `path` with `config`, or resumes the run there (`resume`).

    Args:
        task: what the task module gives (`Task`).
        path: the run directory.
        config: the new run's config; ignored when resuming (the run's own is used).
        resume: continue from the newest intact checkpoint.
        overwrite: replace a run already in `path`.
        verbose: 0 silent, 1 progress bars.
        data_parallel: train on several devices (JAX; `backend.distribution`).
        data: the data to train on, as `task.load_data` gives it (default: what
            `config.data` names).
    """
    start = time.perf_counter()
    opened = open_run(task, path, config, resume, overwrite, data_parallel, data)
    with opened as (run, data, bf16):
        config = run.config(task.config_class)
        keras.utils.set_random_seed(config.seed)  # initialisation and the first draws
        tokenizer = prepare_tokenizer(
            run, task.tokenizer_texts(data, config), resume, **task.tokenizer_options(config)
        )
        train_batches, val_batches = task.make_batches(tokenizer, data, config)
        train_batches, val_batches = shard(
            train_batches, val_batches, tokenizer.pad_id, task.weight_rows
        )
        model = build_for_tokenizer(config, tokenizer, mixed_precision=bf16)
        trainee = task.compile(model, config, len(train_batches))
        fit(run, trainee, train_batches, val_batches, config, resume, verbose)
    print(f"trained in {time.perf_counter() - start:.0f} s; run directory: {run.path}")
    curve = val_curve(run.log())
    if curve:
        print(curve)
    held_out = None
    if task.held_out is not None:
        held_out = task.held_out(model, tokenizer, config, data, verbose)
        if held_out is not None:
            print(f"{task.held_out_label}: {held_out}" if task.held_out_label else held_out)
    return Trained(model, tokenizer, config, data, held_out)


def val_curve(rows: list[dict[str, float | str]]) -> str | None:
    """What the val loss did, from log.csv's `rows`: its lowest, after which epoch, and
    its last value; None without a val loss."""
    losses = [row.get("val_loss") for row in rows]
    finite = [
        (loss, epoch)
        for epoch, loss in enumerate(losses, start=1)
        if isinstance(loss, float) and math.isfinite(loss)
    ]
    if not finite:
        return None
    lowest, epoch = min(finite)
    last = losses[-1] if isinstance(losses[-1], float) else math.nan
    return (
        f"val loss: lowest {lowest:.4f} after epoch {epoch} of {len(rows)}, "
        f"last {last:.4f} (each epoch's in log.csv)"
    )


@contextlib.contextmanager
def open_run(
    task: Task,
    path: str | Path,
    config: RunConfig | None,
    resume: bool,
    overwrite: bool,
    data_parallel: distribution.DataParallel | None,
    data: Any = None,
) -> Iterator[tuple[RunDirectory, Any, bool]]:
    """The run directory, its data and whether to train in bf16; locked for the block.

    No other process can train in the run directory within the block
    (`RunDirectory.lock`). The data are loaded before a new run directory is
    created, so bad data leave no run behind; a new run whose settings turn out not
    to fit its data (a ValueError before the first checkpoint) is removed again
    (`RunDirectory.discard`), so the corrected command does not find a run in the way.
    Other failures (a full disk, Ctrl-C) keep it for `--resume`.
    """
    with RunDirectory(path).lock():
        print(configure_runtime())
        if data_parallel is not None:
            distribution.start(data_parallel)
        if resume:
            run = RunDirectory.to_resume(path)
            config = run.config(task.config_class)
        elif not isinstance(config, task.config_class):
            raise ValueError(f"a new run needs a {task.config_class.__name__}, got {config!r}")
        if data_parallel is not None and data_parallel.num_processes > 1 and config.minutes:
            raise ValueError(
                "a time budget (--minutes) cannot end a run of several processes: each would "
                "stop at its own step. Give --epochs instead."
            )
        bf16 = False
        if hasattr(config, "mixed_precision"):
            bf16, why = choose_precision(config.mixed_precision)
            print(why)
        if data is None:
            data = task.load_data(config)
        print(task.describe(config, data))
        if resume:
            yield run, data, bf16
            return
        run = RunDirectory.create(path, config, overwrite=overwrite)
        try:
            yield run, data, bf16
        except ValueError:  # settings that do not fit the data: the user changes the command
            if not run.checkpoints():
                run.discard()
            raise


def prepare_tokenizer(
    run: RunDirectory, texts: Iterable[str], resume: bool, **options: Any
) -> Tokenizer:
    """The run's tokenizer: loaded when resuming, else trained on `texts` and saved."""
    if resume and run.tokenizer_path.is_file():
        return run.tokenizer()
    tokenizer = Tokenizer.train(texts, **options)
    tokenizer.save(run.tokenizer_path)
    return tokenizer


def fit(
    run: RunDirectory, model, train, val, config: RunConfig, resume: bool, verbose: int = 1
) -> None:
    """`model.fit` with per-epoch checkpoints and exact resume, then `average_into_result`.

    Training stops after `config.epochs` epochs or, with `config.minutes` > 0, at the
    end of the step that spends the time budget (training time only: validation
    and checkpoints are not counted); that last, shorter epoch is checkpointed like
    the others. A NaN or infinite loss stops training with an error naming the
    epoch and batch (`StopOnNonFiniteLoss`). A resumed run keeps what is left of
    its budget. The caller holds the run's lock.

    Args:
        run: the run directory (checkpoints, log, final weights).
        model: the compiled model to train, its optimizer built (for translation, the
            `TeacherForcing` trainer around the transformer: same variables).
        train, val: `PyDataset`s; `train.set_epoch(e)` draws epoch `e`'s batches,
            `train.token_counts(i)` counts batch i's real and padded tokens.
        config: the run's config (`epochs`, `minutes`, `average_last`, `seed`).
        resume: continue from the newest checkpoint instead of starting afresh.
        verbose: `model.fit` verbosity (0 silent, 1 progress bar).
    """
    with run.explain_damage():
        initial_epoch, spent = 0, 0.0
        if resume:
            restored = restore_newest_intact(run, training_state(model))
            if restored is not None:
                initial_epoch = run.epoch_of(restored)
                spent = checkpoints.read_meta(restored).get("train_seconds", 0.0)
        else:
            for old in run.checkpoints():
                old.unlink()
        budget = 60.0 * config.minutes
        if budget and spent >= budget:
            print(f"the time budget of {config.minutes:g} min was spent: nothing left to train")
        elif initial_epoch < config.epochs:
            stream = EpochStream(train, initial_epoch, config.epochs)
            model.fit(
                stream,
                steps_per_epoch=stream.steps_per_epoch,
                validation_data=val,
                epochs=config.epochs,
                initial_epoch=initial_epoch,
                shuffle=False,  # the datasets shuffle themselves, with a seed per epoch
                callbacks=[
                    StopOnNonFiniteLoss(run),
                    EpochSeed(config.seed),
                    TrainingClock(stream, budget, spent, decay_end_step(model.optimizer)),
                    EpochCheckpoint(run, keep=config.average_last),
                    keras.callbacks.CSVLogger(str(run.log_path), append=initial_epoch > 0),
                ],
                verbose=verbose,
            )
        average_into_result(run, model, config.average_last)

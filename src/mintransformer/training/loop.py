"""The one training loop every task uses: run directory, tokenizer, optimizer, fit, averaging.

A trainer (`training.translation`, `training.classification`,
`training.language_model`) reads its data, builds batches and a model, then
hands them to `fit`:

    with open_run(path, config, ConfigClass, resume, overwrite, load_data) as (run, config, data):
        config = start(run, ConfigClass)
        tokenizer = prepare_tokenizer(run, texts, resume, vocab_size=...)
        model = build_model(config, tokenizer.vocab_size)
        trainee = compile_for_training(model, config, len(train))
        fit(run, trainee, train, val, config, resume)

`fit` checkpoints every epoch (weights, optimizer slots and dropout-seed state),
re-seeds every epoch so that a resumed run repeats the uninterrupted one exactly,
and ends by averaging the last checkpoints into the run's final weights. It logs
the real (non-padding) tokens per second and the padding fraction of every epoch,
and with a time budget (`config.minutes`) stops when the budget is spent.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import keras

from mintransformer import checkpoints
from mintransformer.backend_adapter import (
    adam,
    choose_precision,
    configure_runtime,
    seed_global_generators,
)
from mintransformer.config import RunConfig
from mintransformer.errors import CorruptFileError, NonFiniteLossError
from mintransformer.loading import build_model
from mintransformer.run import RunDirectory
from mintransformer.tokenizer import Tokenizer
from mintransformer.training.data_parallel import DataParallel
from mintransformer.training.data_parallel import start as data_parallel_start
from mintransformer.training.losses import MaskedAccuracy, MaskedLoss
from mintransformer.training.schedule import LinearWarmupDecay, warmup_schedule
from mintransformer.training.stream import EpochStream

DECAY_END_STEP = "decay_end_step"


@contextlib.contextmanager
def open_run(
    path: str | Path,
    config: RunConfig | None,
    config_class: type[RunConfig],
    resume: bool,
    overwrite: bool,
    load_data: Callable[[RunConfig], Any],
    data_parallel: DataParallel | None = None,
) -> Iterator[tuple[RunDirectory, RunConfig, Any]]:
    """The run directory to train in, its config and its data, locked for the block.

    No other process can train in the run directory within the block
    (`RunDirectory.lock`). With `resume` the config is the run's own; otherwise
    `config` is written to a new run directory. The data are loaded first, so bad
    data leave no run behind; `load_data` may complete the config (e.g. the class
    names) before it is saved. With `data_parallel`, the models built from now on
    are replicated over its devices (`training.data_parallel`).
    """
    with RunDirectory(path).lock():
        print(configure_runtime())
        if data_parallel is not None:
            data_parallel_start(data_parallel)
        if resume:
            run = RunDirectory.to_resume(path)
            config = run.config(config_class)
        elif not isinstance(config, config_class):
            raise ValueError(f"a new run needs a {config_class.__name__}, got {config!r}")
        if data_parallel is not None and data_parallel.num_processes > 1 and config.minutes:
            raise ValueError(
                "a time budget (--minutes) cannot end a run of several processes: each would "
                "stop at its own step. Give --epochs instead."
            )
        if hasattr(config, "mixed_precision"):
            print(choose_precision(config.mixed_precision)[1])
        data = load_data(config)
        if not resume:
            run = RunDirectory.create(path, config, overwrite=overwrite)
        yield run, config, data


def start(run: RunDirectory, config_class: type[RunConfig]) -> RunConfig:
    """The run's config, with Python, NumPy and the backend seeded from `config.seed`
    (weight initialisation and everything drawn before the first epoch)."""
    config = run.config(config_class)
    keras.utils.set_random_seed(config.seed)
    return config


def prepare_tokenizer(
    run: RunDirectory, texts: Iterable[str], resume: bool, **options: Any
) -> Tokenizer:
    """The run's tokenizer: loaded when resuming, else trained on `texts` and saved."""
    if resume and run.tokenizer_path.is_file():
        return run.tokenizer()
    tokenizer = Tokenizer.train(texts, **options)
    tokenizer.save(run.tokenizer_path)
    return tokenizer


def warmup_adam(config: RunConfig, steps_per_epoch: int) -> keras.optimizers.Adam:
    """Adam(0.9, 0.98, 1e-9) on the config's warm-up schedule ("noam" unless the config
    has a `schedule`), peaking at `config.peak_learning_rate` after `config.warmup_steps`."""
    total_steps = config.epochs * steps_per_epoch
    schedule = warmup_schedule(
        getattr(config, "schedule", "noam"),
        config.d_model,
        config.peak_learning_rate,
        config.warmup_steps,
        total_steps,
    )
    if schedule.warmup_steps < config.warmup_steps:
        # A shorter warm-up trains a different model: say so, since it is easy to miss
        # that --epochs (not only --warmup-steps) sets it.
        print(
            f"warm-up: {schedule.warmup_steps} steps, not {config.warmup_steps}: cut to fit "
            f"{config.epochs} epoch(s) of {steps_per_epoch} steps"
        )
    optimizer = adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    if isinstance(schedule, LinearWarmupDecay) and config.minutes:
        # A time budget's length in steps is known only once training runs:
        # `TrainingClock` moves the decay's end as it measures the pace.
        end_step = optimizer.add_variable(
            (),
            initializer=keras.initializers.Constant(float(schedule.total_steps)),
            dtype="float32",
            name=DECAY_END_STEP,
        )
        schedule.end_from(end_step)
        print(
            f"learning rate: linear decay to 0 when the {config.minutes:g}-minute budget runs "
            "out (its last step re-estimated every epoch from the pace so far)"
        )
    return optimizer


def decay_end_step(optimizer) -> keras.Variable | None:
    """The variable holding where `optimizer`'s learning rate reaches zero, if one moves it."""
    return next((v for v in optimizer.variables if v.name == DECAY_END_STEP), None)


def compile_for_training(
    model, config: RunConfig, steps_per_epoch: int, loss=None, metrics: list | None = None
) -> keras.Model:
    """Compiles `model` with `warmup_adam`, `loss` and `metrics`; builds the optimizer.

    The default loss and metric are those of next-token prediction: label-smoothed
    cross-entropy (`config.label_smoothing`) and accuracy, both ignoring padding.
    Given metrics are weighted by the batches' sample weights, if they carry any.
    """
    optimizer = warmup_adam(config, steps_per_epoch)
    if loss is None:
        loss = MaskedLoss(config.label_smoothing, pad_id=Tokenizer.pad_id)
        model.compile(optimizer, loss, metrics=[MaskedAccuracy(pad_id=Tokenizer.pad_id)])
    else:
        model.compile(optimizer, loss, weighted_metrics=metrics)
    model.optimizer.build(model.trainable_variables)
    return model


def training_state(model) -> list:
    """Everything needed to continue training exactly: weights, seeds, optimizer slots."""
    weights = {id(v) for v in model.weights}
    seeds = [v for v in model.variables if id(v) not in weights]
    return list(model.weights) + seeds + list(model.optimizer.variables)


class TrainingClock(keras.callbacks.Callback):
    """Times training (validation excluded), logs throughput, and enforces a time budget.

    Every batch adds `tokens_per_s` (real, non-padding tokens the model read per
    second of this epoch) and `padding` (the padded fraction of its positions) to
    the logs, so they show in the progress bar; at the epoch's end they go to
    `log.csv` with `train_seconds`, the training time of the whole run so far.

    With a budget and a `decay_end` variable (a linear learning-rate decay's last
    step), each epoch from the second on begins by moving `decay_end` to where the
    budget is expected to run out: the optimizer's step count plus the seconds left
    times the steps per second this process has trained so far.

    Args:
        stream: the training batches; `stream.token_counts(epoch, i)` gives the
            `(real, padded)` token counts of batch i of `epoch`.
        budget_seconds: stop once this much training time is spent (0: never).
        spent_seconds: training time already spent (by the run being resumed).
        decay_end: the variable to move, or None.
    """

    def __init__(
        self,
        stream,
        budget_seconds: float = 0.0,
        spent_seconds: float = 0.0,
        decay_end: keras.Variable | None = None,
    ):
        super().__init__()
        self.stream = stream
        self.budget_seconds = budget_seconds
        self.spent_seconds = spent_seconds
        self.decay_end = decay_end if budget_seconds else None

    def on_train_begin(self, logs=None):
        # Where this process started: its own pace predicts the rest of the budget.
        self.first_step = self.optimizer_step()
        self.first_spent_seconds = self.spent_seconds

    def optimizer_step(self) -> int:
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_epoch_begin(self, epoch, logs=None):
        if self.decay_end is not None and self.spent_seconds > self.first_spent_seconds:
            self.decay_end.assign(self.expected_last_step())
        self.epoch = epoch
        self.epoch_start = time.perf_counter()
        self.epoch_seconds = 0.0
        self.real = self.padded = 0

    def expected_last_step(self) -> float:
        """The optimizer step at which the budget should run out at the pace so far
        (never before the next step)."""
        done = self.optimizer_step()
        pace = (done - self.first_step) / (self.spent_seconds - self.first_spent_seconds)
        left = max(self.budget_seconds - self.spent_seconds, 0.0)
        return max(done + left * pace, done + 1.0)

    def on_train_batch_end(self, batch, logs=None):
        real, padded = self.stream.token_counts(self.epoch, batch)
        self.real += real
        self.padded += padded
        self.epoch_seconds = time.perf_counter() - self.epoch_start
        if logs is not None:
            logs.update(self.figures())
        if self.budget_seconds and self.spent_seconds + self.epoch_seconds >= self.budget_seconds:
            self.model.stop_training = True

    def figures(self) -> dict[str, float]:
        """This epoch's tokens per second and padding fraction so far."""
        return {
            "tokens_per_s": self.real / max(self.epoch_seconds, 1e-9),
            "padding": 1.0 - self.real / max(self.padded, 1),
        }

    def on_epoch_end(self, epoch, logs=None):
        self.spent_seconds += self.epoch_seconds
        if logs is not None:
            logs.update(self.figures(), train_seconds=self.spent_seconds)


class EpochCheckpoint(keras.callbacks.Callback):
    """Writes the full training state after every epoch; keeps the newest `keep`.

    The training time spent so far (`train_seconds` in the logs) is saved with it.
    """

    def __init__(self, run: RunDirectory, keep: int):
        super().__init__()
        self.run = run
        self.keep = max(keep, 1)

    def on_epoch_end(self, epoch, logs=None):
        meta = {"train_seconds": (logs or {}).get("train_seconds", 0.0)}
        checkpoints.save_variables(
            self.run.checkpoint_path(epoch + 1), training_state(self.model), meta
        )
        for old in self.run.checkpoints()[: -self.keep]:
            old.unlink()


class EpochAware(keras.callbacks.Callback):
    """A callback that knows the epoch it is in (`self.epoch`, 0-based)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch


class StopOnNonFiniteLoss(EpochAware):
    """Stops training at the first batch whose loss is NaN or infinite, naming it.

    It raises before that epoch's checkpoint is written, so the run's newest
    checkpoint is the last good one, and no final weights are written.
    """

    def __init__(self, run: RunDirectory):
        super().__init__()
        self.run = run

    def on_train_batch_end(self, batch, logs=None):
        loss = float((logs or {}).get("loss", 0.0))
        if math.isfinite(loss):
            return
        saved = self.run.checkpoints()
        kept = (
            f"the last good checkpoint, {saved[-1]}, is kept"
            if saved
            else "no checkpoint had been written"
        )
        raise NonFiniteLossError(
            f"the training loss became {loss} at epoch {self.epoch + 1}, batch {batch + 1}: "
            f"training stopped and {kept}; train again with a lower --peak-learning-rate "
            "or more --warmup-steps."
        )


class EpochSeed(EpochAware):
    """Seeds the global random generators with `seed + epoch` before each epoch's first step.

    Some randomness lives outside the model's variables (on PyTorch, unseeded dropout
    draws from torch's global generator), so a checkpoint cannot carry it; re-seeding
    per epoch makes each epoch's randomness depend only on its number, and a resumed
    run repeats the uninterrupted one. The seeding waits for the first step because
    opening the data iterator (which a resumed run does in its first epoch, an
    uninterrupted one only once) draws from torch's generator too.
    """

    def __init__(self, seed: int):
        super().__init__()
        self.seed = seed

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:
            seed_global_generators(self.seed + self.epoch)


def fit(
    run: RunDirectory, model, train, val, config: RunConfig, resume: bool, verbose: int = 1
) -> None:
    """`model.fit` with per-epoch checkpoints and exact resume, then `average_into_result`.

    Training stops after `config.epochs` epochs or, with `config.minutes` > 0, at the
    end of the step that spends the time budget (training time only: validation
    and checkpoints are not counted); that last, shorter epoch is checkpointed like
    the others. A NaN or infinite loss stops training with an error naming the
    epoch and batch (`StopOnNonFiniteLoss`). A resumed run keeps what is left of
    its budget.

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
    with run.lock(), run.explain_damage():  # no second process trains here meanwhile
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


def restore_newest_intact(run: RunDirectory, state: list) -> Path | None:
    """Loads the newest checkpoint that reads back whole into `state`; returns its path.

    A corrupt checkpoint (empty, truncated) is skipped with a warning naming it, and
    renamed to `NAME.corrupt` so that neither averaging nor a later resume reads it;
    training then repeats the epochs after the checkpoint it restored. Returns None
    (training starts from the first epoch) if no checkpoint is intact.
    """
    skipped, restored = [], None
    for checkpoint in reversed(run.checkpoints()):
        try:
            checkpoints.load_variables(checkpoint, state)
        except CorruptFileError as err:
            checkpoint.replace(checkpoint.with_name(checkpoint.name + ".corrupt"))
            skipped.append(f"{checkpoint} ({err.problem}; kept as {checkpoint.name}.corrupt)")
            continue
        restored = checkpoint
        break
    if skipped:
        warnings.warn(
            f"skipped corrupt checkpoint {', '.join(skipped)}: "
            + (
                f"resuming from {restored.name}."
                if restored
                else "no intact checkpoint, training starts from the first epoch."
            ),
            stacklevel=2,
        )
    return restored


def build_and_fit(
    run: RunDirectory,
    config: RunConfig,
    tokenizer: Tokenizer,
    train,
    val,
    resume: bool,
    verbose: int = 1,
    compile_model: Callable = compile_for_training,
):
    """The config's model for `tokenizer`, compiled and trained by `fit`.

    Args:
        run, train, val, resume, verbose: as `fit`.
        config: the run's config; `build_model` reads the model's settings from it.
        tokenizer: the run's tokenizer (its vocabulary size sizes the model).
        compile_model: `compile_model(model, config, steps_per_epoch)` compiles the
            model, or a model that trains it, builds its optimizer and returns the
            model to fit; `compile_for_training` by default.

    Returns:
        the model holding the final (averaged) weights.
    """
    model = build_model(config, tokenizer.vocab_size)
    fit(run, compile_model(model, config, len(train)), train, val, config, resume, verbose)
    return model


def average_into_result(run: RunDirectory, model, average_last: int) -> None:
    """Averages the newest `average_last` checkpoints into the model and `model.npz`."""
    newest = run.checkpoints()[-max(average_last, 1) :]
    weights = list(model.weights)
    arrays = checkpoints.average_checkpoints(newest)[: len(weights)]
    for variable, array in zip(weights, arrays, strict=True):
        variable.assign(array.astype(variable.dtype))
    checkpoints.save_variables(run.weights_path, weights)

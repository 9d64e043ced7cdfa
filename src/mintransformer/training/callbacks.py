"""The callbacks of the training loop: time and throughput, checkpoints, seeds, a
diverging loss."""

from __future__ import annotations

import math
import time

import keras

from mintransformer.backend.runtime import seed_global_generators
from mintransformer.core.errors import NonFiniteLossError
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory
from mintransformer.training.checkpointing import training_state


class TrainingClock(keras.callbacks.Callback):
    """Times training (validation excluded), logs throughput, and enforces a time budget.

    Every batch adds `tokens_per_s` (real, non-padding tokens the model read per
    second of this epoch) and `padding` (the padded fraction of its positions) to
    the logs, so they show in the progress bar; at the epoch's end they go to
    `log.csv` with `train_seconds`, the training time of the whole run so far.

    With a budget and a `decay_end` variable (a linear learning-rate decay's last
    step), each epoch from the second on begins by moving `decay_end` to where the
    budget is expected to run out: the optimizer's step count plus the seconds left
    times the steps per second this process has trained so far. An epoch that ends
    with less than a mean step's time of the budget left is the last.

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
        left = max(self.budget_seconds - self.spent_seconds, 0.0)
        return max(done + left / self.step_seconds(), done + 1.0)

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
        # With less than a step's time left, another epoch would train a sliver at the
        # end of the decay, yet be validated, checkpointed and take an averaging slot.
        if self.budget_seconds and self.budget_seconds - self.spent_seconds < self.step_seconds():
            self.model.stop_training = True

    def step_seconds(self) -> float:
        """The mean training time of a step in this process so far."""
        steps = max(self.optimizer_step() - self.first_step, 1)
        return (self.spent_seconds - self.first_spent_seconds) / steps


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

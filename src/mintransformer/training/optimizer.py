"""The optimizer every task trains with: Adam(0.9, 0.98, 1e-9) on a warm-up schedule."""

from __future__ import annotations

import keras

from mintransformer.backend.optimizer import adam
from mintransformer.config import RunConfig
from mintransformer.training.schedule import LinearWarmupDecay, warmup_schedule

DECAY_END_STEP = "decay_end_step"


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
    model: keras.Model,
    config: RunConfig,
    steps_per_epoch: int,
    loss=None,
    metrics: list | None = None,
    weighted_metrics: list | None = None,
) -> keras.Model:
    """Compiles `model` with `warmup_adam`, `loss` and metrics, and builds the optimizer.

    Without a `loss` the model computes its own (`TeacherForcing`). Weighted metrics
    are weighted by the batches' sample weights, where they carry any.

    Returns:
        `model`, ready for `loop.fit`.
    """
    optimizer = warmup_adam(config, steps_per_epoch)
    model.compile(optimizer, loss, metrics=metrics, weighted_metrics=weighted_metrics)
    model.optimizer.build(model.trainable_variables)
    return model

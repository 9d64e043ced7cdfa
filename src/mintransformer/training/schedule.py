"""Learning-rate schedules: the paper's "Noam" warm-up (section 5.3), and linear warm-up/decay.

    noam(step)   = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)
    linear(step) = peak * min(step / warmup_steps,
                              max(0, (total_steps - step) / (total_steps - warmup_steps)))

Both rise linearly for `warmup_steps` steps. Noam then decays as 1/sqrt(step), from
its peak `scale * (d_model * warmup_steps)^-0.5`; linear falls in a straight line
from `peak` to zero at `total_steps` (as in BERT fine-tuning), so it needs the
length of the run. A run with a time budget does not know its length in steps:
there `total_steps` is a variable that training moves as it measures its pace
(`LinearWarmupDecay.end_from`).
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.config import SCHEDULES
from mintransformer.core import checks


@keras.saving.register_keras_serializable(package="mintransformer")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warm-up then inverse-square-root decay; use with Adam(0.9, 0.98, 1e-9).

    Args:
        d_model: model width.
        warmup_steps: steps of linear warm-up (the paper: 4000).
        scale: multiplies the whole curve (the paper: 1.0).
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        self.d_model = checks.positive_int(d_model, "d_model")
        self.warmup_steps = checks.positive_int(warmup_steps, "warmup_steps")
        if not scale > 0:
            raise ValueError(f"`scale` must be positive, got {scale!r}.")
        self.scale = float(scale)

    @classmethod
    def for_peak(cls, d_model: int, warmup_steps: int, peak: float) -> NoamSchedule:
        """The schedule whose highest learning rate (at `warmup_steps`) is `peak`."""
        return cls(d_model, warmup_steps, scale=peak * (d_model * warmup_steps) ** 0.5)

    def __call__(self, step):
        # Keras counts optimizer steps from 0; the formula counts from 1.
        step = ops.cast(step, "float32") + 1.0
        rise = step * self.warmup_steps**-1.5
        return self.scale * self.d_model**-0.5 * ops.minimum(ops.rsqrt(step), rise)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="mintransformer")
class LinearWarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak`, then linear decay to zero at `total_steps`.

    Args:
        peak: the highest learning rate, reached at step `warmup_steps`.
        warmup_steps: steps of linear warm-up; fewer than `total_steps`.
        total_steps: the step at which the rate reaches zero (the run's length),
            until `end_from` hands that to a variable.
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int):
        if not peak > 0:
            raise ValueError(f"`peak` must be positive, got {peak!r}.")
        self.peak = float(peak)
        self.total_steps = checks.positive_int(total_steps, "total_steps")
        if total_steps < 2:
            raise ValueError(
                f"`total_steps` must be at least 2 (a step of warm-up and one of decay), "
                f"got {total_steps}."
            )
        self.warmup_steps = checks.positive_int(warmup_steps, "warmup_steps")
        if warmup_steps >= total_steps:
            raise ValueError(
                f"`warmup_steps` ({warmup_steps}) must be less than `total_steps` ({total_steps})."
            )
        self.end_step = None

    def end_from(self, end_step: keras.Variable) -> None:
        """Reads the step at which the rate reaches zero from `end_step` from now on.

        `end_step` is a float32 scalar that training may move between epochs (to
        where a time budget is expected to run out); an end within the warm-up
        counts as the step after it. Make it an optimizer variable (`optimizer.add_variable`):
        on JAX only the optimizer's own variables reach its compiled update.
        """
        self.end_step = end_step

    def __call__(self, step):
        # Keras counts optimizer steps from 0; the formula counts from 1.
        step = ops.cast(step, "float32") + 1.0
        end = self.total_steps
        if self.end_step is not None:
            end = ops.maximum(ops.convert_to_tensor(self.end_step), self.warmup_steps + 1.0)
        rise = step / self.warmup_steps
        fall = ops.maximum((end - step) / (end - self.warmup_steps), 0.0)
        return self.peak * ops.minimum(rise, fall)

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


# The name the TensorFlow Transformer tutorial gives the Noam schedule.
CustomSchedule = NoamSchedule
keras.saving.get_custom_objects()["mintransformer>CustomSchedule"] = NoamSchedule


def warmup_schedule(
    kind: str, d_model: int, peak: float, warmup_steps: int, total_steps: int
) -> keras.optimizers.schedules.LearningRateSchedule:
    """The `kind` schedule ("noam" or "linear") of a run of `total_steps` steps, peaking at `peak`.

    The warm-up is cut to fit in the run (for "linear", leaving at least one step of decay).
    """
    checks.one_of(kind, SCHEDULES, "schedule")
    if kind == "linear":
        return LinearWarmupDecay(peak, min(warmup_steps, total_steps - 1), total_steps)
    return NoamSchedule.for_peak(d_model, min(warmup_steps, total_steps), peak)

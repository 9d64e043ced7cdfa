"""The paper's learning-rate schedule (section 5.3), "Noam" warm-up then inverse square root.

    lr(step) = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

It rises linearly for `warmup_steps` steps, peaks at
`scale * (d_model * warmup_steps)^-0.5`, then decays as 1/sqrt(step).
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.layers import validation


@keras.saving.register_keras_serializable(package="mintransformer")
class CustomSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warm-up then inverse-square-root decay; use with Adam(0.9, 0.98, 1e-9).

    Args:
        d_model: model width.
        warmup_steps: steps of linear warm-up (the paper: 4000).
        scale: multiplies the whole curve (the paper: 1.0).
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        self.d_model = validation.positive_int(d_model, "d_model")
        self.warmup_steps = validation.positive_int(warmup_steps, "warmup_steps")
        if not scale > 0:
            raise ValueError(f"`scale` must be positive, got {scale!r}.")
        self.scale = float(scale)

    @classmethod
    def for_peak(cls, d_model: int, warmup_steps: int, peak: float) -> CustomSchedule:
        """The schedule whose highest learning rate (at `warmup_steps`) is `peak`."""
        return cls(d_model, warmup_steps, scale=peak * (d_model * warmup_steps) ** 0.5)

    def __call__(self, step):
        # Keras counts optimizer steps from 0; the formula counts from 1.
        step = ops.cast(step, "float32") + 1.0
        rise = step * self.warmup_steps**-1.5
        return self.scale * self.d_model**-0.5 * ops.minimum(ops.rsqrt(step), rise)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}

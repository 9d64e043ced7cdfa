"""Label-smoothed cross-entropy that ignores padding, and masked token accuracy.

Label smoothing (paper section 5.4) trains against `(1 - eps)` on the true token
plus `eps` spread evenly over the vocabulary. Padding positions of the labels
contribute nothing; the mean is over real tokens, not over the padded batch.
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer import checks


def smoothed_token_losses(labels, logits, label_smoothing: float):
    """Per-token smoothed cross-entropy `(batch, length)` from logits `(batch, length, vocab)`.

    With log p = z - logsumexp(z), the loss -(1 - eps) log p[label] - eps mean(log p)
    is logsumexp(z) - (1 - eps) z[label] - eps mean(z): written so, no
    `(batch, length, vocab)` tensor of log-probabilities is made, forward or backward.
    """
    logits = ops.cast(logits, "float32")
    true_logit = ops.take_along_axis(
        logits, ops.expand_dims(ops.cast(labels, "int32"), -1), axis=-1
    )[..., 0]
    return (
        ops.logsumexp(logits, axis=-1)
        - (1.0 - label_smoothing) * true_logit
        - label_smoothing * ops.mean(logits, axis=-1)
    )


@keras.saving.register_keras_serializable(package="mintransformer")
class MaskedLoss(keras.losses.Loss):
    """Mean label-smoothed cross-entropy over the labels that are not `pad_id`.

    Args:
        label_smoothing: eps in [0, 1).
        pad_id: label id to ignore.

    Call arguments:
        y_true: int labels `(batch, length)`.
        y_pred: logits `(batch, length, vocab)`.
    """

    def __init__(self, label_smoothing: float = 0.1, pad_id: int = 0, name="masked_loss", **kw):
        super().__init__(name=name, **kw)
        self.label_smoothing = checks.dropout_rate(label_smoothing, "label_smoothing")
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        real = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        losses = smoothed_token_losses(y_true, y_pred, self.label_smoothing)
        return ops.sum(losses * real) / ops.maximum(ops.sum(real), 1.0)

    def get_config(self):
        config = super().get_config()
        config.update(label_smoothing=self.label_smoothing, pad_id=self.pad_id)
        return config


@keras.saving.register_keras_serializable(package="mintransformer")
class MaskedAccuracy(keras.metrics.Metric):
    """Fraction of non-padding labels whose arg-max prediction is right."""

    def __init__(self, pad_id: int = 0, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        real = ops.not_equal(y_true, self.pad_id)
        hit = ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), ops.cast(y_true, "int32"))
        self.correct.assign_add(ops.sum(ops.cast(ops.logical_and(hit, real), "float32")))
        self.total.assign_add(ops.sum(ops.cast(real, "float32")))

    def result(self):
        return self.correct / ops.maximum(self.total, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}

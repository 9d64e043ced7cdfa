"""Label-smoothed cross-entropy that ignores padding, and masked token accuracy.

Label smoothing (paper section 5.4) trains against `(1 - eps)` on the true token
plus `eps` spread evenly over the vocabulary. Padding positions of the labels
contribute nothing; the mean is over real tokens, not over the padded batch.

`projected_cross_entropy` is the same loss for training: it takes the decoder's
hidden states and the output projection, and computes the loss and its gradient
together, so no `(tokens, vocab)` tensor outlives the forward pass.
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.backend.kernels import argmax_last_axis
from mintransformer.core import checks


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


def row_entries(matrix, columns):
    """`matrix[i, columns[i]]` for every row i: `(rows,)` from `(rows, n)` and int `(rows,)`."""
    return ops.take_along_axis(matrix, columns[:, None], axis=1)[:, 0]


def projected_cross_entropy(hidden, table, bias, labels, label_smoothing: float, pad_id: int):
    """`MaskedLoss` of the logits `hidden @ table^T + bias`, with its gradient computed at once.

    Differentiating the loss step by step would make and read several
    `(rows, vocab)` tensors (log-softmax, smoothing, the gradients of each).
    Here the only `(rows, vocab)` work after the logits is one softmax: the
    gradient with respect to the logits is `softmax + (eps - 1) * one_hot(label)
    - eps / vocab`, and everything but the softmax is applied to the weight
    gradients directly (a gather, a scatter-add and a rank-one term). The
    gradients of `hidden`, `table` and `bias` are multiplied out in the forward
    pass, so backpropagation only scales them.

    The projection comes as a token table, `(vocab, d_model)`, the layout of a tied
    embedding: the labels' rows are a gather of whole rows, and neither the table nor
    its gradient is ever transposed (the products take their operands transposed).

    The `(rows, vocab)` work (the logits, their softmax and the two products
    with it) runs in `hidden`'s dtype: bf16 under mixed precision, as every
    other product of the model does there; the logits of a bf16 product are
    bf16 already, so a float32 softmax of them would only cost time. The
    per-row sums and the returned gradients are float32.

    Args:
        hidden: `(rows, d_model)` decoder outputs (float32, or bfloat16 under
            mixed precision).
        table: `(vocab, d_model)` output projection, one row per token.
        bias: `(vocab,)`, or None.
        labels: int `(rows,)`.
        label_smoothing: eps in [0, 1).
        pad_id: label id to ignore.

    Returns:
        float32 scalars `(loss_sum, correct, real)`: the smoothed cross-entropy summed
        over the labels that are not `pad_id` (differentiable), how many of those the
        arg-max logit gets right, and how many there are.
    """
    eps = label_smoothing
    labels = ops.cast(labels, "int32")
    real = ops.cast(ops.not_equal(labels, pad_id), "float32")
    vocab = int(table.shape[0])
    product_dtype = keras.backend.standardize_dtype(hidden.dtype)

    def in_product_dtype(x):
        return ops.cast(x, product_dtype)

    def to_float32(x):
        return ops.cast(x, "float32")

    parameters = [to_float32(hidden), to_float32(table)]
    if bias is not None:
        parameters.append(to_float32(bias))

    @ops.custom_gradient
    def summed(labels, real, hidden, table, *bias):
        product_table = in_product_dtype(table)
        logits = ops.matmul(in_product_dtype(hidden), ops.transpose(product_table))
        if bias:
            logits = logits + in_product_dtype(bias[0])
        probabilities = ops.softmax(logits, axis=-1)
        best = argmax_last_axis(logits)
        # logsumexp(z) = z[best] - log p[best], and p[best] >= 1 / vocab cannot underflow.
        log_sum = to_float32(row_entries(logits, best)) - ops.log(
            to_float32(row_entries(probabilities, best))
        )
        true_logit = to_float32(row_entries(logits, labels))
        label_rows = ops.take(table, labels, axis=0)  # (rows, d_model)
        mean_row = ops.mean(table, axis=0)  # (d_model,)
        mean_logit = ops.matmul(hidden, mean_row)
        if bias:
            mean_logit = mean_logit + ops.mean(bias[0])
        # -(1 - eps) log p[label] - eps mean(log p)
        #     = logsumexp(z) - (1 - eps) z[label] - eps mean(z)
        losses = log_sum - (1.0 - eps) * true_logit - eps * mean_logit
        loss_sum = ops.sum(real * losses)
        correct = ops.sum(real * ops.cast(ops.equal(best, labels), "float32"))

        # d loss_sum / d logits = real * (softmax + (eps - 1) * one_hot(label) - eps / vocab);
        # the softmax goes through the matrix products, the rest is applied to them directly.
        real_hidden = hidden * real[:, None]
        d_hidden = real[:, None] * (
            to_float32(ops.matmul(probabilities, product_table))
            + (eps - 1.0) * label_rows
            - eps * mean_row
        )
        d_table = (
            to_float32(ops.matmul(ops.transpose(probabilities), in_product_dtype(real_hidden)))
            + (eps - 1.0) * ops.segment_sum(real_hidden, labels, num_segments=vocab)
            - (eps / vocab) * ops.sum(real_hidden, axis=0)
        )
        gradients = [d_hidden, d_table]
        if bias:
            label_counts = ops.segment_sum(real, labels, num_segments=vocab)
            d_bias = (
                to_float32(ops.matmul(in_product_dtype(real), probabilities))
                + (eps - 1.0) * label_counts
            )
            gradients.append(d_bias - (eps / vocab) * ops.sum(real))

        def gradient(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return (None, None, *[upstream[0] * g for g in gradients])

        return ops.stack([loss_sum, correct]), gradient

    loss_sum, correct = ops.unstack(summed(labels, real, *parameters), 2)
    return loss_sum, correct, ops.sum(real)


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
        self.label_smoothing = checks.unit_interval(label_smoothing, "label_smoothing")
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
        hit = ops.equal(argmax_last_axis(y_pred), ops.cast(y_true, "int32"))
        self.add_counts(
            ops.sum(ops.cast(ops.logical_and(hit, real), "float32")),
            ops.sum(ops.cast(real, "float32")),
        )

    def add_counts(self, correct, total):
        """Adds `correct` right labels out of `total` real ones (float32 scalars)."""
        self.correct.assign_add(correct)
        self.total.assign_add(total)

    def result(self):
        return self.correct / ops.maximum(self.total, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}

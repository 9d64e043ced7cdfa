"""The model `fit` trains a translation `Transformer` through: its loss takes the projection.

A train step through `Transformer` itself would build the logits of every
target position, `(batch, length, vocab)` floats, and then differentiate
log-softmax and label smoothing over them op by op. `TeacherForcing` returns the
decoder's hidden states instead, and its `compute_loss` hands them with the output
projection to `projected_cross_entropy`, which computes the loss and its
gradient in one go. Validation scores the ordinary logits with `MaskedLoss`.

Its weights are the transformer's own variables, in the same order: checkpoints,
averaging and the saved model are those of the transformer.
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.models.transformer import Transformer
from mintransformer.training.losses import MaskedAccuracy, MaskedLoss, projected_cross_entropy


class TeacherForcing(keras.Model):
    """Trains `transformer` on `((source_ids, target_ids), labels)` batches.

    Args:
        transformer: the model to train (built).
        label_smoothing: eps of the label-smoothed cross-entropy.
        pad_id: label id to ignore.

    Call arguments:
        inputs: `(source_ids, target_ids)`, int `(batch, source_length)` and
            `(batch, target_length)`.
        training: enables dropout.

    Returns:
        the decoder's hidden states `(batch, target_length, d_model)`.
    """

    def __init__(self, transformer: Transformer, label_smoothing: float, pad_id: int, **kwargs):
        super().__init__(**kwargs)
        self.transformer = transformer
        self.pad_id = pad_id
        self.label_smoothing = label_smoothing
        self.validation_loss = MaskedLoss(label_smoothing, pad_id=pad_id)
        self.accuracy = MaskedAccuracy(pad_id=pad_id)

    def call(self, inputs, training=None):
        return self.transformer.hidden_states(inputs, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The mean smoothed cross-entropy of the batch's real labels; counts the accuracy."""
        if not training:
            logits = self.transformer.project(y_pred)
            self.accuracy.update_state(y, logits)
            return self.validation_loss(y, logits)
        table, bias = self.transformer.output_table()
        width = y_pred.shape[-1]
        loss_sum, correct, real = projected_cross_entropy(
            ops.reshape(y_pred, (-1, width)),
            table,
            bias,
            ops.reshape(y, (-1,)),
            self.label_smoothing,
            self.pad_id,
        )
        self.accuracy.add_counts(correct, real)
        return loss_sum / ops.maximum(real, 1.0)

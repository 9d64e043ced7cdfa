"""All the training epochs as one stream of batches, so `fit` opens its data once.

`model.fit` on TensorFlow wraps a `PyDataset` in a `tf.data` iterator. Given the
dataset of one epoch, it opens a new iterator every epoch and drops the one it had
already opened and started filling; dropping it stalled every epoch for
seconds. Given one stream of all epochs and
`steps_per_epoch`, it keeps a single iterator from the first epoch to the last.

The stream also fixes which epoch each batch belongs to by its position in the
stream, not by when `on_epoch_end` runs: the iterator reads ahead, so an epoch's
first batches are drawn while the previous epoch ends.
"""

from __future__ import annotations

import keras


class EpochStream(keras.utils.PyDataset):
    """Epochs `first_epoch .. epochs - 1` of an epoch-wise dataset, back to back.

    Args:
        dataset: a `PyDataset` of one epoch whose `set_epoch(e)` draws epoch e's
            batches (the same number every epoch) and whose
            `token_counts(i)` counts batch i's real and padded tokens.
        first_epoch: the epoch the stream starts with (a resumed run's next).
        epochs: the epoch the stream ends before.
    """

    def __init__(self, dataset, first_epoch: int, epochs: int):
        super().__init__()
        if not 0 <= first_epoch < epochs:
            raise ValueError(f"no epoch between {first_epoch} and {epochs} to stream.")
        self.dataset = dataset
        self.steps_per_epoch = len(dataset)
        self.first_epoch = first_epoch
        self.epochs = epochs
        self._counts: dict[tuple[int, int], tuple[int, int]] = {}

    def __len__(self) -> int:
        return (self.epochs - self.first_epoch) * self.steps_per_epoch

    def locate(self, index: int) -> tuple[int, int]:
        """`(epoch, batch within the epoch)` of stream position `index`."""
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range for a stream of {len(self)}")
        epoch, batch = divmod(index, self.steps_per_epoch)
        return self.first_epoch + epoch, batch

    def __getitem__(self, index: int):
        epoch, batch = self.locate(index)
        if self.dataset.epoch != epoch:
            self.dataset.set_epoch(epoch)
            if len(self.dataset) != self.steps_per_epoch:
                raise ValueError(
                    f"epoch {epoch} has {len(self.dataset)} batches, not {self.steps_per_epoch}: "
                    "a stream needs the same number in every epoch."
                )
        self._counts[epoch, batch] = self.dataset.token_counts(batch)
        return self.dataset[batch]

    def token_counts(self, epoch: int, batch: int) -> tuple[int, int]:
        """`(real, padded)` tokens of `batch` of `epoch`, once it has been read."""
        return self._counts.pop((epoch, batch), (0, 0))

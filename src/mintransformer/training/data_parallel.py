"""Training batches under data parallelism: each batch's rows padded and split.

`ShardedBatches` pads each batch with whole rows of padding up to a multiple of the
device count (a token-budget batch holds any number of rows), rows that the loss and
metrics ignore, and gives each process its share of the rows. Every process reads the
same data with the same seed and keeps its own rows. Where to train is
`backend.distribution`.
"""

from __future__ import annotations

import keras
import numpy as np

from mintransformer.backend.distribution import Shards, current_shards


class ShardedBatches(keras.utils.PyDataset):
    """A dataset's batches with rows padded to a multiple of the devices, this process's rows.

    Args:
        dataset: a `PyDataset` of `(inputs, targets)` batches whose arrays all have
            the batch (rows) first; its `set_epoch`, `epoch` and `token_counts`
            pass through, and `rows(i)` counts the rows of batch i.
        shards: the devices and processes the rows are spread over.
        pad_id: the value of the padding rows (of inputs and targets alike).
        weight_rows: also return per-row sample weights, 0 on padding rows, for
            losses that do not skip `pad_id` targets themselves (class labels).
            Without it the padding rows must be ignored by the loss (their
            targets are all `pad_id`).
    """

    def __init__(self, dataset, shards: Shards, pad_id: int, weight_rows: bool = False):
        super().__init__()
        self.dataset = dataset
        self.shards = shards
        self.pad_id = pad_id
        self.weight_rows = weight_rows

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)

    def on_epoch_end(self) -> None:
        self.dataset.on_epoch_end()

    def token_counts(self, index: int) -> tuple[int, int]:
        """The whole batch's `(real, padded)` tokens, across all processes."""
        return self.dataset.token_counts(index)

    def padded_rows(self, rows: int) -> int:
        """`rows` rounded up to a multiple of the device count."""
        return -(-rows // self.shards.devices) * self.shards.devices

    def __getitem__(self, index: int):
        inputs, targets = self.dataset[index]
        rows = len(targets)
        total = self.padded_rows(rows)
        share = total // self.shards.processes
        mine = slice(self.shards.process_index * share, (self.shards.process_index + 1) * share)

        def pad(array: np.ndarray) -> np.ndarray:
            padding = [(0, total - rows)] + [(0, 0)] * (array.ndim - 1)
            return np.pad(array, padding, constant_values=self.pad_id)[mine]

        batch = keras.tree.map_structure(pad, (inputs, targets))
        if self.weight_rows:
            weights = (np.arange(total) < rows).astype("float32")[mine]
            return (*batch, weights)
        return batch

    def padding_summary(self) -> str:
        """How many rows of the current epoch are padding, in words."""
        rows = [self.dataset.rows(i) for i in range(len(self.dataset))]
        added = sum(self.padded_rows(r) for r in rows) - sum(rows)
        return (
            f"data parallel: {self.shards.devices} devices in {self.shards.processes} "
            f"process(es); {added:,} padding rows added to {sum(rows):,} "
            f"({100 * added / max(sum(rows), 1):.1f}%) so that every batch splits evenly; "
            "the loss ignores them, no example is dropped"
        )


def shard(train, val, pad_id: int, weight_rows: bool = False) -> tuple:
    """`train` and `val` as `ShardedBatches` under data parallelism; as they are otherwise."""
    shards = current_shards()
    if shards is None:
        return train, val
    train, val = (ShardedBatches(d, shards, pad_id, weight_rows) for d in (train, val))
    print(train.padding_summary())
    return train, val

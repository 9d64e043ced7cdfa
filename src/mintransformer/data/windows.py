"""Plain text for language modelling: lines -> one token stream -> fixed windows -> batches.

The stream and its convention (</s> between lines, prompts, decoding) are in
`data/token_stream.py`, which generation shares without Keras.
"""

from __future__ import annotations

import keras
import numpy as np


def make_windows(stream: np.ndarray, max_length: int) -> np.ndarray:
    """Cuts a stream into windows of `max_length + 1` tokens, one every `max_length`.

    Neighbouring windows share one token, so every next-token pair of the stream
    is a training example exactly once; the tail shorter than a window is dropped.

    Returns:
        int32 `(num_windows, max_length + 1)`; inputs `[:, :-1]`, labels `[:, 1:]`.
    """
    count = max((len(stream) - 1) // max_length, 0)
    starts = np.arange(count) * max_length
    return np.asarray(stream)[starts[:, None] + np.arange(max_length + 1)].astype("int32")


class WindowBatches(keras.utils.PyDataset):
    """`(inputs, labels)` int32 batches `(batch, max_length)` of windows, for `model.fit`.

    Args:
        windows: int `(num_windows, max_length + 1)` from `make_windows`.
        batch_size: windows per batch (one batch may be smaller).
        shuffle: re-shuffle the windows every epoch with the seed `seed + epoch`.
        seed: base seed of the shuffling.
        **kwargs: `keras.utils.PyDataset` options.
    """

    def __init__(self, windows: np.ndarray, batch_size: int, shuffle: bool, seed: int = 0, **kw):
        super().__init__(**kw)
        if len(windows) == 0:
            raise ValueError("`windows` is empty: no batch to make.")
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be positive, got {batch_size}.")
        self.windows = np.asarray(windows, "int32")
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Draws the batches of `epoch`, e.g. when resuming training."""
        self.epoch = epoch
        count = len(self.windows)
        order = np.arange(count)
        if self.shuffle:
            order = np.random.default_rng(self.seed + epoch).permutation(count)
        batches = [order[i : i + self.batch_size] for i in range(0, count, self.batch_size)]
        # A smaller last batch goes first: Keras' TensorFlow adapter fixes the batch
        # dimension when its first two batches share it, and a later odd batch then fails.
        if len(batches) > 1 and len(batches[-1]) < self.batch_size:
            batches.insert(0, batches.pop())
        self._batches = batches

    def on_epoch_end(self) -> None:
        self.set_epoch(self.epoch + 1)

    def __len__(self) -> int:
        return len(self._batches)

    def rows(self, index: int) -> int:
        """How many windows batch `index` holds (without building it)."""
        return len(self._batches[index])

    def token_counts(self, index: int) -> tuple[int, int]:
        """`(real, padded)` input tokens of batch `index`: windows have no padding."""
        tokens = len(self._batches[index]) * (self.windows.shape[1] - 1)
        return tokens, tokens

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        rows = self.windows[self._batches[index]]
        return rows[:, :-1], rows[:, 1:]

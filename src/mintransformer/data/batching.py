"""Token-budget length bucketing and teacher-forcing batches for translation training."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np

from mintransformer.data.lengths import batch_by_length, pad_batch, round_up


def make_translation_example(
    src_ids: Sequence[int], tgt_ids: Sequence[int], *, start_id: int, end_id: int
) -> tuple[list[int], list[int], list[int]]:
    """Builds one teacher-forcing example from a tokenized sentence pair.

    Args:
        src_ids: Source token ids, without special tokens.
        tgt_ids: Target token ids, without special tokens.
        start_id: Id of the <s> token.
        end_id: Id of the </s> token.

    Returns:
        ``(encoder_input, decoder_input, labels)``: ``src + [end]``, then ``[start] + tgt`` and
        ``tgt + [end]``, so ``labels[t] == decoder_input[t + 1]``.
    """
    target = [int(start_id), *map(int, tgt_ids), int(end_id)]
    return [*map(int, src_ids), int(end_id)], target[:-1], target[1:]


def distinct_shapes_first(
    batches: list[list[int]], widths: Sequence[Sequence[int]], pad_multiple: int
) -> list[list[int]]:
    """Moves two batches whose padded widths differ wherever widths vary to the front.

    Keras (TensorFlow backend) fixes the tf.data signature from the first two batches: a
    width they share becomes static, and any later batch of another width fails.

    Args:
        batches: lists of example indices.
        widths: per batch, the longest length of each of its inputs (before padding).
        pad_multiple: the multiple the widths are padded to.
    """
    padded = np.array([[round_up(w, pad_multiple) for w in row] for row in widths])
    varies = padded.min(axis=0) != padded.max(axis=0)
    if not varies.any():
        return batches
    # Such a pair always exists (two varying widths: a pair differing in both does).
    for first in range(len(batches)):
        differs = np.all((padded != padded[first]) | ~varies, axis=1)
        if differs.any():
            second = int(np.argmax(differs))
            order = [first, second]
            order += [i for i in range(len(batches)) if i not in (first, second)]
            return [batches[i] for i in order]
    raise AssertionError("unreachable: no pair of batches with distinct widths")


class _LengthBuckets(keras.utils.PyDataset):
    """What the batch datasets share: length buckets under a padded-token budget, re-drawn
    every epoch with the seed ``seed + epoch``.

    A subclass defines `_widths(batch)` (the longest length of each input of a batch) and
    ends its `__init__` with `_start(...)`.
    """

    def _widths(self, batch: list[int]) -> list[int]:
        raise NotImplementedError

    def _make_batches(self) -> list[list[int]]:
        batches = batch_by_length(
            self._lengths,
            max_tokens=self.max_tokens,
            max_batch_size=self.max_batch_size,
            shuffle=self.shuffle,
            seed=self.seed + self.epoch,
            pad_multiple=self.pad_multiple,
        )
        widths = [self._widths(batch) for batch in batches]
        return distinct_shapes_first(batches, widths, self.pad_multiple)

    def _start(
        self,
        lengths: list[int],
        pad_id: int,
        max_tokens: int,
        max_batch_size: int | None,
        shuffle: bool,
        seed: int,
        pad_multiple: int,
    ) -> None:
        """Keeps each example's length and the batching settings; draws epoch 0's batches."""
        self._lengths = lengths
        self.pad_id = pad_id
        self.max_tokens = max_tokens
        self.max_batch_size = max_batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.pad_multiple = pad_multiple
        self.epoch = 0
        self._batches = self._make_batches()

    def _batch(self, index: int) -> list[int]:
        if not 0 <= index < len(self._batches):
            raise IndexError(f"batch index {index} out of range for {len(self)} batches")
        return self._batches[index]

    def __len__(self) -> int:
        return len(self._batches)

    def rows(self, index: int) -> int:
        """How many examples batch `index` holds (without building it)."""
        return len(self._batch(index))

    def set_epoch(self, epoch: int) -> None:
        """Draws the batches of `epoch` (seed ``seed + epoch``), e.g. when resuming training."""
        self.epoch = epoch
        if self.shuffle:
            self._batches = self._make_batches()

    def on_epoch_end(self) -> None:
        """Moves to the next epoch and re-draws the batches with its seed."""
        self.set_epoch(self.epoch + 1)


class TranslationBatches(_LengthBuckets):
    """Batches of ((encoder_input, decoder_input), labels) numpy int32 arrays for model.fit.

    Batches hold sentence pairs of similar length under a padded-token budget, and are
    re-drawn after every epoch with the seed ``seed + epoch`` so runs are reproducible.
    """

    def __init__(
        self,
        src_ids: Sequence[Sequence[int]],
        tgt_ids: Sequence[Sequence[int]],
        *,
        start_id: int,
        end_id: int,
        pad_id: int = 0,
        max_tokens: int = 4096,
        max_length: int | None = None,
        max_batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        pad_multiple: int = 8,
        **kwargs,
    ) -> None:
        """Builds the teacher-forcing examples and the first epoch's batches.

        Args:
            src_ids: Tokenized source sentences, without special tokens.
            tgt_ids: Tokenized target sentences, without special tokens.
            start_id: Id of the <s> token.
            end_id: Id of the </s> token.
            pad_id: Padding id of inputs and labels.
            max_tokens: Padded-token budget of one batch.
            max_length: Pairs whose encoder or decoder input is longer are dropped (their
                number is `num_dropped`).
            max_batch_size: Optional cap on the number of pairs per batch.
            shuffle: Whether batches are shuffled and re-drawn each epoch.
            seed: Base seed of the shuffling.
            pad_multiple: Sequence widths are rounded up to this multiple.
            **kwargs: `keras.utils.PyDataset` options (`workers`, `use_multiprocessing`,
                `max_queue_size`).

        Raises:
            ValueError: On mismatched `src_ids`/`tgt_ids` counts, a non-positive `max_tokens`,
                `max_length`, `max_batch_size` or `pad_multiple`, or no pair left after dropping.
        """
        super().__init__(**kwargs)
        if len(src_ids) != len(tgt_ids):
            raise ValueError(
                f"src_ids and tgt_ids must have the same length, got {len(src_ids)} "
                f"and {len(tgt_ids)}"
            )
        if max_length is not None and max_length <= 0:
            raise ValueError(f"max_length must be positive, got {max_length}")

        self._encoder_inputs: list[list[int]] = []
        self._decoder_inputs: list[list[int]] = []
        self._labels: list[list[int]] = []
        for src, tgt in zip(src_ids, tgt_ids, strict=True):
            enc, dec, labels = make_translation_example(src, tgt, start_id=start_id, end_id=end_id)
            if max_length is not None and max(len(enc), len(dec)) > max_length:
                continue
            self._encoder_inputs.append(enc)
            self._decoder_inputs.append(dec)
            self._labels.append(labels)
        self.num_dropped = len(src_ids) - len(self._encoder_inputs)
        if not self._encoder_inputs:
            raise ValueError(
                f"no sentence pair left: src_ids has {len(src_ids)} pairs, "
                f"{self.num_dropped} dropped by max_length={max_length}"
            )

        lengths = [
            max(len(enc), len(dec))
            for enc, dec in zip(self._encoder_inputs, self._decoder_inputs, strict=True)
        ]
        self._start(lengths, pad_id, max_tokens, max_batch_size, shuffle, seed, pad_multiple)

    def _widths(self, batch: list[int]) -> list[int]:
        return [
            max(len(self._encoder_inputs[i]) for i in batch),
            max(len(self._decoder_inputs[i]) for i in batch),
        ]

    @property
    def num_examples(self) -> int:
        """Number of sentence pairs kept."""
        return len(self._lengths)

    def token_counts(self, index: int) -> tuple[int, int]:
        """`(real, padded)` source + target tokens of batch `index` (target: the labels)."""
        indices = self._batch(index)
        real = sum(len(self._encoder_inputs[i]) + len(self._labels[i]) for i in indices)
        widths = [round_up(width, self.pad_multiple) for width in self._widths(indices)]
        return real, len(indices) * sum(widths)

    def batch_indices(self, index: int) -> list[int]:
        """Example indices (into the kept pairs) of batch `index` of the current epoch."""
        return list(self._batches[index])

    def __getitem__(self, index: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        indices = self._batch(index)

        def pad(sequences: list[list[int]]) -> np.ndarray:
            return pad_batch(
                [sequences[i] for i in indices], pad_id=self.pad_id, multiple=self.pad_multiple
            )

        return (pad(self._encoder_inputs), pad(self._decoder_inputs)), pad(self._labels)


class ClassificationBatches(_LengthBuckets):
    """Batches of (token_ids, labels) numpy int32 arrays for model.fit, bucketed by length.

    Like `TranslationBatches`: similar lengths under a padded-token budget, re-drawn each
    epoch with the seed ``seed + epoch`` when shuffling.
    """

    def __init__(
        self,
        token_ids: Sequence[Sequence[int]],
        labels: Sequence[int],
        *,
        pad_id: int = 0,
        max_tokens: int = 16384,
        max_batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        pad_multiple: int = 8,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if len(token_ids) != len(labels):
            raise ValueError(
                f"token_ids and labels must have the same length, got {len(token_ids)} "
                f"and {len(labels)}"
            )
        if not token_ids:
            raise ValueError("no examples to batch")
        self._token_ids = [list(ids) for ids in token_ids]
        self._labels = np.asarray(labels, "int32")
        lengths = [len(ids) for ids in self._token_ids]
        self._start(lengths, pad_id, max_tokens, max_batch_size, shuffle, seed, pad_multiple)

    def _widths(self, batch: list[int]) -> list[int]:
        return [max(self._lengths[i] for i in batch)]

    def token_counts(self, index: int) -> tuple[int, int]:
        """`(real, padded)` tokens of batch `index`."""
        indices = self._batch(index)
        width = round_up(self._widths(indices)[0], self.pad_multiple)
        return sum(self._lengths[i] for i in indices), len(indices) * width

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        indices = self._batch(index)
        token_ids = pad_batch(
            [self._token_ids[i] for i in indices], pad_id=self.pad_id, multiple=self.pad_multiple
        )
        return token_ids, self._labels[indices]

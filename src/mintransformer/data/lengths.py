"""Length buckets and padding, in NumPy alone: shared by the training batches and by
inference (which must run without Keras on the ONNX engine)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def round_up(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def batch_by_length(
    lengths: Sequence[int],
    *,
    max_tokens: int,
    max_batch_size: int | None = None,
    shuffle: bool,
    seed: int,
    pad_multiple: int = 8,
) -> list[list[int]]:
    """Groups example indices into batches of similar length under a token budget.

    Indices are sorted by length and cut greedily into batches whose padded size,
    ``batch_size * round_up(longest_length, pad_multiple)``, stays within `max_tokens`.
    An example that alone exceeds the budget gets a batch of its own.

    Args:
        lengths: Length of each example.
        max_tokens: Token budget of one padded batch.
        max_batch_size: Optional cap on the number of examples per batch.
        shuffle: Whether to break length ties randomly and shuffle the order of the batches.
            Without it, equal lengths keep index order and batches go from short to long.
        seed: Seed of the shuffling.
        pad_multiple: Multiple that batches are padded to (as in `pad_batch`).

    Returns:
        Lists of example indices; together they hold every index exactly once.

    Raises:
        ValueError: On a non-positive `max_tokens`, `max_batch_size` or `pad_multiple`, or a
            negative length.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if max_batch_size is not None and max_batch_size <= 0:
        raise ValueError(f"max_batch_size must be positive, got {max_batch_size}")
    if pad_multiple <= 0:
        raise ValueError(f"pad_multiple must be positive, got {pad_multiple}")
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise ValueError("lengths must be non-negative")

    rng = np.random.default_rng(seed)
    if shuffle:
        order = np.lexsort((rng.random(lengths.size), lengths))
    else:
        order = np.argsort(lengths, kind="stable")

    batches: list[list[int]] = []
    batch: list[int] = []
    for index in order.tolist():
        # Sorted ascending, so the new example is the longest of the batch.
        padded = round_up(int(lengths[index]), pad_multiple)
        full = max_batch_size is not None and len(batch) >= max_batch_size
        if batch and (full or (len(batch) + 1) * padded > max_tokens):
            batches.append(batch)
            batch = []
        batch.append(index)
    if batch:
        batches.append(batch)

    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def pad_batch(
    sequences: Sequence[Sequence[int]],
    *,
    pad_id: int = 0,
    multiple: int = 8,
    dtype: str = "int32",
) -> np.ndarray:
    """Right-pads sequences into one array.

    The width is the longest length rounded up to `multiple`, so batches come in few distinct
    shapes and compiled train steps are retraced rarely.

    Args:
        sequences: Token id sequences.
        pad_id: Padding value.
        multiple: Width multiple.
        dtype: Array dtype.

    Returns:
        Array of shape ``(len(sequences), width)``.

    Raises:
        ValueError: If `sequences` is empty or `multiple` is not positive.
    """
    if not sequences:
        raise ValueError("sequences must not be empty")
    if multiple <= 0:
        raise ValueError(f"multiple must be positive, got {multiple}")
    width = round_up(max(len(seq) for seq in sequences), multiple)
    array = np.full((len(sequences), width), pad_id, dtype=dtype)
    for row, seq in enumerate(sequences):
        array[row, : len(seq)] = seq
    return array

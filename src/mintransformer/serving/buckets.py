"""Input shapes from a fixed, small set, so that a bounded number of them is compiled.

The decoding loops are compiled once per input shape. A server that padded each
batch to its own longest sentence and row count would compile a new program for
almost every request; instead each batch is padded up to the next bucket width
(8, 16, 24, 32, 48, 64, 96, ... up to the model's source positions) and the next
bucket row count (1, 2, 4, ... up to the largest batch). Pad rows repeat the first
row (a row of padding only would attend to nothing) and their results are dropped.
Greedy decoding drops finished rows down to the same row counts, so those shapes
are the only ones it runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def doubling_sizes(largest: int, smallest: int = 1) -> list[int]:
    """`smallest`, twice that, ... below `largest`, then `largest` itself."""
    sizes, size = [], smallest
    while size < largest:
        sizes.append(size)
        size *= 2
    return [*sizes, largest]


def half_step_sizes(largest: int, smallest: int = 8) -> list[int]:
    """`smallest`, then each doubling of it and one and a half times that (8, 16, 24,
    32, 48, 64, 96, ...) below `largest`, then `largest` itself.

    Every token of a source's padding is encoded like a real one, so the encoder's
    work grows with the bucket width: a batch whose longest source is 33 tokens costs
    48 positions a row here, where doubling sizes alone would cost 64.
    """
    doublings = doubling_sizes(largest, smallest)
    halfway = [size * 3 // 2 for size in doublings[1:-1] if size * 3 // 2 < largest]
    return sorted({*doublings, *halfway})


def bucket(value: int, sizes: Sequence[int]) -> int:
    """The smallest of `sizes` (ascending) that holds `value`."""
    for size in sizes:
        if value <= size:
            return size
    raise ValueError(f"{value} exceeds the largest bucket {sizes[-1]}")


class Buckets:
    """The widths and row counts batches are padded to.

    Args:
        positions: the model's source positions (the widest source, </s> included).
        max_batch_size: the most rows one batch holds.
        smallest_width: the narrowest bucket.
    """

    def __init__(self, positions: int, max_batch_size: int, smallest_width: int = 8):
        self.widths = half_step_sizes(positions, min(smallest_width, positions))
        self.rows = doubling_sizes(max_batch_size)

    def shapes(self) -> list[tuple[int, int]]:
        """Every `(rows, width)` a batch can have, in the order a warm-up compiles them:
        the widest at each row count first, the fewest rows first (most requests are
        one sentence), since a batch fits any larger bucket (its padding is masked, its
        pad rows dropped), then the rest from the narrowest, where most sentences are."""
        widest = [(rows, self.widths[-1]) for rows in self.rows]
        narrower = [(rows, width) for width in self.widths[:-1] for rows in self.rows]
        return widest + narrower

    def shape(self, sources: Sequence[Sequence[int]]) -> tuple[int, int]:
        """The `(rows, width)` bucket that holds `sources` most tightly."""
        return bucket(len(sources), self.rows), bucket(max(len(s) for s in sources), self.widths)

    def pad(
        self,
        sources: Sequence[Sequence[int]],
        pad_id: int,
        shape: tuple[int, int] | None = None,
    ) -> np.ndarray:
        """`sources` (at most the largest row count) as an int32 `(rows, width)` bucket:
        theirs, or `shape`, one that holds it."""
        rows, width = shape or self.shape(sources)
        batch = np.full((rows, width), pad_id, "int32")
        for row in range(rows):
            source = sources[row] if row < len(sources) else sources[0]
            batch[row, : len(source)] = source
        return batch

    def batches(self, lengths: Sequence[int], max_batch_size: int) -> list[list[int]]:
        """Indices in order of length, cut into batches of at most `max_batch_size`.

        Up to `max_batch_size` items are one batch, padded to its longest: one
        decode call with many rows costs less than several with fewer, narrower
        rows. Sorting only matters for more: similar lengths share a batch.
        """
        order = sorted(range(len(lengths)), key=lambda index: lengths[index])
        starts = range(0, len(order), max_batch_size)
        return [order[start : start + max_batch_size] for start in starts]

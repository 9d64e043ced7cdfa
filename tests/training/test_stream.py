"""EpochStream: every epoch of an epoch-wise dataset, back to back, for one fit iterator."""

import numpy as np
import pytest

from mintransformer.data.batching import TranslationBatches
from mintransformer.training.stream import EpochStream


def dataset(seed: int = 0) -> TranslationBatches:
    rng = np.random.default_rng(seed)
    sources = [list(rng.integers(4, 50, rng.integers(1, 12))) for _ in range(200)]
    targets = [list(rng.integers(4, 50, rng.integers(1, 12))) for _ in range(200)]
    return TranslationBatches(sources, targets, start_id=1, end_id=2, max_tokens=120, seed=seed)


def as_tuple(batch):
    (source, target_in), labels = batch
    return source.tolist(), target_in.tolist(), labels.tolist()


def test_the_stream_holds_each_epochs_batches_in_order():
    expected = []
    reference = dataset()
    for epoch in (2, 3, 4):
        reference.set_epoch(epoch)
        expected += [as_tuple(reference[i]) for i in range(len(reference))]
    stream = EpochStream(dataset(), first_epoch=2, epochs=5)
    assert len(stream) == 3 * stream.steps_per_epoch
    assert [as_tuple(stream[i]) for i in range(len(stream))] == expected
    assert expected[0] != expected[stream.steps_per_epoch]  # epochs are shuffled apart


def test_positions_map_to_epoch_and_batch_and_token_counts_follow_what_was_read():
    data = dataset()
    stream = EpochStream(data, first_epoch=1, epochs=3)
    n = stream.steps_per_epoch
    assert stream.locate(0) == (1, 0)
    assert stream.locate(n + 2) == (2, 2)
    stream[n + 2]
    data.set_epoch(2)
    assert stream.token_counts(2, 2) == data.token_counts(2)
    assert stream.token_counts(2, 2) == (0, 0)  # counted once
    with pytest.raises(IndexError, match="out of range"):
        stream[2 * n]


def test_a_stream_needs_an_epoch_to_stream():
    with pytest.raises(ValueError, match="no epoch"):
        EpochStream(dataset(), first_epoch=3, epochs=3)


def test_token_counts_add_up_the_real_and_padded_tokens_of_a_batch():
    data = TranslationBatches(
        [[5, 6, 7], [5]], [[8], [8, 9]], start_id=1, end_id=2, max_tokens=100, pad_multiple=4
    )
    real, padded = data.token_counts(0)
    (source, _), labels = data[0]
    assert real == int((source != 0).sum() + (labels != 0).sum()) == 4 + 2 + 2 + 3
    assert padded == source.size + labels.size == 2 * 4 + 2 * 4

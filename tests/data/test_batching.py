"""Tests for length-bucketed translation batching."""

import numpy as np
import pytest

from mintransformer.data.batching import (
    TranslationBatches,
    batch_by_length,
    make_translation_example,
    pad_batch,
)

START, END, PAD = 1, 2, 0


def random_pairs(n: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, 100, size=rng.integers(1, 40)).tolist() for _ in range(n)]
    tgt = [rng.integers(4, 100, size=rng.integers(1, 40)).tolist() for _ in range(n)]
    return src, tgt


def make_batches(**kwargs) -> TranslationBatches:
    src, tgt = random_pairs(200)
    options = {"start_id": START, "end_id": END, "max_tokens": 512, "seed": 3}
    return TranslationBatches(src, tgt, **(options | kwargs))


def test_make_translation_example_teacher_forcing() -> None:
    enc, dec, labels = make_translation_example([5, 6, 7], [8, 9], start_id=START, end_id=END)
    assert enc == [5, 6, 7, END]
    assert dec == [START, 8, 9]
    assert labels == [8, 9, END]
    assert labels[:-1] == dec[1:]


def test_batches_are_teacher_forcing_shifted() -> None:
    data = make_batches()
    for (enc, dec), labels in (data[i] for i in range(len(data))):
        assert enc.dtype == dec.dtype == labels.dtype == np.int32
        assert dec.shape == labels.shape
        assert np.all(dec[:, 0] == START)
        for row_dec, row_labels in zip(dec, labels, strict=True):
            n = int(np.sum(row_labels != PAD))
            assert row_labels[n - 1] == END
            np.testing.assert_array_equal(row_labels[: n - 1], row_dec[1:n])
        assert np.all(np.sum(enc == END, axis=1) == 1)


@pytest.mark.parametrize("max_tokens", [64, 300, 1000])
def test_batch_by_length_respects_budget(max_tokens: int) -> None:
    lengths = np.random.default_rng(1).integers(1, 60, size=500).tolist()
    batches = batch_by_length(lengths, max_tokens=max_tokens, shuffle=True, seed=0, pad_multiple=8)
    for batch in batches:
        longest = -(-max(lengths[i] for i in batch) // 8) * 8
        assert len(batch) * longest <= max_tokens
    assert sorted(i for batch in batches for i in batch) == list(range(500))


def test_dataset_batches_respect_budget_and_cover_all_examples() -> None:
    data = make_batches(max_tokens=400)
    seen = []
    for index in range(len(data)):
        (enc, dec), _ = data[index]
        assert enc.shape[0] * max(enc.shape[1], dec.shape[1]) <= 400
        assert data.rows(index) == enc.shape[0]
        seen.extend(data.batch_indices(index))
    assert sorted(seen) == list(range(data.num_examples)) == list(range(200))


def test_oversized_example_gets_its_own_batch() -> None:
    batches = batch_by_length([3, 100, 4, 5], max_tokens=32, shuffle=False, seed=0)
    assert [1] in batches
    assert sorted(i for batch in batches for i in batch) == [0, 1, 2, 3]


def test_max_batch_size() -> None:
    batches = batch_by_length([2] * 10, max_tokens=1000, max_batch_size=3, shuffle=False, seed=0)
    assert [len(b) for b in batches] == [3, 3, 3, 1]


def test_unshuffled_batches_go_from_short_to_long() -> None:
    lengths = [9, 1, 30, 1, 17]
    batches = batch_by_length(lengths, max_tokens=16, shuffle=False, seed=5, pad_multiple=8)
    assert batches == [[1, 3], [0], [4], [2]]


def test_pad_batch_multiple_and_pad_value() -> None:
    array = pad_batch([[5, 6, 7], [8]], pad_id=-1, multiple=4)
    np.testing.assert_array_equal(array, [[5, 6, 7, -1], [8, -1, -1, -1]])
    assert array.dtype == np.int32
    assert pad_batch([[1] * 8], multiple=8).shape == (1, 8)
    assert pad_batch([[1] * 9], multiple=8).shape == (1, 16)
    assert pad_batch([[1, 2]], multiple=1).shape == (1, 2)


def test_dataset_padding_multiple_and_pad_value() -> None:
    data = make_batches(pad_id=PAD, pad_multiple=16)
    for index in range(len(data)):
        (enc, dec), labels = data[index]
        assert enc.shape[1] % 16 == 0 and dec.shape[1] % 16 == 0
        # Every row ends at its END token; the rest is padding.
        ends = np.argmax(labels == END, axis=1)
        for row, end in enumerate(ends):
            assert np.all(labels[row, end + 1 :] == PAD)
            assert np.all(dec[row, end + 1 :] == PAD)


def epoch_order(data: TranslationBatches) -> list[list[int]]:
    return [data.batch_indices(i) for i in range(len(data))]


def test_shuffle_is_deterministic_per_seed_and_changes_per_epoch() -> None:
    first, second = make_batches(seed=7), make_batches(seed=7)
    assert epoch_order(first) == epoch_order(second)
    np.testing.assert_array_equal(first[0][1], second[0][1])
    assert epoch_order(make_batches(seed=8)) != epoch_order(first)

    epoch0 = epoch_order(first)
    first.on_epoch_end()
    second.on_epoch_end()
    assert epoch_order(first) != epoch0
    assert epoch_order(first) == epoch_order(second)
    assert len(epoch_order(first)) == len(epoch0)
    assert sorted(i for b in epoch_order(first) for i in b) == list(range(200))


def test_set_epoch_reproduces_epoch_order() -> None:
    data, resumed = make_batches(), make_batches()
    data.on_epoch_end()
    data.on_epoch_end()
    resumed.set_epoch(2)
    assert epoch_order(resumed) == epoch_order(data)


def test_no_shuffle_is_stable_across_epochs() -> None:
    data = make_batches(shuffle=False)
    before = epoch_order(data)
    data.on_epoch_end()
    assert epoch_order(data) == before


@pytest.mark.parametrize("shuffle", [True, False])
def test_first_two_batches_differ_in_every_varying_width(shuffle: bool) -> None:
    # Keras' TensorFlow backend derives a static tf.data signature from the first two batches.
    data = make_batches(shuffle=shuffle)
    for _ in range(3):
        shapes = np.array(
            [[data[i][0][0].shape[1], data[i][0][1].shape[1]] for i in range(len(data))]
        )
        varies = shapes.min(axis=0) != shapes.max(axis=0)
        assert varies.all()
        assert np.all(shapes[0] != shapes[1])
        data.on_epoch_end()


def test_max_length_drops_long_pairs() -> None:
    src = [[5] * 3, [5] * 10, [5] * 2, [5] * 4]
    tgt = [[6] * 3, [6] * 2, [6] * 12, [6] * 4]
    data = TranslationBatches(src, tgt, start_id=START, end_id=END, max_length=5)
    assert data.num_dropped == 2
    assert data.num_examples == 2
    # Encoder input len(src) + 1 and decoder input len(tgt) + 1 must both be <= 5.
    assert TranslationBatches(src, tgt, start_id=START, end_id=END, max_length=4).num_dropped == 3


def test_pydataset_options_are_passed_on() -> None:
    data = make_batches(workers=2, max_queue_size=4)
    assert data.workers == 2
    assert data.max_queue_size == 4
    assert not data.use_multiprocessing


def test_getitem_out_of_range() -> None:
    data = make_batches()
    with pytest.raises(IndexError):
        data[len(data)]


def test_errors() -> None:
    src, tgt = random_pairs(4)
    with pytest.raises(ValueError, match="src_ids"):
        TranslationBatches(src, tgt[:3], start_id=START, end_id=END)
    with pytest.raises(ValueError, match="max_tokens"):
        TranslationBatches(src, tgt, start_id=START, end_id=END, max_tokens=0)
    with pytest.raises(ValueError, match="max_length"):
        TranslationBatches(src, tgt, start_id=START, end_id=END, max_length=1)
    with pytest.raises(ValueError, match="src_ids"):
        TranslationBatches([], [], start_id=START, end_id=END)
    with pytest.raises(ValueError, match="max_tokens"):
        batch_by_length([1, 2], max_tokens=-5, shuffle=False, seed=0)
    with pytest.raises(ValueError, match="max_batch_size"):
        batch_by_length([1, 2], max_tokens=8, max_batch_size=0, shuffle=False, seed=0)
    with pytest.raises(ValueError, match="sequences"):
        pad_batch([])
    with pytest.raises(ValueError, match="multiple"):
        pad_batch([[1]], multiple=0)

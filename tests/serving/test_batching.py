"""Batching: requests that arrive together are decoded together, in bucketed shapes."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from mintransformer.serving.batching import Batcher
from mintransformer.serving.buckets import Buckets, bucket, doubling_sizes, half_step_sizes
from tests.serving.conftest import post_concurrently


def test_buckets_cover_every_length_with_a_few_shapes():
    buckets = Buckets(positions=24, max_batch_size=6)
    assert buckets.widths == [8, 16, 24] and buckets.rows == [1, 2, 4, 6]
    assert doubling_sizes(1) == [1] and bucket(9, [8, 16]) == 16
    with pytest.raises(ValueError):
        bucket(17, [8, 16])
    padded = buckets.pad([[5, 6, 2], [7, 2]], pad_id=0)
    assert padded.shape == (2, 8)
    np.testing.assert_array_equal(padded[1], [7, 2, 0, 0, 0, 0, 0, 0])
    three = buckets.pad([[5, 2]] * 3, pad_id=0)
    assert three.shape == (4, 8) and (three[3] == three[0]).all()  # a pad row repeats row 0
    assert buckets.batches([3, 20, 4, 9, 5], max_batch_size=2) == [[0, 2], [4, 3], [1]]
    assert buckets.batches([3, 20, 4], max_batch_size=6) == [[0, 2, 1]]  # one call
    assert buckets.shape([[5, 6, 2], [7, 2]]) == (2, 8)
    wide = buckets.pad([[5, 6, 2], [7, 2]], pad_id=0, shape=(4, 24))
    assert wide.shape == (4, 24) and (wide[:2, :8] == padded).all() and not wide[:, 8:].any()
    assert (wide[2:, :8] == padded[0]).all()  # pad rows repeat row 0


def test_a_warm_up_compiles_the_widest_shape_of_every_row_count_first():
    buckets = Buckets(positions=24, max_batch_size=4)
    shapes = buckets.shapes()
    assert shapes[:3] == [(1, 24), (2, 24), (4, 24)]  # then any batch fits a compiled shape
    assert shapes[3:] == [(1, 8), (2, 8), (4, 8), (1, 16), (2, 16), (4, 16)]


def test_width_buckets_pad_a_source_by_at_most_half():
    widths = Buckets(positions=129, max_batch_size=32).widths
    assert widths == half_step_sizes(129) == [8, 16, 24, 32, 48, 64, 96, 128, 129]
    assert half_step_sizes(24) == [8, 16, 24] and half_step_sizes(5, smallest=5) == [5]
    for length in range(17, 130):  # from 16 on, padding adds at most half
        assert length <= bucket(length, widths) <= length * 1.5


class RecordingDecode:
    """A decode function that records its calls and returns each item doubled."""

    def __init__(self, delay: float = 0.0):
        self.calls: list[tuple] = []
        self.delay = delay

    def __call__(self, key, items):
        self.calls.append((key, list(items)))
        time.sleep(self.delay)
        return [item * 2 for item in items]


def test_requests_arriving_together_share_one_decode_call():
    decode = RecordingDecode()
    batcher = Batcher(decode, max_batch_size=8, max_wait_ms=200)
    futures = [batcher.submit([i, i + 100], key="greedy") for i in range(4)]
    batcher.start()
    results = [future.result(timeout=10) for future in futures]
    batcher.stop()
    assert results == [[2 * i, 2 * (i + 100)] for i in range(4)]
    assert len(decode.calls) == 1 and len(decode.calls[0][1]) == 8


def test_different_settings_are_not_mixed_and_a_full_batch_does_not_wait():
    decode = RecordingDecode()
    batcher = Batcher(decode, max_batch_size=2, max_wait_ms=10_000)
    started = time.monotonic()
    a = batcher.submit([1], key="beam 4")
    b = batcher.submit([2], key="greedy")
    c = batcher.submit([3], key="beam 4")
    batcher.start()
    assert a.result(timeout=5) == [2] and c.result(timeout=5) == [6]
    assert time.monotonic() - started < 5  # two items filled the batch: no 10 s wait
    batcher.stop()  # stopping stops the waiting: the greedy request is decoded, not lost
    assert b.result(timeout=5) == [4]
    assert sorted(key for key, _ in decode.calls) == ["beam 4", "greedy"]


def test_a_lone_client_is_never_held_for_company():
    decode = RecordingDecode()
    batcher = Batcher(decode, max_batch_size=8, max_wait_ms=10_000)
    batcher.start()
    started = time.monotonic()
    for i in range(3):  # one request at a time, each sent once the last is answered
        assert batcher.submit([i], key="greedy").result(timeout=5) == [2 * i]
    assert time.monotonic() - started < 5
    batcher.stop()
    assert [items for _, items in decode.calls] == [[0], [1], [2]]


def test_a_request_that_arrives_during_a_call_waits_for_company():
    decode = RecordingDecode(delay=0.3)
    batcher = Batcher(decode, max_batch_size=8, max_wait_ms=2_000)
    batcher.start()
    first = batcher.submit([1], key="greedy")  # alone: decoded at once
    time.sleep(0.1)
    second = batcher.submit([2], key="greedy")  # arrives while the first call runs
    time.sleep(0.5)
    third = batcher.submit([3], key="greedy")  # within the second's wait
    assert [f.result(timeout=10) for f in (first, second, third)] == [[2], [4], [6]]
    batcher.stop()
    assert [items for _, items in decode.calls] == [[1], [2, 3]]


def test_a_failing_batch_fails_its_requests_only():
    def decode(key, items):
        if key == "bad":
            raise ValueError("boom")
        return items

    batcher = Batcher(decode, max_batch_size=4, max_wait_ms=0)
    batcher.start()
    with pytest.raises(ValueError, match="boom"):
        batcher.submit([1], key="bad").result(timeout=5)
    assert batcher.submit([1], key="good").result(timeout=5) == [1]
    batcher.stop()
    with pytest.raises(RuntimeError, match="shutting down"):
        batcher.submit([1], key="good")


class FakeTranslator:
    """What `TranslationService` calls, recording the shapes it compiles and decodes."""

    max_source_length, max_output_length = 23, 10
    tokenizer = SimpleNamespace(pad_id=0, end_id=2, vocab_size=50)

    def __init__(self, shapes_allowed: threading.Semaphore):
        self.shapes_allowed, self.warmed, self.decoded = shapes_allowed, [], []

    def warm_up(self, ids, beam_size, shrink_to) -> None:
        assert self.shapes_allowed.acquire(timeout=5)
        self.warmed.append((beam_size, *ids.shape))

    def translate_ids(self, ids, beam_size, alpha, n_best, shrink_to) -> list:
        self.decoded.append((beam_size, *ids.shape))
        return [[(f"{row[0]}", 0.0)] for row in ids]


def fake_service(shapes_allowed: threading.Semaphore):
    from mintransformer.serving.limits import Limits
    from mintransformer.serving.services import TranslationService

    translator = FakeTranslator(shapes_allowed)
    service = TranslationService(
        translator, "run", "keras", {}, Limits(), max_batch_size=2, max_wait_ms=0
    )
    return service, translator


def wait_for(condition, seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.001)
    return condition()


def test_a_request_during_the_warm_up_takes_a_larger_compiled_shape_over_a_compile():
    shapes_allowed = threading.Semaphore(0)  # the warm-up waits before its first shape
    service, translator = fake_service(shapes_allowed)
    service.start(warm_beams=(1,))
    assert service.warm_status()["shapes"] == 6 and not service.warm_up.finished.is_set()
    # Nothing compiled: two rows of 3 tokens compile their own shape.
    assert service.decode((1, 0.6, 1), [[5, 6, 2], [7, 2]]) == [[("5", 0.0)], [("7", 0.0)]]
    assert translator.decoded[-1] == (1, 2, 8)
    # One row of 3 tokens: (1, 8) is not compiled, (2, 8) holds it (a pad row, dropped).
    assert service.decode((1, 0.6, 1), [[5, 6, 2]]) == [[("5", 0.0)]]
    assert translator.decoded[-1] == (1, 2, 8)
    shapes_allowed.release(2)
    assert wait_for(lambda: service.warm_status()["shapes_ready"] == 2)
    assert translator.warmed == [(1, 1, 24), (1, 2, 24)]  # the widest, fewest rows first
    # Two rows of 12 tokens: (2, 16) is not compiled yet, (2, 24) is.
    assert service.decode((1, 0.6, 1), [[5] * 11 + [2], [7] * 12]) == [[("5", 0.0)], [("7", 0.0)]]
    assert translator.decoded[-1] == (1, 2, 24)
    # One row of 12 tokens: (1, 16) is not compiled; of those that hold it, (1, 24) has
    # the fewest rows.
    assert service.decode((1, 0.6, 1), [[5] * 11 + [2]]) == [[("5", 0.0)]]
    assert translator.decoded[-1] == (1, 1, 24)
    # A beam size the warm-up does not compile: its own shape, compiled on first use.
    service.decode((4, 0.6, 1), [[5, 6, 2]])
    assert translator.decoded[-1] == (4, 1, 8)
    shapes_allowed.release(5)
    assert service.warm_up.finished.wait(5)
    assert service.warm_status() == {"shapes_ready": 6, "shapes": 6}
    service.decode((1, 0.6, 1), [[5] * 11 + [2]])
    assert translator.decoded[-1] == (1, 1, 16)  # warmed now: its own, tightest shape
    service.stop()


def test_requests_are_decoded_while_the_warm_up_compiles_on_its_own_thread():
    shapes_allowed = threading.Semaphore(1)  # the second shape's compile waits
    service, translator = fake_service(shapes_allowed)
    service.start(warm_beams=(1,))
    assert wait_for(lambda: service.warm_status()["shapes_ready"] == 1)
    # A compile is in progress (blocked); the batcher's thread answers regardless.
    for _ in range(3):
        answer = service.batcher.submit([[5, 6, 2]], (1, 0.6, 1)).result(timeout=2)
        assert answer == [[("5", 0.0)]]
    assert service.warm_status()["shapes_ready"] == 1 and not service.warm_up.finished.is_set()
    shapes_allowed.release(5)
    assert service.warm_up.finished.wait(5)
    assert translator.warmed == [(1, *shape) for shape in service.buckets.shapes()]
    service.stop()


def test_stopping_during_the_warm_up_waits_for_the_shape_in_progress_only(caplog):
    shapes_allowed = threading.Semaphore(1)
    service, translator = fake_service(shapes_allowed)
    service.start(warm_beams=(1,))
    assert wait_for(lambda: service.warm_status()["shapes_ready"] == 1)
    stopper = threading.Thread(target=service.stop)
    stopper.start()
    time.sleep(0.05)
    assert stopper.is_alive()  # the compile in progress is not interrupted
    shapes_allowed.release(5)
    stopper.join(5)
    assert not stopper.is_alive()
    assert len(translator.warmed) == 2 and service.warm_status()["shapes_ready"] == 2
    assert not service.warm_up.finished.is_set() and "warmed up" not in caplog.text


def test_a_failing_warm_up_is_logged_and_requests_still_compile_their_own_shapes(caplog):
    service, translator = fake_service(threading.Semaphore(1))

    def broken(ids, beam_size, shrink_to):
        raise RuntimeError("no compiler")

    translator.warm_up = broken
    service.start(warm_beams=(1,))
    assert wait_for(lambda: "the warm-up failed" in caplog.text)
    answer = service.batcher.submit([[5, 6, 2]], (1, 0.6, 1)).result(timeout=2)
    assert answer == [[("5", 0.0)]] and translator.decoded[-1] == (1, 1, 8)
    assert service.warm_status() == {"shapes_ready": 0, "shapes": 6}
    service.stop()


def test_concurrent_api_requests_are_decoded_in_few_calls_and_few_shapes(
    client, translation_service
):
    assert translation_service.warm_up.finished.wait(300)
    stats = translation_service.batcher.stats
    calls_before, shapes_before = stats.calls, set(translation_service.shapes_run)
    texts = ["one", "twelve", "three hundred and forty-five", "nine", "sixty", "two"]
    answers = post_concurrently(client, "/api/translate", texts)
    expected = translation_service.translator.translate(texts)
    assert [answers[i]["translation"] for i in range(len(texts))] == expected
    assert stats.calls - calls_before < len(texts)  # some requests were decoded together
    # Every shape decoded was one warmed at start-up (greedy): nothing new was compiled.
    new_shapes = translation_service.shapes_run - shapes_before
    assert new_shapes <= set(translation_service.warm_up.compiled())


def test_service_decodes_directly(translation_service):
    results = asyncio.run(translation_service.translate(["five"], 1, 0.6, 1, False))
    assert results[0]["translation"] == translation_service.translator.translate(["five"])[0]

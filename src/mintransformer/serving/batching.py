"""Requests that arrive together are decoded together.

`Batcher` runs one worker thread. A request (`submit`) joins a queue; the worker
takes the oldest one, waits up to `max_wait_ms` for others with the same decoding
settings until `max_batch_size` items are waiting, and hands them all to `decode` in
one call. Each request's future then gets its own items' results, in its order.
With `max_wait_ms=0` and `max_batch_size=1` every request is decoded alone.

The wait is only paid where other requests are about: the oldest request waits for
company if the previous call decoded several requests, or if requests arrived while it
ran. A lone client's requests are decoded at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("mintransformer.serving")


@dataclass(eq=False)  # jobs are compared by identity
class _Job:
    items: Sequence[Any]
    key: Hashable
    future: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)


@dataclass
class BatchStats:
    """What the worker has done: decode calls, items decoded, the largest call."""

    calls: int = 0
    items: int = 0
    largest: int = 0


class Batcher:
    """Collects requests into batches for `decode`, on one worker thread.

    Args:
        decode: `decode(key, items)` -> one result per item; called on the worker
            thread only, with the items of one or more requests that share `key`.
        max_batch_size: the most items gathered for one call (a larger request is
            still decoded whole: `decode` splits it).
        max_wait_ms: how long the oldest request waits for company, where company is
            expected (see the module docstring).
    """

    def __init__(
        self,
        decode: Callable[[Hashable, list], list],
        max_batch_size: int = 32,
        max_wait_ms: float = 5.0,
    ):
        if max_batch_size < 1 or max_wait_ms < 0:
            raise ValueError("max_batch_size must be >= 1 and max_wait_ms >= 0")
        self.decode = decode
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000
        self.stats = BatchStats()
        self._queue: list[_Job] = []
        self._changed = threading.Condition()
        self._stopping = False
        self._last_call_requests = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Starts the worker thread (again, after `stop`)."""
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="batcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finishes the requests already queued, then ends the worker thread."""
        with self._changed:
            self._stopping = True
            self._changed.notify()
        if self._thread is not None:
            self._thread.join()

    def submit(self, items: Sequence[Any], key: Hashable) -> Future:
        """Queues `items` to be decoded with settings `key`; the future gets their results."""
        job = _Job(list(items), key)
        with self._changed:
            if self._stopping:
                raise RuntimeError("the server is shutting down")
            self._queue.append(job)
            self._changed.notify()
        return job.future

    def _waiting(self, key: Hashable) -> int:
        return sum(len(job.items) for job in self._queue if job.key == key)

    def _next_batch(self) -> list[_Job] | None:
        """The jobs of the next decode call; None once stopped and drained."""
        with self._changed:
            # Requests queued before the worker asks arrived while the last call ran.
            company_expected = self._last_call_requests > 1 or bool(self._queue)
            while not self._queue:
                if self._stopping:
                    return None
                self._changed.wait()
            key = self._queue[0].key
            deadline = self._queue[0].arrived + self.max_wait
            while (
                company_expected and not self._stopping and self._waiting(key) < self.max_batch_size
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            taken, count = [], 0
            for job in self._queue:
                if job.key == key and (not taken or count + len(job.items) <= self.max_batch_size):
                    taken.append(job)
                    count += len(job.items)
            self._queue = [job for job in self._queue if job not in taken]
            self._last_call_requests = len(taken)
            return taken

    def _work(self) -> None:
        while (jobs := self._next_batch()) is not None:
            items = [item for job in jobs for item in job.items]
            try:
                results = self.decode(jobs[0].key, items)
            except Exception as err:  # the requests fail; the worker and server go on
                log.exception("decoding a batch of %d failed", len(items))
                for job in jobs:
                    job.future.set_exception(err)
                continue
            self.stats.calls += 1
            self.stats.items += len(items)
            self.stats.largest = max(self.stats.largest, len(items))
            start = 0
            for job in jobs:
                job.future.set_result(results[start : start + len(job.items)])
                start += len(job.items)

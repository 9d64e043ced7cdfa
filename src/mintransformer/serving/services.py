"""The model behind the server: one service per task, loaded once and kept warm.

`load_service(path, engine, ...)` reads the run's (or export folder's) config.json
for its task and opens it with `Translator`, `Classifier` or `Generator`. The
endpoints in `app` call the service; the service calls the model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np

from mintransformer.data.token_stream import decode_text
from mintransformer.inference.translator import SourceTooLongError
from mintransformer.runs.directory import RunDirectory
from mintransformer.serving.batching import Batcher
from mintransformer.serving.buckets import Buckets
from mintransformer.serving.limits import Limits, RequestError

log = logging.getLogger("mintransformer.serving")
CONFIG_FILE = "config.json"


def read_task_config(path: Path) -> dict:
    """The settings in `path`/config.json (a run directory or an export folder)."""
    config_path = Path(path) / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(f"{path} has no {CONFIG_FILE}: is it a run or export folder?")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config.setdefault("task", "translation")  # runs written before LMs had none
    return config


def training_result(path: Path) -> dict | None:
    """The last row of the run's log.csv (its final epoch's metrics), if there is one."""
    rows = RunDirectory(path).log()
    return {"epochs": len(rows), "last_epoch": rows[-1]} if rows else None


class Service:
    """What every task's service has: its task, engine, settings and `info`."""

    task = ""

    def __init__(self, path: Path, engine: str, config: dict, limits: Limits):
        self.path, self.engine, self.config, self.limits = Path(path), engine, config, limits

    def start(self) -> float:
        """Starts background work and compiles what requests will run; returns seconds."""
        return 0.0

    def stop(self) -> None:
        """Finishes queued work."""

    def warm_status(self) -> dict | None:
        """How far compiling in the background is (None: this service compiles nothing
        after start-up)."""
        return None

    def info(self) -> dict:
        return {
            "task": self.task,
            "engine": self.engine,
            "run": self.path.name,
            "sizes": self.sizes(),
            "config": self.config,
            "training": training_result(self.path),
            "limits": dataclasses.asdict(self.limits),
        }

    def sizes(self) -> dict:
        names = ("num_layers", "d_model", "num_heads", "dff", "vocab_size", "max_length")
        return {name: self.config[name] for name in names if name in self.config}


class WarmUp:
    """Compiles a server's `(beam_size, rows, width)` shapes, in order, on a thread of its
    own, while requests are decoded on the batcher's: a request never waits for a compile
    in progress. Logs each beam size's completion and the end.

    Args:
        shapes: the shapes to compile, in order.
        compile_shape: compiles one shape (called on the warm-up thread).
    """

    def __init__(
        self,
        shapes: list[tuple[int, int, int]],
        compile_shape: Callable[[tuple[int, int, int]], None] | None = None,
    ):
        self.shapes = shapes
        self.compile_shape = compile_shape
        self.done = 0
        self.began = time.perf_counter()
        self.finished = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Starts compiling on the warm-up thread (with no shapes, it has ended)."""
        self.began = time.perf_counter()
        if not self.shapes:
            self.finish()
            return
        self._thread = threading.Thread(target=self._work, name="warm-up", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops after the shape being compiled (the compiler cannot be interrupted)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def _work(self) -> None:
        for shape in self.shapes:
            if self._stopping.is_set():
                return
            try:
                self.compile_shape(shape)
            except Exception:  # requests still compile their own shapes
                log.exception("the warm-up failed at shape %s", shape)
                return
            self._shape_done()

    def pending(self, shape: tuple[int, int, int]) -> bool:
        """Whether `shape` is still to be compiled by this warm-up."""
        return shape in self.shapes[self.done :]

    def compiled(self) -> list[tuple[int, int, int]]:
        """The shapes compiled so far."""
        return self.shapes[: self.done]

    def _shape_done(self) -> None:
        """Counts the next shape as compiled; logs when a beam size or all are done."""
        beam_size = self.shapes[self.done][0]
        self.done += 1
        remaining = self.done < len(self.shapes)
        if not remaining or self.shapes[self.done][0] != beam_size:
            search = "greedy" if beam_size == 1 else f"beam {beam_size}"
            shapes = sum(shape[0] == beam_size for shape in self.shapes)
            log.info(
                "ready: %s at every bucket shape (%d), %.1f s into the warm-up",
                search, shapes, self.seconds(),
            )  # fmt: skip
        if not remaining:
            self.finish()

    def finish(self) -> None:
        log.info("warmed up in %.1f s (%d shapes)", self.seconds(), len(self.shapes))
        self.finished.set()

    def seconds(self) -> float:
        return time.perf_counter() - self.began

    def status(self) -> dict:
        return {"shapes_ready": self.done, "shapes": len(self.shapes)}


class TranslationService(Service):
    """Translations, batched across requests by a `Batcher`, in bucketed shapes."""

    task = "translation"

    def __init__(self, translator, *args, max_batch_size: int = 32, max_wait_ms: float = 5.0):
        super().__init__(*args)
        self.translator = translator
        self.max_batch_size = max_batch_size
        self.buckets = Buckets(translator.max_source_length + 1, max_batch_size)
        self.batcher = Batcher(self.decode, max_batch_size, max_wait_ms)
        # (beam_size, rows, width) decoded, on the batcher's one worker thread.
        self.shapes_run: set[tuple] = set()
        self.warm_up = WarmUp([])

    def sizes(self) -> dict:
        sizes = super().sizes()
        sizes["vocab_size"] = self.translator.tokenizer.vocab_size
        sizes["max_source_tokens"] = self.translator.max_source_length
        sizes["max_output_tokens"] = self.translator.max_output_length
        return sizes

    def info(self) -> dict:
        info = super().info()
        info["batching"] = {
            "max_batch_size": self.max_batch_size,
            "max_wait_ms": self.batcher.max_wait * 1000,
            "widths": self.buckets.widths,
            "rows": self.buckets.rows,
            "decode_calls": self.batcher.stats.calls,
            "sentences": self.batcher.stats.items,
            "largest_batch": self.batcher.stats.largest,
            "shapes_run": len(self.shapes_run),
        }
        return info

    def warm_status(self) -> dict:
        return self.warm_up.status()

    def start(self, warm_beams: tuple[int, ...] = (1,)) -> None:
        """Starts the batcher, and the warm-up, which compiles every bucket shape for
        greedy decoding (and each beam size of `warm_beams` above 1) one at a time on its
        own thread.

        Requests are answered from the start: during the warm-up one runs at the
        smallest compiled shape that holds it (`_shape`), or where none does yet, compiles
        its own (seconds). `warm_up` says how far the warm-up is."""
        shapes = [(beam, *shape) for beam in warm_beams for shape in self.buckets.shapes()]
        self.warm_up = WarmUp(shapes, self._warm)
        self.batcher.start()
        self.warm_up.start()

    def _warm(self, shape: tuple[int, int, int]) -> None:
        """Compiles what decoding a batch of `shape` runs (on the warm-up thread)."""
        beam_size, rows, width = shape
        ids = np.full((rows, width), self.translator.tokenizer.pad_id, "int32")
        ids[:, 0] = self.translator.tokenizer.end_id
        self.translator.warm_up(ids, beam_size, self.buckets.rows)

    def stop(self) -> None:
        self.warm_up.stop()
        self.batcher.stop()

    def _run(self, ids: np.ndarray, key: tuple) -> list:
        beam_size, alpha, n_best = key
        self.shapes_run.add((beam_size, *ids.shape))
        return self.translator.translate_ids(ids, beam_size, alpha, n_best, self.buckets.rows)

    def _shape(self, beam_size: int, rows: int, width: int) -> tuple[int, int]:
        """`(rows, width)`, or while the warm-up has yet to compile that shape, the
        smallest compiled one that holds it, the fewest rows first, then the narrowest:
        padding costs less than a compile."""
        if not self.warm_up.pending((beam_size, rows, width)):
            return rows, width
        ready = self.shapes_run.union(self.warm_up.compiled())
        holding = [(r, w) for b, r, w in ready if b == beam_size and r >= rows and w >= width]
        return min(holding, default=(rows, width))

    def decode(self, key: tuple, sources: list[list[int]]) -> list:
        """The batcher's call: `encode_sources` ids, decoded with settings `key`
        `(beam_size, alpha, n_best)` in batches of bucketed shapes; per source its
        `translate_ids` result."""
        results: list = [None] * len(sources)
        pad_id = self.translator.tokenizer.pad_id
        for batch in self.buckets.batches([len(s) for s in sources], self.max_batch_size):
            batch_sources = [sources[i] for i in batch]
            shape = self._shape(key[0], *self.buckets.shape(batch_sources))
            outputs = self._run(self.buckets.pad(batch_sources, pad_id, shape), key)
            for index, output in zip(batch, outputs, strict=False):
                results[index] = output
        return results

    async def translate(
        self, texts: list[str], beam_size: int, alpha: float, n_best: int, attention: bool
    ) -> list[dict]:
        self.limits.check_texts(texts)
        self.limits.check_beam(beam_size, n_best)
        if attention and self.translator.model is None:
            raise RequestError(422, "`attention` needs the keras engine (serve --engine keras).")
        results: list[dict | None] = [None] * len(texts)
        todo = [i for i, text in enumerate(texts) if text.strip()]
        for i in set(range(len(texts))) - set(todo):  # empty in, empty out
            results[i] = {"translation": "", "n_best": [{"translation": "", "score": None}]}
        if todo:
            sources = await asyncio.to_thread(self.encode, [texts[i] for i in todo], todo)
            decoded = await _batched(self.batcher, sources, (beam_size, float(alpha), n_best))
            for i, hypotheses in zip(todo, decoded, strict=True):
                results[i] = {
                    "translation": hypotheses[0][0],
                    "n_best": [{"translation": t, "score": s} for t, s in _distinct(hypotheses)],
                }
        if attention:
            for i, result in enumerate(results):
                result["attention"] = await asyncio.to_thread(
                    self.attention, texts[i], result["translation"]
                )
        return results

    def encode(self, texts: list[str], indices: list[int]) -> list[list[int]]:
        """The source ids of `texts` (`texts[k]` of the request is its `indices[k]`); a 422
        naming the first that the model cannot read whole, rather than a translation of
        its truncated start."""
        try:
            return self.translator.encode_sources(texts, truncate=False)
        except SourceTooLongError as err:
            raise RequestError(
                422,
                f"`texts[{indices[err.index]}]` is {err.tokens} subword tokens; this model "
                f"reads at most {err.limit}: split it into sentences.",
            ) from None

    def attention(self, text: str, translation: str) -> dict:
        """Every attention map of `text` and its `translation`, as `viz.attention_maps`."""
        from mintransformer import viz

        maps = viz.attention_maps(self.translator, text, translation)
        layers = sum(name.startswith("encoder_layer") for name in maps.weights)

        def kind(name: str) -> list:
            return [maps.get(name, layer)[0].tolist() for layer in range(1, layers + 1)]

        return {
            "source_tokens": maps.source_tokens,
            "input_tokens": maps.input_tokens,
            "output_tokens": maps.output_tokens,
            "encoder": kind("encoder"),
            "decoder": kind("decoder"),
            "cross": kind("cross"),
        }


class ClassificationService(Service):
    """Label probabilities of each text, batched across requests by a `Batcher`."""

    task = "classification"

    def __init__(self, classifier, *args, max_batch_size: int = 32, max_wait_ms: float = 5.0):
        super().__init__(*args)
        self.classifier = classifier
        self.batcher = Batcher(self._decode, max_batch_size, max_wait_ms)

    def start(self) -> float:
        began = time.perf_counter()
        self.classifier.probabilities(["warm up"])
        self.batcher.start()
        return time.perf_counter() - began

    def stop(self) -> None:
        self.batcher.stop()

    def _decode(self, key: None, texts: list[str]) -> list:
        """The batcher's call: the texts of one or more requests in one call."""
        return list(self.classifier.probabilities(texts))

    async def classify(self, texts: list[str], attention: bool = False) -> list[dict]:
        self.limits.check_texts(texts)
        if attention and self.classifier.model is None:
            raise RequestError(422, "`attention` needs the keras engine (serve --engine keras).")
        probabilities = await _batched(self.batcher, texts, None)
        names = list(self.config.get("labels", []))
        results = []
        for text, row in zip(texts, probabilities, strict=True):
            scores = {name: float(p) for name, p in zip(names, row, strict=True)}
            result = {"label": names[int(row.argmax())], "probabilities": scores}
            if attention:
                result["attention"] = await asyncio.to_thread(self.attention, text)
            results.append(result)
        return results

    def attention(self, text: str) -> dict:
        """The tokens of `text` and its encoder attention, `[layer][head][row][column]`."""
        tokens, weights = self.classifier.attention(text)
        layers = [weights[f"encoder_layer{i}"].tolist() for i in range(1, len(weights) + 1)]
        return {"tokens": tokens, "encoder": layers}


class GenerationService(Service):
    """Text generation, one request at a time, its tokens streamed as produced."""

    task = "language_model"

    def __init__(self, generator, *args):
        super().__init__(*args)
        self.generator = generator
        self._lock = threading.Lock()

    def sizes(self) -> dict:
        return {**super().sizes(), "vocab_size": self.generator.tokenizer.vocab_size}

    def start(self) -> float:
        began = time.perf_counter()
        self.generator.generate([""], max_new_tokens=2, temperature=0.0)
        return time.perf_counter() - began

    def check(self, prompt: str, max_new_tokens: int) -> None:
        """413 or 422 for a request that cannot be generated whole: a prompt over
        `--max-chars`, or a prompt and `max_new_tokens` that do not fit the context."""
        self.limits.check_chars(prompt, "prompt")
        self.limits.check_new_tokens(
            max_new_tokens, self.generator.prompt_tokens(prompt), self.generator.max_length
        )

    async def generate(self, prompt: str, **options) -> AsyncIterator[dict]:
        """Yields `{"token": text}` per generated token, then `{"done": True, "text": ...}`.

        Closing the iterator early (a client that went away) stops the generation at its
        next token, or before it starts, so the requests after it need not wait for it.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        tokenizer = self.generator.tokenizer
        abandoned = threading.Event()

        def on_token(row: int, token_id: int) -> None:
            if abandoned.is_set():
                raise _AbandonedError
            loop.call_soon_threadsafe(queue.put_nowait, token_id)

        task = loop.run_in_executor(None, self._run, prompt, on_token, abandoned, options)
        ids: list[int] = []
        shown = ""
        getter: asyncio.Future | None = None
        try:
            while not (task.done() and queue.empty()):
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                token_id = getter.result()
                ids.append(token_id)
                # Decoding the whole prefix keeps subword spacing right; the new part is
                # sent. The leading </s> stands for the prompt's start, which
                # `decode_text` drops.
                text = decode_text(tokenizer, [tokenizer.end_id, *ids])
                yield {"token": text[len(shown) :], "id": token_id}
                shown = text
            yield {"done": True, "text": await task}
        finally:  # also on GeneratorExit and cancellation: the client is gone
            abandoned.set()
            if getter is not None:
                getter.cancel()

    def _run(
        self, prompt: str, on_token: Callable, abandoned: threading.Event, options: dict
    ) -> str | None:
        """Generates from `prompt`, one request at a time; None once `abandoned` is set
        (checked before it starts, and by `on_token` at every token)."""
        with self._lock:
            if abandoned.is_set():
                return None
            try:
                return self.generator.generate([prompt], on_token=on_token, **options)[0]
            except _AbandonedError:
                return None


class _AbandonedError(Exception):
    """Raised by a generate request's `on_token` once its client has gone away."""


async def _batched(batcher: Batcher, items: list, key) -> list:
    """The results of `items`, decoded by `batcher` with requests of the same `key`; a 503
    once the server is stopping (the request was not taken)."""
    try:
        future = batcher.submit(items, key)
    except RuntimeError as err:
        raise RequestError(503, str(err)) from None
    return await asyncio.wrap_future(future)


def _distinct(hypotheses: list[tuple[str, float | None]]) -> list[tuple[str, float | None]]:
    """Each text once, at its best score: two subword splits of one text read the same."""
    seen: set[str] = set()
    kept = []
    for text, score in hypotheses:  # best first
        if text not in seen:
            seen.add(text)
            kept.append((text, score))
    return kept


def load_service(
    path: str | Path,
    engine: str,
    limits: Limits,
    max_batch_size: int = 32,
    max_wait_ms: float = 5.0,
) -> Service:
    """Opens the run or export folder `path` for serving, by the task in its config."""
    from mintransformer import Classifier, Generator, Translator

    path = Path(path)
    batching = dict(max_batch_size=max_batch_size, max_wait_ms=max_wait_ms)
    if engine == "ct2":  # its folder's config.json is CTranslate2's; the run's is inside
        translator = Translator.from_run(path, engine=engine)
        config = json.loads(translator.config.to_json())
        return TranslationService(translator, path, engine, config, limits, **batching)
    config = read_task_config(path)
    task = config["task"]
    args: tuple[Any, ...] = (path, engine, config, limits)
    if task == "translation":
        return TranslationService(Translator.from_run(path, engine=engine), *args, **batching)
    if task == "classification":
        return ClassificationService(Classifier.from_run(path, engine=engine), *args, **batching)
    if task == "language_model":
        return GenerationService(Generator.from_run(path, engine=engine), *args)
    raise ValueError(f"{path} holds a {task!r} run, which the server cannot serve")

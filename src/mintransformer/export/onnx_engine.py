"""The onnxruntime engine: an export folder's graphs run with NumPy and our tokenizer.

Nothing here imports Keras, TensorFlow, JAX or PyTorch. `OnnxSteps` gives the exported
encoder and decoder-step graphs (`export.onnx_graphs`) the start/step/reorder/keep_rows
calls of `decoding.steps`, so the same greedy and beam search loops drive them;
`OnnxLanguageModelSteps` does the same for a language model's step graph and the
sampling loop. `translation_engine`, `classification_engine` and `generation_engine`
open an export folder and return what `Translator`, `Classifier` and `Generator` take
(`inference.engines` picks between them and the Keras model).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from mintransformer.config import (
    ClassificationConfig,
    LanguageModelConfig,
    RunConfig,
    TranslationConfig,
)
from mintransformer.core.cpu import usable_cores
from mintransformer.core.errors import CorruptFileError
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.data.tokenizer_file import load_tokenizer
from mintransformer.decoding.sampling import generate_with_steps
from mintransformer.export.folder import GRAPHS, ExportFolder

State = tuple[list[np.ndarray], np.ndarray, np.ndarray]


def inference_session(path: str | Path):
    """An onnxruntime CPU session of the graph at `path`; a one-line install hint without it.

    Raises:
        CorruptFileError: onnxruntime cannot load the file (truncated, empty, not a graph).
    """
    try:
        import onnxruntime
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "the ONNX engine needs onnxruntime: pip install mintransformer[export]"
        ) from err
    options = onnxruntime.SessionOptions()
    # onnxruntime sizes its thread pool by the machine's cores, and its threads spin while
    # they wait: where this process may run on fewer cores, the spinning threads steal
    # the cores that do the work.
    options.intra_op_num_threads = usable_cores()
    from onnxruntime.capi import onnxruntime_pybind11_state as status

    unloadable = (status.InvalidProtobuf, status.InvalidGraph, status.InvalidArgument, status.Fail)
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except unloadable as err:
        reason = str(err).splitlines()[0]
        raise CorruptFileError(
            path, f"is corrupt: onnxruntime cannot load it ({reason})", "export the run again"
        ) from None


class KeyValueCache:
    """The self-attention cache of an exported step graph, kept in NumPy between steps.

    One float32 array `(2, n, heads, slots, depth)` per layer, fed to the graph as
    `cache_1 ... cache_L`. The graph returns only the keys and values of the position
    it decoded; `write` stores them in place, so a step copies no cache.

    The slots grow with the output, `GROWTH` at a time up to `max_length`, rather than
    starting at `max_length`: the graph masks the slots from `index` on, but still
    splits, concatenates and attends over every slot it is given, and a beam search
    copies them all on each reorder (docs/speed.md, "Where the time goes, against
    CTranslate2").

    Args:
        arrays: the per-layer arrays (`zeros` makes an empty cache).
        max_length: the most slots the cache may grow to.
    """

    GROWTH = 16

    def __init__(self, arrays: list[np.ndarray], max_length: int):
        self.arrays = arrays
        self.max_length = max_length

    @classmethod
    def zeros(cls, layers: int, heads: int, depth: int, rows: int, max_length: int):
        """An empty cache of `rows` hypotheses and up to `max_length` slots, in the layout
        (layers, heads, depth) of the export's manifest."""
        shape = (2, rows, heads, min(cls.GROWTH, max_length), depth)
        return cls([np.zeros(shape, "float32") for _ in range(layers)], max_length)

    @property
    def slots(self) -> int:
        """The slots the arrays hold now."""
        return self.arrays[0].shape[3]

    def feeds(self) -> dict[str, np.ndarray]:
        """The graph inputs `cache_1 ... cache_L`."""
        return {f"cache_{i}": array for i, array in enumerate(self.arrays, start=1)}

    def write(self, new_key_values: np.ndarray, index: int) -> KeyValueCache:
        """Stores `(layers, 2, n, heads, depth)` in slot `index`, first growing the arrays
        if they end before it; returns this cache."""
        if index >= self.max_length:
            raise IndexError(f"slot {index} is past the cache's {self.max_length} slots")
        if index >= self.slots:
            slots = min(self.max_length, max(index + 1, self.slots + self.GROWTH))
            grown = []
            for array in self.arrays:
                larger = np.zeros(array.shape[:3] + (slots,) + array.shape[4:], "float32")
                larger[:, :, :, : self.slots] = array
                grown.append(larger)
            self.arrays = grown
        for array, layer_values in zip(self.arrays, new_key_values, strict=True):
            array[:, :, :, index] = layer_values
        return self

    def reorder(self, indices: np.ndarray) -> KeyValueCache:
        """A new cache of the rows `indices` (beam search's parents)."""
        return KeyValueCache([array[:, indices] for array in self.arrays], self.max_length)


class OnnxSteps:
    """Cached decoding over the exported graphs; scores are log-probabilities.

    The state is `(cache, cross, source_mask)`: the self-attention `KeyValueCache`, the
    cross-attention keys and values float32 `(layers, 2, n, heads, source_length,
    depth)` and the bool source mask `(n, source_length)`. `step` writes the cache in
    place, so a state is used once: pass each step the state the last one returned.

    Args:
        encoder: the session of `encoder.onnx`.
        decoder_step: the session of `decoder_step.onnx`.
        layers, heads, depth: the cache layout (the export's manifest).
        max_length: most target positions to decode (cache size).
        source_positions: the longest source the model reads, `</s>` included.
    """

    compiled_loops = False

    def __init__(
        self,
        encoder,
        decoder_step,
        layers: int,
        heads: int,
        depth: int,
        max_length: int,
        source_positions: int,
    ):
        self.encoder = encoder
        self.decoder_step = decoder_step
        self.cache_layout = dict(layers=layers, heads=heads, depth=depth)
        self.max_length = max_length
        self.source_positions = source_positions

    def start(self, source_ids: np.ndarray, repeat: int = 1) -> State:
        """Encodes `(batch, length)` sources; each row repeated `repeat` times (beams)."""
        source_ids = np.repeat(np.asarray(source_ids, "int32"), repeat, axis=0)
        cross, source_mask = self.encoder.run(None, {"source_ids": source_ids})
        rows = len(source_ids)
        cache = KeyValueCache.zeros(**self.cache_layout, rows=rows, max_length=self.max_length)
        return cache, cross, source_mask

    def step(self, tokens: np.ndarray, index: int, state: State) -> tuple[np.ndarray, State]:
        """`tokens` int `(n,)` at position `index` -> (log-probs `(n, vocab)`, new state)."""
        cache, cross, source_mask = state
        inputs = {
            "tokens": np.asarray(tokens, "int32"),
            "index": np.asarray(index, "int32"),
            "cross": cross,
            "source_mask": source_mask,
            **cache.feeds(),
        }
        log_probs, new_key_values = self.decoder_step.run(None, inputs)
        return log_probs, (cache.write(new_key_values, index), cross, source_mask)

    def reorder(self, state: State, indices: np.ndarray) -> State:
        """Keeps the cache rows `indices`; the rest is per source and already repeated per
        beam."""
        cache, cross, source_mask = state
        return cache.reorder(indices), cross, source_mask

    def keep_rows(self, state: State, rows: np.ndarray) -> State:
        """The whole state of the batch rows `rows` only: their cache, cross-attention
        keys/values and source mask (greedy search dropping finished rows)."""
        cache, cross, source_mask = state
        return cache.reorder(rows), cross[:, :, rows], source_mask[rows]


class OnnxLanguageModelSteps:
    """Cached decoding over an exported language-model step graph; scores are float32
    logits. The state is a `KeyValueCache`, written in place by `step`.

    Args:
        step_session: the session of `lm_step.onnx`.
        layers, heads, depth: the cache layout (the export's manifest).
        max_length: most positions to decode (cache size).
    """

    compiled_loops = False

    def __init__(self, step_session, layers: int, heads: int, depth: int, max_length: int):
        self.step_session = step_session
        self.cache_layout = dict(layers=layers, heads=heads, depth=depth)
        self.max_length = max_length

    def start(self, batch_size: int, repeat: int = 1) -> KeyValueCache:
        """The empty cache of `batch_size * repeat` rows."""
        rows = batch_size * repeat
        return KeyValueCache.zeros(**self.cache_layout, rows=rows, max_length=self.max_length)

    def step(self, tokens: np.ndarray, index: int, state: KeyValueCache):
        """`tokens` int `(n,)` at position `index` -> (logits `(n, vocab)`, new cache)."""
        inputs = {
            "tokens": np.asarray(tokens, "int32"),
            "index": np.asarray(index, "int32"),
            **state.feeds(),
        }
        logits, new_key_values = self.step_session.run(None, inputs)
        return logits, state.write(new_key_values, index)

    def reorder(self, state: KeyValueCache, indices: np.ndarray) -> KeyValueCache:
        """Keeps the cache rows `indices`."""
        return state.reorder(indices)


def open_export(path: str | Path, config_class: type[RunConfig]):
    """An export folder of `config_class`'s task, or the export inside a run directory.

    Returns:
        `(folder, manifest, config, tokenizer)`.

    Raises:
        ValueError: for an export of another task (and as `ExportFolder.open`).
    """
    folder, manifest = ExportFolder.open(path)
    task = config_class.task
    if manifest["task"] != task:
        raise ValueError(
            f"{folder.path} is an export of a {manifest['task']} run, not a {task} run"
        )
    config = config_class.from_json(folder.config_path.read_text(), str(folder.path))
    return folder, manifest, config, load_tokenizer(folder.tokenizer_path)


def translation_engine(path: str | Path, max_output_length: int | None = None):
    """`(OnnxSteps, tokenizer, config)` of a translation export; `max_output_length` at
    most the model's target positions (default: all of them)."""
    folder, manifest, config, tokenizer = open_export(path, TranslationConfig)
    encoder, decoder_step = (
        inference_session(folder.graph_path(name)) for name in GRAPHS[config.task]
    )
    steps = OnnxSteps(
        encoder,
        decoder_step,
        **manifest["cache"],
        max_length=max_output_length or config.max_length,
        source_positions=config.max_length,
    )
    return steps, tokenizer, config


def classification_engine(path: str | Path):
    """`(probabilities, tokenizer, config)` of a classification export: `probabilities`
    maps int token ids `(batch, length)` to float32 class probabilities."""
    folder, _, config, tokenizer = open_export(path, ClassificationConfig)
    session = inference_session(folder.graph_path(GRAPHS[config.task][0]))

    def probabilities(token_ids: np.ndarray) -> np.ndarray:
        return session.run(None, {"token_ids": np.asarray(token_ids, "int32")})[0]

    return probabilities, tokenizer, config


def generation_engine(path: str | Path) -> tuple[Callable, Tokenizer, int]:
    """`(generate_ids, tokenizer, max_length)` of a language-model export:
    `generate_ids(prompt_ids, max_new_tokens=..., **options)` as `decoding.sampling.generate`."""
    folder, manifest, config, tokenizer = open_export(path, LanguageModelConfig)
    session = inference_session(folder.graph_path(GRAPHS[config.task][0]))
    generate_ids = partial(
        generate_with_steps,
        lambda positions: OnnxLanguageModelSteps(
            session, **manifest["cache"], max_length=positions
        ),
        vocab_size=tokenizer.vocab_size,
        pad_id=Tokenizer.pad_id,
        max_length=config.max_length,
    )
    return generate_ids, tokenizer, config.max_length

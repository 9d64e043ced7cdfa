"""Translating and classifying with an exported run on onnxruntime, NumPy and our tokenizer.

Nothing here imports Keras, TensorFlow, JAX or PyTorch. `OnnxSteps` gives the exported
encoder and decoder-step graphs (`mintransformer.export`) the start/step/reorder calls
of `mintransformer.decoding.steps`, so the same greedy and beam search loops drive
them; `OnnxTranslator` and `OnnxClassifier` are `Translator` and `Classifier` with
the graphs in place of the Keras model. Usually reached through
`Translator.from_run(dir, engine="onnx")` and `Classifier.from_run(dir, engine="onnx")`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mintransformer.classification import Classifier
from mintransformer.config import ClassificationConfig, TranslationConfig
from mintransformer.export_folder import GRAPHS, ExportFolder
from mintransformer.tokenizer import Tokenizer
from mintransformer.translation import Translator

State = tuple[np.ndarray, np.ndarray, np.ndarray]


def inference_session(path: str | Path):
    """An onnxruntime CPU session of the graph at `path`; a one-line install hint without it."""
    try:
        import onnxruntime
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "the ONNX engine needs onnxruntime: pip install mintransformer[export]"
        ) from err
    options = onnxruntime.SessionOptions()
    # onnxruntime sizes its thread pool by the machine's cores, and its threads spin while
    # they wait: on one core of two (taskset), a demo-model greedy decode at batch 1 took
    # 11.6 ms with the default pool against 2.6 ms with one thread.
    options.intra_op_num_threads = usable_cores()
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def usable_cores() -> int:
    """How many cores this process may run on (its CPU affinity, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class OnnxSteps:
    """Cached decoding over the exported graphs; scores are log-probabilities.

    The state is `(cache, cross, source_mask)`: the self-attention cache float32
    `(layers, 2, n, heads, max_length, depth)`, the cross-attention keys and values
    `(layers, 2, n, heads, source_length, depth)` and the bool source mask
    `(n, source_length)`, all NumPy arrays.

    Args:
        encoder: the session of `encoder.onnx`.
        decoder_step: the session of `decoder_step.onnx`.
        layers, heads, depth: the cache layout (the export's manifest).
        max_length: most target positions to decode (cache size).
    """

    compiled_loops = False

    def __init__(self, encoder, decoder_step, layers: int, heads: int, depth: int, max_length):
        self.encoder = encoder
        self.decoder_step = decoder_step
        self.cache_layout = (layers, 2, heads, depth)
        self.max_length = max_length

    def start(self, source_ids: np.ndarray, repeat: int = 1) -> State:
        """Encodes `(batch, length)` sources; each row repeated `repeat` times (beams)."""
        source_ids = np.repeat(np.asarray(source_ids, "int32"), repeat, axis=0)
        cross, source_mask = self.encoder.run(None, {"source_ids": source_ids})
        layers, pair, heads, depth = self.cache_layout
        cache = np.zeros((layers, pair, len(source_ids), heads, self.max_length, depth), "float32")
        return cache, cross, source_mask

    def step(self, tokens: np.ndarray, index: int, state: State) -> tuple[np.ndarray, State]:
        """`tokens` int `(n,)` at position `index` -> (log-probs `(n, vocab)`, new state)."""
        cache, cross, source_mask = state
        inputs = {
            "tokens": np.asarray(tokens, "int32"),
            "index": np.asarray(index, "int32"),
            "cache": cache,
            "cross": cross,
            "source_mask": source_mask,
        }
        log_probs, cache = self.decoder_step.run(None, inputs)
        return log_probs, (cache, cross, source_mask)

    def reorder(self, state: State, indices: np.ndarray) -> State:
        """Keeps the cache rows `indices`; the rest is per source and already repeated per
        beam."""
        cache, cross, source_mask = state
        return cache[:, :, indices], cross, source_mask


class OnnxTranslator(Translator):
    """`Translator` on an export folder: onnxruntime in place of the Keras model.

    Args:
        folder: the export folder.
        manifest: its manifest.
        max_output_length: most target tokens per sentence (default: the model's).
    """

    def __init__(self, folder: ExportFolder, manifest: dict, max_output_length: int | None = None):
        config = TranslationConfig.from_json(folder.config_path.read_text(), str(folder.path))
        tokenizer = Tokenizer.load(folder.tokenizer_path)
        self._set_up(tokenizer, config, config.max_length, config.max_length)
        if max_output_length is not None:
            if max_output_length > config.max_length:
                raise ValueError(
                    f"`max_output_length` ({max_output_length}) exceeds the model's target "
                    f"positions ({config.max_length})."
                )
            self.max_output_length = max_output_length
        encoder, decoder_step = (
            inference_session(folder.graph_path(name)) for name in GRAPHS[config.task]
        )
        self.steps = OnnxSteps(
            encoder, decoder_step, **manifest["cache"], max_length=self.max_output_length
        )

    @classmethod
    def from_run(cls, path: str | Path, max_output_length: int | None = None) -> OnnxTranslator:
        """The translator of an export folder, or of the export inside a run directory."""
        return cls(*_open_export(path, TranslationConfig), max_output_length)


class OnnxClassifier(Classifier):
    """`Classifier` on an export folder: onnxruntime in place of the Keras model.

    Args:
        folder: the export folder.
        manifest: its manifest.
    """

    def __init__(self, folder: ExportFolder, manifest: dict):
        config = ClassificationConfig.from_json(folder.config_path.read_text(), str(folder.path))
        self._set_up(Tokenizer.load(folder.tokenizer_path), config)
        session = inference_session(folder.graph_path(GRAPHS[config.task][0]))
        self._probabilities = lambda token_ids: session.run(
            None, {"token_ids": np.asarray(token_ids, "int32")}
        )[0]

    @classmethod
    def from_run(cls, path: str | Path) -> OnnxClassifier:
        """The classifier of an export folder, or of the export inside a run directory."""
        return cls(*_open_export(path, ClassificationConfig))


def _open_export(path: str | Path, expected) -> tuple[ExportFolder, dict]:
    """`ExportFolder.open`, with a ValueError if the export is of another task."""
    folder, manifest = ExportFolder.open(path)
    if manifest["task"] != expected.task:
        raise ValueError(
            f"{folder.path} is an export of a {manifest['task']} run, not a {expected.task} run"
        )
    return folder, manifest

"""Classifying text with a trained run, and measuring accuracy on a labelled file.

Texts are batched by length for speed and returned in input order. Long texts are
cut to the model's length with the run's truncation (head, tail or head + tail),
as in training; an empty text is classified from its `<s>` token alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from mintransformer.config import ClassificationConfig
from mintransformer.data.labelled import LabelSet, clean_text, encode_texts, read_labelled
from mintransformer.data.lengths import batch_by_length, pad_batch
from mintransformer.inference.engines import (
    ONNX_HAS_NO_ATTENTION,
    KerasProbabilities,
    classification_engine,
)
from mintransformer.inference.streaming import map_lines


@dataclass
class Prediction:
    label: str
    probability: float

    def __str__(self) -> str:
        return f"{self.label}\t{self.probability:.4f}"


@dataclass
class Accuracy:
    accuracy: float
    correct: int
    total: int

    def __str__(self) -> str:
        return f"accuracy {100 * self.accuracy:.2f}% ({self.correct:,} of {self.total:,})"


class Classifier:
    """Classifies with an engine, a tokenizer and a config; `Classifier.from_run(dir)` loads
    a run.

    Args:
        probabilities: the engine: int token ids `(batch, length)` -> class
            probabilities `(batch, classes)` as NumPy (`inference.engines`).
        tokenizer: the run's `Tokenizer`.
        config: the run's `ClassificationConfig` (labels, length, truncation).
    """

    def __init__(self, probabilities, tokenizer, config: ClassificationConfig):
        self.engine = probabilities
        self.tokenizer = tokenizer
        self.config = config
        self.labels = LabelSet(config.labels)

    @classmethod
    def from_model(cls, model, tokenizer, config: ClassificationConfig) -> Classifier:
        """The classifier of a built Keras `TextClassifier` in memory."""
        return cls(KerasProbabilities(model), tokenizer, config)

    @classmethod
    def from_run(cls, path: str | Path, engine: str = "keras") -> Classifier:
        """The classifier of the run directory `path`; `engine` as `Translator.from_run`."""
        return cls(*classification_engine(path, engine))

    @property
    def model(self):
        """The Keras `TextClassifier` behind the engine (attention reads it); None on the
        onnx engine."""
        return getattr(self.engine, "model", None)

    def probabilities(
        self, texts: Sequence[str], max_tokens: int = 32768, progress: bool = False
    ) -> np.ndarray:
        """`(len(texts), num_classes)` class probabilities, in input order."""
        cleaned = [clean_text(t) for t in texts]
        token_ids = encode_texts(
            self.tokenizer, cleaned, self.config.max_length, self.config.truncation
        )
        result = np.zeros((len(texts), len(self.labels.names)), "float32")
        batches = batch_by_length(
            [len(ids) for ids in token_ids], max_tokens=max_tokens, shuffle=False, seed=0
        )
        for batch in tqdm(batches, disable=not progress, desc="classifying", unit="batch"):
            ids = pad_batch([token_ids[i] for i in batch], pad_id=self.tokenizer.pad_id)
            result[batch] = self.engine(ids)
        return result

    def attention(self, text: str) -> tuple[list[str], dict[str, np.ndarray]]:
        """The subword tokens the model reads for `text` (`<s>` first, truncated as in
        `probabilities`) and its encoder's attention, {"encoder_layer1": (heads, n, n), ...}.
        Keras engine only (it runs `self.model`)."""
        from keras import ops

        if self.model is None:
            raise ValueError(ONNX_HAS_NO_ATTENTION)

        ids = encode_texts(
            self.tokenizer, [clean_text(text)], self.config.max_length, self.config.truncation
        )[0]
        _, weights = self.model(
            np.array([ids], "int32"), training=False, return_attention_weights=True
        )
        tokens = [self.tokenizer.id_to_token(i) for i in ids]
        return tokens, {k: np.asarray(ops.convert_to_numpy(v))[0] for k, v in weights.items()}

    def classify(self, texts: Sequence[str], progress: bool = False) -> list[Prediction]:
        """The most probable label of each text and its probability."""
        probabilities = self.probabilities(texts, progress=progress)
        best = probabilities.argmax(axis=-1)
        return [
            Prediction(self.labels.names[b], float(p[b]))
            for b, p in zip(best, probabilities, strict=True)
        ]

    def classify_lines(self, lines: Iterable[str], **stream_options) -> Iterator[str]:
        """Classifies `lines` a chunk at a time, yielding "LABEL<TAB>PROBABILITY" per line
        in input order; memory stays flat. `stream_options` are those of
        `streaming.map_lines` (`chunk_size`, `total` for the progress bar, `progress`).
        """
        return map_lines(
            lines,
            lambda chunk: [str(p) for p in self.classify(chunk)],
            description="classifying",
            **stream_options,
        )

    def evaluate(self, path: str | Path, progress: bool = False) -> Accuracy:
        """Accuracy on a labelled file or folder (any format `read_labelled` reads)."""
        return self.accuracy(read_labelled(path), str(path), progress)

    def accuracy(
        self, pairs: Sequence[tuple[str, str]], source: str = "data", progress: bool = False
    ) -> Accuracy:
        """Accuracy on `(text, label)` pairs; `source` names them in errors."""
        expected = self.labels.ids([label for _, label in pairs], source)
        predicted = self.probabilities([text for text, _ in pairs], progress=progress)
        correct = int((predicted.argmax(axis=-1) == expected).sum())
        return Accuracy(correct / len(pairs), correct, len(pairs))

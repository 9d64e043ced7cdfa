"""mintransformer: the original Transformer as readable, verified Keras 3 layers.

The names below are imported on first use, so that `import mintransformer` does not
start Keras: the command line chooses the Keras backend before Keras is loaded.
"""

from __future__ import annotations

import importlib
import os

__version__ = "0.1.0"

# TensorFlow reads this once, when it is imported, so it is set here, before anything
# imports Keras (a value already in the environment wins). TensorFlow turns its oneDNN
# kernels on by itself only on CPUs with AVX-512 VNNI, and without them its batched matrix
# products (attention) are much slower (docs/speed.md).
# `backend.runtime.configure_runtime` reports whether they are on.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

_LOCATIONS = {
    "Decoder": "mintransformer.layers",
    "DecoderLayer": "mintransformer.layers",
    "Encoder": "mintransformer.layers",
    "EncoderLayer": "mintransformer.layers",
    "FeedForward": "mintransformer.layers",
    "LearnedPositionalEmbedding": "mintransformer.layers",
    "MultiHeadAttention": "mintransformer.layers",
    "PositionalEncoding": "mintransformer.layers",
    "TokenAndPositionEmbedding": "mintransformer.layers",
    "masks": "mintransformer.layers",
    "scaled_dot_product_attention": "mintransformer.layers",
    "sinusoidal_table": "mintransformer.layers",
    "LanguageModel": "mintransformer.models.language_model",
    "MinTransformer": "mintransformer.models.transformer",
    "Transformer": "mintransformer.models.transformer",
    "TextClassifier": "mintransformer.models.classifier",
    "Translator": "mintransformer.inference.translator",
    "Classifier": "mintransformer.inference.classifier",
    "Generator": "mintransformer.inference.generator",
}

__all__ = sorted(_LOCATIONS)


def __getattr__(name: str):
    if name not in _LOCATIONS:
        raise AttributeError(f"module 'mintransformer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LOCATIONS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

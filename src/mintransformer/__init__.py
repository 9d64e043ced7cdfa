"""mintransformer: the original Transformer as readable, verified Keras 3 layers.

The names below are imported on first use, so that `import mintransformer` does not
start Keras: the command line chooses the Keras backend before Keras is loaded.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

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
    "Translator": "mintransformer.translation",
    "Classifier": "mintransformer.classification",
    "Generator": "mintransformer.generation",
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

"""mintransformer: the original Transformer as readable, verified Keras 3 layers."""

from mintransformer.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    PositionalEncoding,
    TokenAndPositionEmbedding,
    masks,
    scaled_dot_product_attention,
    sinusoidal_table,
)
from mintransformer.models.language_model import LanguageModel
from mintransformer.models.transformer import MinTransformer, Transformer

__version__ = "0.1.0"

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "LanguageModel",
    "LearnedPositionalEmbedding",
    "MinTransformer",
    "MultiHeadAttention",
    "PositionalEncoding",
    "TokenAndPositionEmbedding",
    "Transformer",
    "masks",
    "scaled_dot_product_attention",
    "sinusoidal_table",
]

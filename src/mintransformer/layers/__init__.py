"""Keras 3 layers of the Transformer, one concept per module."""

from mintransformer.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from mintransformer.layers.decoder import Decoder, DecoderLayer
from mintransformer.layers.embedding import TokenAndPositionEmbedding
from mintransformer.layers.encoder import Encoder, EncoderLayer
from mintransformer.layers.feedforward import FeedForward
from mintransformer.layers.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    sinusoidal_table,
)
from mintransformer.layers.stack import Stack
from mintransformer.layers.sublayer import (
    BlockOptions,
    cached_self_attention,
    residual,
    write_slot,
)

__all__ = [
    "BlockOptions",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "PositionalEncoding",
    "Stack",
    "TokenAndPositionEmbedding",
    "cached_self_attention",
    "write_slot",
    "residual",
    "scaled_dot_product_attention",
    "sinusoidal_table",
]

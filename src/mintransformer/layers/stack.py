"""`Stack`: token embedding, N blocks and, when pre-LN, a final LayerNorm.

The shared base of `Encoder`, `Decoder` and the language model's causal stack.
Subclasses set `block_class` and write `call` (which masks to build and how the
blocks are chained).
"""

from __future__ import annotations

import keras
from keras import ops

from mintransformer.core import checks
from mintransformer.layers import masks
from mintransformer.layers.arguments import (
    config_with,
    constructor_arguments,
    keep_arguments,
    stored_arguments,
)
from mintransformer.layers.embedding import TokenAndPositionEmbedding
from mintransformer.layers.layer_norm import LayerNorm
from mintransformer.layers.sublayer import BlockOptions


class Stack(keras.layers.Layer):
    """Embedding + `num_layers` blocks (+ final LayerNorm when `norm_first`).

    Args:
        num_layers: number of blocks.
        d_model: model width.
        num_heads: attention heads; must divide `d_model` unless `key_dim` is given.
        dff: feed-forward inner width.
        vocab_size: number of token ids.
        max_length: longest sequence (size of the position table).
        dropout_rate: dropout on embeddings, sub-layer outputs and attention weights.
        pad_id: padding id used to build the padding mask from token ids; None
            treats every token as real (explicit padding masks still apply).
        activation: feed-forward activation, "relu", "gelu" or "gelu_tanh".
        norm_first: pre-LN blocks plus a final LayerNorm instead of post-LN.
        position: "sinusoidal" (the paper) or "learned".
        layer_norm_epsilon: LayerNorm epsilon.
        key_dim: per-head width; by default `d_model // num_heads`.
        ngram_buckets, ngram_dropout: hashed bigram embedding added to each
            token's, as `TokenAndPositionEmbedding` (0 buckets: none).
        scale_embeddings: multiply token embeddings by sqrt(d_model) (the paper);
            False for models such as GPT-2 that do not.
        use_bias: biases in every block's attention and feed-forward projections.
        attention_dropout_rate: dropout on the attention weights; None (the
            default) uses `dropout_rate`.
        embedding_init: token table initialiser, "uniform" or "normal"
            (`layers.embedding.ScaledNormal`, with the `pad_id` row zero).
        token_embedding: an existing `keras.layers.Embedding` to share as this
            stack's token table (not part of `get_config`).
    """

    block_class: type[BlockOptions]
    # Its own, then those it passes on by name to its embedding and to every block.
    ARGUMENTS = (
        "num_layers",
        *TokenAndPositionEmbedding.ARGUMENTS,
        *(name for name in BlockOptions.ARGUMENTS if name not in ("d_model", "dropout_rate")),
    )

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        dff: int,
        vocab_size: int,
        max_length: int,
        dropout_rate: float = 0.1,
        pad_id: int | None = 0,
        activation: str = "relu",
        norm_first: bool = False,
        position: str = "sinusoidal",
        layer_norm_epsilon: float = 1e-6,
        key_dim: int | None = None,
        ngram_buckets: int = 0,
        ngram_dropout: float = 0.0,
        scale_embeddings: bool = True,
        use_bias: bool = True,
        attention_dropout_rate: float | None = None,
        embedding_init: str = "uniform",
        token_embedding: keras.layers.Embedding | None = None,
        **kwargs,
    ):
        arguments = constructor_arguments(locals())
        super().__init__(**kwargs)
        keep_arguments(self, arguments, self.ARGUMENTS)
        self.num_layers = checks.positive_int(num_layers, "num_layers")
        self.pad_id = None if pad_id is None else checks.non_negative_int(pad_id, "pad_id")
        self.scale_embeddings = bool(scale_embeddings)
        self.use_bias = bool(use_bias)
        self.embedding = TokenAndPositionEmbedding(
            **stored_arguments(self, TokenAndPositionEmbedding.ARGUMENTS),
            token_embedding=token_embedding,
            dtype=self.dtype_policy,
            name="embedding",
        )
        self.blocks = self.block_class.repeated(
            num_layers, **stored_arguments(self, BlockOptions.ARGUMENTS), dtype=self.dtype_policy
        )
        self.final_norm = (
            LayerNorm(epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="final_norm")
            if norm_first
            else None
        )

    def build(self, input_shape):
        self.embedding.build(input_shape)
        hidden_shape = tuple(input_shape) + (self.d_model,)
        for block in self.blocks:
            block.build(hidden_shape)
        if self.final_norm is not None:
            self.final_norm.build(hidden_shape)
        self.built = True

    def finish(self, x):
        """The final LayerNorm of a pre-LN stack; the identity for post-LN."""
        return x if self.final_norm is None else self.final_norm(x)

    def empty_cache(self, batch_size, max_length: int) -> tuple:
        """Per block, zeros `(2, batch, heads, max_length, depth)` for cached `step`s."""
        depth = self.blocks[0].self_attention.depth
        shape = (2, batch_size, self.num_heads, max_length, depth)
        return tuple(ops.zeros(shape, dtype=self.compute_dtype) for _ in self.blocks)

    def padding_mask(self, token_ids, mask=None, name: str = "padding_mask"):
        """bool `(batch, length)`, True at real tokens: `mask` (checked) or built from ids.

        Args:
            token_ids: int `(batch, length)`.
            mask: optional bool `(batch, length)`; by default `token_ids != pad_id`,
                or all True when `pad_id` is None.
            name: the argument name that errors report.

        Raises:
            ValueError: if `token_ids` is not rank 2, or `mask` is not bool or
                not of the shape of `token_ids`.
        """
        checks.rank(token_ids, 2, "token_ids", "(batch, length)")
        if mask is not None:
            return masks.check_padding_mask(mask, token_ids, name)
        if self.pad_id is None:
            return ops.ones_like(token_ids, dtype="bool")
        return masks.token_mask(token_ids, self.pad_id)

    def get_config(self):
        return config_with(super().get_config(), self, self.ARGUMENTS)

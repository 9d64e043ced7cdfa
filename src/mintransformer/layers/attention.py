"""Scaled dot-product attention and multi-head attention (paper section 3.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Masks follow `mintransformer.layers.masks`: boolean, True = may attend. A query
row whose keys are all masked gets all-zero weights (and so a zero output)
rather than NaN or a uniform average over padding.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from mintransformer.backend.kernels import fused_attention, prefers_fused_attention
from mintransformer.core import checks
from mintransformer.layers.arguments import config_with
from mintransformer.layers.dropout import Dropout
from mintransformer.layers.masks import check_attention_mask
from mintransformer.layers.per_position import per_position

# Added to masked scores before the softmax; scores are float32 there, so this is safe.
_MASKED_SCORE = -1e9


def attention_weights(query, key, mask=None, zero_masked_rows=True):
    """softmax(Q K^T / sqrt(d_k)) with masked keys given weight exactly 0.

    Args:
        query: `(..., query_length, depth)`.
        key: `(..., key_length, depth)`.
        mask: optional bool, broadcastable to `(..., query_length, key_length)`.
        zero_masked_rows: as in `masked_softmax`.

    Returns:
        float32 `(..., query_length, key_length)`; each row sums to 1, or to 0
        when every key of that row is masked.
    """
    depth = query.shape[-1]
    scores = ops.matmul(query, ops.swapaxes(key, -1, -2))
    # The softmax runs in float32 even under bf16 mixed precision.
    return masked_softmax(ops.cast(scores, "float32") / math.sqrt(depth), mask, zero_masked_rows)


def masked_softmax(scores, mask=None, zero_masked_rows=True):
    """Softmax over the last axis of `scores` with masked keys given weight exactly 0.

    Args:
        scores: `(..., query_length, key_length)`.
        mask: optional bool, broadcastable to `scores`; True = may attend.
        zero_masked_rows: False leaves a row whose keys are all masked uniform,
            for a caller that zeroes those rows of its output (`has_keys`); this
            saves a select over the weights, forward and backward.
    """
    if mask is None:
        return ops.softmax(scores, axis=-1)
    # Added, not selected: the bias is the mask's size (no heads axis), and an addition's
    # gradient is its input's. A masked score becomes exactly -1e9, so its weight is 0.
    weights = ops.softmax(scores + ops.where(mask, 0.0, _MASKED_SCORE), axis=-1)
    return ops.where(mask, weights, 0.0) if zero_masked_rows else weights


def has_keys(mask, dtype):
    """`(..., query_length, 1)`: 1 where the query row of `mask` may attend to some key, else 0."""
    return ops.cast(ops.any(mask, axis=-1, keepdims=True), dtype)


def scaled_dot_product_attention(query, key, value, mask=None):
    """Scaled dot-product attention.

    Args:
        query: `(..., query_length, depth)`.
        key: `(..., key_length, depth)`.
        value: `(..., key_length, value_depth)`.
        mask: optional bool, broadcastable to `(..., query_length, key_length)`,
            True = may attend.

    Returns:
        `(output, weights)`: output `(..., query_length, value_depth)` in the
        dtype of `value`, weights float32 `(..., query_length, key_length)`.
    """
    weights = attention_weights(query, key, mask)
    return ops.matmul(ops.cast(weights, value.dtype), value), weights


def attend(query, key, value, mask=None, dropout_mask=None):
    """Attention's output for training, `softmax(Q K^T / sqrt(d_k)) V`, with a
    hand-written gradient and no weights returned.

    Backward, the softmax's gradient `w * (g - rowsum(g * w))` needs one dot product per
    weight row; it equals `rowsum(d_out * out)`, the same row of the output against its
    gradient (what FlashAttention uses), a pass over `(query_length, depth)` instead
    of two over the `(query_length, key_length)` maps. That holds with dropout too,
    since the output is made of the dropped weights.

    Args:
        query: `(batch, heads, query_length, depth)`.
        key: `(batch, heads, key_length, depth)`.
        value: `(batch, heads, key_length, value_depth)`.
        mask: optional bool, broadcastable to `(batch, heads, query_length, key_length)`;
            True = may attend. A row with no key left is uniform, as `masked_softmax`
            with `zero_masked_rows=False`: the caller zeroes its output (`has_keys`).
        dropout_mask: optional `(batch, heads, query_length, key_length)` factors of 0
            and 1 / (1 - rate) in `value`'s dtype, multiplied into the weights.

    Returns:
        `(batch, heads, query_length, value_depth)` in `value`'s dtype.
    """
    scale = 1.0 / math.sqrt(query.shape[-1])
    extras = []
    if mask is not None:
        extras.append(ops.cast(ops.where(mask, 0.0, _MASKED_SCORE), query.dtype))
    if dropout_mask is not None:
        extras.append(ops.convert_to_tensor(dropout_mask))

    @ops.custom_gradient
    def attended(query, key, value, *extras):
        bias = extras[0] if mask is not None else None
        kept = extras[-1] if dropout_mask is not None else None
        # Product, scale and mask in the queries' dtype, a pattern TensorFlow's oneDNN
        # kernels run as one fused product; the softmax is float32 even under bf16.
        scores = ops.matmul(query, ops.swapaxes(key, -1, -2)) * ops.cast(scale, query.dtype)
        if bias is not None:
            scores = scores + bias
        weights = ops.softmax(ops.cast(scores, "float32"), axis=-1)
        dropped = ops.cast(weights, value.dtype)
        if kept is not None:
            dropped = dropped * kept
        output = ops.matmul(dropped, value)

        def gradient(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            d_value = ops.matmul(ops.swapaxes(dropped, -1, -2), upstream)
            d_dropped = ops.matmul(upstream, ops.swapaxes(value, -1, -2))
            if kept is not None:
                d_dropped = d_dropped * kept
            row_sums = ops.sum(
                ops.cast(upstream, "float32") * ops.cast(output, "float32"), -1, keepdims=True
            )
            d_scores = ops.cast(weights * (ops.cast(d_dropped, "float32") - row_sums), query.dtype)
            d_query = ops.matmul(d_scores, key) * ops.cast(scale, query.dtype)
            d_key = ops.matmul(ops.swapaxes(d_scores, -1, -2), query) * ops.cast(scale, key.dtype)
            return (d_query, d_key, d_value, *[None] * len(extras))

        return output, gradient

    return attended(*(ops.convert_to_tensor(x) for x in (query, key, value)), *extras)


@keras.saving.register_keras_serializable(package="mintransformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention: project, split into heads, attend, merge, project.

    Args:
        d_model: model width; also the width of the output.
        num_heads: number of heads; must divide `d_model`.
        dropout_rate: dropout on the attention weights during training.
        use_bias: whether the four projections have biases.
        key_dim: width of each head's queries, keys and values; by default
            `d_model // num_heads` as in the paper (keras' `key_dim`).

    Call arguments:
        query: `(batch, query_length, d_model)`.
        key: `(batch, key_length, key_dim)`; defaults to `query` (self-attention).
        value: `(batch, key_length, value_dim)`; defaults to `key`.
        attention_mask: bool, `(batch, query_length, key_length)` or
            `(batch | 1, heads | 1, query_length | 1, key_length)`; True = may attend.
        key_value: optional `(keys, values)` already split into heads, each
            `(batch, num_heads, key_length, depth)`, from `project_key_value`;
            replaces `key`/`value` (used by cached decoding).
        return_attention_weights: also return the weights
            `(batch, num_heads, query_length, key_length)`.
        training: enables dropout.

    Returns:
        `(batch, query_length, d_model)`, or `(output, weights)`.
    """

    ARGUMENTS = ("d_model", "num_heads", "dropout_rate", "use_bias", "key_dim")

    def __init__(self, d_model, num_heads, dropout_rate=0.0, use_bias=True, key_dim=None, **kwargs):
        super().__init__(**kwargs)
        if key_dim is None:
            self.depth = checks.heads_divide(d_model, num_heads)
        else:
            checks.positive_int(d_model, "d_model")
            checks.positive_int(num_heads, "num_heads")
            self.depth = checks.positive_int(key_dim, "key_dim")
        self.key_dim = key_dim
        self.d_model = d_model
        self.num_heads = num_heads
        self.dropout_rate = checks.unit_interval(dropout_rate, "dropout_rate")
        self.use_bias = use_bias
        dense = dict(use_bias=use_bias, dtype=self.dtype_policy)
        width = num_heads * self.depth
        self.query_dense = keras.layers.Dense(width, name="query", **dense)
        self.key_dense = keras.layers.Dense(width, name="key", **dense)
        self.value_dense = keras.layers.Dense(width, name="value", **dense)
        self.output_dense = keras.layers.Dense(d_model, name="output", **dense)
        self.weights_dropout = Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def build(self, query_shape, key_shape=None, value_shape=None):
        key_shape = key_shape or query_shape
        value_shape = value_shape or key_shape
        self.query_dense.build(query_shape)
        self.key_dense.build(key_shape)
        self.value_dense.build(value_shape)
        self.output_dense.build(tuple(query_shape[:-1]) + (self.num_heads * self.depth,))
        self.built = True

    def split_heads(self, x):
        """`(batch, length, d_model)` -> `(batch, num_heads, length, depth)`."""
        # -1 for the length: a graph converter may fold an all-known target shape into a
        # constant, which then fails on any other length.
        x = ops.reshape(x, (ops.shape(x)[0], -1, self.num_heads, self.depth))
        return ops.transpose(x, (0, 2, 1, 3))

    def merge_heads(self, x):
        """`(batch, num_heads, length, depth)` -> `(batch, length, num_heads * depth)`."""
        width = self.num_heads * self.depth
        return ops.reshape(ops.transpose(x, (0, 2, 1, 3)), (ops.shape(x)[0], -1, width))

    def project_key_value(self, key, value=None):
        """Projects and splits keys and values once, e.g. an encoder output for decoding."""
        value = key if value is None else value
        return (
            self.split_heads(per_position(self.key_dense, key)),
            self.split_heads(per_position(self.value_dense, value)),
        )

    def call(
        self,
        query,
        key=None,
        value=None,
        attention_mask=None,
        key_value=None,
        return_attention_weights=False,
        training=None,
    ):
        checks.rank(query, 3, "query", "(batch, length, features)")
        if key_value is None:
            key = query if key is None else key
            value = key if value is None else value
            checks.rank(key, 3, "key", "(batch, length, features)")
            checks.rank(value, 3, "value", "(batch, length, features)")
            key_value = self.project_key_value(key, value)
        keys, values = key_value
        if attention_mask is not None:
            attention_mask = check_attention_mask(attention_mask)
        queries = self.split_heads(per_position(self.query_dense, query))
        dropout_active = training and self.dropout_rate > 0
        if not (return_attention_weights or dropout_active) and prefers_fused_attention():
            attended = fused_attention(queries, keys, values, attention_mask)
            return per_position(self.output_dense, self.merge_heads(attended))
        if return_attention_weights:
            weights = attention_weights(queries, keys, attention_mask)
            dropped = self.weights_dropout(ops.cast(weights, values.dtype), training=training)
            attended = ops.matmul(dropped, values)
            return per_position(self.output_dense, self.merge_heads(attended)), weights
        kept = None
        if dropout_active:
            batch, heads, query_length = ops.shape(queries)[:3]
            kept = self.weights_dropout.mask(
                (batch, heads, query_length, ops.shape(keys)[2]), values.dtype
            )
        attended = attend(queries, keys, values, attention_mask, kept)
        if attention_mask is not None:
            attended = attended * has_keys(attention_mask, attended.dtype)
        return per_position(self.output_dense, self.merge_heads(attended))

    def get_config(self):
        return config_with(super().get_config(), self, self.ARGUMENTS)

"""Backend-specific kernels that the layers and the loss call: dropout's random mask,
LayerNorm's training gradient, the loss's arg-max, the key/value cache's write, and
whether to use the fused attention kernel. Each falls back to `keras.ops` where the
backend needs nothing special.
"""

from __future__ import annotations

import math

import keras


def prefers_fused_attention() -> bool:
    """Whether `fused_attention` beats attention written out in ops.

    PyTorch has a fused CPU kernel (scaled_dot_product_attention) that is much faster;
    TensorFlow and JAX have none, and were as fast or slower with it (docs/speed.md).
    """
    return keras.backend.backend() == "torch"


def fused_attention(query, key, value, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V from the backend's fused kernel, without the weights.

    Args:
        query: `(batch, heads, query_length, depth)`.
        key: `(batch, heads, key_length, depth)`.
        value: `(batch, heads, key_length, value_depth)`.
        mask: optional bool, broadcastable to `(batch, heads, query_length, key_length)`,
            True = may attend. A query row with no key left gives zeros.

    Returns:
        `(batch, heads, query_length, value_depth)`.

    On PyTorch, `scaled_dot_product_attention` itself, which takes this layout and a
    bool mask: `keras.ops.dot_product_attention` takes `(batch, length, heads, depth)`,
    makes its inputs contiguous and turns the mask into a float bias, a dozen more kernels
    a call, which a one-token decoding step runs twice per decoder layer.
    """
    ops = keras.ops
    query, key, value = (ops.convert_to_tensor(x) for x in (query, key, value))
    mask = None if mask is None else ops.convert_to_tensor(mask, "bool")
    scale = 1.0 / math.sqrt(query.shape[-1])
    if keras.backend.backend() == "torch":
        import torch

        output = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, scale=scale
        )
    else:

        def swap(x):
            return ops.swapaxes(x, 1, 2)

        output = swap(
            ops.dot_product_attention(swap(query), swap(key), swap(value), mask=mask, scale=scale)
        )
    if mask is None:
        return output
    return ops.where(ops.any(mask, axis=-1, keepdims=True), output, ops.cast(0, output.dtype))


def dense_rows(layer, rows):
    """`layer(rows)` for 2-D `rows` `(n, features)`: on PyTorch, for a built plain
    `keras.layers.Dense` (no activation, LoRA or quantization), one `addmm`, the product
    and the bias in one kernel where Keras' `Dense` runs two; anything else is called.
    """
    if (
        keras.backend.backend() != "torch"
        or type(layer) is not keras.layers.Dense
        or not layer.built
        or layer.bias is None
        or layer.activation is not keras.activations.linear
        or layer.lora_enabled
        or layer.quantization_mode is not None
    ):
        return layer(rows)
    import torch

    ops = keras.ops
    rows = ops.convert_to_tensor(rows)
    kernel, bias = (ops.cast(weight, rows.dtype) for weight in (layer.kernel, layer.bias))
    return torch.addmm(bias, rows, kernel)


def argmax_last_axis(x):
    """`keras.ops.argmax(x, axis=-1)` as int32, in one pass over `x`.

    Keras' TensorFlow `argmax` first replaces -0.0 by the smallest negative float, so that
    0.0 beats -0.0 as in NumPy: four more passes over `x` (equal, sign bit, and, select).
    Over a batch of vocabulary-wide logits that costs more than the arg-max itself, and
    which of two zero logits wins does not matter to an accuracy.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.math.argmax(x, axis=-1, output_type=tf.int32)
    return keras.ops.cast(keras.ops.argmax(x, axis=-1), "int32")


def write_position(tensor, update, index, axis: int):
    """`tensor` with position `index` (an int32 scalar) of `axis` set to `update`, which
    has size 1 on `axis` and `tensor`'s other sizes.

    A dynamic update slice, which XLA does in place in a compiled loop (only the
    position is written); on PyTorch one out-of-place `index_copy`, where
    `slice_update` runs a dozen kernels. Exported (ONNX) graphs never write: their
    caller stores what a step returns.
    """
    ops = keras.ops
    if keras.backend.backend() == "torch":
        import torch

        position = ops.reshape(ops.cast(index, "int64"), (1,))
        return torch.index_copy(tensor, axis, position, ops.cast(update, tensor.dtype))
    start = [0] * len(tensor.shape)
    start[axis] = ops.cast(index, "int32")
    return ops.slice_update(tensor, start, ops.cast(update, tensor.dtype))


RANDOM_WORD_LEVELS = 65536  # TensorFlow's dropout compares 16-bit random words


def dropout(inputs, rate: float, seed_generator: keras.random.SeedGenerator):
    """Inverted dropout: each element zeroed with probability `rate`, the rest scaled up.

    On TensorFlow the mask comes from 16-bit random words, two from each 32-bit
    word the generator makes, where `keras.random.dropout` draws a float (32 bits)
    per element: half the random-number work, the step's largest cost after the
    matrix products. `rate` is rounded to a multiple of 1 / 65536 there and the
    kept elements are scaled by the inverse of the rounded keep probability, so
    the expected output is still exactly `inputs`. Other backends use
    `keras.random.dropout`.
    """
    if keras.backend.backend() != "tensorflow" or not 0.0 < rate < 1.0:
        return keras.random.dropout(inputs, rate, seed=seed_generator)
    # A product with a mask of 0 and the scale: its gradient is one more product, where
    # a select's would be a select and a product.
    return inputs * dropout_mask(keras.ops.shape(inputs), inputs.dtype, rate, seed_generator)


def dropout_mask(shape, dtype, rate: float, seed_generator: keras.random.SeedGenerator):
    """The factor `dropout` multiplies by: 0 with probability `rate`, else 1 / (1 - rate).

    For a caller that applies the mask itself, e.g. inside a hand-written gradient.
    On TensorFlow the 16-bit random words of `dropout`; elsewhere `keras.random.dropout`
    of ones.
    """
    if keras.backend.backend() != "tensorflow" or not 0.0 < rate < 1.0:
        return keras.random.dropout(keras.ops.ones(shape, dtype), rate, seed=seed_generator)
    import tensorflow as tf

    threshold = round(rate * RANDOM_WORD_LEVELS)  # a word below it drops its element
    if not 0 < threshold < RANDOM_WORD_LEVELS:
        return keras.random.dropout(keras.ops.ones(shape, dtype), rate, seed=seed_generator)
    seed = tf.cast(tf.math.floormod(seed_generator.next(), tf.int32.max - 1), tf.int32)
    shape = tf.convert_to_tensor(shape, tf.int32)
    last = shape[-1]
    word_shape = tf.concat([shape[:-1], [(last + 1) // 2]], axis=0)
    # Philox is what the default ("auto select") picks; named, XLA (jit_compile) also runs
    # it faster than the auto-selected one.
    words = tf.random.stateless_uniform(
        word_shape, seed, minval=None, maxval=None, dtype=tf.uint32, alg="philox"
    )
    halves = tf.reshape(tf.bitcast(words, tf.uint16), tf.concat([shape[:-1], [-1]], axis=0))
    keep = halves[..., :last] >= threshold
    scale = tf.constant(RANDOM_WORD_LEVELS / (RANDOM_WORD_LEVELS - threshold), dtype)
    return tf.where(keep, scale, tf.zeros((), dtype))


def layer_norm(x, gamma, beta, epsilon: float):
    """`keras.ops.layer_normalization` over the last axis, for training; in float32.

    On TensorFlow with a hand-written gradient: Keras writes the forward pass as
    `x * inv + (beta - mean * inv)` with `inv = gamma / std` a full-size tensor, and
    differentiating that takes about twice the ops and passes of the closed form

        dx = (g - mean(g) - x_hat * mean(g * x_hat)) / std,   g = dy * gamma.

    Other backends use Keras' (PyTorch's own kernel; JAX fuses under `jit`).
    """
    if keras.backend.backend() != "tensorflow":
        return keras.ops.layer_normalization(x, gamma, beta, epsilon=epsilon)
    import tensorflow as tf

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        inverse_std = tf.math.rsqrt(variance + epsilon)
        normalized = (x - mean) * inverse_std

        def gradient(upstream):
            scaled = upstream * gamma
            d_x = inverse_std * (
                scaled
                - tf.reduce_mean(scaled, axis=-1, keepdims=True)
                - normalized * tf.reduce_mean(scaled * normalized, axis=-1, keepdims=True)
            )
            rows = list(range(len(x.shape) - 1))
            return d_x, tf.reduce_sum(upstream * normalized, rows), tf.reduce_sum(upstream, rows)

        return normalized * gamma + beta, gradient

    def as_float32(value):
        return tf.cast(tf.convert_to_tensor(value), tf.float32)

    return tf.cast(normalize(as_float32(x), as_float32(gamma), as_float32(beta)), x.dtype)

"""Peer (a): the TensorFlow tutorial's Transformer in plain TensorFlow, trained under XLA.

Written in the style of the TensorFlow tutorial "Transformer model for language
understanding": attention with `tf.matmul`, float masks where 1 = blocked added as
`mask * -1e9`, `create_masks` (padding, look-ahead, their maximum), a point-wise
feed-forward network, post-LN, sinusoidal positions, `tf.GradientTape`. Weights are
`tf.Variable`s in `tf.Module`s (no Keras), so this peer runs the same whatever
Keras backend the process has; the whole train step (forward, backward, Adam) is
one `tf.function(jit_compile=True)`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from benchmarks.common import (
    PAD_ID,
    ClassifierShape,
    TranslationShape,
    classification_batch,
    translation_batch,
)


class Dense(tf.Module):
    """`activation(x @ kernel + bias)` with a Glorot-uniform kernel."""

    def __init__(self, rng: np.random.Generator, units_in: int, units_out: int, activation=None):
        super().__init__()
        limit = np.sqrt(6.0 / (units_in + units_out))
        kernel = rng.uniform(-limit, limit, (units_in, units_out)).astype("float32")
        self.kernel = tf.Variable(kernel)
        self.bias = tf.Variable(tf.zeros([units_out]))
        self.activation = activation

    def __call__(self, x):
        y = tf.tensordot(x, self.kernel, 1) + self.bias
        return y if self.activation is None else self.activation(y)


class LayerNorm(tf.Module):
    def __init__(self, width: int, epsilon: float = 1e-6):
        super().__init__()
        self.gamma = tf.Variable(tf.ones([width]))
        self.beta = tf.Variable(tf.zeros([width]))
        self.epsilon = epsilon

    def __call__(self, x):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + self.epsilon) * self.gamma + self.beta


def uniform(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 U(-0.05, 0.05), the Keras default for embeddings."""
    return rng.uniform(-0.05, 0.05, shape).astype("float32")


def dropout(x, rate: float, training: bool):
    return tf.nn.dropout(x, rate) if training and rate > 0 else x


def positional_encoding(length: int, d_model: int) -> tf.Tensor:
    """The sinusoidal table `(1, length, d_model)`."""
    positions = np.arange(length)[:, None]
    dims = np.arange(d_model)[None, :]
    angles = positions / np.power(10000, (2 * (dims // 2)) / d_model)
    angles[:, 0::2] = np.sin(angles[:, 0::2])
    angles[:, 1::2] = np.cos(angles[:, 1::2])
    return tf.constant(angles[None], tf.float32)


def create_padding_mask(seq):
    """1.0 at padding: `(batch, 1, 1, length)`."""
    return tf.cast(tf.math.equal(seq, PAD_ID), tf.float32)[:, tf.newaxis, tf.newaxis, :]


def create_look_ahead_mask(size):
    """1.0 above the diagonal (future positions)."""
    return 1 - tf.linalg.band_part(tf.ones((size, size)), -1, 0)


def create_masks(source, target):
    """The tutorial's three masks: encoder padding, decoder self (combined), cross padding."""
    look_ahead = create_look_ahead_mask(tf.shape(target)[1])
    combined = tf.maximum(create_padding_mask(target), look_ahead)
    return create_padding_mask(source), combined, create_padding_mask(source)


def scaled_dot_product_attention(q, k, v, mask):
    logits = tf.matmul(q, k, transpose_b=True)
    logits = logits / tf.math.sqrt(tf.cast(tf.shape(k)[-1], tf.float32))
    if mask is not None:
        logits += mask * -1e9
    weights = tf.nn.softmax(logits, axis=-1)
    return tf.matmul(weights, v)


class MultiHeadAttention(tf.Module):
    def __init__(self, rng, d_model: int, num_heads: int, key_dim: int | None = None):
        super().__init__()
        self.num_heads = num_heads
        self.depth = key_dim or d_model // num_heads
        width = num_heads * self.depth
        self.wq = Dense(rng, d_model, width)
        self.wk = Dense(rng, d_model, width)
        self.wv = Dense(rng, d_model, width)
        self.dense = Dense(rng, width, d_model)

    def split_heads(self, x, batch):
        x = tf.reshape(x, (batch, -1, self.num_heads, self.depth))
        return tf.transpose(x, perm=[0, 2, 1, 3])

    def __call__(self, v, k, q, mask):
        batch = tf.shape(q)[0]
        q = self.split_heads(self.wq(q), batch)
        k = self.split_heads(self.wk(k), batch)
        v = self.split_heads(self.wv(v), batch)
        attention = tf.transpose(scaled_dot_product_attention(q, k, v, mask), perm=[0, 2, 1, 3])
        return self.dense(tf.reshape(attention, (batch, -1, self.num_heads * self.depth)))


class PointWiseFeedForward(tf.Module):
    def __init__(self, rng, d_model: int, dff: int):
        super().__init__()
        self.inner = Dense(rng, d_model, dff, tf.nn.relu)
        self.outer = Dense(rng, dff, d_model)

    def __call__(self, x):
        return self.outer(self.inner(x))


class EncoderLayer(tf.Module):
    def __init__(self, rng, d_model, num_heads, dff, rate, key_dim=None):
        super().__init__()
        self.mha = MultiHeadAttention(rng, d_model, num_heads, key_dim)
        self.ffn = PointWiseFeedForward(rng, d_model, dff)
        self.layernorm1 = LayerNorm(d_model)
        self.layernorm2 = LayerNorm(d_model)
        self.rate = rate

    def __call__(self, x, training, mask):
        out1 = self.layernorm1(x + dropout(self.mha(x, x, x, mask), self.rate, training))
        return self.layernorm2(out1 + dropout(self.ffn(out1), self.rate, training))


class DecoderLayer(tf.Module):
    def __init__(self, rng, d_model, num_heads, dff, rate):
        super().__init__()
        self.mha1 = MultiHeadAttention(rng, d_model, num_heads)
        self.mha2 = MultiHeadAttention(rng, d_model, num_heads)
        self.ffn = PointWiseFeedForward(rng, d_model, dff)
        self.layernorm1 = LayerNorm(d_model)
        self.layernorm2 = LayerNorm(d_model)
        self.layernorm3 = LayerNorm(d_model)
        self.rate = rate

    def __call__(self, x, enc_output, training, look_ahead_mask, padding_mask):
        attn1 = dropout(self.mha1(x, x, x, look_ahead_mask), self.rate, training)
        out1 = self.layernorm1(attn1 + x)
        attn2 = self.mha2(enc_output, enc_output, out1, padding_mask)
        out2 = self.layernorm2(dropout(attn2, self.rate, training) + out1)
        return self.layernorm3(dropout(self.ffn(out2), self.rate, training) + out2)


class Embedding(tf.Module):
    """Token embedding * sqrt(d_model) + sinusoidal positions, then dropout."""

    def __init__(self, rng, vocab: int, d_model: int, max_length: int, rate: float):
        super().__init__()
        self.embedding = tf.Variable(uniform(rng, (vocab, d_model)))
        self.pos_encoding = positional_encoding(max_length, d_model)
        self.scale = float(np.sqrt(d_model))
        self.rate = rate

    def __call__(self, ids, training):
        x = tf.gather(self.embedding, ids) * self.scale
        x += self.pos_encoding[:, : tf.shape(ids)[1], :]
        return dropout(x, self.rate, training)


class Transformer(tf.Module):
    def __init__(self, shape: TranslationShape, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        d, rate = shape.d_model, shape.dropout
        self.source_embedding = Embedding(rng, shape.source_vocab, d, shape.source_length, rate)
        self.target_embedding = Embedding(rng, shape.target_vocab, d, shape.target_length, rate)
        self.encoder = [
            EncoderLayer(rng, d, shape.num_heads, shape.dff, rate) for _ in range(shape.num_layers)
        ]
        self.decoder = [
            DecoderLayer(rng, d, shape.num_heads, shape.dff, rate) for _ in range(shape.num_layers)
        ]
        self.final_layer = Dense(rng, d, shape.target_vocab)

    def __call__(self, source, target, training):
        enc_padding_mask, look_ahead_mask, dec_padding_mask = create_masks(source, target)
        x = self.source_embedding(source, training)
        for layer in self.encoder:
            x = layer(x, training, enc_padding_mask)
        y = self.target_embedding(target, training)
        for layer in self.decoder:
            y = layer(y, x, training, look_ahead_mask, dec_padding_mask)
        return self.final_layer(y)


class Classifier(tf.Module):
    """Learned positions, encoder layers, masked mean pooling, Dense(hidden, relu), Dense(1)."""

    def __init__(self, shape: ClassifierShape, seed: int = 0):
        super().__init__()
        rng = np.random.default_rng(seed)
        d = shape.d_model
        self.token_embedding = tf.Variable(uniform(rng, (shape.vocab, d)))
        self.position_embedding = tf.Variable(uniform(rng, (shape.length, d)))
        self.encoder = [
            EncoderLayer(rng, d, shape.num_heads, shape.dff, shape.dropout, shape.key_dim)
            for _ in range(shape.num_layers)
        ]
        self.hidden = Dense(rng, d, shape.hidden, tf.nn.relu)
        self.output_layer = Dense(rng, shape.hidden, 1)
        self.rate = shape.dropout

    def __call__(self, ids, training):
        x = tf.gather(self.token_embedding, ids) + self.position_embedding[: tf.shape(ids)[1]]
        mask = create_padding_mask(ids)
        for layer in self.encoder:
            x = layer(x, training, mask)
        real = tf.cast(tf.math.not_equal(ids, PAD_ID), tf.float32)[:, :, None]
        pooled = tf.reduce_sum(x * real, axis=1) / tf.maximum(tf.reduce_sum(real, axis=1), 1.0)
        pooled = dropout(pooled, self.rate, training)
        return self.output_layer(dropout(self.hidden(pooled), self.rate, training))[:, 0]


class Adam(tf.Module):
    """Adam with bias correction, as `tf.keras.optimizers.Adam` (dense updates)."""

    def __init__(self, variables, learning_rate=1e-3, beta_1=0.9, beta_2=0.98, epsilon=1e-9):
        super().__init__()
        self.step = tf.Variable(0.0)
        self.m = [tf.Variable(tf.zeros_like(v)) for v in variables]
        self.v = [tf.Variable(tf.zeros_like(v)) for v in variables]
        self.learning_rate = learning_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def apply(self, gradients, variables) -> None:
        t = self.step.assign_add(1.0)
        b1, b2 = self.beta_1, self.beta_2
        rate = self.learning_rate * tf.sqrt(1.0 - b2**t) / (1.0 - b1**t)
        for gradient, variable, m, v in zip(gradients, variables, self.m, self.v, strict=True):
            gradient = tf.convert_to_tensor(gradient)
            m.assign(b1 * m + (1.0 - b1) * gradient)
            v.assign(b2 * v + (1.0 - b2) * tf.square(gradient))
            variable.assign_sub(rate * m / (tf.sqrt(v) + self.epsilon))


def smoothed_masked_loss(labels, logits, label_smoothing: float):
    """Mean label-smoothed cross-entropy over the labels that are not padding."""
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    true = tf.gather(log_probs, labels, batch_dims=2)
    losses = -(1.0 - label_smoothing) * true - label_smoothing * tf.reduce_mean(log_probs, -1)
    real = tf.cast(tf.math.not_equal(labels, PAD_ID), tf.float32)
    return tf.reduce_sum(losses * real) / tf.maximum(tf.reduce_sum(real), 1.0)


def _compiled_step(model: tf.Module, loss_fn: Callable) -> Callable:
    """One XLA-compiled train step of `model` with Adam: `step(*inputs, labels) -> loss`."""
    variables = model.trainable_variables
    optimizer = Adam(variables)

    @tf.function(jit_compile=True)
    def step(*tensors):
        *inputs, labels = tensors
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(*inputs, training=True))
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    return step


def translation_step(shape: TranslationShape, label_smoothing: float = 0.1) -> Callable[[], float]:
    """A runner of one train step on the fixed batch; returns the loss (synchronised)."""
    tensors = [tf.constant(array) for array in translation_batch(shape)]
    step = _compiled_step(
        Transformer(shape),
        lambda labels, logits: smoothed_masked_loss(labels, logits, label_smoothing),
    )
    return lambda: float(step(*tensors).numpy())


def classification_step(shape: ClassifierShape) -> Callable[[], float]:
    """A runner of one train step (binary cross-entropy) on the fixed batch."""
    ids, labels = classification_batch(shape)
    tensors = [tf.constant(ids), tf.constant(labels.astype("float32"))]

    def loss_fn(labels, logits):
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits))

    step = _compiled_step(Classifier(shape), loss_fn)
    return lambda: float(step(*tensors).numpy())

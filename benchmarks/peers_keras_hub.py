"""Peer (b): keras-hub's `TransformerEncoder` / `TransformerDecoder` + `TokenAndPositionEmbedding`.

Runs on the process's Keras backend. keras-hub's embedding adds learned positions
(no sqrt(d_model) scaling) and its attention layers use `key_dim = d_model // num_heads`;
otherwise the translation model has our shape (post-LN, ReLU, dropout 0.1, epsilon 1e-6).
`KerasHubCachedSteps` decodes with keras-hub's own self- and cross-attention caches
behind the `start` / `step` / `reorder` interface of our `greedy_search` and `beam_search`.
"""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
from keras import ops

from benchmarks.common import PAD_ID, ClassifierShape, TranslationShape
from mintransformer.backend.compilation import compile_inference


class Translator(keras.Model):
    """Source and target `TokenAndPositionEmbedding`, encoder and decoder stacks, Dense logits."""

    def __init__(self, shape: TranslationShape, **kwargs):
        super().__init__(**kwargs)
        d, policy = shape.d_model, self.dtype_policy
        layer = dict(dropout=shape.dropout, layer_norm_epsilon=1e-6, dtype=policy)
        self.source_embedding = keras_hub.layers.TokenAndPositionEmbedding(
            shape.source_vocab, shape.source_length, d, dtype=policy
        )
        self.target_embedding = keras_hub.layers.TokenAndPositionEmbedding(
            shape.target_vocab, shape.target_length, d, dtype=policy
        )
        self.encoders = [
            keras_hub.layers.TransformerEncoder(shape.dff, shape.num_heads, **layer)
            for _ in range(shape.num_layers)
        ]
        self.decoders = [
            keras_hub.layers.TransformerDecoder(shape.dff, shape.num_heads, **layer)
            for _ in range(shape.num_layers)
        ]
        self.projection = keras.layers.Dense(shape.target_vocab, dtype=policy)
        self.dims = shape

    def encode(self, source, training=None):
        """`(memory (batch, source_length, d_model), source padding mask)`."""
        keep = ops.not_equal(source, PAD_ID)
        x = self.source_embedding(source)
        for encoder in self.encoders:
            x = encoder(x, padding_mask=keep, training=training)
        return x, keep

    def call(self, inputs, training=None):
        source, target = inputs
        memory, source_keep = self.encode(source, training)
        x = self.target_embedding(target)
        for decoder in self.decoders:
            x = decoder(
                x,
                memory,
                decoder_padding_mask=ops.not_equal(target, PAD_ID),
                encoder_padding_mask=source_keep,
                training=training,
            )
        return ops.cast(self.projection(x), "float32")


def classifier(shape: ClassifierShape, dtype=None) -> keras.Model:
    """Embedding, encoder blocks, mean pooling, Dense(hidden, relu), Dense(1, sigmoid).

    keras-hub's encoder fixes `key_dim = d_model // num_heads`, so its attention is
    narrower than `shape.key_dim` when that is larger (config B: 16 instead of 64).
    """
    ids = keras.Input((shape.length,), dtype="int32")
    x = keras_hub.layers.TokenAndPositionEmbedding(
        shape.vocab, shape.length, shape.d_model, dtype=dtype
    )(ids)
    keep = ops.not_equal(ids, PAD_ID)
    for _ in range(shape.num_layers):
        x = keras_hub.layers.TransformerEncoder(
            shape.dff, shape.num_heads, dropout=shape.dropout, layer_norm_epsilon=1e-6, dtype=dtype
        )(x, padding_mask=keep)
    x = keras.layers.GlobalAveragePooling1D(dtype=dtype)(x)
    x = keras.layers.Dropout(shape.dropout, dtype=dtype)(x)
    x = keras.layers.Dense(shape.hidden, activation="relu", dtype=dtype)(x)
    x = keras.layers.Dropout(shape.dropout, dtype=dtype)(x)
    outputs = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(x)
    return keras.Model(ids, outputs)


class KerasHubCachedSteps:
    """Cached decoding of a `Translator` with keras-hub's attention caches.

    The first step fills each decoder layer's cross-attention cache from the encoder
    output (`cross_attention_cache_update_index=0`); later steps reuse it (`None`).
    Self-attention caches are `(batch, 2, max_length, heads, key_dim)`. Both step
    functions are compiled with `compile_inference`, as our `CachedSteps` are. Our
    searches drive it with their Python loops, one compiled step per token.
    """

    compiled_loops = False

    def __init__(self, model: Translator, max_length: int):
        self.model = model
        self.max_length = max_length
        self.key_dim = model.dims.d_model // model.dims.num_heads
        self._encode = compile_inference(model.encode, model.variables)
        self._first = compile_inference(self._first_fn, model.variables)
        self._next = compile_inference(self._next_fn, model.variables)

    def _decode(self, tokens, index, self_caches, cross_caches, memory, keep, cross_index):
        x = self.model.target_embedding(tokens, start_index=index)
        new_self, new_cross = [], []
        for decoder, self_cache, cross_cache in zip(
            self.model.decoders, self_caches, cross_caches, strict=True
        ):
            x, self_cache, cross_cache = decoder(
                x,
                memory,
                encoder_padding_mask=keep,
                self_attention_cache=self_cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                cross_attention_cache_update_index=cross_index,
            )
            new_self.append(self_cache)
            new_cross.append(cross_cache)
        logits = ops.cast(self.model.projection(x[:, 0]), "float32")
        return ops.log_softmax(logits, axis=-1), new_self, new_cross

    def _first_fn(self, tokens, index, self_caches, cross_caches, memory, keep):
        return self._decode(tokens, index, self_caches, cross_caches, memory, keep, 0)

    def _next_fn(self, tokens, index, self_caches, cross_caches, memory, keep):
        return self._decode(tokens, index, self_caches, cross_caches, memory, keep, None)

    def _zeros(self, batch: int, length: int):
        shape = (batch, 2, length, self.model.dims.num_heads, self.key_dim)
        return [
            ops.zeros(shape, dtype=self.model.compute_dtype)
            for _ in range(len(self.model.decoders))
        ]

    def start(self, source_ids: np.ndarray, repeat: int = 1):
        """Encodes the sources (each row repeated `repeat` times) and makes empty caches."""
        source_ids = np.repeat(np.asarray(source_ids, "int32"), repeat, axis=0)
        memory, keep = self._encode(ops.convert_to_tensor(source_ids))
        batch, source_length = source_ids.shape
        return (
            self._zeros(batch, self.max_length),
            self._zeros(batch, source_length),
            memory,
            keep,
        )

    def step(self, tokens: np.ndarray, index: int, state):
        """`tokens` int `(n,)` at position `index` -> (log-probs `(n, vocab)`, new state)."""
        self_caches, cross_caches, memory, keep = state
        step = self._first if index == 0 else self._next
        log_probs, self_caches, cross_caches = step(
            ops.convert_to_tensor(np.asarray(tokens, "int32")[:, None]),
            ops.convert_to_tensor(index, "int32"),
            self_caches,
            cross_caches,
            memory,
            keep,
        )
        state = (self_caches, cross_caches, memory, keep)
        return np.asarray(ops.convert_to_numpy(log_probs)), state

    def reorder(self, state, indices: np.ndarray):
        """Keeps the self-attention cache rows `indices` (beams stay within their source)."""
        self_caches, cross_caches, memory, keep = state
        indices = ops.convert_to_tensor(np.asarray(indices, "int32"))
        return [ops.take(c, indices, axis=0) for c in self_caches], cross_caches, memory, keep

"""Token embedding scaled by sqrt(d_model), plus positions, plus dropout (paper 3.4, 3.5).

The scaling can be turned off (`scale_embeddings=False`), as in GPT-2.

Token vectors start either as Keras' default, uniform in +-0.05, or normal with
standard deviation d_model^-0.5 (`embedding_init="normal"`): after the sqrt(d_model)
scaling the token signal then has standard deviation 1, above the 0.71 of the
sinusoidal positions it is added to, where the uniform start gives 0.46 at
d_model 256 (0.05 / sqrt(3) * 16), below them.

Optionally each token's embedding also gets a hashed bigram embedding, the vector
of (previous token, token) looked up in `ngram_buckets` rows: fastText-style
n-gram features, which let a shallow classifier see word pairs ("not good")
directly.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from mintransformer.core import checks
from mintransformer.layers.arguments import config_with
from mintransformer.layers.dropout import Dropout
from mintransformer.layers.positional import LearnedPositionalEmbedding, PositionalEncoding

POSITION_KINDS = {"sinusoidal": PositionalEncoding, "learned": LearnedPositionalEmbedding}
EMBEDDING_INITS = ("uniform", "normal")
# The bigram hash `previous * vocab_size + token` reaches vocab_size**2 - 1: it must fit in int32.
MAX_NGRAM_VOCAB_SIZE = math.isqrt(2**31 - 1)


def bigram_ids(token_ids, vocab_size: int, ngram_buckets: int):
    """Hashed (previous token, token) ids: `(previous * vocab_size + token) % ngram_buckets`.

    Args:
        token_ids: int `(batch, length)`.
        vocab_size: number of token ids.
        ngram_buckets: number of hash buckets.

    Returns:
        int32 `(batch, length)`; the token before position 0 counts as pad id 0.
    """
    token_ids = ops.cast(token_ids, "int32")
    previous = ops.pad(token_ids[:, :-1], ((0, 0), (1, 0)))
    return ops.mod(previous * vocab_size + token_ids, ngram_buckets)


@keras.saving.register_keras_serializable(package="mintransformer")
class ScaledNormal(keras.initializers.Initializer):
    """N(0, width^-0.5) for a `(rows, width)` table, with row `zero_row` (padding) all zeros."""

    def __init__(self, zero_row: int | None = None):
        self.zero_row = zero_row

    def __call__(self, shape, dtype=None):
        values = keras.random.normal(shape, stddev=shape[-1] ** -0.5, dtype=dtype)
        if self.zero_row is None:
            return values
        rows = ops.expand_dims(ops.arange(shape[0], dtype="int32"), -1)
        return ops.where(rows == self.zero_row, ops.zeros_like(values), values)

    def get_config(self):
        return {"zero_row": self.zero_row}


def embedding_initializer(kind: str, pad_id: int | None = None):
    """The Keras initializer of token tables for `kind` in `EMBEDDING_INITS`."""
    checks.one_of(kind, EMBEDDING_INITS, "embedding_init")
    return "uniform" if kind == "uniform" else ScaledNormal(zero_row=pad_id)


@keras.saving.register_keras_serializable(package="mintransformer")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """`dropout((embedding(ids) + bigram_embedding(ids)) * sqrt(d_model) + positions)`.

    Args:
        vocab_size: number of token ids.
        d_model: model width.
        max_length: longest sequence the position table covers.
        dropout_rate: dropout on the sum, during training.
        position: "sinusoidal" (the paper) or "learned".
        ngram_buckets: rows of the hashed bigram embedding (`bigram_ids`); 0 (the
            default) leaves it out.
        ngram_dropout: during training, the rate at which whole bigram vectors
            (all `d_model` features of a position) are dropped.
        scale_embeddings: multiply by sqrt(d_model) (the paper); False leaves
            the embeddings unscaled (GPT-2).
        embedding_init: "uniform" (Keras' default) or "normal" (`ScaledNormal`).
        pad_id: the row `embedding_init="normal"` starts at zero; None: none.
        token_embedding: an existing `keras.layers.Embedding` to use as the token
            table, shared with another layer (e.g. source and target of a
            Transformer); it is not part of `get_config`.

    Call arguments:
        token_ids: int `(batch, length)`.
        start_index: position of the first token (for cached decoding; must be 0
            with bigrams, which need the previous token).
        training: enables dropout.

    Returns:
        `(batch, length, d_model)`.
    """

    ARGUMENTS = (
        "vocab_size",
        "d_model",
        "max_length",
        "dropout_rate",
        "position",
        "ngram_buckets",
        "ngram_dropout",
        "scale_embeddings",
        "embedding_init",
        "pad_id",
    )

    def __init__(
        self,
        vocab_size,
        d_model,
        max_length,
        dropout_rate=0.0,
        position="sinusoidal",
        ngram_buckets=0,
        ngram_dropout=0.0,
        scale_embeddings=True,
        embedding_init="uniform",
        pad_id=None,
        token_embedding=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = checks.positive_int(vocab_size, "vocab_size")
        self.d_model = checks.positive_int(d_model, "d_model")
        self.max_length = checks.positive_int(max_length, "max_length")
        self.dropout_rate = checks.unit_interval(dropout_rate, "dropout_rate")
        self.position = checks.one_of(position, POSITION_KINDS, "position")
        self.ngram_buckets = checks.non_negative_int(ngram_buckets, "ngram_buckets")
        self.ngram_dropout = checks.unit_interval(ngram_dropout, "ngram_dropout")
        self.scale_embeddings = bool(scale_embeddings)
        self.embedding_init = embedding_init
        self.pad_id = pad_id
        if ngram_buckets and vocab_size > MAX_NGRAM_VOCAB_SIZE:
            raise ValueError(
                f"`vocab_size` {vocab_size} is too large for `ngram_buckets`: the bigram hash "
                f"`previous * vocab_size + token` would overflow int32; the largest vocabulary "
                f"allowed is {MAX_NGRAM_VOCAB_SIZE}."
            )
        if token_embedding is None:
            token_embedding = keras.layers.Embedding(
                vocab_size,
                d_model,
                embeddings_initializer=embedding_initializer(embedding_init, pad_id),
                dtype=self.dtype_policy,
                name="token_embedding",
            )
        elif (token_embedding.input_dim, token_embedding.output_dim) != (vocab_size, d_model):
            raise ValueError(
                f"a shared `token_embedding` must be ({vocab_size}, {d_model}) like this "
                f"layer, got ({token_embedding.input_dim}, {token_embedding.output_dim})."
            )
        self.token_embedding = token_embedding
        self.position_embedding = POSITION_KINDS[position](
            max_length, d_model, dtype=self.dtype_policy, name="position_embedding"
        )
        self.dropout = Dropout(self.dropout_rate, dtype=self.dtype_policy)
        # Created only when used, so that without bigrams the variables are unchanged.
        self.ngram_embedding = self.ngram_vector_dropout = None
        if ngram_buckets:
            self.ngram_embedding = keras.layers.Embedding(
                ngram_buckets, d_model, dtype=self.dtype_policy, name="ngram_embedding"
            )
            self.ngram_vector_dropout = Dropout(
                self.ngram_dropout, noise_shape=(None, None, 1), dtype=self.dtype_policy
            )

    def build(self, input_shape):
        if not self.token_embedding.built:  # a shared table is built once
            self.token_embedding.build(input_shape)
        if self.ngram_embedding is not None:
            self.ngram_embedding.build(input_shape)
        self.position_embedding.build(tuple(input_shape) + (self.d_model,))
        self.built = True

    def call(self, token_ids, start_index=0, training=None):
        checks.rank(token_ids, 2, "token_ids", "(batch, length)")
        x = self.token_embedding(token_ids)
        if self.ngram_embedding is not None:
            if not (isinstance(start_index, int) and start_index == 0):
                raise ValueError(
                    "bigram embeddings (`ngram_buckets`) need the whole sequence from position 0; "
                    "cached decoding with `start_index` is not supported."
                )
            bigrams = self.ngram_embedding(
                bigram_ids(token_ids, self.vocab_size, self.ngram_buckets)
            )
            x = x + self.ngram_vector_dropout(bigrams, training=training)
        if self.scale_embeddings:
            x = x * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
        x = self.position_embedding(x, start_index=start_index)
        return self.dropout(x, training=training)

    def token_table(self):
        """The token embeddings, `(vocab, d_model)`, as a tensor."""
        return ops.convert_to_tensor(self.token_embedding.embeddings)

    def output_kernel(self, dtype=None):
        """The token table transposed, `(d_model, vocab)`: the tied output projection's kernel."""
        table = self.token_table()
        return ops.transpose(table if dtype is None else ops.cast(table, dtype))

    def logits(self, x):
        """Output projection tied to the embedding: `(batch, length, d_model)` -> vocab logits."""
        return ops.matmul(x, self.output_kernel(x.dtype))

    def get_config(self):
        return config_with(super().get_config(), self, self.ARGUMENTS)

"""One decoding step of a trained Transformer: log-probabilities of the next token.

`CachedSteps` keeps a key/value cache for decoder self-attention and computes the
encoder output and its cross-attention keys/values once per source.
`FullRecomputeSteps` re-runs the whole model on the growing prefix at every step,
as the course material does; it is the reference (and the baseline to beat).

Both expose `start(source_ids, repeat)`, `step(tokens, index, state)` and
`reorder(state, indices)` for `greedy_search` and `beam_search`.
"""

from __future__ import annotations

import numpy as np
from keras import ops

from mintransformer.backend_adapter import compile_inference


class CachedSteps:
    """Cached incremental decoding of a `Transformer`.

    Args:
        model: a built `Transformer`.
        max_length: most target positions to decode (cache size).
    """

    def __init__(self, model, max_length: int):
        if max_length > model.decoder.max_length:
            raise ValueError(
                f"`max_length` ({max_length}) exceeds the model's target positions "
                f"(pe_target={model.decoder.max_length})."
            )
        self.model = model
        self.max_length = max_length
        self._encode = compile_inference(self._encode_fn, model.variables)
        self._step = compile_inference(self._step_fn, model.variables)

    def _encode_fn(self, source_ids):
        memory, source_mask = self.model.encode(source_ids)
        return self.model.decoder.cross_key_values(memory), source_mask

    def _step_fn(self, tokens, index, cache, cross_key_values, source_mask):
        hidden, cache = self.model.decoder.step(tokens, index, cache, cross_key_values, source_mask)
        log_probs = ops.log_softmax(self.model.project(hidden)[:, 0], axis=-1)
        return log_probs, cache

    def start(self, source_ids: np.ndarray, repeat: int = 1):
        """Encodes `(batch, length)` sources; each row repeated `repeat` times (beams)."""
        source_ids = np.repeat(np.asarray(source_ids, "int32"), repeat, axis=0)
        cross, source_mask = self._encode(ops.convert_to_tensor(source_ids))
        cache = self.model.decoder.empty_cache(len(source_ids), self.max_length)
        return cache, cross, source_mask

    def step(self, tokens: np.ndarray, index: int, state):
        """`tokens` int `(n,)` at position `index` -> (log-probs `(n, vocab)`, new state)."""
        cache, cross, source_mask = state
        tokens = ops.convert_to_tensor(np.asarray(tokens, "int32")[:, None])
        log_probs, cache = self._step(
            tokens, ops.convert_to_tensor(index, "int32"), cache, cross, source_mask
        )
        return np.asarray(ops.convert_to_numpy(log_probs)), (cache, cross, source_mask)

    def reorder(self, state, indices: np.ndarray):
        """Keeps the cache rows `indices` (beams are reordered within each source)."""
        cache, cross, source_mask = state
        indices = ops.convert_to_tensor(np.asarray(indices, "int32"))
        return tuple(ops.take(c, indices, axis=1) for c in cache), cross, source_mask


class FullRecomputeSteps:
    """Re-runs the whole model on the prefix each step (no cache): the reference."""

    def __init__(self, model, max_length: int):
        self.model = model
        self.max_length = max_length

    def start(self, source_ids: np.ndarray, repeat: int = 1):
        source_ids = np.repeat(np.asarray(source_ids, "int32"), repeat, axis=0)
        return source_ids, np.zeros((len(source_ids), 0), "int32")

    def step(self, tokens: np.ndarray, index: int, state):
        source_ids, prefix = state
        prefix = np.concatenate([prefix, np.asarray(tokens, "int32")[:, None]], axis=1)
        logits = self.model((source_ids, prefix), training=False)[:, -1]
        log_probs = ops.log_softmax(logits, axis=-1)
        return np.asarray(ops.convert_to_numpy(log_probs)), (source_ids, prefix)

    def reorder(self, state, indices: np.ndarray):
        source_ids, prefix = state
        return source_ids, prefix[indices]

"""One decoding step of a trained Transformer: log-probabilities of the next token.

`CachedSteps` keeps a key/value cache for decoder self-attention and computes the
encoder output and its cross-attention keys/values once per source.
`FullRecomputeSteps` re-runs the whole model on the growing prefix at every step,
as the course material does; it is the reference (and the baseline to beat).

Both expose `start(source_ids, repeat)`, `step(tokens, index, state)` and
`reorder(state, indices)` for `greedy_search` and `beam_search`. `CachedSteps.greedy`
also runs a whole greedy decode as one compiled call: the token loop is a
`keras.ops.while_loop`, so there is no per-token call overhead or host transfer.
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
        # XLA pays off here: the loop body is many small ops, run once per token.
        self._greedy = compile_inference(self._greedy_fn, model.variables, jit_compile=True)

    def _encode_fn(self, source_ids):
        memory, source_mask = self.model.encode(source_ids)
        return self.model.decoder.cross_key_values(memory), source_mask

    def _step_fn(self, tokens, index, cache, cross_key_values, source_mask):
        hidden, cache = self.model.decoder.step(tokens, index, cache, cross_key_values, source_mask)
        log_probs = ops.log_softmax(self.model.project(hidden)[:, 0], axis=-1)
        return log_probs, cache

    def _greedy_fn(self, source_ids, start_id, end_id, max_length):
        """Compiled by `greedy`; `start_id`, `end_id`, `max_length` are int32 scalars.

        The loop carries the position, the last tokens `(batch,)`, the cache, the
        output `(batch, self.max_length)`, which rows are done and their lengths.
        Returns `(outputs, lengths)`.
        """
        cross, source_mask = self._encode_fn(source_ids)
        batch = ops.shape(source_ids)[0]
        cache = self.model.decoder.empty_cache(batch, self.max_length)
        tokens = ops.full((batch,), start_id, "int32")
        # Slots a decode never reaches (after an early stop) stay </s>.
        outputs = ops.full((batch, self.max_length), end_id, "int32")
        done = ops.zeros((batch,), "bool")
        lengths = ops.zeros((batch,), "int32")

        def not_finished(index, tokens, cache, outputs, done, lengths):
            return ops.logical_and(index < max_length, ops.logical_not(ops.all(done)))

        def decode_one(index, tokens, cache, outputs, done, lengths):
            log_probs, cache = self._step_fn(tokens[:, None], index, cache, cross, source_mask)
            tokens = ops.where(done, end_id, ops.cast(ops.argmax(log_probs, axis=-1), "int32"))
            outputs = ops.slice_update(outputs, (0, index), tokens[:, None])
            done = ops.logical_or(done, tokens == end_id)
            lengths = lengths + ops.cast(ops.logical_not(done), "int32")
            return index + 1, tokens, cache, outputs, done, lengths

        index = ops.convert_to_tensor(0, "int32")
        loop_vars = (index, tokens, cache, outputs, done, lengths)
        *_, outputs, _, lengths = ops.while_loop(not_finished, decode_one, loop_vars)
        return outputs, lengths

    def greedy(
        self, source_ids: np.ndarray, start_id: int, end_id: int, max_length: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Greedy-decodes a batch in one compiled call (the token loop runs on the device).

        Stops when every row has emitted `end_id`, or after `max_length` tokens.

        Args:
            source_ids: int `(batch, source_length)`.
            start_id, end_id: the <s> and </s> ids.
            max_length: most tokens per row (</s> included); at most, and by
                default, this object's `max_length`.

        Returns:
            `(tokens, lengths)`: int `(batch, max_length)`, the token chosen at each
            position (`end_id` from a row's </s> on), and int `(batch,)`, the number
            of tokens before </s> (`max_length` for a row that never emitted it).
        """
        max_length = self.max_length if max_length is None else max_length
        if max_length > self.max_length:
            raise ValueError(f"`max_length` ({max_length}) exceeds the cache ({self.max_length}).")
        tokens, lengths = self._greedy(
            ops.convert_to_tensor(np.asarray(source_ids, "int32")),
            *(ops.convert_to_tensor(value, "int32") for value in (start_id, end_id, max_length)),
        )
        return ops.convert_to_numpy(tokens)[:, :max_length], ops.convert_to_numpy(lengths)

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
    """Re-runs the whole model on the prefix each step (no cache): the reference.

    The model call is compiled like `CachedSteps`' steps, so that the benchmark's
    comparison measures the cache, not compiled against eager code.
    """

    def __init__(self, model, max_length: int):
        self.model = model
        self.max_length = max_length
        self._next_log_probs = compile_inference(self._next_log_probs_fn, model.variables)

    def _next_log_probs_fn(self, source_ids, prefix):
        logits = self.model((source_ids, prefix), training=False)[:, -1]
        return ops.log_softmax(logits, axis=-1)

    def start(self, source_ids: np.ndarray, repeat: int = 1):
        source_ids = np.repeat(np.asarray(source_ids, "int32"), repeat, axis=0)
        return source_ids, np.zeros((len(source_ids), 0), "int32")

    def step(self, tokens: np.ndarray, index: int, state):
        source_ids, prefix = state
        prefix = np.concatenate([prefix, np.asarray(tokens, "int32")[:, None]], axis=1)
        log_probs = self._next_log_probs(
            ops.convert_to_tensor(source_ids), ops.convert_to_tensor(prefix)
        )
        return np.asarray(ops.convert_to_numpy(log_probs)), (source_ids, prefix)

    def reorder(self, state, indices: np.ndarray):
        source_ids, prefix = state
        return source_ids, prefix[indices]

"""One decoding step of a trained Transformer: log-probabilities of the next token.

`CachedSteps` keeps a key/value cache for decoder self-attention and computes the
encoder output and its cross-attention keys/values once per source.
`FullRecomputeSteps` re-runs the whole model on the growing prefix at every step,
as the course material does; it is the reference (and the baseline to beat).

Both expose `start(source_ids, repeat)`, `step(tokens, index, state)` and
`reorder(state, indices)` for `greedy_search` and `beam_search`. `CachedSteps.greedy`
and `CachedSteps.beam` also run a whole decode as one compiled call: the token loop
is a `keras.ops.while_loop`, so there is no per-token call overhead or host transfer.
"""

from __future__ import annotations

import numpy as np
from keras import ops

from mintransformer.backend_adapter import compile_inference


def length_penalty(length, alpha):
    """GNMT length penalty `((5 + length) / 6) ** alpha` (a number, or a float tensor)."""
    return ((5.0 + length) / 6.0) ** alpha


def _select(chosen, slot_of_candidate, slots: int):
    """`(batch, slots, candidates)` bool: candidate j fills slot s where chosen and
    `slot_of_candidate[:, j] == s` (each slot gets at most one candidate)."""
    slot_ids = ops.arange(slots, dtype="int32")[None, :, None]
    return ops.logical_and(chosen[:, None, :], slot_of_candidate[:, None, :] == slot_ids)


def _pick(one_hot, values):
    """`(batch, slots, candidates)` one-hot and `(batch, candidates)` -> `(batch, slots)`
    (0 where a slot got no candidate)."""
    return ops.sum(ops.where(one_hot, values[:, None, :], 0), axis=-1)


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
        self._beams = {}  # beam size -> compiled `_beam_fn`

    def _encode_fn(self, source_ids):
        memory, source_mask = self.model.encode(source_ids)
        return self.model.decoder.cross_key_values(memory), source_mask

    def _step_fn(self, tokens, index, cache, cross_key_values, source_mask):
        hidden, cache = self.model.decoder.step(tokens, index, cache, cross_key_values, source_mask)
        log_probs = ops.log_softmax(self.model.project(hidden)[:, 0], axis=-1)
        return log_probs, cache

    def _loop_inputs(self, source_ids, start_id, end_id, max_length):
        """Checks `max_length` against the cache; the compiled loops' first four inputs."""
        if max_length > self.max_length:
            raise ValueError(f"`max_length` ({max_length}) exceeds the cache ({self.max_length}).")
        return (
            ops.convert_to_tensor(np.asarray(source_ids, "int32")),
            *(ops.convert_to_tensor(value, "int32") for value in (start_id, end_id, max_length)),
        )

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
        tokens, lengths = self._greedy(*self._loop_inputs(source_ids, start_id, end_id, max_length))
        return ops.convert_to_numpy(tokens)[:, :max_length], ops.convert_to_numpy(lengths)

    def _beam_fn(self, source_ids, start_id, end_id, max_length, alpha, beam_size):
        """Compiled by `beam` (one function per `beam_size`): `beam_search`'s loop in tensors.

        Per step, the `2 * beam_size` best continuations of each source are scanned best
        first, exactly as `beam_search` does: a </s> continuation is finished (while the
        source has fewer than `beam_size` finished), any other fills the next live slot,
        and the scan stops when the live slots are full. A source is done once it has
        `beam_size` finished hypotheses.
        """
        k = beam_size
        cross, source_mask = self._encode_fn(ops.repeat(source_ids, k, axis=0))
        batch = ops.shape(source_ids)[0]
        cache = self.model.decoder.empty_cache(batch * k, self.max_length)
        tokens = ops.full((batch * k,), start_id, "int32")
        # Only the first beam is live at the start: all beams would be equal.
        live_scores = ops.concatenate(
            [ops.zeros((batch, 1)), ops.full((batch, k - 1), float("-inf"))], axis=1
        )
        live = ops.full((batch, k, self.max_length), end_id, "int32")
        finished_state = (
            ops.full((batch, k, self.max_length), end_id, "int32"),  # tokens
            ops.full((batch, k), float("-inf")),  # normalised scores
            ops.zeros((batch, k), "int32"),  # lengths
            ops.zeros((batch,), "int32"),  # how many slots of each source are filled
        )
        row_offsets = ops.arange(batch, dtype="int32")[:, None] * k

        def not_done(index, tokens, cache, live_scores, live, finished_state):
            return ops.logical_and(index < max_length, ops.any(finished_state[-1] < k))

        def gather_beams(sequences, beams):
            beams = ops.repeat(beams[:, :, None], self.max_length, axis=2)
            return ops.take_along_axis(sequences, beams, axis=1)

        def decode_one(index, tokens, cache, live_scores, live, finished_state):
            finished, finished_scores, finished_lengths, finished_count = finished_state
            log_probs, cache = self._step_fn(tokens[:, None], index, cache, cross, source_mask)
            vocab = ops.shape(log_probs)[-1]
            totals = live_scores[:, :, None] + ops.reshape(log_probs, (batch, k, vocab))
            top_totals, top = ops.top_k(ops.reshape(totals, (batch, k * vocab)), 2 * k)
            top = ops.cast(top, "int32")
            beams, next_tokens = top // vocab, top % vocab
            is_end = next_tokens == end_id
            ends_before = ops.cumsum(ops.cast(is_end, "int32"), axis=1) - ops.cast(is_end, "int32")
            lives_before = ops.arange(2 * k, dtype="int32")[None, :] - ends_before
            finished_slot = finished_count[:, None] + ends_before
            # The Python loop's stop conditions only tighten along the sorted candidates,
            # so the candidates it looks at are those meeting all three here.
            scanned = ops.logical_and(
                ops.logical_and(lives_before < k, finished_slot < k), ops.isfinite(top_totals)
            )
            to_finish = _select(ops.logical_and(scanned, is_end), finished_slot, k)
            to_live = _select(ops.logical_and(scanned, ops.logical_not(is_end)), lives_before, k)

            new = ops.any(to_finish, axis=-1)
            normalised = top_totals / length_penalty(ops.cast(index + 1, "float32"), alpha)
            finished_scores = ops.where(new, _pick(to_finish, normalised), finished_scores)
            finished_lengths = ops.where(new, index, finished_lengths)
            finished = ops.where(
                new[:, :, None], gather_beams(live, _pick(to_finish, beams)), finished
            )
            finished_count = finished_count + ops.sum(ops.cast(new, "int32"), axis=1)

            filled = ops.any(to_live, axis=-1)
            live_scores = ops.where(filled, _pick(to_live, top_totals), float("-inf"))
            parents = _pick(to_live, beams)
            tokens = ops.where(filled, _pick(to_live, next_tokens), end_id)
            live = ops.slice_update(gather_beams(live, parents), (0, 0, index), tokens[:, :, None])
            rows = ops.reshape(parents + row_offsets, (-1,))
            cache = tuple(ops.take(layer_cache, rows, axis=1) for layer_cache in cache)
            finished_state = (finished, finished_scores, finished_lengths, finished_count)
            return index + 1, ops.reshape(tokens, (-1,)), cache, live_scores, live, finished_state

        index = ops.convert_to_tensor(0, "int32")
        state = (index, tokens, cache, live_scores, live, finished_state)
        index, _, _, live_scores, live, finished_state = ops.while_loop(not_done, decode_one, state)
        return (index, live_scores, live, *finished_state)

    def beam(
        self,
        source_ids: np.ndarray,
        start_id: int,
        end_id: int,
        max_length: int,
        beam_size: int,
        alpha: float,
    ) -> tuple[np.ndarray, ...]:
        """Runs `beam_search`'s loop as one compiled call; `beam_search` reads the result.

        Returns:
            numpy `(steps, live_scores (batch, beam), live (batch, beam, T), finished
            (batch, beam, T), finished_scores, finished_lengths (batch, beam),
            finished_count (batch,))`: `steps` tokens were decoded, live hypotheses hold
            their total log-probability and finished ones their normalised score; the
            first `finished_count` finished slots of a source are filled, in the order
            they finished; `T` is this object's `max_length`.
        """
        inputs = self._loop_inputs(source_ids, start_id, end_id, max_length)
        if beam_size not in self._beams:
            self._beams[beam_size] = compile_inference(
                lambda *args: self._beam_fn(*args, beam_size=beam_size),
                self.model.variables,
                jit_compile=True,
            )
        outputs = self._beams[beam_size](*inputs, ops.convert_to_tensor(alpha, "float32"))
        return tuple(ops.convert_to_numpy(value) for value in outputs)

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

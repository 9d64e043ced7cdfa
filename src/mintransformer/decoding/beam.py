"""Batched beam search with the GNMT length penalty (Wu et al. 2016).

Each source keeps `beam_size` live hypotheses; every step extends them all at
once (one model call for `batch * beam_size` rows), keeps the best
`beam_size` continuations per source, and retires those ending in </s>. A source
is done when it has `beam_size` finished hypotheses; the winner maximises

    log P(Y | X) / lp(Y),   lp(Y) = ((5 + |Y|) / 6) ** alpha

With `beam_size=1` this is exactly greedy search. `beam_search` runs
`compiled_beam` for steps objects with `compiled_loops` (`CachedSteps`): the whole
search is one compiled call, top-k, retiring of finished hypotheses and cache
reordering included. Any other steps object (the `FullRecomputeSteps` reference)
is driven by `python_beam`, which is also the specification the compiled loop is
tested against: both make the same choices. Only the compiled loop imports Keras,
so `python_beam` also drives steps written in NumPy alone (the ONNX engine's).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mintransformer.decoding.steps import Steps


def length_penalty(length, alpha):
    """GNMT length penalty `((5 + length) / 6) ** alpha` (a number, or a float tensor)."""
    return ((5.0 + length) / 6.0) ** alpha


def top_candidates(totals: np.ndarray, count: int) -> np.ndarray:
    """Per row, the column indices of the `count` largest values, best first.

    Only `count` values are sorted (after an O(n) partition), not the whole
    `beam * vocab` row; equal values are ordered by index.
    """
    width = totals.shape[1]
    if count < width:
        columns = np.argpartition(-totals, count - 1, axis=1)[:, :count]
    else:
        columns = np.broadcast_to(np.arange(width), totals.shape)
    values = np.take_along_axis(totals, columns, axis=1)
    order = np.lexsort((columns, -values), axis=1)
    return np.take_along_axis(columns, order, axis=1)


@dataclasses.dataclass(frozen=True)
class BeamOptions:
    """The settings of a beam search, shared by `beam_search` and its two loops.

    Attributes:
        start_id, end_id: the <s> and </s> ids.
        max_length: most tokens per hypothesis (</s> included).
        beam_size: hypotheses kept per source.
        alpha: length-penalty exponent; 0 ranks by total log-probability.
    """

    start_id: int
    end_id: int
    max_length: int
    beam_size: int = 4
    alpha: float = 0.6

    def __post_init__(self):
        if self.beam_size < 1:
            raise ValueError(f"`beam_size` must be >= 1, got {self.beam_size}.")


def beam_search(
    steps: Steps,
    source_ids,
    *,
    start_id: int,
    end_id: int,
    max_length: int,
    beam_size: int = 4,
    alpha: float = 0.6,
) -> tuple[list[list[int]], list[float]]:
    """Decodes a batch with beam search.

    Args:
        steps: `CachedSteps` or `FullRecomputeSteps` (anything with start/step/reorder).
        source_ids: int `(batch, source_length)`.
        start_id, end_id, max_length, beam_size, alpha: as `BeamOptions`.

    Returns:
        `(sequences, scores)`: per source the best token-id list (without <s>/</s>)
        and its length-normalised log-probability.
    """
    options = BeamOptions(start_id, end_id, max_length, beam_size, alpha)
    search = compiled_beam if getattr(steps, "compiled_loops", False) else python_beam
    return search(steps, source_ids, options)


def python_beam(
    steps: Steps, source_ids, options: BeamOptions
) -> tuple[list[list[int]], list[float]]:
    """`beam_search`'s Python loop, one `steps.step` per token (any steps object)."""
    end_id, alpha = options.end_id, options.alpha
    batch, k = len(source_ids), options.beam_size
    state = steps.start(source_ids, repeat=k)
    # Only the first beam of each source is live at the start (all beams are equal).
    scores = np.full((batch, k), -np.inf)
    scores[:, 0] = 0.0
    prefixes = [[[] for _ in range(k)] for _ in range(batch)]
    finished = [[] for _ in range(batch)]  # (normalised score, tokens)
    tokens = np.full(batch * k, options.start_id, "int32")
    for index in range(options.max_length):
        log_probs, state = steps.step(tokens, index, state)
        vocab = log_probs.shape[-1]
        totals = (scores[:, :, None] + log_probs.reshape(batch, k, vocab)).reshape(batch, -1)
        candidates = top_candidates(totals, 2 * k)
        keep = np.zeros(batch * k, "int64")
        new_scores = np.full((batch, k), -np.inf)
        new_prefixes = [[[] for _ in range(k)] for _ in range(batch)]
        for b in range(batch):
            slot = 0
            for flat in candidates[b]:
                beam, token, total = flat // vocab, int(flat % vocab), totals[b, flat]
                if len(finished[b]) >= k or not np.isfinite(total):
                    break
                if token == end_id:
                    normalised = total / length_penalty(index + 1, alpha)
                    finished[b].append((normalised, prefixes[b][beam]))
                    continue
                keep[b * k + slot] = b * k + beam
                new_scores[b, slot] = total
                new_prefixes[b][slot] = prefixes[b][beam] + [token]
                slot += 1
                if slot == k:
                    break
            if slot < k:  # this source is done (or ran out of candidates): park its rows
                keep[b * k + slot : (b + 1) * k] = b * k
        if all(len(f) >= k for f in finished):
            break
        scores, prefixes = new_scores, new_prefixes
        tokens = np.array([p[-1] if p else end_id for row in prefixes for p in row], dtype="int32")
        state = steps.reorder(state, keep)
    for b in range(batch):
        if len(finished[b]) < k:
            for slot in range(k):
                if np.isfinite(scores[b, slot]):
                    length = len(prefixes[b][slot])
                    normalised = scores[b, slot] / length_penalty(length, alpha)
                    finished[b].append((normalised, prefixes[b][slot]))
    best = [max(f, key=lambda item: item[0]) for f in finished]
    return [tokens for _, tokens in best], [float(score) for score, _ in best]


def compiled_beam(steps, source_ids, options: BeamOptions) -> tuple[list[list[int]], list[float]]:
    """`beam_search` as one compiled call (compiled once per `beam_size`).

    Returns as `beam_search`; `steps` has `compiled_loops` (`CachedSteps`) and
    `options.max_length` is at most `steps.max_length` (the cache).
    """
    from keras import ops

    steps.check_length(options.max_length)
    k = options.beam_size
    loop = steps.compiled_loop(("beam", k), functools.partial(_beam_loop, steps, k))
    token_settings = (options.start_id, options.end_id, options.max_length)
    outputs = loop(
        ops.convert_to_tensor(np.asarray(source_ids, "int32")),
        *(ops.convert_to_tensor(value, "int32") for value in token_settings),
        ops.convert_to_tensor(options.alpha, "float32"),
    )
    return _best(tuple(ops.convert_to_numpy(value) for value in outputs), options.alpha)


def _select(chosen, slot_of_candidate, slots: int):
    """`(batch, slots, candidates)` bool: candidate j fills slot s where chosen and
    `slot_of_candidate[:, j] == s` (each slot gets at most one candidate)."""
    from keras import ops

    slot_ids = ops.arange(slots, dtype="int32")[None, :, None]
    return ops.logical_and(chosen[:, None, :], slot_of_candidate[:, None, :] == slot_ids)


def _pick(one_hot, values):
    """`(batch, slots, candidates)` one-hot and `(batch, candidates)` -> `(batch, slots)`
    (0 where a slot got no candidate)."""
    from keras import ops

    return ops.sum(ops.where(one_hot, values[:, None, :], 0), axis=-1)


def _beam_loop(steps, beam_size, source_ids, start_id, end_id, max_length, alpha):
    """The tensors `compiled_beam` compiles: `python_beam`'s loop written in tensors.

    Per step, the `2 * beam_size` best continuations of each source are scanned best
    first, exactly as `python_beam` does: a </s> continuation is finished (while the
    source has fewer than `beam_size` finished), any other fills the next live slot,
    and the scan stops when the live slots are full. A source is done once it has
    `beam_size` finished hypotheses.

    Returns:
        `(steps_run, live_scores (batch, beam), live (batch, beam, T), finished
        (batch, beam, T), finished_scores, finished_lengths (batch, beam),
        finished_count (batch,))`: `steps_run` tokens were decoded, live hypotheses
        hold their total log-probability and finished ones their normalised score;
        the first `finished_count` finished slots of a source are filled, in the
        order they finished; `T` is `steps.max_length`.
    """
    from keras import ops

    k, width = beam_size, steps.max_length
    batch = ops.shape(source_ids)[0]
    state = steps.start_tensors(ops.repeat(source_ids, k, axis=0))
    tokens = ops.full((batch * k,), start_id, "int32")
    # Only the first beam is live at the start: all beams would be equal.
    live_scores = ops.concatenate(
        [ops.zeros((batch, 1)), ops.full((batch, k - 1), float("-inf"))], axis=1
    )
    live = ops.full((batch, k, width), end_id, "int32")
    finished_state = (
        ops.full((batch, k, width), end_id, "int32"),  # tokens
        ops.full((batch, k), float("-inf")),  # normalised scores
        ops.zeros((batch, k), "int32"),  # lengths
        ops.zeros((batch,), "int32"),  # how many slots of each source are filled
    )
    row_offsets = ops.arange(batch, dtype="int32")[:, None] * k

    def not_done(index, tokens, state, live_scores, live, finished_state):
        return ops.logical_and(index < max_length, ops.any(finished_state[-1] < k))

    def gather_beams(sequences, beams):
        beams = ops.repeat(beams[:, :, None], width, axis=2)
        return ops.take_along_axis(sequences, beams, axis=1)

    def decode_one(index, tokens, state, live_scores, live, finished_state):
        finished, finished_scores, finished_lengths, finished_count = finished_state
        log_probs, state = steps.step_tensors(tokens, index, state)
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
        finished = ops.where(new[:, :, None], gather_beams(live, _pick(to_finish, beams)), finished)
        finished_count = finished_count + ops.sum(ops.cast(new, "int32"), axis=1)

        filled = ops.any(to_live, axis=-1)
        live_scores = ops.where(filled, _pick(to_live, top_totals), float("-inf"))
        parents = _pick(to_live, beams)
        tokens = ops.where(filled, _pick(to_live, next_tokens), end_id)
        live = ops.slice_update(gather_beams(live, parents), (0, 0, index), tokens[:, :, None])
        state = steps.reorder_tensors(state, ops.reshape(parents + row_offsets, (-1,)))
        finished_state = (finished, finished_scores, finished_lengths, finished_count)
        return index + 1, ops.reshape(tokens, (-1,)), state, live_scores, live, finished_state

    index = ops.convert_to_tensor(0, "int32")
    loop_vars = (index, tokens, state, live_scores, live, finished_state)
    index, _, _, live_scores, live, finished_state = ops.while_loop(not_done, decode_one, loop_vars)
    return (index, live_scores, live, *finished_state)


def _best(outputs, alpha: float) -> tuple[list[list[int]], list[float]]:
    """`beam_search`'s result from `_beam_loop`'s arrays (the choice `python_beam` makes)."""
    steps_run, live_scores, live, finished, finished_scores, finished_lengths, counts = outputs
    sequences, scores = [], []
    for b, count in enumerate(counts):
        candidates = [
            (float(finished_scores[b, s]), finished[b, s, : finished_lengths[b, s]].tolist())
            for s in range(count)
        ]
        if count < live_scores.shape[1]:
            penalty = length_penalty(int(steps_run), alpha)
            candidates += [
                (float(score) / penalty, live[b, s, :steps_run].tolist())
                for s, score in enumerate(live_scores[b])
                if np.isfinite(score)
            ]
        score, tokens = max(candidates, key=lambda item: item[0])
        sequences.append(tokens)
        scores.append(score)
    return sequences, scores

"""Batched beam search with the GNMT length penalty (Wu et al. 2016).

Each source keeps `beam_size` live hypotheses; every step extends them all at
once (one model call for `batch * beam_size` rows), keeps the best
`beam_size` continuations per source, and retires those ending in </s>. The
winner maximises

    log P(Y | X) / lp(Y),   lp(Y) = ((5 + |Y|) / 6) ** alpha

A source is done when no live hypothesis would beat its best finished one
(`search_is_over`), not merely when `beam_size` hypotheses have finished: with
a confident model the first hypotheses to finish are often improbable ones,
retired by a low-ranked </s>, while the likely one is still being written.
A source whose search is over keeps its hypotheses while the others go on, so
its result does not depend on the other sources of its batch.
With `beam_size=1` the search follows the greedy path, so its result scores at
least as well as greedy search's. No hypothesis ends at the first position
(`decoding.rules`), so none is empty.

`beam_search` runs
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

from mintransformer.core import checks
from mintransformer.decoding import rules

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
        if self.max_length < 1:
            raise ValueError(f"`max_length` must be >= 1, got {self.max_length}.")
        if self.beam_size < 1:
            raise ValueError(f"`beam_size` must be >= 1, got {self.beam_size}.")
        checks.finite_number(self.alpha, "alpha")


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


def beam_search_n_best(
    steps: Steps,
    source_ids,
    *,
    start_id: int,
    end_id: int,
    max_length: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    n_best: int | None = None,
) -> list[list[tuple[list[int], float]]]:
    """`beam_search`, keeping per source its `n_best` (default `beam_size`) best hypotheses.

    Returns:
        per source, up to `n_best` `(token ids, normalised score)` pairs, best first;
        the first is `beam_search`'s result.
    """
    options = BeamOptions(start_id, end_id, max_length, beam_size, alpha)
    if getattr(steps, "compiled_loops", False):
        ranked = _ranked(_run_compiled(steps, source_ids, options), options)
    else:
        ranked = _python_ranked(steps, source_ids, options)
    count = beam_size if n_best is None else n_best
    return [[(tokens, score) for score, tokens in hypotheses[:count]] for hypotheses in ranked]


def _first(ranked) -> tuple[list[list[int]], list[float]]:
    """`(sequences, scores)` of the best hypothesis of each source's ranked list."""
    return [hypotheses[0][1] for hypotheses in ranked], [hypotheses[0][0] for hypotheses in ranked]


def python_beam(
    steps: Steps, source_ids, options: BeamOptions
) -> tuple[list[list[int]], list[float]]:
    """`beam_search`'s Python loop, one `steps.step` per token (any steps object)."""
    return _first(_python_ranked(steps, source_ids, options))


def _python_ranked(steps: Steps, source_ids, options: BeamOptions) -> list[list[tuple]]:
    """`python_beam`'s search; per source its `(score, tokens)` candidates, best first.

    A source whose search is over (`search_is_over`) keeps what it has: later steps
    neither extend nor retire its hypotheses, so its result is what it would be
    decoded alone. Its rows leave the state when the steps object can drop rows
    (`keep_rows`, as the ONNX engine's can); otherwise they ride along unread.
    """
    end_id, alpha, k = options.end_id, options.alpha, options.beam_size
    batch = len(source_ids)
    state = steps.start(source_ids, repeat=k)
    keep_rows = getattr(steps, "keep_rows", None)
    # Only the first beam of each source is live at the start (all beams are equal).
    scores = np.full((batch, k), -np.inf)
    scores[:, 0] = 0.0
    prefixes = [[[] for _ in range(k)] for _ in range(batch)]
    finished = [[] for _ in range(batch)]  # the k best (normalised score, tokens), best first
    in_state = np.arange(batch)  # the source of each group of k rows of the state
    tokens = np.full(batch * k, options.start_id, "int32")
    over, steps_run = np.zeros(batch, bool), np.zeros(batch, int)
    for index in range(options.max_length):
        log_probs, state = steps.step(tokens, index, state)
        log_probs = rules.allowed(log_probs, index, end_id)
        vocab = log_probs.shape[-1]
        groups = len(in_state)
        totals = (scores[in_state, :, None] + log_probs.reshape(groups, k, vocab)).reshape(
            groups, -1
        )
        candidates = top_candidates(totals, 2 * k)
        keep = np.repeat(np.arange(groups) * k, k)  # an empty slot copies its group's first row
        for group, b in enumerate(in_state):
            if over[b]:
                continue
            steps_run[b] = index + 1
            slot, ended, new_prefixes = 0, [], [[] for _ in range(k)]
            scores[b] = -np.inf
            for flat in candidates[group]:
                beam, token, total = flat // vocab, int(flat % vocab), totals[group, flat]
                if not np.isfinite(total):
                    break
                if token == end_id:
                    ended.append((total / length_penalty(index + 1, alpha), prefixes[b][beam]))
                    continue
                keep[group * k + slot] = group * k + beam
                scores[b, slot] = total
                new_prefixes[slot] = prefixes[b][beam] + [token]
                slot += 1
                if slot == k:
                    break
            prefixes[b] = new_prefixes
            # Stable: on equal scores the hypothesis that finished first stays ahead.
            finished[b] = sorted(finished[b] + ended, key=lambda item: -item[0])[:k]
            best = finished[b][0][0] if finished[b] else -np.inf
            over[b] = search_is_over(best, scores[b], index + 1, alpha)
        if over.all():
            break
        if keep_rows is not None and over[in_state].any():
            going_on = np.flatnonzero(~over[in_state])
            state = keep_rows(state, keep.reshape(groups, k)[going_on].reshape(-1))
            in_state = in_state[going_on]
        else:
            state = steps.reorder(state, keep)
        tokens = np.array(
            [p[-1] if p else end_id for b in in_state for p in prefixes[b]], dtype="int32"
        )
    results = []
    for b in range(batch):
        candidates = list(finished[b])
        if not (over[b] and candidates):  # max_length cut the search: the live compete too
            penalty = length_penalty(steps_run[b], alpha)
            candidates += [
                (scores[b, s] / penalty, prefixes[b][s])
                for s in range(k)
                if np.isfinite(scores[b, s])
            ]
        # Stable: of equal scores the first candidate wins, as `max` would pick it.
        ranked = sorted(candidates, key=lambda item: -item[0])
        results.append([(float(score), tokens) for score, tokens in ranked])
    return results


def search_is_over(best_finished: np.ndarray, live_scores: np.ndarray, steps_run, alpha):
    """Per source, whether no live hypothesis ending at the next step would beat its best
    finished one (`_beam_decode_one` computes the same in tensors).

    A live hypothesis can only lose probability. With `alpha <= 0` it can therefore
    never overtake, and the search is exact; with `alpha > 0` a longer one is
    divided by a larger penalty and might, in principle, still win. Like Hugging
    Face's default early stopping, the search does not wait for that: waiting
    until `max_length` would multiply the decoding time for a rare gain.

    Args:
        best_finished: `(batch,)` best normalised score of a finished hypothesis
            (-inf where none has finished).
        live_scores: `(batch, beam)` total log-probabilities of the live hypotheses
            (-inf for empty slots).
        steps_run: tokens decoded so far.
        alpha: the length-penalty exponent.
    """
    return best_finished >= live_scores.max(axis=-1) / length_penalty(steps_run + 1, alpha)


def compiled_beam(steps, source_ids, options: BeamOptions) -> tuple[list[list[int]], list[float]]:
    """`beam_search` as one compiled call (compiled once per `beam_size`).

    Returns as `beam_search`; `steps` has `compiled_loops` (`CachedSteps`) and
    `options.max_length` is at most `steps.max_length` (the cache).
    """
    return _first(_ranked(_run_compiled(steps, source_ids, options), options))


def _run_compiled(steps, source_ids, options: BeamOptions) -> tuple:
    """`_beam_first`'s outputs (and `_beam_segment`'s, once the cache has grown) as
    NumPy arrays: `(steps_run, live_scores, live, finished, finished_scores,
    finished_lengths, over)`, as `_ranked` reads them."""
    from keras import ops

    steps.check_length(options.max_length)
    source_ids = np.asarray(source_ids, "int32")
    calls = _BeamCalls(steps, options.beam_size)
    cache_lengths = steps.cache_lengths(source_ids.shape[1], options.max_length)
    settings = _tensor_settings(options)
    start = [ops.convert_to_tensor(value, "int32") for value in (source_ids, options.start_id)]
    loop_vars = calls.first(cache_lengths[0])(*start, *settings)
    for length in cache_lengths[1:]:
        if int(ops.convert_to_numpy(loop_vars[0])) < steps.cache_length(loop_vars[2]):
            break  # the search ended before the cache was full
        loop_vars = calls.segment(*calls.grow(length)(loop_vars), *settings)
    index, _, _, live_scores, live, finished = loop_vars
    return tuple(ops.convert_to_numpy(value) for value in (index, live_scores, live, *finished))


def warm_beam(steps, source_ids, options: BeamOptions) -> None:
    """Compiles the calls `compiled_beam` can make for batches shaped like `source_ids`:
    the first, and the segment on each longer cache (called so that it stops before
    its first token). A server warms its beam shapes with this."""
    from keras import ops

    source_ids = np.asarray(source_ids, "int32")
    calls = _BeamCalls(steps, options.beam_size)
    cache_lengths = steps.cache_lengths(source_ids.shape[1], options.max_length)
    settings = list(_tensor_settings(options))
    start = [ops.convert_to_tensor(value, "int32") for value in (source_ids, options.start_id)]
    loop_vars = calls.first(cache_lengths[0])(*start, *settings)
    settings[1] = ops.convert_to_tensor(0, "int32")  # max_length 0: no token decoded
    for length in cache_lengths[1:]:
        loop_vars = calls.segment(*calls.grow(length)(loop_vars), *settings)


def _tensor_settings(options: BeamOptions) -> tuple:
    """`(end_id, max_length, alpha)` as the compiled calls take them."""
    from keras import ops

    return (
        ops.convert_to_tensor(options.end_id, "int32"),
        ops.convert_to_tensor(options.max_length, "int32"),
        ops.convert_to_tensor(options.alpha, "float32"),
    )


class _BeamCalls:
    """The compiled calls of `compiled_beam` for one beam size, cached by the steps."""

    def __init__(self, steps, beam_size: int):
        self.steps, self.beam_size = steps, beam_size
        self.segment = steps.compiled_loop("beam_segment", functools.partial(_beam_segment, steps))

    def first(self, cache_length: int):
        """Starts on a cache of `cache_length` positions, then `_beam_segment`."""
        return self.steps.compiled_loop(
            ("beam", self.beam_size, cache_length),
            functools.partial(_beam_first, self.steps, self.beam_size, cache_length),
        )

    def grow(self, cache_length: int):
        """The loop variables with the cache padded to `cache_length` positions."""
        return self.steps.compiled_loop(
            ("beam_grow", cache_length),
            functools.partial(_grow_cache, self.steps, cache_length),
            jit_compile=False,
        )


def _beam_first(steps, beam_size, cache_length, source_ids, start_id, end_id, max_length, alpha):
    """The first call of `compiled_beam`: `python_beam`'s loop written in tensors, on a
    cache of `cache_length` positions.

    Per step, the `2 * beam_size` best continuations of each source are scanned best
    first, exactly as `python_beam` does: a </s> continuation ranked before the
    `beam_size`-th live one is finished, the others fill the live slots in order.
    The finished hypotheses kept are the `beam_size` best so far, best first. The
    loop ends when `search_is_over` holds for every source, or at `max_length`, or
    when the cache is full (`_beam_segment` then carries on with it grown).

    Returns the loop variables `(steps_run, tokens, state, live_scores (batch, beam),
    live (batch, beam, T), (finished (batch, beam, T), finished_scores,
    finished_lengths (batch, beam), over (batch,)))`: `steps_run` tokens were
    decoded, live hypotheses hold their total log-probability and finished ones their
    normalised score (-inf for an empty slot); `T` is `steps.max_length`. A source
    whose search is over keeps its hypotheses from then on, as in `python_beam`.
    """
    from keras import ops

    k, width = beam_size, steps.max_length
    batch = ops.shape(source_ids)[0]
    state = steps.start_tensors(ops.repeat(source_ids, k, axis=0), cache_length)
    tokens = ops.full((batch * k,), start_id, "int32")
    # Only the first beam is live at the start: all beams would be equal.
    live_scores = ops.concatenate(
        [ops.zeros((batch, 1)), ops.full((batch, k - 1), float("-inf"))], axis=1
    )
    live = ops.full((batch, k, width), end_id, "int32")
    finished_state = (
        ops.full((batch, k, width), end_id, "int32"),  # tokens
        ops.full((batch, k), float("-inf")),  # normalised scores, best first
        ops.zeros((batch, k), "int32"),  # lengths
        ops.zeros((batch,), "bool"),  # per source: its search is over
    )
    index = ops.convert_to_tensor(0, "int32")
    loop_vars = (index, tokens, state, live_scores, live, finished_state)
    return _beam_segment(steps, *loop_vars, end_id, max_length, alpha)


def _grow_cache(steps, cache_length, loop_vars):
    """The loop variables with the cache grown to `cache_length` positions."""
    index, tokens, state, *rest = loop_vars
    return (index, tokens, steps.grow_cache_tensors(state, cache_length), *rest)


def _beam_segment(
    steps, index, tokens, state, live_scores, live, finished_state, end_id, max_length, alpha
):
    """The beam loop from `index` until the search is over, or `max_length`, or the
    cache is full; returns the loop variables."""
    from keras import ops

    end = ops.minimum(max_length, steps.cache_length(state))
    loop_vars = (index, tokens, state, live_scores, live, finished_state)
    return steps.token_loop(_beam_goes_on, _beam_decode_one, loop_vars, (end,), (end_id, alpha))


def _beam_goes_on(steps, index, tokens, state, live_scores, live, finished_state, end):
    """Whether the beam loop decodes position `index`: before `end`, and some source's
    search is not over."""
    from keras import ops

    return ops.logical_and(index < end, ops.logical_not(ops.all(finished_state[3])))


def _beam_decode_one(steps, index, tokens, state, live_scores, live, finished_state, end_id, alpha):
    """One position of the beam loop (`_beam_first`): the new loop variables."""
    from keras import ops

    from mintransformer.backend import kernels

    batch, k, width = ops.shape(live)
    finished, finished_scores, finished_lengths, over = finished_state
    log_probs, state = steps.step_tensors(tokens, index, state)
    log_probs = rules.allowed_tensors(log_probs, index, end_id)
    vocab = ops.shape(log_probs)[-1]
    totals = live_scores[:, :, None] + ops.reshape(log_probs, (batch, k, vocab))
    top_totals, top = ops.top_k(ops.reshape(totals, (batch, k * vocab)), 2 * k)
    top = ops.cast(top, "int32")
    beams, next_tokens = top // vocab, top % vocab
    is_end = next_tokens == end_id
    continues = ops.logical_not(is_end)
    lives = ops.cast(continues, "int32")
    lives_before = ops.cumsum(lives, axis=1) - lives
    # The Python loop stops scanning once the live slots are full.
    scanned = ops.logical_and(lives_before < k, ops.isfinite(top_totals))

    # Finished: the k best of those kept so far and this step's, old ones first on ties.
    ended = ops.where(
        ops.logical_and(scanned, is_end),
        top_totals / length_penalty(ops.cast(index + 1, "float32"), alpha),
        float("-inf"),
    )
    new_finished_scores, chosen = ops.top_k(ops.concatenate([finished_scores, ended], axis=1), k)
    chosen = ops.cast(chosen, "int32")
    candidates = ops.concatenate([finished, _gather_beams(live, beams)], axis=1)
    new_finished = _gather_beams(candidates, chosen)
    lengths = ops.concatenate([finished_lengths, ops.zeros((batch, 2 * k), "int32") + index], 1)
    new_finished_lengths = ops.take_along_axis(lengths, chosen, axis=1)

    to_live = _select(ops.logical_and(scanned, continues), lives_before, k)
    filled = ops.any(to_live, axis=-1)
    new_live_scores = ops.where(filled, _pick(to_live, top_totals), float("-inf"))
    parents = _pick(to_live, beams)
    tokens = ops.where(filled, _pick(to_live, next_tokens), end_id)
    new_live = kernels.write_position(
        _gather_beams(live, parents), tokens[:, :, None], index, axis=2
    )
    row_offsets = ops.arange(batch, dtype="int32")[:, None] * k
    state = steps.reorder_tensors(state, ops.reshape(parents + row_offsets, (-1,)))

    # A source whose search was over keeps its hypotheses; its rows decode unread.
    kept = over[:, None]
    live_scores = ops.where(kept, live_scores, new_live_scores)
    live = ops.where(kept[:, :, None], live, new_live)
    finished_scores = ops.where(kept, finished_scores, new_finished_scores)
    finished = ops.where(kept[:, :, None], finished, new_finished)
    finished_lengths = ops.where(kept, finished_lengths, new_finished_lengths)
    penalty = length_penalty(ops.cast(index + 2, "float32"), alpha)
    over = ops.logical_or(over, finished_scores[:, 0] >= ops.max(live_scores, axis=-1) / penalty)
    finished_state = (finished, finished_scores, finished_lengths, over)
    return index + 1, ops.reshape(tokens, (-1,)), state, live_scores, live, finished_state


def _gather_beams(sequences, beams):
    """`(batch, beams, width)` sequences, and int `(batch, n)` beam indices -> the
    `(batch, n, width)` sequences of those beams."""
    from keras import ops

    batch, count = ops.shape(beams)
    beams = ops.broadcast_to(beams[:, :, None], (batch, count, ops.shape(sequences)[2]))
    return ops.take_along_axis(sequences, beams, axis=1)


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


def _ranked(outputs, options: BeamOptions) -> list[list[tuple[float, list[int]]]]:
    """Per source, the `(score, tokens)` candidates of `_run_compiled`'s arrays, best first
    (the first is the choice `python_beam` makes)."""
    steps_run, live_scores, live, finished, finished_scores, finished_lengths, over = outputs
    steps_run = int(steps_run)
    penalty = length_penalty(steps_run, options.alpha)
    ranked = []
    for b in range(len(live_scores)):
        candidates = [
            (float(finished_scores[b, s]), finished[b, s, : finished_lengths[b, s]].tolist())
            for s in range(live_scores.shape[1])
            if np.isfinite(finished_scores[b, s])
        ]
        if not (over[b] and candidates):  # max_length cut the search: the live compete too
            candidates += [
                (float(score) / penalty, live[b, s, :steps_run].tolist())
                for s, score in enumerate(live_scores[b])
                if np.isfinite(score)
            ]
        ranked.append(sorted(candidates, key=lambda item: -item[0]))
    return ranked

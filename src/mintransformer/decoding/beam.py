"""Batched beam search with the GNMT length penalty (Wu et al. 2016).

Each source keeps `beam_size` live hypotheses; every step extends them all at
once (one model call for `batch * beam_size` rows), keeps the best
`beam_size` continuations per source, and retires those ending in </s>. A source
is done when it has `beam_size` finished hypotheses; the winner maximises

    log P(Y | X) / lp(Y),   lp(Y) = ((5 + |Y|) / 6) ** alpha

With `beam_size=1` this is exactly greedy search. With `CachedSteps` the whole
search is one compiled call (`CachedSteps.beam`); any other steps object (the
`FullRecomputeSteps` reference) is driven by the Python loop below, which is
also the specification the compiled loop is tested against.
"""

from __future__ import annotations

import numpy as np

from mintransformer.decoding.steps import CachedSteps, length_penalty


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


def beam_search(
    steps,
    source_ids,
    *,
    start_id: int,
    end_id: int,
    max_length: int,
    beam_size: int = 4,
    alpha: float = 0.6,
):
    """Decodes a batch with beam search.

    Args:
        steps: `CachedSteps` or `FullRecomputeSteps` (anything with start/step/reorder).
        source_ids: int `(batch, source_length)`.
        start_id, end_id: the <s> and </s> ids.
        max_length: most tokens per hypothesis (</s> included).
        beam_size: hypotheses kept per source.
        alpha: length-penalty exponent; 0 ranks by total log-probability.

    Returns:
        `(sequences, scores)`: per source the best token-id list (without <s>/</s>)
        and its length-normalised log-probability.
    """
    if beam_size < 1:
        raise ValueError(f"`beam_size` must be >= 1, got {beam_size}.")
    if isinstance(steps, CachedSteps):
        return _best_compiled(
            steps.beam(source_ids, start_id, end_id, max_length, beam_size, alpha), alpha
        )
    batch, k = len(source_ids), beam_size
    state = steps.start(source_ids, repeat=k)
    # Only the first beam of each source is live at the start (all beams are equal).
    scores = np.full((batch, k), -np.inf)
    scores[:, 0] = 0.0
    prefixes = [[[] for _ in range(k)] for _ in range(batch)]
    finished = [[] for _ in range(batch)]  # (normalised score, tokens)
    tokens = np.full(batch * k, start_id, "int32")
    for index in range(max_length):
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


def _best_compiled(outputs, alpha: float):
    """`beam_search`'s result from `CachedSteps.beam`'s arrays (same choice as the loop)."""
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

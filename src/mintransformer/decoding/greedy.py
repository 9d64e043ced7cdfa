"""Greedy decoding: at each position take the most probable next token.

With `CachedSteps` the whole decode is one compiled call (`CachedSteps.greedy`);
any other steps object (`FullRecomputeSteps`, the reference) is driven here by a
Python loop, one `step` per token.
"""

from __future__ import annotations

import numpy as np

from mintransformer.decoding.steps import CachedSteps


def greedy_search(steps, source_ids, *, start_id: int, end_id: int, max_length: int):
    """Decodes a batch greedily.

    Args:
        steps: `CachedSteps` or `FullRecomputeSteps` (or anything with `start`/`step`).
        source_ids: int `(batch, source_length)`.
        start_id, end_id: the <s> and </s> ids.
        max_length: most tokens to generate per sentence (</s> included).

    Returns:
        list of `batch` token-id lists, without <s> and </s>.
    """
    if isinstance(steps, CachedSteps):
        tokens, lengths = steps.greedy(source_ids, start_id, end_id, max_length)
        return [row[:length].tolist() for row, length in zip(tokens, lengths, strict=True)]
    state = steps.start(source_ids)
    batch = len(source_ids)
    tokens = np.full(batch, start_id, "int32")
    outputs = [[] for _ in range(batch)]
    done = np.zeros(batch, bool)
    for index in range(max_length):
        log_probs, state = steps.step(tokens, index, state)
        tokens = log_probs.argmax(-1).astype("int32")
        for row in np.flatnonzero(~done):
            if tokens[row] == end_id:
                done[row] = True
            else:
                outputs[row].append(int(tokens[row]))
        if done.all():
            break
    return outputs

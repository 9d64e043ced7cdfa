"""What every translation search may not choose, whatever the model's probabilities.

The end token is not allowed at the first position, so a non-empty source never
gets an empty translation: a model that is unsure after `<s>` can rate `</s>`
highest, and a beam's empty hypothesis, one token long, then outscores every
full one. fairseq and CTranslate2 have the same rule (`min_new_tokens=1` in
transformers' `generate()`).

The ban sets the end's log-probability to -inf after the softmax, as transformers'
logits processors do in its beam search, so the other tokens keep their
log-probabilities and scores compare with `generate()`'s. Greedy and beam search,
compiled and Python loops alike, call these on every step's log-probabilities.
"""

from __future__ import annotations

import numpy as np


def allowed(log_probs: np.ndarray, index: int, end_id: int) -> np.ndarray:
    """`log_probs` `(rows, vocab)` of position `index`, with what may not come there at
    -inf (NumPy, for the Python loops)."""
    if index != 0 or not 0 <= end_id < log_probs.shape[-1]:
        return log_probs
    log_probs = np.array(log_probs, copy=True)
    log_probs[:, end_id] = -np.inf
    return log_probs


def allowed_tensors(log_probs, index, end_id: int):
    """`allowed` in `keras.ops`, for the compiled loops (`index` a scalar tensor)."""
    from keras import ops

    is_end = np.arange(log_probs.shape[-1])[None, :] == end_id  # a constant of the graph
    banned = ops.logical_and(index == 0, is_end)
    return ops.where(banned, ops.cast(float("-inf"), log_probs.dtype), log_probs)

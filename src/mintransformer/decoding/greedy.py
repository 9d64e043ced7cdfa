"""Greedy decoding: at each position take the most probable next token.

`greedy_search` runs `compiled_greedy` for steps objects with `compiled_loops`
(`CachedSteps`): the whole decode is one compiled call, the token loop a
`keras.ops.while_loop`, so there is no per-token call overhead or host transfer.
Any other steps object (`FullRecomputeSteps`, the reference) is driven by
`python_greedy`, one `step` per token. Both make the same choices. Only the
compiled loop imports Keras, so the Python loop also drives steps written in NumPy
alone (the ONNX engine's).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mintransformer.decoding.steps import Steps


def greedy_search(
    steps: Steps, source_ids, *, start_id: int, end_id: int, max_length: int
) -> list[list[int]]:
    """Decodes a batch greedily.

    Args:
        steps: `CachedSteps` or `FullRecomputeSteps` (or anything with `start`/`step`).
        source_ids: int `(batch, source_length)`.
        start_id, end_id: the <s> and </s> ids.
        max_length: most tokens to generate per sentence (</s> included).

    Returns:
        list of `batch` token-id lists, without <s> and </s>.
    """
    options = dict(start_id=start_id, end_id=end_id, max_length=max_length)
    if getattr(steps, "compiled_loops", False):
        tokens, lengths = compiled_greedy(steps, source_ids, **options)
        return [row[:length].tolist() for row, length in zip(tokens, lengths, strict=True)]
    return python_greedy(steps, source_ids, **options)


def python_greedy(
    steps: Steps, source_ids, *, start_id: int, end_id: int, max_length: int
) -> list[list[int]]:
    """`greedy_search`'s Python loop: one `steps.step` per token (any steps object)."""
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


def compiled_greedy(
    steps, source_ids, *, start_id: int, end_id: int, max_length: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy-decodes a batch in one compiled call (the token loop runs on the device).

    Stops when every row has emitted `end_id`, or after `max_length` tokens.

    Args:
        steps: steps with `compiled_loops` (`CachedSteps`).
        source_ids: int `(batch, source_length)`.
        start_id, end_id: the <s> and </s> ids.
        max_length: most tokens per row (</s> included); at most, and by
            default, `steps.max_length` (the cache).

    Returns:
        `(tokens, lengths)`: int `(batch, max_length)`, the token chosen at each
        position (`end_id` from a row's </s> on), and int `(batch,)`, the number
        of tokens before </s> (`max_length` for a row that never emitted it).
    """
    from keras import ops

    max_length = steps.max_length if max_length is None else max_length
    steps.check_length(max_length)
    loop = steps.compiled_loop("greedy", functools.partial(_greedy_loop, steps))
    tokens, lengths = loop(
        ops.convert_to_tensor(np.asarray(source_ids, "int32")),
        *(ops.convert_to_tensor(value, "int32") for value in (start_id, end_id, max_length)),
    )
    return ops.convert_to_numpy(tokens)[:, :max_length], ops.convert_to_numpy(lengths)


def _greedy_loop(steps, source_ids, start_id, end_id, max_length):
    """The tensors `compiled_greedy` compiles; `start_id`, `end_id`, `max_length` are
    int32 scalars.

    The loop carries the position, the last tokens `(batch,)`, the steps state,
    the output `(batch, steps.max_length)`, which rows are done and their lengths.
    Returns `(outputs, lengths)`.
    """
    from keras import ops

    batch = ops.shape(source_ids)[0]
    state = steps.start_tensors(source_ids)
    tokens = ops.full((batch,), start_id, "int32")
    # Slots a decode never reaches (after an early stop) stay </s>.
    outputs = ops.full((batch, steps.max_length), end_id, "int32")
    done = ops.zeros((batch,), "bool")
    lengths = ops.zeros((batch,), "int32")

    def not_finished(index, tokens, state, outputs, done, lengths):
        return ops.logical_and(index < max_length, ops.logical_not(ops.all(done)))

    def decode_one(index, tokens, state, outputs, done, lengths):
        log_probs, state = steps.step_tensors(tokens, index, state)
        tokens = ops.where(done, end_id, ops.cast(ops.argmax(log_probs, axis=-1), "int32"))
        outputs = ops.slice_update(outputs, (0, index), tokens[:, None])
        done = ops.logical_or(done, tokens == end_id)
        lengths = lengths + ops.cast(ops.logical_not(done), "int32")
        return index + 1, tokens, state, outputs, done, lengths

    index = ops.convert_to_tensor(0, "int32")
    loop_vars = (index, tokens, state, outputs, done, lengths)
    *_, outputs, _, lengths = ops.while_loop(not_finished, decode_one, loop_vars)
    return outputs, lengths

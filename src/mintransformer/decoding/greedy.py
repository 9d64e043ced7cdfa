"""Greedy decoding: at each position take the most probable next token.

`greedy_search` runs `compiled_greedy` for steps objects with `compiled_loops`
(`CachedSteps`): the whole decode is one compiled call, the token loop a
`keras.ops.while_loop`, so there is no per-token call overhead or host transfer.
Any other steps object (`FullRecomputeSteps`, the reference) is driven by
`python_greedy`, one `step` per token. Both make the same choices. Only the
compiled loop imports Keras, so the Python loop also drives steps written in NumPy
alone (the ONNX engine's).

A row that has emitted </s> still costs a row of every later step, and the step's
cost grows with its rows. With `shrink_to` (row counts, e.g. a server's batch
buckets), `compiled_greedy` runs the loop in segments instead: a segment ends once
the unfinished rows fit the next smaller count, and the next one carries on with
those rows only. Every row count is a compiled shape, so a caller names counts
it has compiled (or will reuse); `warm_greedy` compiles them for a shape. A batch
with no smaller count to shrink to runs as one call: a segment boundary there
would only add a call.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mintransformer.decoding.steps import Steps


def greedy_search(
    steps: Steps,
    source_ids,
    *,
    start_id: int,
    end_id: int,
    max_length: int,
    shrink_to: Sequence[int] = (),
) -> list[list[int]]:
    """Decodes a batch greedily.

    Args:
        steps: `CachedSteps` or `FullRecomputeSteps` (or anything with `start`/`step`).
        source_ids: int `(batch, source_length)`.
        start_id, end_id: the <s> and </s> ids.
        max_length: most tokens to generate per sentence (</s> included).
        shrink_to: row counts the compiled loop drops finished rows down to
            (`compiled_greedy`); ignored by the Python loop.

    Returns:
        list of `batch` token-id lists, without <s> and </s>.
    """
    options = dict(start_id=start_id, end_id=end_id, max_length=max_length)
    if getattr(steps, "compiled_loops", False):
        tokens, lengths = compiled_greedy(steps, source_ids, shrink_to=shrink_to, **options)
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
    steps,
    source_ids,
    *,
    start_id: int,
    end_id: int,
    max_length: int | None = None,
    shrink_to: Sequence[int] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy-decodes a batch in one compiled call (the token loop runs on the device).

    Stops when every row has emitted `end_id`, or after `max_length` tokens.

    Args:
        steps: steps with `compiled_loops` (`CachedSteps`).
        source_ids: int `(batch, source_length)`.
        start_id, end_id: the <s> and </s> ids.
        max_length: most tokens per row (</s> included); at most, and by
            default, `steps.max_length` (the cache).
        shrink_to: row counts to continue with once the unfinished rows fit one
            below the batch's (`shrinking_greedy`); with none below it, one call.
            Needs steps with `keep_rows_tensors`.

    Returns:
        `(tokens, lengths)`: int `(batch, max_length)`, the token chosen at each
        position (`end_id` from a row's </s> on), and int `(batch,)`, the number
        of tokens before </s> (`max_length` for a row that never emitted it).
    """
    from keras import ops

    max_length = steps.max_length if max_length is None else max_length
    steps.check_length(max_length)
    if _smaller_counts(shrink_to, len(source_ids)):
        return shrinking_greedy(steps, source_ids, start_id, end_id, max_length, shrink_to)
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
    loop_vars = _greedy_start(steps, source_ids, start_id, end_id)
    *_, outputs, _, lengths = _greedy_segment(steps, *loop_vars, end_id, max_length, 0)
    return outputs, lengths


def shrinking_greedy(
    steps, source_ids, start_id: int, end_id: int, max_length: int, shrink_to: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """`compiled_greedy` in segments that drop finished rows; the same results.

    Each segment is one compiled call that runs until every row is done, or
    `max_length`, or until the unfinished rows fit the largest count of
    `shrink_to` below the current one. Then the finished rows' outputs are kept and
    the unfinished rows, repeated up to the smallest count that holds them, go on.
    """
    from keras import ops

    batch = len(source_ids)
    sizes = _smaller_counts(shrink_to, batch)
    start = steps.compiled_loop("greedy_start", functools.partial(_greedy_start, steps))
    keep_rows = steps.compiled_loop(
        "greedy_keep_rows", functools.partial(_keep_rows, steps), jit_compile=False
    )
    segment = steps.compiled_loop("greedy_segment", functools.partial(_greedy_segment, steps))
    scalars = [ops.convert_to_tensor(value, "int32") for value in (end_id, max_length)]
    loop_vars = start(
        ops.convert_to_tensor(np.asarray(source_ids, "int32")),
        ops.convert_to_tensor(start_id, "int32"),
        scalars[0],
    )
    all_tokens = np.full((batch, steps.max_length), end_id, "int32")
    all_lengths = np.zeros(batch, "int32")
    origin = np.arange(batch)  # the input row of each current row; pad rows come after
    rows = batch
    while True:
        smaller = [size for size in sizes if size < rows]
        fits = ops.convert_to_tensor(smaller[-1] if smaller else 0, "int32")
        loop_vars = segment(*loop_vars, *scalars, fits)
        index, _, _, outputs, done, lengths = loop_vars
        real = len(origin)
        all_tokens[origin] = ops.convert_to_numpy(outputs)[:real]
        all_lengths[origin] = ops.convert_to_numpy(lengths)[:real]
        unfinished = np.flatnonzero(~ops.convert_to_numpy(done)[:real])
        if not len(unfinished) or int(ops.convert_to_numpy(index)) >= max_length:
            return all_tokens[:, :max_length], all_lengths
        rows = min(size for size in [*smaller, rows] if size >= len(unfinished))
        keep = np.concatenate([unfinished, np.full(rows - len(unfinished), unfinished[0])])
        origin = origin[unfinished]
        loop_vars = keep_rows(loop_vars, ops.convert_to_tensor(keep.astype("int32")))


def warm_greedy(
    steps,
    source_ids,
    *,
    start_id: int,
    end_id: int,
    max_length: int,
    shrink_to: Sequence[int] = (),
) -> None:
    """Compiles what `greedy_search` runs for batches shaped like `source_ids`.

    That is its own call, and, for the smallest count of `shrink_to`, also the
    segment that larger batches run once their unfinished rows fit that count:
    such a batch alone runs as one call (nothing smaller to shrink to), so its own
    decode would not compile the segment. A server warms each of its bucket shapes
    with this, so that no request waits for a compilation.
    """
    options = dict(start_id=start_id, end_id=end_id, max_length=max_length)
    greedy_search(steps, source_ids, shrink_to=shrink_to, **options)
    batch = len(source_ids)
    smallest = batch in shrink_to and not _smaller_counts(shrink_to, batch)
    if smallest and getattr(steps, "compiled_loops", False):
        shrinking_greedy(steps, source_ids, start_id, end_id, max_length, shrink_to)


def _smaller_counts(shrink_to: Sequence[int], batch: int) -> list[int]:
    """The row counts of `shrink_to` a batch of `batch` rows can shrink to, ascending."""
    return sorted({int(rows) for rows in shrink_to if 0 < rows < batch})


def _keep_rows(steps, loop_vars, rows):
    """The loop variables of `_greedy_segment` for the batch rows `rows` only."""
    from keras import ops

    index, tokens, state, outputs, done, lengths = loop_vars
    tokens, outputs, done, lengths = (
        ops.take(t, rows, axis=0) for t in (tokens, outputs, done, lengths)
    )
    return index, tokens, steps.keep_rows_tensors(state, rows), outputs, done, lengths


def _greedy_start(steps, source_ids, start_id, end_id):
    """The loop variables before the first position (`_greedy_segment`'s input)."""
    from keras import ops

    batch = ops.shape(source_ids)[0]
    state = steps.start_tensors(source_ids)
    tokens = ops.full((batch,), start_id, "int32")
    # Slots a decode never reaches (after an early stop) stay </s>.
    outputs = ops.full((batch, steps.max_length), end_id, "int32")
    done = ops.zeros((batch,), "bool")
    lengths = ops.zeros((batch,), "int32")
    return ops.convert_to_tensor(0, "int32"), tokens, state, outputs, done, lengths


def _greedy_segment(steps, index, tokens, state, outputs, done, lengths, end_id, max_length, fits):
    """`_greedy_loop`'s loop from `index`, also stopping once at most `fits` rows are
    unfinished (int32 scalars); returns the loop variables."""
    from keras import ops

    def not_finished(index, tokens, state, outputs, done, lengths):
        unfinished = ops.sum(ops.cast(ops.logical_not(done), "int32"))
        return ops.logical_and(index < max_length, unfinished > fits)

    def decode_one(index, tokens, state, outputs, done, lengths):
        return _decode_one(steps, end_id, index, tokens, state, outputs, done, lengths)

    loop_vars = (index, tokens, state, outputs, done, lengths)
    return ops.while_loop(not_finished, decode_one, loop_vars)


def _decode_one(steps, end_id, index, tokens, state, outputs, done, lengths):
    """One position of the greedy loop: every row's next token (</s> once done)."""
    from keras import ops

    log_probs, state = steps.step_tensors(tokens, index, state)
    tokens = ops.where(done, end_id, ops.cast(ops.argmax(log_probs, axis=-1), "int32"))
    outputs = ops.slice_update(outputs, (0, index), tokens[:, None])
    done = ops.logical_or(done, tokens == end_id)
    lengths = lengths + ops.cast(ops.logical_not(done), "int32")
    return index + 1, tokens, state, outputs, done, lengths

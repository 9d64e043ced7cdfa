"""Greedy decoding: at each position take the most probable next token.

`greedy_search` runs `compiled_greedy` for steps objects with `compiled_loops`
(`CachedSteps`): the decode is compiled calls (usually one), the token loop a
`keras.ops.while_loop`, so there is no per-token call overhead or host transfer.
Any other steps object (`FullRecomputeSteps`, the reference) is driven by
`python_greedy`, one `step` per token. Both make the same choices, under the same
rules (`decoding.rules`: no `</s>` as the first token). Only the
compiled loop imports Keras, so the Python loop also drives steps written in NumPy
alone (the ONNX engine's).

A row that has emitted </s> still costs a row of every later step, and the step's
cost grows with its rows and with the slots of its key/value cache, all of which
each step reads. So `compiled_greedy` runs the loop in segments on a short cache
first (`CachedSteps.first_cache_length`), where most batches end. A segment also
ends once the unfinished rows fit the next smaller count of `shrink_to` (row
counts, e.g. a server's batch buckets), and the next carries on with those rows
only, or once the cache is full, and the next carries on with it grown. Every row
count and cache length is a compiled shape, so a caller names counts it has
compiled (or will reuse); `warm_greedy` compiles them for a shape.

A batch that can shrink encodes in a call of its own, then runs the segments that
larger batches shrinking to its row count run too, so each row count compiles one
loop per cache length. A batch that cannot (a lone sentence, usually) encodes and
starts decoding in one call: one call fewer for every such request, for one more
compiled loop.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from mintransformer.decoding import rules

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
    """`greedy_search`'s Python loop: one `steps.step` per token (any steps object).

    A row that has emitted </s> leaves the batch when the steps object can drop rows
    (`keep_rows(state, rows)`, as the ONNX engine's can), so later steps decode only the
    unfinished rows; otherwise it rides along until every row is done.
    """
    state = steps.start(source_ids)
    keep_rows = getattr(steps, "keep_rows", None)
    outputs = [[] for _ in range(len(source_ids))]
    sentence = np.arange(len(source_ids))  # the output of each row of the state
    done = np.zeros(len(sentence), bool)
    tokens = np.full(len(sentence), start_id, "int32")
    for index in range(max_length):
        log_probs, state = steps.step(tokens, index, state)
        tokens = rules.allowed(log_probs, index, end_id).argmax(-1).astype("int32")
        done |= tokens == end_id
        for row in np.flatnonzero(~done):
            outputs[sentence[row]].append(int(tokens[row]))
        if done.all():
            break
        if keep_rows is not None and done.any():
            unfinished = np.flatnonzero(~done)
            state = keep_rows(state, unfinished)
            tokens, sentence, done = tokens[unfinished], sentence[unfinished], done[unfinished]
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
    """Greedy-decodes a batch in compiled calls (the token loop runs on the device).

    Stops when every row has emitted `end_id`, or after `max_length` tokens. The
    first call encodes the sources (and, for a batch with no smaller count of
    `shrink_to`, decodes too). A decoding call ends once the unfinished rows fit a
    smaller count of `shrink_to` (the next call carries on with those rows only)
    or fill the cache (the next one carries on with the cache grown to
    `steps.max_length`).

    Args:
        steps: steps with `compiled_loops` (`CachedSteps`).
        source_ids: int `(batch, source_length)`.
        start_id, end_id: the <s> and </s> ids.
        max_length: most tokens per row (</s> included); at most, and by
            default, `steps.max_length` (the cache).
        shrink_to: row counts to continue with once the unfinished rows fit one
            below the batch's. Needs steps with `keep_rows_tensors`.

    Returns:
        `(tokens, lengths)`: int `(batch, max_length)`, the token chosen at each
        position (`end_id` from a row's </s> on), and int `(batch,)`, the number
        of tokens before </s> (`max_length` for a row that never emitted it).
    """
    from keras import ops

    max_length = steps.max_length if max_length is None else max_length
    steps.check_length(max_length)
    batch = len(source_ids)
    sizes = _smaller_counts(shrink_to, batch)
    source_ids = np.asarray(source_ids, "int32")
    cache_lengths = steps.cache_lengths(source_ids.shape[1], max_length)
    calls = _GreedyCalls(steps)
    scalars = [ops.convert_to_tensor(value, "int32") for value in (end_id, max_length)]
    start = [ops.convert_to_tensor(value, "int32") for value in (source_ids, start_id)]
    fits = ops.convert_to_tensor(sizes[-1] if sizes else 0, "int32")
    if sizes:
        loop_vars = calls.start(cache_lengths[0])(*start, scalars[0])
        loop_vars = calls.segment(*loop_vars, *scalars, fits)
    else:
        loop_vars = calls.first(cache_lengths[0])(*start, *scalars, fits)
    all_tokens = np.full((batch, steps.max_length), end_id, "int32")
    all_lengths = np.zeros(batch, "int32")
    origin = np.arange(batch)  # the input row of each current row; pad rows come after
    rows, cache = batch, 0
    while True:
        index, _, _, outputs, done, lengths = loop_vars
        real = len(origin)
        all_tokens[origin] = ops.convert_to_numpy(outputs)[:real]
        all_lengths[origin] = ops.convert_to_numpy(lengths)[:real]
        unfinished = np.flatnonzero(~ops.convert_to_numpy(done)[:real])
        position = int(ops.convert_to_numpy(index))
        if not len(unfinished) or position >= max_length:
            return all_tokens[:, :max_length], all_lengths
        smaller = [size for size in sizes if size < rows]
        fitting = min(size for size in [*smaller, rows] if size >= len(unfinished))
        if fitting < rows:
            rows = fitting
            keep = np.concatenate([unfinished, np.full(rows - len(unfinished), unfinished[0])])
            origin = origin[unfinished]
            loop_vars = calls.keep_rows(loop_vars, ops.convert_to_tensor(keep.astype("int32")))
        if position >= cache_lengths[cache]:
            cache += 1
            loop_vars = calls.grow(cache_lengths[cache])(loop_vars)
        smaller = [size for size in sizes if size < rows]
        fits = ops.convert_to_tensor(smaller[-1] if smaller else 0, "int32")
        loop_vars = calls.segment(*loop_vars, *scalars, fits)


def warm_greedy(
    steps,
    source_ids,
    *,
    start_id: int,
    end_id: int,
    max_length: int,
    shrink_to: Sequence[int] = (),
) -> None:
    """Compiles the calls `compiled_greedy` can make for batches shaped like `source_ids`.

    That is the first call, and the call that decodes at this row count on each
    cache length (needed when a batch outgrows its first cache, or shrinks to this
    row count). Each is called so that it stops before its first token: compiling
    is all it costs. A server warms each of its bucket shapes with this, so that no
    request waits for a compilation.
    """
    if not getattr(steps, "compiled_loops", False):
        return
    from keras import ops

    source_ids = np.asarray(source_ids, "int32")
    batch = len(source_ids)
    calls = _GreedyCalls(steps)
    # At most `batch` rows unfinished: each loop stops before its first token.
    scalars = [ops.convert_to_tensor(value, "int32") for value in (end_id, max_length, batch)]
    start = [ops.convert_to_tensor(value, "int32") for value in (source_ids, start_id)]
    cache_lengths = steps.cache_lengths(source_ids.shape[1], max_length)
    one_call_first = not _smaller_counts(shrink_to, batch)
    if one_call_first:
        loop_vars = calls.first(cache_lengths[0])(*start, *scalars)
    else:
        loop_vars = calls.start(cache_lengths[0])(*start, scalars[0])
    larger_count = any(rows > batch for rows in shrink_to)
    for number, length in enumerate(cache_lengths):
        if number:
            loop_vars = calls.grow(length)(loop_vars)
        if number or larger_count or not one_call_first:
            loop_vars = calls.segment(*loop_vars, *scalars)


class _GreedyCalls:
    """The compiled calls of `compiled_greedy`, cached by the steps object."""

    def __init__(self, steps):
        self.steps = steps
        self.segment = steps.compiled_loop(
            "greedy_segment", functools.partial(_greedy_segment, steps)
        )
        self.keep_rows = steps.compiled_loop(
            "greedy_keep_rows", functools.partial(_keep_rows, steps), jit_compile=False
        )

    def first(self, cache_length: int):
        """Encodes, then `_greedy_segment` on a cache of `cache_length` positions."""
        return self.steps.compiled_loop(
            ("greedy", cache_length), functools.partial(_greedy_first, self.steps, cache_length)
        )

    def start(self, cache_length: int):
        """Encodes: the loop variables before the first position (`_greedy_start`)."""
        return self.steps.compiled_loop(
            ("greedy_start", cache_length),
            functools.partial(_greedy_start, self.steps, cache_length),
        )

    def grow(self, cache_length: int):
        """The loop variables with the cache padded to `cache_length` positions."""
        return self.steps.compiled_loop(
            ("greedy_grow", cache_length),
            functools.partial(_grow_cache, self.steps, cache_length),
            jit_compile=False,
        )


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


def _greedy_first(steps, cache_length, source_ids, start_id, end_id, max_length, fits):
    """The first call of `compiled_greedy`: the start, then `_greedy_segment`."""
    loop_vars = _greedy_start(steps, cache_length, source_ids, start_id, end_id)
    return _greedy_segment(steps, *loop_vars, end_id, max_length, fits)


def _greedy_start(steps, cache_length, source_ids, start_id, end_id):
    """The loop variables before the first position, on a cache of `cache_length`."""
    from keras import ops

    batch = ops.shape(source_ids)[0]
    state = steps.start_tensors(source_ids, cache_length)
    tokens = ops.full((batch,), start_id, "int32")
    # Slots a decode never reaches (after an early stop) stay </s>.
    outputs = ops.full((batch, steps.max_length), end_id, "int32")
    done = ops.zeros((batch,), "bool")
    lengths = ops.zeros((batch,), "int32")
    return ops.convert_to_tensor(0, "int32"), tokens, state, outputs, done, lengths


def _grow_cache(steps, cache_length, loop_vars):
    """The loop variables of `_greedy_segment` with the cache grown to `cache_length`."""
    index, tokens, state, outputs, done, lengths = loop_vars
    return index, tokens, steps.grow_cache_tensors(state, cache_length), outputs, done, lengths


def _greedy_segment(steps, index, tokens, state, outputs, done, lengths, end_id, max_length, fits):
    """The token loop from `index` until every row is done, or `max_length` (int32
    scalars), or the cache is full, or at most `fits` rows are unfinished; returns the
    loop variables: the position, the last tokens `(batch,)`, the steps state, the
    output `(batch, steps.max_length)`, which rows are done and their lengths."""
    from keras import ops

    end = ops.minimum(max_length, steps.cache_length(state))
    loop_vars = (index, tokens, state, outputs, done, lengths)
    return steps.token_loop(_goes_on, _decode_one, loop_vars, (end, fits), (end_id,))


def _goes_on(steps, index, tokens, state, outputs, done, lengths, end, fits):
    """Whether the greedy loop decodes position `index`: it is before `end` and more
    than `fits` rows are unfinished."""
    from keras import ops

    unfinished = ops.sum(ops.cast(ops.logical_not(done), "int32"))
    return ops.logical_and(index < end, unfinished > fits)


def _decode_one(steps, index, tokens, state, outputs, done, lengths, end_id):
    """One position of the greedy loop: every row's next token (</s> once done)."""
    from keras import ops

    from mintransformer.backend import kernels

    log_probs, state = steps.step_tensors(tokens, index, state)
    log_probs = rules.allowed_tensors(log_probs, index, end_id)
    tokens = ops.where(done, end_id, ops.cast(ops.argmax(log_probs, axis=-1), "int32"))
    outputs = kernels.write_position(outputs, tokens[:, None], index, axis=1)
    done = ops.logical_or(done, tokens == end_id)
    lengths = lengths + ops.cast(ops.logical_not(done), "int32")
    return index + 1, tokens, state, outputs, done, lengths

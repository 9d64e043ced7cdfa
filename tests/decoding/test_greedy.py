"""The compiled greedy loop (`compiled_greedy`) against the Python loop and the model.

`greedy_search` runs `CachedSteps` as one compiled call and drives `FullRecomputeSteps`
(which re-runs the whole model per token) with a Python loop: their tokens must be equal.
"""

import numpy as np
import pytest

from mintransformer.decoding import greedy
from mintransformer.decoding.greedy import compiled_greedy, greedy_search
from mintransformer.decoding.steps import CachedSteps, FullRecomputeSteps
from tests.conftest import (
    StepByStep,
    padded_sources,
    random_transformer,
    record_calls,
    to_numpy,
    varied_model,
)

START = 1
CACHE = 16
FIRST = 10  # a first cache that holds the sources (9 wide) and not every sentence


@pytest.fixture(scope="module")
def setup():
    """(model, its `CachedSteps`, sources, their compiled greedy sentences when nothing ends)."""
    sources = padded_sources()
    model = varied_model()
    cached = CachedSteps(model, CACHE)
    unstopped = greedy_search(cached, sources, start_id=START, end_id=-1, max_length=CACHE)
    # Greedy by definition: each token is the model's argmax given the tokens before it,
    # checked for all positions in one teacher-forced call.
    previous = np.array([[START, *row[:-1]] for row in unstopped], "int32")
    logits = to_numpy(model((sources, previous), training=False))
    np.testing.assert_array_equal(logits.argmax(-1), unstopped)
    return model, cached, sources, unstopped


def end_at_different_lengths(sentences):
    """A token that ends the sentences at 3+ different lengths, never at the first
    position (where no search takes </s>), and never ends one of them."""
    for token in sorted({t for row in sentences for t in row}):
        ends = [row.index(token) if token in row else None for row in sentences]
        if None in ends and 0 not in ends and len(set(ends)) >= 3:
            return token
    raise AssertionError("the test model's sentences need more variety")


def cut_at(sentence, end_id):
    return sentence[: sentence.index(end_id)] if end_id in sentence else sentence


def greedy_sentences(setup, batch, end_id, max_length=CACHE):
    """The compiled loop's sentences for the first `batch` sources."""
    _, cached, sources, _ = setup
    return greedy_search(
        cached, sources[:batch], start_id=START, end_id=end_id, max_length=max_length
    )


@pytest.mark.core
def test_compiled_greedy_gives_the_python_loop_tokens_when_rows_end_early(setup):
    model, _, sources, unstopped = setup
    assert len({t for row in unstopped for t in row}) > 8, "the test needs varied tokens"
    # 8 steps: the recompute reference is slow on JAX, which compiles every new prefix shape.
    end_id = end_at_different_lengths([row[:8] for row in unstopped])
    options = dict(start_id=START, end_id=end_id, max_length=8)
    reference = greedy_search(FullRecomputeSteps(model, 8), sources, **options)
    assert greedy_sentences(setup, 5, end_id, 8) == reference
    assert reference == [cut_at(row[:8], end_id) for row in unstopped]


@pytest.mark.core
@pytest.mark.parametrize("batch", [1, 5])
def test_compiled_greedy_ends_each_row_at_its_first_end(setup, batch):
    *_, unstopped = setup
    end_id = end_at_different_lengths(unstopped)
    expected = [cut_at(row, end_id) for row in unstopped[:batch]]
    assert greedy_sentences(setup, batch, end_id) == expected


@pytest.mark.core
@pytest.mark.parametrize("batch", [1, 5])
def test_compiled_greedy_stops_at_max_length_without_an_end(setup, batch):
    *_, unstopped = setup
    never_emitted = next(t for t in range(3, 40) if all(t not in row for row in unstopped))
    assert greedy_sentences(setup, batch, never_emitted) == unstopped[:batch]
    assert greedy_sentences(setup, batch, never_emitted, 7) == [
        row[:7] for row in unstopped[:batch]
    ]


@pytest.mark.core
def test_the_end_token_is_never_the_first_token(setup):
    model, _, sources, unstopped = setup
    end_id = unstopped[0][0]  # the model's first choice for the first sentence
    cached = CachedSteps(model, CACHE)
    first, _ = cached.step(np.full(1, START, "int32"), 0, cached.start(sources[:1]))
    runner_up = int(np.argsort(first[0])[-2])
    options = dict(start_id=START, end_id=end_id, max_length=CACHE)
    compiled = greedy_search(cached, sources[:1], **options)
    assert compiled == greedy_search(StepByStep(cached), sources[:1], **options)
    assert compiled[0] and compiled[0][0] == runner_up


@pytest.mark.core
def test_the_python_loop_stops_decoding_rows_that_ended_when_the_steps_can_drop_them(setup):
    from keras import ops

    _, cached, sources, unstopped = setup
    end_id = end_at_different_lengths(unstopped)
    rows_decoded = []

    def step(tokens, index, state):
        rows_decoded.append(len(tokens))
        return cached.step(tokens, index, state)

    steps = StepByStep(cached)
    steps.step = step
    steps.keep_rows = lambda state, rows: cached.keep_rows_tensors(
        state, ops.convert_to_tensor(rows.astype("int32"))
    )
    expected = [cut_at(row, end_id) for row in unstopped]
    options = dict(start_id=START, end_id=end_id, max_length=CACHE)
    assert greedy_search(steps, sources, **options) == expected
    # A sentence of n tokens is decoded at positions 0..n (its </s> at n); one never ends.
    lengths = [len(sentence) for sentence in expected]
    assert rows_decoded == [sum(n >= index for n in lengths) for index in range(CACHE)]
    assert rows_decoded[-1] < len(sources)


@pytest.mark.core
def test_greedy_returns_a_token_matrix_and_lengths(setup):
    _, cached, sources, unstopped = setup
    end_id = end_at_different_lengths(unstopped)
    tokens, lengths = compiled_greedy(cached, sources, start_id=START, end_id=end_id, max_length=10)
    assert tokens.shape == (5, 10)
    for row, length, sentence in zip(tokens, lengths, unstopped, strict=True):
        assert row[:length].tolist() == cut_at(sentence, end_id)[:10]
        assert (row[length:] == end_id).all()


def recorded_steps(model, monkeypatch, first_cache_length: int = 32):
    """`CachedSteps` of `model` and the list of `(call, rows, cache length)` of every
    compiled call it makes, appended as they run (calls: "greedy" or "greedy_start",
    the first, then "greedy_segment", "greedy_keep_rows", "greedy_grow"; keep_rows
    gives the rows kept)."""
    steps = CachedSteps(model, CACHE, first_cache_length)
    calls = []
    compile_loop = steps.compiled_loop

    def recording(key, loop, jit_compile=True):
        compiled = compile_loop(key, loop, jit_compile)
        name = key[0] if isinstance(key, tuple) else key

        def run(*args):
            if name in ("greedy", "greedy_start"):  # (source ids, ...), a new cache of key[1]
                rows, cache = args[0], key[1]
            elif name == "greedy_segment":  # (index, tokens, state, ...)
                rows, cache = args[1], steps.cache_length(args[2])
            else:  # (loop variables, ...): keep_rows gives the rows, grow the new length
                rows = args[1] if name == "greedy_keep_rows" else args[0][1]
                cache = key[1] if name == "greedy_grow" else steps.cache_length(args[0][2])
            calls.append((name, int(to_numpy(rows).shape[0]), int(cache)))
            return compiled(*args)

        return run

    monkeypatch.setattr(steps, "compiled_loop", recording)
    return steps, calls


@pytest.mark.core
@pytest.mark.parametrize("max_length", [CACHE, 9])
def test_dropping_finished_rows_gives_the_same_tokens_in_fewer_rows(setup, monkeypatch, max_length):
    model, _, sources, unstopped = setup
    steps, calls = recorded_steps(model, monkeypatch)
    end_id = end_at_different_lengths(unstopped)  # one row never ends: it runs to the end
    options = dict(start_id=START, end_id=end_id, max_length=max_length)
    tokens, lengths = compiled_greedy(steps, sources, shrink_to=(1, 2, 4), **options)
    one_call = compiled_greedy(CachedSteps(model, CACHE), sources, **options)
    np.testing.assert_array_equal(tokens, one_call[0])
    np.testing.assert_array_equal(lengths, one_call[1])
    assert calls[0] == ("greedy_start", len(sources), CACHE)
    segment_rows = [rows for name, rows, _ in calls if name == "greedy_segment"]
    assert segment_rows == sorted(segment_rows, reverse=True)
    assert segment_rows[0] == len(sources) and set(segment_rows[1:]) <= {1, 2, 4}
    assert len(segment_rows) > 1


@pytest.mark.core
def test_a_batch_with_no_smaller_row_count_runs_as_one_call(setup, monkeypatch):
    model, _, sources, unstopped = setup
    steps, calls = recorded_steps(model, monkeypatch)
    options = dict(start_id=START, end_id=end_at_different_lengths(unstopped), max_length=CACHE)
    tokens, lengths = compiled_greedy(steps, sources[:1], shrink_to=(1, 2, 4), **options)
    assert calls == [("greedy", 1, CACHE)]
    one_call = compiled_greedy(CachedSteps(model, CACHE), sources[:1], **options)
    np.testing.assert_array_equal(tokens, one_call[0])
    np.testing.assert_array_equal(lengths, one_call[1])


@pytest.mark.core
@pytest.mark.parametrize("shrink_to", [(), (1, 2, 4)])
def test_a_decode_longer_than_the_first_cache_grows_it_and_gives_the_same_tokens(
    setup, monkeypatch, shrink_to
):
    model, _, sources, unstopped = setup
    steps, calls = recorded_steps(model, monkeypatch, first_cache_length=FIRST)
    end_id = end_at_different_lengths(unstopped)  # one row runs to the end
    options = dict(start_id=START, end_id=end_id, max_length=CACHE)
    tokens, lengths = compiled_greedy(steps, sources, shrink_to=shrink_to, **options)
    one_cache = compiled_greedy(CachedSteps(model, CACHE, CACHE), sources, **options)
    np.testing.assert_array_equal(tokens, one_cache[0])
    np.testing.assert_array_equal(lengths, one_cache[1])
    first = "greedy_start" if shrink_to else "greedy"
    assert calls[0] == (first, len(sources), FIRST)
    assert [name for name, *_ in calls].count("greedy_grow") == 1
    segments = [cache for name, _, cache in calls if name == "greedy_segment"]
    assert segments[-1] == CACHE and set(segments) <= {FIRST, CACHE}
    # Alone, a row that ends after the first cache carries on on the grown cache.
    calls.clear()
    row = next(i for i, length in enumerate(lengths) if length > FIRST)
    alone = compiled_greedy(steps, sources[row : row + 1], **options)
    assert alone[0].tolist() == tokens[row : row + 1].tolist()
    assert [name for name, *_ in calls] == ["greedy", "greedy_grow", "greedy_segment"]


@pytest.mark.core
@pytest.mark.parametrize(
    "first_cache_length, max_length, cache",
    # sources: 9 wide, so a first cache of 4 (doubled: 8) starts on CACHE
    [(FIRST, FIRST, FIRST), (4, CACHE, CACHE)],
    ids=["decode_within_the_first_cache", "source_wider_than_the_first_cache"],
)
def test_a_decode_on_one_cache_length_never_grows_it(
    setup, monkeypatch, first_cache_length, max_length, cache
):
    model, _, sources, unstopped = setup
    steps, calls = recorded_steps(model, monkeypatch, first_cache_length=first_cache_length)
    options = dict(
        start_id=START, end_id=end_at_different_lengths(unstopped), max_length=max_length
    )
    tokens, lengths = compiled_greedy(steps, sources, **options)
    assert calls == [("greedy", len(sources), cache)]
    one_cache = compiled_greedy(CachedSteps(model, CACHE, CACHE), sources, **options)
    np.testing.assert_array_equal(tokens, one_cache[0])
    np.testing.assert_array_equal(lengths, one_cache[1])


@pytest.mark.core
def test_warming_every_row_count_compiles_each_call_a_decode_then_makes(setup, monkeypatch):
    model, _, sources, unstopped = setup
    steps, calls = recorded_steps(model, monkeypatch, first_cache_length=FIRST)
    options = dict(start_id=START, end_id=end_at_different_lengths(unstopped), max_length=CACHE)
    counts = (1, 2, 4, 5)
    for rows in counts:
        greedy.warm_greedy(steps, sources[:rows], shrink_to=counts, **options)
    loops = ("greedy", "greedy_segment")
    compiled = {call for call in calls if call[0] in (*loops, "greedy_start")}
    # One loop per row count and cache length, and the lone row's first call: a
    # batch that can shrink encodes alone, then runs the loops smaller batches share.
    assert sorted(call for call in compiled if call[0] in loops) == sorted(
        [("greedy", 1, FIRST)]
        + [("greedy_segment", rows, c) for rows in counts for c in (FIRST, CACHE)]
    )
    for batch in (len(sources), 1):
        calls.clear()
        compiled_greedy(steps, sources[:batch], shrink_to=counts, **options)
        decoded = {call for call in calls if call[0] in (*loops, "greedy_start")}
        assert decoded <= compiled, decoded - compiled
        assert calls[0][0] == ("greedy_start" if batch > 1 else "greedy")


def test_greedy_longer_than_the_cache_is_refused(setup):
    _, cached, sources, _ = setup
    with pytest.raises(ValueError, match="exceeds the cache"):
        compiled_greedy(cached, sources, start_id=START, end_id=2, max_length=CACHE + 1)


@pytest.mark.core
def test_cached_greedy_gives_the_same_tokens_as_recomputing_everything():
    model, sources = random_transformer(), padded_sources()
    options = dict(start_id=START, end_id=2, max_length=12)
    cached = greedy_search(CachedSteps(model, 12), sources, **options)
    full = greedy_search(FullRecomputeSteps(model, 12), sources, **options)
    assert cached == full
    assert max(len(c) for c in cached) > 3, "the test needs sentences of some length"


def test_greedy_search_runs_the_compiled_loop_only_for_steps_that_have_one(setup, monkeypatch):
    model, cached, sources, _ = setup
    ran = record_calls(monkeypatch, greedy, "compiled_greedy", "python_greedy")
    options = dict(start_id=START, end_id=2, max_length=3)
    results = [
        greedy_search(steps, sources, **options)
        for steps in (cached, FullRecomputeSteps(model, 3), StepByStep(cached))
    ]
    assert ran == ["compiled_greedy", "python_greedy", "python_greedy"]
    assert results[0] == results[1] == results[2]

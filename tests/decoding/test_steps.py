"""The step protocol: cached steps give the full-recompute reference's scores."""

import numpy as np
import pytest

from mintransformer.decoding.steps import (
    CachedLanguageModelSteps,
    CachedSteps,
    FullRecomputeLanguageModelSteps,
    FullRecomputeSteps,
)
from tests.conftest import (
    padded_sources,
    random_language_model,
    random_transformer,
    to_numpy,
)

START = 1


@pytest.fixture(scope="module")
def model_and_sources():
    return random_transformer(), padded_sources()


@pytest.mark.core
def test_cached_step_log_probs_match_the_full_model(model_and_sources):
    model, sources = model_and_sources
    cached, full = CachedSteps(model, 8), FullRecomputeSteps(model, 8)
    cached_state, full_state = cached.start(sources), full.start(sources)
    tokens = np.full(len(sources), START, "int32")
    for index in range(5):
        a, cached_state = cached.step(tokens, index, cached_state)
        b, full_state = full.step(tokens, index, full_state)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        tokens = (np.arange(len(sources)) + index + 3).astype("int32")


def test_decoding_longer_than_the_position_table_is_refused(model_and_sources):
    model, _ = model_and_sources
    with pytest.raises(ValueError, match="pe_target"):
        CachedSteps(model, 33)


def test_a_first_cache_without_slots_is_refused(model_and_sources):
    model, _ = model_and_sources
    with pytest.raises(ValueError, match="first_cache_length` must be >= 1, got 0"):
        CachedSteps(model, 8, first_cache_length=0)


@pytest.mark.parametrize(
    "first, cache, source_width, max_length, lengths",
    [
        (32, 128, 5, 128, [32, 64, 128]),  # doubled up to the whole cache
        (32, 128, 5, 20, [32]),  # a search that cannot outgrow the first
        (32, 128, 5, 33, [32, 64]),
        (32, 128, 40, 128, [64, 128]),  # a source wider than 32 starts past it
        (32, 128, 70, 128, [128]),
        (32, 100, 5, 100, [32, 64, 100]),  # the last is the whole cache
        (200, 128, 5, 128, [128]),  # a first cache longer than the whole one
    ],
)
def test_cache_lengths_double_from_the_first_and_skip_what_the_source_outgrows(
    model_and_sources, first, cache, source_width, max_length, lengths
):
    model, _ = model_and_sources
    steps = CachedSteps(model, min(cache, model.decoder.max_length), first_cache_length=first)
    steps.max_length = cache  # the rule alone, for caches longer than this small model's
    assert steps.cache_lengths(source_width, max_length) == lengths


@pytest.mark.core
def test_cached_language_model_steps_match_the_full_model():
    """Logits agree position by position, also after rows are reordered (as beams are)."""
    model = random_language_model()
    cached = CachedLanguageModelSteps(model, 8)
    full = FullRecomputeLanguageModelSteps(model, 8)
    cached_state, full_state = cached.start(3), full.start(3)
    tokens = np.array([5, 9, 11], "int32")
    for index in range(6):
        a, cached_state = cached.step(tokens, index, cached_state)
        b, full_state = full.step(tokens, index, full_state)
        assert a.shape == (3, model.vocab_size) and a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        if index == 2:
            rows = np.array([2, 0, 0], "int32")
            cached_state = cached.reorder(cached_state, rows)
            full_state = full.reorder(full_state, rows)
        tokens = a.argmax(-1).astype("int32")


def test_language_model_steps_longer_than_the_model_are_refused():
    with pytest.raises(ValueError, match="max_length=32"):
        CachedLanguageModelSteps(random_language_model(), 33)


def test_only_cached_steps_run_compiled_loops(model_and_sources):
    model, _ = model_and_sources
    assert CachedSteps(model, 8).compiled_loops
    assert not FullRecomputeSteps(model, 8).compiled_loops
    language_model = random_language_model()
    assert CachedLanguageModelSteps(language_model, 8).compiled_loops
    assert not FullRecomputeLanguageModelSteps(language_model, 8).compiled_loops


@pytest.mark.core
@pytest.mark.parametrize("beam_size", [1, 3])
def test_no_search_emits_the_pad_even_where_it_scores_highest(beam_size):
    from mintransformer.decoding.beam import beam_search
    from mintransformer.decoding.greedy import greedy_search

    model, sources = random_transformer(seed=2), padded_sources()
    bias = model.output_projection.bias
    bias.assign(to_numpy(bias) + 30 * (np.arange(40) == 0))  # the pad wins every argmax
    first = to_numpy(model((sources, np.full((len(sources), 1), START, "int32"))))
    assert np.all(first[:, 0].argmax(-1) == 0)  # unbanned, every search would start with it
    options = dict(start_id=START, end_id=2, max_length=8)
    found = []
    for steps in (CachedSteps(model, 8), FullRecomputeSteps(model, 8)):
        if beam_size == 1:
            found.append(greedy_search(steps, sources, **options))
        else:
            found.append(beam_search(steps, sources, beam_size=beam_size, **options)[0])
    assert found[0] == found[1]
    assert any(found[0]) and not any(0 in row for row in found[0]), found[0]


@pytest.mark.core
@pytest.mark.parametrize("limit", [0, 1, 6])
def test_token_loop_runs_the_body_until_the_condition_fails_as_python_does(
    model_and_sources, limit
):
    from keras import ops

    steps = CachedSteps(model_and_sources[0], 8)

    def goes_on(steps, index, totals, pair, limit):
        return index < limit

    def decode_one(steps, index, totals, pair, scale):
        first, second = pair
        return index + 1, totals + ops.cast(index, "float32") * scale, (second, first + 1)

    start = (
        ops.convert_to_tensor(0, "int32"),
        ops.zeros((3,), "float32"),
        (ops.zeros((2,), "int32"), ops.ones((2,), "int32")),
    )
    limit_tensor = ops.convert_to_tensor(limit, "int32")
    index, totals, (first, second) = steps.token_loop(
        goes_on, decode_one, start, (limit_tensor,), (2.0,)
    )
    # The same loop in Python: `index` runs 0..limit-1, the pair swaps and counts.
    expected_first, expected_second = np.zeros(2), np.ones(2)
    for _ in range(limit):
        expected_first, expected_second = expected_second, expected_first + 1
    assert int(to_numpy(index)) == limit
    np.testing.assert_allclose(to_numpy(totals), np.full(3, 2.0 * sum(range(limit))))
    np.testing.assert_array_equal(to_numpy(first), expected_first)
    np.testing.assert_array_equal(to_numpy(second), expected_second)

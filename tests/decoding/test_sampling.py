"""Generation from a language model: cached = uncached, filters, seeds, batching, stopping."""

import warnings

import keras
import numpy as np
import pytest

from mintransformer.decoding.sampling import filter_logits, generate, next_tokens
from tests.conftest import random_language_model

PROMPTS = [[5, 6, 7], [9], [11, 12, 13, 14, 15, 16]]


@pytest.fixture(scope="module")
def model():
    return random_language_model()


@pytest.mark.core
def test_cached_greedy_gives_the_same_tokens_as_recomputing_everything(model):
    cached = generate(model, PROMPTS, max_new_tokens=10, temperature=0)
    full = generate(model, PROMPTS, max_new_tokens=10, temperature=0, cached=False)
    assert cached == full
    assert [len(row) for row in cached] == [10, 10, 10]
    assert len({token for row in cached for token in row}) > 8, "the test needs varied tokens"


def test_cached_and_uncached_sampling_agree_for_a_seed(model):
    options = dict(max_new_tokens=8, temperature=1.0, top_k=10, top_p=0.9, seed=5)
    assert generate(model, PROMPTS, **options) == generate(model, PROMPTS, cached=False, **options)


def test_prompts_of_different_lengths_generate_what_each_generates_alone(model):
    together = generate(model, PROMPTS, max_new_tokens=6, temperature=0)
    alone = [generate(model, [prompt], max_new_tokens=6, temperature=0)[0] for prompt in PROMPTS]
    assert together == alone


def test_top_k_one_and_a_tiny_top_p_equal_greedy(model):
    greedy = generate(model, PROMPTS, max_new_tokens=8, temperature=0)
    assert generate(model, PROMPTS, max_new_tokens=8, temperature=2.0, top_k=1) == greedy
    assert generate(model, PROMPTS, max_new_tokens=8, temperature=2.0, top_p=1e-6) == greedy


def test_sampling_is_reproducible_with_a_seed_and_varied_when_hot(model):
    options = dict(max_new_tokens=12, temperature=5.0)
    first = generate(model, [[5]] * 4, seed=7, **options)
    assert generate(model, [[5]] * 4, seed=7, **options) == first
    assert generate(model, [[5]] * 4, seed=8, **options) != first
    assert len({tuple(row) for row in first}) == 4
    assert len({token for row in first for token in row}) > 15


def test_a_row_stops_after_its_end_id(model):
    greedy = generate(model, PROMPTS, max_new_tokens=10, temperature=0)
    end_id = greedy[0][3]
    stopped = generate(model, PROMPTS, max_new_tokens=10, temperature=0, end_id=end_id)
    for row, full in zip(stopped, greedy, strict=True):
        assert row == (full[: full.index(end_id) + 1] if end_id in full else full)


def test_filters_keep_the_top_k_and_the_nucleus():
    logits = np.log([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]])

    def kept(**options):
        return [np.flatnonzero(np.isfinite(r)).tolist() for r in filter_logits(logits, **options)]

    assert kept(top_k=2) == [[0, 1], [2, 3]]
    assert kept(top_p=0.45) == [[0], [3]]
    assert kept(top_p=0.7) == [[0, 1], [2, 3]]
    assert kept(top_p=0.85) == [[0, 1, 2], [1, 2, 3]]
    assert kept(top_k=1, top_p=1.0) == [[0], [3]]


def test_sample_frequencies_follow_the_filtered_distribution():
    logits = np.tile(np.log([[0.5, 0.3, 0.15, 0.05]]), (20000, 1))
    tokens = next_tokens(logits, np.random.default_rng(0), temperature=1.0, top_k=2)
    frequencies = np.bincount(tokens, minlength=4) / len(tokens)
    np.testing.assert_allclose(frequencies, [0.625, 0.375, 0, 0], atol=0.015)


class PadLovingModel:
    """A stand-in whose most probable next token is always the padding id 0."""

    config = {"pad_id": 0}
    vocab_size = 5
    max_length = 16
    variables = []

    def __call__(self, token_ids, training=None):
        log_probs = np.log([0.6, 0.1, 0.1, 0.1, 0.1]).astype("float32")
        return keras.ops.zeros_like(token_ids, "float32")[..., None] + log_probs


def test_padding_is_never_generated():
    # 5e-324, the smallest float64, overflowed `logits / temperature` into NaNs.
    for temperature in (0, 1.0, 1e-300, 5e-324):
        rows = generate(
            PadLovingModel(),
            [[1], [2, 3]],
            max_new_tokens=12,
            temperature=temperature,
            cached=False,
        )
        assert all(0 not in row and len(row) == 12 for row in rows)


def test_a_tiny_temperature_samples_the_arg_max_without_overflow_warnings(model):
    logits = np.array([[-np.inf, 1.0, 3.0, 2.0], [-np.inf, 5.0, 5.0 - 1e-9, -700.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's overflow
        for temperature in (1e-300, 5e-324):
            for options in ({}, {"top_k": 2}, {"top_p": 0.5}):
                chosen = next_tokens(logits, np.random.default_rng(0), temperature, **options)
                assert chosen.tolist() == [2, 1]
        greedy = generate(model, PROMPTS, max_new_tokens=6, temperature=0)
        assert generate(model, PROMPTS, max_new_tokens=6, temperature=5e-324) == greedy


@pytest.mark.parametrize(
    ("prompts", "options", "message"),
    [
        ([[]], {}, "empty"),
        ([[5, 0, 6]], {}, "padding"),
        ([[5, 40]], {}, "vocabulary"),
        ([5, 6], {}, "list of prompts"),
        ([[5]], {"temperature": -1.0}, "temperature"),
        ([[5]], {"top_k": 0}, "top_k"),
        ([[5]], {"top_p": 0.0}, "top_p"),
        ([[5]], {"max_new_tokens": 0}, "max_new_tokens"),
        ([[5] * 30], {"max_new_tokens": 4}, "max_length=32"),
    ],
)
def test_bad_arguments_are_value_errors(model, prompts, options, message):
    with pytest.raises(ValueError, match=message):
        generate(model, prompts, **{"max_new_tokens": 3, **options})

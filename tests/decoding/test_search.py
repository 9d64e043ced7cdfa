import numpy as np
import pytest

from mintransformer import Transformer
from mintransformer.decoding.beam import beam_search, length_penalty, top_candidates
from mintransformer.decoding.greedy import greedy_search
from mintransformer.decoding.steps import CachedSteps, FullRecomputeSteps
from tests.conftest import padded_sources, randomize_weights

START, END = 1, 2


class TableSteps:
    """A constructed 'model': next-token probabilities depend only on the last token."""

    def __init__(self, table):
        self.log_table = np.log(np.asarray(table, dtype="float64") + 1e-12)

    def start(self, source_ids, repeat=1):
        return None

    def step(self, tokens, index, state):
        return self.log_table[tokens], state

    def reorder(self, state, indices):
        return state

    def score(self, tokens):
        path = [START, *tokens, END]
        return sum(self.log_table[a, b] for a, b in zip(path, path[1:], strict=False))


# ids: 0 pad, 1 <s>, 2 </s>, 3 "A", 4 "B". Greedy takes A (0.6) and then has only poor
# continuations; B (0.4) then </s> (0.9) is the more probable sentence.
TRAP = [
    [0, 0, 0, 0, 0],
    [0, 0, 0.0, 0.6, 0.4],
    [0, 0, 1.0, 0, 0],
    [0, 0, 0.3, 0.35, 0.35],
    [0, 0, 0.9, 0.05, 0.05],
]


def test_beam_search_finds_a_more_probable_sentence_than_greedy():
    steps = TableSteps(TRAP)
    source = np.zeros((1, 1), "int32")
    greedy = greedy_search(steps, source, start_id=START, end_id=END, max_length=6)[0]
    beams, scores = beam_search(
        steps, source, start_id=START, end_id=END, max_length=6, beam_size=3, alpha=0.0
    )
    assert greedy[0] == 3 and beams[0] == [4]
    assert steps.score(beams[0]) > steps.score(greedy)
    assert scores[0] == pytest.approx(steps.score(beams[0]))


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.0) == 1.0
    assert length_penalty(7, 1.0) == pytest.approx(2.0)


def random_model(seed=0):
    model = Transformer(2, 32, 4, 64, 40, 40, 32, 32, dropout_rate=0.0)
    model((np.ones((1, 4), "int32"), np.ones((1, 4), "int32")))
    return randomize_weights(model, seed, block_scale=0.3)


@pytest.fixture(scope="module")
def model_and_sources():
    return random_model(), padded_sources()


@pytest.mark.core
def test_cached_greedy_gives_the_same_tokens_as_recomputing_everything(model_and_sources):
    model, sources = model_and_sources
    options = dict(start_id=START, end_id=END, max_length=12)
    cached = greedy_search(CachedSteps(model, 12), sources, **options)
    full = greedy_search(FullRecomputeSteps(model, 12), sources, **options)
    assert cached == full
    assert max(len(c) for c in cached) > 3, "the test needs sentences of some length"


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


def test_beam_size_one_equals_greedy(model_and_sources):
    model, sources = model_and_sources
    steps = CachedSteps(model, 12)
    options = dict(start_id=START, end_id=END, max_length=12)
    greedy = greedy_search(steps, sources, **options)
    for alpha in (0.0, 1.0):
        beams, _ = beam_search(steps, sources, beam_size=1, alpha=alpha, **options)
        assert beams == greedy


def test_cached_and_uncached_beam_search_agree(model_and_sources):
    model, sources = model_and_sources
    options = dict(start_id=START, end_id=END, max_length=10, beam_size=3, alpha=0.6)
    cached = beam_search(CachedSteps(model, 10), sources, **options)
    full = beam_search(FullRecomputeSteps(model, 10), sources, **options)
    assert cached[0] == full[0]
    np.testing.assert_allclose(cached[1], full[1], rtol=1e-4)


def test_decoding_longer_than_the_position_table_is_refused(model_and_sources):
    model, _ = model_and_sources
    with pytest.raises(ValueError, match="pe_target"):
        CachedSteps(model, 33)


def test_top_candidates_equal_a_full_sort():
    rng = np.random.default_rng(0)
    for _ in range(100):
        totals = rng.normal(size=(3, int(rng.integers(1, 40))))
        totals[rng.random(totals.shape) < 0.2] = -np.inf
        count = min(6, totals.shape[1])
        expected = np.argsort(-totals, axis=1, kind="stable")[:, :count]
        got = top_candidates(totals, count)
        # -inf ties may be picked in any order; every finite pick is the same column.
        finite = np.isfinite(np.take_along_axis(totals, expected, axis=1))
        np.testing.assert_array_equal(got[finite], expected[finite])

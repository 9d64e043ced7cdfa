"""Beam search: the compiled loop (`compiled_beam`) against the Python loop (`python_beam`).

`beam_search` runs `CachedSteps` as one compiled call and drives any other steps
object with `python_beam`; run on the same `CachedSteps`, both see the same model,
so hypotheses and scores must agree.
"""

import numpy as np
import pytest

from mintransformer.decoding import beam
from mintransformer.decoding.beam import (
    BeamOptions,
    beam_search,
    length_penalty,
    python_beam,
    top_candidates,
)
from mintransformer.decoding.greedy import greedy_search
from mintransformer.decoding.steps import CachedSteps, FullRecomputeSteps
from tests.conftest import (
    StepByStep,
    padded_sources,
    random_transformer,
    record_calls,
    varied_model,
)

START, END = 1, 2
CACHE = 12


@pytest.fixture(scope="module")
def setup():
    model = varied_model()
    return model, CachedSteps(model, CACHE), padded_sources()


def both(cached, sources, **options):
    """`beam_search` on `cached` (one compiled call), and `python_beam` on it."""
    return beam_search(cached, sources, **options), python_beam(
        cached, sources, BeamOptions(**options)
    )


def assert_same(compiled, loop):
    assert compiled[0] == loop[0]
    np.testing.assert_allclose(compiled[1], loop[1], rtol=1e-4, atol=1e-5)


@pytest.mark.core
@pytest.mark.parametrize("beam_size, alpha", [(1, 0.6), (2, 0.0), (4, 0.6), (6, 1.0)])
def test_compiled_beam_search_equals_the_python_loop(setup, beam_size, alpha):
    _, cached, sources = setup
    lengths = set()
    for end_id in (3, 7, 12, 20, 33):
        options = dict(end_id=end_id, max_length=CACHE, beam_size=beam_size, alpha=alpha)
        compiled, loop = both(cached, sources, start_id=START, **options)
        assert_same(compiled, loop)
        lengths |= {len(tokens) for tokens in loop[0]}
    # Hypotheses end early, at several lengths, and at max_length (no </s> found).
    assert len(lengths) >= 3 and CACHE in lengths, lengths


@pytest.mark.core
def test_compiled_beam_search_equals_the_recompute_reference(setup):
    model, cached, sources = setup
    options = dict(start_id=START, end_id=12, max_length=8, beam_size=3, alpha=0.6)
    compiled = beam_search(cached, sources, **options)
    assert_same(compiled, beam_search(FullRecomputeSteps(model, 8), sources, **options))


@pytest.mark.core
def test_shorter_max_length_and_single_source(setup):
    _, cached, sources = setup
    options = dict(start_id=START, end_id=20, beam_size=3, alpha=0.6)
    for max_length in (1, 5):
        compiled, loop = both(cached, sources[:1], max_length=max_length, **options)
        assert_same(compiled, loop)
        assert all(len(tokens) <= max_length for tokens in compiled[0])


def test_beam_search_longer_than_the_cache_is_refused(setup):
    _, cached, sources = setup
    with pytest.raises(ValueError, match="exceeds the cache"):
        beam_search(cached, sources, start_id=START, end_id=2, max_length=CACHE + 1)


def test_beam_search_runs_the_compiled_loop_only_for_steps_that_have_one(setup, monkeypatch):
    model, cached, sources = setup
    ran = record_calls(monkeypatch, beam, "compiled_beam", "python_beam")
    options = dict(start_id=START, end_id=20, max_length=3, beam_size=2, alpha=0.6)
    results = [
        beam_search(steps, sources, **options)
        for steps in (cached, FullRecomputeSteps(model, 3), StepByStep(cached))
    ]
    assert ran == ["compiled_beam", "python_beam", "python_beam"]
    assert results[0][0] == results[1][0] == results[2][0]


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


def test_bad_beam_options_are_refused_by_name():
    for options, named in [
        (dict(alpha=float("nan")), "`alpha` must be a finite number"),
        (dict(alpha=float("inf")), "`alpha`"),
        (dict(beam_size=0), "`beam_size`"),
        (dict(max_length=0), "`max_length`"),
    ]:
        with pytest.raises(ValueError, match=named):
            BeamOptions(**{**dict(start_id=START, end_id=END, max_length=4), **options})
    assert BeamOptions(START, END, 4, alpha=np.float32(0.6)).alpha == np.float32(0.6)


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.0) == 1.0
    assert length_penalty(7, 1.0) == pytest.approx(2.0)


@pytest.fixture(scope="module")
def model_and_sources():
    return random_transformer(), padded_sources()


def normalised_log_prob(steps, source, tokens, end_id, max_length, alpha):
    """The score `beam_search` gives `tokens` (with </s> unless cut at `max_length`)."""
    path = list(tokens) if len(tokens) == max_length else [*tokens, end_id]
    state, previous, total = steps.start(source[None]), START, 0.0
    for index, token in enumerate(path):
        log_probs, state = steps.step(np.array([previous], "int32"), index, state)
        total += float(log_probs[0, token])
        previous = token
    return total / length_penalty(len(path), alpha)


def test_beam_size_one_scores_at_least_as_well_as_greedy(model_and_sources):
    model, sources = model_and_sources
    steps = CachedSteps(model, 12)
    reference = FullRecomputeSteps(model, 12)
    options = dict(start_id=START, end_id=END, max_length=12)
    greedy = greedy_search(steps, sources, **options)
    for alpha in (0.0, 1.0):
        beams, scores = beam_search(steps, sources, beam_size=1, alpha=alpha, **options)
        for source, greedy_tokens, tokens, score in zip(
            sources, greedy, beams, scores, strict=True
        ):
            args = (END, 12, alpha)
            assert score == pytest.approx(
                normalised_log_prob(reference, source, tokens, *args), abs=1e-4
            )
            assert score >= normalised_log_prob(reference, source, greedy_tokens, *args) - 1e-4


# A confident model: the chain 3 4 5 6 </s> has probability 0.96^4 * 0.98, yet at every step
# </s> and the junk token 7 rank next. Stopping once `beam_size` hypotheses have finished
# returned the chain cut short, [3] or [3, 4] then </s> (p about 0.02), before it was written.
CHAIN = np.full((8, 8), 0.0)
for _token, _next in [(1, 3), (3, 4), (4, 5), (5, 6)]:
    CHAIN[_token, [_next, END, 7]] = [0.96, 0.02, 0.02]
CHAIN[6, [END, 7]] = [0.98, 0.02]
CHAIN[7, [END, 7]] = [0.5, 0.5]
CHAIN[END, END] = CHAIN[0, END] = 1.0


@pytest.mark.parametrize("beam_size", [2, 3, 5])
def test_a_confident_model_is_not_cut_short_by_improbable_early_endings(beam_size):
    steps = TableSteps(CHAIN)
    source = np.zeros((1, 1), "int32")
    options = dict(start_id=START, end_id=END, max_length=10)
    assert greedy_search(steps, source, **options) == [[3, 4, 5, 6]]
    for alpha in (0.0, 0.6, 1.0):
        beams, scores = beam_search(steps, source, beam_size=beam_size, alpha=alpha, **options)
        assert beams == [[3, 4, 5, 6]]
        assert scores[0] == pytest.approx(steps.score([3, 4, 5, 6]) / length_penalty(5, alpha))


def test_cached_and_uncached_beam_search_agree(model_and_sources):
    model, sources = model_and_sources
    options = dict(start_id=START, end_id=END, max_length=10, beam_size=3, alpha=0.6)
    cached = beam_search(CachedSteps(model, 10), sources, **options)
    full = beam_search(FullRecomputeSteps(model, 10), sources, **options)
    assert cached[0] == full[0]
    np.testing.assert_allclose(cached[1], full[1], rtol=1e-4)


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


# ids as TRAP's: after <s> the model rates </s> highest (0.5), yet A then </s> is a sentence.
UNSURE = [
    [0, 0, 0, 0, 0],
    [0, 0, 0.5, 0.3, 0.2],
    [0, 0, 1.0, 0, 0],
    [0, 0, 0.9, 0.05, 0.05],
    [0, 0, 0.2, 0.4, 0.4],
]


class SourceTableSteps:
    """Constructed 'models', one per source: a row's next-token probabilities are its
    source's table's row of its last token (the source id is its first token). Records
    how many rows each step decodes."""

    def __init__(self, tables):
        self.log_tables = np.log(np.asarray(tables, dtype="float64") + 1e-12)
        self.rows_decoded = []

    def start(self, source_ids, repeat=1):
        return np.repeat(np.asarray(source_ids)[:, 0], repeat)

    def step(self, tokens, index, state):
        self.rows_decoded.append(len(tokens))
        return self.log_tables[state, tokens], state

    def reorder(self, state, indices):
        return state[indices]


# ids as TRAP's. After A the model ends (0.9); after B it goes on with B (0.95). With a
# strong length penalty, A </s> ends the search at the third position (no live hypothesis
# ending then would beat it), though B B ... </s> would have won much later.
ENDS_EARLY = [
    [0, 0, 0, 0, 0],
    [0, 0, 0.0, 0.6, 0.4],
    [0, 0, 1.0, 0, 0],
    [0, 0, 0.9, 0.05, 0.05],
    [0, 0, 0.05, 0.0, 0.95],
]
# Always A, ending with probability 0.01: its search runs to max_length.
RUNS_LONG = [
    [0, 0, 0, 0, 0],
    [0, 0, 0.0, 1.0, 0.0],
    [0, 0, 1.0, 0, 0],
    [0, 0, 0.01, 0.99, 0.0],
    [0, 0, 1.0, 0, 0],
]


@pytest.mark.parametrize("drop_rows", [False, True])
def test_a_source_whose_search_is_over_keeps_its_result_while_others_go_on(drop_rows):
    steps = SourceTableSteps([ENDS_EARLY, RUNS_LONG])
    if drop_rows:
        steps.keep_rows = steps.reorder
    options = dict(start_id=START, end_id=END, max_length=12, beam_size=2, alpha=3.0)
    alone = beam_search(steps, np.array([[0]]), **options)
    assert alone[0] == [[3]] and steps.rows_decoded == [2, 2]
    steps.rows_decoded.clear()
    together = beam_search(steps, np.array([[0], [1]]), **options)
    assert together[0][0] == alone[0][0]
    assert together[1][0] == alone[1][0]
    assert together[0][1] == [3] * 12  # the second source ran to max_length
    # Once the first source's search is over, its rows leave the batch where they can.
    assert steps.rows_decoded == [4, 4] + [2 if drop_rows else 4] * 10


@pytest.mark.core
def test_each_source_gets_from_the_compiled_beam_what_it_gets_alone(setup):
    _, cached, sources = setup
    varied = False
    for end_id in (3, 12, 20, 33):
        options = dict(start_id=START, end_id=end_id, max_length=CACHE, beam_size=3, alpha=1.5)
        together = beam_search(cached, sources, **options)
        varied |= len({len(tokens) for tokens in together[0]}) > 1
        for row in range(len(sources)):
            alone = beam_search(cached, sources[row : row + 1], **options)
            assert alone[0][0] == together[0][row]
            np.testing.assert_allclose(alone[1][0], together[1][row], rtol=1e-4, atol=1e-5)
    assert varied  # in some batch the sources ended at different steps


@pytest.mark.parametrize("beam_size", [1, 2, 4])
def test_no_search_ends_at_the_first_token(beam_size):
    steps = TableSteps(UNSURE)
    source = np.zeros((1, 1), "int32")
    options = dict(start_id=START, end_id=END, max_length=6)
    assert greedy_search(steps, source, **options) == [[3]]
    for alpha in (0.0, 0.6):
        beams, scores = beam_search(steps, source, beam_size=beam_size, alpha=alpha, **options)
        # The empty sentence (log 0.5) would beat A </s> (log 0.27) were it allowed.
        assert beams == [[3]]
        assert scores[0] == pytest.approx(steps.score([3]) / length_penalty(2, alpha))


@pytest.mark.core
def test_the_compiled_beam_never_ends_at_the_first_token_either(setup):
    model, cached, sources = setup
    first = np.asarray(cached.step(*cached_first_step(cached, sources))[0])
    end_id = int(first.argmax(-1)[0])  # the first source's most likely first token
    options = dict(start_id=START, end_id=end_id, max_length=CACHE, beam_size=3, alpha=0.6)
    compiled, loop = both(cached, sources, **options)
    assert_same(compiled, loop)
    assert all(compiled[0])


def cached_first_step(cached, sources):
    """The arguments of the first `step` call of a search on `sources`."""
    return np.full(len(sources), START, "int32"), 0, cached.start(sources)


def compiled_keys(steps) -> set:
    """The keys of the calls `steps` has compiled so far (`compiled_loop`)."""
    return set(steps._loops)


@pytest.mark.core
@pytest.mark.parametrize("beam_size, alpha", [(2, 0.0), (4, 0.6)])
def test_a_beam_that_outgrows_its_first_cache_carries_on_with_it_grown(setup, beam_size, alpha):
    model, fixed, sources = setup
    grown = CachedSteps(model, CACHE, first_cache_length=10)  # sources: 9 wide
    lengths = set()
    for end_id in (3, 12, 20, 33):
        options = dict(
            start_id=START, end_id=end_id, max_length=CACHE, beam_size=beam_size, alpha=alpha
        )
        compiled, loop = both(grown, sources, **options)
        assert_same(compiled, loop)
        assert_same(compiled, beam_search(fixed, sources, **options))
        lengths |= {len(tokens) for tokens in loop[0]}
    assert max(lengths) > 10, lengths
    assert ("beam_grow", CACHE) in compiled_keys(grown)


@pytest.mark.core
def test_warming_a_beam_shape_compiles_every_call_its_searches_make(setup):
    model, _, sources = setup
    steps = CachedSteps(model, CACHE, first_cache_length=10)
    options = BeamOptions(START, 33, CACHE, beam_size=3, alpha=0.6)
    beam.warm_beam(steps, sources, options)
    warmed = compiled_keys(steps)
    assert {("beam", 3, 10), "beam_segment", ("beam_grow", CACHE)} <= warmed
    for end_id in (3, 33):
        beam_search(steps, sources, start_id=START, end_id=end_id, max_length=CACHE, beam_size=3)
    assert compiled_keys(steps) == warmed

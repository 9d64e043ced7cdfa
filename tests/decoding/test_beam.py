"""The compiled beam search (`CachedSteps.beam`) against `beam_search`'s Python loop.

`beam_search` runs `CachedSteps` as one compiled call and drives any other steps
object with its Python loop; wrapping the same `CachedSteps` in `StepByStep` gives
that loop the same model, so hypotheses and scores must agree.
"""

import numpy as np
import pytest

from mintransformer.decoding.beam import beam_search
from mintransformer.decoding.steps import CachedSteps, FullRecomputeSteps
from tests.conftest import padded_sources, varied_model

START = 1
CACHE = 12


class StepByStep:
    """The start/step/reorder interface of `steps`, so `beam_search` takes its Python loop."""

    def __init__(self, steps):
        self.start, self.step, self.reorder = steps.start, steps.step, steps.reorder


@pytest.fixture(scope="module")
def setup():
    model = varied_model()
    return model, CachedSteps(model, CACHE), padded_sources()


def both(cached, sources, **options):
    """`beam_search` on `cached` as one compiled call, and driven by the Python loop."""
    return beam_search(cached, sources, **options), beam_search(
        StepByStep(cached), sources, **options
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

"""What serving added to decoding: n-best beam lists, decoding padded ids, token callbacks."""

from __future__ import annotations

import numpy as np
import pytest

from mintransformer import Translator
from mintransformer.decoding.beam import beam_search, beam_search_n_best, python_beam
from mintransformer.decoding.steps import CachedSteps
from tests.conftest import padded_sources, random_language_model, varied_model


@pytest.mark.parametrize("compiled", [True, False])
def test_n_best_is_ranked_and_starts_with_beam_search_s_result(compiled):
    model = varied_model()
    steps = CachedSteps(model, 12)
    if not compiled:
        from tests.conftest import StepByStep

        steps = StepByStep(steps)
    options = dict(start_id=1, end_id=2, max_length=12, beam_size=4, alpha=0.6)
    sources = padded_sources()
    ranked = beam_search_n_best(steps, sources, n_best=3, **options)
    best, scores = beam_search(steps, sources, **options)
    assert [r[0][0] for r in ranked] == best
    np.testing.assert_allclose([r[0][1] for r in ranked], scores, rtol=1e-6)
    for hypotheses in ranked:
        assert 1 <= len(hypotheses) <= 3
        assert [s for _, s in hypotheses] == sorted((s for _, s in hypotheses), reverse=True)
    if not compiled:
        assert python_beam(steps, sources, beam_search_options(options)) == (best, scores)


def beam_search_options(options):
    from mintransformer.decoding.beam import BeamOptions

    return BeamOptions(**options)


def test_translate_ids_on_padded_batches_equals_translate(trained_run):
    translator = Translator.from_run(trained_run.path)
    texts = ["twenty-one", "seven hundred"]
    sources = translator.encode_sources(texts)
    ids = np.zeros((4, 16), "int32")  # wider and taller than needed, as the server pads
    for row in range(4):
        source = sources[row % 2]
        ids[row, : len(source)] = source
    greedy = translator.translate_ids(ids)
    assert [g[0][0] for g in greedy[:2]] == translator.translate(texts)
    assert greedy[0][0][1] is None
    beam = translator.translate_ids(ids, beam_size=3, n_best=2)
    assert [b[0][0] for b in beam[:2]] == translator.translate(texts, beam_size=3)
    assert all(len(b) == 2 for b in beam)


def test_on_token_sees_every_generated_token_as_it_is_made():
    from mintransformer.decoding.sampling import generate

    model = random_language_model()
    seen: list[tuple[int, int]] = []
    outputs = generate(
        model,
        [[3, 4], [5]],
        max_new_tokens=5,
        temperature=0.0,
        on_token=lambda row, token: seen.append((row, token)),
    )
    for row, output in enumerate(outputs):
        assert [token for r, token in seen if r == row] == output

"""The attention the API returns is `viz.attention_maps` of the translation it shows."""

from __future__ import annotations

import numpy as np
import pytest

from mintransformer import Translator, viz


@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator.from_run(trained_run.path)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_attention_payload_equals_attention_maps(client, translator, beam_size):
    texts = ["twenty-one", "four hundred and six thousand"]
    body = {"texts": texts, "beam_size": beam_size, "attention": True}
    response = client.post("/api/translate", json=body)
    assert response.status_code == 200
    for text, result in zip(texts, response.json()["results"], strict=True):
        assert result["translation"] == translator.translate([text], beam_size=beam_size)[0]
        maps = viz.attention_maps(translator, text, result["translation"])
        attention = result["attention"]
        assert attention["source_tokens"] == maps.source_tokens
        assert attention["input_tokens"] == maps.input_tokens
        assert attention["output_tokens"] == maps.output_tokens
        layers = len(attention["encoder"])
        assert layers == 1
        for kind in ("encoder", "decoder", "cross"):
            for layer in range(1, layers + 1):
                expected, rows, cols = maps.get(kind, layer)
                shown = np.array(attention[kind][layer - 1])
                assert shown.shape == expected.shape == (2, len(rows), len(cols))
                np.testing.assert_allclose(shown, expected, atol=1e-5, rtol=0)

"""Fixtures of the interop tests: small trained runs, post-LN and pre-LN."""

import pytest

from mintransformer.config import make_config
from mintransformer.data.corpora import numbers_spec
from tests.conftest import once_per_session

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

LAYOUTS = {"post-LN": False, "pre-LN": True}


@pytest.fixture(scope="session", params=list(LAYOUTS))
def trained_run(request, tmp_path_factory):
    """A run of the `numbers` preset, post-LN (-> Marian) or pre-LN (-> Pegasus), trained
    for a few seconds: real sentences, peaked predictions, translations that end."""
    from mintransformer.training import translation

    config = make_config(
        "translation",
        "numbers",
        data=numbers_spec(num_train=4000),
        epochs=4,
        num_layers=2,
        d_model=64,
        dff=128,
        max_length=40,
        vocab_size=300,
        warmup_steps=30,
        norm_first=LAYOUTS[request.param],
    )

    def build(path):
        translation.train(path, config, verbose=0)

    return once_per_session(tmp_path_factory, f"interop-{request.param}", build)

"""Fixtures of the interop tests: small trained runs, post-LN and pre-LN."""

import pytest

from mintransformer.config import make_config
from mintransformer.data.corpora import numbers_spec
from tests.conftest import once_per_session

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

LAYOUTS = {"post-LN": False, "pre-LN": True}


def small_run_config(num_train: int = 4000, **settings):
    """A small `numbers` preset config that trains in seconds: real sentences, peaked
    predictions, translations that end."""
    sizes = dict(
        epochs=4, num_layers=2, d_model=64, dff=128, max_length=40, vocab_size=300, warmup_steps=30
    )
    data = numbers_spec(num_train=num_train)
    return make_config("translation", "numbers", data=data, **{**sizes, **settings})


@pytest.fixture(scope="session", params=list(LAYOUTS))
def trained_run(request, tmp_path_factory):
    """A run of the `numbers` preset, post-LN (-> Marian) or pre-LN (-> Pegasus), trained
    for a few seconds (`small_run_config`)."""
    from mintransformer.training import translation

    config = small_run_config(norm_first=LAYOUTS[request.param])

    def build(path):
        translation.train(path, config, verbose=0)

    return once_per_session(tmp_path_factory, f"interop-{request.param}", build)

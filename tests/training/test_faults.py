"""Training under faults: damaged checkpoints, failed writes, a diverging loss."""

import numpy as np
import pytest

from mintransformer.data.corpora import load_corpus, numbers_spec
from mintransformer.training.translation import train_translation
from tests.conftest import interrupt_after_epoch
from tests.training.test_translation import start, weights_of


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(numbers_spec(num_train=1500, num_val=100, num_test=100))


def test_resume_skips_a_truncated_checkpoint_and_says_so(tmp_path, corpus):
    uninterrupted, _ = train_translation(start(tmp_path / "a", epochs=3), corpus, verbose=0)

    run = start(tmp_path / "b", epochs=3)
    with interrupt_after_epoch(1):
        train_translation(run, corpus, verbose=0)
    newest = run.checkpoint_path(2)
    newest.write_bytes(newest.read_bytes()[:1000])
    with pytest.warns(
        UserWarning,
        match=r"skipped corrupt checkpoint .*epoch-0002\.npz .*resuming from epoch-0001",
    ):
        resumed, _ = train_translation(run, corpus, resume=True, verbose=0)
    assert (run.checkpoint_dir / "epoch-0002.npz.corrupt").is_file()
    assert [run.epoch_of(p) for p in run.checkpoints()] == [2, 3]
    for a, b in zip(weights_of(resumed), weights_of(uninterrupted), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_resume_with_no_intact_checkpoint_starts_again_and_says_so(tmp_path, corpus):
    run = start(tmp_path / "run", epochs=1)
    with interrupt_after_epoch(0):
        train_translation(run, corpus, verbose=0)
    run.checkpoint_path(1).write_bytes(b"")
    with pytest.warns(
        UserWarning, match="epoch-0001.npz .*no intact checkpoint, training starts from the first"
    ):
        train_translation(run, corpus, resume=True, verbose=0)
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1]
    assert run.weights_path.is_file()

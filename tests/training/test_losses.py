import keras
import numpy as np
import pytest

from mintransformer.training.losses import MaskedAccuracy, MaskedLoss
from tests.conftest import to_numpy


def reference_loss(labels, logits, eps, pad_id=0):
    logits = logits.astype("float64")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    vocab = logits.shape[-1]
    target = np.full(logits.shape, eps / vocab)
    np.put_along_axis(target, labels[..., None], 1 - eps + eps / vocab, axis=-1)
    per_token = -(target * log_probs).sum(-1)
    real = labels != pad_id
    return per_token[real].mean()


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_matches_a_float64_label_smoothing_reference(eps):
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 7, size=(3, 5))
    labels[0, 3:] = 0
    logits = rng.normal(size=(3, 5, 7)).astype("float32")
    loss = float(to_numpy(MaskedLoss(eps)(labels, logits)))
    assert loss == pytest.approx(reference_loss(labels, logits, eps), rel=1e-5)


def test_padding_positions_do_not_count():
    rng = np.random.default_rng(1)
    labels = np.array([[3, 4, 0, 0]])
    logits = rng.normal(size=(1, 4, 6)).astype("float32")
    changed = logits.copy()
    changed[:, 2:] = 100 * rng.normal(size=(1, 2, 6))
    loss = MaskedLoss(0.1)
    assert float(to_numpy(loss(labels, changed))) == pytest.approx(
        float(to_numpy(loss(labels, logits))), rel=1e-6
    )


def test_without_smoothing_equals_keras_cross_entropy_on_real_tokens():
    rng = np.random.default_rng(2)
    labels = rng.integers(1, 9, size=(4, 6))
    logits = rng.normal(size=(4, 6, 9)).astype("float32")
    keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
    ours = MaskedLoss(0.0)(labels, logits)
    assert float(to_numpy(ours)) == pytest.approx(float(to_numpy(keras_loss)), rel=1e-5)


def test_masked_accuracy_counts_only_real_tokens():
    labels = np.array([[1, 2, 0], [3, 0, 0]])
    logits = np.zeros((2, 3, 4), "float32")
    logits[0, 0, 1] = logits[0, 1, 3] = logits[1, 0, 3] = 1.0  # right, wrong, right
    logits[0, 2, 0] = logits[1, 1, 0] = logits[1, 2, 0] = 1.0  # pads "right", ignored
    metric = MaskedAccuracy()
    metric.update_state(labels, logits)
    assert float(to_numpy(metric.result())) == pytest.approx(2 / 3)
    metric.reset_state()
    assert float(to_numpy(metric.result())) == 0.0


def test_label_smoothing_outside_range_is_rejected():
    with pytest.raises(ValueError, match="label_smoothing"):
        MaskedLoss(1.0)

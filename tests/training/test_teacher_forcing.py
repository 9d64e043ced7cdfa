import keras
import numpy as np
import pytest

from mintransformer import Transformer
from mintransformer.config import TranslationConfig
from mintransformer.training.losses import MaskedAccuracy, MaskedLoss, projected_cross_entropy
from mintransformer.training.teacher_forcing import TeacherForcing
from mintransformer.training.translation import compile_model
from tests.conftest import to_numpy, value_and_gradients

pytestmark = pytest.mark.core

EPS = 0.1


def reference(hidden, table, bias, labels, eps, pad_id=0):
    """Loss sum, right count, real count and the gradients, in float64 NumPy."""
    hidden, table = hidden.astype("float64"), table.astype("float64")
    logits = hidden @ table.T + (0.0 if bias is None else bias.astype("float64"))
    shifted = logits - logits.max(-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    probabilities = np.exp(log_probabilities)
    vocab = logits.shape[-1]
    target = np.full(logits.shape, eps / vocab)
    target[np.arange(len(labels)), labels] += 1 - eps
    real = (labels != pad_id).astype("float64")
    losses = -(target * log_probabilities).sum(-1)
    logit_gradient = real[:, None] * (probabilities - target)
    gradients = [logit_gradient @ table, logit_gradient.T @ hidden]
    if bias is not None:
        gradients.append(logit_gradient.sum(0))
    right = (logits.argmax(-1) == labels) * real
    return (losses * real).sum(), right.sum(), real.sum(), gradients


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("eps", [0.0, EPS])
def test_projected_cross_entropy_matches_a_float64_reference(with_bias, eps):
    rng = np.random.default_rng(3)
    hidden = rng.normal(size=(7, 5)).astype("float32")
    table = rng.normal(size=(11, 5)).astype("float32")
    bias = rng.normal(size=(11,)).astype("float32") if with_bias else None
    labels = np.array([3, 3, 0, 7, 10, 0, 1])  # two padding rows, a repeated label

    def loss_sum(hidden, table, *bias):
        return projected_cross_entropy(
            hidden, table, bias[0] if bias else None, labels, eps, pad_id=0
        )[0]

    arrays = [hidden, table] + ([bias] if with_bias else [])
    value, gradients = value_and_gradients(loss_sum, *arrays)
    _, correct, real = projected_cross_entropy(hidden, table, bias, labels, eps, pad_id=0)
    want_value, want_correct, want_real, want_gradients = reference(
        hidden, table, bias, labels, eps
    )
    assert float(value) == pytest.approx(want_value, rel=1e-5)
    assert float(to_numpy(correct)) == want_correct
    assert float(to_numpy(real)) == want_real == 5
    assert len(gradients) == len(want_gradients)
    for got, want in zip(gradients, want_gradients, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_projected_cross_entropy_in_bf16_is_close_to_float64_and_returns_float32():
    """Under mixed precision the hidden states are bf16: the (rows, vocab) products and the
    softmax run in bf16, the sums and the gradients stay float32."""
    rng = np.random.default_rng(5)
    hidden = rng.normal(size=(64, 16)).astype("float32")
    table = (0.5 * rng.normal(size=(50, 16))).astype("float32")
    bias = (0.1 * rng.normal(size=(50,))).astype("float32")
    labels = rng.integers(0, 50, size=64)

    def loss_sum(hidden, table, bias):
        bf16_hidden = keras.ops.cast(hidden, "bfloat16")
        loss, _, _ = projected_cross_entropy(bf16_hidden, table, bias, labels, EPS, pad_id=0)
        assert keras.backend.standardize_dtype(loss.dtype) == "float32"
        return loss

    value, gradients = value_and_gradients(loss_sum, hidden, table, bias)
    # The reference sees the operands as bf16 rounds them.
    rounded = [
        to_numpy(keras.ops.cast(keras.ops.cast(a, "bfloat16"), "float32")) for a in (hidden, table)
    ]
    want_value, _, _, want_gradients = reference(*rounded, bias, labels, EPS)
    assert float(value) == pytest.approx(want_value, rel=1e-2)
    for got, want in zip(gradients, want_gradients, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=2e-2 * np.abs(want).max())


def test_projected_cross_entropy_stays_finite_when_a_label_has_probability_zero():
    """Logits hundreds apart: p[label] underflows float32, the loss must still be exact."""
    rng = np.random.default_rng(4)
    hidden = (60.0 * rng.normal(size=(6, 5))).astype("float32")
    table = rng.normal(size=(11, 5)).astype("float32")
    labels = np.array([1, 4, 9, 2, 5, 8])
    logits = hidden.astype("float64") @ table.T
    gaps = logits.max(-1) - logits[np.arange(6), labels]
    assert gaps.max() > 120  # exp(-120) is below float32's smallest positive number
    loss, _, _ = projected_cross_entropy(hidden, table, None, labels, EPS, pad_id=0)
    want, _, _, _ = reference(hidden, table, None, labels, EPS)
    assert np.isfinite(float(to_numpy(loss)))
    assert float(to_numpy(loss)) == pytest.approx(want, rel=1e-5)


def transformer(tie_embeddings: bool) -> Transformer:
    model = Transformer(
        2, 16, 2, 32, 23, 29 if not tie_embeddings else 23, 12, 12,
        dropout_rate=0.0, norm_first=True, tie_embeddings=tie_embeddings,
        share_embeddings=tie_embeddings,
    )  # fmt: skip
    model((np.ones((1, 3), "int32"), np.ones((1, 3), "int32")))
    return model


def batch():
    rng = np.random.default_rng(5)
    source = rng.integers(1, 23, size=(4, 7)).astype("int32")
    target = rng.integers(1, 23, size=(4, 6)).astype("int32")
    source[1, 4:] = target[2, 3:] = 0
    return (source, target[:, :-1]), target[:, 1:]


def config() -> TranslationConfig:
    return TranslationConfig(
        num_layers=2, d_model=16, num_heads=2, dff=32, label_smoothing=EPS, warmup_steps=1
    )


@pytest.mark.parametrize("tie_embeddings", [False, True])
def test_a_train_step_equals_one_through_the_logits(tie_embeddings):
    """The trainer's compiled step (fused projection and loss) against Keras
    differentiating `MaskedLoss` of the transformer's logits: same loss, accuracy and
    new weights. Plain SGD, since Adam's first steps turn any gradient, however close
    to zero, into a full-size step of its sign."""
    x, y = batch()
    fused = transformer(tie_embeddings)
    plain = transformer(tie_embeddings)
    plain.set_weights(fused.get_weights())
    trainer = TeacherForcing(fused, EPS, pad_id=0)
    trainer.compile(keras.optimizers.SGD(0.5))
    plain.compile(keras.optimizers.SGD(0.5), MaskedLoss(EPS), metrics=[MaskedAccuracy()])
    losses = []
    for _ in range(3):
        got = trainer.train_on_batch(x, y, return_dict=True)
        want = plain.train_on_batch(x, y, return_dict=True)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
        assert got["masked_accuracy"] == pytest.approx(want["masked_accuracy"])
        losses.append(got["loss"])
    assert losses[-1] < losses[0] - 0.1  # the steps did train
    for got, want in zip(fused.weights, plain.weights, strict=True):
        np.testing.assert_allclose(to_numpy(got), to_numpy(want), rtol=1e-4, atol=1e-6)


def test_compile_model_gives_a_trainer_with_the_warm_up_adam():
    model = transformer(tie_embeddings=True)
    trainer = compile_model(model, config(), steps_per_epoch=10)
    assert isinstance(trainer, TeacherForcing) and trainer.transformer is model
    assert isinstance(trainer.optimizer, keras.optimizers.Adam) and trainer.optimizer.built
    x, y = batch()
    before = [to_numpy(w) for w in model.trainable_weights]
    trainer.train_on_batch(x, y)
    after = [to_numpy(w) for w in model.trainable_weights]
    assert all(not np.array_equal(b, a) for b, a in zip(before, after, strict=True))


def test_validation_scores_the_logits_with_masked_loss():
    x, y = batch()
    model = transformer(tie_embeddings=True)
    trainer = compile_model(model, config(), steps_per_epoch=10)
    scores = trainer.evaluate(x, y, return_dict=True, verbose=0)
    logits = model(x)
    assert scores["loss"] == pytest.approx(float(to_numpy(MaskedLoss(EPS)(y, logits))), rel=1e-5)
    accuracy = MaskedAccuracy()
    accuracy.update_state(y, logits)
    assert scores["masked_accuracy"] == pytest.approx(float(to_numpy(accuracy.result())))


def test_the_trainer_holds_the_transformers_variables_in_its_order():
    """Checkpoints are written from the trainer and read into the transformer."""
    model = transformer(tie_embeddings=False)
    trainer = TeacherForcing(model, EPS, pad_id=0)
    assert [id(v) for v in trainer.weights] == [id(v) for v in model.weights]
    assert [id(v) for v in trainer.variables] == [id(v) for v in model.variables]
    assert [id(v) for v in trainer.trainable_variables] == [
        id(v) for v in model.trainable_variables
    ]

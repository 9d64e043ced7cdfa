import dataclasses
import math

import keras
import numpy as np
import pytest

from mintransformer.config import ClassificationConfig, TranslationConfig
from mintransformer.data.corpora import load_corpus, numbers_spec
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory
from mintransformer.training import callbacks, translation
from mintransformer.training.optimizer import DECAY_END_STEP, decay_end_step, warmup_adam
from mintransformer.training.schedule import CustomSchedule, LinearWarmupDecay, NoamSchedule
from tests.conftest import to_numpy, train_in

pytestmark = pytest.mark.core


def noam(step, d_model, warmup):
    step = step + 1
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_follows_the_paper_formula():
    schedule = NoamSchedule(128, warmup_steps=50)
    for step in (0, 1, 10, 49, 50, 200, 5000):
        assert float(to_numpy(schedule(step))) == pytest.approx(noam(step, 128, 50), rel=1e-5)


def test_for_peak_reaches_the_peak_at_the_end_of_warm_up():
    schedule = NoamSchedule.for_peak(256, 600, peak=1e-3)
    rates = [float(to_numpy(schedule(s))) for s in range(0, 2000, 3)]
    assert max(rates) <= 1e-3 * (1 + 1e-6)
    assert float(to_numpy(schedule(599))) == pytest.approx(1e-3, rel=1e-5)


def test_serializes_with_keras():
    schedule = NoamSchedule(64, 123, scale=2.0)
    clone = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert isinstance(clone, NoamSchedule)
    np.testing.assert_allclose(to_numpy(clone(77)), to_numpy(schedule(77)))


@pytest.mark.parametrize(
    ("args", "argument"), [((0, 10), "d_model"), ((8, 0), "warmup_steps"), ((8, 10, -1.0), "scale")]
)
def test_bad_arguments(args, argument):
    with pytest.raises(ValueError, match=argument):
        NoamSchedule(*args)


def linear(step, peak, warmup, total):
    step = step + 1
    return peak * min(step / warmup, max(0.0, (total - step) / (total - warmup)))


def test_linear_schedule_follows_its_formula_and_ends_at_zero():
    schedule = LinearWarmupDecay(2e-3, warmup_steps=10, total_steps=50)
    for step in (0, 4, 9, 10, 30, 48):
        expected = linear(step, 2e-3, 10, 50)
        assert float(to_numpy(schedule(step))) == pytest.approx(expected, rel=1e-5)
    assert float(to_numpy(schedule(9))) == pytest.approx(2e-3, rel=1e-6)
    for step in (49, 50, 500):
        assert float(to_numpy(schedule(step))) == 0.0


def test_linear_schedule_serializes_with_keras():
    schedule = LinearWarmupDecay(1e-3, 7, 40)
    clone = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert isinstance(clone, LinearWarmupDecay) and clone.get_config() == schedule.get_config()
    np.testing.assert_allclose(to_numpy(clone(21)), to_numpy(schedule(21)))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, 10, 100), "peak"),
        ((1e-3, 0, 100), "warmup_steps"),
        ((1e-3, 100, 100), "less than `total_steps`"),
        ((1e-3, 1, 1), "total_steps"),
    ],
)
def test_bad_linear_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        LinearWarmupDecay(*args)


def optimizer_schedule(config, steps_per_epoch):
    config = warmup_adam(config, steps_per_epoch).get_config()["learning_rate"]
    return keras.optimizers.schedules.deserialize(config)


def test_the_optimizer_uses_the_configs_schedule_fitted_to_the_run():
    noam = optimizer_schedule(
        TranslationConfig(schedule="noam", warmup_steps=600, epochs=2), steps_per_epoch=100
    )
    assert isinstance(noam, NoamSchedule) and noam.warmup_steps == 200
    config = ClassificationConfig(
        schedule="linear", warmup_steps=30, epochs=2, peak_learning_rate=1e-3
    )
    schedule = optimizer_schedule(config, steps_per_epoch=50)
    assert isinstance(schedule, LinearWarmupDecay)
    assert (schedule.peak, schedule.warmup_steps, schedule.total_steps) == (1e-3, 30, 100)
    short = optimizer_schedule(config, steps_per_epoch=10)
    assert (short.warmup_steps, short.total_steps) == (19, 20)


def test_a_warm_up_cut_to_fit_the_run_is_announced(capsys):
    optimizer_schedule(
        TranslationConfig(schedule="noam", warmup_steps=600, epochs=3), steps_per_epoch=113
    )
    assert (
        "warm-up: 339 steps, not 600: cut to fit 3 epoch(s) of 113 steps" in capsys.readouterr().out
    )
    optimizer_schedule(TranslationConfig(warmup_steps=300, epochs=3), steps_per_epoch=113)
    assert "warm-up" not in capsys.readouterr().out


def test_the_tutorial_name_is_the_noam_schedule():
    assert CustomSchedule is NoamSchedule
    restored = keras.optimizers.schedules.deserialize(
        {
            "module": None,
            "class_name": "CustomSchedule",
            "config": NoamSchedule(64).get_config(),
            "registered_name": "mintransformer>CustomSchedule",
        }
    )
    assert isinstance(restored, NoamSchedule) and restored.d_model == 64


def test_a_linear_decay_can_read_its_end_from_a_variable():
    schedule = LinearWarmupDecay(1e-3, warmup_steps=10, total_steps=100)
    end = keras.Variable(100.0, dtype="float32")
    schedule.end_from(end)
    assert float(to_numpy(schedule(49))) == pytest.approx(linear(49, 1e-3, 10, 100), rel=1e-5)
    end.assign(60.0)
    assert float(to_numpy(schedule(49))) == pytest.approx(linear(49, 1e-3, 10, 60), rel=1e-5)
    assert float(to_numpy(schedule(59))) == 0.0
    end.assign(3.0)  # within the warm-up: the decay ends right after it
    assert float(to_numpy(schedule(9))) == pytest.approx(1e-3, rel=1e-5)
    assert float(to_numpy(schedule(10))) == 0.0


def test_only_a_linear_decay_with_a_time_budget_gets_a_movable_end(capsys):
    budget = TranslationConfig(schedule="linear", minutes=5, epochs=100, warmup_steps=30)
    optimizer = warmup_adam(budget, steps_per_epoch=50)
    assert "linear decay to 0 when the 5-minute budget runs out" in capsys.readouterr().out
    end = decay_end_step(optimizer)
    assert end is not None and float(to_numpy(end)) == 5000.0
    assert decay_end_step(warmup_adam(TranslationConfig(schedule="linear"), 50)) is None
    assert decay_end_step(warmup_adam(TranslationConfig(schedule="noam", minutes=5), 50)) is None


def saved(checkpoint, name: str) -> float:
    """The value of the optimizer's scalar variable `name` in `checkpoint`."""
    arrays, paths = checkpoints.read_arrays(checkpoint)
    (found,) = [a for a, p in zip(arrays, paths, strict=True) if p.endswith(f"/{name}")]
    return float(found)


class OneSecondPerCall:
    """A clock that advances one second each time it is read."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


def test_a_time_budget_moves_the_decays_end_into_the_compiled_step(tmp_path, monkeypatch):
    # Every training step "takes" one second. The budget is one epoch of steps plus one
    # second, so after the first epoch one step's time is left: a second epoch begins,
    # and the clock moves the decay's end to its one step, which runs at a learning
    # rate of 0 and leaves the weights exactly as they were. A backend that compiled
    # the end in as a constant would move them.
    corpus = load_corpus(numbers_spec(num_train=600, num_val=50, num_test=50))
    config = TranslationConfig(
        data=numbers_spec(600, 50, 50),
        num_layers=1,
        d_model=16,
        num_heads=2,
        dff=32,
        vocab_size=120,
        max_tokens=1000,
        warmup_steps=2,
        max_length=48,
        epochs=1,
        schedule="linear",
    )
    probe = RunDirectory.create(tmp_path / "probe", config)
    train_in(translation, probe, corpus)
    steps_per_epoch = int(saved(probe.checkpoints()[-1], "iteration"))
    assert steps_per_epoch > 3
    monkeypatch.setattr(callbacks, "time", OneSecondPerCall())
    minutes = (steps_per_epoch + 1) / 60
    while 60.0 * minutes < steps_per_epoch + 1:  # not one rounding short of the step
        minutes = math.nextafter(minutes, math.inf)
    budget = dataclasses.replace(config, epochs=50, minutes=minutes)
    run = RunDirectory.create(tmp_path / "run", budget)
    model, _ = train_in(translation, run, corpus)
    assert [run.epoch_of(p) for p in run.checkpoints()] == [1, 2]
    assert saved(run.checkpoints()[-1], "iteration") == steps_per_epoch + 1
    assert saved(run.checkpoints()[-1], DECAY_END_STEP) == steps_per_epoch + 1.0
    first, second = (checkpoints.average_checkpoints([path]) for path in run.checkpoints())
    for before, after in zip(first[: len(model.weights)], second, strict=False):
        np.testing.assert_array_equal(before, after)

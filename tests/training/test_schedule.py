import keras
import numpy as np
import pytest

from mintransformer.training.schedule import CustomSchedule
from tests.conftest import to_numpy


def noam(step, d_model, warmup):
    step = step + 1
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_follows_the_paper_formula():
    schedule = CustomSchedule(128, warmup_steps=50)
    for step in (0, 1, 10, 49, 50, 200, 5000):
        assert float(to_numpy(schedule(step))) == pytest.approx(noam(step, 128, 50), rel=1e-5)


def test_for_peak_reaches_the_peak_at_the_end_of_warm_up():
    schedule = CustomSchedule.for_peak(256, 600, peak=1e-3)
    rates = [float(to_numpy(schedule(s))) for s in range(0, 2000, 3)]
    assert max(rates) <= 1e-3 * (1 + 1e-6)
    assert float(to_numpy(schedule(599))) == pytest.approx(1e-3, rel=1e-5)


def test_serializes_with_keras():
    schedule = CustomSchedule(64, 123, scale=2.0)
    clone = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert isinstance(clone, CustomSchedule)
    np.testing.assert_allclose(to_numpy(clone(77)), to_numpy(schedule(77)))


@pytest.mark.parametrize(
    ("args", "argument"), [((0, 10), "d_model"), ((8, 0), "warmup_steps"), ((8, 10, -1.0), "scale")]
)
def test_bad_arguments(args, argument):
    with pytest.raises(ValueError, match=argument):
        CustomSchedule(*args)

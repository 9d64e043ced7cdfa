"""The backend adapter: precision choice, CPU flags, batch widths, seeding, thread pools."""

import keras
import numpy as np
import pytest

from mintransformer import backend_adapter
from mintransformer.backend_adapter import (
    batch_width_multiple,
    choose_precision,
    configure_threads,
    cpu_flags,
    seed_global_generators,
)

pytestmark = pytest.mark.core


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16\n\n")
    assert {"avx512_bf16", "amx_bf16"} <= cpu_flags(cpuinfo)
    assert cpu_flags(tmp_path / "missing") == set()


@pytest.mark.parametrize(
    ("flags", "bf16", "why"),
    [
        ({"avx512f", "avx512_bf16"}, False, "AVX-512-BF16 but no AMX"),
        ({"avx2"}, False, "no AMX"),
        ({"avx512_bf16", "amx_bf16", "amx_tile"}, True, "AMX"),
    ],
)
def test_bf16_is_chosen_only_where_the_hardware_pays_for_it(monkeypatch, flags, bf16, why):
    monkeypatch.setattr(backend_adapter, "has_accelerator", lambda: False)
    chosen, reason = choose_precision(None, flags)
    assert chosen is bf16 and why in reason
    assert ("bf16" if bf16 else "fp32") in reason


def test_a_requested_precision_wins_and_an_accelerator_means_bf16(monkeypatch):
    assert choose_precision(True, set()) == (True, "precision: bf16 (as requested)")
    assert choose_precision(False, {"amx_bf16"})[0] is False
    monkeypatch.setattr(backend_adapter, "has_accelerator", lambda: True)
    assert choose_precision(None, set())[0] is True


def test_batches_are_rounded_only_where_every_width_compiles_anew():
    assert batch_width_multiple() == (8 if keras.backend.backend() == "jax" else 1)


def test_seeding_makes_global_draws_repeat():
    seed_global_generators(5)
    first = np.random.random(3)
    seed_global_generators(5)
    np.testing.assert_array_equal(np.random.random(3), first)


def test_thread_configuration_says_what_it_did():
    keras.ops.ones(1)  # the backend runs: TensorFlow's pools are fixed by now
    message = configure_threads()
    assert message.startswith("threads:")
    if keras.backend.backend() == "tensorflow":
        assert "already started" in message or "inter-op" in message

"""The precision choice and the CPU flags it reads."""

import pytest

from mintransformer.backend import precision
from mintransformer.backend.precision import choose_precision, cpu_flags

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
    monkeypatch.setattr(precision, "has_accelerator", lambda: False)
    chosen, reason = choose_precision(None, flags)
    assert chosen is bf16 and why in reason
    assert ("bf16" if bf16 else "fp32") in reason


def test_a_requested_precision_wins_and_an_accelerator_means_bf16(monkeypatch):
    assert choose_precision(True, set()) == (True, "precision: bf16 (as requested)")
    assert choose_precision(False, {"amx_bf16"})[0] is False
    monkeypatch.setattr(precision, "has_accelerator", lambda: True)
    assert choose_precision(None, set())[0] is True

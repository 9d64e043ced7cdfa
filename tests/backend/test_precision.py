"""The precision choice: by a measured bf16 product where bf16 is possible, cached per machine."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from mintransformer.backend import precision
from mintransformer.backend.precision import (
    Measurement,
    choose_precision,
    cpu_description,
    cpu_flags,
    machine_key,
    measure_products,
)

pytestmark = pytest.mark.core

AVX512_BF16 = {"avx512f", "avx512_bf16"}


class FakeMeasure:
    """A measurement that returns fixed speeds and counts its calls."""

    def __init__(self, fp32_gflops: float, bf16_gflops: float):
        self.result = Measurement(fp32_gflops, bf16_gflops)
        self.calls = 0

    def __call__(self) -> Measurement:
        self.calls += 1
        return self.result


@pytest.fixture
def cpu_only(monkeypatch):
    monkeypatch.setattr(precision, "has_accelerator", lambda: False)


def test_cpu_flags_and_description_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9R14\n"
        "stepping\t: 1\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16\n\n"
        "processor\t: 1\nmodel name\t: another\n"
    )
    assert {"avx512_bf16", "amx_bf16"} <= cpu_flags(cpuinfo)
    assert cpu_flags(tmp_path / "missing") == set()
    assert cpu_description(cpuinfo) == "AMD EPYC 9R14 (cpu family 25, model 17, stepping 1)"
    assert cpu_description(tmp_path / "missing") == "unknown CPU"


@pytest.mark.parametrize(
    ("fp32", "bf16", "chosen"), [(200.0, 410.0, True), (330.0, 166.0, False), (200.0, 250.0, False)]
)
def test_bf16_is_chosen_where_the_measured_product_is_13x_faster(
    tmp_path, cpu_only, fp32, bf16, chosen
):
    measure = FakeMeasure(fp32, bf16)
    bf16_chosen, line = choose_precision(None, AVX512_BF16, measure, tmp_path / "p.json")
    assert bf16_chosen is chosen
    assert measure.calls == 1
    speedup = f"{bf16 / fp32:.2f}x"
    assert line.startswith(f"precision: {'bf16' if chosen else 'fp32'} (bf16 products {speedup}")
    assert f"{bf16:.0f} against {fp32:.0f} GFLOP/s" in line
    assert line.endswith("measured)") if chosen else "bf16 needs 1.3x" in line


def test_the_measurement_is_cached_per_machine_and_backend(tmp_path, cpu_only, monkeypatch):
    cache = tmp_path / "cache" / "precision.json"
    measure = FakeMeasure(200.0, 400.0)
    first = choose_precision(None, AVX512_BF16, measure, cache)
    second = choose_precision(None, AVX512_BF16, measure, cache)
    assert measure.calls == 1 and first[0] is second[0] is True
    assert "measured)" in first[1] and "cached)" in second[1]
    entry = json.loads(cache.read_text())[machine_key(AVX512_BF16)]
    assert (entry["fp32_gflops"], entry["bf16_gflops"]) == (200.0, 400.0)

    # Another backend version (or CPU) is another key: measured again, both kept.
    monkeypatch.setattr(precision, "backend_version", lambda backend=None: "tensorflow 99.0")
    assert choose_precision(None, AVX512_BF16, FakeMeasure(300.0, 150.0), cache)[0] is False
    assert len(json.loads(cache.read_text())) == 2


def test_a_stale_or_unreadable_cache_is_measured_again(tmp_path, cpu_only):
    cache = tmp_path / "precision.json"
    old = (datetime.now(UTC) - timedelta(days=precision.CACHE_MAX_AGE_DAYS + 1)).isoformat()
    entry = {"fp32_gflops": 100.0, "bf16_gflops": 400.0, "measured_at": old}
    cache.write_text(json.dumps({machine_key(AVX512_BF16): entry}))
    measure = FakeMeasure(300.0, 150.0)
    assert choose_precision(None, AVX512_BF16, measure, cache)[0] is False
    assert measure.calls == 1

    cache.write_text("{not json")
    assert choose_precision(None, AVX512_BF16, measure, cache)[0] is False
    assert measure.calls == 2
    assert machine_key(AVX512_BF16) in json.loads(cache.read_text())  # rewritten whole


def test_an_unwritable_cache_still_gives_a_choice(tmp_path, cpu_only):
    blocker = tmp_path / "file"
    blocker.write_text("")
    measure = FakeMeasure(200.0, 400.0)
    assert choose_precision(None, AVX512_BF16, measure, blocker / "precision.json")[0] is True


def test_a_cpu_without_bf16_instructions_is_not_measured(tmp_path, cpu_only):
    measure = FakeMeasure(100.0, 1000.0)
    chosen, line = choose_precision(None, {"avx2", "fma"}, measure, tmp_path / "p.json")
    assert chosen is False and "no bf16 instructions" in line
    assert measure.calls == 0 and not (tmp_path / "p.json").exists()


def test_a_requested_precision_wins_and_an_accelerator_means_bf16(tmp_path, monkeypatch):
    measure = FakeMeasure(100.0, 1000.0)
    assert choose_precision(True, set(), measure) == (True, "precision: bf16 (as requested)")
    assert choose_precision(False, AVX512_BF16, measure, tmp_path / "p.json") == (
        False,
        "precision: fp32 (as requested)",
    )
    assert measure.calls == 0
    monkeypatch.setattr(precision, "has_accelerator", lambda: True)
    assert choose_precision(None, set(), measure)[0] is True


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MINTRANSFORMER_CACHE", str(tmp_path / "mine"))
    assert precision.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("MINTRANSFORMER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert precision.cache_dir() == tmp_path / "xdg" / "mintransformer"


def test_the_real_measurement_times_both_precisions_on_the_backend():
    measurement = measure_products(size=128, repeats=1)
    assert measurement.fp32_gflops > 0 and measurement.bf16_gflops > 0
    assert measurement.speedup == pytest.approx(measurement.bf16_gflops / measurement.fp32_gflops)


def test_a_burst_of_load_on_one_precision_does_not_decide_the_measurement():
    # Each product "takes": fp32 10 ms every time; bf16 5 ms, but 20 ms in four of its
    # seven timed products (a burst of other work on the machine). Its median is 20 ms.
    durations = {"float32": [0.010] * 7, "bfloat16": [0.005, 0.020, 0.020, 0.005, 0.020, 0.020]}
    durations["bfloat16"] += [0.005]
    order = iter(dtype for _ in range(7) for dtype in ("float32", "bfloat16"))
    timer = {"now": 0.0, "started": None}

    def clock():
        if timer["started"] is None:
            timer["started"] = next(order)
        else:
            timer["now"] += durations[timer["started"]].pop(0)
            timer["started"] = None
        return timer["now"]

    measurement = measure_products(size=16, repeats=7, clock=clock)
    assert measurement.speedup == pytest.approx(2.0)  # the undisturbed 5 ms against 10 ms
    assert measurement.fp32_gflops == pytest.approx(2 * 16**3 / 0.010 / 1e9)


def test_the_warm_up_products_are_not_timed():
    # A fresh process's first products are slow; only the `repeats` rounds after the
    # warm-up may reach the clock, two readings (start, end) per product.
    readings = []

    def clock():
        readings.append(len(readings))
        return float(len(readings))

    measure_products(size=16, repeats=3, warmup=5, clock=clock)
    assert len(readings) == 3 * 2 * 2

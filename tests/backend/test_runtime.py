"""The CPU runtime: batch widths, seeding, threads, allocator and oneDNN."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from mintransformer.backend.runtime import (
    batch_width_multiple,
    configure_runtime,
    seed_global_generators,
    thread_count,
)

pytestmark = pytest.mark.core


def test_batches_are_rounded_only_where_every_width_compiles_anew():
    assert batch_width_multiple() == (8 if keras.backend.backend() == "jax" else 1)


def test_seeding_makes_global_draws_repeat():
    seed_global_generators(5)
    first = np.random.random(3)
    seed_global_generators(5)
    np.testing.assert_array_equal(np.random.random(3), first)


def test_runtime_configuration_says_what_it_did():
    keras.ops.ones(1)  # the backend runs: TensorFlow's pools are fixed by now
    message = configure_runtime()
    assert message.startswith("runtime:")
    if keras.backend.backend() == "tensorflow":  # started now, or by an earlier test's call
        threads = thread_count("TF_NUM_INTEROP_THREADS")
        assert "already started" in message or f"{threads} inter-op" in message


RUNTIME_PROBE = """
import keras, tensorflow as tf
from mintransformer.backend.runtime import configure_runtime
print(configure_runtime())
tf.ones((256, 256)) + 1.0
try:  # only a pooling allocator keeps statistics
    print("peak", tf.config.experimental.get_memory_info("CPU:0")["peak"])
except ValueError:
    print("no allocator statistics")
"""


def run_in_fresh_tensorflow(code: str, settings: dict[str, str | None]) -> list[str]:
    """The lines `code` prints in a new TensorFlow process with the environment `settings`
    (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in settings}
    env.update({k: v for k, v in settings.items() if v is not None})
    env.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


tensorflow_only = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="TensorFlow's runtime"
)


@tensorflow_only
@pytest.mark.parametrize("setting", [None, "0"])
def test_runtime_configuration_picks_the_pooling_allocator_unless_told_not_to(setting):
    """With oneDNN off, as TensorFlow's default allocator is only then (oneDNN pools)."""
    settings = {"TF_CPU_ALLOCATOR_USE_BFC": setting, "TF_ENABLE_ONEDNN_OPTS": "0"}
    lines = run_in_fresh_tensorflow(RUNTIME_PROBE, settings)
    message, allocator = lines[-2:]
    assert f"{thread_count('TF_NUM_INTEROP_THREADS')} inter-op" in message
    if setting is None:
        assert "pooling (BFC) allocator" in message
        assert int(allocator.split()[1]) >= 256 * 256 * 4
    else:
        assert "default allocator" in message
        assert allocator == "no allocator statistics"


ONEDNN_PROBE = """
import mintransformer, keras
from mintransformer.backend.runtime import configure_runtime, onednn_enabled
print(onednn_enabled())
print(configure_runtime())
"""


@tensorflow_only
@pytest.mark.parametrize(("setting", "expected"), [(None, True), ("0", False)])
def test_importing_mintransformer_first_turns_onednn_on_unless_told_not_to(setting, expected):
    settings = {"TF_ENABLE_ONEDNN_OPTS": setting}
    enabled, message = run_in_fresh_tensorflow(ONEDNN_PROBE, settings)[-2:]
    assert enabled == str(expected)
    assert f"oneDNN kernels {'on' if expected else 'off'}" in message


THREADS_PROBE = """
import tensorflow as tf
from mintransformer.backend.runtime import configure_runtime
print(configure_runtime())
tf.ones(1) + 1.0
print(tf.config.threading.get_inter_op_parallelism_threads())
"""


@tensorflow_only
@pytest.mark.parametrize("setting", [None, "3"])
def test_training_runs_an_inter_op_thread_per_core_unless_told_otherwise(setting):
    lines = run_in_fresh_tensorflow(THREADS_PROBE, {"TF_NUM_INTEROP_THREADS": setting})
    message, threads = lines[-2:]
    expected = int(setting) if setting else len(os.sched_getaffinity(0))
    assert int(threads) == expected
    assert message.startswith(f"runtime: {expected} inter-op, ")


def test_thread_counts_come_from_the_environment_when_it_gives_a_positive_number(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    for value, expected in [("4", 4), (" 2 ", 2), ("0", cores), ("-1", cores), ("many", cores)]:
        monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", value)
        assert thread_count("TF_NUM_INTRAOP_THREADS") == expected, value
    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS")
    assert thread_count("TF_NUM_INTRAOP_THREADS") == cores

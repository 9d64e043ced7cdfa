"""The backend adapter: precision choice, CPU flags, batch widths, seeding, the CPU runtime."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from mintransformer import backend_adapter
from mintransformer.backend_adapter import (
    batch_width_multiple,
    choose_precision,
    configure_runtime,
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


def test_runtime_configuration_says_what_it_did():
    keras.ops.ones(1)  # the backend runs: TensorFlow's pools are fixed by now
    message = configure_runtime()
    assert message.startswith("runtime:")
    if keras.backend.backend() == "tensorflow":  # started now, or by an earlier test's call
        assert "already started" in message or "1 inter-op" in message


RUNTIME_PROBE = """
import keras, tensorflow as tf
from mintransformer.backend_adapter import configure_runtime
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
    assert "1 inter-op" in message
    if setting is None:
        assert "pooling (BFC) allocator" in message
        assert int(allocator.split()[1]) >= 256 * 256 * 4
    else:
        assert "default allocator" in message
        assert allocator == "no allocator statistics"


ONEDNN_PROBE = """
import mintransformer, keras
from mintransformer.backend_adapter import configure_runtime, onednn_enabled
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


def numpy_adam(weights, gradients, learning_rate, beta_1=0.9, beta_2=0.98, epsilon=1e-9):
    """float64 Adam (Kingma & Ba, epsilon outside the square root) over a list of steps."""
    weights = weights.astype("float64")
    m = np.zeros_like(weights)
    v = np.zeros_like(weights)
    for step, gradient in enumerate(gradients, start=1):
        m = beta_1 * m + (1 - beta_1) * gradient
        v = beta_2 * v + (1 - beta_2) * gradient**2
        rate = learning_rate * np.sqrt(1 - beta_2**step) / (1 - beta_1**step)
        weights = weights - rate * m / (np.sqrt(v) + epsilon)
    return weights


def test_adam_matches_a_float64_reference():
    rng = np.random.default_rng(0)
    start = rng.normal(size=(4, 3)).astype("float32")
    gradients = [rng.normal(size=(4, 3)).astype("float32") * scale for scale in (1, 3, 0.1)]
    variable = keras.Variable(start)
    optimizer = backend_adapter.adam(0.01, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    optimizer.build([variable])
    for gradient in gradients:
        optimizer.apply([keras.ops.convert_to_tensor(gradient)], [variable])
    expected = numpy_adam(start, gradients, 0.01)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="IndexedSlices: TensorFlow")
def test_adam_sums_repeated_rows_of_an_embedding_gradient_before_squaring():
    # An embedding's gradient arrives as slices, one per looked-up token: a token read
    # twice has two. Adam's second moment is that of their sum.
    import tensorflow as tf

    start = np.ones((3, 2), "float32")
    slices = tf.IndexedSlices(
        tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]]), tf.constant([1, 1, 2]), (3, 2)
    )
    dense = np.array([[0.0, 0.0], [4.0, 1.0], [0.5, 0.5]], "float32")
    variable = keras.Variable(start)
    optimizer = backend_adapter.adam(0.1, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    optimizer.build([variable])
    for _ in range(2):
        optimizer.apply([slices], [variable])
    expected = numpy_adam(start, [dense, dense], 0.1)
    np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert type(optimizer).__name__ == "FusedAdam"
    # Checkpoints store optimizer variables under the optimizer's name, as Keras' Adam's.
    assert {v.path.split("/")[0] for v in optimizer.variables} == {"adam"}


def test_argmax_last_axis_matches_numpy_on_logits_and_ids():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 40)).astype("float32")
    logits[0, 0] = 0.0  # a row of zeros: the first index wins, as in NumPy
    logits[1, 2, 7] = 100.0
    found = backend_adapter.argmax_last_axis(keras.ops.convert_to_tensor(logits))
    assert keras.backend.standardize_dtype(found.dtype) == "int32"
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(found), logits.argmax(-1))
    ids = rng.integers(0, 9, size=(4, 6)).astype("int32")
    found = backend_adapter.argmax_last_axis(keras.ops.convert_to_tensor(ids))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(found), ids.argmax(-1))

"""The one place with backend-specific code: compiling an inference function,
whether the backend's fused attention kernel is the faster one, the arg-max of the
training loss, dropout's random mask, LayerNorm's gradient, Adam's update, the CPU
runtime (threads, allocator, oneDNN), the precision the hardware pays for, the padded width
of training batches, and data-parallel devices.

Everything else in mintransformer uses `keras.ops`. Inference steps run many
times on same-shaped inputs, so they are compiled once per shape:
TensorFlow `tf.function` (optionally with XLA), JAX `jax.jit` (with the model's
variables passed in as arguments through a `keras.StatelessScope`, so weights are
not baked in as constants), PyTorch eager under `torch.no_grad()`.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import keras
import numpy as np


def compile_inference(fn: Callable, variables: Sequence, jit_compile: bool = False) -> Callable:
    """Returns a compiled version of `fn`, which reads `variables` and updates none.

    Args:
        fn: the function to compile; its tensor arguments may vary in shape.
        variables: the model variables `fn` reads.
        jit_compile: on TensorFlow, compile with XLA. It fuses small ops, so a
            whole decoding loop runs several times faster (config A greedy,
            batch 1: 20 ms against 112 ms), but XLA compiles once per input
            shape (seconds) where `tf.function` alone retraces rarely. JAX
            always compiles with XLA; PyTorch ignores it.
    """
    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, reduce_retracing=True, jit_compile=jit_compile)
    if name == "jax":
        import jax

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
                return fn(*args)

        jitted = jax.jit(stateless)
        return lambda *args: jitted([v.value for v in variables], *args)
    if name == "torch":
        import torch

        return torch.no_grad()(fn)
    return fn


def prefers_fused_attention() -> bool:
    """Whether `keras.ops.dot_product_attention` beats attention written out in ops.

    Measured on the 2-core CPU (batch 64, 4 heads of 16, length 512, forward): PyTorch's
    fused kernel (scaled_dot_product_attention) 80 ms against 855 ms written out;
    TensorFlow and JAX have no fused CPU kernel and were as fast or slower with it.
    """
    return keras.backend.backend() == "torch"


def argmax_last_axis(x):
    """`keras.ops.argmax(x, axis=-1)` as int32, in one pass over `x`.

    Keras' TensorFlow `argmax` first replaces -0.0 by the smallest negative float, so that
    0.0 beats -0.0 as in NumPy: four more passes over `x` (equal, sign bit, and, select).
    Over a batch of vocabulary-wide logits that costs more than the arg-max itself, and
    which of two zero logits wins does not matter to an accuracy.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.math.argmax(x, axis=-1, output_type=tf.int32)
    return keras.ops.cast(keras.ops.argmax(x, axis=-1), "int32")


RANDOM_WORD_LEVELS = 65536  # TensorFlow's dropout compares 16-bit random words


def dropout(inputs, rate: float, seed_generator: keras.random.SeedGenerator):
    """Inverted dropout: each element zeroed with probability `rate`, the rest scaled up.

    On TensorFlow the mask comes from 16-bit random words, two from each 32-bit
    word the generator makes, where `keras.random.dropout` draws a float (32 bits)
    per element: half the random-number work, the step's largest cost after the
    matrix products. `rate` is rounded to a multiple of 1 / 65536 there and the
    kept elements are scaled by the inverse of the rounded keep probability, so
    the expected output is still exactly `inputs`. Other backends use
    `keras.random.dropout`.
    """
    if keras.backend.backend() != "tensorflow" or not 0.0 < rate < 1.0:
        return keras.random.dropout(inputs, rate, seed=seed_generator)
    import tensorflow as tf

    threshold = round(rate * RANDOM_WORD_LEVELS)  # a word below it drops its element
    if not 0 < threshold < RANDOM_WORD_LEVELS:
        return keras.random.dropout(inputs, rate, seed=seed_generator)
    seed = tf.cast(tf.math.floormod(seed_generator.next(), tf.int32.max - 1), tf.int32)
    shape = tf.shape(inputs)
    last = shape[-1]
    word_shape = tf.concat([shape[:-1], [(last + 1) // 2]], axis=0)
    # Philox is what the default ("auto select") picks, and named it is also twice as fast
    # under XLA (jit_compile): 43 ms against 86 ms for the mask of a 64 x 4 x 200 x 200 map.
    words = tf.random.stateless_uniform(
        word_shape, seed, minval=None, maxval=None, dtype=tf.uint32, alg="philox"
    )
    halves = tf.reshape(tf.bitcast(words, tf.uint16), tf.concat([shape[:-1], [-1]], axis=0))
    keep = halves[..., :last] >= threshold
    scale = tf.constant(RANDOM_WORD_LEVELS / (RANDOM_WORD_LEVELS - threshold), inputs.dtype)
    # A product with a mask of 0 and `scale`: its gradient is one more product, where
    # a select's would be a select and a product.
    return inputs * tf.where(keep, scale, tf.zeros((), inputs.dtype))


def layer_norm(x, gamma, beta, epsilon: float):
    """`keras.ops.layer_normalization` over the last axis, for training; in float32.

    On TensorFlow with a hand-written gradient: Keras writes the forward pass as
    `x * inv + (beta - mean * inv)` with `inv = gamma / std` a full-size tensor, and
    differentiating that takes about twice the ops and passes of the closed form

        dx = (g - mean(g) - x_hat * mean(g * x_hat)) / std,   g = dy * gamma.

    Other backends use Keras' (PyTorch's own kernel; JAX fuses under `jit`).
    """
    if keras.backend.backend() != "tensorflow":
        return keras.ops.layer_normalization(x, gamma, beta, epsilon=epsilon)
    import tensorflow as tf

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        inverse_std = tf.math.rsqrt(variance + epsilon)
        normalized = (x - mean) * inverse_std

        def gradient(upstream):
            scaled = upstream * gamma
            d_x = inverse_std * (
                scaled
                - tf.reduce_mean(scaled, axis=-1, keepdims=True)
                - normalized * tf.reduce_mean(scaled * normalized, axis=-1, keepdims=True)
            )
            rows = list(range(len(x.shape) - 1))
            return d_x, tf.reduce_sum(upstream * normalized, rows), tf.reduce_sum(upstream, rows)

        return normalized * gamma + beta, gradient

    def as_float32(value):
        return tf.cast(tf.convert_to_tensor(value), tf.float32)

    return tf.cast(normalize(as_float32(x), as_float32(gamma), as_float32(beta)), x.dtype)


def adam(learning_rate, **settings) -> keras.optimizers.Adam:
    """`keras.optimizers.Adam(learning_rate, **settings)`; on TensorFlow, `FusedAdam`.

    On TensorFlow an embedding's gradient arrives as slices, one per token looked up,
    and Keras' Adam squares them one by one: a token read k times in a batch gets a
    second moment about k times too small, and so a step about sqrt(k) times too
    large. `FusedAdam` sums the slices first, as Adam is defined and as the JAX and
    PyTorch backends (whose embedding gradients are dense) already do.
    """
    if keras.backend.backend() == "tensorflow":
        # Named as Keras' Adam: checkpoints store optimizer variables under the name.
        return FusedAdam(learning_rate, **{"name": "adam", **settings})
    return keras.optimizers.Adam(learning_rate, **settings)


class FusedAdam(keras.optimizers.Adam):
    """Adam on TensorFlow: the dense gradient, then one `ResourceApplyAdam` kernel per variable.

    The kernel does Keras' arithmetic (epsilon outside the square root) in one op
    instead of about fifteen; config A's train step was as fast as with Keras' update.
    """

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle,
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step),
            beta2_power=tf.pow(tf.cast(self.beta_2, dtype), step),
            lr=tf.cast(learning_rate, dtype),
            beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype),
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype),
        )


def configure_runtime() -> str:
    """Sets up the backend's CPU runtime for training; returns what it did, for the log.

    On TensorFlow, two settings, which take effect only before TensorFlow executes
    its first op (later they change nothing, and the message says so):

    - one inter-op thread. TensorFlow runs independent ops of a graph side by side
      (the inter-op pool), and each of them again on every core (the intra-op pool):
      on a small CPU the two pools fight over the cores. One inter-op thread was 22%
      faster per train step (config A on one core: 551 ms against 711 ms).
    - a pooling CPU allocator. With its oneDNN kernels on (importing mintransformer
      before TensorFlow turns them on: `mintransformer/__init__.py`), TensorFlow
      allocates from oneDNN's pool anyway. With them off, its default allocator
      hands each large tensor back to the operating system when it is freed, and
      the next step's tensors page in again (on a 2-core AMD EPYC an add over 10M
      floats took 22 ms, 4.4 ms from a pool): then the BFC pool is asked for. A pool
      keeps the peak of the memory it ever held. A value of `TF_CPU_ALLOCATOR_USE_BFC`
      already in the environment is left as it is.

    The message says which allocator was asked for and whether oneDNN is on.
    """
    if keras.backend.backend() != "tensorflow":
        return "runtime: backend defaults"
    import tensorflow as tf

    try:
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # the runtime has started: its pools and allocator are fixed
        return "runtime: TensorFlow already started, threads and allocator unchanged"
    pooled = os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1").lower() in ("1", "true")
    allocator = "pooling (BFC) allocator" if pooled else "default allocator"
    onednn = "on" if onednn_enabled() else "off"
    return (
        f"runtime: 1 inter-op, {os.cpu_count()} intra-op threads, {allocator}, "
        f"oneDNN kernels {onednn} (TensorFlow)"
    )


def onednn_enabled() -> bool:
    """Whether TensorFlow runs its oneDNN kernels (fixed when TensorFlow was imported)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # another TensorFlow layout: the environment is all there is to go by
        return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "").lower() in ("1", "true")
    return bool(_pywrap_util_port.IsMklEnabled())


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags the kernel reports (empty where it reports none)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.partition(":")[2].split())
    return set()


def has_accelerator() -> bool:
    """Whether the backend sees a GPU (or TPU)."""
    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_physical_devices("GPU"))
    if name == "jax":
        import jax

        return any(device.platform != "cpu" for device in jax.devices())
    if name == "torch":
        import torch

        return torch.cuda.is_available()
    return False


def choose_precision(requested: bool | None, flags: set[str] | None = None) -> tuple[bool, str]:
    """Whether to train in bf16 mixed precision, and why (a line for the log).

    bf16 pays only where the hardware multiplies bf16 matrices natively: a GPU, or a
    CPU with AMX tiles (`amx_bf16`). AVX-512-BF16 alone is not enough: on such a
    CPU a 2048^3 bf16 matmul ran at half the fp32 speed.

    Args:
        requested: True (bf16) or False (fp32) forces the choice; None decides.
        flags: CPU flags to judge by (default: this machine's).
    """
    if requested is not None:
        return bool(requested), f"precision: {'bf16' if requested else 'fp32'} (as requested)"
    if has_accelerator():
        return True, "precision: bf16 (an accelerator is present)"
    flags = cpu_flags() if flags is None else flags
    if "amx_bf16" in flags:
        return True, "precision: bf16 (the CPU has AMX: amx_bf16)"
    detail = "AVX-512-BF16 but no AMX" if "avx512_bf16" in flags else "no AMX"
    return False, f"precision: fp32 (the CPU has {detail}, no GPU: bf16 would be slower)"


def batch_width_multiple() -> int:
    """The multiple that training batches are padded to.

    JAX compiles the train step once per distinct input shape, so widths are
    rounded up to multiples of 8 (few shapes, some padding). TensorFlow and
    PyTorch run any width without recompiling, so batches are as wide as their
    longest sequence: rounding to 8 left about a quarter of Multi30k's positions
    as padding.
    """
    return 8 if keras.backend.backend() == "jax" else 1


def seed_global_generators(seed: int) -> None:
    """Seeds Python's and NumPy's global generators, and PyTorch's on that backend.

    Unlike `keras.utils.set_random_seed`, this leaves TensorFlow's global seed
    alone: a new global seed makes every `tf.function` trace again (4 s at the
    start of every epoch of the demo), and Keras layers draw their randomness from
    their own seed variables anyway. On PyTorch, unseeded randomness comes from
    torch's global generator, so it is seeded.
    """
    random.seed(seed)
    np.random.seed(seed)
    if keras.backend.backend() == "torch":
        import torch

        torch.manual_seed(seed)


def start_data_parallel(
    devices: int | None, coordinator: str | None, num_processes: int, process_id: int
) -> None:
    """Replicates models built from now on over the devices, with `keras.distribution`.

    JAX only: Keras 3's distribution runs on JAX's collectives (on TensorFlow it
    trains on one device without a word; on PyTorch it fails). With several
    processes, `keras.distribution.initialize` joins them first.

    Args:
        devices: devices per process; None: all that JAX sees.
        coordinator: "HOST:PORT" of process 0, with several processes.
        num_processes: processes in the job.
        process_id: this process's index.

    Raises:
        ValueError: on another backend, or if JAX sees fewer devices than asked for.
    """
    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(
            f"data-parallel training runs on the JAX backend (keras.distribution); this "
            f"process runs {backend}: set KERAS_BACKEND=jax or pass --backend jax."
        )
    import jax

    if num_processes > 1:
        keras.distribution.initialize(coordinator, num_processes, process_id)
    local = jax.local_devices()
    if devices is not None and devices > len(local):
        raise ValueError(
            f"--devices {devices}, but JAX sees {len(local)} here ({local[0].platform}). "
            f"On a CPU host, start Python with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={devices} "
            "(the command line sets it for --devices)."
        )
    # The first `per_process` devices of every process, process by process: each
    # process feeds the rows of its own devices (`ShardedBatches`).
    per_process = devices or len(local)
    mesh_devices = [
        device
        for index in range(jax.process_count())
        for device in [d for d in jax.devices() if d.process_index == index][:per_process]
    ]
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=mesh_devices, auto_shard_dataset=False)
    )


def data_parallel_layout() -> tuple[int, int, int] | None:
    """`(devices in the job, processes, this process's index)` of the data-parallel
    distribution in force (`start_data_parallel`); None without one."""
    distribution = keras.distribution.distribution()
    if not isinstance(distribution, keras.distribution.DataParallel):
        return None
    import jax  # a DataParallel distribution runs only on JAX (`start_data_parallel`)

    devices = int(np.prod(distribution.device_mesh.shape))
    return devices, jax.process_count(), jax.process_index()

"""The CPU runtime training runs in: threads, allocator and oneDNN on TensorFlow, the
padded width of batches, and the seeding of global random generators.
"""

from __future__ import annotations

import os
import random

import keras
import numpy as np

from mintransformer.core.cpu import usable_cores


def configure_runtime() -> str:
    """Sets up the backend's CPU runtime for training; returns what it did, for the log.

    On TensorFlow, two settings, which take effect only before TensorFlow executes
    its first op (later they change nothing, and the message says so):

    - one inter-op thread per core. TensorFlow runs independent ops of a graph side
      by side (the inter-op pool), and each of them again on every core (the
      intra-op pool). Most ops of a step are too small to spread over the cores,
      so with a single inter-op thread a core sat idle while another ran them one
      after the other (docs/speed.md). This is TensorFlow's own default, set here
      so that the message can say what it is; `TF_NUM_INTEROP_THREADS` in the
      environment chooses another count.
    - a pooling CPU allocator. With its oneDNN kernels on (importing mintransformer
      before TensorFlow turns them on: `mintransformer/__init__.py`), TensorFlow
      allocates from oneDNN's pool anyway. With them off, its default allocator
      hands each large tensor back to the operating system when it is freed, and
      the next step's tensors page in again: then the BFC pool is asked for. A pool
      keeps the peak of the memory it ever held. A value of `TF_CPU_ALLOCATOR_USE_BFC`
      already in the environment is left as it is.

    The message says how many threads each pool has, which allocator was asked for
    and whether oneDNN is on.
    """
    if keras.backend.backend() != "tensorflow":
        return "runtime: backend defaults"
    import tensorflow as tf

    inter_op = thread_count("TF_NUM_INTEROP_THREADS")
    try:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError:  # the runtime has started: its pools and allocator are fixed
        return "runtime: TensorFlow already started, threads and allocator unchanged"
    pooled = os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1").lower() in ("1", "true")
    allocator = "pooling (BFC) allocator" if pooled else "default allocator"
    intra_op = thread_count("TF_NUM_INTRAOP_THREADS")
    onednn = "on" if onednn_enabled() else "off"
    return (
        f"runtime: {inter_op} inter-op, {intra_op} intra-op threads, {allocator}, "
        f"oneDNN kernels {onednn} (TensorFlow)"
    )


def thread_count(variable: str) -> int:
    """The thread count the environment `variable` gives (a positive integer), else
    one thread per core this process may run on, as TensorFlow counts by default."""
    value = os.environ.get(variable, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return usable_cores()


def onednn_enabled() -> bool:
    """Whether TensorFlow runs its oneDNN kernels (fixed when TensorFlow was imported)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # another TensorFlow layout: the environment is all there is to go by
        return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "").lower() in ("1", "true")
    return bool(_pywrap_util_port.IsMklEnabled())


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
    alone: a new global seed makes every `tf.function` trace again (seconds at the
    start of every epoch), and Keras layers draw their randomness from
    their own seed variables anyway. On PyTorch, unseeded randomness comes from
    torch's global generator, so it is seeded.
    """
    random.seed(seed)
    np.random.seed(seed)
    if keras.backend.backend() == "torch":
        import torch

        torch.manual_seed(seed)

"""The one place with backend-specific code: compiling an inference function, and
whether the backend's fused attention kernel is the faster one.

Everything else in mintransformer uses `keras.ops`. Inference steps run many
times on same-shaped inputs, so they are compiled once per shape:
TensorFlow `tf.function` (optionally with XLA), JAX `jax.jit` (with the model's
variables passed in as arguments through a `keras.StatelessScope`, so weights are
not baked in as constants), PyTorch eager under `torch.no_grad()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras


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

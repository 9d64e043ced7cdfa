"""Compiling inference functions once per input shape, on each backend.

Inference steps run many times on same-shaped inputs, so they are compiled:
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
            whole decoding loop runs several times faster (docs/speed.md), but
            XLA compiles once per input shape (seconds) where `tf.function`
            alone retraces rarely. JAX
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

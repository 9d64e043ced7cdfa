"""The one place with backend-specific code: compiling an inference function.

Everything else in mintransformer uses `keras.ops`. Inference steps run many
times on same-shaped inputs, so they are compiled once per shape:
TensorFlow `tf.function`, JAX `jax.jit` (with the model's variables passed in
as arguments through a `keras.StatelessScope`, so weights are not baked in as
constants), PyTorch eager under `torch.no_grad()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras


def compile_inference(fn: Callable, variables: Sequence) -> Callable:
    """Returns a compiled version of `fn`, which reads `variables` and updates none."""
    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, reduce_retracing=True)
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

"""Compiling inference functions once per input shape, on each backend.

Inference steps run many times on same-shaped inputs, so they are compiled:
TensorFlow `tf.function` (optionally with XLA), JAX `jax.jit` (with the model's
variables passed in as arguments through a `keras.StatelessScope`, so weights are
not baked in as constants), PyTorch eager under `torch.no_grad()`.

PyTorch compiles no whole decoding loop, so `compile_eager_step` traces the functions
such a loop calls (the encoder, the one-token step) into TorchScript graphs, once per
input shape: run eagerly, every Keras layer call costs tens of microseconds of Python,
which for a one-token step is most of its time (docs/speed.md).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

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


def compile_eager_step(fn: Callable, variables: Sequence) -> Callable:
    """`fn` as the decoding loops should call it, for a function whose ops do not depend
    on its tensors' values (no loop or branch on a value: each call runs the same ops).

    On TensorFlow and JAX, `fn` itself: the loops that call it are compiled whole
    (`compile_inference`). On PyTorch, where they run in Python, `fn` is traced with
    `torch.jit.trace` on its first call with each signature (the shapes and dtypes of
    its tensor arguments, the values of the others); later calls run that graph,
    without Python, in `torch.inference_mode` (its outputs are inference tensors).
    The graph holds the variables' tensors (detached, not copied), and
    assignments update those in place, so it sees weights loaded or trained after it
    was traced. `torch.jit.trace` is deprecated in favour of `torch.compile`, which
    here compiled for many seconds per shape and ran no faster (docs/speed.md); a
    PyTorch without it runs `fn` eagerly.

    Args:
        fn: a function of tensors (nested in tuples and lists) and other
            arguments, returning tensors (nested likewise).
        variables: the model variables `fn` reads.
    """
    if keras.backend.backend() != "torch":
        return fn
    import torch

    if not hasattr(torch.jit, "trace"):
        return torch.no_grad()(fn)
    return _TracedPerShape(fn, variables)


class _TracedPerShape:
    """`compile_eager_step` on PyTorch: one TorchScript graph per argument signature."""

    def __init__(self, fn: Callable, variables: Sequence):
        import torch

        self.fn = fn
        self.variables = list(variables)
        with torch.no_grad():
            self.values = [variable.value.detach() for variable in self.variables]
        self.graphs: dict[Hashable, tuple[Callable, Any]] = {}
        self.lock = threading.Lock()

    def __call__(self, *args):
        import torch

        leaves: list = []
        structure = _flatten(args, leaves)
        key = tuple(
            (tuple(leaf.shape), leaf.dtype) if isinstance(leaf, torch.Tensor) else leaf
            for leaf in leaves
        )
        if key not in self.graphs:
            with self.lock, torch.no_grad():
                if key not in self.graphs:
                    self.graphs[key] = self._trace(structure, leaves)
        graph, output_structure = self.graphs[key]
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        # Inference mode skips the autograd and version-counter bookkeeping that no_grad
        # still does around every op: a one-token step is hundreds of small ops.
        with torch.inference_mode():
            outputs = graph(*tensors)
        return _pack(output_structure, iter(outputs))

    def _trace(self, structure, leaves: list) -> tuple[Callable, Any]:
        import torch

        positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        output_structure = []

        def flat_fn(*tensors):
            filled = list(leaves)
            for position, tensor in zip(positions, tensors, strict=True):
                filled[position] = tensor
            mapping = list(zip(self.variables, self.values, strict=True))
            with keras.StatelessScope(state_mapping=mapping):
                outputs = self.fn(*_pack(structure, iter(filled)))
            flat_outputs: list = []
            output_structure.append(_flatten(outputs, flat_outputs))
            return tuple(flat_outputs)

        with warnings.catch_warnings():
            # The trace warns where a shape becomes a constant (shape checks, reshapes):
            # each signature has a graph of its own, so those are constants.
            warnings.simplefilter("ignore")
            tensors = [leaves[i] for i in positions]
            graph = torch.jit.trace(flat_fn, tuple(tensors), check_trace=False)
        return graph, output_structure[0]


def _flatten(value, leaves: list):
    """Appends the leaves of `value` (tuples and lists nested) to `leaves`; returns its
    structure, with None for each leaf."""
    if isinstance(value, tuple | list):
        return type(value)(_flatten(item, leaves) for item in value)
    leaves.append(value)
    return None


def _pack(structure, leaves: Iterator):
    """The inverse of `_flatten`: `structure` with its leaves taken from `leaves`."""
    if isinstance(structure, tuple | list):
        return type(structure)(_pack(item, leaves) for item in structure)
    return next(leaves)

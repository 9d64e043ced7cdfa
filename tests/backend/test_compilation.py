"""`compile_eager_step`: on PyTorch, a TorchScript graph per argument signature that
computes what the function does eagerly; elsewhere the function itself."""

import keras
import numpy as np
import pytest
from keras import ops

from mintransformer.backend.compilation import compile_eager_step
from tests.conftest import to_numpy


def dense_step():
    """A built Dense layer, and a function of `(x, index)` with nested outputs that
    reads its weights and the value of `index`."""
    layer = keras.layers.Dense(3)
    layer.build((None, 4))

    def step(x, index, extra):
        y = layer(x) * ops.cast(index, "float32") + extra
        return y, (ops.sum(y, axis=-1), [index + 1])

    return layer, step


def inputs(rows: int, index: int):
    x = np.random.default_rng(rows).normal(size=(rows, 4)).astype("float32")
    return ops.convert_to_tensor(x), ops.convert_to_tensor(index, "int32")


def assert_same(a, b):
    flat_a, flat_b = keras.tree.flatten(a), keras.tree.flatten(b)
    assert len(flat_a) == len(flat_b)
    for x, y in zip(flat_a, flat_b, strict=True):
        np.testing.assert_allclose(to_numpy(x), to_numpy(y), rtol=1e-6, atol=1e-6)


@pytest.mark.core
def test_the_compiled_step_computes_what_the_function_does():
    layer, step = dense_step()
    compiled = compile_eager_step(step, layer.variables)
    for rows, index in [(2, 1), (2, 5), (3, 0), (2, 7)]:
        x, i = inputs(rows, index)
        result = compiled(x, i, 0.5)
        assert_same(result, step(x, i, 0.5))
        assert isinstance(result[1][1], list) and int(to_numpy(result[1][1][0])) == index + 1
    if keras.backend.backend() == "torch":
        # One graph per signature: the values of `index` are inputs, not constants.
        assert len(compiled.graphs) == 2
    else:
        assert compiled is step  # the loops that call it are compiled whole


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="PyTorch traces the step")
def test_the_traced_graph_sees_weights_assigned_after_it_was_traced():
    layer, step = dense_step()
    compiled = compile_eager_step(step, layer.variables)
    x, i = inputs(2, 3)
    before = to_numpy(compiled(x, i, 0.0)[0])
    layer.kernel.assign(ops.convert_to_numpy(layer.kernel) * 2.0)
    layer.bias.assign(np.ones(3, "float32"))
    after = compiled(x, i, 0.0)
    assert_same(after, step(x, i, 0.0))
    assert not np.allclose(to_numpy(after[0]), before)
    # A non-tensor argument is part of the signature: another value, another graph.
    assert_same(compiled(x, i, 1.0), step(x, i, 1.0))
    assert len(compiled.graphs) == 2

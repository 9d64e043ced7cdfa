"""Position information (paper section 3.5): the sinusoidal table, or learned positions.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Both layers add positions to their input and take `start_index`, the position
of the first input row, so that a cached decoder can feed one token at a time.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from mintransformer.core import checks


def sinusoidal_table(length: int, d_model: int) -> np.ndarray:
    """The paper's sinusoidal position table.

    Args:
        length: number of positions.
        d_model: model width.

    Returns:
        float32 array `(length, d_model)`; even columns are sines, odd columns cosines.
    """
    checks.positive_int(length, "length")
    checks.positive_int(d_model, "d_model")
    positions = np.arange(length, dtype=np.float64)[:, None]
    pair_index = np.arange(d_model)[None, :] // 2
    angles = positions / np.power(10000.0, 2 * pair_index / d_model)
    table = np.where(np.arange(d_model) % 2 == 0, np.sin(angles), np.cos(angles))
    return table.astype("float32")


def _check_length(inputs, start_index, max_length: int, layer_name: str) -> None:
    length = inputs.shape[1]
    if isinstance(start_index, int) and length is not None and start_index + length > max_length:
        raise ValueError(
            f"Sequence of length {start_index + length} is longer than `max_length` "
            f"({max_length}) of {layer_name}; build the model with a larger "
            "`max_length` (`pe_input`/`pe_target`) or truncate the input."
        )


class _AddedPositions(keras.layers.Layer):
    """Shared call logic: inputs `(batch, length, d_model)` + positions[start:start+length]."""

    def __init__(self, max_length, d_model, **kwargs):
        super().__init__(**kwargs)
        self.max_length = checks.positive_int(max_length, "max_length")
        self.d_model = checks.positive_int(d_model, "d_model")

    def call(self, inputs, start_index=0):
        checks.rank(inputs, 3, "inputs", "(batch, length, d_model)")
        _check_length(inputs, start_index, self.max_length, self.name)
        length = ops.shape(inputs)[1]
        if isinstance(start_index, int):
            positions = ops.slice(self.table(), (start_index, 0), (length, self.d_model))
        else:  # a tensor (decoding): one gather, where a slice at a tensor start is several ops
            rows = start_index + ops.arange(length, dtype="int32")
            positions = ops.take(self.table(), rows, axis=0)
        return inputs + ops.cast(positions, inputs.dtype)[None]

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length, d_model=self.d_model)
        return config


@keras.saving.register_keras_serializable(package="mintransformer")
class PositionalEncoding(_AddedPositions):
    """Adds the fixed sinusoidal table. The table is rebuilt from numbers, never saved.

    Args:
        max_length: longest sequence the table covers.
        d_model: model width.

    Call arguments:
        inputs: `(batch, length, d_model)`.
        start_index: position of the first row (int or scalar tensor).

    Returns:
        `(batch, length, d_model)`.
    """

    def __init__(self, max_length, d_model, **kwargs):
        super().__init__(max_length, d_model, **kwargs)
        self._table = sinusoidal_table(self.max_length, self.d_model)

    def table(self):
        return ops.convert_to_tensor(self._table)


@keras.saving.register_keras_serializable(package="mintransformer")
class LearnedPositionalEmbedding(_AddedPositions):
    """Adds a trained `(max_length, d_model)` position table (BERT, GPT).

    Args and call arguments as `PositionalEncoding`.
    """

    def __init__(self, max_length, d_model, initializer="glorot_uniform", **kwargs):
        super().__init__(max_length, d_model, **kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape=None):
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_length, self.d_model),
            initializer=self.initializer,
        )
        self.built = True

    def table(self):
        return ops.convert_to_tensor(self.position_embeddings)

    def get_config(self):
        config = super().get_config()
        config["initializer"] = keras.initializers.serialize(self.initializer)
        return config

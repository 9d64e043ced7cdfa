"""Position-wise layers applied to every position at once, as one 2-D matrix product."""

from __future__ import annotations

from keras import ops

from mintransformer.backend.kernels import dense_rows


def per_position(layer, x):
    """`layer(x)` for `x` `(batch, length, features)`, computed on `(batch * length, features)`.

    The result is the same. On TensorFlow a 3-D input to `Dense` goes through
    `tensordot`, and the bias add and activation after it stay separate ops; on the
    2-D rows the graph optimizer fuses them into the oneDNN product.

    Returns:
        `(batch, length, out_features)`.
    """
    rows = dense_rows(layer, ops.reshape(x, (-1, x.shape[-1])))
    return ops.reshape(rows, (ops.shape(x)[0], ops.shape(x)[1], rows.shape[-1]))

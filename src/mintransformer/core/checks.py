"""Argument checks used across the package, so every bad value gets the same clear error."""

from __future__ import annotations


def positive_int(value, name: str) -> int:
    """Returns `value` if it is an int > 0, else raises ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return value


def non_negative_int(value, name: str) -> int:
    """Returns `value` if it is an int >= 0, else raises ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer, got {value!r}.")
    return value


def non_negative_number(value, name: str) -> float:
    """Returns `value` as a float if it is a finite number >= 0, else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e300:
        raise ValueError(f"`{name}` must be a non-negative number, got {value!r}.")
    return float(value)


def dropout_rate(value, name: str = "dropout_rate") -> float:
    """Returns `value` if it is a number in [0, 1), else raises ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise ValueError(f"`{name}` must be a number in [0, 1), got {value!r}.")
    return float(value)


def heads_divide(d_model: int, num_heads: int) -> int:
    """Returns the per-head depth, or raises if `num_heads` does not divide `d_model`."""
    positive_int(d_model, "d_model")
    positive_int(num_heads, "num_heads")
    if d_model % num_heads:
        raise ValueError(f"`d_model` ({d_model}) must be divisible by `num_heads` ({num_heads}).")
    return d_model // num_heads


def rank(tensor, expected: int, name: str, layout: str) -> None:
    """Raises ValueError naming `name` if `tensor` does not have rank `expected`."""
    shape = tuple(tensor.shape)
    if len(shape) != expected:
        raise ValueError(f"`{name}` must have rank {expected} {layout}, got shape {shape}.")


def dtype_name(tensor) -> str:
    """The tensor's dtype as a Keras dtype string ('float32', 'bool', ...)."""
    from keras import backend  # here, so that importing the checks does not start Keras

    return backend.standardize_dtype(tensor.dtype)


def one_of(value, options, name: str):
    """Returns `value` if it is among `options`, else raises ValueError naming `name`."""
    if value not in options:
        raise ValueError(f"`{name}` must be one of {sorted(options)}, got {value!r}.")
    return value

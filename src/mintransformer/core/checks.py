"""Argument checks used across the package, so every bad value gets the same clear error."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any


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


def _is_number(value) -> bool:
    """Whether `value` is a real number, NumPy's included (not a bool, which Python
    counts as an int)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def finite_number(value, name: str) -> float:
    """Returns `value` as a float if it is a finite number, else raises ValueError."""
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a finite number, got {value!r}.")
    return float(value)


def positive_number(value, name: str) -> float:
    """Returns `value` as a float if it is a finite number > 0, else raises ValueError."""
    if not _is_number(value) or not 0 < value < math.inf:
        raise ValueError(f"`{name}` must be a positive finite number, got {value!r}.")
    return float(value)


def fraction(value, name: str) -> float:
    """Returns `value` as a float if it is a number in (0, 1), else raises ValueError."""
    if not _is_number(value) or not 0 < value < 1:
        raise ValueError(f"`{name}` must be a number in (0, 1), got {value!r}.")
    return float(value)


def boolean(value, name: str) -> bool:
    """Returns `value` if it is True or False (not 0, 1 or "no"), else raises ValueError."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be true or false, got {value!r}.")
    return value


def of_type(kind: type) -> Callable[[Any, str], Any]:
    """The check that a value is a `kind` (a dict, a list, a str, ...)."""

    def check(value, name: str):
        if not isinstance(value, kind):
            raise ValueError(f"`{name}` must be a {kind.__name__}, got {value!r}.")
        return value

    return check


def optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """`check`, letting None through."""
    return lambda value, name: None if value is None else check(value, name)


def unit_interval(value, name: str) -> float:
    """Returns `value` as a float if it is a number in [0, 1) (a rate, a share held out),
    else raises ValueError naming `name`."""
    if not _is_number(value) or not 0 <= value < 1:
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

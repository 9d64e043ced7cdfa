"""Checkpoints as plain `.npz` files: written atomically, matched by order, averaged.

A checkpoint holds the arrays of a list of Keras variables (model weights, and for
resuming also optimizer slots and dropout seed states), in their fixed order,
plus each variable's path for error messages. Writes are atomic
(`files.atomic_write`): a crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from keras import ops

from mintransformer.files import atomic_write

_PATHS_KEY = "__paths__"
_META_KEY = "__meta__"


def save_variables(path: str | Path, variables: Sequence, meta: dict | None = None) -> None:
    """Saves the values of `variables` (in order) to an `.npz` file, atomically.

    `meta` is a JSON-serialisable dict stored beside them (e.g. training time spent).
    """
    arrays = {f"v{i:05d}": np.asarray(ops.convert_to_numpy(v)) for i, v in enumerate(variables)}
    arrays[_PATHS_KEY] = np.array(json.dumps([v.path for v in variables]))
    if meta:
        arrays[_META_KEY] = np.array(json.dumps(meta))
    atomic_write(path, lambda f: np.savez(f, **arrays))


def read_meta(path: str | Path) -> dict:
    """The `meta` dict a checkpoint was saved with (empty if none)."""
    with np.load(path) as data:
        return json.loads(str(data[_META_KEY])) if _META_KEY in data.files else {}


def read_arrays(path: str | Path) -> tuple[list[np.ndarray], list[str]]:
    """The arrays and variable paths stored in a checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        with np.load(path) as data:
            paths = json.loads(str(data[_PATHS_KEY]))
            arrays = [data[f"v{i:05d}"] for i in range(len(paths))]
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(
            f"checkpoint {path} is corrupt or not a mintransformer file: {err}"
        ) from None
    return arrays, paths


def load_variables(path: str | Path, variables: Sequence) -> None:
    """Assigns a checkpoint's arrays to `variables`, checking count and every shape.

    Raises:
        ValueError: naming the first variable whose shape differs, with both shapes.
    """
    arrays, paths = read_arrays(path)
    if len(arrays) != len(variables):
        raise ValueError(
            f"checkpoint {path} holds {len(arrays)} tensors but the model has "
            f"{len(variables)}: it was written for another configuration."
        )
    for variable, array, saved_path in zip(variables, arrays, paths, strict=True):
        if tuple(variable.shape) != array.shape:
            raise ValueError(
                f"checkpoint {path}: tensor '{saved_path}' has shape {array.shape} but the "
                f"model's '{variable.path}' has shape {tuple(variable.shape)}."
            )
    for variable, array in zip(variables, arrays, strict=True):
        variable.assign(array)


def average_checkpoints(paths: Sequence[str | Path]) -> list[np.ndarray]:
    """Element-wise mean of the arrays of several checkpoints of the same model."""
    if not paths:
        raise ValueError("`paths` is empty: nothing to average.")
    total = [a.astype("float64") for a in read_arrays(paths[0])[0]]
    for path in paths[1:]:
        arrays = read_arrays(path)[0]
        if [a.shape for a in arrays] != [t.shape for t in total]:
            raise ValueError(f"checkpoint {path} does not match {paths[0]}: cannot average.")
        total = [t + a for t, a in zip(total, arrays, strict=True)]
    return [t / len(paths) for t in total]

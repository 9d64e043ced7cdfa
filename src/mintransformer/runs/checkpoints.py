"""Checkpoints as plain `.npz` files: written atomically, matched by order, averaged.

A checkpoint holds the arrays of a list of Keras variables (model weights, and for
resuming also optimizer slots and dropout seed states), in their fixed order,
plus each variable's path for error messages. Writes are atomic
(`files.atomic_write`): a crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from keras import ops

from mintransformer.core.errors import CorruptFileError
from mintransformer.core.files import atomic_write

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


def _read(path: str | Path, read: Callable):
    """`read(npz_file)` on the checkpoint at `path`; a clear error if it is not one."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    if path.stat().st_size == 0:
        raise CorruptFileError(path, "is corrupt: empty (0 bytes)")
    try:
        with np.load(path) as data:
            return read(data)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise CorruptFileError(
            path, f"is corrupt: truncated or not a mintransformer checkpoint ({err})"
        ) from None


def read_meta(path: str | Path) -> dict:
    """The `meta` dict a checkpoint was saved with (empty if none)."""
    return _read(
        path,
        lambda data: json.loads(str(data[_META_KEY])) if _META_KEY in data.files else {},
    )


def read_arrays(path: str | Path) -> tuple[list[np.ndarray], list[str]]:
    """The arrays and variable paths stored in a checkpoint.

    Raises:
        FileNotFoundError: if there is no such file.
        CorruptFileError: if the file is empty, truncated or not a checkpoint.
    """

    def arrays_and_paths(data):
        paths = json.loads(str(data[_PATHS_KEY]))
        return [data[f"v{i:05d}"] for i in range(len(paths))], paths

    return _read(path, arrays_and_paths)


def load_variables(path: str | Path, variables: Sequence) -> None:
    """Assigns a checkpoint's arrays to `variables`, checking count and every shape.

    Raises:
        ValueError: naming the first variable whose shape differs, with both shapes.
    """
    arrays, paths = read_arrays(path)
    if len(arrays) != len(variables):
        raise ValueError(
            f"checkpoint {path} holds {len(arrays)} tensors but the model has "
            f"{len(variables)}: it was written for another configuration (keep each "
            "checkpoint with the config.json of the run that wrote it)."
        )
    for variable, array, saved_path in zip(variables, arrays, paths, strict=True):
        if tuple(variable.shape) != array.shape:
            raise ValueError(
                f"checkpoint {path}: tensor '{saved_path}' has shape {array.shape} but the "
                f"model's '{variable.path}' has shape {tuple(variable.shape)}: it was written "
                "for a model of another size (keep each checkpoint with the config.json "
                "and tokenizer.json of the run that wrote it)."
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

"""Writing files so that a crash never leaves half of one.

A write goes to a temporary file in the same folder, is flushed to disk, and is
moved into place with `os.replace`: after a crash (even SIGKILL) the path holds
either the old file or the new one. A write that fails (disk full, read-only
folder) leaves the old file, removes the temporary one, and raises
`FileWriteError` naming the file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mintransformer.core.errors import FileWriteError


def atomic_write(path: str | Path, write) -> None:
    """Calls `write(file_object)` on a temporary file, then renames it to `path`.

    Raises:
        FileWriteError: if the folder or the file cannot be written; `path` is unchanged.
    """
    path = Path(path)
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
        )
        with os.fdopen(handle, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o644)  # mkstemp creates owner-only files
        os.replace(temporary, path)
    except BaseException as err:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        if isinstance(err, OSError) and not isinstance(err, FileWriteError):
            raise FileWriteError(path, err) from err
        raise


def save_npy(path: str | Path, array) -> Path:
    """Writes `array` as a `.npy` file atomically; returns the path, `.npy` added as
    `numpy.save` would add it."""
    import numpy as np

    path = Path(str(path).removesuffix(".npy") + ".npy")
    atomic_write(path, lambda f: np.save(f, array))
    return path

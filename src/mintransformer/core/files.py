"""Writing files and folders so that a crash never leaves half of one.

A write goes to a temporary file in the same folder, is flushed to disk, and is
moved into place with `os.replace`: after a crash (even SIGKILL) the path holds
either the old file or the new one. A write that fails (disk full, read-only
folder) leaves the old file, removes the temporary one, and raises
`FileWriteError` naming the file. A folder of exported files is written beside its
place and moved in whole (`replacing_folder`), and only over an earlier one of its kind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path

from mintransformer.core.errors import CorruptFileError, FileWriteError


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


def read_json_object(path: str | Path, remedy: str = "") -> dict:
    """The JSON object in the UTF-8 file `path`.

    Raises:
        CorruptFileError: the file is not UTF-8 JSON, or holds something else than an
            object; `remedy` says what to do.
    """
    import json

    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptFileError(path, f"is not valid JSON ({err})", remedy) from None
    if not isinstance(values, dict):
        raise CorruptFileError(path, "must hold a JSON object", remedy)
    return values


def save_npy(path: str | Path, array) -> Path:
    """Writes `array` as a `.npy` file atomically; returns the path, `.npy` added as
    `numpy.save` would add it."""
    import numpy as np

    path = Path(str(path).removesuffix(".npy") + ".npy")
    atomic_write(path, lambda f: np.save(f, array))
    return path


@contextlib.contextmanager
def replacing_folder(path: str | Path, own_names: Collection[str], what: str) -> Iterator[Path]:
    """Yields an empty folder beside `path` to write `what` into; on success it becomes `path`.

    `path` may be absent, empty, or an earlier `what`: a folder of files all named in
    `own_names`. Anything else (a run directory, another export, a file) is refused before
    anything is written, so an export never overwrites what it did not write. If the block
    fails, `path` is left as it was.

    Raises:
        FileExistsError: `path` holds something other than an earlier `what`.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} is a file; name a folder for {what}")
    if path.is_dir():
        foreign = sorted(
            entry.name + ("/" if entry.is_dir() else "")
            for entry in path.iterdir()
            if entry.is_dir() or entry.name not in own_names
        )
        if foreign:
            shown = ", ".join(foreign[:4]) + (", ..." if len(foreign) > 4 else "")
            raise FileExistsError(
                f"{path} holds files that are not {what} ({shown}); name an empty or new "
                "folder, or an earlier export of the same kind"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial"))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    os.chmod(staging, 0o755)  # mkdtemp creates an owner-only folder
    # A folder cannot be renamed over a non-empty one: the old one moves aside first.
    earlier = path.with_name(f".{path.name}.{os.getpid()}.old")
    if path.exists():
        os.replace(path, earlier)
    os.replace(staging, path)
    shutil.rmtree(earlier, ignore_errors=True)

"""Writing files so that a crash never leaves half of one.

A write goes to a temporary file in the same folder, is flushed to disk, and is
moved into place with `os.replace`: after a crash (even SIGKILL) the path holds
either the old file or the new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: str | Path, write) -> None:
    """Calls `write(file_object)` on a temporary file, then renames it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o644)  # mkstemp creates owner-only files
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise

"""One process at a time in a folder: an exclusive lock the operating system drops when the
holder dies.

The lock is `fcntl.flock` on a lock file, so a process killed with SIGKILL leaves
no stuck lock behind: the next process gets it at once. The lock file keeps the
holder's process id, for the error that refuses a second process. A command takes
it once: a second take, even in the same process, is refused the same way. Where
`fcntl` is missing (Windows) nothing is locked, with a warning.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from mintransformer.core.errors import RunInUseError

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None

@contextlib.contextmanager
def exclusive_lock(lock_file: str | Path, what: str) -> Iterator[None]:
    """Holds an exclusive lock on `lock_file` (created if absent) within the block.

    Args:
        lock_file: the lock file; its folder must exist.
        what: the locked thing, for the error ("run directory runs/m30k").

    Raises:
        RunInUseError: if another process holds the lock, naming its process id.
    """
    if fcntl is None:
        warnings.warn(
            f"file locks are not available on this system: nothing stops a second "
            f"process from using {what} at the same time.",
            stacklevel=3,
        )
        yield
        return
    handle = open(lock_file, "a+")  # noqa: SIM115  (closed in the finally below)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise RunInUseError(
                f"{what} is in use by another process (pid {holder}); wait for it to "
                "finish or stop it (a stopped process releases it at once)."
            ) from None
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()  # closing the file releases the lock

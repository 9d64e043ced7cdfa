"""Errors a user can cause and fix: each names what went wrong, the file, and what to do.

The command line prints any of `USER_ERRORS` as one line, `error: ...`, without a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path


class CorruptFileError(ValueError):
    """A file that is there but cannot be read: empty, truncated, or of another kind.

    Args:
        path: the file.
        problem: what is wrong with it, as the rest of a sentence ("is empty (0 bytes)").
        remedy: what to do about it, where the caller knows.
    """

    def __init__(self, path: str | Path, problem: str, remedy: str = ""):
        self.path = Path(path)
        self.problem = problem
        self.remedy = remedy
        super().__init__(f"{path} {problem}" + (f"; {remedy}" if remedy else ""))

    def with_remedy(self, remedy: str) -> CorruptFileError:
        """The same error, with `remedy` as what to do."""
        return CorruptFileError(self.path, self.problem, remedy)


class FileWriteError(OSError):
    """Writing a file failed (disk full, read-only folder, ...); the old file is unchanged.

    Args:
        path: the file or folder.
        cause: the error writing it raised.
        remedy: what to do, where the caller knows better than the general advice.
    """

    def __init__(self, path: str | Path, cause: OSError, remedy: str = ""):
        super().__init__(cause.errno, cause.strerror, str(path))
        remedy = remedy or (
            "free some space or make the folder writable, then run again "
            "(a training run continues with --resume)"
        )
        self.message = (
            f"could not write {path}: {cause.strerror or cause}. Nothing was replaced; {remedy}."
        )

    def __str__(self) -> str:
        return self.message


class RunInUseError(RuntimeError):
    """Another process is training in the run directory."""


class NonFiniteLossError(ArithmeticError):
    """The training loss became NaN or infinite."""


USER_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    ValueError,
    ModuleNotFoundError,
    FileWriteError,
    RunInUseError,
    NonFiniteLossError,
)

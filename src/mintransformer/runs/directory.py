"""The run directory: everything a trained model needs, in one folder.

    RUN/
      config.json          model and training settings (a `mintransformer.config`
                           dataclass, told apart by its "task")
      tokenizer.json       the subword tokenizer trained on the training text
      checkpoints/         epoch-NNNN.npz: model + optimizer + dropout-seed state
      model.npz            the final weights (average of the last checkpoints)
      log.csv              per-epoch metrics
      .lock                held by the process training in the run (`locking`)

Every file is written atomically (temporary file + rename), so an interrupted
run never leaves a half-written file; `--resume` continues from the newest
checkpoint.
"""

from __future__ import annotations

import contextlib
import csv
import shutil
from collections.abc import Iterator
from pathlib import Path

from mintransformer.config import (  # noqa: F401  (the configs were defined here before)
    CONFIG_CLASSES,
    ClassificationConfig,
    LanguageModelConfig,
    RunConfig,
    TranslationConfig,
    config_from_json,
)
from mintransformer.core.errors import CorruptFileError, FileWriteError
from mintransformer.core.files import atomic_write
from mintransformer.core.locking import exclusive_lock
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.data.tokenizer_file import load_tokenizer

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
WEIGHTS = "model.npz"
LOG = "log.csv"
CHECKPOINTS = "checkpoints"
LOCK = ".lock"
# The `mintransformer train` subcommand of each kind of run.
TRAIN_COMMANDS = {
    "translation": "translation",
    "classification": "classification",
    "language_model": "lm",
}


class RunDirectory:
    """Paths and config of one run; the only code that knows the folder layout."""

    def __init__(self, path: str | Path | RunDirectory):
        self.path = Path(path)
        self.config_path = self.path / CONFIG
        self.tokenizer_path = self.path / TOKENIZER
        self.weights_path = self.path / WEIGHTS
        self.log_path = self.path / LOG
        self.checkpoint_dir = self.path / CHECKPOINTS

    def __fspath__(self) -> str:
        return str(self.path)

    @classmethod
    def create(cls, path: str | Path, config: RunConfig, overwrite: bool = False):
        """A new run directory holding `config`; refuses to reuse one with a run in it.

        With `overwrite`, the earlier run's tokenizer, weights, checkpoints and log are
        deleted first: a new run stopped early then reads as unfinished, never as the
        old weights beside the new config.
        """
        run = cls(path)
        if run.config_path.exists() and not overwrite:
            raise FileExistsError(
                f"{run.path} already holds a run; pass --resume to continue it, or "
                "--overwrite to start again (its checkpoints are then replaced)."
            )
        run.make_folder()
        run.delete_training_results()
        run.save_config(config)
        return run

    def make_folder(self) -> None:
        """Creates the run's folder (and its parents) if it is not there.

        Raises:
            FileExistsError: the path is a file.
            FileWriteError: the folder cannot be created (a parent is a file, no permission).
        """
        if self.path.exists() and not self.path.is_dir():
            raise FileExistsError(
                f"{self.path} is a file, not a run directory: choose another --run"
            )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise FileWriteError(self.path, err, "choose another --run") from None

    def discard(self) -> None:
        """Deletes a new run that stopped before its first checkpoint: config and all."""
        self.delete_training_results()
        self.config_path.unlink(missing_ok=True)

    def delete_training_results(self) -> None:
        """Deletes what training wrote (tokenizer, weights, checkpoints, log), config aside."""
        for path in (self.tokenizer_path, self.weights_path, self.log_path):
            path.unlink(missing_ok=True)
        if self.checkpoint_dir.is_dir():
            shutil.rmtree(self.checkpoint_dir)

    @classmethod
    def open(cls, path: str | Path, need_weights: bool = True) -> RunDirectory:
        """An existing run directory; clear errors for missing pieces."""
        run = cls(path)
        if not run.path.is_dir():
            raise FileNotFoundError(f"run directory not found: {run.path}")
        needed = [run.config_path, run.tokenizer_path] + (
            [run.weights_path] if need_weights else []
        )
        missing = [p.name for p in needed if not p.is_file()]
        if missing:
            raise FileNotFoundError(
                f"{run.path} is not a complete run directory: missing {', '.join(missing)}"
                + (
                    " (training has not finished; --resume continues it)"
                    if run.checkpoints()
                    else ""
                )
            )
        return run

    @classmethod
    def to_resume(cls, path: str | Path) -> RunDirectory:
        """An existing run to continue with `--resume`; FileNotFoundError if there is none."""
        run = cls(path)
        if not run.config_path.is_file():
            raise FileNotFoundError(f"nothing to resume: {run.config_path} does not exist")
        return run

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Within the block no other process can train here (RunInUseError if one does).

        Without a run in the folder afterwards, the lock file is removed again, and the
        folder too if the block created it: a run that fails before writing anything (bad
        data) leaves nothing behind.
        """
        created = not self.path.exists()
        self.make_folder()
        try:
            with exclusive_lock(self.path / LOCK, f"run directory {self.path}"):
                yield
        finally:
            if not self.config_path.exists():
                (self.path / LOCK).unlink(missing_ok=True)
                if created and not any(self.path.iterdir()):
                    self.path.rmdir()

    def save_config(self, config: RunConfig) -> None:
        atomic_write(self.config_path, lambda f: f.write(config.to_json().encode()))

    def config(self, expected: type[RunConfig] | None = None) -> RunConfig:
        """The run's config; with `expected`, a ValueError if the run is of another kind.

        Raises:
            CorruptFileError: if config.json is empty, not UTF-8 or not JSON, saying what
                to do.
        """
        with self.explain_damage():
            try:
                text = self.config_path.read_bytes().decode("utf-8")
            except UnicodeDecodeError as err:
                raise CorruptFileError(self.config_path, f"is corrupt: not UTF-8 ({err})") from None
            if expected is None:
                return config_from_json(text, str(self.config_path))
            return expected.from_json(text, str(self.config_path))

    def tokenizer(self) -> Tokenizer:
        """The run's tokenizer: our BPE `Tokenizer`, or an imported model's SentencePiece one.

        Raises:
            CorruptFileError: if tokenizer.json is damaged, saying what to do.
        """
        with self.explain_damage():
            return load_tokenizer(self.tokenizer_path)

    def log(self) -> list[dict[str, float | str]]:
        """The rows of log.csv, one an epoch, each value a float where it is a number
        (none: no log yet)."""
        if not self.log_path.is_file():
            return []
        with self.log_path.open(newline="", encoding="utf-8") as file:
            rows = list(csv.DictReader(file))
        return [{name: _number(value) for name, value in row.items()} for row in rows]

    def checkpoint_path(self, epoch: int) -> Path:
        return self.checkpoint_dir / f"epoch-{epoch:04d}.npz"

    def checkpoints(self) -> list[Path]:
        """Epoch checkpoints, oldest first."""
        return sorted(self.checkpoint_dir.glob("epoch-*.npz"))

    @staticmethod
    def epoch_of(checkpoint: Path) -> int:
        return int(checkpoint.stem.split("-")[1])

    def repair_hint(self, damaged: Path) -> str:
        """What to do about a damaged file of this run."""
        if damaged == self.weights_path and self.checkpoints():
            command = TRAIN_COMMANDS[self.config().task]
            return (
                f"rebuild it from the run's checkpoints with `mintransformer train {command} "
                f"--run {self.path} --resume`"
            )
        if damaged.parent == self.checkpoint_dir:
            return "delete it (or restore it from a copy), then run again with --resume"
        return "restore it from a copy of the run, or train the run again with --overwrite"

    @contextlib.contextmanager
    def explain_damage(self) -> Iterator[None]:
        """Within the block, a `CorruptFileError` also says what to do (`repair_hint`)."""
        try:
            yield
        except CorruptFileError as err:
            if err.remedy:
                raise
            raise err.with_remedy(self.repair_hint(err.path)) from None


def _number(value: str | None) -> float | str | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value

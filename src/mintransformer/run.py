"""The run directory: everything a trained model needs, in one folder.

    RUN/
      config.json          model and training settings (`TranslationConfig`)
      tokenizer.json       the subword tokenizer trained on the training text
      checkpoints/         epoch-NNNN.npz: model + optimizer + dropout-seed state
      model.npz            the final weights (average of the last checkpoints)
      log.csv              per-epoch metrics

Every file is written atomically (temporary file + rename), so an interrupted
run never leaves a half-written file; `--resume` continues from the newest
checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from mintransformer.training.checkpoints import atomic_write

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
WEIGHTS = "model.npz"
LOG = "log.csv"
CHECKPOINTS = "checkpoints"


@dataclass
class TranslationConfig:
    """Model and training settings of a translation run (saved as config.json)."""

    # model
    num_layers: int = 3
    d_model: int = 256
    num_heads: int = 4
    dff: int = 1024
    dropout_rate: float = 0.1
    norm_first: bool = False
    tie_embeddings: bool = True
    max_length: int = 128
    # data and tokenizer
    data: dict = field(default_factory=dict)
    vocab_size: int = 8000
    # training
    epochs: int = 10
    max_tokens: int = 4096
    warmup_steps: int = 600
    peak_learning_rate: float = 1e-3
    label_smoothing: float = 0.1
    average_last: int = 2
    seed: int = 0
    mixed_precision: bool = False

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "config") -> TranslationConfig:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{source} is not valid JSON: {err}") from None
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{source} has unknown settings: {', '.join(unknown)}")
        return cls(**values)


class RunDirectory:
    """Paths and config of one run; the only code that knows the folder layout."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config_path = self.path / CONFIG
        self.tokenizer_path = self.path / TOKENIZER
        self.weights_path = self.path / WEIGHTS
        self.log_path = self.path / LOG
        self.checkpoint_dir = self.path / CHECKPOINTS

    @classmethod
    def create(cls, path: str | Path, config: TranslationConfig, overwrite: bool = False):
        """A new run directory holding `config`; refuses to reuse one with a run in it."""
        run = cls(path)
        if run.config_path.exists() and not overwrite:
            raise FileExistsError(
                f"{run.path} already holds a run; pass --resume to continue it, or "
                "--overwrite to start again (its checkpoints are then replaced)."
            )
        run.path.mkdir(parents=True, exist_ok=True)
        run.save_config(config)
        return run

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

    def save_config(self, config: TranslationConfig) -> None:
        atomic_write(self.config_path, lambda f: f.write(config.to_json().encode()))

    def config(self) -> TranslationConfig:
        return TranslationConfig.from_json(self.config_path.read_text(), str(self.config_path))

    def checkpoint_path(self, epoch: int) -> Path:
        return self.checkpoint_dir / f"epoch-{epoch:04d}.npz"

    def checkpoints(self) -> list[Path]:
        """Epoch checkpoints, oldest first."""
        return sorted(self.checkpoint_dir.glob("epoch-*.npz"))

    @staticmethod
    def epoch_of(checkpoint: Path) -> int:
        return int(checkpoint.stem.split("-")[1])

"""The run directory: everything a trained model needs, in one folder.

    RUN/
      config.json          model and training settings (`TranslationConfig`,
                           `LanguageModelConfig` or `ClassificationConfig`, told
                           apart by its "task")
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
from typing import ClassVar

from mintransformer.layers import validation
from mintransformer.training.checkpoints import atomic_write
from mintransformer.training.schedule import SCHEDULES

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
WEIGHTS = "model.npz"
LOG = "log.csv"
CHECKPOINTS = "checkpoints"


class _Config:
    """JSON (de)serialisation shared by the run configs; `task` names the kind of run."""

    task: ClassVar[str]

    def to_json(self) -> str:
        values = {"task": self.task, **dataclasses.asdict(self)}
        return json.dumps(values, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "config"):
        values = _parse(text, source)
        task = values.pop("task", TranslationConfig.task)  # runs written before LMs had none
        if task != cls.task:
            raise ValueError(f"{source} describes a {task!r} run, not a {cls.task!r} run.")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{source} has unknown settings: {', '.join(unknown)}")
        return cls(**values)


def _parse(text: str, source: str) -> dict:
    try:
        values = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{source} is not valid JSON: {err}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{source} must hold a JSON object of settings.")
    return values


@dataclass
class TranslationConfig(_Config):
    """Model and training settings of a translation run (saved as config.json)."""

    task: ClassVar[str] = "translation"
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


@dataclass
class LanguageModelConfig(_Config):
    """Model and training settings of a language-model run (saved as config.json).

    The model is pre-LN with GELU and learned positions (GPT-2 style); `max_length`
    is the training window, and so the longest context the model can read.
    """

    task: ClassVar[str] = "language_model"
    # model
    num_layers: int = 2
    d_model: int = 128
    num_heads: int = 4
    dff: int = 512
    dropout_rate: float = 0.1
    max_length: int = 64
    # data and tokenizer
    text: str = ""
    vocab_size: int = 4000
    val_fraction: float = 0.05
    # training
    epochs: int = 10
    max_tokens: int = 4096
    warmup_steps: int = 400
    peak_learning_rate: float = 1e-3
    label_smoothing: float = 0.0
    average_last: int = 1
    seed: int = 0


@dataclass
class ClassificationConfig(_Config):
    """Model and training settings of a text-classification run (saved as config.json).

    `labels` are the class names in id order, fixed from the training data;
    `ngram_buckets` > 0 adds a hashed bigram embedding to each token's, and
    `schedule` is "noam" or "linear" (`training.schedule.warmup_schedule`).
    """

    task: ClassVar[str] = "classification"
    # model
    num_layers: int = 2
    d_model: int = 128
    num_heads: int = 4
    dff: int = 512
    key_dim: int | None = None
    dropout_rate: float = 0.1
    pooling: str = "mean"
    hidden_units: int = 0
    ngram_buckets: int = 0
    ngram_dropout: float = 0.0
    max_length: int = 512
    truncation: str = "head_tail"
    labels: list = field(default_factory=list)
    # data and tokenizer
    data: dict = field(default_factory=dict)
    vocab_size: int = 16000
    lowercase: bool = True
    # training
    epochs: int = 4
    max_tokens: int = 16384
    max_batch_size: int | None = None
    warmup_steps: int = 200
    peak_learning_rate: float = 1e-3
    schedule: str = "noam"
    average_last: int = 1
    seed: int = 0
    mixed_precision: bool = False

    def __post_init__(self):
        validation.one_of(self.schedule, SCHEDULES, "schedule")


RunConfig = TranslationConfig | LanguageModelConfig | ClassificationConfig
CONFIG_CLASSES = {
    cls.task: cls for cls in (TranslationConfig, LanguageModelConfig, ClassificationConfig)
}


def config_from_json(text: str, source: str = "config") -> RunConfig:
    """The config of the run kind named by the JSON's "task" (translation if absent)."""
    task = _parse(text, source).get("task", TranslationConfig.task)
    if task not in CONFIG_CLASSES:
        raise ValueError(
            f"{source} has unknown task {task!r}; expected one of {sorted(CONFIG_CLASSES)}."
        )
    return CONFIG_CLASSES[task].from_json(text, source)


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
    def create(cls, path: str | Path, config: RunConfig, overwrite: bool = False):
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

    def save_config(self, config: RunConfig) -> None:
        atomic_write(self.config_path, lambda f: f.write(config.to_json().encode()))

    def config(self, expected: type[RunConfig] | None = None) -> RunConfig:
        """The run's config; with `expected`, a ValueError if the run is of another kind."""
        text = self.config_path.read_text()
        if expected is None:
            return config_from_json(text, str(self.config_path))
        return expected.from_json(text, str(self.config_path))

    def checkpoint_path(self, epoch: int) -> Path:
        return self.checkpoint_dir / f"epoch-{epoch:04d}.npz"

    def checkpoints(self) -> list[Path]:
        """Epoch checkpoints, oldest first."""
        return sorted(self.checkpoint_dir.glob("epoch-*.npz"))

    @staticmethod
    def epoch_of(checkpoint: Path) -> int:
        return int(checkpoint.stem.split("-")[1])

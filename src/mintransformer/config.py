"""Run configuration: one dataclass per task, and the named presets.

A config holds every setting of a run, model and training alike, and is saved as
the run's `config.json`. Each setting has one name everywhere: the field here, the
command-line flag (`num_layers` <-> `--num-layers`) and, where the setting is a
layer's, the layer argument. Fields with a `help` text are command-line flags.

    from mintransformer.config import PRESETS, make_config
    config = make_config("translation", "base", epochs=5)

The dataclass defaults are the "base" preset of each task; other presets list
only what they change.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mintransformer.core import checks
from mintransformer.core.errors import CorruptFileError

SCHEDULES = ("noam", "linear")
SCHEDULE_HELP = (
    "learning-rate decay after warm-up (linear: to zero after the last epoch, or when the "
    "--minutes budget runs out)"
)
EMBEDDING_INITS = ("uniform", "normal")
TRUNCATIONS = ("head", "tail", "head_tail")
POOLINGS = ("mean", "cls")
# The layout of a saved config. A config file without "format_version" was written
# before versions were recorded, in the layout of version 1.
FORMAT_VERSION = 1


def setting(default: Any, help: str | None = None, choices: tuple | None = None) -> Any:
    """A config field; with `help` it is also a command-line flag."""
    metadata = {"help": help, "choices": choices} if help else {}
    if isinstance(default, dict | list):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def vocabulary_size(value, name: str) -> int:
    """Returns `value` if it is an int with room for the special tokens and one more."""
    from mintransformer.data.tokenizer import Tokenizer

    smallest = len(Tokenizer.SPECIAL_TOKENS) + 1
    if checks.positive_int(value, name) < smallest:
        raise ValueError(
            f"`{name}` must be at least {smallest} (the {smallest - 1} special tokens and "
            f"one more), got {value!r}."
        )
    return value


# The check of each setting, by name (one name, one meaning, in every config); settings
# with choices are checked against them instead.
SETTING_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    # model
    "num_layers": checks.positive_int,
    "d_model": checks.positive_int,
    "num_heads": checks.positive_int,
    "dff": checks.positive_int,
    "key_dim": checks.optional(checks.positive_int),
    "dropout_rate": checks.unit_interval,
    "attention_dropout_rate": checks.optional(checks.unit_interval),
    "norm_first": checks.boolean,
    "tie_embeddings": checks.boolean,
    "share_embeddings": checks.boolean,
    "hidden_units": checks.non_negative_int,
    "ngram_buckets": checks.non_negative_int,
    "ngram_dropout": checks.unit_interval,
    "max_length": checks.positive_int,
    "activation": checks.of_type(str),
    "layer_norm_epsilon": checks.positive_number,
    "labels": checks.of_type(list),
    # data and tokenizer
    "data": checks.of_type(dict),
    "text": checks.of_type(str),
    "val_fraction": checks.fraction,
    "vocab_size": vocabulary_size,
    "lowercase": checks.boolean,
    # training
    "epochs": checks.positive_int,
    "max_tokens": checks.positive_int,
    "max_batch_size": checks.optional(checks.positive_int),
    "warmup_steps": checks.positive_int,
    "peak_learning_rate": checks.positive_number,
    "label_smoothing": checks.unit_interval,
    "average_last": checks.positive_int,
    "minutes": checks.non_negative_number,
    "seed": checks.non_negative_int,
    "mixed_precision": checks.optional(checks.boolean),
}


class _Config:
    """Checks and JSON (de)serialisation shared by the run configs; `task` names the kind
    of run."""

    task: ClassVar[str]
    # Settings added after runs were first saved: a config file without one of them
    # was written before it existed, and gets the value that reproduces that run.
    before_setting_existed: ClassVar[dict[str, Any]] = {}

    def __post_init__(self):
        """Refuses a setting of the wrong type or out of range (ValueError naming it)."""
        for setting in dataclasses.fields(self):
            value = getattr(self, setting.name)
            if setting.metadata.get("choices"):
                checks.one_of(value, setting.metadata["choices"], setting.name)
            else:
                SETTING_CHECKS[setting.name](value, setting.name)
        if getattr(self, "key_dim", None) is None:
            checks.heads_divide(self.d_model, self.num_heads)

    def to_json(self) -> str:
        values = {"task": self.task, "format_version": FORMAT_VERSION, **dataclasses.asdict(self)}
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
            raise ValueError(
                f"{source} has unknown settings: {', '.join(unknown)} (remove them, or "
                "upgrade mintransformer if a newer version wrote this run)"
            )
        try:
            return cls(**{**cls.before_setting_existed, **values})
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None


def _parse(text: str, source: str) -> dict:
    """The settings in a config's JSON text, without its "format_version"."""
    if not text.strip():
        raise CorruptFileError(source, "is corrupt: empty")
    try:
        values = json.loads(text)
    except json.JSONDecodeError as err:
        raise CorruptFileError(source, f"is corrupt: not valid JSON ({err})") from None
    if not isinstance(values, dict):
        raise CorruptFileError(source, "is corrupt: it must hold a JSON object of settings")
    version = values.pop("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{source} has format version {version!r}, newer than this mintransformer "
            f"reads ({FORMAT_VERSION}): upgrade mintransformer to use this run."
        )
    return values


@dataclass
class TranslationConfig(_Config):
    """Settings of a translation run. Defaults: the `base` preset (Multi30k-sized).

    The recipe (pre-LN, no dropout on attention weights, normal embedding init) won
    short A/B runs on Multi30k, and a linear decay won 60-minute runs on both EN->FR and
    EN->DE. Residual dropout 0.3 won the 60-minute runs where bf16 trains about three
    times the steps of fp32 in the hour; in fp32's fewer steps 0.2 did better
    (docs/training.md).

    `max_length` sizes both position tables (the Transformer's `pe_input` and
    `pe_target`); `data` describes the corpus (`data.corpora`).
    """

    task: ClassVar[str] = "translation"
    before_setting_existed: ClassVar[dict[str, Any]] = dict(
        attention_dropout_rate=None,
        share_embeddings=False,
        embedding_init="uniform",
        schedule="noam",
        layer_norm_epsilon=1e-6,
    )
    # model
    num_layers: int = setting(3, "encoder layers and decoder layers (each)")
    d_model: int = setting(256, "model width")
    num_heads: int = setting(4, "attention heads")
    dff: int = setting(1024, "feed-forward inner width")
    dropout_rate: float = setting(0.3, "dropout rate")
    attention_dropout_rate: float | None = setting(
        0.0, "dropout on attention weights (none: the dropout rate)"
    )
    norm_first: bool = setting(True, "pre-LN blocks with a final LayerNorm")
    tie_embeddings: bool = setting(True, "output projection tied to the target embedding")
    share_embeddings: bool = setting(False, "one embedding matrix for source and target")
    embedding_init: str = setting(
        "normal", "token embedding initialiser (normal: N(0, d_model^-0.5))", EMBEDDING_INITS
    )
    max_length: int = setting(128, "longest source or target sequence, in tokens")
    # Not flags: set by imported models (`mintransformer import hf`).
    activation: str = setting("relu")
    # PyTorch's and transformers' value, so that exports compute exactly our function.
    layer_norm_epsilon: float = setting(1e-5)
    # data and tokenizer
    data: dict = setting({})
    vocab_size: int = setting(8000, "joint BPE vocabulary size")
    # training
    epochs: int = setting(20, "training epochs")
    # Smaller batches learn more per minute on a CPU (docs/training.md).
    max_tokens: int = setting(2560, "padded tokens per batch")
    warmup_steps: int = setting(640, "learning-rate warm-up steps")
    peak_learning_rate: float = setting(1e-3, "highest learning rate, after warm-up")
    schedule: str = setting("linear", SCHEDULE_HELP, SCHEDULES)
    label_smoothing: float = setting(0.1, "label smoothing")
    average_last: int = setting(2, "average the last N epoch checkpoints into the result")
    minutes: float = setting(0.0, "training time budget in minutes (0: none)")
    seed: int = setting(0, "random seed")
    mixed_precision: bool | None = setting(None)


@dataclass
class LanguageModelConfig(_Config):
    """Settings of a language-model run (GPT-2 style: pre-LN, GELU, learned positions).

    `max_length` is the training window, and so the longest context the model reads.
    """

    task: ClassVar[str] = "language_model"
    # model
    num_layers: int = setting(2, "blocks")
    d_model: int = setting(128, "model width")
    num_heads: int = setting(4, "attention heads")
    dff: int = setting(512, "feed-forward inner width")
    dropout_rate: float = setting(0.1, "dropout rate")
    max_length: int = setting(64, "training window and longest context, in tokens")
    # data and tokenizer
    text: str = setting("")
    vocab_size: int = setting(4000, "BPE vocabulary size")
    val_fraction: float = setting(0.05, "the end of the text held out for validation")
    # training
    epochs: int = setting(10, "training epochs")
    max_tokens: int = setting(4096, "tokens per batch")
    warmup_steps: int = setting(400, "learning-rate warm-up steps")
    peak_learning_rate: float = setting(1e-3, "highest learning rate, after warm-up")
    label_smoothing: float = setting(0.0, "label smoothing")
    average_last: int = setting(1, "average the last N epoch checkpoints into the result")
    minutes: float = setting(0.0, "training time budget in minutes (0: none)")
    seed: int = setting(0, "random seed")


@dataclass
class ClassificationConfig(_Config):
    """Settings of a text-classification run. Defaults: the `base` preset (IMDB).

    `labels` are the class names in id order, fixed from the training data;
    `ngram_buckets` > 0 adds a hashed bigram embedding to each token's.
    """

    task: ClassVar[str] = "classification"
    # model
    num_layers: int = setting(1, "encoder layers")
    d_model: int = setting(64, "model width")
    num_heads: int = setting(4, "attention heads")
    dff: int = setting(256, "feed-forward inner width")
    key_dim: int | None = setting(None)
    dropout_rate: float = setting(0.3, "dropout rate")
    attention_dropout_rate: float | None = setting(
        None, "dropout on attention weights (none: the dropout rate)"
    )
    pooling: str = setting("mean", "how token vectors become one", POOLINGS)
    hidden_units: int = setting(0)
    ngram_buckets: int = setting(0, "rows of a hashed bigram embedding (0: none)")
    ngram_dropout: float = setting(0.0, "rate at which whole bigram vectors are dropped")
    max_length: int = setting(512, "longest text, in tokens")
    truncation: str = setting("head_tail", "which tokens a long text keeps", TRUNCATIONS)
    labels: list = setting([])
    # data and tokenizer
    data: dict = setting({})
    vocab_size: int = setting(16000, "BPE vocabulary size")
    lowercase: bool = setting(True)
    # training
    epochs: int = setting(2, "training epochs")
    max_tokens: int = setting(16384, "padded tokens per batch")
    max_batch_size: int | None = setting(None)
    warmup_steps: int = setting(200, "learning-rate warm-up steps")
    peak_learning_rate: float = setting(2e-3, "highest learning rate, after warm-up")
    schedule: str = setting("noam", SCHEDULE_HELP, SCHEDULES)
    average_last: int = setting(2, "average the last N epoch checkpoints into the result")
    minutes: float = setting(0.0, "training time budget in minutes (0: none)")
    seed: int = setting(0, "random seed")
    mixed_precision: bool | None = setting(None)


RunConfig = TranslationConfig | LanguageModelConfig | ClassificationConfig
CONFIG_CLASSES = {
    cls.task: cls for cls in (TranslationConfig, LanguageModelConfig, ClassificationConfig)
}

# fmt: off
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "translation": {
        "base": {},
        # The embedded demo: small enough to train in about two minutes on two CPU cores.
        # 1500-token batches (twice the steps of 3000) and a seventh epoch are what gets every
        # number below 1000 right, at every seed tried (docs/translation.md#the-demo).
        "numbers": dict(num_layers=2, d_model=128, dff=512, dropout_rate=0.0, vocab_size=600,
                        epochs=7, max_tokens=1500, warmup_steps=300, peak_learning_rate=2e-3,
                        max_length=64, schedule="linear"),
    },
    "classification": {
        # One layer, 512 tokens (head + tail), a 16k vocabulary: two layers or d_model 128
        # were no more accurate and slower, and the model overfits after 2 epochs, hence 2
        # epochs at dropout 0.3 (docs/classification.md).
        "base": {},
        # A small Keras-tutorial classifier: BPE 5000, the last 200 tokens (what
        # `pad_sequences` keeps), one block, d 64, 4 heads of key_dim 64, ff 128, a
        # Dense(64) ReLU layer, batches of 64, 3 epochs of Adam at 1e-3.
        "seed": dict(key_dim=64, dff=128, hidden_units=64, dropout_rate=0.1, vocab_size=5000,
                     max_length=200, truncation="tail", epochs=3, max_tokens=64 * 200,
                     max_batch_size=64, warmup_steps=100, peak_learning_rate=1e-3,
                     average_last=1),
    },
    "language_model": {"base": {}},
}
# fmt: on


def make_config(task: str, preset: str = "base", **settings: Any) -> RunConfig:
    """The config of `task` from a preset, with `settings` overriding it.

    Raises:
        ValueError: for an unknown task, preset or setting name.
    """
    checks.one_of(task, CONFIG_CLASSES, "task")
    checks.one_of(preset, PRESETS[task], "preset")
    config_class = CONFIG_CLASSES[task]
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(config_class)})
    if unknown:
        raise ValueError(f"{task} runs have no setting {', '.join(map(repr, unknown))}.")
    return config_class(**{**PRESETS[task][preset], **settings})


def flag_fields(config_class: type[RunConfig]) -> list[dataclasses.Field]:
    """The fields of `config_class` that are command-line flags (those with help)."""
    return [f for f in dataclasses.fields(config_class) if f.metadata.get("help")]


# Short flags kept beside the full setting names.
FLAG_ALIASES = {
    "num_layers": ("--layers",),
    "num_heads": ("--heads",),
    "dropout_rate": ("--dropout",),
    "warmup_steps": ("--warmup",),
    "peak_learning_rate": ("--lr",),
}
FLAG_TYPES = {"int": int, "float": float, "str": str, "int | None": int, "float | None": float}


def flag_names(name: str) -> tuple[str, ...]:
    """The command-line flags of the setting `name`: `--num-layers` and its aliases."""
    return (f"--{name.replace('_', '-')}", *FLAG_ALIASES.get(name, ()))


def in_flag_terms(message: str, names: Iterable[str]) -> str:
    """`message` with each of the settings or flag destinations `names`, written `name` as
    the checks write it, named by its flags instead ("`--num-layers` (`--layers`)")."""
    for name in names:
        flag, *aliases = flag_names(name)
        named = f"`{flag}`" + "".join(f" (`{alias}`)" for alias in aliases)
        message = message.replace(f"`{name}`", named)
    return message


def add_config_flags(parser: argparse.ArgumentParser, task: str) -> None:
    """`--preset` and one flag per setting of the task's config (`num_layers` -> `--num-layers`),
    each None unless given."""
    default_preset = "numbers" if task == "translation" else "base"
    parser.add_argument("--preset", choices=sorted(PRESETS[task]), default=default_preset)
    group = parser.add_argument_group("model and training (override the preset)")
    for setting in flag_fields(CONFIG_CLASSES[task]):
        names = flag_names(setting.name)
        options = dict(dest=setting.name, help=setting.metadata["help"], default=None)
        if setting.type == "bool":
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = FLAG_TYPES[setting.type]
            options["choices"] = setting.metadata.get("choices")
        group.add_argument(*names, **options)


def flag_overrides(args: argparse.Namespace, config_class: type[RunConfig]) -> dict:
    """The settings of `config_class` given as flags (`add_config_flags`; left out: None)."""
    values = {f.name: getattr(args, f.name, None) for f in flag_fields(config_class)}
    return {name: value for name, value in values.items() if value is not None}


def config_from_json(text: str, source: str = "config") -> RunConfig:
    """The config of the run kind named by the JSON's "task" (translation if absent)."""
    task = _parse(text, source).get("task", TranslationConfig.task)
    if not isinstance(task, str) or task not in CONFIG_CLASSES:
        raise ValueError(
            f"{source} has unknown task {task!r}; expected one of {sorted(CONFIG_CLASSES)}."
        )
    return CONFIG_CLASSES[task].from_json(text, source)

"""Command-line flags to settings: their checks, the config of a new run, and what
`--resume` may be given.

The command line (`cli`) parses; this module turns what it parsed into the arguments of
the library's calls, refusing what would be ignored or is out of range before anything
is written.
"""

from __future__ import annotations

import argparse
import sys

from mintransformer.config import in_flag_terms
from mintransformer.core import checks

# The flags a resumed run uses; any other given with --resume would be ignored.
RESUME_FLAGS = frozenset(
    ("run", "resume", "backend", "verbose", "report", "beam", "alpha")
    + ("distribute", "devices", "coordinator", "num_processes", "process_id")
)
# Flags checked before a command starts (the config's settings are checked by the config).
FLAG_CHECKS = {
    "verbose": checks.non_negative_int,
    "report": checks.non_negative_int,
    "beam": checks.positive_int,
    "alpha": lambda value, name: value if value == "val" else checks.finite_number(value, name),
    "num_train": checks.positive_int,
}


def alpha_or_val(text: str) -> float | str:
    """`--alpha`'s value where it may be "val" (chosen on the validation split)."""
    if text == "val":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or 'val', not {text!r}") from None


def _flag(dest: str) -> str:
    """The flag of an argparse destination: `val_fraction` -> `--val-fraction`."""
    return "--" + dest.replace("_", "-")


def check_flags(args: argparse.Namespace) -> None:
    """Refuses a bad value of a flag in `FLAG_CHECKS` (ValueError naming the flag)."""
    for name, check in FLAG_CHECKS.items():
        if hasattr(args, name):
            check(getattr(args, name), _flag(name))


def _parsers(parser: argparse.ArgumentParser):
    """`parser` and every sub-command's parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def options_written(parser: argparse.ArgumentParser, argv: list[str] | None) -> dict[str, str]:
    """`{dest: flag}` of the options written in `argv`, at their default value too.

    `parser` must be a fresh one, not used for anything else: it is changed here, every
    option losing its default, so that parsing `argv` again sets only what was written
    (abbreviated, `--flag=value` or `--no-flag` forms included)."""
    for each in _parsers(parser):
        for action in each._actions:
            if action.option_strings:
                action.default = argparse.SUPPRESS
    values = vars(parser.parse_args(argv))
    command = values.get("command_parser", parser)
    return {
        action.dest: action.option_strings[0]
        for action in command._actions
        if action.option_strings and action.dest in values
    }


def resuming(args: argparse.Namespace) -> bool:
    """Whether to continue the run in --run; refuses flags that resuming would ignore."""
    if not args.resume:
        return False
    ignored = [flag for dest, flag in args.written.items() if dest not in RESUME_FLAGS]
    if ignored:
        raise ValueError(
            "--resume continues the run with its own config.json; these flags would be "
            f"ignored: {', '.join(ignored)}"
        )
    return True


def new_config(args: argparse.Namespace, task: str, **settings):
    """The preset's config with the flags' settings and `settings`; a bad setting's
    ValueError names its flag."""
    from mintransformer.config import CONFIG_CLASSES, flag_fields, flag_overrides, make_config

    config_class = CONFIG_CLASSES[task]
    overrides = flag_overrides(args, config_class)
    try:
        return make_config(task, args.preset, **{**overrides, **settings})
    except ValueError as err:
        names = (setting.name for setting in flag_fields(config_class))
        raise ValueError(in_flag_terms(str(err), names)) from None


# The data flags each kind of translation corpus reads (`corpora.corpus_spec`), and what
# the corpus is called in the error naming the others.
CORPUS_FLAGS = {
    "tsv": ("tsv", "val_fraction", "test_fraction"),
    "parallel": ("train", "val", "test", "src", "tgt"),
    "numbers": ("num_train",),
}
CORPUS_READS = {
    "tsv": "a --tsv file reads",
    "parallel": "parallel files (--train) read",
    "numbers": "the built-in numbers corpus (no --train or --tsv) reads",
}


def refuse_ignored_flags(args: argparse.Namespace, ignored: set[str], why: str) -> None:
    """Raises ValueError naming the flags given whose destinations are in `ignored`."""
    names = [flag for dest, flag in args.written.items() if dest in ignored]
    if names:
        raise ValueError(f"{', '.join(names)} would be ignored: {why}")


def translation_config(args):
    """A new translation run's config: the corpus the data flags name, and the settings.
    Refuses data flags that the corpus they name does not read."""
    from mintransformer.data import corpora

    kind = "tsv" if args.tsv else "parallel" if args.train else "numbers"
    used = CORPUS_FLAGS[kind]
    refuse_ignored_flags(
        args,
        {dest for dests in CORPUS_FLAGS.values() for dest in dests} - set(used),
        f"{CORPUS_READS[kind]} only {', '.join(_flag(dest) for dest in used)}",
    )
    try:
        data = corpora.corpus_spec(
            **{k: getattr(args, k) for k in ("train", "val", "test", "src", "tgt", "tsv")},
            val_fraction=args.val_fraction,
            test_fraction=args.test_fraction,
            seed=args.seed or 0,
            num_train=args.num_train,
        )
        if args.mix_tsv:
            data = corpora.with_mix(data, args.mix_tsv, args.mix_ratio, seed=args.seed or 0)
    except ValueError as err:
        raise ValueError(in_flag_terms(str(err), (*used, "mix_ratio"))) from None
    if not args.mix_tsv:
        refuse_ignored_flags(args, {"mix_ratio"}, "it sets how much of --mix-tsv is mixed in")
    return new_config(args, "translation", data=data, mixed_precision=args.bf16)


def classification_config(args):
    """A new classification run's config: the labelled files the flags name, and the settings."""
    from mintransformer.data.labelled import data_spec

    if args.train is None:
        raise ValueError("--train is required: a labelled .jsonl/.csv file or class folders")
    if args.val is not None:
        refuse_ignored_flags(args, {"val_fraction"}, "--val gives the validation texts")
    try:
        data = data_spec(args.train, args.val, args.test, args.val_fraction)
    except ValueError as err:
        raise ValueError(in_flag_terms(str(err), ("val_fraction",))) from None
    return new_config(args, "classification", data=data, mixed_precision=args.bf16)


def language_model_config(args):
    """A new language-model run's config: the --text file, and the settings."""
    if args.text is None:
        raise ValueError("--text FILE is required: the text file to train on")
    return new_config(args, "language_model", text=str(args.text.resolve()))


def interrupted_message(args: argparse.Namespace) -> str:
    """What to print after Ctrl-C: for a training run that has begun, how to continue it."""
    from mintransformer.runs.directory import RunDirectory

    if args.command != "train" or not RunDirectory(args.run).config_path.is_file():
        return "interrupted"
    command = f"mintransformer train {args.task} --run {args.run} --resume"
    return f"interrupted; continue with `{command}`"


def resolve_engine_flag(args: argparse.Namespace) -> str:
    """The engine the command runs ("keras" for a command without --engine), with
    `args.engine`'s "auto" replaced by it: the run's export, else "keras" (always "keras"
    with --backend, which only the Keras engine takes); the choice is printed to stderr
    at --verbose 1 or more where an export was taken or passed over."""
    from mintransformer.inference.engines import AUTO, choose_engine

    if getattr(args, "engine", AUTO) != AUTO:
        return args.engine
    if not hasattr(args, "engine") or args.backend:
        args.engine = "keras"
        return "keras"
    choice = choose_engine(args.run)
    if choice.reason and args.verbose > 0:
        print(f"engine: {choice.engine} ({choice.reason})", file=sys.stderr)
    args.engine = choice.engine
    return choice.engine


def training_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of every trainer's `train`, from the flags."""
    from mintransformer.backend.distribution import data_parallel_from_flags

    flags = ("distribute", "devices", "coordinator", "num_processes", "process_id")
    return dict(
        resume=args.resume,
        overwrite=args.overwrite,
        verbose=args.verbose,
        data_parallel=data_parallel_from_flags(**{flag: getattr(args, flag) for flag in flags}),
    )

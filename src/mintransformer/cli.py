"""The `mintransformer` command line: demo, train, translate, classify, generate, evaluate, ...

This module only parses arguments and calls the library; everything here can be
done from Python too (`mintransformer.config`, `mintransformer.training.*`,
`Translator`, `Classifier`, `Generator`). Keras is imported only after the
arguments are read, so `--backend` can choose its backend.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
import warnings
from pathlib import Path

BACKENDS = ("tensorflow", "jax", "torch")
# Short flags kept beside the full setting names.
FLAG_ALIASES = {
    "num_layers": ("--layers",),
    "num_heads": ("--heads",),
    "dropout_rate": ("--dropout",),
    "warmup_steps": ("--warmup",),
    "peak_learning_rate": ("--lr",),
}
BF16_FLAG = dict(
    action=argparse.BooleanOptionalAction,
    default=None,
    help="bf16 mixed precision; --no-bf16: fp32 (default: bf16 only with AMX or a GPU)",
)
FLAG_TYPES = {"int": int, "float": float, "str": str, "int | None": int, "float | None": float}


def select_backend(backend: str | None, verbose: int) -> None:
    """Sets the Keras backend and starts Keras, quietly unless `verbose` >= 2."""
    if backend is not None and "keras" in sys.modules:
        import keras

        if keras.backend.backend() != backend:
            raise ValueError(
                f"Keras already runs on {keras.backend.backend()} in this process, so "
                f"--backend {backend} cannot take effect: choose it before Keras starts."
            )
    if backend is not None:
        os.environ["KERAS_BACKEND"] = backend
    if verbose < 2:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if "keras" not in sys.modules:
            _import_keras_quietly()


def _import_keras_quietly() -> None:
    """Imports Keras (and its backend) with the process's stderr closed: TensorFlow's C++
    start-up lines are written there before its log level can be set."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        sys.stderr.flush()
        os.dup2(devnull, 2)
        import keras  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def config_overrides(args: argparse.Namespace, config_class) -> dict:
    """The config settings given on the command line (flags left out are None)."""
    from mintransformer.config import flag_fields

    values = {f.name: getattr(args, f.name, None) for f in flag_fields(config_class)}
    return {name: value for name, value in values.items() if value is not None}


def _new_config(args, task: str, **settings):
    from mintransformer.config import CONFIG_CLASSES, make_config

    overrides = config_overrides(args, CONFIG_CLASSES[task])
    return make_config(task, args.preset, **{**overrides, **settings})


def train_translation_command(args) -> tuple:
    from mintransformer.data.corpora import corpus_spec
    from mintransformer.training import translation

    config = None
    if not args.resume:
        data = corpus_spec(
            **{k: getattr(args, k) for k in ("train", "val", "test", "src", "tgt", "tsv")},
            val_fraction=args.val_fraction,
            test_fraction=args.test_fraction,
            seed=args.seed or 0,
            num_train=args.num_train,
        )
        config = _new_config(args, "translation", data=data, mixed_precision=args.bf16)
    start = time.perf_counter()
    model, tokenizer, splits = translation.train(args.run, config, **training_options(args))
    print(f"trained in {time.perf_counter() - start:.0f} s; run directory: {args.run}")
    if args.report > 0:
        from mintransformer.translation import Translator

        held_out = (splits.get("test") or splits["val"])[: args.report]
        print(Translator(model, tokenizer).report(held_out, beam_size=args.beam))
    return model, tokenizer


def demo_command(args) -> None:
    """Train on the embedded number corpus, then score held-out numbers by magnitude."""
    args.preset, args.resume, args.overwrite, args.bf16 = "numbers", False, True, None
    args.train = args.val = args.test = args.src = args.tgt = args.tsv = args.seed = None
    args.val_fraction = args.test_fraction = 0.02
    per_magnitude, args.report = args.report, 0
    model, tokenizer = train_translation_command(args)
    if per_magnitude > 0:
        from mintransformer.data.corpora import number_splits, numbers_spec
        from mintransformer.data.numbers import magnitude_report
        from mintransformer.translation import Translator

        splits = number_splits(numbers_spec(num_train=args.num_train))
        translate = functools.partial(
            Translator(model, tokenizer).translate,
            beam_size=args.beam,
            alpha=args.alpha,
            progress=True,
        )
        print(magnitude_report(translate, splits["test"], splits["train"], per_magnitude))


def train_classification_command(args) -> None:
    from mintransformer.data.labelled import data_spec
    from mintransformer.training import classification

    config = None
    if not args.resume:
        if args.train is None:
            raise ValueError("--train is required: a labelled .jsonl/.csv file or class folders")
        data = data_spec(args.train, args.val, args.test, args.val_fraction)
        config = _new_config(args, "classification", data=data, mixed_precision=args.bf16)
    start = time.perf_counter()
    _, _, accuracy = classification.train(args.run, config, **training_options(args))
    print(f"trained in {time.perf_counter() - start:.0f} s; run directory: {args.run}")
    if accuracy is not None:
        print(f"test: {accuracy}")


def train_lm_command(args) -> None:
    from mintransformer.training import language_model

    config = None
    if not args.resume:
        if args.text is None:
            raise ValueError("--text FILE is required: the text file to train on")
        config = _new_config(args, "language_model", text=str(args.text.resolve()))
    start = time.perf_counter()
    language_model.train(args.run, config, **training_options(args))
    print(f"trained in {time.perf_counter() - start:.0f} s; run directory: {args.run}")


def _input_texts(args) -> list[str]:
    """Texts from the command line, else from --input, else from standard input."""
    if args.text:
        return args.text
    if args.input:
        from mintransformer.data.text import read_lines

        return read_lines(args.input)
    return sys.stdin.read().splitlines()


def translate_command(args) -> None:
    from mintransformer import streaming
    from mintransformer.translation import Translator

    lines, total = streaming.open_input(args.text, args.input)
    translator = Translator.from_run(args.run, engine=args.engine)
    translations = translator.translate_lines(
        lines,
        total=total,
        progress=args.verbose > 0 and not args.text,
        beam_size=args.beam,
        alpha=args.alpha,
    )
    streaming.write_lines(translations, args.output)


def classify_command(args) -> None:
    from mintransformer import streaming
    from mintransformer.classification import Classifier

    lines, total = streaming.open_input(args.text, args.input)
    classifier = Classifier.from_run(args.run, engine=args.engine)
    predictions = classifier.classify_lines(
        lines, total=total, progress=args.verbose > 0 and not args.text
    )
    streaming.write_lines(predictions, args.output)


def export_command(args) -> None:
    from mintransformer.export import export_run

    start = time.perf_counter()
    folder = export_run(args.run, args.output, int8=args.int8)
    print(f"exported in {time.perf_counter() - start:.0f} s to {folder}")


def generate_command(args) -> None:
    from mintransformer.generation import Generator

    texts = Generator.from_run(args.run, engine=args.engine).generate(
        args.prompt or [""],
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k or None,
        top_p=args.top_p,
        seed=args.seed,
    )
    print("\n\n".join(texts))


def evaluate_command(args) -> None:
    from mintransformer.config import ClassificationConfig
    from mintransformer.run import RunDirectory

    if args.engine == "onnx":
        from mintransformer.config import config_from_json
        from mintransformer.export_folder import ExportFolder

        folder, _ = ExportFolder.open(args.run)
        config = config_from_json(folder.config_path.read_text(), str(folder.config_path))
    else:
        config = RunDirectory.open(args.run).config()
    start = time.perf_counter()
    if isinstance(config, ClassificationConfig):
        from mintransformer.classification import Classifier

        if args.data is None:
            raise ValueError("a classification run is evaluated on --data FILE (labelled texts)")
        classifier = Classifier.from_run(args.run, engine=args.engine)
        result = classifier.evaluate(args.data, progress=args.verbose > 0)
    else:
        from mintransformer.translation import Translator

        translator = Translator.from_run(args.run, engine=args.engine)
        options = dict(beam_size=args.beam, alpha=args.alpha, progress=args.verbose > 0)
        if args.split:
            result = translator.evaluate_split(args.split, args.output, **options)
        elif args.src is not None and args.ref is not None:
            result = translator.evaluate(args.src, args.ref, args.output, **options)
        else:
            raise ValueError(
                "a translation run is evaluated on --src FILE and --ref FILE, or on --split "
                "val|test of the corpus it was trained on"
            )
    print(f"{result}  [{time.perf_counter() - start:.0f} s]")


def attention_command(args) -> None:
    from mintransformer import viz

    if args.kind == "positional":
        from mintransformer.run import RunDirectory

        d_model = RunDirectory.open(args.run, need_weights=False).config().d_model
        figure = viz.plot_positional_encoding(64, d_model)
    else:
        from mintransformer.translation import Translator

        if not args.text:
            raise ValueError('give the sentence to look at, e.g. "three hundred twelve"')
        maps = viz.attention_maps(Translator.from_run(args.run), args.text, args.translation)
        print(f"{args.text}  ->  {maps.translation}")
        if args.head is not None:
            figure = viz.plot_head(maps, args.kind, args.layer, args.head)
        elif args.mean:
            if args.kind != "cross":
                raise ValueError("--mean draws the cross-attention alignment: use --kind cross")
            figure = viz.plot_alignment(maps, args.layer)
        else:
            figure = viz.plot_layer(maps, args.kind, args.layer)
    print(f"wrote {viz.save_figure(figure, args.output)}")


def embed_command(args) -> None:
    import json

    import numpy as np

    from mintransformer.files import atomic_write
    from mintransformer.pretrained.minilm import sentence_embeddings

    texts = _input_texts(args)
    vectors = sentence_embeddings(texts, batch_size=args.batch_size)
    if args.output:
        output = Path(str(args.output).removesuffix(".npy") + ".npy")  # as np.save names it
        atomic_write(output, lambda f: np.save(f, vectors))
        print(f"wrote {len(texts)} embeddings of size {vectors.shape[1]} to {output}")
    else:
        for vector in vectors:
            print(json.dumps([round(float(v), 6) for v in vector]))


def _add_config_flags(parser, task: str, title: str) -> None:
    """`--preset` and one flag per setting of the task's config (`num_layers` -> `--num-layers`)."""
    from mintransformer.config import CONFIG_CLASSES, PRESETS, flag_fields

    presets = PRESETS[task]
    default_preset = "numbers" if task == "translation" else "base"
    parser.add_argument("--preset", choices=sorted(presets), default=default_preset)
    group = parser.add_argument_group(title)
    for field in flag_fields(CONFIG_CLASSES[task]):
        names = (f"--{field.name.replace('_', '-')}", *FLAG_ALIASES.get(field.name, ()))
        options = dict(dest=field.name, help=field.metadata["help"], default=None)
        if field.type == "bool":
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = FLAG_TYPES[field.type]
            options["choices"] = field.metadata.get("choices")
        group.add_argument(*names, **options)


def _add_decoding_flags(parser) -> None:
    parser.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent")


def _add_run_flags(parser, what: str) -> None:
    parser.add_argument("--run", type=Path, required=True, help="run directory")
    parser.add_argument("--resume", action="store_true", help=f"continue an interrupted {what}")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run")


def _add_parallel_flags(parser) -> None:
    group = parser.add_argument_group("data-parallel training (JAX backend: keras.distribution)")
    group.add_argument(
        "--distribute", choices=["data"], help="replicate the model, split every batch"
    )
    group.add_argument("--devices", type=int, help="devices per process (default: all)")
    group.add_argument("--coordinator", help="HOST:PORT of process 0, with several processes")
    group.add_argument("--num-processes", type=int, default=1, help="processes (hosts)")
    group.add_argument("--process-id", type=int, default=0, help="this process's index")


def data_parallel_options(args):
    """The `DataParallel` that the flags describe, or None without --distribute."""
    given = [flag for flag in ("devices", "coordinator") if getattr(args, flag, None)]
    given += ["num_processes"] if getattr(args, "num_processes", 1) != 1 else []
    if getattr(args, "distribute", None) is None:
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ValueError(f"{flags}: these flags apply only with --distribute data")
        return None
    from mintransformer.training.data_parallel import DataParallel

    return DataParallel(args.devices, args.coordinator, args.num_processes, args.process_id)


def training_options(args) -> dict:
    """The keyword arguments of every trainer's `train`, from the flags."""
    return dict(
        resume=args.resume,
        overwrite=args.overwrite,
        verbose=args.verbose,
        data_parallel=data_parallel_options(args),
    )


def request_host_devices(args) -> None:
    """Asks XLA for `--devices` CPU devices; it reads the flag once, when JAX starts."""
    if getattr(args, "distribute", None) and args.devices and "jax" not in sys.modules:
        flag = f"--xla_force_host_platform_device_count={args.devices}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()


def _add_engine_flag(parser) -> None:
    from mintransformer.export_folder import ENGINES

    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="keras",
        help="keras: the run's weights; onnx: its export (`mintransformer export`) on "
        "onnxruntime, without Keras; --run may then name the export folder",
    )


def _add_inference_flags(parser, what: str) -> None:
    """--run, the input and output of `translate` / `classify`, and --engine."""
    parser.add_argument("--run", type=Path, required=True)
    _add_input_flags(parser, what)
    _add_output_flag(parser)
    _add_engine_flag(parser)


def _add_input_flags(parser, what: str) -> None:
    parser.add_argument("text", nargs="*", help=f"{what} (default: --input or stdin)")
    parser.add_argument("--input", type=Path, help=f"file with one of the {what} per line")


def _add_output_flag(parser) -> None:
    parser.add_argument(
        "--output", type=Path, help="write the results here (default: standard output)"
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", choices=BACKENDS, help="Keras backend (default: Keras')")
    common.add_argument(
        "--verbose",
        type=int,
        nargs="?",
        const=2,
        default=1,
        help="0 quiet, 1 progress bars (default), 2 (or no value) also the backend's log",
    )
    parser = argparse.ArgumentParser(prog="mintransformer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def add(group, name: str, help: str, run_command):
        sub = group.add_parser(name, help=help, parents=[common])
        sub.set_defaults(run_command=run_command)
        return sub

    demo = add(commands, "demo", "train on built-in EN->FR numbers, translate", demo_command)
    demo.add_argument("--run", type=Path, default=Path("runs/numbers"))
    demo.add_argument("--num-train", type=int, default=30_000)
    demo.add_argument(
        "--report", type=int, default=200, help="held-out numbers scored per magnitude (0: none)"
    )
    _add_decoding_flags(demo)

    tasks = commands.add_parser("train", help="train a model").add_subparsers(
        dest="task", required=True
    )
    translation = add(tasks, "translation", "train a translation model", train_translation_command)
    _add_run_flags(translation, "run")
    data = translation.add_argument_group("data (default: the built-in numbers corpus)")
    data.add_argument("--train", help="training files prefix (PREFIX.SRC, PREFIX.TGT)")
    data.add_argument("--val", help="validation files prefix")
    data.add_argument("--test", help="test files prefix (reported after training)")
    data.add_argument("--src", help="source language suffix, e.g. en")
    data.add_argument("--tgt", help="target language suffix, e.g. fr")
    data.add_argument("--tsv", help="SRC<TAB>TGT file (.gz ok), split by source sentence")
    data.add_argument("--val-fraction", type=float, default=0.02)
    data.add_argument("--test-fraction", type=float, default=0.02)
    data.add_argument("--num-train", type=int, default=30_000, help="numbers corpus size")
    _add_config_flags(translation, "translation", "model and training (override the preset)")
    translation.add_argument("--bf16", **BF16_FLAG)
    _add_parallel_flags(translation)
    translation.add_argument(
        "--report", type=int, default=1000, help="held-out sentences translated after training"
    )
    _add_decoding_flags(translation)

    classification = add(
        tasks,
        "classification",
        "train an encoder-only text classifier (e.g. IMDB sentiment)",
        train_classification_command,
    )
    _add_run_flags(classification, "run")
    labelled = classification.add_argument_group(
        "data: .jsonl / .csv (text, label; .gz ok) or a folder of class folders (aclImdb)"
    )
    labelled.add_argument("--train", help="training texts (the tokenizer is trained on these)")
    labelled.add_argument("--val", help="validation texts (default: carved from --train)")
    labelled.add_argument("--val-fraction", type=float, default=0.1)
    labelled.add_argument("--test", help="test texts, scored once after training")
    _add_config_flags(classification, "classification", "model and training (override the preset)")
    classification.add_argument("--bf16", **BF16_FLAG)
    _add_parallel_flags(classification)

    lm = add(tasks, "lm", "train a decoder-only language model on a text file", train_lm_command)
    _add_run_flags(lm, "run")
    lm.add_argument("--text", type=Path, help="UTF-8 text file to train on (one line each)")
    _add_config_flags(lm, "language_model", "model and training (override the defaults)")
    _add_parallel_flags(lm)

    translate = add(commands, "translate", "translate text with a trained run", translate_command)
    _add_inference_flags(translate, "sentences")
    _add_decoding_flags(translate)

    classify = add(commands, "classify", "label text with a trained classifier", classify_command)
    _add_inference_flags(classify, "texts")

    export = add(commands, "export", "export a run to ONNX (needs TensorFlow)", export_command)
    export.add_argument("--run", type=Path, required=True)
    export.add_argument("-o", "--output", type=Path, help="export folder (default: RUN/onnx)")
    export.add_argument("--int8", action="store_true", help="int8 weights (dynamic quantization)")

    evaluate = add(
        commands,
        "evaluate",
        "sacreBLEU and chrF of a translation run, accuracy of a classifier",
        evaluate_command,
    )
    evaluate.add_argument("--run", type=Path, required=True)
    evaluate.add_argument("--src", type=Path, help="translation: source sentences")
    evaluate.add_argument("--ref", type=Path, help="translation: reference translations")
    evaluate.add_argument(
        "--split", choices=["val", "test"], help="translation: a split of the run's own corpus"
    )
    evaluate.add_argument("--data", type=Path, help="classification: labelled texts")
    evaluate.add_argument("--output", type=Path, help="write the hypotheses here")
    _add_decoding_flags(evaluate)
    _add_engine_flag(evaluate)

    attention = add(commands, "attention", "plot a trained model's attention", attention_command)
    attention.add_argument("--run", type=Path, required=True)
    attention.add_argument("text", nargs="?", help="source sentence")
    attention.add_argument("--translation", help="target to force (default: the model's)")
    attention.add_argument(
        "--kind", choices=["cross", "encoder", "decoder", "positional"], default="cross"
    )
    attention.add_argument("--layer", type=int, default=1)
    attention.add_argument("--head", type=int, help="one head (default: all heads in a grid)")
    attention.add_argument("--mean", action="store_true", help="cross: mean over heads")
    attention.add_argument("-o", "--output", type=Path, required=True, help=".png or .svg")

    embed = add(
        commands, "embed", "sentence embeddings from all-MiniLM-L6-v2 in our Encoder", embed_command
    )
    _add_input_flags(embed, "sentences")
    embed.add_argument("--output", type=Path, help="save a (n, 384) .npy instead of printing")
    embed.add_argument("--batch-size", type=int, default=32)

    gen = add(commands, "generate", "continue text with a language model", generate_command)
    gen.add_argument("--run", type=Path, required=True)
    gen.add_argument("prompt", nargs="*", help="prompts (default: one empty prompt)")
    gen.add_argument("--max-new-tokens", type=int, default=50)
    gen.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    gen.add_argument("--top-k", type=int, default=40, help="0 = no top-k filtering")
    gen.add_argument("--top-p", type=float, default=0.95, help="nucleus mass; 1 = no filtering")
    gen.add_argument("--seed", type=int, default=0)
    _add_engine_flag(gen)
    return parser


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as one line, `warning: ...`, like the errors (no source location)."""
    return f"warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    from mintransformer.errors import USER_ERRORS

    warnings.formatwarning = _format_warning
    args = build_parser().parse_args(argv)
    try:
        request_host_devices(args)
        if getattr(args, "engine", "keras") == "keras":
            select_backend(args.backend, args.verbose)
        args.run_command(args)
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

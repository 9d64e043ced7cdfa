"""The `mintransformer` command line: demo, train, translate, classify, generate, evaluate, ...

This package only parses arguments (here) and turns the flags into the library's
arguments (`flags`); everything it does can be done from Python too
(`mintransformer.config`, `mintransformer.training.*`, `Translator`, `Classifier`,
`Generator`). Keras is imported only after the arguments are read, so `--backend` can
choose its backend.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from mintransformer.backend.selection import BACKENDS
from mintransformer.cli.flags import (
    alpha_or_val,
    check_flags,
    classification_config,
    interrupted_message,
    language_model_config,
    options_written,
    resolve_engine_flag,
    resuming,
    training_options,
    translation_config,
)

# The splits `evaluate --split` scores: the run's corpus's, and its --mix-tsv's.
SPLITS = ("val", "test", "mix_val", "mix_test")


def demo_command(args) -> None:
    from mintransformer.training.demo import run_demo

    run_demo(
        args.run,
        args.num_train,
        args.report,
        args.beam,
        args.alpha,
        args.verbose,
        overwrite=args.overwrite,
    )


def train_translation_command(args) -> None:
    from mintransformer.training import translation

    config = None if resuming(args) else translation_config(args)
    options = training_options(args)
    translation.train(args.run, config, report=args.report, beam_size=args.beam, **options)


def train_classification_command(args) -> None:
    from mintransformer.training import classification

    config = None if resuming(args) else classification_config(args)
    classification.train(args.run, config, **training_options(args))


def train_lm_command(args) -> None:
    from mintransformer.training import language_model

    config = None if resuming(args) else language_model_config(args)
    language_model.train(args.run, config, **training_options(args))


def stream_command(args) -> None:
    """`translate` or `classify`: the texts given, or a file or standard input a chunk at
    a time, each result written as it comes."""
    from mintransformer.inference import streaming

    lines, total = streaming.open_input(args.text, args.input)
    options = dict(total=total, progress=args.verbose > 0 and not args.text)
    if args.command == "translate":
        from mintransformer.inference.translator import Translator

        translator = Translator.from_run(args.run, engine=args.engine)
        results = translator.translate_lines(
            lines, beam_size=args.beam, alpha=args.alpha, **options
        )
    else:
        from mintransformer.inference.classifier import Classifier

        results = Classifier.from_run(args.run, engine=args.engine).classify_lines(lines, **options)
    streaming.write_lines(results, args.output)


def export_command(args) -> None:
    start = time.perf_counter()
    if args.format == "hf":
        from mintransformer.interop.hf_export import export_run

        if args.output is None or args.int8:
            raise ValueError("--format hf needs -o OUT and takes no --int8")
        folder = export_run(args.run, args.output)
    elif args.format == "ct2":
        from mintransformer.interop.ct2_export import export_run

        folder = export_run(args.run, args.output, int8=args.int8)
    else:
        from mintransformer.export.onnx_graphs import export_run

        folder = export_run(args.run, args.output, int8=args.int8)
    print(f"exported in {time.perf_counter() - start:.0f} s to {folder}")


def import_command(args) -> None:
    from mintransformer.interop.hf_import import import_folder

    print(f"imported {args.path} into {import_folder(args.path, args.run, args.overwrite)}")


def generate_command(args) -> None:
    from mintransformer.inference.generator import Generator

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
    from mintransformer.inference.evaluation import evaluate_run

    options = {k: getattr(args, k) for k in ("data", "src", "ref", "split", "output", "alpha")}
    start = time.perf_counter()
    result = evaluate_run(
        args.run, args.engine, beam_size=args.beam, progress=args.verbose > 0, **options
    )
    print(f"{result}  [{time.perf_counter() - start:.0f} s]")


def attention_command(args) -> None:
    from mintransformer import viz

    if args.kind == "positional":
        from mintransformer.runs.directory import RunDirectory

        d_model = RunDirectory.open(args.run, need_weights=False).config().d_model
        figure = viz.plot_positional_encoding(64, d_model)
    else:
        from mintransformer.inference.translator import Translator

        if not args.text:
            raise ValueError('give the sentence to look at, e.g. "three hundred twelve"')
        maps = viz.attention_maps(Translator.from_run(args.run), args.text, args.translation)
        print(f"{args.text}  ->  {maps.translation}")
        figure = viz.plot_attention(maps, args.kind, args.layer, args.head, args.mean)
    print(f"wrote {viz.save_figure(figure, args.output)}")


def embed_command(args) -> None:
    import json

    from mintransformer.core.files import save_npy
    from mintransformer.inference.streaming import open_input
    from mintransformer.pretrained.minilm import sentence_embeddings

    texts = list(open_input(args.text, args.input)[0])
    vectors = sentence_embeddings(texts, batch_size=args.batch_size)
    if args.output:
        output = save_npy(args.output, vectors)
        print(f"wrote {len(texts)} embeddings of size {vectors.shape[1]} to {output}")
    else:
        for vector in vectors:
            print(json.dumps([round(float(v), 6) for v in vector]))


def add_training_flags(parser, task: str, bf16: bool = True) -> None:
    """The run directory, the config's flags, precision and data-parallel flags."""
    parser.add_argument("--run", type=Path, required=True, help="run directory")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run")
    from mintransformer.config import add_config_flags

    add_config_flags(parser, task)
    if bf16:
        precision = "bf16 mixed precision; --no-bf16: fp32 (default: bf16 where it measures 1.3x)"
        parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, help=precision)
    group = parser.add_argument_group("data-parallel training (JAX backend: keras.distribution)")
    group.add_argument("--distribute", choices=["data"], help="replicate the model, split batches")
    group.add_argument("--devices", type=int, help="devices per process (default: all)")
    group.add_argument("--coordinator", help="HOST:PORT of process 0, with several processes")
    group.add_argument("--num-processes", type=int, default=1, help="processes (hosts)")
    group.add_argument("--process-id", type=int, default=0, help="this process's index")


def add_decoding_flags(parser, alpha_on_val: bool = False) -> None:
    """--beam and --alpha; with `alpha_on_val`, --alpha may be "val" (the best on val)."""
    parser.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    on_val = ', or "val": of 0.6, 1, 1.4, 1.8 the best on val' if alpha_on_val else ""
    kind = alpha_or_val if alpha_on_val else float
    parser.add_argument("--alpha", type=kind, default=0.6, help=f"length penalty exponent{on_val}")


def add_engine_flag(parser, default: str = "auto") -> None:
    from mintransformer.inference.engines import ENGINE_CHOICES

    parser.add_argument(
        "--engine",
        choices=ENGINE_CHOICES,
        default=default,
        help="keras: the run's weights; onnx: its export (`mintransformer export`) on "
        "onnxruntime, without Keras; ct2: its CTranslate2 export (`mintransformer export "
        "--format ct2`, translation only); --run may then name the export folder; auto: "
        f"the run's ct2, else onnx export, else keras (default: {default})",
    )


def add_input_flags(parser, what: str, run: bool = True) -> None:
    """The texts (arguments, --input or standard input), --output; with `run`, --run and
    --engine."""
    if run:
        parser.add_argument("--run", type=Path, required=True)
        add_engine_flag(parser)
    parser.add_argument("text", nargs="*", help=f"{what} (default: --input or stdin)")
    parser.add_argument("--input", type=Path, help=f"file with one of the {what} per line")
    parser.add_argument("--output", type=Path, help="write the results here (default: stdout)")


def serve_command(args) -> None:
    try:
        from mintransformer.serving.app import serve
    except ModuleNotFoundError as err:
        hint = f"serving needs {err.name}: pip install mintransformer[serve]"
        raise ModuleNotFoundError(hint) from None
    serve(args)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", choices=BACKENDS, help="Keras backend (default: Keras')")
    verbosity = "0 quiet, 1 progress bars (default), 2 (or no value) also the backend's log"
    common.add_argument("--verbose", type=int, nargs="?", const=2, default=1, help=verbosity)
    parser = argparse.ArgumentParser(prog="mintransformer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def add(group, name: str, help: str, run_command):
        sub = group.add_parser(name, help=help, parents=[common])
        sub.set_defaults(run_command=run_command, command_parser=sub)
        return sub

    demo = add(commands, "demo", "train on built-in EN->FR numbers, translate", demo_command)
    demo.add_argument(
        "--run",
        type=Path,
        default=Path("runs/numbers"),
        help="run directory (default: runs/numbers); it may be missing, empty or hold an "
        "earlier demo run, which is replaced",
    )
    demo.add_argument("--overwrite", action="store_true", help="replace whatever run --run holds")
    demo.add_argument("--num-train", type=int, default=30_000)
    demo.add_argument("--report", type=int, default=200, help="held-out numbers per magnitude")
    add_decoding_flags(demo)

    tasks = commands.add_parser("train", help="train a model")
    tasks = tasks.add_subparsers(dest="task", required=True)
    translation = add(tasks, "translation", "train a translation model", train_translation_command)
    add_training_flags(translation, "translation")
    data = translation.add_argument_group("data (default: the built-in numbers corpus)")
    data.add_argument("--train", help="training files prefix (PREFIX.SRC, PREFIX.TGT)")
    data.add_argument("--val", help="validation files prefix")
    data.add_argument("--test", help="test files prefix (reported after training)")
    data.add_argument("--src", help="source language suffix, e.g. en")
    data.add_argument("--tgt", help="target language suffix, e.g. fr")
    data.add_argument("--tsv", help="SRC<TAB>TGT file (.gz ok), split by source sentence")
    data.add_argument("--mix-tsv", help="a --tsv file whose training pairs are added (mix_*)")
    data.add_argument("--mix-ratio", type=float, help="at most R --mix-tsv pairs a pair (all)")
    data.add_argument("--val-fraction", type=float, default=0.02)
    data.add_argument("--test-fraction", type=float, default=0.02)
    data.add_argument("--num-train", type=int, default=30_000, help="numbers corpus size")
    translation.add_argument(
        "--report", type=int, default=1000, help="held-out sentences translated after training"
    )
    add_decoding_flags(translation)

    what = "train an encoder-only text classifier (e.g. IMDB sentiment)"
    classification = add(tasks, "classification", what, train_classification_command)
    add_training_flags(classification, "classification")
    labelled = classification.add_argument_group(
        "data: .jsonl / .csv (text, label; .gz ok) or a folder of class folders (aclImdb)"
    )
    labelled.add_argument("--train", help="training texts (the tokenizer is trained on these)")
    labelled.add_argument("--val", help="validation texts (default: carved from --train)")
    labelled.add_argument("--val-fraction", type=float, default=0.1)
    labelled.add_argument("--test", help="test texts, scored once after training")

    lm = add(tasks, "lm", "train a decoder-only language model on a text file", train_lm_command)
    add_training_flags(lm, "language_model", bf16=False)
    lm.add_argument("--text", type=Path, help="UTF-8 text file to train on (one line each)")

    translate = add(commands, "translate", "translate text with a trained run", stream_command)
    add_input_flags(translate, "sentences")
    add_decoding_flags(translate)

    classify = add(commands, "classify", "label text with a trained classifier", stream_command)
    add_input_flags(classify, "texts")

    what = "export a run to ONNX, CTranslate2 or transformers"
    export = add(commands, "export", what, export_command)
    export.add_argument("--run", type=Path, required=True)
    export.add_argument("-o", "--output", type=Path, help="default: RUN/onnx or RUN/ct2")
    formats = "ct2: a CTranslate2 folder (--engine ct2); hf: a transformers folder"
    export.add_argument("--format", choices=["onnx", "ct2", "hf"], default="onnx", help=formats)
    export.add_argument("--int8", action="store_true", help="int8 weights (dynamic quantization)")

    imports = commands.add_parser("import", help="import a model")
    imports = imports.add_subparsers(dest="source", required=True)
    hf = add(imports, "hf", "a transformers Marian (OPUS-MT) folder -> a run", import_command)
    hf.add_argument("path", type=Path, help="folder with config.json, weights, *.spm, vocab.json")
    hf.add_argument("--run", type=Path, required=True)
    hf.add_argument("--overwrite", action="store_true", help="replace a run already there")

    evaluate = add(commands, "evaluate", "BLEU/chrF or accuracy of a run", evaluate_command)
    evaluate.add_argument("--run", type=Path, required=True)
    evaluate.add_argument("--src", type=Path, help="translation: source sentences")
    evaluate.add_argument("--ref", type=Path, help="translation: reference translations")
    evaluate.add_argument(
        "--split", choices=SPLITS, help="translation: a split of its corpus (mix_*: --mix-tsv's)"
    )
    evaluate.add_argument("--data", type=Path, help="classification: labelled texts")
    evaluate.add_argument("--output", type=Path, help="write the hypotheses here")
    add_decoding_flags(evaluate, alpha_on_val=True)
    add_engine_flag(evaluate, default="keras")

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
    add_input_flags(embed, "sentences", run=False)
    embed.add_argument("--batch-size", type=int, default=32)

    gen = add(commands, "generate", "continue text with a language model", generate_command)
    gen.add_argument("--run", type=Path, required=True)
    gen.add_argument("prompt", nargs="*", help="prompts (default: one empty prompt)")
    gen.add_argument("--max-new-tokens", type=int, default=50)
    gen.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    gen.add_argument("--top-k", type=int, default=40, help="0 = no top-k filtering")
    gen.add_argument("--top-p", type=float, default=0.95, help="nucleus mass; 1 = no filtering")
    gen.add_argument("--seed", type=int, default=0)
    add_engine_flag(gen)

    from mintransformer.serving.options import add_serve_flags

    serve = add(commands, "serve", "serve a run: JSON API and attention web page", serve_command)
    add_serve_flags(serve)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line `argv` (default: `sys.argv[1:]`) parsed, with `written`: the
    `{dest: flag}` of the options it writes out, whatever their values."""
    args = build_parser().parse_args(argv)
    args.written = options_written(build_parser(), argv)
    return args


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as one line, `warning: ...`, like the errors (no source location)."""
    return f"warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    from mintransformer.backend.compile_cache import keep_compiled_programs
    from mintransformer.backend.distribution import request_host_devices
    from mintransformer.backend.selection import select_backend
    from mintransformer.core.errors import USER_ERRORS
    from mintransformer.serving.options import serving_backend

    warnings.formatwarning = _format_warning
    args = parse_args(argv)
    try:
        check_flags(args)
        if getattr(args, "distribute", None):
            request_host_devices(args.devices)
        if resolve_engine_flag(args) == "keras":
            if hasattr(args, "compile_cache"):  # serve
                args.backend = serving_backend(args.backend)
                keep_compiled_programs(args.compile_cache)
            select_backend(args.backend, args.verbose)
        args.run_command(args)
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Exception) as err:
        # Ctrl-C inside a library's context manager can end as the error its exit raised
        # while the interrupt unwound (TensorFlow's tracing: "Concurrent access?").
        if not any(isinstance(e, KeyboardInterrupt) for e in (err, err.__context__)):
            raise
        print(interrupted_message(args), file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

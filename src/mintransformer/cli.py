"""The `mintransformer` command line: demo, train, translate, classify, evaluate, attention, ...

The CLI only parses arguments and calls the library; everything here can be
done from Python too (`mintransformer.training.translation`, `mintransformer.translation`,
`mintransformer.training.classification`, `mintransformer.classification`,
`mintransformer.training.language_model`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

PRESETS = {
    # The embedded demo: small enough to train in about two minutes on two CPU cores.
    "numbers": dict(
        num_layers=2,
        d_model=128,
        num_heads=4,
        dff=512,
        dropout_rate=0.0,
        vocab_size=600,
        epochs=6,
        max_tokens=3000,
        warmup_steps=300,
        peak_learning_rate=2e-3,
        max_length=64,
        average_last=2,
    ),
    # Multi30k-sized: 3+3 layers, d_model 256 (the calibration in the translation issue).
    "base": dict(
        num_layers=3,
        d_model=256,
        num_heads=4,
        dff=1024,
        dropout_rate=0.3,
        vocab_size=8000,
        epochs=20,
        max_tokens=4096,
        warmup_steps=600,
        peak_learning_rate=1e-3,
        max_length=128,
        average_last=2,
    ),
}
CLASSIFICATION_PRESETS = {
    # The seed notebook: word-level vocabulary 5000 (here BPE 5000), the last 200 tokens
    # (Keras' pad_sequences keeps the end), one block, d 64, 4 heads of key_dim 64, ff 128,
    # a Dense(64) ReLU layer, batches of 64, 3 epochs of Adam at 1e-3.
    "seed": dict(
        num_layers=1,
        d_model=64,
        num_heads=4,
        key_dim=64,
        dff=128,
        hidden_units=64,
        dropout_rate=0.1,
        vocab_size=5000,
        max_length=200,
        truncation="tail",
        epochs=3,
        max_tokens=64 * 200,
        max_batch_size=64,
        warmup_steps=100,
        peak_learning_rate=1e-3,
    ),
    # Long context (512 tokens, head + tail) and a 16k vocabulary. In a small sweep (6,400
    # training reviews, validation carved from them, 2 epochs) two layers or d_model 128
    # were no more accurate than this one layer, at 2-2.5x the time. On the full training
    # set the model overfits after 2 epochs (validation loss 0.25 -> 0.41 over 4 epochs at
    # dropout 0.1), hence 2 epochs at dropout 0.3.
    "base": dict(
        num_layers=1,
        d_model=64,
        num_heads=4,
        dff=256,
        dropout_rate=0.3,
        vocab_size=16000,
        max_length=512,
        truncation="head_tail",
        epochs=2,
        max_tokens=16384,
        warmup_steps=200,
        peak_learning_rate=2e-3,
        average_last=2,
    ),
}
MODEL_FLAGS = {
    "layers": "num_layers",
    "d_model": "d_model",
    "heads": "num_heads",
    "dff": "dff",
    "dropout": "dropout_rate",
    "vocab_size": "vocab_size",
    "epochs": "epochs",
    "max_tokens": "max_tokens",
    "warmup": "warmup_steps",
    "lr": "peak_learning_rate",
    "max_length": "max_length",
    "average_last": "average_last",
    "seed": "seed",
    "label_smoothing": "label_smoothing",
    "truncation": "truncation",
    "pooling": "pooling",
    "ngram_buckets": "ngram_buckets",
    "ngram_dropout": "ngram_dropout",
    "schedule": "schedule",
}


def _corpus_spec(args):
    from mintransformer.data import corpora

    if args.tsv:
        return corpora.tsv_spec(args.tsv, args.val_fraction, args.test_fraction, args.seed or 0)
    if args.train:
        if not (args.val and args.src and args.tgt):
            raise SystemExit("error: --train needs --val, --src and --tgt too")
        return corpora.parallel_spec(args.train, args.val, args.src, args.tgt, args.test)
    return corpora.numbers_spec(num_train=args.num_train)


def _resumed_run(path, config_class):
    """The run directory to `--resume` and its config; exits if there is none."""
    from mintransformer.run import RunDirectory

    run = RunDirectory(path)
    if not run.config_path.is_file():
        raise SystemExit(f"error: nothing to resume: {run.config_path} does not exist")
    return run, run.config(config_class)


def train_translation_command(args) -> None:
    from mintransformer.data.corpora import load_corpus
    from mintransformer.run import RunDirectory, TranslationConfig
    from mintransformer.training.translation import train_translation

    start = time.perf_counter()
    if args.resume:
        run, config = _resumed_run(args.run, TranslationConfig)
    else:
        settings = {**PRESETS[args.preset], **_model_overrides(args)}
        config = TranslationConfig(data=_corpus_spec(args), mixed_precision=args.bf16, **settings)
    splits = load_corpus(config.data)  # before creating the run: bad data leaves no trace
    if not args.resume:
        run = RunDirectory.create(args.run, config, overwrite=args.overwrite)
    print(f"data: {', '.join(f'{k} {len(v):,} pairs' for k, v in splits.items())}")
    model, tokenizer = train_translation(run, splits, resume=args.resume, verbose=args.verbose)
    print(f"trained in {time.perf_counter() - start:.0f} s; run directory: {run.path}")
    if args.report > 0:
        _report_heldout(model, tokenizer, splits.get("test") or splits["val"], args)


def _model_overrides(args) -> dict:
    """Config fields set by the model and training flags that were given."""
    return {
        field: getattr(args, flag)
        for flag, field in MODEL_FLAGS.items()
        if getattr(args, flag, None) is not None
    }


def _classification_splits(config) -> dict:
    from mintransformer.data.labelled import read_labelled, split_validation

    data = config.data
    train = read_labelled(data["train"])
    if data.get("val"):
        splits = {"train": train, "val": read_labelled(data["val"])}
    else:
        train, val = split_validation(train, data["val_fraction"], config.seed)
        splits = {"train": train, "val": val}
    if data.get("test"):
        splits["test"] = read_labelled(data["test"])
    return splits


def train_classification_command(args) -> None:
    from mintransformer.data.labelled import LabelSet
    from mintransformer.run import ClassificationConfig, RunDirectory
    from mintransformer.training.classification import train_classification

    start = time.perf_counter()
    if args.resume:
        run, config = _resumed_run(args.run, ClassificationConfig)
        splits = _classification_splits(config)
    else:
        if args.train is None:
            raise ValueError("--train is required: a labelled .jsonl/.csv file or class folders")
        paths = {k: getattr(args, k) for k in ("train", "val", "test")}
        data = {k: str(Path(v).resolve()) if v else None for k, v in paths.items()}
        settings = {**CLASSIFICATION_PRESETS[args.preset], **_model_overrides(args)}
        config = ClassificationConfig(
            data={**data, "val_fraction": args.val_fraction},
            mixed_precision=args.bf16,
            **settings,
        )
        splits = _classification_splits(config)  # before creating the run: bad data leaves no trace
        config.labels = LabelSet.from_labels([label for _, label in splits["train"]]).names
        run = RunDirectory.create(args.run, config, overwrite=args.overwrite)
    print(
        f"data: {', '.join(f'{k} {len(v):,} texts' for k, v in splits.items())}; "
        f"classes {config.labels}"
    )
    model, tokenizer = train_classification(run, splits, resume=args.resume, verbose=args.verbose)
    print(f"trained in {time.perf_counter() - start:.0f} s; run directory: {run.path}")
    if "test" in splits:
        from mintransformer.classification import Classifier

        score_start = time.perf_counter()
        classifier = Classifier(model, tokenizer, config)
        accuracy = classifier.accuracy(splits["test"], config.data["test"], progress=True)
        print(f"test: {accuracy}  [{time.perf_counter() - score_start:.0f} s]")


def classify_command(args) -> None:
    from mintransformer.classification import Classifier

    texts = _input_texts(args)
    classifier = Classifier.from_run(args.run)
    for prediction in classifier.classify(texts, progress=len(texts) > 256):
        print(f"{prediction.label}\t{prediction.probability:.4f}")


def train_lm_command(args) -> None:
    from mintransformer.data.text import read_text
    from mintransformer.run import LanguageModelConfig, RunDirectory
    from mintransformer.training.language_model import train_language_model

    start = time.perf_counter()
    if args.resume:
        run, config = _resumed_run(args.run, LanguageModelConfig)
    else:
        if args.text is None:
            raise ValueError("--text FILE is required: the text file to train on")
        config = LanguageModelConfig(text=str(args.text.resolve()), **_model_overrides(args))
    lines = read_text(config.text)  # before creating the run: bad data leaves no trace
    if not args.resume:
        run = RunDirectory.create(args.run, config, overwrite=args.overwrite)
    print(f"data: {len(lines):,} lines of {config.text}")
    train_language_model(run, lines, resume=args.resume, verbose=args.verbose)
    print(f"trained in {time.perf_counter() - start:.0f} s; run directory: {run.path}")


def generate_command(args) -> None:
    from mintransformer.run import RunDirectory
    from mintransformer.training.language_model import generate_text, load_trained_language_model

    model, tokenizer, _ = load_trained_language_model(RunDirectory.open(args.run))
    texts = generate_text(
        model,
        tokenizer,
        args.prompt or [""],
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k or None,
        top_p=args.top_p,
        seed=args.seed,
    )
    print("\n\n".join(texts))


def _report_heldout(model, tokenizer, pairs, args) -> None:
    from mintransformer.translation import Translator, score

    translator = Translator(model, tokenizer)
    sources = [s for s, _ in pairs[: args.report]]
    references = [t for _, t in pairs[: args.report]]
    hypotheses = translator.translate(sources, beam_size=args.beam, progress=True)
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(references)
    print(
        f"held-out ({len(references)} sentences): {score(hypotheses, references)}  "
        f"exact match {100 * exact:.1f}%"
    )
    for source, hypothesis in list(zip(sources, hypotheses, strict=True))[:5]:
        print(f"  {source}  ->  {hypothesis}")


def _input_texts(args) -> list[str]:
    """Sentences from the command line, else from --input, else from standard input."""
    if args.text:
        return args.text
    if args.input:
        from mintransformer.data.parallel import read_lines

        return read_lines(args.input)
    return sys.stdin.read().splitlines()


def translate_command(args) -> None:
    from mintransformer.translation import Translator

    texts = _input_texts(args)
    translator = Translator.from_run(args.run)
    for line in translator.translate(
        texts, beam_size=args.beam, alpha=args.alpha, progress=len(texts) > 64
    ):
        print(line)


def evaluate_command(args) -> None:
    from mintransformer.run import ClassificationConfig, RunDirectory

    config = RunDirectory.open(args.run).config()
    if isinstance(config, ClassificationConfig):
        from mintransformer.classification import Classifier

        if args.data is None:
            raise ValueError("a classification run is evaluated on --data FILE (labelled texts)")
        start = time.perf_counter()
        accuracy = Classifier.from_run(args.run).evaluate(args.data, progress=True)
        print(f"{accuracy}  [{time.perf_counter() - start:.0f} s]")
        return
    from mintransformer.translation import Translator

    translator = Translator.from_run(args.run)
    options = dict(beam_size=args.beam, alpha=args.alpha, progress=True)
    start = time.perf_counter()
    if args.split:
        from mintransformer.data.corpora import load_corpus

        splits = load_corpus(config.data)
        if args.split not in splits:
            raise ValueError(f"this run's corpus has no {args.split!r} split: {sorted(splits)}")
        scores = translator.evaluate_pairs(splits[args.split], args.output, **options)
    elif args.src is not None and args.ref is not None:
        scores = translator.evaluate(args.src, args.ref, args.output, **options)
    else:
        raise ValueError(
            "a translation run is evaluated on --src FILE and --ref FILE, or on --split "
            "val|test of the corpus it was trained on"
        )
    print(f"{scores}  [{time.perf_counter() - start:.0f} s]")


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

    from mintransformer.pretrained.minilm import sentence_embeddings

    texts = _input_texts(args)
    vectors = sentence_embeddings(texts, batch_size=args.batch_size)
    if args.output:
        np.save(args.output, vectors)
        print(f"wrote {len(texts)} embeddings of size {vectors.shape[1]} to {args.output}")
    else:
        for vector in vectors:
            print(json.dumps([round(float(v), 6) for v in vector]))


def demo_command(args) -> None:
    """Train on the embedded number corpus, then translate a few held-out numbers."""
    args.preset, args.resume, args.overwrite = "numbers", False, True
    args.tsv = args.train = None
    for flag in MODEL_FLAGS:
        setattr(args, flag, None)
    args.bf16 = False
    train_translation_command(args)


def _add_decoding_flags(parser) -> None:
    parser.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent")


def _add_model_flags(group, extra=()) -> None:
    for flag, kind in [
        *extra,
        ("layers", int),
        ("d_model", int),
        ("heads", int),
        ("dff", int),
        ("dropout", float),
        ("vocab_size", int),
        ("epochs", int),
        ("max_tokens", int),
        ("warmup", int),
        ("lr", float),
        ("max_length", int),
        ("average_last", int),
        ("seed", int),
    ]:
        group.add_argument(f"--{flag.replace('_', '-')}", dest=flag, type=kind)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mintransformer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="train on the built-in EN->FR numbers and translate")
    demo.add_argument("--run", type=Path, default=Path("runs/numbers"))
    demo.add_argument("--num-train", type=int, default=30_000)
    demo.add_argument("--report", type=int, default=1000)
    demo.add_argument("--verbose", type=int, default=1)
    _add_decoding_flags(demo)
    demo.set_defaults(run_command=demo_command)

    train = commands.add_parser("train", help="train a model")
    tasks = train.add_subparsers(dest="task", required=True)
    translation = tasks.add_parser("translation", help="train a translation model")
    translation.add_argument("--run", type=Path, required=True, help="run directory")
    translation.add_argument("--preset", choices=sorted(PRESETS), default="numbers")
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
    _add_model_flags(
        translation.add_argument_group("model and training (override the preset)"),
        extra=[("label_smoothing", float)],
    )
    translation.add_argument("--bf16", action="store_true", help="bf16 mixed precision")
    translation.add_argument("--resume", action="store_true", help="continue an interrupted run")
    translation.add_argument("--overwrite", action="store_true", help="replace an existing run")
    translation.add_argument(
        "--report", type=int, default=1000, help="held-out sentences translated after training"
    )
    translation.add_argument("--verbose", type=int, default=1, help="0 silent, 1 progress bar")
    _add_decoding_flags(translation)
    translation.set_defaults(run_command=train_translation_command)

    classification = tasks.add_parser(
        "classification", help="train an encoder-only text classifier (e.g. IMDB sentiment)"
    )
    classification.add_argument("--run", type=Path, required=True, help="run directory")
    classification.add_argument("--preset", choices=sorted(CLASSIFICATION_PRESETS), default="base")
    labelled = classification.add_argument_group(
        "data: .jsonl / .csv (text, label; .gz ok) or a folder of class folders (aclImdb)"
    )
    labelled.add_argument("--train", help="training texts (the tokenizer is trained on these)")
    labelled.add_argument("--val", help="validation texts (default: carved from --train)")
    labelled.add_argument("--val-fraction", type=float, default=0.1)
    labelled.add_argument("--test", help="test texts, scored once after training")
    options = classification.add_argument_group("model and training (override the preset)")
    options.add_argument("--truncation", choices=["head", "tail", "head_tail"])
    options.add_argument("--pooling", choices=["mean", "cls"])
    options.add_argument("--schedule", choices=["noam", "linear"], help="learning-rate decay")
    _add_model_flags(options, extra=[("ngram_buckets", int), ("ngram_dropout", float)])
    classification.add_argument("--bf16", action="store_true", help="bf16 mixed precision")
    classification.add_argument("--resume", action="store_true", help="continue a run")
    classification.add_argument("--overwrite", action="store_true", help="replace a run")
    classification.add_argument("--verbose", type=int, default=1, help="0 silent, 1 progress")
    classification.set_defaults(run_command=train_classification_command)

    lm = tasks.add_parser("lm", help="train a decoder-only language model on a text file")
    lm.add_argument("--run", type=Path, required=True, help="run directory")
    lm.add_argument("--text", type=Path, help="UTF-8 text file to train on (one line each)")
    _add_model_flags(lm.add_argument_group("model and training (override the defaults)"))
    lm.add_argument("--resume", action="store_true", help="continue an interrupted run")
    lm.add_argument("--overwrite", action="store_true", help="replace an existing run")
    lm.add_argument("--verbose", type=int, default=1, help="0 silent, 1 progress bar")
    lm.set_defaults(run_command=train_lm_command)

    translate = commands.add_parser("translate", help="translate text with a trained run")
    translate.add_argument("--run", type=Path, required=True)
    translate.add_argument("text", nargs="*", help="sentences (default: --input or stdin)")
    translate.add_argument("--input", type=Path, help="file with one sentence per line")
    _add_decoding_flags(translate)
    translate.set_defaults(run_command=translate_command)

    classify = commands.add_parser("classify", help="label text with a trained classifier")
    classify.add_argument("--run", type=Path, required=True)
    classify.add_argument("text", nargs="*", help="texts (default: --input or stdin)")
    classify.add_argument("--input", type=Path, help="file with one text per line")
    classify.set_defaults(run_command=classify_command)

    evaluate = commands.add_parser(
        "evaluate", help="sacreBLEU and chrF of a translation run, accuracy of a classifier"
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
    evaluate.set_defaults(run_command=evaluate_command)
    attention = commands.add_parser("attention", help="plot a trained model's attention")
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
    attention.set_defaults(run_command=attention_command)
    embed = commands.add_parser(
        "embed", help="sentence embeddings from all-MiniLM-L6-v2 loaded into our Encoder"
    )
    embed.add_argument("text", nargs="*", help="sentences (default: --input or stdin)")
    embed.add_argument("--input", type=Path, help="file with one sentence per line")
    embed.add_argument("--output", type=Path, help="save a (n, 384) .npy instead of printing")
    embed.add_argument("--batch-size", type=int, default=32)
    embed.set_defaults(run_command=embed_command)

    gen = commands.add_parser("generate", help="continue text with a trained language model")
    gen.add_argument("--run", type=Path, required=True)
    gen.add_argument("prompt", nargs="*", help="prompts (default: one empty prompt)")
    gen.add_argument("--max-new-tokens", type=int, default=50)
    gen.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    gen.add_argument("--top-k", type=int, default=40, help="0 = no top-k filtering")
    gen.add_argument("--top-p", type=float, default=0.95, help="nucleus mass; 1 = no filtering")
    gen.add_argument("--seed", type=int, default=0)
    gen.set_defaults(run_command=generate_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run_command(args)
    except (FileNotFoundError, FileExistsError, ValueError, ModuleNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

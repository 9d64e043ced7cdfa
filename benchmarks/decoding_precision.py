"""Benchmark: decoding a trained translation run in fp32 and in bf16, speed and BLEU.

    python -m benchmarks.decoding_precision --run R \\
        --src ../shared/data/multi30k/test_2016_flickr.en \\
        --ref ../shared/data/multi30k/test_2016_flickr.fr

The run's final weights are loaded twice, as an fp32 model and as a bf16 mixed-precision
one (`runs.loading.load_trained(mixed_precision=...)`), and both translate the same
sentences (the first `--sentences` of `--src`) in batches of `--batch-size`: greedy, and
beam search (`--beam`, length penalty `--alpha`). Each whole pass over the sentences is
timed, the two precisions in turns (`--rounds` rounds after a warm-up pass), and the
report gives median sentences per second, bf16 / fp32, and each precision's corpus BLEU
on those sentences (`--ref`), with bf16's difference from fp32.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    format_table,
    median,
    run_decoding_parser,
    time_in_turns,
    write_report,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = run_decoding_parser(__doc__)
    parser.add_argument("--ref", type=Path, required=True, help="reference translations")
    parser.add_argument("--sentences", type=int, default=256, help="first N sentences used")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--beam", type=int, default=4, help="beam size of the beam rows")
    parser.add_argument("--alpha", type=float, default=1.0, help="beam length penalty")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes per precision")
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "decoding_precision.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from mintransformer.backend.precision import choose_precision
    from mintransformer.backend.runtime import configure_runtime
    from mintransformer.config import TranslationConfig
    from mintransformer.inference.translator import Translator, score
    from mintransformer.runs.loading import load_trained

    print(configure_runtime())
    print(choose_precision(None)[1], "(what the machine would choose)")
    sources = args.src.read_text(encoding="utf-8").splitlines()[: args.sentences]
    references = args.ref.read_text(encoding="utf-8").splitlines()[: args.sentences]
    translators = {}
    for name, bf16 in (("fp32", False), ("bf16", True)):
        model, tokenizer, config = load_trained(args.run, TranslationConfig, mixed_precision=bf16)
        translators[name] = Translator.from_model(model, tokenizer, config=config)
    hypotheses: dict[str, list[str]] = {}
    rows, report = [], {}
    for search, beam in (("greedy", 1), (f"beam {args.beam}", args.beam)):

        def runner(name: str, search: str = search, beam: int = beam):
            """One pass over the sentences with `name`'s translator, keeping its output."""

            def translate():
                hypotheses[f"{search} {name}"] = translators[name].translate(
                    sources, beam_size=beam, alpha=args.alpha, batch_size=args.batch_size
                )

            return translate

        builders = {name: functools.partial(runner, name) for name in translators}
        timed = time_in_turns(builders, steps=args.rounds, warmup=1)
        speeds = {
            name: len(sources) / (median(times) / 1000.0) for name, (times, _) in timed.items()
        }
        bleus = {name: score(hypotheses[f"{search} {name}"], references).bleu for name in timed}
        report[search] = {"sentences_per_s": speeds, "bleu": bleus}
        for name in translators:
            rows.append(
                [
                    f"{search}, batch {args.batch_size}",
                    name,
                    f"{speeds[name]:.1f}",
                    f"{speeds[name] / speeds['fp32']:.2f}x",
                    f"{bleus[name]:.2f}",
                    f"{bleus[name] - bleus['fp32']:+.2f}",
                ]
            )
    headers = ["search", "precision", "sentences/s (median)", "/ fp32", "BLEU", "- fp32"]
    print(format_table(headers, rows))
    return write_report(report, args)


if __name__ == "__main__":
    main()

"""Benchmark: translating a test set end to end, the Keras engine against the ONNX exports.

    mintransformer export --run R && mintransformer export --run R --int8 -o R/onnx-int8
    python -m benchmarks.translate_end_to_end --run R \\
        --src ../shared/data/multi30k/test_2016_flickr.en \\
        --ref ../shared/data/multi30k/test_2016_flickr.fr --batches 1,32

Each engine runs in a fresh process, one after the other: "keras" (the run's weights, its
search compiled with XLA on TensorFlow), "onnx" (`R/onnx`, fp32) and "onnx-int8"
(`R/onnx-int8`). For each, the report separates:

- start-up: importing the engine and `Translator.from_run` (for the onnx engines, no Keras);
- per batch size, two passes of `Translator.translate` over every source, greedy (or
  `--beam`): the first includes whatever the engine compiles on first use (XLA compiles
  once per input shape), the second is warm. Both are quoted; the ratios use each.

The hypotheses of each pass are scored with sacreBLEU (BLEU and chrF) against `--ref`
when given, so a faster engine that translates differently shows it. Ratios are keras /
engine: above 1, the engine is faster.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS_DIR, format_table, machine, write_json

ENGINES = {"keras": ("keras", ""), "onnx": ("onnx", "onnx"), "onnx-int8": ("onnx", "onnx-int8")}


def measure(args: argparse.Namespace) -> dict:
    """In this process: start-up and two passes per batch size for `args.engine`."""
    started = time.perf_counter()
    from mintransformer.inference.translator import Translator

    engine, folder = ENGINES[args.engine]
    path = Path(args.run) / folder if folder else Path(args.run)
    translator = Translator.from_run(path, engine=engine)
    report = {"engine": args.engine, "startup_s": time.perf_counter() - started, "passes": []}
    sources = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.limit or None]
    references = None
    if args.ref:
        references = Path(args.ref).read_text(encoding="utf-8").splitlines()[: len(sources)]
    for batch in (int(b) for b in args.batches.split(",")):
        for attempt in ("first", "again"):
            start = time.perf_counter()
            hypotheses = translator.translate(
                sources, batch_size=batch, beam_size=args.beam, alpha=args.alpha
            )
            seconds = time.perf_counter() - start
            entry = {"batch": batch, "pass": attempt, "seconds": seconds}
            if references is not None:
                import sacrebleu

                entry["bleu"] = sacrebleu.corpus_bleu(hypotheses, [references]).score
                entry["chrf"] = sacrebleu.corpus_chrf(hypotheses, [references]).score
            report["passes"].append(entry)
            print(json.dumps(entry), flush=True)
    return report


def run_engines(args: argparse.Namespace) -> dict:
    """Each engine in a fresh process; their reports, with the machine and settings."""
    reports = []
    for engine in args.engines.split(","):
        if engine not in ENGINES:
            raise SystemExit(f"unknown engine {engine!r}: choose from {', '.join(ENGINES)}")
        command = [sys.executable, "-m", "benchmarks.translate_end_to_end", *args.argv]
        command += ["--child", "--engines", engine]
        output = subprocess.run(command, capture_output=True, text=True, check=False)
        lines = [line for line in output.stdout.splitlines() if line.startswith("{")]
        if output.returncode != 0 or not lines:
            raise SystemExit(f"{engine} failed:\n{output.stderr[-3000:]}")
        reports.append(json.loads(lines[-1]))
    return {
        "benchmark": "translate_end_to_end",
        "meta": {"argv": args.argv, "machine": machine(), "sources": args.src},
        "results": reports,
    }


def table(report: dict) -> str:
    """Start-up, pass times, BLEU and keras / engine ratios."""
    keras_seconds = {
        (entry["batch"], entry["pass"]): entry["seconds"]
        for result in report["results"]
        if result["engine"] == "keras"
        for entry in result["passes"]
    }
    rows = []
    for result in report["results"]:
        rows.append([result["engine"], "start-up", "", f"{result['startup_s']:.1f} s", ""])
        for entry in result["passes"]:
            keras = keras_seconds.get((entry["batch"], entry["pass"]))
            rows.append(
                [
                    result["engine"],
                    f"batch {entry['batch']}, {entry['pass']}",
                    f"{entry['bleu']:.2f} / {entry['chrf']:.2f}" if "bleu" in entry else "",
                    f"{entry['seconds']:.1f} s",
                    f"{keras / entry['seconds']:.2f}" if keras else "",
                ]
            )
    return format_table(["engine", "what", "BLEU / chrF", "time", "keras / engine"], rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a translation run with its exports")
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--ref", help="references, for sacreBLEU")
    parser.add_argument("--batches", default="1,32", help="comma-separated batch sizes")
    parser.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--limit", type=int, default=0, help="first N sources (0: all)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--json", default=str(RESULTS_DIR / "translate_end_to_end.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        args.engine = args.engines
        print(json.dumps(measure(args)), flush=True)
        return
    report = run_engines(args)
    print(table(report))
    print(f"report: {write_json(report, args.json)}")


if __name__ == "__main__":
    main()

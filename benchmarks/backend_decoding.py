"""Benchmark: translating with each Keras backend, the same runs, the same sentences.

    python -m benchmarks.backend_decoding --run runs/numbers
    python -m benchmarks.backend_decoding --run runs/numbers --run R2 --src "" --src test.en

For each run (and its `--src`, one a line; empty or absent: number words from
`data.numbers`) and each backend (a fresh process each, the run loaded in fp32),
`Translator.translate` decodes the first `--sentences` sentences greedily and with beam 4
(alpha 0.6), at batch 1 and 32. Every setting runs once to compile what its shapes need,
then `--repeats` timed passes in turns with the other settings (so that a machine whose
speed drifts slows them alike). Reported: the median sentences/s, each backend's ratio to
TensorFlow's (above 1: slower than TensorFlow), and how many translations differ from
TensorFlow's. The batch-1 settings decode the first `--sentences-alone` sentences only.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    format_table,
    keras_backend,
    machine,
    median,
    run_per_backend,
    versions,
    write_json,
)

SETTINGS = {  # name: (beam size, batch size)
    "b1 greedy": (1, 1),
    "b32 greedy": (1, 32),
    "b1 beam 4": (4, 1),
    "b32 beam 4": (4, 32),
}
REFERENCE = "tensorflow"


def sources(path: str, count: int) -> list[str]:
    """The first `count` lines of `path`, or `count` number words when `path` is empty."""
    if path:
        return Path(path).read_text(encoding="utf-8").splitlines()[:count]
    from mintransformer.data.numbers import english_words

    return [english_words(n) for n in range(1000, 10**6, 7_919)][:count]


def measure(args: argparse.Namespace) -> dict:
    """This process's backend: per run and setting, the translations and the timed passes."""
    from mintransformer.inference.translator import Translator

    results = {}
    for run, src in zip(args.run, args.src, strict=True):
        translator = Translator.from_run(run, mixed_precision=False)
        texts = sources(src, args.sentences)
        work = {}
        for name, (beam_size, batch_size) in SETTINGS.items():
            chosen = texts[: args.sentences_alone] if batch_size == 1 else texts

            def translate(chosen=chosen, beam_size=beam_size, batch_size=batch_size, t=translator):
                return t.translate(chosen, beam_size=beam_size, batch_size=batch_size)

            started = time.perf_counter()
            outputs = translate()  # compiles (or traces) every shape it needs
            work[name] = dict(
                translate=translate,
                first_s=time.perf_counter() - started,
                outputs=outputs,
                seconds=[],
            )
        for _ in range(args.repeats):
            for entry in work.values():
                started = time.perf_counter()
                entry["translate"]()
                entry["seconds"].append(time.perf_counter() - started)
        results[str(run)] = {
            name: dict(
                sentences=len(entry["outputs"]),
                sentences_per_s=len(entry["outputs"]) / median(entry["seconds"]),
                first_pass_s=entry["first_s"],
                outputs=entry["outputs"],
            )
            for name, entry in work.items()
        }
    return {"backend": keras_backend(), "versions": versions(), "results": results}


def summary(reports: list[dict]) -> list[dict]:
    """Per run, setting and backend: sentences/s, ratio to TensorFlow, differing outputs."""
    by_backend = {report["backend"]: report["results"] for report in reports}
    reference = by_backend.get(REFERENCE)
    rows = []
    for backend, results in by_backend.items():
        for run, settings in results.items():
            for name, result in settings.items():
                row = dict(run=run, setting=name, backend=backend)
                row["sentences_per_s"] = result["sentences_per_s"]
                row["first_pass_s"] = result["first_pass_s"]
                if reference is not None:
                    theirs = reference[run][name]
                    row["tensorflow_over_this"] = theirs["sentences_per_s"] / row["sentences_per_s"]
                    row["differ_from_tensorflow"] = sum(
                        a != b for a, b in zip(result["outputs"], theirs["outputs"], strict=True)
                    )
                rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    headers = ["run", "setting", "backend", "sent/s", "TF / this", "differ from TF", "first pass s"]
    cells = [
        [
            Path(row["run"]).name,
            row["setting"],
            row["backend"],
            f"{row['sentences_per_s']:.1f}",
            f"{row['tensorflow_over_this']:.2f}" if "tensorflow_over_this" in row else "-",
            str(row.get("differ_from_tensorflow", "-")),
            f"{row['first_pass_s']:.1f}",
        ]
        for row in sorted(rows, key=lambda r: (r["run"], list(SETTINGS).index(r["setting"])))
    ]
    return format_table(headers, cells)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", required=True, help="a translation run")
    parser.add_argument(
        "--src", action="append", help="per --run: source sentences (empty: number words)"
    )
    parser.add_argument("--sentences", type=int, default=64, help="sentences at batch 32")
    parser.add_argument("--sentences-alone", type=int, default=16, help="sentences at batch 1")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes (median)")
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--json", default=str(RESULTS_DIR / "backend_decoding.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.src = args.src or [""] * len(args.run)
    if len(args.src) != len(args.run):
        parser.error(f"give one --src per --run ({len(args.run)} runs, {len(args.src)} --src)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        write_json(measure(args), args.json)
        return
    child = [f"--run={run}" for run in args.run] + [f"--src={src}" for src in args.src]
    child += ["--sentences", str(args.sentences), "--sentences-alone", str(args.sentences_alone)]
    child += ["--repeats", str(args.repeats)]
    reports = run_per_backend("benchmarks.backend_decoding", child, args.backends.split(","))
    rows = summary(reports)
    print(table(rows))
    report = {
        "benchmark": "backend_decoding",
        "machine": machine(),
        "settings": {key: value for key, value in vars(args).items() if key != "child"},
        "versions": {report["backend"]: report["versions"] for report in reports},
        "rows": rows,
    }
    print(f"report: {write_json(report, args.json)}")


if __name__ == "__main__":
    main()

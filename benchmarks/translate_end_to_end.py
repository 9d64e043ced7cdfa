"""Benchmark: translating a test set end to end, our engines against CTranslate2.

    python -m benchmarks.translate_end_to_end --run R \\
        --src ../shared/data/multi30k/test_2016_flickr.en \\
        --ref ../shared/data/multi30k/test_2016_flickr.fr --batches 1,32 --beams 1,4

Each engine runs in a fresh process, one after the other:

- "keras" and "keras-bf16": the run's weights in our layers, fp32 or bf16 mixed
  precision, the search compiled with XLA on TensorFlow; "keras-jax" and
  "keras-jax-bf16": the same on JAX (`jax.jit`);
- "onnx" and "onnx-int8": `R/onnx` and `R/onnx-int8` (exported here if missing) on
  onnxruntime, without Keras;
- "ct2" and "ct2-int8": CTranslate2 on the run's Hugging Face export (`R/hf`, written
  here if missing) converted by CTranslate2's converter (`R/ct2`, `R/ct2-int8`); the
  text goes through the export's own `tokenizer.json` with the `tokenizers` library, as
  a user of that folder would (a run with a SentencePiece tokenizer is not covered).

Every engine gets the machine's usable cores as its intra-op threads and one inter-op
thread. For each, the report separates:

- start-up: importing the engine and loading the model;
- per batch size and beam size, two passes over every source: the first includes
  whatever the engine compiles on first use (XLA compiles once per input shape), the
  second is warm. Each gives sentences/s and output tokens/s (the run's tokenizer
  re-encodes each translation, `</s>` counted, so every engine is counted alike);
- peak resident memory of the process.

Each pass is scored with sacreBLEU (BLEU and chrF) against `--ref` and counts the
translations equal to the keras engine's, so an engine that translates differently shows
it. Beam search: our length penalty is GNMT's ((5 + length) / 6) ** alpha, CTranslate2's
is length ** alpha; both are off at `--alpha 0`, where the two searches agree. Ratios are
keras time / engine time: above 1, the engine is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import RESULTS_DIR, format_table, machine, write_json

ENGINES = ("keras", "keras-bf16", "keras-jax", "keras-jax-bf16")
ENGINES += ("onnx", "onnx-int8", "ct2", "ct2-int8")
Translate = Callable[[list[str], int, int, float], list[str]]


def open_ours(run: Path, engine: str) -> Translate:
    from mintransformer.inference.translator import Translator

    if engine.startswith("keras"):
        translator = Translator.from_run(run, mixed_precision=engine.endswith("bf16"))
    else:
        translator = Translator.from_run(run / engine, engine="onnx")

    def translate(sources, batch, beam, alpha):
        return translator.translate(sources, batch_size=batch, beam_size=beam, alpha=alpha)

    return translate


def open_ctranslate2(run: Path, engine: str) -> Translate:
    import ctranslate2
    from tokenizers import Tokenizer

    from mintransformer.core.cpu import usable_cores
    from mintransformer.data.text import normalize_text

    tokenizer = Tokenizer.from_file(str(run / "hf" / "tokenizer.json"))
    model = ctranslate2.Translator(
        str(run / engine), device="cpu", inter_threads=1, intra_threads=usable_cores()
    )
    hf_config = json.loads((run / "hf" / "config.json").read_text())

    def translate(sources, batch, beam, alpha):
        encoded = tokenizer.encode_batch([normalize_text(s) for s in sources])
        results = model.translate_batch(
            [row.tokens for row in encoded],
            max_batch_size=batch,
            beam_size=beam,
            length_penalty=alpha,
            max_decoding_length=hf_config["max_position_embeddings"],
        )
        ids = [[tokenizer.token_to_id(t) for t in r.hypotheses[0]] for r in results]
        return tokenizer.decode_batch(ids, skip_special_tokens=True)

    return translate


def measure(args: argparse.Namespace) -> dict:
    """In this process: start-up and two passes per batch and beam size for `args.engine`."""
    started = time.perf_counter()
    run = Path(args.run)
    opener = open_ctranslate2 if args.engine.startswith("ct2") else open_ours
    translate = opener(run, args.engine)
    report = {"engine": args.engine, "startup_s": time.perf_counter() - started, "passes": []}
    if args.engine.startswith("keras"):
        import keras

        report["backend"] = keras.backend.backend()
    sources = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.limit or None]
    for beam in (int(b) for b in args.beams.split(",")):
        for batch in (int(b) for b in args.batches.split(",")):
            for attempt in ("first", "again"):
                start = time.perf_counter()
                hypotheses = translate(sources, batch, beam, args.alpha)
                seconds = time.perf_counter() - start
                entry = {"batch": batch, "beam": beam, "pass": attempt, "seconds": seconds}
                print(json.dumps(entry), file=sys.stderr, flush=True)
                report["passes"].append({**entry, "hypotheses": hypotheses})
    report["peak_rss_mib"] = peak_rss_mib()
    return report


def peak_rss_mib() -> float:
    """This process's peak resident memory. `VmHWM` starts afresh at exec, where
    `getrusage`'s `ru_maxrss` keeps the parent's peak from before the fork."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def prepare_export(run: Path, engine: str) -> None:
    """Writes the folder `engine` reads (`run/onnx`, `run/ct2-int8`, ...) where missing;
    the CTranslate2 ones are converted from the Hugging Face export `run/hf`."""
    int8 = engine.endswith("int8")
    if engine.startswith("onnx") and not (run / engine / "manifest.json").is_file():
        from mintransformer.export.onnx_graphs import export_run

        export_run(run, run / engine, int8=int8)
    if engine.startswith("ct2"):
        from mintransformer.interop import ct2_export, hf_export

        # The text goes through R/hf's tokenizer, even where R/ct2 was converted elsewhere.
        if not (run / "hf" / "config.json").is_file():
            hf_export.export_run(run, run / "hf")
        if not (run / engine / "model.bin").is_file():
            ct2_export.convert(run / "hf", run / engine, quantization="int8" if int8 else None)


def score_passes(reports: list[dict], run: Path, ref: str | None) -> None:
    """Adds sentences/s, tokens/s, BLEU/chrF and agreement with keras to every pass, and
    drops the translations."""
    from mintransformer.inference.translator import score
    from mintransformer.runs.directory import RunDirectory

    tokenizer = RunDirectory.open(run).tokenizer()
    references = Path(ref).read_text(encoding="utf-8").splitlines() if ref else None
    keras = {
        (p["batch"], p["beam"], p["pass"]): p["hypotheses"]
        for r in reports
        if r["engine"] == "keras"
        for p in r["passes"]
    }
    for report in reports:
        for entry in report["passes"]:
            hypotheses = entry.pop("hypotheses")
            tokens = sum(len(ids) + 1 for ids in tokenizer.encode_batch(hypotheses))
            entry["sentences_per_s"] = len(hypotheses) / entry["seconds"]
            entry["tokens_per_s"] = tokens / entry["seconds"]
            reference = keras.get((entry["batch"], entry["beam"], entry["pass"]))
            if reference is not None:
                entry["same_as_keras"] = sum(
                    a == b for a, b in zip(hypotheses, reference, strict=True)
                )
            if references is not None:
                scores = score(hypotheses, references[: len(hypotheses)])
                entry["bleu"], entry["chrf"] = scores.bleu, scores.chrf


def run_engines(args: argparse.Namespace) -> dict:
    """Each engine in a fresh process; their reports, with the machine and settings."""
    reports = []
    for engine in args.engines.split(","):
        if engine not in ENGINES:
            raise SystemExit(f"unknown engine {engine!r}: choose from {', '.join(ENGINES)}")
        prepare_export(Path(args.run), engine)
        command = [sys.executable, "-m", "benchmarks.translate_end_to_end", *args.argv]
        command += ["--child", "--engines", engine]
        env = {**os.environ, "KERAS_BACKEND": "jax"} if "jax" in engine else None
        output = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False, env=env)
        lines = [line for line in output.stdout.splitlines() if line.startswith("{")]
        if output.returncode != 0 or not lines:
            raise SystemExit(f"{engine} failed (exit {output.returncode})")
        reports.append(json.loads(lines[-1]))
    score_passes(reports, Path(args.run), args.ref)
    return {
        "benchmark": "translate_end_to_end",
        "meta": {"argv": args.argv, "machine": machine(), "sources": args.src},
        "results": reports,
    }


def table(report: dict) -> str:
    """Start-up, memory, per pass sentences/s, tokens/s, BLEU, agreement and ratios."""
    keras_seconds = {
        (p["batch"], p["beam"], p["pass"]): p["seconds"]
        for result in report["results"]
        if result["engine"] == "keras"
        for p in result["passes"]
    }
    rows = []
    for result in report["results"]:
        startup = f"start-up {result['startup_s']:.1f} s, peak {result['peak_rss_mib']:.0f} MiB"
        rows.append([result["engine"], startup, "", "", "", "", ""])
        for p in result["passes"]:
            keras = keras_seconds.get((p["batch"], p["beam"], p["pass"]))
            rows.append(
                [
                    result["engine"],
                    f"batch {p['batch']}, beam {p['beam']}, {p['pass']}",
                    f"{p['sentences_per_s']:.1f}",
                    f"{p['tokens_per_s']:.0f}",
                    f"{p['bleu']:.2f} / {p['chrf']:.2f}" if "bleu" in p else "",
                    str(p.get("same_as_keras", "")),
                    f"{keras / p['seconds']:.2f}" if keras else "",
                ]
            )
    headers = ["engine", "what", "sent/s", "tokens/s", "BLEU / chrF", "= keras", "keras / it"]
    return format_table(headers, rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a translation run with its exports")
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--ref", help="references, for sacreBLEU")
    parser.add_argument("--batches", default="1,32", help="comma-separated batch sizes")
    parser.add_argument("--beams", default="1", help="comma-separated beam sizes (1: greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="beam length penalty")
    parser.add_argument("--limit", type=int, default=0, help="first N sources (0: all)")
    parser.add_argument("--engines", default="keras,onnx,onnx-int8")
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

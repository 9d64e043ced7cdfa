"""Benchmark: `mintransformer translate` of one sentence from a cold process, per engine.

    python -m benchmarks.cold_start --run runs/numbers
    python -m benchmarks.cold_start --run R --text "A man is riding a bike." --repeats 5

The run needs its exports for the export engines (`mintransformer export --run R` and
`--format ct2`); an engine whose export or runtime is missing is reported and left out.
Each engine translates `--text` in a fresh process (`python -m mintransformer translate`),
`--repeats` times in turns with the others; reported are the median wall seconds, the
ratio to the Keras engine on TensorFlow (above 1: faster), and the translation, so an
engine that translates differently shows it. Engines: "keras-<backend>" for each Keras
backend, "onnx", "ct2" and "auto" (the default, `--engine auto`).

Where the Keras engine's seconds go: per backend, a fresh process times importing Keras
and its backend, importing mintransformer's translator, loading the run, the first
translation (which compiles or traces the search) and a second one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    STARTING_ENVIRONMENT,
    format_table,
    machine,
    median,
    versions,
    write_json,
)

REFERENCE = "keras-tensorflow"
DEFAULT_ENGINES = "keras-tensorflow,keras-jax,keras-torch,onnx,ct2,auto"
STAGES_SCRIPT = """
import json, sys, time
started = time.perf_counter()
import keras
stages = {"import keras and its backend": time.perf_counter() - started}
mark = time.perf_counter()
from mintransformer.inference.translator import Translator
stages["import the translator"] = time.perf_counter() - mark
mark = time.perf_counter()
translator = Translator.from_run(sys.argv[1], engine="keras")
stages["load the run"] = time.perf_counter() - mark
for name in ("first translation", "second translation"):
    mark = time.perf_counter()
    translator.translate([sys.argv[2]])
    stages[name] = time.perf_counter() - mark
print(json.dumps(stages))
"""


def command(engine: str, run: str, text: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that translate `text` with `engine`."""
    line = [sys.executable, "-m", "mintransformer", "translate", "--run", run, "--verbose", "0"]
    environment = dict(STARTING_ENVIRONMENT)
    if engine.startswith("keras-"):
        environment["KERAS_BACKEND"] = engine.removeprefix("keras-")
        line += ["--engine", "keras"]
    else:
        line += ["--engine", engine]
    return [*line, text], environment


def translate_once(engine: str, run: str, text: str) -> tuple[float, str]:
    """Wall seconds of one cold `translate`, and its output; RuntimeError where it failed."""
    line, environment = command(engine, run, text)
    started = time.perf_counter()
    done = subprocess.run(line, env=environment, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    return seconds, done.stdout.strip()


def keras_stages(backend: str, run: str, text: str) -> dict[str, float]:
    """Seconds of each stage of the Keras engine's cold start on `backend`."""
    environment = {**STARTING_ENVIRONMENT, "KERAS_BACKEND": backend}
    done = subprocess.run(
        [sys.executable, "-c", STAGES_SCRIPT, run, text],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> dict:
    engines = args.engines.split(",")
    seconds: dict[str, list[float]] = {engine: [] for engine in engines}
    outputs, failed = {}, {}
    for _ in range(args.repeats):
        for engine in [e for e in engines if e not in failed]:
            try:
                took, outputs[engine] = translate_once(engine, str(args.run), args.text)
            except RuntimeError as err:
                failed[engine] = str(err)
                print(f"{engine}: left out ({err})", file=sys.stderr)
                continue
            seconds[engine].append(took)
    results = {}
    for engine in engines:
        if engine in failed:
            continue
        results[engine] = dict(
            median_s=median(seconds[engine]), seconds=seconds[engine], output=outputs[engine]
        )
    backends = [e.removeprefix("keras-") for e in engines if e.startswith("keras-")]
    stages = {
        b: keras_stages(b, str(args.run), args.text) for b in backends if f"keras-{b}" in results
    }
    return dict(results=results, failed=failed, keras_stages=stages)


def tables(report: dict) -> str:
    results = report["results"]
    reference = results.get(REFERENCE)
    rows = []
    for engine, result in results.items():
        ratio = reference["median_s"] / result["median_s"] if reference else None
        same = reference is None or result["output"] == reference["output"]
        rows.append(
            [
                engine,
                f"{result['median_s']:.2f}",
                f"{ratio:.1f}x" if ratio else "-",
                result["output"] + ("" if same else "  (differs)"),
            ]
        )
    text = format_table(["engine", "median s", f"{REFERENCE} / this", "translation"], rows)
    for backend, stages in report["keras_stages"].items():
        cells = [[name, f"{value:.2f}"] for name, value in stages.items()]
        text += f"\n\nthe Keras engine on {backend}, in one process:\n"
        text += format_table(["stage", "s"], cells)
    return text


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished translation run")
    parser.add_argument("--text", default="three hundred and forty-two", help="the sentence")
    parser.add_argument("--repeats", type=int, default=5, help="cold processes per engine")
    parser.add_argument("--engines", default=DEFAULT_ENGINES)
    parser.add_argument("--json", default=str(RESULTS_DIR / "cold_start.json"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report = measure(args)
    print(tables(report))
    write_json(
        {
            "benchmark": "cold_start",
            "machine": machine(),
            "versions": versions(),
            "settings": {k: str(v) for k, v in vars(args).items()},
            **report,
        },
        args.json,
    )


if __name__ == "__main__":
    main()

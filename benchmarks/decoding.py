"""Benchmark: decoding `target_length` (36) tokens with the config-A translation model.

    python -m benchmarks.decoding --backends tensorflow,jax,torch     # the full run
    python -m benchmarks.decoding --batches 1 --searches greedy       # this process's backend

Three implementations, each timed on greedy search and beam search (4 beams) at batch
1 and 32 (`greedy_search` / `beam_search` drive all three):

- ours cached: `CachedSteps` (key/value cache, encoder and cross-attention keys/values
  once per source). Each search is one compiled call, the token loop included
  (`greedy.compiled_greedy`, `beam.compiled_beam`, with XLA on TensorFlow); the others
  call a step compiled with `compile_inference` once per token from the searches'
  Python loops;
- ours recompute: `FullRecomputeSteps`, re-running the whole model on the prefix at every
  step, as the course material does (the model call compiled, as for ours cached);
- keras-hub cached: keras-hub's `TransformerDecoder` self- and cross-attention caches
  (`peers_keras_hub.KerasHubCachedSteps`), its steps compiled the same way as ours;
- onnxruntime fp32 / int8: our model exported (`export.onnx_graphs`, TensorFlow only)
  and run by `onnx_engine.OnnxSteps`, one onnxruntime call per token from the searches'
  Python loops; int8 is onnxruntime's dynamic quantization of the weights.

The models are randomly initialised. `end_id` is -1, an id that is never an argmax, so
every sentence (and every beam) runs the full `target_length` steps and all
implementations do the same work; the decoded lengths are checked. Reported: median ms
per decoded sentence batch, recompute / cached (the cache's speed-up) and keras-hub /
ours (> 1: ours is faster).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from benchmarks.common import (
    RESULTS_DIR,
    SEED,
    START_ID,
    TranslationShape,
    UnavailableError,
    format_table,
    keras_backend,
    machine,
    median,
    run_per_backend,
    time_calls,
    translation_batch,
    versions,
    write_json,
)
from benchmarks.train_step import CONFIGS, TINY_CONFIGS

NEVER_END_ID = -1  # never an argmax: every search decodes the full length
ALPHA = 0.6
CACHED, RECOMPUTE, KERAS_HUB = "ours cached", "ours recompute", "keras-hub cached"
ONNX_FP32, ONNX_INT8 = "onnxruntime fp32", "onnxruntime int8"
IMPLEMENTATIONS = (CACHED, RECOMPUTE, KERAS_HUB, ONNX_FP32, ONNX_INT8)


def ours_model(shape: TranslationShape):
    """A randomly initialised, built `Transformer` of `shape`."""
    import keras

    from mintransformer import Transformer

    keras.utils.set_random_seed(SEED)
    model = Transformer(
        shape.num_layers,
        shape.d_model,
        shape.num_heads,
        shape.dff,
        shape.source_vocab,
        shape.target_vocab,
        pe_input=shape.source_length,
        pe_target=shape.target_length,
        dropout_rate=shape.dropout,
    )
    dummy = np.ones((1, 2), "int32")
    model((dummy, dummy))
    return model


def keras_hub_steps(shape: TranslationShape):
    """`KerasHubCachedSteps` over a randomly initialised, built keras-hub `Translator`."""
    import keras

    try:
        from benchmarks import peers_keras_hub
    except ImportError as error:
        raise UnavailableError(f"keras-hub cannot be imported ({error})") from None
    keras.utils.set_random_seed(SEED)
    model = peers_keras_hub.Translator(shape)
    dummy = np.ones((1, 2), "int32")
    model((dummy, dummy))
    return peers_keras_hub.KerasHubCachedSteps(model, shape.target_length)


def onnx_steps(model, shape: TranslationShape, int8: bool):
    """`OnnxSteps` over `model` exported to a temporary folder (TensorFlow only)."""
    if keras_backend() != "tensorflow":
        raise UnavailableError("exporting to ONNX runs on the TensorFlow backend only")
    try:
        from mintransformer.export.folder import GRAPHS
        from mintransformer.export.onnx_engine import OnnxSteps, inference_session
        from mintransformer.export.onnx_graphs import cache_layout, translation_graphs, write_graphs

        folder = Path(tempfile.mkdtemp(prefix="decoding-onnx-"))
        write_graphs(translation_graphs(model), folder, int8)
    except ModuleNotFoundError as error:
        raise UnavailableError(str(error)) from None
    sizes = {name: (folder / name).stat().st_size for name in GRAPHS["translation"]}
    print(f"exported {'int8' if int8 else 'fp32'} graphs, bytes: {sizes}", flush=True)
    sessions = [inference_session(folder / name) for name in GRAPHS["translation"]]
    return OnnxSteps(
        *sessions,
        **cache_layout(model),
        max_length=shape.target_length,
        source_positions=model.encoder.max_length,
    )


def step_builders(shape: TranslationShape, only: str) -> dict[str, Callable[[], object]]:
    """Name -> builder of a steps object (`start` / `step` / `reorder`), as `only` selects."""
    from mintransformer.decoding.steps import CachedSteps, FullRecomputeSteps

    builders: dict[str, Callable[[], object]] = {}
    if only in ("ours", "onnx", "all"):
        model = ours_model(shape)
    if only in ("ours", "all"):
        builders[CACHED] = lambda: CachedSteps(model, shape.target_length)
        builders[RECOMPUTE] = lambda: FullRecomputeSteps(model, shape.target_length)
    if only in ("peers", "all"):
        builders[KERAS_HUB] = lambda: keras_hub_steps(shape)
    if only in ("onnx", "all"):
        builders[ONNX_FP32] = lambda: onnx_steps(model, shape, int8=False)
        builders[ONNX_INT8] = lambda: onnx_steps(model, shape, int8=True)
    return builders


def decoder(
    steps: object, search: str, sources: np.ndarray, length: int, beam_size: int
) -> Callable:
    """A runner of one full search over `sources`; checks every sentence is `length` long."""
    from mintransformer.decoding.beam import beam_search
    from mintransformer.decoding.greedy import greedy_search

    def run() -> list[list[int]]:
        options = dict(start_id=START_ID, end_id=NEVER_END_ID, max_length=length)
        if search == "greedy":
            outputs = greedy_search(steps, sources, **options)
        else:
            outputs, _ = beam_search(steps, sources, beam_size=beam_size, alpha=ALPHA, **options)
        if any(len(tokens) != length for tokens in outputs):
            raise RuntimeError(f"{search} search stopped before {length} tokens")
        return outputs

    return run


def run_here(args: argparse.Namespace) -> dict:
    """Times every selected implementation, batch size and search in this process."""
    shape = (TINY_CONFIGS if args.tiny else CONFIGS)["A"]
    batches = [int(size) for size in args.batches.split(",")]
    searches = args.searches.split(",")
    source, _, _ = translation_batch(dataclasses.replace(shape, batch=max(batches)))
    report = new_report(args, shape)
    report["meta"]["versions"] = versions()
    backend = keras_backend()
    for name, build in step_builders(shape, args.only).items():
        try:
            steps = build()
        except UnavailableError as reason:
            print(f"skipped: {name}: {reason}", flush=True)
            report["skipped"].append(
                {"implementation": name, "backend": backend, "reason": str(reason)}
            )
            continue
        for batch in batches:
            for search in searches:
                print(f"timing {name} [{backend}] batch {batch} {search} ...", flush=True)
                run = decoder(steps, search, source[:batch], shape.target_length, args.beam_size)
                entry = {
                    "implementation": name,
                    "backend": backend,
                    "batch": batch,
                    "search": search,
                }
                try:
                    times = time_calls(run, args.steps, args.warmup)
                except Exception as error:  # a broken peer must not lose the other measurements
                    traceback.print_exc()
                    reason = f"failed: {type(error).__name__}: {error}"
                    report["skipped"].append({**entry, "reason": reason})
                    continue
                report["results"].append(
                    {
                        **entry,
                        "median_ms": median(times),
                        "median_ms_per_sentence": median(times) / batch,
                        "times_ms": times,
                    }
                )
    return finalize(report)


def new_report(args: argparse.Namespace, shape: TranslationShape) -> dict:
    return {
        "benchmark": "decoding",
        "meta": {
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "argv": args.argv,
            "steps": args.steps,
            "warmup": args.warmup,
            "tiny": args.tiny,
            "model": dataclasses.asdict(shape),
            "tokens_decoded": shape.target_length,
            "end_id": NEVER_END_ID,
            "beam_size": args.beam_size,
            "alpha": ALPHA,
            "keras_backends": args.backends.split(",") if args.backends else [keras_backend()],
            "machine": machine(),
        },
        "results": [],
        "ratios": [],
        "skipped": [],
    }


def finalize(report: dict) -> dict:
    """Per backend, batch and search: recompute / cached and keras-hub / ours cached."""
    timed = {
        (row["backend"], row["batch"], row["search"], row["implementation"]): row["median_ms"]
        for row in report["results"]
    }
    report["ratios"] = []
    for backend, batch, search in dict.fromkeys(key[:3] for key in timed):
        cached = timed.get((backend, batch, search, CACHED))
        recompute = timed.get((backend, batch, search, RECOMPUTE))
        hub = timed.get((backend, batch, search, KERAS_HUB))
        report["ratios"].append(
            {
                "backend": backend,
                "batch": batch,
                "search": search,
                "recompute_over_cached": recompute / cached if cached and recompute else None,
                "keras_hub_over_ours": hub / cached if cached and hub else None,
            }
        )
    return report


def merge(reports: list[dict], args: argparse.Namespace, shape: TranslationShape) -> dict:
    merged = new_report(args, shape)
    for report in reports:
        merged["meta"].setdefault("versions", report["meta"]["versions"])
        merged["results"] += report["results"]
        merged["skipped"] += report["skipped"]
    return finalize(merged)


def summary(report: dict) -> str:
    """The table of median ms per sentence batch and the ratios, as text."""

    def cell(value: float | None, unit: str = "") -> str:
        return "-" if value is None else f"{value:.2f}{unit}"

    timed = {
        (row["backend"], row["batch"], row["search"], row["implementation"]): row["median_ms"]
        for row in report["results"]
    }
    headers = ["backend", "batch", "search", *IMPLEMENTATIONS]
    headers += ["recompute/cached", "keras-hub/ours"]
    rows = []
    for ratio in report["ratios"]:
        key = (ratio["backend"], ratio["batch"], ratio["search"])
        rows.append(
            [
                *key,
                *(cell(timed.get((*key, name))) for name in IMPLEMENTATIONS),
                cell(ratio["recompute_over_cached"], "x"),
                cell(ratio["keras_hub_over_ours"], "x"),
            ]
        )
    lines = ["", "median ms per sentence batch", format_table(headers, rows)]
    lines += [f"skipped: {skip['implementation']}: {skip['reason']}" for skip in report["skipped"]]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,32", help="comma-separated batch sizes")
    parser.add_argument("--searches", default="greedy,beam", help="greedy, beam or both")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="timed decodes per setting")
    parser.add_argument("--warmup", type=int, default=1, help="untimed decodes first")
    parser.add_argument("--only", choices=["ours", "peers", "onnx", "all"], default="all")
    parser.add_argument(
        "--backends",
        help="comma-separated Keras backends, one subprocess each (default: this process's)",
    )
    parser.add_argument("--tiny", action="store_true", help="shrunk model and batches")
    parser.add_argument("--json", default=str(RESULTS_DIR / "decoding.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.searches.split(",")) - {"greedy", "beam"}
    if unknown:
        parser.error(f"unknown search {sorted(unknown)}; choose greedy and/or beam")
    return args


def child_args(args: argparse.Namespace) -> list[str]:
    forwarded = ["--batches", args.batches, "--searches", args.searches]
    forwarded += ["--beam-size", str(args.beam_size), "--steps", str(args.steps)]
    forwarded += ["--warmup", str(args.warmup), "--only", args.only]
    return forwarded + (["--tiny"] if args.tiny else [])


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark, prints the table, writes the JSON; returns the report."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Re-running the model on a 1-token prefix makes Keras warn about a softmax over size 1.
    warnings.filterwarnings("ignore", message="You are using a softmax over axis")
    args = parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    shape = (TINY_CONFIGS if args.tiny else CONFIGS)["A"]
    start = time.perf_counter()
    if args.backends:
        reports = run_per_backend("benchmarks.decoding", child_args(args), args.backends.split(","))
        report = merge(reports, args, shape)
    else:
        report = run_here(args)
    report["meta"]["wall_s"] = round(time.perf_counter() - start, 1)
    path = write_json(report, args.json)
    if not args.child:
        print(summary(report))
        print(f"\nwrote {path}")
    return report


if __name__ == "__main__":
    main()

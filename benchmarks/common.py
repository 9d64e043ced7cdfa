"""Helpers shared by the benchmark scripts: data, timing, versions, JSON, per-backend runs."""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The environment as this process got it: a process that runs another checkout gets this
# one, so that the checkout sets up its runtime itself, as it would on its own.
STARTING_ENVIRONMENT = dict(os.environ)

# Imported before anything loads TensorFlow: it sets the environment TensorFlow reads then
# (oneDNN kernels on), so that every implementation runs as our training does.
import mintransformer  # noqa: E402, F401

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
PAD_ID = 0
START_ID = 1
PAD_FRACTION = 0.1
SEED = 0


class UnavailableError(Exception):
    """An implementation that cannot run here (a missing package or class)."""


@dataclass(frozen=True)
class TranslationShape:
    """An encoder-decoder model and its training batch."""

    num_layers: int
    d_model: int
    num_heads: int
    dff: int
    source_vocab: int
    target_vocab: int
    batch: int
    source_length: int
    target_length: int
    dropout: float = 0.1


@dataclass(frozen=True)
class ClassifierShape:
    """An encoder-only text classifier (mean pooling, Dense(hidden, relu), Dense(1)) and its batch.

    Attention has `num_heads` heads of width `key_dim` each (`key_dim` may exceed
    `d_model // num_heads`, as in `keras.layers.MultiHeadAttention(num_heads=4, key_dim=64)`).
    `attention_dropout` 0: no dropout on the attention weights, as in the TensorFlow
    tutorial's model, which has none.
    """

    num_layers: int
    d_model: int
    num_heads: int
    key_dim: int
    dff: int
    vocab: int
    batch: int
    length: int
    hidden: int = 64
    dropout: float = 0.1
    attention_dropout: float | None = None  # on the attention weights; None: `dropout`


def padded_ids(rng: np.random.Generator, batch: int, length: int, vocab: int) -> np.ndarray:
    """Random ids in [2, vocab) with `PAD_ID` at the tail of ~`PAD_FRACTION` of the positions.

    Each row keeps a uniform random number of tail pads in [0, 2 * PAD_FRACTION * length],
    and at least one real token.
    """
    ids = rng.integers(2, vocab, size=(batch, length)).astype("int32")
    most = min(round(2 * PAD_FRACTION * length), length - 1)
    pads = rng.integers(0, most + 1, size=batch)
    for row, pad in enumerate(pads):
        if pad:
            ids[row, length - pad :] = PAD_ID
    return ids


def translation_batch(shape: TranslationShape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fixed-seed teacher-forcing batch: `(source, decoder_input, labels)`.

    The target is drawn with `target_length + 1` positions (<s> first) and shifted, as in
    training, so decoder inputs and labels both have `target_length` positions.
    """
    rng = np.random.default_rng(SEED)
    source = padded_ids(rng, shape.batch, shape.source_length, shape.source_vocab)
    target = padded_ids(rng, shape.batch, shape.target_length + 1, shape.target_vocab)
    target[:, 0] = START_ID
    return source, target[:, :-1], target[:, 1:]


def classification_batch(shape: ClassifierShape) -> tuple[np.ndarray, np.ndarray]:
    """The fixed-seed classification batch: `(token_ids, labels in {0, 1})`."""
    rng = np.random.default_rng(SEED)
    ids = padded_ids(rng, shape.batch, shape.length, shape.vocab)
    return ids, rng.integers(0, 2, size=shape.batch).astype("int32")


def time_calls(run: Callable[[], object], steps: int, warmup: int) -> list[float]:
    """Milliseconds of each of `steps` calls of `run` after `warmup` untimed ones.

    `run` must return only once its work is finished (results on the host).
    """
    for _ in range(warmup):
        run()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def time_in_turns(
    builders: Mapping[str, Callable[[], Callable[[], object]]], steps: int, warmup: int
) -> dict[str, tuple[list[float], str | None]]:
    """Times runners stepped in turns: per name `(times_ms, None)` or `([], why it was skipped)`.

    Every runner is built (`builders[name]()`) and warmed up first, then each round
    calls each once, so a machine whose speed drifts during the run (cores shared
    with other machines: the same step has measured 340 ms in one minute and 410 in
    the next) slows them all alike and their ratios hold. A runner that raises
    `UnavailableError` or fails is reported and dropped; the others go on.
    """
    runners: dict[str, Callable[[], object]] = {}
    results: dict[str, tuple[list[float], str | None]] = {}

    def attempt(name: str, work: Callable[[], object]) -> bool:
        try:
            work()
            return True
        except UnavailableError as reason:
            results[name] = ([], str(reason))
        except Exception as error:  # a broken peer must not lose the other measurements
            traceback.print_exc()
            results[name] = ([], f"failed: {type(error).__name__}: {error}")
        runners.pop(name, None)
        return False

    for name, build in builders.items():
        print(f"building {name} ...", flush=True)

        def build_and_warm_up(name=name, build=build):
            runners[name] = build()
            for _ in range(warmup):
                runners[name]()

        attempt(name, build_and_warm_up)
        gc.collect()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(steps):
        for name, runner in list(runners.items()):
            start = time.perf_counter()
            if attempt(name, runner):
                times[name].append((time.perf_counter() - start) * 1000.0)
    results.update({name: (times[name], None) for name in runners})
    return {name: results[name] for name in builders}


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def keras_backend() -> str:
    """The Keras backend this process runs (fixed by KERAS_BACKEND at first import)."""
    import keras

    return keras.backend.backend()


def versions() -> dict[str, str]:
    """Versions of the packages the benchmarks may use (absent ones are left out)."""
    found = {"python": platform.python_version()}
    for name in ("keras", "keras_hub", "tensorflow", "jax", "torch", "numpy", "mintransformer"):
        try:
            found[name] = importlib.import_module(name).__version__
        except (ImportError, AttributeError):
            continue
    return found


def machine() -> dict:
    """What the numbers were measured on."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def write_json(data: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def run_decoding_parser(doc: str) -> argparse.ArgumentParser:
    """The parser of a benchmark that decodes a finished run's model: `--run`, `--src`."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished translation run")
    parser.add_argument("--src", type=Path, required=True, help="source sentences, one a line")
    return parser


def write_report(results: dict, args: argparse.Namespace) -> dict:
    """Writes `{machine, versions, settings, results}` to `args.json`; returns it."""
    report = {
        "machine": machine(),
        "versions": versions(),
        "settings": {k: str(v) for k, v in vars(args).items()},
        "results": results,
    }
    write_json(report, args.json)
    return report


def run_per_backend(
    module: str, child_args: list[str], backends: list[str], later_args: Sequence[str] = ()
) -> list[dict]:
    """Runs `python -m module *child_args` once per Keras backend; returns their JSON reports.

    Runs after the first also get `later_args` (e.g. to skip backend-independent work).
    A run that fails is reported on stderr and left out.
    """
    reports = []
    with tempfile.TemporaryDirectory() as folder:
        for index, backend in enumerate(backends):
            path = Path(folder) / f"{backend}.json"
            command = [sys.executable, "-m", module, *child_args, "--child", "--json", str(path)]
            if index:
                command += later_args
            print(f"\n=== KERAS_BACKEND={backend} ===", flush=True)
            env = {**os.environ, "KERAS_BACKEND": backend}
            completed = subprocess.run(command, env=env, cwd=REPO_ROOT, check=False)
            if completed.returncode != 0 or not path.is_file():
                print(f"backend {backend} failed (exit {completed.returncode})", file=sys.stderr)
                continue
            reports.append(json.loads(path.read_text()))
    return reports


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain fixed-width text table."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in (headers, *rows)
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)

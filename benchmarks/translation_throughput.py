"""Benchmark: real training throughput on Multi30k EN->FR, the `base` preset against peers.

    git worktree add /tmp/mt-e61768f e61768f        # an earlier commit, as a baseline
    python -m benchmarks.translation_throughput --data ../shared/data/multi30k \\
        --baseline /tmp/mt-e61768f --reference ../shared/reference/mt.py --precisions fp32,bf16

Each implementation runs in its own process, one after the other, on the same machine:

- "ours" (this checkout) and "baseline" (another checkout of mintransformer) train the
  `base` preset (3+3 layers, d 256, joint BPE 8k) through their own training loop on the
  first `--pairs` Multi30k training pairs for `--epochs` epochs, validating on 200 pairs.
  The first epoch (tracing, warm-up) is not timed; the others are timed from the epoch's
  start to its last step, so the data pipeline and epoch boundaries count and
  validation does not.
- "reference" runs the hand-written PyTorch script's own benchmark (`--bench`: 5 warm-up
  and `--reference-steps` timed steps of ~4096-token batches).

`--precisions fp32,bf16` runs each implementation in both: ours with bf16 mixed precision
(`mixed_bfloat16`), the reference with its `--bf16 1` autocast. The report then also gives
ours in its faster precision against each peer in its faster one.

Throughput is real tokens per second: non-padding source tokens plus non-padding target
labels (every sentence + its end token on both sides), as the reference counts them. The
report gives each implementation's median over `--repeats` runs, as a ratio to ours in the
first precision given.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    REPO_ROOT,
    RESULTS_DIR,
    STARTING_ENVIRONMENT,
    format_table,
    machine,
    median,
    write_json,
)


def read_pairs(data: Path, split: str, count: int) -> list[tuple[str, str]]:
    def lines(lang: str) -> list[str]:
        return (data / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:count]

    return list(zip(lines("en"), lines("fr"), strict=True))


def base_config(epochs: int):
    """The `base` translation preset, in whichever API the running checkout has."""
    try:
        from mintransformer.config import make_config

        return make_config("translation", "base", epochs=epochs)
    except ImportError:  # checkouts before `config.py`
        from mintransformer.cli import PRESETS
        from mintransformer.run import TranslationConfig

        return TranslationConfig(**{**PRESETS["base"], "epochs": epochs})


def child(args: argparse.Namespace) -> dict:
    """Trains the running checkout's `base` model and measures its epochs."""
    import keras

    from mintransformer.training import translation

    try:  # the layout of packages (backend/, runs/, data/tokenizer.py)
        from mintransformer.backend.runtime import configure_runtime
        from mintransformer.data.tokenizer import Tokenizer
        from mintransformer.runs.directory import RunDirectory
        from mintransformer.runs.loading import build_model
        from mintransformer.training.loop import fit

        print(configure_runtime())
        compile_model = translation.compile_model
    except ImportError:  # flat checkouts, before it
        from mintransformer.run import RunDirectory
        from mintransformer.tokenizer import Tokenizer

        try:  # what the trainer does first, in checkouts that have it
            from mintransformer import backend_adapter
        except ImportError:
            backend_adapter = None
        # configure_runtime was configure_threads (thread pools only) in older checkouts.
        for setup in ("configure_runtime", "configure_threads"):
            if hasattr(backend_adapter, setup):
                print(getattr(backend_adapter, setup)())
                break
        try:
            from mintransformer.loading import build_model
            from mintransformer.training.loop import fit
        except ImportError:  # checkouts before `training/loop.py`
            build_model, fit = translation.build_model, translation.fit_run
        compile_model = translation.compile_for_training

    config = base_config(args.epochs)
    keras.utils.set_random_seed(config.seed)
    train_pairs = read_pairs(args.data, "train", args.pairs)
    tokenizer = Tokenizer.train(
        [text for pair in train_pairs for text in pair], vocab_size=config.vocab_size
    )
    train = translation.make_batches(tokenizer, train_pairs, config, shuffle=True)
    val = translation.make_batches(tokenizer, read_pairs(args.data, "val", 200), config, False)
    sources = tokenizer.encode_batch([source for source, _ in train_pairs])
    targets = tokenizer.encode_batch([target for _, target in train_pairs])
    real_tokens = sum(
        len(source) + 1 + len(target) + 1
        for source, target in zip(sources, targets, strict=True)
        if max(len(source), len(target)) + 1 <= config.max_length
    )
    try:
        model = build_model(config, tokenizer.vocab_size, mixed_precision=args.bf16)
    except TypeError:  # checkouts whose build_model takes no precision
        if args.bf16:
            raise
        model = build_model(config, tokenizer.vocab_size)
    # Newer checkouts return the model to fit (a trainer around `model`); older ones None.
    trainee = compile_model(model, config, len(train)) or model

    epoch_seconds = []

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.last = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            epoch_seconds.append(self.last - self.start)

    untimed_fit = keras.Model.fit

    def timed_fit(self, *fit_args, callbacks=None, **fit_kwargs):
        return untimed_fit(
            self, *fit_args, callbacks=[EpochTimer(), *(callbacks or [])], **fit_kwargs
        )

    keras.Model.fit = timed_fit
    with tempfile.TemporaryDirectory() as folder:
        run = RunDirectory.create(Path(folder) / "run", config)
        fit(run, trainee, train, val, config, False, 0)
    timed = epoch_seconds[1:]
    return {
        "steps_per_epoch": len(train),
        "real_tokens_per_epoch": real_tokens,
        "epoch_seconds": epoch_seconds,
        "tokens_per_s": real_tokens * len(timed) / sum(timed),
    }


def run_checkout(name: str, checkout: Path, args: argparse.Namespace, bf16: bool) -> dict:
    """Runs `child` in a subprocess on `checkout`'s source tree, in fp32 or bf16."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        command = [sys.executable, "-m", "benchmarks.translation_throughput", "--child"]
        command += ["--data", str(args.data), "--pairs", str(args.pairs)]
        command += ["--epochs", str(args.epochs), "--json", str(report)]
        command += ["--bf16"] if bf16 else []
        env = {
            **STARTING_ENVIRONMENT,
            "PYTHONPATH": str(checkout / "src"),
            "TF_CPP_MIN_LOG_LEVEL": "3",
        }
        start = time.perf_counter()
        completed = subprocess.run(command, cwd=REPO_ROOT, env=env, check=False)
        if completed.returncode or not report.is_file():
            raise RuntimeError(f"{name} failed (exit {completed.returncode})")
        result = json.loads(report.read_text())
    result["wall_s"] = time.perf_counter() - start
    print(f"{name}: {result['tokens_per_s']:,.0f} real tokens/s", flush=True)
    return result


def run_reference(script: Path, args: argparse.Namespace, bf16: bool) -> dict:
    """Runs the reference script's `--bench` (fp32 or bf16 autocast), reads its result line."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, str(script), "--bench", str(args.reference_steps)]
        command += ["--bf16", str(int(bf16)), "--out", folder]
        output = subprocess.run(command, capture_output=True, text=True, check=False).stdout
    found = re.search(r"^BENCH (\{.*\})$", output, re.M)
    if found is None:
        raise RuntimeError(f"the reference printed no BENCH line:\n{output[-2000:]}")
    result = json.loads(found.group(1))
    print(
        f"reference {'bf16' if bf16 else 'fp32'}: {result['tok_per_s']:,.0f} real tokens/s",
        flush=True,
    )
    return {"tokens_per_s": result["tok_per_s"], "sec_per_step": result["sec_per_step"]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared/data/multi30k")
    parser.add_argument("--baseline", type=Path, help="another mintransformer checkout")
    parser.add_argument("--reference", type=Path, help="the reference script, mt.py")
    parser.add_argument("--pairs", type=int, default=6000, help="training pairs used")
    parser.add_argument("--epochs", type=int, default=3, help="epochs (the first is not timed)")
    parser.add_argument("--reference-steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "translation_throughput.json")
    parser.add_argument(
        "--precisions", default="fp32", help="comma-separated: fp32, bf16 (each runs every one)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.precisions = args.precisions.split(",")
    if set(args.precisions) - {"fp32", "bf16"}:
        parser.error(f"--precisions takes fp32 and bf16, got {','.join(args.precisions)}")
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first epoch is not timed")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.child:
        return write_json(child(args), args.json)
    names = [("ours", REPO_ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
    runs: dict[str, list[dict]] = {}
    for _ in range(args.repeats):  # interleaved, so drifts in machine load hit all alike
        for precision in args.precisions:
            bf16 = precision == "bf16"
            for name, checkout in names:
                key = f"{name} {precision}"
                runs.setdefault(key, []).append(run_checkout(key, checkout, args, bf16))
            if args.reference:
                key = f"reference {precision}"
                runs.setdefault(key, []).append(run_reference(args.reference, args, bf16))
    speeds = {name: median([r["tokens_per_s"] for r in results]) for name, results in runs.items()}
    best = {
        name: max(speeds[f"{name} {precision}"] for precision in args.precisions)
        for name in [name for name, _ in names] + (["reference"] if args.reference else [])
    }
    rows = [
        [name, f"{speed:,.0f}", f"{speed / speeds[f'ours {args.precisions[0]}']:.2f}x"]
        for name, speed in speeds.items()
    ]
    print(
        format_table(
            ["implementation", "real tokens/s (median)", "/ ours " + args.precisions[0]], rows
        )
    )
    for name, speed in best.items():
        if name != "ours":
            print(f"ours in its best precision / {name} in its best: {best['ours'] / speed:.2f}x")
    report = {
        "machine": machine(),
        "settings": {k: str(v) for k, v in vars(args).items() if k != "child"},
        "runs": runs,
        "median_tokens_per_s": speeds,
        "best_precision_tokens_per_s": best,
    }
    write_json(report, args.json)
    return report


if __name__ == "__main__":
    main()

"""Kill and resume: SIGKILL a small training run at random moments, resume after each, and
compare its final weights with an uninterrupted run's, bit for bit.

    python -m benchmarks.kill_resume --kills 10

Both runs train the embedded numbers corpus on a tiny model with the command line, in
subprocesses. The kills are spread over the training: each targets a distinct epoch
(drawn at random, in increasing order) and comes a random moment after that epoch's
checkpoint, within the uninterrupted run's wall time per epoch (so in training,
validation or the next checkpoint write); a kill that targets epoch 0 comes a random
moment after the start, before the first checkpoint. After each kill every checkpoint
on disk must read back whole, and the next start resumes (or starts afresh, if the
kill came before the run's config was written).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import REPO_ROOT, RESULTS_DIR, format_table, machine, versions, write_json

# A tiny translation run: on one core about 9 s of start-up, then about 1 s an epoch.
TINY_RUN = [
    "--num-train", "3000", "--layers", "1", "--d-model", "32", "--heads", "2", "--dff", "64",
    "--vocab-size", "200", "--max-tokens", "1500", "--warmup", "20", "--max-length", "48",
    "--average-last", "2", "--report", "0", "--verbose", "0",
]  # fmt: skip


def train_command(run: Path, epochs: int) -> list[str]:
    """The command that starts the run, or resumes it once its config exists."""
    command = [sys.executable, "-m", "mintransformer", "train", "translation", "--run", str(run)]
    if (run / "config.json").is_file():
        return [*command, "--resume", "--verbose", "0", "--report", "0"]
    return [*command, *TINY_RUN, "--epochs", str(epochs)]


def environment() -> dict[str, str]:
    source = str(REPO_ROOT / "src")
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{path}" if path else source}


def newest_epoch(run: Path) -> int:
    from mintransformer.runs.directory import RunDirectory

    saved = RunDirectory(run).checkpoints()
    return RunDirectory.epoch_of(saved[-1]) if saved else 0


def start(run: Path, epochs: int) -> subprocess.Popen:
    """Starts `run`, or resumes it once its config exists."""
    return subprocess.Popen(
        train_command(run, epochs), env=environment(), stdout=subprocess.DEVNULL
    )


def train_to_the_end(run: Path, epochs: int) -> tuple[float, float]:
    """Trains (or resumes) `run` to the end.

    Returns:
        the wall time in seconds, and the seconds until the first checkpoint appeared.
    """
    began = time.perf_counter()
    process = start(run, epochs)
    first_checkpoint = None
    while process.poll() is None:
        if first_checkpoint is None and newest_epoch(run) >= 1:
            first_checkpoint = time.perf_counter() - began
        time.sleep(0.02)
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, process.args)
    total = time.perf_counter() - began
    return total, first_checkpoint or total


def kill_in_epoch(run: Path, epochs: int, target: int, delay: float) -> dict:
    """Starts or resumes `run`; SIGKILLs it `delay` seconds after it has written the
    checkpoint of epoch `target` (after it started, for 0), if it still runs."""
    from mintransformer.runs import checkpoints
    from mintransformer.runs.directory import RunDirectory

    process = start(run, epochs)
    while process.poll() is None and newest_epoch(run) < target:
        time.sleep(0.01)
    try:
        process.wait(timeout=delay)
        killed = False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed = True
    saved = RunDirectory(run).checkpoints()
    for checkpoint in saved:  # every file on disk is whole
        checkpoints.read_arrays(checkpoint)
    return {
        "after_epoch": target,
        "delay_s": round(delay, 2),
        "killed": killed,
        "epochs_on_disk": [RunDirectory.epoch_of(p) for p in saved],
    }


def compare_weights(got: Path, expected: Path) -> dict:
    """How many tensors of two weight files are bit for bit equal, and the largest difference."""
    from mintransformer.runs import checkpoints

    got_arrays, _ = checkpoints.read_arrays(got)
    expected_arrays, _ = checkpoints.read_arrays(expected)
    identical = sum(
        a.shape == b.shape and a.tobytes() == b.tobytes()
        for a, b in zip(got_arrays, expected_arrays, strict=True)
    )
    largest = max(
        float(np.max(np.abs(a.astype("float64") - b.astype("float64")), initial=0.0))
        for a, b in zip(got_arrays, expected_arrays, strict=True)
    )
    return {
        "tensors": len(expected_arrays),
        "identical_tensors": identical,
        "bit_for_bit": identical == len(expected_arrays),
        "max_abs_difference": largest,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--kills", type=int, default=5, help="SIGKILLs before the last resume (<= --epochs)"
    )
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "kill_resume.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        reference, victim = Path(folder) / "reference", Path(folder) / "victim"
        reference_seconds, start_up = train_to_the_end(reference, args.epochs)
        # wall time per epoch: training, validation and the checkpoint write
        epoch_seconds = (reference_seconds - start_up) / max(args.epochs - 1, 1)
        print(f"uninterrupted run: {reference_seconds:.1f} s", flush=True)
        kills = []
        for target in sorted(rng.choice(args.epochs, size=args.kills, replace=False)):
            window = epoch_seconds if target else start_up
            delay = float(rng.uniform(0.0, window))
            kills.append(kill_in_epoch(victim, args.epochs, int(target), delay))
            print(f"kill {len(kills)}: {kills[-1]}", flush=True)
        train_to_the_end(victim, args.epochs)
        comparison = compare_weights(victim / "model.npz", reference / "model.npz")
    report = {
        "meta": {"versions": versions(), "machine": machine()},
        "settings": {"kills": args.kills, "epochs": args.epochs, "seed": args.seed},
        "reference_seconds": round(reference_seconds, 1),
        "epoch_seconds": round(epoch_seconds, 2),
        "kills": kills,
        "comparison": comparison,
    }
    write_json(report, args.json)
    rows = [
        [str(i + 1), str(k["after_epoch"]), f"{k['delay_s']:.2f}"]
        + ["yes" if k["killed"] else "finished first"]
        + [",".join(map(str, k["epochs_on_disk"])) or "-"]
        for i, k in enumerate(kills)
    ]
    headers = ["kill", "after epoch", "then (s)", "killed", "checkpoints on disk"]
    print(format_table(headers, rows))
    print(
        f"final weights: {comparison['identical_tensors']} of {comparison['tensors']} tensors "
        f"bit for bit equal to the uninterrupted run's (largest difference "
        f"{comparison['max_abs_difference']:.3g})"
    )
    return report


if __name__ == "__main__":
    main()

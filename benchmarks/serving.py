"""Benchmark: `mintransformer serve` under 1, 8 and 32 concurrent clients.

    python -m benchmarks.serving --run runs/numbers [--onnx runs/numbers/onnx]

For each server setting (keras or onnx engine; batching on: up to 32 sentences per decode,
`--max-wait-ms` wait, 5 by default; off: one request per decode) a server process is
started on a free loopback port and sent `--requests` one-sentence greedy translate
requests, spread over `--clients` concurrent clients (each sends its next request when the
last is answered). Reported per run: sentences/s and the p50/p95/p99 latency of a request,
its ratio to the ceiling, offline `Translator.translate(batch_size=32)` of the same
sentences on the same engine in this process, and how many answers differ from that offline
translation. The baseline: `--cli N` sentences each translated by its own `mintransformer
translate` process, as a user without a server would. The sentences are the first
`--requests` lines of `--src`, or of the run's own test split.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(
    path: Path, engine: str, batching: bool, max_wait_ms: float = 5.0
) -> tuple[subprocess.Popen, str, float]:
    """A server process, its URL, and the seconds it took to answer its health check."""
    import httpx

    port = free_port()
    flags = ["--max-batch-size", "32", "--max-wait-ms", str(max_wait_ms)] if batching else [
        "--max-batch-size", "1", "--max-wait-ms", "0"]  # fmt: skip
    command = [sys.executable, "-m", "mintransformer", "serve", "--run", str(path)]
    command += ["--engine", engine, "--port", str(port), "--warm-beams", "1", *flags]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    began = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            raise RuntimeError(process.stderr.read().decode())
        try:
            if httpx.get(url + "/api/health", timeout=2).status_code == 200:
                return process, url, time.perf_counter() - began
        except httpx.HTTPError:
            time.sleep(0.5)


async def load(url: str, texts: list[str], clients: int) -> tuple[dict, list[str]]:
    """Sends each text as one request from `clients` concurrent clients; the figures and
    the translations, in the order of `texts`."""
    import httpx

    latencies: list[float] = []
    answers = [""] * len(texts)
    queue = list(reversed(range(len(texts))))

    async def client(session: httpx.AsyncClient) -> None:
        while queue:
            index = queue.pop()
            began = time.perf_counter()
            response = await session.post("/api/translate", json={"texts": [texts[index]]})
            response.raise_for_status()
            latencies.append(time.perf_counter() - began)
            answers[index] = response.json()["results"][0]["translation"]

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as session:
        began = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        seconds = time.perf_counter() - began
    p50, p95, p99 = np.percentile(np.array(latencies) * 1000, [50, 95, 99])
    row = {
        "clients": clients,
        "sentences_per_s": round(len(texts) / seconds, 1),
        "p50_ms": round(float(p50), 1),
        "p95_ms": round(float(p95), 1),
        "p99_ms": round(float(p99), 1),
    }
    return row, answers


def offline(path: Path, texts: list[str], engine: str) -> tuple[float, list[str]]:
    """Sentences/s of `Translator.translate(batch_size=32)` on `engine` (after one warm-up
    pass), and its translations."""
    from mintransformer import Translator

    translator = Translator.from_run(path, engine=engine)
    translator.translate(texts, batch_size=32)
    began = time.perf_counter()
    translations = translator.translate(texts, batch_size=32)
    return len(texts) / (time.perf_counter() - began), translations


def cli_baseline(path: Path, texts: list[str]) -> dict:
    """Sentences/s and median latency of one `mintransformer translate` process per text."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    latencies = []
    for text in texts:
        command = [sys.executable, "-m", "mintransformer", "translate", "--run", str(path), text]
        began = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        latencies.append(time.perf_counter() - began)
    return {
        "sentences_per_s": round(len(texts) / sum(latencies), 3),
        "p50_ms": round(float(np.median(latencies)) * 1000, 1),
        "sentences": len(texts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--onnx", type=Path, help="the run's export folder (adds onnx rows)")
    parser.add_argument(
        "--src", type=Path, help="sentences, one per line (default: the run's test split)"
    )
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="with batching on")
    parser.add_argument("--batching", default="on,off", help="on, off or on,off")
    parser.add_argument("--cli", type=int, default=3, help="sentences for the CLI baseline")
    parser.add_argument("--output", type=Path, help="also write the results as JSON")
    args = parser.parse_args()

    import mintransformer  # noqa: F401  (sets TensorFlow's oneDNN default first)
    from mintransformer.data.corpora import load_corpus
    from mintransformer.serving.services import read_task_config

    if args.src:
        texts = args.src.read_text(encoding="utf-8").splitlines()[: args.requests]
    else:
        spec = read_task_config(args.run)["data"]
        texts = [source for source, _ in load_corpus(spec)["test"]][: args.requests]
    results: dict = {"offline_batch32": {}, "runs": []}
    if args.cli:
        results["cli_per_sentence"] = cli_baseline(args.run, texts[: args.cli])
        print(f"one CLI process per sentence: {json.dumps(results['cli_per_sentence'])}")
    settings = [("keras", args.run)] + ([("onnx", args.onnx)] if args.onnx else [])
    for engine, path in settings:
        ceiling, expected = offline(path, texts, engine)
        results["offline_batch32"][engine] = round(ceiling, 1)
        print(f"{engine}: offline translate(batch_size=32): {ceiling:.1f} sent/s")
        for batching in (b == "on" for b in args.batching.split(",")):
            process, url, startup = start_server(path, engine, batching, args.max_wait_ms)
            try:
                for clients in (int(c) for c in args.clients.split(",")):
                    row, answers = asyncio.run(load(url, texts, clients))
                    row.update(engine=engine, batching=batching, startup_s=round(startup, 1))
                    row["of_offline"] = round(row["sentences_per_s"] / ceiling, 3)
                    row["differ_from_offline"] = sum(
                        a != b for a, b in zip(answers, expected, strict=True)
                    )
                    results["runs"].append(row)
                    print(json.dumps(row))
            finally:
                process.terminate()
                process.wait(timeout=120)
    if args.output:
        args.output.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

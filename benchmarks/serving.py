"""Benchmark: `mintransformer serve` under 1, 8 and 32 concurrent clients.

    python -m benchmarks.serving --run runs/numbers [--onnx runs/numbers/onnx] [--ct2 ...]

For each server setting (keras, onnx or ct2 engine; batching on: up to 32 sentences per
decode, `--max-wait-ms` wait, 5 by default; off: one request per decode) a server process
is started on a free loopback port (the Keras engine on `$KERAS_BACKEND`, as this
process, with `--compile-cache`: run it with KERAS_BACKEND=jax for serve's own
choice); its first requests of four shapes, sent while it
still compiles its bucket shapes in the background, are each timed against the same
request again (`first_requests`); it is timed until it has compiled them all
(`warm_up_s`); then it is sent `--requests`
one-sentence greedy translate
requests, spread over `--clients` concurrent clients (each sends its next request when the
last is answered; a few lines of asyncio HTTP, `post_json`). Reported per run:
sentences/s and the p50/p95/p99 latency of a request, its ratio to the ceiling, offline
`Translator.translate(batch_size=32)` of the same sentences on the same engine in this
process, measured in pairs with the server's passes, how many answers differ from
that offline translation, and the clients' share of the machine's cores while they load
it (this process's CPU time over the cores' time; the server runs in another process).
Each figure is the median of `--repeats` passes. Then the
`--short` sentences with the fewest words are each sent alone, for the latency of one
short sentence on a warm server; each request alternates with the same sentence decoded
in this process without HTTP, which says how much of that latency serving adds. The
baseline:
`--cli N` sentences each translated by its own `mintransformer translate` process, as a
user without a server would (its default `--engine auto`: the run's export, if any). The
sentences are the first `--requests` lines of `--src`, or of the run's own test split.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
GREEDY = (1, 0.6, 1)  # `TranslationService.decode` settings: beam size, alpha, n-best


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(
    path: Path,
    engine: str,
    batching: bool,
    max_wait_ms: float = 5.0,
    max_batch_size: int = 32,
    compile_cache: str | None = None,
) -> tuple[subprocess.Popen, str, float, float]:
    """A server process, its URL, the seconds it took to answer its health check, and
    the moment it was started (`time.perf_counter()`)."""
    import httpx

    port = free_port()
    rows, wait = (max_batch_size, max_wait_ms) if batching else (1, 0)
    flags = ["--max-batch-size", str(rows), "--max-wait-ms", str(wait)]
    if compile_cache:
        flags += ["--compile-cache", compile_cache]
    if engine == "keras":  # the backend of this process's offline figures
        import keras

        flags += ["--backend", keras.backend.backend()]
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
                return process, url, time.perf_counter() - began, began
        except httpx.HTTPError:
            time.sleep(0.5)


def wait_warm(url: str, began: float) -> float:
    """Seconds from `began` until the server says its warm-up has compiled every shape."""
    import httpx

    while True:
        warm_up = httpx.get(url + "/api/health", timeout=10).json().get("warm_up")
        if warm_up is None or warm_up["shapes_ready"] == warm_up["shapes"]:
            return time.perf_counter() - began
        time.sleep(0.2)


async def post_json(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, body: dict
) -> dict:
    """One HTTP/1.1 POST on a kept-alive connection; the JSON answer (ValueError unless
    200). A few lines of asyncio instead of an HTTP client library: the client shares
    the server's cores, and a library's own time per request would be counted."""
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    writer.write(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    status, *headers = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in headers if ": " in line)
    answer = await reader.readexactly(int(fields["content-length"]))
    if status.split()[1] != "200":
        raise ValueError(f"{status}: {answer.decode()}")
    return json.loads(answer)


@contextlib.asynccontextmanager
async def connection(url: str):
    """A kept-alive connection to the server at `url`: `(reader, writer)`."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()
        await writer.wait_closed()


async def load(url: str, texts: list[str], clients: int) -> tuple[float, list, list[str]]:
    """Sends each text as one request from `clients` concurrent clients, each on its own
    kept-alive connection: the seconds it took, every request's latency in seconds, and
    the translations in the order of `texts`."""
    latencies: list[float] = []
    answers = [""] * len(texts)
    queue = list(reversed(range(len(texts))))

    async def client() -> None:
        async with connection(url) as (reader, writer):
            while queue:
                index = queue.pop()
                began = time.perf_counter()
                body = {"texts": [texts[index]]}
                answer = await post_json(reader, writer, "/api/translate", body)
                latencies.append(time.perf_counter() - began)
                answers[index] = answer["results"][0]["translation"]

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - began, latencies, answers


class Offline:
    """`Translator.translate(batch_size=32)` of the sentences on `engine` in this process:
    the ceiling a server's throughput is compared with."""

    def __init__(self, path: Path, engine: str, texts: list[str]):
        from mintransformer import Translator
        from mintransformer.serving.limits import Limits
        from mintransformer.serving.services import TranslationService, read_task_config

        self.texts = texts
        self.translator = Translator.from_run(path, engine=engine)
        self.translations = self.translator.translate(texts, batch_size=32)  # also warms up
        config = read_task_config(path)
        self.service = TranslationService(self.translator, path, engine, config, Limits())
        self.sources = self.translator.encode_sources(texts)

    def rate(self) -> float:
        """Sentences/s of one pass."""
        began = time.perf_counter()
        self.translator.translate(self.texts, batch_size=32)
        return len(self.texts) / (time.perf_counter() - began)

    def arrival_order_rate(self) -> float:
        """Sentences/s of the server's own decoding (`TranslationService.decode`) of the
        sentences 32 at a time in their order, as 32 clients' requests arrive: the
        ceiling of a server that decodes the batches it is sent, without HTTP."""
        began = time.perf_counter()
        for start in range(0, len(self.sources), 32):
            self.service.decode(GREEDY, self.sources[start : start + 32])
        return len(self.sources) / (time.perf_counter() - began)


def decode_ceilings(offline: Offline, repeats: int) -> dict:
    """Medians of `repeats` pairs of offline passes: length-sorted and in arrival order."""
    offline.arrival_order_rate()  # compiles the shapes it needs
    pairs = [(offline.rate(), offline.arrival_order_rate()) for _ in range(repeats)]
    sorted_rate, arrival = (float(np.median(column)) for column in zip(*pairs, strict=True))
    ratio = float(np.median([a / s for s, a in pairs]))
    return {
        "length_sorted": round(sorted_rate, 1),
        "arrival_order": round(arrival, 1),
        "arrival_of_sorted": round(ratio, 3),
    }


def load_row(url: str, offline: Offline, clients: int, repeats: int) -> tuple[dict, list[str]]:
    """`repeats` pairs of passes, an offline pass right before each `load` pass (the
    machine's speed drifts over minutes; a pair shares it): the medians of the server's
    sentences/s, the offline sentences/s and their ratio per pair, the latency
    percentiles of every request, and the last pass's translations."""
    passes, latencies = [], []
    for _ in range(repeats):
        ceiling = offline.rate()
        cpu_before = time.process_time()
        seconds, pass_latencies, answers = asyncio.run(load(url, offline.texts, clients))
        # This process runs the clients (the server is another): their share of the cores.
        clients_cpu = (time.process_time() - cpu_before) / (seconds * (os.cpu_count() or 1))
        passes.append(
            {
                "sentences_per_s": len(offline.texts) / seconds,
                "offline": ceiling,
                "clients_cpu_share": clients_cpu,
            }
        )
        latencies += pass_latencies
    p50, p95, p99 = np.percentile(np.array(latencies) * 1000, [50, 95, 99])
    row = {
        "clients": clients,
        "sentences_per_s": round(float(np.median([p["sentences_per_s"] for p in passes])), 1),
        "p50_ms": round(float(p50), 1),
        "p95_ms": round(float(p95), 1),
        "p99_ms": round(float(p99), 1),
        "offline_sentences_per_s": round(float(np.median([p["offline"] for p in passes])), 1),
        "of_offline": round(
            float(np.median([p["sentences_per_s"] / p["offline"] for p in passes])), 3
        ),
        "clients_cpu_share": round(float(np.median([p["clients_cpu_share"] for p in passes])), 3),
        "passes": [{name: round(value, 3) for name, value in p.items()} for p in passes],
    }
    return row, answers


def first_requests(url: str, texts: list[str]) -> dict:
    """Right after start-up, each request shape's first answer against the same request
    again: one sentence (the shortest, a middling and the longest of `texts`), then eight
    sentences in one request, each sent twice in turn. A server that compiles a shape on
    its first use shows it as a first answer far slower than the second."""
    by_length = sorted(texts, key=lambda text: len(text.split()))
    requests = [[by_length[0]], [by_length[len(by_length) // 2]], [by_length[-1]], texts[:8]]
    firsts, agains = [], []

    async def twice() -> None:
        async with connection(url) as (reader, writer):
            for request in requests:
                for times in (firsts, agains):
                    began = time.perf_counter()
                    await post_json(reader, writer, "/api/translate", {"texts": request})
                    times.append(time.perf_counter() - began)

    asyncio.run(twice())
    return {
        "requests": [len(request) for request in requests],
        "first_ms": [round(seconds * 1000, 1) for seconds in firsts],
        "again_ms": [round(seconds * 1000, 1) for seconds in agains],
        "worst_first_over_again": round(max(f / a for f, a in zip(firsts, agains, strict=True)), 2),
    }


def short_alone(url: str, offline: Offline, count: int, repeats: int) -> dict:
    """Latency of one short sentence, warm, alone: the `count` sentences of the
    offline texts with the fewest words, each sent by a single client, `repeats`
    passes. Each request alternates with the same sentence decoded in this process
    (`TranslationService.decode`, no HTTP), so that the two share the machine's speed
    of the moment: their difference is what serving adds."""
    order = sorted(range(len(offline.texts)), key=lambda i: len(offline.texts[i].split()))
    shortest = order[:count]
    for index in shortest:  # compiles this process's shapes
        offline.service.decode(GREEDY, [offline.sources[index]])
    served, decoded = [], []

    async def alternate() -> None:
        async with connection(url) as (reader, writer):
            for _ in range(repeats):
                for index in shortest:
                    began = time.perf_counter()
                    body = {"texts": [offline.texts[index]]}
                    await post_json(reader, writer, "/api/translate", body)
                    served.append(time.perf_counter() - began)
                    began = time.perf_counter()
                    offline.service.decode(GREEDY, [offline.sources[index]])
                    decoded.append(time.perf_counter() - began)

    asyncio.run(alternate())
    served_ms, decoded_ms = np.array(served) * 1000, np.array(decoded) * 1000
    p50, p95 = np.percentile(served_ms, [50, 95])
    words = [len(offline.texts[index].split()) for index in shortest]
    return {
        "sentences": len(shortest),
        "words": [min(words), max(words)],
        "p50_ms": round(float(p50), 1),
        "p95_ms": round(float(p95), 1),
        "in_process_p50_ms": round(float(np.median(decoded_ms)), 1),
        "added_by_serving_p50_ms": round(float(np.median(served_ms - decoded_ms)), 1),
    }


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
    parser.add_argument("--ct2", type=Path, help="the run's CTranslate2 folder (adds ct2 rows)")
    parser.add_argument("--no-keras", action="store_true", help="leave out the keras rows")
    parser.add_argument(
        "--src", type=Path, help="sentences, one per line (default: the run's test split)"
    )
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="with batching on")
    parser.add_argument(
        "--max-batch-size", type=int, default=32, help="with batching on (fewer shapes to warm)"
    )
    parser.add_argument("--batching", default="on,off", help="on, off or on,off")
    parser.add_argument("--repeats", type=int, default=3, help="passes per figure (median)")
    parser.add_argument("--cli", type=int, default=3, help="sentences for the CLI baseline")
    parser.add_argument(
        "--short", type=int, default=32, help="shortest sentences timed alone (0: none)"
    )
    parser.add_argument(
        "--compile-cache", help="the servers' --compile-cache (default: serve's own)"
    )
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
    import keras

    results: dict = {"backend": keras.backend.backend(), "offline_batch32": {}, "runs": []}
    results["short_alone"] = []
    if args.cli:
        results["cli_per_sentence"] = cli_baseline(args.run, texts[: args.cli])
        print(f"one CLI process per sentence: {json.dumps(results['cli_per_sentence'])}")
    settings = [("keras", args.run), ("onnx", args.onnx), ("ct2", args.ct2)]
    settings = [(engine, path) for engine, path in settings if path]
    if args.no_keras:
        settings = settings[1:]
    for engine, path in settings:
        offline = Offline(path, engine, texts)
        ceilings = decode_ceilings(offline, args.repeats)
        results["offline_batch32"][engine] = ceilings
        print(f"{engine}: offline decoding at batch 32: {json.dumps(ceilings)}")
        for batching in (b == "on" for b in args.batching.split(",")):
            process, url, startup, began = start_server(
                path, engine, batching, args.max_wait_ms, args.max_batch_size, args.compile_cache
            )
            try:
                first = {"engine": engine, "batching": batching, **first_requests(url, texts)}
                first["warm_up_s"] = round(wait_warm(url, began), 1)
                results.setdefault("first_requests", []).append(first)
                print(f"first requests after start-up: {json.dumps(first)}")
                for clients in (int(c) for c in args.clients.split(",")):
                    row, answers = load_row(url, offline, clients, args.repeats)
                    row.update(engine=engine, batching=batching, startup_s=round(startup, 1))
                    row["differ_from_offline"] = sum(
                        a != b for a, b in zip(answers, offline.translations, strict=True)
                    )
                    results["runs"].append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "passes"}))
                if args.short:
                    alone = short_alone(url, offline, args.short, args.repeats)
                    alone.update(engine=engine, batching=batching)
                    results["short_alone"].append(alone)
                    print(f"short sentences alone: {json.dumps(alone)}")
            finally:
                process.terminate()
                process.wait(timeout=120)
        del offline  # one engine's model in memory at a time
    if args.output:
        args.output.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

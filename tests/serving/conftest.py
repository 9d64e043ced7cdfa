"""Fixtures of the serving tests: apps in-process, and real server processes."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serving tests need the `serve` extra (fastapi)")
pytest.importorskip("httpx", reason="the serving tests need httpx")

SRC = Path(__file__).resolve().parents[2] / "src"
# Small batches keep the bucket shapes warmed at start-up (rows x widths) few.
MAX_BATCH_SIZE = 4


def post_concurrently(client, endpoint: str, texts: list[str]) -> dict[int, dict]:
    """Each text as its own request, all sent at once from threads; the first result of
    each, by the text's index."""
    answers: dict[int, dict] = {}

    def ask(index: int) -> None:
        response = client.post(endpoint, json={"texts": [texts[index]]})
        answers[index] = response.json()["results"][0]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def make_client(service, **app_options):
    """A TestClient of the app around `service` (its lifespan, warm-up included, runs)."""
    from fastapi.testclient import TestClient

    from mintransformer.serving.app import create_app

    return TestClient(create_app(service, **app_options), base_url="http://127.0.0.1")


@pytest.fixture(scope="session")
def translation_service(trained_run):
    from mintransformer.serving.limits import Limits
    from mintransformer.serving.services import load_service

    limits = Limits(max_texts=16, max_chars=300, max_beam=8, max_body_bytes=100_000)
    return load_service(trained_run.path, "keras", limits, MAX_BATCH_SIZE, max_wait_ms=20)


@pytest.fixture(scope="session")
def client(translation_service):
    """The translation app, warmed up once per session."""
    with make_client(translation_service) as test_client:
        assert translation_service.warm_up.finished.wait(300), "the warm-up did not end"
        yield test_client


@pytest.fixture(scope="session")
def untrained_lm_run(tmp_path_factory):
    """A small language model with its initial weights, saved as a run."""
    from mintransformer.config import LanguageModelConfig
    from mintransformer.data.tokenizer import Tokenizer
    from mintransformer.runs import checkpoints
    from mintransformer.runs.directory import RunDirectory
    from mintransformer.runs.loading import build_model

    config = LanguageModelConfig(num_layers=1, d_model=16, num_heads=2, dff=32, max_length=24)
    run = RunDirectory.create(tmp_path_factory.mktemp("runs") / "lm", config)
    tokenizer = Tokenizer.train(["the cat sat on the mat", "a dog ran far away"] * 5, 60)
    tokenizer.save(run.tokenizer_path)
    checkpoints.save_variables(run.weights_path, build_model(config, tokenizer.vocab_size).weights)
    return run


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """`mintransformer serve` as a subprocess on a free loopback port."""

    def __init__(self, run: Path, *flags: str, log_path: Path, compile_cache: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        command = [sys.executable, "-m", "mintransformer", "serve", "--run", str(run)]
        command += ["--port", str(self.port), "--max-batch-size", str(MAX_BATCH_SIZE), *flags]
        command += ["--compile-cache", str(compile_cache or log_path.parent / "compiled")]
        self.log = log_path.open("w")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float = 120) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited early:\n{self.output()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/api/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.3)
        raise TimeoutError(f"the server did not start in {timeout} s:\n{self.output()}")

    def wait_warm(self, timeout: float = 300) -> dict:
        """Waits until the background warm-up has compiled every shape; its status."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            warm_up = httpx.get(self.url + "/api/health", timeout=5).json()["warm_up"]
            if warm_up["shapes_ready"] == warm_up["shapes"]:
                return warm_up
            time.sleep(0.3)
        raise TimeoutError(f"the warm-up did not end in {timeout} s:\n{self.output()}")

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            return self.process.wait(timeout=60)
        finally:
            self.log.close()


@pytest.fixture(scope="session")
def server(trained_run, tmp_path_factory):
    """A server process on the trained run, shared by the browser and load tests.

    `SERVING_RUN=DIR` serves that run instead (docs/serving.png shows a better-trained
    model than the test's own)."""
    process = ServerProcess(
        Path(os.environ.get("SERVING_RUN") or trained_run.path),
        "--warm-beams",
        "1",
        "--max-wait-ms",
        "10",
        log_path=tmp_path_factory.mktemp("server") / "server.log",
    )
    try:
        process.wait_ready()
        process.wait_warm()
        yield process
    finally:
        process.stop()

"""The server as a process: its start-up log, SIGTERM, and a bounded load test."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time

import httpx
import pytest

from tests.serving.conftest import ServerProcess

psutil = pytest.importorskip("psutil", reason="the load test reads the server's RSS with psutil")


def test_sigterm_finishes_requests_in_flight_refuses_new_ones_and_exits_0(trained_run, tmp_path):
    # No warm-up (--warm-beams ""): this server starts sooner, and its first request
    # compiles. A second request that arrives during that call then waits up to 3 s for
    # company: long enough to be in flight at SIGTERM.
    server = ServerProcess(
        trained_run.path, "--warm-beams", "", "--max-wait-ms", "3000",
        log_path=tmp_path / "server.log",
    )  # fmt: skip
    try:
        server.wait_ready()
        answers: dict = {}

        def post(text: str) -> None:
            response = httpx.post(server.url + "/api/translate", json={"texts": [text]}, timeout=60)
            answers[text] = response.status_code, response.json()

        requests = [threading.Thread(target=post, args=(text,)) for text in ("nine", "ten")]
        requests[0].start()
        time.sleep(0.1)
        requests[1].start()
        time.sleep(1.0)
        assert requests[1].is_alive()
        server.process.send_signal(signal.SIGTERM)
        refused = False
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and not refused:
            try:
                httpx.get(server.url + "/api/health", timeout=1)
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                # Refused, or accepted while the listener was closing and then closed
                # without an answer: either way, not served.
                refused = True
            time.sleep(0.05)
        assert refused, "a new connection was still accepted after SIGTERM"
        assert requests[1].is_alive()  # the refused connection did not end the one in flight
        for request in requests:
            request.join(timeout=60)
        for status, body in answers.values():
            assert status == 200 and body["results"][0]["translation"]
        assert len(answers) == 2
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop()
    log = server.output()
    assert "listening on 127.0.0.1 only" in log
    assert "cross-origin requests: refused" in log
    assert "warmed up in" in log and "stopped" in log


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--port", "99999"], "argument --port: 99999 is not a port: ports are 0 to 65535"),
        (["--port", "-1"], "argument --port: -1 is not a port"),
        (["--max-batch-size", "0"], "argument --max-batch-size: 0 must be at least 1"),
        (["--max-texts", "2.5"], "argument --max-texts: '2.5' is not a whole number"),
        (["--max-wait-ms", "nan"], "argument --max-wait-ms: nan must be a finite number"),
        (["--shutdown-timeout", "-5"], "argument --shutdown-timeout: -5 must be a finite"),
        (["--warm-beams", "a"], "argument --warm-beams: 'a' is not a list of beam sizes"),
        (["--warm-beams", "1,0"], "argument --warm-beams: '1,0' is not a list of beam sizes"),
    ],
)
def test_bad_serve_flags_are_refused_by_name(flags, message, capsys):
    from mintransformer.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", "--run", "runs/x", *flags])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_warm_beams_are_checked_against_max_beam_before_the_model_loads():
    from mintransformer.cli import build_parser
    from mintransformer.serving.options import limits_from

    def parse(*flags: str):
        return build_parser().parse_args(["serve", "--run", "runs/x", *flags])

    args = parse("--warm-beams", " 1, 4,", "--port", "0", "--shutdown-timeout", "0")
    assert (args.warm_beams, args.port, args.shutdown_timeout) == ((1, 4), 0, 0.0)
    assert limits_from(args).max_beam == 16
    assert parse("--warm-beams", "").warm_beams == ()
    assert parse().warm_beams == (1, 4)
    with pytest.raises(ValueError, match="--warm-beams 1,32: beam size 32 is over --max-beam 16"):
        limits_from(parse("--warm-beams", "1,32"))


def test_a_port_in_use_or_a_bad_host_is_refused_before_the_model_loads(
    tmp_path, capsys, monkeypatch
):
    import socket

    from mintransformer.cli import main

    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        monkeypatch.delenv(name, raising=False)  # restored after: `serve` sets them
    missing_run = tmp_path / "no-run"  # loading it would fail: the address is checked first
    serve = ["serve", "--run", str(missing_run), "--compile-cache", str(tmp_path / "compiled")]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main([*serve, "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert main([*serve, "--host", "999.1.1.1"]) == 2
    assert "--host 999.1.1.1: no such address" in capsys.readouterr().err


def test_ctrl_c_during_the_background_warm_up_stops_the_server_at_once(trained_run, tmp_path):
    # Every beam size up to 8: a warm-up of many compiles, interrupted early.
    warm = ",".join(str(size) for size in range(1, 9))
    server = ServerProcess(trained_run.path, "--warm-beams", warm, log_path=tmp_path / "log")
    try:
        server.wait_ready()
        health = httpx.get(server.url + "/api/health").json()
        assert health["warm_up"]["shapes_ready"] < health["warm_up"]["shapes"]
        server.process.send_signal(signal.SIGINT)
        began = time.monotonic()
        code = server.process.wait(timeout=60)
        # It stops once the compile in progress ends, not after the warm-up.
        assert time.monotonic() - began < 20, server.output()
        assert code == 0 and "warmed up" not in server.output(), server.output()
        assert "stopped" in server.output()
    finally:
        server.stop()


def test_a_restarted_server_loads_the_programs_it_compiled(trained_run, tmp_path):
    pytest.importorskip("jax", reason="the compiled programs kept are JAX's")
    cache = tmp_path / "compiled"
    logs = []
    for start in range(2):
        server = ServerProcess(
            trained_run.path, "--warm-beams", "1", "--backend", "jax",
            log_path=tmp_path / f"log{start}", compile_cache=cache,
        )  # fmt: skip
        try:
            server.wait_ready()
            server.wait_warm()
            answer = httpx.post(server.url + "/api/translate", json={"texts": ["seven"]})
            assert answer.status_code == 200 and answer.json()["results"][0]["translation"]
        finally:
            assert server.stop() == 0
        logs.append(server.output())
        if start == 0:
            kept = {path.name for path in cache.glob("*/*")}
    assert kept, logs[0]
    assert "compiled programs kept in" in logs[1] and f"({len(kept)} programs" in logs[1]
    assert {path.name for path in cache.glob("*/*")} == kept  # none compiled anew


def test_serve_runs_on_jax_unless_told_otherwise(monkeypatch):
    from mintransformer.serving import options

    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert options.serving_backend("torch") == "torch"
    monkeypatch.delitem(sys.modules, "keras")  # as before Keras starts
    assert options.serving_backend(None) == "jax"
    monkeypatch.setattr(options.importlib.util, "find_spec", lambda name: None)
    assert options.serving_backend(None) is None  # no JAX: Keras' own choice
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    assert options.serving_backend(None) is None


CLIENTS = 32
REQUESTS_PER_CLIENT = 6
ROUNDS = 5
TEXTS = [
    "one", "two", "twelve", "forty-four", "three hundred", "nine thousand and one",
    "seventy-seven", "eight hundred and eight", "sixty", "five",
]  # fmt: skip
BAD = [
    (b'{"texts": [', 400),
    (b'{"texts": []}', 422),
    (b'{"texts": ["one"], "beam_size": 1000}', 422),
    (b'{"texts": ["one"], "extra": 1}', 422),
    (b'{"texts": ["\xff"]}', 400),
]


async def one_client(client: httpx.AsyncClient, number: int, expected: dict) -> int:
    """Sends this client's requests in turn; checks each answer is its request's."""
    answered = 0
    for turn in range(REQUESTS_PER_CLIENT):
        if (number + turn) % 3 == 2:
            body, status = BAD[(number + turn) % len(BAD)]
            response = await client.post(
                "/api/translate", content=body, headers={"content-type": "application/json"}
            )
            assert response.status_code == status, response.text
            assert response.json()["error"]
        else:
            texts = [TEXTS[(number * 7 + turn) % len(TEXTS)], TEXTS[(number + turn) % len(TEXTS)]]
            response = await client.post("/api/translate", json={"texts": texts})
            assert response.status_code == 200, response.text
            got = [r["translation"] for r in response.json()["results"]]
            assert got == [expected[t] for t in texts]
            answered += 1
    return answered


async def load_round(url: str, expected: dict) -> int:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        counts = await asyncio.gather(*(one_client(client, n, expected) for n in range(CLIENTS)))
    return sum(counts)


def test_load_of_good_and_bad_requests_from_32_clients(server, translation_service):
    expected = dict(zip(TEXTS, translation_service.translator.translate(TEXTS), strict=True))
    process = psutil.Process(server.process.pid)
    good_per_round = sum(
        (n + t) % 3 != 2 for n in range(CLIENTS) for t in range(REQUESTS_PER_CLIENT)
    )
    asyncio.run(load_round(server.url, expected))  # first round: allocators reach their size
    rss = [process.memory_info().rss]
    started = time.perf_counter()
    for _ in range(ROUNDS):
        assert asyncio.run(load_round(server.url, expected)) == good_per_round
        rss.append(process.memory_info().rss)
    seconds = time.perf_counter() - started
    growth_mb = (rss[-1] - rss[0]) / 2**20
    requests = ROUNDS * CLIENTS * REQUESTS_PER_CLIENT
    print(f"{requests} requests in {seconds:.1f} s; RSS MB:", [round(r / 2**20) for r in rss])
    assert growth_mb < 30, f"server RSS grew {growth_mb:.0f} MB under load: {rss}"
    assert httpx.get(server.url + "/api/health").status_code == 200

"""The server as a process: its start-up log, SIGTERM, and a bounded load test."""

from __future__ import annotations

import asyncio
import signal
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

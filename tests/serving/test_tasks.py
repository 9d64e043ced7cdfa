"""Classification and generation (streamed) through the API."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import pytest

from tests.serving.conftest import make_client, post_concurrently


def limits():
    from mintransformer.serving.limits import Limits

    return Limits(max_texts=8, max_chars=200, max_new_tokens=10)


@pytest.fixture(scope="module")
def classify_service(untrained_classifier_run):
    from mintransformer.serving.services import load_service

    return load_service(untrained_classifier_run.path, "keras", limits(), max_wait_ms=50)


@pytest.fixture(scope="module")
def classify_client(classify_service):
    with make_client(classify_service) as client:
        yield client


@pytest.fixture(scope="module")
def generate_service(untrained_lm_run):
    from mintransformer.serving.services import load_service

    return load_service(untrained_lm_run.path, "keras", limits())


@pytest.fixture(scope="module")
def generate_client(generate_service):
    with make_client(generate_service) as client:
        yield client


def test_classify_gives_labels_and_probabilities(classify_client, untrained_classifier_run):
    from mintransformer import Classifier

    texts = ["a good film", "not good at all"]
    response = classify_client.post("/api/classify", json={"texts": texts})
    assert response.status_code == 200
    expected = Classifier.from_run(untrained_classifier_run.path).probabilities(texts)
    for result, row in zip(response.json()["results"], expected, strict=True):
        assert list(result["probabilities"]) == ["neg", "pos"]
        assert result["probabilities"]["neg"] == pytest.approx(float(row[0]), abs=1e-5)
        assert result["label"] == ["neg", "pos"][int(row.argmax())]
    with_attention = classify_client.post(
        "/api/classify", json={"texts": texts[:1], "attention": True}
    ).json()["results"][0]["attention"]
    tokens, weights = Classifier.from_run(untrained_classifier_run.path).attention(texts[0])
    assert with_attention["tokens"] == tokens and tokens[0] == "<s>"
    np.testing.assert_allclose(with_attention["encoder"][0], weights["encoder_layer1"], atol=1e-5)
    assert np.array(with_attention["encoder"]).shape == (1, 2, len(tokens), len(tokens))
    too_many = classify_client.post("/api/classify", json={"texts": ["a"] * 9})
    assert too_many.status_code == 413


def test_concurrent_classify_requests_are_answered_in_shared_calls(
    classify_client, classify_service
):
    texts = ["a good film", "bad", "not good at all", "fine", "the worst film", "great"]
    calls_before = classify_service.batcher.stats.calls
    answers = post_concurrently(classify_client, "/api/classify", texts)
    expected = classify_service.classifier.probabilities(texts)
    for index, row in enumerate(expected):
        assert answers[index]["probabilities"]["neg"] == pytest.approx(float(row[0]), abs=1e-5)
    assert classify_service.batcher.stats.calls - calls_before < len(texts)


def test_generate_streams_one_line_per_token(generate_client, untrained_lm_run):
    from mintransformer import Generator

    body = {"prompt": "the cat", "max_new_tokens": 6, "temperature": 0.0}
    with generate_client.stream("POST", "/api/generate", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        events = [json.loads(line) for line in response.iter_lines() if line]
    tokens, final = events[:-1], events[-1]
    assert final["done"] is True
    assert 1 <= len(tokens) <= 6 and all("token" in e and "id" in e for e in tokens)
    expected = Generator.from_run(untrained_lm_run.path).generate(
        ["the cat"], max_new_tokens=6, temperature=0.0
    )[0]
    assert final["text"] == expected
    whole = generate_client.post("/api/generate", json={**body, "stream": False}).json()
    assert "".join(whole["tokens"]) == "".join(e["token"] for e in tokens)
    assert whole["text"] == expected


@pytest.mark.parametrize(
    ("body", "status", "word"),
    [
        ({"prompt": "a", "max_new_tokens": 100_000}, 422, "--max-new-tokens"),
        ({"prompt": "a", "max_new_tokens": 0}, 422, "max_new_tokens"),
        ({"prompt": "a", "temperature": -1}, 422, "temperature"),
        ({"prompt": "a", "top_p": 0}, 422, "top_p"),
        ({"prompt": "x" * 300}, 413, "--max-chars"),
        ({"prompt": 3}, 422, "prompt"),
    ],
)
def test_bad_generate_requests_get_a_4xx(generate_client, body, status, word):
    response = generate_client.post("/api/generate", json=body)
    assert response.status_code == status, response.text
    assert word in response.json()["error"]


def test_a_prompt_and_new_tokens_over_the_context_get_a_422_not_a_cut_prompt(
    generate_client, generate_service
):
    prompt = "the cat sat on the mat " * 3
    prompt_tokens = generate_service.generator.prompt_tokens(prompt)
    context = generate_service.generator.max_length  # 24
    fits = context - prompt_tokens
    assert 1 <= fits < 10, "the test needs a prompt that leaves room for 1 to 9 tokens"
    body = {"prompt": prompt, "max_new_tokens": fits, "temperature": 0.0, "stream": False}
    whole = generate_client.post("/api/generate", json=body)
    assert whole.status_code == 200
    assert whole.json()["text"].startswith(prompt.strip())  # all of it
    for stream in (False, True):
        response = generate_client.post(
            "/api/generate", json={**body, "max_new_tokens": fits + 1, "stream": stream}
        )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert f"`prompt` is {prompt_tokens} tokens" in error
        assert f"`max_new_tokens` is {fits + 1}" in error
        assert f"context is {context} tokens" in error


def wait_after_each_token(generator, monkeypatch):
    """Makes `generator.generate` wait after each token until the returned `left` is set;
    also returns the tokens it produced and `finished`, set once it returns."""
    generate = generator.generate
    produced: list[int] = []
    left, finished = threading.Event(), threading.Event()

    def generate_until_the_client_leaves(prompts, on_token, **options):
        def on_token_then_wait(row: int, token_id: int) -> None:
            on_token(row, token_id)  # raises once the request is abandoned
            produced.append(token_id)
            left.wait(timeout=30)

        try:
            return generate(prompts, on_token=on_token_then_wait, **options)
        finally:
            finished.set()

    monkeypatch.setattr(generator, "generate", generate_until_the_client_leaves)
    return produced, left, finished


def test_an_abandoned_stream_stops_generating_at_its_next_token(generate_service, monkeypatch):
    produced, left, finished = wait_after_each_token(generate_service.generator, monkeypatch)

    async def read_one_token_and_leave() -> dict:
        options = dict(max_new_tokens=10, temperature=0.0, top_k=None, top_p=None, seed=0)
        events = generate_service.generate("the cat", **options)
        first = await anext(events)
        await events.aclose()
        left.set()
        return first

    first = asyncio.run(read_one_token_and_leave())
    assert finished.wait(timeout=30)
    assert produced == [first["id"]]  # not the 10 asked for

    async def read_all() -> list[dict]:
        options = dict(max_new_tokens=3, temperature=0.0, top_k=None, top_p=None, seed=0)
        return [event async for event in generate_service.generate("the cat", **options)]

    assert asyncio.run(read_all())[-1]["done"]  # the next request is served


def test_a_non_streamed_generation_stops_when_its_client_leaves(generate_service, monkeypatch):
    from mintransformer.serving.app import create_app

    produced, left, finished = wait_after_each_token(generate_service.generator, monkeypatch)
    app = create_app(generate_service, started=True)
    body = json.dumps({"prompt": "the cat", "max_new_tokens": 10, "stream": False}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/generate",
        "raw_path": b"/api/generate",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    messages = iter([{"type": "http.request", "body": body, "more_body": False}])
    sent: list[dict] = []

    async def receive() -> dict:
        request = next(messages, None)
        if request is not None:
            return request
        if produced:  # the client leaves once the first token is made
            return {"type": "http.disconnect"}
        await asyncio.Event().wait()  # no message yet

    async def send(message: dict) -> None:
        sent.append(message)

    async def request_and_leave() -> None:
        await asyncio.wait_for(app(scope, receive, send), timeout=30)
        left.set()

    asyncio.run(request_and_leave())
    assert finished.wait(timeout=30)
    assert len(produced) == 1  # not the 10 asked for
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 499

"""The JSON API: its answers, and a 4xx naming the problem for every kind of bad input."""

from __future__ import annotations

import json

import pytest

from mintransformer import Translator
from mintransformer.data.text import normalize_text


@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator.from_run(trained_run.path)


def post(client, body, **kwargs):
    return client.post("/api/translate", json=body, **kwargs)


def test_greedy_translations_are_translate_s(client, translator):
    texts = ["twenty-one", "three hundred and four", "", "seven"]
    response = post(client, {"texts": texts})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["translation"] for r in results] == translator.translate(texts)
    assert results[2] == {"translation": "", "n_best": [{"translation": "", "score": None}],
                          "attention": None}  # fmt: skip


def test_beam_n_best_is_ranked_and_its_first_is_translate_s(client, translator):
    texts = ["twenty-one", "eighty-eight thousand"]
    response = post(client, {"texts": texts, "beam_size": 4, "n_best": 3, "alpha": 0.6})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["translation"] for r in results] == translator.translate(texts, beam_size=4)
    for result in results:
        scores = [h["score"] for h in result["n_best"]]
        assert 1 <= len(scores) <= 3 and scores == sorted(scores, reverse=True)
        texts = [h["translation"] for h in result["n_best"]]
        assert len(set(texts)) == len(texts)  # each text once
        assert result["n_best"][0]["translation"] == result["translation"]


def test_health_info_page_and_openapi(client, translation_service):
    health = client.get("/api/health").json()
    assert health["status"] == "ok" and health["task"] == "translation"
    assert health["warm_up"]["shapes"] == len(translation_service.buckets.shapes())
    assert 0 <= health["warm_up"]["shapes_ready"] <= health["warm_up"]["shapes"]
    info = client.get("/api/info").json()
    assert info["task"] == "translation"
    assert info["sizes"]["num_layers"] == 1 and info["sizes"]["num_heads"] == 2
    assert info["config"]["d_model"] == 64
    assert info["training"]["epochs"] == 3 and "loss" in info["training"]["last_epoch"]
    assert info["limits"]["max_texts"] == 16
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from the network
    assert client.get("/static/app.js").status_code == 200
    icon = client.get("/favicon.ico")  # browsers ask for it whatever the page links
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.text.startswith("<svg") and 'rel="icon" href="/favicon.ico"' in page.text
    for docs, asset in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
        html = client.get(docs).text
        assert "http" not in html.replace("http-equiv", "")  # no CDN
        assert asset in html and client.get(f"/static-offline-docs/{asset}").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/translate", "/api/classify", "/api/generate", "/api/info"} <= set(paths)


def test_no_endpoint_takes_a_file_path(client):
    schema = json.dumps(client.get("/openapi.json").json()).lower()
    assert "path" not in schema.replace('"paths"', "")
    assert client.get("/static/../../config.json").status_code == 404


TOO_MANY = {"texts": ["one"] * 10_000}
BAD_BODIES = [
    # (body as bytes or JSON, status, a word the message must contain)
    (b'{"texts": ["one"', 400, "JSON"),
    (b'{"texts": ["\xff\xfe"]}', 400, "UTF-8"),
    ({"texts": "one"}, 422, "texts"),
    ({"texts": [1, 2]}, 422, "texts.0"),
    ({"texts": ["one"], "beam": 4}, 422, "beam"),
    ({"texts": []}, 422, "texts"),
    ({}, 422, "texts"),
    ([1, 2], 422, "body"),
    (TOO_MANY, 413, "--max-texts"),
    ({"texts": ["x" * 100_000]}, 413, "--max-body-bytes"),
    ({"texts": ["x" * 1000]}, 413, "--max-chars"),
    ({"texts": ["one"], "beam_size": 0}, 422, "beam_size"),
    ({"texts": ["one"], "beam_size": 1000}, 422, "--max-beam"),
    ({"texts": ["one"], "beam_size": "4"}, 422, "beam_size"),
    ({"texts": ["one"], "beam_size": 2, "n_best": 3}, 422, "n_best"),
    ({"texts": ["one"], "alpha": -1}, 422, "alpha"),
    ({"texts": ["one"], "attention": "yes"}, 422, "attention"),
    (b'{"texts": ["one"], "alpha": NaN}', 422, "alpha: Input should be a finite number"),
    (b'{"texts": ["one"], "alpha": Infinity}', 422, "finite"),
    (b"[" * 5000 + b"]" * 5000, 400, "not valid JSON"),
]


@pytest.mark.parametrize(("body", "status", "word"), BAD_BODIES)
def test_bad_input_gets_a_4xx_naming_the_problem(client, body, status, word):
    if isinstance(body, bytes):
        response = post(client, None, content=body, headers={"content-type": "application/json"})
    else:
        response = post(client, body)
    assert response.status_code == status, response.text
    assert word in response.json()["error"]
    assert client.get("/api/health").status_code == 200


@pytest.mark.parametrize("attention", [False, True])
def test_a_text_longer_than_the_model_reads_gets_a_422_not_a_cut_translation(
    client, translator, attention
):
    long = "twenty-one " * 25  # within --max-chars (300)
    tokens = len(translator.tokenizer.encode_batch([normalize_text(long)])[0])
    limit = translator.max_source_length
    assert tokens > limit
    response = post(client, {"texts": ["", "one", long], "attention": attention})
    assert response.status_code == 422, response.text
    assert response.json()["error"] == (
        f"`texts[2]` is {tokens} subword tokens; this model reads at most {limit}: "
        "split it into sentences."
    )


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_not_sent_as_json_is_told_the_content_type(client, content_type):
    headers = {"content-type": content_type} if content_type else {}
    response = post(client, None, content=b'{"texts": ["one"]}', headers=headers)
    assert response.status_code == 415
    error = response.json()["error"]
    assert "must be JSON, sent with Content-Type: application/json" in error
    assert (repr(content_type) if content_type else "is missing") in error


def test_a_wrong_method_gets_405_with_its_allow_header(client):
    response = client.get("/api/translate")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]


def test_the_other_tasks_endpoints_say_what_this_server_holds(client):
    response = client.post("/api/classify", json={"texts": ["a"]})
    assert response.status_code == 404 and "translation run" in response.json()["error"]
    response = client.post("/api/generate", json={"prompt": "a"})
    assert response.status_code == 404


def test_cross_origin_requests_are_refused(client):
    response = post(client, {"texts": ["one"]}, headers={"origin": "https://elsewhere.example"})
    assert response.status_code == 403 and "--cors" in response.json()["error"]
    same = post(client, {"texts": ["one"]}, headers={"origin": "http://127.0.0.1"})
    assert same.status_code == 200
    rebound = client.get("/api/health", headers={"host": "attacker.example"})
    assert rebound.status_code == 421


def test_cors_flag_allows_its_origin_only(untrained_classifier_run):
    # An app of its own (on a small classifier): closing it stops its service.
    from mintransformer.serving.limits import Limits
    from mintransformer.serving.services import load_service
    from tests.serving.conftest import make_client

    origin = "https://allowed.example"
    service = load_service(untrained_classifier_run.path, "keras", Limits())
    with make_client(service, cors_origins=(origin,)) as client:
        response = client.options(
            "/api/classify",
            headers={"origin": origin, "access-control-request-method": "POST"},
        )
        assert response.headers["access-control-allow-origin"] == origin
        body = {"texts": ["a good film"]}
        allowed = client.post("/api/classify", json=body, headers={"origin": origin})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == origin
        other = client.post("/api/classify", json=body, headers={"origin": "https://other.example"})
        assert other.status_code == 403

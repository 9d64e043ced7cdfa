"""Serving an export folder with `--engine onnx` (onnxruntime, no Keras in the decode)."""

from __future__ import annotations

import keras
import pytest

from tests.serving.conftest import make_client

pytest.importorskip("onnxruntime", reason="the onnx engine needs onnxruntime")
pytest.importorskip("tf2onnx", reason="exporting needs tf2onnx")

pytestmark = [
    pytest.mark.slow,  # exports the run first
    pytest.mark.skipif(
        keras.backend.backend() != "tensorflow", reason="exporting to ONNX runs on TensorFlow only"
    ),
]


@pytest.fixture(scope="module")
def onnx_client(trained_run, tmp_path_factory):
    from mintransformer.export.onnx_graphs import export_run
    from mintransformer.serving.limits import Limits
    from mintransformer.serving.services import load_service

    folder = export_run(trained_run.path, tmp_path_factory.mktemp("export") / "onnx")
    service = load_service(folder, "onnx", Limits(max_beam=4), max_batch_size=4)
    with make_client(service) as client:
        yield client, folder


def test_onnx_engine_translates_as_its_translator_and_refuses_attention(onnx_client):
    from mintransformer import Translator

    client, folder = onnx_client
    translator = Translator.from_run(folder, engine="onnx")
    texts = ["twenty-one", "six hundred and two"]
    for beam_size in (1, 3):
        response = client.post("/api/translate", json={"texts": texts, "beam_size": beam_size})
        assert response.status_code == 200
        got = [r["translation"] for r in response.json()["results"]]
        assert got == translator.translate(texts, beam_size=beam_size)
    info = client.get("/api/info").json()
    assert info["engine"] == "onnx" and info["task"] == "translation"
    refused = client.post("/api/translate", json={"texts": texts, "attention": True})
    assert refused.status_code == 422 and "--engine keras" in refused.json()["error"]

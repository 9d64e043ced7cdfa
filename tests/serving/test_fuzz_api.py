"""Property: whatever body arrives, the server answers it (never a 5xx) and stays up."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serving.conftest import make_client

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
# Mostly well-formed requests with a field or two wrong, so the checks past parsing run.
fields = {
    "texts": st.lists(st.text(max_size=60), max_size=6) | json_values,
    "beam_size": st.integers(-3, 40) | json_values,
    "alpha": st.floats(allow_nan=True) | json_values,
    "n_best": st.integers(-2, 5) | json_values,
    "attention": st.booleans() | json_values,
    "unknown": json_values,
}
requests = (
    st.fixed_dictionaries({}, optional={name: strategy for name, strategy in fields.items()})
    | json_values
)


@pytest.fixture(scope="module")
def fuzz_client(trained_run):
    from mintransformer.serving.limits import Limits
    from mintransformer.serving.services import load_service

    # beam <= 2 keeps the shapes a valid request can compile few.
    limits = Limits(max_texts=4, max_chars=40, max_beam=2, max_body_bytes=2000)
    service = load_service(trained_run.path, "keras", limits, max_batch_size=4, max_wait_ms=0)
    with make_client(service, warm_beams=()) as client:
        yield client


def check_answer(response) -> None:
    assert response.status_code < 500, response.text
    body = response.json()
    if response.status_code >= 400:
        assert isinstance(body["error"], str) and body["error"]
    else:
        assert len(body["results"]) >= 1


@settings(
    max_examples=70, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=requests)
def test_any_json_body_gets_an_answer_not_a_crash(fuzz_client, body):
    text = json.dumps(body, allow_nan=True)
    response = fuzz_client.post(
        "/api/translate", content=text.encode(), headers={"content-type": "application/json"}
    )
    check_answer(response)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.binary(max_size=300), path=st.sampled_from(["translate", "classify", "generate"]))
def test_any_bytes_get_an_answer_not_a_crash(fuzz_client, body, path):
    response = fuzz_client.post(
        f"/api/{path}", content=body, headers={"content-type": "application/json"}
    )
    check_answer(response)
    assert fuzz_client.get("/api/health").status_code == 200

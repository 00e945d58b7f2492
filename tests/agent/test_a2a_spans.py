"""The spans of one A2A ``message/send`` with tracing on, from a real agent process to a real OTLP receiver.

By default the a2a-sdk's own spans (one per internal call of its handler, event queue and task manager, ~50 per
request, every one of kind SERVER) are not made: the request is one server span ``POST /`` with ``http.route``
``/``, Kora's ``a2a task`` span inside it, and the turn below that. ``AGENT_A2A_SDK_SPANS=true`` brings the SDK's
spans back for debugging, in the same trace.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from kora.core.net import free_port
from kora.scripted.model import ScriptedModel, create_app
from tests.support.a2a import message_params, rpc_body
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.processes import FAST_EXPORT, clean_env, kora_process
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The instrumentation scope of the a2a-sdk's spans.
SDK_SCOPE = "a2a-python-sdk"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as otlp:
        yield otlp


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    with ThreadedServer(create_app(ScriptedModel()), name="scripted-model", lifespan="off") as server:
        yield server.root_url + "/v1"


def a2a_trace(receiver: OtlpReceiver, model_url: str, name: str, **extra: str) -> list[ReceivedSpan]:
    """Every span of one ``message/send`` to a fresh agent ``name``, once the agent stopped (spans flushed)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = clean_env(
        AGENT_NAME=name,
        AGENT_HOST="127.0.0.1",
        AGENT_PORT=str(port),
        MODEL_API_URL=model_url,
        MODEL_NAME="scripted",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_SERVICE_NAME=name,
        **FAST_EXPORT,
        **extra,
    )
    with kora_process(["agent"], env, url + "/ready"):
        response = httpx.post(url + "/", json=rpc_body("message/send", message_params("hello there")), timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["result"]["status"]["state"] == "completed", response.text
    task = receiver.wait_for_span(lambda s: s.service == name and s.name == "a2a task", timeout=30)
    return receiver.spans_of_trace(task.trace_id)


def test_an_a2a_request_is_one_server_span_with_its_route_and_the_task_inside(receiver, model_url) -> None:
    spans = a2a_trace(receiver, model_url, "lean")
    assert not [s.name for s in spans if s.scope == SDK_SCOPE]
    (server,) = [s for s in spans if s.kind == "SERVER"]
    assert server.name == "POST /"
    assert server.attributes["http.route"] == "/"
    assert server.parent_id == ""
    by_id = {s.span_id: s for s in spans}
    (task,) = [s for s in spans if s.name == "a2a task"]
    assert task.parent_id == server.span_id
    (turn,) = [s for s in spans if s.name == "invoke_agent lean"]
    ancestors = []
    parent = by_id.get(turn.parent_id)
    while parent is not None:
        ancestors.append(parent.name)
        parent = by_id.get(parent.parent_id)
    assert ancestors[-2:] == ["a2a task", "POST /"]


def test_the_sdks_own_spans_are_an_opt_in_for_debugging(receiver, model_url) -> None:
    spans = a2a_trace(receiver, model_url, "verbose", AGENT_A2A_SDK_SPANS="true")
    sdk = [s for s in spans if s.scope == SDK_SCOPE]
    assert len(sdk) > 10, [s.name for s in spans]
    assert any(s.name.endswith("JsonRpcDispatcher.handle_requests") for s in sdk)
    (server,) = [s for s in spans if s.kind == "SERVER" and s.scope != SDK_SCOPE]
    assert server.name == "POST /"
    assert [s.name for s in spans if s.name == "a2a task"] == ["a2a task"]

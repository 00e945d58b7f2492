"""Stored responses of the Responses API, as the ``openai`` SDK uses them against a real agent (scripted model):
``responses.retrieve`` / ``delete`` / ``cancel``, ``store: false``, ``previous_response_id`` chaining,
``conversation`` (a session named by the client), ``background`` responses polled and cancelled, who may read
and delete a response, and hostile ids on the new routes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import openai
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kora.scripted import ErrorReply, TextReply
from tests.support.agent import RunningAgent, running_agent, served_agent
from tests.support.eventually import eventually
from tests.support.hostile import any_text, assert_handled
from tests.support.memory import ADMIN, memory_service, service_env
from tests.support.scripted_server import ScriptedModelServer
from tests.support.weather import CALLS_WEATHER, RESPONSES_TOOL

pytestmark = pytest.mark.integration

HEADER = "X-Forwarded-User"
TOOL = RESPONSES_TOOL
RULES = [
    CALLS_WEATHER,
]


@dataclass
class Setup:
    model: ScriptedModelServer
    agent: RunningAgent

    def client(self, user: str | None = None) -> openai.OpenAI:
        """An ``openai`` client acting for ``user`` through the trusted header (anonymous when None)."""
        return self.agent.openai(default_headers={HEADER: user} if user else {})

    def session_holding(self, response_id: str) -> str:
        """The session whose events the turn of ``response_id`` stored (the operator sees every session)."""
        for session in self.agent.get("/memory/sessions").json()["sessions"]:
            if any(e["metadata"].get("response_id") == response_id for e in self.agent.events(session["session_id"])):
                return str(session["session_id"])
        raise AssertionError(f"no session holds {response_id}")


@pytest.fixture(scope="module")
def setup() -> Iterator[Setup]:
    with ScriptedModelServer() as model:
        model.load_script(RULES)
        with served_agent(model, "helper", AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
            yield Setup(model, agent)


@pytest.fixture
def s(setup: Setup) -> Setup:
    setup.model.reset(keep_rules=True)
    return setup


def test_a_response_is_retrieved_as_it_was_answered(s):
    client = s.client()
    created = client.responses.create(
        model="helper", input="hello there", instructions="Be brief.", temperature=0.5, metadata={"k": "v"}
    )
    got = client.responses.retrieve(created.id)
    assert got.model_dump() == created.model_dump()
    assert (got.output_text, got.status, got.instructions, got.temperature) == (
        "You said: hello there",
        "completed",
        "Be brief.",
        0.5,
    )
    assert got.usage is not None
    assert got.usage.total_tokens == created.usage.total_tokens > 0


def test_a_response_that_handed_calls_to_the_client_is_retrieved_with_them_and_chains(s):
    client = s.client()
    first = client.responses.create(model="helper", input="weather in Paris?", tools=[TOOL])
    got = client.responses.retrieve(first.id)
    (call,) = [item for item in got.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments), call.call_id) == ("get_weather", {"city": "Paris"}, _call(first))
    assert got.tools[0].name == "get_weather"
    second = client.responses.create(
        model="helper",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[TOOL],
    )
    assert second.output_text == "Tool result: sunny"
    again = client.responses.retrieve(second.id)
    assert (again.output_text, again.previous_response_id, again.output[0].type) == (
        "Tool result: sunny",
        first.id,
        "message",
    )
    # The first response still shows the call it handed out, though the session now holds its result.
    assert [item.type for item in client.responses.retrieve(first.id).output] == ["function_call"]


def _call(response: openai.types.responses.Response) -> str:
    return next(item.call_id for item in response.output if item.type == "function_call")


def test_a_deleted_response_is_gone_with_its_conversation(s):
    client = s.client()
    first = client.responses.create(model="helper", input="one")
    second = client.responses.create(model="helper", input="two", previous_response_id=first.id)
    session = s.session_holding(second.id)
    deleted = client.responses.delete(second.id)
    assert deleted is None  # the SDK returns nothing for a 200 with the deletion object
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(first.id)
    for gone in (first.id, second.id):
        with pytest.raises(openai.NotFoundError) as error:
            client.responses.retrieve(gone)
        assert error.value.body["code"] == "response_not_found"
    with pytest.raises(openai.NotFoundError) as error:
        client.responses.create(model="helper", input="three", previous_response_id=second.id)
    assert (error.value.body["param"], error.value.body["code"]) == (
        "previous_response_id",
        "previous_response_not_found",
    )
    assert s.agent.events(session) == []


def test_the_deletion_answer_is_openais(s):
    created = s.client().responses.create(model="helper", input="bye")
    answer = httpx.delete(f"{s.agent.url}/v1/responses/{created.id}", timeout=30)
    assert answer.status_code == 200
    assert answer.json() == {"id": created.id, "object": "response.deleted", "deleted": True}


def test_only_a_background_response_can_be_cancelled(s):
    client = s.client()
    created = client.responses.create(model="helper", input="quick")
    assert created.background is False
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.cancel(created.id)
    assert error.value.body["code"] == "unsupported_value"
    assert "background" in error.value.body["message"]
    assert client.responses.retrieve(created.id).status == "completed"
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel(f"resp_{b'nope'.hex()}_{uuid.uuid4().hex[:16]}")
    assert client.responses.create(model="helper", input="now", background=False).output_text == "You said: now"


def test_a_background_response_is_answered_at_once_and_polled_to_its_end(s):
    client = s.client("alice")
    s.model.enqueue(TextReply("done at last", delay_seconds=2))
    created = client.responses.create(model="helper", input="take your time", background=True)
    assert (created.status, created.background, created.output, created.usage) == ("queued", True, [], None)
    eventually(lambda: len(s.model.requests) == 1, "the background turn asking the model", within=60)
    assert client.responses.retrieve(created.id).status in ("in_progress", "completed")
    eventually(lambda: client.responses.retrieve(created.id).status == "completed", "the turn's end", within=60)
    done = client.responses.retrieve(created.id)
    assert (done.output_text, done.background, done.usage.total_tokens > 0) == ("done at last", True, True)
    # Another user may not poll it; the next response continues its conversation.
    with pytest.raises(openai.PermissionDeniedError):
        s.client("bob").responses.retrieve(created.id)
    after = client.responses.create(model="helper", input="and then?", previous_response_id=created.id)
    assert after.output_text == "You said: and then?"
    # Cancelling a background response that ended answers it as it ended.
    assert client.responses.cancel(created.id).status == "completed"


def test_a_background_response_is_cancelled_while_it_runs(s):
    client = s.client()
    s.model.enqueue(TextReply("never seen", delay_seconds=120))
    created = client.responses.create(model="helper", input="a long job", background=True)
    eventually(lambda: len(s.model.requests) == 1, "the background turn asking the model", within=60)
    assert client.responses.retrieve(created.id).status == "in_progress"
    cancelled = client.responses.cancel(created.id)
    assert (cancelled.id, cancelled.status, cancelled.output_text) == (created.id, "cancelled", "")
    assert client.responses.retrieve(created.id).status == "cancelled"
    session = s.session_holding(created.id)
    assert [e["event_type"] for e in s.agent.events(session)] == ["user_message", "error"]
    assert s.agent.events(session)[-1]["content"]["error_type"] == "cancelled"


def test_deleting_a_running_background_response_stops_it_and_keeps_nothing(s):
    client = s.client()
    s.model.enqueue(TextReply("never seen", delay_seconds=120))
    raw = client.responses.with_raw_response.create(model="helper", input="a long job", background=True)
    created, session = raw.parse(), raw.headers["X-Session-ID"]
    eventually(lambda: len(s.model.requests) == 1, "the background turn asking the model", within=60)
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    assert s.agent.events(session) == []
    assert session not in {e["session_id"] for e in s.agent.get("/memory/sessions").json()["sessions"]}


def test_deleting_the_conversation_of_a_running_background_response_stops_it_and_keeps_nothing(s):
    client = s.client()
    conversation = client.conversations.create()
    s.model.enqueue(TextReply("never seen", delay_seconds=120))
    created = client.responses.create(model="helper", input="a long job", conversation=conversation.id, background=True)
    eventually(lambda: len(s.model.requests) == 1, "the background turn asking the model", within=60)
    client.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    assert s.agent.events(conversation.id) == []


def test_erasing_a_user_stops_their_running_background_responses(s):
    client = s.client("erin")
    s.model.enqueue(TextReply("never seen", delay_seconds=120))
    raw = client.responses.with_raw_response.create(model="helper", input="a long job", background=True)
    created, session = raw.parse(), raw.headers["X-Session-ID"]
    eventually(lambda: len(s.model.requests) == 1, "the background turn asking the model", within=60)
    erased = httpx.delete(f"{s.agent.url}/memory/users/erin", headers={HEADER: "erin"}, timeout=60)
    assert erased.status_code == 200, erased.text
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    assert s.agent.events(session) == []


def test_a_background_response_queued_behind_its_session_is_cancelled_before_it_starts(s):
    """Two background responses of one conversation: the second waits for the first's session; cancelled there,
    it never asks the model and still reads back as cancelled, its prompt kept."""
    client = s.client()
    conversation = f"conv_{uuid.uuid4().hex}"
    s.model.enqueue(TextReply("first answer", delay_seconds=120))
    first = client.responses.create(model="helper", input="one", conversation=conversation, background=True)
    eventually(lambda: len(s.model.requests) == 1, "the first turn asking the model", within=60)
    second = client.responses.create(model="helper", input="two", conversation=conversation, background=True)
    assert client.responses.cancel(second.id).status == "cancelled"
    assert client.responses.cancel(first.id).status == "cancelled"
    assert len(s.model.requests) == 1
    # Each turn's events are stored as it ends: the second's (cancelled first) come first.
    assert [(e["event_type"], e["metadata"]["response_id"]) for e in s.agent.events(conversation)] == [
        ("user_message", second.id),
        ("error", second.id),
        ("user_message", first.id),
        ("error", first.id),
    ]


def test_a_background_response_whose_turn_fails_reads_back_as_failed(s):
    client = s.client()
    s.model.enqueue(ErrorReply(500, "the model broke"))
    created = client.responses.create(model="helper", input="fail later", background=True)
    eventually(lambda: client.responses.retrieve(created.id).status != "in_progress", "its end", within=60)
    failed = client.responses.retrieve(created.id)
    assert (failed.status, failed.error.code, failed.background) == ("failed", "server_error", True)
    assert "the model broke" in failed.error.message


def test_background_is_refused_with_store_false_or_stream(s):
    client = s.client()
    before = s.agent.get("/memory/sessions").json()
    for extra, code in (({"store": False}, "invalid_value"), ({"stream": True}, "unsupported_value")):
        with pytest.raises(openai.BadRequestError) as error:
            client.responses.create(model="helper", input="later", background=True, **extra)
        assert (error.value.body["param"], error.value.body["code"]) == ("background", code)
    assert s.agent.get("/memory/sessions").json() == before


def _sent(s: Setup) -> list[object]:
    """What the model was last sent, but the instructions."""
    return [m["content"] for m in s.model.requests[-1]["messages"] if m["role"] != "system"]


def test_two_turns_of_a_conversation_see_each_others_history(s):
    alice = s.client("alice")
    conversation = f"conv_{uuid.uuid4().hex}"
    first = alice.responses.create(model="helper", input="remember pears", conversation=conversation)
    assert first.conversation is not None
    assert first.conversation.id == conversation
    second = alice.responses.create(model="helper", input="what now?", conversation={"id": conversation})
    assert second.output_text == "You said: what now?"
    assert _sent(s) == ["remember pears", "You said: remember pears", "what now?"]
    assert second.conversation is not None
    assert second.conversation.id == conversation
    # A conversation is the session of its id: both turns are its events, and each response is retrieved.
    held = s.agent.events(conversation)
    assert {e["metadata"].get("response_id") for e in held} == {first.id, second.id}
    assert alice.responses.retrieve(second.id).conversation.id == conversation
    # previous_response_id to a response of the conversation continues the same session.
    third = alice.responses.create(model="helper", input="and then?", previous_response_id=second.id)
    assert _sent(s)[:4] == ["remember pears", "You said: remember pears", "what now?", "You said: what now?"]
    assert s.session_holding(third.id) == conversation
    assert third.conversation is None  # as OpenAI: it was created with previous_response_id


def test_a_chat_session_is_a_conversation(s):
    client = s.client("alice")
    session = f"chat_{uuid.uuid4().hex}"
    client.chat.completions.create(
        model="helper", messages=[{"role": "user", "content": "from chat"}], extra_headers={"X-Session-ID": session}
    )
    answer = client.responses.create(model="helper", input="from responses", conversation=session)
    assert answer.output_text == "You said: from responses"
    assert _sent(s) == ["from chat", "You said: from chat", "from responses"]


def test_a_conversation_carries_the_calls_handed_to_the_client(s):
    client = s.client()
    conversation = f"conv_{uuid.uuid4().hex}"
    first = client.responses.create(model="helper", input="weather in Lima?", tools=[TOOL], conversation=conversation)
    second = client.responses.create(
        model="helper",
        conversation=conversation,
        input=[{"type": "function_call_output", "call_id": _call(first), "output": "warm"}],
        tools=[TOOL],
    )
    assert second.output_text == "Tool result: warm"


def test_a_users_conversation_is_hers_alone(s):
    conversation = f"conv_{uuid.uuid4().hex}"
    s.client("alice").responses.create(model="helper", input="alice's secret", conversation=conversation)
    held, requests = s.agent.events(conversation), len(s.model.requests)
    for other in (s.client("bob"), s.client()):
        for store in (True, False):
            with pytest.raises(openai.PermissionDeniedError) as error:
                other.responses.create(model="helper", input="x", conversation=conversation, store=store)
            assert error.value.body["code"] == "session_forbidden"
            assert "secret" not in str(error.value.body)
    assert (s.agent.events(conversation), len(s.model.requests)) == (held, requests)


def test_a_conversation_is_refused_with_previous_response_id_or_a_bad_id(s):
    client = s.client()
    first = client.responses.create(model="helper", input="first")
    before, requests = s.agent.get("/memory/sessions").json(), len(s.model.requests)
    bad: list[tuple[dict[str, object], str]] = [
        ({"conversation": "conv_1", "previous_response_id": first.id}, "invalid_value"),
        ({"conversation": "no spaces allowed"}, "invalid_value"),
        ({"conversation": "x" * 129}, "invalid_value"),
        ({"conversation": {"id": "conv/../1"}}, "invalid_value"),
        ({"conversation": {"id": 5}}, "invalid_type"),
        ({"conversation": {"id": "c", "extra": 1}}, "invalid_type"),
        ({"conversation": 5}, "invalid_type"),
    ]
    for body, code in bad:
        with pytest.raises(openai.BadRequestError) as error:
            client.responses.create(model="helper", input="hi", **body)  # type: ignore[arg-type]
        assert (error.value.body["param"], error.value.body["code"]) == ("conversation", code), body
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(
            model="helper", input="hi", conversation="conv_a", extra_headers={"X-Session-ID": "conv_b"}
        )
    assert (error.value.body["param"], error.value.body["code"]) == ("conversation", "invalid_value")
    assert (s.agent.get("/memory/sessions").json(), len(s.model.requests)) == (before, requests)
    same = client.responses.create(
        model="helper", input="one", conversation="conv_same", extra_headers={"X-Session-ID": "conv_same"}
    )
    assert same.conversation.id == "conv_same"
    client.responses.delete(same.id)


def test_store_false_reads_a_conversation_and_writes_nothing(s):
    client = s.client()
    conversation = f"conv_{uuid.uuid4().hex}"
    client.responses.create(model="helper", input="remember plums", conversation=conversation)
    held = s.agent.events(conversation)
    aside = client.responses.create(model="helper", input="aside", conversation=conversation, store=False)
    assert (aside.output_text, aside.store, aside.conversation.id) == ("You said: aside", False, conversation)
    assert "remember plums" in _sent(s)
    assert s.agent.events(conversation) == held
    fresh = f"conv_{uuid.uuid4().hex}"
    client.responses.create(model="helper", input="nothing kept", conversation=fresh, store=False)
    assert fresh not in {x["session_id"] for x in s.agent.get("/memory/sessions").json()["sessions"]}


def test_store_false_keeps_nothing(s):
    client = s.client()
    before = s.agent.events()
    raw = client.responses.with_raw_response.create(model="helper", input="secret words", store=False)
    answer = raw.parse()
    assert (answer.output_text, answer.store) == ("You said: secret words", False)
    assert s.agent.events() == before
    session = raw.headers["X-Session-ID"]
    assert session not in {x["session_id"] for x in s.agent.get("/memory/sessions").json()["sessions"]}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(answer.id)
    with pytest.raises(openai.NotFoundError) as error:
        client.responses.create(model="helper", input="more", previous_response_id=answer.id)
    assert error.value.body["code"] == "previous_response_not_found"


def test_store_false_after_a_stored_response_reads_its_conversation_and_adds_nothing(s):
    client = s.client()
    first = client.responses.create(model="helper", input="remember apples")
    session = s.session_holding(first.id)
    held = s.agent.events(session)
    aside = client.responses.create(model="helper", input="aside", previous_response_id=first.id, store=False)
    assert aside.output_text == "You said: aside"
    assert "remember apples" in [m["content"] for m in s.model.requests[-1]["messages"]]
    assert s.agent.events(session) == held
    # The conversation goes on from the stored response, as if the unstored one had not happened.
    after = client.responses.create(model="helper", input="go on", previous_response_id=first.id)
    assert "aside" not in [m["content"] for m in s.model.requests[-1]["messages"]]
    assert client.responses.retrieve(after.id).output_text == "You said: go on"


def test_previous_response_id_must_be_the_latest_of_its_conversation(s):
    client = s.client()
    first = client.responses.create(model="helper", input="a")
    second = client.responses.create(model="helper", input="b", previous_response_id=first.id)
    requests = len(s.model.requests)
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model="helper", input="c", previous_response_id=first.id)
    assert (error.value.body["param"], error.value.body["code"]) == ("previous_response_id", "invalid_value")
    assert second.id in error.value.body["message"]
    assert len(s.model.requests) == requests


def test_a_failed_streamed_response_is_stored_as_failed(s):
    s.model.enqueue(ErrorReply(500, "the model broke"))
    with s.client().responses.stream(model="helper", input="break please") as stream:
        failed = [e for e in stream if e.type == "response.failed"]
    (end,) = failed
    got = s.client().responses.retrieve(end.response.id)
    assert got.status == "failed"
    assert got.error is not None
    assert (got.error.code, got.error.message) == ("server_error", end.response.error.message)
    assert got.error.message.startswith("model_error: ")


def test_a_users_response_is_hers_alone(s):
    alice, bob, anonymous = s.client("alice"), s.client("bob"), s.client()
    created = alice.responses.create(model="helper", input="alice's secret")
    requests = len(s.model.requests)
    for other in (bob, anonymous):
        for attempt in (
            lambda c=other: c.responses.retrieve(created.id),
            lambda c=other: c.responses.delete(created.id),
            lambda c=other: c.responses.cancel(created.id),
            lambda c=other: c.responses.create(model="helper", input="x", previous_response_id=created.id),
        ):
            with pytest.raises(openai.PermissionDeniedError) as error:
                attempt()
            assert error.value.body["code"] == "session_forbidden"
            assert "secret" not in str(error.value.body)
    assert len(s.model.requests) == requests
    assert alice.responses.retrieve(created.id).output_text == "You said: alice's secret"
    assert alice.responses.create(model="helper", input="on", previous_response_id=created.id).output_text
    alice.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(created.id)


def test_input_items_list_what_each_response_was_given(s):
    from openai.types.responses import ResponseItemList

    client = s.client("alice")
    first = client.responses.create(model="helper", input="weather in Paris?", tools=[TOOL])
    (item,) = client.responses.input_items.list(first.id).data
    assert (item.type, item.role, item.content[0].text) == ("message", "user", "weather in Paris?")
    second = client.responses.create(
        model="helper",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": _call(first), "output": "sunny"}],
        tools=[TOOL],
    )
    (item,) = client.responses.input_items.list(second.id).data
    assert (item.type, item.call_id, item.output) == ("function_call_output", _call(first), "sunny")
    # A client that resends the conversation (no previous_response_id): the call and its result are the turn's
    # input; the earlier user message is history the client keeps, which the session does not store.
    resent = client.responses.create(
        model="helper",
        input=[
            {"role": "user", "content": "weather in Rome?"},
            {"type": "function_call", "call_id": "call_r", "name": "get_weather", "arguments": '{"city": "Rome"}'},
            {"type": "function_call_output", "call_id": "call_r", "output": "rain"},
        ],
        tools=[TOOL],
    )
    assert resent.output_text == "Tool result: rain"
    url = f"{s.agent.url}/v1/responses/{resent.id}/input_items"
    alice = {HEADER: "alice"}
    page = ResponseItemList.model_validate(httpx.get(url, params={"order": "asc"}, headers=alice, timeout=30).json())
    assert [i.type for i in page.data] == ["function_call", "function_call_output"]
    newest = client.responses.input_items.list(resent.id, limit=1)
    assert ([i.type for i in newest.data], newest.has_more) == (["function_call_output"], True)
    rest = client.responses.input_items.list(resent.id, limit=5, after=newest.data[0].id)
    assert ([i.type for i in rest.data], rest.has_more) == (["function_call"], False)
    for params, param in (({"limit": "0"}, "limit"), ({"order": "up"}, "order"), ({"include": "x"}, "include")):
        answer = httpx.get(url, params=params, headers=alice, timeout=30)
        assert (answer.status_code, answer.json()["error"]["param"]) == (400, param)
    with pytest.raises(openai.PermissionDeniedError):
        s.client("mallory").responses.input_items.list(resent.id)


def test_query_parameters_of_a_retrieval_are_refused(s):
    created = s.client().responses.create(model="helper", input="q")
    answer = httpx.get(f"{s.agent.url}/v1/responses/{created.id}", params={"stream": "true"}, timeout=30)
    assert answer.status_code == 400
    assert (answer.json()["error"]["param"], answer.json()["error"]["code"]) == ("stream", "unsupported_parameter")


# Non-empty and not ending in "/": a path ending in a slash is FastAPI's redirect to the path without it.
response_ids = st.one_of(
    any_text,
    st.builds(
        lambda session, rest: f"resp_{session.encode('utf-8', 'surrogatepass').hex()}_{rest}", any_text, any_text
    ),
    st.builds(lambda rest: f"resp_{b'ses_x'.hex()}_{rest}", st.text(max_size=20)),
).filter(lambda id_: id_ and not id_.endswith("/"))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(id_=response_ids, route=st.sampled_from(["GET", "DELETE", "POST /cancel", "GET /input_items"]))
def test_fuzz_the_stored_response_routes(setup, id_, route):
    method, _, tail = route.partition(" ")
    path = f"{setup.agent.url}/v1/responses/{quote(id_.encode('utf-8', 'surrogatepass'), safe='')}{tail}"
    before = setup.agent.events()
    response = httpx.request(method, path, timeout=30)
    event(f"status {response.status_code}")
    assert_handled(response)
    assert response.status_code in (400, 403, 404, 405), response.text
    assert response.json()["error"]["message"]
    assert setup.agent.events() == before


def _sse(response: httpx.Response) -> list[dict[str, object]]:
    return [json.loads(line[len("data: ") :]) for line in response.text.splitlines() if line.startswith("data: ")]


def test_every_answer_validates_against_openais_own_types(s):
    """The SDK parses leniently (``construct``); here each answer is validated by ``openai``'s pydantic types."""
    from openai.types import responses

    Response = responses.Response
    # Each event by the class of its type (openai's union of events has no discriminator pydantic can use).
    by_type = {
        cls.model_fields["type"].annotation.__args__[0]: cls
        for cls in vars(responses).values()
        if isinstance(cls, type) and cls.__name__.endswith("Event") and "type" in getattr(cls, "model_fields", {})
    }

    class events:
        @staticmethod
        def validate_python(event: dict[str, object]):
            return by_type[event["type"]].model_validate(event)

    url = f"{s.agent.url}/v1/responses"
    for body in (
        {"input": "hello", "instructions": "Be brief.", "metadata": {"k": "v"}, "max_output_tokens": 50},
        {"input": "weather in Paris?", "tools": [TOOL], "tool_choice": "auto"},
        {"input": "hello there my friend", "max_output_tokens": 2},
        {"input": "hello", "conversation": {"id": f"conv_{uuid.uuid4().hex}"}},
    ):
        created = httpx.post(url, json={"model": "helper", **body}, timeout=30).json()
        Response.model_validate(created)
        Response.model_validate(httpx.get(f"{url}/{created['id']}", timeout=30).json())
        streamed = httpx.post(url, json={"model": "helper", "stream": True, **body}, timeout=30)
        kinds = [events.validate_python(event).type for event in _sse(streamed)]
        assert kinds[-1] in ("response.completed", "response.incomplete")
    queued = httpx.post(url, json={"model": "helper", "input": "later", "background": True}, timeout=30).json()
    assert Response.model_validate(queued).status == "queued"
    eventually(
        lambda: httpx.get(f"{url}/{queued['id']}", timeout=30).json()["status"] == "completed",
        "the background response's end",
        within=60,
    )
    Response.model_validate(httpx.get(f"{url}/{queued['id']}", timeout=30).json())
    s.model.enqueue(ErrorReply(500, "the model broke"))
    failed = _sse(httpx.post(url, json={"model": "helper", "input": "x", "stream": True}, timeout=30))
    end = events.validate_python(failed[-1])
    assert end.type == "response.failed"
    Response.model_validate(httpx.get(f"{url}/{end.response.id}", timeout=30).json())


async def test_a_response_lives_in_the_memory_store_and_another_replica_serves_it(memory_db, model):
    """Bound to the memory service (real Postgres), a response is its turn's events in the store: a replica that
    never served it retrieves it, lists its input, refuses it to another user, continues it, and deleting it
    erases it there."""
    model.load_script(RULES)
    env = {"MEMORY_STORE_ENDPOINT": "", "AUTH_TRUSTED_USER_HEADER": HEADER}
    async with memory_service(service_env(memory_db)) as store:
        env["MEMORY_STORE_ENDPOINT"] = store
        stored = httpx.Client(base_url=store, headers=ADMIN, timeout=30)

        def held(session: str) -> list[dict[str, object]]:
            answer = stored.get(f"/v1/sessions/{session}/events", params={"app_name": "helper"})
            return answer.json()["events"] if answer.status_code == 200 else []

        async with running_agent(model, "helper", **env) as first:
            alice = first.openai(default_headers={HEADER: "alice"})
            raw = alice.responses.with_raw_response.create(model="helper", input="weather in Paris?", tools=[TOOL])
            created, session = raw.parse(), raw.headers["X-Session-ID"]
            aside = alice.responses.with_raw_response.create(model="helper", input="not kept", store=False)
            eventually(lambda: len(held(session)) == 2, "the turn in the store", within=30)
        assert held(aside.headers["X-Session-ID"]) == []
        async with running_agent(model, "helper", **env) as replica:
            alice = replica.openai(default_headers={HEADER: "alice"})
            assert alice.responses.retrieve(created.id).model_dump() == created.model_dump()
            (item,) = alice.responses.input_items.list(created.id).data
            assert item.content[0].text == "weather in Paris?"
            with pytest.raises(openai.PermissionDeniedError):
                replica.openai(default_headers={HEADER: "bob"}).responses.retrieve(created.id)
            with pytest.raises(openai.NotFoundError):
                alice.responses.retrieve(aside.parse().id)
            call = _call(created)
            second = alice.responses.create(
                model="helper",
                previous_response_id=created.id,
                input=[{"type": "function_call_output", "call_id": call, "output": "sunny"}],
                tools=[TOOL],
            )
            assert second.output_text == "Tool result: sunny"
            eventually(lambda: len(held(session)) == 4, "the second turn in the store", within=30)
            alice.responses.delete(created.id)
            assert held(session) == []
            with pytest.raises(openai.NotFoundError):
                alice.responses.retrieve(created.id)
        stored.close()


async def test_with_memory_disabled_a_response_says_it_is_not_stored(model):
    async with running_agent(model, "helper", MEMORY_ENABLED="false") as agent:
        client = agent.openai()
        created = client.responses.create(model="helper", input="hello")
        assert (created.output_text, created.store) == ("You said: hello", False)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model="helper", input="again", previous_response_id=created.id)

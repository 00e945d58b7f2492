"""OpenAI's Conversations API (``/v1/conversations``) on a real agent (scripted model), as the ``openai`` SDK
uses it: a conversation is a Kora session (created, retrieved, its metadata updated, erased), its items are the
session's events (listed, added, retrieved), a Responses turn with ``conversation`` continues it, who may use it,
every refusal naming its field, and a fuzz of the request bodies."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from openai.types.conversations import Conversation, ConversationDeletedResource, ConversationItem, ConversationItemList
from pydantic import TypeAdapter

from tests.support.agent import RunningAgent, running_agent, served_agent
from tests.support.eventually import eventually
from tests.support.hostile import any_text, assert_handled, field, hostile_values, render
from tests.support.memory import ADMIN, memory_service, service_env
from tests.support.scripted_server import ScriptedModelServer
from tests.support.weather import CALLS_WEATHER, RESPONSES_TOOL

pytestmark = pytest.mark.integration

HEADER = "X-Forwarded-User"
TOOL = RESPONSES_TOOL
RULES = [
    CALLS_WEATHER,
]
ITEM = TypeAdapter(ConversationItem)


@dataclass
class Setup:
    model: ScriptedModelServer
    agent: RunningAgent

    def client(self, user: str | None = None) -> openai.OpenAI:
        """An ``openai`` client acting for ``user`` through the trusted header (anonymous when None)."""
        return self.agent.openai(default_headers={HEADER: user} if user else {})

    def sessions(self) -> list[dict[str, Any]]:
        return list(self.agent.get("/memory/sessions").json()["sessions"])


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


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def test_a_conversation_is_created_retrieved_updated_and_deleted(s):
    client = s.client()
    created = client.conversations.create(metadata={"topic": "fruit"})
    assert created.id.startswith("conv_")
    assert (created.object, created.metadata) == ("conversation", {"topic": "fruit"})
    assert client.conversations.retrieve(created.id).model_dump() == created.model_dump()
    updated = client.conversations.update(created.id, metadata={"topic": "veg", "n": "2"})
    assert (updated.id, updated.created_at, updated.metadata) == (
        created.id,
        created.created_at,
        {"topic": "veg", "n": "2"},
    )
    assert client.conversations.retrieve(created.id).metadata == {"topic": "veg", "n": "2"}
    assert client.conversations.update(created.id, metadata=None).metadata == {}
    deleted = client.conversations.delete(created.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (created.id, True, "conversation.deleted")
    for call in (
        lambda: client.conversations.retrieve(created.id),
        lambda: client.conversations.delete(created.id),
        lambda: client.conversations.items.list(created.id),
    ):
        with pytest.raises(openai.NotFoundError) as error:
            call()
        assert error.value.body["code"] == "conversation_not_found"
    assert created.id not in {session["session_id"] for session in s.sessions()}


def test_items_are_the_sessions_events(s):
    client = s.client()
    conversation = client.conversations.create(
        items=[
            user("I like pears"),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Noted."}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "cold"},
        ]
    )
    assert s.agent.event_types(conversation.id) == ["user_message", "agent_response", "tool_call", "tool_result"]
    listed = client.conversations.items.list(conversation.id, order="asc")
    assert [item.type for item in listed.data] == ["message", "message", "function_call", "function_call_output"]
    first, answer, call, output = listed.data
    assert (first.role, first.content[0].text, answer.role, answer.content[0].text) == (
        "user",
        "I like pears",
        "assistant",
        "Noted.",
    )
    assert (call.name, json.loads(call.arguments), call.call_id, output.output) == (
        "get_weather",
        {"city": "Oslo"},
        "call_1",
        "cold",
    )
    assert client.conversations.items.retrieve(call.id, conversation_id=conversation.id).model_dump() == (
        call.model_dump()
    )
    added = client.conversations.items.create(conversation.id, items=[user("and plums"), user("and figs")])
    assert [item.content[0].text for item in added.data] == ["and plums", "and figs"]
    assert (added.first_id, added.last_id, added.has_more) == (added.data[0].id, added.data[1].id, False)
    newest = client.conversations.items.list(conversation.id, limit=2)
    assert ([item.content[0].text for item in newest.data], newest.has_more) == (["and figs", "and plums"], True)
    every = [item.id for item in client.conversations.items.list(conversation.id, limit=2, order="asc")]
    assert every == [item.id for item in listed.data] + [item.id for item in added.data]


def test_a_response_continues_a_conversation_created_here(s):
    client = s.client()
    conversation = client.conversations.create(
        items=[user("remember pears"), {"type": "message", "role": "assistant", "content": "I will."}]
    )
    answer = client.responses.create(model="helper", input="what did I say?", conversation=conversation.id)
    assert (answer.output_text, answer.conversation.id) == ("You said: what did I say?", conversation.id)
    sent = [m["content"] for m in s.model.requests[-1]["messages"] if m["role"] != "system"]
    assert sent == ["remember pears", "I will.", "what did I say?"]
    texts = [item.content[0].text for item in client.conversations.items.list(conversation.id, order="asc")]
    assert texts == ["remember pears", "I will.", "what did I say?", "You said: what did I say?"]
    # A function call added as an item is answered by the next response's function_call_output.
    client.conversations.items.create(
        conversation.id,
        items=[{"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": "{}"}],
    )
    second = client.responses.create(
        model="helper",
        conversation=conversation.id,
        input=[{"type": "function_call_output", "call_id": "call_9", "output": "mild"}],
        tools=[TOOL],
    )
    assert second.output_text == "Tool result: mild"


def test_a_session_a_turn_started_is_a_conversation(s):
    client = s.client()
    raw = client.responses.with_raw_response.create(model="helper", input="hello")
    session = raw.headers["X-Session-ID"]
    got = client.conversations.retrieve(session)
    assert (got.id, got.metadata) == (session, {})
    texts = [item.content[0].text for item in client.conversations.items.list(session, order="asc")]
    assert texts == ["hello", "You said: hello"]


def test_a_users_conversation_is_hers_alone(s):
    alice = s.client("alice")
    conversation = alice.conversations.create(items=[user("alice's secret")], metadata={"k": "v"})
    (item,) = alice.conversations.items.list(conversation.id).data
    before = s.agent.events(conversation.id)
    for other in (s.client("bob"), s.client()):
        for call in (
            lambda c: c.conversations.retrieve(conversation.id),
            lambda c: c.conversations.update(conversation.id, metadata={"k": "stolen"}),
            lambda c: c.conversations.delete(conversation.id),
            lambda c: c.conversations.items.list(conversation.id),
            lambda c: c.conversations.items.create(conversation.id, items=[user("hi")]),
            lambda c: c.conversations.items.retrieve(item.id, conversation_id=conversation.id),
            lambda c: c.conversations.items.delete(item.id, conversation_id=conversation.id),
        ):
            with pytest.raises(openai.PermissionDeniedError) as error:
                call(other)
            assert error.value.body["code"] == "session_forbidden"
            assert "secret" not in str(error.value.body)
    assert s.agent.events(conversation.id) == before
    assert alice.conversations.retrieve(conversation.id).metadata == {"k": "v"}
    mine = s.client("bob").conversations.create()
    assert s.client("bob").conversations.retrieve(mine.id).id == mine.id


def _refused(call: Any) -> dict[str, Any]:
    with pytest.raises(openai.BadRequestError) as error:
        call()
    body = error.value.body
    assert body["message"]
    return dict(body)


def test_every_unsupported_field_is_refused_by_name_and_nothing_is_stored(s):
    client = s.client()
    conversation = client.conversations.create(items=[user("kept")])
    before_sessions, before_events = s.sessions(), s.agent.events(conversation.id)
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"extra_body": {"title": "x"}}, "title", "unsupported_parameter"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "metadata", "invalid_value"),
        ({"metadata": {"k": 5}}, "metadata", "invalid_type"),
        ({"items": [user("a")] * 21}, "items", "invalid_value"),
        ({"items": [{"type": "message", "role": "system", "content": "obey"}]}, "items[0].role", "unsupported_value"),
        ({"items": [{"type": "message", "role": "developer", "content": "x"}]}, "items[0].role", "unsupported_value"),
        (
            {"items": [user("a"), {"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y"}]}]},
            "items[1].content[0].type",
            "unsupported_value",
        ),
        ({"items": [{"role": "user", "content": "a", "phase": "x"}]}, "items[0].phase", "unsupported_parameter"),
        ({"items": [{"type": "web_search_call", "id": "ws_1"}]}, "items[0].type", "unsupported_value"),
        (
            {"items": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]},
            "items[0].call_id",
            "invalid_value",
        ),
        (
            {"items": [{"type": "function_call", "call_id": "c", "name": "bad name", "arguments": "{}"}]},
            "items[0].name",
            "invalid_value",
        ),
        (
            {"items": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
            "items[0].arguments",
            "invalid_value",
        ),
        (
            {"items": [{"role": "user", "content": "a", "status": "in_progress"}]},
            "items[0].status",
            "unsupported_value",
        ),
        ({"items": [{"role": "user", "content": "a", "id": "evt_1"}]}, "items[0].id", "invalid_value"),
        ({"items": "hello"}, "items", "invalid_type"),
    ]
    for kwargs, param, code in cases:
        body = _refused(lambda kwargs=kwargs: client.conversations.create(**kwargs))
        assert (body["param"], body["code"]) == (param, code), kwargs
    for kwargs, param, code in [
        ({"items": []}, "items", "invalid_value"),
        ({"items": [user("a")], "extra_body": {"stream": True}}, "stream", "unsupported_parameter"),
        ({"items": [{"role": "user", "content": "a", "id": "dup"}] * 2}, "items[1].id", "invalid_value"),
        ({"items": [user("a")], "include": ["message.input_image.image_url"]}, "include", "unsupported_value"),
    ]:
        body = _refused(lambda kwargs=kwargs: client.conversations.items.create(conversation.id, **kwargs))
        assert (body["param"], body["code"]) == (param, code), kwargs
    body = _refused(lambda: client.conversations.update(conversation.id, metadata={"k": "v"}, extra_body={"x": 1}))
    assert (body["param"], body["code"]) == ("x", "unsupported_parameter")
    answer = httpx.post(f"{s.agent.url}/v1/conversations/{conversation.id}", json={}, timeout=30)
    assert (answer.status_code, answer.json()["error"]["param"]) == (400, "metadata")
    for params, param in (({"limit": 0}, "limit"), ({"order": "up"}, "order"), ({"stream": "1"}, "stream")):
        answer = httpx.get(f"{s.agent.url}/v1/conversations/{conversation.id}/items", params=params, timeout=30)
        assert (answer.status_code, answer.json()["error"]["param"]) == (400, param)
    (item,) = client.conversations.items.list(conversation.id).data
    body = _refused(lambda: client.conversations.items.delete(item.id, conversation_id=conversation.id))
    assert "erased together" in body["message"]
    with pytest.raises(openai.NotFoundError) as error:
        client.conversations.items.retrieve("msg_nope", conversation_id=conversation.id)
    assert error.value.body["code"] == "item_not_found"
    assert (s.sessions(), s.agent.events(conversation.id)) == (before_sessions, before_events)


def test_every_answer_validates_against_openais_own_types(s):
    """The SDK parses leniently (``construct``); here each answer is validated by ``openai``'s pydantic types."""
    url = f"{s.agent.url}/v1/conversations"
    items = [
        user("hi"),
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}', "id": "fc_given"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "done"}]},
    ]
    created = Conversation.model_validate(httpx.post(url, json={"items": items}, timeout=30).json())
    Conversation.model_validate(httpx.get(f"{url}/{created.id}", timeout=30).json())
    listed = ConversationItemList.model_validate(httpx.get(f"{url}/{created.id}/items", timeout=30).json())
    assert len(listed.data) == 5
    assert listed.data[-2].content[0].text == "a\nb"
    assert listed.data[1].id == "fc_given"
    added = httpx.post(f"{url}/{created.id}/items", json={"items": [user("more")]}, timeout=30).json()
    ConversationItemList.model_validate(added)
    for item in listed.data:
        ITEM.validate_python(httpx.get(f"{url}/{created.id}/items/{item.id}", timeout=30).json())
    updated = httpx.post(f"{url}/{created.id}", json={"metadata": {"a": "b"}}, timeout=30).json()
    assert Conversation.model_validate(updated).metadata == {"a": "b"}
    ConversationDeletedResource.model_validate(httpx.delete(f"{url}/{created.id}", timeout=30).json())


# -- fuzz -------------------------------------------------------------------------------------------------------

texts = st.text(max_size=20)
part = st.fixed_dictionaries({"type": field(st.sampled_from(["input_text", "output_text"])), "text": field(texts)})
message = st.fixed_dictionaries(
    {
        "role": field(st.sampled_from(["user", "assistant"])),
        "content": field(st.one_of(texts, st.lists(part, max_size=2))),
    },
    optional={"type": field(st.just("message")), "status": field(st.just("completed"))},
)
call = st.fixed_dictionaries(
    {
        "type": st.just("function_call"),
        "call_id": field(st.sampled_from(["c1", "c2"])),
        "name": field(st.sampled_from(["get_weather", "f"])),
        "arguments": field(st.sampled_from(["{}", '{"city":"Rome"}'])),
    }
)
output = st.fixed_dictionaries(
    {"type": st.just("function_call_output"), "call_id": field(st.sampled_from(["c1", "c2"])), "output": field(texts)}
)
items = st.lists(field(st.one_of(message, call, output)), max_size=4)
bodies = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"items": field(items), "metadata": field(st.dictionaries(texts, texts, max_size=3))}
    ),
    st.dictionaries(any_text, hostile_values, max_size=3),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies, route=st.sampled_from(["create", "add items", "update"]))
def test_fuzz_the_request_bodies(setup, body, route):
    """Any body is a conversation (its items stored as given) or a 400 that names a field and stores nothing."""
    url = f"{setup.agent.url}/v1/conversations"
    target = httpx.post(url, json={}, timeout=30).json()["id"]
    sessions = {s["session_id"] for s in setup.sessions()}
    path = {"create": url, "add items": f"{url}/{target}/items", "update": f"{url}/{target}"}[route]
    response = httpx.post(path, content=render(body).encode("utf-8", "surrogatepass"), timeout=30)
    event(f"{route}: {response.status_code}")
    assert_handled(response)
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        error = response.json()["error"]
        assert error["message"]
        assert error["code"]
        assert {s["session_id"] for s in setup.sessions()} == sessions
        assert setup.agent.events(target) == []
        return
    answer = response.json()
    if route == "add items":
        ConversationItemList.model_validate(answer)
        assert len(answer["data"]) == len(body["items"]) == len(setup.agent.events(target))
    else:
        Conversation.model_validate(answer)
        if route == "create":
            assert len(setup.agent.events(answer["id"])) == len(body.get("items") or [])


ids = st.one_of(any_text, st.builds(lambda rest: f"conv_{rest}", any_text)).filter(
    lambda id_: id_ and not id_.endswith("/") and id_ not in (".", "..")
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    id_=ids,
    item=ids,
    route=st.sampled_from(["GET", "DELETE", "POST", "GET /items", "POST /items", "GET /items/", "DELETE /items/"]),
)
def test_fuzz_the_ids_in_the_paths(setup, id_, item, route):
    """Any conversation or item id in a path is a 404 (or a 400 for a body not sent), nothing stored or erased."""
    method, _, tail = route.partition(" ")
    quoted = quote(id_.encode("utf-8", "surrogatepass"), safe="")
    tail += quote(item.encode("utf-8", "surrogatepass"), safe="") if tail.endswith("/") else ""
    before = setup.agent.events()
    response = httpx.request(method, f"{setup.agent.url}/v1/conversations/{quoted}{tail}", timeout=30)
    event(f"status {response.status_code}")
    assert_handled(response)
    assert response.status_code in (400, 404, 405), response.text
    assert response.json()["error"]["message"]
    assert setup.agent.events() == before


# -- the memory service and disabled memory ---------------------------------------------------------------------


async def test_with_the_memory_service_a_conversation_lives_in_the_store(memory_db, model):
    """Bound to the memory service (real Postgres): a conversation's items and metadata are in the store (an empty
    conversation too), another replica serves and updates them, refuses them to another user, and
    deleting the conversation erases its session there."""
    env = {"MEMORY_STORE_ENDPOINT": "", "AUTH_TRUSTED_USER_HEADER": HEADER}
    async with memory_service(service_env(memory_db)) as store:
        env["MEMORY_STORE_ENDPOINT"] = store
        stored = httpx.Client(base_url=store, headers=ADMIN, timeout=30)

        def held(session: str) -> list[dict[str, object]]:
            answer = stored.get(f"/v1/sessions/{session}/events", params={"app_name": "helper"})
            return answer.json()["events"] if answer.status_code == 200 else []

        async with running_agent(model, "helper", **env) as first:
            alice = first.openai(default_headers={HEADER: "alice"})
            created = alice.conversations.create(items=[user("kept in the store")], metadata={"k": "v"})
            empty = alice.conversations.create(metadata={"only": "metadata"})
            bare = alice.conversations.create()
            eventually(lambda: len(held(created.id)) == 1, "the item in the store", within=30)
        async with running_agent(model, "helper", **env) as replica:
            alice = replica.openai(default_headers={HEADER: "alice"})
            got = alice.conversations.retrieve(created.id)
            assert (got.created_at, got.metadata) == (created.created_at, {"k": "v"})
            assert alice.conversations.retrieve(empty.id).metadata == {"only": "metadata"}
            assert (alice.conversations.retrieve(bare.id).metadata, alice.conversations.items.list(bare.id).data) == (
                {},
                [],
            )
            (item,) = alice.conversations.items.list(created.id).data
            assert item.content[0].text == "kept in the store"
            bob = replica.openai(default_headers={HEADER: "bob"})
            for call in (
                lambda: bob.conversations.retrieve(created.id),
                lambda: bob.conversations.update(created.id, metadata={"k": "stolen"}),
            ):
                with pytest.raises(openai.PermissionDeniedError):
                    call()
            assert alice.conversations.update(created.id, metadata={"k": "w"}).metadata == {"k": "w"}
            assert alice.conversations.retrieve(created.id).metadata == {"k": "w"}
            alice.conversations.delete(created.id)
            assert held(created.id) == []
            with pytest.raises(openai.NotFoundError):
                alice.conversations.retrieve(created.id)
            answer = stored.get(f"/v1/sessions/{created.id}/metadata", params={"app_name": "helper"})
            assert answer.status_code == 404
        stored.close()


async def test_with_memory_disabled_conversations_are_refused(model):
    async with running_agent(model, "helper", MEMORY_ENABLED="false") as agent:
        client = agent.openai()
        body = _refused(lambda: client.conversations.create())
        assert body["code"] == "memory_disabled"
        body = _refused(lambda: client.conversations.retrieve(f"conv_{uuid.uuid4().hex}"))
        assert body["code"] == "memory_disabled"
